/*
 * ioa-worker: the Redis client and the Lua scripts.
 *
 * Every command is a call (iw_rcall_t): its formatted bytes, where it goes,
 * and what to do with the answer.  Calls travel on the event-driven
 * connections of rconn.c: on a standalone Redis one connection carries
 * them all, pipelined; on a Cluster (cluster.c) each goes to the master of
 * its key's slot.  The answer reaches the caller's handler
 * (iw_redis_send()), or, for the blocking calls the program's code makes
 * (iw_redis_cmd(), iw_redis_argv(), iw_redis_eval()), the call returns it
 * once it is in: a goal's step, on its fiber (fiber.c), gives the CPU
 * back to the engine meanwhile, and any other caller runs the loop until
 * then (iw_loop_until(), loop.c).  A read that
 * blocks (XREADGROUP BLOCK: engine.c's intake) goes on a second connection
 * to the same server, since Redis answers a connection's commands in order
 * and every goal's commands would queue behind it on the shared one.
 *
 * What happens to an answer before the caller sees it:
 *
 *   NOSCRIPT      (Redis restarted, SCRIPT FLUSH, or a Cluster node that
 *                 never saw the script) SCRIPT LOAD and the call again, on
 *                 the same connection and so in that order, once: NOSCRIPT
 *                 means nothing ran.
 *   MOVED, ASK    (Cluster) the slot's master changed, or the slot is being
 *                 migrated: the map is fixed (MOVED) and the call sent to
 *                 the node named, after ASKING for ASK; at most
 *                 IW_REDIS_HOPS of these.
 *   TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, or a master that cannot be
 *                 reached (Cluster: a failover under way) the call waits
 *                 on its own timer (IW_REDIS_PAUSE_MS; 25 ms for TRYAGAIN),
 *                 reads the slot map again and goes where it says, for at
 *                 most IW_REDIS_WAIT_MS in all.
 *   not now       OOM, BUSY, LOADING, MASTERDOWN, CLUSTERDOWN, READONLY,
 *                 MISCONF, NOREPLICAS after the above (iw_redis_refused):
 *                 the command did not run, so the connections are closed
 *                 as if lost and the caller backs off and resumes from
 *                 what Redis holds, where failing the goal would turn a
 *                 full store into lost work.  The heartbeat's calls are
 *                 "soft" (iw_redis_eval_soft): they get the refusal as it
 *                 is, and the connection stays up for the goal.
 *
 * Any other failure, a connection lost or a reply that did not come within
 * IW_REDIS_TIMEOUT_MS (a blocking read's BLOCK time more), closes every
 * connection and answers NULL: the caller returns IW_ERROR up to the main
 * loop, which reconnects with backoff and resumes the goal from what Redis
 * holds.  There is no retry deeper down: a half-done step is resolved by
 * the state machine, not by repeating a command whose outcome is unknown.
 * A command that provably never left (its connection never completed its
 * connect, on a Cluster) is the exception: it waits for a master like any
 * call on a failover.
 *
 * Scripts: the hub's own (post, register, retrieve, query, teamup_members,
 * room_create, verify, goal_index) are read from --scripts at start, so the
 * worker runs exactly the code the hub runs; the worker's own (goal_event,
 * job_touch, meta_state, fsm_save, goal_spawn, rep_record, worker_beat, in
 * lua/) are compiled in.  All are loaded on the first connection (which
 * tells their sha1s) and run with EVALSHA.
 *
 * Standalone or Cluster: the first command on a connection to a --redis
 * address is CLUSTER SLOTS.  A standalone Redis refuses it, and that one
 * connection carries everything.  A Cluster answers with its slot map, and
 * cluster.c takes over with one connection per master, opened when first
 * needed.  Every connection starts with AUTH (when a password is set) and
 * CLIENT SETNAME ioa-worker:<consumer> (CLIENT LIST shows who is who, and
 * tests can cut exactly this one).  The same binary and the same flags
 * serve both; only the address list differs, and a single address of
 * either kind is enough.
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "iw.h"
#include "lua_scripts.h"


#define IW_REDIS_CONNECT_TIMEOUT_MS  2000
#define IW_REDIS_TIMEOUT_MS          5000

/* Cluster: redirections one call may follow, how long it waits for a
 * master in all, and between two looks at the slot map */
#define IW_REDIS_HOPS                16
#define IW_REDIS_WAIT_MS             8000
#define IW_REDIS_PAUSE_MS            100
#define IW_REDIS_TRYAGAIN_MS         25


typedef struct {
    const char   *name;
    const char   *file;              /* NULL: compiled in */
    char         *body;
    char          sha[41];
} iw_lua_t;


typedef struct iw_rcall_s  iw_rcall_t;

struct iw_rcall_s {
    iw_rreq_t        q;              /* the command */
    iw_rreq_t        pre;            /* ASKING, SCRIPT LOAD or CLUSTER SLOTS
                                        sent for it first */
    char            *cmd;            /* formatted, owned */
    size_t           len;
    iw_cmd_info_t    info;           /* slot, script, BLOCK time */
    iw_rconn_t      *fixed;          /* only on this connection, or NULL */
    int              node;           /* cluster: where it goes next */
    int              slots_from;     /* cluster: the node asked for the map */
    int              hops;
    long long        deadline;       /* cluster: waiting for a master ends */
    int              inflight;       /* of q and pre, on connections */
    unsigned         ask:1;          /* ASKING first (an ASK redirection) */
    unsigned         noscript:1;     /* loaded again once already */
    unsigned         soft:1;         /* refusals are answers */
    unsigned         finished:1;     /* the caller has its answer */
    struct event    *pause;          /* cluster: the next look at the map */
    iw_rcall_t      *prev_live;      /* every unfinished call, for */
    iw_rcall_t      *next_live;      /* iw_redis_close() */
    iw_redis_pt      handler;
    void            *data;
};


typedef struct {
    int              done;
    redisReply      *r;
    iw_fiber_t      *fiber;          /* the step that waits, NULL: none */
} iw_wait_t;


static iw_rconn_t        *iw_redis;            /* standalone */
static iw_rconn_t        *iw_redis_block;      /* its blocking reads */
static const iw_conf_t   *iw_redis_conf;
static char              *iw_redis_client_name;
static char              *iw_redis_password;    /* NULL: no AUTH */
static void             (*iw_redis_hook)(void);
static iw_rcall_t        *iw_rcalls;           /* unfinished calls */
static int                iw_redis_closing;

/* a hub script's file is named by lib/ioa_scripts.h; the worker's own have
 * none, their bodies are compiled in (iw_redis_init()) */
#define IW_LUA_HUB(NAME, file)                                                \
    [IW_LUA_##NAME] = { #file, #file ".lua", NULL, "" },

static iw_lua_t  iw_lua[IW_LUA_N] = {
    IOA_HUB_SCRIPTS(IW_LUA_NONE, IW_LUA_HUB)
    [IW_LUA_GOAL_EVENT] = { "goal_event", NULL, NULL, "" },
    [IW_LUA_JOB_TOUCH] = { "job_touch", NULL, NULL, "" },
    [IW_LUA_META_STATE] = { "meta_state", NULL, NULL, "" },
    [IW_LUA_FSM_SAVE] = { "fsm_save", NULL, NULL, "" },
    [IW_LUA_GOAL_SPAWN] = { "goal_spawn", NULL, NULL, "" },
    [IW_LUA_REP_RECORD] = { "rep_record", NULL, NULL, "" },
    [IW_LUA_WORKER_BEAT] = { "worker_beat", NULL, NULL, "" },
};


static char *iw_read_file(const char *path);
static int iw_redis_load_scripts(iw_rconn_t *c);
static void iw_redis_on_setup(iw_rreq_t *q, redisReply *r);
static void iw_redis_on_close(iw_rconn_t *c, const char *why);
static iw_rcall_t *iw_rcall_new(char *cmd, size_t len, iw_redis_pt handler,
    void *data);
static iw_rconn_t *iw_rcall_conn(iw_rcall_t *k);
static void iw_rcall_send(iw_rcall_t *k);
static int iw_rcall_back(iw_rcall_t *k, redisReply *r);
static void iw_rcall_on_reply(iw_rreq_t *q, redisReply *r);
static void iw_rcall_on_pre(iw_rreq_t *q, redisReply *r);
static void iw_rcall_on_slots(iw_rreq_t *q, redisReply *r);
static void iw_rcall_on_pause(evutil_socket_t fd, short what, void *arg);
static void iw_rcall_wait(iw_rcall_t *k, long long ms);
static void iw_rcall_finish(iw_rcall_t *k, redisReply *r);
static void iw_rcall_release(iw_rcall_t *k);
static int iw_redis_refused(iw_rcall_t *k, redisReply *r);
static int iw_redis_ready(void);
static void iw_wait_done(void *data, redisReply *r);
static redisReply *iw_redis_wait(char *cmd, int len, iw_rconn_t *fixed,
    int soft);


int
iw_redis_init(const iw_conf_t *conf)
{
    int    i;
    char  *path, *p;

    iw_redis_conf = conf;

    /* a client name has no spaces; anything unusual becomes "-" */
    iw_redis_client_name = ioa_strdup(conf->consumer);

    for (p = iw_redis_client_name; *p; p++) {
        if (!isalnum((unsigned char) *p) && *p != '.' && *p != '_'
            && *p != '-' && *p != ':')
        {
            *p = '-';
        }
    }

    /* Redis AUTH: from a file (kept apart from the command line and the
     * environment of other processes), else from IOA_REDIS_PASSWORD */
    if (conf->redis_password_file) {
        iw_redis_password = iw_read_file(conf->redis_password_file);

        if (iw_redis_password == NULL) {
            iw_error("cannot read %s: %s", conf->redis_password_file,
                     strerror(errno));
            return IW_ERROR;
        }

        p = iw_redis_password + strlen(iw_redis_password);

        while (p > iw_redis_password
               && (p[-1] == '\n' || p[-1] == '\r' || p[-1] == ' '
                   || p[-1] == '\t'))
        {
            *--p = '\0';
        }

        if (*iw_redis_password == '\0') {
            iw_error("the Redis password file %s is empty",
                     conf->redis_password_file);
            return IW_ERROR;
        }

    } else if (getenv("IOA_REDIS_PASSWORD") && *getenv("IOA_REDIS_PASSWORD")) {
        iw_redis_password = ioa_strdup(getenv("IOA_REDIS_PASSWORD"));
    }

    iw_lua[IW_LUA_GOAL_EVENT].body = ioa_strdup(iw_lua_goal_event);
    iw_lua[IW_LUA_JOB_TOUCH].body = ioa_strdup(iw_lua_job_touch);
    iw_lua[IW_LUA_META_STATE].body = ioa_strdup(iw_lua_meta_state);
    iw_lua[IW_LUA_FSM_SAVE].body = ioa_strdup(iw_lua_fsm_save);
    iw_lua[IW_LUA_GOAL_SPAWN].body = ioa_strdup(iw_lua_goal_spawn);
    iw_lua[IW_LUA_REP_RECORD].body = ioa_strdup(iw_lua_rep_record);
    iw_lua[IW_LUA_WORKER_BEAT].body = ioa_strdup(iw_lua_worker_beat);

    for (i = 0; i < IW_LUA_N; i++) {
        if (iw_lua[i].file == NULL) {
            continue;
        }

        path = ioa_sprintf("%s/%s", conf->scripts_dir, iw_lua[i].file);
        iw_lua[i].body = iw_read_file(path);

        if (iw_lua[i].body == NULL) {
            iw_error("cannot read %s: %s (use --scripts DIR, the hub's "
                     "redis-scripts directory)", path, strerror(errno));
            free(path);
            return IW_ERROR;
        }

        free(path);
    }

    return IW_OK;
}


static char *
iw_read_file(const char *path)
{
    FILE      *f;
    ioa_buf_t  b;
    size_t     n;
    char       chunk[4096];

    f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }

    ioa_buf_init(&b);

    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        ioa_buf_add(&b, chunk, n);
    }

    if (ferror(f)) {
        fclose(f);
        ioa_buf_free(&b);
        return NULL;
    }

    fclose(f);

    return ioa_buf_take(&b);
}


/* a connection with AUTH and CLIENT SETNAME queued first; NULL (and a
 * warning) when the address cannot be tried at all */

iw_rconn_t *
iw_redis_open(const char *host, int port, iw_rconn_close_pt on_close)
{
    int          len;
    char        *cmd;
    const char  *user;
    iw_rconn_t  *c;

    c = iw_rconn_open(host, port, on_close, NULL);
    if (c == NULL) {
        return NULL;
    }

    c->node = -1;

    if (iw_redis_password) {
        user = iw_redis_conf ? iw_redis_conf->redis_user : NULL;

        if (user) {
            len = redisFormatCommand(&cmd, "AUTH %s %s", user,
                                     iw_redis_password);

        } else {
            len = redisFormatCommand(&cmd, "AUTH %s", iw_redis_password);
        }

        if (len < 0) {
            ioa_fatal("redis: cannot format AUTH");
        }

        c->setup[0].done = iw_redis_on_setup;
        c->setup[0].data = c;
        iw_rconn_send(c, cmd, (size_t) len, &c->setup[0],
                      IW_REDIS_CONNECT_TIMEOUT_MS);
        free(cmd);
    }

    len = redisFormatCommand(&cmd, "CLIENT SETNAME ioa-worker:%s",
                             iw_redis_client_name);
    if (len < 0) {
        ioa_fatal("redis: cannot format CLIENT SETNAME");
    }

    c->setup[1].done = iw_redis_on_setup;
    c->setup[1].data = c;
    iw_rconn_send(c, cmd, (size_t) len, &c->setup[1],
                  IW_REDIS_CONNECT_TIMEOUT_MS);
    free(cmd);

    return c;
}


/* AUTH's and CLIENT SETNAME's replies: a refused AUTH names the user,
 * never the password, and closes the connection, which fails whatever was
 * sent behind it; the caller retries like any failed connect */

static void
iw_redis_on_setup(iw_rreq_t *q, redisReply *r)
{
    const char  *user;
    iw_rconn_t  *c;

    c = q->data;

    if (r == NULL) {
        return;
    }

    if (q == &c->setup[0] && r->type == REDIS_REPLY_ERROR) {
        user = iw_redis_conf ? iw_redis_conf->redis_user : NULL;
        iw_warn("redis %s:%d refused AUTH as \"%s\": %s (check "
                "--redis-user and --redis-password-file)", c->host, c->port,
                user ? user : "default", r->str);
        freeReplyObject(r);
        iw_rconn_close(c, "AUTH refused");
        return;
    }

    freeReplyObject(r);
}


/* the standalone connection lost, or a seed that did not answer */

static void
iw_redis_on_close(iw_rconn_t *c, const char *why)
{
    if (c == iw_redis_block) {
        iw_redis_block = NULL;
        iw_warn("redis connection for blocking reads lost (%s:%d): %s",
                c->host, c->port, why);
        return;
    }

    if (c == iw_redis) {
        iw_redis = NULL;
        iw_warn("redis connection lost (%s:%d): %s", c->host, c->port, why);
        return;
    }

    iw_warn("redis %s:%d: %s", c->host, c->port, why);
}


/* every script loaded on c, their sha1s learnt */

static int
iw_redis_load_scripts(iw_rconn_t *c)
{
    int          i, len;
    char        *cmd;
    redisReply  *r;

    for (i = 0; i < IW_LUA_N; i++) {
        len = redisFormatCommand(&cmd, "SCRIPT LOAD %s", iw_lua[i].body);
        r = iw_redis_wait(cmd, len, c, 1);

        if (r == NULL) {
            return IW_ERROR;
        }

        if (r->type != REDIS_REPLY_STRING || r->len != 40) {
            iw_error("SCRIPT LOAD %s: %s", iw_lua[i].name,
                     r->type == REDIS_REPLY_ERROR ? r->str
                                                  : "unexpected reply");
            freeReplyObject(r);
            return IW_ERROR;
        }

        memcpy(iw_lua[i].sha, r->str, 40);
        iw_lua[i].sha[40] = '\0';
        freeReplyObject(r);
    }

    return IW_OK;
}


int
iw_redis_connect(void)
{
    int          i, len;
    char        *cmd;
    redisReply  *r;
    iw_rconn_t  *c;
    iw_addr_t   *a;

    iw_redis_close();

    for (i = 0; i < iw_redis_conf->nseeds; i++) {
        a = &iw_redis_conf->seeds[i];

        c = iw_redis_open(a->host, a->port, iw_redis_on_close);
        if (c == NULL) {
            continue;
        }

        /* what is behind this address: a Cluster answers with its map */

        len = redisFormatCommand(&cmd, "CLUSTER SLOTS");
        r = iw_redis_wait(cmd, len, c, 1);

        if (r == NULL) {
            continue;                   /* closed (and said why) */
        }

        if (iw_redis_load_scripts(c) != IW_OK) {
            freeReplyObject(r);
            iw_rconn_close(c, "cannot load the scripts");
            continue;
        }

        if (r->type == REDIS_REPLY_ARRAY) {
            if (iw_cluster_start(c, a->host, a->port, r) != IW_OK) {
                freeReplyObject(r);
                iw_cluster_close();
                continue;
            }

            freeReplyObject(r);

            iw_info("connected to the redis cluster at %s:%d", a->host,
                    a->port);

            return IW_OK;
        }

        freeReplyObject(r);
        iw_redis = c;

        iw_info("connected to redis %s:%d", a->host, a->port);

        return IW_OK;
    }

    return IW_ERROR;
}


int
iw_redis_connected(void)
{
    return iw_redis != NULL || iw_cluster_on();
}


/* the standalone server's address, for a connection of another kind
 * (pubsub.c) */

int
iw_redis_standalone_addr(const char **host, int *port)
{
    if (iw_redis == NULL) {
        return IW_ERROR;
    }

    *host = iw_redis->host;
    *port = iw_redis->port;

    return IW_OK;
}


int
iw_redis_cluster(void)
{
    return iw_cluster_on();
}


/* every connection closed, every call answered NULL */

void
iw_redis_close(void)
{
    iw_rconn_t  *c;

    if (iw_redis_closing) {
        return;
    }

    iw_redis_closing = 1;

    if (iw_redis_block) {
        c = iw_redis_block;
        iw_redis_block = NULL;
        c->on_close = NULL;
        iw_rconn_close(c, "closed");
    }

    if (iw_redis) {
        c = iw_redis;
        iw_redis = NULL;
        c->on_close = NULL;
        iw_rconn_close(c, "closed");
    }

    iw_cluster_close();

    /* calls that were between two tries, on no connection */
    while (iw_rcalls) {
        iw_rcall_finish(iw_rcalls, NULL);
    }

    iw_redis_closing = 0;
}


void
iw_redis_broken(const char *what, const char *err)
{
    iw_warn("redis connection lost (%s): %s", what,
            err && err[0] ? err : "closed");
    iw_redis_close();
}


/* the source of a script by its sha1, NULL when it is not one of ours */

const char *
iw_redis_script_of(const char *sha, size_t len)
{
    int  i;

    for (i = 0; i < IW_LUA_N; i++) {
        if (len == 40 && iw_lua[i].sha[0]
            && memcmp(iw_lua[i].sha, sha, 40) == 0)
        {
            return iw_lua[i].body;
        }
    }

    return NULL;
}


void
iw_args_init(iw_args_t *a)
{
    a->n = 0;
    a->cap = 0;
    a->v = NULL;
    a->len = NULL;
}


void
iw_args_addn(iw_args_t *a, const char *s, size_t n)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->v = ioa_realloc(a->v, (size_t) a->cap * sizeof(char *));
        a->len = ioa_realloc(a->len, (size_t) a->cap * sizeof(size_t));
    }

    a->v[a->n] = ioa_strndup(s, n);
    a->len[a->n] = n;
    a->n++;
}


void
iw_args_add(iw_args_t *a, const char *s)
{
    iw_args_addn(a, s ? s : "", s ? strlen(s) : 0);
}


void
iw_args_addf(iw_args_t *a, const char *fmt, ...)
{
    char     *s;
    va_list   ap;

    va_start(ap, fmt);
    s = ioa_vsprintf(fmt, ap);
    va_end(ap);

    iw_args_addn(a, s, strlen(s));
    free(s);
}


void
iw_args_free(iw_args_t *a)
{
    int  i;

    for (i = 0; i < a->n; i++) {
        free(a->v[i]);
    }

    free(a->v);
    free(a->len);
    iw_args_init(a);
}


/* ---------------------------------------------------------------- calls */


static iw_rcall_t *
iw_rcall_new(char *cmd, size_t len, iw_redis_pt handler, void *data)
{
    iw_rcall_t  *k;

    k = ioa_calloc(sizeof(iw_rcall_t));
    k->cmd = cmd;
    k->len = len;
    k->handler = handler;
    k->data = data;
    k->q.done = iw_rcall_on_reply;
    k->q.data = k;
    k->pre.done = iw_rcall_on_pre;
    k->pre.data = k;

    iw_cmd_info(cmd, len, &k->info);
    k->node = iw_cluster_on() ? iw_cluster_node_of(k->info.slot) : -1;
    k->deadline = ioa_mono_ms() + IW_REDIS_WAIT_MS;

    k->next_live = iw_rcalls;
    if (iw_rcalls) {
        iw_rcalls->prev_live = k;
    }

    iw_rcalls = k;

    return k;
}


/* sends the formatted command (now the call's) and hands the answer to
 * handler(data, reply) from the loop; NULL: Redis is gone (see the top) */

void
iw_redis_send(char *cmd, size_t len, iw_redis_pt handler, void *data)
{
    iw_rcall_send(iw_rcall_new(cmd, len, handler, data));
}


/* where the call goes now: NULL when nothing carries it.  A read that
 * blocks (XREAD[GROUP] BLOCK) goes on a connection of its own to the same
 * server: Redis answers a connection's commands in order, so on the
 * shared one every goal's commands would queue behind it. */

static iw_rconn_t *
iw_rcall_conn(iw_rcall_t *k)
{
    if (k->fixed) {
        return k->fixed;
    }

    if (iw_cluster_on()) {
        return k->info.block_ms > 0 ? iw_cluster_block_conn(k->node)
                                    : iw_cluster_conn(k->node);
    }

    if (k->info.block_ms > 0 && iw_redis) {
        if (iw_redis_block == NULL) {
            iw_redis_block = iw_redis_open(iw_redis->host, iw_redis->port,
                                           iw_redis_on_close);
        }

        return iw_redis_block;
    }

    return iw_redis;
}


static void
iw_rcall_send(iw_rcall_t *k)
{
    int          len;
    char        *cmd;
    iw_rconn_t  *c;
    long long    timeout;

    timeout = IW_REDIS_TIMEOUT_MS + k->info.block_ms;
    c = iw_rcall_conn(k);

    if (c == NULL) {
        if (iw_cluster_on() && k->fixed == NULL) {
            /* no master known for the slot, or it does not answer: a
             * failover may be under way; the map shows its outcome */
            iw_rcall_wait(k, IW_REDIS_PAUSE_MS);
            return;
        }

        iw_rcall_finish(k, NULL);
        return;
    }

    if (k->ask) {
        len = redisFormatCommand(&cmd, "ASKING");
        k->inflight++;
        iw_rconn_send(c, cmd, (size_t) len, &k->pre, timeout);
        free(cmd);
        k->ask = 0;
    }

    k->inflight++;
    iw_rconn_send(c, k->cmd, k->len, &k->q, timeout);
}


/* one of the call's requests is back: 1 when the call was answered
 * meanwhile (iw_redis_close()), r is dropped and the call freed once
 * nothing of it is out any more; 0 when r is the call's to act on */

static int
iw_rcall_back(iw_rcall_t *k, redisReply *r)
{
    k->inflight--;

    if (!k->finished) {
        return 0;
    }

    if (r) {
        freeReplyObject(r);
    }

    iw_rcall_release(k);

    return 1;
}


static void
iw_rcall_on_reply(iw_rreq_t *q, redisReply *r)
{
    int          slot, node, len;
    char        *cmd;
    iw_rconn_t  *c;
    iw_rcall_t  *k;
    const char  *body;

    k = q->data;

    if (iw_rcall_back(k, r)) {
        return;
    }

    if (r == NULL) {
        if (q->unsent && iw_cluster_on() && k->fixed == NULL) {
            /* the node did not even take the connect: as unreachable */
            iw_rcall_wait(k, IW_REDIS_PAUSE_MS);
            return;
        }

        iw_rcall_finish(k, NULL);          /* k may be freed */
        iw_redis_close();
        return;
    }

    if (r->type != REDIS_REPLY_ERROR) {
        iw_rcall_finish(k, r);
        return;
    }

    if (iw_reply_err(r, "NOSCRIPT") && k->noscript) {
        /* loaded, and still unknown: nothing sane is behind this */
        freeReplyObject(r);
        iw_rcall_finish(k, NULL);          /* k may be freed */
        iw_redis_broken("NOSCRIPT twice", NULL);
        return;
    }

    if (iw_reply_err(r, "NOSCRIPT") && k->info.sha
        && (body = iw_redis_script_of(k->info.sha, k->info.sha_len)) != NULL)
    {
        freeReplyObject(r);
        k->noscript = 1;

        /* to the node that said it (k->node is still that one), then
         * the call behind it on the same connection */
        c = iw_rcall_conn(k);

        if (c == NULL) {
            iw_rcall_send(k);           /* it waits, or answers NULL */
            return;
        }

        len = redisFormatCommand(&cmd, "SCRIPT LOAD %s", body);
        k->inflight++;
        iw_rconn_send(c, cmd, (size_t) len, &k->pre, IW_REDIS_TIMEOUT_MS);
        free(cmd);

        iw_rcall_send(k);
        return;
    }

    if (iw_cluster_on() && k->fixed == NULL) {
        if (iw_cluster_redirect(r, &slot, &node) == IW_OK) {
            k->ask = (r->str[0] == 'A');
            k->node = node;
            freeReplyObject(r);

            if (++k->hops > IW_REDIS_HOPS) {
                iw_rcall_finish(k, NULL);          /* k may be freed */
                iw_redis_broken("cluster", "redirected too many times");
                return;
            }

            iw_rcall_send(k);
            return;
        }

        if (iw_reply_err(r, "TRYAGAIN") || iw_reply_err(r, "CLUSTERDOWN")
            || iw_reply_err(r, "MASTERDOWN") || iw_reply_err(r, "LOADING"))
        {
            if (ioa_mono_ms() > k->deadline || iw_stop) {
                iw_warn("redis: %s", r->str);

            } else {
                /* a migrating slot sends a script with a missing key round
                 * ASK, TRYAGAIN until it is settled: the deadline bounds
                 * that */
                k->hops = 0;
                iw_rcall_wait(k, iw_reply_err(r, "TRYAGAIN")
                                 ? IW_REDIS_TRYAGAIN_MS : IW_REDIS_PAUSE_MS);
                freeReplyObject(r);
                return;
            }
        }
    }

    if (iw_redis_refused(k, r)) {
        freeReplyObject(r);
        iw_rcall_finish(k, NULL);          /* k may be freed */
        iw_redis_close();
        return;
    }

    /* an answer for the caller */
    iw_rcall_finish(k, r);
}


/* ASKING's or SCRIPT LOAD's reply: what they say shows in the command's
 * own reply, which follows on the same connection */

static void
iw_rcall_on_pre(iw_rreq_t *q, redisReply *r)
{
    iw_rcall_t  *k;

    k = q->data;

    if (!iw_rcall_back(k, r) && r) {
        freeReplyObject(r);
    }
}


/* Cluster: a failover or a migration under way; the call looks at the map
 * again when its timer fires, then goes where the map says */

static void
iw_rcall_wait(iw_rcall_t *k, long long ms)
{
    if (ioa_mono_ms() + ms > k->deadline || iw_stop) {
        iw_rcall_finish(k, NULL);          /* k may be freed */
        iw_redis_broken("cluster", "no master answers for the slot");
        return;
    }

    if (k->pause == NULL) {
        k->pause = evtimer_new(iw_loop, iw_rcall_on_pause, k);

        if (k->pause == NULL) {
            ioa_fatal("libevent: cannot allocate a timer");
        }
    }

    iw_timer_set(k->pause, ms);
}


static void
iw_rcall_on_pause(evutil_socket_t fd, short what, void *arg)
{
    int          len;
    char        *cmd;
    iw_rcall_t  *k;
    iw_rconn_t  *c;

    (void) fd;
    (void) what;

    k = arg;

    c = iw_cluster_any_conn();

    if (c == NULL) {
        /* no node answers at all: wait once more, within the deadline */
        iw_rcall_wait(k, IW_REDIS_PAUSE_MS);
        return;
    }

    len = redisFormatCommand(&cmd, "CLUSTER SLOTS");
    k->slots_from = c->node;
    k->pre.done = iw_rcall_on_slots;
    k->inflight++;
    iw_rconn_send(c, cmd, (size_t) len, &k->pre, IW_REDIS_TIMEOUT_MS);
    free(cmd);
}


static void
iw_rcall_on_slots(iw_rreq_t *q, redisReply *r)
{
    iw_rcall_t  *k;

    k = q->data;
    k->pre.done = iw_rcall_on_pre;

    if (iw_rcall_back(k, r)) {
        return;
    }

    if (r == NULL) {
        /* that node is gone too: wait and ask another */
        iw_rcall_wait(k, IW_REDIS_PAUSE_MS);
        return;
    }

    (void) iw_cluster_apply(r, k->slots_from);
    freeReplyObject(r);

    k->node = iw_cluster_node_of(k->info.slot);
    k->ask = 0;

    iw_rcall_send(k);
}


/* the answer to the caller, once; the call itself is freed when nothing
 * of it is on a connection any more */

static void
iw_rcall_finish(iw_rcall_t *k, redisReply *r)
{
    if (k->finished) {
        if (r) {
            freeReplyObject(r);
        }

        return;
    }

    k->finished = 1;

    if (k->prev_live) {
        k->prev_live->next_live = k->next_live;

    } else {
        iw_rcalls = k->next_live;
    }

    if (k->next_live) {
        k->next_live->prev_live = k->prev_live;
    }

    if (k->pause) {
        (void) evtimer_del(k->pause);
    }

    k->handler(k->data, r);

    iw_rcall_release(k);
}


static void
iw_rcall_release(iw_rcall_t *k)
{
    if (!k->finished || k->inflight > 0) {
        return;
    }

    if (k->pause) {
        event_free(k->pause);
    }

    free(k->cmd);
    free(k);
}


/*
 * A refusal that says "not now" rather than "no" (see the top): the caller
 * gets NULL, as if the connection had been lost.
 */

static int
iw_redis_refused(iw_rcall_t *k, redisReply *r)
{
    int                 i;
    static const char  *not_now[] = {
        "OOM", "BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "READONLY",
        "MISCONF", "NOREPLICAS", NULL
    };

    if (k->soft) {
        return 0;
    }

    for (i = 0; not_now[i]; i++) {
        if (iw_reply_err(r, not_now[i])) {
            iw_warn("redis cannot take a command now: %s; backing off, the "
                    "goal resumes from what Redis holds", r->str);
            return 1;
        }
    }

    return 0;
}


/* ------------------------------------------------- the blocking calls */


static void
iw_wait_done(void *data, redisReply *r)
{
    iw_wait_t  *w;

    w = data;
    w->r = r;
    w->done = 1;

    if (w->fiber) {
        iw_fiber_wake(w->fiber);
    }
}


/* sends cmd (formatted, len from redisFormatCommand*, taken over) and runs
 * the loop until its answer is in */

static redisReply *
iw_redis_wait(char *cmd, int len, iw_rconn_t *fixed, int soft)
{
    iw_wait_t    w;
    iw_rcall_t  *k;

    if (len < 0) {
        return NULL;
    }

    w.done = 0;
    w.r = NULL;
    w.fiber = iw_fiber_current();

    k = iw_rcall_new(cmd, (size_t) len, iw_wait_done, &w);
    k->fixed = fixed;
    k->soft = soft;

    iw_rcall_send(k);

    if (w.fiber == NULL) {
        iw_loop_until(&w.done);
        return w.r;
    }

    /* a goal's step (engine.c runs each on a fiber): the other goals go
     * on until the reply wakes this one; an answer that came at once (no
     * connection) needs no wait */
    while (!w.done) {
        iw_fiber_wait();
    }

    return w.r;
}


/* before every blocking call: the hook (stats.c's heartbeat), then
 * whether there is a Redis to send to at all */

static int
iw_redis_ready(void)
{
    /* not from a step: the engine beats from the top of its loop, and a
     * step would wait for the beat's reply too */
    if (iw_redis_hook && iw_fiber_current() == NULL) {
        iw_redis_hook();
    }

    return iw_redis_connected();
}


redisReply *
iw_redis_argv(iw_args_t *a)
{
    int    len;
    char  *cmd;

    if (!iw_redis_ready()) {
        return NULL;
    }

    len = redisFormatCommandArgv(&cmd, a->n, (const char **) a->v, a->len);

    return iw_redis_wait(cmd, len, NULL, 0);
}


redisReply *
iw_redis_cmd(const char *fmt, ...)
{
    int       len;
    char     *cmd;
    va_list   ap;

    if (!iw_redis_ready()) {
        return NULL;
    }

    va_start(ap, fmt);
    len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);

    return iw_redis_wait(cmd, len, NULL, 0);
}


static redisReply *
iw_redis_eval_call(iw_lua_e script, int nkeys, iw_args_t *a, int soft)
{
    int          i, len;
    char        *cmd;
    iw_args_t    e;

    if (!iw_redis_ready()) {
        return NULL;
    }

    iw_args_init(&e);
    iw_args_add(&e, "EVALSHA");
    iw_args_add(&e, iw_lua[script].sha);
    iw_args_addf(&e, "%d", nkeys);

    for (i = 0; i < a->n; i++) {
        iw_args_addn(&e, a->v[i], a->len[i]);
    }

    len = redisFormatCommandArgv(&cmd, e.n, (const char **) e.v, e.len);
    iw_args_free(&e);

    return iw_redis_wait(cmd, len, NULL, soft);
}


/* a holds the keys, then the arguments */

redisReply *
iw_redis_eval(iw_lua_e script, int nkeys, iw_args_t *a)
{
    return iw_redis_eval_call(script, nkeys, a, 0);
}


/*
 * The same for a write that may fail without consequence (the heartbeat,
 * stats.c): a refusal comes back as the error reply it is, and the
 * connection stays up for the goal's own commands.
 */

redisReply *
iw_redis_eval_soft(iw_lua_e script, int nkeys, iw_args_t *a)
{
    return iw_redis_eval_call(script, nkeys, a, 1);
}


/*
 * Called before every blocking command (stats.c's heartbeat): a worker
 * that is alive sends a command at least every second.  The hook must not
 * mind being called from inside itself.
 */

void
iw_redis_set_hook(void (*hook)(void))
{
    iw_redis_hook = hook;
}



/* an error reply whose code (the first word) is code */

int
iw_reply_err(redisReply *r, const char *code)
{
    size_t  n;

    if (r == NULL || r->type != REDIS_REPLY_ERROR) {
        return 0;
    }

    if (code == NULL) {
        return 1;
    }

    n = strlen(code);

    return r->len >= n && strncmp(r->str, code, n) == 0
           && (r->len == n || r->str[n] == ' ');
}


/* the text of a string, status or error reply, NULL otherwise */

const char *
iw_reply_str(redisReply *r)
{
    if (r == NULL) {
        return NULL;
    }

    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
        || r->type == REDIS_REPLY_ERROR)
    {
        return r->str;
    }

    return NULL;
}


/* Redis' clock: deadlines are compared by whichever worker holds the goal,
 * so they are measured on the one clock all workers share */

int
iw_redis_time_ms(long long *ms)
{
    redisReply  *r;

    r = iw_redis_cmd("TIME");
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_STRING
        || r->element[1]->type != REDIS_REPLY_STRING)
    {
        freeReplyObject(r);
        return IW_ERROR;
    }

    *ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);

    return IW_OK;
}
