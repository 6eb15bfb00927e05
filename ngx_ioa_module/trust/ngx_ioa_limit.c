
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
 * agent's posts, "t" its teamups, "r" a room), each with a leaky bucket
 * (the excess of requests over the rate, in thousandths of a request, as
 * nginx's limit_req keeps it), a connection count and, with fleet scope, a
 * lease; and an LRU queue.  Idle entries (no connection, the
 * bucket drained) are dropped as new ones come; if the zone is still full,
 * the least recently used idle entry goes.  When nothing can be dropped the
 * request is refused (fail closed), with its own error.
 *
 * By default (ioa_limit_scope instance) the counters are per nginx
 * instance: N instances let an agent post N times the rate, if it connects
 * to all of them; a check costs a lock and a tree lookup.
 *
 * Fleet scope.  With ioa_limit_scope fleet, ioa_limit_rate,
 * ioa_limit_room_rate and ioa_limit_teamup_rate hold across every instance
 * on the same Redis.  One bucket per agent (room) lives in Redis, a token
 * bucket refilled by Redis' clock (limit_lease.lua, key
 * <p>{lim:<kind>:<name>}: its own hash tag, so one slot on a Cluster);
 * asking it for every envelope would be a round trip per envelope, so an
 * instance leases a slice of it instead, keeps what it was granted in its
 * entry here (tokens), and spends it under the zone's lock like the local
 * bucket.  The local bucket is still charged: one instance's traffic is
 * part of the fleet's, so it never refuses what the fleet would allow, and
 * it is what stands when Redis does not answer.  Per entry:
 *
 *   spend    tokens > 0: one is spent.  Otherwise, unless Redis said the
 *            bucket is empty (refused, until its retry), one is spent
 *            ahead of the lease, down to -slice, and repaid from the next
 *            grant.  So the first post of an agent, or one made while a
 *            lease is in flight, is neither held back nor refused: a post
 *            is decided in the turn it arrives (no queue of posts per
 *            agent across workers), and the debt keeps the long-run count
 *            exact.  A slice ahead already: refused (rate_limited, retry
 *            in a request's time) until the lease answers.
 *   ask      when tokens fall to half the last lease and none is in
 *            flight: size + debt, where size starts at 0 (only the debt),
 *            doubles each time a lease is used up while it is live, up to
 *            slice (ioa_limit_scope's slice=, the rate's worth of that
 *            time, at least 1, at most the burst), and halves when one
 *            lapses unspent.  An agent that posts now and then asks for
 *            one at a time and hoards nothing; a busy one asks once per
 *            slice.  One worker asks for the whole instance (asked).
 *   lapse    tokens not spent within lease= (default 1 s) of their grant
 *            are dropped, not returned: an idle instance holds no budget
 *            for longer than that, at the price of under-using it.
 *
 * Bound: over any window T the fleet admits at most burst + rate x T (what
 * Redis grants) plus, per instance, the tokens it held when the window
 * began and its debt when it ends: at most 2 x N x slice over what one
 * instance alone would admit, for N instances (t/175-limits-fleet.t).
 * Since leases are whole requests and lapse, the fleet under-admits rather
 * than over: an agent below the rate could be refused only while others'
 * leases hold what its instance needed, at most N x slice.
 *
 * Redis away.  A lease not answered (no connection, an error, the command
 * timed out) or unanswered for NGX_IOA_LIMIT_PATIENCE: the entry falls
 * back to the instance's own bucket for NGX_IOA_LIMIT_FALLBACK, then asks
 * again; one log line per worker when that starts and one when leases come
 * back, and ioa_limit_fallbacks_total counts the posts so decided.  So a
 * fleet without Redis gets per-instance limits: never unlimited, never
 * everything refused.  ioa_limit_conn is counted for the fleet another way
 * (ngx_ioa_limit_conn_fleet.c): a connection is held, not spent, and a
 * lease cannot follow it to its end, so each worker's count of each
 * identity is kept in Redis and renewed while it lasts.
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
    /* ioa_limit_scope fleet: the lease from Redis */
    ngx_int_t                tokens;      /* leased, unspent; < 0: spent
                                             ahead of the lease */
    ngx_uint_t               size;        /* the next lease, 0 .. slice */
    ngx_msec_t               lease_end;   /* unspent tokens lapse then */
    ngx_msec_t               asked;       /* a lease in flight since */
    ngx_msec_t               refused;     /* the fleet's bucket is empty
                                             until then */
    ngx_msec_t               fallback;    /* Redis away: the instance's
                                             own bucket until then */
    unsigned                 asking:1;
    unsigned                 is_refused:1;
    unsigned                 in_fallback:1;
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


/* a lease asked for: what its answer updates */
typedef struct {
    ngx_uint_t               want;
    size_t                   len;
    u_char                   kind;
    u_char                   data[1];
} ngx_ioa_limit_ask_t;


/* a lease unanswered for this long: Redis is slow or away */
#define NGX_IOA_LIMIT_PATIENCE   1000
/* how long an entry keeps to its instance's own bucket once Redis failed */
#define NGX_IOA_LIMIT_FALLBACK   1000


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
static ngx_int_t ngx_ioa_limit_fleet(ngx_ioa_limit_node_t *ln,
    ngx_ioa_limit_rate_t *rate, ngx_msec_t now, ngx_msec_t *retry,
    ngx_uint_t *want);
static void ngx_ioa_limit_ask(u_char kind, ngx_str_t *name,
    ngx_ioa_limit_rate_t *rate, ngx_uint_t want);
static void ngx_ioa_limit_failed(u_char kind, ngx_str_t *name);
static void ngx_ioa_limit_leased(redisReply *reply, void *data);


/* this worker said that leases fail: said once, until they work again */
static ngx_uint_t  ngx_ioa_limit_fleet_down;


/* ioa_limit_goals_in_flight 16 | off: a count, "off" being 0 (none) */

char *
ngx_ioa_limit_count_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t   *value;
    ngx_int_t    n;
    ngx_uint_t  *field;

    field = (ngx_uint_t *) ((char *) conf + cmd->offset);

    if (*field != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        *field = 0;
        return NGX_CONF_OK;
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (n <= 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\": a number of 1 or more, "
                           "or \"off\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    *field = n;

    return NGX_CONF_OK;
}


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


/*
 * ioa_limit_scope instance | fleet [slice=100ms] [lease=1s]: one directive
 * for the three rates, since where a limit is counted is a property of the
 * deployment (one instance or many), not of a single rate; the rates keep
 * their own syntax, and a fleet's slice is a time (the rate's worth of it)
 * so it fits an agent's 50r/s and a room's 500r/s alike.
 */

char *
ngx_ioa_limit_scope_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t *mcf = conf;

    ngx_str_t   *value, v;
    ngx_msec_t   ms;
    ngx_uint_t   i;

    if (mcf->limit_fleet != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "instance") == 0) {
        if (cf->args->nelts != 2) {
            return "takes no slice or lease with \"instance\"";
        }

        mcf->limit_fleet = 0;
        return NGX_CONF_OK;
    }

    if (ngx_strcmp(value[1].data, "fleet") != 0) {
        return "must be \"instance\" or \"fleet\"";
    }

    mcf->limit_fleet = 1;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "slice=", 6) == 0) {
            v.data = value[i].data + 6;
            v.len = value[i].len - 6;

            ms = ngx_parse_time(&v, 0);
            if (ms == (ngx_msec_t) NGX_ERROR || ms == 0 || ms > 60000) {
                return "has an invalid slice: a time from 1ms to 60s";
            }

            mcf->limit_slice = ms;
            continue;
        }

        if (ngx_strncmp(value[i].data, "lease=", 6) == 0) {
            v.data = value[i].data + 6;
            v.len = value[i].len - 6;

            ms = ngx_parse_time(&v, 0);
            if (ms == (ngx_msec_t) NGX_ERROR || ms < 100 || ms > 60000) {
                return "has an invalid lease: a time from 100ms to 60s";
            }

            mcf->limit_lease = ms;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
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
    if (!mcf->launch_rate.set) {
        mcf->launch_rate.rate = 2 * 1000;
        mcf->launch_rate.burst = 20;
    }

    if (!mcf->teamup_rate.set) {
        mcf->teamup_rate.rate = 2 * 1000;
        mcf->teamup_rate.burst = 20;
    }

    ngx_conf_init_uint_value(mcf->limit_conn, 16);

    /* goals are long (seconds to hours) and each holds a worker's fiber
     * while it runs: 16 is a busy person's or service's share, a quarter
     * of one worker's 64 fibers (workers/worker/fiber.c) */
    ngx_conf_init_uint_value(mcf->goals_in_flight, 16);

    /* a tenth of a second's worth: a lease per slice costs Redis ten
     * small scripts a second per busy agent, and lets each instance be at
     * most that far ahead of the fleet */
    ngx_conf_init_value(mcf->limit_fleet, 0);
    ngx_conf_init_msec_value(mcf->limit_slice, 100);
    ngx_conf_init_msec_value(mcf->limit_lease, 1000);

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
                                            NGX_IOA_SHM_TAG);
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
 * Both buckets are charged only if both allow the post, and so are both
 * leases with fleet scope.
 */

ngx_int_t
ngx_ioa_limit_post(ngx_str_t *name, ngx_str_t *comm_id, ngx_msec_t *retry,
    ngx_ioa_error_t *err)
{
    ngx_int_t              rc, rc_a;
    ngx_msec_t             now, wait;
    ngx_uint_t             excess_a, excess_r, fallbacks, want_a, want_r;
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
    rc_a = NGX_OK;
    wait = 0;
    want_a = 0;
    want_r = 0;
    fallbacks = 0;

    if (a && (ngx_ioa_limit_bucket(a, &mcf->limit_rate, now, &wait) != NGX_OK
              || (mcf->limit_fleet
                  && (rc_a = ngx_ioa_limit_fleet(a, &mcf->limit_rate, now,
                                                 &wait, &want_a))
                     == NGX_DECLINED)))
    {
        rc = NGX_DECLINED;
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_RATE, 1);
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "\"%V\" posts faster than ioa_limit_rate "
                          "allows; the envelope was not stored, send it "
                          "again in %M ms", name, wait);

    } else if (room
               && (ngx_ioa_limit_bucket(room, &mcf->room_rate, now, &wait)
                   != NGX_OK
                   || (mcf->limit_fleet
                       && (rc = ngx_ioa_limit_fleet(room, &mcf->room_rate,
                                                    now, &wait, &want_r))
                          == NGX_DECLINED)))
    {
        rc = NGX_DECLINED;
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ROOM_RATE, 1);
        ngx_ioa_error_set(err, "rate_limited", "comm_id",
                          "room \"%V\" takes envelopes faster than "
                          "ioa_limit_room_rate allows; the envelope was not "
                          "stored, send it again in %M ms", comm_id, wait);

        if (a && rc_a == NGX_OK && mcf->limit_fleet) {
            a->tokens++;            /* the agent's request back */
        }

    } else {
        fallbacks = (rc_a == NGX_DONE) + (rc == NGX_DONE);
        rc = NGX_OK;
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

    if (fallbacks) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMIT_FALLBACKS, 1);
    }

    if (want_a) {
        ngx_ioa_limit_ask('a', name, &mcf->limit_rate, want_a);
    }

    if (want_r) {
        ngx_ioa_limit_ask('r', comm_id, &mcf->room_rate, want_r);
    }

    *retry = wait;

    return rc;
}


/*
 * The makers' rates: one bucket per (kind, name) for a request that makes
 * something lasting, so a token cannot make rooms ("t", ioa_limit_teamup_
 * rate) or goals ("g", ioa_limit_launch_rate) as fast as it can send.
 * NGX_OK, or NGX_DECLINED with *retry the wait before one more fits,
 * counted as a refusal of stat (NGX_IOA_LIMIT_*), or of the zone when it
 * had no room for the entry.
 */

static ngx_int_t
ngx_ioa_limit_make(u_char kind, ngx_ioa_limit_rate_t *rate, ngx_uint_t stat,
    ngx_str_t *name, ngx_msec_t *retry)
{
    ngx_int_t              rc;
    ngx_msec_t             wait;
    ngx_uint_t             excess, want;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *t;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (rate->rate == 0) {
        return NGX_OK;
    }

    ctx = mcf->limit_zone->data;
    wait = 1000;
    want = 0;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    t = ngx_ioa_limit_get(ctx, kind, name, 1);

    if (t == NULL) {
        rc = NGX_DECLINED;

    } else {
        excess = t->excess;

        rc = ngx_ioa_limit_bucket(t, rate, ngx_current_msec, &wait);

        if (rc == NGX_OK && mcf->limit_fleet) {
            rc = ngx_ioa_limit_fleet(t, rate, ngx_current_msec, &wait, &want);

            if (rc == NGX_DECLINED) {
                t->excess = excess;
            }
        }
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    if (want) {
        ngx_ioa_limit_ask(kind, name, rate, want);
    }

    if (rc == NGX_DONE) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMIT_FALLBACKS, 1);
        rc = NGX_OK;
    }

    if (rc != NGX_OK) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS
                         + (t ? stat : NGX_IOA_LIMIT_ZONE), 1);
    }

    *retry = wait;

    return rc;
}


/* ioa_limit_teamup_rate: how fast one agent makes rooms */

ngx_int_t
ngx_ioa_limit_teamup(ngx_str_t *name, ngx_msec_t *retry, ngx_ioa_error_t *err)
{
    ngx_int_t  rc;

    rc = ngx_ioa_limit_make('t', &ngx_ioa_main_conf()->teamup_rate,
                            NGX_IOA_LIMIT_TEAMUP_RATE, name, retry);

    if (rc != NGX_OK) {
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "\"%V\" makes rooms faster than "
                          "ioa_limit_teamup_rate allows; no room was made, "
                          "ask again in %M ms", name, *retry);
    }

    return rc;
}


/* ioa_limit_launch_rate: how fast one launcher launches goals */

ngx_int_t
ngx_ioa_limit_launch(ngx_str_t *name, ngx_msec_t *retry, ngx_ioa_error_t *err)
{
    ngx_int_t  rc;

    rc = ngx_ioa_limit_make('g', &ngx_ioa_main_conf()->launch_rate,
                            NGX_IOA_LIMIT_LAUNCH_RATE, name, retry);

    if (rc != NGX_OK) {
        ngx_ioa_error_set(err, "rate_limited", NULL,
                          "\"%V\" launches goals faster than "
                          "ioa_limit_launch_rate allows; no goal was "
                          "queued, launch again in %M ms", name, *retry);
    }

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
 * The fleet's check of one entry, with the lock held (see the comment at
 * the top): NGX_OK, a request spent from the lease or ahead of it;
 * NGX_DECLINED, the fleet's bucket is empty (*retry); NGX_DONE, Redis is
 * away and the instance's own bucket decides alone.  *want: requests to
 * ask Redis for once the lock is let go, 0 for none.
 */

static ngx_int_t
ngx_ioa_limit_fleet(ngx_ioa_limit_node_t *ln, ngx_ioa_limit_rate_t *rate,
    ngx_msec_t now, ngx_msec_t *retry, ngx_uint_t *want)
{
    ngx_int_t             slice;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    /* the rate's worth of the slice, in whole requests */
    slice = (ngx_int_t) (rate->rate * mcf->limit_slice / 1000000);
    slice = ngx_max(1, ngx_min(slice, (ngx_int_t) rate->burst));

    if (ln->in_fallback) {
        if ((ngx_msec_int_t) (ln->fallback - now) > 0) {
            return NGX_DONE;
        }

        ln->in_fallback = 0;
    }

    if (ln->asking && now - ln->asked > NGX_IOA_LIMIT_PATIENCE) {

        if (now - ln->asked <= mcf->redis_timeout + NGX_IOA_LIMIT_PATIENCE) {
            /* Redis is slow: its timeout will say if it is away */
            return NGX_DONE;
        }

        /* never answered: the worker that asked is gone */
        ln->asking = 0;
    }

    if (ln->tokens > 0 && (ngx_msec_int_t) (now - ln->lease_end) >= 0) {
        /* lapsed unspent: given up, and the next lease is smaller */
        ln->tokens = 0;
        ln->size /= 2;
    }

    if (ln->tokens > 0) {
        ln->tokens--;

    } else if (ln->is_refused && (ngx_msec_int_t) (ln->refused - now) > 0) {
        *retry = ln->refused - now;
        return NGX_DECLINED;

    } else if (ln->tokens > -slice) {
        /* ahead of the lease: repaid from the next grant */
        ln->is_refused = 0;
        ln->tokens--;

    } else {
        /* a slice ahead already: the lease in flight decides, or one is
         * asked for the debt */
        *retry = 1000 * 1000 / rate->rate + 1;

        if (!ln->asking) {
            ln->asking = 1;
            ln->asked = now;
            *want = ln->size + (ngx_uint_t) -ln->tokens;
        }

        return NGX_DECLINED;
    }

    if (!ln->asking && ln->tokens <= (ngx_int_t) (ln->size / 2)) {

        if ((ngx_msec_int_t) (ln->lease_end - now) > 0) {
            /* the last lease was spent while it was live: a busy agent */
            ln->size = ngx_min((ngx_uint_t) slice, ngx_max(1, 2 * ln->size));
        }

        *want = ln->size + (ln->tokens < 0 ? -ln->tokens : 0);

        if (*want) {
            ln->asking = 1;
            ln->asked = now;
        }
    }

    return NGX_OK;
}


/* limit_lease.lua for want requests of (kind, name)'s fleet bucket */

static void
ngx_ioa_limit_ask(u_char kind, ngx_str_t *name, ngx_ioa_limit_rate_t *rate,
    ngx_uint_t want)
{
    ngx_ioa_args_t        a;
    ngx_ioa_limit_ask_t  *ask;

    ngx_ioa_stat_add(NGX_IOA_STAT_LEASES + NGX_IOA_LEASE_ASKED, 1);

    ask = ngx_alloc(offsetof(ngx_ioa_limit_ask_t, data) + name->len,
                    ngx_cycle->log);
    if (ask == NULL) {
        ngx_ioa_limit_failed(kind, name);
        return;
    }

    ask->want = want;
    ask->kind = kind;
    ask->len = name->len;
    ngx_memcpy(ask->data, name->data, name->len);

    ngx_ioa_args_init(&a);
    ngx_ioa_key_limit(&a, kind, name);
    ngx_ioa_args_fmt(&a, "%ui", rate->rate);
    ngx_ioa_args_fmt(&a, "%ui", rate->burst);
    ngx_ioa_args_fmt(&a, "%ui", want);

    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_LIMIT_LEASE,
                                  ngx_ioa_limit_leased, ask, 1, &a)
        == NULL)
    {
        ngx_free(ask);
        ngx_ioa_limit_failed(kind, name);
    }
}


static void
ngx_ioa_limit_leased(redisReply *reply, void *data)
{
    ngx_ioa_limit_ask_t *ask = data;

    ngx_int_t              granted, retry;
    ngx_str_t              name;
    ngx_msec_t             now;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    name.len = ask->len;
    name.data = ask->data;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_redis_log_refusal(reply, "a fleet-wide limit's lease");
        ngx_ioa_limit_failed(ask->kind, &name);
        ngx_free(ask);
        return;
    }

    granted = (ngx_int_t) reply->element[0]->integer;
    retry = (ngx_int_t) reply->element[1]->integer;

    mcf = ngx_ioa_main_conf();
    ctx = mcf->limit_zone->data;
    now = ngx_current_msec;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ln = ngx_ioa_limit_get(ctx, ask->kind, &name, 0);

    if (ln) {
        ln->asking = 0;
        ln->tokens += granted;
        ln->lease_end = now + mcf->limit_lease;

        if ((ngx_uint_t) granted < ask->want && retry > 0) {
            ln->is_refused = 1;
            ln->refused = now + retry;
        }
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    ngx_ioa_stat_add(NGX_IOA_STAT_LEASES
                     + (granted ? NGX_IOA_LEASE_GRANTED
                                : NGX_IOA_LEASE_REFUSED), 1);

    if (ngx_ioa_limit_fleet_down) {
        ngx_ioa_limit_fleet_down = 0;
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "ioa: fleet-wide limits hold again (Redis answers "
                      "leases)");
    }

    ngx_free(ask);
}


/* no lease: the entry keeps to the instance's own bucket for a while */

static void
ngx_ioa_limit_failed(u_char kind, ngx_str_t *name)
{
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();
    ctx = mcf->limit_zone->data;

    ngx_shmtx_lock(&ctx->shpool->mutex);

    ln = ngx_ioa_limit_get(ctx, kind, name, 0);

    if (ln) {
        /* what was spent ahead is forgiven: Redis may have lost the
         * bucket, and the instance's own one counted those requests */
        ln->asking = 0;
        ln->tokens = 0;
        ln->size = 0;
        ln->in_fallback = 1;
        ln->fallback = ngx_current_msec + NGX_IOA_LIMIT_FALLBACK;
    }

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    ngx_ioa_stat_add(NGX_IOA_STAT_LEASES + NGX_IOA_LEASE_FAILED, 1);

    if (!ngx_ioa_limit_fleet_down) {
        ngx_ioa_limit_fleet_down = 1;
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ioa: a fleet-wide limit's lease got no answer from "
                      "Redis; this instance's own limits apply until one "
                      "does (ioa_limit_scope fleet)");
    }
}


/*
 * Who a long-lived connection counts against.  An agent's WebSocket or SSE
 * inbox counts against its agent.  Every other stream (a room's or a goal's
 * feed, an observer feed, an A2A stream) counts against its token's
 * subject, in the same counter: a stream holds a connection, a buffer and
 * a timer like a socket, so one token must not open them without bound
 * while its sockets are limited.  In open mode a follower has no identity
 * (NULL: not counted here); the shipped configuration's per-address
 * limit_conn bounds it.
 */

ngx_str_t *
ngx_ioa_limit_conn_who(ngx_ioa_client_kind_e kind, ngx_str_t *agent,
    ngx_ioa_identity_t *who)
{
    if (kind == NGX_IOA_CLIENT_AGENT && agent->len) {
        return agent;
    }

    if (who && !who->open && who->sub.len) {
        return &who->sub;
    }

    return NULL;
}


/*
 * A connection of agent name (WebSocket or SSE inbox) that lives as long as
 * pool: NGX_OK and counted until the pool goes, or NGX_DECLINED with err.
 * name NULL: nothing to count.
 */

ngx_int_t
ngx_ioa_limit_conn(ngx_pool_t *pool, ngx_str_t *name, ngx_ioa_client_t *cl,
    ngx_ioa_error_t *err)
{
    ngx_uint_t             count;
    ngx_ioa_limit_conn_t  *lc;
    ngx_pool_cleanup_t    *cln;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf->limit_conn == 0 || name == NULL || name->len == 0) {
        return NGX_OK;
    }

    /* before the count, so a failure here leaves nothing counted */
    cln = ngx_pool_cleanup_add(pool, sizeof(ngx_ioa_limit_conn_t)
                                     + name->len);
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
    lc = cln->data;
    lc->name.len = name->len;
    lc->name.data = (u_char *) lc + sizeof(ngx_ioa_limit_conn_t);
    ngx_memcpy(lc->name.data, name->data, name->len);
    lc->client = cl;
    lc->req = NULL;
    lc->fleet = 0;
    cln->handler = ngx_ioa_limit_conn_cleanup;

    /* ioa_limit_scope fleet: counted in Redis too, and closed if the fleet
     * already holds the most (ngx_ioa_limit_conn_fleet.c) */
    if (mcf->limit_fleet && cl) {
        ngx_ioa_limit_conn_fleet_open(lc);
    }

    return NGX_OK;
}


static void
ngx_ioa_limit_conn_cleanup(void *data)
{
    ngx_ioa_limit_conn_t *lc = data;

    ngx_str_t             *name;
    ngx_ioa_limit_ctx_t   *ctx;
    ngx_ioa_limit_node_t  *ln;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (mcf == NULL || mcf->limit_zone == NULL) {
        return;
    }

    ngx_ioa_limit_conn_fleet_close(lc);

    name = &lc->name;
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
    ln->tokens = 0;
    ln->size = 0;
    ln->lease_end = 0;
    ln->asked = 0;
    ln->refused = 0;
    ln->fallback = 0;
    ln->asking = 0;
    ln->is_refused = 0;
    ln->in_fallback = 0;

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
