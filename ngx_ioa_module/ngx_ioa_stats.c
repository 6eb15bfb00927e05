
/*
 * Copyright (C) ioa authors
 *
 * The hub's own counters for /metrics (ngx_ioa_metrics.c), per nginx
 * instance.
 *
 * A scrape reaches one worker, but the figures must be the instance's: so
 * they live in one small shared memory zone ("ioa_stats", made with the
 * module, no directive: a few kilobytes) that every worker adds to with
 * atomic operations; nothing takes a lock, and a scrape reads whatever the
 * counters hold at that moment.  The zone outlives a reload (same name and
 * size), so counters keep counting as Prometheus expects; an nginx restart
 * starts them again from zero, which Prometheus' rate() takes as a reset.
 *
 * A histogram keeps one count per bucket (not cumulative: one atomic add
 * per observation), the count and the sum in microseconds; the exposition
 * adds the buckets up.  Bounds are fixed and in the metric's base unit,
 * seconds, from 100 us (a discovery answer from the index) to 1 s.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <time.h>

#include "ngx_ioa.h"


/* bucket bounds, microseconds; +Inf after the last */
static const ngx_uint_t  ngx_ioa_stats_bounds[] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
    1000000
};

#define NGX_IOA_STATS_BUCKETS                                                 \
    (sizeof(ngx_ioa_stats_bounds) / sizeof(ngx_ioa_stats_bounds[0]))


typedef struct {
    ngx_atomic_t              bucket[NGX_IOA_STATS_BUCKETS + 1];
    ngx_atomic_t              count;
    ngx_atomic_t              sum_us;
} ngx_ioa_stats_hist_t;


typedef struct {
    ngx_atomic_t              counter[NGX_IOA_STAT_N];
    ngx_ioa_stats_hist_t      hist[NGX_IOA_HIST_N];
} ngx_ioa_stats_sh_t;


static ngx_int_t ngx_ioa_stats_init_zone(ngx_shm_zone_t *zone, void *data);


static ngx_shm_zone_t      *ngx_ioa_stats_zone;
static ngx_ioa_stats_sh_t  *ngx_ioa_stats;


ngx_int_t
ngx_ioa_stats_init_conf(ngx_conf_t *cf)
{
    ngx_str_t  name;

    ngx_str_set(&name, "ioa_stats");

    ngx_ioa_stats_zone = ngx_shared_memory_add(cf, &name, 8 * ngx_pagesize,
                                               &ngx_http_ioa_module);
    if (ngx_ioa_stats_zone == NULL) {
        return NGX_ERROR;
    }

    ngx_ioa_stats_zone->init = ngx_ioa_stats_init_zone;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_stats_init_zone(ngx_shm_zone_t *zone, void *data)
{
    ngx_slab_pool_t  *pool;

    if (data) {
        /* a reload: the counters go on */
        zone->data = data;
        ngx_ioa_stats = data;
        return NGX_OK;
    }

    pool = (ngx_slab_pool_t *) zone->shm.addr;

    if (zone->shm.exists) {
        zone->data = pool->data;
        ngx_ioa_stats = pool->data;
        return NGX_OK;
    }

    ngx_ioa_stats = ngx_slab_calloc(pool, sizeof(ngx_ioa_stats_sh_t));
    if (ngx_ioa_stats == NULL) {
        return NGX_ERROR;
    }

    pool->data = ngx_ioa_stats;
    zone->data = ngx_ioa_stats;

    return NGX_OK;
}


void
ngx_ioa_stat_add(ngx_ioa_stat_e stat, ngx_atomic_int_t n)
{
    if (ngx_ioa_stats) {
        (void) ngx_atomic_fetch_add(&ngx_ioa_stats->counter[stat], n);
    }
}


/* a monotonic clock in microseconds: nginx's cached time moves once per
 * event-loop turn, too coarse for what takes a fraction of a millisecond */

int64_t
ngx_ioa_stats_now_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}


void
ngx_ioa_stat_observe(ngx_ioa_hist_e hist, int64_t us)
{
    ngx_uint_t             i;
    ngx_ioa_stats_hist_t  *h;

    if (ngx_ioa_stats == NULL) {
        return;
    }

    if (us < 0) {
        us = 0;
    }

    h = &ngx_ioa_stats->hist[hist];

    for (i = 0; i < NGX_IOA_STATS_BUCKETS; i++) {
        if ((uint64_t) us <= ngx_ioa_stats_bounds[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&h->bucket[i], 1);
    (void) ngx_atomic_fetch_add(&h->count, 1);
    (void) ngx_atomic_fetch_add(&h->sum_us, (ngx_atomic_int_t) us);
}


/* the Prometheus text of the counters (ngx_ioa_metrics.c) */

u_char *
ngx_ioa_stats_metrics(u_char *p, u_char *last)
{
    ngx_uint_t             i;
    ngx_atomic_uint_t      cum;
    ngx_ioa_stats_hist_t  *h;

    if (ngx_ioa_stats == NULL) {
        return p;
    }

    p = ngx_slprintf(p, last,
        "# HELP ioa_discovery_queries_total /retrieve_assistant requests "
        "answered, by what ranked them: this instance's index, or Redis "
        "(retrieve.lua) while the index is not built or is full.\n"
        "# TYPE ioa_discovery_queries_total counter\n"
        "ioa_discovery_queries_total{ranked_by=\"index\"} %uA\n"
        "ioa_discovery_queries_total{ranked_by=\"redis\"} %uA\n",
        ngx_ioa_stats->counter[NGX_IOA_STAT_DISCOVERY_INDEX],
        ngx_ioa_stats->counter[NGX_IOA_STAT_DISCOVERY_REDIS]);

    h = &ngx_ioa_stats->hist[NGX_IOA_HIST_DISCOVERY];

    p = ngx_slprintf(p, last,
        "# HELP ioa_discovery_query_duration_seconds From a "
        "/retrieve_assistant request's body to its answer (an embedding "
        "call included).\n"
        "# TYPE ioa_discovery_query_duration_seconds histogram\n");

    cum = 0;

    for (i = 0; i < NGX_IOA_STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        p = ngx_slprintf(p, last,
                   "ioa_discovery_query_duration_seconds_bucket{le=\"%ui.%06ui\"} "
                   "%uA\n",
                   ngx_ioa_stats_bounds[i] / 1000000,
                   ngx_ioa_stats_bounds[i] % 1000000, cum);
    }

    cum += h->bucket[NGX_IOA_STATS_BUCKETS];

    /* the count is the +Inf bucket's, so that the two agree however the
     * adds of other workers interleave with this reading */
    return ngx_slprintf(p, last,
               "ioa_discovery_query_duration_seconds_bucket{le=\"+Inf\"} %uA\n"
               "ioa_discovery_query_duration_seconds_sum %uA.%06uA\n"
               "ioa_discovery_query_duration_seconds_count %uA\n",
               cum, h->sum_us / 1000000, h->sum_us % 1000000, cum);
}
