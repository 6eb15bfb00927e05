
/*
 * Copyright (C) ioa authors
 *
 * A Redis command's arguments, built in order (ngx_ioa_redis_args.c says
 * how).  Plain nginx types only, so that the builder stands below all the
 * module: ngx_ioa.h includes it, the sends are ngx_ioa_redis.c's.
 */


#ifndef _NGX_IOA_REDIS_ARGS_H_INCLUDED_
#define _NGX_IOA_REDIS_ARGS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


#define NGX_IOA_ARGS_INLINE   16
#define NGX_IOA_ARGS_SCRATCH  512

typedef struct ngx_ioa_args_chunk_s  ngx_ioa_args_chunk_t;

typedef struct {
    ngx_uint_t                n;
    ngx_uint_t                nalloc;
    const char              **argv;
    size_t                   *argvlen;
    u_char                   *pos;          /* formatted arguments */
    u_char                   *end;
    ngx_ioa_args_chunk_t     *chunks;       /* beyond the scratch space */
    ngx_uint_t                failed;       /* an allocation failed */
    const char               *argv_inline[NGX_IOA_ARGS_INLINE];
    size_t                    argvlen_inline[NGX_IOA_ARGS_INLINE];
    u_char                    scratch[NGX_IOA_ARGS_SCRATCH];
} ngx_ioa_args_t;

void ngx_ioa_args_init(ngx_ioa_args_t *a);
void ngx_ioa_args_free(ngx_ioa_args_t *a);
ngx_int_t ngx_ioa_args_grow(ngx_ioa_args_t *a);

/* inline: a post adds a dozen arguments per envelope (bench/callgrind.sh) */
static ngx_inline void
ngx_ioa_args_buf(ngx_ioa_args_t *a, const u_char *data, size_t len)
{
    if (a->n == a->nalloc && ngx_ioa_args_grow(a) != NGX_OK) {
        return;
    }

    a->argv[a->n] = (const char *) data;
    a->argvlen[a->n] = len;
    a->n++;
}

#define ngx_ioa_args_str(a, s)   ngx_ioa_args_buf(a, (s)->data, (s)->len)
#define ngx_ioa_args_cstr(a, s)                                              \
    ngx_ioa_args_buf(a, (const u_char *) (s), ngx_strlen((s)))
void ngx_ioa_args_copy(ngx_ioa_args_t *a, const u_char *data, size_t len);
void ngx_ioa_args_int(ngx_ioa_args_t *a, int64_t v);
void ngx_ioa_args_fmt(ngx_ioa_args_t *a, const char *fmt, ...);


#endif /* _NGX_IOA_REDIS_ARGS_H_INCLUDED_ */
