
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: what the module does with bytes from Redis.  The
 * input is fed to hiredis' RESP reader in two pieces (as two reads would
 * bring it), with the module's reply objects (ngx_ioa_redis_reply.c: an
 * array header announcing billions of elements once made hiredis allocate
 * them all at once; found here), and every reply it yields goes through the
 * module's pure
 * reply handling: the error split into code and text
 * (ngx_ioa_redis_error, which MOVED/ASK/TRYAGAIN/NOSCRIPT and the scripts'
 * own codes go through), the stream-id parser used on every entry and
 * pub/sub message (ngx_ioa_parse_sid), and the key-slot hash applied to
 * strings (ioa_key_slot, lib/).  The stateful consumers (the slot map,
 * redirections, catch-up) are exercised against real Redis and Redis
 * Cluster faults in t/070-redis-client.t and t/130-cluster.t.
 */


#include "fuzz_common.h"
#include "ngx_ioa.h"

#include <assert.h>
#include <hiredis/read.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void
ioa_fuzz_reply(redisReply *r, ngx_uint_t depth)
{
    size_t         i;
    ngx_str_t      code, text;
    ngx_ioa_sid_t  sid;

    if (r == NULL || depth > 16) {
        return;
    }

    if (ngx_ioa_redis_error(r, &code, &text) != NGX_OK) {
        /* only an error reply is one, and its code is a prefix of it */
        assert(r->type == REDIS_REPLY_ERROR);
        assert(code.len <= r->len && text.len <= r->len);
    }

    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
        || r->type == REDIS_REPLY_ERROR)
    {
        (void) ngx_ioa_parse_sid((u_char *) r->str, r->len, &sid);
        assert(ioa_key_slot(r->str, r->len) < IOA_KEY_SLOTS);
    }

    if (r->type == REDIS_REPLY_ARRAY) {
        for (i = 0; i < r->elements; i++) {
            ioa_fuzz_reply(r->element[i], depth + 1);
        }
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void         *reply;
    size_t        half;
    redisReader  *reader;

    ioa_fuzz_init();

    reader = redisReaderCreate();
    if (reader == NULL) {
        return 0;
    }

    /* the reply objects the module's connections use */
    reader->fn = &ngx_ioa_redis_reply_functions;

    half = size / 2;

    if (redisReaderFeed(reader, (const char *) data, half) != REDIS_OK
        || redisReaderFeed(reader, (const char *) data + half, size - half)
           != REDIS_OK)
    {
        redisReaderFree(reader);
        return 0;
    }

    for ( ;; ) {
        reply = NULL;

        if (redisReaderGetReply(reader, &reply) != REDIS_OK
            || reply == NULL)
        {
            break;
        }

        ioa_fuzz_reply(reply, 0);
        freeReplyObject(reply);
    }

    redisReaderFree(reader);

    return 0;
}
