
/*
 * Copyright (C) ioa authors
 *
 * The A2A facade's tasks (see ngx_ioa_a2a.c): a task is a goal, and what
 * A2A says of it is read from the goal's record (GET /goals/{id}) and its
 * feed (P{room:goal-<id>}, followed with the room machinery).
 *
 *   ngx_ioa_a2a_feed()    one entry of the feed: the task follows it, and
 *                         zero to two events say what changed (a state
 *                         passed already says nothing: a feed may be read
 *                         again from its beginning)
 *   ngx_ioa_a2a_stream()  the answer as SSE: the task, then the events,
 *                         until the task ends or waits for its user
 *   ngx_ioa_a2a_wait()    a blocking send or a cancel: the same feed read
 *                         without a stream, the task answered at its end
 *   *_json()              Task, TaskStatus, Message, parts in A2A 1.0's
 *                         proto-JSON or 0.3's JSON
 *
 * Each entry is parsed and rewritten in a pool of its own, destroyed after
 * it: a long goal's stream does not grow the request's pool; what the
 * task keeps (its conclusion, error, question, a blocking answer's history
 * up to NGX_IOA_A2A_HISTORY_MAX) is copied into the request's.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_a2a.h"


static ngx_int_t ngx_ioa_a2a_rewrite(ngx_ioa_sse_t *sse, ngx_ioa_msg_t *m,
    void *data);
static void ngx_ioa_a2a_closing(ngx_ioa_sse_t *sse, ngx_uint_t expired,
    const char *reason, void *data);
static ngx_int_t ngx_ioa_a2a_feed(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_ioa_msg_t *m, ngx_str_t *events, ngx_uint_t *n);
static ngx_int_t ngx_ioa_a2a_status_event(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_str_t *message, ngx_str_t *out);
static void ngx_ioa_a2a_task_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b);
static ngx_int_t ngx_ioa_a2a_wait_message(ngx_ioa_wait_t *w,
    ngx_ioa_msg_t *m);
static void ngx_ioa_a2a_wait_closed(ngx_ioa_wait_t *w, const char *why);
static void ngx_ioa_a2a_status_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *message);
static void ngx_ioa_a2a_message_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_uint_t agent, ngx_str_t *id, ngx_str_t *text, yajl_val metadata);
static void ngx_ioa_a2a_text_part(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *text);
static void ngx_ioa_a2a_ids(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    const char *task_key);
static void ngx_ioa_a2a_time(ngx_ioa_jbuf_t *b, int64_t ms);


ngx_ioa_a2a_state_t  ngx_ioa_a2a_states[] = {
    { ngx_string("queued"), "submitted", "TASK_STATE_SUBMITTED", 0 },
    { ngx_string("forming"), "working", "TASK_STATE_WORKING", 1 },
    { ngx_string("running"), "working", "TASK_STATE_WORKING", 2 },
    { ngx_string("cancelling"), "working", "TASK_STATE_WORKING", 3 },
    { ngx_string("concluded"), "completed", "TASK_STATE_COMPLETED",
      NGX_IOA_A2A_RANK_END },
    { ngx_string("failed"), "failed", "TASK_STATE_FAILED",
      NGX_IOA_A2A_RANK_END },
    { ngx_string("cancelled"), "canceled", "TASK_STATE_CANCELED",
      NGX_IOA_A2A_RANK_END },
    { ngx_null_string, NULL, NULL, 0 }
};


/*
 * The streamed answer: the task as it is now, then (follow) the goal's
 * feed, each entry rewritten into A2A events by ngx_ioa_a2a_feed().  The
 * request is an SSE stream from here (ngx_ioa_sse.c).
 */

ngx_int_t
ngx_ioa_a2a_stream(ngx_http_request_t *r, ngx_ioa_a2a_t *a, ngx_uint_t follow)
{
    ngx_str_t       *first, task, name;
    ngx_ioa_jbuf_t   b;

    first = NULL;

    if (!a->has_since) {
        /* a resumed stream goes on where it was; a new one starts with
         * the task, 1.0 in a StreamResponse */
        first = ngx_palloc(r->pool, sizeof(ngx_str_t));

        if (first == NULL
            || ngx_ioa_a2a_task_result(a, r->pool, a->v10, &b) != NGX_OK
            || ngx_ioa_jbuf_done(&b, &task) != NGX_OK
            || ngx_ioa_jsonrpc_message(r->pool, &a->rpc_id, "result", &task,
                                       first)
               != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_str_null(&name);

    if (follow && ngx_ioa_goal_feed_name(r->pool, &a->goal_id, &name)
                  != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_ioa_sse_follow(r, &name,
                              a->has_since ? &a->since
                                           : (a->has_from ? &a->from : NULL),
                              a->who, ngx_ioa_a2a_rewrite,
                              ngx_ioa_a2a_closing, a, first);
}


static ngx_int_t
ngx_ioa_a2a_rewrite(ngx_ioa_sse_t *sse, ngx_ioa_msg_t *m, void *data)
{
    ngx_ioa_a2a_t *a = data;

    u_char      idbuf[NGX_INT64_LEN * 2 + 2];
    ngx_str_t   events[3], id, out;
    ngx_int_t   rc;
    ngx_uint_t  i, n;
    ngx_pool_t *pool;

    /* each entry in a pool of its own: a long goal's stream does not
     * grow the request's */
    pool = ngx_create_pool(4096, a->request->connection->log);
    if (pool == NULL) {
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    rc = ngx_ioa_a2a_feed(a, pool, m, events, &n);

    id.data = idbuf;
    id.len = ngx_ioa_sid_print(idbuf, &m->sid) - idbuf;

    for (i = 0; rc == NGX_OK && i < n; i++) {
        if (ngx_ioa_jsonrpc_message(pool, &a->rpc_id, "result", &events[i],
                                    &out)
            != NGX_OK
            || ngx_ioa_sse_event(sse, &id, &out) != NGX_OK)
        {
            rc = NGX_ERROR;
        }
    }

    ngx_destroy_pool(pool);

    if (rc == NGX_ERROR) {
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    if (a->task.state->rank == NGX_IOA_A2A_RANK_END || a->task.awaiting) {
        /* the final status is out, or the task waits for its person (an
         * interrupted state ends a stream too): the stream is over */
        ngx_ioa_sse_end(sse);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The hub ends the stream (shutting down, a reader too slow, the caller's
 * token over): a JSON-RPC error says so, and the client resubscribes.  An
 * A2A client takes every event for a response of its own, so the token's
 * end is not an "ioa" close event as on an inbox but an error whose data
 * names it, "token_expired" and closes_at, for a client that knows ioa to
 * fetch a fresh token first; the warning before it was a comment
 * (ngx_ioa_sse_send_text()).
 */

static void
ngx_ioa_a2a_closing(ngx_ioa_sse_t *sse, ngx_uint_t expired,
    const char *reason, void *data)
{
    ngx_ioa_a2a_t *a = data;

    const char          *method;
    ngx_str_t            msg, e, out;
    ngx_pool_t          *pool;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_loc_conf_t  *lcf;

    pool = a->request->pool;

    if (!expired || a->who == NULL) {
        msg.data = (u_char *) reason;
        msg.len = ngx_strlen(reason);

        if (ngx_ioa_jsonrpc_error_object(pool, NGX_IOA_JSONRPC_INTERNAL,
                                         &msg, &e)
            != NGX_OK)
        {
            return;
        }

    } else {
        lcf = ngx_ioa_loc_conf(a->request);
        method = a->v10 ? "SubscribeToTask" : "tasks/resubscribe";

        if (ngx_ioa_jbuf_init(&b, pool, 256) != NGX_OK) {
            return;
        }

        ngx_ioa_jbuf_literal(&b, "{\"code\":");
        ngx_ioa_jbuf_int(&b, NGX_IOA_JSONRPC_INTERNAL);
        ngx_ioa_jbuf_literal(&b, ",\"message\":\"token expired: "
                             "resubscribe with a fresh token and "
                             "Last-Event-ID (");
        ngx_ioa_jbuf_raw(&b, (u_char *) method, ngx_strlen(method));
        ngx_ioa_jbuf_literal(&b, "); the task goes on\",\"data\":"
                             "{\"ioa_code\":\"token_expired\","
                             "\"closes_at\":");
        ngx_ioa_jbuf_int(&b, a->who->expires + lcf->auth_leeway);
        ngx_ioa_jbuf_literal(&b, "}}");

        if (ngx_ioa_jbuf_done(&b, &e) != NGX_OK) {
            return;
        }
    }

    if (ngx_ioa_jsonrpc_message(pool, &a->rpc_id, "error", &e, &out)
        == NGX_OK)
    {
        (void) ngx_ioa_sse_event(sse, NULL, &out);
    }
}


/*
 * One entry of the goal's feed: the task follows it, and *n events (A2A
 * StreamResponse results) say what changed.  A state the task has passed
 * already says nothing (a resubscribe reads the feed from its beginning).
 */

static ngx_int_t
ngx_ioa_a2a_feed(ngx_ioa_a2a_t *a, ngx_pool_t *pool, ngx_ioa_msg_t *m,
    ngx_str_t *events, ngx_uint_t *n)
{
    size_t                len;
    yajl_val              ev, v, env, meta;
    ngx_str_t             kind, s, text, result, id, msg;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_error_t       err;
    ngx_ioa_loc_conf_t   *lcf;
    ngx_ioa_a2a_state_t  *st;

    *n = 0;

    lcf = ngx_ioa_loc_conf(a->request);

    /* an envelope nests up to ioa_max_json_depth inside the event */
    ev = ngx_ioa_json_parse(pool, m->payload, m->payload_len,
                            lcf->max_json_depth + 2, &err);

    if (ev == NULL
        || ngx_ioa_json_string(ngx_ioa_json_get(ev, "event"), &kind)
           != NGX_OK)
    {
        return NGX_OK;
    }

    v = ngx_ioa_json_get(ev, "timestamp");
    if (v && YAJL_IS_INTEGER(v)) {
        a->task.updated = YAJL_GET_INTEGER(v);
    }

    if (kind.len == 8 && ngx_strncmp(kind.data, "envelope", 8) == 0) {
        env = ngx_ioa_json_get(ev, "envelope");

        if (env == NULL || a->task.state->rank == NGX_IOA_A2A_RANK_END) {
            return NGX_OK;
        }

        if (a->task.state->rank < 2) {
            /* the room talks: the goal runs (a stream resumed after its
             * state event starts from "queued") */
            a->task.state = NGX_IOA_A2A_RUNNING;
        }

        /* the envelope's words: its content, a task's result after it,
         * or (neither) the task's description; "<sender>: " before them */
        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "content"), &text)
            != NGX_OK)
        {
            ngx_str_null(&text);
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "task_conclusion"),
                                &result)
            != NGX_OK)
        {
            ngx_str_null(&result);
        }

        if (text.len == 0 && result.len == 0) {
            (void) ngx_ioa_json_string(ngx_ioa_json_get(env, "task_desc"),
                                       &text);
        }

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "sender"), &s)
            != NGX_OK)
        {
            ngx_str_set(&s, "?");
        }

        len = s.len + 2 + text.len + 1 + result.len;
        msg.data = ngx_pnalloc(pool, len);
        if (msg.data == NULL) {
            return NGX_ERROR;
        }

        msg.len = ngx_sprintf(msg.data, "%V: %V%s%V", &s, &text,
                              text.len && result.len ? "\n" : "", &result)
                  - msg.data;

        if (ngx_ioa_json_string(ngx_ioa_json_get(env, "id"), &id) != NGX_OK) {
            ngx_str_set(&id, "");
        }

        meta = env;

        if (ngx_ioa_jbuf_init(&b, pool, m->payload_len * 2 + 512) != NGX_OK) {
            return NGX_ERROR;
        }

        /* the message, kept for a blocking answer's history */
        ngx_ioa_a2a_message_json(a, &b, 1, &id, &msg, meta);

        if (ngx_ioa_jbuf_done(&b, &text) != NGX_OK) {
            return NGX_ERROR;
        }

        if (a->wait && a->task.history
            && a->task.history->nelts < NGX_IOA_A2A_HISTORY_MAX
            && a->task.history_bytes + text.len <= NGX_IOA_A2A_HISTORY_BYTES)
        {
            ngx_str_t  *h;

            h = ngx_array_push(a->task.history);
            if (h == NULL) {
                return NGX_ERROR;
            }

            h->data = ngx_pstrdup(a->request->pool, &text);
            if (h->data == NULL) {
                return NGX_ERROR;
            }

            h->len = text.len;
            a->task.history_bytes += text.len;
        }

        /* a status update of the working task, with the message */
        return ngx_ioa_a2a_status_event(a, pool, &text, &events[(*n)++]);
    }

    if (kind.len == 5 && ngx_strncmp(kind.data, "input", 5) == 0) {
        v = ngx_ioa_json_get(ev, "awaiting");

        if (a->task.state->rank == NGX_IOA_A2A_RANK_END || v == NULL
            || (YAJL_IS_TRUE(v)
                && ngx_ioa_json_string(ngx_ioa_json_get(ev, "question"),
                                       &text)
                   != NGX_OK)
            || (!YAJL_IS_TRUE(v) && !a->task.awaiting))
        {
            return NGX_OK;
        }

        if (YAJL_IS_TRUE(v)) {
            /* the goal asks its person: input-required, the question as
             * the status message; the stream ends here */
            a->task.awaiting = 1;
            a->task.question.data = ngx_pstrdup(a->request->pool, &text);
            a->task.question.len = a->task.question.data ? text.len : 0;

        } else {
            a->task.awaiting = 0;
        }

        return ngx_ioa_a2a_status_event(a, pool, NULL, &events[(*n)++]);
    }

    if (kind.len != 5 || ngx_strncmp(kind.data, "state", 5) != 0
        || ngx_ioa_json_string(ngx_ioa_json_get(ev, "state"), &s) != NGX_OK)
    {
        return NGX_OK;
    }

    st = ngx_ioa_a2a_state(&s);

    if (st->rank <= a->task.state->rank) {
        return NGX_OK;                    /* passed already */
    }

    a->task.state = st;

    (void) ngx_ioa_json_string(ngx_ioa_json_get(ev, "comm_id"),
                               &a->task.comm_id);

    if (ngx_ioa_json_string(ngx_ioa_json_get(ev, "conclusion"), &text)
        == NGX_OK)
    {
        a->task.conclusion.data = ngx_pstrdup(a->request->pool, &text);
        a->task.conclusion.len = a->task.conclusion.data ? text.len : 0;
    }

    if (ngx_ioa_json_string(ngx_ioa_json_get(ev, "error"), &text) == NGX_OK) {
        a->task.error.data = ngx_pstrdup(a->request->pool, &text);
        a->task.error.len = a->task.error.data ? text.len : 0;
    }

    if (a->task.comm_id.len) {
        s = a->task.comm_id;
        a->task.comm_id.data = ngx_pstrdup(a->request->pool, &s);
        a->task.comm_id.len = a->task.comm_id.data ? s.len : 0;
    }

    if (a->task.conclusion.len && st->ioa.data[0] == 'c'
        && st->ioa.data[1] == 'o')
    {
        /* the conclusion, as the task's artifact, before the final status */
        if (ngx_ioa_jbuf_init(&b, pool, a->task.conclusion.len * 2 + 256)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        ngx_ioa_jbuf_byte(&b, '{');

        if (a->v10) {
            ngx_ioa_jbuf_literal(&b, "\"artifactUpdate\":{");

        } else {
            ngx_ioa_jbuf_literal(&b, "\"kind\":\"artifact-update\",");
        }

        ngx_ioa_a2a_ids(a, &b, "taskId");
        ngx_ioa_jbuf_literal(&b, ",\"artifact\":{\"artifactId\":"
                             "\"conclusion\",\"name\":\"conclusion\","
                             "\"parts\":[");
        ngx_ioa_a2a_text_part(a, &b, &a->task.conclusion);
        ngx_ioa_jbuf_literal(&b, "]},\"append\":false,\"lastChunk\":true}");

        if (a->v10) {
            ngx_ioa_jbuf_byte(&b, '}');
        }

        if (ngx_ioa_jbuf_done(&b, &events[(*n)++]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_ioa_a2a_status_event(a, pool, NULL, &events[(*n)++]);
}


/*
 * A status update: the task's status (with message, or the one the state
 * has), the goal's own state as metadata; in 0.3 "final" on the last one
 * of a stream (an ended task, or one waiting for its person).
 */

static ngx_int_t
ngx_ioa_a2a_status_event(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_str_t *message, ngx_str_t *out)
{
    ngx_ioa_jbuf_t  b;

    if (ngx_ioa_jbuf_init(&b, pool,
                          (message ? message->len : 0)
                          + (a->task.error.len + a->task.question.len) * 2
                          + 512)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_byte(&b, '{');

    if (a->v10) {
        ngx_ioa_jbuf_literal(&b, "\"statusUpdate\":{");

    } else {
        ngx_ioa_jbuf_literal(&b, "\"kind\":\"status-update\",");
    }

    ngx_ioa_a2a_ids(a, &b, "taskId");
    ngx_ioa_jbuf_literal(&b, ",\"status\":");
    ngx_ioa_a2a_status_json(a, &b, message);

    if (!a->v10) {
        if (a->task.state->rank == NGX_IOA_A2A_RANK_END
            || a->task.awaiting)
        {
            ngx_ioa_jbuf_literal(&b, ",\"final\":true");

        } else {
            ngx_ioa_jbuf_literal(&b, ",\"final\":false");
        }
    }

    ngx_ioa_jbuf_literal(&b, ",\"metadata\":{\"ioa_state\":");
    ngx_ioa_jbuf_str(&b, &a->task.state->ioa);
    ngx_ioa_jbuf_literal(&b, "}}");

    if (a->v10) {
        ngx_ioa_jbuf_byte(&b, '}');
    }

    return ngx_ioa_jbuf_done(&b, out);
}


/*
 * A blocking send or a cancel: a follower of the goal's feed that answers
 * the request with the task once the goal has ended, or (timeout) once
 * that long has passed.  The client going away is noticed, and the
 * request's cleanup detaches the follower.
 */

ngx_int_t
ngx_ioa_a2a_wait(ngx_http_request_t *r, ngx_ioa_a2a_t *a, ngx_msec_t timeout)
{
    ngx_str_t        feed;
    ngx_ioa_wait_t  *w;

    w = ngx_pcalloc(r->pool, sizeof(ngx_ioa_wait_t));
    if (w == NULL
        || ngx_ioa_goal_feed_name(r->pool, &a->goal_id, &feed) != NGX_OK)
    {
        return NGX_ERROR;
    }

    a->task.history = ngx_array_create(r->pool, 8, sizeof(ngx_str_t));
    if (a->task.history == NULL) {
        return NGX_ERROR;
    }

    a->wait = w;
    w->message = ngx_ioa_a2a_wait_message;
    w->closed = ngx_ioa_a2a_wait_closed;
    w->data = a;

    return ngx_ioa_wait_start(w, r, &feed, a->has_from ? &a->from : NULL,
                              timeout);
}


static ngx_int_t
ngx_ioa_a2a_wait_message(ngx_ioa_wait_t *w, ngx_ioa_msg_t *m)
{
    ngx_ioa_a2a_t *a = w->data;

    ngx_str_t    events[3];
    ngx_int_t    rc;
    ngx_uint_t   n;
    ngx_pool_t  *pool;

    pool = ngx_create_pool(4096, w->client.log);
    if (pool == NULL) {
        return NGX_OK;
    }

    rc = ngx_ioa_a2a_feed(a, pool, m, events, &n);

    ngx_destroy_pool(pool);

    if (rc == NGX_OK && a->task.state->rank < NGX_IOA_A2A_RANK_END
        && !a->task.awaiting)
    {
        return NGX_OK;
    }

    /* the goal ended, or waits for its user: the task as it is */
    ngx_ioa_wait_stop(w);
    ngx_ioa_a2a_answer(w->request, a);

    return NGX_OK;
}


/* the time is up (a cancel's wait): the task as it is; or the hub closed
 * the follower: the client asks again */

static void
ngx_ioa_a2a_wait_closed(ngx_ioa_wait_t *w, const char *why)
{
    ngx_ioa_a2a_t *a = w->data;

    ngx_ioa_error_t  err;

    if (why == NULL) {
        ngx_ioa_a2a_answer(w->request, a);
        return;
    }

    ngx_ioa_error_set(&err, "", NULL,
                      "waiting for task %V failed: %s; tasks/get or "
                      "tasks/resubscribe tells how it goes on",
                      &a->goal_id, why);
    ngx_ioa_a2a_fail(w->request, a, NGX_HTTP_SERVICE_UNAVAILABLE,
                     NGX_IOA_JSONRPC_INTERNAL, &err);
}


ngx_ioa_a2a_state_t *
ngx_ioa_a2a_state(ngx_str_t *ioa)
{
    ngx_ioa_a2a_state_t  *st;

    for (st = ngx_ioa_a2a_states; st->ioa.len; st++) {
        if (st->ioa.len == ioa->len
            && ngx_strncmp(st->ioa.data, ioa->data, ioa->len) == 0)
        {
            return st;
        }
    }

    /* a state this hub does not know yet: the goal is under way */
    return NGX_IOA_A2A_RUNNING;
}


/* the task as an answer's result: the Task, or (wrap) 1.0's {"task": ...}
 * of a SendMessageResponse or a StreamResponse */

ngx_int_t
ngx_ioa_a2a_task_result(ngx_ioa_a2a_t *a, ngx_pool_t *pool, ngx_uint_t wrap,
    ngx_ioa_jbuf_t *b)
{
    if (ngx_ioa_jbuf_init(b, pool, 1024 + a->task.conclusion.len * 2)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (wrap) {
        ngx_ioa_jbuf_literal(b, "{\"task\":");
    }

    ngx_ioa_a2a_task_json(a, b);

    if (wrap) {
        ngx_ioa_jbuf_byte(b, '}');
    }

    return b->failed ? NGX_ERROR : NGX_OK;
}


/* a Task: id, contextId, status, the conclusion as artifact, history */

static void
ngx_ioa_a2a_task_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b)
{
    ngx_int_t    n, i, from;
    ngx_str_t   *h;

    ngx_ioa_jbuf_byte(b, '{');

    if (!a->v10) {
        ngx_ioa_jbuf_literal(b, "\"kind\":\"task\",");
    }

    ngx_ioa_a2a_ids(a, b, "id");
    ngx_ioa_jbuf_literal(b, ",\"status\":");
    ngx_ioa_a2a_status_json(a, b, NULL);
    ngx_ioa_jbuf_literal(b, ",\"artifacts\":[");

    if (a->task.conclusion.len
        && a->task.state->rank == NGX_IOA_A2A_RANK_END
        && a->task.state->ioa.data[0] == 'c'
        && a->task.state->ioa.data[1] == 'o')
    {
        ngx_ioa_jbuf_literal(b, "{\"artifactId\":\"conclusion\","
                             "\"name\":\"conclusion\",\"parts\":[");
        ngx_ioa_a2a_text_part(a, b, &a->task.conclusion);
        ngx_ioa_jbuf_literal(b, "]}");
    }

    ngx_ioa_jbuf_literal(b, "],\"history\":[");

    /* the user's message, then the team's, the last historyLength */
    n = (a->user.len ? 1 : 0)
        + (a->task.history ? (ngx_int_t) a->task.history->nelts : 0);
    from = (a->history_length >= 0 && a->history_length < n)
           ? n - a->history_length : 0;

    for (i = from; i < n; i++) {
        if (i > from) {
            ngx_ioa_jbuf_byte(b, ',');
        }

        if (a->user.len && i == 0) {
            ngx_ioa_a2a_message_json(a, b, 0, &a->user_id, &a->user, NULL);
            continue;
        }

        h = a->task.history->elts;
        h = &h[i - (a->user.len ? 1 : 0)];
        ngx_ioa_jbuf_raw(b, h->data, h->len);
    }

    ngx_ioa_jbuf_literal(b, "],\"metadata\":{\"ioa_state\":");
    ngx_ioa_jbuf_str(b, &a->task.state->ioa);

    if (a->task.comm_id.len) {
        ngx_ioa_jbuf_literal(b, ",\"comm_id\":");
        ngx_ioa_jbuf_str(b, &a->task.comm_id);
    }

    ngx_ioa_jbuf_literal(b, "}}");
}


/* a TaskStatus: the state, when, and a message (the given one, or a
 * failed goal's error) */

static void
ngx_ioa_a2a_status_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_str_t *message)
{
    ngx_str_t    id;
    const char  *state;
    ngx_uint_t   awaiting;

    awaiting = a->task.awaiting
               && a->task.state->rank < NGX_IOA_A2A_RANK_END;

    if (awaiting) {
        state = a->v10 ? "TASK_STATE_INPUT_REQUIRED" : "input-required";

    } else {
        state = a->v10 ? a->task.state->v10 : a->task.state->v03;
    }

    ngx_ioa_jbuf_literal(b, "{\"state\":\"");
    ngx_ioa_jbuf_raw(b, (u_char *) state, ngx_strlen(state));
    ngx_ioa_jbuf_literal(b, "\",\"timestamp\":");
    ngx_ioa_a2a_time(b, a->task.updated);

    if (message) {
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_ioa_jbuf_raw(b, message->data, message->len);

    } else if (awaiting) {
        /* the question the goal waits on */
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_str_set(&id, "input");
        ngx_ioa_a2a_message_json(a, b, 1, &id, &a->task.question, NULL);

    } else if (a->task.error.len && a->task.state->rank
                                    == NGX_IOA_A2A_RANK_END)
    {
        ngx_ioa_jbuf_literal(b, ",\"message\":");
        ngx_str_set(&id, "error");
        ngx_ioa_a2a_message_json(a, b, 1, &id, &a->task.error, NULL);
    }

    ngx_ioa_jbuf_byte(b, '}');
}


static void
ngx_ioa_a2a_message_json(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b,
    ngx_uint_t agent, ngx_str_t *id, ngx_str_t *text, yajl_val metadata)
{
    ngx_ioa_jbuf_byte(b, '{');

    if (!a->v10) {
        ngx_ioa_jbuf_literal(b, "\"kind\":\"message\",");
    }

    ngx_ioa_jbuf_literal(b, "\"messageId\":");
    ngx_ioa_jbuf_str(b, id);
    ngx_ioa_jbuf_byte(b, ',');
    ngx_ioa_a2a_ids(a, b, "taskId");

    if (a->v10) {
        ngx_ioa_jbuf_literal(b, ",\"role\":");

        if (agent) {
            ngx_ioa_jbuf_literal(b, "\"ROLE_AGENT\"");

        } else {
            ngx_ioa_jbuf_literal(b, "\"ROLE_USER\"");
        }

    } else {
        ngx_ioa_jbuf_literal(b, ",\"role\":");

        if (agent) {
            ngx_ioa_jbuf_literal(b, "\"agent\"");

        } else {
            ngx_ioa_jbuf_literal(b, "\"user\"");
        }
    }

    ngx_ioa_jbuf_literal(b, ",\"parts\":[");
    ngx_ioa_a2a_text_part(a, b, text);
    ngx_ioa_jbuf_byte(b, ']');

    if (metadata) {
        /* the envelope as the room has it, for clients that know ioa */
        ngx_ioa_jbuf_literal(b, ",\"metadata\":{\"ioa_envelope\":");
        ngx_ioa_jbuf_val(b, metadata);
        ngx_ioa_jbuf_byte(b, '}');
    }

    ngx_ioa_jbuf_byte(b, '}');
}


static void
ngx_ioa_a2a_text_part(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b, ngx_str_t *text)
{
    if (a->v10) {
        ngx_ioa_jbuf_literal(b, "{\"text\":");

    } else {
        ngx_ioa_jbuf_literal(b, "{\"kind\":\"text\",\"text\":");
    }

    ngx_ioa_jbuf_str(b, text);
    ngx_ioa_jbuf_byte(b, '}');
}


/* "<task_key>":<goal id>,"contextId":<goal id> */

static void
ngx_ioa_a2a_ids(ngx_ioa_a2a_t *a, ngx_ioa_jbuf_t *b, const char *task_key)
{
    ngx_ioa_jbuf_byte(b, '"');
    ngx_ioa_jbuf_raw(b, (u_char *) task_key, ngx_strlen(task_key));
    ngx_ioa_jbuf_literal(b, "\":");
    ngx_ioa_jbuf_str(b, &a->goal_id);
    ngx_ioa_jbuf_literal(b, ",\"contextId\":");
    ngx_ioa_jbuf_str(b, &a->goal_id);
}


/* RFC 3339 in UTC, milliseconds: both versions' timestamp */

static void
ngx_ioa_a2a_time(ngx_ioa_jbuf_t *b, int64_t ms)
{
    u_char    buf[sizeof("\"1970-01-01T00:00:00.000Z\"")], *p;
    ngx_tm_t  tm;

    ngx_gmtime((time_t) (ms / 1000), &tm);

    p = ngx_sprintf(buf, "\"%4d-%02d-%02dT%02d:%02d:%02d.%03dZ\"",
                    tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                    tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec,
                    (int) (ms % 1000));

    ngx_ioa_jbuf_raw(b, buf, p - buf);
}