
/*
 * Copyright (C) ioa authors
 *
 * A call of one of the hub's own REST endpoints from inside a request: the
 * protocol facades (ngx_ioa_mcp.c for MCP, ngx_ioa_a2a.c for A2A) answer
 * with what /launch_goal, /goals/{id}, ... answer, so each of their
 * operations is exactly its endpoint: the token's scopes, the limits, the
 * validation and its error texts, the Redis work, and every later change
 * to them.  Calling the endpoints' C functions instead would have meant a
 * second entry into each of them and a second place where scopes are
 * decided.
 *
 * A call is an in-memory subrequest to the ioa_api location (its prefix is
 * the facade's api=, "" for "location / { ioa_api; }") that carries the
 * caller's headers, its Authorization among them, and a body of our own.
 * It costs a little memory from the request's pool and nothing else.
 *
 * A step (send a call, come back in the step given) replaces flags: the
 * subrequest's post handler records the status and the body, makes the
 * parent's write handler the resume, and posts an event that runs the
 * connection's posted requests.  The event is needed because an endpoint
 * may finish in a Redis reply handler, where nginx would not run posted
 * requests of this connection by itself.
 *
 * The facade's per-request state is the request's REST data
 * (ngx_ioa_rest_set_data) and begins with its ngx_ioa_call_t: that is how
 * the resume finds the step to run.  An answer is at most the ioa_api
 * location's subrequest_output_buffer_size (conf.d/ioa.conf: 1m); a larger
 * one is cut off, and the facade says so.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


static ngx_int_t ngx_ioa_call_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc);
static void ngx_ioa_call_wake(ngx_event_t *ev);
static void ngx_ioa_call_cleanup(void *data);
static void ngx_ioa_call_resume(ngx_http_request_t *r);


static ngx_str_t  ngx_ioa_call_post_method = ngx_string("POST");


/*
 * next(r, data) runs once the endpoint answered, with call->status and
 * call->body; data is the request's REST data, whose first member is call.
 */

ngx_int_t
ngx_ioa_call(ngx_http_request_t *r, ngx_ioa_call_t *call, ngx_uint_t post,
    ngx_str_t *path, const char *args, ngx_str_t *body, ngx_ioa_call_pt next)
{
    u_char                      *p;
    ngx_str_t                    uri, a;
    ngx_buf_t                   *b;
    ngx_chain_t                 *cl;
    ngx_http_request_t          *sr;
    ngx_http_cleanup_t          *cln;
    ngx_http_request_body_t     *rb;
    ngx_http_post_subrequest_t  *ps;

    uri.len = call->api.len + path->len;
    uri.data = ngx_pnalloc(r->pool, uri.len);
    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));
    rb = ngx_pcalloc(r->pool, sizeof(ngx_http_request_body_t));

    if (uri.data == NULL || ps == NULL || rb == NULL) {
        return NGX_ERROR;
    }

    /* api= is unset (data NULL) for "location / { ioa_api; }": memcpy()
     * must not be given NULL, even for no bytes */
    p = uri.data;

    if (call->api.len) {
        p = ngx_cpymem(p, call->api.data, call->api.len);
    }

    ngx_memcpy(p, path->data, path->len);

    if (body && body->len) {
        b = ngx_calloc_buf(r->pool);
        cl = ngx_alloc_chain_link(r->pool);

        if (b == NULL || cl == NULL) {
            return NGX_ERROR;
        }

        b->pos = body->data;
        b->last = body->data + body->len;
        b->start = b->pos;
        b->end = b->last;
        b->memory = 1;
        b->last_buf = 1;

        cl->buf = b;
        cl->next = NULL;
        rb->bufs = cl;
    }

    if (call->wake.handler == NULL) {
        cln = ngx_http_cleanup_add(r, 0);
        if (cln == NULL) {
            return NGX_ERROR;
        }

        cln->handler = ngx_ioa_call_cleanup;
        cln->data = call;

        call->wake.handler = ngx_ioa_call_wake;
        call->wake.log = r->connection->log;
    }

    ps->handler = ngx_ioa_call_done;
    ps->data = call;

    a.data = (u_char *) args;
    a.len = args ? ngx_strlen(args) : 0;

    if (ngx_http_subrequest(r, &uri, args ? &a : NULL, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            |NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (post) {
        sr->method = NGX_HTTP_POST;
        sr->method_name = ngx_ioa_call_post_method;
    }

    /* its own body, not the facade's message: a subrequest otherwise
     * shares its parent's */
    sr->request_body = rb;
    sr->headers_in.content_length_n = body ? (off_t) body->len : 0;

    call->sr = sr;
    call->next = next;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_call_done(ngx_http_request_t *sr, void *data, ngx_int_t rc)
{
    ngx_ioa_call_t *call = data;

    ngx_buf_t  *b;

    /* a subrequest may be finalized more than once (an error page after
     * the error): the first time counts */
    if (call->sr != sr) {
        return rc;
    }

    call->sr = NULL;
    call->status = sr->headers_out.status;

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE && call->status == 0) {
        call->status = rc;
    }

    b = sr->out ? sr->out->buf : NULL;

    if (b && b->last > b->pos) {
        call->body.data = b->pos;
        call->body.len = b->last - b->pos;

    } else {
        ngx_str_set(&call->body, "");
    }

    /* the parent goes on in its write handler once this one is done
     * (from inside the subrequest's own finalization it is not safe);
     * the event runs the connection's posted requests, which nginx does
     * not when an endpoint finishes in a Redis reply handler */
    sr->parent->write_event_handler = ngx_ioa_call_resume;

    call->wake.data = sr->parent->connection;
    ngx_post_event(&call->wake, &ngx_posted_events);

    /* an endpoint that failed (an answer too large for the buffer) ends
     * its subrequest, not the facade's request: the facade says what
     * happened */
    return rc == NGX_ERROR ? NGX_OK : rc;
}


static void
ngx_ioa_call_wake(ngx_event_t *ev)
{
    ngx_http_run_posted_requests(ev->data);
}


static void
ngx_ioa_call_cleanup(void *data)
{
    ngx_ioa_call_t *call = data;

    if (call->wake.posted) {
        ngx_delete_posted_event(&call->wake);
    }
}


static void
ngx_ioa_call_resume(ngx_http_request_t *r)
{
    void             *data;
    ngx_ioa_call_t   *call;
    ngx_ioa_call_pt   next;

    data = ngx_ioa_rest_get_data(r);
    call = data;

    if (call == NULL || call->sr || call->next == NULL) {
        return;
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    next = call->next;
    call->next = NULL;

    next(r, data);
}


/* the endpoint's answer as JSON; NULL if it is none */

yajl_val
ngx_ioa_call_answer(ngx_http_request_t *r, ngx_ioa_call_t *call)
{
    ngx_ioa_error_t      err;
    ngx_ioa_loc_conf_t  *lcf;

    if (call->body.len == 0) {
        return NULL;
    }

    lcf = ngx_ioa_loc_conf(r);

    /* envelopes nest up to ioa_max_json_depth inside a record */
    return ngx_ioa_json_parse(r->pool, call->body.data, call->body.len,
                              lcf->max_json_depth + 8, &err);
}


/* the api= parameter of a facade's directive: the ioa_api prefix */

char *
ngx_ioa_call_api_conf(ngx_str_t *value, ngx_str_t *api)
{
    api->data = value->data + 4;
    api->len = value->len - 4;

    while (api->len && api->data[api->len - 1] == '/') {
        api->len--;
    }

    if (value->len == 4 || value->data[4] != '/') {
        return "needs api= the prefix of the ioa_api location, such as "
               "api=/ioa (or api=/ for \"location /\")";
    }

    return NGX_CONF_OK;
}
