
/*
 * Copyright (C) ioa authors
 *
 * Redis Cluster: which node a command goes to.
 *
 * hiredis 0.14 knows nothing of Cluster, so this file is the part of a
 * cluster client that is not I/O: the key of a command (its slot is
 * lib/ioa_key_slot.c's, the worker's too), the nodes, the slot map,
 * MOVED/ASK parsing and the refresh of the map.  ngx_ioa_redis.c does the
 * I/O and asks here where to send.
 *
 * Setup is detected, not configured: the first command on the first
 * connection to any address of ioa_redis is CLUSTER SLOTS.  A standalone
 * Redis refuses it ("cluster support disabled") and the module runs exactly
 * as it always did, on that one server; a Cluster answers with its map.
 * The choice is made once per nginx worker process (a reload re-detects).
 *
 * The map is an array of 16384 node pointers.  It is refreshed (CLUSTER
 * SLOTS, on any connected node, masters preferred):
 *
 *   - at start and whenever a command connection comes up;
 *   - soon after a MOVED (the slot itself is fixed at once from the MOVED,
 *     so the resent command does not wait for the refresh), a lost
 *     connection, CLUSTERDOWN or a shard channel taken away (sunsubscribe);
 *   - every 500 ms while a slot has no reachable master (a failover in
 *     progress: the promoted replica shows up in the map), every 10 s
 *     otherwise, so a topology change nobody ran into is found as well.
 *
 * Refreshes triggered together are coalesced by a short timer, and only one
 * CLUSTER SLOTS is in flight at a time: a burst of MOVED during a slot
 * migration costs one refresh, not one per command.
 *
 * Only masters are connected (a command connection and a pub/sub one each);
 * replicas are never read from, since every read here must see the latest
 * write (a resume reads the Stream right after a post).  A seed address is
 * kept connected even when it is not a master, so that a map is always
 * available from a configured address; a node that left the map and is not
 * a seed is dropped once its connection fails.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"


/* the first refresh after a trigger waits this long, so that triggers that
 * come together (MOVED for every command of a migrated slot) share it */
#define NGX_IOA_CLUSTER_SOON      20
#define NGX_IOA_CLUSTER_DEGRADED  500
#define NGX_IOA_CLUSTER_IDLE      10000


static ngx_ioa_redis_node_t *ngx_ioa_redis_node_get(u_char *host,
    size_t len, int port, ngx_uint_t create);
static ngx_ioa_redis_node_t *ngx_ioa_redis_node_new(ngx_str_t *name,
    u_char *host, size_t len, int port);
static ngx_int_t ngx_ioa_redis_node_want(ngx_ioa_redis_node_t *node);
static void ngx_ioa_redis_slots_reply(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_redis_apply(redisReply *reply,
    ngx_ioa_redis_node_t *from);
static void ngx_ioa_redis_standalone(ngx_ioa_redis_node_t *node,
    redisReply *reply);
static void ngx_ioa_redis_refresh_handler(ngx_event_t *ev);
static void ngx_ioa_redis_refresh_at(ngx_msec_t delay);
static ngx_uint_t ngx_ioa_redis_cmp(const char *arg, size_t len,
    const char *name);


ngx_ioa_redis_mode_e             ngx_ioa_redis_mode;

static ngx_array_t              *ngx_ioa_redis_nodes;
static ngx_ioa_redis_node_t     *ngx_ioa_redis_single;
static ngx_ioa_redis_node_t     *ngx_ioa_redis_slots[IOA_KEY_SLOTS];
static ngx_ioa_redis_node_t     *ngx_ioa_redis_new[IOA_KEY_SLOTS];
static ngx_uint_t                ngx_ioa_redis_covered;
static ngx_uint_t                ngx_ioa_redis_refreshing;
static ngx_uint_t                ngx_ioa_redis_trouble;
static ngx_pool_t               *ngx_ioa_redis_pool;

static ngx_event_t               ngx_ioa_redis_refresh_ev;
static ngx_connection_t          ngx_ioa_redis_refresh_conn;


ngx_int_t
ngx_ioa_redis_cluster_init(ngx_cycle_t *cycle)
{
    ngx_uint_t             i;
    ngx_ioa_redis_addr_t  *seed;
    ngx_ioa_redis_node_t  *node;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_redis_mode = NGX_IOA_REDIS_UNKNOWN;
    ngx_ioa_redis_single = NULL;
    ngx_ioa_redis_covered = 0;
    ngx_ioa_redis_refreshing = 0;
    ngx_ioa_redis_trouble = 0;
    ngx_ioa_redis_pool = cycle->pool;

    ngx_ioa_redis_nodes = ngx_array_create(cycle->pool, 8,
                                           sizeof(ngx_ioa_redis_node_t *));
    if (ngx_ioa_redis_nodes == NULL) {
        return NGX_ERROR;
    }

    ngx_ioa_redis_refresh_ev.handler = ngx_ioa_redis_refresh_handler;
    ngx_ioa_redis_refresh_ev.log = cycle->log;
    ngx_ioa_redis_refresh_conn.fd = (ngx_socket_t) -1;
    ngx_ioa_redis_refresh_ev.data = &ngx_ioa_redis_refresh_conn;
    ngx_ioa_redis_refresh_ev.cancelable = 1;

    seed = mcf->redis_seeds->elts;

    for (i = 0; i < mcf->redis_seeds->nelts; i++) {

        if (seed[i].name.len) {
            node = ngx_ioa_redis_node_new(&seed[i].name, NULL, 0,
                                          seed[i].port);

        } else {
            node = ngx_ioa_redis_node_get(seed[i].host.data,
                                          seed[i].host.len, seed[i].port, 1);
        }

        if (node == NULL) {
            return NGX_ERROR;
        }

        node->seed = 1;
    }

    /* every seed is asked; the first answer decides the setup */

    for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
        node = ((ngx_ioa_redis_node_t **) ngx_ioa_redis_nodes->elts)[i];
        ngx_ioa_redis_conn_connect(&node->cmd);
    }

    return NGX_OK;
}


void
ngx_ioa_redis_cluster_exit(void)
{
    if (ngx_ioa_redis_refresh_ev.timer_set) {
        ngx_del_timer(&ngx_ioa_redis_refresh_ev);
    }
}


ngx_uint_t
ngx_ioa_redis_nnodes(void)
{
    return ngx_ioa_redis_nodes ? ngx_ioa_redis_nodes->nelts : 0;
}


ngx_ioa_redis_node_t *
ngx_ioa_redis_node(ngx_uint_t i)
{
    return ((ngx_ioa_redis_node_t **) ngx_ioa_redis_nodes->elts)[i];
}


static ngx_ioa_redis_node_t *
ngx_ioa_redis_node_get(u_char *host, size_t len, int port, ngx_uint_t create)
{
    ngx_uint_t              i;
    ngx_ioa_redis_node_t  **np;

    np = ngx_ioa_redis_nodes->elts;

    for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
        if (np[i]->port == port
            && ngx_strlen(np[i]->host) == len
            && ngx_strncmp(np[i]->host, host, len) == 0)
        {
            return np[i];
        }
    }

    if (!create || len == 0 || len > NGX_INET_ADDRSTRLEN) {
        return NULL;
    }

    /* hiredis resolves a name with a blocking call: a Cluster must
     * announce addresses (cluster-preferred-endpoint-type ip, the
     * default) */

    if (ngx_inet_addr(host, len) == INADDR_NONE
        && ngx_strlchr(host, host + len, ':') == NULL)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "ioa redis: the Cluster announces \"%*s\", not an "
                      "address; set cluster-preferred-endpoint-type to ip",
                      len, host);
        return NULL;
    }

    return ngx_ioa_redis_node_new(NULL, host, len, port);
}


/*
 * A node at an address, or (a seed of ioa_redis for nginx's resolver) at
 * a name that every connect looks up; the name is its label in logs and
 * /metrics then, since its address may change.
 */

static ngx_ioa_redis_node_t *
ngx_ioa_redis_node_new(ngx_str_t *name, u_char *host, size_t len, int port)
{
    u_char                 *p;
    ngx_ioa_redis_node_t   *node, **np;

    node = ngx_pcalloc(ngx_ioa_redis_pool, sizeof(ngx_ioa_redis_node_t));
    np = ngx_array_push(ngx_ioa_redis_nodes);

    if (name != NULL) {
        host = name->data;
        len = name->len;
    }

    p = ngx_pnalloc(ngx_ioa_redis_pool, len + 1 + NGX_INT_T_LEN);

    if (node == NULL || p == NULL || np == NULL) {
        return NULL;
    }

    if (name != NULL) {
        node->name = *name;

    } else {
        ngx_memcpy(node->host, host, len);
        node->host[len] = '\0';
    }

    node->port = port;

    node->addr.data = p;
    node->addr.len = ngx_sprintf(p, "%*s:%d", len, host, port) - p;

    node->cmd.name = "command";
    node->cmd.node = node;
    node->cmd.log = ngx_cycle->log;
    ngx_queue_init(&node->cmd.backlog);

    node->sub.name = "pub/sub";
    node->sub.node = node;
    node->sub.is_sub = 1;
    node->sub.log = ngx_cycle->log;
    ngx_queue_init(&node->sub.backlog);

    *np = node;

    return node;
}


/* whether a lost connection of the node is to be retried */

ngx_int_t
ngx_ioa_redis_conn_wanted(ngx_ioa_redis_conn_t *rc)
{
    ngx_ioa_redis_node_t  *node;

    node = rc->node;

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        return !rc->is_sub;

    case NGX_IOA_REDIS_STANDALONE:
        return node == ngx_ioa_redis_single;

    default: /* NGX_IOA_REDIS_CLUSTER */
        return ngx_ioa_redis_node_want(node)
               && (!rc->is_sub || node->master);
    }
}


static ngx_int_t
ngx_ioa_redis_node_want(ngx_ioa_redis_node_t *node)
{
    return node->master || node->seed;
}


ngx_uint_t
ngx_ioa_redis_cluster(void)
{
    return ngx_ioa_redis_mode == NGX_IOA_REDIS_CLUSTER;
}


/* some command can be sent: the module starts work that waits for Redis */

ngx_uint_t
ngx_ioa_redis_ready(void)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node;

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        return 0;

    case NGX_IOA_REDIS_STANDALONE:
        return ngx_ioa_redis_single->cmd.up;

    default:
        for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
            node = ngx_ioa_redis_node(i);

            if (node->master && node->cmd.up) {
                return 1;
            }
        }

        return 0;
    }
}


/* the i-th node that holds data (the standalone Redis, or a Cluster's
 * masters), NULL past the last */

ngx_ioa_redis_node_t *
ngx_ioa_redis_data_node(ngx_uint_t i)
{
    ngx_uint_t             k;
    ngx_ioa_redis_node_t  *node;

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        return NULL;

    case NGX_IOA_REDIS_STANDALONE:
        return i == 0 ? ngx_ioa_redis_single : NULL;

    default:
        for (k = 0; k < ngx_ioa_redis_nodes->nelts; k++) {
            node = ngx_ioa_redis_node(k);

            if (node->master && i-- == 0) {
                return node;
            }
        }

        return NULL;
    }
}


/* every command can be sent: /health_check says "ok" */

ngx_uint_t
ngx_ioa_redis_healthy(void)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node;

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        return 0;

    case NGX_IOA_REDIS_STANDALONE:
        return ngx_ioa_redis_single->cmd.up;

    default:
        if (!ngx_ioa_redis_covered) {
            return 0;
        }

        for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
            node = ngx_ioa_redis_node(i);

            if (node->master && !node->cmd.up) {
                return 0;
            }
        }

        return 1;
    }
}


/*
 * Says in error.log when this worker becomes able to send every command,
 * and so when /health_check starts answering "ok" on it: "ioa redis:
 * ready", at notice, once per change from not ready (at start, after a
 * Redis that went away came back, after a failover left slots without a
 * master).  Whoever starts a hub and must know when its first request
 * will be served reads this line rather than polling: a load balancer's
 * poll reaches whichever worker accepts it, so "one 200" says nothing of
 * the others, while every worker writes this line itself (with its pid).
 * The test suite's start-up wait is built on it (t/lib/IoaTest/Ready.pm).
 * Called wherever a command connection comes up or goes down and where
 * the Cluster's slot map changes; it costs one comparison otherwise.
 */

void
ngx_ioa_redis_note_health(void)
{
    static ngx_uint_t  ready;

    ngx_uint_t  now;

    now = ngx_ioa_redis_healthy();

    if (now == ready) {
        return;
    }

    ready = now;

    if (now) {
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "ioa redis: ready, every command can be sent");
    }
}


ngx_ioa_redis_node_t *
ngx_ioa_redis_route(ngx_int_t slot)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node;

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:
        return NULL;

    case NGX_IOA_REDIS_STANDALONE:
        return ngx_ioa_redis_single;

    default:
        if (slot >= 0) {
            return ngx_ioa_redis_slots[slot];
        }

        /* a command without a key (PING): any master that is up */

        for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
            node = ngx_ioa_redis_node(i);

            if (node->master && node->cmd.up) {
                return node;
            }
        }

        return NULL;
    }
}


/* the node that owns a slot now (standalone: the one node) */

ngx_ioa_redis_node_t *
ngx_ioa_redis_owner(ngx_uint_t slot)
{
    return ngx_ioa_redis_route(slot);
}


/* the slot of a command's first key, -1 for a command without keys; only
 * the commands the module sends need to be known here */

ngx_int_t
ngx_ioa_redis_command_slot(int argc, const char **argv,
    const size_t *argvlen)
{
    int         i, key;
    ngx_int_t   numkeys;

    if (argc < 2) {
        return -1;
    }

    key = 1;

    if (ngx_ioa_redis_cmp(argv[0], argvlen[0], "evalsha")
        || ngx_ioa_redis_cmp(argv[0], argvlen[0], "eval"))
    {
        numkeys = (argc > 2) ? ngx_atoi((u_char *) argv[2], argvlen[2]) : 0;

        if (numkeys <= 0 || argc < 4) {
            return -1;
        }

        key = 3;

    } else if (ngx_ioa_redis_cmp(argv[0], argvlen[0], "xgroup")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "xinfo"))
    {
        key = 2;

    } else if (ngx_ioa_redis_cmp(argv[0], argvlen[0], "xread")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "xreadgroup"))
    {
        for (i = 1; i < argc - 1; i++) {
            if (ngx_ioa_redis_cmp(argv[i], argvlen[i], "streams")) {
                break;
            }
        }

        key = i + 1;

    } else if (ngx_ioa_redis_cmp(argv[0], argvlen[0], "ping")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "time")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "info")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "cluster")
               || ngx_ioa_redis_cmp(argv[0], argvlen[0], "script"))
    {
        return -1;
    }

    if (key >= argc) {
        return -1;
    }

    return ioa_key_slot(argv[key], argvlen[key]);
}


static ngx_uint_t
ngx_ioa_redis_cmp(const char *arg, size_t len, const char *name)
{
    return len == ngx_strlen(name)
           && ngx_strncasecmp((u_char *) arg, (u_char *) name, len) == 0;
}


/*
 * "MOVED <slot> <host>:<port>" (the slot has a new owner: the map is
 * fixed for that slot now and refreshed soon) or "ASK <slot> <host>:<port>"
 * (the slot is being migrated and this key is already there: this one
 * command goes there, preceded by ASKING, and the map stays).  Returns the
 * node to resend to, or NULL when the reply is neither.
 */

ngx_ioa_redis_node_t *
ngx_ioa_redis_redirect(redisReply *reply, ngx_int_t *slot, ngx_uint_t *ask)
{
    u_char                *p, *last, *s, *colon;
    ngx_int_t              n, port;
    ngx_ioa_redis_node_t  *node;

    if (reply == NULL || reply->type != REDIS_REPLY_ERROR
        || ngx_ioa_redis_mode != NGX_IOA_REDIS_CLUSTER)
    {
        return NULL;
    }

    p = (u_char *) reply->str;
    last = p + reply->len;

    if (reply->len > 6 && ngx_strncmp(p, "MOVED ", 6) == 0) {
        *ask = 0;
        p += 6;

    } else if (reply->len > 4 && ngx_strncmp(p, "ASK ", 4) == 0) {
        *ask = 1;
        p += 4;

    } else {
        return NULL;
    }

    s = p;
    p = ngx_strlchr(p, last, ' ');

    if (p == NULL) {
        return NULL;
    }

    n = ngx_atoi(s, p - s);

    if (n < 0 || n >= IOA_KEY_SLOTS) {
        return NULL;
    }

    s = p + 1;

    for (colon = last - 1; colon > s && *colon != ':'; colon--) {
        /* void */
    }

    port = ngx_atoi(colon + 1, last - colon - 1);

    if (colon == s || port <= 0 || port > 65535) {
        return NULL;
    }

    node = ngx_ioa_redis_node_get(s, colon - s, port, 1);
    if (node == NULL) {
        return NULL;
    }

    *slot = n;

    if (*ask) {
        if (node->cmd.state == NGX_IOA_REDIS_DOWN && !node->cmd.retry.timer_set)
        {
            ngx_ioa_redis_conn_connect(&node->cmd);
        }

        return node;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "ioa redis: slot %i moved to %V", n, &node->addr);

    ngx_ioa_redis_slots[n] = node;

    if (!node->master) {
        node->master = 1;

        if (node->cmd.state == NGX_IOA_REDIS_DOWN) {
            ngx_ioa_redis_conn_connect(&node->cmd);
        }

        if (node->sub.state == NGX_IOA_REDIS_DOWN) {
            ngx_ioa_redis_conn_connect(&node->sub);
        }
    }

    ngx_ioa_redis_refresh(0);

    return node;
}


/* a command connection just came up: in an unknown setup it asks what the
 * setup is, in a Cluster it asks for the map */

void
ngx_ioa_redis_detect(ngx_ioa_redis_node_t *node)
{
    const char  *argv[2];
    size_t       argvlen[2];

    argv[0] = "CLUSTER";
    argvlen[0] = 7;
    argv[1] = "SLOTS";
    argvlen[1] = 5;

    if (ngx_ioa_redis_node_command(node, ngx_ioa_redis_slots_reply, node,
                                   2, argv, argvlen)
        != NULL)
    {
        ngx_ioa_redis_refreshing++;
    }
}


void
ngx_ioa_redis_refresh(ngx_uint_t trouble)
{
    if (ngx_ioa_redis_mode != NGX_IOA_REDIS_CLUSTER) {
        return;
    }

    if (trouble) {
        ngx_ioa_redis_trouble = 1;
    }

    ngx_ioa_redis_refresh_at(NGX_IOA_CLUSTER_SOON);
}


/* a command connection of a Cluster node was lost */

void
ngx_ioa_redis_node_lost(ngx_ioa_redis_node_t *node)
{
    ngx_ioa_redis_refresh(1);
}


static void
ngx_ioa_redis_refresh_at(ngx_msec_t delay)
{
    ngx_event_t  *ev;

    ev = &ngx_ioa_redis_refresh_ev;

    if (ngx_exiting || ngx_terminate) {
        return;
    }

    if (ev->timer_set) {
        if (ev->timer.key <= ngx_current_msec + delay) {
            return;
        }

        ngx_del_timer(ev);
    }

    ngx_add_timer(ev, delay);
}


static void
ngx_ioa_redis_refresh_handler(ngx_event_t *ev)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node, *any;

    if (ngx_ioa_redis_refreshing) {
        /* the answer of the one in flight re-arms the timer */
        return;
    }

    any = NULL;

    for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
        node = ngx_ioa_redis_node(i);

        if (!node->cmd.up) {
            continue;
        }

        if (node->master) {
            ngx_ioa_redis_detect(node);
            return;
        }

        if (any == NULL) {
            any = node;
        }
    }

    if (any) {
        ngx_ioa_redis_detect(any);
        return;
    }

    /* nothing is connected: the connections' own retries bring one up,
     * and that one asks for the map */

    ngx_ioa_redis_refresh_at(NGX_IOA_CLUSTER_DEGRADED);
}


static void
ngx_ioa_redis_slots_reply(redisReply *reply, void *data)
{
    ngx_ioa_redis_node_t *from = data;

    ngx_uint_t   healthy;

    if (ngx_ioa_redis_refreshing) {
        ngx_ioa_redis_refreshing--;
    }

    if (reply == NULL) {
        /* the connection was lost; its loss triggers another refresh */
        return;
    }

    switch (ngx_ioa_redis_mode) {

    case NGX_IOA_REDIS_UNKNOWN:

        if (reply->type != REDIS_REPLY_ARRAY) {
            ngx_ioa_redis_standalone(from, reply);
            return;
        }

        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "ioa redis: %V is a Redis Cluster node", &from->addr);

        ngx_ioa_redis_mode = NGX_IOA_REDIS_CLUSTER;
        break;

    case NGX_IOA_REDIS_STANDALONE:
        /* a late answer from another address */
        return;

    default:

        if (reply->type != REDIS_REPLY_ARRAY) {
            ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                          "ioa redis: CLUSTER SLOTS on %V failed: %*s",
                          &from->addr, (size_t) reply->len,
                          reply->str ? reply->str : "");
            ngx_ioa_redis_trouble = 1;
            ngx_ioa_redis_refresh_at(NGX_IOA_CLUSTER_DEGRADED);
            return;
        }

        break;
    }

    if (ngx_ioa_redis_apply(reply, from) != NGX_OK) {
        ngx_ioa_redis_trouble = 1;
    }

    /* subscriptions follow their slots to the new owners */
    ngx_ioa_sub_map_changed();

    healthy = ngx_ioa_redis_healthy();
    ngx_ioa_redis_note_health();

    if (healthy && ngx_ioa_redis_trouble) {
        /* work that failed meanwhile (CLUSTERDOWN, a master away) is
         * retried now that every slot has its master again */
        ngx_ioa_redis_trouble = 0;
        ngx_ioa_redis_hooks_cmd_ready();
    }

    ngx_ioa_redis_refresh_at(healthy && !ngx_ioa_redis_trouble
                             ? NGX_IOA_CLUSTER_IDLE
                             : NGX_IOA_CLUSTER_DEGRADED);
}


/*
 * CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...].
 * A master that announces no address ("" or "?": it does not know how it
 * is reached) is the node that answered.
 */

static ngx_int_t
ngx_ioa_redis_apply(redisReply *reply, ngx_ioa_redis_node_t *from)
{
    size_t                 i;
    u_char                *host;
    size_t                 hlen;
    long long              start, end, s;
    ngx_int_t              rc;
    ngx_uint_t             n, covered;
    redisReply            *r, *m;
    ngx_ioa_redis_node_t  *node;

    rc = NGX_OK;

    ngx_memzero(ngx_ioa_redis_new, sizeof(ngx_ioa_redis_new));

    for (i = 0; i < reply->elements; i++) {
        r = reply->element[i];

        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3
            || r->element[0]->type != REDIS_REPLY_INTEGER
            || r->element[1]->type != REDIS_REPLY_INTEGER
            || r->element[2]->type != REDIS_REPLY_ARRAY
            || r->element[2]->elements < 2
            || r->element[2]->element[0]->type != REDIS_REPLY_STRING
            || r->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
        {
            rc = NGX_ERROR;
            continue;
        }

        start = r->element[0]->integer;
        end = r->element[1]->integer;

        if (start < 0 || end >= IOA_KEY_SLOTS || start > end) {
            rc = NGX_ERROR;
            continue;
        }

        m = r->element[2];
        host = (u_char *) m->element[0]->str;
        hlen = m->element[0]->len;

        if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
            host = from->host;
            hlen = ngx_strlen(from->host);
        }

        node = ngx_ioa_redis_node_get(host, hlen,
                                      (int) m->element[1]->integer, 1);
        if (node == NULL) {
            rc = NGX_ERROR;
            continue;
        }

        for (s = start; s <= end; s++) {
            ngx_ioa_redis_new[s] = node;
        }
    }

    covered = 1;

    for (n = 0; n < ngx_ioa_redis_nodes->nelts; n++) {
        ngx_ioa_redis_node(n)->master = 0;
    }

    for (s = 0; s < IOA_KEY_SLOTS; s++) {
        node = ngx_ioa_redis_new[s];
        ngx_ioa_redis_slots[s] = node;

        if (node == NULL) {
            covered = 0;
            continue;
        }

        node->master = 1;
    }

    if (!covered && ngx_ioa_redis_covered) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ioa redis: some Cluster slots have no master");
    }

    ngx_ioa_redis_covered = covered;
    ngx_ioa_redis_note_health();

    for (n = 0; n < ngx_ioa_redis_nodes->nelts; n++) {
        node = ngx_ioa_redis_node(n);

        if (node->master) {
            if (node->cmd.state == NGX_IOA_REDIS_DOWN
                && !node->cmd.retry.timer_set)
            {
                ngx_ioa_redis_conn_connect(&node->cmd);

            } else if (node->cmd.state == NGX_IOA_REDIS_READY
                       && !node->cmd.up)
            {
                ngx_ioa_redis_node_up(node);
            }

            if (node->sub.state == NGX_IOA_REDIS_DOWN
                && !node->sub.retry.timer_set)
            {
                ngx_ioa_redis_conn_connect(&node->sub);
            }

            continue;
        }

        /* no longer a master (demoted, failed, or a seed that is a
         * replica): its shard channels are gone, so is its pub/sub
         * connection; the command connection stays for a seed, and
         * commands still in flight on it end with MOVED and go on */

        if (node->sub.state != NGX_IOA_REDIS_DOWN
            || node->sub.retry.timer_set)
        {
            ngx_ioa_redis_conn_close(&node->sub);
        }

        if (!node->seed && node->cmd.retry.timer_set) {
            ngx_ioa_redis_conn_close(&node->cmd);
        }

        if (node->cmd.state == NGX_IOA_REDIS_READY && !node->cmd.up) {
            ngx_ioa_redis_node_up(node);
        }
    }

    return rc;
}


/* the first answer came from a standalone Redis: the module runs on that
 * one server as it always did */

static void
ngx_ioa_redis_standalone(ngx_ioa_redis_node_t *node, redisReply *reply)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *other;

    ngx_ioa_redis_mode = NGX_IOA_REDIS_STANDALONE;
    ngx_ioa_redis_single = node;
    node->master = 1;

    if (ngx_ioa_redis_nodes->nelts > 1) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ioa redis: %V is a standalone Redis (%*s); the other "
                      "addresses of \"ioa_redis\" are not used", &node->addr,
                      (size_t) reply->len, reply->str ? reply->str : "");
    }

    for (i = 0; i < ngx_ioa_redis_nodes->nelts; i++) {
        other = ngx_ioa_redis_node(i);

        if (other != node) {
            ngx_ioa_redis_conn_close(&other->cmd);
        }
    }

    ngx_ioa_redis_node_up(node);
    ngx_ioa_redis_conn_connect(&node->sub);
}
