/*
 * ioa-worker: the goal's event feed.
 *
 * P{room:goal-<goal_id>}:log is shaped exactly like a room log (one field
 * `e` per entry, published as "<id> <json>" on P{room:goal-<goal_id>}:ch),
 * so nginx delivers it to followers (SSE, IoA's blocking launch_goal) with
 * its room machinery.  Four kinds of event:
 *
 *   {"sender":"ioa-worker","timestamp":..,"event":"state","state":..,
 *    "goal_id":..,"comm_id":..,"conclusion":..,"error":..}
 *   {"sender":"ioa-worker","timestamp":..,"event":"envelope","goal_id":..,
 *    "envelope":{"id":..,...the room envelope...}}
 *
 *   {"sender":"ioa-worker","timestamp":..,"event":"input","goal_id":..,
 *    "awaiting":..,"question":..}
 *   {"sender":"ioa-worker","timestamp":..,"event":"person","goal_id":..,
 *    "decision":{"decision","by","sender","message","part","text",
 *    "reason"}}   what a person's message was taken to ask (person.c)
 *
 * "sender" comes first because the hub's echo check reads it there.  Every
 * envelope of the goal's room is copied once, in room order, and a state
 * once per change, even when a worker that takes over a goal goes over
 * part of the room again: goal_event.lua keeps the last room id and the
 * last state it appended (see there).
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


static int iw_event_append(const iw_conf_t *conf, const char *goal_id,
    ioa_buf_t *json, const char *kind, const char *key);


static int
iw_event_append(const iw_conf_t *conf, const char *goal_id, ioa_buf_t *json,
    const char *kind, const char *key)
{
    int          rc;
    iw_args_t    a;
    redisReply  *r;

    iw_args_init(&a);
    iw_args_addf(&a, "%s{room:goal-%s}:log", conf->prefix, goal_id);
    iw_args_addf(&a, "%s{room:goal-%s}:mirror", conf->prefix, goal_id);
    iw_args_addn(&a, json->data, json->len);
    iw_args_addf(&a, "%s{room:goal-%s}:ch", conf->prefix, goal_id);
    iw_args_add(&a, kind);
    iw_args_add(&a, key);
    iw_args_add(&a, iw_redis_cluster() ? "s" : "");

    r = iw_redis_eval(IW_LUA_GOAL_EVENT, 2, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    rc = IW_OK;

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("goal_event.lua: %s", r->str);
        rc = IW_ERROR;
    }

    freeReplyObject(r);

    return rc;
}


static void
iw_event_head(ioa_buf_t *b, const char *event, const char *goal_id)
{
    ioa_buf_addf(b, "{\"sender\":\"ioa-worker\",\"timestamp\":%lld,"
                "\"event\":\"%s\",\"goal_id\":", ioa_wall_ms(), event);
    ioa_json_str(b, goal_id);
}


int
iw_event_state(const iw_conf_t *conf, const char *goal_id, const char *state,
    const char *comm_id, const char *conclusion, const char *error)
{
    int       rc;
    ioa_buf_t b;

    ioa_buf_init(&b);
    iw_event_head(&b, "state", goal_id);
    ioa_buf_adds(&b, ",\"state\":");
    ioa_json_str(&b, state);
    ioa_buf_adds(&b, ",\"comm_id\":");
    ioa_json_str_or_null(&b, comm_id);
    ioa_buf_adds(&b, ",\"conclusion\":");

    if (conclusion) {
        ioa_json_str(&b, conclusion);

    } else {
        ioa_buf_adds(&b, "null");
    }

    ioa_buf_adds(&b, ",\"error\":");
    ioa_json_str_or_null(&b, error);
    ioa_buf_addc(&b, '}');

    rc = iw_event_append(conf, goal_id, &b, "state", state);
    ioa_buf_free(&b);

    return rc;
}


/*
 * The review waits for the goal's person (decide.c), or no longer:
 *   {"sender":"ioa-worker","timestamp":..,"event":"input","goal_id":..,
 *    "awaiting":true|false,"question":..}
 * key names the question and whether it is open ("<round>.<k>:1"), so a
 * worker that takes over appends each change once.
 */

int
iw_event_input(const iw_conf_t *conf, const char *goal_id, int awaiting,
    const char *question, const char *key)
{
    int       rc;
    ioa_buf_t b;

    ioa_buf_init(&b);
    iw_event_head(&b, "input", goal_id);
    ioa_buf_addf(&b, ",\"awaiting\":%s,\"question\":",
                 awaiting ? "true" : "false");
    ioa_json_str_or_null(&b, awaiting ? question : NULL);
    ioa_buf_addc(&b, '}');

    rc = iw_event_append(conf, goal_id, &b, "input", key);
    ioa_buf_free(&b);

    return rc;
}


/*
 * A person's message and what it was taken to ask (person.c): decision is
 * the record's JSON object, id the message's Stream id (inbox or room).
 * The step that waited for the model decides the messages before it
 * again, in the same order, and appends nothing for the last one already
 * there; a worker that crashed between this and the fsm write leaves a
 * successor to append the batch's earlier ones again.
 */

int
iw_event_person(const iw_conf_t *conf, const char *goal_id,
    const char *decision, const char *id)
{
    int       rc;
    ioa_buf_t b;

    ioa_buf_init(&b);
    iw_event_head(&b, "person", goal_id);
    ioa_buf_adds(&b, ",\"decision\":");
    ioa_buf_adds(&b, decision);
    ioa_buf_addc(&b, '}');

    rc = iw_event_append(conf, goal_id, &b, "person", id);
    ioa_buf_free(&b);

    return rc;
}


/* env is the room entry as stored (no "id"); the copy gets the id as its
 * first member, the way the hub delivers envelopes */

int
iw_event_envelope(const iw_conf_t *conf, const char *goal_id,
    const char *sid, const char *env, size_t len)
{
    int       rc;
    ioa_buf_t b;

    if (len < 2 || env[0] != '{') {
        return IW_OK;                   /* not an envelope post.lua stored */
    }

    ioa_buf_init(&b);
    iw_event_head(&b, "envelope", goal_id);
    ioa_buf_adds(&b, ",\"envelope\":{\"id\":");
    ioa_json_str(&b, sid);

    if (env[1] != '}') {
        ioa_buf_addc(&b, ',');
    }

    ioa_buf_add(&b, env + 1, len - 1);
    ioa_buf_addc(&b, '}');

    rc = iw_event_append(conf, goal_id, &b, "env", sid);
    ioa_buf_free(&b);

    return rc;
}
