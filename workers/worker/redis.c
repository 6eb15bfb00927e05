/*
 * ioa-worker: the Redis connection and the Lua scripts.
 *
 * One blocking hiredis connection carries everything, including the
 * blocking reads (XREADGROUP BLOCK, XREAD BLOCK): a worker does one thing at
 * a time, so nothing ever waits behind a blocked read.  Blocking reads are
 * kept short (at most a second) so that SIGTERM and cancels are noticed
 * promptly, and the socket timeout (IW_REDIS_TIMEOUT) sits well above them:
 * a Redis that stops answering is treated like a lost connection.
 *
 * Any failure of the connection closes it and returns NULL; the caller
 * returns IW_ERROR up to the main loop, which reconnects with backoff and
 * resumes the goal from what Redis holds.  There is no retry deeper down:
 * a half-done step is resolved by the state machine, not by repeating a
 * command whose outcome is unknown.  A Redis that refuses for now (full:
 * OOM under maxmemory; loading, busy, without a master, read-only) is
 * handled the same way (iw_redis_refused): the command did not run, so
 * backing off and resuming is safe, where failing the goal would turn a
 * full store into lost work.
 *
 * Scripts: the hub's own (post, register, retrieve, query, teamup_members,
 * room_create, verify, goal_index) are read from --scripts at start, so the
 * worker runs exactly the code the hub runs; the worker's own (goal_event,
 * job_touch, meta_state, fsm_save, goal_spawn, rep_record, worker_beat, in
 * lua/) are compiled in.
 * All are run with EVALSHA; a
 * NOSCRIPT answer (Redis restarted or SCRIPT FLUSH) loads the script again
 * and repeats the call once, which is safe because NOSCRIPT means nothing
 * ran.
 *
 * Standalone or Cluster: the first command on a connection to a --redis
 * address is CLUSTER SLOTS.  A standalone Redis refuses it, and that one
 * connection carries everything as described above.  A Cluster answers with
 * its slot map, and cluster.c takes over: one such connection per master,
 * opened when first needed and prepared the same way (scripts loaded,
 * client name set), each command sent to the master of its key's slot.
 * The same binary and the same flags serve both; only the address list
 * differs, and a single address of either kind is enough.
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"
#include "lua_scripts.h"


#define IW_REDIS_CONNECT_TIMEOUT_MS  2000
#define IW_REDIS_TIMEOUT_MS          5000


typedef struct {
    const char   *name;
    const char   *file;              /* NULL: compiled in */
    char         *body;
    char          sha[41];
} iw_lua_t;


static redisContext      *iw_redis;
static const iw_conf_t   *iw_redis_conf;
static char              *iw_redis_client_name;
static char              *iw_redis_password;    /* NULL: no AUTH */
static void             (*iw_redis_hook)(void);
static int                iw_redis_soft;

static iw_lua_t  iw_lua[IW_LUA_N] = {
    { "post", "post.lua", NULL, "" },
    { "register", "register.lua", NULL, "" },
    { "retrieve", "retrieve.lua", NULL, "" },
    { "query", "query.lua", NULL, "" },
    { "teamup_members", "teamup_members.lua", NULL, "" },
    { "room_create", "room_create.lua", NULL, "" },
    { "goal_event", NULL, NULL, "" },
    { "job_touch", NULL, NULL, "" },
    { "meta_state", NULL, NULL, "" },
    { "fsm_save", NULL, NULL, "" },
    { "goal_spawn", NULL, NULL, "" },
    { "verify", "verify.lua", NULL, "" },
    { "rep_record", NULL, NULL, "" },
    { "goal_index", "goal_index.lua", NULL, "" },
    { "worker_beat", NULL, NULL, "" },
};


static char *iw_read_file(const char *path);
static int iw_redis_auth(redisContext *c, const char *host, int port);
static int iw_lua_load(redisContext *c, iw_lua_t *l);


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


/* a blocking connection with the connect and socket timeouts; NULL (and a
 * warning) when the address does not answer */

redisContext *
iw_redis_open(const char *host, int port)
{
    redisContext    *c;
    struct timeval   tv;

    tv.tv_sec = IW_REDIS_CONNECT_TIMEOUT_MS / 1000;
    tv.tv_usec = (IW_REDIS_CONNECT_TIMEOUT_MS % 1000) * 1000;

    c = redisConnectWithTimeout(host, port, tv);

    if (c == NULL || c->err) {
        iw_warn("redis %s:%d: %s", host, port,
                c ? c->errstr : "cannot allocate a context");

        if (c) {
            redisFree(c);
        }

        return NULL;
    }

    tv.tv_sec = IW_REDIS_TIMEOUT_MS / 1000;
    tv.tv_usec = (IW_REDIS_TIMEOUT_MS % 1000) * 1000;

    if (redisSetTimeout(c, tv) != REDIS_OK
        || redisEnableKeepAlive(c) != REDIS_OK)
    {
        iw_warn("redis %s:%d: socket options: %s", host, port, c->errstr);
        redisFree(c);
        return NULL;
    }

    if (iw_redis_password && iw_redis_auth(c, host, port) != IW_OK) {
        redisFree(c);
        return NULL;
    }

    return c;
}


/* AUTH [user] password, first on a connection; a refusal names the user,
 * never the password, and the caller retries like any failed connect */

static int
iw_redis_auth(redisContext *c, const char *host, int port)
{
    const char  *user;
    redisReply  *r;

    user = iw_redis_conf ? iw_redis_conf->redis_user : NULL;

    if (user) {
        r = redisCommand(c, "AUTH %s %s", user, iw_redis_password);

    } else {
        r = redisCommand(c, "AUTH %s", iw_redis_password);
    }

    if (r == NULL) {
        iw_warn("redis %s:%d: AUTH: %s", host, port, c->errstr);
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_warn("redis %s:%d refused AUTH as \"%s\": %s (check "
                "--redis-user and --redis-password-file)", host, port,
                user ? user : "default", r->str);
        freeReplyObject(r);
        return IW_ERROR;
    }

    freeReplyObject(r);

    return IW_OK;
}


/* every script loaded, and the client named, on a new connection */

int
iw_redis_prepare(redisContext *c, const char *host, int port)
{
    int          i;
    redisReply  *r;

    for (i = 0; i < IW_LUA_N; i++) {
        if (iw_lua_load(c, &iw_lua[i]) != IW_OK) {
            return IW_ERROR;
        }
    }

    /* CLIENT LIST shows who is who (and tests can cut exactly this one) */
    r = redisCommand(c, "CLIENT SETNAME ioa-worker:%s", iw_redis_client_name);

    if (r == NULL) {
        iw_warn("redis %s:%d: %s", host, port, c->errstr);
        return IW_ERROR;
    }

    freeReplyObject(r);

    return IW_OK;
}


int
iw_redis_connect(void)
{
    int           i;
    redisReply   *r;
    redisContext *c;
    iw_addr_t    *a;

    iw_redis_close();

    for (i = 0; i < iw_redis_conf->nseeds; i++) {
        a = &iw_redis_conf->seeds[i];

        c = iw_redis_open(a->host, a->port);
        if (c == NULL) {
            continue;
        }

        /* what is behind this address: a Cluster answers with its map */

        r = redisCommand(c, "CLUSTER SLOTS");

        if (r == NULL) {
            iw_warn("redis %s:%d: %s", a->host, a->port, c->errstr);
            redisFree(c);
            continue;
        }

        if (iw_redis_prepare(c, a->host, a->port) != IW_OK) {
            freeReplyObject(r);
            redisFree(c);
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


int
iw_redis_cluster(void)
{
    return iw_cluster_on();
}


void
iw_redis_close(void)
{
    if (iw_redis) {
        redisFree(iw_redis);
        iw_redis = NULL;
    }

    iw_cluster_close();
}


void
iw_redis_broken(const char *what, const char *err)
{
    iw_warn("redis connection lost (%s): %s", what,
            err && err[0] ? err : "closed");
    iw_redis_close();
}


static int
iw_lua_load(redisContext *c, iw_lua_t *l)
{
    redisReply  *r;

    r = redisCommand(c, "SCRIPT LOAD %s", l->body);
    if (r == NULL) {
        iw_warn("redis: SCRIPT LOAD %s: %s", l->name, c->errstr);
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        iw_error("SCRIPT LOAD %s: %s", l->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    memcpy(l->sha, r->str, 40);
    l->sha[40] = '\0';
    freeReplyObject(r);

    return IW_OK;
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


/*
 * A refusal that says "not now" rather than "no": the reply is dropped and
 * the connection closed, as if it had been lost (see the top).
 */

static redisReply *
iw_redis_refused(redisReply *r, const char *what)
{
    int                 i;
    static const char  *not_now[] = {
        "OOM", "BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "READONLY",
        "MISCONF", "NOREPLICAS", NULL
    };

    if (iw_redis_soft) {
        return r;                       /* iw_redis_eval_soft's caller */
    }

    for (i = 0; not_now[i]; i++) {
        if (iw_reply_err(r, not_now[i])) {
            iw_warn("redis cannot take %s now: %s; backing off, the goal "
                    "resumes from what Redis holds", what, r->str);
            freeReplyObject(r);
            iw_redis_close();
            return NULL;
        }
    }

    return r;
}


redisReply *
iw_redis_argv(iw_args_t *a)
{
    int          len;
    char        *cmd;
    redisReply  *r;

    if (iw_redis_hook) {
        iw_redis_hook();
    }

    if (iw_cluster_on()) {
        len = redisFormatCommandArgv(&cmd, a->n, (const char **) a->v,
                                     a->len);
        if (len < 0) {
            return NULL;
        }

        r = iw_cluster_exec(cmd, (size_t) len);
        free(cmd);

        return iw_redis_refused(r, a->n ? a->v[0] : "command");
    }

    if (iw_redis == NULL) {
        return NULL;
    }

    r = redisCommandArgv(iw_redis, a->n, (const char **) a->v, a->len);
    if (r == NULL) {
        iw_redis_broken(a->n ? a->v[0] : "command", iw_redis->errstr);
    }

    return iw_redis_refused(r, a->n ? a->v[0] : "command");
}


redisReply *
iw_redis_cmd(const char *fmt, ...)
{
    int          len;
    char        *cmd;
    va_list      ap;
    redisReply  *r;

    if (iw_redis_hook) {
        iw_redis_hook();
    }

    if (iw_cluster_on()) {
        va_start(ap, fmt);
        len = redisvFormatCommand(&cmd, fmt, ap);
        va_end(ap);

        if (len < 0) {
            return NULL;
        }

        r = iw_cluster_exec(cmd, (size_t) len);
        free(cmd);

        return iw_redis_refused(r, fmt);
    }

    if (iw_redis == NULL) {
        return NULL;
    }

    va_start(ap, fmt);
    r = redisvCommand(iw_redis, fmt, ap);
    va_end(ap);

    if (r == NULL) {
        iw_redis_broken(fmt, iw_redis->errstr);
    }

    return iw_redis_refused(r, fmt);
}


/* a holds the keys, then the arguments */

redisReply *
iw_redis_eval(iw_lua_e script, int nkeys, iw_args_t *a)
{
    int          i, attempt;
    iw_args_t    e;
    redisReply  *r;

    for (attempt = 0; attempt < 2; attempt++) {
        iw_args_init(&e);
        iw_args_add(&e, "EVALSHA");
        iw_args_add(&e, iw_lua[script].sha);
        iw_args_addf(&e, "%d", nkeys);

        for (i = 0; i < a->n; i++) {
            iw_args_addn(&e, a->v[i], a->len[i]);
        }

        r = iw_redis_argv(&e);
        iw_args_free(&e);

        if (r == NULL || !iw_reply_err(r, "NOSCRIPT")) {
            return r;
        }

        freeReplyObject(r);

        /* on a Cluster the node that said NOSCRIPT got the script and the
         * call again already (cluster.c): a second NOSCRIPT is final */

        if (iw_cluster_on() || iw_redis == NULL
            || iw_lua_load(iw_redis, &iw_lua[script]) != IW_OK)
        {
            break;
        }
    }

    iw_redis_broken("NOSCRIPT twice", NULL);

    return NULL;
}


/*
 * The same for a write that may fail without consequence (the heartbeat,
 * stats.c): a refusal comes back as the error reply it is, and the
 * connection stays up for the goal's own commands.
 */

redisReply *
iw_redis_eval_soft(iw_lua_e script, int nkeys, iw_args_t *a)
{
    redisReply  *r;

    iw_redis_soft = 1;
    r = iw_redis_eval(script, nkeys, a);
    iw_redis_soft = 0;

    return r;
}


/*
 * Called before every command (stats.c's heartbeat): the one connection is
 * idle then, and a worker that is alive sends a command at least every
 * second.  The hook must not mind being called from inside itself.
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
