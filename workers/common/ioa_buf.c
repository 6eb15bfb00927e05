/*
 * workers/common: the growing buffer (see ioa_buf.h).
 *
 * Capacity doubles from 256 bytes: a goal event, an envelope or a prompt
 * is a few hundred bytes to a few KiB, so most buffers grow once or twice
 * and a long one costs O(log n) reallocations.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_buf.h"


#define IOA_BUF_FIRST 256


void
ioa_buf_init(ioa_buf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}


void
ioa_buf_free(ioa_buf_t *b)
{
    free(b->data);
    ioa_buf_init(b);
}


/* empty again, keeping the memory for the next use */

void
ioa_buf_reset(ioa_buf_t *b)
{
    b->len = 0;

    if (b->data) {
        b->data[0] = '\0';
    }
}


/* room for extra more bytes and the NUL */

static void
ioa_buf_reserve(ioa_buf_t *b, size_t extra)
{
    size_t cap;

    if (b->len + extra + 1 <= b->cap) {
        return;
    }

    cap = b->cap ? b->cap : IOA_BUF_FIRST;

    while (cap < b->len + extra + 1) {
        cap *= 2;
    }

    b->data = ioa_realloc(b->data, cap);
    b->cap = cap;
}


/* the NUL-terminated text, never NULL; the buffer is empty afterwards */

char *
ioa_buf_take(ioa_buf_t *b)
{
    char *s;

    ioa_buf_reserve(b, 0);
    b->data[b->len] = '\0';

    s = b->data;
    ioa_buf_init(b);

    return s;
}


const char *
ioa_buf_cstr(ioa_buf_t *b)
{
    ioa_buf_reserve(b, 0);
    b->data[b->len] = '\0';

    return b->data;
}


void
ioa_buf_add(ioa_buf_t *b, const void *p, size_t len)
{
    ioa_buf_reserve(b, len);

    if (len) {
        memcpy(b->data + b->len, p, len);
    }

    b->len += len;
    b->data[b->len] = '\0';
}


void
ioa_buf_adds(ioa_buf_t *b, const char *s)
{
    ioa_buf_add(b, s, strlen(s));
}


void
ioa_buf_addc(ioa_buf_t *b, char c)
{
    ioa_buf_add(b, &c, 1);
}


void
ioa_buf_addf(ioa_buf_t *b, const char *fmt, ...)
{
    int     n;
    size_t  room;
    va_list ap;

    /* straight into the spare room; a second pass only if it was short */

    ioa_buf_reserve(b, 64);
    room = b->cap - b->len;

    va_start(ap, fmt);
    n = vsnprintf(b->data + b->len, room, fmt, ap);
    va_end(ap);

    if (n < 0) {
        b->data[b->len] = '\0';
        return;
    }

    if ((size_t) n >= room) {
        ioa_buf_reserve(b, (size_t) n);

        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
        va_end(ap);
    }

    b->len += (size_t) n;
}


void
ioa_buf_set(ioa_buf_t *b, const void *p, size_t len)
{
    b->len = 0;
    ioa_buf_add(b, p, len);
}
