
/*
 * JSON for ioa-agent: writing strings, reading yajl trees.
 *
 * Envelopes are written by hand (a dozen fields in a fixed order, see
 * task.c) with ioa_json_escape() for every string.  Its input is whatever a
 * program printed, so it must turn any bytes into valid JSON: invalid UTF-8
 * becomes U+FFFD rather than an envelope the hub refuses.  It can also stop
 * at an output budget, on a character boundary, because the hub refuses
 * envelopes above ioa_max_message_size and escaping may grow a text up to
 * six times (control characters become \u00XX).
 *
 * Reading uses yajl's tree API: envelopes are small (the hub caps them) and
 * a tree keeps the protocol code in task.c declarative.
 */

#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


/* the length of the valid UTF-8 sequence at s, or 0 if there is none */

static size_t
ioa_utf8_len(const unsigned char *s, size_t len)
{
    size_t   n, i;
    uint32_t cp, min;

    if (s[0] < 0x80) {
        return 1;

    } else if ((s[0] & 0xe0) == 0xc0) {
        n = 2;
        cp = s[0] & 0x1f;
        min = 0x80;

    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3;
        cp = s[0] & 0x0f;
        min = 0x800;

    } else if ((s[0] & 0xf8) == 0xf0) {
        n = 4;
        cp = s[0] & 0x07;
        min = 0x10000;

    } else {
        return 0;
    }

    if (len < n) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }

        cp = (cp << 6) | (s[i] & 0x3f);
    }

    /* overlong forms, UTF-16 surrogates and beyond U+10FFFF are invalid */
    if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
        return 0;
    }

    return n;
}


/*
 * The hub's rule for an agent name (ngx_ioa_valid_name): 1 to 64
 * characters of UTF-8 (256 bytes at most), no control character (C0, DEL,
 * C1), no "/", "{" or "}", no space at either end.  Checked at start-up so
 * that a name the hub would refuse is a usage error, not a loop of 400s.
 */

int
ioa_valid_name(const char *name)
{
    size_t                len, i, n, chars;
    const unsigned char  *s;

    s = (const unsigned char *) name;
    len = strlen(name);

    if (len == 0 || len > IOA_NAME_MAX_BYTES
        || s[0] == ' ' || s[len - 1] == ' ')
    {
        return 0;
    }

    for (i = 0, chars = 0; i < len; i += n) {
        n = ioa_utf8_len(s + i, len - i);

        if (n == 0 || s[i] < 0x20 || s[i] == 0x7f
            || s[i] == '/' || s[i] == '{' || s[i] == '}'
            || (s[i] == 0xc2 && s[i + 1] < 0xa0))       /* C1 controls */
        {
            return 0;
        }

        if (++chars > IOA_NAME_MAX_CHARS) {
            return 0;
        }
    }

    return 1;
}


/*
 * Appends s escaped for a JSON string (without the quotes).  With max > 0,
 * stops before the appended bytes would exceed max.  Returns how many
 * input bytes were consumed: len unless the budget ran out.
 */

size_t
ioa_json_escape(ioa_buf_t *b, const char *s, size_t len, size_t max)
{
    char                 esc[8];
    size_t               i, n, out, elen;
    const char          *add;
    const unsigned char *u;

    static const char hex[] = "0123456789abcdef";

    u = (const unsigned char *) s;
    out = 0;

    for (i = 0; i < len; i += n) {
        n = 1;
        add = esc;

        switch (u[i]) {
        case '"':
            add = "\\\"";
            elen = 2;
            break;
        case '\\':
            add = "\\\\";
            elen = 2;
            break;
        case '\n':
            add = "\\n";
            elen = 2;
            break;
        case '\r':
            add = "\\r";
            elen = 2;
            break;
        case '\t':
            add = "\\t";
            elen = 2;
            break;
        default:
            if (u[i] < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[u[i] >> 4];
                esc[5] = hex[u[i] & 0xf];
                elen = 6;
                break;
            }

            n = ioa_utf8_len(u + i, len - i);

            if (n == 0) {
                n = 1;
                add = "\xef\xbf\xbd"; /* U+FFFD */
                elen = 3;

            } else {
                add = s + i;
                elen = n;
            }
        }

        if (max && out + elen > max) {
            return i;
        }

        ioa_buf_add(b, add, elen);
        out += elen;
    }

    return len;
}


void
ioa_json_strn(ioa_buf_t *b, const char *s, size_t len)
{
    ioa_buf_add(b, "\"", 1);
    (void) ioa_json_escape(b, s, len, 0);
    ioa_buf_add(b, "\"", 1);
}


void
ioa_json_str(ioa_buf_t *b, const char *s)
{
    ioa_json_strn(b, s, strlen(s));
}


yajl_val
ioa_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
    char    *copy;
    yajl_val v;

    /* yajl_tree_parse() wants a C string */
    copy = ioa_strndup(text, len);

    if (err && errlen) {
        err[0] = '\0';
    }

    v = yajl_tree_parse(copy, err, errlen);

    free(copy);

    return v;
}


yajl_val
ioa_json_get(yajl_val obj, const char *key)
{
    size_t i;

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
ioa_json_string(yajl_val v)
{
    return (v && YAJL_IS_STRING(v)) ? YAJL_GET_STRING(v) : NULL;
}


const char *
ioa_json_get_string(yajl_val obj, const char *key)
{
    return ioa_json_string(ioa_json_get(obj, key));
}


int
ioa_json_get_int(yajl_val obj, const char *key, long long *out)
{
    yajl_val v;

    v = ioa_json_get(obj, key);

    if (v == NULL || !YAJL_IS_INTEGER(v)) {
        return -1;
    }

    *out = YAJL_GET_INTEGER(v);

    return 0;
}
