/*
 * workers/common: the JSON writer and yajl tree access (see ioa_json.h).
 *
 * One escaper for both programs.  Its input may be whatever a program
 * printed (ioa-agent's exec adapter) or an LLM answered, so it turns any
 * bytes into valid JSON: a byte that does not start a well-formed UTF-8
 * sequence (overlongs, surrogates and code points past U+10FFFF included)
 * becomes U+FFFD rather than a body the hub refuses.  Valid UTF-8 comes out
 * as it went in, so text that nginx or yajl already checked, most of what
 * ioa-worker writes, is unchanged by the check.
 *
 * Bytes that need nothing are copied in runs, not one by one: the worker
 * writes every goal event and prompt through here.  The escaper can also
 * stop at an output budget, on a character boundary, because the hub
 * refuses envelopes above ioa_max_message_size and escaping may grow a text
 * up to six times (control characters become \u00XX).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_json.h"


/* the length of the valid UTF-8 sequence at s, or 0 if there is none */

size_t
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


/* how much of s (len bytes) fits in max bytes without splitting a
 * character: a text cut to a limit stays valid UTF-8 */

size_t
ioa_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max) {
        return len;
    }

    while (max && ((unsigned char) s[max] & 0xc0) == 0x80) {
        max--;
    }

    return max;
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
    size_t               i, n, from, out, elen;
    const char          *add;
    const unsigned char *u;

    static const char hex[] = "0123456789abcdef";

    u = (const unsigned char *) s;
    out = 0;

    for (i = 0, from = 0; i < len; i += n) {

        /* as it is: joins the run [from, i) */

        if (u[i] >= 0x20 && u[i] != '"' && u[i] != '\\') {
            n = ioa_utf8_len(u + i, len - i);

            if (n) {
                if (max && out + n > max) {
                    break;
                }

                out += n;
                continue;
            }
        }

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

            } else {
                add = "\xef\xbf\xbd"; /* U+FFFD */
                elen = 3;
            }
        }

        if (max && out + elen > max) {
            break;
        }

        ioa_buf_add(b, s + from, i - from);
        ioa_buf_add(b, add, elen);
        out += elen;
        from = i + 1;
    }

    ioa_buf_add(b, s + from, i - from);

    return i;
}


void
ioa_json_strn(ioa_buf_t *b, const char *s, size_t len)
{
    ioa_buf_addc(b, '"');
    (void) ioa_json_escape(b, s, len, 0);
    ioa_buf_addc(b, '"');
}


/* NULL writes "", as a missing member reads back */

void
ioa_json_str(ioa_buf_t *b, const char *s)
{
    ioa_json_strn(b, s ? s : "", s ? strlen(s) : 0);
}


void
ioa_json_str_or_null(ioa_buf_t *b, const char *s)
{
    if (s == NULL || *s == '\0') {
        ioa_buf_adds(b, "null");

    } else {
        ioa_json_str(b, s);
    }
}


/* re-emits a parsed value compactly (a request's cont_input, say) */

void
ioa_json_emit(ioa_buf_t *b, yajl_val v)
{
    size_t i;

    if (v == NULL || YAJL_IS_NULL(v)) {
        ioa_buf_adds(b, "null");

    } else if (YAJL_IS_STRING(v)) {
        ioa_json_str(b, YAJL_GET_STRING(v));

    } else if (YAJL_IS_NUMBER(v)) {
        ioa_buf_adds(b, YAJL_GET_NUMBER(v));

    } else if (YAJL_IS_TRUE(v)) {
        ioa_buf_adds(b, "true");

    } else if (YAJL_IS_FALSE(v)) {
        ioa_buf_adds(b, "false");

    } else if (YAJL_IS_ARRAY(v)) {
        ioa_buf_addc(b, '[');

        for (i = 0; i < v->u.array.len; i++) {
            if (i) {
                ioa_buf_addc(b, ',');
            }

            ioa_json_emit(b, v->u.array.values[i]);
        }

        ioa_buf_addc(b, ']');

    } else if (YAJL_IS_OBJECT(v)) {
        ioa_buf_addc(b, '{');

        for (i = 0; i < v->u.object.len; i++) {
            if (i) {
                ioa_buf_addc(b, ',');
            }

            ioa_json_str(b, v->u.object.keys[i]);
            ioa_buf_addc(b, ':');
            ioa_json_emit(b, v->u.object.values[i]);
        }

        ioa_buf_addc(b, '}');
    }
}


/* yajl_tree_parse() wants a C string; Redis replies and bodies are counted */

yajl_val
ioa_json_parse_err(const char *text, size_t len, char *err, size_t errlen)
{
    char    *copy;
    yajl_val v;

    copy = ioa_strndup(text, len);

    if (err && errlen) {
        err[0] = '\0';
    }

    v = yajl_tree_parse(copy, err, errlen);

    free(copy);

    return v;
}


yajl_val
ioa_json_parse(const char *text, size_t len)
{
    char err[128];

    return ioa_json_parse_err(text, len, err, sizeof(err));
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
ioa_json_get_str(yajl_val obj, const char *key)
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
