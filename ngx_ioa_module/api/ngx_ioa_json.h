
/*
 * ioa: JSON helpers shared by the whole module (errors, parsing REST
 * bodies into yajl trees, and writing compact JSON into pool buffers).
 */


#ifndef _NGX_IOA_JSON_H_INCLUDED_
#define _NGX_IOA_JSON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include <yajl/yajl_parse.h>
#include <yajl/yajl_tree.h>


/* the longest number text ngx_ioa_json_number_ok() takes */
#define NGX_IOA_JSON_NUMBER_MAX  64


#define NGX_IOA_ERROR_TEXT_LEN  256


/*
 * A refusal on its way back to a client.  "code" and "field" point to
 * static strings or to pool memory; "text" is always valid UTF-8.
 */
typedef struct {
    ngx_str_t            code;
    u_char               text[NGX_IOA_ERROR_TEXT_LEN];
    size_t               len;
    ngx_str_t            field;
} ngx_ioa_error_t;


/* a growable output buffer in a pool; callers check "failed" once */
typedef struct {
    ngx_pool_t          *pool;
    u_char              *start;
    u_char              *pos;
    u_char              *end;
    ngx_uint_t           failed;
} ngx_ioa_jbuf_t;


/*
 * Fills err; "code" and "field" (NULL for none) must be static strings;
 * "fmt" is an ngx_vslprintf() format.  The text is cut to 256 bytes on a
 * character boundary; control characters and invalid UTF-8 become '?',
 * so it is one printable line, safe for the error log.
 */
void ngx_ioa_error_set(ngx_ioa_error_t *err, const char *code,
    const char *field, const char *fmt, ...);

/*
 * {"op":"error","code":..,"message":..[,"field":..][,"comm_id":..]}
 * "field" only if set, "comm_id" only if comm_id is non-NULL and non-empty.
 */
ngx_int_t ngx_ioa_error_json(ngx_pool_t *pool, ngx_ioa_error_t *err,
    ngx_str_t *comm_id, ngx_str_t *out);

/*
 * Parses one JSON text (not NUL-terminated) into a yajl tree whose nodes,
 * keys and strings all live in the pool: never yajl_tree_free() it.
 * Strict: no comments, no trailing garbage, strict UTF-8 (no overlong
 * forms, no surrogates), no "\u0000" in keys or strings (tree strings are
 * C strings), at most max_depth nested containers.  Any top-level value
 * is accepted.  On failure returns NULL with err "invalid_json",
 * "too_deep" or "internal_error" (allocation).
 */
yajl_val ngx_ioa_json_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_uint_t max_depth, ngx_ioa_error_t *err);

/*
 * Runs one complete JSON text through a yajl callback parser with the
 * strict defaults above and releases the parser.  yajl's scratch memory
 * comes from the pool.  A callback that returns 0 must have filled err;
 * yajl's own refusals become "invalid_json" with yajl's one-line reason and
 * the byte offset.
 */
ngx_int_t ngx_ioa_json_stream(ngx_pool_t *pool,
    const yajl_callbacks *callbacks, void *ctx, u_char *data, size_t len,
    ngx_ioa_error_t *err);

/* NGX_OK and *v if a JSON number text is an integer that fits int64_t */
ngx_int_t ngx_ioa_json_int(const u_char *p, size_t len, int64_t *v);
ngx_int_t ngx_ioa_json_number_ok(const u_char *p, size_t len);

/* first member named "key" of an object; NULL if absent or not an object */
yajl_val ngx_ioa_json_get(yajl_val obj, const char *key);

/* NGX_OK and s pointing at the node's bytes if v is a string node */
ngx_int_t ngx_ioa_json_string(yajl_val v, ngx_str_t *s);

/* a JSON string literal with its quotes; s must be valid UTF-8 */
size_t ngx_ioa_json_str_len(ngx_str_t *s);
u_char *ngx_ioa_json_str(u_char *p, ngx_str_t *s);

/* NGX_OK if p is strict UTF-8 (RFC 3629: no overlong, no surrogates) */
ngx_int_t ngx_ioa_utf8_valid(u_char *p, size_t len);

/* the longest prefix of valid UTF-8 p, at most max bytes, on a boundary */
size_t ngx_ioa_utf8_clip(u_char *p, size_t len, size_t max);

ngx_int_t ngx_ioa_jbuf_init(ngx_ioa_jbuf_t *b, ngx_pool_t *pool,
    size_t size);
void ngx_ioa_jbuf_raw(ngx_ioa_jbuf_t *b, const u_char *s, size_t len);
void ngx_ioa_jbuf_byte(ngx_ioa_jbuf_t *b, u_char c);
void ngx_ioa_jbuf_str(ngx_ioa_jbuf_t *b, ngx_str_t *s);
void ngx_ioa_jbuf_int(ngx_ioa_jbuf_t *b, int64_t v);
void ngx_ioa_jbuf_val(ngx_ioa_jbuf_t *b, yajl_val v);
/* NGX_OK and out set to the bytes written, or NGX_ERROR if "failed" */
ngx_int_t ngx_ioa_jbuf_done(ngx_ioa_jbuf_t *b, ngx_str_t *out);

#define ngx_ioa_jbuf_literal(b, s)                                          \
    ngx_ioa_jbuf_raw(b, (const u_char *) s, sizeof(s) - 1)


#endif /* _NGX_IOA_JSON_H_INCLUDED_ */
