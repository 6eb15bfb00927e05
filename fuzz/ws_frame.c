
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: the WebSocket frame parser (ngx_ioa_ws_frame.c), as the
 * read handler drives it.  The input is a stream of bytes from a client:
 * frames are parsed one after another until the parser wants more bytes or
 * refuses a frame; a complete frame's payload is unmasked (in pieces, at a
 * running offset, as partial reads do) and a text frame's payload is run
 * through the incremental UTF-8 validator.  Each input is parsed twice, as
 * a connection without and with permessage-deflate reads it.  Properties
 * checked besides memory safety: a parsed header never claims more bytes
 * than it read, the payload never exceeds the size limit, RSV1 is accepted
 * only with deflate and only on the first frame of a data message, and a
 * header the server writes for a payload length parses back to that
 * length.
 */


#include "fuzz_common.h"
#include "ngx_ioa_ws_frame.h"

#include <assert.h>


#define IOA_FUZZ_MAX_SIZE  65536


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char              *buf, *p, *last, hdr[16], *h;
    size_t               len, step, off;
    uint32_t             state;
    ngx_int_t            rc;
    ngx_uint_t           code, deflate;
    const char          *reason;
    ngx_ioa_ws_frame_t   f;

    ioa_fuzz_init();

    /* a copy: unmasking writes in place, as the server does */
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        return 0;
    }

    for (deflate = 0; deflate < 2; deflate++) {
        memcpy(buf, data, size);

        p = buf;
        last = buf + size;

        while (p < last) {
            rc = ngx_ioa_ws_frame_parse(p, last, IOA_FUZZ_MAX_SIZE, deflate,
                                        &f, &code, &reason);

            if (rc != NGX_OK) {
                /* NGX_AGAIN: more bytes needed; an error: the close code
                 * is a WebSocket one and comes with a reason */
                if (rc == NGX_ERROR) {
                    assert(code >= 1000 && code < 5000 && reason != NULL);
                }

                break;
            }

            assert(f.header_len >= 2 && f.header_len <= 14);
            assert(f.header_len <= (size_t) (last - p));
            assert(f.payload_len <= IOA_FUZZ_MAX_SIZE);
            assert(!f.rsv1
                   || (deflate && (f.opcode == NGX_IOA_WS_TEXT
                                   || f.opcode == NGX_IOA_WS_BINARY)));

            p += f.header_len;
            len = ngx_min((size_t) f.payload_len, (size_t) (last - p));

            /* unmask in uneven pieces, at the running offset */
            for (off = 0; off < len; off += step) {
                step = ngx_min(len - off, (size_t) (1 + (off % 7)));

                if (f.masked) {
                    ngx_ioa_ws_unmask(p + off, step, f.mask, off);
                }
            }

            if (f.opcode == NGX_IOA_WS_TEXT
                || f.opcode == NGX_IOA_WS_CONT)
            {
                state = 0;
                (void) ngx_ioa_utf8_validate(p, len, &state);
            }

            if (len < f.payload_len) {
                break;
            }

            p += len;
        }
    }

    /* the server's own headers parse back (unmasked server frames are
     * refused by a server-side parser, so only the length is compared) */
    len = size ? (size_t) data[0] << 8 | (size > 1 ? data[1] : 0) : 0;
    h = ngx_ioa_ws_frame_header(hdr, NGX_IOA_WS_TEXT, len);
    assert((size_t) (h - hdr) == ngx_ioa_ws_frame_header_len(len));

    free(buf);

    return 0;
}
