
/*
 * Copyright (C) ioa authors
 *
 * Goals: POST /launch_goal, GET /goals/{id}, GET /goals/{id}/events,
 * POST /goals/{id}/cancel, POST /goals/{id}/messages.
 *
 * nginx never plans or calls an LLM: a goal is written to Redis and handed
 * to the workers (workers/ioa-worker) through a Stream with a consumer
 * group, P{jobs}:goals.  The goal's record is the HASH P{goal:<id>}:meta,
 * which the worker keeps current (state, comm_id, conclusion, error).
 *
 * The goal's event feed is a Stream shaped exactly like a room log,
 * P{room:goal-<id>}:log, with its channel P{room:goal-<id>}:ch: the worker
 * appends state changes and a copy of every envelope of the goal's room.
 * So following a goal is following a room, and the room machinery
 * (ngx_ioa_link.c) gives it the same guarantees for free: subscription,
 * catch-up from the Stream, exact resume with Last-Event-ID, over HTTP/1.1
 * and HTTP/2.  A follower only ever reads, and nothing else can post there:
 * the feed has no members, so post.lua refuses every client.
 *
 * IoA's blocking form (POST /launch_goal?wait=1, or "Prefer: wait") answers
 * [comm_id, conclusion] when the goal ends.  It waits as a follower of the
 * feed, without polling and without blocking nginx: the answer is written
 * when the worker's final state event arrives.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"


typedef struct {
    ngx_ioa_wait_t            wait;       /* must be first */
    ngx_str_t                 goal_id;
} ngx_ioa_goal_wait_t;


typedef struct {
    ngx_str_t                 goal_id;
    ngx_str_t                 meta;
    ngx_str_t                 goal;       /* for the goal index */
    ngx_str_t                 person;
    ngx_str_t                 launcher;   /* whom the launch is charged */
    int64_t                   created;
    ngx_uint_t                wait;
    int64_t                   in_flight;  /* a refusal's count */
} ngx_ioa_goal_ctx_t;


/* a person's message to a goal, while its body is read */
typedef struct {
    ngx_str_t                 goal_id;
    ngx_str_t                 sender;     /* the token's subject, or "" */
    ngx_str_t                 owner;      /* see ngx_ioa_goal_owner() */
    ngx_str_t                 content;    /* the body's */
} ngx_ioa_goal_msg_t;


/* a request about one goal, while Redis answers */
typedef struct {
    ngx_str_t                 goal_id;    /* the request URI's bytes */
    ngx_str_t                 owner;      /* see ngx_ioa_goal_owner() */
    ngx_ioa_identity_t       *who;        /* its token's expiry counts */
} ngx_ioa_goal_req_t;


/* a launch's body, as checked (ngx_ioa_launch_fields) */
typedef struct {
    ngx_str_t                 goal;
    ngx_str_t                 comm_id;
    int64_t                   depth;      /* team_up_depth, -1: none */
    ngx_str_t                 person;
    yajl_val                  cont_input;
} ngx_ioa_launch_in_t;


/* the longest message a person may post into a goal, and the most a
 * goal's inbox holds (goal_message.lua refuses more, never trims) */
#define NGX_IOA_GOAL_MESSAGE_MAX  8192
#define NGX_IOA_GOAL_INBOX_MAX    "100"

/* Retry-After of a launch past ioa_limit_goals_in_flight: when one of the
 * launcher's goals ends cannot be foreseen, so a few seconds, as nginx's
 * own limit_req_status clients are told to come back soon */
#define NGX_IOA_GOALS_RETRY       5000


static void ngx_ioa_launch_body(ngx_http_request_t *r, ngx_str_t *body);
static ngx_int_t ngx_ioa_launch_person(ngx_http_request_t *r,
    ngx_str_t *named, ngx_str_t *person, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_launch_check(ngx_http_request_t *r, yajl_val doc,
    ngx_ioa_launch_in_t *in, ngx_ioa_error_t *err);
static ngx_uint_t ngx_ioa_launch_wait(ngx_http_request_t *r);
static void ngx_ioa_launch_stored(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_launch_admitted(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_launch_refused(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_launch_forget(ngx_ioa_goal_ctx_t *g);
static void ngx_ioa_launch_queued(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_goal_wait(ngx_http_request_t *r,
    ngx_ioa_goal_ctx_t *g);
static ngx_int_t ngx_ioa_goal_wait_message(ngx_ioa_wait_t *wait,
    ngx_ioa_msg_t *m);
static void ngx_ioa_goal_wait_closed(ngx_ioa_wait_t *wait, const char *why);
static void ngx_ioa_goal_read(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_goal_cancel_done(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_goal_message_body(ngx_http_request_t *r,
    ngx_str_t *body);
static void ngx_ioa_goal_message_done(ngx_http_request_t *r,
    redisReply *reply);
static ngx_ioa_goal_req_t *ngx_ioa_goal_req(ngx_http_request_t *r,
    ngx_str_t *id, ngx_ioa_identity_t *who);
static ngx_int_t ngx_ioa_goal_unknown(ngx_http_request_t *r);
static void ngx_ioa_goal_events_owner(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_goal_follow(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who);
static ngx_int_t ngx_ioa_goal_bad_id(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_goal_index(ngx_http_request_t *r,
    ngx_ioa_goal_ctx_t *g, ngx_str_t *id, const char *state);


/* the fields of the meta HASH a client may read, in answer order, and
 * whether each is a number (answered as a JSON number when it is one) */
typedef struct {
    const char  *name;
    ngx_uint_t   number;
} ngx_ioa_goal_field_t;

static const ngx_ioa_goal_field_t  ngx_ioa_goal_fields[] = {
    { "goal_id", 0 }, { "goal", 0 }, { "state", 0 }, { "comm_id", 0 },
    { "conclusion", 0 }, { "error", 0 }, { "created_at", 1 },
    { "updated_at", 1 }, { "parent", 0 }, { "depth", 1 },
    { "planner", 0 }, { "ended", 0 }, { "launched_by", 0 },
    { "tokens", 1 },
    { "prompt_tokens", 1 }, { "completion_tokens", 1 },
    { "awaiting_input", 0 }, { "erased", 0 }, { NULL, 0 }
};


/*
 * POST /launch_goal: IoA's LaunchGoalParam.  202 with where to follow the
 * goal, or with ?wait=1 / "Prefer: wait" IoA's [comm_id, conclusion].
 */

ngx_int_t
ngx_ioa_launch_goal_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_launch_body);
}


static void
ngx_ioa_launch_body(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char               rnd[16], *hex;
    yajl_val             doc;
    ngx_str_t            s, request, person;
    ngx_ioa_args_t       a;
    ngx_ioa_error_t      err;
    ngx_ioa_jbuf_t       b;
    ngx_msec_t           retry;
    ngx_str_t           *launcher;
    ngx_ioa_goal_ctx_t  *g;
    ngx_ioa_identity_t  *who;
    ngx_ioa_launch_in_t  in;

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    ngx_memzero(&in, sizeof(ngx_ioa_launch_in_t));

    if (ngx_ioa_launch_check(r, doc, &in, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
        return;
    }

    if (ngx_ioa_launch_person(r, &in.person, &person, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return;
    }

    /* ioa_limit_launch_rate: a valid launch is charged to its token's
     * subject (in open mode to the client's address); over the rate
     * nothing is queued */
    who = ngx_ioa_rest_identity(r);
    launcher = (who && !who->open) ? &who->sub : &r->connection->addr_text;

    if (ngx_ioa_limit_launch(launcher, &retry, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_retry(r, NGX_HTTP_TOO_MANY_REQUESTS,
                                             retry, &err));
        return;
    }

    g = ngx_pcalloc(r->pool, sizeof(ngx_ioa_goal_ctx_t));
    if (g == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    g->wait = ngx_ioa_launch_wait(r);

    /* goal ids look like room ids: 128 random bits in hex */

    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    hex = ngx_pnalloc(r->pool, 32);
    if (hex == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_hex_dump(hex, rnd, sizeof(rnd));
    g->goal_id.data = hex;
    g->goal_id.len = 32;

    if (ngx_ioa_key_goal_alloc(r->pool, &g->goal_id, NGX_IOA_GOAL_META,
                               &g->meta) != NGX_OK
        || ngx_ioa_jbuf_init(&b, r->pool, body->len + 16) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* the request as the worker reads it: normalised, compact */
    ngx_ioa_jbuf_val(&b, doc);

    if (ngx_ioa_jbuf_done(&b, &request) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_rest_set_data(r, g);

    ngx_ioa_args_init(&a);

    ngx_ioa_args_cstr(&a, "HSET");
    ngx_ioa_args_str(&a, &g->meta);
    ngx_ioa_args_cstr(&a, "goal_id");
    ngx_ioa_args_str(&a, &g->goal_id);
    ngx_ioa_args_cstr(&a, "state");
    ngx_ioa_args_cstr(&a, "queued");
    ngx_ioa_args_cstr(&a, "request");
    ngx_ioa_args_str(&a, &request);
    g->created = ngx_ioa_now_ms();
    ngx_ioa_args_cstr(&a, "created_at");
    ngx_ioa_args_int(&a, g->created);
    ngx_ioa_args_cstr(&a, "parent");
    ngx_ioa_args_cstr(&a, "");

    ngx_ioa_args_cstr(&a, "goal");
    ngx_ioa_args_str(&a, &in.goal);
    g->goal = in.goal;

    g->person = person;
    g->launcher = *launcher;

    if (in.comm_id.len) {
        ngx_ioa_args_cstr(&a, "comm_id");
        ngx_ioa_args_str(&a, &in.comm_id);
    }

    /* the person in the goal's room (workers/worker/person.c): the
     * launcher, or in open mode the name the body gives */
    ngx_ioa_args_cstr(&a, "launched_by");
    ngx_ioa_args_str(&a, &person);

    /* whether the launcher may continue anyone's room (the worker checks
     * a continued room's owner): an administrator, or anyone in open mode,
     * as ngx_ioa_goal_owner() decides for the goal endpoints */
    ngx_ioa_goal_owner(ngx_ioa_rest_identity(r), &s);
    ngx_ioa_args_cstr(&a, "launcher_admin");
    ngx_ioa_args_cstr(&a, s.len ? "0" : "1");

    ngx_ioa_args_cstr(&a, "depth");

    if (in.depth >= 0) {
        ngx_ioa_args_int(&a, in.depth);

    } else {
        ngx_ioa_args_cstr(&a, "");
    }

    if (ngx_ioa_rest_command_args(r, ngx_ioa_launch_stored, &a) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


/*
 * Blocking (IoA's [comm_id, conclusion]) or not (202 and where to
 * follow): ioa_launch_goal_wait sets the location's default, so IoA's own
 * scripts need nothing but the host; ?wait= and Prefer (RFC 7240: "wait",
 * "respond-async") choose per request.
 */

static ngx_uint_t
ngx_ioa_launch_wait(ngx_http_request_t *r)
{
    ngx_str_t            s;
    ngx_uint_t           wait;
    ngx_table_elt_t     *h;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);
    wait = lcf->launch_goal_wait ? 1 : 0;

    h = ngx_ioa_header_in(r, "Prefer");

    if (h && ngx_strlcasestrn(h->value.data, h->value.data + h->value.len,
                              (u_char *) "respond-async", 13 - 1)
             != NULL)
    {
        wait = 0;

    } else if (h && ngx_strlcasestrn(h->value.data,
                                     h->value.data + h->value.len,
                                     (u_char *) "wait", 4 - 1)
                    != NULL)
    {
        wait = 1;
    }

    if (ngx_http_arg(r, (u_char *) "wait", 4, &s) == NGX_OK && s.len == 1
        && (s.data[0] == '1' || s.data[0] == '0'))
    {
        wait = (s.data[0] == '1');
    }

    return wait;
}


/*
 * POST /launch_goal's body (IoA's LaunchGoalParam and ours), in two steps
 * because "goal" may be empty only when the goal continues a room: that
 * rule is checked between them, where it always was.
 */

#define NGX_IOA_LAUNCH_NAMES_MAX  64
#define NGX_IOA_LAUNCH_GOAL_TEXT  "\"goal\" must be a non-empty string"


static ngx_ioa_body_field_t  ngx_ioa_launch_member = {
    NULL, NGX_IOA_BODY_NAME, 0, 0, 0, NULL, NULL, NULL, NGX_IOA_BODY_NONE
};


static ngx_ioa_body_field_t  ngx_ioa_launch_fields[] = {

    { "comm_id", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL,
      0, NGX_IOA_COMM_ID_MAX, NULL, NULL,
      "\"comm_id\" must be a room id or null",
      offsetof(ngx_ioa_launch_in_t, comm_id) },

    { "goal", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      NGX_IOA_LAUNCH_GOAL_TEXT,
      offsetof(ngx_ioa_launch_in_t, goal) },

    ngx_ioa_body_step,

    { "team_member_names", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_NULL,
      1, NGX_IOA_LAUNCH_NAMES_MAX, NULL, &ngx_ioa_launch_member,
      "\"team_member_names\" must be a list of 1 to "
      ngx_value(NGX_IOA_LAUNCH_NAMES_MAX) " agent names, or null",
      NGX_IOA_BODY_NONE },

    { "team_up_depth", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL, 0, 16,
      NULL, NULL, NULL, offsetof(ngx_ioa_launch_in_t, depth) },

    { "max_turns", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL, 1, 10000,
      NULL, NULL, NULL, NGX_IOA_BODY_NONE },

    { "deadline_s", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL, 1, 86400,
      NULL, NULL, NULL, NGX_IOA_BODY_NONE },

    /* and ioa_goal_input_timeout_max, checked before the tables */
    { "input_timeout_s", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL, 0, 86400,
      NULL, NULL, NULL, NGX_IOA_BODY_NONE },

    { "is_collaborative_planning_enabled", NGX_IOA_BODY_BOOLEAN,
      NGX_IOA_BODY_NULL, 0, 0, NULL, NULL, NULL, NGX_IOA_BODY_NONE },

    { "skip_naming", NGX_IOA_BODY_BOOLEAN, NGX_IOA_BODY_NULL, 0, 0,
      NULL, NULL, NULL, NGX_IOA_BODY_NONE },

    { "person", NGX_IOA_BODY_NAME, NGX_IOA_BODY_NULL, 0, 0, NULL, NULL,
      "\"person\" must be an agent name, or null",
      offsetof(ngx_ioa_launch_in_t, person) },

    /* a string or {"sender","content"}: checked after the tables */
    { "cont_input", NGX_IOA_BODY_VALUE, NGX_IOA_BODY_NULL, 0, 0,
      NULL, NULL, NULL, offsetof(ngx_ioa_launch_in_t, cont_input) },

    ngx_ioa_body_null_field
};


/*
 * Fields the tables do not name are kept with the goal's record as they
 * came (IoA's clients may send fields of their own), but only up to
 * NGX_IOA_LAUNCH_EXTRA_MAX bytes in all: the record lives for
 * ioa_goal_retention, and a launcher must not park megabytes in Redis
 * with each goal.
 */

#define NGX_IOA_LAUNCH_EXTRA_MAX  4096


static ngx_int_t
ngx_ioa_launch_extra(ngx_http_request_t *r, yajl_val doc,
    ngx_ioa_error_t *err)
{
    size_t           i, total;
    ngx_str_t        out;
    const char      *key, *first;
    ngx_ioa_jbuf_t   b;

    total = 0;
    first = NULL;

    for (i = 0; i < doc->u.object.len; i++) {
        key = doc->u.object.keys[i];

        if (ngx_ioa_body_field(ngx_ioa_launch_fields, key)) {
            continue;
        }

        if (ngx_ioa_jbuf_init(&b, r->pool, 64) != NGX_OK) {
            return NGX_ERROR;
        }

        ngx_ioa_jbuf_val(&b, doc->u.object.values[i]);

        if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
            return NGX_ERROR;
        }

        total += ngx_strlen(key) + out.len;

        if (first == NULL) {
            first = key;
        }

        if (total > NGX_IOA_LAUNCH_EXTRA_MAX) {
            ngx_ioa_error_set(err, "invalid_request", first,
                              "fields this hub does not know (\"%s\" is "
                              "one) may hold %d bytes in all",
                              first, NGX_IOA_LAUNCH_EXTRA_MAX);
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_launch_check(ngx_http_request_t *r, yajl_val doc,
    ngx_ioa_launch_in_t *in, ngx_ioa_error_t *err)
{
    yajl_val             v;
    ngx_ioa_loc_conf_t  *lcf;

    if (ngx_ioa_body_object(doc, err) != NGX_OK
        || ngx_ioa_launch_extra(r, doc, err) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* how long a goal may wait for its person: the operator's ceiling */
    lcf = ngx_ioa_loc_conf(r);
    v = ngx_ioa_json_get(doc, "input_timeout_s");

    if (v && YAJL_IS_INTEGER(v)
        && YAJL_GET_INTEGER(v) > (long long) lcf->goal_input_timeout_max)
    {
        ngx_ioa_error_set(err, "invalid_request", "input_timeout_s",
                          "\"input_timeout_s\" may be at most %T here "
                          "(ioa_goal_input_timeout_max)",
                          lcf->goal_input_timeout_max);
        return NGX_ERROR;
    }

    in->depth = -1;

    if (ngx_ioa_body_check(doc, ngx_ioa_launch_fields, 0, in, err) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a goal continuing a room (any "comm_id", null too) may leave its
     * words to cont_input */
    if (in->goal.len == 0 && ngx_ioa_json_get(doc, "comm_id") == NULL) {
        ngx_ioa_error_set(err, "invalid_request", "goal",
                          NGX_IOA_LAUNCH_GOAL_TEXT);
        return NGX_ERROR;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_launch_fields, 1, in, err) != NGX_OK) {
        return NGX_ERROR;
    }

    v = in->cont_input;

    if (v && !YAJL_IS_STRING(v)
        && (!YAJL_IS_OBJECT(v)
            || !YAJL_IS_STRING(ngx_ioa_json_get(v, "content"))))
    {
        ngx_ioa_error_set(err, "invalid_request", "cont_input",
                          "\"cont_input\" must be a string, "
                          "{\"sender\",\"content\"}, or null");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * Who the goal's person is: a member of the goal's room who is no agent of
 * the team, posts into it like any member (WebSocket, or the HTTP
 * transport) and is listened to by the coordinator.  With authentication
 * that is the launcher, the token's subject; a "person" naming anyone else
 * is refused, since the launcher would put someone else into a room.  In
 * open mode the body may name one; without it the goal has none ("").
 */

static ngx_int_t
ngx_ioa_launch_person(ngx_http_request_t *r, ngx_str_t *named,
    ngx_str_t *person, ngx_ioa_error_t *err)
{
    ngx_ioa_identity_t  *id;

    ngx_str_null(person);

    id = ngx_ioa_rest_identity(r);

    if (id == NULL || id->open) {
        *person = *named;
        return NGX_OK;
    }

    if (named->len
        && ngx_ioa_auth_allows(id, 0, named, err) != NGX_OK)
    {
        err->field.data = (u_char *) "person";
        err->field.len = sizeof("person") - 1;
        return NGX_ERROR;
    }

    *person = id->sub;

    return NGX_OK;
}


static void
ngx_ioa_launch_stored(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_goal_ctx_t  *g;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    g = ngx_ioa_rest_get_data(r);

    /*
     * The goal index (GET /goals, /metrics) hears of it before any worker
     * can, and admits it: goal_index.lua counts the launcher's goals in
     * flight and refuses one past ioa_limit_goals_in_flight in the same
     * call, so launches racing on several instances cannot both take the
     * last place.  This is why the launch waits for the index's answer.
     */

    if (ngx_ioa_goal_index(r, g, &g->goal_id, "queued") != NGX_OK) {
        ngx_ioa_launch_forget(g);
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_launch_admitted(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_args_t       a;
    ngx_ioa_goal_ctx_t  *g;

    g = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_launch_forget(g);
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
        && reply->element[0]->type == REDIS_REPLY_INTEGER
        && reply->element[0]->integer == -1)
    {
        /* no worker ever saw it: its record goes, nothing is queued; the
         * refusal waits for the DEL, so that a launcher told "no goal"
         * finds none (the same connection would order it anyway, another
         * one, or another instance's, would not) */

        g->in_flight = reply->element[1]->type == REDIS_REPLY_INTEGER
                       ? reply->element[1]->integer : 0;

        ngx_ioa_args_init(&a);
        ngx_ioa_args_cstr(&a, "DEL");
        ngx_ioa_args_str(&a, &g->meta);

        if (ngx_ioa_rest_command_args(r, ngx_ioa_launch_refused, &a)
            != NGX_OK)
        {
            ngx_ioa_launch_refused(r, NULL);
        }

        return;
    }

    /* the group may be gone with a Redis that lost its data; a launch is
     * rare enough to make sure of it every time, on the same connection
     * and so before the job */
    ngx_ioa_goal_ensure_group();

    /* the job: any worker of the "workers" group takes it */

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "XADD");
    ngx_ioa_key(&a, NGX_IOA_KEY_JOBS);
    ngx_ioa_args_cstr(&a, "*");
    ngx_ioa_args_cstr(&a, "goal_id");
    ngx_ioa_args_str(&a, &g->goal_id);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_launch_queued, &a) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


/* past ioa_limit_goals_in_flight, its record gone (or Redis away: the
 * refusal stands either way) */

static void
ngx_ioa_launch_refused(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_error_t      err;
    ngx_ioa_goal_ctx_t  *g;

    g = ngx_ioa_rest_get_data(r);

    ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_GOALS_IN_FLIGHT, 1);

    ngx_ioa_error_set(&err, "too_many_goals", NULL,
                      "\"%V\" has %L goals in flight, as many as "
                      "ioa_limit_goals_in_flight allows; no goal was "
                      "queued, launch again once one of them ends",
                      &g->launcher, g->in_flight);

    ngx_ioa_finish(r, ngx_ioa_send_retry(r, NGX_HTTP_TOO_MANY_REQUESTS,
                                         NGX_IOA_GOALS_RETRY, &err));
}


/* a launch that was not queued leaves no record behind (no answer is
 * waited for: a record left by a lost DEL names a goal nobody was told
 * of, and no worker ever takes it) */

static void
ngx_ioa_launch_forget(ngx_ioa_goal_ctx_t *g)
{
    ngx_ioa_args_t  a;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "DEL");
    ngx_ioa_args_str(&a, &g->meta);

    (void) ngx_ioa_redis_command_args(NULL, NULL, &a);
}


static void
ngx_ioa_launch_queued(ngx_http_request_t *r, redisReply *reply)
{
    u_char              *p;
    ngx_str_t            out;
    ngx_table_elt_t     *h;
    ngx_ioa_goal_ctx_t  *g;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    g = ngx_ioa_rest_get_data(r);

    if (g->wait) {
        if (ngx_ioa_goal_wait(r, g) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    out.data = ngx_pnalloc(r->pool, 256);
    if (out.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_sprintf(out.data,
                    "{\"goal_id\":\"%V\",\"state\":\"queued\","
                    "\"status_url\":\"/goals/%V\","
                    "\"events_url\":\"/goals/%V/events\","
                    "\"cancel_url\":\"/goals/%V/cancel\"}",
                    &g->goal_id, &g->goal_id, &g->goal_id, &g->goal_id);
    out.len = p - out.data;

    h = ngx_list_push(&r->headers_out.headers);
    if (h) {
        h->hash = 1;
        ngx_str_set(&h->key, "Location");
        h->value.data = ngx_pnalloc(r->pool, sizeof("/goals/") - 1 + 32);

        if (h->value.data == NULL) {
            h->hash = 0;

        } else {
            h->value.len = ngx_sprintf(h->value.data, "/goals/%V",
                                       &g->goal_id) - h->value.data;
        }
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_ACCEPTED, &out));
}


/* the blocking form: a follower of the goal's feed that answers the request
 * when the final state event arrives */

static ngx_int_t
ngx_ioa_goal_wait(ngx_http_request_t *r, ngx_ioa_goal_ctx_t *g)
{
    ngx_str_t             feed;
    ngx_ioa_goal_wait_t  *w;

    w = ngx_pcalloc(r->pool, sizeof(ngx_ioa_goal_wait_t));
    if (w == NULL
        || ngx_ioa_goal_feed_name(r->pool, &g->goal_id, &feed) != NGX_OK)
    {
        return NGX_ERROR;
    }

    w->goal_id = g->goal_id;
    w->wait.message = ngx_ioa_goal_wait_message;
    w->wait.closed = ngx_ioa_goal_wait_closed;
    w->wait.data = w;

    return ngx_ioa_wait_start(&w->wait, r, &feed, NULL, 0);
}


static ngx_int_t
ngx_ioa_goal_wait_message(ngx_ioa_wait_t *wait, ngx_ioa_msg_t *m)
{
    ngx_ioa_goal_wait_t *w = wait->data;

    yajl_val             ev, v;
    ngx_str_t            state, s;
    ngx_uint_t           status;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_error_t      err;
    ngx_http_request_t  *r;

    r = wait->request;

    ev = ngx_ioa_json_parse(r->pool, m->payload, m->payload_len, 64, &err);

    if (ev == NULL
        || (v = ngx_ioa_json_get(ev, "event")) == NULL
        || ngx_ioa_json_string(v, &s) != NGX_OK
        || s.len != 5 || ngx_strncmp(s.data, "state", 5) != 0
        || (v = ngx_ioa_json_get(ev, "state")) == NULL
        || ngx_ioa_json_string(v, &state) != NGX_OK)
    {
        return NGX_OK;
    }

    if (!(state.len == 9 && ngx_strncmp(state.data, "concluded", 9) == 0)
        && !(state.len == 6 && ngx_strncmp(state.data, "failed", 6) == 0)
        && !(state.len == 9 && ngx_strncmp(state.data, "cancelled", 9) == 0))
    {
        return NGX_OK;
    }

    ngx_ioa_wait_stop(wait);

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto finish;
    }

    status = NGX_HTTP_OK;

    if (state.data[0] == 'c' && state.data[1] == 'o') {
        /* IoA's answer: [comm_id, conclusion] */
        ngx_ioa_jbuf_byte(&b, '[');

        v = ngx_ioa_json_get(ev, "comm_id");

        if (v) {
            ngx_ioa_jbuf_val(&b, v);

        } else {
            ngx_ioa_jbuf_literal(&b, "null");
        }

        ngx_ioa_jbuf_byte(&b, ',');

        v = ngx_ioa_json_get(ev, "conclusion");

        if (v) {
            ngx_ioa_jbuf_val(&b, v);

        } else {
            ngx_ioa_jbuf_literal(&b, "null");
        }

        ngx_ioa_jbuf_byte(&b, ']');

    } else {
        v = ngx_ioa_json_get(ev, "error");

        if (v == NULL || ngx_ioa_json_string(v, &s) != NGX_OK) {
            ngx_str_set(&s, "");
        }

        ngx_ioa_error_set(&err, state.data[0] == 'f' ? "goal_failed"
                                                     : "goal_cancelled",
                          NULL, "goal %V %V%s%V", &w->goal_id, &state,
                          s.len ? ": " : "", &s);
        ngx_ioa_error_json(r->pool, &err, NULL, &s);
        ngx_ioa_jbuf_raw(&b, s.data, s.len);
        status = state.data[0] == 'f' ? NGX_HTTP_BAD_GATEWAY : NGX_HTTP_OK;
    }

finish:

    ngx_ioa_finish(r, status == NGX_HTTP_INTERNAL_SERVER_ERROR
                      ? NGX_HTTP_INTERNAL_SERVER_ERROR
                      : ngx_ioa_send_jbuf(r, status, &b));

    return NGX_OK;
}


static void
ngx_ioa_goal_wait_closed(ngx_ioa_wait_t *wait, const char *why)
{
    ngx_ioa_goal_wait_t *w = wait->data;

    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "internal_error", NULL,
                      "waiting for goal %V failed: %s", &w->goal_id,
                      why ? why : "");
    ngx_ioa_finish(wait->request,
                   ngx_ioa_send_error(wait->request,
                                      NGX_HTTP_INTERNAL_SERVER_ERROR, &err));
}


/* GET /goals/{id} */

ngx_int_t
ngx_ioa_goal_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    size_t               n;
    ngx_str_t            key;
    ngx_ioa_args_t       a;

    if (ngx_ioa_goal_id_valid(id) != NGX_OK) {
        return ngx_ioa_goal_bad_id(r);
    }

    if (ngx_http_discard_request_body(r) != NGX_OK
        || ngx_ioa_key_goal_alloc(r->pool, id, NGX_IOA_GOAL_META, &key)
           != NGX_OK
        || ngx_ioa_goal_req(r, id, who) == NULL)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "HMGET");
    ngx_ioa_args_str(&a, &key);

    for (n = 0; ngx_ioa_goal_fields[n].name; n++) {
        ngx_ioa_args_cstr(&a, ngx_ioa_goal_fields[n].name);
    }

    if (ngx_ioa_rest_command_args(r, ngx_ioa_goal_read, &a) != NGX_OK) {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_goal_read(ngx_http_request_t *r, redisReply *reply)
{
    size_t               i;
    ngx_str_t            s, name;
    redisReply          *e;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_goal_req_t  *gr;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->elements == 0 || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
        return;
    }

    gr = ngx_ioa_rest_get_data(r);

    for (i = 0; ngx_ioa_goal_fields[i].name; i++) {
        if (gr->owner.len == 0
            || ngx_strcmp(ngx_ioa_goal_fields[i].name, "launched_by") != 0
            || i >= reply->elements)
        {
            continue;
        }

        e = reply->element[i];

        if (e->type != REDIS_REPLY_STRING || e->len != gr->owner.len
            || ngx_strncmp(e->str, gr->owner.data, e->len) != 0)
        {
            ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
            return;
        }
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 512) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_byte(&b, '{');

    for (i = 0; i < reply->elements && ngx_ioa_goal_fields[i].name; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        name.data = (u_char *) ngx_ioa_goal_fields[i].name;
        name.len = ngx_strlen(ngx_ioa_goal_fields[i].name);
        ngx_ioa_jbuf_str(&b, &name);
        ngx_ioa_jbuf_byte(&b, ':');

        if (reply->element[i]->type != REDIS_REPLY_STRING
            || (reply->element[i]->len == 0 && i > 1))
        {
            ngx_ioa_jbuf_literal(&b, "null");
            continue;
        }

        s.data = (u_char *) reply->element[i]->str;
        s.len = reply->element[i]->len;

        /* numbers stay numbers */
        if (ngx_ioa_goal_fields[i].number
            && ngx_atoi(s.data, s.len) != NGX_ERROR)
        {
            ngx_ioa_jbuf_raw(&b, s.data, s.len);
            continue;
        }

        ngx_ioa_jbuf_str(&b, &s);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


/* GET /goals/{id}/events: the goal's feed as SSE */

ngx_int_t
ngx_ioa_goal_events_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    ngx_str_t            key;
    ngx_ioa_args_t       a;
    ngx_ioa_goal_req_t  *gr;

    if (ngx_ioa_goal_id_valid(id) != NGX_OK) {
        return ngx_ioa_goal_bad_id(r);
    }

    gr = ngx_ioa_goal_req(r, id, who);
    if (gr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (gr->owner.len == 0) {
        return ngx_ioa_goal_follow(r, id, who);
    }

    /* only its launcher follows a goal: who that is, first */

    if (ngx_ioa_key_goal_alloc(r->pool, id, NGX_IOA_GOAL_META, &key)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "HGET");
    ngx_ioa_args_str(&a, &key);
    ngx_ioa_args_cstr(&a, "launched_by");

    if (ngx_ioa_rest_command_args(r, ngx_ioa_goal_events_owner, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_goal_events_owner(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_goal_req_t  *gr;

    gr = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type != REDIS_REPLY_STRING) {
        ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
        return;
    }

    if (reply->len != gr->owner.len
        || ngx_strncmp(reply->str, gr->owner.data, reply->len) != 0)
    {
        ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
        return;
    }

    /* the stream keeps the module's context slot for itself from here (the
     * REST context's cleanup holds its own pointer) */
    ngx_ioa_set_ctx(r, NULL);

    ngx_ioa_finish(r, ngx_ioa_goal_follow(r, &gr->goal_id, gr->who));
}


/* the goal's feed, "goal-<id>", as an SSE stream */

static ngx_int_t
ngx_ioa_goal_follow(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    ngx_str_t  name;

    if (ngx_ioa_goal_feed_name(r->pool, id, &name) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_ioa_inbox_handler(r, &name, NGX_IOA_CLIENT_FOLLOWER, who);
}


/* the stream a goal's followers read: "goal-<id>", the room of its feed */

ngx_int_t
ngx_ioa_goal_feed_name(ngx_pool_t *pool, ngx_str_t *id, ngx_str_t *name)
{
    name->data = ngx_pnalloc(pool, sizeof("goal-") - 1 + id->len);
    if (name->data == NULL) {
        return NGX_ERROR;
    }

    name->len = ngx_sprintf(name->data, "goal-%V", id) - name->data;

    return NGX_OK;
}


/*
 * Whose goals a caller may read, follow, cancel and post into: in open mode
 * and for an administrator anyone's (owner empty), otherwise only those it
 * launched (the goal's launched_by is the token's subject).
 */

void
ngx_ioa_goal_owner(ngx_ioa_identity_t *who, ngx_str_t *owner)
{
    ngx_str_null(owner);

    if (who && !who->open && !(who->scopes & NGX_IOA_SCOPE_ADMIN)) {
        *owner = who->sub;
    }
}


static ngx_ioa_goal_req_t *
ngx_ioa_goal_req(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    ngx_ioa_goal_req_t  *gr;

    gr = ngx_pcalloc(r->pool, sizeof(ngx_ioa_goal_req_t));
    if (gr == NULL) {
        return NULL;
    }

    /* id is the router's local variable (its bytes are the request's URI):
     * the reply comes long after it is gone, so it is kept here */
    gr->goal_id = *id;
    gr->who = who;
    ngx_ioa_goal_owner(who, &gr->owner);
    ngx_ioa_rest_set_data(r, gr);

    return gr;
}


/*
 * A goal that is not there, and one the caller may not see (another
 * launcher's), get the same answer, byte for byte: a launcher must not
 * learn that a goal id it guessed or saw in a log is live, nor when it
 * ends.  So each check of ownership comes right after the check of
 * existence (in goal_cancel.lua and goal_message.lua too, before the
 * goal's state is looked at) and both end here, in words that do not name
 * the id.
 */

static ngx_int_t
ngx_ioa_goal_unknown(ngx_http_request_t *r)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "unknown_goal", "goal_id", "no such goal");

    return ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err);
}


/* POST /goals/{id}/cancel */

ngx_int_t
ngx_ioa_goal_cancel_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    ngx_str_t            meta, control;
    ngx_ioa_args_t       a;
    ngx_ioa_goal_req_t  *gr;

    if (ngx_ioa_goal_id_valid(id) != NGX_OK) {
        return ngx_ioa_goal_bad_id(r);
    }

    gr = ngx_ioa_goal_req(r, id, who);

    if (gr == NULL
        || ngx_http_discard_request_body(r) != NGX_OK
        || ngx_ioa_key_goal_alloc(r->pool, id, NGX_IOA_GOAL_META, &meta)
           != NGX_OK
        || ngx_ioa_key_goal_alloc(r->pool, id, NGX_IOA_GOAL_CONTROL, &control)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &meta);
    ngx_ioa_args_str(&a, &control);
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, ngx_ioa_redis_cluster() ? "s" : "");
    ngx_ioa_args_str(&a, &gr->owner);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_CANCEL,
                                 ngx_ioa_goal_cancel_done, 1, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_goal_cancel_done(ngx_http_request_t *r, redisReply *reply)
{
    u_char              *p;
    ngx_str_t            code, text, out, *id;
    ngx_ioa_error_t      err;
    ngx_ioa_goal_req_t  *gr;

    gr = ngx_ioa_rest_get_data(r);
    id = &gr->goal_id;

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {
        if (reply && ((code.len == 6
                       && ngx_strncmp(code.data, "NOGOAL", 6) == 0)
                      || (code.len == 8
                          && ngx_strncmp(code.data, "NOTYOURS", 8) == 0)))
        {
            ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) {
        ngx_ioa_error_set(&err, "goal_ended", "goal_id",
                          "goal %V has already ended; nothing to cancel", id);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err));
        return;
    }

    /* as at launch: a lost write is mended by the worker, which indexes
     * the cancel when it sees it */
    (void) ngx_ioa_goal_index(NULL, NULL, id, "cancelling");

    out.data = ngx_pnalloc(r->pool, 128);
    if (out.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_sprintf(out.data, "{\"goal_id\":\"%V\",\"state\":\"cancelling\"}",
                    id);
    out.len = p - out.data;

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_ACCEPTED, &out));
}


/*
 * POST /goals/{id}/messages {"content"[, "sender"]}: a person joins the
 * conversation of a running goal (the goal's own person, launched_by, can
 * also post into its room like any member).  The message goes into the goal's inbox
 * (goal_message.lua); the coordinator reads it before its next decision,
 * quotes it in the room and acts on it: a request becomes more work, "stop"
 * or "conclude now" ends the goal with what it has (workers/worker/decide.c).
 * The sender is the token's subject; in open mode the body may name one
 * ("user" when it does not).
 */

ngx_int_t
ngx_ioa_goal_message_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who)
{
    ngx_ioa_goal_msg_t  *gm;

    if (ngx_ioa_goal_id_valid(id) != NGX_OK) {
        return ngx_ioa_goal_bad_id(r);
    }

    gm = ngx_pcalloc(r->pool, sizeof(ngx_ioa_goal_msg_t));
    if (gm == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* id's bytes are the request's URI, which outlives the body read */
    gm->goal_id = *id;

    if (who && !who->open) {
        gm->sender = who->sub;
    }

    ngx_ioa_goal_owner(who, &gm->owner);

    ngx_ioa_rest_set_data(r, gm);

    return ngx_ioa_read_body(r, ngx_ioa_goal_message_body);
}


/*
 * POST /goals/{goal_id}/messages' body.  "sender" is the body's only in
 * open mode (with a token it is the token's subject) and has no null.
 */

static ngx_ioa_body_field_t  ngx_ioa_goal_message_fields[] = {

    { "content", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED,
      1, NGX_IOA_GOAL_MESSAGE_MAX, NULL, NULL,
      "\"content\" must be a string of 1 to "
      ngx_value(NGX_IOA_GOAL_MESSAGE_MAX) " bytes",
      offsetof(ngx_ioa_goal_msg_t, content) },

    ngx_ioa_body_step,

    { "sender", NGX_IOA_BODY_NAME, 0, 0, 0, NULL, NULL,
      "\"sender\" must be a name as agents have",
      offsetof(ngx_ioa_goal_msg_t, sender) },

    ngx_ioa_body_null_field
};


static void
ngx_ioa_goal_message_body(ngx_http_request_t *r, ngx_str_t *body)
{
    yajl_val            doc;
    ngx_str_t           meta, inbox, control;
    ngx_ioa_args_t      a;
    ngx_ioa_error_t     err;
    ngx_ioa_goal_msg_t *gm;

    gm = ngx_ioa_rest_get_data(r);

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_goal_message_fields, 0, gm, &err)
        != NGX_OK)
    {
        goto invalid;
    }

    if (gm->sender.len == 0) {
        /* open mode: the body's, or IoA's "user" */
        ngx_str_set(&gm->sender, "user");

        if (ngx_ioa_body_check(doc, ngx_ioa_goal_message_fields, 1, gm, &err)
            != NGX_OK)
        {
            goto invalid;
        }
    }

    if (ngx_ioa_key_goal_alloc(r->pool, &gm->goal_id, NGX_IOA_GOAL_META,
                               &meta) != NGX_OK
        || ngx_ioa_key_goal_alloc(r->pool, &gm->goal_id, NGX_IOA_GOAL_INBOX,
                                  &inbox) != NGX_OK
        || ngx_ioa_key_goal_alloc(r->pool, &gm->goal_id, NGX_IOA_GOAL_CONTROL,
                                  &control)
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &meta);
    ngx_ioa_args_str(&a, &inbox);
    ngx_ioa_args_str(&a, &gm->sender);
    ngx_ioa_args_str(&a, &gm->content);
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, NGX_IOA_GOAL_INBOX_MAX);
    ngx_ioa_args_str(&a, &gm->owner);

    /* the goal's worker waits on this channel rather than polling */
    ngx_ioa_args_str(&a, &control);
    ngx_ioa_args_cstr(&a, ngx_ioa_redis_cluster() ? "s" : "");

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_MESSAGE,
                                 ngx_ioa_goal_message_done, 2, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }

    return;

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


static void
ngx_ioa_goal_message_done(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t            code, text;
    ngx_ioa_error_t      err;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_goal_msg_t  *gm;

    gm = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {
        if (reply && ((code.len == 6
                       && ngx_strncmp(code.data, "NOGOAL", 6) == 0)
                      || (code.len == 8
                          && ngx_strncmp(code.data, "NOTYOURS", 8) == 0)))
        {
            ngx_ioa_finish(r, ngx_ioa_goal_unknown(r));
            return;
        }

        if (reply && code.len == 5 && ngx_strncmp(code.data, "ENDED", 5) == 0)
        {
            ngx_ioa_error_set(&err, "goal_ended", "goal_id",
                              "goal %V is %V; nobody is left to read the "
                              "message", &gm->goal_id, &text);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err));
            return;
        }

        if (reply && code.len == 4 && ngx_strncmp(code.data, "FULL", 4) == 0)
        {
            ngx_ioa_error_set(&err, "inbox_full", "goal_id",
                              "goal %V already holds %s messages; none was "
                              "added", &gm->goal_id, NGX_IOA_GOAL_INBOX_MAX);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err));
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type != REDIS_REPLY_STRING
        || ngx_ioa_jbuf_init(&b, r->pool, 128) != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"goal_id\":");
    ngx_ioa_jbuf_str(&b, &gm->goal_id);
    ngx_ioa_jbuf_literal(&b, ",\"message_id\":\"");
    ngx_ioa_jbuf_raw(&b, (u_char *) reply->str, reply->len);
    ngx_ioa_jbuf_literal(&b, "\",\"sender\":");
    ngx_ioa_jbuf_str(&b, &gm->sender);
    ngx_ioa_jbuf_byte(&b, '}');

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_ACCEPTED, &b));
}


/* the job group exists before the first goal, starting at the beginning of
 * the Stream, so no goal queued before any worker started is skipped; made
 * when the command connection comes up and again before each job */

/* every node that comes up is asked for the workers' consumer group: the
 * queue's node, after a restart or a failover, may not have it yet */

static void
ngx_ioa_goal_node_up(ngx_ioa_redis_node_t *node)
{
    ngx_ioa_goal_ensure_group();
}


static const ngx_ioa_redis_hooks_t  ngx_ioa_goal_redis_hooks = {
    "goals",
    ngx_ioa_goal_node_up,
    NULL                                   /* cmd_ready */
};


ngx_int_t
ngx_ioa_goal_init_process(ngx_cycle_t *cycle)
{
    return ngx_ioa_redis_add_hooks(&ngx_ioa_goal_redis_hooks);
}


void
ngx_ioa_goal_ensure_group(void)
{
    ngx_ioa_args_t  a;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "XGROUP");
    ngx_ioa_args_cstr(&a, "CREATE");
    ngx_ioa_key(&a, NGX_IOA_KEY_JOBS);
    ngx_ioa_args_cstr(&a, "workers");
    ngx_ioa_args_cstr(&a, "0");
    ngx_ioa_args_cstr(&a, "MKSTREAM");

    /* BUSYGROUP (it exists) is the usual answer and is fine */
    (void) ngx_ioa_redis_command_args(NULL, NULL, &a);
}


/* a goal id as the hub makes them: 32 hex digits */

ngx_int_t
ngx_ioa_goal_id_valid(ngx_str_t *id)
{
    size_t  i;

    if (id->len != 32) {
        return NGX_DECLINED;
    }

    for (i = 0; i < 32; i++) {
        if (!((id->data[i] >= '0' && id->data[i] <= '9')
              || (id->data[i] >= 'a' && id->data[i] <= 'f')))
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_goal_bad_id(ngx_http_request_t *r)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "invalid_request", "goal_id",
                      "a goal id is 32 hexadecimal digits");

    return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
}


/*
 * goal_index.lua: the goal's state in the hub's goal index, P{goals}:...
 * (its keys and rules are described there).  nginx writes the two states
 * it sets itself, "queued" and "cancelling"; the workers write the rest.
 * The index only moves forward, so this write may arrive after a worker's
 * on a Cluster (other slots, other connections) and changes nothing then.
 * A launch (r and g) is admitted or refused there and waits for the
 * answer (ngx_ioa_launch_admitted); a cancel does not wait.
 */

static ngx_int_t
ngx_ioa_goal_index(ngx_http_request_t *r, ngx_ioa_goal_ctx_t *g,
    ngx_str_t *id, const char *state)
{
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_GOALS);
    ngx_ioa_args_str(&a, id);
    ngx_ioa_args_cstr(&a, state);
    ngx_ioa_args_cstr(&a, "0");         /* only a worker ends a goal */

    if (g == NULL) {
        return ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_GOAL_INDEX, NULL, NULL,
                                         1, &a)
               ? NGX_OK : NGX_ERROR;
    }

    ngx_ioa_args_int(&a, g->created);
    ngx_ioa_args_buf(&a, g->goal.len ? g->goal.data : (u_char *) "",
                     g->goal.len);
    ngx_ioa_args_buf(&a, g->person.len ? g->person.data : (u_char *) "",
                     g->person.len);
    ngx_ioa_args_cstr(&a, "");          /* no parent */
    ngx_ioa_args_fmt(&a, "%ui", mcf->goals_in_flight);
    ngx_ioa_args_str(&a, &g->launcher);

    return ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_INDEX,
                                    ngx_ioa_launch_admitted, 1, &a);
}
