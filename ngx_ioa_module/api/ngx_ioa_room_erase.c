
/*
 * Copyright (C) ioa authors
 *
 * Erasure: what one sender said goes from every copy the hub keeps.
 * POST /rooms/{comm_id}/erase {"sender": NAME} (admin) runs it over one
 * room; DELETE /agents/{name}?erase=1 (ngx_ioa_delete.c) over every room
 * the agent is in, before it deletes the agent.
 *
 * The copies of a room's envelopes, and where each is read:
 *
 *   the room's log     {room:<id>}:log       catch-up, /rooms/{id}/events,
 *                                            /fetch_chat_record, MCP's
 *                                            transcript
 *   a goal's feed      {room:goal-<g>}:log   /goals/{g}/events, A2A
 *                      (workers/worker/      streams and histories
 *                      events.c: every
 *                      envelope of the room)
 *   a goal's record    {goal:<g>}:meta, fsm  GET /goals/{g} (the
 *                      (the results, the     conclusion), A2A's artifact,
 *                      conclusion quoting    MCP's transcript
 *                      them)
 *   the coordinator's  the room's log, and   a result handed to the next
 *   steps              the parent goal's     task, the CONCLUSION, a
 *                      room for a sub-goal   sub-goal's conclusion as its
 *                                            parent's task result
 *
 * So one room's erasure is, in order:
 *
 *   1. EXISTS members (POST only: 404 unknown_room, room_expired);
 *   2. room_goals.lua: the goals that ran in the room (their coordinator's
 *      steps carry "ioa_goal"), a batch of the log per call;
 *   3. goal_erase.lua "check" for each: a goal still running refuses the
 *      erasure (409 goal_running: its worker holds the results in memory
 *      and would write them again), one whose record expired is skipped,
 *      and the record says what it holds of the sender's words (its
 *      results; the LLM's text of a conclusion written from them);
 *   4. room_erase.lua: the sender's envelopes become markers and the
 *      coordinator's quotes of them "[erased]", hash chain kept (a room
 *      that does not verify is refused, 409 room_tampered, nothing
 *      changed), NGX_IOA_ERASE_BATCH entries per call;
 *   5. for each goal, goal_feed_erase.lua (the feed, in batches the same
 *      way) and goal_erase.lua (the record);
 *   6. the audit entries: chain_migrated and envelopes_erased for the room
 *      as before, goal_erased for each goal that changed;
 *   7. a goal with a parent (a sub-team's) had its conclusion posted into
 *      the parent's room as a task's result: the parent's room, feed and
 *      record are gone through the same way for the texts found (the
 *      "quotes" mode: the sender's own envelopes there are not what was
 *      asked for), up to NGX_IOA_ERASE_DEPTH parents up.
 *
 * Every step before 4 only reads, so a refusal changes nothing in that
 * room; an agent's rooms are gone through one after the other, and a
 * refusal stops there (the rooms before stay erased, each audited, and
 * the agent is not deleted: erasing again finishes the rest).  Every step
 * is harmless to repeat.  Between two calls Redis serves everyone else,
 * as for verify.
 *
 * The audit stream, <p>{audit}:log, gets its entries after each room's
 * rewrite succeeded: a Redis Cluster puts it in another slot than the
 * room, so it cannot be part of the scripts, and a record of a change that
 * did not happen would be worse than a missing one (ngx_ioa_audit() logs a
 * notice of each entry, and the error log says when its XADD failed).
 *
 * Why POST .../erase and not DELETE: the room and its entries stay (the
 * ids, the digests, the chain), only contents go; a verb sub-resource is
 * how the API already names such actions (POST /goals/{id}/cancel).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* log entries room_erase.lua and goal_feed_erase.lua copy per call: a few
 * ms of Redis time */
#define NGX_IOA_ERASE_BATCH  "500"

/* parents a sub-goal's texts are followed up to (teams nest one or two
 * deep in practice; the bound only ends a loop a corrupt record could
 * make) */
#define NGX_IOA_ERASE_DEPTH  8


/* a room the erasure goes through */
typedef struct {
    ngx_str_t                 comm_id;    /* "": the goal's record says */
    ngx_str_t                 goal;       /* a goal known to be in it */
    ngx_array_t              *texts;      /* ngx_str_t: said elsewhere */
    ngx_uint_t                depth;
    unsigned                  quotes:1;   /* a parent's: quotes only */
    unsigned                  must:1;     /* 404 when it does not exist */
} ngx_ioa_erase_room_t;


/* a goal of the room in progress */
typedef struct {
    ngx_str_t                 goal_id;
    ngx_str_t                 comm_id;
    ngx_str_t                 parent;
    ngx_array_t              *texts;      /* what its record holds */
    int64_t                   feed;       /* feed entries changed */
    int64_t                   record;     /* record fields changed */
    unsigned                  recorded:1;
} ngx_ioa_erase_goal_t;


struct ngx_ioa_erase_s {
    ngx_str_t                 sender;
    ngx_str_t                 actor;
    u_char                    at[NGX_INT64_LEN];
    size_t                    at_len;

    ngx_array_t               rooms;      /* ngx_ioa_erase_room_t */
    ngx_uint_t                room;       /* the one in progress */
    ngx_array_t               goals;      /* ngx_ioa_erase_goal_t: every
                                             room's, for the answer */
    ngx_uint_t                first;      /* the room's first goal */
    ngx_uint_t                goal;       /* the goal in progress */
    ngx_array_t              *seeds;      /* the room's texts */

    ngx_str_t                 comm_id;    /* the room in progress: */
    ngx_str_t                 log;
    ngx_str_t                 copy;
    ngx_str_t                 head;
    ngx_str_t                 quoted;
    ngx_str_t                 cursor;
    ngx_str_t                 old;        /* "<id> <h>" as the log had it */
    ngx_str_t                 new;        /* "<id> <h>" as rewritten */
    int64_t                   erased;
    int64_t                   rehashed;
    int64_t                   nquoted;

    int64_t                   total_erased;
    int64_t                   total_quoted;
    ngx_uint_t                changed;    /* rooms that changed */
    int64_t                   first_erased;
    int64_t                   first_rehashed;
    ngx_str_t                 first_head;

    ngx_ioa_erase_done_pt     done;
    void                     *data;
};


static void ngx_ioa_erase_body(ngx_http_request_t *r, ngx_str_t *body);
static ngx_int_t ngx_ioa_erase_answer(ngx_http_request_t *r,
    ngx_ioa_erase_t *er);
static ngx_int_t ngx_ioa_erase_room(ngx_http_request_t *r);
static void ngx_ioa_erase_located(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_open(ngx_http_request_t *r);
static void ngx_ioa_erase_exists(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_scan(ngx_http_request_t *r);
static void ngx_ioa_erase_scanned(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_check(ngx_http_request_t *r);
static void ngx_ioa_erase_checked(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_rewrite(ngx_http_request_t *r);
static void ngx_ioa_erase_rewritten(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_erase_feed(ngx_http_request_t *r);
static void ngx_ioa_erase_fed(ngx_http_request_t *r, redisReply *reply);
static ngx_int_t ngx_ioa_erase_record(ngx_http_request_t *r);
static void ngx_ioa_erase_recorded(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_erase_room_done(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_erase_parents(ngx_http_request_t *r,
    ngx_ioa_erase_t *er);
static ngx_int_t ngx_ioa_erase_refused(ngx_http_request_t *r,
    redisReply *reply, const char *what);
static ngx_int_t ngx_ioa_erase_audit(ngx_http_request_t *r,
    ngx_ioa_erase_t *er);
static ngx_int_t ngx_ioa_erase_texts(ngx_http_request_t *r,
    ngx_array_t *to, ngx_array_t *from);
static void ngx_ioa_erase_args_texts(ngx_ioa_args_t *a,
    ngx_array_t *texts);
static ngx_ioa_erase_goal_t *ngx_ioa_erase_goal_add(ngx_http_request_t *r,
    ngx_ioa_erase_t *er, ngx_str_t *goal_id);


/* POST /rooms/{comm_id}/erase */

ngx_int_t
ngx_ioa_room_erase_handler(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who)
{
    ngx_str_t              actor;
    ngx_ioa_error_t        err;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_room_t  *rm;

    if (comm_id->len == 0 || comm_id->len > NGX_IOA_COMM_ID_MAX) {
        ngx_ioa_error_set(&err, "invalid_request", "comm_id",
                          "a comm_id has 1 to %d bytes",
                          NGX_IOA_COMM_ID_MAX);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    if (who && !who->open) {
        actor = who->sub;

    } else {
        ngx_str_set(&actor, "-");
    }

    /* the sender is filled in from the body */
    er = ngx_ioa_erase_create(r, &actor, &actor);
    if (er == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* comm_id points into the request's URI, which outlives the body read */
    if (ngx_ioa_erase_add(r, er, comm_id) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rm = er->rooms.elts;
    rm[0].must = 1;

    ngx_ioa_rest_set_data(r, er);

    return ngx_ioa_read_body(r, ngx_ioa_erase_body);
}


/* POST /rooms/{comm_id}/erase's body: "sender", whose envelopes go */

static ngx_ioa_body_field_t  ngx_ioa_erase_fields[] = {

    { "sender", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      "\"sender\" must be the name of the agent whose envelopes to erase",
      0 },

    ngx_ioa_body_null_field
};


static void
ngx_ioa_erase_body(ngx_http_request_t *r, ngx_str_t *body)
{
    yajl_val          doc;
    ngx_int_t         rc;
    ngx_str_t         s;
    ngx_ioa_error_t   err;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    ngx_str_null(&s);

    if (ngx_ioa_body_check(doc, ngx_ioa_erase_fields, 0, &s, &err)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
        return;
    }

    /* a look-alike sender too (see ngx_ioa_agent_delete_handler()): more
     * than the table's name rule lets through */
    rc = ngx_ioa_valid_name(&s);

    if (rc != NGX_OK && rc != NGX_IOA_NAME_LOOKALIKE) {
        ngx_ioa_error_set(&err, "invalid_request", "sender", "%s",
                          ngx_ioa_erase_fields[0].text);
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

    ngx_ioa_finish(r, ngx_ioa_erase_run(r, er, ngx_ioa_erase_answer, NULL));
}


/*
 * The erasure's own interface, for DELETE /agents/{name}?erase=1 too:
 * create, add the rooms, run; "done" is called in the last reply's
 * callback and returns what ngx_ioa_finish() takes.  Errors are answered
 * here.
 */

ngx_ioa_erase_t *
ngx_ioa_erase_create(ngx_http_request_t *r, ngx_str_t *sender,
    ngx_str_t *actor)
{
    ngx_ioa_erase_t  *er;

    er = ngx_pcalloc(r->pool, sizeof(ngx_ioa_erase_t));
    if (er == NULL) {
        return NULL;
    }

    if (ngx_array_init(&er->rooms, r->pool, 4, sizeof(ngx_ioa_erase_room_t))
        != NGX_OK
        || ngx_array_init(&er->goals, r->pool, 4,
                          sizeof(ngx_ioa_erase_goal_t))
           != NGX_OK)
    {
        return NULL;
    }

    er->sender = *sender;
    er->actor = *actor;
    er->at_len = ngx_sprintf(er->at, "%L", ngx_ioa_now_ms()) - er->at;

    return er;
}


/* a room of the agent's: gone or empty, it has nothing to erase */

ngx_int_t
ngx_ioa_erase_add(ngx_http_request_t *r, ngx_ioa_erase_t *er,
    ngx_str_t *comm_id)
{
    ngx_ioa_erase_room_t  *rm;

    rm = ngx_array_push(&er->rooms);
    if (rm == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(rm, sizeof(ngx_ioa_erase_room_t));
    rm->comm_id = *comm_id;

    return NGX_OK;
}


ngx_int_t
ngx_ioa_erase_run(ngx_http_request_t *r, ngx_ioa_erase_t *er,
    ngx_ioa_erase_done_pt done, void *data)
{
    er->done = done;
    er->data = data;

    ngx_ioa_rest_set_data(r, er);

    return ngx_ioa_erase_room(r);
}


void *
ngx_ioa_erase_data(ngx_ioa_erase_t *er)
{
    return er->data;
}


/* {"rooms","envelopes","quoted","goals"}: what DELETE ?erase=1 answers */

void
ngx_ioa_erase_summary(ngx_ioa_erase_t *er, ngx_ioa_jbuf_t *b)
{
    ngx_uint_t             i, n;
    ngx_ioa_erase_goal_t  *g;

    g = er->goals.elts;

    for (i = 0, n = 0; i < er->goals.nelts; i++) {
        n += (g[i].feed + g[i].record) > 0;
    }

    ngx_ioa_jbuf_literal(b, "{\"rooms\":");
    ngx_ioa_jbuf_int(b, (int64_t) er->changed);
    ngx_ioa_jbuf_literal(b, ",\"envelopes\":");
    ngx_ioa_jbuf_int(b, er->total_erased);
    ngx_ioa_jbuf_literal(b, ",\"quoted\":");
    ngx_ioa_jbuf_int(b, er->total_quoted);
    ngx_ioa_jbuf_literal(b, ",\"goals\":");
    ngx_ioa_jbuf_int(b, (int64_t) n);
    ngx_ioa_jbuf_byte(b, '}');
}


int64_t
ngx_ioa_erase_erased(ngx_ioa_erase_t *er)
{
    return er->total_erased;
}


/*
 * POST's answer: {"comm_id","sender","erased","rechained","head","quoted",
 * "goals":[{"goal_id","comm_id","feed","record"}]}: the room's counts and
 * head; quoted over every room gone through (the room's, its goals'
 * parents'); each goal gone through, with what changed in it.
 */

static ngx_int_t
ngx_ioa_erase_answer(ngx_http_request_t *r, ngx_ioa_erase_t *er)
{
    ngx_uint_t             i;
    ngx_ioa_jbuf_t         b;
    ngx_ioa_erase_goal_t  *g;
    ngx_ioa_erase_room_t  *rm;

    rm = er->rooms.elts;

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &rm[0].comm_id);
    ngx_ioa_jbuf_literal(&b, ",\"sender\":");
    ngx_ioa_jbuf_str(&b, &er->sender);
    ngx_ioa_jbuf_literal(&b, ",\"erased\":");
    ngx_ioa_jbuf_int(&b, er->first_erased);
    ngx_ioa_jbuf_literal(&b, ",\"rechained\":");
    ngx_ioa_jbuf_int(&b, er->first_rehashed);
    ngx_ioa_jbuf_literal(&b, ",\"head\":");

    if (er->first_head.len && er->first_head.data[0] != '-') {
        ngx_ioa_jbuf_str(&b, &er->first_head);

    } else {
        ngx_ioa_jbuf_literal(&b, "null");
    }

    ngx_ioa_jbuf_literal(&b, ",\"quoted\":");
    ngx_ioa_jbuf_int(&b, er->total_quoted);
    ngx_ioa_jbuf_literal(&b, ",\"goals\":[");

    g = er->goals.elts;

    for (i = 0; i < er->goals.nelts; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_literal(&b, "{\"goal_id\":");
        ngx_ioa_jbuf_str(&b, &g[i].goal_id);
        ngx_ioa_jbuf_literal(&b, ",\"comm_id\":");
        ngx_ioa_jbuf_str(&b, &g[i].comm_id);
        ngx_ioa_jbuf_literal(&b, ",\"feed\":");
        ngx_ioa_jbuf_int(&b, g[i].feed);
        ngx_ioa_jbuf_literal(&b, ",\"record\":");
        ngx_ioa_jbuf_int(&b, g[i].record);
        ngx_ioa_jbuf_byte(&b, '}');
    }

    ngx_ioa_jbuf_literal(&b, "]}");

    return ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b);
}


/* the next room, or the end */

static ngx_int_t
ngx_ioa_erase_room(ngx_http_request_t *r)
{
    ngx_ioa_args_t         a;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);

    if (er->room >= er->rooms.nelts) {
        return er->done(r, er);
    }

    rm = er->rooms.elts;
    rm = &rm[er->room];

    if (rm->comm_id.len) {
        return ngx_ioa_erase_open(r);
    }

    /* a parent goal: its room is in its record */
    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "HGET");
    ngx_ioa_key_goal(&a, &rm->goal, NGX_IOA_GOAL_META);
    ngx_ioa_args_cstr(&a, "comm_id");

    if (ngx_ioa_rest_command_args(r, ngx_ioa_erase_located, &a) != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_erase_located(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t              id;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);
    rm = er->rooms.elts;
    rm = &rm[er->room];

    if (reply == NULL
        || (reply->type != REDIS_REPLY_STRING
            && reply->type != REDIS_REPLY_NIL))
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    id.data = (u_char *) reply->str;
    id.len = reply->type == REDIS_REPLY_STRING ? reply->len : 0;

    if (id.len == 0 || id.len > NGX_IOA_COMM_ID_MAX) {
        /* the parent's record expired: nothing of it left to go through */
        er->room++;
        ngx_ioa_finish(r, ngx_ioa_erase_room(r));
        return;
    }

    rm->comm_id.data = ngx_pstrdup(r->pool, &id);
    if (rm->comm_id.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rm->comm_id.len = id.len;

    ngx_ioa_finish(r, ngx_ioa_erase_open(r));
}


/* the room's keys and counts, then step 1 or 2 */

static ngx_int_t
ngx_ioa_erase_open(ngx_http_request_t *r)
{
    ngx_str_t              members;
    ngx_ioa_args_t         a;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);
    rm = er->rooms.elts;
    rm = &rm[er->room];

    er->comm_id = rm->comm_id;
    ngx_str_set(&er->cursor, "");
    ngx_str_set(&er->old, "");
    ngx_str_set(&er->new, "");
    er->erased = 0;
    er->rehashed = 0;
    er->nquoted = 0;
    er->first = er->goals.nelts;

    er->seeds = ngx_array_create(r->pool, 4, sizeof(ngx_str_t));

    if (er->seeds == NULL
        || ngx_ioa_erase_texts(r, er->seeds, rm->texts) != NGX_OK
        || ngx_ioa_key_room_alloc(r->pool, &er->comm_id, NGX_IOA_ROOM_LOG,
                                  &er->log) != NGX_OK
        || ngx_ioa_key_room_alloc(r->pool, &er->comm_id, NGX_IOA_ROOM_LOG_RW,
                                  &er->copy)
           != NGX_OK
        || ngx_ioa_key_room_alloc(r->pool, &er->comm_id, NGX_IOA_ROOM_LOG_RWQ,
                                  &er->quoted)
           != NGX_OK
        || ngx_ioa_key_room_alloc(r->pool, &er->comm_id, NGX_IOA_ROOM_CHAIN,
                                  &er->head)
           != NGX_OK
        || ngx_ioa_key_room_alloc(r->pool, &er->comm_id, NGX_IOA_ROOM_MEMBERS,
                                  &members)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rm->goal.len && ngx_ioa_erase_goal_add(r, er, &rm->goal) == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!rm->must) {
        return ngx_ioa_erase_scan(r);
    }

    /* a room exists while it has members (room_create.lua) */
    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "EXISTS");
    ngx_ioa_args_str(&a, &members);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_erase_exists, &a) != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
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

    ngx_ioa_finish(r, ngx_ioa_erase_scan(r));
}


/* 2. the goals that ran in the room, a batch of its log per call */

static ngx_int_t
ngx_ioa_erase_scan(ngx_http_request_t *r)
{
    ngx_ioa_args_t    a;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &er->log);
    ngx_ioa_args_str(&a, &er->cursor);
    ngx_ioa_args_cstr(&a, NGX_IOA_ERASE_BATCH);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_GOALS,
                                 ngx_ioa_erase_scanned, 1, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {cursor, goal_id...} */

static void
ngx_ioa_erase_scanned(ngx_http_request_t *r, redisReply *reply)
{
    size_t            i;
    ngx_str_t         id;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 1)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    for (i = 1; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_STRING) {
            continue;
        }

        id.data = (u_char *) reply->element[i]->str;
        id.len = reply->element[i]->len;

        /* the id makes keys: one that is not a goal id is no goal's */
        if (ngx_ioa_goal_id_valid(&id) != NGX_OK) {
            continue;
        }

        if (ngx_ioa_erase_goal_add(r, er, &id) == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    if (ngx_ioa_room_api_copy(r, reply, 0, &er->cursor) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (er->cursor.len) {
        ngx_ioa_finish(r, ngx_ioa_erase_scan(r));
        return;
    }

    er->goal = er->first;

    ngx_ioa_finish(r, ngx_ioa_erase_check(r));
}


/* 3. each goal's record: may the erasure go on, and what does it hold */

static ngx_int_t
ngx_ioa_erase_check(ngx_http_request_t *r)
{
    ngx_ioa_args_t         a;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);

    if (er->goal >= er->goals.nelts) {
        /* every goal may be gone through: the room's own rewrite */
        ngx_str_set(&er->cursor, "");
        return ngx_ioa_erase_rewrite(r);
    }

    g = er->goals.elts;
    g = &g[er->goal];
    rm = er->rooms.elts;
    rm = &rm[er->room];

    ngx_ioa_args_init(&a);
    ngx_ioa_key_goal(&a, &g->goal_id, NGX_IOA_GOAL_META);
    ngx_ioa_key_goal(&a, &g->goal_id, NGX_IOA_GOAL_FSM);
    ngx_ioa_args_str(&a, &er->sender);
    ngx_ioa_args_buf(&a, er->at, er->at_len);
    ngx_ioa_args_str(&a, &er->actor);
    ngx_ioa_args_cstr(&a, rm->quotes ? "quotes" : "erase");
    ngx_ioa_args_cstr(&a, "check");
    ngx_ioa_erase_args_texts(&a, rm->texts);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_ERASE,
                                 ngx_ioa_erase_checked, 2, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {state, comm_id, parent, text...} */

static void
ngx_ioa_erase_checked(ngx_http_request_t *r, redisReply *reply)
{
    size_t                 i;
    ngx_str_t              state, *t;
    ngx_ioa_error_t        err;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;

    er = ngx_ioa_rest_get_data(r);
    g = er->goals.elts;
    g = &g[er->goal];

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_room_api_copy(r, reply, 0, &state) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 2, &g->parent) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (state.len == 0) {
        /* the record expired (and its feed with it); nothing to check */
        er->goal++;
        ngx_ioa_finish(r, ngx_ioa_erase_check(r));
        return;
    }

    if (!(state.len == 9 && ngx_strncmp(state.data, "concluded", 9) == 0)
        && !(state.len == 6 && ngx_strncmp(state.data, "failed", 6) == 0)
        && !(state.len == 9 && ngx_strncmp(state.data, "cancelled", 9) == 0))
    {
        ngx_ioa_error_set(&err, "goal_running", "comm_id",
                          "goal \"%V\" is %V in room \"%V\"; cancel it "
                          "(POST /goals/%V/cancel) or let it end, then "
                          "erase: nothing in the room was erased%s",
                          &g->goal_id, &state, &er->comm_id, &g->goal_id,
                          er->room ? "; the rooms before it were (see "
                                     "GET /audit)" : "");
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err));
        return;
    }

    g->recorded = 1;

    if (g->parent.len && ngx_ioa_goal_id_valid(&g->parent) != NGX_OK) {
        ngx_str_set(&g->parent, "");
    }

    g->texts = ngx_array_create(r->pool, reply->elements - 3 + 1,
                                sizeof(ngx_str_t));
    if (g->texts == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    for (i = 3; i < reply->elements; i++) {
        t = ngx_array_push(g->texts);
        if (t == NULL || ngx_ioa_room_api_copy(r, reply, i, t) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    if (ngx_ioa_erase_texts(r, er->seeds, g->texts) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    er->goal++;

    ngx_ioa_finish(r, ngx_ioa_erase_check(r));
}


/* 4. the room's log, a batch per call; the texts on the first call */

static ngx_int_t
ngx_ioa_erase_rewrite(ngx_http_request_t *r)
{
    ngx_ioa_args_t          a;
    ngx_ioa_erase_t        *er;
    ngx_ioa_erase_room_t   *rm;

    er = ngx_ioa_rest_get_data(r);
    rm = er->rooms.elts;
    rm = &rm[er->room];

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &er->log);
    ngx_ioa_args_str(&a, &er->copy);
    ngx_ioa_args_str(&a, &er->head);
    ngx_ioa_args_str(&a, &er->quoted);
    ngx_ioa_args_str(&a, &er->sender);
    ngx_ioa_args_buf(&a, er->at, er->at_len);
    ngx_ioa_args_str(&a, &er->actor);
    ngx_ioa_args_str(&a, &er->cursor);
    ngx_ioa_args_str(&a, &er->old);
    ngx_ioa_args_str(&a, &er->new);
    ngx_ioa_args_cstr(&a, NGX_IOA_ERASE_BATCH);
    ngx_ioa_args_cstr(&a, rm->quotes ? "quotes" : "erase");

    if (er->cursor.len == 0) {
        ngx_ioa_erase_args_texts(&a, er->seeds);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_ERASE,
                                 ngx_ioa_erase_rewritten, 4, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {status, cursor, old state, new state, erased, rehashed, quoted} */

static void
ngx_ioa_erase_rewritten(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t         status;
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (reply && reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_erase_refused(r, reply, "room"));
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 7
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[4]->type != REDIS_REPLY_INTEGER
        || reply->element[5]->type != REDIS_REPLY_INTEGER
        || reply->element[6]->type != REDIS_REPLY_INTEGER)
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
    er->nquoted += reply->element[6]->integer;

    if (status.len == 4 && ngx_strncmp(status.data, "more", 4) == 0) {
        ngx_ioa_finish(r, ngx_ioa_erase_rewrite(r));
        return;
    }

    /* "done", or "same" (an empty log): the goals' feeds and records */

    if (er->room == 0) {
        er->first_erased = er->erased;
        er->first_rehashed = er->rehashed;
        er->first_head = er->new;
    }

    er->goal = er->first;
    ngx_str_set(&er->cursor, "");

    ngx_ioa_finish(r, ngx_ioa_erase_feed(r));
}


/* 5. each goal's feed, a batch per call, then its record */

static ngx_int_t
ngx_ioa_erase_feed(ngx_http_request_t *r)
{
    ngx_ioa_args_t         a;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);

    if (er->goal >= er->goals.nelts) {
        return ngx_ioa_erase_room_done(r);
    }

    g = er->goals.elts;
    g = &g[er->goal];
    rm = er->rooms.elts;
    rm = &rm[er->room];

    ngx_ioa_args_init(&a);
    ngx_ioa_key_goal_feed(&a, &g->goal_id, NGX_IOA_ROOM_LOG);
    ngx_ioa_key_goal_feed(&a, &g->goal_id, NGX_IOA_ROOM_LOG_RW);
    ngx_ioa_key_goal_feed(&a, &g->goal_id, NGX_IOA_ROOM_LOG_RWQ);
    ngx_ioa_args_str(&a, &er->sender);
    ngx_ioa_args_buf(&a, er->at, er->at_len);
    ngx_ioa_args_str(&a, &er->actor);
    ngx_ioa_args_str(&a, &er->cursor);
    ngx_ioa_args_cstr(&a, NGX_IOA_ERASE_BATCH);
    ngx_ioa_args_cstr(&a, rm->quotes ? "quotes" : "erase");

    if (er->cursor.len == 0) {
        ngx_ioa_erase_args_texts(&a, er->seeds);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_FEED_ERASE,
                                 ngx_ioa_erase_fed, 3, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {status, cursor, erased, quoted} */

static void
ngx_ioa_erase_fed(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t              status;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;

    er = ngx_ioa_rest_get_data(r);
    g = er->goals.elts;
    g = &g[er->goal];

    if (reply && reply->type == REDIS_REPLY_ERROR) {
        ngx_ioa_finish(r, ngx_ioa_erase_refused(r, reply, "feed"));
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 4
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[2]->type != REDIS_REPLY_INTEGER
        || reply->element[3]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_room_api_copy(r, reply, 0, &status) != NGX_OK
        || ngx_ioa_room_api_copy(r, reply, 1, &er->cursor) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    g->feed += reply->element[2]->integer + reply->element[3]->integer;

    if (status.len == 4 && ngx_strncmp(status.data, "more", 4) == 0) {
        ngx_ioa_finish(r, ngx_ioa_erase_feed(r));
        return;
    }

    ngx_str_set(&er->cursor, "");

    ngx_ioa_finish(r, ngx_ioa_erase_record(r));
}


static ngx_int_t
ngx_ioa_erase_record(ngx_http_request_t *r)
{
    ngx_ioa_args_t         a;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;
    ngx_ioa_erase_room_t  *rm;

    er = ngx_ioa_rest_get_data(r);
    g = er->goals.elts;
    g = &g[er->goal];
    rm = er->rooms.elts;
    rm = &rm[er->room];

    if (!g->recorded) {
        er->goal++;
        return ngx_ioa_erase_feed(r);
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_key_goal(&a, &g->goal_id, NGX_IOA_GOAL_META);
    ngx_ioa_key_goal(&a, &g->goal_id, NGX_IOA_GOAL_FSM);
    ngx_ioa_args_str(&a, &er->sender);
    ngx_ioa_args_buf(&a, er->at, er->at_len);
    ngx_ioa_args_str(&a, &er->actor);
    ngx_ioa_args_cstr(&a, rm->quotes ? "quotes" : "erase");
    ngx_ioa_args_cstr(&a, "");
    ngx_ioa_erase_args_texts(&a, er->seeds);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_GOAL_ERASE,
                                 ngx_ioa_erase_recorded, 2, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/* {fields changed} */

static void
ngx_ioa_erase_recorded(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;

    er = ngx_ioa_rest_get_data(r);
    g = er->goals.elts;
    g = &g[er->goal];

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 1
        || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    g->record = reply->element[0]->integer;
    er->goal++;

    ngx_ioa_finish(r, ngx_ioa_erase_feed(r));
}


/* 6. and 7.: the room's audit entries, its goals' parents, the next room */

static ngx_int_t
ngx_ioa_erase_room_done(ngx_http_request_t *r)
{
    ngx_ioa_erase_t  *er;

    er = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_erase_audit(r, er) != NGX_OK
        || ngx_ioa_erase_parents(r, er) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    er->total_erased += er->erased;
    er->total_quoted += er->nquoted;
    er->changed += (er->erased + er->nquoted) > 0;
    er->room++;

    return ngx_ioa_erase_room(r);
}


/*
 * A sub-goal's conclusion is its parent's task result (subteam.c), in the
 * parent's room, feed and record: they are gone through for what the
 * sub-goal held of the sender's words, once each chain of parents.
 */

static ngx_int_t
ngx_ioa_erase_parents(ngx_http_request_t *r, ngx_ioa_erase_t *er)
{
    ngx_uint_t             i, depth;
    ngx_array_t           *texts, *from;
    ngx_ioa_erase_goal_t  *g;
    ngx_ioa_erase_room_t  *rm;

    rm = er->rooms.elts;
    depth = rm[er->room].depth;
    from = rm[er->room].texts;

    if (depth >= NGX_IOA_ERASE_DEPTH) {
        return NGX_OK;
    }

    for (i = er->first; i < er->goals.nelts; i++) {
        g = er->goals.elts;
        g = &g[i];

        if (g->parent.len == 0 || (g->texts == NULL && from == NULL)) {
            continue;
        }

        texts = ngx_array_create(r->pool, 4, sizeof(ngx_str_t));

        if (texts == NULL
            || ngx_ioa_erase_texts(r, texts, from) != NGX_OK
            || ngx_ioa_erase_texts(r, texts, g->texts) != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (texts->nelts == 0) {
            continue;
        }

        /* the push may move the array: nothing of it is held across */
        rm = ngx_array_push(&er->rooms);
        if (rm == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(rm, sizeof(ngx_ioa_erase_room_t));
        rm->goal = g->parent;
        rm->texts = texts;
        rm->quotes = 1;
        rm->depth = depth + 1;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_erase_refused(ngx_http_request_t *r, redisReply *reply,
    const char *what)
{
    ngx_str_t              code, text;
    ngx_ioa_error_t        err;
    ngx_ioa_erase_t       *er;
    ngx_ioa_erase_goal_t  *g;

    er = ngx_ioa_rest_get_data(r);

    (void) ngx_ioa_redis_error(reply, &code, &text);

    if (code.len == 8 && ngx_strncmp(code.data, "TAMPERED", 8) == 0) {
        ngx_ioa_error_set(&err, "room_tampered", "comm_id",
                          "room \"%V\" does not verify (at %V); nothing "
                          "was erased in it%s", &er->comm_id, &text,
                          er->room ? "; the rooms before it were (see "
                                     "GET /audit)" : "");
        return ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err);
    }

    if (code.len == 4 && ngx_strncmp(code.data, "BUSY", 4) == 0) {
        if (what[0] == 'r') {
            ngx_ioa_error_set(&err, "room_busy", "comm_id",
                              "another erasure of room \"%V\" is in "
                              "progress", &er->comm_id);

        } else {
            g = er->goals.elts;
            ngx_ioa_error_set(&err, "room_busy", "comm_id",
                              "another erasure of goal \"%V\"'s feed is "
                              "in progress; room \"%V\" is erased, erase "
                              "again for the goal", &g[er->goal].goal_id,
                              &er->comm_id);
        }

        return ngx_ioa_send_error(r, NGX_HTTP_CONFLICT, &err);
    }

    /* LOST (a copy expired between batches: Redis was slow for a
     * minute), or anything else: what was being copied is untouched */
    return ngx_ioa_rest_redis_failed(r, reply);
}


/*
 * The audit stream (ngx_ioa_audit(), the same as deletions write):
 * chain_migrated first when entries were re-chained, with both heads, then
 * envelopes_erased when some were erased or quotes redacted, then
 * goal_erased for each goal that changed.  Not waited for: the erasure
 * stands either way, and ngx_ioa_audit() logs a notice of each entry.
 */

static ngx_int_t
ngx_ioa_erase_audit(ngx_http_request_t *r, ngx_ioa_erase_t *er)
{
    u_char                *p;
    size_t                 len;
    ngx_str_t              target, detail;
    ngx_uint_t             i;
    ngx_ioa_erase_goal_t  *g;

    len = sizeof("entries= v1_head= v2_head=") + NGX_INT64_LEN
          + er->old.len + er->new.len + NGX_IOA_COMM_ID_MAX
          + sizeof("comm_id= feed= record= erased= quoted=")
          + 4 * NGX_INT64_LEN;

    /* "<comm_id>/<sender>", "<goal_id>/<sender>" (32 digits) */
    target.data = ngx_pnalloc(r->pool, NGX_IOA_COMM_ID_MAX + 32 + 1
                                       + er->sender.len);
    detail.data = ngx_pnalloc(r->pool, len);
    if (target.data == NULL || detail.data == NULL) {
        return NGX_ERROR;
    }

    if (er->rehashed > 0) {
        p = ngx_sprintf(detail.data, "entries=%L v1_head=%V v2_head=%V",
                        er->rehashed, &er->old, &er->new);
        detail.len = p - detail.data;
        ngx_ioa_audit("chain_migrated", &er->actor, &er->comm_id, &detail);
    }

    if (er->erased > 0 || er->nquoted > 0) {
        target.len = ngx_sprintf(target.data, "%V/%V", &er->comm_id,
                                 &er->sender)
                     - target.data;
        p = ngx_sprintf(detail.data, "erased=%L", er->erased);

        if (er->nquoted > 0) {
            p = ngx_sprintf(p, " quoted=%L", er->nquoted);
        }

        detail.len = p - detail.data;
        ngx_ioa_audit("envelopes_erased", &er->actor, &target, &detail);
    }

    g = er->goals.elts;

    for (i = er->first; i < er->goals.nelts; i++) {
        g[i].comm_id = er->comm_id;

        if (g[i].feed + g[i].record == 0) {
            continue;
        }

        target.len = ngx_sprintf(target.data, "%V/%V", &g[i].goal_id,
                                 &er->sender)
                     - target.data;
        detail.len = ngx_sprintf(detail.data, "comm_id=%V feed=%L record=%L",
                                 &er->comm_id, g[i].feed, g[i].record)
                     - detail.data;
        ngx_ioa_audit("goal_erased", &er->actor, &target, &detail);
    }

    return NGX_OK;
}


/* the texts of "from" appended to "to" (either may be NULL: none) */

static ngx_int_t
ngx_ioa_erase_texts(ngx_http_request_t *r, ngx_array_t *to,
    ngx_array_t *from)
{
    ngx_str_t   *t, *f;
    ngx_uint_t   i;

    if (from == NULL) {
        return NGX_OK;
    }

    f = from->elts;

    for (i = 0; i < from->nelts; i++) {
        if (f[i].len == 0) {
            continue;
        }

        t = ngx_array_push(to);
        if (t == NULL) {
            return NGX_ERROR;
        }

        *t = f[i];
    }

    return NGX_OK;
}


/* the texts, after a script's fixed arguments (NULL: none); they are in
 * the request's pool, which outlives the send */

static void
ngx_ioa_erase_args_texts(ngx_ioa_args_t *a, ngx_array_t *texts)
{
    ngx_str_t   *t;
    ngx_uint_t   i;

    if (texts == NULL) {
        return;
    }

    t = texts->elts;

    for (i = 0; i < texts->nelts; i++) {
        ngx_ioa_args_str(a, &t[i]);
    }
}


/* a goal of the room in progress, once */

static ngx_ioa_erase_goal_t *
ngx_ioa_erase_goal_add(ngx_http_request_t *r, ngx_ioa_erase_t *er,
    ngx_str_t *goal_id)
{
    ngx_uint_t             i;
    ngx_ioa_erase_goal_t  *g;

    g = er->goals.elts;

    for (i = er->first; i < er->goals.nelts; i++) {
        if (g[i].goal_id.len == goal_id->len
            && ngx_strncmp(g[i].goal_id.data, goal_id->data, goal_id->len)
               == 0)
        {
            return &g[i];
        }
    }

    g = ngx_array_push(&er->goals);
    if (g == NULL) {
        return NULL;
    }

    ngx_memzero(g, sizeof(ngx_ioa_erase_goal_t));

    g->goal_id.data = ngx_pstrdup(r->pool, goal_id);
    if (g->goal_id.data == NULL) {
        return NULL;
    }

    g->goal_id.len = goal_id->len;

    return g;
}
