
/*
 * Copyright (C) ioa authors
 *
 * One room for its readers who are not in it: GET /rooms/{comm_id}/events
 * (the room's live transcript as SSE, with resume) and GET
 * /rooms/{comm_id}/verify (its log's hash chain, checked).
 *
 * IoA's own ways to read a room are a member's socket, the observer feed
 * of every room (live only: no ids, no resume) and /fetch_chat_record (a
 * page, no live).  A console or `ioactl tail` that follows one room needs
 * both halves, live and exact across a reload or a hub restart.  A room's
 * log is a Stream like a goal's feed, so following it is the same follower
 * a goal's events use (ngx_ioa_link.c: catch-up from the Stream after
 * Last-Event-ID, then live, no gap and no duplicate), under the room's own
 * read rule instead of a goal's owner rule.
 *
 * Who may read: ngx_ioa_auth_room() (open mode, "observer", "admin", or
 * "observer:<comm_id>"), else a member of the room whose token has the
 * "agent" or "launch" scope (no other scope makes its bearer a member).  One Redis command
 * settles it before anything is streamed: EXISTS on the members set for a
 * caller with the scope (a room exists while it has members, see
 * room_create.lua), SISMEMBER for one without it, whose 0 answers 403
 * whether or not the room exists, so a caller without the scope learns
 * nothing about rooms it is not in (as /fetch_chat_record).  A missing room
 * is 404 room_expired if its tombstone says it expired (ngx_ioa_retention.c),
 * else unknown_room.  A goal's feed
 * ("goal-<id>") has no members set: it is not a room here, and its own
 * endpoint applies its owner rule.
 *
 * verify runs redis-scripts/verify.lua a batch at a time until the end of
 * the log (a script holds Redis while it runs, and a log can be long); the
 * cursor and the last link travel in the request between batches.  The
 * answer is the outcome, with HTTP 200 whatever it is: a broken chain is a
 * finding, not a failed request.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* log entries verify.lua checks per call: a few ms of Redis time */
#define NGX_IOA_VERIFY_BATCH  "1000"


typedef enum {
    NGX_IOA_ROOM_API_EVENTS = 0,
    NGX_IOA_ROOM_API_VERIFY
} ngx_ioa_room_api_e;


typedef struct {
    ngx_ioa_room_api_e        what;
    ngx_str_t                 comm_id;
    ngx_str_t                 key;        /* members set, then log */
    ngx_str_t                 head;       /* the chain head key */
    ngx_str_t                 cursor;
    ngx_str_t                 state;
    ngx_str_t                 start;      /* where the chain starts */
    int64_t                   checked;
    int64_t                   unchained;
    int64_t                   redacted;
    int64_t                   legacy;     /* entries under chain v1 */
    ngx_uint_t                scoped;     /* may read without membership */
    ngx_ioa_identity_t       *who;        /* its token's expiry counts */
} ngx_ioa_room_api_t;


static ngx_int_t ngx_ioa_room_api_start(ngx_http_request_t *r,
    ngx_str_t *comm_id, ngx_ioa_identity_t *who, ngx_ioa_room_api_e what);
static void ngx_ioa_room_api_allowed(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_room_verify_next(ngx_http_request_t *r);
static void ngx_ioa_room_verify_reply(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_room_verify_answer(ngx_http_request_t *r,
    const char *status, ngx_str_t *at, ngx_str_t *reason);


/* GET /rooms/{comm_id}/events */

ngx_int_t
ngx_ioa_room_events_handler(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who)
{
    return ngx_ioa_room_api_start(r, comm_id, who, NGX_IOA_ROOM_API_EVENTS);
}


/* GET /rooms/{comm_id}/verify */

ngx_int_t
ngx_ioa_room_verify_handler(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who)
{
    return ngx_ioa_room_api_start(r, comm_id, who, NGX_IOA_ROOM_API_VERIFY);
}


static ngx_int_t
ngx_ioa_room_api_start(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who, ngx_ioa_room_api_e what)
{
    ngx_ioa_args_t       a;
    ngx_ioa_error_t      err;
    ngx_ioa_room_api_t  *ra;

    if (comm_id->len == 0 || comm_id->len > NGX_IOA_COMM_ID_MAX) {
        ngx_ioa_error_set(&err, "invalid_request", "comm_id",
                          "a comm_id has 1 to %d bytes",
                          NGX_IOA_COMM_ID_MAX);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    ra = ngx_pcalloc(r->pool, sizeof(ngx_ioa_room_api_t));
    if (ra == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the router's comm_id points into the request's URI, which lives as
     * long as the request */
    ra->what = what;
    ra->comm_id = *comm_id;
    ra->who = who;
    ra->scoped = (ngx_ioa_auth_room(who, comm_id, &err) == NGX_OK);

    /* scopes first, then membership, as /fetch_chat_record: a token that
     * is no agent or launcher (the person of its goals' rooms) is a member
     * of no room, whatever name it carries, so "metrics", another room's
     * "observer:" or another service's scope read nothing here */
    if (!ra->scoped
        && ngx_ioa_auth_allows(who, NGX_IOA_SCOPE_MEMBER, NULL, &err)
           != NGX_OK)
    {
        (void) ngx_ioa_auth_room(who, comm_id, &err);
        return ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err);
    }

    if (ngx_ioa_key_room_alloc(r->pool, comm_id, NGX_IOA_ROOM_MEMBERS, &ra->key)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_rest_set_data(r, ra);

    ngx_ioa_args_init(&a);

    if (ra->scoped) {
        ngx_ioa_args_cstr(&a, "EXISTS");
        ngx_ioa_args_str(&a, &ra->key);

    } else {
        ngx_ioa_args_cstr(&a, "SISMEMBER");
        ngx_ioa_args_str(&a, &ra->key);
        ngx_ioa_args_str(&a, &who->sub);
    }

    if (ngx_ioa_rest_command_args(r, ngx_ioa_room_api_allowed, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_room_api_allowed(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_error_t      err;
    ngx_ioa_room_api_t  *ra;

    ra = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->integer == 0) {
        if (ra->scoped) {
            /* unknown_room, or room_expired (ngx_ioa_retention.c) */
            if (ngx_ioa_room_gone(r, &ra->comm_id) != NGX_OK) {
                ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
            }

            return;
        }

        ngx_ioa_error_set(&err, "forbidden", "comm_id",
                          "reading room \"%V\" needs membership, or the "
                          "\"observer\" or \"observer:%V\" scope",
                          &ra->comm_id, &ra->comm_id);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return;
    }

    if (ra->what == NGX_IOA_ROOM_API_VERIFY) {
        if (ngx_ioa_key_room_alloc(r->pool, &ra->comm_id, NGX_IOA_ROOM_LOG,
                                   &ra->key) != NGX_OK
            || ngx_ioa_key_room_alloc(r->pool, &ra->comm_id, NGX_IOA_ROOM_CHAIN,
                                      &ra->head)
               != NGX_OK)
        {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_str_set(&ra->cursor, "");
        ngx_str_set(&ra->state, "");

        ngx_ioa_finish(r, ngx_ioa_room_verify_next(r));
        return;
    }

    /* the stream keeps the module's context slot for itself from here (the
     * REST context's cleanup holds its own pointer) */
    ngx_ioa_set_ctx(r, NULL);

    ngx_ioa_finish(r, ngx_ioa_inbox_handler(r, &ra->comm_id,
                                            NGX_IOA_CLIENT_FOLLOWER,
                                            ra->who));
}


static ngx_int_t
ngx_ioa_room_verify_next(ngx_http_request_t *r)
{
    ngx_ioa_args_t       a;
    ngx_ioa_room_api_t  *ra;

    ra = ngx_ioa_rest_get_data(r);

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &ra->key);
    ngx_ioa_args_str(&a, &ra->head);
    ngx_ioa_args_str(&a, &ra->cursor);
    ngx_ioa_args_str(&a, &ra->state);
    ngx_ioa_args_cstr(&a, NGX_IOA_VERIFY_BATCH);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_VERIFY,
                                 ngx_ioa_room_verify_reply, 2, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {status, cursor, state, checked, unchained, note, start, redacted,
 *  legacy} */

static void
ngx_ioa_room_verify_reply(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t            status, at, note, start;
    ngx_ioa_room_api_t  *ra;

    ra = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 6
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[3]->type != REDIS_REPLY_INTEGER
        || reply->element[4]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_room_api_copy(r, reply, 0, &status) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 1, &at) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 5, &note) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 6, &start) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ra->checked += reply->element[3]->integer;
    ra->unchained += reply->element[4]->integer;

    if (reply->elements > 8
        && reply->element[7]->type == REDIS_REPLY_INTEGER
        && reply->element[8]->type == REDIS_REPLY_INTEGER)
    {
        ra->redacted += reply->element[7]->integer;
        ra->legacy += reply->element[8]->integer;
    }

    /* the call that finds where the chain starts says so in its note;
     * "broken" puts its reason there and the start after it */

    if (status.len == 6 && ngx_strncmp(status.data, "broken", 6) == 0) {
        if (start.len) {
            ra->start = start;
        }

        ngx_ioa_finish(r, ngx_ioa_room_verify_answer(r, "broken", &at,
                                                     &note));
        return;
    }

    if (note.len) {
        ra->start = note;
    }

    if (status.len == 4 && ngx_strncmp(status.data, "more", 4) == 0) {
        ra->cursor = at;

        if (ngx_ioa_room_api_copy(r, reply, 2, &ra->state) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_room_verify_next(r));
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_room_verify_answer(r,
                          status.len == 2 ? "intact" : "empty", NULL, NULL));
}


/*
 * {"comm_id","status":"intact"|"empty"|"broken","checked","unchained",
 *  "redacted","legacy","chain_from"[,"broken_at","reason"]}
 */

static ngx_int_t
ngx_ioa_room_verify_answer(ngx_http_request_t *r, const char *status,
    ngx_str_t *at, ngx_str_t *reason)
{
    size_t               len;
    u_char              *p;
    ngx_str_t            out;
    ngx_ioa_room_api_t  *ra;

    ra = ngx_ioa_rest_get_data(r);

    len = sizeof("{\"comm_id\":,\"status\":\"\",\"checked\":,\"unchained\":,"
                 "\"redacted\":,\"legacy\":,"
                 "\"chain_from\":,\"broken_at\":,\"reason\":}") - 1
          + ngx_ioa_json_str_len(&ra->comm_id) + ngx_strlen(status)
          + 4 * NGX_INT64_LEN + ngx_ioa_json_str_len(&ra->start)
          + (at ? ngx_ioa_json_str_len(at) + ngx_ioa_json_str_len(reason)
                : 0);

    out.data = ngx_pnalloc(r->pool, len);
    if (out.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(out.data, "{\"comm_id\":", sizeof("{\"comm_id\":") - 1);
    p = ngx_ioa_json_str(p, &ra->comm_id);
    p = ngx_sprintf(p, ",\"status\":\"%s\",\"checked\":%L,\"unchained\":%L,"
                       "\"redacted\":%L,\"legacy\":%L,\"chain_from\":",
                    status, ra->checked, ra->unchained, ra->redacted,
                    ra->legacy);

    if (ra->start.len) {
        p = ngx_ioa_json_str(p, &ra->start);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    if (at) {
        p = ngx_cpymem(p, ",\"broken_at\":", sizeof(",\"broken_at\":") - 1);
        p = ngx_ioa_json_str(p, at);
        p = ngx_cpymem(p, ",\"reason\":", sizeof(",\"reason\":") - 1);
        p = ngx_ioa_json_str(p, reason);
    }

    *p++ = '}';
    out.len = p - out.data;

    return ngx_ioa_send_json(r, NGX_HTTP_OK, &out);
}


/* element i of an array reply, copied into the request's pool ("" when it
 * is absent or not a string; also for ngx_ioa_room_erase.c) */

ngx_int_t
ngx_ioa_room_api_copy(ngx_http_request_t *r, redisReply *reply, size_t i,
    ngx_str_t *s)
{
    redisReply  *e;

    ngx_str_set(s, "");

    if (i >= reply->elements) {
        return NGX_OK;
    }

    e = reply->element[i];

    if (e->type != REDIS_REPLY_STRING || e->len == 0) {
        return NGX_OK;
    }

    s->data = ngx_pnalloc(r->pool, e->len);
    if (s->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(s->data, e->str, e->len);
    s->len = e->len;

    return NGX_OK;
}
