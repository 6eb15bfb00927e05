/*
 * ioa-worker: JSON in and out.
 *
 * Out: a growing buffer and a writer that escapes strings, because the
 * worker must place raw JSON it did not build (a room envelope) inside
 * JSON it builds (a goal event), and must control the order of members
 * (an envelope starts with "sender" and "timestamp", which the hub relies
 * on).  yajl_gen can do neither.  Bytes >= 0x80 are copied as they are:
 * every string the worker writes came from JSON that nginx or yajl already
 * checked to be UTF-8.
 *
 * In: yajl's tree parser, with a few accessors that answer NULL or -1
 * instead of crashing on a shape the worker did not expect (envelopes are
 * written by arbitrary agents).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


void
iw_buf_init(iw_buf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}


void
iw_buf_free(iw_buf_t *b)
{
    free(b->data);
    iw_buf_init(b);
}


/* the NUL-terminated text; the buffer is empty afterwards */

char *
iw_buf_take(iw_buf_t *b)
{
    char  *s;

    iw_buf_add(b, "", 0);
    s = b->data;
    iw_buf_init(b);

    return s;
}


/* room for n more bytes and the NUL */

static void
iw_buf_grow(iw_buf_t *b, size_t n)
{
    if (b->len + n + 1 <= b->cap) {
        return;
    }

    b->cap = b->cap ? b->cap : 256;

    while (b->len + n + 1 > b->cap) {
        b->cap *= 2;
    }

    b->data = iw_realloc(b->data, b->cap);
}


void
iw_buf_add(iw_buf_t *b, const char *s, size_t n)
{
    iw_buf_grow(b, n);

    if (n) {
        memcpy(b->data + b->len, s, n);
    }

    b->len += n;
    b->data[b->len] = '\0';
}


void
iw_buf_adds(iw_buf_t *b, const char *s)
{
    iw_buf_add(b, s, strlen(s));
}


void
iw_buf_addc(iw_buf_t *b, char c)
{
    iw_buf_add(b, &c, 1);
}


void
iw_buf_addf(iw_buf_t *b, const char *fmt, ...)
{
    int       n;
    va_list   ap;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);

    if (n < 0) {
        return;
    }

    iw_buf_grow(b, (size_t) n);

    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
    va_end(ap);

    b->len += (size_t) n;
}


void
iw_json_strn(iw_buf_t *b, const char *s, size_t n)
{
    size_t          i, from;
    unsigned char   c;
    char            esc[8];

    iw_buf_addc(b, '"');

    for (i = 0, from = 0; i < n; i++) {
        c = (unsigned char) s[i];

        if (c >= 0x20 && c != '"' && c != '\\') {
            continue;
        }

        iw_buf_add(b, s + from, i - from);
        from = i + 1;

        switch (c) {
        case '"':  iw_buf_add(b, "\\\"", 2); break;
        case '\\': iw_buf_add(b, "\\\\", 2); break;
        case '\n': iw_buf_add(b, "\\n", 2); break;
        case '\r': iw_buf_add(b, "\\r", 2); break;
        case '\t': iw_buf_add(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            iw_buf_adds(b, esc);
        }
    }

    iw_buf_add(b, s + from, n - from);
    iw_buf_addc(b, '"');
}


void
iw_json_str(iw_buf_t *b, const char *s)
{
    iw_json_strn(b, s ? s : "", s ? strlen(s) : 0);
}


void
iw_json_str_or_null(iw_buf_t *b, const char *s)
{
    if (s == NULL || *s == '\0') {
        iw_buf_adds(b, "null");

    } else {
        iw_json_str(b, s);
    }
}


/* yajl wants NUL-terminated text; Redis replies are counted */

yajl_val
iw_json_parse(const char *s, size_t n)
{
    char      *copy, err[128];
    yajl_val   v;

    copy = iw_strndup(s, n);
    v = yajl_tree_parse(copy, err, sizeof(err));
    free(copy);

    return v;
}


yajl_val
iw_json_get(yajl_val obj, const char *key)
{
    size_t  i;

    if (obj == NULL || !YAJL_IS_OBJECT(obj)) {
        return NULL;
    }

    for (i = 0; i < obj->u.object.len; i++) {
        if (strcmp(obj->u.object.keys[i], key) == 0) {
            return obj->u.object.values[i];
        }
    }

    return NULL;
}


const char *
iw_json_get_str(yajl_val obj, const char *key)
{
    yajl_val  v;

    v = iw_json_get(obj, key);

    return (v && YAJL_IS_STRING(v)) ? YAJL_GET_STRING(v) : NULL;
}


int
iw_json_get_int(yajl_val obj, const char *key, long long *out)
{
    yajl_val  v;

    v = iw_json_get(obj, key);

    if (v == NULL || !YAJL_IS_INTEGER(v)) {
        return -1;
    }

    *out = YAJL_GET_INTEGER(v);

    return 0;
}


/* re-emits a parsed value compactly (a request's cont_input, say) */

void
iw_json_emit(iw_buf_t *b, yajl_val v)
{
    size_t  i;

    if (v == NULL || YAJL_IS_NULL(v)) {
        iw_buf_adds(b, "null");

    } else if (YAJL_IS_STRING(v)) {
        iw_json_str(b, YAJL_GET_STRING(v));

    } else if (YAJL_IS_NUMBER(v)) {
        iw_buf_adds(b, YAJL_GET_NUMBER(v));

    } else if (YAJL_IS_TRUE(v)) {
        iw_buf_adds(b, "true");

    } else if (YAJL_IS_FALSE(v)) {
        iw_buf_adds(b, "false");

    } else if (YAJL_IS_ARRAY(v)) {
        iw_buf_addc(b, '[');

        for (i = 0; i < v->u.array.len; i++) {
            if (i) {
                iw_buf_addc(b, ',');
            }

            iw_json_emit(b, v->u.array.values[i]);
        }

        iw_buf_addc(b, ']');

    } else if (YAJL_IS_OBJECT(v)) {
        iw_buf_addc(b, '{');

        for (i = 0; i < v->u.object.len; i++) {
            if (i) {
                iw_buf_addc(b, ',');
            }

            iw_json_str(b, v->u.object.keys[i]);
            iw_buf_addc(b, ':');
            iw_json_emit(b, v->u.object.values[i]);
        }

        iw_buf_addc(b, '}');
    }
}
