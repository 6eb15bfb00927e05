
/*
 * Copyright (C) ioa authors
 *
 * Limits: how fast one agent may post, how fast it may make rooms, how
 * many connections it may hold, how fast one room may be written to, how
 * large a team may be, how many agents the registry takes.
 *
 * The rates and the connection counts are kept in one shared memory zone
 * (ioa_limit_zone), so every worker of an nginx instance sees the same
 * counters: a red-black tree of entries keyed by kind and name ("a" an
 * agent's posts, "t" its teamups, "r" a room), each with a leaky bucket (the excess of requests over
 * the rate, in thousandths of a request, as nginx's limit_req keeps it) and
 * a connection count, and an LRU queue.  Idle entries (no connection, the
 * bucket drained) are dropped as new ones come; if the zone is still full,
 * the least recently used idle entry goes.  When nothing can be dropped the
 * request is refused (fail closed), with its own error.
 *
 * The counters are per nginx instance: N instances let an agent post N
 * times the rate, if it connects to all of them.  A limit that must hold
 * across instances belongs in Redis, at the price of a round trip per
 * envelope; this one costs a lock and a tree lookup.
 *
 * What a client sees: a post over the limit is not stored and gets the error
 * rate_limited (HTTP 429 with Retry-After, or a WebSocket error frame with
 * retry_after_ms; the connection stays open and other agents see nothing);
 * a connection over ioa_limit_conn is refused at the handshake with 429
 * too_many_connections.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


typedef struct {
    ngx_rbtree_node_t        node;        /* key: ngx_crc32 of kind+name */
    ngx_queue_t              lru;
    ngx_msec_t               last;        /* when excess was computed */
    ngx_uint_t               excess;      /* thousandths of a request */
    ngx_uint_t               conns;
    u_short                  len;
    u_char                   kind;
    u_char                   data[1];
} ngx_ioa_limit_node_t;


typedef struct {
    ngx_rbtree_t             rbtree;
    ngx_rbtree_node_t        sentinel;
    ngx_queue_t              lru;
} ngx_ioa_limit_sh_t;


typedef struct {
    ngx_ioa_limit_sh_t      *sh;
    ngx_slab_pool_t         *shpool;
} ngx_ioa_limit_ctx_t;


static ngx_int_t ngx_ioa_limit_init_zone(ngx_shm_zone_t *zone, void *data);
static ngx_ioa_limit_node_t *ngx_ioa_limit_get(ngx_ioa_limit_ctx_t *ctx,
    u_char kind, ngx_str_t *name, ngx_uint_t create);
static void ngx_ioa_limit_expire(ngx_ioa_limit_ctx_t *ctx, ngx_uint_t n,
    ngx_uint_t force);
static void ngx_ioa_limit_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_int_t ngx_ioa_limit_bucket(ngx_ioa_limit_node_t *ln,
    ngx_ioa_limit_rate_t *rate, ngx_msec_t now, ngx_msec_t *retry);
static void ngx_ioa_limit_conn_cleanup(void *data);


/* ioa_limit_rate 50r/s [burst=100] | off, and the same for rooms */

char *
ngx_ioa_limit_rate_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char                *p;
    ngx_int_t              n, scale;
    ngx_str_t             *value;
    ngx_uint_t             i;
    ngx_ioa_limit_rate_t  *rate;

    rate = (ngx_ioa_limit_rate_t *) ((char *) conf + cmd->offset);

    if (rate->set) {
        return "is duplicate";
    }

    rate->set = 1;
    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts != 2) {
            return "takes no burst when off";
        }

        rate->rate = 0;
        return NGX_CONF_OK;
    }

    p = value[1].data + value[1].len - 3;
    scale = 1;

    if (value[1].len > 3 && ngx_strncmp(p, "r/s", 3) == 0) {
        scale = 1;

    } else if (value[1].len > 3 && ngx_strncmp(p, "r/m", 3) == 0) {
        scale = 60;

    } else {
        return "needs a rate such as \"50r/s\" or \"600r/m\", or \"off\"";
    }

    n = ngx_atoi(value[1].data, value[1].len - 3);
    if (n <= 0) {
        return "needs a rate above 0, such as \"50r/s\"";
    }

    /* thousandths of a request per second */
    rate->rate = n * 1000 / scale;
    rate->burst = 0;

    for (i = 2; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {
            n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n <= 0) {
                return "has an invalid burst";
            }

            rate->burst = n;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (rate->burst == 0) {
        /* two seconds' worth: a client that sends in bursts is not
         * punished for the timing of its event loop */
        rate->burst = ngx_max(2 * rate->rate / 1000, 1);
    }

    if (rate->rate == 0) {
        return "is below 1 request per minute";
    }

    return NGX_CONF_OK;
}


/* ioa_limit_zone size: created even when not given, so defaults apply */

char *
ngx_ioa_limit_init_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf)
{
    ngx_str_t             name;
    ngx_ioa_limit_ctx_t  *ctx;

    if (!mcf->limit_rate.set) {
        mcf->limit_rate.rate = 50 * 1000;
        mcf->limit_rate.burst = 100;
    }

    if (!mcf->room_rate.set) {
        mcf->room_rate.rate = 500 * 1000;
        mcf->room_rate.burst = 1000;
    }

    /* a room is a subscription and a read for every member's connections,
     * and stays: made far more rarely than envelopes are posted */
    if (!mcf->teamup_rate.set) {
        mcf->teamup_rate.rate = 2 * 1000;
        mcf->teamup_rate.burst = 20;
    }

    ngx_conf_init_uint_value(mcf->limit_conn, 16);

    if (mcf->limit_zone_size == NGX_CONF_UNSET_SIZE) {
        mcf->limit_zone_size = 10 * 1024 * 1024;
    }

    if (mcf->limit_zone_size < 8 * ngx_pagesize) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_limit_zone\" must be at least %uz bytes",
                           8 * ngx_pagesize);
        return NGX_CONF_ERROR;
    }

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_limit_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "ioa_limits");

    mcf->limit_zone = ngx_shared_memory_add(cf, &name, mcf->limit_zone_size,
                                            &ngx_http_ioa_module);
    if (mcf->limit_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    mcf->limit_zone->init = ngx_ioa_limit_init_zone;
    mcf->limit_zone->data = ctx;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_ioa_limit_init_zone(ngx_shm_zone_t *zone, void *data)
{
    ngx_ioa_limit_ctx_t  *octx = data;

    size_t                len;
    ngx_ioa_limit_ctx_t  *ctx;

    ctx = zone->data;

    if (octx) {
        /* a reload: the counters go on */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) zone->shm.addr;

    if (zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_alloc(ctx->shpool, sizeof(ngx_ioa_limit_sh_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;

    ngx_rbtree_init(&ctx->sh->rbtree, &ctx->sh->sentinel,
                    ngx_ioa_limit_rbtree_insert);
    ngx_queue_init(&ctx->sh->lru);

    len = sizeof(" in ioa_limit_zone \"\"") + zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in ioa_limit_zone \"%V\"%Z",
                &zone->shm.name);

    ctx->shpool->log_nomem = 0;

    return NGX_OK;
}


/*
 * One post by agent name into room comm_id: NGX_OK, or NGX_DECLINED with err
 * (rate_limited, naming which limit and when to retry) and *retry in ms.
 * Both buckets are charged only if both allow the post.
 */

ngx_int_t
ngx_ioa_limit_post(ngx_str_t *name, ngx_str_t *comm_id, ngx_msec_t *retry,
    ngx_ioa_error_t *err)
{
    ngx_int_t              rc;
    ngx_msec_t             now, wait;
    ngx_uint_t             excess_a, excess_r;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *a, *room;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf->limit_rate.rate == 0 && mcf->room_rate.rate == 0) {
        return NGX_OK;
    }

    ctx = mcf->limit_zone->data;
    now = ngx_current_msec;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    a = NULL;
    room = NULL;

    if (mcf->limit_rate.rate) {
        a = ngx_ioa_limit_get(ctx, 'a', name, 1);
    }

    if (mcf->room_rate.rate && comm_id->len) {
        room = ngx_ioa_limit_get(ctx, 'r', comm_id, 1);
    }

    if ((mcf->limit_rate.rate && a == NULL)
        || (mcf->room_rate.rate && comm_id->len && room == NULL))
    {
        ngx_shmtx_unlock(&ctx->shpool->mutex);

        *retry = 1000;
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ZONE, 1);
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "ioa_limit_zone is full; the envelope was not "
                          "stored, send it again later");
        return NGX_DECLINED;
    }

    excess_a = a ? a->excess : 0;
    excess_r = room ? room->excess : 0;

    rc = NGX_OK;
    wait = 0;

    if (a && ngx_ioa_limit_bucket(a, &mcf->limit_rate, now, &wait)
             != NGX_OK)
    {
        rc = NGX_DECLINED;
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_RATE, 1);
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "\"%V\" posts faster than ioa_limit_rate "
                          "allows; the envelope was not stored, send it "
                          "again in %M ms", name, wait);

    } else if (room && ngx_ioa_limit_bucket(room, &mcf->room_rate, now,
                                            &wait)
                       != NGX_OK)
    {
        rc = NGX_DECLINED;
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ROOM_RATE, 1);
        ngx_ioa_error_set(err, "rate_limited", "comm_id",
                          "room \"%V\" takes envelopes faster than "
                          "ioa_limit_room_rate allows; the envelope was not "
                          "stored, send it again in %M ms", comm_id, wait);
    }

    if (rc != NGX_OK) {
        /* nothing charged: a refused post costs the client nothing */
        if (a) {
            a->excess = excess_a;
        }

        if (room) {
            room->excess = excess_r;
        }
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    *retry = wait;

    return rc;
}


/* ioa_limit_teamup_rate: how fast one agent makes rooms ("t" entries) */

ngx_int_t
ngx_ioa_limit_teamup(ngx_str_t *name, ngx_msec_t *retry, ngx_ioa_error_t *err)
{
    ngx_int_t              rc;
    ngx_msec_t             wait;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *t;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf->teamup_rate.rate == 0) {
        return NGX_OK;
    }

    ctx = mcf->limit_zone->data;
    wait = 1000;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    t = ngx_ioa_limit_get(ctx, 't', name, 1);

    rc = (t == NULL)
         ? NGX_DECLINED
         : ngx_ioa_limit_bucket(t, &mcf->teamup_rate, ngx_current_msec,
                                &wait);

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    if (rc != NGX_OK) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS
                         + (t ? NGX_IOA_LIMIT_TEAMUP_RATE : NGX_IOA_LIMIT_ZONE),
                         1);
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "\"%V\" makes rooms faster than "
                          "ioa_limit_teamup_rate allows; no room was made, "
                          "ask again in %M ms", name, wait);
    }

    *retry = wait;

    return rc;
}


/*
 * The leaky bucket of one entry: the excess drains at rate, each request
 * adds one (1000 thousandths); over burst, the request is refused and
 * *retry says when one more would fit.
 */

static ngx_int_t
ngx_ioa_limit_bucket(ngx_ioa_limit_node_t *ln, ngx_ioa_limit_rate_t *rate,
    ngx_msec_t now, ngx_msec_t *retry)
{
    ngx_int_t   excess;
    ngx_msec_t  elapsed;

    elapsed = now - ln->last;

    if ((ngx_msec_int_t) elapsed < 0) {
        elapsed = 0;
    }

    excess = (ngx_int_t) ln->excess - (ngx_int_t) (rate->rate * elapsed / 1000)
             + 1000;

    if (excess < 1000) {
        excess = 1000;
    }

    if ((ngx_uint_t) excess > rate->burst * 1000) {
        *retry = (excess - rate->burst * 1000) * 1000 / rate->rate + 1;
        return NGX_DECLINED;
    }

    ln->excess = excess;
    ln->last = now;

    return NGX_OK;
}


/*
 * A connection of agent name (WebSocket or SSE inbox) that lives as long as
 * pool: NGX_OK and counted until the pool goes, or NGX_DECLINED with err.
 */

ngx_int_t
ngx_ioa_limit_conn(ngx_pool_t *pool, ngx_str_t *name, ngx_ioa_error_t *err)
{
    ngx_uint_t             count;
    ngx_pool_cleanup_t    *cln;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf->limit_conn == 0 || name->len == 0) {
        return NGX_OK;
    }

    /* before the count, so a failure here leaves nothing counted */
    cln = ngx_pool_cleanup_add(pool, sizeof(ngx_str_t) + name->len);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ctx = mcf->limit_zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ln = ngx_ioa_limit_get(ctx, 'a', name, 1);
    count = ln ? ln->conns : 0;

    if (ln && ln->conns < mcf->limit_conn) {
        ln->conns++;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    if (ln == NULL) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ZONE, 1);
        ngx_ioa_error_set(err, "too_many_connections", NULL,
                          "ioa_limit_zone is full; connect again later");
        return NGX_DECLINED;
    }

    if (count >= mcf->limit_conn) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_CONN, 1);
        ngx_ioa_error_set(err, "too_many_connections", NULL,
                          "\"%V\" already holds %ui connections, the most "
                          "ioa_limit_conn allows; close one first", name,
                          count);
        return NGX_DECLINED;
    }

    /* the name is kept in the cleanup's own memory: the pool's other data
     * may already be gone when it runs */
    ((ngx_str_t *) cln->data)->len = name->len;
    ((ngx_str_t *) cln->data)->data = (u_char *) cln->data + sizeof(ngx_str_t);
    ngx_memcpy((u_char *) cln->data + sizeof(ngx_str_t), name->data,
               name->len);
    cln->handler = ngx_ioa_limit_conn_cleanup;

    return NGX_OK;
}


static void
ngx_ioa_limit_conn_cleanup(void *data)
{
    ngx_str_t *name = data;

    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf == NULL || mcf->limit_zone == NULL) {
        return;
    }

    ctx = mcf->limit_zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ln = ngx_ioa_limit_get(ctx, 'a', name, 0);

    if (ln && ln->conns) {
        ln->conns--;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);
}


/* the entry of (kind, name), created if asked; called with the lock held */

static ngx_ioa_limit_node_t *
ngx_ioa_limit_get(ngx_ioa_limit_ctx_t *ctx, u_char kind, ngx_str_t *name,
    ngx_uint_t create)
{
    size_t                 size;
    uint32_t               hash;
    ngx_int_t              rc;
    ngx_rbtree_node_t     *node, *sentinel;
    ngx_ioa_limit_node_t  *ln;

    if (name->len > 65535) {
        return NULL;
    }

    ngx_crc32_init(hash);
    ngx_crc32_update(&hash, &kind, 1);
    ngx_crc32_update(&hash, name->data, name->len);
    ngx_crc32_final(hash);

    node = ctx->sh->rbtree.root;
    sentinel = ctx->sh->rbtree.sentinel;

    while (node != sentinel) {

        if (hash < node->key) {
            node = node->left;
            continue;
        }

        if (hash > node->key) {
            node = node->right;
            continue;
        }

        ln = (ngx_ioa_limit_node_t *) node;

        /* the same order as ngx_ioa_limit_rbtree_insert: sought - held */
        rc = (ngx_int_t) kind - (ngx_int_t) ln->kind;

        if (rc == 0) {
            rc = ngx_memn2cmp(name->data, ln->data, name->len,
                              (size_t) ln->len);
        }

        if (rc == 0) {
            ngx_queue_remove(&ln->lru);
            ngx_queue_insert_head(&ctx->sh->lru, &ln->lru);
            return ln;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    if (!create) {
        return NULL;
    }

    /* two idle entries go for each new one, so the tree does not grow
     * with names long gone */
    ngx_ioa_limit_expire(ctx, 2, 0);

    size = offsetof(ngx_ioa_limit_node_t, data) + name->len;

    ln = ngx_slab_alloc_locked(ctx->shpool, size);

    if (ln == NULL) {
        ngx_ioa_limit_expire(ctx, 8, 1);

        ln = ngx_slab_alloc_locked(ctx->shpool, size);
        if (ln == NULL) {
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                          "ioa: ioa_limit_zone is full of live entries; "
                          "raise its size");
            return NULL;
        }
    }

    ln->node.key = hash;
    ln->kind = kind;
    ln->len = (u_short) name->len;
    ngx_memcpy(ln->data, name->data, name->len);
    ln->excess = 0;
    ln->conns = 0;
    ln->last = ngx_current_msec;

    ngx_rbtree_insert(&ctx->sh->rbtree, &ln->node);
    ngx_queue_insert_head(&ctx->sh->lru, &ln->lru);

    return ln;
}


/* up to n idle entries from the LRU end; force: idle now, not only drained
 * long ago */

static void
ngx_ioa_limit_expire(ngx_ioa_limit_ctx_t *ctx, ngx_uint_t n, ngx_uint_t force)
{
    ngx_msec_t             now;
    ngx_queue_t           *q, *prev;
    ngx_ioa_limit_node_t  *ln;

    now = ngx_current_msec;

    q = ngx_queue_last(&ctx->sh->lru);

    while (n && q != ngx_queue_sentinel(&ctx->sh->lru)) {
        prev = ngx_queue_prev(q);
        ln = ngx_queue_data(q, ngx_ioa_limit_node_t, lru);

        /* forced (the zone is full), a second of quiet is enough: the
         * bucket state of an agent that idle matters little */

        if (ln->conns == 0
            && (now - ln->last > 60000 || (force && now - ln->last > 1000)))
        {
            ngx_queue_remove(q);
            ngx_rbtree_delete(&ctx->sh->rbtree, &ln->node);
            ngx_slab_free_locked(ctx->shpool, ln);
            n--;

        } else if (!force) {
            /* the LRU end is recent: so is everything before it */
            return;
        }

        q = prev;
    }
}


static void
ngx_ioa_limit_rbtree_insert(ngx_rbtree_node_t *temp, ngx_rbtree_node_t *node,
    ngx_rbtree_node_t *sentinel)
{
    ngx_int_t              rc;
    ngx_rbtree_node_t    **p;
    ngx_ioa_limit_node_t  *ln, *lnt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            ln = (ngx_ioa_limit_node_t *) node;
            lnt = (ngx_ioa_limit_node_t *) temp;

            rc = (ngx_int_t) ln->kind - (ngx_int_t) lnt->kind;

            if (rc == 0) {
                rc = ngx_memn2cmp(ln->data, lnt->data, ln->len, lnt->len);
            }

            p = (rc < 0) ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}
