
/*
 * Copyright (C) ioa authors
 */


#ifndef _NGX_IOA_WS_FRAME_H_INCLUDED_
#define _NGX_IOA_WS_FRAME_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


#define NGX_IOA_WS_CONT           0x0
#define NGX_IOA_WS_TEXT           0x1
#define NGX_IOA_WS_BINARY         0x2
#define NGX_IOA_WS_CLOSE          0x8
#define NGX_IOA_WS_PING           0x9
#define NGX_IOA_WS_PONG           0xa

#define NGX_IOA_WS_NORMAL         1000
#define NGX_IOA_WS_GOING_AWAY     1001
#define NGX_IOA_WS_PROTOCOL_ERROR 1002
#define NGX_IOA_WS_UNSUPPORTED    1003
#define NGX_IOA_WS_NO_STATUS      1005
#define NGX_IOA_WS_BAD_DATA       1007
#define NGX_IOA_WS_POLICY         1008
#define NGX_IOA_WS_TOO_BIG        1009
#define NGX_IOA_WS_INTERNAL       1011


typedef struct {
    uint64_t     payload_len;
    u_char       mask[4];
    ngx_uint_t   opcode;
    ngx_uint_t   header_len;
    unsigned     fin:1;
    unsigned     masked:1;
    unsigned     rsv1:1;       /* permessage-deflate: compressed message */
} ngx_ioa_ws_frame_t;


/*
 * Decodes a frame header from [p, last).  Returns NGX_AGAIN when more bytes
 * are needed, NGX_OK with *f filled, or NGX_ERROR with *code and *reason
 * saying why the connection must be closed.  max_size bounds the payload
 * of a data frame; it is checked here, before anything is allocated.
 * deflate: permessage-deflate was agreed, so RSV1 may mark the first frame
 * of a data message as compressed (RFC 7692 6); it is a protocol error on
 * control frames and continuation frames, and without deflate anywhere.
 */
ngx_int_t ngx_ioa_ws_frame_parse(u_char *p, u_char *last, size_t max_size,
    ngx_uint_t deflate, ngx_ioa_ws_frame_t *f, ngx_uint_t *code,
    const char **reason);

/* XORs len bytes with the mask, starting at payload offset "offset" */
void ngx_ioa_ws_unmask(u_char *p, size_t len, u_char *mask, uint64_t offset);

/* writes an unmasked server frame header, returns its end; at most
 * NGX_IOA_WS_HEADER_MAX bytes */
u_char *ngx_ioa_ws_frame_header(u_char *p, ngx_uint_t opcode, size_t len);
size_t ngx_ioa_ws_frame_header_len(size_t len);

/*
 * Incremental UTF-8 validation (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF).  *state is 0 at the start of a message; the
 * message is valid iff every call returns NGX_OK and *state is 0 at its
 * end.  Incremental so that fragments can be checked as they arrive.
 */
ngx_int_t ngx_ioa_utf8_validate(u_char *p, size_t len, uint32_t *state);


#endif /* _NGX_IOA_WS_FRAME_H_INCLUDED_ */
