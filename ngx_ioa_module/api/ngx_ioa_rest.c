
/*
 * Copyright (C) ioa authors
 *
 * The REST side: request bodies, JSON answers, Redis calls made on behalf of
 * a request, and the endpoint /health_check.  The endpoints themselves are
 * in files of their own: /teamup in ngx_ioa_teamup.c, the registry's in
 * ngx_ioa_registry.c, /fetch_chat_record in ngx_ioa_record.c.
 *
 * Every answer is JSON, errors included: {"op":"error","code":...,
 * "message":...,"field":...}, the same object an agent gets as an error
 * frame, so one client-side parser handles both.
 *
 * A request waiting for Redis holds one request reference and is finished
 * exactly once, by the reply handler.  Redis always answers or times out
 * (ngx_ioa_redis.c), so no request waits forever; a request cleanup cancels
 * the call if nginx drops the request first (an HTTP/2 stream reset).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"


typedef struct {
    ngx_http_request_t       *request;
    ngx_ioa_redis_req_t      *req;
    ngx_ioa_rest_handler_pt   handler;
    ngx_ioa_body_handler_pt   body_handler;
    void                     *data;        /* per-endpoint state */
    ngx_ioa_identity_t       *identity;    /* who asks (ngx_ioa_auth.c) */
    void                     *embed;       /* an embedding subrequest's
                                              answer (ngx_ioa_embed.c) */
} ngx_ioa_rest_ctx_t;


static ngx_ioa_rest_ctx_t *ngx_ioa_rest_ctx(ngx_http_request_t *r);
static void ngx_ioa_body_read(ngx_http_request_t *r);
static void ngx_ioa_rest_reply(redisReply *reply, void *data);
static void ngx_ioa_rest_cleanup(void *data);
static ngx_int_t ngx_ioa_rest_script(ngx_http_request_t *r,
    ngx_ioa_script_e script, ngx_ioa_rest_handler_pt handler, int nkeys,
    int argc, const char **argv, const size_t *argvlen);
static ngx_int_t ngx_ioa_rest_node_command(ngx_http_request_t *r,
    ngx_ioa_redis_node_t *node, ngx_ioa_rest_handler_pt handler, int argc,
    const char **argv, const size_t *argvlen);


/* request plumbing */

static ngx_ioa_rest_ctx_t *
ngx_ioa_rest_ctx(ngx_http_request_t *r)
{
    ngx_ioa_rest_ctx_t      *ctx;
    ngx_http_cleanup_t      *cln;

    ctx = ngx_ioa_get_ctx(r);
    if (ctx) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_ioa_rest_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_ioa_rest_cleanup;
    cln->data = ctx;

    ctx->request = r;
    ngx_ioa_set_ctx(r, ctx);

    return ctx;
}


/* the handler of an endpoint whose body names the agent it acts as */

ngx_int_t
ngx_ioa_rest_identified(ngx_http_request_t *r, ngx_ioa_identity_t *id,
    ngx_http_handler_pt handler)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->identity = id;

    return handler(r);
}


ngx_ioa_identity_t *
ngx_ioa_rest_identity(ngx_http_request_t *r)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_get_ctx(r);

    return ctx ? ctx->identity : NULL;
}


ngx_int_t
ngx_ioa_read_body(ngx_http_request_t *r, ngx_ioa_body_handler_pt handler)
{
    ngx_int_t            rc;
    ngx_ioa_error_t      err;
    ngx_ioa_rest_ctx_t  *ctx;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);

    /* refused before a byte of it is read */
    if (r->headers_in.content_length_n > (off_t) lcf->max_message_size) {
        ngx_ioa_error_set(&err, "too_big", NULL,
                          "the body is larger than ioa_max_message_size "
                          "(%uz bytes)", lcf->max_message_size);
        return ngx_ioa_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, &err);
    }

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->body_handler = handler;

    /* bodies are small JSON documents: keep them in memory */
    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_ioa_body_read);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_ioa_body_read(ngx_http_request_t *r)
{
    size_t               len;
    u_char              *p;
    ssize_t              n;
    ngx_str_t            body;
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
    ngx_ioa_error_t      err;
    ngx_ioa_rest_ctx_t  *ctx;
    ngx_ioa_loc_conf_t  *lcf;

    ctx = ngx_ioa_get_ctx(r);
    lcf = ngx_ioa_loc_conf(r);

    body.len = 0;
    body.data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        goto done;
    }

    /* a body larger than client_body_buffer_size was written to a temp
     * file; the parts in memory and on disk are counted alike */

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    if (len > lcf->max_message_size) {
        ngx_ioa_error_set(&err, "too_big", NULL,
                          "the body is larger than ioa_max_message_size "
                          "(%uz bytes)", lcf->max_message_size);
        ngx_ioa_finish(r, ngx_ioa_send_error(r,
                                  NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, &err));
        return;
    }

    /* "0\r\n\r\n" alone leaves one buffer that points nowhere: "" it is */
    if (len == 0) {
        goto done;
    }

    b = r->request_body->bufs->buf;

    if (r->request_body->bufs->next == NULL && !b->in_file) {
        body.data = b->pos;
        body.len = len;
        goto done;
    }

    body.data = ngx_pnalloc(r->pool, len ? len : 1);
    if (body.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = body.data;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                              b->file_pos);

            if (n != b->file_last - b->file_pos) {
                ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }

            p += n;
            continue;
        }

        /* a chunked body ends in an empty buffer with no memory at all */
        if (b->last != b->pos) {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    body.len = p - body.data;

done:

    ctx->body_handler(r, &body);
}


/* the first request header of that name, any case; NULL if absent */

ngx_table_elt_t *
ngx_ioa_header_in(ngx_http_request_t *r, const char *name)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


/* parses a JSON body; on failure answers 400 and returns NULL */

yajl_val
ngx_ioa_body_json(ngx_http_request_t *r, ngx_str_t *body)
{
    yajl_val             v;
    ngx_ioa_error_t      err;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);

    v = ngx_ioa_json_parse(r->pool, body->data, body->len,
                           lcf->max_json_depth, &err);

    if (v == NULL) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
    }

    return v;
}


ngx_int_t
ngx_ioa_send_json(ngx_http_request_t *r, ngx_uint_t status, ngx_str_t *json)
{
    ngx_int_t    rc;
    ngx_buf_t   *b;
    ngx_chain_t  out;

    /* a body that is not read must still be discarded for keepalive */
    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = json->len + 1;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (status >= NGX_HTTP_SPECIAL_RESPONSE) {
        /* not an nginx error page: our own JSON body follows */
        r->err_status = 0;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_create_temp_buf(r->pool, json->len + 1);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, json->data, json->len);
    *b->last++ = '\n';
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* 405 with "Allow: <allow>" and err, e.g. "GET, POST" */

ngx_int_t
ngx_ioa_send_not_allowed(ngx_http_request_t *r, const char *allow,
    ngx_ioa_error_t *err)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Allow");
    h->value.data = (u_char *) allow;
    h->value.len = ngx_strlen(allow);

    return ngx_ioa_send_error(r, NGX_HTTP_NOT_ALLOWED, err);
}


ngx_int_t
ngx_ioa_send_error(ngx_http_request_t *r, ngx_uint_t status,
    ngx_ioa_error_t *err)
{
    ngx_str_t  out;

    if (ngx_ioa_error_json(r->pool, err, NULL, &out) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_ioa_send_json(r, status, &out);
}


ngx_int_t
ngx_ioa_send_jbuf(ngx_http_request_t *r, ngx_uint_t status,
    ngx_ioa_jbuf_t *b)
{
    ngx_str_t  out;

    if (ngx_ioa_jbuf_done(b, &out) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_ioa_send_json(r, status, &out);
}


ngx_int_t
ngx_ioa_send_unavailable(ngx_http_request_t *r)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "redis_unavailable", NULL,
                      "the hub cannot reach Redis right now; nothing was "
                      "changed, retry shortly");

    return ngx_ioa_send_retry(r, NGX_HTTP_SERVICE_UNAVAILABLE, 1000, &err);
}


/* an error the client may retry after ms milliseconds (Retry-After has
 * whole seconds: rounded up, at least 1) */

ngx_int_t
ngx_ioa_send_retry(ngx_http_request_t *r, ngx_uint_t status, ngx_msec_t ms,
    ngx_ioa_error_t *err)
{
    u_char           *p;
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);

    if (h && p) {
        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        h->value.data = p;
        h->value.len = ngx_sprintf(p, "%M", ngx_max((ms + 999) / 1000, 1))
                       - p;
    }

    return ngx_ioa_send_error(r, status, err);
}


void
ngx_ioa_finish(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_finalize_request(r, rc);
}


void
ngx_ioa_rest_set_data(ngx_http_request_t *r, void *data)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx) {
        ctx->data = data;
    }
}


void
ngx_ioa_rest_set_embed(ngx_http_request_t *r, void *embed)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx) {
        ctx->embed = embed;
    }
}


void *
ngx_ioa_rest_get_embed(ngx_http_request_t *r)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_get_ctx(r);

    return ctx ? ctx->embed : NULL;
}


void *
ngx_ioa_rest_get_data(ngx_http_request_t *r)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_get_ctx(r);

    return ctx ? ctx->data : NULL;
}


/* Redis on behalf of a request: the sends take a builder (the raw forms
 * below are this file's own) */

static ngx_int_t
ngx_ioa_rest_script(ngx_http_request_t *r, ngx_ioa_script_e script,
    ngx_ioa_rest_handler_pt handler, int nkeys, int argc, const char **argv,
    const size_t *argvlen)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->handler = handler;
    ctx->req = ngx_ioa_redis_script(script, ngx_ioa_rest_reply, ctx, nkeys,
                                    argc, argv, argvlen);

    return ctx->req ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_ioa_rest_script_args(ngx_http_request_t *r, ngx_ioa_script_e script,
    ngx_ioa_rest_handler_pt handler, int nkeys, ngx_ioa_args_t *a)
{
    ngx_int_t  rc;

    rc = a->failed ? NGX_ERROR
                   : ngx_ioa_rest_script(r, script, handler, nkeys,
                                         (int) a->n, a->argv, a->argvlen);

    ngx_ioa_args_free(a);

    return rc;
}


ngx_int_t
ngx_ioa_rest_command_args(ngx_http_request_t *r,
    ngx_ioa_rest_handler_pt handler, ngx_ioa_args_t *a)
{
    return ngx_ioa_rest_node_command_args(r, NULL, handler, a);
}


/* the same to one Redis node, whatever the keys (INFO for /metrics); a
 * NULL node: the node of the command's keys */

ngx_int_t
ngx_ioa_rest_node_command_args(ngx_http_request_t *r,
    ngx_ioa_redis_node_t *node, ngx_ioa_rest_handler_pt handler,
    ngx_ioa_args_t *a)
{
    ngx_int_t  rc;

    rc = a->failed ? NGX_ERROR
                   : ngx_ioa_rest_node_command(r, node, handler, (int) a->n,
                                               a->argv, a->argvlen);

    ngx_ioa_args_free(a);

    return rc;
}


static ngx_int_t
ngx_ioa_rest_node_command(ngx_http_request_t *r, ngx_ioa_redis_node_t *node,
    ngx_ioa_rest_handler_pt handler, int argc, const char **argv,
    const size_t *argvlen)
{
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_rest_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->handler = handler;
    ctx->req = node
               ? ngx_ioa_redis_node_command(node, ngx_ioa_rest_reply, ctx,
                                            argc, argv, argvlen)
               : ngx_ioa_redis_command(ngx_ioa_rest_reply, ctx, argc, argv,
                                       argvlen);

    return ctx->req ? NGX_OK : NGX_DECLINED;
}


static void
ngx_ioa_rest_reply(redisReply *reply, void *data)
{
    ngx_ioa_rest_ctx_t *ctx = data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    ctx->req = NULL;
    r = ctx->request;
    c = r->connection;

    ctx->handler(r, reply);

    /* the handler may have finished the request; like nginx's own
     * upstream code, run what it posted */
    ngx_http_run_posted_requests(c);
}


static void
ngx_ioa_rest_cleanup(void *data)
{
    ngx_ioa_rest_ctx_t *ctx = data;

    if (ctx->req) {
        ngx_ioa_redis_cancel(ctx->req);
        ctx->req = NULL;
    }
}


/* answers a failed Redis call the caller did not read as a script's own
 * answer: 503 when Redis is away, busy or full (with Retry-After), 500
 * otherwise; never Redis' own text (ngx_ioa_redis_refusal) */

ngx_int_t
ngx_ioa_rest_redis_failed(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t       status;
    ngx_msec_t       retry;
    ngx_ioa_error_t  err;

    if (reply == NULL) {
        return ngx_ioa_send_unavailable(r);
    }

    status = ngx_ioa_redis_refusal(reply, &err, &retry);

    return ngx_ioa_send_answer(r, status, retry, &err);
}


/* an error, with Retry-After when it says when to try again */

ngx_int_t
ngx_ioa_send_answer(ngx_http_request_t *r, ngx_uint_t status,
    ngx_msec_t retry, ngx_ioa_error_t *err)
{
    if (retry) {
        return ngx_ioa_send_retry(r, status, retry, err);
    }

    return ngx_ioa_send_error(r, status, err);
}


/* GET|POST /health_check: IoA answers "ok"; we do so only when Redis
 * answers a PING on this worker's command connection within
 * ioa_redis_timeout, so a load balancer stops sending to an instance that
 * cannot do anything useful (a connected but stalled Redis included).  On
 * a Cluster every slot must have a master this worker is connected to:
 * while a failover is under way, part of the rooms cannot be served */

static void ngx_ioa_health_done(ngx_http_request_t *r, redisReply *reply);


ngx_int_t
ngx_ioa_health_handler(ngx_http_request_t *r)
{
    ngx_ioa_args_t  a;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!ngx_ioa_redis_healthy()) {
        return ngx_ioa_send_unavailable(r);
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "PING");

    if (ngx_ioa_rest_command_args(r, ngx_ioa_health_done, &a) != NGX_OK) {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_health_done(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t  ok = ngx_string("\"ok\"");

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &ok));
}
