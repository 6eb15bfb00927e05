
/*
 * Copyright (C) ioa authors
 *
 * Token expiry on open connections.
 *
 * With "ioa_auth jwt" a token is checked when a connection opens, but a
 * WebSocket or an SSE stream may stay open for days.  So a connection
 * remembers when its token stops being good, "exp" plus ioa_auth_leeway
 * (the handshake's own test: from that second on the token is refused),
 * and keeps to it:
 *
 *   ioa_auth_expiry_warning before   an error frame "token_expiring" (on
 *                                    SSE an "ioa" event, on a facade's
 *                                    stream a comment) says when, and how
 *                                    to go on;
 *   at exp + leeway                  the connection ends: a WebSocket with
 *                                    close code 1008 "token expired", an
 *                                    SSE stream with its close event (an
 *                                    A2A stream with a JSON-RPC error,
 *                                    ngx_ioa_a2a_closing()), each after
 *                                    what was already queued for it.
 *
 * A WebSocket may send {"op":"token","token":"<JWT>"} at any time.  The
 * token is verified as at the handshake (ngx_ioa_auth_jwt(): signature,
 * exp, nbf, and the scope the endpoint asks for) and must name the same
 * "sub"; then the connection's end moves to the new token's (earlier or
 * later: the newest credential is the one that counts), the warning is
 * armed again, and {"op":"token_accepted",...} answers.  A refusal is an
 * error frame and changes nothing.  Another agent's token is refused the
 * same way rather than closing the connection: identity is the
 * connection's and never changes, the old end still stands, so nothing is
 * gained by trying, and a client that picked the wrong token from its store
 * can still send the right one before the end.  An SSE client cannot send
 * in-band: it reconnects with a fresh token and Last-Event-ID, which resumes
 * exactly.
 *
 * One timer per connection, an ngx_event_t in a small struct allocated only
 * for connections whose token has an "exp" (none with ioa_auth off or
 * request), armed for the next of the two moments.  nginx's timer tree makes
 * 100k idle connections cost nothing until one is due.  The timer is
 * cancelable: a graceful shutdown does not wait for tokens to expire.
 *
 * Posts still on their way to Redis when the end comes are answered first:
 * the close waits for post.lua's replies (ngx_ioa_expiry_posted(), bounded
 * by ioa_redis_timeout), and frames read meanwhile are refused with
 * "token_expired", so every envelope the client sent is either acknowledged
 * or refused before the close frame, never left in doubt.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"


/* timers are keyed by ngx_msec_t, 32 bits on some systems: a far "exp" is
 * waited for a day at a time */
#define NGX_IOA_EXPIRY_STEP      86400000

#define NGX_IOA_EXPIRY_REASON                                                 \
    "token expired: reconnect with a fresh token and resume from the last id"


struct ngx_ioa_expiry_s {
    ngx_event_t               timer;
    ngx_ioa_client_t         *client;
    int64_t                   exp;          /* the token's "exp" */
    ngx_str_t                 sub;          /* the handshake's identity */
    ngx_uint_t                scope;        /* what the endpoint needs */
    unsigned                  warned:1;
};


static void ngx_ioa_expiry_arm(ngx_ioa_expiry_t *ex);
static void ngx_ioa_expiry_handler(ngx_event_t *ev);
static void ngx_ioa_expiry_warn(ngx_ioa_expiry_t *ex, int64_t end);
static void ngx_ioa_expiry_end(ngx_ioa_client_t *cl);
static void ngx_ioa_expiry_refuse(ngx_ioa_client_t *cl,
    ngx_ioa_error_t *err, const char *code);
static void ngx_ioa_expiry_send(ngx_ioa_client_t *cl, ngx_ioa_error_t *err,
    int64_t exp, int64_t end);


/*
 * cl is attached and id is what its handshake was allowed as: with a token
 * that expires, the connection is timed from now on.
 */

ngx_int_t
ngx_ioa_expiry_start(ngx_ioa_client_t *cl, ngx_ioa_identity_t *id)
{
    ngx_ioa_expiry_t  *ex;

    if (id == NULL || id->expires == 0
        || cl->lcf->auth != NGX_IOA_AUTH_JWT)
    {
        return NGX_OK;
    }

    ex = ngx_pcalloc(cl->pool, sizeof(ngx_ioa_expiry_t));
    if (ex == NULL) {
        return NGX_ERROR;
    }

    ex->sub.data = ngx_pstrdup(cl->pool, &id->sub);
    if (ex->sub.data == NULL) {
        return NGX_ERROR;
    }

    ex->sub.len = id->sub.len;
    ex->client = cl;
    ex->exp = id->expires;

    /* a refresh must be good for what the handshake was (ngx_ioa_api.c
     * routes /ws/{name} and /chatlist_ws so) */
    ex->scope = cl->kind == NGX_IOA_CLIENT_AGENT ? NGX_IOA_SCOPE_MEMBER
                : cl->kind == NGX_IOA_CLIENT_OBSERVER
                ? NGX_IOA_SCOPE_OBSERVER : 0;

    ex->timer.handler = ngx_ioa_expiry_handler;
    ex->timer.data = ex;
    ex->timer.log = cl->log;
    ex->timer.cancelable = 1;

    cl->expiry = ex;

    ngx_ioa_expiry_arm(ex);

    return NGX_OK;
}


/* the client goes (ngx_ioa_client_detach) */

void
ngx_ioa_expiry_stop(ngx_ioa_client_t *cl)
{
    if (cl->expiry && cl->expiry->timer.timer_set) {
        ngx_del_timer(&cl->expiry->timer);
    }
}


static void
ngx_ioa_expiry_arm(ngx_ioa_expiry_t *ex)
{
    int64_t              at, now;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ex->client->lcf;

    at = (ex->exp + lcf->auth_leeway) * 1000;

    if (!ex->warned && lcf->auth_expiry_warning) {
        at -= (int64_t) lcf->auth_expiry_warning * 1000;
    }

    now = ngx_ioa_now_ms();

    at = at > now ? at - now : 1;

    if (at > NGX_IOA_EXPIRY_STEP) {
        at = NGX_IOA_EXPIRY_STEP;
    }

    ngx_add_timer(&ex->timer, (ngx_msec_t) at);
}


static void
ngx_ioa_expiry_handler(ngx_event_t *ev)
{
    ngx_ioa_expiry_t *ex = ev->data;

    int64_t              end, now;
    ngx_ioa_client_t    *cl;
    ngx_ioa_loc_conf_t  *lcf;

    cl = ex->client;
    lcf = cl->lcf;

    if (cl->closed) {
        return;
    }

    /* nginx's timers run on the monotonic clock and "exp" on the wall
     * clock: a timer that is due early by the latter is armed again */

    now = ngx_ioa_now_ms();
    end = (ex->exp + lcf->auth_leeway) * 1000;

    if (now >= end) {
        ngx_ioa_expiry_end(cl);
        return;
    }

    if (!ex->warned && lcf->auth_expiry_warning
        && now >= end - (int64_t) lcf->auth_expiry_warning * 1000)
    {
        ex->warned = 1;
        ngx_ioa_expiry_warn(ex, end / 1000);

        if (cl->closed) {
            return;
        }
    }

    ngx_ioa_expiry_arm(ex);
}


static void
ngx_ioa_expiry_warn(ngx_ioa_expiry_t *ex, int64_t end)
{
    ngx_ioa_error_t  err;

    if (ex->client->transport->via == NGX_IOA_VIA_WEBSOCKET) {
        ngx_ioa_error_set(&err, "token_expiring", "token",
                          "the connection's token expires: it is closed at "
                          "%L (1008) unless a fresh token of \"%V\" comes "
                          "first as {\"op\":\"token\",\"token\":\"<JWT>\"}",
                          end, &ex->sub);

    } else {
        ngx_ioa_error_set(&err, "token_expiring", "token",
                          "the stream's token expires: the stream ends at "
                          "%L; reconnect with a fresh token of \"%V\" and "
                          "Last-Event-ID", end, &ex->sub);
    }

    ngx_ioa_expiry_send(ex->client, &err, ex->exp, end);
}


/* the token is over: once every post in flight is answered, the end */

static void
ngx_ioa_expiry_end(ngx_ioa_client_t *cl)
{
    cl->expired = 1;

    if (cl->posts.next && !ngx_queue_empty(&cl->posts)) {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, cl->log, 0,
                  "ioa: the token of \"%V\" expired, closing",
                  &cl->expiry->sub);

    ngx_ioa_stat_add(NGX_IOA_STAT_TOKEN_EXPIRIES + cl->transport->via, 1);

    cl->transport->close(cl, NGX_IOA_WS_POLICY, NGX_IOA_EXPIRY_REASON);
}


/* post.lua answered one of cl's posts (ngx_ioa_post.c) */

void
ngx_ioa_expiry_posted(ngx_ioa_client_t *cl)
{
    if (cl->expired && !cl->closed && ngx_queue_empty(&cl->posts)) {
        ngx_ioa_expiry_end(cl);
    }
}


/* {"op":"token","token":"<JWT>"} from a WebSocket (ngx_ioa_client.c) */

void
ngx_ioa_expiry_refresh(ngx_ioa_client_t *cl, yajl_val doc, ngx_pool_t *pool)
{
    u_char              *p, buf[128];
    yajl_val             v;
    ngx_int_t            rc;
    ngx_str_t            token, s;
    ngx_ioa_error_t      err;
    ngx_ioa_expiry_t    *ex;
    ngx_ioa_identity_t   id;

    ex = cl->expiry;

    v = ngx_ioa_json_get(doc, "token");

    if (v == NULL || ngx_ioa_json_string(v, &token) != NGX_OK
        || token.len == 0)
    {
        ngx_ioa_error_set(&err, "token_invalid", "token",
                          "a refresh is {\"op\":\"token\",\"token\":"
                          "\"<JWT>\"}; nothing was changed");
        ngx_ioa_expiry_refuse(cl, &err, NULL);
        return;
    }

    if (ex == NULL) {
        ngx_ioa_error_set(&err, "token_invalid", "token",
                          "this connection was not opened with a token "
                          "that expires (ioa_auth is not jwt here): there "
                          "is nothing to refresh");
        ngx_ioa_expiry_refuse(cl, &err, NULL);
        return;
    }

    ngx_memzero(&id, sizeof(ngx_ioa_identity_t));

    rc = ngx_ioa_auth_jwt(pool, cl->lcf, &token, &id, &err);

    if (rc == NGX_ERROR) {
        ngx_ioa_error_set(&err, "internal_error", "token",
                          "the token could not be checked; nothing was "
                          "changed");
        ngx_ioa_expiry_refuse(cl, &err, NULL);
        return;
    }

    /* the same reasons as a handshake's 401 and 403, under our code */

    if (rc != NGX_OK
        || ngx_ioa_auth_allows(&id, ex->scope, NULL, &err) != NGX_OK)
    {
        ngx_ioa_expiry_refuse(cl, &err, "token_invalid");
        return;
    }

    if (id.sub.len != ex->sub.len
        || ngx_strncmp(id.sub.data, ex->sub.data, id.sub.len) != 0)
    {
        ngx_ioa_error_set(&err, "token_sub_mismatch", "token",
                          "the token is \"%V\"'s and this connection is "
                          "\"%V\"'s; nothing was changed, it still closes "
                          "at %L", &id.sub, &ex->sub,
                          ex->exp + cl->lcf->auth_leeway);
        ngx_ioa_expiry_refuse(cl, &err, NULL);
        return;
    }

    ex->exp = id.expires;
    ex->warned = 0;

    if (ex->timer.timer_set) {
        ngx_del_timer(&ex->timer);
    }

    ngx_ioa_expiry_arm(ex);

    ngx_ioa_stat_add(NGX_IOA_STAT_TOKEN_REFRESHES, 1);

    p = ngx_snprintf(buf, sizeof(buf),
                     "{\"op\":\"token_accepted\",\"exp\":%L,"
                     "\"closes_at\":%L}",
                     ex->exp, ex->exp + cl->lcf->auth_leeway);
    s.data = buf;
    s.len = p - buf;

    (void) cl->transport->send_text(cl, &s);
}


/*
 * A frame from an observer's WebSocket: observers post nothing, so anything
 * but a refresh is ignored, as before refreshes existed.
 */

void
ngx_ioa_expiry_frame(ngx_ioa_client_t *cl, u_char *data, size_t len)
{
    yajl_val          doc, op;
    ngx_str_t         s;
    ngx_pool_t       *pool;
    ngx_ioa_error_t   err;

    pool = ngx_create_pool(4096, cl->log);
    if (pool == NULL) {
        return;
    }

    doc = ngx_ioa_json_parse(pool, data, len, cl->lcf->max_json_depth, &err);

    if (doc && YAJL_IS_OBJECT(doc)) {
        op = ngx_ioa_json_get(doc, "op");

        if (op && ngx_ioa_json_string(op, &s) == NGX_OK
            && s.len == 5 && ngx_strncmp(s.data, "token", 5) == 0)
        {
            ngx_ioa_expiry_refresh(cl, doc, pool);
        }
    }

    ngx_destroy_pool(pool);
}


/* a refused refresh: err says why, under code if given */

static void
ngx_ioa_expiry_refuse(ngx_ioa_client_t *cl, ngx_ioa_error_t *err,
    const char *code)
{
    ngx_ioa_expiry_t  *ex;

    if (code) {
        err->code.data = (u_char *) code;
        err->code.len = ngx_strlen(code);
        ngx_str_set(&err->field, "token");
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_TOKEN_REFRESHES_REFUSED, 1);

    ex = cl->expiry;

    if (ex == NULL) {
        ngx_ioa_client_error(cl, err, NULL);
        return;
    }

    ngx_ioa_expiry_send(cl, err, ex->exp, ex->exp + cl->lcf->auth_leeway);
}


/* the error frame with the connection's "exp" and end (Unix seconds) */

static void
ngx_ioa_expiry_send(ngx_ioa_client_t *cl, ngx_ioa_error_t *err, int64_t exp,
    int64_t end)
{
    u_char      *p;
    ngx_str_t    json, out;
    ngx_pool_t  *pool;

    pool = ngx_create_pool(1024, cl->log);
    if (pool == NULL) {
        return;
    }

    if (ngx_ioa_error_json(pool, err, NULL, &json) != NGX_OK) {
        goto done;
    }

    out.data = ngx_pnalloc(pool, json.len + sizeof(",\"exp\":,\"closes_at\":")
                                 + 2 * NGX_INT64_LEN);
    if (out.data == NULL) {
        goto done;
    }

    /* {"op":"error",...} without its "}", then ours */
    p = ngx_cpymem(out.data, json.data, json.len - 1);
    p = ngx_sprintf(p, ",\"exp\":%L,\"closes_at\":%L}", exp, end);
    out.len = p - out.data;

    (void) cl->transport->send_text(cl, &out);

done:

    ngx_destroy_pool(pool);
}
