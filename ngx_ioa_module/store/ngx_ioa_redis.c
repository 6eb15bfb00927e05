
/*
 * Copyright (C) ioa authors
 *
 * The per-worker Redis client.
 *
 * Each nginx worker holds two connections to every Redis node it uses: one
 * for commands and one for pub/sub (Redis accepts nothing else on a
 * subscribed connection).  A standalone Redis is one node; a Redis Cluster
 * is one node per master, and ngx_ioa_redis_cluster.c says which node a
 * command goes to.  Every connection runs the same small state machine:
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
 * The first command on a new command connection is CLUSTER SLOTS while the
 * setup is not known yet (see ngx_ioa_redis_cluster.c); then the scripts
 * (the redis-scripts directory, embedded at build time, hashed once at
 * start) are sent with SCRIPT LOAD, so EVALSHA that follows on the same
 * connection always finds them: on a Cluster every master gets them on its
 * own connection.  If Redis still answers NOSCRIPT (SCRIPT FLUSH, a
 * failover to a replica that never saw the script) the script is loaded
 * again on that connection and the very same command is resent, in order,
 * from the formatted copy every request keeps.
 *
 * The same copy serves the Cluster's redirections: MOVED (the slot has
 * another owner: resent there, and the map is fixed), ASK (the slot is
 * being migrated and the key is already on the target: ASKING and the
 * command, to that node only) and TRYAGAIN (a script's keys are split by a
 * migration for a moment: resent every 25 ms, for at most
 * ioa_redis_timeout).  A request follows at most NGX_IOA_REDIS_REDIRECTS
 * redirections.  CLUSTERDOWN, LOADING and
 * MASTERDOWN are reported to the caller as "Redis unavailable": the command
 * did not run, and the map is refreshed.  A command whose connection is lost
 * is never resent: it may have run (a post), and only the caller knows
 * whether repeating it is safe.
 *
 * hiredis writes its output buffer with one write() and then moves what
 * was not written to the front of it: a buffer of N bytes written in
 * pieces of W costs N^2 / 2W bytes of memmove.  A thousand agents posting
 * 1 MiB envelopes at once made that a gigabyte buffer, and the worker spent
 * nine tenths of its time moving it.  So hiredis is given commands only
 * while its buffer holds less than NGX_IOA_REDIS_OBUF bytes; the others
 * wait, in order, in the connection's backlog (their formatted copies are
 * already kept), and join the buffer as it drains (ngx_ioa_redis_wrote).
 * A backlogged request that is cancelled is dropped unsent; when the
 * connection is lost, the backlog is answered "unavailable" after what
 * hiredis held, the same as the commands hiredis held.
 *
 * Pub/sub connections bypass hiredis' reply dispatch: hiredis 0.14 keeps a
 * callback per channel for SUBSCRIBE and PSUBSCRIBE only, so the messages of
 * a shard channel (SSUBSCRIBE, Redis 7, the Cluster's per-slot pub/sub)
 * would hit an assertion there.  Our read handler takes every reply off the
 * connection's reader itself and dispatches on its first element, for all
 * three kinds alike; commands are appended to the connection's buffer and
 * hiredis only writes them.  What the replies mean for a subscription,
 * and where it goes, is ngx_ioa_sub.c's: this file hands it each message,
 * confirmation, end and refusal, and tells it when a pub/sub connection is
 * ready or lost.
 *
 * The layer knows its users only by what they registered: subscriptions
 * (ngx_ioa_sub_t) for pub/sub, and hooks (ngx_ioa_redis_hooks_t, in
 * ngx_ioa.h) through which the rooms and the goals hear when a command
 * connection comes up, as hiredis' adapters and nginx's upstream call up
 * through function pointers.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"
#include "ngx_ioa_scripts.h"


#define NGX_IOA_BACKOFF_MIN      100

/* MOVED and ASK a request follows in a row before it gives up: a slot
 * migration costs one or two, a failover one; the count starts over after
 * each TRYAGAIN pause, which the time limit bounds instead */
#define NGX_IOA_REDIS_REDIRECTS  16

/* TRYAGAIN: while a slot is being migrated, a script whose keys are
 * partly moved (or partly missing: a room without a floor yet) is refused
 * until the last key has moved; it asks again this often, for at most
 * ioa_redis_timeout */
#define NGX_IOA_REDIS_TRYAGAIN   25

/* bytes in hiredis' output buffer beyond which commands wait in the
 * backlog: a few large envelopes, or thousands of small commands */
#define NGX_IOA_REDIS_OBUF       (512 * 1024)


struct ngx_ioa_redis_req_s {
    ngx_ioa_redis_handler_pt  handler;
    void                     *data;
    char                     *cmd;       /* formatted, kept for resends */
    size_t                    len;
    ngx_int_t                 script;
    ngx_int_t                 slot;
    ngx_uint_t                redirects;
    ngx_uint_t                resent;    /* after NOSCRIPT */
    ngx_msec_t                start;
    int64_t                   start_us;  /* for /metrics */
    ngx_event_t               wait;      /* after TRYAGAIN */
    ngx_queue_t               backlog_q; /* in the connection's backlog */
    ngx_uint_t                ask;       /* ASKING goes first */
};


static ngx_ioa_redis_req_t *ngx_ioa_redis_req(ngx_ioa_redis_handler_pt handler,
    void *data, ngx_int_t script, int nkeys, int argc, const char **argv,
    const size_t *argvlen);
static ngx_int_t ngx_ioa_redis_send(ngx_ioa_redis_node_t *node,
    ngx_ioa_redis_req_t *req, ngx_uint_t ask);
static ngx_int_t ngx_ioa_redis_hand(ngx_ioa_redis_conn_t *rc,
    ngx_ioa_redis_req_t *req);
static void ngx_ioa_redis_backlog_fail(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_done(ngx_ioa_redis_req_t *req, redisReply *reply);
static ngx_int_t ngx_ioa_redis_retry(ngx_ioa_redis_conn_t *rc,
    redisAsyncContext *ac, ngx_ioa_redis_req_t *req, redisReply *reply);
static void ngx_ioa_redis_wait_handler(ngx_event_t *ev);
static void ngx_ioa_redis_schedule(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_retry_handler(ngx_event_t *ev);
static void ngx_ioa_redis_timer_handler(ngx_event_t *ev);
static void ngx_ioa_redis_on_connect(const redisAsyncContext *ac,
    int status);
static void ngx_ioa_redis_on_disconnect(const redisAsyncContext *ac,
    int status);
static void ngx_ioa_redis_auth(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_auth_reply(redisAsyncContext *ac, void *r,
    void *data);
static void ngx_ioa_redis_auth_done(ngx_ioa_redis_conn_t *rc,
    redisReply *reply);
static void ngx_ioa_redis_usable(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_load_scripts(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_sent(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_replied(ngx_ioa_redis_conn_t *rc);
static void ngx_ioa_redis_reply(redisAsyncContext *ac, void *r, void *data);
static void ngx_ioa_redis_ignore_reply(redisAsyncContext *ac, void *r,
    void *data);
static void ngx_ioa_redis_load_reply(redisAsyncContext *ac, void *r,
    void *data);
static void ngx_ioa_redis_sub_read(ngx_event_t *ev);
static void ngx_ioa_redis_sub_reply(ngx_ioa_redis_conn_t *rc,
    redisReply *reply);
static ngx_uint_t ngx_ioa_redis_is(ngx_str_t *s, const char *word);
static u_char *ngx_ioa_redis_bulk(u_char *p, u_char *data, size_t len);
static u_char *ngx_ioa_redis_bulk_int(u_char *p, ngx_int_t n);
static u_char *ngx_ioa_redis_uint(u_char *p, size_t n);


static u_char       ngx_ioa_script_sha[NGX_IOA_SCRIPT_N][40];
static ngx_str_t    ngx_ioa_default_user = ngx_string("default");
static ngx_uint_t   ngx_ioa_redis_exiting;


/* rooms, the discovery index, goals: a few */
#define NGX_IOA_REDIS_HOOKS  8

static const ngx_ioa_redis_hooks_t  *ngx_ioa_redis_hooks[NGX_IOA_REDIS_HOOKS];
static ngx_uint_t                    ngx_ioa_redis_nhooks;


ngx_int_t
ngx_ioa_redis_add_hooks(const ngx_ioa_redis_hooks_t *hooks)
{
    ngx_uint_t  i;

    for (i = 0; i < ngx_ioa_redis_nhooks; i++) {
        if (ngx_ioa_redis_hooks[i] == hooks) {
            return NGX_OK;              /* once per worker */
        }
    }

    if (ngx_ioa_redis_nhooks == NGX_IOA_REDIS_HOOKS) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "ioa redis: too many users (%s)", hooks->name);
        return NGX_ERROR;
    }

    ngx_ioa_redis_hooks[ngx_ioa_redis_nhooks++] = hooks;

    return NGX_OK;
}


void
ngx_ioa_redis_hooks_node_up(ngx_ioa_redis_node_t *node)
{
    ngx_uint_t  i;

    for (i = 0; i < ngx_ioa_redis_nhooks; i++) {
        if (ngx_ioa_redis_hooks[i]->node_up) {
            ngx_ioa_redis_hooks[i]->node_up(node);
        }
    }
}


void
ngx_ioa_redis_hooks_cmd_ready(void)
{
    ngx_uint_t  i;

    for (i = 0; i < ngx_ioa_redis_nhooks; i++) {
        if (ngx_ioa_redis_hooks[i]->cmd_ready) {
            ngx_ioa_redis_hooks[i]->cmd_ready();
        }
    }
}


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

    /* the nodes of ioa_redis, and the first connections */
    return ngx_ioa_redis_cluster_init(cycle);
}


void
ngx_ioa_redis_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node;

    ngx_ioa_redis_exiting = 1;

    ngx_ioa_redis_cluster_exit();

    for (i = 0; i < ngx_ioa_redis_nnodes(); i++) {
        node = ngx_ioa_redis_node(i);
        ngx_ioa_redis_conn_close(&node->cmd);
        ngx_ioa_redis_conn_close(&node->sub);
    }
}


void
ngx_ioa_redis_conn_connect(ngx_ioa_redis_conn_t *rc)
{
    if (ngx_ioa_redis_exiting || ngx_exiting || ngx_terminate) {
        return;
    }

    if (rc->retry.timer_set) {
        ngx_del_timer(&rc->retry);
    }

    if (rc->resolving) {
        return;                        /* the attempt is on its way */
    }

    /* a seed named for nginx's resolver: looked up at every attempt
     * (ngx_ioa_redis_resolve.c), which then goes on here */

    if (rc->node->name.len) {
        ngx_ioa_redis_resolve(rc);
        return;
    }

    ngx_ioa_redis_conn_open(rc);
}


/* a connection attempt to the node's address */

void
ngx_ioa_redis_conn_open(ngx_ioa_redis_conn_t *rc)
{
    redisAsyncContext     *ac;
    ngx_ioa_redis_node_t  *node;

    node = rc->node;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, rc->log, 0,
                   "ioa redis %s connecting to %V", rc->name, &node->addr);

    ac = redisAsyncConnect((char *) node->host, node->port);

    if (ac == NULL) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot allocate a context", rc->name);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    if (ac->err) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot connect to %V: %s",
                      rc->name, &node->addr, ac->errstr);
        ngx_ioa_stat_redis(&node->addr, "connect_failed");
        redisAsyncFree(ac);
        ngx_ioa_redis_schedule(rc);
        return;
    }

    ac->data = rc;

    /* replies with a bound on array lengths (ngx_ioa_redis_reply.c) */
    ac->c.reader->fn = &ngx_ioa_redis_reply_functions;

    if (ngx_ioa_redis_attach(ac, rc->log,
                             rc->is_sub ? ngx_ioa_redis_sub_read : NULL)
        != NGX_OK)
    {
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
    rc->up = 0;
    ngx_ioa_redis_note_health();

    rc->timer.handler = ngx_ioa_redis_timer_handler;
    rc->timer.data = rc;
    rc->timer.log = rc->log;
    rc->timer.cancelable = 1;

    ngx_add_timer(&rc->timer, ngx_ioa_main_conf()->redis_connect_timeout);

    /* a connection in progress shows up as writable; hiredis asks for the
     * write event itself only once a command is queued */

    ac->ev.addWrite(ac->ev.data);
}


/* closes a connection for good (no reconnect); pending callbacks get NULL */

void
ngx_ioa_redis_conn_close(ngx_ioa_redis_conn_t *rc)
{
    redisAsyncContext      *ac;
    ngx_ioa_redis_state_e   state;

    ac = rc->ac;
    state = rc->state;

    ngx_ioa_redis_resolve_cancel(rc);

    if (rc->retry.timer_set) {
        ngx_del_timer(&rc->retry);
    }

    if (rc->timer.timer_set) {
        ngx_del_timer(&rc->timer);
    }

    rc->ac = NULL;
    rc->state = NGX_IOA_REDIS_DOWN;
    rc->pending = 0;
    rc->up = 0;
    ngx_ioa_redis_note_health();

    if (ac) {
        /* our disconnect callback sees rc->ac != ac and stays out */
        redisAsyncFree(ac);
    }

    if (rc->is_sub && state == NGX_IOA_REDIS_READY && !ngx_ioa_redis_exiting)
    {
        ngx_ioa_sub_node_lost(rc->node);
    }
}


/* an attempt that failed before hiredis had a context: counted as "what"
 * in /metrics, retried after the backoff */

void
ngx_ioa_redis_conn_failed(ngx_ioa_redis_conn_t *rc, const char *what)
{
    ngx_ioa_stat_redis(&rc->node->addr, what);
    ngx_ioa_redis_schedule(rc);
}


static void
ngx_ioa_redis_schedule(ngx_ioa_redis_conn_t *rc)
{
    ngx_msec_t            delay;
    ngx_ioa_main_conf_t  *mcf;

    rc->ac = NULL;
    rc->state = NGX_IOA_REDIS_DOWN;
    rc->pending = 0;
    rc->up = 0;
    ngx_ioa_redis_note_health();

    if (rc->timer.timer_set) {
        ngx_del_timer(&rc->timer);
    }

    ngx_ioa_redis_backlog_fail(rc);

    if (ngx_ioa_redis_exiting || ngx_exiting || ngx_terminate
        || !ngx_ioa_redis_conn_wanted(rc))
    {
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
    ngx_ioa_redis_conn_t *rc = ev->data;

    if (rc->state == NGX_IOA_REDIS_DOWN && ngx_ioa_redis_conn_wanted(rc)) {
        ngx_ioa_redis_conn_connect(rc);
    }
}


static void
ngx_ioa_redis_timer_handler(ngx_event_t *ev)
{
    ngx_ioa_redis_conn_t *rc = ev->data;

    redisAsyncContext  *ac;

    ac = rc->ac;

    if (ac != NULL && rc->state != NGX_IOA_REDIS_CONNECTING
        && ngx_ioa_redis_unread(ac) > 0)
    {
        /*
         * Redis has answered; this worker was too busy to read it yet (a
         * burst of large envelopes from many clients).  Silence from Redis
         * is the timeout, not a busy worker: wait on, the read event is
         * ready and comes first.
         */

        ngx_add_timer(&rc->timer, ngx_ioa_main_conf()->redis_timeout);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                  "ioa redis %s: %s timed out, reconnecting, redis: %V",
                  rc->name,
                  rc->state == NGX_IOA_REDIS_CONNECTING ? "connect" : "command",
                  &rc->node->addr);

    ngx_ioa_stat_redis(&rc->node->addr, "timeout");

    if (ac == NULL) {
        return;
    }

    /* the disconnect callback (or, for an unfinished connect, nothing)
     * follows from the free; make sure a reconnect is scheduled either way */

    if (rc->state == NGX_IOA_REDIS_CONNECTING) {
        rc->ac = NULL;
        redisAsyncFree(ac);
        ngx_ioa_redis_schedule(rc);

        if (!rc->is_sub) {
            ngx_ioa_redis_node_lost(rc->node);
        }

        return;
    }

    redisAsyncFree(ac);
}


static void
ngx_ioa_redis_on_connect(const redisAsyncContext *ac, int status)
{
    ngx_ioa_redis_conn_t *rc = ac->data;

    if (rc->timer.timer_set) {
        ngx_del_timer(&rc->timer);
    }

    if (status != REDIS_OK) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot connect to %V: %s",
                      rc->name, &rc->node->addr, ac->errstr);
        ngx_ioa_stat_redis(&rc->node->addr, "connect_failed");

        /* hiredis frees the context when we return */
        ngx_ioa_redis_schedule(rc);

        if (!rc->is_sub) {
            ngx_ioa_redis_node_lost(rc->node);
        }

        return;
    }

    ngx_log_error(NGX_LOG_INFO, rc->log, 0,
                  "ioa redis %s: connected to %V", rc->name, &rc->node->addr);

    if (rc->connected) {
        ngx_ioa_stat_redis(&rc->node->addr, "reconnect");
    }

    rc->connected = 1;

    rc->state = NGX_IOA_REDIS_READY;
    rc->backoff = 0;

    if (rc->is_sub) {
        /* nothing is read before the first subscribe otherwise, and a
         * closed connection would go unnoticed */
        ac->ev.addRead(ac->ev.data);
    }

    if (ngx_ioa_main_conf()->redis_password.len) {
        ngx_ioa_redis_auth(rc);
        return;
    }

    ngx_ioa_redis_usable(rc);
}


/*
 * AUTH before anything else on every connection (ioa_redis_password_file,
 * ioa_redis_user); the rest of the connect waits for its answer, so a
 * refusal is reported once, by name, instead of as NOAUTH on every command.
 * A command connection takes the answer through hiredis' callbacks, a
 * pub/sub connection in its own read handler (ngx_ioa_redis_sub_reply).
 */

static void
ngx_ioa_redis_auth(ngx_ioa_redis_conn_t *rc)
{
    int                   argc, ok;
    size_t                argvlen[3];
    const char           *argv[3];
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    argc = 0;
    argv[argc] = "AUTH";
    argvlen[argc++] = 4;

    if (mcf->redis_user.len) {
        argv[argc] = (const char *) mcf->redis_user.data;
        argvlen[argc++] = mcf->redis_user.len;
    }

    argv[argc] = (const char *) mcf->redis_password.data;
    argvlen[argc++] = mcf->redis_password.len;

    if (rc->is_sub) {
        ok = redisAppendCommandArgv(&rc->ac->c, argc, argv, argvlen)
             == REDIS_OK;

        if (ok) {
            rc->ac->ev.addWrite(rc->ac->ev.data);
        }

    } else {
        ok = redisAsyncCommandArgv(rc->ac, ngx_ioa_redis_auth_reply, NULL,
                                   argc, argv, argvlen)
             == REDIS_OK;
    }

    if (!ok) {
        redisAsyncDisconnect(rc->ac);
        return;
    }

    rc->authing = 1;
    ngx_ioa_redis_sent(rc);
}


static void
ngx_ioa_redis_auth_reply(redisAsyncContext *ac, void *r, void *data)
{
    redisReply            *reply = r;
    ngx_ioa_redis_conn_t  *rc;

    if (reply == NULL) {
        /* the connection went away before the answer */
        return;
    }

    rc = ac->data;

    ngx_ioa_redis_auth_done(rc, reply);
}


static void
ngx_ioa_redis_auth_done(ngx_ioa_redis_conn_t *rc, redisReply *reply)
{
    ngx_str_t            *user;
    ngx_ioa_main_conf_t  *mcf;

    rc->authing = 0;
    ngx_ioa_redis_replied(rc);

    if (reply->type == REDIS_REPLY_ERROR) {
        mcf = ngx_ioa_main_conf();
        user = mcf->redis_user.len ? &mcf->redis_user : &ngx_ioa_default_user;

        /* the password is never logged, only whose it is */
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: %V refused AUTH as \"%V\": %*s; "
                      "check ioa_redis_user and ioa_redis_password_file, "
                      "retrying with backoff",
                      rc->name, &rc->node->addr, user,
                      (size_t) reply->len, reply->str);

        redisAsyncDisconnect(rc->ac);
        return;
    }

    ngx_ioa_redis_usable(rc);
}


/* connected (and authenticated): what a connection does first */

static void
ngx_ioa_redis_usable(ngx_ioa_redis_conn_t *rc)
{
    if (rc->is_sub) {
        ngx_ioa_sub_node_ready(rc->node);
        return;
    }

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        /* CLUSTER SLOTS first; its answer brings the node up */
        ngx_ioa_redis_detect(rc->node);
        return;

    case NGX_IOA_REDIS_STANDALONE:
        ngx_ioa_redis_node_up(rc->node);
        return;

    default:
        ngx_ioa_redis_node_up(rc->node);
        ngx_ioa_redis_refresh(0);
        return;
    }
}


/* a command connection can take commands: scripts first, then what waited
 * for Redis */

void
ngx_ioa_redis_node_up(ngx_ioa_redis_node_t *node)
{
    ngx_ioa_redis_conn_t  *rc;

    rc = &node->cmd;

    if (rc->up || rc->state != NGX_IOA_REDIS_READY) {
        return;
    }

    rc->up = 1;

    ngx_ioa_redis_load_scripts(rc);
    ngx_ioa_redis_hooks_node_up(node);
    ngx_ioa_redis_hooks_cmd_ready();
    ngx_ioa_redis_note_health();
}


static void
ngx_ioa_redis_on_disconnect(const redisAsyncContext *ac, int status)
{
    ngx_ioa_redis_conn_t *rc = ac->data;

    if (!ngx_ioa_redis_exiting) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: connection lost%s%s, redis: %V",
                      rc->name, ac->errstr[0] ? ": " : "", ac->errstr,
                      &rc->node->addr);

        /* not when the hub freed the connection itself (a timeout, counted
         * as such) */
        if (status != REDIS_OK) {
            ngx_ioa_stat_redis(&rc->node->addr, "connection_lost");
        }
    }

    if (rc->ac != ac) {
        return;
    }

    ngx_ioa_redis_schedule(rc);

    if (ngx_ioa_redis_exiting) {
        return;
    }

    if (rc->is_sub) {
        ngx_ioa_sub_node_lost(rc->node);

    } else {
        ngx_ioa_redis_node_lost(rc->node);
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

    if (reply->type == REDIS_REPLY_ERROR
        && (ngx_strncmp(reply->str, "LOADING", 7) == 0
            || ngx_strncmp(reply->str, "BUSY", 4) == 0
            || ngx_strncmp(reply->str, "MASTERDOWN", 10) == 0))
    {
        /* a Redis just restarted (reading its AOF) or busy: nothing is
         * wrong with the script, and the first EVALSHA's NOSCRIPT loads
         * it (ngx_ioa_redis_retry) once Redis answers */
        ngx_log_error(NGX_LOG_WARN, rc->log, 0,
                      "ioa redis: script #%ui not loaded yet (%*s), it is "
                      "loaded when first used, redis: %V",
                      i, (size_t) reply->len, reply->str, &rc->node->addr);
        return;
    }

    if (reply->type != REDIS_REPLY_STRING
        || reply->len != 40
        || ngx_strncmp(reply->str, ngx_ioa_script_sha[i], 40) != 0)
    {
        ngx_log_error(NGX_LOG_ALERT, rc->log, 0,
                      "ioa redis: loading script #%ui failed: %*s, redis: %V",
                      i, (size_t) (reply->str ? reply->len : 0),
                      reply->str ? reply->str : "", &rc->node->addr);
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


/* commands */

ngx_ioa_redis_req_t *
ngx_ioa_redis_command(ngx_ioa_redis_handler_pt handler, void *data,
    int argc, const char **argv, const size_t *argvlen)
{
    ngx_ioa_redis_req_t   *req;
    ngx_ioa_redis_node_t  *node;

    req = ngx_ioa_redis_req(handler, data, -1, 0, argc, argv, argvlen);
    if (req == NULL) {
        return NULL;
    }

    node = ngx_ioa_redis_route(req->slot);

    if (node == NULL || !node->cmd.up
        || ngx_ioa_redis_send(node, req, 0) != NGX_OK)
    {
        ngx_free(req);
        return NULL;
    }

    return req;
}


/* a command for one node, whatever its keys (CLUSTER SLOTS) */

ngx_ioa_redis_req_t *
ngx_ioa_redis_node_command(ngx_ioa_redis_node_t *node,
    ngx_ioa_redis_handler_pt handler, void *data, int argc,
    const char **argv, const size_t *argvlen)
{
    ngx_ioa_redis_req_t  *req;

    if (node->cmd.state != NGX_IOA_REDIS_READY) {
        return NULL;
    }

    req = ngx_ioa_redis_req(handler, data, -1, 0, argc, argv, argvlen);
    if (req == NULL) {
        return NULL;
    }

    /* not redirected: it is this node's answer that is wanted */
    req->redirects = NGX_IOA_REDIS_REDIRECTS;

    if (ngx_ioa_redis_send(node, req, 0) != NGX_OK) {
        ngx_free(req);
        return NULL;
    }

    return req;
}


ngx_ioa_redis_req_t *
ngx_ioa_redis_script(ngx_ioa_script_e script,
    ngx_ioa_redis_handler_pt handler, void *data, int nkeys, int argc,
    const char **argv, const size_t *argvlen)
{
    ngx_ioa_redis_req_t   *req;
    ngx_ioa_redis_node_t  *node;

    req = ngx_ioa_redis_req(handler, data, script, nkeys, argc, argv,
                            argvlen);
    if (req == NULL) {
        return NULL;
    }

    node = ngx_ioa_redis_route(req->slot);

    if (node == NULL || !node->cmd.up
        || ngx_ioa_redis_send(node, req, 0) != NGX_OK)
    {
        ngx_free(req);
        return NULL;
    }

    return req;
}


/*
 * A request and its command.  The command is written in RESP here rather
 * than by hiredis' redisFormatCommandArgv(), which runs sprintf() for every
 * argument: on the post path that was the largest user-space cost after
 * malloc.  It lives right behind the request, one allocation for both, and
 * is kept for the resends (NOSCRIPT, MOVED, ASK, TRYAGAIN).  A script
 * (script >= 0) is "EVALSHA <sha> <nkeys>" and argv; a command is argv.
 */

static ngx_ioa_redis_req_t *
ngx_ioa_redis_req(ngx_ioa_redis_handler_pt handler, void *data,
    ngx_int_t script, int nkeys, int argc, const char **argv,
    const size_t *argvlen)
{
    int                   n;
    size_t                len;
    u_char               *p;
    ngx_ioa_redis_req_t  *req;

    len = sizeof("*" "\r\n") - 1 + NGX_INT_T_LEN;

    if (script >= 0) {
        len += sizeof("$7\r\nEVALSHA\r\n") - 1
               + sizeof("$40\r\n" "\r\n") - 1 + 40
               + sizeof("$" "\r\n" "\r\n") - 1 + 2 * NGX_INT_T_LEN;
    }

    for (n = 0; n < argc; n++) {
        len += sizeof("$" "\r\n" "\r\n") - 1 + NGX_SIZE_T_LEN + argvlen[n];
    }

    req = ngx_alloc(sizeof(ngx_ioa_redis_req_t) + len, ngx_cycle->log);
    if (req == NULL) {
        return NULL;
    }

    p = (u_char *) (req + 1);

    if (script >= 0) {
        p = ngx_sprintf(p, "*%d\r\n$7\r\nEVALSHA\r\n$40\r\n", argc + 3);
        p = ngx_cpymem(p, ngx_ioa_script_sha[script], 40);
        *p++ = CR; *p++ = LF;
        p = ngx_ioa_redis_bulk_int(p, nkeys);

    } else {
        p = ngx_sprintf(p, "*%d\r\n", argc);
    }

    for (n = 0; n < argc; n++) {
        p = ngx_ioa_redis_bulk(p, (u_char *) argv[n], argvlen[n]);
    }

    req->handler = handler;
    req->data = data;
    req->cmd = (char *) (req + 1);
    req->len = p - (u_char *) req->cmd;
    req->script = script;
    req->redirects = 0;
    req->resent = 0;
    req->start = ngx_current_msec;
    req->start_us = ngx_ioa_stats_now_us();
    ngx_memzero(&req->wait, sizeof(ngx_event_t));
    req->backlog_q.next = NULL;
    req->ask = 0;

    /* a standalone Redis has one node: no key needs hashing; a script's
     * first key is its first argument here */

    if (ngx_ioa_redis_mode != NGX_IOA_REDIS_CLUSTER) {
        req->slot = -1;

    } else if (script >= 0) {
        req->slot = (nkeys > 0 && argc > 0)
                    ? (ngx_int_t) ioa_key_slot(argv[0], argvlen[0])
                    : -1;

    } else {
        req->slot = ngx_ioa_redis_command_slot(argc, argv, argvlen);
    }

    return req;
}


/* "$<len>\r\n<data>\r\n": one RESP bulk string; an empty argument may
 * come as an ngx_str_t that was never set (data NULL), which memcpy() must
 * not be given even for no bytes */

static u_char *
ngx_ioa_redis_bulk(u_char *p, u_char *data, size_t len)
{
    *p++ = '$';
    p = ngx_ioa_redis_uint(p, len);
    *p++ = CR; *p++ = LF;

    if (len) {
        p = ngx_cpymem(p, data, len);
    }

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


static ngx_int_t
ngx_ioa_redis_send(ngx_ioa_redis_node_t *node, ngx_ioa_redis_req_t *req,
    ngx_uint_t ask)
{
    ngx_ioa_redis_conn_t  *rc;

    rc = &node->cmd;

    /* a redirection may go to a node still connecting: hiredis queues the
     * command and writes it once connected */

    if (rc->ac == NULL) {
        return NGX_DECLINED;
    }

    req->ask = ask;

    if (!ngx_queue_empty(&rc->backlog)
        || sdslen(rc->ac->c.obuf) >= NGX_IOA_REDIS_OBUF)
    {
        ngx_queue_insert_tail(&rc->backlog, &req->backlog_q);
        return NGX_OK;
    }

    return ngx_ioa_redis_hand(rc, req);
}


/* into hiredis' output buffer */

static ngx_int_t
ngx_ioa_redis_hand(ngx_ioa_redis_conn_t *rc, ngx_ioa_redis_req_t *req)
{
    if (req->ask
        && redisAsyncCommand(rc->ac, ngx_ioa_redis_ignore_reply, NULL,
                             "ASKING")
           == REDIS_OK)
    {
        ngx_ioa_redis_sent(rc);
    }

    if (redisAsyncFormattedCommand(rc->ac, ngx_ioa_redis_reply, req,
                                   req->cmd, req->len)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_redis_sent(rc);

    return NGX_OK;
}


/* hiredis wrote (part of) its buffer: the backlog tops it up */

void
ngx_ioa_redis_wrote(redisAsyncContext *ac)
{
    ngx_queue_t           *q;
    ngx_ioa_redis_req_t   *req;
    ngx_ioa_redis_conn_t  *rc;

    rc = ac->data;

    while (rc->ac == ac
           && !ngx_queue_empty(&rc->backlog)
           && sdslen(ac->c.obuf) < NGX_IOA_REDIS_OBUF)
    {
        q = ngx_queue_head(&rc->backlog);
        ngx_queue_remove(q);
        req = ngx_queue_data(q, ngx_ioa_redis_req_t, backlog_q);
        req->backlog_q.next = NULL;

        if (ngx_ioa_redis_hand(rc, req) != NGX_OK) {
            ngx_ioa_redis_done(req, NULL);
        }
    }
}


/* the connection is gone: what it never sent is answered "unavailable" */

static void
ngx_ioa_redis_backlog_fail(ngx_ioa_redis_conn_t *rc)
{
    ngx_queue_t          *q;
    ngx_ioa_redis_req_t  *req;

    while (!ngx_queue_empty(&rc->backlog)) {
        q = ngx_queue_head(&rc->backlog);
        ngx_queue_remove(q);
        req = ngx_queue_data(q, ngx_ioa_redis_req_t, backlog_q);
        req->backlog_q.next = NULL;

        ngx_ioa_redis_done(req, NULL);
    }
}


void
ngx_ioa_redis_cancel(ngx_ioa_redis_req_t *req)
{
    if (req->backlog_q.next) {
        /* never sent: nothing will answer it */
        ngx_queue_remove(&req->backlog_q);
        ngx_free(req);
        return;
    }

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

    if (reply && reply->type == REDIS_REPLY_ERROR) {

        switch (ngx_ioa_redis_retry(rc, ac, req, reply)) {

        case NGX_OK:
            return;

        case NGX_ERROR:
            reply = NULL;
            break;

        default:
            break;
        }
    }

    ngx_ioa_redis_done(req, reply);
}


static void
ngx_ioa_redis_done(ngx_ioa_redis_req_t *req, redisReply *reply)
{
    if (reply) {
        ngx_ioa_stat_observe(NGX_IOA_HIST_REDIS,
                             ngx_ioa_stats_now_us() - req->start_us);
    }

    if (req->handler) {
        req->handler(reply, req->data);
    }

    ngx_free(req);
}


/*
 * An error reply that may be worth another try: NGX_OK when the request
 * was sent again (or will be), NGX_ERROR when the caller is to hear
 * "unavailable", NGX_DECLINED when the error is the answer.
 */

static ngx_int_t
ngx_ioa_redis_retry(ngx_ioa_redis_conn_t *rc, redisAsyncContext *ac,
    ngx_ioa_redis_req_t *req, redisReply *reply)
{
    ngx_int_t              slot;
    ngx_uint_t             ask;
    ngx_ioa_redis_node_t  *node;

    if (req->script >= 0
        && !req->resent
        && ngx_strncmp(reply->str, "NOSCRIPT", 8) == 0
        && !(ac->c.flags & (REDIS_DISCONNECTING|REDIS_FREEING)))
    {
        ngx_log_error(NGX_LOG_WARN, rc->log, 0,
                      "ioa redis: script #%i missing in Redis, reloading, "
                      "redis: %V", req->script, &rc->node->addr);

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
            return NGX_OK;
        }

        return NGX_DECLINED;
    }

    if (ngx_ioa_redis_mode != NGX_IOA_REDIS_CLUSTER) {
        return NGX_DECLINED;
    }

    if (ngx_strncmp(reply->str, "CLUSTERDOWN", 11) == 0
        || ngx_strncmp(reply->str, "LOADING", 7) == 0
        || ngx_strncmp(reply->str, "MASTERDOWN", 10) == 0)
    {
        /* it did not run; the map may be changing under us */
        ngx_ioa_redis_refresh(1);
        return NGX_ERROR;
    }

    if (ngx_strncmp(reply->str, "TRYAGAIN", 8) == 0) {

        if (ngx_current_msec - req->start
            >= ngx_ioa_main_conf()->redis_timeout)
        {
            /* it did not run; a migration that slow is an outage */
            return NGX_ERROR;
        }

        /* while a slot migrates, a script with a missing key goes round
         * ASK (source), TRYAGAIN (target) until the slot is settled */
        req->redirects = 0;

        req->wait.handler = ngx_ioa_redis_wait_handler;
        req->wait.data = req;
        req->wait.log = rc->log;
        req->wait.cancelable = 1;

        ngx_add_timer(&req->wait, NGX_IOA_REDIS_TRYAGAIN);

        return NGX_OK;
    }

    if (req->redirects >= NGX_IOA_REDIS_REDIRECTS) {
        /* a map that keeps changing under the request: it did not run */
        return (ngx_strncmp(reply->str, "MOVED ", 6) == 0
                || ngx_strncmp(reply->str, "ASK ", 4) == 0)
               ? NGX_ERROR : NGX_DECLINED;
    }

    node = ngx_ioa_redis_redirect(reply, &slot, &ask);

    if (node) {
        req->redirects++;

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rc->log, 0,
                       "ioa redis: %s slot %i to %V",
                       ask ? "ASK" : "MOVED", slot, &node->addr);

        if (ngx_ioa_redis_send(node, req, ask) == NGX_OK) {
            return NGX_OK;
        }

        return NGX_ERROR;
    }

    return NGX_DECLINED;
}


static void
ngx_ioa_redis_wait_handler(ngx_event_t *ev)
{
    ngx_ioa_redis_req_t *req = ev->data;

    ngx_ioa_redis_node_t  *node;

    node = ngx_ioa_redis_route(req->slot);

    if (node == NULL || ngx_ioa_redis_send(node, req, 0) != NGX_OK) {
        ngx_ioa_redis_done(req, NULL);
    }
}


static void
ngx_ioa_redis_ignore_reply(redisAsyncContext *ac, void *r, void *data)
{
    ngx_ioa_redis_replied(ac->data);
}


/* the sends: formatted now, the builder released */

ngx_ioa_redis_req_t *
ngx_ioa_redis_command_args(ngx_ioa_redis_handler_pt handler, void *data,
    ngx_ioa_args_t *a)
{
    ngx_ioa_redis_req_t  *req;

    req = a->failed ? NULL
                    : ngx_ioa_redis_command(handler, data, (int) a->n,
                                            a->argv, a->argvlen);

    ngx_ioa_args_free(a);

    return req;
}


ngx_ioa_redis_req_t *
ngx_ioa_redis_script_args(ngx_ioa_script_e script,
    ngx_ioa_redis_handler_pt handler, void *data, int nkeys,
    ngx_ioa_args_t *a)
{
    ngx_ioa_redis_req_t  *req;

    req = a->failed ? NULL
                    : ngx_ioa_redis_script(script, handler, data, nkeys,
                                           (int) a->n, a->argv, a->argvlen);

    ngx_ioa_args_free(a);

    return req;
}


/* pub/sub: a (un)subscribe for ngx_ioa_sub.c */

ngx_int_t
ngx_ioa_redis_sub_send(ngx_ioa_redis_node_t *node, const char *cmd,
    ngx_str_t *channel)
{
    const char            *argv[2];
    size_t                 argvlen[2];
    redisAsyncContext     *ac;
    ngx_ioa_redis_conn_t  *rc;

    rc = &node->sub;
    ac = rc->ac;

    if (rc->state != NGX_IOA_REDIS_READY) {
        return NGX_DECLINED;
    }

    argv[0] = cmd;
    argvlen[0] = ngx_strlen(cmd);
    argv[1] = (const char *) channel->data;
    argvlen[1] = channel->len;

    /* into the output buffer, past hiredis' callback lists: the read
     * handler below dispatches the replies */

    if (redisAppendCommandArgv(&ac->c, 2, argv, argvlen) != REDIS_OK) {
        return NGX_ERROR;
    }

    ac->ev.addWrite(ac->ev.data);

    ngx_ioa_redis_sent(rc);

    return NGX_OK;
}


/* the read handler of pub/sub connections (see the adapter) */

static void
ngx_ioa_redis_sub_read(ngx_event_t *ev)
{
    void                  *reply;
    ngx_uint_t             n;
    ngx_connection_t      *c;
    redisAsyncContext     *ac;
    ngx_ioa_redis_conn_t  *rc;

    c = ev->data;
    ac = c->data;
    rc = ac->data;

    if (!(ac->c.flags & REDIS_CONNECTED)) {
        /* a connect that failed or completed: hiredis' own business */
        redisAsyncHandleRead(ac);
        return;
    }

    /* as long as the socket holds more, within a budget (see the adapter) */

    for (n = 0; n < NGX_IOA_REDIS_READS_PER_EVENT; n++) {

        if (redisBufferRead(&ac->c) != REDIS_OK) {
            /* nothing waits in hiredis' callback lists, so this frees the
             * context at once and reports the error to the disconnect
             * callback */
            redisAsyncDisconnect(ac);
            return;
        }

        for ( ;; ) {
            reply = NULL;

            if (redisGetReply(&ac->c, &reply) != REDIS_OK) {
                redisAsyncDisconnect(ac);
                return;
            }

            if (reply == NULL) {
                break;
            }

            ngx_ioa_redis_sub_reply(rc, reply);
            freeReplyObject(reply);

            if (rc->ac != ac) {
                /* closed while dispatching: the context is gone */
                return;
            }
        }

        if (!ngx_ioa_redis_read_more(ac)) {
            return;
        }
    }
}


static void
ngx_ioa_redis_sub_reply(ngx_ioa_redis_conn_t *rc, redisReply *reply)
{
    ngx_int_t              slot;
    ngx_str_t              t, name, channel, payload;
    ngx_uint_t             ask, pattern;
    redisReply            *type, *chan, *msg;
    ngx_ioa_redis_node_t  *node;

    if (rc->authing) {
        /* the first answer on a new connection: AUTH's */
        ngx_ioa_redis_auth_done(rc, reply);
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {

        /* a (un)subscribe refused: MOVED for a slot that has another
         * owner, or the Cluster is down */

        ngx_ioa_redis_replied(rc);

        ngx_log_error(NGX_LOG_WARN, rc->log, 0,
                      "ioa redis pub/sub: %*s, redis: %V",
                      (size_t) reply->len, reply->str, &rc->node->addr);

        slot = -1;
        node = ngx_ioa_redis_redirect(reply, &slot, &ask);

        if (node == NULL || ask) {
            slot = -1;
        }

        ngx_ioa_redis_refresh(1);
        ngx_ioa_sub_refused(rc->node, slot);

        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    /* [type, channel or pattern, payload or count], and for a pattern's
     * message [pmessage, pattern, channel, payload] */

    type = reply->element[0];
    t.data = (u_char *) type->str;
    t.len = type->len;

    pattern = (t.data[0] == 'p');

    name.data = (u_char *) reply->element[1]->str;
    name.len = reply->element[1]->len;

    if (ngx_ioa_redis_is(&t, "message")) {
        if (pattern && reply->elements == 4) {
            chan = reply->element[2];
            msg = reply->element[3];

        } else {
            chan = reply->element[1];
            msg = reply->element[2];
        }

        if (chan->type != REDIS_REPLY_STRING
            || msg->type != REDIS_REPLY_STRING)
        {
            return;
        }

        channel.data = (u_char *) chan->str;
        channel.len = chan->len;
        payload.data = (u_char *) msg->str;
        payload.len = msg->len;

        ngx_ioa_sub_message(&name, pattern, &channel, &payload);
        return;
    }

    if (ngx_ioa_redis_is(&t, "subscribe")) {
        ngx_ioa_redis_replied(rc);
        ngx_ioa_sub_confirmed(rc->node, &name, pattern);
        return;
    }

    if (ngx_ioa_redis_is(&t, "unsubscribe")) {
        /* also unasked: a Cluster node that loses a slot drops the shard
         * channels of that slot and says so */
        ngx_ioa_redis_replied(rc);
        ngx_ioa_sub_ended(rc->node, &name, pattern);
        return;
    }
}


/* "message", "pmessage", "smessage" are all "message", and so on */

static ngx_uint_t
ngx_ioa_redis_is(ngx_str_t *s, const char *word)
{
    size_t   len;
    u_char  *p;

    len = ngx_strlen(word);
    p = s->data;

    if (s->len == len + 1 && (p[0] == 'p' || p[0] == 's')) {
        p++;

    } else if (s->len != len) {
        return 0;
    }

    return ngx_strncmp(p, word, len) == 0;
}


/*
 * A Redis error reply that is not a script's own answer (those are the
 * caller's to read), as a client hears it: a documented code and a short
 * message, never Redis' text, which names scripts by their hash and lines
 * of our Lua.  That text goes to the error log, once per
 * NGX_IOA_REFUSAL_LOG_EVERY for each kind with the count of those not
 * logged, so a full Redis is a line every few seconds, not one per post.
 *
 *   OOM                        store_full          503, retry after 5 s
 *   BUSY LOADING MASTERDOWN    redis_unavailable   503, retry after 1 s
 *   CLUSTERDOWN READONLY
 *   MISCONF NOREPLICAS TRYAGAIN
 *   anything else              store_error         500
 *
 * Redis refuses these before a command (or a script's first write) runs,
 * so "nothing was stored" holds for the first two rows: a script that has
 * written once is never refused for memory midway.
 */

#define NGX_IOA_REFUSAL_LOG_EVERY  10000

typedef struct {
    const char                *code;
    ngx_uint_t                 status;
    ngx_msec_t                 retry;
    const char                *text;
} ngx_ioa_refusal_t;


static ngx_ioa_refusal_t  ngx_ioa_refusals[] = {
    { "store_full", NGX_HTTP_SERVICE_UNAVAILABLE, 5000,
      "the hub's store is full; nothing was stored: retry later" },
    { "redis_unavailable", NGX_HTTP_SERVICE_UNAVAILABLE, 1000,
      "the hub's store cannot take this right now; nothing was stored: "
      "retry shortly" },
    { "store_error", NGX_HTTP_INTERNAL_SERVER_ERROR, 0,
      "the hub's store failed to do this; the cause is in the hub's "
      "error log" }
};


static const char  *ngx_ioa_redis_busy[] = {
    "BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "MISCONF",
    "NOREPLICAS", "TRYAGAIN", NULL
};


static ngx_uint_t
ngx_ioa_redis_refusal_kind(redisReply *reply)
{
    ngx_str_t   code, text;
    ngx_uint_t  i;

    if (ngx_ioa_redis_error(reply, &code, &text) == NGX_OK) {
        return 2;               /* not an error: the caller's surprise */
    }

    if (reply == NULL) {
        return 1;
    }

    if (code.len == 3 && ngx_strncmp(code.data, "OOM", 3) == 0) {
        return 0;
    }

    for (i = 0; ngx_ioa_redis_busy[i]; i++) {
        if (code.len == ngx_strlen(ngx_ioa_redis_busy[i])
            && ngx_strncmp(code.data, ngx_ioa_redis_busy[i], code.len) == 0)
        {
            return 1;
        }
    }

    return 2;
}


/* Redis' text of a refusal, into the error log at a bounded rate */

void
ngx_ioa_redis_log_refusal(redisReply *reply, const char *what)
{
    ngx_uint_t          kind;
    static ngx_msec_t   logged[3];
    static ngx_uint_t   quiet[3];

    if (reply == NULL || reply->type != REDIS_REPLY_ERROR) {
        return;
    }

    kind = ngx_ioa_redis_refusal_kind(reply);

    if (logged[kind] != 0
        && ngx_current_msec - logged[kind] < NGX_IOA_REFUSAL_LOG_EVERY)
    {
        quiet[kind]++;
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ioa: Redis refused %s: %*s (and %ui refusals like it "
                  "in the %M ms before, not logged one by one)",
                  what, reply->len, reply->str, quiet[kind],
                  (ngx_msec_t) NGX_IOA_REFUSAL_LOG_EVERY);

    logged[kind] = ngx_current_msec;
    quiet[kind] = 0;
}


ngx_uint_t
ngx_ioa_redis_refusal(redisReply *reply, ngx_ioa_error_t *err,
    ngx_msec_t *retry)
{
    ngx_ioa_refusal_t  *rf;

    ngx_ioa_redis_log_refusal(reply, "a client's request");

    rf = &ngx_ioa_refusals[ngx_ioa_redis_refusal_kind(reply)];

    ngx_ioa_error_set(err, rf->code, NULL, "%s", rf->text);
    *retry = rf->retry;

    return rf->status;
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
