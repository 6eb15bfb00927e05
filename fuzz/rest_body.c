
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: the JSON that REST bodies go through
 * (ngx_ioa_json.c): the tree parse with its depth limit and strict UTF-8,
 * the accessors every handler uses on the fields it reads (/register's name,
 * type, desc, tags; /retrieve_assistant's sender and capabilities;
 * /teamup's agent_names; /fetch_chat_record's comm_id; /launch_goal's
 * goal and team_member_names), the body validator (ngx_ioa_body.c) over a
 * table of every type it knows but names (the name rule needs the
 * module's configuration), and the serializer that copies values
 * through.  The handlers themselves need a request and Redis, so their
 * validation is covered by t/030-registry.t, t/095-goal-api.t and the
 * others; this is the part that meets the raw bytes.  Properties checked:
 * a parsed document serialized again parses again, and a refusal names a
 * field of the table and is one printable line.
 */


#include "fuzz_common.h"
#include "ngx_ioa.h"

#include <assert.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


typedef struct {
    ngx_str_t             name;
    ngx_str_t             type;
    yajl_val              tags;
    int64_t               limit;
    ngx_uint_t            online;
    yajl_val              any;
} ioa_fuzz_body_t;


static ngx_str_t  ioa_fuzz_types[] = {
    ngx_string("Human Assistant"),
    ngx_string("Thing Assistant"),
    ngx_null_string
};


static ngx_ioa_body_field_t  ioa_fuzz_tag = {
    NULL, NGX_IOA_BODY_STRING, 0, 1, 64, NULL, NULL, "[%uz] is bad",
    NGX_IOA_BODY_NONE
};


static ngx_ioa_body_field_t  ioa_fuzz_fields[] = {

    { "name", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED, 1, 256,
      NULL, NULL, NULL, offsetof(ioa_fuzz_body_t, name) },

    { "type", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL, 0, 0,
      ioa_fuzz_types, NULL, "type", offsetof(ioa_fuzz_body_t, type) },

    ngx_ioa_body_step,

    { "tags", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_NULL, 0, 32,
      NULL, &ioa_fuzz_tag, "tags", offsetof(ioa_fuzz_body_t, tags) },

    { "limit", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL, 1, 50,
      NULL, NULL, NULL, offsetof(ioa_fuzz_body_t, limit) },

    { "online_only", NGX_IOA_BODY_BOOLEAN, 0, 0, 0,
      NULL, NULL, NULL, offsetof(ioa_fuzz_body_t, online) },

    { "cont_input", NGX_IOA_BODY_VALUE, NGX_IOA_BODY_NULL, 0, 0,
      NULL, NULL, NULL, offsetof(ioa_fuzz_body_t, any) },

    ngx_ioa_body_null_field
};


/* both steps of the table; what is kept must be what the table allows */

static void
ioa_fuzz_body(yajl_val doc)
{
    ngx_uint_t        step;
    ngx_ioa_error_t   err;
    ioa_fuzz_body_t   in;

    ngx_memzero(&in, sizeof(ioa_fuzz_body_t));

    for (step = 0; step < 2; step++) {
        if (ngx_ioa_body_check(doc, ioa_fuzz_fields, step, &in, &err)
            != NGX_OK)
        {
            assert(err.field.len > 0);
            assert(ngx_ioa_body_field(ioa_fuzz_fields,
                                      (char *) err.field.data)
                   != NULL);
            assert(ngx_ioa_utf8_valid(err.text, err.len) == NGX_OK);
            return;
        }
    }

    assert(in.name.len >= 1 && in.name.len <= 256);
    assert(in.limit == 0 || (in.limit >= 1 && in.limit <= 50));
    assert(in.tags == NULL || YAJL_IS_ARRAY(in.tags));
}


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
    ioa_fuzz_body(doc);

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
