
/*
 * Copyright (C) ioa authors
 *
 * The HTTP transport, for agents that cannot hold a WebSocket (serverless
 * functions, plain HTTP clients) and for observers:
 *
 *   POST /agents/{name}/messages   one envelope in, {"id","comm_id"} out;
 *                                  the same post.lua as WebSocket agents,
 *                                  so membership, order and ids are the same
 *   GET  /agents/{name}/inbox      Server-Sent Events: every envelope of
 *                                  the agent's rooms, as "data:" lines
 *   GET  /chatlist                 the observer feed as SSE
 *
 * An inbox is a client like a WebSocket agent (ngx_ioa_client.c), so catch-up,
 * hold-back and resume are the same code.  What differs is the event id:
 * an SSE client can only hand back one string, Last-Event-ID, so each event
 * carries the agent's whole position, "<comm_id>:<id>,<comm_id>:<id>", which
 * resumes every room exactly; an agent in many rooms gets a cursor kept in
 * Redis instead, "~<cursor>.<version>+<changes>" (ngx_ioa_position.c),
 * which is read back before the stream starts.
 *
 * With "ioa_auth jwt" a stream ends when its token expires, after a warning
 * event (ngx_ioa_expiry.c): an SSE client cannot send a fresh token, so it
 * reconnects with one and with Last-Event-ID, losing nothing.  A facade's
 * stream (ngx_ioa_sse_follow(), A2A's) keeps to its caller's token too.
 *
 * Output goes through nginx's filter chain (chunked on HTTP/1.1, DATA
 * frames on HTTP/2) with a flush per event-loop turn.  Every event is an
 * owned heap buffer freed once nginx has written it, and the bytes waiting
 * are bounded by ioa_send_queue_limit like a WebSocket's.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"


#define NGX_IOA_SSE_KEEPALIVE  15000


/* the "event" of ngx_ioa_sse_queue() that makes its data a comment */
static const char  ngx_ioa_sse_comment[] = "";


typedef struct ngx_ioa_sse_out_s  ngx_ioa_sse_out_t;

struct ngx_ioa_sse_out_s {
    ngx_chain_t               cl;
    ngx_buf_t                 buf;
    size_t                    size;
    ngx_ioa_sse_out_t        *next;
    ngx_uint_t                passed;    /* handed to the filter chain */
};


struct ngx_ioa_sse_s {
    ngx_ioa_client_t          client;    /* must be first */
    ngx_http_request_t       *request;
    ngx_ioa_sse_out_t        *out;
    ngx_ioa_sse_out_t       **out_tail;
    ngx_ioa_sse_out_t        *sent;      /* written, still seen by filters */
    size_t                    out_bytes;
    ngx_event_t               keepalive;
    ngx_event_t               flush;
    ngx_event_t               done;      /* deferred finalization */
    ngx_int_t                 rc;
    unsigned                  finalized:1;
    ngx_queue_t               streams;   /* ngx_ioa_sse_streams */
    ngx_ioa_position_t       *position;  /* the cursor, if one is needed */
    ngx_str_t                *first;     /* a facade's first event */
    ngx_ioa_redis_req_t      *load;      /* reading a cursor back */
    ngx_ioa_sse_rewrite_pt    rewrite;   /* a facade's follower */
    ngx_ioa_sse_closing_pt    closing;
    void                     *rewrite_data;
    ngx_ioa_identity_t       *who;       /* its token's expiry counts */
    unsigned                  attached:1;
};


typedef struct {
    ngx_str_t                 name;
    ngx_str_t                 comm_id;
} ngx_ioa_http_post_t;


static void ngx_ioa_http_post_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_http_post_reply(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_sse_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_sse_send_text(ngx_ioa_client_t *cl, ngx_str_t *s);
static void ngx_ioa_sse_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason);
static void ngx_ioa_sse_positioned(ngx_ioa_client_t *cl);
static ngx_int_t ngx_ioa_sse_queue(ngx_ioa_sse_t *sse, ngx_str_t *id,
    u_char *data, size_t len, const char *event);
static void ngx_ioa_sse_flush_handler(ngx_event_t *ev);
static void ngx_ioa_sse_write_handler(ngx_http_request_t *r);
static void ngx_ioa_sse_keepalive_handler(ngx_event_t *ev);
static ngx_int_t ngx_ioa_sse_flush(ngx_ioa_sse_t *sse);
static void ngx_ioa_sse_finalize(ngx_ioa_sse_t *sse, ngx_int_t rc);
static void ngx_ioa_sse_done_handler(ngx_event_t *ev);
static void ngx_ioa_sse_watch_handler(ngx_event_t *ev);
static void ngx_ioa_sse_cleanup(void *data);
static ngx_int_t ngx_ioa_sse_start(ngx_ioa_sse_t *sse);
static ngx_int_t ngx_ioa_sse_resume_cursor(ngx_ioa_sse_t *sse,
    ngx_str_t *id, ngx_ioa_error_t *err);
static void ngx_ioa_sse_cursor_loaded(redisReply *reply, void *data);
static void ngx_ioa_sse_load_cleanup(void *data);


/*
 * nginx's graceful shutdown (reload, QUIT) waits only for timers, not for
 * open responses, so a worker would drop its event streams mid-body.  While
 * streams are open, one watch timer that nginx does wait for checks every
 * second whether the worker is shutting down, and if so ends every stream
 * with a close event first; then the worker may go.
 */
static ngx_queue_t          ngx_ioa_sse_streams;
static ngx_event_t          ngx_ioa_sse_watch;
static ngx_connection_t     ngx_ioa_sse_watch_conn;


static size_t ngx_ioa_sse_queued(ngx_ioa_client_t *cl);


static ngx_ioa_transport_t  ngx_ioa_sse_transport = {
    ngx_ioa_sse_send,
    ngx_ioa_sse_send_text,
    ngx_ioa_sse_close,
    ngx_ioa_sse_positioned,
    ngx_ioa_sse_queued,
    NGX_IOA_VIA_SSE
};


/* POST /agents/{name}/messages */

ngx_int_t
ngx_ioa_agent_post_handler(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_ioa_error_t       err;
    ngx_ioa_http_post_t  *hp;
    u_char                why[NGX_IOA_NAME_WHY_LEN];

    if (ngx_ioa_name_check(name, why) != NGX_OK) {
        ngx_ioa_error_set(&err, "invalid_name", "agent_name",
                          "agent name \"%V\" is not a name: %s", name, why);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    hp = ngx_pcalloc(r->pool, sizeof(ngx_ioa_http_post_t));
    if (hp == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hp->name = *name;

    ngx_ioa_rest_set_data(r, hp);

    return ngx_ioa_read_body(r, ngx_ioa_http_post_body);
}


static void
ngx_ioa_http_post_body(ngx_http_request_t *r, ngx_str_t *body)
{
    ngx_int_t             rc;
    ngx_msec_t            retry;
    ngx_ioa_error_t       err;
    ngx_ioa_envelope_t    env;
    ngx_ioa_loc_conf_t   *lcf;
    ngx_ioa_http_post_t  *hp;
    ngx_ioa_redis_req_t  *req;

    hp = ngx_ioa_rest_get_data(r);
    lcf = ngx_ioa_loc_conf(r);

    ngx_ioa_stat_add(NGX_IOA_STAT_RECEIVED_BYTES + NGX_IOA_VIA_HTTP,
                     body->len);

    rc = ngx_ioa_envelope_read(r->pool, body->data, body->len, &hp->name,
                               lcf, &env, &err);

    if (rc == NGX_OK && env.is_control) {
        ngx_ioa_error_set(&err, "invalid_envelope", "op",
                          "control frames are for WebSocket connections; "
                          "resume an inbox with Last-Event-ID");
        rc = NGX_ERROR;
    }

    if (rc != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
        return;
    }

    hp->comm_id = env.comm_id;

    if (ngx_ioa_limit_post(&hp->name, &env.comm_id, &retry, &err) != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_finish(r, ngx_ioa_send_retry(r, NGX_HTTP_TOO_MANY_REQUESTS,
                                             retry, &err));
        return;
    }

    req = ngx_ioa_post_send(&hp->name, &env, ngx_ioa_http_post_reply, r);

    if (req == NULL) {
        ngx_str_set(&err.code, "redis_unavailable");
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        return;
    }

    /* Redis always answers or times out, and the request stays alive until
     * then (it is only finished here) */
}


static void
ngx_ioa_http_post_reply(redisReply *reply, void *data)
{
    ngx_http_request_t *r = data;

    u_char               *p;
    ngx_str_t             out;
    ngx_msec_t            retry;
    ngx_uint_t            status;
    ngx_ioa_error_t       err;
    ngx_connection_t     *c;
    ngx_ioa_http_post_t  *hp;

    hp = ngx_ioa_rest_get_data(r);
    c = r->connection;

    status = ngx_ioa_post_result(reply, &hp->name, &hp->comm_id, &err,
                                 &retry);

    if (status != NGX_HTTP_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_finish(r, ngx_ioa_send_answer(r, status, retry, &err));
        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_POSTED + NGX_IOA_VIA_HTTP, 1);

    out.data = ngx_pnalloc(r->pool, 64 + reply->len + hp->comm_id.len);
    if (out.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        ngx_http_run_posted_requests(c);
        return;
    }

    p = ngx_sprintf(out.data, "{\"id\":\"%*s\",\"comm_id\":\"%V\"}",
                    reply->len, reply->str, &hp->comm_id);
    out.len = p - out.data;

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
    ngx_http_run_posted_requests(c);
}


/* GET /agents/{name}/inbox and GET /chatlist */

ngx_int_t
ngx_ioa_inbox_handler(ngx_http_request_t *r, ngx_str_t *name,
    ngx_ioa_client_kind_e kind, ngx_ioa_identity_t *id)
{
    ngx_int_t             rc;
    ngx_str_t             v;
    ngx_ioa_sse_t        *sse;
    ngx_ioa_error_t       err;
    ngx_table_elt_t      *h;
    ngx_ioa_loc_conf_t   *lcf;
    u_char                why[NGX_IOA_NAME_WHY_LEN];

    lcf = ngx_ioa_loc_conf(r);

    if (kind == NGX_IOA_CLIENT_AGENT
        && ngx_ioa_name_check(name, why) != NGX_OK)
    {
        ngx_ioa_error_set(&err, "invalid_name", "agent_name",
                          "agent name \"%V\" is not a name: %s", name, why);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sse = ngx_pcalloc(r->pool, sizeof(ngx_ioa_sse_t));
    if (sse == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sse->request = r;
    sse->out_tail = &sse->out;
    sse->who = id;

    ngx_ioa_set_ctx(r, sse);

    sse->client.kind = kind;
    sse->client.transport = &ngx_ioa_sse_transport;
    sse->client.data = sse;
    sse->client.pool = r->pool;
    sse->client.log = r->connection->log;
    sse->client.lcf = lcf;
    sse->client.echo = 1;
    ngx_queue_init(&sse->client.links);

    if (name->len) {
        sse->client.name.data = ngx_pstrdup(r->pool, name);
        if (sse->client.name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        sse->client.name.len = name->len;
    }

    if (kind == NGX_IOA_CLIENT_FOLLOWER) {
        /* name is the stream to follow, e.g. "goal-<id>" */
        sse->client.follow = sse->client.name;
    }

    /* resume: Last-Event-ID (what EventSource sends by itself), or the
     * same query arguments as a WebSocket */

    h = ngx_ioa_header_in(r, "Last-Event-ID");

    if (h && h->value.len && kind == NGX_IOA_CLIENT_AGENT
        && h->value.data[0] == '~')
    {
        /* a cursor: read back from Redis, then the stream starts */
        rc = ngx_ioa_sse_resume_cursor(sse, &h->value, &err);

        if (rc == NGX_DONE) {
            r->main->count++;
            return NGX_DONE;
        }

        if (rc != NGX_OK) {
            err.field.data = (u_char *) "Last-Event-ID";
            err.field.len = sizeof("Last-Event-ID") - 1;
            return ngx_ioa_send_error(r, rc == NGX_DECLINED
                                         ? NGX_HTTP_BAD_REQUEST
                                         : NGX_HTTP_SERVICE_UNAVAILABLE,
                                      &err);
        }

    } else if (h && h->value.len && kind != NGX_IOA_CLIENT_OBSERVER) {
        if (ngx_ioa_client_parse_resume(&sse->client, &h->value, &err)
            != NGX_OK)
        {
            err.field.data = (u_char *) "Last-Event-ID";
            err.field.len = sizeof("Last-Event-ID") - 1;
            return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
        }
    }

    if (ngx_http_arg(r, (u_char *) "since", 5, &v) == NGX_OK) {
        if (ngx_ioa_parse_sid(v.data, v.len, &sse->client.since) != NGX_OK) {
            ngx_ioa_error_set(&err, "bad_option", "since",
                              "\"since\" must be a Stream id such as "
                              "1700000000000-0");
            return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
        }

        sse->client.has_since = 1;
    }

    if (ngx_http_arg(r, (u_char *) "resume", 6, &v) == NGX_OK
        && ngx_ioa_client_parse_resume(&sse->client, &v, &err) != NGX_OK)
    {
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    return ngx_ioa_sse_start(sse);
}


/*
 * A follower stream whose events a protocol facade writes (ngx_ioa_a2a.c):
 * every entry of the followed stream goes to rewrite(), which queues what
 * it makes of it with ngx_ioa_sse_event() (nothing, one event or several)
 * and ends the stream with ngx_ioa_sse_end() when it is over (and then
 * returns NGX_ERROR: the client is gone).  When the hub itself ends the
 * stream (shutting down, a reader too slow), closing() queues the facade's
 * last word in its own protocol instead of our "ioa" event, and keepalives
 * are SSE comments: a facade's client may take every event for its own.
 * So are our own frames (an error, the token_expiring warning): a comment
 * ": {"op":"error",...}" that a person reading the wire sees and a
 * facade's client skips.  who is the caller's identity: its token's "exp"
 * ends the stream as it ends an inbox (ngx_ioa_expiry.c), with closing()
 * told so (expired).  first, if given, is the first event; since, if
 * given, the position the stream resumes after (else its beginning).  An
 * empty stream name sends the first event and ends.  Called from a step of
 * the request (its body read, or an endpoint called): the caller finishes
 * the request with what this returns, NGX_DONE while the stream runs.
 */

ngx_int_t
ngx_ioa_sse_follow(ngx_http_request_t *r, ngx_str_t *stream,
    ngx_ioa_sid_t *since, ngx_ioa_identity_t *who,
    ngx_ioa_sse_rewrite_pt rewrite, ngx_ioa_sse_closing_pt closing,
    void *data, ngx_str_t *first)
{
    ngx_ioa_sse_t  *sse;

    sse = ngx_pcalloc(r->pool, sizeof(ngx_ioa_sse_t));
    if (sse == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sse->request = r;
    sse->out_tail = &sse->out;
    sse->rewrite = rewrite;
    sse->closing = closing;
    sse->rewrite_data = data;
    sse->who = who;

    /* the stream keeps the module's context slot for itself from here
     * (the REST context's cleanup holds its own pointer) */
    ngx_ioa_set_ctx(r, sse);

    ngx_ioa_client_follower(&sse->client, r, &ngx_ioa_sse_transport, sse,
                            stream);

    if (since) {
        sse->client.since = *since;
        sse->client.has_since = 1;
    }

    sse->first = first;

    return ngx_ioa_sse_start(sse);
}


/* one event of a facade's stream: "id: <id>" (if any) and its data */

ngx_int_t
ngx_ioa_sse_event(ngx_ioa_sse_t *sse, ngx_str_t *id, ngx_str_t *data)
{
    if (sse->finalized) {
        return NGX_ERROR;
    }

    return ngx_ioa_sse_queue(sse, id, data->data, data->len, NULL);
}


/* the facade's stream is over: what is queued is written, then the end */

void
ngx_ioa_sse_end(ngx_ioa_sse_t *sse)
{
    ngx_ioa_sse_finalize(sse, NGX_OK);
}


/*
 * Last-Event-ID "~<cursor>.<version>+<changes>": the changes are this
 * client's own, the version's position is read back (position_load.lua).
 * NGX_DONE while Redis works (the stream starts in the reply handler),
 * NGX_DECLINED for an id that is malformed, NGX_ERROR without Redis.
 */

static ngx_int_t
ngx_ioa_sse_resume_cursor(ngx_ioa_sse_t *sse, ngx_str_t *id,
    ngx_ioa_error_t *err)
{
    ngx_str_t            key, version, delta;
    ngx_ioa_args_t       a;
    ngx_pool_cleanup_t  *cln;

    if (ngx_ioa_position_parse(sse->client.pool, id, &key, &version, &delta)
        != NGX_OK)
    {
        ngx_ioa_error_set(err, "bad_option", NULL,
                          "a resume position of the cursor form is "
                          "\"~<16 hex digits>.<version>[+<comm_id>:<id>,..."
                          "]\"");
        return NGX_DECLINED;
    }

    /* the changes first: the first position named for a room is the one
     * used (ngx_ioa_client_rooms_reply), and they are newer */
    if (delta.len
        && ngx_ioa_client_parse_resume(&sse->client, &delta, err) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    cln = ngx_pool_cleanup_add(sse->request->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &key);
    ngx_ioa_args_str(&a, &version);
    ngx_ioa_args_cstr(&a, ngx_ioa_position_retry_ttl());

    sse->load = ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_POSITION_LOAD,
                                          ngx_ioa_sse_cursor_loaded, sse, 1,
                                          &a);

    if (sse->load == NULL) {
        ngx_ioa_error_set(err, "redis_unavailable", NULL,
                          "the hub cannot reach Redis to read the resume "
                          "position back; retry shortly");
        return NGX_ERROR;
    }

    /* a client gone before Redis answers must not be answered */
    cln->handler = ngx_ioa_sse_load_cleanup;
    cln->data = sse;

    return NGX_DONE;
}


static void
ngx_ioa_sse_load_cleanup(void *data)
{
    ngx_ioa_sse_t *sse = data;

    if (sse->load) {
        ngx_ioa_redis_cancel(sse->load);
        sse->load = NULL;
    }
}


static void
ngx_ioa_sse_cursor_loaded(redisReply *reply, void *data)
{
    ngx_ioa_sse_t *sse = data;

    ngx_str_t            base, code, text;
    ngx_ioa_error_t      err;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    sse->load = NULL;
    r = sse->request;
    c = r->connection;

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK
        || reply->type != REDIS_REPLY_STRING)
    {
        if (reply && code.len == 5 && ngx_strncmp(code.data, "NOPOS", 5) == 0)
        {
            ngx_ioa_error_set(&err, "unknown_position", "Last-Event-ID",
                              "the resume position is no longer known (a "
                              "cursor lives an hour after its last event "
                              "and ten minutes after a resume); reconnect "
                              "without it, or with ?since=<id>");
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 &err));

        } else {
            ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        }

        ngx_http_run_posted_requests(c);
        return;
    }

    base.data = (u_char *) reply->str;
    base.len = reply->len;

    if (base.len
        && ngx_ioa_client_parse_resume(&sse->client, &base, &err) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        ngx_http_run_posted_requests(c);
        return;
    }

    /* the handler's reference is given back; the stream keeps its own */
    ngx_ioa_finish(r, ngx_ioa_sse_start(sse));
    ngx_http_run_posted_requests(c);
}


/* the stream itself: headers, then the client joins its rooms */

static ngx_int_t
ngx_ioa_sse_start(ngx_ioa_sse_t *sse)
{
    ngx_int_t             rc;
    ngx_table_elt_t      *h;
    ngx_ioa_error_t       err;
    ngx_pool_cleanup_t   *cln;
    ngx_http_request_t   *r;
    ngx_ioa_client_kind_e kind;

    r = sse->request;
    kind = sse->client.kind;

    /* ioa_limit_conn counts an agent's inboxes with its WebSockets, and
     * every other stream with its token's other connections */
    switch (ngx_ioa_limit_conn(r->pool,
                               ngx_ioa_limit_conn_who(kind, &sse->client.name,
                                                      sse->who),
                               &sse->client, &err))
    {
    case NGX_OK:
        break;

    case NGX_DECLINED:
        return ngx_ioa_send_error(r, NGX_HTTP_TOO_MANY_REQUESTS, &err);

    default:
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_ioa_sse_cleanup;
    cln->data = sse;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Cache-Control");
    ngx_str_set(&h->value, "no-cache");

    /* an nginx in front of us must not buffer the stream */
    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "X-Accel-Buffering");
    ngx_str_set(&h->value, "no");

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    r->main->count++;
    r->write_event_handler = ngx_ioa_sse_write_handler;
    r->read_event_handler = ngx_http_test_reading;

    /* a client that half-closed with its request is not told of again by
     * epoll (see ngx_ioa_wait_start()): without this the stream would
     * live until a keepalive found the socket gone */
    if (r->connection->read->pending_eof) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    }

    sse->keepalive.handler = ngx_ioa_sse_keepalive_handler;
    sse->keepalive.data = sse;
    sse->keepalive.log = r->connection->log;
    sse->keepalive.cancelable = 1;

    sse->flush.handler = ngx_ioa_sse_flush_handler;
    sse->flush.data = sse;
    sse->flush.log = r->connection->log;

    ngx_add_timer(&sse->keepalive, NGX_IOA_SSE_KEEPALIVE);

    /* the first bytes tell EventSource to retry quickly */
    if (ngx_ioa_sse_queue(sse, NULL, NULL, 0, NULL) != NGX_OK) {
        return NGX_DONE;
    }

    if (sse->first
        && ngx_ioa_sse_queue(sse, NULL, sse->first->data, sse->first->len,
                             NULL)
           != NGX_OK)
    {
        return NGX_DONE;
    }

    if (kind == NGX_IOA_CLIENT_FOLLOWER && sse->client.follow.len == 0) {
        /* a facade's stream that is its first event only (a task that
         * has ended) */
        ngx_ioa_sse_finalize(sse, NGX_OK);
        return NGX_DONE;
    }

    if (ngx_ioa_client_attach(&sse->client) != NGX_OK) {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_DONE;
    }

    sse->attached = 1;

    /* a token's "exp" ends the stream (ngx_ioa_expiry.c) */
    if (ngx_ioa_expiry_start(&sse->client, sse->who) != NGX_OK) {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_DONE;
    }

    if (ngx_ioa_sse_streams.next == NULL) {
        ngx_queue_init(&ngx_ioa_sse_streams);
    }

    ngx_queue_insert_tail(&ngx_ioa_sse_streams, &sse->streams);

    if (!ngx_ioa_sse_watch.timer_set) {
        ngx_ioa_sse_watch_conn.fd = (ngx_socket_t) -1;
        ngx_ioa_sse_watch.handler = ngx_ioa_sse_watch_handler;
        ngx_ioa_sse_watch.data = &ngx_ioa_sse_watch_conn;
        ngx_ioa_sse_watch.log = ngx_cycle->log;
        ngx_add_timer(&ngx_ioa_sse_watch, 1000);
    }

    return NGX_DONE;
}


static size_t
ngx_ioa_sse_queued(ngx_ioa_client_t *cl)
{
    ngx_ioa_sse_t *sse = cl->data;

    return sse->out_bytes;
}


static ngx_int_t
ngx_ioa_sse_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m)
{
    ngx_ioa_sse_t *sse = cl->data;

    ngx_str_t   id;

    if (sse->finalized) {
        return NGX_ERROR;
    }

    if (sse->rewrite) {
        return sse->rewrite(sse, m, sse->rewrite_data);
    }

    id.len = 0;

    if (cl->kind != NGX_IOA_CLIENT_OBSERVER
        && ngx_ioa_position_id(cl, &sse->position, m, &id) != NGX_OK)
    {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_ERROR;
    }

    if (ngx_ioa_sse_queue(sse, &id, m->payload, m->payload_len, NULL)
        != NGX_OK)
    {
        if (id.len) {
            ngx_free(id.data);
        }

        return NGX_ERROR;
    }

    if (cl->kind != NGX_IOA_CLIENT_OBSERVER) {
        ngx_free(id.data);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_sse_send_text(ngx_ioa_client_t *cl, ngx_str_t *s)
{
    ngx_ioa_sse_t *sse = cl->data;

    if (sse->finalized) {
        return NGX_ERROR;
    }

    /* our own frames (errors, teamup events) are named events, so an
     * EventSource's onmessage sees envelopes only; in a facade's stream,
     * whose client reads every event as its protocol's, comments */
    return ngx_ioa_sse_queue(sse, NULL, s->data, s->len,
                             sse->rewrite ? ngx_ioa_sse_comment
                             : cl->kind == NGX_IOA_CLIENT_OBSERVER
                             ? NULL : "ioa");
}


static void
ngx_ioa_sse_close(ngx_ioa_client_t *cl, ngx_uint_t code, const char *reason)
{
    ngx_ioa_sse_t *sse = cl->data;

    u_char     buf[256], *p;
    ngx_str_t  s;

    if (sse->finalized) {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, cl->log, 0,
                  "ioa: closing event stream of \"%V\": %s", &cl->name,
                  reason ? reason : "");

    if (sse->attached) {
        sse->attached = 0;
        ngx_ioa_client_detach(cl);
    }

    /* say why, then end the response; the backlog a slow reader left is
     * dropped, it resumes with Last-Event-ID */

    sse->out_bytes = 0;

    if (sse->closing) {
        sse->closing(sse, cl->expired, reason ? reason : "",
                     sse->rewrite_data);

    } else {
        p = ngx_snprintf(buf, sizeof(buf),
                         "{\"op\":\"close\",\"code\":%ui,"
                         "\"message\":\"%s\"}",
                         code, reason ? reason : "");
        s.data = buf;
        s.len = p - buf;

        (void) ngx_ioa_sse_queue(sse, NULL, s.data, s.len, "ioa");
    }

    ngx_ioa_sse_finalize(sse, NGX_OK);
}


/*
 * The rooms are loaded and the starting position of each is fixed: an
 * id-only block hands it to the client at once.  EventSource takes the id
 * as its Last-Event-ID even though no event is dispatched, so a client that
 * reconnects before its first envelope still resumes exactly.
 */

static void
ngx_ioa_sse_positioned(ngx_ioa_client_t *cl)
{
    ngx_ioa_sse_t *sse = cl->data;

    ngx_str_t   id;

    if (sse->finalized || cl->kind == NGX_IOA_CLIENT_OBSERVER
        || ngx_ioa_client_position_len(cl) == 0)
    {
        return;
    }

    if (ngx_ioa_position_id(cl, &sse->position, NULL, &id) != NGX_OK) {
        return;
    }

    if (id.len) {
        (void) ngx_ioa_sse_queue(sse, &id, NULL, 0, NULL);
    }

    ngx_free(id.data);
}


/* queues "id: <id>\nevent: <event>\ndata: <data>\n\n"; without data, an
 * id-only block, without id and data the stream's opening "retry:", an
 * event without id and data the comment ": <event>", and data with the
 * event ngx_ioa_sse_comment the comment ": <data>" (one line) */

static ngx_int_t
ngx_ioa_sse_queue(ngx_ioa_sse_t *sse, ngx_str_t *id, u_char *data,
    size_t len, const char *event)
{
    u_char             *p;
    size_t              size, i;
    ngx_ioa_sse_out_t  *o;

    if (data && event == ngx_ioa_sse_comment) {
        size = sizeof(": \n\n") - 1 + len;

    } else if (data == NULL && id == NULL && event) {
        size = sizeof(": \n\n") - 1 + ngx_strlen(event);

    } else if (data == NULL && id == NULL) {
        size = sizeof("retry: 1000\n\n") - 1;

    } else if (data == NULL) {
        size = sizeof("id: \n\n") - 1 + id->len;

    } else {
        size = (id && id->len ? sizeof("id: \n") - 1 + id->len : 0)
               + (event ? sizeof("event: \n") - 1 + ngx_strlen(event) : 0)
               + sizeof("data: \n\n") - 1 + len;
    }

    if (sse->out_bytes + size > sse->client.lcf->send_queue_limit) {
        ngx_ioa_stat_add(NGX_IOA_STAT_OVERFLOWS + NGX_IOA_VIA_SSE, 1);
        ngx_ioa_sse_close(&sse->client, NGX_IOA_WS_POLICY,
                          "send queue limit exceeded; reconnect and resume "
                          "with Last-Event-ID");
        return NGX_ERROR;
    }

    o = ngx_alloc(sizeof(ngx_ioa_sse_out_t) + size, sse->client.log);
    if (o == NULL) {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_ERROR;
    }

    ngx_memzero(o, sizeof(ngx_ioa_sse_out_t));

    p = (u_char *) (o + 1);
    o->buf.start = p;
    o->buf.pos = p;
    o->buf.memory = 1;
    o->buf.flush = 1;
    o->cl.buf = &o->buf;
    o->size = size;

    if (data && event == ngx_ioa_sse_comment) {
        *p++ = ':';
        *p++ = ' ';

        /* a newline would end the comment; JSON of ours has none */
        for (i = 0; i < len; i++) {
            *p++ = (data[i] == '\n' || data[i] == '\r') ? ' ' : data[i];
        }

        *p++ = '\n';
        *p++ = '\n';

    } else if (data == NULL && id == NULL && event) {
        p = ngx_sprintf(p, ": %s\n\n", event);

    } else if (data == NULL && id == NULL) {
        p = ngx_cpymem(p, "retry: 1000\n\n", sizeof("retry: 1000\n\n") - 1);

    } else if (data == NULL) {
        p = ngx_sprintf(p, "id: %V\n\n", id);

    } else {
        if (id && id->len) {
            p = ngx_sprintf(p, "id: %V\n", id);
        }

        if (event) {
            p = ngx_sprintf(p, "event: %s\n", event);
        }

        p = ngx_cpymem(p, "data: ", 6);
        p = ngx_cpymem(p, data, len);
        *p++ = '\n';
        *p++ = '\n';
    }

    o->buf.last = p;
    o->buf.end = p;

    *sse->out_tail = o;
    sse->out_tail = &o->next;
    sse->out_bytes += size;

    /* one flush per event-loop turn, however many events were queued */
    if (!sse->flush.posted) {
        ngx_post_event(&sse->flush, &ngx_posted_events);
    }

    return NGX_OK;
}


static void
ngx_ioa_sse_flush_handler(ngx_event_t *ev)
{
    ngx_ioa_sse_t *sse = ev->data;

    ngx_connection_t  *c;

    if (sse->finalized) {
        return;
    }

    c = sse->request->connection;

    (void) ngx_ioa_sse_flush(sse);

    ngx_http_run_posted_requests(c);
}


static void
ngx_ioa_sse_write_handler(ngx_http_request_t *r)
{
    ngx_ioa_sse_t       *sse;

    sse = ngx_ioa_get_ctx(r);

    if (sse == NULL || sse->finalized) {
        return;
    }

    if (r->connection->write->timedout) {
        r->connection->timedout = 1;
        ngx_ioa_sse_finalize(sse, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    (void) ngx_ioa_sse_flush(sse);
}


static ngx_int_t
ngx_ioa_sse_flush(ngx_ioa_sse_t *sse)
{
    ngx_int_t            rc;
    ngx_chain_t         *first, **last;
    ngx_ioa_sse_out_t   *o;
    ngx_http_request_t  *r;

    r = sse->request;

    /* hand over what nginx has not seen yet */

    first = NULL;
    last = &first;

    for (o = sse->out; o; o = o->next) {
        if (!o->passed) {
            o->passed = 1;
            o->cl.next = NULL;
            *last = &o->cl;
            last = &o->cl.next;
        }
    }

    rc = ngx_http_output_filter(r, first);

    if (rc == NGX_ERROR) {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_ERROR;
    }

    /*
     * A buffer nginx has written is not ours to free at once: the body
     * filters keep chain links to it in their busy lists (the chunked
     * filter's, the copy filter's) and look at it again the next time
     * data passes (ngx_chain_update_chains), and only then let go of the
     * links of the buffers that were written.  So a written buffer waits
     * on `sent` and is freed after the next call that passed new data;
     * freed at once, ASan saw the chunked filter read it.
     */

    if (first) {
        while (sse->sent) {
            o = sse->sent;
            sse->sent = o->next;
            ngx_free(o);
        }
    }

    while (sse->out && sse->out->buf.pos == sse->out->buf.last) {
        o = sse->out;
        sse->out = o->next;
        sse->out_bytes -= ngx_min(sse->out_bytes, o->size);
        ngx_ioa_stat_add(NGX_IOA_STAT_SENT_BYTES + NGX_IOA_VIA_SSE, o->size);
        o->next = sse->sent;
        sse->sent = o;
    }

    if (sse->out == NULL) {
        sse->out_tail = &sse->out;
    }

    /* a paused catch-up reads on once half its window is taken */
    if (sse->client.catchup_paused && !sse->client.closed
        && sse->out_bytes <= sse->client.lcf->catchup_window / 2)
    {
        ngx_ioa_client_drained(&sse->client);
    }

    if (ngx_handle_write_event(r->connection->write, 0) != NGX_OK) {
        ngx_ioa_sse_finalize(sse, NGX_ERROR);
        return NGX_ERROR;
    }

    return rc;
}


static void
ngx_ioa_sse_keepalive_handler(ngx_event_t *ev)
{
    ngx_ioa_sse_t *sse = ev->data;

    static u_char  ping[] = "keepalive";

    if (sse->finalized) {
        return;
    }

    if (ngx_exiting) {
        /* graceful shutdown or reload: the client reconnects and resumes */
        ngx_ioa_sse_close(&sse->client, NGX_IOA_WS_GOING_AWAY,
                          "server shutting down, reconnect and resume");
        return;
    }

    if (sse->rewrite) {
        (void) ngx_ioa_sse_queue(sse, NULL, NULL, 0, "keepalive");

    } else {
        (void) ngx_ioa_sse_queue(sse, NULL, ping, sizeof(ping) - 1, "ping");
    }

    if (!sse->finalized) {
        ngx_add_timer(ev, NGX_IOA_SSE_KEEPALIVE);
    }
}


static void
ngx_ioa_sse_finalize(ngx_ioa_sse_t *sse, ngx_int_t rc)
{
    ngx_http_request_t  *r;

    if (sse->finalized) {
        return;
    }

    if (sse->attached) {
        sse->attached = 0;
        ngx_ioa_client_detach(&sse->client);
    }

    r = sse->request;

    if (rc == NGX_OK) {
        /* write what is queued, then end the response normally */
        (void) ngx_ioa_sse_flush(sse);
        sse->finalized = 1;
        rc = ngx_http_send_special(r, NGX_HTTP_LAST);

    } else {
        sse->finalized = 1;
    }

    if (sse->keepalive.timer_set) {
        ngx_del_timer(&sse->keepalive);
    }

    if (sse->flush.posted) {
        ngx_delete_posted_event(&sse->flush);
    }

    /* finished from a posted event: the caller may be a delivery loop that
     * still holds pointers into this request's pool */

    sse->rc = rc;
    sse->done.handler = ngx_ioa_sse_done_handler;
    sse->done.data = sse;
    sse->done.log = r->connection->log;

    ngx_post_event(&sse->done, &ngx_posted_events);
}


static void
ngx_ioa_sse_done_handler(ngx_event_t *ev)
{
    ngx_ioa_sse_t *sse = ev->data;

    ngx_connection_t  *c;

    c = sse->request->connection;

    ngx_http_finalize_request(sse->request, sse->rc);
    ngx_http_run_posted_requests(c);
}


static void
ngx_ioa_sse_watch_handler(ngx_event_t *ev)
{
    ngx_queue_t    *q;
    ngx_ioa_sse_t  *sse;

    if (ngx_queue_empty(&ngx_ioa_sse_streams)) {
        return;
    }

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        while (!ngx_queue_empty(&ngx_ioa_sse_streams)) {
            q = ngx_queue_head(&ngx_ioa_sse_streams);
            ngx_queue_remove(q);
            q->next = NULL;

            sse = ngx_queue_data(q, ngx_ioa_sse_t, streams);
            ngx_ioa_sse_close(&sse->client, NGX_IOA_WS_GOING_AWAY,
                              "server shutting down, reconnect and resume");
        }

        return;
    }

    ngx_add_timer(ev, 1000);
}


static void
ngx_ioa_sse_cleanup(void *data)
{
    ngx_ioa_sse_t *sse = data;

    ngx_ioa_sse_out_t  *o;

    sse->finalized = 1;

    if (sse->streams.next) {
        ngx_queue_remove(&sse->streams);
        sse->streams.next = NULL;
    }

    if (sse->attached) {
        sse->attached = 0;
        ngx_ioa_client_detach(&sse->client);
    }

    if (sse->keepalive.timer_set) {
        ngx_del_timer(&sse->keepalive);
    }

    if (sse->flush.posted) {
        ngx_delete_posted_event(&sse->flush);
    }

    if (sse->done.posted) {
        ngx_delete_posted_event(&sse->done);
    }

    /* nginx is done with the request, and with our buffers */

    while (sse->out) {
        o = sse->out;
        sse->out = o->next;
        ngx_free(o);
    }

    while (sse->sent) {
        o = sse->sent;
        sse->sent = o->next;
        ngx_free(o);
    }
}
