
/*
 * An incremental Server-Sent Events parser, after the WHATWG rules: lines
 * end in CRLF, LF or CR (a CR at the end of one chunk and an LF at the start
 * of the next are one line end); "field: value" loses one space after the
 * colon; a line starting with ':' is a comment; a blank line dispatches the
 * event.  It knows nothing of sockets or of ioa: hub.c feeds it whatever
 * libcurl hands over, in chunks cut anywhere.
 *
 * Two departures from a browser's EventSource, both for the agent's resume
 * bookkeeping:
 *   - a block with an "id:" but no "data:" is still handed over (has_data
 *     0), so the caller can move its position as a browser moves
 *     lastEventId;
 *   - the size of one event is bounded (max): a server that never sends a
 *     blank line must not grow memory without end.  Past it, feed() fails
 *     and the caller drops the connection and resumes.
 *
 * "retry:" is kept in p->retry for completeness, but hub.c reconnects on
 * its own backoff: the hub's "retry: 1000" is a browser's pace, and an
 * agent should be back within a fraction of that once its hub restarts.
 */

#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


static int ioa_sse_line(ioa_sse_parser_t *p);
static int ioa_sse_dispatch(ioa_sse_parser_t *p);


void
ioa_sse_init(ioa_sse_parser_t *p, size_t max, ioa_sse_handler_pt h, void *ctx)
{
    memset(p, 0, sizeof(*p));
    p->max = max;
    p->handler = h;
    p->ctx = ctx;
    p->retry = -1;
}


/* a new stream: forget any half-received event of the previous one */

void
ioa_sse_reset(ioa_sse_parser_t *p)
{
    ioa_buf_reset(&p->line);
    ioa_buf_reset(&p->data);
    ioa_buf_reset(&p->event);
    ioa_buf_reset(&p->id);
    p->has_id = 0;
    p->has_data = 0;
    p->cr = 0;
    p->started = 0;
}


void
ioa_sse_free(ioa_sse_parser_t *p)
{
    ioa_buf_free(&p->line);
    ioa_buf_free(&p->data);
    ioa_buf_free(&p->event);
    ioa_buf_free(&p->id);
}


/* 0, or -1 if an event grew past max or the handler asked to stop */

int
ioa_sse_feed(ioa_sse_parser_t *p, const char *buf, size_t len)
{
    size_t      n;
    const char *end, *q;

    end = buf + len;

    while (buf < end) {
        if (p->cr) {
            p->cr = 0;

            if (*buf == '\n') { /* the LF of a CRLF cut between chunks */
                buf++;
                continue;
            }
        }

        for (q = buf; q < end && *q != '\n' && *q != '\r'; q++) {
            /* void */
        }

        n = (size_t) (q - buf);

        if (n) {
            if (p->line.len + p->data.len + n > p->max) {
                return -1;
            }

            ioa_buf_add(&p->line, buf, n);
        }

        if (q == end) {
            break; /* the line continues in the next chunk */
        }

        p->cr = (*q == '\r');
        buf = q + 1;

        if (ioa_sse_line(p) != 0) {
            return -1;
        }
    }

    return 0;
}


static int
ioa_sse_line(ioa_sse_parser_t *p)
{
    char       *line, *colon, *value;
    size_t      len, vlen, flen;
    const char *digit;

    line = p->line.data;
    len = p->line.len;

    if (!p->started) {
        p->started = 1;

        /* a byte order mark may open the stream */
        if (len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
            line += 3;
            len -= 3;
        }
    }

    if (len == 0) {
        ioa_buf_reset(&p->line);
        return ioa_sse_dispatch(p);
    }

    if (line[0] == ':') {
        ioa_buf_reset(&p->line);
        return 0;
    }

    colon = memchr(line, ':', len);

    if (colon) {
        flen = (size_t) (colon - line);
        value = colon + 1;
        vlen = len - flen - 1;

        if (vlen && *value == ' ') {
            value++;
            vlen--;
        }

    } else {
        flen = len;
        value = line + len;
        vlen = 0;
    }

    if (flen == 5 && memcmp(line, "event", 5) == 0) {
        ioa_buf_set(&p->event, value, vlen);

    } else if (flen == 4 && memcmp(line, "data", 4) == 0) {
        ioa_buf_add(&p->data, value, vlen);
        ioa_buf_add(&p->data, "\n", 1);
        p->has_data = 1;

    } else if (flen == 2 && memcmp(line, "id", 2) == 0) {
        /* an id with a NUL in it is ignored, as a browser does */
        if (memchr(value, '\0', vlen) == NULL) {
            ioa_buf_set(&p->id, value, vlen);
            p->has_id = 1;
        }

    } else if (flen == 5 && memcmp(line, "retry", 5) == 0) {
        for (digit = value; digit < value + vlen; digit++) {
            if (*digit < '0' || *digit > '9') {
                break;
            }
        }

        if (vlen && digit == value + vlen && vlen < 10) {
            p->retry = strtol(value, NULL, 10);
        }
    }

    /* other fields are ignored */

    ioa_buf_reset(&p->line);

    return 0;
}


static int
ioa_sse_dispatch(ioa_sse_parser_t *p)
{
    int             rc;
    ioa_sse_event_t ev;

    if (!p->has_data && !p->has_id) {
        ioa_buf_reset(&p->event);
        return 0;
    }

    ev.event = p->event.len ? ioa_buf_cstr(&p->event) : "";
    ev.has_data = p->has_data;
    ev.has_id = p->has_id;
    ev.id = p->has_id ? ioa_buf_cstr(&p->id) : NULL;

    /* the data buffer ends in the newline its last line added */
    ev.data_len = p->has_data ? p->data.len - 1 : 0;
    ev.data = p->has_data ? ioa_buf_cstr(&p->data) : "";

    if (p->has_data) {
        p->data.data[ev.data_len] = '\0';
    }

    rc = p->handler(p->ctx, &ev);

    ioa_buf_reset(&p->data);
    ioa_buf_reset(&p->event);
    p->has_data = 0;
    p->has_id = 0;

    return rc;
}
