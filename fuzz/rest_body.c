
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: the JSON that REST bodies go through
 * (ngx_ioa_json.c): the tree parse with its depth limit and strict UTF-8,
 * the accessors every handler uses on the fields it reads (/register's name,
 * type, desc, tags; /retrieve_assistant's sender and capabilities;
 * /teamup's agent_names; /fetch_chat_record's comm_id; /launch_goal's
 * goal and team_member_names), and the serializer that copies values
 * through.  The handlers themselves need a request and Redis, so their
 * validation is covered by t/030-registry.t, t/095-goal-api.t and the
 * others; this is the part that meets the raw bytes.  Property checked:
 * a parsed document serialized again parses again.
 */


#include "fuzz_common.h"
#include "ngx_ioa.h"

#include <assert.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void
ioa_fuzz_walk(yajl_val v, ngx_uint_t depth)
{
    size_t     i;
    int64_t    n;
    ngx_str_t  s;

    if (v == NULL || depth > 64) {
        return;
    }

    if (ngx_ioa_json_string(v, &s) == NGX_OK) {
        assert(ngx_ioa_utf8_valid(s.data, s.len) == NGX_OK);
        (void) ngx_ioa_json_str_len(&s);
    }

    if (YAJL_IS_NUMBER(v) && v->u.number.r) {
        (void) ngx_ioa_json_int((u_char *) v->u.number.r,
                                ngx_strlen(v->u.number.r), &n);
    }

    if (YAJL_IS_ARRAY(v)) {
        for (i = 0; i < v->u.array.len; i++) {
            ioa_fuzz_walk(v->u.array.values[i], depth + 1);
        }
    }

    if (YAJL_IS_OBJECT(v)) {
        for (i = 0; i < v->u.object.len; i++) {
            ioa_fuzz_walk(v->u.object.values[i], depth + 1);
        }
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    yajl_val          doc, again;
    ngx_str_t         out;
    ngx_uint_t        i;
    ngx_pool_t       *pool;
    ngx_ioa_jbuf_t    b;
    ngx_ioa_error_t   err;

    static const char  *fields[] = {
        "name", "type", "desc", "tags", "speaks_protocol", "sender",
        "capabilities", "limit", "online_only", "agent_names", "team_name",
        "comm_id", "goal", "team_member_names", "team_up_depth",
        "max_turns", NULL
    };

    pool = ioa_fuzz_pool();
    if (pool == NULL) {
        return 0;
    }

    doc = ngx_ioa_json_parse(pool, (u_char *) data, size, 32, &err);

    if (doc == NULL) {
        assert(err.code.len > 0);
        ngx_destroy_pool(pool);
        return 0;
    }

    for (i = 0; fields[i]; i++) {
        ioa_fuzz_walk(ngx_ioa_json_get(doc, fields[i]), 0);
    }

    ioa_fuzz_walk(doc, 0);

    if (ngx_ioa_jbuf_init(&b, pool, 256) == NGX_OK) {
        ngx_ioa_jbuf_val(&b, doc);

        if (ngx_ioa_jbuf_done(&b, &out) == NGX_OK) {
            again = ngx_ioa_json_parse(pool, out.data, out.len, 40, &err);
            assert(again != NULL);
        }
    }

    ngx_destroy_pool(pool);

    return 0;
}
