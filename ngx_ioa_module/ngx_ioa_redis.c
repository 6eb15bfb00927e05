
/*
 * Copyright (C) ioa authors
 *
 * The per-worker Redis client.
 *
 * Each nginx worker holds exactly two connections to Redis: one for
 * commands and one in SUBSCRIBE mode (Redis accepts nothing else on a
 * subscribed connection).  Both run the same small state machine:
 *
 *     DOWN --connect()--> CONNECTING --onConnect OK--> READY
 *       ^                     |                          |
 *       |   connect timeout,  |                          | error, EOF,
 *       +---- refused --------+                          | command timeout
 *       +------- backoff timer <-------------------------+
 *
 * Reconnects wait an exponential backoff (100 ms doubling up to
 * ioa_redis_backoff_max) with half of it random, so that all workers of all
 * instances do not hit a restarted Redis in the same millisecond.
 *
 * hiredis 0.14 has no timeouts, so both are nginx timers here: the connect
 * timer runs while CONNECTING, and a "progress" timer runs whenever replies
 * are outstanding and is re-armed by every reply.  If Redis stops answering
 * for ioa_redis_timeout, the context is freed, which hands every pending
 * callback a NULL reply: callers treat NULL as "Redis unavailable" and tell
 * their client so (503 or an error frame).  Nothing waits forever.
 *
 * Scripts (the redis-scripts directory, embedded at build time) are hashed
 * once at start and sent with SCRIPT LOAD as the first commands on every new
 * command connection, so EVALSHA that follows on the same connection always finds
 * them.  If Redis still answers NOSCRIPT (SCRIPT FLUSH, a failover to a
 * replica that never saw the script) the script is loaded again and the
 * very same command is resent, in order, from the copy kept for that
 * purpose.
 *
 * Pub/sub messages are dispatched to ngx_ioa_room.c; after the pub/sub
 * connection comes back, the room code resubscribes and every client
 * catches up from the room Streams, so traffic published while the
 * connection was down is not lost.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_ioa.h"
#include "ngx_ioa_scripts.h"


#define NGX_IOA_BACKOFF_MIN  100


typedef enum {
    NGX_IOA_REDIS_DOWN = 0,
    NGX_IOA_REDIS_CONNECTING,
    NGX_IOA_REDIS_READY
} ngx_ioa_redis_state_e;


typedef struct {
    const char               *name;
    redisAsyncContext        *ac;
    ngx_ioa_redis_state_e     state;
    ngx_uint_t                pending;
    ngx_msec_t                backoff;
    ngx_event_t               retry;
    ngx_event_t               timer;
    ngx_uint_t                is_sub;
    ngx_log_t                *log;
} ngx_ioa_redis_conn_t;


struct ngx_ioa_redis_req_s {
    ngx_ioa_redis_handler_pt  handler;
    void                     *data;
    char                     *cmd;       /* kept for a NOSCRIPT resend */
    size_t                    len;
    ngx_int_t                 script;
    ngx_uint_t                resent;
};


static void ngx_ioa_redis_connect(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_schedule(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_retry_handler(ngx_event_t *ev);
static void ngx_ioa_redis_timer_handler(ngx_event_t *ev);
static void ngx_ioa_redis_on_connect(const redisAsyncContext *ac,
    int status);
static void ngx_ioa_redis_on_disconnect(const redisAsyncContext *ac,
    int status);
static void ngx_ioa_redis_load_scripts(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_sent(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_replied(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_reply(redisAsyncContext *ac, void *r, void *data);
static void ngx_ioa_redis_load_reply(redisAsyncContext *ac, void *r,
    void *data);
static void ngx_ioa_redis_sub_reply(redisAsyncContext *ac, void *r,
    void *data);
static u_char *ngx_ioa_redis_bulk(u_char *p, u_char *data, size_t len);
static u_char *ngx_ioa_redis_bulk_int(u_char *p, ngx_int_t n);
static u_char *ngx_ioa_redis_uint(u_char *p, size_t n);


static ngx_ioa_redis_conn_t  ngx_ioa_redis_cmd;
static ngx_ioa_redis_conn_t  ngx_ioa_redis_sub;

static u_char       ngx_ioa_script_sha[NGX_IOA_SCRIPT_N][40];
static ngx_uint_t   ngx_ioa_redis_exiting;



ngx_int_t
ngx_ioa_redis_init_process(ngx_cycle_t *cycle)
{
    u_char       hash[20];
    ngx_uint_t   i;
    ngx_sha1_t   sha1;

    for (i = 0; i < NGX_IOA_SCRIPT_N; i++) {
        ngx_sha1_init(&sha1);
        ngx_sha1_update(&sha1, ngx_ioa_script_sources[i],
                        ngx_strlen(ngx_ioa_script_sources[i]));
        ngx_sha1_final(hash, &sha1);
        ngx_hex_dump(ngx_ioa_script_sha[i], hash, 20);
    }

    ngx_ioa_redis_exiting = 0;

    ngx_ioa_redis_cmd.name = "command";
    ngx_ioa_redis_cmd.is_sub = 0;
    ngx_ioa_redis_sub.name = "pub/sub";
    ngx_ioa_redis_sub.is_sub = 1;

    ngx_ioa_redis_cmd.log = cycle->log;
    ngx_ioa_redis_sub.log = cycle->log;

    ngx_ioa_redis_connect(&ngx_ioa_redis_cmd);
    ngx_ioa_redis_connect(&ngx_ioa_redis_sub);

    return NGX_OK;
}


void
ngx_ioa_redis_exit_process(ngx_cycle_t *cycle)
{
    ngx_ioa_redis_conn_t  *rc;
    ngx_uint_t             i;

    ngx_ioa_redis_exiting = 1;

    for (i = 0; i < 2; i++) {
        rc = i ? &ngx_ioa_redis_sub : &ngx_ioa_redis_cmd;

        if (rc->retry.timer_set) {
            ngx_del_timer(&rc->retry);
        }

        if (rc->timer.timer_set) {
            ngx_del_timer(&rc->timer);
        }

        if (rc->ac) {
            redisAsyncFree(rc->ac);
            rc->ac = NULL;
        }

        rc->state = NGX_IOA_REDIS_DOWN;
    }
}


ngx_uint_t
ngx_ioa_redis_ready(void)
{
    return ngx_ioa_redis_cmd.state == NGX_IOA_REDIS_READY;
}


ngx_uint_t
ngx_ioa_redis_sub_ready(void)
{
    return ngx_ioa_redis_sub.state == NGX_IOA_REDIS_READY;
}


static void
ngx_ioa_redis_connect(ngx_ioa_redis_conn_t *rc)
{
    redisAsyncContext    *ac;
    ngx_ioa_main_conf_t  *mcf;

    if (ngx_ioa_redis_exiting || ngx_exiting || ngx_terminate) {
        return;
    }

    mcf = ngx_ioa_main_conf();

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rc->log, 0,
                   "ioa redis %s connecting to %V:%d",
                   rc->name, &mcf->redis_host, (int) mcf->redis_port);

    ac = redisAsyncConnect((char *) mcf->redis_host.data, mcf->redis_port);

    if (ac == NULL) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot allocate a context", rc->name);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    if (ac->err) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot connect to %V:%d: %s",
                      rc->name, &mcf->redis_host, (int) mcf->redis_port,
                      ac->errstr);
        redisAsyncFree(ac);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    ac->data = rc;

    if (ngx_ioa_redis_attach(ac, rc->log) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: no free connection for Redis, "
                      "raise worker_connections", rc->name);
        redisAsyncFree(ac);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    redisAsyncSetConnectCallback(ac, ngx_ioa_redis_on_connect);
    redisAsyncSetDisconnectCallback(ac, ngx_ioa_redis_on_disconnect);

    rc->ac = ac;
    rc->state = NGX_IOA_REDIS_CONNECTING;
    rc->pending = 0;

    rc->timer.handler = ngx_ioa_redis_timer_handler;
    rc->timer.data = rc;
    rc->timer.log = rc->log;
    rc->timer.cancelable = 1;

    ngx_add_timer(&rc->timer, mcf->redis_connect_timeout);

    /* a connection in progress shows up as writable; hiredis asks for the
     * write event itself only once a command is queued */

    ac->ev.addWrite(ac->ev.data);
}


static void
ngx_ioa_redis_schedule(ngx_ioa_redis_conn_t *rc)
{
    ngx_msec_t            delay;
    ngx_ioa_main_conf_t  *mcf;

    rc->ac = NULL;
    rc->state = NGX_IOA_REDIS_DOWN;
    rc->pending = 0;

    if (rc->timer.timer_set) {
        ngx_del_timer(&rc->timer);
    }

    if (ngx_ioa_redis_exiting || ngx_exiting || ngx_terminate) {
        return;
    }

    mcf = ngx_ioa_main_conf();

    if (rc->backoff < NGX_IOA_BACKOFF_MIN) {
        rc->backoff = NGX_IOA_BACKOFF_MIN;

    } else {
        rc->backoff *= 2;
    }

    if (rc->backoff > mcf->redis_backoff_max) {
        rc->backoff = mcf->redis_backoff_max;
    }

    /* full delay half of the time is fixed, half random */
    delay = rc->backoff / 2 + (ngx_msec_t) ngx_random() % (rc->backoff / 2 + 1);

    rc->retry.handler = ngx_ioa_redis_retry_handler;
    rc->retry.data = rc;
    rc->retry.log = rc->log;
    rc->retry.cancelable = 1;

    if (!rc->retry.timer_set) {
        ngx_add_timer(&rc->retry, delay);
    }
}


static void
ngx_ioa_redis_retry_handler(ngx_event_t *ev)
{
    ngx_ioa_redis_connect(ev->data);
}


static void
ngx_ioa_redis_timer_handler(ngx_event_t *ev)
{
    ngx_ioa_redis_conn_t *rc = ev->data;

    redisAsyncContext  *ac;

    ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                  "ioa redis %s: %s timed out, reconnecting", rc->name,
                  rc->state == NGX_IOA_REDIS_CONNECTING
                  ? "connect" : "command");

    ac = rc->ac;

    if (ac == NULL) {
        return;
    }

    /* the disconnect callback (or, for an unfinished connect, nothing)
     * follows from the free; make sure a reconnect is scheduled either way */

    if (rc->state == NGX_IOA_REDIS_CONNECTING) {
        rc->ac = NULL;
        redisAsyncFree(ac);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    redisAsyncFree(ac);
}


static void
ngx_ioa_redis_on_connect(const redisAsyncContext *ac, int status)
{
    ngx_ioa_redis_conn_t *rc = ac->data;

    ngx_ioa_main_conf_t  *mcf;

    if (rc->timer.timer_set) {
        ngx_del_timer(&rc->timer);
    }

    mcf = ngx_ioa_main_conf();

    if (status != REDIS_OK) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot connect to %V:%d: %s",
                      rc->name, &mcf->redis_host, (int) mcf->redis_port,
                      ac->errstr);

        /* hiredis frees the context when we return */
        ngx_ioa_redis_schedule(rc);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, rc->log, 0,
                  "ioa redis %s: connected to %V:%d",
                  rc->name, &mcf->redis_host, (int) mcf->redis_port);

    rc->state = NGX_IOA_REDIS_READY;
    rc->backoff = 0;

    if (rc->is_sub) {
        ngx_ioa_room_on_sub_ready();
        return;
    }

    ngx_ioa_redis_load_scripts(rc);
    ngx_ioa_goal_ensure_group();
    ngx_ioa_room_on_cmd_ready();
}


static void
ngx_ioa_redis_on_disconnect(const redisAsyncContext *ac, int status)
{
    ngx_ioa_redis_conn_t *rc = ac->data;

    if (!ngx_ioa_redis_exiting) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: connection lost%s%s", rc->name,
                      ac->errstr[0] ? ": " : "", ac->errstr);
    }

    if (rc->ac != ac) {
        return;
    }

    ngx_ioa_redis_schedule(rc);

    if (rc->is_sub && !ngx_ioa_redis_exiting) {
        ngx_ioa_room_on_sub_lost();
    }
}


static void
ngx_ioa_redis_load_scripts(ngx_ioa_redis_conn_t *rc)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_IOA_SCRIPT_N; i++) {
        if (redisAsyncCommand(rc->ac, ngx_ioa_redis_load_reply,
                              (void *) (uintptr_t) i, "SCRIPT LOAD %s",
                              ngx_ioa_script_sources[i])
            == REDIS_OK)
        {
            ngx_ioa_redis_sent(rc);
        }
    }
}


static void
ngx_ioa_redis_load_reply(redisAsyncContext *ac, void *r, void *data)
{
    redisReply            *reply = r;
    ngx_ioa_redis_conn_t  *rc;
    ngx_uint_t             i;

    rc = ac->data;
    i = (uintptr_t) data;

    ngx_ioa_redis_replied(rc);

    if (reply == NULL) {
        return;
    }

    if (reply->type != REDIS_REPLY_STRING
        || reply->len != 40
        || ngx_strncmp(reply->str, ngx_ioa_script_sha[i], 40) != 0)
    {
        ngx_log_error(NGX_LOG_ALERT, rc->log, 0,
                      "ioa redis: loading script #%ui failed: %*s", i,
                      (size_t) (reply->str ? reply->len : 0),
                      reply->str ? reply->str : "");
    }
}


static void
ngx_ioa_redis_sent(ngx_ioa_redis_conn_t *rc)
{
    if (rc->pending++ == 0 && !rc->timer.timer_set) {
        rc->timer.handler = ngx_ioa_redis_timer_handler;
        rc->timer.data = rc;
        rc->timer.log = rc->log;
        rc->timer.cancelable = 1;

        ngx_add_timer(&rc->timer, ngx_ioa_main_conf()->redis_timeout);
    }
}


static void
ngx_ioa_redis_replied(ngx_ioa_redis_conn_t *rc)
{
    if (rc->pending == 0) {
        return;
    }

    if (--rc->pending == 0) {
        if (rc->timer.timer_set) {
            ngx_del_timer(&rc->timer);
        }

        return;
    }

    ngx_add_timer(&rc->timer, ngx_ioa_main_conf()->redis_timeout);
}


ngx_ioa_redis_req_t *
ngx_ioa_redis_command(ngx_ioa_redis_handler_pt handler, void *data,
    int argc, const char **argv, const size_t *argvlen)
{
    ngx_ioa_redis_req_t  *req;

    if (ngx_ioa_redis_cmd.state != NGX_IOA_REDIS_READY) {
        return NULL;
    }

    req = ngx_alloc(sizeof(ngx_ioa_redis_req_t), ngx_cycle->log);
    if (req == NULL) {
        return NULL;
    }

    req->handler = handler;
    req->data = data;
    req->cmd = NULL;
    req->len = 0;
    req->script = -1;
    req->resent = 0;

    if (redisAsyncCommandArgv(ngx_ioa_redis_cmd.ac, ngx_ioa_redis_reply, req,
                              argc, argv, argvlen)
        != REDIS_OK)
    {
        ngx_free(req);
        return NULL;
    }

    ngx_ioa_redis_sent(&ngx_ioa_redis_cmd);

    return req;
}


ngx_ioa_redis_req_t *
ngx_ioa_redis_script(ngx_ioa_script_e script,
    ngx_ioa_redis_handler_pt handler, void *data, int nkeys, int argc,
    const char **argv, const size_t *argvlen)
{
    int                   n;
    size_t                len;
    u_char               *p;
    ngx_ioa_redis_req_t  *req;

    if (ngx_ioa_redis_cmd.state != NGX_IOA_REDIS_READY) {
        return NULL;
    }

    /*
     * The command is written in RESP here rather than by hiredis'
     * redisFormatCommandArgv(), which runs sprintf() for every argument: on
     * the post path that was the largest user-space cost after malloc.  It
     * lives right behind the request, one allocation for both, and is kept
     * for a NOSCRIPT resend.
     */

    len = sizeof("*" "\r\n") - 1 + NGX_INT_T_LEN
          + sizeof("$7\r\nEVALSHA\r\n") - 1
          + sizeof("$40\r\n" "\r\n") - 1 + 40
          + sizeof("$" "\r\n" "\r\n") - 1 + 2 * NGX_INT_T_LEN;

    for (n = 0; n < argc; n++) {
        len += sizeof("$" "\r\n" "\r\n") - 1 + NGX_SIZE_T_LEN + argvlen[n];
    }

    req = ngx_alloc(sizeof(ngx_ioa_redis_req_t) + len, ngx_cycle->log);
    if (req == NULL) {
        return NULL;
    }

    p = (u_char *) (req + 1);

    p = ngx_sprintf(p, "*%d\r\n$7\r\nEVALSHA\r\n$40\r\n", argc + 3);
    p = ngx_cpymem(p, ngx_ioa_script_sha[script], 40);
    *p++ = CR; *p++ = LF;
    p = ngx_ioa_redis_bulk_int(p, nkeys);

    for (n = 0; n < argc; n++) {
        p = ngx_ioa_redis_bulk(p, (u_char *) argv[n], argvlen[n]);
    }

    req->handler = handler;
    req->data = data;
    req->cmd = (char *) (req + 1);
    req->len = p - (u_char *) req->cmd;
    req->script = script;
    req->resent = 0;

    if (redisAsyncFormattedCommand(ngx_ioa_redis_cmd.ac, ngx_ioa_redis_reply,
                                   req, req->cmd, req->len)
        != REDIS_OK)
    {
        ngx_free(req);
        return NULL;
    }

    ngx_ioa_redis_sent(&ngx_ioa_redis_cmd);

    return req;
}


/* "$<len>\r\n<data>\r\n": one RESP bulk string */

static u_char *
ngx_ioa_redis_bulk(u_char *p, u_char *data, size_t len)
{
    *p++ = '$';
    p = ngx_ioa_redis_uint(p, len);
    *p++ = CR; *p++ = LF;
    p = ngx_cpymem(p, data, len);
    *p++ = CR; *p++ = LF;

    return p;
}


static u_char *
ngx_ioa_redis_bulk_int(u_char *p, ngx_int_t n)
{
    u_char  *q, buf[NGX_INT_T_LEN];

    q = buf;

    if (n < 0) {
        *q++ = '-';
        n = -n;
    }

    q = ngx_ioa_redis_uint(q, (size_t) n);

    return ngx_ioa_redis_bulk(p, buf, q - buf);
}


/* decimal digits without the printf machinery: this runs per argument */

static u_char *
ngx_ioa_redis_uint(u_char *p, size_t n)
{
    u_char  *s, *e, c;

    s = p;

    do {
        *p++ = (u_char) ('0' + n % 10);
        n /= 10;
    } while (n);

    for (e = p - 1; s < e; s++, e--) {
        c = *s;
        *s = *e;
        *e = c;
    }

    return p;
}


void
ngx_ioa_redis_cancel(ngx_ioa_redis_req_t *req)
{
    /* the reply still arrives; it is dropped and the request freed then */
    req->handler = NULL;
    req->data = NULL;
}


static void
ngx_ioa_redis_reply(redisAsyncContext *ac, void *r, void *data)
{
    redisReply            *reply = r;
    ngx_ioa_redis_req_t   *req = data;
    ngx_ioa_redis_conn_t  *rc;

    rc = ac->data;

    ngx_ioa_redis_replied(rc);

    if (reply
        && reply->type == REDIS_REPLY_ERROR
        && req->script >= 0
        && !req->resent
        && ngx_strncmp(reply->str, "NOSCRIPT", 8) == 0
        && !(ac->c.flags & (REDIS_DISCONNECTING|REDIS_FREEING)))
    {
        ngx_log_error(NGX_LOG_WARN, rc->log, 0,
                      "ioa redis: script #%i missing in Redis, reloading",
                      req->script);

        req->resent = 1;

        if (redisAsyncCommand(ac, ngx_ioa_redis_load_reply,
                              (void *) (uintptr_t) req->script,
                              "SCRIPT LOAD %s",
                              ngx_ioa_script_sources[req->script])
            == REDIS_OK)
        {
            ngx_ioa_redis_sent(rc);
        }

        if (redisAsyncFormattedCommand(ac, ngx_ioa_redis_reply, req,
                                       req->cmd, req->len)
            == REDIS_OK)
        {
            ngx_ioa_redis_sent(rc);
            return;
        }
    }

    if (req->handler) {
        req->handler(reply, req->data);
    }

    ngx_free(req);
}


ngx_int_t
ngx_ioa_redis_subscribe(ngx_str_t *channel, ngx_uint_t pattern)
{
    const char  *argv[2];
    size_t       argvlen[2];

    if (ngx_ioa_redis_sub.state != NGX_IOA_REDIS_READY) {
        return NGX_DECLINED;
    }

    argv[0] = pattern ? "PSUBSCRIBE" : "SUBSCRIBE";
    argvlen[0] = ngx_strlen(argv[0]);
    argv[1] = (const char *) channel->data;
    argvlen[1] = channel->len;

    if (redisAsyncCommandArgv(ngx_ioa_redis_sub.ac, ngx_ioa_redis_sub_reply,
                              NULL, 2, argv, argvlen)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_redis_sent(&ngx_ioa_redis_sub);

    return NGX_OK;
}


ngx_int_t
ngx_ioa_redis_unsubscribe(ngx_str_t *channel, ngx_uint_t pattern)
{
    const char  *argv[2];
    size_t       argvlen[2];

    if (ngx_ioa_redis_sub.state != NGX_IOA_REDIS_READY) {
        return NGX_DECLINED;
    }

    argv[0] = pattern ? "PUNSUBSCRIBE" : "UNSUBSCRIBE";
    argvlen[0] = ngx_strlen(argv[0]);
    argv[1] = (const char *) channel->data;
    argvlen[1] = channel->len;

    if (redisAsyncCommandArgv(ngx_ioa_redis_sub.ac, ngx_ioa_redis_sub_reply,
                              NULL, 2, argv, argvlen)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_redis_sent(&ngx_ioa_redis_sub);

    return NGX_OK;
}


static void
ngx_ioa_redis_sub_reply(redisAsyncContext *ac, void *r, void *data)
{
    redisReply  *reply = r;
    redisReply  *type, *chan, *msg;
    ngx_str_t    t, channel, payload;
    ngx_uint_t   pattern;

    if (reply == NULL
        || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    type = reply->element[0];
    t.data = (u_char *) type->str;
    t.len = type->len;

    pattern = (t.data[0] == 'p');

    if (pattern && reply->elements == 4) {
        /* pmessage, pattern, channel, payload */
        chan = reply->element[2];
        msg = reply->element[3];

    } else {
        chan = reply->element[1];
        msg = reply->element[2];
    }

    if (chan->type != REDIS_REPLY_STRING) {
        return;
    }

    channel.data = (u_char *) chan->str;
    channel.len = chan->len;

    if (t.len - pattern == 7
        && ngx_strncmp(t.data + pattern, "message", 7) == 0)
    {
        if (msg->type != REDIS_REPLY_STRING) {
            return;
        }

        payload.data = (u_char *) msg->str;
        payload.len = msg->len;

        ngx_ioa_room_on_message(&channel, &payload, pattern);
        return;
    }

    if (t.len - pattern == 9
        && ngx_strncmp(t.data + pattern, "subscribe", 9) == 0)
    {
        ngx_ioa_redis_replied(&ngx_ioa_redis_sub);
        ngx_ioa_room_on_subscribed(&channel, pattern);
        return;
    }

    if (t.len - pattern == 11
        && ngx_strncmp(t.data + pattern, "unsubscribe", 11) == 0)
    {
        ngx_ioa_redis_replied(&ngx_ioa_redis_sub);
        ngx_ioa_room_on_unsubscribed(&channel, pattern);
        return;
    }
}


/* the first word of an error reply is its code: our scripts answer
 * "NOTMEMBER ...", Redis itself "ERR ...", "OOM ...", "BUSY ..." */

ngx_int_t
ngx_ioa_redis_error(redisReply *reply, ngx_str_t *code, ngx_str_t *text)
{
    u_char  *p, *last;

    if (reply == NULL) {
        ngx_str_set(code, "redis_unavailable");
        ngx_str_set(text, "Redis did not answer; the operation may be "
                          "retried once Redis is back");
        return NGX_ERROR;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        return NGX_OK;
    }

    p = (u_char *) reply->str;
    last = p + reply->len;

    code->data = p;

    while (p < last && *p != ' ') {
        p++;
    }

    code->len = p - code->data;

    if (p < last) {
        p++;
    }

    text->data = p;
    text->len = last - p;

    return NGX_ERROR;
}
