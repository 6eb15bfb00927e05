
/*
 * Copyright (C) ioa authors
 *
 * permessage-deflate (RFC 7692) on the hub's WebSocket: the negotiation,
 * the shared compressed frames of room broadcasts, and the bounded inflation
 * of what clients send.  ngx_ioa_ws.c calls in at three points: the
 * handshake, the queueing of a message, and the reading of a compressed
 * frame's payload.
 *
 * Negotiation.  Every offer of every Sec-WebSocket-Extensions header is
 * parsed in order (several headers, comma-separated offers, parameters with
 * token or quoted-string values); the first permessage-deflate offer whose
 * parameters are all known, well-formed, not repeated and supported is
 * taken, and an offer that is not is skipped for the next (RFC 7692 7.1
 * says a server declines such an offer; declining the whole header would
 * refuse the fallbacks clients list for exactly this case).  "Supported"
 * excludes one value: server_max_window_bits=8, since zlib cannot write a
 * raw stream with a 256-byte window.  The answer always carries
 * server_no_context_takeover, which a server may add unasked (7.1.1.1): it
 * is what makes our frames shareable, below.
 *
 * Sending: one compressed frame per message and worker.  A room broadcast is
 * one ngx_ioa_msg_t shared by reference among its recipients.  Were our
 * frames compressed with context takeover, each connection's compressor
 * would have to see every message it sends, so every recipient would need
 * its own compression of every broadcast and its own deflate stream kept
 * between messages (some 260 KB at zlib's defaults).  Without context
 * takeover a message's compressed form depends only on the message and the
 * window agreed, so it is built once, the first time a deflate client needs
 * it, cached on the message (m->wsz, a short list by window size; nearly
 * always one entry) and queued by reference to every deflate recipient, as
 * the plain frame is.  The deflate streams are the worker's, one per window
 * size in use, reset after each message; a connection keeps none.  The cache
 * is freed with the message (ngx_ioa_msg_release).  A message below
 * NGX_IOA_WS_DEFLATE_MIN bytes, or one that compression does not make
 * smaller, is sent plain: RSV1 is per message, and the cache remembers the
 * "plain" verdict so the attempt is made once.  Our own small frames (acks,
 * errors, pings, close) are never compressed.
 *
 * Receiving: a per-connection inflate stream, the client's context.  It is
 * allocated at the first compressed message (a client that never sends one,
 * or negotiated deflate only to receive, costs nothing), kept between
 * messages when the client uses context takeover (RFC 7692 7.2.2: the next
 * message may refer back into this one), and freed after every message
 * under client_no_context_takeover.  Its window is the one agreed: when the
 * client lets us choose (client_max_window_bits, with or without a value) we
 * answer NGX_IOA_WS_INFLATE_BITS at most, otherwise it is 15.  The payload
 * is inflated as it arrives, frame by frame, fragments included, straight
 * into the message buffer, which grows in steps and never past
 * ioa_max_message_size + 1 bytes: the moment the inflated size passes the
 * limit the connection is closed with 1009, so a decompression bomb costs
 * the limit, not its inflated size.  The compressed bytes are bounded too
 * (ngx_ioa_ws_deflate_in_max), so a message of empty blocks cannot run on
 * forever.  At the end of the message the 00 00 ff ff that the sender
 * removed (7.2.1) is put back (7.2.2).  A sender may also end its data with
 * a final block (BFINAL set, as one of 7.2.3's examples does): the DEFLATE
 * stream is over there, and what follows in the message (the restored
 * tail, at least) is not data, as for any DEFLATE decoder.  The next
 * message then starts a new stream, which gets what the old one had seen as
 * its dictionary, so context takeover goes on.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"
#include "ngx_ioa_ws_deflate.h"


/*
 * Messages shorter than this are sent plain.  Measured on IoA envelopes cut
 * short (bench/deflate.sh, "short message"): 64 bytes do not shrink at all,
 * 96 bytes lose 9%, 128 bytes 16%; below that a deflate call costs more
 * than the few bytes it saves.  A whole IoA envelope is never this short
 * (the hub's id, sender and timestamp alone take about 110 bytes): this is
 * for minimal clients' chat.
 */
#define NGX_IOA_WS_DEFLATE_MIN       128

/*
 * zlib level 1.  Each message is compressed alone, and on a message of a
 * few KB the levels differ little: on 1-4 KB envelopes level 1 leaves 49.1%
 * of the bytes, level 6 (zlib's default) 47.2% for about a quarter more
 * CPU (bench/deflate.sh, "level, each message alone").  What deflate costs
 * the hub is CPU per envelope, so the cheapest level.
 */
#define NGX_IOA_WS_DEFLATE_LEVEL     1
/* the fastest memLevel for small inputs; memory is per worker, not per
 * connection */
#define NGX_IOA_WS_DEFLATE_MEMLEVEL  8

/*
 * The client's window when it lets us choose.  The inflate stream of a
 * client with context takeover is kept between messages: about 7 KB of
 * zlib's state plus the window.  A 4 KiB window spans the previous 1-4 KB
 * envelope, which is where context takeover saves: it leaves 38.5% of the
 * bytes against 30.8% with a 32 KiB window and 47.2% with none, for 11 KB
 * kept per connection instead of 39 KB (bench/deflate.sh, "client window,
 * context takeover", and the memory of a deflate connection).  With 10
 * bits or fewer the window spans no envelope and the ratio is that of no
 * context at all.
 */
#define NGX_IOA_WS_INFLATE_BITS      12

/* a compressed frame's sliding window may not be larger than 2^15 */
#define NGX_IOA_WS_DEFLATE_BITS_MAX  15

/* the message buffer grows from this, doubling */
#define NGX_IOA_WS_INFLATE_STEP      4096

/* the scratch buffer compression writes into is kept up to this size */
#define NGX_IOA_WS_DEFLATE_KEEP      65536


/* a message's frame for one window size (m->wsz) */
struct ngx_ioa_msg_z_s {
    ngx_ioa_msg_z_t          *next;
    ngx_uint_t                bits;
    size_t                    len;           /* 0: send the plain frame */
    u_char                    frame[1];
};


typedef struct {
    ngx_uint_t                seen;          /* NGX_IOA_WS_PARAM_* */
    ngx_uint_t                server_bits;   /* 0: not offered */
    ngx_uint_t                client_bits;   /* 0: not offered, 1: no
                                                value */
} ngx_ioa_ws_offer_t;

#define NGX_IOA_WS_PARAM_SNC      0x01   /* server_no_context_takeover */
#define NGX_IOA_WS_PARAM_CNC      0x02   /* client_no_context_takeover */
#define NGX_IOA_WS_PARAM_SMWB     0x04   /* server_max_window_bits */
#define NGX_IOA_WS_PARAM_CMWB     0x08   /* client_max_window_bits */


static ngx_int_t ngx_ioa_ws_deflate_offer(u_char **pp, u_char *last,
    ngx_ioa_ws_offer_t *o);
static ngx_int_t ngx_ioa_ws_deflate_accept(ngx_pool_t *pool,
    ngx_ioa_ws_offer_t *o, ngx_ioa_ws_deflate_t *d, ngx_str_t *response);
static ngx_int_t ngx_ioa_ws_deflate_param(ngx_ioa_ws_offer_t *o,
    ngx_str_t *name, ngx_str_t *value);
static ngx_int_t ngx_ioa_ws_deflate_bits(ngx_str_t *value);
static u_char *ngx_ioa_ws_token(u_char *p, u_char *last);
static u_char *ngx_ioa_ws_ows(u_char *p, u_char *last);
static u_char *ngx_ioa_ws_skip_offer(u_char *p, u_char *last);
static ngx_ioa_msg_z_t *ngx_ioa_ws_deflate_msg(ngx_ioa_msg_t *m,
    ngx_uint_t bits);
static z_stream *ngx_ioa_ws_deflater(ngx_uint_t bits);
static ngx_int_t ngx_ioa_ws_inflate_run(ngx_ioa_ws_deflate_t *d,
    u_char *in, size_t n, u_char **buf, size_t *len, size_t *cap,
    size_t max, ngx_log_t *log, ngx_uint_t *code, const char **reason);
static ngx_int_t ngx_ioa_ws_inflate_restart(ngx_ioa_ws_deflate_t *d);


/* the worker's deflate streams, by window size, and their output buffer */
static z_stream  *ngx_ioa_ws_deflaters[NGX_IOA_WS_DEFLATE_BITS_MAX + 1];
static u_char    *ngx_ioa_ws_scratch;
static size_t     ngx_ioa_ws_scratch_size;

/* what a stream ended by a final block had seen (one at a time) */
static u_char     ngx_ioa_ws_dict[1 << NGX_IOA_WS_DEFLATE_BITS_MAX];

/* RFC 7692 7.2.2: the end of a sync flush, removed by the sender */
static u_char     ngx_ioa_ws_tail[4] = { 0x00, 0x00, 0xff, 0xff };


/* negotiation */

ngx_int_t
ngx_ioa_ws_deflate_negotiate(ngx_http_request_t *r, ngx_ioa_ws_deflate_t *d,
    ngx_str_t *response)
{
    u_char              *p, *last;
    ngx_uint_t           i;
    ngx_list_part_t     *part;
    ngx_table_elt_t     *h;
    ngx_ioa_ws_offer_t   o;

    static ngx_str_t  name = ngx_string("Sec-WebSocket-Extensions");

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NGX_DECLINED;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len != name.len
            || ngx_strncasecmp(h[i].key.data, name.data, name.len) != 0)
        {
            continue;
        }

        p = h[i].value.data;
        last = p + h[i].value.len;

        while (p < last) {
            ngx_memzero(&o, sizeof(ngx_ioa_ws_offer_t));

            if (ngx_ioa_ws_deflate_offer(&p, last, &o) == NGX_OK) {
                return ngx_ioa_ws_deflate_accept(r->pool, &o, d, response);
            }
        }
    }
}


/* what was agreed, and the answer that says so */

static ngx_int_t
ngx_ioa_ws_deflate_accept(ngx_pool_t *pool, ngx_ioa_ws_offer_t *o,
    ngx_ioa_ws_deflate_t *d, ngx_str_t *response)
{
    u_char      *p;
    ngx_uint_t   client_bits;

    /* the longest answer: every parameter, two-digit windows */

    response->data = ngx_pnalloc(pool,
                                 sizeof("permessage-deflate"
                                        "; server_no_context_takeover"
                                        "; client_no_context_takeover"
                                        "; server_max_window_bits=15"
                                        "; client_max_window_bits=15") - 1);
    if (response->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(response->data,
                   "permessage-deflate; server_no_context_takeover",
                   sizeof("permessage-deflate; server_no_context_takeover")
                   - 1);

    ngx_memzero(d, sizeof(ngx_ioa_ws_deflate_t));

    if (o->seen & NGX_IOA_WS_PARAM_CNC) {
        d->client_no_context = 1;
        p = ngx_cpymem(p, "; client_no_context_takeover",
                       sizeof("; client_no_context_takeover") - 1);
    }

    /* the window the client asked our frames to keep to, or our own */

    if (o->server_bits) {
        d->server_bits = (u_char) o->server_bits;
        p = ngx_sprintf(p, "; server_max_window_bits=%ui", o->server_bits);

    } else {
        d->server_bits = NGX_IOA_WS_DEFLATE_BITS_MAX;
    }

    /*
     * The client's window: ours to choose when it offered the parameter
     * (7.1.2.2), within its value if it gave one.  Not offered, or offered
     * as 8 (which zlib's deflate cannot keep to, so a client of zlib would
     * fail on it), it may use up to 15, and the answer must not name it.
     */

    client_bits = 0;

    if (o->client_bits == 1) {
        client_bits = NGX_IOA_WS_INFLATE_BITS;

    } else if (o->client_bits > 8) {
        client_bits = ngx_min(o->client_bits, NGX_IOA_WS_INFLATE_BITS);
    }

    if (client_bits) {
        d->client_bits = (u_char) client_bits;
        p = ngx_sprintf(p, "; client_max_window_bits=%ui", client_bits);

    } else {
        d->client_bits = NGX_IOA_WS_DEFLATE_BITS_MAX;
    }

    response->len = p - response->data;

    return NGX_OK;
}


/*
 * One element of an extension list: "name *( ; param [= value] )".  Moves
 * *pp past it (and the comma after it); NGX_OK if it is a permessage-deflate
 * offer we accept, *o filled.  A malformed element is skipped to the next
 * comma outside a quoted string.
 */

static ngx_int_t
ngx_ioa_ws_deflate_offer(u_char **pp, u_char *last, ngx_ioa_ws_offer_t *o)
{
    u_char      *p, *s, *q, c;
    ngx_str_t    name, pname, value;
    ngx_uint_t   ok;
    u_char       unquoted[16];

    p = *pp;

    while (p < last && (*p == ',' || *p == ' ' || *p == '\t')) {
        p++;
    }

    if (p == last) {
        *pp = p;
        return NGX_DECLINED;
    }

    name.data = p;
    p = ngx_ioa_ws_token(p, last);
    name.len = p - name.data;

    ok = (name.len == sizeof("permessage-deflate") - 1
          && ngx_strncasecmp(name.data, (u_char *) "permessage-deflate",
                             name.len) == 0);

    if (name.len == 0) {
        goto malformed;
    }

    for ( ;; ) {
        p = ngx_ioa_ws_ows(p, last);

        if (p == last || *p == ',') {
            break;
        }

        if (*p != ';') {
            goto malformed;
        }

        p = ngx_ioa_ws_ows(p + 1, last);

        pname.data = p;
        p = ngx_ioa_ws_token(p, last);
        pname.len = p - pname.data;

        if (pname.len == 0) {
            goto malformed;
        }

        p = ngx_ioa_ws_ows(p, last);

        value.data = NULL;
        value.len = 0;

        if (p < last && *p == '=') {
            p = ngx_ioa_ws_ows(p + 1, last);

            if (p < last && *p == '"') {

                /* a quoted-string; the value is what it unescapes to, of
                 * which only the first bytes can matter to us */

                q = unquoted;
                value.data = unquoted;

                for (p++; /* void */ ; p++) {
                    if (p == last) {
                        goto malformed;
                    }

                    c = *p;

                    if (c == '"') {
                        p++;
                        break;
                    }

                    if (c == '\\') {
                        if (++p == last) {
                            goto malformed;
                        }

                        c = *p;
                    }

                    if (value.len < sizeof(unquoted)) {
                        *q++ = c;
                    }

                    value.len++;
                }

                /* RFC 6455 9.1: unescaped, it must still be a token */
                if (value.len == 0 || value.len > sizeof(unquoted)
                    || ngx_ioa_ws_token(unquoted, unquoted + value.len)
                       != unquoted + value.len)
                {
                    ok = 0;
                }

            } else {
                s = p;
                p = ngx_ioa_ws_token(p, last);

                if (p == s) {
                    goto malformed;
                }

                value.data = s;
                value.len = p - s;
            }
        }

        if (ok && ngx_ioa_ws_deflate_param(o, &pname, &value) != NGX_OK) {
            ok = 0;
        }
    }

    *pp = p;

    return ok ? NGX_OK : NGX_DECLINED;

malformed:

    *pp = ngx_ioa_ws_skip_offer(p, last);

    return NGX_DECLINED;
}


/* RFC 7692 7.1: a parameter known, well-formed, not repeated, supported */

static ngx_int_t
ngx_ioa_ws_deflate_param(ngx_ioa_ws_offer_t *o, ngx_str_t *name,
    ngx_str_t *value)
{
    ngx_int_t   bits;
    ngx_uint_t  flag;

#define ngx_ioa_ws_param_is(n)                                                \
    (name->len == sizeof(n) - 1                                               \
     && ngx_strncmp(name->data, n, sizeof(n) - 1) == 0)

    if (ngx_ioa_ws_param_is("server_no_context_takeover")) {
        flag = NGX_IOA_WS_PARAM_SNC;

    } else if (ngx_ioa_ws_param_is("client_no_context_takeover")) {
        flag = NGX_IOA_WS_PARAM_CNC;

    } else if (ngx_ioa_ws_param_is("server_max_window_bits")) {
        flag = NGX_IOA_WS_PARAM_SMWB;

    } else if (ngx_ioa_ws_param_is("client_max_window_bits")) {
        flag = NGX_IOA_WS_PARAM_CMWB;

    } else {
        return NGX_DECLINED;
    }

#undef ngx_ioa_ws_param_is

    if (o->seen & flag) {
        return NGX_DECLINED;
    }

    o->seen |= flag;

    switch (flag) {

    case NGX_IOA_WS_PARAM_SNC:
    case NGX_IOA_WS_PARAM_CNC:
        return value->data == NULL ? NGX_OK : NGX_DECLINED;

    case NGX_IOA_WS_PARAM_SMWB:
        bits = ngx_ioa_ws_deflate_bits(value);

        /* 8: zlib writes no raw stream with a 256-byte window */
        if (bits == NGX_ERROR || bits == 8) {
            return NGX_DECLINED;
        }

        o->server_bits = bits;
        return NGX_OK;

    default: /* NGX_IOA_WS_PARAM_CMWB */

        if (value->data == NULL) {
            o->client_bits = 1;
            return NGX_OK;
        }

        bits = ngx_ioa_ws_deflate_bits(value);

        if (bits == NGX_ERROR) {
            return NGX_DECLINED;
        }

        o->client_bits = bits;
        return NGX_OK;
    }
}


/* 8 to 15, decimal, no leading zero (7.1.2.1) */

static ngx_int_t
ngx_ioa_ws_deflate_bits(ngx_str_t *value)
{
    ngx_int_t  n;

    if (value->data == NULL || value->len == 0 || value->len > 2
        || value->data[0] == '0')
    {
        return NGX_ERROR;
    }

    n = ngx_atoi(value->data, value->len);

    if (n < 8 || n > NGX_IOA_WS_DEFLATE_BITS_MAX) {
        return NGX_ERROR;
    }

    return n;
}


/* RFC 9110 5.6.2: tchar */

static u_char *
ngx_ioa_ws_token(u_char *p, u_char *last)
{
    u_char  c;

    for ( /* void */ ; p < last; p++) {
        c = *p;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9'))
        {
            continue;
        }

        switch (c) {
        case '!': case '#': case '$': case '%': case '&': case '\'':
        case '*': case '+': case '-': case '.': case '^': case '_':
        case '`': case '|': case '~':
            continue;
        }

        break;
    }

    return p;
}


static u_char *
ngx_ioa_ws_ows(u_char *p, u_char *last)
{
    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    return p;
}


/* to the comma that ends this element, past quoted strings */

static u_char *
ngx_ioa_ws_skip_offer(u_char *p, u_char *last)
{
    ngx_uint_t  quoted;

    quoted = 0;

    for ( /* void */ ; p < last; p++) {

        if (quoted) {
            if (*p == '\\' && p + 1 < last) {
                p++;

            } else if (*p == '"') {
                quoted = 0;
            }

            continue;
        }

        if (*p == '"') {
            quoted = 1;

        } else if (*p == ',') {
            break;
        }
    }

    return p;
}


/* sending */

void
ngx_ioa_ws_deflate_frame(ngx_ioa_msg_t *m, ngx_uint_t bits, u_char **frame,
    size_t *len)
{
    ngx_ioa_msg_z_t  *z;

    *frame = m->ws;
    *len = m->ws_len;

    if (m->payload_len < NGX_IOA_WS_DEFLATE_MIN) {
        return;
    }

    for (z = m->wsz; z; z = z->next) {
        if (z->bits == bits) {
            break;
        }
    }

    if (z == NULL) {
        z = ngx_ioa_ws_deflate_msg(m, bits);

        if (z == NULL) {
            return;                 /* out of memory: plain this time */
        }

        z->next = m->wsz;
        m->wsz = z;
    }

    if (z->len) {
        *frame = z->frame;
        *len = z->len;
    }
}


/*
 * Compresses m's payload with the worker's stream for "bits", a sync flush
 * without its 00 00 ff ff (7.2.1), into a frame with RSV1 set.  Returns the
 * cache entry, whose len is 0 when the plain frame is as short.
 */

static ngx_ioa_msg_z_t *
ngx_ioa_ws_deflate_msg(ngx_ioa_msg_t *m, ngx_uint_t bits)
{
    int               rc;
    size_t            bound, clen, hlen;
    u_char           *p;
    z_stream         *zs;
    ngx_ioa_msg_z_t  *z;

    zs = ngx_ioa_ws_deflater(bits);
    if (zs == NULL) {
        return NULL;
    }

    /* deflateBound() is for a Z_FINISH; a sync flush's empty stored block
     * takes at most 5 bytes more */

    bound = deflateBound(zs, m->payload_len) + 16;

    if (bound > ngx_ioa_ws_scratch_size) {
        if (ngx_ioa_ws_scratch) {
            ngx_free(ngx_ioa_ws_scratch);
            ngx_ioa_ws_scratch_size = 0;
        }

        ngx_ioa_ws_scratch = ngx_alloc(bound, ngx_cycle->log);
        if (ngx_ioa_ws_scratch == NULL) {
            return NULL;
        }

        ngx_ioa_ws_scratch_size = bound;
    }

    zs->next_in = m->payload;
    zs->avail_in = m->payload_len;
    zs->next_out = ngx_ioa_ws_scratch;
    zs->avail_out = bound;

    rc = deflate(zs, Z_SYNC_FLUSH);

    clen = bound - zs->avail_out;

    if (rc != Z_OK || zs->avail_in != 0 || zs->avail_out == 0
        || clen < 4
        || ngx_memcmp(ngx_ioa_ws_scratch + clen - 4, ngx_ioa_ws_tail, 4) != 0)
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "ioa: deflate() failed: %d, %uz bytes left", rc,
                      (size_t) zs->avail_in);
        clen = 0;

    } else {
        clen -= 4;
    }

    if (deflateReset(zs) != Z_OK) {
        (void) deflateEnd(zs);
        ngx_free(zs);
        ngx_ioa_ws_deflaters[bits] = NULL;
    }

    hlen = ngx_ioa_ws_frame_header_len(clen);

    if (clen == 0 || hlen + clen >= m->ws_len) {
        z = ngx_alloc(sizeof(ngx_ioa_msg_z_t), ngx_cycle->log);
        if (z == NULL) {
            return NULL;
        }

        z->bits = bits;
        z->len = 0;

    } else {
        z = ngx_alloc(offsetof(ngx_ioa_msg_z_t, frame) + hlen + clen,
                      ngx_cycle->log);
        if (z == NULL) {
            return NULL;
        }

        z->bits = bits;
        z->len = hlen + clen;

        p = ngx_ioa_ws_frame_header(z->frame, NGX_IOA_WS_TEXT, clen);
        z->frame[0] |= 0x40;            /* RSV1: the message is compressed */
        ngx_memcpy(p, ngx_ioa_ws_scratch, clen);
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "ioa ws deflate: message of %uz bytes, window %ui: "
                   "frame of %uz bytes (plain %uz)",
                   m->payload_len, bits, z->len ? z->len : m->ws_len,
                   m->ws_len);

    if (ngx_ioa_ws_scratch_size > NGX_IOA_WS_DEFLATE_KEEP) {
        ngx_free(ngx_ioa_ws_scratch);
        ngx_ioa_ws_scratch = NULL;
        ngx_ioa_ws_scratch_size = 0;
    }

    return z;
}


static z_stream *
ngx_ioa_ws_deflater(ngx_uint_t bits)
{
    z_stream  *zs;

    if (bits < 9 || bits > NGX_IOA_WS_DEFLATE_BITS_MAX) {
        return NULL;
    }

    if (ngx_ioa_ws_deflaters[bits]) {
        return ngx_ioa_ws_deflaters[bits];
    }

    zs = ngx_calloc(sizeof(z_stream), ngx_cycle->log);
    if (zs == NULL) {
        return NULL;
    }

    /* negative window bits: a raw DEFLATE stream, no zlib header */

    if (deflateInit2(zs, NGX_IOA_WS_DEFLATE_LEVEL, Z_DEFLATED, -(int) bits,
                     NGX_IOA_WS_DEFLATE_MEMLEVEL, Z_DEFAULT_STRATEGY)
        != Z_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "ioa: deflateInit2() failed");
        ngx_free(zs);
        return NULL;
    }

    ngx_ioa_ws_deflaters[bits] = zs;

    return zs;
}


void
ngx_ioa_ws_deflate_msg_free(ngx_ioa_msg_t *m)
{
    ngx_ioa_msg_z_t  *z;

    while (m->wsz) {
        z = m->wsz;
        m->wsz = z->next;
        ngx_free(z);
    }
}


/* receiving */

ngx_int_t
ngx_ioa_ws_inflate(ngx_ioa_ws_deflate_t *d, u_char *in, size_t n,
    ngx_uint_t last, u_char **buf, size_t *len, size_t *cap, size_t max,
    ngx_log_t *log, ngx_uint_t *code, const char **reason)
{
    if (d->inflate == NULL) {
        d->inflate = ngx_calloc(sizeof(z_stream), log);
        if (d->inflate == NULL) {
            goto nomem;
        }

        if (inflateInit2(d->inflate, -(int) d->client_bits) != Z_OK) {
            ngx_free(d->inflate);
            d->inflate = NULL;
            goto nomem;
        }
    }

    if (n && !d->ended
        && ngx_ioa_ws_inflate_run(d, in, n, buf, len, cap, max, log, code,
                                  reason)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (last && !d->ended) {
        return ngx_ioa_ws_inflate_run(d, ngx_ioa_ws_tail, 4, buf, len, cap,
                                      max, log, code, reason);
    }

    return NGX_OK;

nomem:

    *code = NGX_IOA_WS_INTERNAL;
    *reason = "out of memory";
    return NGX_ERROR;
}


static ngx_int_t
ngx_ioa_ws_inflate_run(ngx_ioa_ws_deflate_t *d, u_char *in, size_t n,
    u_char **buf, size_t *len, size_t *cap, size_t max, ngx_log_t *log,
    ngx_uint_t *code, const char **reason)
{
    int        rc;
    size_t     size;
    u_char    *p;
    z_stream  *zs;

    zs = d->inflate;
    zs->next_in = in;
    zs->avail_in = n;

    for ( ;; ) {

        if (*len == *cap) {
            /* full: a bigger buffer, never past the limit plus the one
             * byte that shows the message went over it */

            size = *cap ? *cap * 2 : NGX_IOA_WS_INFLATE_STEP;
            size = ngx_min(size, max + 1);

            p = ngx_alloc(size, log);
            if (p == NULL) {
                *code = NGX_IOA_WS_INTERNAL;
                *reason = "out of memory";
                return NGX_ERROR;
            }

            if (*buf) {
                ngx_memcpy(p, *buf, *len);
                ngx_free(*buf);
            }

            *buf = p;
            *cap = size;
        }

        zs->next_out = *buf + *len;
        zs->avail_out = *cap - *len;

        rc = inflate(zs, Z_SYNC_FLUSH);

        *len = zs->next_out - *buf;

        if (*len > max) {
            *code = NGX_IOA_WS_TOO_BIG;
            *reason = "message inflates past ioa_max_message_size";
            return NGX_ERROR;
        }

        switch (rc) {

        case Z_OK:
            break;

        case Z_BUF_ERROR:
            /* no progress possible: the input is used up and everything
             * it gave is out (a full buffer is grown above) */
            if (zs->avail_out) {
                return NGX_OK;
            }

            break;

        case Z_STREAM_END:
            /* the sender ended its data with a final block: the rest of
             * the message is not read */
            if (ngx_ioa_ws_inflate_restart(d) != NGX_OK) {
                *code = NGX_IOA_WS_INTERNAL;
                *reason = "cannot restart inflate";
                return NGX_ERROR;
            }

            d->ended = 1;
            return NGX_OK;

        case Z_MEM_ERROR:
            *code = NGX_IOA_WS_INTERNAL;
            *reason = "out of memory";
            return NGX_ERROR;

        default:
            ngx_log_error(NGX_LOG_INFO, log, 0,
                          "ioa: inflate() failed: %d: %s", rc,
                          zs->msg ? zs->msg : "");
            *code = NGX_IOA_WS_BAD_DATA;
            *reason = "invalid compressed data";
            return NGX_ERROR;
        }

        if (zs->avail_in == 0 && zs->avail_out != 0) {
            return NGX_OK;
        }
    }
}


/*
 * After a final block the stream is over; the next message starts a new
 * one.  Under context takeover that one may still refer to what the old one
 * held, so it gets that as its dictionary.
 */

static ngx_int_t
ngx_ioa_ws_inflate_restart(ngx_ioa_ws_deflate_t *d)
{
    uInt       dlen;
    z_stream  *zs;

    zs = d->inflate;
    dlen = 0;

    if (!d->client_no_context) {
        dlen = sizeof(ngx_ioa_ws_dict);

        if (inflateGetDictionary(zs, ngx_ioa_ws_dict, &dlen) != Z_OK) {
            return NGX_ERROR;
        }
    }

    if (inflateReset(zs) != Z_OK) {
        return NGX_ERROR;
    }

    if (dlen && inflateSetDictionary(zs, ngx_ioa_ws_dict, dlen) != Z_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_ioa_ws_inflate_done(ngx_ioa_ws_deflate_t *d)
{
    d->in = 0;
    d->ended = 0;

    if (d->client_no_context && d->inflate) {
        (void) inflateEnd(d->inflate);
        ngx_free(d->inflate);
        d->inflate = NULL;
    }
}


void
ngx_ioa_ws_deflate_cleanup(ngx_ioa_ws_deflate_t *d)
{
    if (d->inflate) {
        (void) inflateEnd(d->inflate);
        ngx_free(d->inflate);
        d->inflate = NULL;
    }
}


void
ngx_ioa_ws_deflate_exit_process(void)
{
    ngx_uint_t  i;

    for (i = 0; i <= NGX_IOA_WS_DEFLATE_BITS_MAX; i++) {
        if (ngx_ioa_ws_deflaters[i]) {
            (void) deflateEnd(ngx_ioa_ws_deflaters[i]);
            ngx_free(ngx_ioa_ws_deflaters[i]);
            ngx_ioa_ws_deflaters[i] = NULL;
        }
    }

    if (ngx_ioa_ws_scratch) {
        ngx_free(ngx_ioa_ws_scratch);
        ngx_ioa_ws_scratch = NULL;
        ngx_ioa_ws_scratch_size = 0;
    }
}
