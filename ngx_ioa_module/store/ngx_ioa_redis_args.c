
/*
 * Copyright (C) ioa authors
 *
 * A Redis command's arguments, built in order: no numbered slots.
 *
 *     ngx_ioa_args_t  a;
 *
 *     ngx_ioa_args_init(&a);
 *     ngx_ioa_args_cstr(&a, "XGROUP");
 *     ngx_ioa_args_cstr(&a, "CREATE");
 *     ngx_ioa_key(&a, NGX_IOA_KEY_JOBS);
 *     ...
 *     req = ngx_ioa_redis_command_args(handler, data, &a);
 *
 * The sending functions (ngx_ioa_redis_command_args(), _script_args() in
 * ngx_ioa_redis.c, ngx_ioa_rest_command_args(), ...) format the command at once (the Redis
 * layer keeps its own formatted copy for resends) and release the
 * builder, so an argument need only live until the send: a string of the
 * request, a literal, a number or a key formatted into the builder's own
 * space.  A builder that is not sent is released with ngx_ioa_args_free().
 *
 * The builder lives on the caller's stack: NGX_IOA_ARGS_INLINE arguments
 * and NGX_IOA_ARGS_SCRATCH bytes of formatted ones need no allocation,
 * which is every command but a room's member list and the like; beyond,
 * the arrays and the space grow on the heap (ngx_alloc), freed at the
 * send.  A failed allocation marks the builder, and its send fails as a
 * Redis that cannot be reached does (NULL, or the callers' 503): nothing
 * half built is ever sent.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa_redis_args.h"


/* a formatted argument that does not fit what is left of the scratch
 * space gets a heap chunk of at least this much */
#define NGX_IOA_ARGS_CHUNK    1024

/* the longest formatted argument */
#define NGX_IOA_ARGS_MAX_FMT  (64 * 1024)


struct ngx_ioa_args_chunk_s {
    ngx_ioa_args_chunk_t     *next;
    u_char                    data[1];
};


static u_char *ngx_ioa_args_space(ngx_ioa_args_t *a, size_t len);


void
ngx_ioa_args_init(ngx_ioa_args_t *a)
{
    a->n = 0;
    a->nalloc = NGX_IOA_ARGS_INLINE;
    a->argv = a->argv_inline;
    a->argvlen = a->argvlen_inline;
    a->pos = a->scratch;
    a->end = a->scratch + NGX_IOA_ARGS_SCRATCH;
    a->chunks = NULL;
    a->failed = 0;
}


void
ngx_ioa_args_free(ngx_ioa_args_t *a)
{
    ngx_ioa_args_chunk_t  *c, *next;

    if (a->argv != a->argv_inline) {
        ngx_free(a->argv);
        ngx_free(a->argvlen);
    }

    for (c = a->chunks; c; c = next) {
        next = c->next;
        ngx_free(c);
    }

    ngx_ioa_args_init(a);
}


/* ngx_ioa_args_buf(), ngx_ioa_args_str(), ngx_ioa_args_cstr() are inline
 * in ngx_ioa.h: bytes the caller keeps alive until the send */


/* a copy into the builder's own space: for what does not outlive the
 * caller's frame until the send */

void
ngx_ioa_args_copy(ngx_ioa_args_t *a, const u_char *data, size_t len)
{
    u_char  *p;

    p = ngx_ioa_args_space(a, len);
    if (p == NULL) {
        return;
    }

    ngx_memcpy(p, data, len);
    a->pos = p + len;

    ngx_ioa_args_buf(a, p, len);
}


void
ngx_ioa_args_int(ngx_ioa_args_t *a, int64_t v)
{
    ngx_ioa_args_fmt(a, "%L", v);
}


/* ngx_sprintf()'s formats (%V, %s, %ui, %L, ...), into the builder */

void
ngx_ioa_args_fmt(ngx_ioa_args_t *a, const char *fmt, ...)
{
    size_t    len;
    u_char   *p, *last;
    va_list   args;

    /* most arguments fit what is left of the space; one that fills it
     * exactly may have been cut, and is formatted again into a chunk four
     * times as large, up to NGX_IOA_ARGS_MAX_FMT (no key comes near it:
     * beyond, the builder fails rather than send a cut key) */

    len = a->end - a->pos;

    if (len < NGX_IOA_ARGS_CHUNK / 4) {
        len = NGX_IOA_ARGS_CHUNK;
    }

    for ( ;; ) {
        p = ngx_ioa_args_space(a, len);
        if (p == NULL) {
            return;
        }

        va_start(args, fmt);
        last = ngx_vslprintf(p, p + len, fmt, args);
        va_end(args);

        if ((size_t) (last - p) < len) {
            break;
        }

        if (len >= NGX_IOA_ARGS_MAX_FMT) {
            a->failed = 1;
            return;
        }

        len *= 4;
    }

    a->pos = last;

    ngx_ioa_args_buf(a, p, last - p);
}


ngx_int_t
ngx_ioa_args_grow(ngx_ioa_args_t *a)
{
    size_t        *argvlen;
    ngx_uint_t     n;
    const char   **argv;

    if (a->failed) {
        return NGX_ERROR;
    }

    n = a->nalloc * 2;

    argv = ngx_alloc(n * sizeof(const char *), ngx_cycle->log);
    argvlen = ngx_alloc(n * sizeof(size_t), ngx_cycle->log);

    if (argv == NULL || argvlen == NULL) {
        if (argv) {
            ngx_free(argv);
        }

        if (argvlen) {
            ngx_free(argvlen);
        }

        a->failed = 1;
        return NGX_ERROR;
    }

    ngx_memcpy(argv, a->argv, a->n * sizeof(const char *));
    ngx_memcpy(argvlen, a->argvlen, a->n * sizeof(size_t));

    if (a->argv != a->argv_inline) {
        ngx_free(a->argv);
        ngx_free(a->argvlen);
    }

    a->argv = argv;
    a->argvlen = argvlen;
    a->nalloc = n;

    return NGX_OK;
}


/* len bytes at a->pos, or in a new chunk that becomes the space */

static u_char *
ngx_ioa_args_space(ngx_ioa_args_t *a, size_t len)
{
    size_t                 size;
    ngx_ioa_args_chunk_t  *c;

    if (a->failed) {
        return NULL;
    }

    if ((size_t) (a->end - a->pos) >= len) {
        return a->pos;
    }

    size = ngx_max(len, NGX_IOA_ARGS_CHUNK);

    c = ngx_alloc(sizeof(ngx_ioa_args_chunk_t) + size, ngx_cycle->log);
    if (c == NULL) {
        a->failed = 1;
        return NULL;
    }

    c->next = a->chunks;
    a->chunks = c;

    a->pos = c->data;
    a->end = c->data + size;

    return a->pos;
}
