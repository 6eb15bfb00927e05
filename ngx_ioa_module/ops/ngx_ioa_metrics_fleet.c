
/*
 * Copyright (C) ioa authors
 *
 * The part of GET /metrics that describes the hub's goals and goal
 * workers, read from Redis (ngx_ioa_metrics.c runs it after the nodes'
 * INFO): how many goals are in each state, and each ioa-worker's heartbeat
 * and counters.
 *
 * Two script calls, one after the other, each in one slot:
 *
 *   goal_list.lua    (limit 0) the goal index's counts, P{goals}:count
 *   worker_list.lua  the workers by their last heartbeat, P{workers}:all,
 *                    and each one's hash, P{workers}:w:<consumer>, with
 *                    the time by the same node's clock
 *
 * The workers write their hashes themselves about once a second
 * (workers/worker/stats.c); a hash holds a heartbeat, when the process
 * started, and counters named "kind:label..." that this file turns into
 * families with labels (ngx_ioa_fleet_families).  A worker is up while its
 * heartbeat is younger than NGX_IOA_FLEET_UP_MS by Redis' clock and it did
 * not say it stopped; its age is measured on the clock that stamped it, so
 * the hosts' clocks do not matter.
 *
 * Bounded: at most NGX_IOA_FLEET_WORKERS workers (the freshest) and
 * NGX_IOA_FLEET_FIELDS fields each are described; ioa_workers_known says
 * how many there are.  A call that fails or is not answered leaves its
 * families out (ioa_redis_up says why); the scrape still answers.
 *
 * The replies are copied into the request's pool: hiredis frees a reply
 * when its callback returns, and the text is written only at the end.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* workers described per scrape, and fields per worker (a worker writes
 * about thirty) */
#define NGX_IOA_FLEET_WORKERS   256
#define NGX_IOA_FLEET_FIELDS    128

/* a heartbeat younger than this is a live worker: ten beats */
#define NGX_IOA_FLEET_UP_MS     10000

/* a worker silent this long is forgotten (as the workers prune) */
#define NGX_IOA_FLEET_STALE     "3600000"


typedef struct {
    ngx_str_t                 name;
    ngx_str_t                *fields;    /* field, value, field, value ... */
    ngx_uint_t                nfields;   /* pairs */
} ngx_ioa_fleet_worker_t;


struct ngx_ioa_fleet_s {
    void                     *data;      /* the caller's REST data */
    void                    (*done)(ngx_http_request_t *r);

    ngx_uint_t                goals_read;
    ngx_str_t                *counts;    /* state, n, state, n ... */
    ngx_uint_t                ncounts;

    ngx_uint_t                workers_read;
    int64_t                   now;       /* ms, the workers' node's clock */
    int64_t                   known;
    ngx_ioa_fleet_worker_t   *workers;
    ngx_uint_t                nworkers;
};


/* a counter family made of the fields "<prefix><label>[:<label2>]" */
typedef struct {
    const char               *name;
    const char               *help;
    const char               *prefix;
    const char               *label;     /* the first part's label name */
    const char               *label2;    /* the second's, NULL: none */
} ngx_ioa_fleet_family_t;


/* a counter or a gauge of one field per worker, 0 when a worker has none;
 * several series of one family follow each other, the first with the
 * help */
typedef struct {
    const char               *name;
    const char               *help;      /* NULL: the family's next series */
    const char               *field;
    const char               *label;     /* another label, or NULL */
    const char               *type;      /* "counter", "gauge" */
} ngx_ioa_fleet_scalar_t;


static void ngx_ioa_fleet_goals(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_fleet_workers(ngx_http_request_t *r);
static void ngx_ioa_fleet_workers_read(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_fleet_finish(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_fleet_copy(ngx_pool_t *pool, redisReply *e,
    ngx_str_t *s);
static ngx_str_t *ngx_ioa_fleet_field(ngx_ioa_fleet_worker_t *w,
    const char *name);
static int64_t ngx_ioa_fleet_number(ngx_str_t *s);
static u_char *ngx_ioa_fleet_escape(u_char *p, u_char *last, u_char *s,
    size_t len);
static u_char *ngx_ioa_fleet_workers_text(ngx_ioa_fleet_t *f, u_char *p,
    u_char *last);
static u_char *ngx_ioa_fleet_family(ngx_ioa_fleet_t *f,
    ngx_ioa_fleet_family_t *fam, u_char *p, u_char *last);
static u_char *ngx_ioa_fleet_scalar(ngx_ioa_fleet_t *f,
    ngx_ioa_fleet_scalar_t *sc, u_char *p, u_char *last);


/* the goal index's states (goal_index.lua) */
static const char  *ngx_ioa_fleet_states[] = {
    "queued", "forming", "running", "cancelling", "concluded", "failed",
    "cancelled", NULL
};


/* the engine's (goals in flight), and the LLM's: calls, failures,
 * requests, tokens by type, and the limiter and breaker of its endpoint */
static ngx_ioa_fleet_scalar_t  ngx_ioa_fleet_scalars[] = {

    { "ioa_worker_goals_in_flight",
      "Goals the worker holds now (running or waiting; at most its "
      "--max-goals).",
      "goals_in_flight", NULL, "gauge" },

    { "ioa_worker_llm_calls_total",
      "Structured LLM calls the worker made (a team, a plan, a review, a "
      "conclusion).",
      "llm_calls", NULL, "counter" },

    { "ioa_worker_llm_failures_total",
      "LLM calls that gave no usable answer (the built-in planner decided "
      "instead).",
      "llm_failures", NULL, "counter" },

    { "ioa_worker_llm_requests_total",
      "HTTP requests to the LLM endpoint, retries included.",
      "llm_requests", NULL, "counter" },

    { "ioa_worker_llm_tokens_total",
      "Tokens the LLM endpoint reported, by type.",
      "prompt_tokens", "type=\"prompt\"", "counter" },

    { "ioa_worker_llm_tokens_total", NULL,
      "completion_tokens", "type=\"completion\"", "counter" },

    { "ioa_worker_llm_in_flight",
      "Requests to the LLM endpoint in flight now (at most "
      "IOA_LLM_CONCURRENCY).",
      "llm_in_flight", NULL, "gauge" },

    { "ioa_worker_llm_queued",
      "LLM calls waiting for a slot now.",
      "llm_queued", NULL, "gauge" },

    { "ioa_worker_llm_breaker_open",
      "1 while the LLM endpoint's circuit breaker is open (no request is "
      "sent; the built-in planner decides).",
      "llm_breaker_open", NULL, "gauge" },

    { "ioa_worker_llm_breaker_trips_total",
      "Times the LLM endpoint's circuit breaker opened.",
      "llm_breaker_trips", NULL, "counter" },

    { NULL, NULL, NULL, NULL, NULL }
};


static ngx_ioa_fleet_family_t  ngx_ioa_fleet_families[] = {

    { "ioa_worker_decisions_total",
      "Decisions the worker's reviews took and saved, by kind (reroute, "
      "iterate, conclude, ask) and by whom (rule, llm).",
      "decisions:", "kind", "by" },

    { "ioa_worker_tasks_total",
      "Task outcomes the worker counted first in an agent's record "
      "(completed, partial, failed, timed_out): each task once, "
      "fleet-wide.",
      "tasks:", "outcome", NULL },

    { "ioa_worker_goals_total",
      "Goals the worker ended, by final state.",
      "goals:", "state", NULL },

    { "ioa_worker_retries_total",
      "What the worker did again after a failure: an LLM request, a Redis "
      "connection attempt, a goal run after a Redis error.",
      "retries:", "what", NULL },

    { NULL, NULL, NULL, NULL, NULL }
};


ngx_ioa_fleet_t *
ngx_ioa_fleet_create(ngx_pool_t *pool)
{
    return ngx_pcalloc(pool, sizeof(ngx_ioa_fleet_t));
}


/* the goal counts, then the workers, then done(r) with the REST data back
 * as it was */

void
ngx_ioa_fleet_ask(ngx_http_request_t *r, ngx_ioa_fleet_t *f,
    void (*done)(ngx_http_request_t *r))
{
    ngx_ioa_args_t  a;

    f->data = ngx_ioa_rest_get_data(r);
    f->done = done;

    ngx_ioa_rest_set_data(r, f);

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_GOALS);
    ngx_ioa_args_cstr(&a, "");
    ngx_ioa_args_cstr(&a, "");
    ngx_ioa_args_cstr(&a, "0");         /* the counts only */
    ngx_ioa_args_cstr(&a, "");

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_LIST,
                                 ngx_ioa_fleet_goals, 1, &a)
        != NGX_OK)
    {
        ngx_ioa_fleet_workers(r);
    }
}


static void
ngx_ioa_fleet_goals(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t        i;
    redisReply       *c;
    ngx_ioa_fleet_t  *f;

    f = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_ARRAY)
    {
        ngx_ioa_redis_log_refusal(reply, "goal_list.lua for /metrics");
        ngx_ioa_fleet_workers(r);
        return;
    }

    c = reply->element[0];

    f->counts = ngx_palloc(r->pool, (c->elements + 1) * sizeof(ngx_str_t));
    if (f->counts == NULL) {
        ngx_ioa_fleet_workers(r);
        return;
    }

    for (i = 0; i + 1 < c->elements && i < 64; i += 2) {
        if (ngx_ioa_fleet_copy(r->pool, c->element[i],
                               &f->counts[f->ncounts * 2])
               != NGX_OK
            || ngx_ioa_fleet_copy(r->pool, c->element[i + 1],
                                  &f->counts[f->ncounts * 2 + 1])
               != NGX_OK)
        {
            continue;
        }

        f->ncounts++;
    }

    f->goals_read = 1;

    ngx_ioa_fleet_workers(r);
}


static void
ngx_ioa_fleet_workers(ngx_http_request_t *r)
{
    ngx_ioa_args_t  a;

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_WORKERS);
    ngx_ioa_args_fmt(&a, "%d", NGX_IOA_FLEET_WORKERS);
    ngx_ioa_args_cstr(&a, NGX_IOA_FLEET_STALE);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_WORKER_LIST,
                                 ngx_ioa_fleet_workers_read, 1, &a)
        != NGX_OK)
    {
        ngx_ioa_fleet_finish(r);
    }
}


/* { now_ms, known, { name, { field, value, ... } }, ... } */

static void
ngx_ioa_fleet_workers_read(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t               i, k;
    redisReply              *e, *h;
    ngx_ioa_fleet_t         *f;
    ngx_ioa_fleet_worker_t  *w;

    f = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_redis_log_refusal(reply, "worker_list.lua for /metrics");
        ngx_ioa_fleet_finish(r);
        return;
    }

    f->now = reply->element[0]->integer;
    f->known = reply->element[1]->integer;

    f->workers = ngx_pcalloc(r->pool, (reply->elements - 2 + 1)
                                      * sizeof(ngx_ioa_fleet_worker_t));
    if (f->workers == NULL) {
        ngx_ioa_fleet_finish(r);
        return;
    }

    for (i = 2; i < reply->elements
                && f->nworkers < NGX_IOA_FLEET_WORKERS; i++)
    {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[1]->type != REDIS_REPLY_ARRAY)
        {
            continue;
        }

        w = &f->workers[f->nworkers];
        h = e->element[1];

        if (ngx_ioa_fleet_copy(r->pool, e->element[0], &w->name) != NGX_OK) {
            continue;
        }

        w->fields = ngx_palloc(r->pool, (h->elements + 1) * sizeof(ngx_str_t));
        if (w->fields == NULL) {
            break;
        }

        for (k = 0; k + 1 < h->elements
                    && w->nfields < NGX_IOA_FLEET_FIELDS; k += 2)
        {
            if (ngx_ioa_fleet_copy(r->pool, h->element[k],
                                   &w->fields[w->nfields * 2])
                   == NGX_OK
                && ngx_ioa_fleet_copy(r->pool, h->element[k + 1],
                                      &w->fields[w->nfields * 2 + 1])
                   == NGX_OK)
            {
                w->nfields++;
            }
        }

        f->nworkers++;
    }

    f->workers_read = 1;

    ngx_ioa_fleet_finish(r);
}


static void
ngx_ioa_fleet_finish(ngx_http_request_t *r)
{
    ngx_ioa_fleet_t  *f;

    f = ngx_ioa_rest_get_data(r);

    ngx_ioa_rest_set_data(r, f->data);

    f->done(r);
}


static ngx_int_t
ngx_ioa_fleet_copy(ngx_pool_t *pool, redisReply *e, ngx_str_t *s)
{
    if (e->type != REDIS_REPLY_STRING) {
        return NGX_DECLINED;
    }

    s->len = e->len;
    s->data = ngx_pnalloc(pool, e->len + 1);

    if (s->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(s->data, e->str, e->len);

    return NGX_OK;
}


/*
 * The families as text.  Room for everything is counted first: each
 * sample at most doubles its label values (escaping) and adds a line's
 * worth of names.
 */

ngx_buf_t *
ngx_ioa_fleet_metrics(ngx_pool_t *pool, ngx_ioa_fleet_t *f)
{
    size_t                   size;
    int64_t                  n;
    ngx_buf_t               *b;
    ngx_uint_t               i, k;
    const char             **s;
    ngx_ioa_fleet_worker_t  *w;

    size = 4096;

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        size += 8 * (2 * w->name.len + 160);

        for (k = 0; k < w->nfields; k++) {
            size += 2 * w->name.len + 2 * w->fields[k * 2].len
                    + w->fields[k * 2 + 1].len + 160;
        }
    }

    b = ngx_create_temp_buf(pool, size);
    if (b == NULL) {
        return NULL;
    }

    if (f->goals_read) {
        b->last = ngx_slprintf(b->last, b->end,
            "# HELP ioa_goals Goals in the hub's goal index, by state; ended "
            "goals stay in it as long as their records "
            "(--goal-retention).\n"
            "# TYPE ioa_goals gauge\n");

        /* every state a goal can be in, 0 when none is: a gauge that
         * vanishes reads as "no data" rather than as none */
        for (s = ngx_ioa_fleet_states; *s; s++) {
            n = 0;

            for (i = 0; i < f->ncounts; i++) {
                if (f->counts[i * 2].len == ngx_strlen(*s)
                    && ngx_strncmp(f->counts[i * 2].data, *s,
                                   f->counts[i * 2].len) == 0
                    && ngx_ioa_fleet_number(&f->counts[i * 2 + 1]) >= 0)
                {
                    n = ngx_ioa_fleet_number(&f->counts[i * 2 + 1]);
                }
            }

            b->last = ngx_slprintf(b->last, b->end,
                                   "ioa_goals{state=\"%s\"} %L\n", *s, n);
        }
    }

    if (f->workers_read) {
        b->last = ngx_ioa_fleet_workers_text(f, b->last, b->end);
    }

    return b;
}


static u_char *
ngx_ioa_fleet_workers_text(ngx_ioa_fleet_t *f, u_char *p, u_char *last)
{
    int64_t                  beat, started;
    ngx_str_t               *v;
    ngx_uint_t               i, up;
    ngx_ioa_fleet_worker_t  *w;
    ngx_ioa_fleet_family_t  *fam;
    ngx_ioa_fleet_scalar_t  *sc;

    p = ngx_slprintf(p, last,
        "# HELP ioa_workers_known Goal workers with a heartbeat in the last "
        "hour (at most %d are described below).\n"
        "# TYPE ioa_workers_known gauge\n"
        "ioa_workers_known %L\n",
        NGX_IOA_FLEET_WORKERS, f->known);

    p = ngx_slprintf(p, last,
        "# HELP ioa_worker_up 1 while the worker's heartbeat is younger "
        "than %d s (by Redis' clock) and it has not stopped.\n"
        "# TYPE ioa_worker_up gauge\n", NGX_IOA_FLEET_UP_MS / 1000);

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        v = ngx_ioa_fleet_field(w, "stopped");
        beat = ngx_ioa_fleet_number(ngx_ioa_fleet_field(w, "heartbeat_ms"));

        up = beat >= 0 && f->now - beat < NGX_IOA_FLEET_UP_MS
             && !(v && v->len == 1 && v->data[0] == '1');

        p = ngx_slprintf(p, last, "ioa_worker_up{worker=\"");
        p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
        p = ngx_slprintf(p, last, "\"} %ui\n", up);
    }

    p = ngx_slprintf(p, last,
        "# HELP ioa_worker_heartbeat_timestamp_seconds When the worker last "
        "wrote its counters (Unix time, Redis' clock).\n"
        "# TYPE ioa_worker_heartbeat_timestamp_seconds gauge\n");

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        beat = ngx_ioa_fleet_number(ngx_ioa_fleet_field(w, "heartbeat_ms"));

        if (beat < 0) {
            continue;
        }

        p = ngx_slprintf(p, last,
                         "ioa_worker_heartbeat_timestamp_seconds{worker=\"");
        p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
        p = ngx_slprintf(p, last, "\"} %L.%03L\n", beat / 1000, beat % 1000);
    }

    p = ngx_slprintf(p, last,
        "# HELP ioa_worker_start_time_seconds When the worker process "
        "started (Unix time, its host's clock).\n"
        "# TYPE ioa_worker_start_time_seconds gauge\n");

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        started = ngx_ioa_fleet_number(ngx_ioa_fleet_field(w, "started_ms"));

        if (started < 0) {
            continue;
        }

        p = ngx_slprintf(p, last, "ioa_worker_start_time_seconds{worker=\"");
        p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
        p = ngx_slprintf(p, last, "\"} %L.%03L\n", started / 1000,
                         started % 1000);
    }

    p = ngx_slprintf(p, last,
        "# HELP ioa_worker_info The worker's planner (builtin or llm).\n"
        "# TYPE ioa_worker_info gauge\n");

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        v = ngx_ioa_fleet_field(w, "planner");

        p = ngx_slprintf(p, last, "ioa_worker_info{worker=\"");
        p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
        p = ngx_slprintf(p, last, "\",planner=\"");

        if (v) {
            p = ngx_ioa_fleet_escape(p, last, v->data, v->len);
        }

        p = ngx_slprintf(p, last, "\"} 1\n");
    }

    for (fam = ngx_ioa_fleet_families; fam->name; fam++) {
        p = ngx_ioa_fleet_family(f, fam, p, last);
    }

    for (sc = ngx_ioa_fleet_scalars; sc->name; sc++) {
        p = ngx_ioa_fleet_scalar(f, sc, p, last);
    }

    return p;
}


/* one field of every worker's as a sample, 0 when it has none; a
 * family's first series carries its HELP and TYPE */

static u_char *
ngx_ioa_fleet_scalar(ngx_ioa_fleet_t *f, ngx_ioa_fleet_scalar_t *sc,
    u_char *p, u_char *last)
{
    int64_t                  n;
    ngx_uint_t               i;
    ngx_ioa_fleet_worker_t  *w;

    if (sc->help) {
        p = ngx_slprintf(p, last, "# HELP %s %s\n# TYPE %s %s\n",
                         sc->name, sc->help, sc->name, sc->type);
    }

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];
        n = ngx_ioa_fleet_number(ngx_ioa_fleet_field(w, sc->field));

        p = ngx_slprintf(p, last, "%s{worker=\"", sc->name);
        p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
        p = ngx_slprintf(p, last, "\"%s%s} %L\n", sc->label ? "," : "",
                         sc->label ? sc->label : "", n >= 0 ? n : 0);
    }

    return p;
}


/* every worker's fields "<prefix>a[:b]" as samples {worker, label=a[,
 * label2=b]}; a field without the second part when one is expected, or
 * with a value that is no count, is left out */

static u_char *
ngx_ioa_fleet_family(ngx_ioa_fleet_t *f, ngx_ioa_fleet_family_t *fam,
    u_char *p, u_char *last)
{
    u_char                  *part, *end, *colon;
    size_t                   plen;
    int64_t                  n;
    ngx_str_t               *k;
    ngx_uint_t               i, j;
    ngx_ioa_fleet_worker_t  *w;

    p = ngx_slprintf(p, last, "# HELP %s %s\n# TYPE %s counter\n",
                     fam->name, fam->help, fam->name);

    plen = ngx_strlen(fam->prefix);

    for (i = 0; i < f->nworkers; i++) {
        w = &f->workers[i];

        for (j = 0; j < w->nfields; j++) {
            k = &w->fields[j * 2];

            if (k->len <= plen
                || ngx_strncmp(k->data, fam->prefix, plen) != 0)
            {
                continue;
            }

            n = ngx_ioa_fleet_number(&w->fields[j * 2 + 1]);
            if (n < 0) {
                continue;
            }

            part = k->data + plen;
            end = k->data + k->len;
            colon = ngx_strlchr(part, end, ':');

            if ((fam->label2 != NULL) != (colon != NULL)
                || colon == part || colon == end - 1)
            {
                continue;
            }

            p = ngx_slprintf(p, last, "%s{worker=\"", fam->name);
            p = ngx_ioa_fleet_escape(p, last, w->name.data, w->name.len);
            p = ngx_slprintf(p, last, "\",%s=\"", fam->label);
            p = ngx_ioa_fleet_escape(p, last, part,
                                     (colon ? colon : end) - part);

            if (colon) {
                p = ngx_slprintf(p, last, "\",%s=\"", fam->label2);
                p = ngx_ioa_fleet_escape(p, last, colon + 1,
                                         end - colon - 1);
            }

            p = ngx_slprintf(p, last, "\"} %L\n", n);
        }
    }

    return p;
}


static ngx_str_t *
ngx_ioa_fleet_field(ngx_ioa_fleet_worker_t *w, const char *name)
{
    size_t      len;
    ngx_uint_t  i;

    len = ngx_strlen(name);

    for (i = 0; i < w->nfields; i++) {
        if (w->fields[i * 2].len == len
            && ngx_strncmp(w->fields[i * 2].data, name, len) == 0)
        {
            return &w->fields[i * 2 + 1];
        }
    }

    return NULL;
}


/* a count or a time in ms, -1 when it is none */

static int64_t
ngx_ioa_fleet_number(ngx_str_t *s)
{
    if (s == NULL || s->len == 0) {
        return -1;
    }

    return ngx_atoof(s->data, s->len);
}


/* a label value as the text format wants it: \, " and newline escaped */

static u_char *
ngx_ioa_fleet_escape(u_char *p, u_char *last, u_char *s, size_t len)
{
    while (len-- && p < last) {
        switch (*s) {

        case '\\':
        case '"':
            if (last - p < 2) {
                return p;
            }

            *p++ = '\\';
            *p++ = *s;
            break;

        case '\n':
            if (last - p < 2) {
                return p;
            }

            *p++ = '\\';
            *p++ = 'n';
            break;

        default:
            *p++ = *s;
        }

        s++;
    }

    return p;
}
