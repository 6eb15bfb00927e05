
/*
 * Copyright (C) ioa authors
 *
 * The REST side: request bodies, JSON answers, Redis calls made on behalf of
 * a request, and the endpoints /teamup and /health_check.  Registry
 * endpoints are in ngx_ioa_registry.c, /fetch_chat_record in
 * ngx_ioa_record.c.
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

#include <sys/random.h>

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


typedef struct {
    ngx_str_t                 comm_id;
    ngx_str_t                 team_name;
    ngx_uint_t                has_team_name;
    ngx_str_t                 creator;
    yajl_val                  names;       /* the body's agent_names */
    ngx_array_t               members;     /* of ngx_str_t */
    ngx_msec_t                retention;   /* its own, 0: none */
} ngx_ioa_teamup_t;


/* the bytes of a team's name */
#define NGX_IOA_TEAM_NAME_MAX  256


static ngx_ioa_rest_ctx_t *ngx_ioa_rest_ctx(ngx_http_request_t *r);
static void ngx_ioa_body_read(ngx_http_request_t *r);
static void ngx_ioa_rest_reply(redisReply *reply, void *data);
static void ngx_ioa_rest_cleanup(void *data);
static void ngx_ioa_teamup_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_teamup_members_done(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_teamup_room_done(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_teamup_published(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_teamup_retention(ngx_ioa_teamup_t *t, yajl_val v,
    ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_teamup_members(ngx_ioa_teamup_t *t);
static ngx_int_t ngx_ioa_teamup_event(ngx_http_request_t *r,
    ngx_ioa_teamup_t *t, ngx_uint_t event, ngx_str_t *out);


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


/*
 * NGX_OK if the body's name is the caller's own (its token's subject, with
 * the agent scope); otherwise the 403 is sent and the request finished:
 * the caller returns.
 */

ngx_int_t
ngx_ioa_rest_acts_as(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_ioa_error_t      err;
    ngx_ioa_identity_t  *id;

    id = ngx_ioa_rest_identity(r);

    if (id == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_ERROR;
    }

    if (ngx_ioa_auth_allows(id, NGX_IOA_SCOPE_AGENT, name, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return NGX_ERROR;
    }

    return NGX_OK;
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


/* Redis on behalf of a request */

ngx_int_t
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
ngx_ioa_rest_command(ngx_http_request_t *r, ngx_ioa_rest_handler_pt handler,
    int argc, const char **argv, const size_t *argvlen)
{
    return ngx_ioa_rest_node_command(r, NULL, handler, argc, argv, argvlen);
}


/* the same from a builder (ngx_ioa_args_t), which the send releases */

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
    ngx_int_t  rc;

    rc = a->failed ? NGX_ERROR
                   : ngx_ioa_rest_node_command(r, NULL, handler, (int) a->n,
                                               a->argv, a->argvlen);

    ngx_ioa_args_free(a);

    return rc;
}


/* the same to one Redis node, whatever the keys (INFO for /metrics); a
 * NULL node: the node of the command's keys */

ngx_int_t
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


/*
 * POST /teamup's body, in three steps as it has always been checked: the
 * sender (a team is formed by one of its members, as itself: a 403 comes
 * before the rest), the fields, then after retention_s (bounded by
 * configuration, so code) each member's name.
 */

static ngx_ioa_body_field_t  ngx_ioa_teamup_member = {
    NULL, NGX_IOA_BODY_NAME, 0, 0, 0, NULL, NULL,
    "\"agent_names\"[%uz] is not a valid agent name", NGX_IOA_BODY_NONE
};


static ngx_ioa_body_field_t  ngx_ioa_teamup_fields[] = {

    { "sender", NGX_IOA_BODY_NAME, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      "\"sender\" must be a registered agent name",
      offsetof(ngx_ioa_teamup_t, creator) },

    ngx_ioa_body_step,

    { "agent_names", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_REQUIRED, 0, 0,
      NULL, NULL, "\"agent_names\" must be an array of agent names",
      offsetof(ngx_ioa_teamup_t, names) },

    { "team_name", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL,
      0, NGX_IOA_TEAM_NAME_MAX, NULL, NULL,
      "\"team_name\" must be a string of at most "
      ngx_value(NGX_IOA_TEAM_NAME_MAX) " bytes, or null",
      offsetof(ngx_ioa_teamup_t, team_name) },

    ngx_ioa_body_step,

    /* again, now for each member's name */
    { "agent_names", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_REQUIRED, 0, 0,
      NULL, &ngx_ioa_teamup_member, NULL, NGX_IOA_BODY_NONE },

    ngx_ioa_body_null_field
};


/*
 * POST /teamup {"sender":..,"agent_names":[..],"team_name":..}, and ours:
 * "retention_s" (the room's own retention, see ngx_ioa_retention.c)
 *
 * Three steps: record the room in every member's room set (refused as a
 * whole if any name is unknown: IoA drops unknown names silently, which
 * leaves a caller talking to a team it does not have), create the room, and
 * publish a teamup event so that workers with members online start reading
 * the room at once.
 */

ngx_int_t
ngx_ioa_teamup_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_teamup_body);
}


static void
ngx_ioa_teamup_body(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char                rnd[16], *hex;
    ngx_msec_t            retry;
    size_t                i, n;
    yajl_val              doc;
    ngx_str_t            *m;
    ngx_ioa_error_t       err;
    ngx_ioa_teamup_t     *t;
    ngx_ioa_args_t        a;
    ngx_ioa_rest_ctx_t   *ctx;
    ngx_ioa_main_conf_t  *mcf;

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    ctx = ngx_ioa_get_ctx(r);
    mcf = ngx_ioa_main_conf();

    t = ngx_pcalloc(r->pool, sizeof(ngx_ioa_teamup_t));
    if (t == NULL
        || ngx_array_init(&t->members, r->pool, 8, sizeof(ngx_str_t))
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->data = t;

    if (ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 0, t, &err) != NGX_OK) {
        goto invalid;
    }

    if (ngx_ioa_rest_acts_as(r, &t->creator) != NGX_OK) {
        return;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 1, t, &err) != NGX_OK
        || ngx_ioa_teamup_retention(t, ngx_ioa_json_get(doc, "retention_s"),
                                    &err)
           != NGX_OK
        || ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 2, t, &err)
           != NGX_OK)
    {
        goto invalid;
    }

    /* a null team_name is none */
    t->has_team_name = (t->team_name.data != NULL);

    if (ngx_ioa_teamup_members(t) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (t->members.nelts > ngx_ioa_main_conf()->max_room_members) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ROOM_MEMBERS, 1);
        ngx_ioa_error_set(&err, "room_too_large", "agent_names",
                          "a team of %ui members, sender included; "
                          "ioa_max_room_members allows %ui",
                          t->members.nelts,
                          ngx_ioa_main_conf()->max_room_members);
        goto invalid;
    }

    /* ioa_limit_teamup_rate: a valid teamup is charged, nothing is made
     * when it is over */
    if (ngx_ioa_limit_teamup(&t->creator, &retry, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_retry(r, NGX_HTTP_TOO_MANY_REQUESTS,
                                             retry, &err));
        return;
    }

    /* comm_id: 128 random bits in hex, like IoA's uuid4().hex */

    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rnd[6] = (rnd[6] & 0x0f) | 0x40;
    rnd[8] = (rnd[8] & 0x3f) | 0x80;

    hex = ngx_pnalloc(r->pool, 32);
    if (hex == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_hex_dump(hex, rnd, sizeof(rnd));
    t->comm_id.data = hex;
    t->comm_id.len = 32;

    n = t->members.nelts;

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_AGENTS);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &t->comm_id);
    ngx_ioa_args_fmt(&a, "%ui", mcf->max_agent_rooms);

    m = t->members.elts;

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &m[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_TEAMUP_MEMBERS,
                                 ngx_ioa_teamup_members_done, 1, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }

    return;

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


/* members: agent_names then the sender, without duplicates, in IoA's order */

static ngx_int_t
ngx_ioa_teamup_members(ngx_ioa_teamup_t *t)
{
    size_t      i, j;
    ngx_str_t   s, *m;

    for (i = 0; i <= t->names->u.array.len; i++) {

        if (i < t->names->u.array.len) {
            (void) ngx_ioa_json_string(t->names->u.array.values[i], &s);

        } else {
            s = t->creator;
        }

        m = t->members.elts;

        for (j = 0; j < t->members.nelts; j++) {
            if (m[j].len == s.len && ngx_strncmp(m[j].data, s.data, s.len) == 0)
            {
                break;
            }
        }

        if (j < t->members.nelts) {
            continue;
        }

        m = ngx_array_push(&t->members);
        if (m == NULL) {
            return NGX_ERROR;
        }

        *m = s;
    }

    return NGX_OK;
}


/*
 * "retention_s": how long the room is kept after its last envelope, in
 * seconds.  A room may ask for less than ioa_room_retention, never for
 * more: the operator's limit bounds what Redis holds, so a longer one is
 * refused (naming the limit) rather than cut silently, which would leave
 * the caller believing in a retention it does not have.
 */

static ngx_int_t
ngx_ioa_teamup_retention(ngx_ioa_teamup_t *t, yajl_val v,
    ngx_ioa_error_t *err)
{
    int64_t               s;
    ngx_msec_t            max;
    ngx_ioa_main_conf_t  *mcf;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_OK;
    }

    mcf = ngx_ioa_main_conf();

    max = mcf->room_retention ? mcf->room_retention / 1000
                              : NGX_IOA_ROOM_RETENTION_MAX_S;

    s = YAJL_IS_INTEGER(v) ? YAJL_GET_INTEGER(v) : 0;

    if (s < 1 || (uint64_t) s > max) {
        ngx_ioa_error_set(err, "invalid_request", "retention_s",
                          "\"retention_s\" must be an integer from 1 to %M "
                          "(seconds)%s, or null", max,
                          mcf->room_retention ? ": ioa_room_retention allows "
                                                "no more"
                                              : "");
        return NGX_ERROR;
    }

    t->retention = (ngx_msec_t) s * 1000;

    return NGX_OK;
}


static void
ngx_ioa_teamup_members_done(ngx_http_request_t *r, redisReply *reply)
{
    size_t               i, n;
    ngx_str_t            code, text, *m;
    ngx_ioa_args_t       a;
    ngx_ioa_error_t      err;
    ngx_ioa_teamup_t    *t;
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_get_ctx(r);
    t = ctx->data;

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {

        if (reply && code.len == 13
            && ngx_strncmp(code.data, "UNKNOWN_AGENT", 13) == 0)
        {
            ngx_ioa_error_set(&err, "unknown_agent", "agent_names",
                              "%V; register them with /register first",
                              &text);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND,
                                                 &err));
            return;
        }

        if (reply && code.len == 12
            && ngx_strncmp(code.data, "TOOMANYROOMS", 12) == 0)
        {
            ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_AGENT_ROOMS,
                             1);
            ngx_ioa_error_set(&err, "too_many_rooms", "agent_names",
                              "%V (ioa_max_agent_rooms); nothing was "
                              "created", &text);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT,
                                                 &err));
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    n = t->members.nelts;

    ngx_ioa_args_init(&a);
    ngx_ioa_key_room(&a, &t->comm_id, NGX_IOA_ROOM_META);
    ngx_ioa_key_room(&a, &t->comm_id, NGX_IOA_ROOM_MEMBERS);
    ngx_ioa_args_str(&a, &t->comm_id);
    ngx_ioa_args_buf(&a, t->team_name.data ? t->team_name.data
                                           : (u_char *) "",
                     t->team_name.len);
    ngx_ioa_args_str(&a, &t->creator);
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());

    /* no retention of its own: an empty argument */
    if (t->retention) {
        ngx_ioa_args_fmt(&a, "%M", t->retention);

    } else {
        ngx_ioa_args_cstr(&a, "");
    }

    m = t->members.elts;

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &m[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_CREATE,
                                 ngx_ioa_teamup_room_done, 2, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_teamup_room_done(ngx_http_request_t *r, redisReply *reply)
{
    int64_t               ms;
    ngx_str_t             code, text, event;
    ngx_ioa_args_t        a;
    ngx_ioa_teamup_t     *t;
    ngx_ioa_rest_ctx_t   *ctx;
    ngx_ioa_main_conf_t  *mcf;

    ctx = ngx_ioa_get_ctx(r);
    t = ctx->data;
    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    /* the room index, for /fetch_chat_record without a comm_id and the
     * retention sweep, and for a room with a retention of its own the due
     * index (ngx_ioa_retention.c); not waited for, the event below is on
     * the same connection after them */

    ms = ngx_ioa_now_ms();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "ZADD");
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMLIST);
    ngx_ioa_args_int(&a, ms);
    ngx_ioa_args_str(&a, &t->comm_id);

    (void) ngx_ioa_redis_command_args(NULL, NULL, &a);

    if (t->retention) {
        ngx_ioa_args_init(&a);
        ngx_ioa_args_cstr(&a, "ZADD");
        ngx_ioa_key(&a, NGX_IOA_KEY_ROOMDUE);
        ngx_ioa_args_int(&a, ms + (int64_t) t->retention);
        ngx_ioa_args_str(&a, &t->comm_id);

        (void) ngx_ioa_redis_command_args(NULL, NULL, &a);
    }

    if (ngx_ioa_teamup_event(r, t, 1, &event) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* on a Cluster a shard channel, on the registry's node: the event
     * crosses no other node (and is in order after the ZADD, same node) */
    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, ngx_ioa_redis_cluster() ? "SPUBLISH" : "PUBLISH");
    ngx_ioa_args_str(&a, &mcf->events_channel);
    ngx_ioa_args_str(&a, &event);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_teamup_published, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_teamup_published(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t            out;
    ngx_ioa_teamup_t    *t;
    ngx_ioa_rest_ctx_t  *ctx;

    ctx = ngx_ioa_get_ctx(r);
    t = ctx->data;

    /* the room exists even if the event was lost: members' workers find it
     * in their room sets on the next resubscribe, so answer success */

    if (ngx_ioa_teamup_event(r, t, 0, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


/* {"comm_id":..,"agent_names":[..],"team_name":..}: the answer to /teamup
 * and, with the creator, the teamup event */

static ngx_int_t
ngx_ioa_teamup_event(ngx_http_request_t *r, ngx_ioa_teamup_t *t,
    ngx_uint_t event, ngx_str_t *out)
{
    ngx_uint_t            i;
    ngx_str_t            *m;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &t->comm_id);
    ngx_ioa_jbuf_literal(&b, ",\"agent_names\":[");

    m = t->members.elts;

    for (i = 0; i < t->members.nelts; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_str(&b, &m[i]);
    }

    ngx_ioa_jbuf_literal(&b, "],\"team_name\":");

    if (t->has_team_name) {
        ngx_ioa_jbuf_str(&b, &t->team_name);

    } else {
        ngx_ioa_jbuf_literal(&b, "null");
    }

    if (event) {
        ngx_ioa_jbuf_literal(&b, ",\"sender\":");
        ngx_ioa_jbuf_str(&b, &t->creator);

    } else if (t->retention || mcf->room_retention) {
        /* ours, where a retention applies: the room's own, or else the
         * deployment's (IoA's three fields alone where none does) */
        ngx_ioa_jbuf_literal(&b, ",\"retention_s\":");
        ngx_ioa_jbuf_int(&b, (int64_t) (t->retention ? t->retention
                                                    : mcf->room_retention)
                             / 1000);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_jbuf_done(&b, out);
}


