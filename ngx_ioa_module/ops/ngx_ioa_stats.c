
/*
 * Copyright (C) ioa authors
 *
 * The hub's own counters for /metrics (ngx_ioa_metrics.c), per nginx
 * instance.
 *
 * A scrape reaches one worker, but the figures must be the instance's: so
 * they live in one small shared memory zone ("ioa_stats", made with the
 * module, no directive) that every worker adds to with atomic operations;
 * nothing takes a lock, and a scrape reads whatever the counters hold at
 * that moment.  The zone outlives a reload (same name and size), so
 * counters keep counting as Prometheus expects; an nginx restart starts
 * them again from zero, which Prometheus' rate() takes as a reset.
 *
 * Three kinds of series:
 *
 *   - fixed ones (ngx_ioa_stat_e): a counter or gauge per label value
 *     known at build time, a transport or a limit; an array indexed by the
 *     enum, and a table of families (below) that says how to print them;
 *   - keyed ones: labels known only at run time, the error code of a
 *     refused envelope and the Redis node of an error.  Each label set gets
 *     a slot of a fixed table the first time it is counted: the slot is
 *     claimed with a compare-and-swap (0 free, 1 being written, 2 ready),
 *     so two workers adding the same new key agree on one slot without a
 *     lock.  The keys are few (the hub's error codes, a few kinds per
 *     node), and a full table drops new keys and says so in the scrape;
 *   - histograms: one count per bucket (not cumulative: one atomic add
 *     per observation), the count and the sum; the exposition adds the
 *     buckets up.  Bounds are fixed; durations are observed in
 *     microseconds and printed in the base unit, seconds.
 *
 * A worker that dies in the middle of claiming a slot leaves it "being
 * written": readers skip it and writers give up on it after a bounded
 * wait, so the cost is one key's counts, never a hang.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <time.h>

#include "ngx_ioa.h"


#define NGX_IOA_STATS_BUCKETS_MAX  16
#define NGX_IOA_STATS_KEYS         512
#define NGX_IOA_STATS_LABELS       112
/* spins waiting for another worker to finish writing a slot's key */
#define NGX_IOA_STATS_SPIN         4096


typedef struct {
    ngx_atomic_t              bucket[NGX_IOA_STATS_BUCKETS_MAX + 1];
    ngx_atomic_t              count;
    ngx_atomic_t              sum;
} ngx_ioa_stats_hist_t;


typedef struct {
    ngx_atomic_t              state;      /* 0 free, 1 writing, 2 ready */
    ngx_atomic_t              count;
    ngx_uint_t                family;
    size_t                    len;
    u_char                    labels[NGX_IOA_STATS_LABELS];
} ngx_ioa_stats_key_t;


typedef struct {
    ngx_atomic_t              counter[NGX_IOA_STAT_N];
    ngx_ioa_stats_hist_t      hist[NGX_IOA_HIST_N];
    ngx_ioa_stats_key_t       key[NGX_IOA_STATS_KEYS];
    ngx_atomic_t              keys_dropped;
} ngx_ioa_stats_sh_t;


/* how a family's series are labelled */
typedef enum {
    NGX_IOA_LABELS_NONE = 0,
    NGX_IOA_LABELS_RANKED,       /* ranked_by, two series */
    NGX_IOA_LABELS_VIA,          /* transport */
    NGX_IOA_LABELS_VIA_KIND,     /* transport and kind */
    NGX_IOA_LABELS_LIMIT,        /* limit */
    NGX_IOA_LABELS_LEASE,        /* result */
    NGX_IOA_LABELS_KEYED         /* run time labels, from the key table */
} ngx_ioa_labels_e;


typedef struct {
    const char               *name;
    const char               *type;
    const char               *help;
    ngx_ioa_labels_e          labels;
    ngx_uint_t                first;      /* its first fixed series */
    ngx_uint_t                mask;       /* which label values exist */
} ngx_ioa_stats_family_t;


/* the keyed families (ngx_ioa_stats_key_t.family) */
#define NGX_IOA_KEYED_REFUSED        0
#define NGX_IOA_KEYED_REDIS_RECONNECTS 1
#define NGX_IOA_KEYED_REDIS_ERRORS   2


#define V(via)          (1 << NGX_IOA_VIA_##via)
#define VK(via, kind)   (1 << (NGX_IOA_VIA_##via * 3 + NGX_IOA_CLIENT_##kind))

static const ngx_ioa_stats_family_t  ngx_ioa_stats_families[] = {

    { "ioa_connections", "gauge",
      "Clients connected now: agents (a WebSocket or an SSE inbox), "
      "observers of every room, followers of one stream (a goal's events; "
      "over http, a POST /launch_goal that waits).",
      NGX_IOA_LABELS_VIA_KIND, NGX_IOA_STAT_CONNECTIONS,
      VK(WEBSOCKET, AGENT) | VK(WEBSOCKET, OBSERVER) | VK(SSE, AGENT)
      | VK(SSE, OBSERVER) | VK(SSE, FOLLOWER) | VK(HTTP, FOLLOWER) },

    { "ioa_connections_opened_total", "counter",
      "Clients connected since the start, as ioa_connections.",
      NGX_IOA_LABELS_VIA_KIND, NGX_IOA_STAT_OPENED,
      VK(WEBSOCKET, AGENT) | VK(WEBSOCKET, OBSERVER) | VK(SSE, AGENT)
      | VK(SSE, OBSERVER) | VK(SSE, FOLLOWER) | VK(HTTP, FOLLOWER) },

    { "ioa_envelopes_posted_total", "counter",
      "Envelopes stored in their room (post.lua answered with an id), by "
      "how they were posted.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_POSTED, V(WEBSOCKET) | V(HTTP) },

    { "ioa_envelopes_refused_total", "counter",
      "Envelopes not stored, by the error code their sender was given "
      "(README \"Endpoint reference\").",
      NGX_IOA_LABELS_KEYED, NGX_IOA_KEYED_REFUSED, 0 },

    { "ioa_envelopes_delivered_total", "counter",
      "Envelopes handed to a client's connection (live, caught up or "
      "resumed), by transport.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_DELIVERED,
      V(WEBSOCKET) | V(SSE) | V(HTTP) },

    { "ioa_received_bytes_total", "counter",
      "Bytes read from WebSocket connections, and envelope bodies posted "
      "over http.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_RECEIVED_BYTES,
      V(WEBSOCKET) | V(HTTP) },

    { "ioa_sent_bytes_total", "counter",
      "Bytes of frames and events written to WebSocket and SSE "
      "connections.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_SENT_BYTES, V(WEBSOCKET) | V(SSE) },

    { "ioa_send_queue_overflows_total", "counter",
      "Clients closed because they read too slowly "
      "(ioa_send_queue_limit); they resume from their last id.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_OVERFLOWS, V(WEBSOCKET) | V(SSE) },

    { "ioa_resumes_total", "counter",
      "Connections and resume frames that named where to start "
      "(since=, resume=, Last-Event-ID, {\"op\":\"resume\"}).",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_RESUMES, V(WEBSOCKET) | V(SSE) },

    { "ioa_limits_hit_total", "counter",
      "Requests refused by a limit the operator set.",
      NGX_IOA_LABELS_LIMIT, NGX_IOA_STAT_LIMITS, 0 },

    { "ioa_limit_leases_total", "counter",
      "Slices of fleet-wide rate limits asked of Redis (ioa_limit_scope "
      "fleet), and what came of them: granted (some of it), refused (the "
      "fleet's bucket was empty), failed (no answer: this instance's own "
      "limits apply for a while).",
      NGX_IOA_LABELS_LEASE, NGX_IOA_STAT_LEASES, 0 },

    { "ioa_limit_fallbacks_total", "counter",
      "Requests decided by this instance's own rate limits alone because "
      "Redis did not answer a fleet-wide limit's lease.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_LIMIT_FALLBACKS, 0 },

    { "ioa_catchup_gaps_total", "counter",
      "Catch-ups that found envelopes gone from a room's log "
      "(ioa_room_log_maxlen) before they were read; the client was told "
      "(log_trimmed).",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_TRIMMED, 0 },

    { "ioa_token_expiries_total", "counter",
      "Connections closed because their token expired (ioa_auth jwt): "
      "1008 on a WebSocket, the close event on an SSE stream.",
      NGX_IOA_LABELS_VIA, NGX_IOA_STAT_TOKEN_EXPIRIES, V(WEBSOCKET) | V(SSE) },

    { "ioa_token_refreshes_total", "counter",
      "Fresh tokens a WebSocket sent in-band ({\"op\":\"token\"}) that "
      "moved its expiry.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_TOKEN_REFRESHES, 0 },

    { "ioa_token_refreshes_refused_total", "counter",
      "In-band tokens refused (token_invalid, token_sub_mismatch); the "
      "connection kept its expiry.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_TOKEN_REFRESHES_REFUSED, 0 },

    { "ioa_agents_deleted_total", "counter",
      "Agents deleted (DELETE /agents/{name}) through this instance.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_AGENTS_DELETED, 0 },

    { "ioa_rooms_deleted_total", "counter",
      "Rooms deleted (DELETE /rooms/{comm_id}) through this instance.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_ROOMS_DELETED, 0 },

    { "ioa_lingers_total", "counter",
      "Turns of the event loop after which a busy worker waited for more "
      "traffic (ioa_linger), each at most the linger.",
      NGX_IOA_LABELS_NONE, NGX_IOA_STAT_LINGERS, 0 },

    { "ioa_redis_reconnects_total", "counter",
      "Connections to a Redis node made again after one was lost or "
      "could not be made.",
      NGX_IOA_LABELS_KEYED, NGX_IOA_KEYED_REDIS_RECONNECTS, 0 },

    { "ioa_redis_errors_total", "counter",
      "Redis trouble by node and kind: connect_failed, resolve_failed "
      "(its name was not found by nginx's resolver), connection_lost "
      "(the node closed it), timeout (no answer within "
      "ioa_redis_timeout).",
      NGX_IOA_LABELS_KEYED, NGX_IOA_KEYED_REDIS_ERRORS, 0 },

    { "ioa_discovery_queries_total", "counter",
      "/retrieve_assistant requests answered, by what ranked them: this "
      "instance's index, or Redis (retrieve.lua) while the index is not "
      "built or is full.",
      NGX_IOA_LABELS_RANKED, NGX_IOA_STAT_DISCOVERY_INDEX, 0 }
};

#undef V
#undef VK

#define NGX_IOA_STATS_FAMILIES                                               \
    (sizeof(ngx_ioa_stats_families) / sizeof(ngx_ioa_stats_families[0]))


static const char  *ngx_ioa_stats_via[] = { "websocket", "sse", "http" };
static const char  *ngx_ioa_stats_kind[] = { "agent", "observer",
                                             "follower" };
static const char  *ngx_ioa_stats_limit[] = {
    "rate", "room_rate", "teamup_rate", "conn", "zone", "room_members",
    "agent_rooms", "agents", "launch_rate", "goals_in_flight"
};

/* ngx_ioa_lease_e */
static const char  *ngx_ioa_stats_lease[] = {
    "asked", "granted", "refused", "failed"
};


/* bucket bounds: microseconds, or envelopes; +Inf after the last */
static const ngx_uint_t  ngx_ioa_stats_time_bounds[] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
    250000, 1000000, 0
};

static const ngx_uint_t  ngx_ioa_stats_count_bounds[] = {
    0, 1, 10, 100, 1000, 10000, 0
};


typedef struct {
    const char               *name;
    const char               *help;
    const ngx_uint_t         *bounds;     /* 0-terminated, after the first */
    ngx_uint_t                seconds;    /* observed in microseconds */
} ngx_ioa_stats_hist_def_t;


static const ngx_ioa_stats_hist_def_t  ngx_ioa_stats_hists[NGX_IOA_HIST_N] = {
    { "ioa_discovery_query_duration_seconds",
      "From a /retrieve_assistant request's body to its answer (an "
      "embedding call included).",
      ngx_ioa_stats_time_bounds, 1 },

    { "ioa_redis_command_duration_seconds",
      "From a command handed to the Redis client to its reply (resends "
      "after MOVED, ASK or TRYAGAIN included).",
      ngx_ioa_stats_time_bounds, 1 },

    { "ioa_catchup_envelopes",
      "Envelopes a connection read from a room's log before going live "
      "(one observation per room and connection, resumes included).",
      ngx_ioa_stats_count_bounds, 0 }
};


static ngx_int_t ngx_ioa_stats_init_zone(ngx_shm_zone_t *zone, void *data);
static void ngx_ioa_stats_keyed_add(ngx_uint_t family, u_char *labels,
    size_t len);
static u_char *ngx_ioa_stats_family(u_char *p, u_char *last,
    const ngx_ioa_stats_family_t *f);
static u_char *ngx_ioa_stats_hist(u_char *p, u_char *last,
    const ngx_ioa_stats_hist_def_t *d, ngx_ioa_stats_hist_t *h);


static ngx_shm_zone_t      *ngx_ioa_stats_zone;
static ngx_ioa_stats_sh_t  *ngx_ioa_stats;


ngx_int_t
ngx_ioa_stats_init_conf(ngx_conf_t *cf)
{
    size_t     size;
    ngx_str_t  name;

    ngx_str_set(&name, "ioa_stats");

    /* the counters, and room for the slab allocator's own pages */
    size = ngx_align(sizeof(ngx_ioa_stats_sh_t), ngx_pagesize)
           + 8 * ngx_pagesize;

    ngx_ioa_stats_zone = ngx_shared_memory_add(cf, &name, size,
                                               NGX_IOA_SHM_TAG);
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
ngx_ioa_stat_add(ngx_uint_t stat, ngx_atomic_int_t n)
{
    if (ngx_ioa_stats && stat < NGX_IOA_STAT_N) {
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
ngx_ioa_stat_observe(ngx_ioa_hist_e hist, int64_t value)
{
    ngx_uint_t             i;
    const ngx_uint_t      *b;
    ngx_ioa_stats_hist_t  *h;

    if (ngx_ioa_stats == NULL) {
        return;
    }

    if (value < 0) {
        value = 0;
    }

    h = &ngx_ioa_stats->hist[hist];
    b = ngx_ioa_stats_hists[hist].bounds;

    for (i = 0; i == 0 || b[i]; i++) {
        if ((uint64_t) value <= b[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&h->bucket[i], 1);
    (void) ngx_atomic_fetch_add(&h->count, 1);
    (void) ngx_atomic_fetch_add(&h->sum, (ngx_atomic_int_t) value);
}


/*
 * An envelope refused with this error code.  Codes are the hub's own
 * literals (ngx_ioa_error_set), so they need no escaping as label values.
 */

void
ngx_ioa_stat_refused(ngx_str_t *code)
{
    u_char  *p, labels[NGX_IOA_STATS_LABELS];

    p = ngx_snprintf(labels, sizeof(labels), "code=\"%V\"", code);

    ngx_ioa_stats_keyed_add(NGX_IOA_KEYED_REFUSED, labels, p - labels);
}


/*
 * Redis trouble on a node ("host:port" from the configuration or the
 * Cluster's slot map: no quotes or backslashes to escape): "reconnect",
 * or the kind of error.
 */

void
ngx_ioa_stat_redis(ngx_str_t *node, const char *what)
{
    u_char  *p, labels[NGX_IOA_STATS_LABELS];

    if (ngx_strcmp(what, "reconnect") == 0) {
        p = ngx_snprintf(labels, sizeof(labels), "node=\"%V\"", node);
        ngx_ioa_stats_keyed_add(NGX_IOA_KEYED_REDIS_RECONNECTS, labels,
                                p - labels);
        return;
    }

    p = ngx_snprintf(labels, sizeof(labels), "node=\"%V\",error=\"%s\"",
                     node, what);

    ngx_ioa_stats_keyed_add(NGX_IOA_KEYED_REDIS_ERRORS, labels, p - labels);
}


static void
ngx_ioa_stats_keyed_add(ngx_uint_t family, u_char *labels, size_t len)
{
    ngx_uint_t            i, n, spin;
    ngx_ioa_stats_key_t  *k;

    if (ngx_ioa_stats == NULL) {
        return;
    }

    i = (ngx_hash_key(labels, len) + family) % NGX_IOA_STATS_KEYS;

    for (n = 0; n < NGX_IOA_STATS_KEYS;
         n++, i = (i + 1) % NGX_IOA_STATS_KEYS)
    {
        k = &ngx_ioa_stats->key[i];

        if (k->state == 0 && ngx_atomic_cmp_set(&k->state, 0, 1)) {
            k->family = family;
            k->len = len;
            ngx_memcpy(k->labels, labels, len);
            ngx_memory_barrier();
            k->state = 2;
        }

        for (spin = 0; k->state == 1 && spin < NGX_IOA_STATS_SPIN; spin++) {
            ngx_cpu_pause();
        }

        if (k->state != 2) {
            continue;
        }

        ngx_memory_barrier();

        if (k->family == family && k->len == len
            && ngx_memcmp(k->labels, labels, len) == 0)
        {
            (void) ngx_atomic_fetch_add(&k->count, 1);
            return;
        }
    }

    (void) ngx_atomic_fetch_add(&ngx_ioa_stats->keys_dropped, 1);
}


/* the most ngx_ioa_stats_metrics() writes */

size_t
ngx_ioa_stats_metrics_size(void)
{
    return NGX_IOA_STATS_FAMILIES * 512
           + NGX_IOA_STAT_N * 128
           + NGX_IOA_STATS_KEYS * (NGX_IOA_STATS_LABELS + 64)
           + NGX_IOA_HIST_N * (512 + (NGX_IOA_STATS_BUCKETS_MAX + 3) * 96)
           + 512;
}


/* the Prometheus text of the counters (ngx_ioa_metrics.c) */

u_char *
ngx_ioa_stats_metrics(u_char *p, u_char *last)
{
    ngx_uint_t  i;

    if (ngx_ioa_stats == NULL) {
        return p;
    }

    for (i = 0; i < NGX_IOA_STATS_FAMILIES; i++) {
        p = ngx_ioa_stats_family(p, last, &ngx_ioa_stats_families[i]);
    }

    for (i = 0; i < NGX_IOA_HIST_N; i++) {
        p = ngx_ioa_stats_hist(p, last, &ngx_ioa_stats_hists[i],
                               &ngx_ioa_stats->hist[i]);
    }

    return ngx_slprintf(p, last,
        "# HELP ioa_stats_keys_dropped_total Counts not kept because the "
        "table of run time labels (error codes, Redis nodes) was full.\n"
        "# TYPE ioa_stats_keys_dropped_total counter\n"
        "ioa_stats_keys_dropped_total %uA\n",
        ngx_ioa_stats->keys_dropped);
}


static u_char *
ngx_ioa_stats_family(u_char *p, u_char *last,
    const ngx_ioa_stats_family_t *f)
{
    ngx_uint_t            i, via, kind;
    ngx_atomic_t         *c;
    ngx_ioa_stats_key_t  *k;

    p = ngx_slprintf(p, last, "# HELP %s %s\n# TYPE %s %s\n",
                     f->name, f->help, f->name, f->type);

    c = &ngx_ioa_stats->counter[f->first];

    switch (f->labels) {

    case NGX_IOA_LABELS_RANKED:
        p = ngx_slprintf(p, last, "%s{ranked_by=\"index\"} %uA\n"
                                  "%s{ranked_by=\"redis\"} %uA\n",
                         f->name, c[0], f->name, c[1]);
        break;

    case NGX_IOA_LABELS_VIA:
        for (via = 0; via < NGX_IOA_VIA_N; via++) {
            if (f->mask & (1 << via)) {
                p = ngx_slprintf(p, last, "%s{transport=\"%s\"} %uA\n",
                                 f->name, ngx_ioa_stats_via[via], c[via]);
            }
        }
        break;

    case NGX_IOA_LABELS_VIA_KIND:
        for (i = 0; i < 3 * NGX_IOA_VIA_N; i++) {
            if (!(f->mask & (1 << i))) {
                continue;
            }

            via = i / 3;
            kind = i % 3;

            /* a gauge of adds and subtracts: a reading between another
             * worker's two halves can not go below zero for long, but it
             * is an unsigned word, so print it as signed */
            p = ngx_slprintf(p, last, "%s{transport=\"%s\",kind=\"%s\"} %A\n",
                             f->name, ngx_ioa_stats_via[via],
                             ngx_ioa_stats_kind[kind],
                             (ngx_atomic_int_t) c[i]);
        }
        break;

    case NGX_IOA_LABELS_LIMIT:
        for (i = 0; i < NGX_IOA_LIMIT_N; i++) {
            p = ngx_slprintf(p, last, "%s{limit=\"%s\"} %uA\n",
                             f->name, ngx_ioa_stats_limit[i], c[i]);
        }
        break;

    case NGX_IOA_LABELS_LEASE:
        for (i = 0; i < 4; i++) {
            p = ngx_slprintf(p, last, "%s{result=\"%s\"} %uA\n",
                             f->name, ngx_ioa_stats_lease[i], c[i]);
        }
        break;

    case NGX_IOA_LABELS_KEYED:
        for (i = 0; i < NGX_IOA_STATS_KEYS; i++) {
            k = &ngx_ioa_stats->key[i];

            if (k->state == 2 && k->family == f->first) {
                p = ngx_slprintf(p, last, "%s{%*s} %uA\n", f->name,
                                 k->len, k->labels, k->count);
            }
        }
        break;

    default:
        p = ngx_slprintf(p, last, "%s %uA\n", f->name, c[0]);
        break;
    }

    return p;
}


static u_char *
ngx_ioa_stats_hist(u_char *p, u_char *last, const ngx_ioa_stats_hist_def_t *d,
    ngx_ioa_stats_hist_t *h)
{
    ngx_uint_t          i, b;
    ngx_atomic_uint_t   cum, sum;

    p = ngx_slprintf(p, last, "# HELP %s %s\n# TYPE %s histogram\n",
                     d->name, d->help, d->name);

    cum = 0;

    for (i = 0; i == 0 || d->bounds[i]; i++) {
        cum += h->bucket[i];
        b = d->bounds[i];

        if (d->seconds) {
            p = ngx_slprintf(p, last, "%s_bucket{le=\"%ui.%06ui\"} %uA\n",
                             d->name, b / 1000000, b % 1000000, cum);

        } else {
            p = ngx_slprintf(p, last, "%s_bucket{le=\"%ui\"} %uA\n",
                             d->name, b, cum);
        }
    }

    cum += h->bucket[i];
    sum = h->sum;

    /* the count is the +Inf bucket's, so that the two agree however the
     * adds of other workers interleave with this reading */

    p = ngx_slprintf(p, last, "%s_bucket{le=\"+Inf\"} %uA\n", d->name, cum);

    if (d->seconds) {
        p = ngx_slprintf(p, last, "%s_sum %uA.%06uA\n",
                         d->name, sum / 1000000, sum % 1000000);

    } else {
        p = ngx_slprintf(p, last, "%s_sum %uA\n", d->name, sum);
    }

    return ngx_slprintf(p, last, "%s_count %uA\n", d->name, cum);
}
