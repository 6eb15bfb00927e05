
/*
 * Copyright (C) ioa authors
 *
 * The hub as an A2A agent (Agent2Agent, JSON-RPC binding): any A2A client
 * reads the hub's agent card, sends a message, and gets a task that is an
 * ioa goal: a team of the network's agents works on it, its status updates
 * stream while they talk, and the conclusion comes back as the task's
 * artifact.
 *
 *   location = /.well-known/agent-card.json { ioa_a2a url=/a2a; }
 *   location = /a2a { ioa_a2a; }
 *
 * GET answers the agent card, POST one JSON-RPC 2.0 message.
 *
 * Why in the module and not in a worker: a task is a goal, and everything
 * a task needs is already an endpoint here (POST /launch_goal, GET
 * /goals/{id}, POST /goals/{id}/cancel, /messages) or the goal's feed that
 * nginx follows for /goals/{id}/events.  Each operation calls its endpoint
 * in memory (ngx_ioa_call.c: the caller's token, its scopes, the limits and
 * the error texts are the endpoint's), and the streams follow the goal's
 * feed with the room machinery, so resume, catch-up and Cluster come with
 * it.  A worker would have been a second HTTP server with its own auth and
 * an extra hop for every event.
 *
 * Two versions of the protocol, told apart by the method's name:
 *
 *   A2A 1.0                  A2A 0.3                  does
 *   SendMessage              message/send             launch a goal, or
 *                                                     post into one
 *   SendStreamingMessage     message/stream           the same, streamed
 *   GetTask                  tasks/get                the goal's state
 *   CancelTask               tasks/cancel             cancel the goal
 *   SubscribeToTask          tasks/resubscribe        follow it again
 *   GetExtendedAgentCard     agent/getAuthenticated-  the card, with the
 *                            ExtendedCard             caller's token
 *
 * 1.0 writes proto-JSON ("TASK_STATE_WORKING", "ROLE_AGENT", parts
 * {"text"}, stream events {"statusUpdate": ...}); 0.3 its own JSON (states
 * "working", "kind" on every object, status-update events with "final").
 * The card is written once for both: the 1.0 fields (supportedInterfaces
 * lists the endpoint for 1.0 and for 0.3) plus the 0.3 ones (url,
 * protocolVersion, preferredTransport, security), which 1.0 readers
 * ignore, and a security scheme object that carries both spellings.
 *
 * Tasks and goals.  The task id is the goal id, and so is the context id:
 * a goal is its own context (a contextId sent by the client is not kept).
 * A message with a taskId goes to the running goal as a person's message
 * (POST /goals/{id}/messages); the goal's conversation reads it at its
 * next step.  States (README "A2A"):
 *
 *   goal state                  A2A state
 *   queued                      submitted
 *   forming, running,           working (metadata.ioa_state says which)
 *   cancelling
 *   running, awaiting_input     input-required, the question its message
 *   concluded                   completed, the conclusion its artifact
 *   failed                      failed, the error its status message
 *   cancelled                   canceled
 *
 * Streams.  A stream follows the goal's feed, P{room:goal-<id>}: each
 * state change becomes a status update, each envelope of the goal's room a
 * working status update whose message is the envelope's text (its
 * messageId the envelope's id, so a client can drop repeats), and the end
 * the artifact, the final status and the end of the response.  Every event
 * carries the feed's id, so a client that reconnects with Last-Event-ID
 * misses nothing and gets nothing twice.  A new goal's stream reads its
 * feed from the beginning; an operation on a task that exists
 * (resubscribe, a message to it, a cancel) first reads where the feed
 * ends (XREVRANGE, ngx_ioa_a2a_locate), then the task as GET /goals/{id}
 * has it, and follows the feed from that end: the events before are the
 * task's past, and an input-required of long ago must not end the stream.
 * A stream is the caller's as long as its token is: it ends at the token's
 * exp plus leeway as an inbox does (ngx_ioa_expiry.c), with a JSON-RPC
 * error that says so, and the task goes on without it.
 *
 * Input required.  A task launched here carries input_timeout_s (300 s
 * unless metadata.ioa says): before the team gives up on a part, the
 * review asks the goal's person, the A2A user, how to go on (decide.c).
 * While it waits the goal's record has awaiting_input and its feed an
 * input event: the task is input-required with the question as its
 * status message, and a stream or a blocking send stops there (A2A's
 * interrupted state).  The user's answer is a message with the taskId.
 *
 * Blocking sends (the default of both versions) and cancels wait the same
 * way, without a stream, until the goal ends or waits for its user (a
 * cancel at most NGX_IOA_A2A_CANCEL_WAIT, then it answers the state it
 * has).
 *
 * Files: this one (the directive, JSON-RPC, the operations and their
 * errors), ngx_ioa_a2a_task.c (the task: feed, streams, waits, A2A's
 * JSON), ngx_ioa_a2a_card.c (the agent card).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_a2a.h"


typedef struct {
    const char               *v03;
    const char               *v10;
    ngx_ioa_a2a_op_e          op;
} ngx_ioa_a2a_method_t;


static ngx_ioa_a2a_method_t  ngx_ioa_a2a_methods[] = {
    { "message/send", "SendMessage", NGX_IOA_A2A_SEND },
    { "message/stream", "SendStreamingMessage", NGX_IOA_A2A_STREAM },
    { "tasks/get", "GetTask", NGX_IOA_A2A_GET },
    { "tasks/cancel", "CancelTask", NGX_IOA_A2A_CANCEL },
    { "tasks/resubscribe", "SubscribeToTask", NGX_IOA_A2A_SUBSCRIBE },
    { "agent/getAuthenticatedExtendedCard", "GetExtendedAgentCard",
      NGX_IOA_A2A_CARD },
    { NULL, NULL, 0 }
};


static void ngx_ioa_a2a_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_a2a_dispatch(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_ioa_jsonrpc_t *rpc);
static ngx_int_t ngx_ioa_a2a_task_id(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    yajl_val params);
static void ngx_ioa_a2a_send(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    yajl_val params);
static ngx_int_t ngx_ioa_a2a_text(ngx_ioa_a2a_t *a, yajl_val parts,
    ngx_ioa_jbuf_t *b, ngx_ioa_error_t *err);
static void ngx_ioa_a2a_locate(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static void ngx_ioa_a2a_located(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_a2a_go(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static void ngx_ioa_a2a_launched(ngx_http_request_t *r, void *data);
static void ngx_ioa_a2a_posted(ngx_http_request_t *r, void *data);
static void ngx_ioa_a2a_read(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static void ngx_ioa_a2a_got(ngx_http_request_t *r, void *data);
static void ngx_ioa_a2a_cancelled(ngx_http_request_t *r, void *data);
static void ngx_ioa_a2a_endpoint(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static ngx_int_t ngx_ioa_a2a_not_allowed(ngx_http_request_t *r);


char *
ngx_ioa_a2a_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    char                      *rv;
    ngx_str_t                 *value;
    ngx_uint_t                 i;
    ngx_ioa_a2a_conf_t        *ac;
    ngx_http_core_loc_conf_t  *clcf;

    if (lcf->a2a) {
        return "is duplicate";
    }

    ac = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_a2a_conf_t));
    if (ac == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&ac->name, "ioa");

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "api=", 4) == 0) {
            rv = ngx_ioa_call_api_conf(&value[i], &ac->api);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "url=", 4) == 0) {
            ac->url.data = value[i].data + 4;
            ac->url.len = value[i].len - 4;

            if (ac->url.len == 0
                || (ac->url.data[0] != '/'
                    && ngx_strncmp(ac->url.data, "http://", 7) != 0
                    && ngx_strncmp(ac->url.data, "https://", 8) != 0))
            {
                return "needs url= the JSON-RPC endpoint: a path such as "
                       "url=/a2a, or an absolute http:// or https:// URL";
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "name=", 5) == 0
            && value[i].len > 5)
        {
            ac->name.data = value[i].data + 5;
            ac->name.len = value[i].len - 5;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_a2a\": unknown parameter \"%V\"",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    lcf->a2a = ac;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_ioa_a2a_handler;

    return NGX_CONF_OK;
}


ngx_int_t
ngx_ioa_a2a_handler(ngx_http_request_t *r)
{
    ngx_int_t            rc;
    ngx_str_t            origin;
    ngx_ioa_a2a_t       *a;
    ngx_ioa_identity_t  *id;
    ngx_ioa_loc_conf_t  *lcf;

    rc = ngx_ioa_cors(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST))) {
        return ngx_ioa_a2a_not_allowed(r);
    }

    lcf = ngx_ioa_loc_conf(r);

    a = ngx_pcalloc(r->pool, sizeof(ngx_ioa_a2a_t));
    if (a == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    a->call.api = lcf->a2a->api;
    a->conf = lcf->a2a;
    a->request = r;
    a->history_length = -1;
    ngx_str_set(&a->rpc_id, "null");

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        /* the card is public (A2A's discovery); its skills are what the
         * caller's credentials, if any, may list */
        if (ngx_http_discard_request_body(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_ioa_rest_set_data(r, a);

        if (ngx_ioa_rest_get_data(r) != a) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        r->main->count++;
        ngx_ioa_a2a_card(r, a);

        return NGX_DONE;
    }

    /* a page of another origin may read the card, not act (see
     * ngx_ioa_origin_check()) */
    if (ngx_ioa_origin_check(r, &origin) != NGX_OK) {
        return ngx_ioa_jsonrpc_refuse_origin(r, &origin);
    }

    /* any valid token: each operation's endpoint checks its own scope */
    rc = ngx_ioa_auth_check(r, 0, NULL, &id);
    if (id == NULL) {
        return rc;
    }

    a->who = id;

    ngx_ioa_rest_set_data(r, a);

    if (ngx_ioa_rest_get_data(r) != a) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_ioa_read_body(r, ngx_ioa_a2a_body);
}


static void
ngx_ioa_a2a_body(ngx_http_request_t *r, ngx_str_t *body)
{
    ngx_int_t          rc;
    ngx_ioa_a2a_t     *a;
    ngx_table_elt_t   *h;
    ngx_ioa_error_t    err;
    ngx_ioa_jsonrpc_t  rpc;

    a = ngx_ioa_rest_get_data(r);

    rc = ngx_ioa_jsonrpc_parse(r, body, NGX_HTTP_OK, &rpc);

    if (rc != NGX_OK) {
        if (rc == NGX_ERROR) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    a->rpc_id = rpc.id;

    if (rpc.response || rpc.notification) {
        /* A2A has no notifications, and we ask nothing */
        ngx_ioa_finish(r, ngx_ioa_jsonrpc_accepted(r));
        return;
    }

    /* A2A-Version: what the client speaks; empty or absent is 0.3 */
    h = ngx_ioa_header_in(r, "A2A-Version");

    if (h && h->value.len
        && !(h->value.len >= 3
             && (ngx_strncmp(h->value.data, "0.3", 3) == 0
                 || ngx_strncmp(h->value.data, "1.0", 3) == 0)
             && (h->value.len == 3 || h->value.data[3] == '.')))
    {
        ngx_ioa_error_set(&err, "", NULL,
                          "A2A-Version %V is not supported: this hub "
                          "speaks 1.0 and 0.3", &h->value);
        ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_A2A_VERSION, &err);
        return;
    }

    ngx_ioa_a2a_dispatch(r, a, &rpc);
}


static void
ngx_ioa_a2a_dispatch(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_ioa_jsonrpc_t *rpc)
{
    ngx_str_t              *m, path;
    ngx_ioa_error_t         err;
    ngx_ioa_a2a_method_t   *me;

    m = &rpc->method;

    for (me = ngx_ioa_a2a_methods; me->v03; me++) {
        if (m->len == ngx_strlen(me->v03)
            && ngx_strncmp(m->data, me->v03, m->len) == 0)
        {
            break;
        }

        if (m->len == ngx_strlen(me->v10)
            && ngx_strncmp(m->data, me->v10, m->len) == 0)
        {
            a->v10 = 1;
            break;
        }
    }

    if (me->v03 == NULL) {
        if (ngx_strlcasestrn(m->data, m->data + m->len,
                             (u_char *) "pushnotification", 16 - 1)
            != NULL)
        {
            ngx_ioa_error_set(&err, "", NULL,
                              "push notifications are not supported: "
                              "follow a task with %s",
                              "message/stream or tasks/resubscribe");
            ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_A2A_NO_PUSH, &err);
            return;
        }

        ngx_ioa_error_set(&err, "", NULL, "method \"%V\" not found", m);
        ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_JSONRPC_NO_METHOD,
                         &err);
        return;
    }

    a->op = me->op;

    switch (a->op) {

    case NGX_IOA_A2A_SEND:
    case NGX_IOA_A2A_STREAM:
        ngx_ioa_a2a_send(r, a, rpc->params);
        return;

    case NGX_IOA_A2A_CARD:
        ngx_ioa_a2a_card(r, a);
        return;

    default:
        break;
    }

    if (ngx_ioa_a2a_task_id(r, a, rpc->params) != NGX_OK) {
        return;
    }

    if (a->op == NGX_IOA_A2A_GET || a->has_since) {
        ngx_ioa_a2a_read(r, a);
        return;
    }

    if (a->op == NGX_IOA_A2A_CANCEL) {
        path.len = sizeof("/goals//cancel") - 1 + a->goal_id.len;
        path.data = ngx_pnalloc(r->pool, path.len);
        if (path.data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_sprintf(path.data, "/goals/%V/cancel", &a->goal_id);
        a->path = path;
    }

    ngx_ioa_a2a_locate(r, a);
}


/*
 * Where the goal's feed ends now, before the operation: what follows it
 * (a cancel's wait, a resubscribe, the stream after a person's message)
 * reads the feed from there, after the task as GET /goals/{id} then has
 * it, and not from the beginning, whose input-required of long ago would
 * end it at once.  An event between the two reads may come twice; none is
 * missed.
 */

static void
ngx_ioa_a2a_locate(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_ioa_args_t  args;

    ngx_ioa_args_init(&args);
    ngx_ioa_args_cstr(&args, "XREVRANGE");
    ngx_ioa_key_goal_feed(&args, &a->goal_id, NGX_IOA_ROOM_LOG);
    ngx_ioa_args_cstr(&args, "+");
    ngx_ioa_args_cstr(&args, "-");
    ngx_ioa_args_cstr(&args, "COUNT");
    ngx_ioa_args_cstr(&args, "1");

    if (ngx_ioa_rest_command_args(r, ngx_ioa_a2a_located, &args)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_a2a_located(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_a2a_t    *a;
    redisReply       *e;
    ngx_ioa_error_t   err;

    a = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_error_set(&err, "", NULL,
                          "Redis did not answer; try again shortly");
        ngx_ioa_a2a_fail(r, a, NGX_HTTP_SERVICE_UNAVAILABLE,
                         NGX_IOA_JSONRPC_INTERNAL, &err);
        return;
    }

    /* an empty feed: from its beginning */
    a->from.ms = 0;
    a->from.seq = 0;
    a->has_from = 1;

    if (reply->elements) {
        e = reply->element[0];

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 1
            || e->element[0]->type != REDIS_REPLY_STRING
            || ngx_ioa_parse_sid((u_char *) e->element[0]->str,
                                 e->element[0]->len, &a->from)
               != NGX_OK)
        {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    ngx_ioa_a2a_go(r, a);
}


/* the operation on a task that exists: a person's message, a cancel, or
 * (a resubscribe) nothing but reading it */

static void
ngx_ioa_a2a_go(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_int_t  rc;

    switch (a->op) {

    case NGX_IOA_A2A_CANCEL:
        rc = ngx_ioa_call(r, &a->call, 1, &a->path, NULL, NULL,
                          ngx_ioa_a2a_cancelled);
        break;

    case NGX_IOA_A2A_SEND:
    case NGX_IOA_A2A_STREAM:
        rc = ngx_ioa_call(r, &a->call, 1, &a->path, NULL, &a->body,
                          ngx_ioa_a2a_posted);
        break;

    default:
        ngx_ioa_a2a_read(r, a);
        return;
    }

    if (rc != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


/* params.id of tasks/get, tasks/cancel, tasks/resubscribe, and
 * historyLength; Last-Event-ID for a resubscribe */

static ngx_int_t
ngx_ioa_a2a_task_id(ngx_http_request_t *r, ngx_ioa_a2a_t *a, yajl_val params)
{
    yajl_val          v;
    ngx_table_elt_t  *h;
    ngx_ioa_error_t   err;

    if (ngx_ioa_json_string(ngx_ioa_json_get(params, "id"), &a->goal_id)
        != NGX_OK
        || a->goal_id.len == 0 || a->goal_id.len > NGX_IOA_A2A_ID_MAX)
    {
        ngx_ioa_error_set(&err, "", NULL, "params.id must be a task id");
        ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS,
                         &err);
        return NGX_DECLINED;
    }

    if (ngx_ioa_goal_id_valid(&a->goal_id) != NGX_OK) {
        ngx_ioa_error_set(&err, "", NULL, "no task \"%V\": a task id is "
                          "32 hex digits", &a->goal_id);
        ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_A2A_TASK_NOT_FOUND,
                         &err);
        return NGX_DECLINED;
    }

    v = ngx_ioa_json_get(params, "historyLength");

    if (v) {
        if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0) {
            ngx_ioa_error_set(&err, "", NULL,
                              "params.historyLength must be a whole number "
                              "0 or more");
            ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK,
                             NGX_IOA_JSONRPC_INVALID_PARAMS, &err);
            return NGX_DECLINED;
        }

        a->history_length = YAJL_GET_INTEGER(v);
    }

    h = ngx_ioa_header_in(r, "Last-Event-ID");

    if (a->op == NGX_IOA_A2A_SUBSCRIBE && h && h->value.len) {
        if (ngx_ioa_parse_sid(h->value.data, h->value.len, &a->since)
            != NGX_OK)
        {
            ngx_ioa_error_set(&err, "", NULL,
                              "Last-Event-ID must be an event id of this "
                              "stream, such as 1700000000000-0");
            ngx_ioa_a2a_fail(r, a, NGX_HTTP_BAD_REQUEST,
                             NGX_IOA_JSONRPC_INVALID_PARAMS, &err);
            return NGX_DECLINED;
        }

        a->has_since = 1;
    }

    return NGX_OK;
}


/*
 * message/send and message/stream: the message's text parts (and data
 * parts, as JSON text) are the goal, or, with a taskId, a person's message
 * to the running goal.  params.metadata.ioa, an object, adds /launch_goal's
 * own fields (team_member_names, max_turns, deadline_s, person, ...).
 */

static void
ngx_ioa_a2a_send(ngx_http_request_t *r, ngx_ioa_a2a_t *a, yajl_val params)
{
    size_t            i;
    yajl_val          msg, v, conf, meta;
    ngx_str_t         role, text, body, path;
    ngx_ioa_jbuf_t    b, t;
    ngx_ioa_error_t   err;

    msg = ngx_ioa_json_get(params, "message");

    if (msg == NULL || !YAJL_IS_OBJECT(msg)) {
        ngx_ioa_error_set(&err, "", NULL, "params.message is required");
        goto invalid;
    }

    /* the client's own id of its message, which its history shows again
     * (A2A requires one) */
    if (ngx_ioa_json_string(ngx_ioa_json_get(msg, "messageId"), &a->user_id)
        != NGX_OK
        || a->user_id.len == 0 || a->user_id.len > NGX_IOA_A2A_MESSAGE_ID_MAX)
    {
        ngx_ioa_error_set(&err, "", NULL,
                          "message.messageId is required: a string of 1 to "
                          "%d bytes", NGX_IOA_A2A_MESSAGE_ID_MAX);
        goto invalid;
    }

    if (ngx_ioa_json_string(ngx_ioa_json_get(msg, "role"), &role) == NGX_OK
        && !(role.len == 4 && ngx_strncmp(role.data, "user", 4) == 0)
        && !(role.len == 9 && ngx_strncmp(role.data, "ROLE_USER", 9) == 0))
    {
        ngx_ioa_error_set(&err, "", NULL,
                          "message.role must be the user's: a goal comes "
                          "from a user, not \"%V\"", &role);
        goto invalid;
    }

    if (ngx_ioa_jbuf_init(&t, r->pool, 256) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_ioa_a2a_text(a, ngx_ioa_json_get(msg, "parts"), &t, &err)
        != NGX_OK)
    {
        if (err.code.len) {
            ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_A2A_CONTENT_TYPE,
                             &err);
            return;
        }

        goto invalid;
    }

    if (ngx_ioa_jbuf_done(&t, &text) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    conf = ngx_ioa_json_get(params, "configuration");

    /* each version's own default: 1.0 waits unless returnImmediately is
     * true, 0.3 answers at once unless blocking is true */
    a->blocking = a->v10;

    if (conf && YAJL_IS_OBJECT(conf)) {
        v = ngx_ioa_json_get(conf, a->v10 ? "returnImmediately" : "blocking");

        if (v && YAJL_IS_TRUE(v)) {
            a->blocking = !a->v10;

        } else if (v && YAJL_IS_FALSE(v)) {
            a->blocking = a->v10;
        }

        v = ngx_ioa_json_get(conf, "historyLength");

        if (v && YAJL_IS_INTEGER(v) && YAJL_GET_INTEGER(v) >= 0) {
            a->history_length = YAJL_GET_INTEGER(v);
        }
    }

    v = ngx_ioa_json_get(msg, "taskId");

    if (v && YAJL_IS_STRING(v) && ngx_ioa_json_string(v, &a->goal_id) == NGX_OK
        && a->goal_id.len)
    {
        /* to a running task: a person's message into its goal */
        if (ngx_ioa_goal_id_valid(&a->goal_id) != NGX_OK) {
            ngx_ioa_error_set(&err, "", NULL, "no task \"%V\": a task id "
                              "is 32 hex digits", &a->goal_id);
            ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_A2A_TASK_NOT_FOUND,
                             &err);
            return;
        }

        path.len = sizeof("/goals//messages") - 1 + a->goal_id.len;
        path.data = ngx_pnalloc(r->pool, path.len);

        if (path.data == NULL
            || ngx_ioa_jbuf_init(&b, r->pool, text.len + 32) != NGX_OK)
        {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_sprintf(path.data, "/goals/%V/messages", &a->goal_id);

        ngx_ioa_jbuf_literal(&b, "{\"content\":");
        ngx_ioa_jbuf_str(&b, &text);
        ngx_ioa_jbuf_byte(&b, '}');

        if (ngx_ioa_jbuf_done(&b, &a->body) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        a->path = path;
        ngx_ioa_a2a_locate(r, a);

        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, text.len + 256) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"goal\":");
    ngx_ioa_jbuf_str(&b, &text);

    meta = ngx_ioa_json_get(ngx_ioa_json_get(params, "metadata"), "ioa");

    if (meta == NULL || ngx_ioa_json_get(meta, "input_timeout_s") == NULL) {
        /* an A2A task may wait for its user (input-required): the team
         * asks the person before it gives up on a part */
        ngx_ioa_jbuf_literal(&b, ",\"input_timeout_s\":"
                             NGX_IOA_A2A_INPUT_TIMEOUT);
    }

    if (meta) {
        if (!YAJL_IS_OBJECT(meta)) {
            ngx_ioa_error_set(&err, "", NULL,
                              "params.metadata.ioa must be an object of "
                              "/launch_goal's fields");
            goto invalid;
        }

        for (i = 0; i < meta->u.object.len; i++) {
            if (ngx_strcmp(meta->u.object.keys[i], "goal") == 0) {
                continue;                  /* the message is the goal */
            }

            role.data = (u_char *) meta->u.object.keys[i];
            role.len = ngx_strlen(role.data);

            ngx_ioa_jbuf_byte(&b, ',');
            ngx_ioa_jbuf_str(&b, &role);
            ngx_ioa_jbuf_byte(&b, ':');
            ngx_ioa_jbuf_val(&b, meta->u.object.values[i]);
        }
    }

    ngx_ioa_jbuf_byte(&b, '}');

    /* the user's message, kept for the task's history */
    a->user = text;

    if (ngx_ioa_jbuf_done(&b, &body) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_str_set(&path, "/launch_goal");

    if (ngx_ioa_call(r, &a->call, 1, &path, "wait=0", &body,
                     ngx_ioa_a2a_launched)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }

    return;

invalid:

    ngx_ioa_a2a_fail(r, a, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS, &err);
}


/* the parts as one text: text parts as they are, data parts as JSON,
 * between them an empty line; a file, raw or url part is refused with
 * err->code set (ContentTypeNotSupported) */

static ngx_int_t
ngx_ioa_a2a_text(ngx_ioa_a2a_t *a, yajl_val parts, ngx_ioa_jbuf_t *b,
    ngx_ioa_error_t *err)
{
    size_t     i, n;
    yajl_val   p, v;
    ngx_str_t  s, kind;

    ngx_str_null(&err->code);

    if (parts == NULL || !YAJL_IS_ARRAY(parts) || parts->u.array.len == 0) {
        ngx_ioa_error_set(err, "", NULL,
                          "message.parts must hold at least one part");
        ngx_str_null(&err->code);
        return NGX_DECLINED;
    }

    n = 0;

    for (i = 0; i < parts->u.array.len; i++) {
        p = parts->u.array.values[i];

        if (!YAJL_IS_OBJECT(p)) {
            ngx_ioa_error_set(err, "", NULL,
                              "message.parts[%uz] must be an object", i);
            ngx_str_null(&err->code);
            return NGX_DECLINED;
        }

        if (n++) {
            ngx_ioa_jbuf_literal(b, "\n\n");
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(p, "text"), &s) == NGX_OK) {
            ngx_ioa_jbuf_raw(b, s.data, s.len);
            continue;
        }

        v = ngx_ioa_json_get(p, "data");

        if (v) {
            /* 0.3 wraps it: {"kind":"data","data":{...}} as 1.0 does not */
            ngx_ioa_jbuf_val(b, v);
            continue;
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(p, "kind"), &kind)
            != NGX_OK)
        {
            ngx_str_set(&kind, "file, raw or url");
        }

        ngx_ioa_error_set(err, "content_type", NULL,
                          "message.parts[%uz]: a %V part is not supported: "
                          "a goal is text (text and data parts)", i, &kind);
        return NGX_DECLINED;
    }

    if (b->failed) {
        return NGX_ERROR;
    }

    if (b->pos == b->start) {
        ngx_ioa_error_set(err, "", NULL, "the message has no text");
        ngx_str_null(&err->code);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* /launch_goal answered: 202 {"goal_id",...} */

static void
ngx_ioa_a2a_launched(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    yajl_val   doc;

    if (a->call.status != NGX_HTTP_ACCEPTED) {
        ngx_ioa_a2a_answer(r, a);
        return;
    }

    doc = ngx_ioa_call_answer(r, &a->call);

    if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "goal_id"), &a->goal_id)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    a->task.state = NGX_IOA_A2A_QUEUED;
    a->task.updated = ngx_ioa_now_ms();

    if (a->op == NGX_IOA_A2A_STREAM) {
        ngx_ioa_finish(r, ngx_ioa_a2a_stream(r, a, 1));
        return;
    }

    if (a->blocking) {
        if (ngx_ioa_a2a_wait(r, a, 0) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    ngx_ioa_a2a_answer(r, a);
}


/* a person's message went into the goal: go on as with a new one, from
 * the goal's record */

static void
ngx_ioa_a2a_posted(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    if (a->call.status != NGX_HTTP_ACCEPTED) {
        ngx_ioa_a2a_answer(r, a);
        return;
    }

    a->answered = 1;

    ngx_ioa_a2a_read(r, a);
}


/* GET /goals/{id} */

static void
ngx_ioa_a2a_read(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_str_t  path;

    path.len = sizeof("/goals/") - 1 + a->goal_id.len;
    path.data = ngx_pnalloc(r->pool, path.len);
    if (path.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_sprintf(path.data, "/goals/%V", &a->goal_id);

    if (ngx_ioa_call(r, &a->call, 0, &path, NULL, NULL, ngx_ioa_a2a_got)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_ioa_a2a_got(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    yajl_val    doc, v;
    ngx_str_t   state;

    if (a->call.status != NGX_HTTP_OK) {
        ngx_ioa_a2a_answer(r, a);
        return;
    }

    doc = ngx_ioa_call_answer(r, &a->call);

    if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "state"), &state)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    a->task.state = ngx_ioa_a2a_state(&state);
    (void) ngx_ioa_json_string(ngx_ioa_json_get(doc, "comm_id"),
                               &a->task.comm_id);
    (void) ngx_ioa_json_string(ngx_ioa_json_get(doc, "conclusion"),
                               &a->task.conclusion);
    (void) ngx_ioa_json_string(ngx_ioa_json_get(doc, "error"),
                               &a->task.error);

    if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "awaiting_input"),
                            &a->task.question)
        == NGX_OK
        && a->task.question.len
        && a->task.state->rank < NGX_IOA_A2A_RANK_END
        && !a->answered)
    {
        /* (the message just sent is the answer the goal has not read
         * yet: the task works again) */
        a->task.awaiting = 1;
    }

    v = ngx_ioa_json_get(doc, "updated_at");
    a->task.updated = (v && YAJL_IS_INTEGER(v)) ? YAJL_GET_INTEGER(v)
                                                 : ngx_ioa_now_ms();

    switch (a->op) {

    case NGX_IOA_A2A_STREAM:
    case NGX_IOA_A2A_SUBSCRIBE:
        if (a->has_since) {
            /* the client knows the task up to its Last-Event-ID: every
             * event after it is sent, the states too */
            a->task.state = NGX_IOA_A2A_QUEUED;
            ngx_ioa_finish(r, ngx_ioa_a2a_stream(r, a, 1));
            return;
        }

        /* an ended task, or one that waits for its person, is told
         * whole, and the stream ends */
        ngx_ioa_finish(r, ngx_ioa_a2a_stream(r, a,
                              a->task.state->rank < NGX_IOA_A2A_RANK_END
                              && !a->task.awaiting));
        return;

    case NGX_IOA_A2A_SEND:
        if (a->blocking && a->task.state->rank < NGX_IOA_A2A_RANK_END
            && !a->task.awaiting)
        {
            if (ngx_ioa_a2a_wait(r, a, 0) != NGX_OK) {
                ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            }

            return;
        }

        break;

    default:
        break;
    }

    ngx_ioa_a2a_answer(r, a);
}


/* POST /goals/{id}/cancel answered: wait for the goal to end */

static void
ngx_ioa_a2a_cancelled(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    if (a->call.status != NGX_HTTP_ACCEPTED) {
        ngx_ioa_a2a_answer(r, a);
        return;
    }

    a->task.state = NGX_IOA_A2A_CANCELLING;
    a->task.updated = ngx_ioa_now_ms();

    if (ngx_ioa_a2a_wait(r, a, NGX_IOA_A2A_CANCEL_WAIT) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


/*
 * The answer of a send, get or cancel: the task, or the endpoint's refusal
 * as an A2A error.  A send's answer is {"task": ...} in 1.0 (a oneof of
 * task and message), the task itself in 0.3.
 */

void
ngx_ioa_a2a_answer(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_ioa_jbuf_t  b;

    if (a->task.state == NULL) {
        ngx_ioa_a2a_endpoint(r, a);
        return;
    }

    if (ngx_ioa_a2a_task_result(a, r->pool,
                                a->v10 && a->op == NGX_IOA_A2A_SEND, &b)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jsonrpc_result(r, &a->rpc_id, &b);
}


/*
 * The endpoint refused: its error as A2A's.  A task that is not there, or
 * not the caller's, is TaskNotFound in the same words either way: the goal
 * endpoints answer both with the same 404 (ngx_ioa_goal_unknown()), so
 * nothing here could tell them apart.  A 403 is the token's scope, for
 * every operation.  A goal that ended cannot be cancelled or talked to;
 * the endpoint's own words are the message.
 */

static void
ngx_ioa_a2a_endpoint(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    yajl_val         doc;
    ngx_str_t        text;
    ngx_int_t        code;
    ngx_uint_t       status, st;
    ngx_ioa_error_t  err;

    st = a->call.status;
    doc = ngx_ioa_call_answer(r, &a->call);

    if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "message"), &text)
        != NGX_OK)
    {
        ngx_str_set(&text, "the hub's endpoint gave no JSON answer");
    }

    status = NGX_HTTP_OK;

    switch (st) {

    case NGX_HTTP_BAD_REQUEST:
    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        code = NGX_IOA_JSONRPC_INVALID_PARAMS;
        break;

    case NGX_HTTP_NOT_FOUND:
        code = NGX_IOA_A2A_TASK_NOT_FOUND;

        if (a->goal_id.len) {
            ngx_str_set(&text, "no such task");
        }

        break;

    case NGX_HTTP_FORBIDDEN:
        status = NGX_HTTP_FORBIDDEN;
        code = NGX_IOA_JSONRPC_INVALID_REQUEST;
        break;

    case NGX_HTTP_CONFLICT:
        code = a->op == NGX_IOA_A2A_CANCEL ? NGX_IOA_A2A_NOT_CANCELABLE
                                           : NGX_IOA_A2A_UNSUPPORTED;
        break;

    case NGX_HTTP_TOO_MANY_REQUESTS:
    case NGX_HTTP_SERVICE_UNAVAILABLE:
        /* the client may retry: the HTTP status says so too */
        status = st;
        code = NGX_IOA_JSONRPC_INTERNAL;
        break;

    default:
        code = NGX_IOA_JSONRPC_INTERNAL;
        if (st < 300) {
            ngx_str_set(&text, "the hub's endpoint answered what this "
                               "facade cannot read");
        }
    }

    ngx_ioa_error_set(&err, "", NULL, "%V", &text);
    ngx_ioa_a2a_fail(r, a, status, code, &err);
}


void
ngx_ioa_a2a_fail(ngx_http_request_t *r, ngx_ioa_a2a_t *a, ngx_uint_t status,
    ngx_int_t code, ngx_ioa_error_t *err)
{
    ngx_str_t  msg;

    msg.data = err->text;
    msg.len = err->len;

    ngx_ioa_jsonrpc_error(r, &a->rpc_id, status, code, &msg);
}


static ngx_int_t
ngx_ioa_a2a_not_allowed(ngx_http_request_t *r)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "method_not_allowed", NULL,
                      "the A2A endpoint answers GET (the agent card) and "
                      "POST (JSON-RPC)");

    return ngx_ioa_send_not_allowed(r, "GET, HEAD, POST", &err);
}
