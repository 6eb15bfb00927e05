
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: the envelope parser and validator
 * (ngx_ioa_envelope.c: the streaming yajl parse, the field checks, the
 * server-stamped re-serialization) on one WebSocket message or HTTP body,
 * exactly as the post paths call it.  Property checked besides memory
 * safety: an accepted envelope's re-serialized JSON is valid JSON, carries
 * the connection's identity, and parses again.
 */


#include "fuzz_common.h"
#include "ngx_ioa.h"

#include <assert.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char              *copy;
    ngx_int_t            rc;
    ngx_str_t            identity = ngx_string("Alice");
    ngx_pool_t          *pool;
    ngx_ioa_error_t      err;
    ngx_ioa_envelope_t   env, again;

    pool = ioa_fuzz_pool();
    if (pool == NULL) {
        return 0;
    }

    /* the parser reads the bytes in place: give it exactly these */
    copy = ngx_pnalloc(pool, size ? size : 1);
    if (copy == NULL) {
        ngx_destroy_pool(pool);
        return 0;
    }

    ngx_memcpy(copy, data, size);

    rc = ngx_ioa_envelope_parse(pool, copy, size, &identity, 32,
                                1700000000000, &env, &err);

    if (rc == NGX_OK && !env.is_control) {
        assert(env.json.len > 0);
        assert(ngx_strlcasestrn(env.json.data, env.json.data + env.json.len,
                                (u_char *) "\"sender\":\"Alice\"", 16 - 1)
               != NULL);

        rc = ngx_ioa_envelope_parse(pool, env.json.data, env.json.len,
                                    &identity, 32, 1700000000000, &again,
                                    &err);
        assert(rc == NGX_OK);
    }

    if (rc != NGX_OK) {
        /* a refusal always says why */
        assert(err.code.len > 0);
    }

    ngx_destroy_pool(pool);

    return 0;
}
