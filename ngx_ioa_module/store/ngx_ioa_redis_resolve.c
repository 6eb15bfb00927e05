
/*
 * Copyright (C) ioa authors
 *
 * Redis by name: "ioa_redis redis:6379" where "redis" is found when a
 * connection is made, not when nginx reads its configuration.
 *
 * hiredis 0.14 resolves a name with getaddrinfo(), a blocking call that
 * would stop the worker's event loop, so the module has always handed it a
 * numeric address, resolved once at configuration time.  That is wrong
 * where the name is the only stable thing about Redis: in a container
 * network (compose, Kubernetes) Redis may not exist yet when the hub
 * starts (and `nginx -t` then fails on "host not found"), and a Redis
 * container that is recreated comes back at another address, which a hub
 * holding the old one never finds.
 *
 * So a name of ioa_redis is resolved in one of two ways, chosen at the end
 * of the configuration (ngx_ioa_redis_resolve_conf):
 *
 *   - nginx's "resolver" is set in the http block: the name is kept and
 *     looked up with nginx's own non-blocking resolver before every
 *     connection attempt (the first one, and every reconnect after a lost
 *     connection or a failed attempt).  A lookup that fails is a failed
 *     connection attempt: logged, counted, retried with the usual backoff.
 *     nginx caches the answer for its TTL (or the resolver's valid=), so
 *     a reconnect storm costs no DNS traffic, and a changed address is
 *     seen by the next reconnect after the cache expires.
 *
 *   - no "resolver": the name is resolved now, with the system's resolver,
 *     exactly as before, and a name that does not resolve fails the
 *     configuration with a message that names the cure.
 *
 * The lookup is bounded by ioa_redis_connect_timeout (it is part of the
 * connection attempt), not by resolver_timeout's 30 s: a hub waiting for
 * a Redis container that is not there yet asks again after its backoff
 * instead of sitting on one unanswered query.
 *
 * Only the seeds of ioa_redis are names.  A Cluster's other masters come
 * from CLUSTER SLOTS as addresses (ngx_ioa_redis_cluster.c), and a seed
 * that resolves to an address the map also names is the same node there.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"


static void ngx_ioa_redis_resolved(ngx_resolver_ctx_t *ctx);


char *
ngx_ioa_redis_resolve_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf)
{
    u_char                    *p;
    ngx_url_t                  u;
    ngx_uint_t                 i;
    ngx_resolver_t            *r;
    struct sockaddr_in        *sin;
    ngx_ioa_redis_addr_t      *addr;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    /* without a "resolver" nginx leaves a dummy one with no servers */
    r = clcf->resolver;

    if (r != NULL && r->connections.nelts == 0) {
        r = NULL;
    }

    mcf->redis_resolver = r;

    addr = mcf->redis_seeds->elts;

    for (i = 0; i < mcf->redis_seeds->nelts; i++) {

        if (addr[i].name.len == 0 || r != NULL) {
            continue;
        }

        /* no resolver: the system's, now, as hiredis cannot at run time */

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.url = addr[i].name;
        u.host = addr[i].name;
        u.port = addr[i].port;

        if (ngx_inet_resolve_host(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "host \"%V\" of \"ioa_redis\" not found; "
                               "set \"resolver\" in the http block to look "
                               "it up when connecting instead",
                               &addr[i].name);
            return NGX_CONF_ERROR;
        }

        for (sin = NULL; u.naddrs; u.naddrs--, u.addrs++) {
            if (u.addrs[0].sockaddr->sa_family == AF_INET) {
                sin = (struct sockaddr_in *) u.addrs[0].sockaddr;
                break;
            }
        }

        if (sin == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "host \"%V\" of \"ioa_redis\" has no IPv4 "
                               "address", &addr[i].name);
            return NGX_CONF_ERROR;
        }

        p = ngx_pnalloc(cf->pool, NGX_INET_ADDRSTRLEN + 1);
        if (p == NULL) {
            return NGX_CONF_ERROR;
        }

        addr[i].host.len = ngx_inet_ntop(AF_INET, &sin->sin_addr, p,
                                         NGX_INET_ADDRSTRLEN);
        p[addr[i].host.len] = '\0';
        addr[i].host.data = p;
        ngx_str_null(&addr[i].name);
    }

    return NGX_CONF_OK;
}


/*
 * Looks the node's name up for a connection attempt of rc; the answer
 * becomes the node's address and the attempt goes on
 * (ngx_ioa_redis_conn_open), a failure is a failed attempt.
 */

void
ngx_ioa_redis_resolve(ngx_ioa_redis_conn_t *rc)
{
    ngx_resolver_ctx_t    *ctx;
    ngx_ioa_main_conf_t   *mcf;
    ngx_ioa_redis_node_t  *node;

    mcf = ngx_ioa_main_conf();
    node = rc->node;

    ctx = ngx_resolve_start(mcf->redis_resolver, NULL);

    if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot look up \"%V\"",
                      rc->name, &node->name);
        ngx_ioa_redis_conn_failed(rc, "resolve_failed");
        return;
    }

    ctx->name = node->name;
    ctx->handler = ngx_ioa_redis_resolved;
    ctx->data = rc;
    ctx->timeout = mcf->redis_connect_timeout;
    ctx->cancelable = 1;

    rc->resolving = ctx;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, rc->log, 0,
                   "ioa redis %s looking up \"%V\"", rc->name, &node->name);

    /* the handler may run from here already (a cached answer) */

    if (ngx_resolve_name(ctx) != NGX_OK) {
        rc->resolving = NULL;
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot look up \"%V\"",
                      rc->name, &node->name);
        ngx_ioa_redis_conn_failed(rc, "resolve_failed");
    }
}


static void
ngx_ioa_redis_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_ioa_redis_conn_t *rc = ctx->data;

    u_char                 host[NGX_INET_ADDRSTRLEN + 1];
    size_t                 len;
    ngx_int_t              state;
    ngx_uint_t             i;
    struct sockaddr_in    *sin;
    ngx_ioa_redis_node_t  *node;

    node = rc->node;
    state = ctx->state;
    sin = NULL;

    if (state == NGX_OK) {
        for (i = 0; i < ctx->naddrs; i++) {
            if (ctx->addrs[i].sockaddr->sa_family == AF_INET) {
                sin = (struct sockaddr_in *) ctx->addrs[i].sockaddr;
                break;
            }
        }
    }

    len = 0;

    if (sin != NULL) {
        len = ngx_inet_ntop(AF_INET, &sin->sin_addr, host,
                            NGX_INET_ADDRSTRLEN);
    }

    host[len] = '\0';

    rc->resolving = NULL;
    ngx_resolve_name_done(ctx);

    if (state != NGX_OK || len == 0) {
        ngx_log_error(NGX_LOG_ERR, rc->log, 0,
                      "ioa redis %s: cannot look up \"%V\": %s",
                      rc->name, &node->name,
                      state != NGX_OK ? ngx_resolver_strerror(state)
                                      : "no IPv4 address");
        ngx_ioa_redis_conn_failed(rc, "resolve_failed");
        return;
    }

    if (ngx_strcmp(node->host, host) != 0) {
        ngx_log_error(NGX_LOG_INFO, rc->log, 0,
                      "ioa redis: \"%V\" is %s", &node->name, host);
        ngx_memcpy(node->host, host, len + 1);
    }

    ngx_ioa_redis_conn_open(rc);
}


/* a lookup in flight is forgotten: its answer will not come */

void
ngx_ioa_redis_resolve_cancel(ngx_ioa_redis_conn_t *rc)
{
    if (rc->resolving) {
        ngx_resolve_name_done(rc->resolving);
        rc->resolving = NULL;
    }
}
