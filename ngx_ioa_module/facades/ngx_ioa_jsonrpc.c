
/*
 * Copyright (C) ioa authors
 *
 * JSON-RPC 2.0, as the protocol facades speak it (MCP in ngx_ioa_mcp.c, A2A
 * in ngx_ioa_a2a.c): one message per HTTP request, read here into its id,
 * method and params, and answers written with the request's id.
 *
 * What is refused, and how: a body that is not JSON is -32700; a batch, a
 * message without "jsonrpc": "2.0", an id that is neither a string nor an
 * integer, a request without a method are -32600 (these with HTTP 400 on
 * MCP, 200 on A2A: see ngx_ioa_jsonrpc_parse()); params that are not an
 * object are -32602 (HTTP 200 on both, the request was understood).  Neither MCP (since 2025-06-18) nor A2A has batches, so a
 * batch is refused whole, never half run.
 *
 * The id is kept as the JSON text it came as, so it goes back byte for byte
 * ("7" stays an integer, "\"7\"" a string), and "null" when there is none.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/*
 * NGX_OK: rpc is the message (a request, a notification, or a response to
 * a request of ours).  NGX_DECLINED: it is refused, and the error answer
 * has been sent with whatever id could be read, with HTTP status
 * "refused": the transports differ there (MCP's Streamable HTTP answers a
 * message it cannot take with an HTTP error, 400; A2A carries every
 * JSON-RPC error in a 200, as its TCK checks).
 */

ngx_int_t
ngx_ioa_jsonrpc_parse(ngx_http_request_t *r, ngx_str_t *body,
    ngx_uint_t refused, ngx_ioa_jsonrpc_t *rpc)
{
    yajl_val             msg, v, id;
    ngx_str_t            s;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_error_t      err;
    ngx_ioa_loc_conf_t  *lcf;

    ngx_memzero(rpc, sizeof(ngx_ioa_jsonrpc_t));
    ngx_str_set(&rpc->id, "null");

    lcf = ngx_ioa_loc_conf(r);

    msg = ngx_ioa_json_parse(r->pool, body->data, body->len,
                             lcf->max_json_depth, &err);

    if (msg == NULL) {
        s.data = err.text;
        s.len = err.len;
        ngx_ioa_jsonrpc_error(r, &rpc->id, refused,
                              NGX_IOA_JSONRPC_PARSE_ERROR, &s);
        return NGX_DECLINED;
    }

    if (YAJL_IS_ARRAY(msg)) {
        ngx_ioa_jsonrpc_refuse(r, &rpc->id, refused,
                               NGX_IOA_JSONRPC_INVALID_REQUEST,
                               "batches are not supported: send one "
                               "JSON-RPC message per request");
        return NGX_DECLINED;
    }

    v = ngx_ioa_json_get(msg, "jsonrpc");

    if (!YAJL_IS_OBJECT(msg) || ngx_ioa_json_string(v, &s) != NGX_OK
        || s.len != 3 || ngx_strncmp(s.data, "2.0", 3) != 0)
    {
        ngx_ioa_jsonrpc_refuse(r, &rpc->id, refused,
                               NGX_IOA_JSONRPC_INVALID_REQUEST,
                               "not a JSON-RPC 2.0 message");
        return NGX_DECLINED;
    }

    id = ngx_ioa_json_get(msg, "id");

    if (id) {
        if (!YAJL_IS_STRING(id) && !YAJL_IS_INTEGER(id)) {
            ngx_ioa_jsonrpc_refuse(r, &rpc->id, refused,
                                   NGX_IOA_JSONRPC_INVALID_REQUEST,
                                   "\"id\" must be a string or an integer");
            return NGX_DECLINED;
        }

        if (ngx_ioa_jbuf_init(&b, r->pool, 64) != NGX_OK) {
            return NGX_ERROR;
        }

        ngx_ioa_jbuf_val(&b, id);

        if (ngx_ioa_jbuf_done(&b, &rpc->id) != NGX_OK) {
            return NGX_ERROR;
        }

    } else {
        rpc->notification = 1;
    }

    if (ngx_ioa_json_string(ngx_ioa_json_get(msg, "method"), &rpc->method)
        != NGX_OK)
    {
        if (id && (ngx_ioa_json_get(msg, "result")
                   || ngx_ioa_json_get(msg, "error")))
        {
            rpc->response = 1;
            return NGX_OK;
        }

        ngx_ioa_jsonrpc_refuse(r, &rpc->id, refused,
                               NGX_IOA_JSONRPC_INVALID_REQUEST,
                               "a request needs a \"method\"");
        return NGX_DECLINED;
    }

    rpc->params = ngx_ioa_json_get(msg, "params");

    if (rpc->params && !YAJL_IS_OBJECT(rpc->params)) {
        ngx_ioa_jsonrpc_refuse(r, &rpc->id, NGX_HTTP_OK,
                               NGX_IOA_JSONRPC_INVALID_PARAMS,
                               "\"params\" must be an object");
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* {"jsonrpc":"2.0","id":<id>,"result":<result>} or "error":<error>, as
 * text in the request's pool: an answer, or one event of a stream */

ngx_int_t
ngx_ioa_jsonrpc_message(ngx_pool_t *pool, ngx_str_t *id, const char *member,
    ngx_str_t *value, ngx_str_t *out)
{
    ngx_ioa_jbuf_t  b;

    if (ngx_ioa_jbuf_init(&b, pool, value->len + id->len + 48) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    ngx_ioa_jbuf_raw(&b, id->data, id->len);
    ngx_ioa_jbuf_literal(&b, ",\"");
    ngx_ioa_jbuf_raw(&b, (u_char *) member, ngx_strlen(member));
    ngx_ioa_jbuf_literal(&b, "\":");
    ngx_ioa_jbuf_raw(&b, value->data, value->len);
    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_jbuf_done(&b, out);
}


/* an error object: {"code":<code>,"message":<message>} */

ngx_int_t
ngx_ioa_jsonrpc_error_object(ngx_pool_t *pool, ngx_int_t code,
    ngx_str_t *message, ngx_str_t *out)
{
    ngx_ioa_jbuf_t  b;

    if (ngx_ioa_jbuf_init(&b, pool, message->len * 2 + 48) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"code\":");
    ngx_ioa_jbuf_int(&b, code);
    ngx_ioa_jbuf_literal(&b, ",\"message\":");
    ngx_ioa_jbuf_str(&b, message);
    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_jbuf_done(&b, out);
}


/* the answer to a request, and the end of it */

void
ngx_ioa_jsonrpc_result(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_jbuf_t *result)
{
    ngx_str_t  res, out;

    if (ngx_ioa_jbuf_done(result, &res) != NGX_OK
        || ngx_ioa_jsonrpc_message(r->pool, id, "result", &res, &out)
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


void
ngx_ioa_jsonrpc_error(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_int_t code, ngx_str_t *message)
{
    ngx_str_t  e, out;

    if (ngx_ioa_jsonrpc_error_object(r->pool, code, message, &e) != NGX_OK
        || ngx_ioa_jsonrpc_message(r->pool, id, "error", &e, &out) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, status, &out));
}


void
ngx_ioa_jsonrpc_refuse(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_int_t code, const char *message)
{
    ngx_str_t  s;

    s.data = (u_char *) message;
    s.len = ngx_strlen(message);

    ngx_ioa_jsonrpc_error(r, id, status, code, &s);
}


/*
 * A refusal from a content handler before the body is read: the answer is
 * sent, and the request finalized, by the refusal itself (ngx_ioa_finish),
 * while the handler still returns to the content phase, so the reference
 * taken here is the one that final ngx_http_finalize_request(r, NGX_DONE)
 * gives back.  The body is discarded first, so that a pipelined request
 * after it is read as a request.  The handler returns what this returns.
 */

ngx_int_t
ngx_ioa_jsonrpc_refuse_early(ngx_http_request_t *r, ngx_uint_t status,
    ngx_int_t code, ngx_str_t *message)
{
    ngx_str_t  id;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&id, "null");

    r->main->count++;
    ngx_ioa_jsonrpc_error(r, &id, status, code, message);

    return NGX_DONE;
}


/* an Origin ngx_ioa_origin_check() refused: 403 */

ngx_int_t
ngx_ioa_jsonrpc_refuse_origin(ngx_http_request_t *r, ngx_str_t *origin)
{
    ngx_str_t  s;

    s.data = ngx_pnalloc(r->pool, origin->len + 128);
    if (s.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    s.len = ngx_snprintf(s.data, origin->len + 128,
                         "a page of origin \"%V\" may not call this "
                         "endpoint: it is not in ioa_cors_origins", origin)
            - s.data;

    return ngx_ioa_jsonrpc_refuse_early(r, NGX_HTTP_FORBIDDEN,
                                        NGX_IOA_JSONRPC_INVALID_REQUEST, &s);
}


/* 202, no body: a notification or a response was taken */

ngx_int_t
ngx_ioa_jsonrpc_accepted(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    r->headers_out.status = NGX_HTTP_ACCEPTED;
    r->headers_out.content_length_n = 0;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_send_special(r, NGX_HTTP_LAST);
}
