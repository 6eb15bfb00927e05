/*
 * ioa-worker: Redis Cluster routing for the blocking client.
 *
 * hiredis 0.14 has no cluster client, so this is one, as small as a
 * blocking program allows.  redis.c formats every command as usual and, on
 * a Cluster, hands the formatted bytes to iw_cluster_exec(), which
 *
 *   - reads the command's first key back out of the formatted bytes (the
 *     argument after EVALSHA's numkeys, after XREADGROUP's STREAMS, the
 *     stream of XGROUP, else the first argument) and hashes it to its slot
 *     (CRC16/XMODEM of the key or of its {hash tag}, modulo 16384);
 *   - sends it to the master of that slot, on a connection opened the
 *     first time that master is needed and prepared as the standalone one
 *     (scripts loaded, client named); a command without a key goes to the
 *     master of slot 0, so that every worker reads TIME from the same node;
 *   - follows MOVED (the slot moved: the map is fixed and the command
 *     resent), ASK (the slot is being migrated and the key is on the
 *     target already: ASKING and the command, to that node only), NOSCRIPT
 *     (the script is loaded on that node and the command resent once), and
 *     waits out TRYAGAIN, CLUSTERDOWN, MASTERDOWN and LOADING and a master
 *     that cannot be reached (a failover under way: the map is read again
 *     every IW_CLUSTER_PAUSE_MS) for at most IW_CLUSTER_WAIT_MS.
 *
 * All of these mean the command did not run, so sending it again is safe.
 * A connection that breaks after the command was written is different: the
 * command may have run, so like the standalone client we give up at once,
 * close every connection and return NULL; the main loop reconnects with
 * backoff and the goal resumes from what Redis holds (goal.c).
 *
 * Blocking reads (XREADGROUP BLOCK on the job stream, XREAD BLOCK on a
 * room) go to the master of the stream's slot like any command: each
 * connection is the worker's own and carries one command at a time, so a
 * blocked read never holds up another.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iw.h"


#define IW_SLOTS              16384
#define IW_CLUSTER_HOPS       16
#define IW_CLUSTER_WAIT_MS    8000
#define IW_CLUSTER_PAUSE_MS   100
#define IW_CLUSTER_TRYAGAIN_MS  25

/* a node that refused a connection is not tried again sooner: a failover
 * takes seconds, and each try is a line in the log */
#define IW_CLUSTER_RETRY_MS   1000


typedef struct {
    char          *host;
    int            port;
    redisContext  *c;
    long long      failed;           /* ioa_mono_ms() of the last refusal */
} iw_node_t;


typedef struct {
    const char    *p;
    size_t         len;
} iw_arg_t;


static int iw_node_get(const char *host, size_t hlen, int port);
static redisContext *iw_node_conn(int n);
static int iw_cluster_apply(redisReply *r, int from);
static int iw_cluster_refresh(void);
static int iw_cmd_slot(const char *cmd, size_t len, iw_arg_t *sha);
static int iw_cmd_args(const char *cmd, size_t len, iw_arg_t *args, int max);
static int iw_arg_is(iw_arg_t *a, const char *word);
static int iw_redirect(redisReply *r, int *slot, int *node);
static int iw_reply_is(redisReply *r, const char *code);


static iw_node_t  *iw_nodes;
static int         iw_nnodes;
static int         iw_slot_node[IW_SLOTS];
static int         iw_cluster_active;


int
iw_cluster_start(redisContext *seed, const char *host, int port,
    redisReply *slots)
{
    int  n;

    iw_cluster_close();

    n = iw_node_get(host, strlen(host), port);
    iw_nodes[n].c = seed;

    if (iw_cluster_apply(slots, n) != IW_OK) {
        return IW_ERROR;
    }

    iw_cluster_active = 1;

    return IW_OK;
}


int
iw_cluster_on(void)
{
    return iw_cluster_active;
}


void
iw_cluster_close(void)
{
    int  i;

    for (i = 0; i < iw_nnodes; i++) {
        if (iw_nodes[i].c) {
            redisFree(iw_nodes[i].c);
        }

        free(iw_nodes[i].host);
    }

    free(iw_nodes);
    iw_nodes = NULL;
    iw_nnodes = 0;
    iw_cluster_active = 0;
}


static int
iw_node_get(const char *host, size_t hlen, int port)
{
    int  i;

    for (i = 0; i < iw_nnodes; i++) {
        if (iw_nodes[i].port == port && strlen(iw_nodes[i].host) == hlen
            && memcmp(iw_nodes[i].host, host, hlen) == 0)
        {
            return i;
        }
    }

    iw_nodes = ioa_realloc(iw_nodes,
                          (size_t) (iw_nnodes + 1) * sizeof(iw_node_t));
    iw_nodes[iw_nnodes].host = ioa_strndup(host, hlen);
    iw_nodes[iw_nnodes].port = port;
    iw_nodes[iw_nnodes].c = NULL;
    iw_nodes[iw_nnodes].failed = 0;

    return iw_nnodes++;
}


/* the node's connection, opened and prepared when first needed */

static redisContext *
iw_node_conn(int n)
{
    redisContext  *c;

    if (iw_nodes[n].c) {
        return iw_nodes[n].c;
    }

    if (iw_nodes[n].failed
        && ioa_mono_ms() - iw_nodes[n].failed < IW_CLUSTER_RETRY_MS)
    {
        return NULL;
    }

    c = iw_redis_open(iw_nodes[n].host, iw_nodes[n].port);

    if (c && iw_redis_prepare(c, iw_nodes[n].host, iw_nodes[n].port)
             != IW_OK)
    {
        redisFree(c);
        c = NULL;
    }

    if (c == NULL) {
        iw_nodes[n].failed = ioa_mono_ms();
        return NULL;
    }

    iw_nodes[n].failed = 0;

    iw_nodes[n].c = c;

    return c;
}


/* CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...] */

static int
iw_cluster_apply(redisReply *r, int from)
{
    int          n;
    size_t       i, hlen;
    long long    s, start, end;
    const char  *host;
    redisReply  *e, *m;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        return IW_ERROR;
    }

    for (s = 0; s < IW_SLOTS; s++) {
        iw_slot_node[s] = -1;
    }

    for (i = 0; i < r->elements; i++) {
        e = r->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3
            || e->element[0]->type != REDIS_REPLY_INTEGER
            || e->element[1]->type != REDIS_REPLY_INTEGER
            || e->element[2]->type != REDIS_REPLY_ARRAY
            || e->element[2]->elements < 2
            || e->element[2]->element[0]->type != REDIS_REPLY_STRING
            || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
        {
            continue;
        }

        start = e->element[0]->integer;
        end = e->element[1]->integer;

        if (start < 0 || end >= IW_SLOTS || start > end) {
            continue;
        }

        m = e->element[2];
        host = m->element[0]->str;
        hlen = m->element[0]->len;

        /* a node that does not know its address: the one that answered */
        if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
            host = iw_nodes[from].host;
            hlen = strlen(host);
        }

        n = iw_node_get(host, hlen, (int) m->element[1]->integer);

        for (s = start; s <= end; s++) {
            iw_slot_node[s] = n;
        }
    }

    return IW_OK;
}


/* the map again, from any node that answers: connected ones first */

static int
iw_cluster_refresh(void)
{
    int            i, pass;
    redisReply    *r;
    redisContext  *c;

    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < iw_nnodes; i++) {
            if ((pass == 0) != (iw_nodes[i].c != NULL)) {
                continue;
            }

            c = iw_node_conn(i);
            if (c == NULL) {
                continue;
            }

            r = redisCommand(c, "CLUSTER SLOTS");

            if (r == NULL) {
                redisFree(c);
                iw_nodes[i].c = NULL;
                continue;
            }

            if (iw_cluster_apply(r, i) == IW_OK) {
                freeReplyObject(r);
                return IW_OK;
            }

            freeReplyObject(r);
        }
    }

    return IW_ERROR;
}


redisReply *
iw_cluster_exec(const char *cmd, size_t len)
{
    int            slot, node, hops, ask, noscript, s;
    void          *v;
    long long      deadline;
    iw_arg_t       sha;
    const char    *body;
    redisReply    *r;
    redisContext  *c;

    slot = iw_cmd_slot(cmd, len, &sha);
    node = iw_slot_node[slot < 0 ? 0 : slot];
    deadline = ioa_mono_ms() + IW_CLUSTER_WAIT_MS;
    ask = 0;
    noscript = 0;

    for (hops = 0; hops < IW_CLUSTER_HOPS; /* void */) {

        c = (node >= 0) ? iw_node_conn(node) : NULL;

        if (c == NULL) {
            /* no master known for the slot, or it does not answer: a
             * failover may be under way; the map shows its outcome */

            if (ioa_mono_ms() > deadline || iw_stop) {
                break;
            }

            iw_sleep_ms(IW_CLUSTER_PAUSE_MS);
            (void) iw_cluster_refresh();
            node = iw_slot_node[slot < 0 ? 0 : slot];
            ask = 0;
            continue;
        }

        if (ask) {
            (void) redisAppendCommand(c, "ASKING");
        }

        if (redisAppendFormattedCommand(c, cmd, len) != REDIS_OK) {
            iw_redis_broken("command", c->errstr);
            return NULL;
        }

        if (ask) {
            if (redisGetReply(c, &v) != REDIS_OK) {
                iw_redis_broken("ASKING", c->errstr);
                return NULL;
            }

            freeReplyObject(v);
            ask = 0;
        }

        if (redisGetReply(c, &v) != REDIS_OK) {
            iw_redis_broken("command", c->errstr);
            return NULL;
        }

        r = v;

        if (r->type != REDIS_REPLY_ERROR) {
            return r;
        }

        if (iw_redirect(r, &s, &node) == IW_OK) {
            if (r->str[0] == 'A') {
                ask = 1;

            } else {
                iw_slot_node[s] = node;
            }

            freeReplyObject(r);
            hops++;
            continue;
        }

        if (iw_reply_is(r, "NOSCRIPT") && !noscript && sha.p
            && (body = iw_redis_script_of(sha.p, sha.len)) != NULL)
        {
            freeReplyObject(r);
            noscript = 1;

            r = redisCommand(c, "SCRIPT LOAD %s", body);
            if (r == NULL) {
                iw_redis_broken("SCRIPT LOAD", c->errstr);
                return NULL;
            }

            freeReplyObject(r);
            continue;
        }

        if (iw_reply_is(r, "TRYAGAIN") || iw_reply_is(r, "CLUSTERDOWN")
            || iw_reply_is(r, "MASTERDOWN") || iw_reply_is(r, "LOADING"))
        {
            if (ioa_mono_ms() > deadline || iw_stop) {
                iw_warn("redis: %s", r->str);
                freeReplyObject(r);
                break;
            }

            iw_sleep_ms(iw_reply_is(r, "TRYAGAIN") ? IW_CLUSTER_TRYAGAIN_MS
                                                   : IW_CLUSTER_PAUSE_MS);
            freeReplyObject(r);

            /* a migrating slot sends a script with a missing key round
             * ASK, TRYAGAIN until it is settled: the deadline bounds that */
            hops = 0;

            (void) iw_cluster_refresh();
            node = iw_slot_node[slot < 0 ? 0 : slot];
            continue;
        }

        /* an answer for the caller */
        return r;
    }

    iw_redis_broken("cluster", "no master answers for the slot");

    return NULL;
}


/* "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" */

static int
iw_redirect(redisReply *r, int *slot, int *node)
{
    long         n, port;
    char        *end;
    const char  *p, *colon;

    if (strncmp(r->str, "MOVED ", 6) == 0) {
        p = r->str + 6;

    } else if (strncmp(r->str, "ASK ", 4) == 0) {
        p = r->str + 4;

    } else {
        return IW_ERROR;
    }

    n = strtol(p, &end, 10);

    if (end == p || *end != ' ' || n < 0 || n >= IW_SLOTS) {
        return IW_ERROR;
    }

    p = end + 1;
    colon = strrchr(p, ':');

    if (colon == NULL || colon == p) {
        return IW_ERROR;
    }

    port = strtol(colon + 1, &end, 10);

    if (*end != '\0' || port <= 0 || port > 65535) {
        return IW_ERROR;
    }

    *slot = (int) n;
    *node = iw_node_get(p, (size_t) (colon - p), (int) port);

    return IW_OK;
}


static int
iw_reply_is(redisReply *r, const char *code)
{
    size_t  n;

    n = strlen(code);

    return r->len >= n && strncmp(r->str, code, n) == 0
           && (r->len == n || r->str[n] == ' ');
}


/* the slot of the command's first key, -1 without one; sha is EVALSHA's
 * script, for NOSCRIPT */

static int
iw_cmd_slot(const char *cmd, size_t len, iw_arg_t *sha)
{
    int       n, i, key;
    long      numkeys;
    iw_arg_t  a[64];

    sha->p = NULL;
    sha->len = 0;

    n = iw_cmd_args(cmd, len, a, 64);

    if (n < 2) {
        return -1;
    }

    key = 1;

    if (iw_arg_is(&a[0], "evalsha") || iw_arg_is(&a[0], "eval")) {
        if (n < 4) {
            return -1;
        }

        if (iw_arg_is(&a[0], "evalsha")) {
            *sha = a[1];
        }

        numkeys = strtol(a[2].p, NULL, 10);

        if (numkeys <= 0) {
            return -1;
        }

        key = 3;

    } else if (iw_arg_is(&a[0], "xgroup") || iw_arg_is(&a[0], "xinfo")) {
        key = 2;

    } else if (iw_arg_is(&a[0], "xread") || iw_arg_is(&a[0], "xreadgroup")) {
        for (i = 1; i < n - 1 && !iw_arg_is(&a[i], "streams"); i++) {
            /* void */
        }

        key = i + 1;

    } else if (iw_arg_is(&a[0], "ping") || iw_arg_is(&a[0], "time")
               || iw_arg_is(&a[0], "info") || iw_arg_is(&a[0], "client")
               || iw_arg_is(&a[0], "cluster") || iw_arg_is(&a[0], "script"))
    {
        return -1;
    }

    if (key >= n) {
        return -1;
    }

    return (int) iw_key_slot(a[key].p, a[key].len);
}


/* the arguments of a formatted command ("*<n>\r\n$<len>\r\n<arg>\r\n..."),
 * at most max of them; returns how many it has */

static int
iw_cmd_args(const char *cmd, size_t len, iw_arg_t *args, int max)
{
    int          i, n;
    long         l;
    char        *end;
    const char  *p, *last;

    p = cmd;
    last = cmd + len;

    if (p >= last || *p != '*') {
        return 0;
    }

    n = (int) strtol(p + 1, &end, 10);
    p = end + 2;

    for (i = 0; i < n && i < max; i++) {
        if (p >= last || *p != '$') {
            return i;
        }

        l = strtol(p + 1, &end, 10);
        p = end + 2;

        if (l < 0 || p + l > last) {
            return i;
        }

        args[i].p = p;
        args[i].len = (size_t) l;
        p += l + 2;
    }

    return n;
}


static int
iw_arg_is(iw_arg_t *a, const char *word)
{
    return a->len == strlen(word) && strncasecmp(a->p, word, a->len) == 0;
}


/*
 * Key slots, as Redis computes them: CRC16 (the XMODEM variant: polynomial
 * 0x1021, initial value 0, no reflection) of the key, or of its hash tag,
 * modulo 16384.  The hash tag is what lies between the first "{" and the
 * first "}" after it, when that is not empty.
 */

unsigned
iw_key_slot(const char *key, size_t len)
{
    int             i;
    unsigned        crc;
    const char     *open, *close, *last;
    const uint8_t  *p;

    p = (const uint8_t *) key;
    last = key + len;

    open = memchr(key, '{', len);

    if (open) {
        close = memchr(open + 1, '}', (size_t) (last - open - 1));

        if (close && close > open + 1) {
            p = (const uint8_t *) open + 1;
            last = close;
        }
    }

    crc = 0;

    while ((const char *) p < last) {
        crc ^= (unsigned) *p++ << 8;

        for (i = 0; i < 8; i++) {
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff
                                 : (crc << 1) & 0xffff;
        }
    }

    return crc & (IW_SLOTS - 1);
}
