
/*
 * Copyright (C) ioa authors
 *
 * CORS: web apps on another origin calling the hub (IoA's frontend runs on
 * http://localhost:3000 and calls its server from there).
 *
 *   ioa_cors_origins * | ORIGIN ...;     (http, server, location; off
 *                                         until given)
 *
 * For a request whose Origin is listed (or any, with "*"):
 *
 *   - every answer carries Access-Control-Allow-Origin: <that origin>,
 *     Access-Control-Allow-Credentials: true and Vary: Origin, errors
 *     included, since the headers go into the answer before the endpoint
 *     runs.  The origin is echoed, never a literal "*": a browser does not
 *     send credentials (a token in Authorization, or cookies) to "*".
 *   - a preflight (OPTIONS with Access-Control-Request-Method) is answered
 *     here, 204, allowing the method asked for (GET, POST or OPTIONS) and
 *     the headers asked for, at most NGX_IOA_CORS_MAX_AGE seconds cached.
 *
 * An origin not listed gets no CORS headers at all, and its preflight is
 * an ordinary OPTIONS (405): the browser keeps the page out.  Requests
 * without Origin (agents, curl) are not touched.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


#define NGX_IOA_CORS_MAX_AGE  "600"


static ngx_int_t ngx_ioa_cors_allowed(ngx_ioa_loc_conf_t *lcf,
    ngx_str_t *origin);
static ngx_int_t ngx_ioa_cors_header(ngx_http_request_t *r, const char *key,
    ngx_str_t *value);


/* ioa_cors_origins * | ORIGIN ...: every argument, repeatable */

char *
ngx_ioa_cors_origins_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    ngx_str_t   *value, *o;
    ngx_uint_t   i;

    if (lcf->cors_origins == NGX_CONF_UNSET_PTR) {
        lcf->cors_origins = ngx_array_create(cf->pool, 2, sizeof(ngx_str_t));
        if (lcf->cors_origins == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        if (!(value[i].len == 1 && value[i].data[0] == '*')
            && ngx_strlcasestrn(value[i].data, value[i].data + value[i].len,
                                (u_char *) "://", 3 - 1)
               == NULL)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ioa_cors_origins\" takes \"*\" or origins "
                               "such as \"https://app.example:8443\", not "
                               "\"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        o = ngx_array_push(lcf->cors_origins);
        if (o == NULL) {
            return NGX_CONF_ERROR;
        }

        *o = value[i];
    }

    return NGX_CONF_OK;
}


/*
 * NGX_DECLINED: go on with the request (CORS headers added if its origin
 * is allowed); anything else is the answer to a preflight.
 */

ngx_int_t
ngx_ioa_cors(ngx_http_request_t *r)
{
    ngx_str_t            v;
    ngx_table_elt_t     *origin, *method, *headers;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);

    if (lcf->cors_origins == NULL) {
        return NGX_DECLINED;
    }

    origin = ngx_ioa_header_in(r, "Origin");

    if (origin == NULL || !ngx_ioa_cors_allowed(lcf, &origin->value)) {
        return NGX_DECLINED;
    }

    ngx_str_set(&v, "true");

    if (ngx_ioa_cors_header(r, "Access-Control-Allow-Origin", &origin->value)
        != NGX_OK
        || ngx_ioa_cors_header(r, "Access-Control-Allow-Credentials", &v)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&v, "Origin");

    if (ngx_ioa_cors_header(r, "Vary", &v) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    method = ngx_ioa_header_in(r, "Access-Control-Request-Method");

    if (r->method != NGX_HTTP_OPTIONS || method == NULL) {
        /* what a page may read of the answers */
        ngx_str_set(&v, "Location, Retry-After, WWW-Authenticate");

        if (ngx_ioa_cors_header(r, "Access-Control-Expose-Headers", &v)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return NGX_DECLINED;
    }

    /* the preflight */

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&v, "GET, POST, OPTIONS");

    if (ngx_ioa_cors_header(r, "Access-Control-Allow-Methods", &v) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    headers = ngx_ioa_header_in(r, "Access-Control-Request-Headers");

    if (headers && headers->value.len) {
        v = headers->value;

    } else {
        ngx_str_set(&v, "Authorization, Content-Type, Last-Event-ID, Prefer");
    }

    if (ngx_ioa_cors_header(r, "Access-Control-Allow-Headers", &v) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&v, NGX_IOA_CORS_MAX_AGE);

    if (ngx_ioa_cors_header(r, "Access-Control-Max-Age", &v) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_NO_CONTENT;
    r->headers_out.content_length_n = 0;
    r->header_only = 1;

    return ngx_http_send_header(r);
}


static ngx_int_t
ngx_ioa_cors_allowed(ngx_ioa_loc_conf_t *lcf, ngx_str_t *origin)
{
    ngx_str_t   *o;
    ngx_uint_t   i;

    o = lcf->cors_origins->elts;

    for (i = 0; i < lcf->cors_origins->nelts; i++) {
        if ((o[i].len == 1 && o[i].data[0] == '*')
            || (o[i].len == origin->len
                && ngx_strncasecmp(o[i].data, origin->data, origin->len)
                   == 0))
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_ioa_cors_header(ngx_http_request_t *r, const char *key, ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value = *value;

    return NGX_OK;
}


/*
 * The facades' guard against DNS rebinding (MCP requires it): a page whose
 * name an attacker made resolve to the hub sends its own Origin, and the
 * Host it was loaded from, so neither the token-less open mode nor a Host
 * check would stop it.  A request with an Origin not in ioa_cors_origins
 * (none when there is no such directive) is refused; a request without
 * one is no browser's and goes on.  NGX_OK, or NGX_DECLINED with the
 * refused origin in *origin.
 */

ngx_int_t
ngx_ioa_origin_check(ngx_http_request_t *r, ngx_str_t *origin)
{
    ngx_table_elt_t     *h;
    ngx_ioa_loc_conf_t  *lcf;

    h = ngx_ioa_header_in(r, "Origin");

    if (h == NULL) {
        return NGX_OK;
    }

    lcf = ngx_ioa_loc_conf(r);

    if (lcf->cors_origins && ngx_ioa_cors_allowed(lcf, &h->value)) {
        return NGX_OK;
    }

    *origin = h->value;

    return NGX_DECLINED;
}
