
/*
 * Copyright (C) ioa authors
 *
 * POST /rooms/{comm_id}/erase {"sender": NAME} (admin): every envelope NAME
 * posted in the room is replaced in the room's log by a redaction marker,
 * and the erasure is recorded in the audit stream.
 *
 * redis-scripts/room_erase.lua does the work a batch at a time (a Stream
 * entry cannot be edited in place: the log is copied with the same ids and
 * renamed over, see its header); this file only loops it, as the verify
 * endpoint loops verify.lua, with the cursor and both chain states
 * travelling in the request between batches.  Entries under chain v1 are
 * re-chained under v2 in the same pass (an erased v1 entry would leave its
 * hash nothing to be checked against); a log that does not verify is
 * refused (409 room_tampered), since re-chaining it would launder the
 * tampering.
 *
 * The audit stream, <p>{audit}:log, gets one entry per erasure
 * (envelopes_erased) and, before it, one per re-chain (chain_migrated,
 * with the old and the new head, so that an auditor who kept the old head
 * can tie it to the new one).  It is written after the rewrite succeeded:
 * a Redis Cluster puts it in another slot than the room, so it cannot be
 * part of the script, and a record of a change that did not happen would
 * be worse than a missing one (the error log says when its XADD failed).
 *
 * Why POST .../erase and not DELETE: the room and its entries stay (the
 * ids, the digests, the chain), only contents go; a verb sub-resource is
 * how the API already names such actions (POST /goals/{id}/cancel).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* log entries room_erase.lua copies per call: a few ms of Redis time */
#define NGX_IOA_ERASE_BATCH  "500"


typedef struct {
    ngx_str_t                 comm_id;
    ngx_str_t                 sender;
    ngx_str_t                 actor;
    ngx_str_t                 log;
    ngx_str_t                 copy;
    ngx_str_t                 head;
    ngx_str_t                 cursor;
    ngx_str_t                 old;        /* "<id> <h>" as the log had it */
    ngx_str_t                 new;        /* "<id> <h>" as rewritten */
    u_char                    at[NGX_INT64_LEN];
    size_t                    at_len;
    int64_t                   erased;
    int64_t                   rehashed;
} ngx_ioa_erase_t;


static void ngx_ioa_erase_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_erase_exists(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_next(ngx_http_request_t *r);
static void ngx_ioa_erase_reply(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_refused(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_erase_audit(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_erase_answer(ngx_http_request_t *r);


ngx_int_t
ngx_ioa_room_erase_handler(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who)
{
    ngx_ioa_error_t   err;
    ngx_ioa_erase_t  *er;

    if (comm_id->len == 0 || comm_id->len > NGX_IOA_COMM_ID_MAX) {
        ngx_ioa_error_set(&err, "invalid_request", "comm_id",
                          "a comm_id has 1 to %d bytes",
                          NGX_IOA_COMM_ID_MAX);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    er = ngx_pcalloc(r->pool, sizeof(ngx_ioa_erase_t));
    if (er == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* comm_id points into the request's URI, which outlives the body read */
    er->comm_id = *comm_id;

    if (who && !who->open) {
        er->actor = who->sub;

    } else {
        ngx_str_set(&er->actor, "-");
    }

    ngx_ioa_rest_set_data(r, er);

    return ngx_ioa_read_body(r, ngx_ioa_erase_body);
}


static void
ngx_ioa_erase_body(ngx_http_request_t *r, ngx_str_t *body)
{
    yajl_val          doc, v;
    ngx_int_t         rc;
    ngx_str_t         s;
    const char       *argv[2];
    size_t            argvlen[2];
    ngx_ioa_error_t   err;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    v = ngx_ioa_json_get(doc, "sender");

    /* a look-alike sender too: see ngx_ioa_agent_delete_handler() */
    rc = (v == NULL || ngx_ioa_json_string(v, &s) != NGX_OK)
         ? NGX_DECLINED : ngx_ioa_valid_name(&s);

    if (rc != NGX_OK && rc != NGX_IOA_NAME_LOOKALIKE) {
        ngx_ioa_error_set(&err, "invalid_request", "sender",
                          "\"sender\" must be the name of the agent whose "
                          "envelopes to erase");
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
        return;
    }

    /* the body's string goes with the document: keep a copy */
    er->sender.data = ngx_pstrdup(r->pool, &s);
    if (er->sender.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    er->sender.len = s.len;

    if (ngx_ioa_room_api_key(r, &er->comm_id, ":members", &er->log)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* a room exists while it has members (room_create.lua) */
    argv[0] = "EXISTS";
    argvlen[0] = 6;
    argv[1] = (const char *) er->log.data;
    argvlen[1] = er->log.len;

    if (ngx_ioa_rest_command(r, ngx_ioa_erase_exists, 2, argv, argvlen)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_erase_exists(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->integer == 0) {
        /* unknown_room, or room_expired (ngx_ioa_retention.c) */
        if (ngx_ioa_room_gone(r, &er->comm_id) != NGX_OK) {
            ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        }

        return;
    }

    if (ngx_ioa_room_api_key(r, &er->comm_id, ":log", &er->log) != NGX_OK
        || ngx_ioa_room_api_key(r, &er->comm_id, ":log:rw", &er->copy)
           != NGX_OK
        || ngx_ioa_room_api_key(r, &er->comm_id, ":chain", &er->head)
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    er->at_len = ngx_sprintf(er->at, "%L", ngx_ioa_now_ms()) - er->at;

    ngx_ioa_finish(r, ngx_ioa_erase_next(r));
}


static ngx_int_t
ngx_ioa_erase_next(ngx_http_request_t *r)
{
    const char       *argv[10];
    size_t            argvlen[10];
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    argv[0] = (const char *) er->log.data;
    argvlen[0] = er->log.len;
    argv[1] = (const char *) er->copy.data;
    argvlen[1] = er->copy.len;
    argv[2] = (const char *) er->head.data;
    argvlen[2] = er->head.len;
    argv[3] = (const char *) er->sender.data;
    argvlen[3] = er->sender.len;
    argv[4] = (const char *) er->at;
    argvlen[4] = er->at_len;
    argv[5] = (const char *) er->actor.data;
    argvlen[5] = er->actor.len;
    argv[6] = (const char *) er->cursor.data;
    argvlen[6] = er->cursor.len;
    argv[7] = (const char *) er->old.data;
    argvlen[7] = er->old.len;
    argv[8] = (const char *) er->new.data;
    argvlen[8] = er->new.len;
    argv[9] = NGX_IOA_ERASE_BATCH;
    argvlen[9] = sizeof(NGX_IOA_ERASE_BATCH) - 1;

    if (ngx_ioa_rest_script(r, NGX_IOA_SCRIPT_ROOM_ERASE,
                            ngx_ioa_erase_reply, 3, 10, argv, argvlen)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {status, cursor, old state, new state, erased, rehashed} */

static void
ngx_ioa_erase_reply(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t         status;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (reply && reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_erase_refused(r, reply));
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 6
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[4]->type != REDIS_REPLY_INTEGER
        || reply->element[5]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_room_api_copy(r, reply, 0, &status) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 1, &er->cursor) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 2, &er->old) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 3, &er->new) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    er->erased += reply->element[4]->integer;
    er->rehashed += reply->element[5]->integer;

    if (status.len == 4 && ngx_strncmp(status.data, "more", 4) == 0) {
        ngx_ioa_finish(r, ngx_ioa_erase_next(r));
        return;
    }

    /* "done", or "same" (an empty log) */

    if (er->erased == 0 && er->rehashed == 0) {
        ngx_ioa_finish(r, ngx_ioa_erase_answer(r));
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_erase_audit(r));
}


static ngx_int_t
ngx_ioa_erase_refused(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t         code, text;
    ngx_ioa_error_t   err;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    (void) ngx_ioa_redis_error(reply, &code, &text);

    if (code.len == 8 && ngx_strncmp(code.data, "TAMPERED", 8) == 0) {
        ngx_ioa_error_set(&err, "room_tampered", "comm_id",
                          "room \"%V\" does not verify (at %V); nothing "
                          "was erased", &er->comm_id, &text);
        return ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err);
    }

    if (code.len == 4 && ngx_strncmp(code.data, "BUSY", 4) == 0) {
        ngx_ioa_error_set(&err, "room_busy", "comm_id",
                          "another erasure of room \"%V\" is in progress",
                          &er->comm_id);
        return ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err);
    }

    /* LOST (the copy expired between batches: Redis was slow for a
     * minute), or anything else: the log itself was not touched */
    return ngx_ioa_rest_redis_failed(r, reply);
}


/*
 * The audit stream (ngx_ioa_audit(), the same as deletions write):
 * chain_migrated first when entries were re-chained, with both heads, then
 * envelopes_erased when some were.  Not waited for: the erasure stands
 * either way, and ngx_ioa_audit() logs a notice of each entry.
 */

static ngx_int_t
ngx_ioa_erase_audit(ngx_http_request_t *r)
{
    u_char           *p;
    ngx_str_t         target, detail;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    target.data = ngx_pnalloc(r->pool, er->comm_id.len + 1 + er->sender.len);
    detail.data = ngx_pnalloc(r->pool, sizeof("entries= v1_head= v2_head=")
                                       + NGX_INT64_LEN + er->old.len
                                       + er->new.len);
    if (target.data == NULL || detail.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (er->rehashed > 0) {
        p = ngx_sprintf(detail.data, "entries=%L v1_head=%V v2_head=%V",
                        er->rehashed, &er->old, &er->new);
        detail.len = p - detail.data;
        ngx_ioa_audit("chain_migrated", &er->actor, &er->comm_id, &detail);
    }

    if (er->erased > 0) {
        target.len = ngx_sprintf(target.data, "%V/%V", &er->comm_id,
                                 &er->sender)
                     - target.data;
        p = ngx_sprintf(detail.data, "erased=%L", er->erased);
        detail.len = p - detail.data;
        ngx_ioa_audit("envelopes_erased", &er->actor, &target, &detail);
    }

    return ngx_ioa_erase_answer(r);
}


/* {"comm_id","sender","erased","rechained","head"} */

static ngx_int_t
ngx_ioa_erase_answer(ngx_http_request_t *r)
{
    ngx_ioa_jbuf_t    b;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &er->comm_id);
    ngx_ioa_jbuf_literal(&b, ",\"sender\":");
    ngx_ioa_jbuf_str(&b, &er->sender);
    ngx_ioa_jbuf_literal(&b, ",\"erased\":");
    ngx_ioa_jbuf_int(&b, er->erased);
    ngx_ioa_jbuf_literal(&b, ",\"rechained\":");
    ngx_ioa_jbuf_int(&b, er->rehashed);
    ngx_ioa_jbuf_literal(&b, ",\"head\":");

    if (er->new.len && er->new.data[0] != '-') {
        ngx_ioa_jbuf_str(&b, &er->new);

    } else {
        ngx_ioa_jbuf_literal(&b, "null");
    }

    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b);
}
