
/*
 * Copyright (C) ioa authors
 *
 * WebSocket connections (RFC 6455) inside nginx's event loop.
 *
 * The handshake is an ordinary nginx request: its checks answer 400 or 426
 * with a JSON body naming what is wrong, and the 101 goes through nginx's
 * header filters.  Then, from a posted event once nginx is done with the
 * request, the request is freed (and logged, as a 101) together with its
 * pool and the client header buffers, and this file owns the connection's
 * read and write events: what a WebSocket needs lives in the connection's
 * own pool (ngx_ioa_ws_t, the name, links), and the connection is closed
 * with ngx_http_close_connection(), which also ends TLS.  The request's
 * pool alone was two 4 KiB blocks per agent, most of it nginx's own
 * bookkeeping for a request that is over; an idle agent now costs about
 * 1.5 KB of worker memory (bench/idle.sh).
 *
 * Reading: bytes go into one read buffer per worker and are decoded by
 * ngx_ioa_ws_frame.c at once, so between reads a connection keeps only an
 * incomplete frame header (at most 14 bytes); bytes a client pipelined
 * behind its handshake are kept aside until the first read.  A data frame's
 * payload is copied into a message buffer that is allocated at its final
 * size when the frame header arrives, after the size limit was checked, so
 * an oversized message costs nothing.  Fragments are appended and validated
 * as UTF-8 as they arrive, and control frames may come between them.  A
 * compressed message (permessage-deflate, ngx_ioa_ws_deflate.c) is inflated
 * instead as its frames arrive, into the same message buffer, which then
 * grows in steps up to the limit: its frame headers say nothing about its
 * final size.
 *
 * Writing: outgoing frames are queued as references to shared, already
 * framed messages (a room broadcast is framed once per worker) or, for our
 * own small frames, as owned copies.  Queueing posts the write event rather
 * than writing, so everything queued during one event-loop turn leaves in
 * one writev; with TCP_NODELAY set this keeps latency low without sending a
 * packet per message.  A connection that agreed to permessage-deflate queues
 * the message's compressed frame instead, itself built once and shared.
 * Writes use c->send_chain, which is nginx's TLS-aware output path, so wss
 * works with nginx's own "listen ... ssl".  The queue is bounded in bytes
 * (ioa_send_queue_limit): a client that does not read is closed with 1008
 * and resumes from the last id it saw.
 *
 * Closing: a close frame is answered with the same code (or 1000).  When the
 * server closes (protocol error, limit, shutdown with 1001, the token's
 * expiry with 1008: ngx_ioa_expiry.c), it sends its close frame, shuts down
 * the write side and waits briefly for the peer's close or EOF, so the close
 * frame is not destroyed by a reset.  A close for a slow reader, a limit or
 * a shutdown drops what is still queued (the client resumes by id); an
 * expiry's close goes out behind it.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"
#include "ngx_ioa_ws_deflate.h"


#define NGX_IOA_WS_READ_BUF      16384
#define NGX_IOA_WS_LINGER        2000
/* recycled queue items kept per connection */
#define NGX_IOA_WS_FREE_KEEP     16
/* a message buffer up to this size is kept for the next message */
#define NGX_IOA_WS_MSG_KEEP      1024

/*
 * The worker's read buffer.  Payload bytes are copied out (into the message
 * being assembled or the control frame buffer) before the handler returns,
 * and nothing reached from frame processing reads another connection, so
 * one buffer serves every connection of the worker.
 */
static u_char  ngx_ioa_ws_rbuf[NGX_IOA_WS_READ_BUF];


typedef struct ngx_ioa_ws_out_s  ngx_ioa_ws_out_t;

struct ngx_ioa_ws_out_s {
    ngx_chain_t               cl;
    ngx_buf_t                 buf;
    ngx_ioa_msg_t            *msg;     /* shared, or NULL for owned data */
    size_t                    size;    /* bytes counted in out_bytes */
    ngx_ioa_ws_out_t         *next;
};


typedef struct {
    ngx_ioa_client_t          client;  /* must be first */
    ngx_http_request_t       *request;
    ngx_connection_t         *connection;

    u_char                   *start;   /* the worker's read buffer, */
    u_char                   *pos;     /* only while reading */
    u_char                   *last;
    u_char                   *end;

    u_char                   *pending; /* bytes behind the handshake */
    size_t                    pending_len;
    ngx_msec_t                send_timeout;
    u_char                    hdr[14]; /* incomplete frame header */
    u_char                    hdr_len;

    ngx_ioa_ws_frame_t        frame;
    uint64_t                  frame_got;
    ngx_uint_t                in_frame;

    u_char                   *msg;     /* message being assembled */
    size_t                    msg_len;
    size_t                    msg_cap;
    ngx_uint_t                msg_opcode;
    ngx_uint_t                skipping;  /* the message is over the size
                                            limit: read past, not kept */
    uint32_t                  utf8;

    u_char                    ctl[125];

    ngx_ioa_ws_deflate_t     *deflate;  /* permessage-deflate agreed */

    ngx_ioa_ws_out_t         *out;
    ngx_ioa_ws_out_t        **out_tail;
    ngx_ioa_ws_out_t         *free;
    ngx_uint_t                nfree;
    size_t                    out_bytes;

    ngx_event_t               ping;
    ngx_event_t               done;    /* deferred finalization */
    ngx_uint_t                alive;

    unsigned                  close_sent:1;
    unsigned                  closing:1;
    unsigned                  finalized:1;
    unsigned                  attached:1;
    unsigned                  detached:1;  /* the request is freed */
    unsigned                  compressed:1;  /* the message being read */
} ngx_ioa_ws_t;


static ngx_int_t ngx_ioa_ws_check(ngx_http_request_t *r, ngx_str_t *key,
    ngx_ioa_error_t *err, ngx_uint_t *status);
static ngx_int_t ngx_ioa_ws_has_token(ngx_table_elt_t *h, const char *token);
static ngx_int_t ngx_ioa_ws_accept(ngx_http_request_t *r, ngx_str_t *key);
static ngx_int_t ngx_ioa_ws_extensions(ngx_http_request_t *r,
    ngx_ioa_ws_t *ws);
static ngx_int_t ngx_ioa_ws_options(ngx_http_request_t *r, ngx_ioa_ws_t *ws,
    ngx_ioa_error_t *err);
static void ngx_ioa_ws_read_handler(ngx_event_t *rev);
static void ngx_ioa_ws_write_handler(ngx_event_t *wev);
static ngx_int_t ngx_ioa_ws_process(ngx_ioa_ws_t *ws);
static ngx_int_t ngx_ioa_ws_frame_start(ngx_ioa_ws_t *ws);
static ngx_int_t ngx_ioa_ws_frame_done(ngx_ioa_ws_t *ws);
static ngx_int_t ngx_ioa_ws_inflate_more(ngx_ioa_ws_t *ws, u_char *in,
    size_t n, ngx_uint_t last);
static ngx_int_t ngx_ioa_ws_control(ngx_ioa_ws_t *ws);
static void ngx_ioa_ws_ping_handler(ngx_event_t *ev);
static ngx_int_t ngx_ioa_ws_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_ws_send_text(ngx_ioa_client_t *cl, ngx_str_t *s);
static ngx_int_t ngx_ioa_ws_send_frame(ngx_ioa_ws_t *ws, ngx_uint_t opcode,
    u_char *data, size_t len);
static void ngx_ioa_ws_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason);
static ngx_ioa_ws_out_t *ngx_ioa_ws_out_alloc(ngx_ioa_ws_t *ws,
    size_t size);
static void ngx_ioa_ws_out_free(ngx_ioa_ws_t *ws, ngx_ioa_ws_out_t *o);
static void ngx_ioa_ws_schedule_write(ngx_ioa_ws_t *ws);
static ngx_int_t ngx_ioa_ws_flush(ngx_ioa_ws_t *ws);
static void ngx_ioa_ws_finalize(ngx_ioa_ws_t *ws);
static void ngx_ioa_ws_done_handler(ngx_event_t *ev);
static void ngx_ioa_ws_cleanup(void *data);
static void ngx_ioa_ws_detach_handler(ngx_event_t *ev);


static size_t ngx_ioa_ws_queued(ngx_ioa_client_t *cl);


static ngx_ioa_transport_t  ngx_ioa_ws_transport = {
    ngx_ioa_ws_send,
    ngx_ioa_ws_send_text,
    ngx_ioa_ws_close,
    NULL,
    ngx_ioa_ws_queued,
    NGX_IOA_VIA_WEBSOCKET
};


ngx_int_t
ngx_ioa_ws_handler(ngx_http_request_t *r, ngx_str_t *name,
    ngx_ioa_client_kind_e kind, ngx_ioa_identity_t *id)
{
    size_t                     n;
    ngx_int_t                  rc;
    ngx_str_t                  key;
    ngx_uint_t                 status;
    ngx_ioa_ws_t              *ws;
    ngx_ioa_error_t            err;
    ngx_connection_t          *c;
    ngx_pool_cleanup_t        *cln;
    ngx_ioa_loc_conf_t        *lcf;
    ngx_http_core_loc_conf_t  *clcf;
    u_char                     why[NGX_IOA_NAME_WHY_LEN];

    c = r->connection;
    lcf = ngx_ioa_loc_conf(r);

    if (ngx_ioa_ws_check(r, &key, &err, &status) != NGX_OK) {

        if (status == NGX_HTTP_UPGRADE_REQUIRED) {
            ngx_table_elt_t  *h;

            h = ngx_list_push(&r->headers_out.headers);
            if (h == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            h->hash = 1;
            ngx_str_set(&h->key, "Upgrade");
            ngx_str_set(&h->value, "websocket");

            h = ngx_list_push(&r->headers_out.headers);
            if (h == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            h->hash = 1;
            ngx_str_set(&h->key, "Sec-WebSocket-Version");
            ngx_str_set(&h->value, "13");
        }

        return ngx_ioa_send_error(r, status, &err);
    }

    if (kind == NGX_IOA_CLIENT_AGENT
        && ngx_ioa_name_check(name, why) != NGX_OK)
    {
        ngx_ioa_error_set(&err, "invalid_name", "agent_name",
                          "agent name \"%V\" is not a name: %s", name, why);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    ws = ngx_pcalloc(c->pool, sizeof(ngx_ioa_ws_t));
    if (ws == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ws->client.kind = kind;
    ws->client.transport = &ngx_ioa_ws_transport;
    ws->client.data = ws;
    ws->client.pool = c->pool;
    ws->client.log = c->log;
    ws->client.lcf = lcf;
    ws->client.echo = 1;
    ngx_queue_init(&ws->client.links);

    if (name->len) {
        ws->client.name.data = ngx_pstrdup(c->pool, name);
        if (ws->client.name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ws->client.name.len = name->len;
    }

    if (ngx_ioa_ws_options(r, ws, &err) != NGX_OK) {
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    /* ioa_limit_conn: counted until the connection's pool goes */
    rc = ngx_ioa_limit_conn(c->pool,
                            ngx_ioa_limit_conn_who(kind, &ws->client.name,
                                                   id),
                            &ws->client, &err);

    if (rc == NGX_DECLINED) {
        return ngx_ioa_send_error(r, NGX_HTTP_TOO_MANY_REQUESTS, &err);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ws->request = r;
    ws->connection = c;
    ws->out_tail = &ws->out;

    ngx_ioa_set_ctx(r, ws);

    /* the location's configuration outlives the request */
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    ws->send_timeout = clcf->send_timeout;

    /* frames the client sent right behind its handshake are already in
     * nginx's header buffer, which goes with the request */

    if (r->header_in && r->header_in->pos < r->header_in->last) {
        n = r->header_in->last - r->header_in->pos;

        if (n > NGX_IOA_WS_READ_BUF - sizeof(ws->hdr)) {
            n = NGX_IOA_WS_READ_BUF - sizeof(ws->hdr);
        }

        ws->pending = ngx_alloc(n, c->log);
        if (ws->pending == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(ws->pending, r->header_in->pos, n);
        ws->pending_len = n;
        r->header_in->pos += n;
    }

    cln = ngx_pool_cleanup_add(c->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_ioa_ws_cleanup;
    cln->data = ws;

    if (ngx_ioa_ws_accept(r, &key) != NGX_OK
        || ngx_ioa_ws_extensions(r, ws) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_SWITCHING_PROTOCOLS;
    ngx_str_set(&r->headers_out.status_line, "101 Switching Protocols");
    r->headers_out.content_length_n = -1;
    r->keepalive = 0;
    r->header_only = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        return rc;
    }

    (void) ngx_http_send_special(r, NGX_HTTP_FLUSH);

    /* from here on the connection is ours; the extra reference keeps the
     * request, and with it the pool and the TLS state, until we finalize */

    r->main->count++;

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    /* the request is freed once this handler has returned and nginx is
     * done with it (a posted event); until then nginx's handlers stay */
    ws->done.handler = ngx_ioa_ws_detach_handler;
    ws->done.data = ws;
    ws->done.log = c->log;
    ngx_post_event(&ws->done, &ngx_posted_events);

    /* lets nginx's graceful shutdown reach us: it calls the read handler
     * of every idle connection with c->close set, and we answer 1001 */
    c->idle = 1;

    (void) ngx_tcp_nodelay(c);

    ws->ping.handler = ngx_ioa_ws_ping_handler;
    ws->ping.data = ws;
    ws->ping.log = c->log;
    ws->ping.cancelable = 1;
    ws->alive = 1;

    if (lcf->ping_interval) {
        ngx_add_timer(&ws->ping, lcf->ping_interval);
    }

    if (kind == NGX_IOA_CLIENT_AGENT || kind == NGX_IOA_CLIENT_OBSERVER) {
        if (ngx_ioa_client_attach(&ws->client) != NGX_OK) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_INTERNAL,
                             "cannot attach the client");
            return NGX_DONE;
        }

        ws->attached = 1;

        /* a token's "exp" ends the connection (ngx_ioa_expiry.c) */
        if (ngx_ioa_expiry_start(&ws->client, id) != NGX_OK) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_INTERNAL,
                             "out of memory");
            return NGX_DONE;
        }
    }

    return NGX_DONE;
}


/*
 * The request's pool (two 4 KiB blocks: the request, its header lists,
 * variables, module contexts) and the client header buffers are given back;
 * the connection keeps only its own small pool and ws.  What nginx did not
 * manage to send of the 101 is moved into our own queue first.
 */

static void
ngx_ioa_ws_detach_handler(ngx_event_t *ev)
{
    ngx_ioa_ws_t *ws = ev->data;

    size_t                   size;
    u_char                  *p;
    ngx_chain_t             *cl, *ln;
    ngx_connection_t        *c;
    ngx_ioa_ws_out_t        *o;
    ngx_http_request_t      *r;
    ngx_http_connection_t   *hc;

    r = ws->request;
    c = ws->connection;

    if (ws->finalized) {
        return;
    }

    /* the rest of the 101, if the socket did not take it all */

    if (r->out) {
        (void) ngx_http_output_filter(r, NULL);
    }

    if (r->out) {
        size = 0;

        for (cl = r->out; cl; cl = cl->next) {
            size += ngx_buf_size(cl->buf);
        }

        o = ngx_ioa_ws_out_alloc(ws, size);
        if (o == NULL) {
            ngx_ioa_ws_finalize(ws);
            return;
        }

        p = o->buf.start;

        for (cl = r->out; cl; cl = cl->next) {
            p = ngx_cpymem(p, cl->buf->pos, ngx_buf_size(cl->buf));
        }

        o->buf.pos = o->buf.start;
        o->buf.last = p;
        o->size = size;
        o->next = ws->out;
        ws->out = o;

        if (ws->out_tail == &ws->out) {
            ws->out_tail = &o->next;
        }

        ws->out_bytes += size;
        r->out = NULL;
    }

    hc = r->http_connection;

    r->main->count--;
    ngx_http_free_request(r, 0);     /* logs it: the request line is in the
                                        header buffers, freed after */

    /* the header buffers, as ngx_http_set_keepalive() frees them */

    for (cl = hc->free; cl; /* void */) {
        ln = cl;
        cl = cl->next;
        ngx_pfree(c->pool, ln->buf->start);
    }

    hc->free = NULL;

    for (cl = hc->busy; cl; /* void */) {
        ln = cl;
        cl = cl->next;
        ngx_pfree(c->pool, ln->buf->start);
    }

    hc->busy = NULL;
    hc->nbusy = 0;

    if (c->buffer) {
        (void) ngx_pfree(c->pool, c->buffer->start);
        c->buffer->start = NULL;
        c->buffer->pos = NULL;
        c->buffer->last = NULL;
        c->buffer->end = NULL;
        c->buffer = NULL;
    }

    c->destroyed = 0;
    c->data = ws;
    c->log->action = "in WebSocket";
    ws->request = NULL;
    ws->detached = 1;

    c->read->handler = ngx_ioa_ws_read_handler;
    c->write->handler = ngx_ioa_ws_write_handler;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_ioa_ws_finalize(ws);
        return;
    }

    if (ws->pending_len || c->read->ready) {
        ngx_post_event(c->read, &ngx_posted_events);
    }

    if (ws->out) {
        ngx_ioa_ws_schedule_write(ws);

        if (!c->write->ready) {
            (void) ngx_ioa_ws_flush(ws);
        }
    }
}


static ngx_int_t
ngx_ioa_ws_check(ngx_http_request_t *r, ngx_str_t *key,
    ngx_ioa_error_t *err, ngx_uint_t *status)
{
    u_char            decoded[32];
    ngx_str_t         d;
    ngx_table_elt_t  *h;

    *status = NGX_HTTP_BAD_REQUEST;

    if (r->http_version != NGX_HTTP_VERSION_11) {
        ngx_ioa_error_set(err, "bad_handshake", NULL,
                          "a WebSocket handshake needs HTTP/1.1; "
                          "this request came over another version");
        return NGX_ERROR;
    }

    if (!(r->method & NGX_HTTP_GET)) {
        ngx_ioa_error_set(err, "bad_handshake", NULL,
                          "a WebSocket handshake must be a GET request");
        return NGX_ERROR;
    }

    if (ngx_ioa_ws_has_token(ngx_ioa_header_in(r, "Upgrade"), "websocket")
        != NGX_OK)
    {
        *status = NGX_HTTP_UPGRADE_REQUIRED;
        ngx_ioa_error_set(err, "upgrade_required", "Upgrade",
                          "this endpoint speaks WebSocket only: send "
                          "\"Upgrade: websocket\"");
        return NGX_ERROR;
    }

    if (ngx_ioa_ws_has_token(ngx_ioa_header_in(r, "Connection"), "upgrade")
        != NGX_OK)
    {
        ngx_ioa_error_set(err, "bad_handshake", "Connection",
                          "the \"Connection\" header must include "
                          "\"Upgrade\"");
        return NGX_ERROR;
    }

    h = ngx_ioa_header_in(r, "Sec-WebSocket-Version");

    if (h == NULL || h->value.len != 2
        || ngx_strncmp(h->value.data, "13", 2) != 0)
    {
        *status = NGX_HTTP_UPGRADE_REQUIRED;
        ngx_ioa_error_set(err, "unsupported_version",
                          "Sec-WebSocket-Version",
                          "only WebSocket version 13 (RFC 6455) is "
                          "supported");
        return NGX_ERROR;
    }

    h = ngx_ioa_header_in(r, "Sec-WebSocket-Key");

    d.data = decoded;

    if (h == NULL || h->value.len != 24
        || ngx_decode_base64(&d, &h->value) != NGX_OK
        || d.len != 16)
    {
        ngx_ioa_error_set(err, "bad_handshake", "Sec-WebSocket-Key",
                          "\"Sec-WebSocket-Key\" must be 16 bytes in "
                          "base64");
        return NGX_ERROR;
    }

    *key = h->value;

    return NGX_OK;
}


/* a comma-separated header list contains the token, in any case */

static ngx_int_t
ngx_ioa_ws_has_token(ngx_table_elt_t *h, const char *token)
{
    size_t   len;
    u_char  *p, *last, *s;

    if (h == NULL) {
        return NGX_DECLINED;
    }

    len = ngx_strlen(token);
    p = h->value.data;
    last = p + h->value.len;

    while (p < last) {

        while (p < last && (*p == ' ' || *p == '\t' || *p == ',')) {
            p++;
        }

        s = p;

        while (p < last && *p != ',' && *p != ' ' && *p != '\t') {
            p++;
        }

        if ((size_t) (p - s) == len
            && ngx_strncasecmp(s, (u_char *) token, len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_ioa_ws_accept(ngx_http_request_t *r, ngx_str_t *key)
{
    u_char            hash[20];
    ngx_str_t         src;
    ngx_sha1_t        sha1;
    ngx_table_elt_t  *h;

    static u_char  guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

    ngx_sha1_init(&sha1);
    ngx_sha1_update(&sha1, key->data, key->len);
    ngx_sha1_update(&sha1, guid, sizeof(guid) - 1);
    ngx_sha1_final(hash, &sha1);

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Upgrade");
    ngx_str_set(&h->value, "websocket");

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Sec-WebSocket-Accept");

    h->value.data = ngx_pnalloc(r->pool, ngx_base64_encoded_length(20));
    if (h->value.data == NULL) {
        return NGX_ERROR;
    }

    src.data = hash;
    src.len = 20;

    ngx_encode_base64(&h->value, &src);

    return NGX_OK;
}


/* Sec-WebSocket-Extensions: permessage-deflate, where ioa_ws_deflate is on
 * and the client offers it; nothing otherwise */

static ngx_int_t
ngx_ioa_ws_extensions(ngx_http_request_t *r, ngx_ioa_ws_t *ws)
{
    ngx_int_t              rc;
    ngx_str_t              value;
    ngx_table_elt_t       *h;
    ngx_ioa_ws_deflate_t   d;

    if (!ws->client.lcf->ws_deflate) {
        return NGX_OK;
    }

    rc = ngx_ioa_ws_deflate_negotiate(r, &d, &value);

    if (rc == NGX_DECLINED) {
        return NGX_OK;
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    /* the connection's pool: the request's goes after the 101 */
    ws->deflate = ngx_palloc(ws->connection->pool,
                             sizeof(ngx_ioa_ws_deflate_t));
    if (ws->deflate == NULL) {
        return NGX_ERROR;
    }

    *ws->deflate = d;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Sec-WebSocket-Extensions");
    h->value = value;

    return NGX_OK;
}


/*
 * Connection options, as query arguments:
 *
 *   echo=0        do not deliver the agent's own envelopes back to it
 *                 (IoA clients act on the echo, so it is on by default);
 *                 an {"op":"ack"} frame with the id is sent instead
 *   since=<id>    resume every room after this Stream id
 *   resume=<comm_id>:<id>,...   resume these rooms after these ids
 *   wait_resume=1 the first frame will be {"op":"resume",...}: rooms are
 *                 loaded only once it has been read, so it is exact
 *
 * The same resume request can come as the first frame instead (see
 * ngx_ioa_client.c), for clients that cannot set query arguments.
 */

static ngx_int_t
ngx_ioa_ws_options(ngx_http_request_t *r, ngx_ioa_ws_t *ws,
    ngx_ioa_error_t *err)
{
    ngx_str_t  v;

    if (ngx_http_arg(r, (u_char *) "echo", 4, &v) == NGX_OK) {
        if (v.len == 1 && (v.data[0] == '0' || v.data[0] == '1')) {
            ws->client.echo = (v.data[0] == '1');
            ws->client.acks = !ws->client.echo;

        } else {
            ngx_ioa_error_set(err, "bad_option", "echo",
                              "\"echo\" must be 0 or 1");
            return NGX_ERROR;
        }
    }

    if (ngx_http_arg(r, (u_char *) "wait_resume", 11, &v) == NGX_OK) {
        if (v.len == 1 && (v.data[0] == '0' || v.data[0] == '1')) {
            ws->client.wait_resume = (v.data[0] == '1');

        } else {
            ngx_ioa_error_set(err, "bad_option", "wait_resume",
                              "\"wait_resume\" must be 0 or 1");
            return NGX_ERROR;
        }
    }

    if (ngx_http_arg(r, (u_char *) "since", 5, &v) == NGX_OK) {
        if (ngx_ioa_parse_sid(v.data, v.len, &ws->client.since) != NGX_OK) {
            ngx_ioa_error_set(err, "bad_option", "since",
                              "\"since\" must be a Stream id such as "
                              "1700000000000-0");
            return NGX_ERROR;
        }

        ws->client.has_since = 1;
    }

    if (ngx_http_arg(r, (u_char *) "resume", 6, &v) == NGX_OK) {
        if (ngx_ioa_client_parse_resume(&ws->client, &v, err) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static void
ngx_ioa_ws_read_handler(ngx_event_t *rev)
{
    size_t               left;
    ssize_t              n;
    ngx_ioa_ws_t        *ws;
    ngx_connection_t    *c;

    c = rev->data;
    ws = c->data;

    if (ws == NULL || ws->finalized) {
        return;
    }

    if (c->close) {
        /* nginx is reloading or shutting down gracefully */
        c->close = 0;
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_GOING_AWAY,
                         "server shutting down, reconnect and resume");

        /*
         * ngx_close_idle_connections() calls us from the worker's cycle,
         * outside the event loop: a write posted now would wait for the
         * next event or timer, so the close frame is written at once
         */

        if (!ws->finalized && c->write->posted) {
            ngx_delete_posted_event(c->write);
            (void) ngx_ioa_ws_flush(ws);
        }

        return;
    }

    if (rev->timedout) {
        /* the lingering wait after our close frame is over */
        ngx_ioa_ws_finalize(ws);
        return;
    }

    ws->start = ngx_ioa_ws_rbuf;
    ws->end = ngx_ioa_ws_rbuf + NGX_IOA_WS_READ_BUF;
    ws->pos = ws->start;
    ws->last = ngx_cpymem(ws->start, ws->hdr, ws->hdr_len);
    ws->hdr_len = 0;

    if (ws->pending) {
        ws->last = ngx_cpymem(ws->last, ws->pending, ws->pending_len);
        ngx_free(ws->pending);
        ws->pending = NULL;
        ws->pending_len = 0;
    }

    for ( ;; ) {

        if (ws->pos < ws->last && !ws->closing) {
            if (ngx_ioa_ws_process(ws) != NGX_OK) {
                return;
            }
        }

        if (ws->pos == ws->last) {
            ws->pos = ws->start;
            ws->last = ws->start;

        } else if (ws->last == ws->end) {
            /* an incomplete frame header at the end of the buffer */
            ws->last = ngx_movemem(ws->start, ws->pos, ws->last - ws->pos);
            ws->pos = ws->start;
        }

        if (!rev->ready) {
            break;
        }

        n = c->recv(c, ws->last, ws->end - ws->last);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n > 0) {
            ngx_ioa_stat_add(NGX_IOA_STAT_RECEIVED_BYTES
                             + NGX_IOA_VIA_WEBSOCKET, n);
        }

        if (n == 0 || n == NGX_ERROR) {
            /* the peer went away; nothing to say to it */
            c->error = (n == NGX_ERROR);
            ngx_ioa_ws_finalize(ws);
            return;
        }

        ws->alive = 1;

        if (ws->closing) {
            /* after our close frame, everything but EOF is discarded */
            ws->pos = ws->start;
            ws->last = ws->start;
            continue;
        }

        ws->last += n;
    }

    /* an incomplete frame header waits in the connection for the rest */

    left = ws->last - ws->pos;

    if (left && !ws->closing) {
        if (left > sizeof(ws->hdr)) {
            ngx_log_error(NGX_LOG_ALERT, c->log, 0,
                          "ioa: %uz bytes left in the read buffer", left);
            left = sizeof(ws->hdr);
        }

        ngx_memcpy(ws->hdr, ws->pos, left);
        ws->hdr_len = (u_char) left;
    }

    ws->pos = NULL;
    ws->last = NULL;

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_ioa_ws_finalize(ws);
    }
}


/* consumes as many frames as the buffer holds; NGX_ERROR means the
 * connection is closing and must not be touched further */

static ngx_int_t
ngx_ioa_ws_process(ngx_ioa_ws_t *ws)
{
    size_t       n;
    u_char      *dst;
    uint64_t     left;
    ngx_int_t    rc;
    ngx_uint_t   code;
    const char  *reason;

    while (ws->pos < ws->last && !ws->closing) {

        if (!ws->in_frame) {
            /* a data frame of any length is read: one over the limit is
             * skipped, not refused (ngx_ioa_ws_frame_start) */
            rc = ngx_ioa_ws_frame_parse(ws->pos, ws->last,
                                        NGX_MAX_SIZE_T_VALUE / 2,
                                        ws->deflate != NULL, &ws->frame,
                                        &code, &reason);

            if (rc == NGX_AGAIN) {
                return NGX_OK;
            }

            if (rc == NGX_ERROR) {
                ngx_ioa_ws_close(&ws->client, code, reason);
                return NGX_ERROR;
            }

            ws->pos += ws->frame.header_len;
            ws->in_frame = 1;
            ws->frame_got = 0;

            if (ngx_ioa_ws_frame_start(ws) != NGX_OK) {
                return NGX_ERROR;
            }
        }

        left = ws->frame.payload_len - ws->frame_got;
        n = ws->last - ws->pos;

        if ((uint64_t) n > left) {
            n = (size_t) left;
        }

        if (n && ws->skipping && ws->frame.opcode < NGX_IOA_WS_CLOSE) {
            /* the oversized message's bytes go by unread */
            ws->pos += n;
            ws->frame_got += n;

        } else if (n && ws->compressed
                   && ws->frame.opcode < NGX_IOA_WS_CLOSE)
        {
            /* unmasked where they are (the worker's read buffer: these
             * bytes are not read again) and inflated into the message */

            ngx_ioa_ws_unmask(ws->pos, n, ws->frame.mask, ws->frame_got);

            if (ngx_ioa_ws_inflate_more(ws, ws->pos, n, 0) != NGX_OK) {
                return NGX_ERROR;
            }

            ws->pos += n;
            ws->frame_got += n;

        } else if (n) {
            if (ws->frame.opcode >= NGX_IOA_WS_CLOSE) {
                dst = ws->ctl + ws->frame_got;

            } else {
                dst = ws->msg + ws->msg_len;
                ws->msg_len += n;
            }

            ngx_memcpy(dst, ws->pos, n);
            ngx_ioa_ws_unmask(dst, n, ws->frame.mask, ws->frame_got);

            ws->pos += n;
            ws->frame_got += n;

            if (ws->frame.opcode < NGX_IOA_WS_CLOSE
                && ws->msg_opcode == NGX_IOA_WS_TEXT
                && ngx_ioa_utf8_validate(dst, n, &ws->utf8) != NGX_OK)
            {
                ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_BAD_DATA,
                                 "text message is not valid UTF-8");
                return NGX_ERROR;
            }
        }

        if (ws->frame_got < ws->frame.payload_len) {
            return NGX_OK;
        }

        ws->in_frame = 0;

        if (ngx_ioa_ws_frame_done(ws) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a frame header was accepted: check it against the message in progress and
 * make room for its payload */

static ngx_int_t
ngx_ioa_ws_frame_start(ngx_ioa_ws_t *ws)
{
    size_t            need;
    u_char           *p;
    ngx_uint_t        op;
    ngx_ioa_error_t   err;

    op = ws->frame.opcode;

    if (op >= NGX_IOA_WS_CLOSE) {
        return NGX_OK;
    }

    if (op == NGX_IOA_WS_CONT) {
        if (ws->msg_opcode == 0) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_PROTOCOL_ERROR,
                             "continuation frame without a message");
            return NGX_ERROR;
        }

    } else {
        if (ws->msg_opcode != 0) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_PROTOCOL_ERROR,
                             "new message before the previous one ended");
            return NGX_ERROR;
        }

        if (op == NGX_IOA_WS_BINARY) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_UNSUPPORTED,
                             "binary messages are not accepted; send "
                             "envelopes as text");
            return NGX_ERROR;
        }

        ws->msg_opcode = op;
        ws->msg_len = 0;
        ws->utf8 = 0;
        ws->compressed = ws->frame.rsv1;
    }

    if (ws->skipping) {
        return NGX_OK;                  /* more of a skipped message */
    }

    if (ws->compressed) {
        /*
         * The inflater makes room as the message inflates.  Only its
         * compressed size is known here; one that could not inflate to
         * ioa_max_message_size or less is refused before it is read.  It
         * cannot be read past as a plain one is: what it holds is known
         * only by inflating it, so it ends the connection.
         */

        ws->deflate->in += ws->frame.payload_len;

        if (ws->deflate->in
            > ngx_ioa_ws_deflate_in_max(ws->client.lcf->max_message_size))
        {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_TOO_BIG,
                             "compressed message larger than "
                             "ioa_max_message_size");
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (ws->frame.payload_len
        > (uint64_t) (ws->client.lcf->max_message_size - ws->msg_len))
    {
        /*
         * Too big: the client hears it at once, and the rest of the
         * message, across its fragments, is read past without being kept,
         * so the connection stays usable and nothing of it is buffered.
         * What was kept of its earlier fragments is dropped.
         */

        ngx_ioa_error_set(&err, "too_big", NULL,
                          "the message is larger than ioa_max_message_size "
                          "(%uz bytes); it was not stored",
                          ws->client.lcf->max_message_size);
        ngx_ioa_client_error(&ws->client, &err, NULL);

        ws->skipping = 1;
        ws->msg_len = 0;

        return ws->finalized || ws->closing ? NGX_ERROR : NGX_OK;
    }

    need = ws->msg_len + (size_t) ws->frame.payload_len;

    if (need > ws->msg_cap) {
        /* a single-frame message is allocated at exactly its size; a
         * fragmented one grows frame by frame, never past the limit */

        p = ngx_alloc(need ? need : 1, ws->connection->log);
        if (p == NULL) {
            ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_INTERNAL,
                             "out of memory");
            return NGX_ERROR;
        }

        if (ws->msg) {
            ngx_memcpy(p, ws->msg, ws->msg_len);
            ngx_free(ws->msg);
        }

        ws->msg = p;
        ws->msg_cap = need;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ws_frame_done(ngx_ioa_ws_t *ws)
{
    if (ws->frame.opcode >= NGX_IOA_WS_CLOSE) {
        return ngx_ioa_ws_control(ws);
    }

    if (!ws->frame.fin) {
        return NGX_OK;
    }

    if (ws->compressed) {
        /* the sender's 00 00 ff ff, then the message is complete */

        if (ngx_ioa_ws_inflate_more(ws, NULL, 0, 1) != NGX_OK) {
            return NGX_ERROR;
        }

        ws->compressed = 0;
        ngx_ioa_ws_inflate_done(ws->deflate);
    }

    if (ws->skipping) {
        /* the end of a message that was too big: the next one is new */
        ws->skipping = 0;
        ws->msg_opcode = 0;
        ws->msg_len = 0;
        ws->utf8 = 0;
        return NGX_OK;
    }

    if (ws->utf8 != 0) {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_BAD_DATA,
                         "text message ends inside a UTF-8 sequence");
        return NGX_ERROR;
    }

    ws->msg_opcode = 0;

    if (ws->client.kind == NGX_IOA_CLIENT_AGENT) {
        ngx_ioa_client_post(&ws->client, ws->msg, ws->msg_len);

    } else if (ws->client.expiry) {
        /* an observer sends nothing but fresh tokens */
        ngx_ioa_expiry_frame(&ws->client, ws->msg, ws->msg_len);
    }

    /* keep a small buffer for the next message, give big ones back */

    if (ws->msg_cap > NGX_IOA_WS_MSG_KEEP && ws->msg) {
        ngx_free(ws->msg);
        ws->msg = NULL;
        ws->msg_cap = 0;
    }

    ws->msg_len = 0;

    return ws->finalized || ws->closing ? NGX_ERROR : NGX_OK;
}


/* inflates what came of a compressed message and checks it as UTF-8 */

static ngx_int_t
ngx_ioa_ws_inflate_more(ngx_ioa_ws_t *ws, u_char *in, size_t n,
    ngx_uint_t last)
{
    size_t       from;
    ngx_uint_t   code;
    const char  *reason;

    from = ws->msg_len;

    if (ngx_ioa_ws_inflate(ws->deflate, in, n, last, &ws->msg, &ws->msg_len,
                           &ws->msg_cap, ws->client.lcf->max_message_size,
                           ws->connection->log, &code, &reason)
        != NGX_OK)
    {
        ngx_ioa_ws_close(&ws->client, code, reason);
        return NGX_ERROR;
    }

    if (ws->msg_opcode == NGX_IOA_WS_TEXT
        && ngx_ioa_utf8_validate(ws->msg + from, ws->msg_len - from,
                                 &ws->utf8)
           != NGX_OK)
    {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_BAD_DATA,
                         "text message is not valid UTF-8");
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ws_control(ngx_ioa_ws_t *ws)
{
    size_t       len;
    uint32_t     utf8;
    ngx_uint_t   code;

    len = (size_t) ws->frame.payload_len;

    switch (ws->frame.opcode) {

    case NGX_IOA_WS_PING:
        return ngx_ioa_ws_send_frame(ws, NGX_IOA_WS_PONG, ws->ctl, len);

    case NGX_IOA_WS_PONG:
        ws->alive = 1;
        return NGX_OK;

    default: /* NGX_IOA_WS_CLOSE */
        break;
    }

    if (len == 0) {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_NORMAL, NULL);
        return NGX_ERROR;
    }

    if (len == 1) {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_PROTOCOL_ERROR,
                         "close frame with a one-byte payload");
        return NGX_ERROR;
    }

    code = (ws->ctl[0] << 8) | ws->ctl[1];

    /* codes a peer may send (RFC 6455 7.4): 1000-1003, 1007-1011 and the
     * ranges for libraries and applications */

    if (code < 1000
        || (code >= 1004 && code <= 1006)
        || (code >= 1012 && code < 3000)
        || code >= 5000)
    {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_PROTOCOL_ERROR,
                         "invalid close code");
        return NGX_ERROR;
    }

    utf8 = 0;

    if (ngx_ioa_utf8_validate(ws->ctl + 2, len - 2, &utf8) != NGX_OK
        || utf8 != 0)
    {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_BAD_DATA,
                         "close reason is not valid UTF-8");
        return NGX_ERROR;
    }

    ngx_ioa_ws_close(&ws->client, code, NULL);

    return NGX_ERROR;
}


static void
ngx_ioa_ws_ping_handler(ngx_event_t *ev)
{
    ngx_ioa_ws_t *ws = ev->data;

    if (ws->finalized || ws->closing) {
        return;
    }

    if (!ws->alive) {
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_INTERNAL,
                         "keepalive ping timeout");
        return;
    }

    ws->alive = 0;

    if (ngx_ioa_ws_send_frame(ws, NGX_IOA_WS_PING, (u_char *) "ioa", 3)
        != NGX_OK)
    {
        return;
    }

    ngx_add_timer(&ws->ping, ws->client.lcf->ping_interval);
}


static size_t
ngx_ioa_ws_queued(ngx_ioa_client_t *cl)
{
    ngx_ioa_ws_t *ws = cl->data;

    return ws->out_bytes;
}


static ngx_int_t
ngx_ioa_ws_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m)
{
    ngx_ioa_ws_t *ws = cl->data;

    size_t             len;
    u_char            *frame;
    ngx_ioa_ws_out_t  *o;

    if (ws->closing || ws->finalized) {
        return NGX_ERROR;
    }

    /* either way a frame that lives as long as m, which o references */

    if (ws->deflate) {
        ngx_ioa_ws_deflate_frame(m, ws->deflate->server_bits, &frame, &len);

    } else {
        frame = m->ws;
        len = m->ws_len;
    }

    if (ws->out_bytes + len > cl->lcf->send_queue_limit) {
        ngx_log_error(NGX_LOG_INFO, ws->connection->log, 0,
                      "ioa: agent \"%V\" reads too slowly, closing",
                      &cl->name);

        ngx_ioa_stat_add(NGX_IOA_STAT_OVERFLOWS + NGX_IOA_VIA_WEBSOCKET, 1);
        ngx_ioa_ws_close(cl, NGX_IOA_WS_POLICY,
                         "send queue limit exceeded; reconnect and resume "
                         "from the last id you received");
        return NGX_ERROR;
    }

    o = ngx_ioa_ws_out_alloc(ws, 0);
    if (o == NULL) {
        ngx_ioa_ws_close(cl, NGX_IOA_WS_INTERNAL, "out of memory");
        return NGX_ERROR;
    }

    m->refs++;
    o->msg = m;
    o->size = len;
    o->buf.start = frame;
    o->buf.pos = frame;
    o->buf.last = frame + len;

    *ws->out_tail = o;
    ws->out_tail = &o->next;
    ws->out_bytes += len;

    ngx_ioa_ws_schedule_write(ws);

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ws_send_text(ngx_ioa_client_t *cl, ngx_str_t *s)
{
    return ngx_ioa_ws_send_frame(cl->data, NGX_IOA_WS_TEXT, s->data, s->len);
}


static ngx_int_t
ngx_ioa_ws_send_frame(ngx_ioa_ws_t *ws, ngx_uint_t opcode, u_char *data,
    size_t len)
{
    size_t             size;
    u_char            *p;
    ngx_ioa_ws_out_t  *o;

    if (ws->finalized || (ws->closing && opcode != NGX_IOA_WS_CLOSE)) {
        return NGX_ERROR;
    }

    size = ngx_ioa_ws_frame_header_len(len) + len;

    if (opcode != NGX_IOA_WS_CLOSE
        && ws->out_bytes + size > ws->client.lcf->send_queue_limit)
    {
        ngx_ioa_stat_add(NGX_IOA_STAT_OVERFLOWS + NGX_IOA_VIA_WEBSOCKET, 1);
        ngx_ioa_ws_close(&ws->client, NGX_IOA_WS_POLICY,
                         "send queue limit exceeded; reconnect and resume "
                         "from the last id you received");
        return NGX_ERROR;
    }

    o = ngx_ioa_ws_out_alloc(ws, size);
    if (o == NULL) {
        ngx_ioa_ws_finalize(ws);
        return NGX_ERROR;
    }

    p = o->buf.start;
    p = ngx_ioa_ws_frame_header(p, opcode, len);
    p = ngx_cpymem(p, data, len);

    o->buf.pos = o->buf.start;
    o->buf.last = p;
    o->size = size;

    *ws->out_tail = o;
    ws->out_tail = &o->next;
    ws->out_bytes += size;

    ngx_ioa_ws_schedule_write(ws);

    return NGX_OK;
}


/*
 * Starts the closing handshake: drops whatever is still queued (a client
 * being closed for reading too slowly resumes by id anyway), sends the close
 * frame, then lingers until the peer closes too.
 */

static void
ngx_ioa_ws_close(ngx_ioa_client_t *cl, ngx_uint_t code, const char *reason)
{
    ngx_ioa_ws_t *ws = cl->data;

    u_char             payload[125];
    size_t             len;
    ngx_ioa_ws_out_t  *o;

    if (ws->finalized) {
        return;
    }

    if (ws->closing) {
        /* the peer answered our close frame */
        ngx_ioa_ws_finalize(ws);
        return;
    }

    ws->closing = 1;

    if (code != NGX_IOA_WS_NORMAL && code < 3000) {
        ngx_log_error(NGX_LOG_INFO, ws->connection->log, 0,
                      "ioa: closing WebSocket of \"%V\" with %ui: %s",
                      &cl->name, code, reason ? reason : "");
    }

    if (ws->attached) {
        ws->attached = 0;
        ngx_ioa_client_detach(cl);
    }

    /* a connection whose token expired keeps its queue: what the hub
     * accepted and sent before the end reaches the client before the close
     * frame (bounded by ioa_send_queue_limit like any queue) */

    if ((code == NGX_IOA_WS_POLICY && !cl->expired)
        || code == NGX_IOA_WS_TOO_BIG
        || code == NGX_IOA_WS_INTERNAL || code == NGX_IOA_WS_GOING_AWAY)
    {
        while (ws->out) {
            o = ws->out;

            /* a partly written frame must be finished, or the stream of
             * frames is corrupt */
            if (o->buf.pos != o->buf.start) {
                break;
            }

            ws->out = o->next;
            ws->out_bytes -= o->size;
            ngx_ioa_ws_out_free(ws, o);
        }

        if (ws->out == NULL) {
            ws->out_tail = &ws->out;

        } else {
            /* keep the partly written frame, drop everything behind it */
            while (ws->out->next) {
                o = ws->out->next;
                ws->out->next = o->next;
                ws->out_bytes -= o->size;
                ngx_ioa_ws_out_free(ws, o);
            }

            ws->out_tail = &ws->out->next;
        }
    }

    payload[0] = (u_char) (code >> 8);
    payload[1] = (u_char) code;
    len = 2;

    if (reason) {
        len += ngx_min(ngx_strlen(reason), sizeof(payload) - 2);
        ngx_memcpy(payload + 2, reason, len - 2);
    }

    ws->close_sent = 1;

    if (ngx_ioa_ws_send_frame(ws, NGX_IOA_WS_CLOSE, payload, len) != NGX_OK) {
        return;
    }

    if (ws->ping.timer_set) {
        ngx_del_timer(&ws->ping);
    }

    /* the peer has NGX_IOA_WS_LINGER ms to answer before we drop it */
    ngx_add_timer(ws->connection->read, NGX_IOA_WS_LINGER);
}


static ngx_ioa_ws_out_t *
ngx_ioa_ws_out_alloc(ngx_ioa_ws_t *ws, size_t size)
{
    ngx_ioa_ws_out_t  *o;

    if (size == 0 && ws->free) {
        o = ws->free;
        ws->free = o->next;
        ws->nfree--;

    } else {
        o = ngx_alloc(sizeof(ngx_ioa_ws_out_t) + size, ws->connection->log);
        if (o == NULL) {
            return NULL;
        }
    }

    ngx_memzero(o, sizeof(ngx_ioa_ws_out_t));

    o->buf.memory = 1;
    /* TLS: without it ngx_ssl_send_chain() keeps small frames in its
     * 16k record buffer until more data comes */
    o->buf.flush = 1;
    o->buf.start = (u_char *) (o + 1);
    o->buf.end = o->buf.start + size;
    o->cl.buf = &o->buf;

    return o;
}


static void
ngx_ioa_ws_out_free(ngx_ioa_ws_t *ws, ngx_ioa_ws_out_t *o)
{
    if (o->msg) {
        ngx_ioa_msg_release(o->msg);
        o->msg = NULL;

        /* items for shared messages carry no data and are recycled, a
         * few: a burst must not leave an idle agent holding hundreds */

        if (ws->nfree < NGX_IOA_WS_FREE_KEEP) {
            o->next = ws->free;
            ws->free = o;
            ws->nfree++;
            return;
        }
    }

    ngx_free(o);
}


static void
ngx_ioa_ws_schedule_write(ngx_ioa_ws_t *ws)
{
    ngx_event_t  *wev;

    wev = ws->connection->write;

    if (wev->ready && !wev->posted) {
        ngx_post_event(wev, &ngx_posted_events);
    }
}


static void
ngx_ioa_ws_write_handler(ngx_event_t *wev)
{
    ngx_ioa_ws_t        *ws;
    ngx_connection_t    *c;

    c = wev->data;
    ws = c->data;

    if (ws == NULL || ws->finalized) {
        return;
    }

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "ioa: WebSocket send timed out");
        c->timedout = 1;
        ngx_ioa_ws_finalize(ws);
        return;
    }

    (void) ngx_ioa_ws_flush(ws);
}


static ngx_int_t
ngx_ioa_ws_flush(ngx_ioa_ws_t *ws)
{
    ngx_int_t                  rc;
    ngx_chain_t               *cl;
    ngx_ioa_ws_out_t          *o;
    ngx_connection_t          *c;
    ngx_http_request_t        *r;

    c = ws->connection;
    r = ws->request;

    /* the 101 response may still be in nginx's output chain */

    if (r && r->out) {
        rc = ngx_http_output_filter(r, NULL);

        if (rc == NGX_ERROR) {
            ngx_ioa_ws_finalize(ws);
            return NGX_ERROR;
        }

        if (r->out) {
            goto again;
        }
    }

    for (o = ws->out; o; o = o->next) {
        o->cl.next = o->next ? &o->next->cl : NULL;
    }

    if (ws->out) {
        cl = c->send_chain(c, &ws->out->cl, 0);

        if (cl == NGX_CHAIN_ERROR) {
            c->error = 1;
            ngx_ioa_ws_finalize(ws);
            return NGX_ERROR;
        }

        while (ws->out && ws->out->buf.pos == ws->out->buf.last) {
            o = ws->out;
            ws->out = o->next;
            ws->out_bytes -= o->size;
            ngx_ioa_stat_add(NGX_IOA_STAT_SENT_BYTES + NGX_IOA_VIA_WEBSOCKET,
                             o->size);
            ngx_ioa_ws_out_free(ws, o);
        }

        if (ws->out == NULL) {
            ws->out_tail = &ws->out;
        }

        /* a paused catch-up reads on once half its window is taken */
        if (ws->client.catchup_paused && !ws->closing
            && ws->out_bytes <= ws->client.lcf->catchup_window / 2)
        {
            ngx_ioa_client_drained(&ws->client);
        }
    }

    if (ws->out == NULL) {
        if (c->write->timer_set) {
            ngx_del_timer(c->write);
        }

        if (ws->close_sent) {
            /* our close frame is out: no more data from us */
            (void) ngx_shutdown_socket(c->fd, NGX_WRITE_SHUTDOWN);
        }

        return NGX_OK;
    }

again:

    ngx_add_timer(c->write, ws->send_timeout);

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_ioa_ws_finalize(ws);
        return NGX_ERROR;
    }

    return NGX_AGAIN;
}


/*
 * Closing the request frees the connection's memory, and this is often
 * reached deep inside a delivery loop that still holds pointers to the
 * client, so the request is finished from a posted event instead, when the
 * current event-loop turn has unwound.
 */

static void
ngx_ioa_ws_finalize(ngx_ioa_ws_t *ws)
{
    if (ws->finalized) {
        return;
    }

    ws->finalized = 1;

    if (ws->attached) {
        ws->attached = 0;
        ngx_ioa_client_detach(&ws->client);
    }

    if (ws->ping.timer_set) {
        ngx_del_timer(&ws->ping);
    }

    ws->done.handler = ngx_ioa_ws_done_handler;
    ws->done.data = ws;
    ws->done.log = ws->connection->log;

    /* (a detach still posted becomes the close) */
    if (!ws->done.posted) {
        ngx_post_event(&ws->done, &ngx_posted_events);
    }
}


static void
ngx_ioa_ws_done_handler(ngx_event_t *ev)
{
    ngx_ioa_ws_t *ws = ev->data;

    ngx_connection_t  *c;

    if (ws->detached) {
        ngx_http_close_connection(ws->connection);
        return;
    }

    c = ws->request->connection;

    /* NGX_HTTP_CLOSE only queues the request for termination; nginx's own
     * connection handler would run that queue, but the connection's
     * handlers are ours */
    ngx_http_finalize_request(ws->request, NGX_HTTP_CLOSE);
    ngx_http_run_posted_requests(c);
}


static void
ngx_ioa_ws_cleanup(void *data)
{
    ngx_ioa_ws_t *ws = data;

    ngx_ioa_ws_out_t  *o;

    ws->finalized = 1;

    if (ws->attached) {
        ws->attached = 0;
        ngx_ioa_client_detach(&ws->client);
    }

    if (ws->ping.timer_set) {
        ngx_del_timer(&ws->ping);
    }

    if (ws->done.posted) {
        ngx_delete_posted_event(&ws->done);
    }

    while (ws->out) {
        o = ws->out;
        ws->out = o->next;
        ngx_ioa_ws_out_free(ws, o);
    }

    while (ws->free) {
        o = ws->free;
        ws->free = o->next;
        ngx_free(o);
    }

    if (ws->msg) {
        ngx_free(ws->msg);
        ws->msg = NULL;
    }

    if (ws->pending) {
        ngx_free(ws->pending);
        ws->pending = NULL;
    }

    if (ws->deflate) {
        ngx_ioa_ws_deflate_cleanup(ws->deflate);
    }
}
