
/*
 * Copyright (C) ioa authors
 *
 * The reply objects hiredis builds for the module, with one bound hiredis
 * 0.14 lacks: an array header may announce any length up to 2^31, and
 * hiredis allocates the element pointers for all of it at once, before a
 * single element has arrived ("*2000000000\r\n" costs 16 GB).  Redis is a
 * trusted party, but a bad proxy, a corrupted stream or a hostile server on
 * the network path must not make an nginx worker allocate that: an array
 * longer than NGX_IOA_REDIS_MAX_ELEMENTS is refused, hiredis reports an
 * error, and the connection is dropped and reconnected like any broken one.
 * Found by the redis_reply fuzzer.
 *
 * Everything else is what hiredis' own functions do, in the same layout
 * and with the same allocator, so freeReplyObject() frees these objects.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"

#include <hiredis/read.h>


/* far above any reply of ours: a catch-up batch is at most 10,000 entries,
 * a whole room's log for /fetch_chat_record two elements per envelope */
#define NGX_IOA_REDIS_MAX_ELEMENTS  (1 << 24)


static void *ngx_ioa_reply_string(const redisReadTask *task, char *str,
    size_t len);
static void *ngx_ioa_reply_array(const redisReadTask *task, int elements);
static void *ngx_ioa_reply_integer(const redisReadTask *task,
    long long value);
static void *ngx_ioa_reply_nil(const redisReadTask *task);
static redisReply *ngx_ioa_reply_new(const redisReadTask *task, int type);


redisReplyObjectFunctions  ngx_ioa_redis_reply_functions = {
    ngx_ioa_reply_string,
    ngx_ioa_reply_array,
    ngx_ioa_reply_integer,
    ngx_ioa_reply_nil,
    freeReplyObject
};


/* a new reply, linked into its parent array when it has one */

static redisReply *
ngx_ioa_reply_new(const redisReadTask *task, int type)
{
    redisReply  *r, *parent;

    r = calloc(1, sizeof(redisReply));
    if (r == NULL) {
        return NULL;
    }

    r->type = type;

    if (task->parent) {
        parent = task->parent->obj;
        parent->element[task->idx] = r;
    }

    return r;
}


static void *
ngx_ioa_reply_string(const redisReadTask *task, char *str, size_t len)
{
    char        *buf;
    redisReply  *r;

    buf = malloc(len + 1);
    if (buf == NULL) {
        return NULL;
    }

    r = ngx_ioa_reply_new(task, task->type);
    if (r == NULL) {
        free(buf);
        return NULL;
    }

    memcpy(buf, str, len);
    buf[len] = '\0';

    r->str = buf;
    r->len = len;

    return r;
}


static void *
ngx_ioa_reply_array(const redisReadTask *task, int elements)
{
    redisReply  *r;

    if (elements > NGX_IOA_REDIS_MAX_ELEMENTS) {
        return NULL;
    }

    r = ngx_ioa_reply_new(task, REDIS_REPLY_ARRAY);
    if (r == NULL) {
        return NULL;
    }

    if (elements > 0) {
        r->element = calloc(elements, sizeof(redisReply *));
        if (r->element == NULL) {
            if (task->parent) {
                ((redisReply *) task->parent->obj)->element[task->idx] = NULL;
            }

            free(r);
            return NULL;
        }
    }

    r->elements = elements;

    return r;
}


static void *
ngx_ioa_reply_integer(const redisReadTask *task, long long value)
{
    redisReply  *r;

    r = ngx_ioa_reply_new(task, REDIS_REPLY_INTEGER);
    if (r) {
        r->integer = value;
    }

    return r;
}


static void *
ngx_ioa_reply_nil(const redisReadTask *task)
{
    return ngx_ioa_reply_new(task, REDIS_REPLY_NIL);
}
