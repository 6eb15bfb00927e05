
/*
 * Copyright (C) ioa authors
 */


#ifndef _NGX_IOA_WS_DEFLATE_H_INCLUDED_
#define _NGX_IOA_WS_DEFLATE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <zlib.h>

#include "ngx_ioa.h"


/* what one connection agreed to (RFC 7692 7.1), and its inflate state */
typedef struct {
    z_stream                 *inflate;       /* NULL until the first
                                                compressed message, and
                                                between messages under
                                                client_no_context_takeover */
    uint64_t                  in;            /* compressed bytes of the
                                                message being read */
    u_char                    server_bits;   /* our frames' window, 9-15 */
    u_char                    client_bits;   /* the client's, 9-15 */
    unsigned                  client_no_context:1;
    unsigned                  ended:1;       /* the message's data ended
                                                with a final block */
} ngx_ioa_ws_deflate_t;


/*
 * The most compressed bytes a message inflating to at most max bytes can
 * take: DEFLATE's worst case is its stored blocks, 5 bytes per block of up
 * to 64 KiB, and a sender's flush adds a few bytes more; a 1/1024 share
 * covers both with room to spare.  More than that is refused as too big
 * before it is read.
 */
#define ngx_ioa_ws_deflate_in_max(max)  ((max) + ((max) >> 10) + 64)


/*
 * The handshake: reads every Sec-WebSocket-Extensions offer of r in order
 * and takes the first acceptable permessage-deflate one.  NGX_OK with *d
 * filled and *response the header value to answer with; NGX_DECLINED when
 * nothing was offered that we accept; NGX_ERROR when out of memory.
 */
ngx_int_t ngx_ioa_ws_deflate_negotiate(ngx_http_request_t *r,
    ngx_ioa_ws_deflate_t *d, ngx_str_t *response);

/*
 * The frame of m for a client whose agreed server window is "bits": the
 * compressed frame (RSV1 set) shared by every such client of this worker,
 * built the first time one asks, or m's plain frame where compressing does
 * not pay.  The frame lives as long as m.
 */
void ngx_ioa_ws_deflate_frame(ngx_ioa_msg_t *m, ngx_uint_t bits,
    u_char **frame, size_t *len);

/*
 * Inflates n bytes of a compressed message (unmasked) into the message
 * buffer *buf (*len used, *cap allocated), growing it in steps and never
 * past max + 1 bytes; "last" means these are the message's final bytes, and
 * the 00 00 ff ff tail that RFC 7692 7.2.2 restores follows them.  NGX_OK;
 * NGX_ERROR with *code and *reason when the connection must be closed (1009
 * when the message inflates past max, 1007 for bad data, 1011 for memory).
 */
ngx_int_t ngx_ioa_ws_inflate(ngx_ioa_ws_deflate_t *d, u_char *in, size_t n,
    ngx_uint_t last, u_char **buf, size_t *len, size_t *cap, size_t max,
    ngx_log_t *log, ngx_uint_t *code, const char **reason);

/* the message is complete: its inflate state goes under no context
 * takeover, and stays for the next message otherwise */
void ngx_ioa_ws_inflate_done(ngx_ioa_ws_deflate_t *d);

/* the connection ends */
void ngx_ioa_ws_deflate_cleanup(ngx_ioa_ws_deflate_t *d);


#endif /* _NGX_IOA_WS_DEFLATE_H_INCLUDED_ */
