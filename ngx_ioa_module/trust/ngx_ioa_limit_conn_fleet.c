
/*
 * Copyright (C) ioa authors
 *
 * ioa_limit_conn across the fleet (ioa_limit_scope fleet).
 *
 * The instance's own count (ngx_ioa_limit.c, in the shared zone) decides at
 * the handshake, as it always did.  With fleet scope the connection is
 * also counted in Redis, where every instance's count of the identity
 * meets (redis-scripts/conn_count.lua, key <p>{conn:<name>}):
 *
 *   open     the worker counts the connection in its own table and sends
 *            its new count with the limit.  Redis answers "written" or
 *            "refused": refused, the connection that was just opened is
 *            closed (WebSocket 1008, a stream's close event) with
 *            too_many_connections.  Why after the handshake and not
 *            before: the handshake would wait a Redis round trip for every
 *            connection, and a WebSocket's handler answers in its first
 *            step; what the fleet holds past the limit is at most the
 *            handshakes of one round trip, and only for that long.
 *   close    the count goes down and is sent (no answer waited for); a
 *            check still in flight is cancelled first.
 *   tick     every NGX_IOA_TICK the worker sends its count of every
 *            identity it holds, so its entries in Redis live on (for
 *            ioa_presence_ttl, two ticks at least), and so connections
 *            opened while Redis was away are counted once it is back
 *            (also sent at once when the command connection comes up).
 *
 * Each write carries the worker's whole count, not a difference, so a lost
 * or repeated write is set right by the next one, and a worker that dies
 * leaves entries that run out within ioa_presence_ttl.  Redis away: the
 * checks get no answer and the instance's own limit stands (one log line
 * per worker until a check is answered again): never unlimited, never
 * everything refused.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"


/* one identity this worker holds connections of */
typedef struct {
    ngx_str_node_t            sn;         /* must be first */
    ngx_uint_t                count;
    u_char                    data[1];
} ngx_ioa_fleet_conns_t;


static ngx_int_t ngx_ioa_limit_conn_fleet_send(ngx_str_t *name,
    ngx_uint_t count, ngx_uint_t limit, ngx_ioa_limit_conn_t *lc);
static void ngx_ioa_limit_conn_fleet_checked(redisReply *reply, void *data);
static ngx_ioa_fleet_conns_t *ngx_ioa_limit_conn_fleet_get(ngx_str_t *name,
    ngx_uint_t create);


static ngx_rbtree_t        ngx_ioa_fleet_conns;
static ngx_rbtree_node_t   ngx_ioa_fleet_conns_sentinel;

/* the checks go unanswered: said once, until one is answered again */
static ngx_uint_t          ngx_ioa_fleet_conns_down;


void
ngx_ioa_limit_conn_fleet_open(ngx_ioa_limit_conn_t *lc)
{
    ngx_ioa_fleet_conns_t  *fc;

    fc = ngx_ioa_limit_conn_fleet_get(&lc->name, 1);
    if (fc == NULL) {
        /* out of memory: the instance's limit stands for this one */
        return;
    }

    fc->count++;
    lc->fleet = 1;

    (void) ngx_ioa_limit_conn_fleet_send(&lc->name, fc->count,
                                         ngx_ioa_main_conf()->limit_conn, lc);
}


void
ngx_ioa_limit_conn_fleet_close(ngx_ioa_limit_conn_t *lc)
{
    ngx_ioa_fleet_conns_t  *fc;

    if (lc->req) {
        ngx_ioa_redis_cancel(lc->req);
        lc->req = NULL;
    }

    if (!lc->fleet) {
        return;
    }

    lc->fleet = 0;

    fc = ngx_ioa_limit_conn_fleet_get(&lc->name, 0);
    if (fc == NULL) {
        return;
    }

    if (fc->count) {
        fc->count--;
    }

    (void) ngx_ioa_limit_conn_fleet_send(&lc->name, fc->count, 0, NULL);

    if (fc->count == 0) {
        ngx_rbtree_delete(&ngx_ioa_fleet_conns, &fc->sn.node);
        ngx_free(fc);
    }
}


/* the heartbeat: this worker's count of every identity it holds */

void
ngx_ioa_limit_conn_fleet_tick(void)
{
    ngx_rbtree_node_t      *node, *root, *sentinel;
    ngx_ioa_fleet_conns_t  *fc;

    if (ngx_ioa_fleet_conns.root == NULL || !ngx_ioa_redis_ready()) {
        return;
    }

    root = ngx_ioa_fleet_conns.root;
    sentinel = ngx_ioa_fleet_conns.sentinel;

    if (root == sentinel) {
        return;
    }

    for (node = ngx_rbtree_min(root, sentinel);
         node;
         node = ngx_rbtree_next(&ngx_ioa_fleet_conns, node))
    {
        fc = (ngx_ioa_fleet_conns_t *) node;

        if (ngx_ioa_limit_conn_fleet_send(&fc->sn.str, fc->count, 0, NULL)
            != NGX_OK)
        {
            return;
        }
    }
}


/* conn_count.lua; lc: the connection being opened, told the answer */

static ngx_int_t
ngx_ioa_limit_conn_fleet_send(ngx_str_t *name, ngx_uint_t count,
    ngx_uint_t limit, ngx_ioa_limit_conn_t *lc)
{
    ngx_str_t             *holder;
    ngx_ioa_args_t         a;
    ngx_ioa_main_conf_t   *mcf;
    ngx_ioa_redis_req_t   *req;

    mcf = ngx_ioa_main_conf();
    holder = ngx_ioa_holder();

    ngx_ioa_args_init(&a);
    ngx_ioa_key_conn(&a, name);
    ngx_ioa_args_str(&a, holder);
    ngx_ioa_args_fmt(&a, "%ui", count);
    /* two heartbeats at least, so a live worker's entry never lapses */
    ngx_ioa_args_fmt(&a, "%M", ngx_max(mcf->presence_ttl, 2 * NGX_IOA_TICK));
    ngx_ioa_args_fmt(&a, "%ui", limit);

    req = ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_CONN_COUNT,
                                    lc ? ngx_ioa_limit_conn_fleet_checked
                                       : NULL,
                                    lc, 1, &a);

    if (lc) {
        lc->req = req;
    }

    return req ? NGX_OK : NGX_DECLINED;
}


static void
ngx_ioa_limit_conn_fleet_checked(redisReply *reply, void *data)
{
    ngx_ioa_limit_conn_t *lc = data;

    ngx_ioa_client_t  *cl;

    lc->req = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER)
    {
        if (!ngx_ioa_fleet_conns_down) {
            ngx_ioa_fleet_conns_down = 1;
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "ioa: a fleet-wide connection count got no answer "
                          "from Redis%s%*s; this instance's own "
                          "ioa_limit_conn applies until one does",
                          reply && reply->type == REDIS_REPLY_ERROR
                          ? ": " : "",
                          reply && reply->type == REDIS_REPLY_ERROR
                          ? reply->len : 0,
                          reply && reply->type == REDIS_REPLY_ERROR
                          ? reply->str : "");
        }

        return;
    }

    ngx_ioa_fleet_conns_down = 0;

    if (reply->element[0]->integer == 1) {
        return;
    }

    cl = lc->client;

    ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_CONN, 1);

    ngx_log_error(NGX_LOG_INFO, cl->log, 0,
                  "ioa: \"%V\" already holds %L connections across the "
                  "fleet, the most ioa_limit_conn allows: the new one is "
                  "closed", &lc->name, reply->element[1]->integer);

    /* the close runs the pool's cleanups, lc's among them */
    cl->transport->close(cl, NGX_IOA_WS_POLICY,
                         "too_many_connections: the most ioa_limit_conn "
                         "allows across the fleet; close one first");
}


static ngx_ioa_fleet_conns_t *
ngx_ioa_limit_conn_fleet_get(ngx_str_t *name, ngx_uint_t create)
{
    uint32_t                hash;
    ngx_ioa_fleet_conns_t  *fc;

    if (ngx_ioa_fleet_conns.root == NULL) {
        ngx_rbtree_init(&ngx_ioa_fleet_conns, &ngx_ioa_fleet_conns_sentinel,
                        ngx_str_rbtree_insert_value);
    }

    hash = ngx_crc32_long(name->data, name->len);

    fc = (ngx_ioa_fleet_conns_t *) ngx_str_rbtree_lookup(&ngx_ioa_fleet_conns,
                                                         name, hash);
    if (fc || !create) {
        return fc;
    }

    fc = ngx_alloc(offsetof(ngx_ioa_fleet_conns_t, data) + name->len,
                   ngx_cycle->log);
    if (fc == NULL) {
        return NULL;
    }

    ngx_memcpy(fc->data, name->data, name->len);
    fc->sn.node.key = hash;
    fc->sn.str.data = fc->data;
    fc->sn.str.len = name->len;
    fc->count = 0;

    ngx_rbtree_insert(&ngx_ioa_fleet_conns, &fc->sn.node);

    return fc;
}
