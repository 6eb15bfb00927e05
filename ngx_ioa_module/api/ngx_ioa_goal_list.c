
/*
 * Copyright (C) ioa authors
 *
 * GET /goals[?state=&limit=&before=]: the goals a caller may see, newest
 * first, a page at a time, for a console and for scripts/ioactl.
 *
 * The answer comes from the hub's goal index (goal_list.lua reads it;
 * goal_index.lua describes its keys), one script call in one slot: the
 * goals' own records each have a slot of their own, so listing them would
 * mean a SCAN of every node.  The index follows the records (nginx writes
 * "queued" and "cancelling", the workers every other state right after
 * writing the record), so on a Redis Cluster it may lag a record by a
 * moment, and a little longer when a writer died between the two writes,
 * until the goal moves again; GET /goals/{id} reads the record itself.
 *
 * Who sees what mirrors GET /goals/{id} (ngx_ioa_goal_owner()): in open
 * mode and with the admin scope every goal, with the launch scope only the
 * goals the token's subject launched, read from that launcher's own set so
 * the page costs the same however many goals others have.  The counts per
 * state are the hub's, so only the first kind of caller gets them.
 *
 * Paging: "next" is the last goal of a full page, passed back as before=;
 * goals launched later than the first page never shift the pages that
 * follow (they are newer than every cursor).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


#define NGX_IOA_GOAL_LIST_DEFAULT  20
#define NGX_IOA_GOAL_LIST_MAX      100


typedef struct {
    ngx_str_t                 owner;      /* "" every goal */
    ngx_str_t                 before;
} ngx_ioa_goal_list_t;


static void ngx_ioa_goal_list_read(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_goal_list_item(ngx_ioa_jbuf_t *b, redisReply *g);
static void ngx_ioa_goal_list_counts(ngx_ioa_jbuf_t *b, redisReply *counts);
static ngx_int_t ngx_ioa_goal_list_state(ngx_str_t *s);
static ngx_int_t ngx_ioa_goal_list_id(ngx_str_t *s);
static ngx_int_t ngx_ioa_goal_list_bad(ngx_http_request_t *r,
    const char *field, const char *text);


/* the states a goal can be in (goal_index.lua's order) */
static ngx_str_t  ngx_ioa_goal_states[] = {
    ngx_string("queued"), ngx_string("forming"), ngx_string("running"),
    ngx_string("cancelling"), ngx_string("concluded"), ngx_string("failed"),
    ngx_string("cancelled"), ngx_null_string
};


ngx_int_t
ngx_ioa_goal_list_handler(ngx_http_request_t *r, ngx_ioa_identity_t *who)
{
    ngx_int_t             n;
    ngx_str_t             state, before, limit;
    ngx_ioa_args_t        a;
    ngx_ioa_goal_list_t  *gl;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_arg(r, (u_char *) "state", 5, &state) != NGX_OK) {
        ngx_str_null(&state);

    } else if (ngx_ioa_goal_list_state(&state) != NGX_OK) {
        return ngx_ioa_goal_list_bad(r, "state", "\"state\" must be queued, "
                                     "forming, running, cancelling, "
                                     "concluded, failed or cancelled");
    }

    n = NGX_IOA_GOAL_LIST_DEFAULT;

    if (ngx_http_arg(r, (u_char *) "limit", 5, &limit) == NGX_OK) {
        n = ngx_atoi(limit.data, limit.len);

        if (n < 1 || n > NGX_IOA_GOAL_LIST_MAX) {
            return ngx_ioa_goal_list_bad(r, "limit", "\"limit\" must be an "
                                         "integer from 1 to 100");
        }
    }

    if (ngx_http_arg(r, (u_char *) "before", 6, &before) != NGX_OK) {
        ngx_str_null(&before);

    } else if (ngx_ioa_goal_list_id(&before) != NGX_OK) {
        return ngx_ioa_goal_list_bad(r, "before", "\"before\" must be a goal "
                                     "id (the \"next\" of a page)");
    }

    gl = ngx_pcalloc(r->pool, sizeof(ngx_ioa_goal_list_t));
    if (gl == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_goal_owner(who, &gl->owner);
    gl->before = before;
    ngx_ioa_rest_set_data(r, gl);

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_GOALS);
    ngx_ioa_args_buf(&a, state.len ? state.data : (u_char *) "", state.len);
    ngx_ioa_args_buf(&a, gl->owner.len ? gl->owner.data : (u_char *) "",
                     gl->owner.len);
    ngx_ioa_args_fmt(&a, "%i", n);
    ngx_ioa_args_buf(&a, before.len ? before.data : (u_char *) "",
                     before.len);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_LIST,
                                 ngx_ioa_goal_list_read, 1, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_goal_list_read(ngx_http_request_t *r, redisReply *reply)
{
    size_t                i;
    ngx_str_t             code, text, s;
    redisReply           *counts, *goals, *next;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_error_t       err;
    ngx_ioa_goal_list_t  *gl;

    gl = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {
        if (reply && code.len == 9
            && ngx_strncmp(code.data, "BADCURSOR", 9) == 0)
        {
            ngx_ioa_error_set(&err, "invalid_request", "before",
                              "goal %V is not in the index (it ended and "
                              "was removed?); list from the newest again",
                              &gl->before);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 &err));
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_ARRAY
        || reply->element[1]->type != REDIS_REPLY_ARRAY
        || reply->element[2]->type != REDIS_REPLY_STRING
        || ngx_ioa_jbuf_init(&b, r->pool, 1024) != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    counts = reply->element[0];
    goals = reply->element[1];
    next = reply->element[2];

    ngx_ioa_jbuf_literal(&b, "{\"goals\":[");

    for (i = 0; i < goals->elements; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_goal_list_item(&b, goals->element[i]);
    }

    ngx_ioa_jbuf_literal(&b, "],\"next\":");

    if (next->len) {
        s.data = (u_char *) next->str;
        s.len = next->len;
        ngx_ioa_jbuf_str(&b, &s);

    } else {
        ngx_ioa_jbuf_literal(&b, "null");
    }

    /* the hub's counts, for those who see every goal */
    if (gl->owner.len == 0) {
        ngx_ioa_goal_list_counts(&b, counts);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


/* { id, state, goal, created_at, updated_at, launched_by, parent } */

static void
ngx_ioa_goal_list_item(ngx_ioa_jbuf_t *b, redisReply *g)
{
    size_t       i;
    ngx_str_t    s;
    redisReply  *e;

    static const struct {
        const char  *name;
        ngx_uint_t   number;
    } fields[] = {
        { "{\"goal_id\":", 0 }, { ",\"state\":", 0 }, { ",\"goal\":", 0 },
        { ",\"created_at\":", 1 }, { ",\"updated_at\":", 1 },
        { ",\"launched_by\":", 0 }, { ",\"parent\":", 0 }
    };

    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        ngx_ioa_jbuf_raw(b, (u_char *) fields[i].name,
                         ngx_strlen(fields[i].name));

        e = (g->type == REDIS_REPLY_ARRAY && i < g->elements)
            ? g->element[i] : NULL;

        if (e == NULL || e->type != REDIS_REPLY_STRING
            || (e->len == 0 && i > 2))
        {
            ngx_ioa_jbuf_literal(b, "null");
            continue;
        }

        s.data = (u_char *) e->str;
        s.len = e->len;

        if (fields[i].number) {
            if (ngx_atoof(s.data, s.len) == NGX_ERROR) {
                ngx_ioa_jbuf_literal(b, "null");

            } else {
                ngx_ioa_jbuf_raw(b, s.data, s.len);
            }

            continue;
        }

        ngx_ioa_jbuf_str(b, &s);
    }

    ngx_ioa_jbuf_byte(b, '}');
}


/* ,"counts":{"queued":n,...}: every state, 0 when none is in it */

static void
ngx_ioa_goal_list_counts(ngx_ioa_jbuf_t *b, redisReply *counts)
{
    size_t       k;
    ngx_str_t    n;
    ngx_uint_t   i;
    redisReply  *name, *value;

    ngx_ioa_jbuf_literal(b, ",\"counts\":{");

    for (i = 0; ngx_ioa_goal_states[i].len; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(b, ',');
        }

        ngx_ioa_jbuf_str(b, &ngx_ioa_goal_states[i]);
        ngx_ioa_jbuf_byte(b, ':');
        ngx_str_set(&n, "0");

        for (k = 0; k + 1 < counts->elements; k += 2) {
            name = counts->element[k];
            value = counts->element[k + 1];

            if (name->type == REDIS_REPLY_STRING
                && value->type == REDIS_REPLY_STRING
                && name->len == ngx_ioa_goal_states[i].len
                && ngx_strncmp(name->str, ngx_ioa_goal_states[i].data,
                               name->len) == 0
                && ngx_atoi((u_char *) value->str, value->len) != NGX_ERROR)
            {
                n.data = (u_char *) value->str;
                n.len = value->len;
            }
        }

        ngx_ioa_jbuf_raw(b, n.data, n.len);
    }

    ngx_ioa_jbuf_byte(b, '}');
}


static ngx_int_t
ngx_ioa_goal_list_state(ngx_str_t *s)
{
    ngx_uint_t  i;

    for (i = 0; ngx_ioa_goal_states[i].len; i++) {
        if (s->len == ngx_ioa_goal_states[i].len
            && ngx_strncmp(s->data, ngx_ioa_goal_states[i].data, s->len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_ioa_goal_list_bad(ngx_http_request_t *r, const char *field,
    const char *text)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "invalid_request", field, "%s", text);

    return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
}


/* a goal id: 32 lowercase hexadecimal digits, as launch makes them */

static ngx_int_t
ngx_ioa_goal_list_id(ngx_str_t *s)
{
    size_t  i;

    if (s->len != 32) {
        return NGX_DECLINED;
    }

    for (i = 0; i < 32; i++) {
        if (!((s->data[i] >= '0' && s->data[i] <= '9')
              || (s->data[i] >= 'a' && s->data[i] <= 'f')))
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}
