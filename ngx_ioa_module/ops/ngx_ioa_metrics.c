
/*
 * Copyright (C) ioa authors
 *
 * ioa_metrics: GET /metrics in Prometheus' text exposition format (0.0.4).
 *
 * What is here so far is what an operator needs to see Redis filling up
 * before it refuses writes (store_full): per Redis node the hub writes to
 * (the standalone Redis, or every master of a Cluster), whether it
 * answered, and its used_memory and maxmemory from INFO memory; the
 * discovery index's gauges (ngx_ioa_index.c); the instance's counters
 * (ngx_ioa_stats.c), to which more are to join (issue 14); and, once the
 * nodes have answered, the hub's goals by state and its goal workers'
 * heartbeats and counters (ngx_ioa_metrics_fleet.c).
 *
 * The nodes are asked one after the other: INFO is cheap and a Cluster has
 * a handful of masters.  A node that does not answer is reported with
 * ioa_redis_up 0 rather than left out, so a scrape always describes every
 * node.  The request holds one Redis command at a time, cancelled if the
 * client goes (the REST context's cleanup).
 *
 * Who may scrape is the operator's choice (README "Metrics"): a location
 * of its own with allow/deny, or a server that listens on an internal
 * address, and no token (many scrapers carry none, and the figures name
 * no agent); or "ioa_metrics token", which asks for a token with the
 * "metrics" scope (Prometheus' authorization: credentials), checked like
 * every other endpoint's under the location's ioa_auth.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"


/* nodes described per scrape at most (a Cluster's masters) */
#define NGX_IOA_METRICS_NODES  64


typedef struct {
    ngx_str_t            addr;
    ngx_uint_t           up;
    int64_t              used;
    int64_t              max;
} ngx_ioa_metrics_node_t;


typedef struct {
    ngx_uint_t              n;
    ngx_ioa_metrics_node_t  nodes[NGX_IOA_METRICS_NODES];
    ngx_ioa_fleet_t        *fleet;
} ngx_ioa_metrics_t;


static void ngx_ioa_metrics_ask(ngx_http_request_t *r);
static void ngx_ioa_metrics_info(ngx_http_request_t *r, redisReply *reply);
static int64_t ngx_ioa_metrics_field(redisReply *reply, const char *name);
static void ngx_ioa_metrics_done(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_metrics_send(ngx_http_request_t *r);


ngx_int_t
ngx_ioa_metrics_token_handler(ngx_http_request_t *r)
{
    ngx_int_t            rc;
    ngx_ioa_identity_t  *id;

    rc = ngx_ioa_auth_check(r, NGX_IOA_SCOPE_METRICS, NULL, &id);

    if (id == NULL) {
        return rc;
    }

    return ngx_ioa_metrics_handler(r);
}


ngx_int_t
ngx_ioa_metrics_handler(ngx_http_request_t *r)
{
    ngx_ioa_metrics_t  *m;

    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    m = ngx_pcalloc(r->pool, sizeof(ngx_ioa_metrics_t));
    if (m == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_rest_set_data(r, m);

    if (ngx_ioa_rest_get_data(r) != m) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->main->count++;

    ngx_ioa_metrics_ask(r);

    return NGX_DONE;
}


/* INFO memory of the next node, or the answer once every node was asked */

static void
ngx_ioa_metrics_ask(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_ioa_args_t           a;
    ngx_ioa_metrics_t       *m;
    ngx_ioa_redis_node_t    *node;
    ngx_ioa_metrics_node_t  *mn;

    m = ngx_ioa_rest_get_data(r);

    while (m->n < NGX_IOA_METRICS_NODES) {
        node = ngx_ioa_redis_data_node(m->n);

        if (node == NULL) {
            break;
        }

        mn = &m->nodes[m->n];
        mn->addr = node->addr;

        /* built again for each node tried: a send releases its builder */
        ngx_ioa_args_init(&a);
        ngx_ioa_args_cstr(&a, "INFO");
        ngx_ioa_args_cstr(&a, "memory");

        rc = ngx_ioa_rest_node_command_args(r, node, ngx_ioa_metrics_info,
                                            &a);

        if (rc == NGX_OK) {
            return;
        }

        m->n++;                         /* not connected: up 0 */
    }

    m->fleet = ngx_ioa_fleet_create(r->pool);
    if (m->fleet == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_fleet_ask(r, m->fleet, ngx_ioa_metrics_done);
}


static void
ngx_ioa_metrics_done(ngx_http_request_t *r)
{
    ngx_ioa_finish(r, ngx_ioa_metrics_send(r));
}


static void
ngx_ioa_metrics_info(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_metrics_t       *m;
    ngx_ioa_metrics_node_t  *mn;

    m = ngx_ioa_rest_get_data(r);
    mn = &m->nodes[m->n];

    if (reply && reply->type == REDIS_REPLY_STRING) {
        mn->used = ngx_ioa_metrics_field(reply, "used_memory");
        mn->max = ngx_ioa_metrics_field(reply, "maxmemory");
        mn->up = (mn->used >= 0 && mn->max >= 0);

    } else {
        ngx_ioa_redis_log_refusal(reply, "INFO for /metrics");
    }

    m->n++;

    ngx_ioa_metrics_ask(r);
}


/* a "name:<integer>" line of INFO, -1 if there is none */

static int64_t
ngx_ioa_metrics_field(redisReply *reply, const char *name)
{
    u_char  *p, *last, *line;
    size_t   len;

    len = ngx_strlen(name);
    p = (u_char *) reply->str;
    last = p + reply->len;

    while (p < last) {
        line = p;

        p = ngx_strlchr(p, last, '\n');
        if (p == NULL) {
            p = last;
        }

        if ((size_t) (p - line) > len + 1 && line[len] == ':'
            && ngx_strncmp(line, name, len) == 0)
        {
            line += len + 1;

            while (p > line && (p[-1] == '\r' || p[-1] == '\n')) {
                p--;
            }

            return ngx_atoof(line, p - line);
        }

        p++;
    }

    return -1;
}


static ngx_int_t
ngx_ioa_metrics_send(ngx_http_request_t *r)
{
    size_t                   size;
    ngx_int_t                rc;
    ngx_buf_t               *b, *fb;
    ngx_uint_t               i;
    ngx_chain_t              out, fleet;
    ngx_ioa_metrics_t       *m;
    ngx_ioa_metrics_node_t  *mn;

    m = ngx_ioa_rest_get_data(r);

    size = 4096 + ngx_ioa_stats_metrics_size();

    for (i = 0; i < m->n; i++) {
        size += 3 * (m->nodes[i].addr.len + 80);
    }

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_slprintf(b->last, b->end,
        "# HELP ioa_redis_up Whether the Redis node answered this scrape.\n"
        "# TYPE ioa_redis_up gauge\n");

    for (i = 0; i < m->n; i++) {
        mn = &m->nodes[i];
        b->last = ngx_slprintf(b->last, b->end,
                               "ioa_redis_up{node=\"%V\"} %ui\n",
                               &mn->addr, mn->up);
    }

    b->last = ngx_slprintf(b->last, b->end,
        "# HELP ioa_redis_used_memory_bytes Memory the Redis node uses "
        "(INFO used_memory).\n"
        "# TYPE ioa_redis_used_memory_bytes gauge\n");

    for (i = 0; i < m->n; i++) {
        mn = &m->nodes[i];

        if (mn->up) {
            b->last = ngx_slprintf(b->last, b->end,
                               "ioa_redis_used_memory_bytes{node=\"%V\"} %L\n",
                               &mn->addr, mn->used);
        }
    }

    b->last = ngx_slprintf(b->last, b->end,
        "# HELP ioa_redis_maxmemory_bytes The Redis node's maxmemory; at it "
        "writes are refused (store_full). 0: no limit.\n"
        "# TYPE ioa_redis_maxmemory_bytes gauge\n");

    for (i = 0; i < m->n; i++) {
        mn = &m->nodes[i];

        if (mn->up) {
            b->last = ngx_slprintf(b->last, b->end,
                                 "ioa_redis_maxmemory_bytes{node=\"%V\"} %L\n",
                                 &mn->addr, mn->max);
        }
    }

    b->last = ngx_ioa_index_metrics(b->last, b->end);
    b->last = ngx_ioa_stats_metrics(b->last, b->end);

    fb = ngx_ioa_fleet_metrics(r->pool, m->fleet);
    if (fb == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = (b->last - b->pos)
                                      + (fb->last - fb->pos);
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    if (fb->last != fb->pos) {          /* empty without Redis */
        out.next = &fleet;
        fleet.buf = fb;
        fleet.next = NULL;
        b = fb;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    return ngx_http_output_filter(r, &out);
}
