
/*
 * Copyright (C) ioa authors
 *
 * The audit stream: every deletion, erasure and re-chain is recorded in
 * <prefix>{audit}:log, and GET /audit reads it (admin).
 *
 * A Stream with its own hash tag, MAXLEN ~ NGX_IOA_AUDIT_MAXLEN, gets one
 * entry per action, written after the action succeeded: at (ms), action,
 * actor (the token's sub, "-" in open mode), target, detail.  Written from
 * here, not by the actions' scripts, since it is in a slot of its own; if
 * that write fails the action stands, and the failure is logged at the
 * error level with the entry's fields, so that the record is in the error
 * log.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* entries the audit stream keeps (about: XADD MAXLEN ~) */
#define NGX_IOA_AUDIT_MAXLEN      "100000"
/* entries GET /audit returns at most, and by default */
#define NGX_IOA_AUDIT_COUNT_MAX   1000
#define NGX_IOA_AUDIT_COUNT       100


static void ngx_ioa_audit_written(redisReply *reply, void *data);
static void ngx_ioa_audit_read(ngx_http_request_t *r, redisReply *reply);


/* the audit stream: one entry, not waited for */

void
ngx_ioa_audit(const char *action, ngx_str_t *actor, ngx_str_t *target,
    ngx_str_t *detail)
{
    ngx_ioa_args_t  a;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "XADD");
    ngx_ioa_key(&a, NGX_IOA_KEY_AUDIT);
    ngx_ioa_args_cstr(&a, "MAXLEN");
    ngx_ioa_args_cstr(&a, "~");
    ngx_ioa_args_cstr(&a, NGX_IOA_AUDIT_MAXLEN);
    ngx_ioa_args_cstr(&a, "*");
    ngx_ioa_args_cstr(&a, "at");
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, "action");
    ngx_ioa_args_cstr(&a, action);
    ngx_ioa_args_cstr(&a, "actor");
    ngx_ioa_args_str(&a, actor);
    ngx_ioa_args_cstr(&a, "target");
    ngx_ioa_args_str(&a, target);
    ngx_ioa_args_cstr(&a, "detail");
    ngx_ioa_args_str(&a, detail);

    if (ngx_ioa_redis_command_args(ngx_ioa_audit_written, NULL, &a) == NULL)
    {
        ngx_ioa_audit_written(NULL, NULL);
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "ioa: audit: %s \"%V\" by \"%V\": %V",
                  action, target, actor, detail);
}


static void
ngx_ioa_audit_written(redisReply *reply, void *data)
{
    if (reply != NULL && reply->type == REDIS_REPLY_STRING) {
        return;
    }

    /* the deletion stands; the notice logged with it is the record */
    ngx_ioa_redis_log_refusal(reply, "the audit stream");

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "ioa: an audit entry was not written to the audit "
                  "stream; the \"ioa: audit:\" notice before says what");
}


/* GET /audit?count=N: the newest entries first (admin) */

ngx_int_t
ngx_ioa_audit_handler(ngx_http_request_t *r)
{
    ngx_int_t        count;
    ngx_str_t        v;
    ngx_ioa_args_t   a;
    ngx_ioa_error_t  err;

    count = NGX_IOA_AUDIT_COUNT;

    if (ngx_http_arg(r, (u_char *) "count", 5, &v) == NGX_OK) {
        count = ngx_atoi(v.data, v.len);

        if (count < 1 || count > NGX_IOA_AUDIT_COUNT_MAX) {
            ngx_ioa_error_set(&err, "invalid_request", "count",
                              "count is an integer from 1 to %d",
                              NGX_IOA_AUDIT_COUNT_MAX);
            return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
        }
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "XREVRANGE");
    ngx_ioa_key(&a, NGX_IOA_KEY_AUDIT);
    ngx_ioa_args_cstr(&a, "+");
    ngx_ioa_args_cstr(&a, "-");
    ngx_ioa_args_cstr(&a, "COUNT");
    ngx_ioa_args_fmt(&a, "%i", count);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_audit_read, &a) != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* [{"id","at","action","actor","target","detail"}], every value a string
 * as Redis keeps it, fields as written (other writers may add their own) */

static void
ngx_ioa_audit_read(ngx_http_request_t *r, redisReply *reply)
{
    size_t           i, j;
    ngx_str_t        s, out;
    redisReply      *e, *f;
    ngx_ioa_jbuf_t   b;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 1024) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_byte(&b, '[');

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING
            || e->element[1]->type != REDIS_REPLY_ARRAY)
        {
            continue;
        }

        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_literal(&b, "{\"id\":");
        s.data = (u_char *) e->element[0]->str;
        s.len = e->element[0]->len;
        ngx_ioa_jbuf_str(&b, &s);

        f = e->element[1];

        for (j = 0; j + 1 < f->elements; j += 2) {
            if (f->element[j]->type != REDIS_REPLY_STRING
                || f->element[j + 1]->type != REDIS_REPLY_STRING)
            {
                continue;
            }

            ngx_ioa_jbuf_byte(&b, ',');
            s.data = (u_char *) f->element[j]->str;
            s.len = f->element[j]->len;
            ngx_ioa_jbuf_str(&b, &s);
            ngx_ioa_jbuf_byte(&b, ':');
            s.data = (u_char *) f->element[j + 1]->str;
            s.len = f->element[j + 1]->len;
            ngx_ioa_jbuf_str(&b, &s);
        }

        ngx_ioa_jbuf_byte(&b, '}');
    }

    ngx_ioa_jbuf_byte(&b, ']');

    if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}
