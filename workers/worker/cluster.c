/*
 * ioa-worker: Redis Cluster routing.
 *
 * hiredis 0.14 has no cluster client, so this is one, as small as the
 * worker needs.  redis.c formats every command as usual; on a Cluster it
 * asks here where the command goes:
 *
 *   - iw_cmd_info() reads the command's first key back out of the
 *     formatted bytes (the argument after EVALSHA's numkeys, after
 *     XREADGROUP's STREAMS, the stream of XGROUP, else the first
 *     argument), and ioa_key_slot() hashes it to its slot (CRC16/XMODEM of
 *     the key or of its {hash tag}, modulo 16384; lib/, the hub's very
 *     function); a command without a key goes to the master of slot 0, so
 *     that every worker reads TIME from the same node;
 *   - iw_cluster_conn() is the connection to a master (rconn.c), opened
 *     the first time that master is needed, with AUTH and CLIENT SETNAME
 *     like any (redis.c); a node that could not be reached is not tried
 *     again for IW_CLUSTER_RETRY_MS;
 *   - iw_cluster_redirect() reads MOVED (the slot moved: the map is fixed)
 *     and ASK (the slot is being migrated: this one command goes to the
 *     target, after ASKING), and iw_cluster_apply() a fresh CLUSTER SLOTS.
 *
 * What a call does with these (follow, wait out TRYAGAIN and a failover,
 * load a script a node lacks) is the call's own state machine, in redis.c.
 *
 * A connection that breaks after a command was written is lost like the
 * standalone one: the command may have run, so every connection is closed
 * and the goal resumes from what Redis holds (redis.c).  One that never
 * completed its connect only marks its node as unreachable.
 */

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ioa_key_slot.h"
#include "iw.h"


/* a node that refused a connection is not tried again sooner: a failover
 * takes seconds, and each try is a line in the log */
#define IW_CLUSTER_RETRY_MS   1000


typedef struct {
    char          *host;
    int            port;
    iw_rconn_t    *c;
    iw_rconn_t    *bc;               /* its blocking reads (redis.c) */
    long long      failed;           /* ioa_mono_ms() of the last refusal */
} iw_node_t;


typedef struct {
    const char    *p;
    size_t         len;
} iw_arg_t;


static int iw_node_get(const char *host, size_t hlen, int port);
static void iw_cluster_on_close(iw_rconn_t *c, const char *why);
static int iw_cmd_args(const char *cmd, size_t len, iw_arg_t *args, int max);
static int iw_arg_is(iw_arg_t *a, const char *word);


static iw_node_t  *iw_nodes;
static int         iw_nnodes;
static int         iw_slot_node[IOA_KEY_SLOTS];
static int         iw_cluster_active;


/* the seed answered CLUSTER SLOTS: it becomes the first node */

int
iw_cluster_start(iw_rconn_t *seed, const char *host, int port,
    redisReply *slots)
{
    int  n;

    iw_cluster_close();

    n = iw_node_get(host, strlen(host), port);
    iw_nodes[n].c = seed;
    seed->node = n;
    seed->on_close = iw_cluster_on_close;

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
    int          i;
    iw_rconn_t  *c;

    iw_cluster_active = 0;

    for (i = 0; i < iw_nnodes; i++) {
        c = iw_nodes[i].bc;

        if (c) {
            iw_nodes[i].bc = NULL;
            c->on_close = NULL;
            iw_rconn_close(c, "closed");
        }

        c = iw_nodes[i].c;

        if (c) {
            iw_nodes[i].c = NULL;
            c->on_close = NULL;
            iw_rconn_close(c, "closed");
        }
    }

    for (i = 0; i < iw_nnodes; i++) {
        free(iw_nodes[i].host);
    }

    free(iw_nodes);
    iw_nodes = NULL;
    iw_nnodes = 0;
}


static void
iw_cluster_on_close(iw_rconn_t *c, const char *why)
{
    if (c->node >= 0 && c->node < iw_nnodes && iw_nodes[c->node].bc == c) {
        iw_nodes[c->node].bc = NULL;
        iw_warn("redis connection for blocking reads lost (%s:%d): %s",
                c->host, c->port, why);
        return;
    }

    if (c->node < 0 || c->node >= iw_nnodes || iw_nodes[c->node].c != c) {
        return;
    }

    iw_nodes[c->node].c = NULL;

    if (!c->up) {
        iw_nodes[c->node].failed = ioa_mono_ms();
        iw_warn("redis cluster node %s:%d unreachable: %s", c->host, c->port,
                why);
        return;
    }

    iw_warn("redis connection lost (%s:%d): %s", c->host, c->port, why);
}


/* the master of a slot (-1: a command without a key: slot 0's), -1 when
 * the map names none */

int
iw_cluster_node_of(int slot)
{
    return iw_slot_node[slot < 0 ? 0 : slot];
}


/* the node's connection, opened when first needed; NULL when it is not
 * known or was unreachable a moment ago */

iw_rconn_t *
iw_cluster_conn(int n)
{
    iw_rconn_t  *c;

    if (!iw_cluster_active || n < 0 || n >= iw_nnodes) {
        return NULL;
    }

    if (iw_nodes[n].c) {
        return iw_nodes[n].c;
    }

    if (iw_nodes[n].failed
        && ioa_mono_ms() - iw_nodes[n].failed < IW_CLUSTER_RETRY_MS)
    {
        return NULL;
    }

    c = iw_redis_open(iw_nodes[n].host, iw_nodes[n].port,
                      iw_cluster_on_close);

    if (c == NULL) {
        iw_nodes[n].failed = ioa_mono_ms();
        return NULL;
    }

    c->node = n;
    iw_nodes[n].c = c;
    iw_nodes[n].failed = 0;

    return c;
}


/* the node's second connection, for reads that block (redis.c); opened
 * when first needed, NULL when the node is not known or unreachable */

iw_rconn_t *
iw_cluster_block_conn(int n)
{
    iw_rconn_t  *c;

    if (iw_cluster_conn(n) == NULL) {
        return NULL;
    }

    if (iw_nodes[n].bc == NULL) {
        c = iw_redis_open(iw_nodes[n].host, iw_nodes[n].port,
                          iw_cluster_on_close);
        if (c == NULL) {
            return NULL;
        }

        c->node = n;
        iw_nodes[n].bc = c;
    }

    return iw_nodes[n].bc;
}


/* the address of a node, for a connection of another kind (pubsub.c) */

int
iw_cluster_node_addr(int n, const char **host, int *port)
{
    if (!iw_cluster_active || n < 0 || n >= iw_nnodes) {
        return IW_ERROR;
    }

    *host = iw_nodes[n].host;
    *port = iw_nodes[n].port;

    return IW_OK;
}


/* any node to ask for the map: a connected one first */

iw_rconn_t *
iw_cluster_any_conn(void)
{
    int          i;
    iw_rconn_t  *c;

    for (i = 0; i < iw_nnodes; i++) {
        if (iw_nodes[i].c && iw_nodes[i].c->up) {
            return iw_nodes[i].c;
        }
    }

    for (i = 0; i < iw_nnodes; i++) {
        c = iw_cluster_conn(i);

        if (c) {
            return c;
        }
    }

    return NULL;
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
    iw_nodes[iw_nnodes].bc = NULL;
    iw_nodes[iw_nnodes].failed = 0;

    return iw_nnodes++;
}


/* CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...] */

int
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

    for (s = 0; s < IOA_KEY_SLOTS; s++) {
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

        if (start < 0 || end >= IOA_KEY_SLOTS || start > end) {
            continue;
        }

        m = e->element[2];
        host = m->element[0]->str;
        hlen = m->element[0]->len;

        /* a node that does not know its address: the one that answered */
        if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
            if (from < 0 || from >= iw_nnodes) {
                continue;
            }

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


/* "MOVED <slot> <host>:<port>" (the map is fixed: the slot is there now)
 * or "ASK <slot> <host>:<port>" (only this command goes there) */

int
iw_cluster_redirect(redisReply *r, int *slot, int *node)
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

    if (end == p || *end != ' ' || n < 0 || n >= IOA_KEY_SLOTS) {
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

    if (r->str[0] == 'M') {
        iw_slot_node[n] = *node;
    }

    return IW_OK;
}


/* what routing needs to know of a formatted command: the slot of its
 * first key (-1 without one), EVALSHA's script (for NOSCRIPT), and a
 * blocking read's BLOCK time (its reply may take that much longer) */

void
iw_cmd_info(const char *cmd, size_t len, iw_cmd_info_t *info)
{
    int       n, i, key;
    long      numkeys;
    iw_arg_t  a[64];

    info->slot = -1;
    info->sha = NULL;
    info->sha_len = 0;
    info->block_ms = 0;

    n = iw_cmd_args(cmd, len, a, 64);

    if (n < 2) {
        return;
    }

    key = 1;

    if (iw_arg_is(&a[0], "evalsha") || iw_arg_is(&a[0], "eval")) {
        if (n < 4) {
            return;
        }

        if (iw_arg_is(&a[0], "evalsha")) {
            info->sha = a[1].p;
            info->sha_len = a[1].len;
        }

        numkeys = strtol(a[2].p, NULL, 10);

        if (numkeys <= 0) {
            return;
        }

        key = 3;

    } else if (iw_arg_is(&a[0], "xgroup") || iw_arg_is(&a[0], "xinfo")) {
        key = 2;

    } else if (iw_arg_is(&a[0], "xread") || iw_arg_is(&a[0], "xreadgroup")) {
        for (i = 1; i < n - 1 && !iw_arg_is(&a[i], "streams"); i++) {
            if (iw_arg_is(&a[i], "block")) {
                info->block_ms = strtoll(a[i + 1].p, NULL, 10);
            }
        }

        key = i + 1;

    } else if (iw_arg_is(&a[0], "ping") || iw_arg_is(&a[0], "time")
               || iw_arg_is(&a[0], "info") || iw_arg_is(&a[0], "client")
               || iw_arg_is(&a[0], "cluster") || iw_arg_is(&a[0], "script"))
    {
        return;
    }

    if (key >= n) {
        return;
    }

    info->slot = (int) ioa_key_slot(a[key].p, a[key].len);
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
