
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
 *   concluded                   completed, the conclusion its artifact
 *   failed                      failed, the error its status message
 *   cancelled                   canceled
 *
 * Streams.  A stream follows the goal's feed, P{room:goal-<id>}, from its
 * beginning: each state change becomes a status update, each envelope of
 * the goal's room a working status update whose message is the envelope's
 * text (its messageId the envelope's id, so a client can drop repeats),
 * and the end the artifact, the final status and the end of the response.
 * Every event carries the feed's id, so a client that reconnects with
 * Last-Event-ID misses nothing and gets nothing twice.  A resubscribe
 * without it starts with the task as GET /goals/{id} has it, then reads
 * the feed again from the beginning: state changes the task has passed are
 * not sent again, envelopes are (the same messageIds).
 *
 * Blocking sends (the default of both versions) and cancels wait the same
 * way, without a stream, until the goal ends (a cancel at most
 * NGX_IOA_A2A_CANCEL_WAIT, then it answers the state it has).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* A2A's own error codes */
#define NGX_IOA_A2A_TASK_NOT_FOUND        -32001
#define NGX_IOA_A2A_NOT_CANCELABLE        -32002
#define NGX_IOA_A2A_NO_PUSH               -32003
#define NGX_IOA_A2A_UNSUPPORTED           -32004
#define NGX_IOA_A2A_CONTENT_TYPE          -32005
#define NGX_IOA_A2A_NO_EXTENDED_CARD      -32007
#define NGX_IOA_A2A_VERSION               -32009

/* how long a cancel waits for the goal to end */
#define NGX_IOA_A2A_CANCEL_WAIT           10000
/* messages a blocking answer's history holds, and their bytes */
#define NGX_IOA_A2A_HISTORY_MAX           100
#define NGX_IOA_A2A_HISTORY_BYTES         (256 * 1024)
/* how long a task waits for its user's input, unless metadata.ioa says */
#define NGX_IOA_A2A_INPUT_TIMEOUT         "300"
/* agents the card lists as skills */
#define NGX_IOA_A2A_SKILLS_MAX            "100"
/* a goal id: the hub's are 32 hex digits */
#define NGX_IOA_A2A_ID_MAX                64


struct ngx_ioa_a2a_conf_s {
    ngx_str_t                 api;        /* the ioa_api prefix, "" for / */
    ngx_str_t                 url;        /* the JSON-RPC endpoint */
    ngx_str_t                 name;
};


typedef enum {
    NGX_IOA_A2A_SEND = 0,
    NGX_IOA_A2A_STREAM,
    NGX_IOA_A2A_GET,
    NGX_IOA_A2A_CANCEL,
    NGX_IOA_A2A_SUBSCRIBE,
    NGX_IOA_A2A_CARD
} ngx_ioa_a2a_op_e;


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


/* a goal's state as A2A says it; rank orders the states a goal passes */
typedef struct {
    ngx_str_t                 ioa;
    const char               *v03;
    const char               *v10;
    ngx_uint_t                rank;
} ngx_ioa_a2a_state_t;

#define NGX_IOA_A2A_RANK_END  4

static ngx_ioa_a2a_state_t  ngx_ioa_a2a_states[] = {
    { ngx_string("queued"), "submitted", "TASK_STATE_SUBMITTED", 0 },
    { ngx_string("forming"), "working", "TASK_STATE_WORKING", 1 },
    { ngx_string("running"), "working", "TASK_STATE_WORKING", 2 },
    { ngx_string("cancelling"), "working", "TASK_STATE_WORKING", 3 },
    { ngx_string("concluded"), "completed", "TASK_STATE_COMPLETED",
      NGX_IOA_A2A_RANK_END },
    { ngx_string("failed"), "failed", "TASK_STATE_FAILED",
      NGX_IOA_A2A_RANK_END },
    { ngx_string("cancelled"), "canceled", "TASK_STATE_CANCELED",
      NGX_IOA_A2A_RANK_END },
    { ngx_null_string, NULL, NULL, 0 }
};


typedef struct ngx_ioa_a2a_s  ngx_ioa_a2a_t;

/* the task, as far as the goal's record and feed have told it */
typedef struct {
    ngx_ioa_a2a_state_t      *state;
    ngx_str_t                 comm_id;
    ngx_str_t                 conclusion;
    ngx_str_t                 error;
    ngx_str_t                 question;      /* to the person, if waited */
    ngx_uint_t                awaiting;      /* for the person's input */
    int64_t                   updated;       /* ms */
    ngx_array_t              *history;       /* ngx_str_t: messages */
    size_t                    history_bytes;
} ngx_ioa_a2a_task_t;


/* a blocking send or a cancel, waiting as a follower of the goal's feed */
typedef struct {
    ngx_ioa_client_t          client;        /* must be first */
    ngx_ioa_a2a_t            *a2a;
    ngx_event_t               timer;
    unsigned                  attached:1;
    unsigned                  done:1;
} ngx_ioa_a2a_wait_t;


struct ngx_ioa_a2a_s {
    ngx_ioa_call_t            call;          /* must be first */
    ngx_ioa_a2a_conf_t       *conf;
    ngx_http_request_t       *request;
    ngx_str_t                 rpc_id;
    ngx_ioa_a2a_op_e          op;
    ngx_uint_t                v10;           /* the 1.0 dialect */
    ngx_uint_t                blocking;
    ngx_uint_t                answered;      /* a message went to the goal */
    ngx_int_t                 history_length;    /* -1: not asked */
    ngx_str_t                 goal_id;
    ngx_str_t                 user;          /* the user's message, built */
    ngx_ioa_sid_t             since;         /* Last-Event-ID */
    ngx_uint_t                has_since;
    ngx_ioa_sid_t             from;          /* the feed's end, before */
    ngx_uint_t                has_from;
    ngx_str_t                 path;          /* the operation's endpoint */
    ngx_str_t                 body;
    ngx_ioa_a2a_task_t        task;
    ngx_ioa_a2a_wait_t       *wait;
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
static void ngx_ioa_a2a_answer(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static ngx_int_t ngx_ioa_a2a_stream(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_uint_t follow);
static ngx_int_t ngx_ioa_a2a_rewrite(ngx_ioa_sse_t *sse, ngx_ioa_msg_t *m,
    void *data);
static void ngx_ioa_a2a_closing(ngx_ioa_sse_t *sse, const char *reason,
    void *data);
static ngx_int_t ngx_ioa_a2a_feed(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_ioa_msg_t *m, ngx_str_t *events, ngx_uint_t *n);
static ngx_int_t ngx_ioa_a2a_status_event(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_str_t *message, ngx_str_t *out);
static ngx_int_t ngx_ioa_a2a_wait(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_msec_t timeout);
static ngx_int_t ngx_ioa_a2a_wait_send(ngx_ioa_client_t *cl,
    ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_a2a_wait_text(ngx_ioa_client_t *cl, ngx_str_t *s);
static void ngx_ioa_a2a_wait_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason);
static size_t ngx_ioa_a2a_wait_queued(ngx_ioa_client_t *cl);
static void ngx_ioa_a2a_wait_timeout(ngx_event_t *ev);
static void ngx_ioa_a2a_wait_end(ngx_ioa_a2a_wait_t *w);
static void ngx_ioa_a2a_wait_cleanup(void *data);
static void ngx_ioa_a2a_card(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static void ngx_ioa_a2a_card_listed(ngx_http_request_t *r, void *data);
static void ngx_ioa_a2a_endpoint(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
static ngx_ioa_a2a_state_t *ngx_ioa_a2a_state(ngx_str_t *ioa);
static void ngx_ioa_a2a_task_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b);
static void ngx_ioa_a2a_status_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *message);
static void ngx_ioa_a2a_message_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_uint_t agent, ngx_str_t *id, ngx_str_t *text, yajl_val metadata);
static void ngx_ioa_a2a_text_part(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *text);
static void ngx_ioa_a2a_ids(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    const char *task_key);
static void ngx_ioa_a2a_time(ngx_ioa_jbuf_t *b, int64_t ms);
static void ngx_ioa_a2a_fail(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_uint_t status, ngx_int_t code, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_a2a_not_allowed(ngx_http_request_t *r);


static ngx_ioa_transport_t  ngx_ioa_a2a_wait_transport = {
    ngx_ioa_a2a_wait_send,
    ngx_ioa_a2a_wait_text,
    ngx_ioa_a2a_wait_close,
    NULL,
    ngx_ioa_a2a_wait_queued,
    NGX_IOA_VIA_HTTP
};


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

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_ioa_module);

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

    /* any valid token: each operation's endpoint checks its own scope */
    rc = ngx_ioa_auth_check(r, 0, NULL, &id);
    if (id == NULL) {
        return rc;
    }

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

    rc = ngx_ioa_jsonrpc_parse(r, body, &rpc);

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
    ngx_str_t             key;
    const char           *argv[6];
    size_t                argvlen[6];
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    key.len = mcf->redis_prefix.len + sizeof("{room:goal-}:log") - 1
              + a->goal_id.len;
    key.data = ngx_pnalloc(r->pool, key.len);
    if (key.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_sprintf(key.data, "%V{room:goal-%V}:log", &mcf->redis_prefix,
                &a->goal_id);

    argv[0] = "XREVRANGE"; argvlen[0] = 9;
    argv[1] = (const char *) key.data; argvlen[1] = key.len;
    argv[2] = "+"; argvlen[2] = 1;
    argv[3] = "-"; argvlen[3] = 1;
    argv[4] = "COUNT"; argvlen[4] = 5;
    argv[5] = "1"; argvlen[5] = 1;

    if (ngx_ioa_rest_command(r, ngx_ioa_a2a_located, 6, argv, argvlen)
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

    a->blocking = 1;

    if (conf && YAJL_IS_OBJECT(conf)) {
        v = ngx_ioa_json_get(conf, a->v10 ? "returnImmediately" : "blocking");

        if (v && (a->v10 ? YAJL_IS_TRUE(v) : YAJL_IS_FALSE(v))) {
            a->blocking = 0;
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
    a->user.len = text.len;

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

    a->task.state = &ngx_ioa_a2a_states[0];
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
            a->task.state = &ngx_ioa_a2a_states[0];
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

    a->task.state = &ngx_ioa_a2a_states[3];
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

static void
ngx_ioa_a2a_answer(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_uint_t       wrap;
    ngx_ioa_jbuf_t   b;

    if (a->task.state == NULL) {
        ngx_ioa_a2a_endpoint(r, a);
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 1024 + a->task.conclusion.len * 2)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    wrap = a->v10 && a->op == NGX_IOA_A2A_SEND;

    if (wrap) {
        ngx_ioa_jbuf_literal(&b, "{\"task\":");
    }

    ngx_ioa_a2a_task_json(a, &b);

    if (wrap) {
        ngx_ioa_jbuf_byte(&b, '}');
    }

    ngx_ioa_jsonrpc_result(r, &a->rpc_id, &b);
}


/*
 * The streamed answer: the task as it is now, then (follow) the goal's
 * feed, each entry rewritten into A2A events by ngx_ioa_a2a_feed().  The
 * request is an SSE stream from here (ngx_ioa_sse.c).
 */

static ngx_int_t
ngx_ioa_a2a_stream(ngx_http_request_t *r, ngx_ioa_a2a_t *a, ngx_uint_t follow)
{
    ngx_str_t       *first, task, name;
    ngx_ioa_jbuf_t   b;

    first = NULL;

    if (!a->has_since) {
        /* a resumed stream goes on where it was; a new one starts with
         * the task, 1.0 in a StreamResponse */
        if (ngx_ioa_jbuf_init(&b, r->pool, 1024 + a->task.conclusion.len * 2)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (a->v10) {
            ngx_ioa_jbuf_literal(&b, "{\"task\":");
        }

        ngx_ioa_a2a_task_json(a, &b);

        if (a->v10) {
            ngx_ioa_jbuf_byte(&b, '}');
        }

        first = ngx_palloc(r->pool, sizeof(ngx_str_t));

        if (first == NULL || ngx_ioa_jbuf_done(&b, &task) != NGX_OK
            || ngx_ioa_jsonrpc_message(r->pool, &a->rpc_id, "result", &task,
                                       first)
               != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_str_null(&name);

    if (follow) {
        name.data = ngx_pnalloc(r->pool, sizeof("goal-") - 1 + a->goal_id.len);
        if (name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        name.len = ngx_sprintf(name.data, "goal-%V", &a->goal_id) - name.data;
    }

    return ngx_ioa_sse_follow(r, &name,
                              a->has_since ? &a->since
                                           : (a->has_from ? &a->from : NULL),
                              ngx_ioa_a2a_rewrite, ngx_ioa_a2a_closing, a,
                              first);
}


static ngx_int_t
ngx_ioa_a2a_rewrite(ngx_ioa_sse_t *sse, ngx_ioa_msg_t *m, void *data)
{
    ngx_ioa_a2a_t *a = data;

    u_char      idbuf[NGX_INT64_LEN * 2 + 2];
    ngx_str_t   events[3], id, out;
    ngx_int_t   rc;
    ngx_uint_t  i, n;
    ngx_pool_t *pool;

    /* each entry in a pool of its own: a long goal's stream does not
     * grow the request's */
    pool = ngx_create_pool(4096, a->request->connection->log);
    if (pool == NULL) {
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    rc = ngx_ioa_a2a_feed(a, pool, m, events, &n);

    id.data = idbuf;
    id.len = ngx_ioa_sid_print(idbuf, &m->sid) - idbuf;

    for (i = 0; rc == NGX_OK && i < n; i++) {
        if (ngx_ioa_jsonrpc_message(pool, &a->rpc_id, "result", &events[i],
                                    &out)
            != NGX_OK
            || ngx_ioa_sse_event(sse, &id, &out) != NGX_OK)
        {
            rc = NGX_ERROR;
        }
    }

    ngx_destroy_pool(pool);

    if (rc == NGX_ERROR) {
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    if (a->task.state->rank == NGX_IOA_A2A_RANK_END || a->task.awaiting) {
        /* the final status is out, or the task waits for its person (an
         * interrupted state ends a stream too): the stream is over */
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the hub ends the stream (shutting down, a reader too slow): a JSON-RPC
 * error says so, and the client resubscribes */

static void
ngx_ioa_a2a_closing(ngx_ioa_sse_t *sse, const char *reason, void *data)
{
    ngx_ioa_a2a_t *a = data;

    ngx_str_t  msg, e, out;

    msg.data = (u_char *) reason;
    msg.len = ngx_strlen(reason);

    if (ngx_ioa_jsonrpc_error_object(a->request->pool,
                                     NGX_IOA_JSONRPC_INTERNAL, &msg, &e)
        == NGX_OK
        && ngx_ioa_jsonrpc_message(a->request->pool, &a->rpc_id, "error", &e,
                                   &out)
           == NGX_OK)
    {
        (void) ngx_ioa_sse_event(sse, NULL, &out);
    }
}


/*
 * One entry of the goal's feed: the task follows it, and *n events (A2A
 * StreamResponse results) say what changed.  A state the task has passed
 * already says nothing (a resubscribe reads the feed from its beginning).
 */

static ngx_int_t
ngx_ioa_a2a_feed(ngx_ioa_a2a_t *a, ngx_pool_t *pool, ngx_ioa_msg_t *m,
    ngx_str_t *events, ngx_uint_t *n)
{
    size_t                len;
    yajl_val              ev, v, env, meta;
    ngx_str_t             kind, s, text, result, id, msg;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_error_t       err;
    ngx_ioa_loc_conf_t   *lcf;
    ngx_ioa_a2a_state_t  *st;

    *n = 0;

    lcf = ngx_http_get_module_loc_conf(a->request, ngx_http_ioa_module);

    /* an envelope nests up to ioa_max_json_depth inside the event */
    ev = ngx_ioa_json_parse(pool, m->payload, m->payload_len,
                            lcf->max_json_depth + 2, &err);

    if (ev == NULL
        || ngx_ioa_json_string(ngx_ioa_json_get(ev, "event"), &kind)
           != NGX_OK)
    {
        return NGX_OK;
    }

    v = ngx_ioa_json_get(ev, "timestamp");
    if (v && YAJL_IS_INTEGER(v)) {
        a->task.updated = YAJL_GET_INTEGER(v);
    }

    if (kind.len == 8 && ngx_strncmp(kind.data, "envelope", 8) == 0) {
        env = ngx_ioa_json_get(ev, "envelope");

        if (env == NULL || a->task.state->rank == NGX_IOA_A2A_RANK_END) {
            return NGX_OK;
        }

        if (a->task.state->rank < 2) {
            /* the room talks: the goal runs (a stream resumed after its
             * state event starts from "queued") */
            a->task.state = &ngx_ioa_a2a_states[2];
        }

        /* the envelope's words: its content, a task's result after it,
         * or (neither) the task's description; "<sender>: " before them */
        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "content"), &text)
            != NGX_OK)
        {
            ngx_str_null(&text);
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "task_conclusion"),
                                &result)
            != NGX_OK)
        {
            ngx_str_null(&result);
        }

        if (text.len == 0 && result.len == 0) {
            (void) ngx_ioa_json_string(ngx_ioa_json_get(env, "task_desc"),
                                       &text);
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "sender"), &s)
            != NGX_OK)
        {
            ngx_str_set(&s, "?");
        }

        len = s.len + 2 + text.len + 1 + result.len;
        msg.data = ngx_pnalloc(pool, len);
        if (msg.data == NULL) {
            return NGX_ERROR;
        }

        msg.len = ngx_sprintf(msg.data, "%V: %V%s%V", &s, &text,
                              text.len && result.len ? "\n" : "", &result)
                  - msg.data;

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "id"), &id) != NGX_OK) {
            ngx_str_set(&id, "");
        }

        meta = env;

        if (ngx_ioa_jbuf_init(&b, pool, m->payload_len * 2 + 512) != NGX_OK) {
            return NGX_ERROR;
        }

        /* the message, kept for a blocking answer's history */
        ngx_ioa_a2a_message_json(a, &b, 1, &id, &msg, meta);

        if (ngx_ioa_jbuf_done(&b, &text) != NGX_OK) {
            return NGX_ERROR;
        }

        if (a->wait && a->task.history
            && a->task.history->nelts < NGX_IOA_A2A_HISTORY_MAX
            && a->task.history_bytes + text.len <= NGX_IOA_A2A_HISTORY_BYTES)
        {
            ngx_str_t  *h;

            h = ngx_array_push(a->task.history);
            if (h == NULL) {
                return NGX_ERROR;
            }

            h->data = ngx_pstrdup(a->request->pool, &text);
            if (h->data == NULL) {
                return NGX_ERROR;
            }

            h->len = text.len;
            a->task.history_bytes += text.len;
        }

        /* a status update of the working task, with the message */
        return ngx_ioa_a2a_status_event(a, pool, &text, &events[(*n)++]);
    }

    if (kind.len == 5 && ngx_strncmp(kind.data, "input", 5) == 0) {
        v = ngx_ioa_json_get(ev, "awaiting");

        if (a->task.state->rank == NGX_IOA_A2A_RANK_END || v == NULL
            || (YAJL_IS_TRUE(v)
                && ngx_ioa_json_string(ngx_ioa_json_get(ev, "question"),
                                       &text)
                   != NGX_OK)
            || (!YAJL_IS_TRUE(v) && !a->task.awaiting))
        {
            return NGX_OK;
        }

        if (YAJL_IS_TRUE(v)) {
            /* the goal asks its person: input-required, the question as
             * the status message; the stream ends here */
            a->task.awaiting = 1;
            a->task.question.data = ngx_pstrdup(a->request->pool, &text);
            a->task.question.len = a->task.question.data ? text.len : 0;

        } else {
            a->task.awaiting = 0;
        }

        return ngx_ioa_a2a_status_event(a, pool, NULL, &events[(*n)++]);
    }

    if (kind.len != 5 || ngx_strncmp(kind.data, "state", 5) != 0
        || ngx_ioa_json_string(ngx_ioa_json_get(ev, "state"), &s) != NGX_OK)
    {
        return NGX_OK;
    }

    st = ngx_ioa_a2a_state(&s);

    if (st->rank <= a->task.state->rank) {
        return NGX_OK;                    /* passed already */
    }

    a->task.state = st;

    (void) ngx_ioa_json_string(ngx_ioa_json_get(ev, "comm_id"),
                               &a->task.comm_id);

    if (ngx_ioa_json_string(ngx_ioa_json_get(ev, "conclusion"), &text)
        == NGX_OK)
    {
        a->task.conclusion.data = ngx_pstrdup(a->request->pool, &text);
        a->task.conclusion.len = a->task.conclusion.data ? text.len : 0;
    }

    if (ngx_ioa_json_string(ngx_ioa_json_get(ev, "error"), &text) == NGX_OK) {
        a->task.error.data = ngx_pstrdup(a->request->pool, &text);
        a->task.error.len = a->task.error.data ? text.len : 0;
    }

    if (a->task.comm_id.len) {
        s = a->task.comm_id;
        a->task.comm_id.data = ngx_pstrdup(a->request->pool, &s);
        a->task.comm_id.len = a->task.comm_id.data ? s.len : 0;
    }

    if (a->task.conclusion.len && st->ioa.data[0] == 'c'
        && st->ioa.data[1] == 'o')
    {
        /* the conclusion, as the task's artifact, before the final status */
        if (ngx_ioa_jbuf_init(&b, pool, a->task.conclusion.len * 2 + 256)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        ngx_ioa_jbuf_byte(&b, '{');

        if (a->v10) {
            ngx_ioa_jbuf_literal(&b, "\"artifactUpdate\":{");

        } else {
            ngx_ioa_jbuf_literal(&b, "\"kind\":\"artifact-update\",");
        }

        ngx_ioa_a2a_ids(a, &b, "taskId");
        ngx_ioa_jbuf_literal(&b, ",\"artifact\":{\"artifactId\":"
                             "\"conclusion\",\"name\":\"conclusion\","
                             "\"parts\":[");
        ngx_ioa_a2a_text_part(a, &b, &a->task.conclusion);
        ngx_ioa_jbuf_literal(&b, "]},\"append\":false,\"lastChunk\":true}");

        if (a->v10) {
            ngx_ioa_jbuf_byte(&b, '}');
        }

        if (ngx_ioa_jbuf_done(&b, &events[(*n)++]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_ioa_a2a_status_event(a, pool, NULL, &events[(*n)++]);
}


/*
 * A status update: the task's status (with message, or the one the state
 * has), the goal's own state as metadata; in 0.3 "final" on the last one
 * of a stream (an ended task, or one waiting for its person).
 */

static ngx_int_t
ngx_ioa_a2a_status_event(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_str_t *message, ngx_str_t *out)
{
    ngx_ioa_jbuf_t  b;

    if (ngx_ioa_jbuf_init(&b, pool,
                          (message ? message->len : 0)
                          + (a->task.error.len + a->task.question.len) * 2
                          + 512)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_byte(&b, '{');

    if (a->v10) {
        ngx_ioa_jbuf_literal(&b, "\"statusUpdate\":{");

    } else {
        ngx_ioa_jbuf_literal(&b, "\"kind\":\"status-update\",");
    }

    ngx_ioa_a2a_ids(a, &b, "taskId");
    ngx_ioa_jbuf_literal(&b, ",\"status\":");
    ngx_ioa_a2a_status_json(a, &b, message);

    if (!a->v10) {
        if (a->task.state->rank == NGX_IOA_A2A_RANK_END
            || a->task.awaiting)
        {
            ngx_ioa_jbuf_literal(&b, ",\"final\":true");

        } else {
            ngx_ioa_jbuf_literal(&b, ",\"final\":false");
        }
    }

    ngx_ioa_jbuf_literal(&b, ",\"metadata\":{\"ioa_state\":");
    ngx_ioa_jbuf_str(&b, &a->task.state->ioa);
    ngx_ioa_jbuf_literal(&b, "}}");

    if (a->v10) {
        ngx_ioa_jbuf_byte(&b, '}');
    }

    return ngx_ioa_jbuf_done(&b, out);
}


/*
 * A blocking send or a cancel: a follower of the goal's feed that answers
 * the request with the task once the goal has ended, or (timeout) once
 * that long has passed.  The client going away is noticed, and the
 * request's cleanup detaches the follower.
 */

static ngx_int_t
ngx_ioa_a2a_wait(ngx_http_request_t *r, ngx_ioa_a2a_t *a, ngx_msec_t timeout)
{
    u_char              *p;
    ngx_ioa_a2a_wait_t  *w;
    ngx_pool_cleanup_t  *cln;

    w = ngx_pcalloc(r->pool, sizeof(ngx_ioa_a2a_wait_t));
    if (w == NULL) {
        return NGX_ERROR;
    }

    a->task.history = ngx_array_create(r->pool, 8, sizeof(ngx_str_t));
    if (a->task.history == NULL) {
        return NGX_ERROR;
    }

    w->a2a = a;
    a->wait = w;

    w->client.kind = NGX_IOA_CLIENT_FOLLOWER;
    w->client.transport = &ngx_ioa_a2a_wait_transport;
    w->client.data = w;
    w->client.pool = r->pool;
    w->client.log = r->connection->log;
    w->client.lcf = ngx_http_get_module_loc_conf(r, ngx_http_ioa_module);
    w->client.echo = 1;
    ngx_queue_init(&w->client.links);

    if (a->has_from) {
        w->client.since = a->from;
        w->client.has_since = 1;
    }

    p = ngx_pnalloc(r->pool, sizeof("goal-") - 1 + a->goal_id.len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    w->client.follow.data = p;
    w->client.follow.len = ngx_sprintf(p, "goal-%V", &a->goal_id) - p;
    w->client.name = w->client.follow;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_ioa_a2a_wait_cleanup;
    cln->data = w;

    w->timer.handler = ngx_ioa_a2a_wait_timeout;
    w->timer.data = w;
    w->timer.log = r->connection->log;

    if (timeout) {
        ngx_add_timer(&w->timer, timeout);
    }

    if (ngx_ioa_client_attach(&w->client) != NGX_OK) {
        return NGX_ERROR;
    }

    w->attached = 1;

    r->read_event_handler = ngx_http_test_reading;

    return NGX_OK;
}


static size_t
ngx_ioa_a2a_wait_queued(ngx_ioa_client_t *cl)
{
    return 0;
}


static ngx_int_t
ngx_ioa_a2a_wait_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m)
{
    ngx_ioa_a2a_wait_t *w = cl->data;

    ngx_str_t    events[3];
    ngx_int_t    rc;
    ngx_uint_t   n;
    ngx_pool_t  *pool;

    if (w->done) {
        return NGX_OK;
    }

    pool = ngx_create_pool(4096, cl->log);
    if (pool == NULL) {
        return NGX_OK;
    }

    rc = ngx_ioa_a2a_feed(w->a2a, pool, m, events, &n);

    ngx_destroy_pool(pool);

    if (rc == NGX_OK
        && w->a2a->task.state->rank < NGX_IOA_A2A_RANK_END
        && !w->a2a->task.awaiting)
    {
        return NGX_OK;
    }

    ngx_ioa_a2a_wait_end(w);

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_a2a_wait_text(ngx_ioa_client_t *cl, ngx_str_t *s)
{
    return NGX_OK;
}


static void
ngx_ioa_a2a_wait_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason)
{
    ngx_ioa_a2a_wait_t *w = cl->data;

    ngx_ioa_error_t  err;

    if (w->done) {
        return;
    }

    w->done = 1;

    if (w->attached) {
        w->attached = 0;
        ngx_ioa_client_detach(cl);
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    ngx_ioa_error_set(&err, "", NULL,
                      "waiting for task %V failed: %s; tasks/get or "
                      "tasks/resubscribe tells how it goes on",
                      &w->a2a->goal_id, reason ? reason : "");
    ngx_ioa_a2a_fail(w->a2a->request, w->a2a, NGX_HTTP_SERVICE_UNAVAILABLE,
                     NGX_IOA_JSONRPC_INTERNAL, &err);
}


static void
ngx_ioa_a2a_wait_timeout(ngx_event_t *ev)
{
    ngx_ioa_a2a_wait_t *w = ev->data;

    ngx_connection_t  *c;

    c = w->a2a->request->connection;

    ngx_ioa_a2a_wait_end(w);

    ngx_http_run_posted_requests(c);
}


/* the goal ended, or the wait is over: the task as it is */

static void
ngx_ioa_a2a_wait_end(ngx_ioa_a2a_wait_t *w)
{
    ngx_http_request_t  *r;

    if (w->done) {
        return;
    }

    w->done = 1;

    if (w->attached) {
        w->attached = 0;
        ngx_ioa_client_detach(&w->client);
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    r = w->a2a->request;
    r->read_event_handler = ngx_http_block_reading;

    ngx_ioa_a2a_answer(r, w->a2a);
}


static void
ngx_ioa_a2a_wait_cleanup(void *data)
{
    ngx_ioa_a2a_wait_t *w = data;

    w->done = 1;

    if (w->attached) {
        w->attached = 0;
        ngx_ioa_client_detach(&w->client);
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }
}


/*
 * The agent card.  Its skills: one for what the hub does (a goal, solved
 * by a team), and one per registered agent (the first
 * NGX_IOA_A2A_SKILLS_MAX) when the caller's credentials may list the
 * registry (/list_all_agents: admin, or open mode).
 */

static void
ngx_ioa_a2a_card(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_str_t  path;

    ngx_str_set(&path, "/list_all_agents");

    if (ngx_ioa_call(r, &a->call, 0, &path, "limit=" NGX_IOA_A2A_SKILLS_MAX,
                     NULL, ngx_ioa_a2a_card_listed)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_ioa_a2a_card_listed(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    size_t               i, k;
    yajl_val             list, ag, tags, v;
    ngx_str_t            s, url, out, extended;
    ngx_uint_t           auth;
    ngx_table_elt_t     *host;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_ioa_module);
    auth = lcf->auth;

    list = a->call.status == NGX_HTTP_OK ? ngx_ioa_call_answer(r, &a->call)
                                         : NULL;

    if (ngx_ioa_jbuf_init(&b, r->pool, 4096 + a->call.body.len) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* the JSON-RPC endpoint's URL: url=, absolute or a path on this host,
     * or this location */

    url = a->conf->url.len ? a->conf->url : r->uri;

    if (url.data[0] == '/') {
        host = r->headers_in.host;
        s = host ? host->value : r->headers_in.server;

        out.len = sizeof("https://") - 1 + s.len + url.len;
        out.data = ngx_pnalloc(r->pool, out.len);
        if (out.data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        out.len = ngx_sprintf(out.data, "%s://%V%V",
#if (NGX_HTTP_SSL)
                              r->connection->ssl ? "https" : "http",
#else
                              "http",
#endif
                              &s, &url)
                  - out.data;
        url = out;
    }

    ngx_ioa_jbuf_literal(&b, "{\"name\":");
    ngx_ioa_jbuf_str(&b, &a->conf->name);
    ngx_ioa_jbuf_literal(&b,
        ",\"description\":\"An Internet of Agents hub: a message sent here "
        "is a goal, worked on by a team of the agents of its network that "
        "it finds, forms and coordinates; the task streams their "
        "conversation and ends with the team's conclusion.\","
        "\"supportedInterfaces\":[{\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"protocolBinding\":\"JSONRPC\","
                         "\"protocolVersion\":\"1.0\"},{\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"protocolBinding\":\"JSONRPC\","
                         "\"protocolVersion\":\"0.3\"}],\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"preferredTransport\":\"JSONRPC\","
                         "\"protocolVersion\":\"0.3.0\","
                         "\"version\":\"" NGX_IOA_VERSION "\","
                         "\"capabilities\":{\"streaming\":true,"
                         "\"pushNotifications\":false,"
                         "\"stateTransitionHistory\":false,"
                         "\"extendedAgentCard\":");
    extended.data = (u_char *) (auth != NGX_IOA_AUTH_OFF ? "true" : "false");
    extended.len = ngx_strlen(extended.data);
    ngx_ioa_jbuf_raw(&b, extended.data, extended.len);
    ngx_ioa_jbuf_literal(&b, "},\"supportsAuthenticatedExtendedCard\":");
    ngx_ioa_jbuf_raw(&b, extended.data, extended.len);

    /* the hub's tokens: "Authorization: Bearer", a JWT unless an auth
     * service decides (ioa_auth request); 1.0's and 0.3's spellings of the
     * scheme in one object, each reader takes its own */
    if (auth == NGX_IOA_AUTH_OFF) {
        ngx_ioa_jbuf_literal(&b, ",\"securitySchemes\":{},"
                             "\"securityRequirements\":[],\"security\":[]");

    } else {
        ngx_ioa_jbuf_literal(&b, ",\"securitySchemes\":{\"bearer\":{"
                             "\"type\":\"http\",\"scheme\":\"bearer\",");

        if (auth == NGX_IOA_AUTH_JWT) {
            ngx_ioa_jbuf_literal(&b, "\"bearerFormat\":\"JWT\",");
        }

        ngx_ioa_jbuf_literal(&b, "\"description\":\"the hub's token "
                             "(launch scope to send tasks)\","
                             "\"httpAuthSecurityScheme\":{"
                             "\"scheme\":\"Bearer\"");

        if (auth == NGX_IOA_AUTH_JWT) {
            ngx_ioa_jbuf_literal(&b, ",\"bearerFormat\":\"JWT\"");
        }

        ngx_ioa_jbuf_literal(&b, "}}},\"securityRequirements\":[{"
                             "\"schemes\":{\"bearer\":{\"list\":[]}}}],"
                             "\"security\":[{\"bearer\":[]}]");
    }

    ngx_ioa_jbuf_literal(&b,
        ",\"defaultInputModes\":[\"text/plain\",\"application/json\"],"
        "\"defaultOutputModes\":[\"text/plain\"],"
        "\"skills\":[{\"id\":\"goal\",\"name\":\"Solve a goal with a team\","
        "\"description\":\"The message is a goal: the hub finds the agents "
        "it needs, forms a team, runs their conversation (plan, tasks, "
        "review, re-routing) and answers the conclusion.  A message with "
        "the task's id reaches the running team as a person's message.\","
        "\"tags\":[\"multi-agent\",\"team\",\"goal\"],"
        "\"examples\":[\"Write a short report on the history of the "
        "printing press and check it for errors\"]}");

    for (i = 0; list && YAJL_IS_ARRAY(list) && i < list->u.array.len; i++) {
        ag = list->u.array.values[i];

        if (ngx_ioa_json_string(ngx_ioa_json_get(ag, "name"), &s) != NGX_OK) {
            continue;
        }

        ngx_ioa_jbuf_literal(&b, ",{\"id\":");
        out.len = sizeof("agent:") - 1 + s.len;
        out.data = ngx_pnalloc(r->pool, out.len);
        if (out.data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_sprintf(out.data, "agent:%V", &s);
        ngx_ioa_jbuf_str(&b, &out);
        ngx_ioa_jbuf_literal(&b, ",\"name\":");
        ngx_ioa_jbuf_str(&b, &s);
        ngx_ioa_jbuf_literal(&b, ",\"description\":");

        if (ngx_ioa_json_string(ngx_ioa_json_get(ag, "desc"), &s) != NGX_OK) {
            ngx_str_set(&s, "");
        }

        ngx_ioa_jbuf_str(&b, &s);
        ngx_ioa_jbuf_literal(&b, ",\"tags\":[\"agent\"");

        tags = ngx_ioa_json_get(ag, "tags");

        for (k = 0; tags && YAJL_IS_ARRAY(tags) && k < tags->u.array.len;
             k++)
        {
            v = tags->u.array.values[k];

            if (ngx_ioa_json_string(v, &s) == NGX_OK) {
                ngx_ioa_jbuf_byte(&b, ',');
                ngx_ioa_jbuf_str(&b, &s);
            }
        }

        ngx_ioa_jbuf_literal(&b, "]}");
    }

    ngx_ioa_jbuf_literal(&b, "]}");

    if (a->op == NGX_IOA_A2A_CARD) {
        ngx_ioa_jsonrpc_result(r, &a->rpc_id, &b);
        return;
    }

    if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


/*
 * The endpoint refused: its error as A2A's.  A task that is not there, or
 * not the caller's, is TaskNotFound either way (as GET /goals/{id} does not
 * say whose a goal is); a goal that ended cannot be cancelled or talked
 * to; the endpoint's own words are the message.
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
        break;

    case NGX_HTTP_FORBIDDEN:
        if (a->goal_id.len && a->op != NGX_IOA_A2A_SEND
            && a->op != NGX_IOA_A2A_STREAM)
        {
            code = NGX_IOA_A2A_TASK_NOT_FOUND;
            ngx_str_set(&text, "no such task");
            break;
        }

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


static ngx_ioa_a2a_state_t *
ngx_ioa_a2a_state(ngx_str_t *ioa)
{
    ngx_ioa_a2a_state_t  *st;

    for (st = ngx_ioa_a2a_states; st->ioa.len; st++) {
        if (st->ioa.len == ioa->len
            && ngx_strncmp(st->ioa.data, ioa->data, ioa->len) == 0)
        {
            return st;
        }
    }

    /* a state this hub does not know yet: the goal is under way */
    return &ngx_ioa_a2a_states[2];
}


/* a Task: id, contextId, status, the conclusion as artifact, history */

static void
ngx_ioa_a2a_task_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b)
{
    ngx_int_t    n, i, from;
    ngx_str_t   *h, id;

    ngx_ioa_jbuf_byte(b, '{');

    if (!a->v10) {
        ngx_ioa_jbuf_literal(b, "\"kind\":\"task\",");
    }

    ngx_ioa_a2a_ids(a, b, "id");
    ngx_ioa_jbuf_literal(b, ",\"status\":");
    ngx_ioa_a2a_status_json(a, b, NULL);
    ngx_ioa_jbuf_literal(b, ",\"artifacts\":[");

    if (a->task.conclusion.len
        && a->task.state->rank == NGX_IOA_A2A_RANK_END
        && a->task.state->ioa.data[0] == 'c'
        && a->task.state->ioa.data[1] == 'o')
    {
        ngx_ioa_jbuf_literal(b, "{\"artifactId\":\"conclusion\","
                             "\"name\":\"conclusion\",\"parts\":[");
        ngx_ioa_a2a_text_part(a, b, &a->task.conclusion);
        ngx_ioa_jbuf_literal(b, "]}");
    }

    ngx_ioa_jbuf_literal(b, "],\"history\":[");

    /* the user's message, then the team's, the last historyLength */
    n = (a->user.len ? 1 : 0)
        + (a->task.history ? (ngx_int_t) a->task.history->nelts : 0);
    from = (a->history_length >= 0 && a->history_length < n)
           ? n - a->history_length : 0;

    for (i = from; i < n; i++) {
        if (i > from) {
            ngx_ioa_jbuf_byte(b, ',');
        }

        if (a->user.len && i == 0) {
            ngx_str_set(&id, "user");
            ngx_ioa_a2a_message_json(a, b, 0, &id, &a->user, NULL);
            continue;
        }

        h = a->task.history->elts;
        h = &h[i - (a->user.len ? 1 : 0)];
        ngx_ioa_jbuf_raw(b, h->data, h->len);
    }

    ngx_ioa_jbuf_literal(b, "],\"metadata\":{\"ioa_state\":");
    ngx_ioa_jbuf_str(b, &a->task.state->ioa);

    if (a->task.comm_id.len) {
        ngx_ioa_jbuf_literal(b, ",\"comm_id\":");
        ngx_ioa_jbuf_str(b, &a->task.comm_id);
    }

    ngx_ioa_jbuf_literal(b, "}}");
}


/* a TaskStatus: the state, when, and a message (the given one, or a
 * failed goal's error) */

static void
ngx_ioa_a2a_status_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *message)
{
    ngx_str_t    id;
    const char  *state;
    ngx_uint_t   awaiting;

    awaiting = a->task.awaiting
               && a->task.state->rank < NGX_IOA_A2A_RANK_END;

    if (awaiting) {
        state = a->v10 ? "TASK_STATE_INPUT_REQUIRED" : "input-required";

    } else {
        state = a->v10 ? a->task.state->v10 : a->task.state->v03;
    }

    ngx_ioa_jbuf_literal(b, "{\"state\":\"");
    ngx_ioa_jbuf_raw(b, (u_char *) state, ngx_strlen(state));
    ngx_ioa_jbuf_literal(b, "\",\"timestamp\":");
    ngx_ioa_a2a_time(b, a->task.updated);

    if (message) {
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_ioa_jbuf_raw(b, message->data, message->len);

    } else if (awaiting) {
        /* the question the goal waits on */
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_str_set(&id, "input");
        ngx_ioa_a2a_message_json(a, b, 1, &id, &a->task.question, NULL);

    } else if (a->task.error.len && a->task.state->rank
                                    == NGX_IOA_A2A_RANK_END)
    {
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_str_set(&id, "error");
        ngx_ioa_a2a_message_json(a, b, 1, &id, &a->task.error, NULL);
    }

    ngx_ioa_jbuf_byte(b, '}');
}


static void
ngx_ioa_a2a_message_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_uint_t agent, ngx_str_t *id, ngx_str_t *text, yajl_val metadata)
{
    ngx_ioa_jbuf_byte(b, '{');

    if (!a->v10) {
        ngx_ioa_jbuf_literal(b, "\"kind\":\"message\",");
    }

    ngx_ioa_jbuf_literal(b, "\"messageId\":");
    ngx_ioa_jbuf_str(b, id);
    ngx_ioa_jbuf_byte(b, ',');
    ngx_ioa_a2a_ids(a, b, "taskId");

    if (a->v10) {
        ngx_ioa_jbuf_literal(b, ",\"role\":");

        if (agent) {
            ngx_ioa_jbuf_literal(b, "\"ROLE_AGENT\"");

        } else {
            ngx_ioa_jbuf_literal(b, "\"ROLE_USER\"");
        }

    } else {
        ngx_ioa_jbuf_literal(b, ",\"role\":");

        if (agent) {
            ngx_ioa_jbuf_literal(b, "\"agent\"");

        } else {
            ngx_ioa_jbuf_literal(b, "\"user\"");
        }
    }

    ngx_ioa_jbuf_literal(b, ",\"parts\":[");
    ngx_ioa_a2a_text_part(a, b, text);
    ngx_ioa_jbuf_byte(b, ']');

    if (metadata) {
        /* the envelope as the room has it, for clients that know ioa */
        ngx_ioa_jbuf_literal(b, ",\"metadata\":{\"ioa_envelope\":");
        ngx_ioa_jbuf_val(b, metadata);
        ngx_ioa_jbuf_byte(b, '}');
    }

    ngx_ioa_jbuf_byte(b, '}');
}


static void
ngx_ioa_a2a_text_part(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b, ngx_str_t *text)
{
    if (a->v10) {
        ngx_ioa_jbuf_literal(b, "{\"text\":");

    } else {
        ngx_ioa_jbuf_literal(b, "{\"kind\":\"text\",\"text\":");
    }

    ngx_ioa_jbuf_str(b, text);
    ngx_ioa_jbuf_byte(b, '}');
}


/* "<task_key>":<goal id>,"contextId":<goal id> */

static void
ngx_ioa_a2a_ids(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b, const char *task_key)
{
    ngx_ioa_jbuf_byte(b, '"');
    ngx_ioa_jbuf_raw(b, (u_char *) task_key, ngx_strlen(task_key));
    ngx_ioa_jbuf_literal(b, "\":");
    ngx_ioa_jbuf_str(b, &a->goal_id);
    ngx_ioa_jbuf_literal(b, ",\"contextId\":");
    ngx_ioa_jbuf_str(b, &a->goal_id);
}


/* RFC 3339 in UTC, milliseconds: both versions' timestamp */

static void
ngx_ioa_a2a_time(ngx_ioa_jbuf_t *b, int64_t ms)
{
    u_char    buf[sizeof("\"1970-01-01T00:00:00.000Z\"")], *p;
    ngx_tm_t  tm;

    ngx_gmtime((time_t) (ms / 1000), &tm);

    p = ngx_sprintf(buf, "\"%4d-%02d-%02dT%02d:%02d:%02d.%03dZ\"",
                    tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                    tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec,
                    (int) (ms % 1000));

    ngx_ioa_jbuf_raw(b, buf, p - buf);
}


static void
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
    ngx_ioa_error_t   err;
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Allow");
    ngx_str_set(&h->value, "GET, HEAD, POST");

    ngx_ioa_error_set(&err, "method_not_allowed", NULL,
                      "the A2A endpoint answers GET (the agent card) and "
                      "POST (JSON-RPC)");

    return ngx_ioa_send_error(r, NGX_HTTP_NOT_ALLOWED, &err);
}
