
/*
 * ioa: JSON helpers used by the whole module.
 *
 * Three jobs live here: refusals (ngx_ioa_error_t and its JSON form),
 * reading REST bodies into yajl trees, and writing compact JSON.
 *
 * Reading.  yajl_tree_parse() is not used: it wants a NUL-terminated text
 * (a body with a NUL byte would be cut short silently), it turns comments
 * on, it mallocs every node, and yajl_tree_free() recurses once per level.
 * Instead the streaming parser drives a small builder that puts every node
 * in the request pool, so there is nothing to free and nothing to clean up.
 * The builder keeps one flat stack of finished values and one of keys;
 * when a container closes, its children are the top n entries of that
 * stack and are copied into an array of exactly n pointers.  Nothing here
 * recurses on the depth of the input, and the depth is refused past
 * max_depth inside the start callbacks, before yajl goes any deeper.
 *
 * yajl's own scratch memory (its handle, lexer and decode buffers, its
 * state stack: five allocations for every text) comes from the same pool
 * through yajl's allocator hooks.  With malloc it was a fifth of the
 * instructions spent on an envelope; in the pool it costs a pointer bump,
 * and it lives as long as the pool: the request's, or the envelope pool
 * that is reset after every envelope.  Blocks past the pool's small size
 * are large allocations, which ngx_pfree() does give back at once.
 *
 * UTF-8.  yajl only checks the shape of multi-byte sequences; it lets
 * overlong forms, surrogates and code points past U+10FFFF through, and
 * decodes an escaped lone low surrogate into the same invalid bytes.  One
 * such envelope forwarded to a Python client would fail its WebSocket
 * with 1007, so every decoded string is checked again, strictly.
 *
 * Writing.  ngx_ioa_json_str() escapes only what JSON requires and leaves
 * other UTF-8 alone; ngx_ioa_jbuf_t is an append buffer that doubles in
 * its pool and records a failed allocation once, so response builders
 * check a single flag at the end instead of after every append.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <math.h>

#include "ngx_ioa_json.h"
#include "ngx_ioa_ws_frame.h"


#define NGX_IOA_JSON_INT64_MAX  ((uint64_t) 0x7fffffffffffffffLL)

/* frames of ngx_ioa_jbuf_val() kept on the C stack before spilling */
#define NGX_IOA_JSON_WFRAMES    32


typedef struct {
    yajl_val                 node;
    ngx_uint_t               values;   /* its first child on the stack */
    ngx_uint_t               keys;     /* its first key on the stack */
} ngx_ioa_json_frame_t;


typedef struct {
    ngx_pool_t              *pool;
    ngx_ioa_error_t         *err;
    ngx_uint_t               max_depth;
    yajl_val                 root;
    ngx_array_t              frames;   /* ngx_ioa_json_frame_t */
    ngx_array_t              values;   /* yajl_val */
    ngx_array_t              keys;     /* char * */
} ngx_ioa_json_tree_t;


typedef struct {
    yajl_val                 node;
    size_t                   next;
} ngx_ioa_json_wframe_t;


static ngx_int_t ngx_ioa_utf8_char(u_char *p, u_char *end);
static void *ngx_ioa_json_alloc(void *ctx, size_t size);
static void *ngx_ioa_json_realloc(void *ctx, void *ptr, size_t size);
static void ngx_ioa_json_free(void *ctx, void *ptr);
static size_t ngx_ioa_utf8_sanitize(u_char *p, size_t len);
static ngx_int_t ngx_ioa_jbuf_grow(ngx_ioa_jbuf_t *b, size_t n);

static yajl_val ngx_ioa_json_node(ngx_ioa_json_tree_t *t, yajl_type type);
static int ngx_ioa_json_add(ngx_ioa_json_tree_t *t, yajl_val v);
static char *ngx_ioa_json_cstr(ngx_ioa_json_tree_t *t, const u_char *s,
    size_t len);
static int ngx_ioa_json_tree_null(void *ctx);
static int ngx_ioa_json_tree_boolean(void *ctx, int b);
static int ngx_ioa_json_tree_number(void *ctx, const char *s, size_t len);
static int ngx_ioa_json_tree_string(void *ctx, const unsigned char *s,
    size_t len);
static int ngx_ioa_json_tree_start(ngx_ioa_json_tree_t *t, yajl_type type);
static int ngx_ioa_json_tree_start_map(void *ctx);
static int ngx_ioa_json_tree_map_key(void *ctx, const unsigned char *s,
    size_t len);
static int ngx_ioa_json_tree_end(void *ctx);
static int ngx_ioa_json_tree_start_array(void *ctx);


static const yajl_callbacks  ngx_ioa_json_tree_callbacks = {
    ngx_ioa_json_tree_null,
    ngx_ioa_json_tree_boolean,
    NULL,                                  /* integer: number has it */
    NULL,                                  /* double: number has it */
    ngx_ioa_json_tree_number,
    ngx_ioa_json_tree_string,
    ngx_ioa_json_tree_start_map,
    ngx_ioa_json_tree_map_key,
    ngx_ioa_json_tree_end,
    ngx_ioa_json_tree_start_array,
    ngx_ioa_json_tree_end
};


/* bytes each input byte takes inside a JSON string literal */
static const u_char  ngx_ioa_json_esc[256] = {
    6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6,
    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
    1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
};


void
ngx_ioa_error_set(ngx_ioa_error_t *err, const char *code, const char *field,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    err->code.len = ngx_strlen(code);
    err->code.data = (u_char *) code;

    if (field) {
        err->field.len = ngx_strlen(field);
        err->field.data = (u_char *) field;

    } else {
        ngx_str_null(&err->field);
    }

    va_start(args, fmt);
    p = ngx_vslprintf(err->text, err->text + NGX_IOA_ERROR_TEXT_LEN, fmt,
                      args);
    va_end(args);

    err->len = ngx_ioa_utf8_sanitize(err->text, p - err->text);
}


ngx_int_t
ngx_ioa_error_json(ngx_pool_t *pool, ngx_ioa_error_t *err,
    ngx_str_t *comm_id, ngx_str_t *out)
{
    size_t          size;
    ngx_str_t       text;
    ngx_ioa_jbuf_t  b;

    text.len = err->len;
    text.data = err->text;

    size = sizeof("{\"op\":\"error\",\"code\":,\"message\":}") - 1
           + ngx_ioa_json_str_len(&err->code) + ngx_ioa_json_str_len(&text);

    if (err->field.len) {
        size += sizeof(",\"field\":") - 1 + ngx_ioa_json_str_len(&err->field);
    }

    if (comm_id && comm_id->len) {
        size += sizeof(",\"comm_id\":") - 1 + ngx_ioa_json_str_len(comm_id);
    }

    if (ngx_ioa_jbuf_init(&b, pool, size) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"op\":\"error\",\"code\":");
    ngx_ioa_jbuf_str(&b, &err->code);
    ngx_ioa_jbuf_literal(&b, ",\"message\":");
    ngx_ioa_jbuf_str(&b, &text);

    if (err->field.len) {
        ngx_ioa_jbuf_literal(&b, ",\"field\":");
        ngx_ioa_jbuf_str(&b, &err->field);
    }

    if (comm_id && comm_id->len) {
        ngx_ioa_jbuf_literal(&b, ",\"comm_id\":");
        ngx_ioa_jbuf_str(&b, comm_id);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_jbuf_done(&b, out);
}


ngx_int_t
ngx_ioa_json_stream(ngx_pool_t *pool, const yajl_callbacks *callbacks,
    void *ctx, u_char *data, size_t len, ngx_ioa_error_t *err)
{
    u_char            *msg, *p, *last;
    size_t             offset;
    yajl_handle        h;
    yajl_status        rc;
    yajl_alloc_funcs   afs;

    if (len == 0) {
        ngx_ioa_error_set(err, "invalid_json", NULL, "empty JSON text");
        return NGX_ERROR;
    }

    afs.malloc = ngx_ioa_json_alloc;
    afs.realloc = ngx_ioa_json_realloc;
    afs.free = ngx_ioa_json_free;
    afs.ctx = pool;

    h = yajl_alloc(callbacks, &afs, ctx);
    if (h == NULL) {
        ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
        return NGX_ERROR;
    }

    offset = 0;

    rc = yajl_parse(h, data, len);

    if (rc == yajl_status_ok) {
        offset = len;
        rc = yajl_complete_parse(h);

    } else {
        offset = yajl_get_bytes_consumed(h);
    }

    if (rc == yajl_status_ok) {
        yajl_free(h);
        return NGX_OK;
    }

    if (rc == yajl_status_client_canceled) {
        /* the callback has said why */
        yajl_free(h);
        return NGX_ERROR;
    }

    msg = yajl_get_error(h, 0, NULL, 0);

    if (msg == NULL) {
        ngx_ioa_error_set(err, "invalid_json", NULL,
                          "malformed JSON at byte %uz", offset);

    } else {
        /* "parse error: premature EOF\n": keep the first line */

        last = msg + ngx_strlen(msg);

        for (p = msg; p < last && *p != '\n' && *p != '\r'; p++) {
            /* void */
        }

        while (p > msg && p[-1] == ' ') {
            p--;
        }

        ngx_ioa_error_set(err, "invalid_json", NULL, "%*s at byte %uz",
                          (size_t) (p - msg), msg, offset);

        yajl_free_error(h, msg);
    }

    yajl_free(h);

    return NGX_ERROR;
}


/*
 * yajl's allocator in a pool.  realloc needs the old size, so every block
 * carries it in front; the header is a full alignment unit so that what
 * yajl gets stays aligned.
 */

typedef union {
    size_t                   size;
    ngx_uint_t               align;
    void                    *ptr;
} ngx_ioa_json_block_t;


static void *
ngx_ioa_json_alloc(void *ctx, size_t size)
{
    ngx_ioa_json_block_t  *b;

    b = ngx_palloc(ctx, sizeof(ngx_ioa_json_block_t) + size);
    if (b == NULL) {
        return NULL;
    }

    b->size = size;

    return b + 1;
}


static void *
ngx_ioa_json_realloc(void *ctx, void *ptr, size_t size)
{
    void                  *p;
    ngx_ioa_json_block_t  *b;

    if (ptr == NULL) {
        return ngx_ioa_json_alloc(ctx, size);
    }

    b = (ngx_ioa_json_block_t *) ptr - 1;

    if (size <= b->size) {
        return ptr;
    }

    p = ngx_ioa_json_alloc(ctx, size);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, ptr, b->size);

    ngx_ioa_json_free(ctx, ptr);

    return p;
}


static void
ngx_ioa_json_free(void *ctx, void *ptr)
{
    /* small blocks go with the pool; a large one is freed now */

    if (ptr) {
        (void) ngx_pfree(ctx, (ngx_ioa_json_block_t *) ptr - 1);
    }
}


yajl_val
ngx_ioa_json_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_uint_t max_depth, ngx_ioa_error_t *err)
{
    ngx_ioa_json_tree_t  t;

    t.pool = pool;
    t.err = err;
    t.max_depth = max_depth;
    t.root = NULL;

    if (ngx_array_init(&t.frames, pool, 8, sizeof(ngx_ioa_json_frame_t))
            != NGX_OK
        || ngx_array_init(&t.values, pool, 16, sizeof(yajl_val)) != NGX_OK
        || ngx_array_init(&t.keys, pool, 16, sizeof(char *)) != NGX_OK)
    {
        ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
        return NULL;
    }

    if (ngx_ioa_json_stream(pool, &ngx_ioa_json_tree_callbacks, &t, data,
                            len, err)
        != NGX_OK)
    {
        return NULL;
    }

    return t.root;
}


yajl_val
ngx_ioa_json_get(yajl_val obj, const char *key)
{
    size_t  i;

    if (!YAJL_IS_OBJECT(obj)) {
        return NULL;
    }

    for (i = 0; i < obj->u.object.len; i++) {
        if (ngx_strcmp(obj->u.object.keys[i], key) == 0) {
            return obj->u.object.values[i];
        }
    }

    return NULL;
}


ngx_int_t
ngx_ioa_json_string(yajl_val v, ngx_str_t *s)
{
    if (!YAJL_IS_STRING(v) || v->u.string == NULL) {
        return NGX_DECLINED;
    }

    s->data = (u_char *) v->u.string;
    s->len = ngx_strlen(s->data);

    return NGX_OK;
}


/*
 * A number every reader takes the same way (RFC 7493, I-JSON, after RFC
 * 8259 section 6): an integer within +-(2^53 - 1), which a double holds
 * exactly, or another number that is a finite double, at most
 * NGX_IOA_JSON_NUMBER_MAX characters long.  Python's json refuses an
 * integer of more than 4,300 digits and JavaScript rounds one above 2^53,
 * so a bigger number in one envelope would break or silently change its
 * room's transcript for those clients.  p is JSON number text (the
 * grammar is yajl's to check).
 */

ngx_int_t
ngx_ioa_json_number_ok(const u_char *p, size_t len)
{
    u_char         buf[NGX_IOA_JSON_NUMBER_MAX + 1];
    size_t         i, digits;
    ngx_uint_t     integer;
    const u_char  *d;

    if (len == 0 || len > NGX_IOA_JSON_NUMBER_MAX) {
        return NGX_DECLINED;
    }

    integer = 1;

    for (i = 0; i < len; i++) {
        if (p[i] == '.' || p[i] == 'e' || p[i] == 'E') {
            integer = 0;
            break;
        }
    }

    if (integer) {
        d = (p[0] == '-') ? p + 1 : p;
        digits = len - (d - p);

        /* JSON integers have no leading zeros: more digits, bigger */
        if (digits < 16) {
            return NGX_OK;
        }

        return (digits == 16
                && ngx_strncmp(d, "9007199254740991", 16) <= 0)
               ? NGX_OK : NGX_DECLINED;
    }

    ngx_memcpy(buf, p, len);
    buf[len] = '\0';

    return isinf(strtod((char *) buf, NULL)) ? NGX_DECLINED : NGX_OK;
}


ngx_int_t
ngx_ioa_json_int(const u_char *p, size_t len, int64_t *v)
{
    uint64_t    u, limit, d;
    ngx_uint_t  neg;

    neg = 0;

    if (len && *p == '-') {
        neg = 1;
        p++;
        len--;
    }

    if (len == 0) {
        return NGX_ERROR;
    }

    limit = NGX_IOA_JSON_INT64_MAX + neg;
    u = 0;

    while (len--) {
        if (*p < '0' || *p > '9') {
            return NGX_ERROR;
        }

        d = *p++ - '0';

        if (u > (limit - d) / 10) {
            return NGX_ERROR;
        }

        u = u * 10 + d;
    }

    *v = neg ? (int64_t) (0 - u) : (int64_t) u;

    return NGX_OK;
}


size_t
ngx_ioa_json_str_len(ngx_str_t *s)
{
    size_t   len;
    u_char  *p, *last;

    len = 2;
    last = s->data + s->len;

    for (p = s->data; p < last; p++) {
        len += ngx_ioa_json_esc[*p];
    }

    return len;
}


u_char *
ngx_ioa_json_str(u_char *p, ngx_str_t *s)
{
    u_char         c, *src, *last;
    static u_char  hex[] = "0123456789abcdef";

    *p++ = '"';

    src = s->data;
    last = src + s->len;

    while (src < last) {
        c = *src++;

        if (ngx_ioa_json_esc[c] == 1) {
            *p++ = c;
            continue;
        }

        *p++ = '\\';

        switch (c) {
        case '"':
        case '\\':
            *p++ = c;
            break;
        case '\b':
            *p++ = 'b';
            break;
        case '\f':
            *p++ = 'f';
            break;
        case '\n':
            *p++ = 'n';
            break;
        case '\r':
            *p++ = 'r';
            break;
        case '\t':
            *p++ = 't';
            break;
        default:
            *p++ = 'u';
            *p++ = '0';
            *p++ = '0';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 0xf];
        }
    }

    *p++ = '"';

    return p;
}


ngx_int_t
ngx_ioa_utf8_valid(u_char *p, size_t len)
{
    uint32_t  state;

    /* the WebSocket layer's strict validator, for a whole string */

    state = 0;

    if (ngx_ioa_utf8_validate(p, len, &state) != NGX_OK || state != 0) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


size_t
ngx_ioa_utf8_clip(u_char *p, size_t len, size_t max)
{
    if (len <= max) {
        return len;
    }

    /* p[max] exists; back up to the first byte of its character */

    while (max > 0 && (p[max] & 0xc0) == 0x80) {
        max--;
    }

    return max;
}


/*
 * The length of the strict UTF-8 character at p: 1 to 4, 0 if invalid,
 * -1 if it is a valid start cut short by "end".
 */

static ngx_int_t
ngx_ioa_utf8_char(u_char *p, u_char *end)
{
    u_char      c, lo, hi;
    ngx_int_t   i, n;

    c = *p;

    if (c < 0x80) {
        return 1;
    }

    lo = 0x80;
    hi = 0xbf;

    if (c < 0xc2) {
        return 0;               /* continuation byte or overlong */

    } else if (c < 0xe0) {
        n = 2;

    } else if (c < 0xf0) {
        n = 3;

        if (c == 0xe0) {
            lo = 0xa0;          /* overlong */

        } else if (c == 0xed) {
            hi = 0x9f;          /* surrogates */
        }

    } else if (c < 0xf5) {
        n = 4;

        if (c == 0xf0) {
            lo = 0x90;          /* overlong */

        } else if (c == 0xf4) {
            hi = 0x8f;          /* past U+10FFFF */
        }

    } else {
        return 0;
    }

    for (i = 1; i < n; i++) {

        if (p + i >= end) {
            return -1;
        }

        if (p[i] < lo || p[i] > hi) {
            return 0;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    return n;
}


/*
 * Error sentences quote client text and may end up in the error log, so
 * they are kept to one printable line: control characters and invalid
 * bytes become '?', and a character cut short by the end is dropped.
 */

static size_t
ngx_ioa_utf8_sanitize(u_char *p, size_t len)
{
    u_char     *s, *last;
    ngx_int_t   n;

    last = p + len;

    for (s = p; s < last; /* void */ ) {

        if (*s < 0x20 || *s == 0x7f) {
            *s++ = '?';
            continue;
        }

        n = ngx_ioa_utf8_char(s, last);

        if (n > 0) {
            s += n;

        } else if (n == 0) {
            *s++ = '?';

        } else {
            return s - p;
        }
    }

    return len;
}


ngx_int_t
ngx_ioa_jbuf_init(ngx_ioa_jbuf_t *b, ngx_pool_t *pool, size_t size)
{
    if (size < 64) {
        size = 64;
    }

    b->pool = pool;
    b->failed = 0;

    b->start = ngx_pnalloc(pool, size);
    if (b->start == NULL) {
        b->pos = NULL;
        b->end = NULL;
        b->failed = 1;
        return NGX_ERROR;
    }

    b->pos = b->start;
    b->end = b->start + size;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_jbuf_grow(ngx_ioa_jbuf_t *b, size_t n)
{
    u_char  *p;
    size_t   used, size;

    if (b->failed) {
        return NGX_ERROR;
    }

    if ((size_t) (b->end - b->pos) >= n) {
        return NGX_OK;
    }

    used = b->pos - b->start;

    if (n > NGX_MAX_SIZE_T_VALUE / 4 - used) {
        b->failed = 1;
        return NGX_ERROR;
    }

    size = 2 * (b->end - b->start);

    if (size < used + n) {
        size = used + n;
    }

    p = ngx_pnalloc(b->pool, size);
    if (p == NULL) {
        b->failed = 1;
        return NGX_ERROR;
    }

    if (used) {
        ngx_memcpy(p, b->start, used);
    }

    /* gives a large block back at once; a no-op for small ones */
    ngx_pfree(b->pool, b->start);

    b->start = p;
    b->pos = p + used;
    b->end = p + size;

    return NGX_OK;
}


void
ngx_ioa_jbuf_raw(ngx_ioa_jbuf_t *b, const u_char *s, size_t len)
{
    if (len == 0 || ngx_ioa_jbuf_grow(b, len) != NGX_OK) {
        return;
    }

    b->pos = ngx_cpymem(b->pos, s, len);
}


void
ngx_ioa_jbuf_byte(ngx_ioa_jbuf_t *b, u_char c)
{
    if (b->pos == b->end && ngx_ioa_jbuf_grow(b, 1) != NGX_OK) {
        return;
    }

    *b->pos++ = c;
}


void
ngx_ioa_jbuf_str(ngx_ioa_jbuf_t *b, ngx_str_t *s)
{
    size_t  len;

    len = ngx_ioa_json_str_len(s);

    if (ngx_ioa_jbuf_grow(b, len) != NGX_OK) {
        return;
    }

    if (len == s->len + 2) {
        /* nothing to escape, the common case: one copy, no second scan */
        *b->pos++ = '"';
        b->pos = ngx_cpymem(b->pos, s->data, s->len);
        *b->pos++ = '"';
        return;
    }

    b->pos = ngx_ioa_json_str(b->pos, s);
}


void
ngx_ioa_jbuf_int(ngx_ioa_jbuf_t *b, int64_t v)
{
    u_char    *p, buf[NGX_INT64_LEN];
    uint64_t   u;

    /* unsigned arithmetic: -INT64_MIN would overflow */
    u = (v < 0) ? 0 - (uint64_t) v : (uint64_t) v;

    p = buf + NGX_INT64_LEN;

    do {
        *--p = (u_char) ('0' + u % 10);
        u /= 10;
    } while (u);

    if (v < 0) {
        *--p = '-';
    }

    ngx_ioa_jbuf_raw(b, p, buf + NGX_INT64_LEN - p);
}


/*
 * Compact serialisation of a tree without recursion: the open containers
 * and the next child of each are kept on an explicit stack, on the C stack
 * for the first few levels and in the pool below that.
 */

void
ngx_ioa_jbuf_val(ngx_ioa_jbuf_t *b, yajl_val v)
{
    size_t                  n, nalloc, len;
    yajl_val                node;
    ngx_str_t               s;
    ngx_uint_t              object;
    ngx_ioa_json_wframe_t   local[NGX_IOA_JSON_WFRAMES], *stack, *f;

    stack = local;
    nalloc = NGX_IOA_JSON_WFRAMES;
    n = 0;

    for ( ;; ) {

        if (b->failed) {
            return;
        }

        /* write v, or open it */

        if (v == NULL) {
            ngx_ioa_jbuf_literal(b, "null");

        } else {

            switch (v->type) {

            case yajl_t_string:
                if (ngx_ioa_json_string(v, &s) != NGX_OK) {
                    ngx_str_null(&s);
                }

                ngx_ioa_jbuf_str(b, &s);
                break;

            case yajl_t_number:
                if (v->u.number.r) {
                    ngx_ioa_jbuf_raw(b, (u_char *) v->u.number.r,
                                     ngx_strlen(v->u.number.r));

                } else if (v->u.number.flags & YAJL_NUMBER_INT_VALID) {
                    ngx_ioa_jbuf_int(b, v->u.number.i);

                } else {
                    ngx_ioa_jbuf_literal(b, "null");
                }

                break;

            case yajl_t_true:
                ngx_ioa_jbuf_literal(b, "true");
                break;

            case yajl_t_false:
                ngx_ioa_jbuf_literal(b, "false");
                break;

            case yajl_t_object:
            case yajl_t_array:
                ngx_ioa_jbuf_byte(b, v->type == yajl_t_object ? '{' : '[');

                if (n == nalloc) {
                    f = ngx_palloc(b->pool,
                                   2 * nalloc * sizeof(ngx_ioa_json_wframe_t));
                    if (f == NULL) {
                        b->failed = 1;
                        return;
                    }

                    ngx_memcpy(f, stack, n * sizeof(ngx_ioa_json_wframe_t));

                    stack = f;
                    nalloc *= 2;
                }

                stack[n].node = v;
                stack[n].next = 0;
                n++;
                break;

            default:
                ngx_ioa_jbuf_literal(b, "null");
            }
        }

        /* find the next value to write, closing finished containers */

        for ( ;; ) {

            if (n == 0) {
                return;
            }

            f = &stack[n - 1];
            node = f->node;
            object = (node->type == yajl_t_object);
            len = object ? node->u.object.len : node->u.array.len;

            if (f->next < len) {
                break;
            }

            ngx_ioa_jbuf_byte(b, object ? '}' : ']');
            n--;
        }

        if (f->next > 0) {
            ngx_ioa_jbuf_byte(b, ',');
        }

        if (object) {
            s.data = (u_char *) node->u.object.keys[f->next];
            s.len = s.data ? ngx_strlen(s.data) : 0;

            ngx_ioa_jbuf_str(b, &s);
            ngx_ioa_jbuf_byte(b, ':');

            v = node->u.object.values[f->next];

        } else {
            v = node->u.array.values[f->next];
        }

        f->next++;
    }
}


ngx_int_t
ngx_ioa_jbuf_done(ngx_ioa_jbuf_t *b, ngx_str_t *out)
{
    if (b->failed) {
        return NGX_ERROR;
    }

    out->data = b->start;
    out->len = b->pos - b->start;

    return NGX_OK;
}


/* the tree builder behind ngx_ioa_json_parse() */

static yajl_val
ngx_ioa_json_node(ngx_ioa_json_tree_t *t, yajl_type type)
{
    yajl_val  v;

    v = ngx_pcalloc(t->pool, sizeof(struct yajl_val_s));
    if (v == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return NULL;
    }

    v->type = type;

    return v;
}


static int
ngx_ioa_json_add(ngx_ioa_json_tree_t *t, yajl_val v)
{
    yajl_val  *slot;

    if (t->frames.nelts == 0) {
        t->root = v;
        return 1;
    }

    slot = ngx_array_push(&t->values);
    if (slot == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return 0;
    }

    *slot = v;

    return 1;
}


/* a NUL-terminated pool copy of a decoded key or string, checked */

static char *
ngx_ioa_json_cstr(ngx_ioa_json_tree_t *t, const u_char *s, size_t len)
{
    u_char  *p;

    if (ngx_ioa_utf8_valid((u_char *) s, len) != NGX_OK) {
        ngx_ioa_error_set(t->err, "invalid_json", NULL,
                          "a string is not valid UTF-8");
        return NULL;
    }

    if (len && ngx_strlchr((u_char *) s, (u_char *) s + len, '\0')) {
        ngx_ioa_error_set(t->err, "invalid_json", NULL,
                          "\"\\u0000\" is not allowed in strings");
        return NULL;
    }

    p = ngx_pnalloc(t->pool, len + 1);
    if (p == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return NULL;
    }

    if (len) {
        ngx_memcpy(p, s, len);
    }

    p[len] = '\0';

    return (char *) p;
}


static int
ngx_ioa_json_tree_null(void *ctx)
{
    yajl_val              v;
    ngx_ioa_json_tree_t  *t;

    t = ctx;

    v = ngx_ioa_json_node(t, yajl_t_null);
    if (v == NULL) {
        return 0;
    }

    return ngx_ioa_json_add(t, v);
}


static int
ngx_ioa_json_tree_boolean(void *ctx, int b)
{
    yajl_val              v;
    ngx_ioa_json_tree_t  *t;

    t = ctx;

    v = ngx_ioa_json_node(t, b ? yajl_t_true : yajl_t_false);
    if (v == NULL) {
        return 0;
    }

    return ngx_ioa_json_add(t, v);
}


static int
ngx_ioa_json_tree_number(void *ctx, const char *s, size_t len)
{
    char                 *end;
    int64_t               i;
    yajl_val              v;
    ngx_ioa_json_tree_t  *t;

    t = ctx;

    v = ngx_ioa_json_node(t, yajl_t_number);
    if (v == NULL) {
        return 0;
    }

    v->u.number.r = ngx_pnalloc(t->pool, len + 1);
    if (v->u.number.r == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return 0;
    }

    ngx_memcpy(v->u.number.r, s, len);
    v->u.number.r[len] = '\0';

    if (ngx_ioa_json_int((u_char *) s, len, &i) == NGX_OK) {
        v->u.number.i = i;
        v->u.number.flags |= YAJL_NUMBER_INT_VALID;
    }

    errno = 0;
    v->u.number.d = strtod(v->u.number.r, &end);

    if (errno == 0 && *end == '\0') {
        v->u.number.flags |= YAJL_NUMBER_DOUBLE_VALID;
    }

    return ngx_ioa_json_add(t, v);
}


static int
ngx_ioa_json_tree_string(void *ctx, const unsigned char *s, size_t len)
{
    yajl_val              v;
    ngx_ioa_json_tree_t  *t;

    t = ctx;

    v = ngx_ioa_json_node(t, yajl_t_string);
    if (v == NULL) {
        return 0;
    }

    v->u.string = ngx_ioa_json_cstr(t, s, len);
    if (v->u.string == NULL) {
        return 0;
    }

    return ngx_ioa_json_add(t, v);
}


static int
ngx_ioa_json_tree_start(ngx_ioa_json_tree_t *t, yajl_type type)
{
    yajl_val               v;
    ngx_ioa_json_frame_t  *f;

    if (t->frames.nelts >= t->max_depth) {
        ngx_ioa_error_set(t->err, "too_deep", NULL,
                          "JSON nests deeper than %ui levels", t->max_depth);
        return 0;
    }

    v = ngx_ioa_json_node(t, type);
    if (v == NULL) {
        return 0;
    }

    f = ngx_array_push(&t->frames);
    if (f == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return 0;
    }

    f->node = v;
    f->values = t->values.nelts;
    f->keys = t->keys.nelts;

    return 1;
}


static int
ngx_ioa_json_tree_start_map(void *ctx)
{
    return ngx_ioa_json_tree_start(ctx, yajl_t_object);
}


static int
ngx_ioa_json_tree_start_array(void *ctx)
{
    return ngx_ioa_json_tree_start(ctx, yajl_t_array);
}


static int
ngx_ioa_json_tree_map_key(void *ctx, const unsigned char *s, size_t len)
{
    char                **key;
    ngx_ioa_json_tree_t  *t;

    t = ctx;

    key = ngx_array_push(&t->keys);
    if (key == NULL) {
        ngx_ioa_error_set(t->err, "internal_error", NULL, "out of memory");
        return 0;
    }

    *key = ngx_ioa_json_cstr(t, s, len);
    if (*key == NULL) {
        return 0;
    }

    return 1;
}


/* close the innermost container: its children are the top of the stacks */

static int
ngx_ioa_json_tree_end(void *ctx)
{
    size_t                 n, size;
    yajl_val               v, *values;
    ngx_ioa_json_tree_t   *t;
    ngx_ioa_json_frame_t  *f;

    t = ctx;

    f = (ngx_ioa_json_frame_t *) t->frames.elts + t->frames.nelts - 1;
    v = f->node;
    n = t->values.nelts - f->values;
    values = NULL;

    if (n) {
        size = n * sizeof(yajl_val);

        values = ngx_palloc(t->pool, size);
        if (values == NULL) {
            ngx_ioa_error_set(t->err, "internal_error", NULL,
                              "out of memory");
            return 0;
        }

        ngx_memcpy(values, (yajl_val *) t->values.elts + f->values, size);
    }

    if (v->type == yajl_t_object) {
        v->u.object.values = values;
        v->u.object.len = n;

        if (n) {
            size = n * sizeof(char *);

            v->u.object.keys = ngx_palloc(t->pool, size);
            if (v->u.object.keys == NULL) {
                ngx_ioa_error_set(t->err, "internal_error", NULL,
                                  "out of memory");
                return 0;
            }

            ngx_memcpy(v->u.object.keys,
                       (char **) t->keys.elts + f->keys, size);
        }

        t->keys.nelts = f->keys;

    } else {
        v->u.array.values = values;
        v->u.array.len = n;
    }

    t->values.nelts = f->values;
    t->frames.nelts--;

    return ngx_ioa_json_add(t, v);
}
