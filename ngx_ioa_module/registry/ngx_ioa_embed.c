
/*
 * Copyright (C) ioa authors
 *
 * Embeddings for semantic discovery: texts in, one vector per text out,
 * from an OpenAI-compatible /v1/embeddings endpoint.
 *
 * The endpoint is reached through nginx's own upstream machinery, never by
 * a blocking call: `ioa_embedding <uri> model=<name>` names a location of
 * the same server, which the operator writes with proxy_pass (so
 * keepalive, timeouts, TLS, load balancing and retries are nginx's own
 * directives), and each call is a subrequest to it whose answer stays in
 * memory.  The request body is the variable $ioa_embedding_body, which the
 * location sends with proxy_set_body; it is set in the subrequest's own
 * variables before the subrequest runs, so nothing else can see it.
 *
 *   location = /_ioa/embeddings {
 *       internal;
 *       proxy_pass http://embedder/v1/embeddings;
 *       proxy_method POST;
 *       proxy_set_header Content-Type application/json;
 *       proxy_pass_request_headers off;   # not the client's token
 *       proxy_set_body $ioa_embedding_body;
 *       subrequest_output_buffer_size 1m;
 *       proxy_read_timeout 2s;
 *   }
 *
 * When the subrequest ends, the request that asked gets the vectors (each
 * scaled to length 1, so that a dot product is the cosine) or the reason
 * there are none: a status other than 200, an answer that is not the
 * OpenAI shape, a count or a dimension that does not match.  Callers go on
 * without vectors then (ngx_ioa_registry.c): registering never fails
 * because of the embedder, and discovery falls back to BM25.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <math.h>

#include "ngx_ioa.h"


/* the longest vector we take: text-embedding-3-large has 3072 */
#define NGX_IOA_EMBED_DIM_MAX   4096


typedef struct {
    ngx_ioa_embed_handler_pt  handler;
    void                     *data;
    ngx_uint_t                n;
    ngx_ioa_embed_result_t    result;
} ngx_ioa_embed_ctx_t;


static ngx_int_t ngx_ioa_embed_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_ioa_embed_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc);
static void ngx_ioa_embed_resume(ngx_http_request_t *r);
static void ngx_ioa_embed_parse(ngx_http_request_t *sr,
    ngx_ioa_embed_ctx_t *ctx);


static ngx_int_t  ngx_ioa_embed_var_index = NGX_ERROR;
static ngx_str_t  ngx_ioa_embed_var_name = ngx_string("ioa_embedding_body");


/* preconfiguration: the variable exists for proxy_set_body to name */

ngx_int_t
ngx_ioa_embed_add_variable(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var;

    var = ngx_http_add_variable(cf, &ngx_ioa_embed_var_name, 0);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_ioa_embed_variable;

    ngx_ioa_embed_var_index = ngx_http_get_variable_index(cf,
                                                  &ngx_ioa_embed_var_name);

    return ngx_ioa_embed_var_index == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* anywhere but in our subrequest (where it is preset) it is empty */

static ngx_int_t
ngx_ioa_embed_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    v->not_found = 1;

    return NGX_OK;
}


/* ioa_embedding uri model=name [weight=0..1] | off */

char *
ngx_ioa_embed_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t  *mcf = conf;

    double      w;
    ngx_str_t  *value;
    ngx_uint_t  i;

    if (mcf->embed_uri.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0 && cf->args->nelts == 2) {
        ngx_str_set(&mcf->embed_uri, "");
        return NGX_CONF_OK;
    }

    if (value[1].data[0] != '/') {
        return "needs the URI of a location of this server that proxies to "
               "the endpoint, such as /_ioa/embeddings";
    }

    mcf->embed_uri = value[1];
    mcf->embed_weight = 0.5;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "model=", 6) == 0
            && value[i].len > 6)
        {
            mcf->embed_model.data = value[i].data + 6;
            mcf->embed_model.len = value[i].len - 6;
            continue;
        }

        if (ngx_strncmp(value[i].data, "weight=", 7) == 0) {
            w = strtod((char *) value[i].data + 7, NULL);

            if (w < 0 || w > 1) {
                return "has a weight= outside 0..1";
            }

            mcf->embed_weight = w;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_embedding\": unknown parameter \"%V\"",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    if (mcf->embed_model.len == 0) {
        return "needs model=<name>: the model the endpoint embeds with, "
               "recorded with every vector";
    }

    return NGX_CONF_OK;
}


/*
 * Embed texts for request r; handler(r, data, result) runs once the
 * endpoint answered or failed.  NGX_ERROR or NGX_DECLINED: no subrequest
 * was made (the handler is not called).
 */

ngx_int_t
ngx_ioa_embed(ngx_http_request_t *r, ngx_str_t *texts, ngx_uint_t n,
    ngx_ioa_embed_handler_pt handler, void *data)
{
    u_char                     *p;
    size_t                      len;
    ngx_uint_t                  i;
    ngx_str_t                   body;
    ngx_http_request_t         *sr;
    ngx_ioa_main_conf_t        *mcf;
    ngx_ioa_embed_ctx_t        *ctx;
    ngx_http_variable_value_t  *vv;
    ngx_http_post_subrequest_t *ps;

    /* a request that is itself an in-memory subrequest (an MCP tool call,
     * ngx_ioa_mcp.c) cannot make another: nginx does not nest them, so it
     * goes without, as if no endpoint were configured */
    if (r->subrequest_in_memory) {
        return NGX_DECLINED;
    }

    mcf = ngx_ioa_main_conf();

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_ioa_embed_ctx_t));
    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));

    if (ctx == NULL || ps == NULL) {
        return NGX_ERROR;
    }

    ctx->handler = handler;
    ctx->data = data;
    ctx->n = n;

    /* {"model":"..","input":["..",..]} */
    len = sizeof("{\"model\":,\"input\":[]}") + ngx_ioa_json_str_len(
                                                          &mcf->embed_model);

    for (i = 0; i < n; i++) {
        len += ngx_ioa_json_str_len(&texts[i]) + 1;
    }

    body.data = ngx_pnalloc(r->pool, len);
    if (body.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(body.data, "{\"model\":", 9);
    p = ngx_ioa_json_str(p, &mcf->embed_model);
    p = ngx_cpymem(p, ",\"input\":[", 10);

    for (i = 0; i < n; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_ioa_json_str(p, &texts[i]);
    }

    p = ngx_cpymem(p, "]}", 2);
    body.len = p - body.data;

    ps->handler = ngx_ioa_embed_done;
    ps->data = ctx;

    if (ngx_http_subrequest(r, &mcf->embed_uri, NULL, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            |NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the body, as the subrequest's own value of $ioa_embedding_body */
    vv = &sr->variables[ngx_ioa_embed_var_index];
    vv->data = body.data;
    vv->len = body.len;
    vv->valid = 1;
    vv->no_cacheable = 0;
    vv->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_embed_done(ngx_http_request_t *sr, void *data, ngx_int_t rc)
{
    ngx_ioa_embed_ctx_t  *ctx = data;

    ngx_ioa_embed_parse(sr, ctx);

    /* the parent goes on in its write handler, once this one is done:
     * finalizing it from here, inside the subrequest's own finalization,
     * is not safe */
    sr->parent->write_event_handler = ngx_ioa_embed_resume;
    ngx_ioa_rest_set_embed(sr->parent, ctx);

    return rc;
}


static void
ngx_ioa_embed_resume(ngx_http_request_t *r)
{
    ngx_ioa_embed_ctx_t  *ctx;

    ctx = ngx_ioa_rest_get_embed(r);

    r->write_event_handler = ngx_http_request_empty_handler;

    if (ctx == NULL) {
        return;
    }

    ngx_ioa_rest_set_embed(r, NULL);

    ctx->handler(r, ctx->data, &ctx->result);
}


/* {"data":[{"embedding":[..],"index":i},..],"model":..}: one vector per
 * text, in the order of "index" (in input order when absent) */

static void
ngx_ioa_embed_parse(ngx_http_request_t *sr, ngx_ioa_embed_ctx_t *ctx)
{
    float            *vec;
    double            norm, x;
    size_t            i, k, dim;
    int64_t           at;
    yajl_val          doc, data, item, emb, idx;
    ngx_buf_t        *b;
    ngx_str_t         body;
    ngx_ioa_error_t   err;
    ngx_ioa_embed_result_t  *res;

    res = &ctx->result;
    res->ok = 0;

    if (sr->headers_out.status != NGX_HTTP_OK) {
        ngx_str_set(&res->error, "the endpoint did not answer 200");
        res->status = sr->headers_out.status;
        return;
    }

    b = sr->out ? sr->out->buf : NULL;

    if (b == NULL || b->last == b->pos) {
        ngx_str_set(&res->error, "the endpoint's answer is empty (or "
                                 "larger than subrequest_output_buffer_size)");
        return;
    }

    body.data = b->pos;
    body.len = b->last - b->pos;

    doc = ngx_ioa_json_parse(sr->pool, body.data, body.len, 8, &err);
    data = doc ? ngx_ioa_json_get(doc, "data") : NULL;

    if (data == NULL || !YAJL_IS_ARRAY(data)
        || data->u.array.len != ctx->n || ctx->n == 0)
    {
        ngx_str_set(&res->error, "the answer is not {\"data\":[one "
                                 "embedding per text]}");
        return;
    }

    dim = 0;
    res->vecs = NULL;

    for (i = 0; i < ctx->n; i++) {
        item = data->u.array.values[i];
        emb = ngx_ioa_json_get(item, "embedding");
        idx = ngx_ioa_json_get(item, "index");

        if (emb == NULL || !YAJL_IS_ARRAY(emb) || emb->u.array.len == 0
            || emb->u.array.len > NGX_IOA_EMBED_DIM_MAX
            || (dim && emb->u.array.len != dim))
        {
            ngx_str_set(&res->error, "an embedding is missing or of another "
                                     "length");
            return;
        }

        if (dim == 0) {
            dim = emb->u.array.len;
            res->vecs = ngx_pcalloc(sr->parent->pool,
                                    ctx->n * dim * sizeof(float));
            if (res->vecs == NULL) {
                ngx_str_set(&res->error, "out of memory");
                return;
            }
        }

        at = i;

        if (idx && YAJL_IS_INTEGER(idx)) {
            at = YAJL_GET_INTEGER(idx);

            if (at < 0 || at >= (int64_t) ctx->n) {
                ngx_str_set(&res->error, "an embedding's index is out of "
                                         "range");
                return;
            }
        }

        vec = &res->vecs[at * dim];
        norm = 0;

        for (k = 0; k < dim; k++) {
            if (!YAJL_IS_NUMBER(emb->u.array.values[k])) {
                ngx_str_set(&res->error, "an embedding holds a non-number");
                return;
            }

            x = YAJL_GET_DOUBLE(emb->u.array.values[k]);
            vec[k] = (float) x;
            norm += x * x;
        }

        if (norm <= 0) {
            ngx_str_set(&res->error, "an embedding is all zeros");
            return;
        }

        norm = sqrt(norm);

        for (k = 0; k < dim; k++) {
            vec[k] = (float) (vec[k] / norm);
        }
    }

    res->dim = dim;
    res->n = ctx->n;
    res->ok = 1;
}
