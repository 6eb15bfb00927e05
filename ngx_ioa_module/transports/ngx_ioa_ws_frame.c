
/*
 * Copyright (C) ioa authors
 *
 * RFC 6455 frame codec and UTF-8 validation.
 *
 * Pure functions over byte ranges, with no I/O and no allocation, so that
 * the connection code in ngx_ioa_ws.c stays about buffers and events, and so
 * that this part can be fuzzed on its own.  Every rule a server must enforce
 * on a frame header is here: masking, RSV bits (RSV1 only on the first frame
 * of a data message, and only with permessage-deflate), known opcodes,
 * control frames short and unfragmented, minimal length encodings, and the
 * size limit, which is checked before the caller allocates anything for the
 * payload.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa_ws_frame.h"


ngx_int_t
ngx_ioa_ws_frame_parse(u_char *p, u_char *last, size_t max_size,
    ngx_uint_t deflate, ngx_ioa_ws_frame_t *f, ngx_uint_t *code,
    const char **reason)
{
    size_t      need;
    uint64_t    len;
    ngx_uint_t  i, b0, b1;

    if (last - p < 2) {
        return NGX_AGAIN;
    }

    b0 = p[0];
    b1 = p[1];

    f->fin = (b0 & 0x80) ? 1 : 0;
    f->rsv1 = (b0 & 0x40) ? 1 : 0;
    f->opcode = b0 & 0x0f;
    f->masked = (b1 & 0x80) ? 1 : 0;

    len = b1 & 0x7f;
    need = 2 + (len == 126 ? 2 : (len == 127 ? 8 : 0)) + (f->masked ? 4 : 0);

    *code = NGX_IOA_WS_PROTOCOL_ERROR;

    /* RSV1 is permessage-deflate's, when it was agreed; no extension uses
     * RSV2 or RSV3 */
    if (b0 & (deflate ? 0x30 : 0x70)) {
        *reason = deflate ? "RSV2 or RSV3 set: no extension uses them"
                          : "reserved bits set without a negotiated extension";
        return NGX_ERROR;
    }

    switch (f->opcode) {

    case NGX_IOA_WS_CONT:
    case NGX_IOA_WS_TEXT:
    case NGX_IOA_WS_BINARY:
        break;

    case NGX_IOA_WS_CLOSE:
    case NGX_IOA_WS_PING:
    case NGX_IOA_WS_PONG:

        if (!f->fin) {
            *reason = "fragmented control frame";
            return NGX_ERROR;
        }

        if (len > 125) {
            *reason = "control frame longer than 125 bytes";
            return NGX_ERROR;
        }

        break;

    default:
        *reason = "unknown opcode";
        return NGX_ERROR;
    }

    if (f->rsv1 && f->opcode >= NGX_IOA_WS_CLOSE) {
        *reason = "RSV1 on a control frame: control frames are never "
                  "compressed";
        return NGX_ERROR;
    }

    if (f->rsv1 && f->opcode == NGX_IOA_WS_CONT) {
        *reason = "RSV1 on a continuation frame: only a message's first "
                  "frame says it is compressed";
        return NGX_ERROR;
    }

    if (!f->masked) {
        *reason = "client frames must be masked";
        return NGX_ERROR;
    }

    if ((size_t) (last - p) < need) {
        return NGX_AGAIN;
    }

    p += 2;

    if (len == 126) {
        len = ((uint64_t) p[0] << 8) | p[1];
        p += 2;

        if (len < 126) {
            *reason = "non-minimal payload length";
            return NGX_ERROR;
        }

    } else if (len == 127) {
        if (p[0] & 0x80) {
            *reason = "payload length with the most significant bit set";
            return NGX_ERROR;
        }

        len = 0;

        for (i = 0; i < 8; i++) {
            len = (len << 8) | p[i];
        }

        p += 8;

        if (len <= 0xffff) {
            *reason = "non-minimal payload length";
            return NGX_ERROR;
        }
    }

    if (len > max_size) {
        *code = NGX_IOA_WS_TOO_BIG;
        *reason = "message larger than ioa_max_message_size";
        return NGX_ERROR;
    }

    ngx_memcpy(f->mask, p, 4);

    f->payload_len = len;
    f->header_len = need;

    return NGX_OK;
}


void
ngx_ioa_ws_unmask(u_char *p, size_t len, u_char *mask, uint64_t offset)
{
    size_t    i;
    uint32_t  m, w;

    i = 0;

    /* bytewise until the payload offset is a multiple of 4, then four bytes
     * at a time: the common case of a whole frame costs len / 4 XORs */

    while (i < len && ((offset + i) & 3) != 0) {
        p[i] ^= mask[(offset + i) & 3];
        i++;
    }

    ngx_memcpy(&m, mask, 4);

    for ( /* void */ ; i + 4 <= len; i += 4) {
        ngx_memcpy(&w, p + i, 4);
        w ^= m;
        ngx_memcpy(p + i, &w, 4);
    }

    for ( /* void */ ; i < len; i++) {
        p[i] ^= mask[(offset + i) & 3];
    }
}


size_t
ngx_ioa_ws_frame_header_len(size_t len)
{
    return len < 126 ? 2 : (len <= 0xffff ? 4 : 10);
}


u_char *
ngx_ioa_ws_frame_header(u_char *p, ngx_uint_t opcode, size_t len)
{
    ngx_int_t  i;

    *p++ = (u_char) (0x80 | opcode);

    if (len < 126) {
        *p++ = (u_char) len;
        return p;
    }

    if (len <= 0xffff) {
        *p++ = 126;
        *p++ = (u_char) (len >> 8);
        *p++ = (u_char) len;
        return p;
    }

    *p++ = 127;

    for (i = 7; i >= 0; i--) {
        *p++ = (u_char) ((uint64_t) len >> (i * 8));
    }

    return p;
}


/*
 * The state packs what the next byte may be: the number of continuation
 * bytes still expected (bits 0-7) and the range allowed for the next one
 * (bits 8-15 low, 16-23 high).  The narrowed ranges after E0, ED, F0 and F4
 * are what rule out overlong forms, surrogates and code points above
 * U+10FFFF.
 */

#define ngx_ioa_utf8_state(need, lo, hi)                                      \
    ((uint32_t) (need) | ((uint32_t) (lo) << 8) | ((uint32_t) (hi) << 16))

ngx_int_t
ngx_ioa_utf8_validate(u_char *p, size_t len, uint32_t *state)
{
    u_char    c, *last;
    uint32_t  st, need;
    uint64_t  word;

    st = *state;
    last = p + len;

    while (p < last) {
        c = *p++;

        if (st == 0) {

            if (c < 0x80) {
                /* fast path for ASCII runs, the common case for JSON:
                 * eight bytes at a time while no high bit is set */

                while (last - p >= 8) {
                    ngx_memcpy(&word, p, 8);

                    if (word & 0x8080808080808080ULL) {
                        break;
                    }

                    p += 8;
                }

                while (p < last && *p < 0x80) {
                    p++;
                }

                continue;
            }

            if (c >= 0xc2 && c <= 0xdf) {
                st = ngx_ioa_utf8_state(1, 0x80, 0xbf);

            } else if (c == 0xe0) {
                st = ngx_ioa_utf8_state(2, 0xa0, 0xbf);

            } else if (c == 0xed) {
                st = ngx_ioa_utf8_state(2, 0x80, 0x9f);

            } else if (c >= 0xe1 && c <= 0xef) {
                st = ngx_ioa_utf8_state(2, 0x80, 0xbf);

            } else if (c == 0xf0) {
                st = ngx_ioa_utf8_state(3, 0x90, 0xbf);

            } else if (c >= 0xf1 && c <= 0xf3) {
                st = ngx_ioa_utf8_state(3, 0x80, 0xbf);

            } else if (c == 0xf4) {
                st = ngx_ioa_utf8_state(3, 0x80, 0x8f);

            } else {
                *state = st;
                return NGX_ERROR;
            }

            continue;
        }

        if (c < ((st >> 8) & 0xff) || c > ((st >> 16) & 0xff)) {
            *state = st;
            return NGX_ERROR;
        }

        need = (st & 0xff) - 1;
        st = need ? ngx_ioa_utf8_state(need, 0x80, 0xbf) : 0;
    }

    *state = st;

    return NGX_OK;
}
