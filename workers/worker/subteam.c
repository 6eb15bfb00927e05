/*
 * ioa-worker: a task done by a nested team (IoA's team_up_depth).
 *
 * A task marked sub has the coordinator as its assignee.  The work is a
 * sub-goal: a goal of its own, queued on P{jobs}:goals like any launch, so
 * any worker may run it; its record names the parent (so a cancel of the
 * parent reaches it, see goal.c) and one level less of team_up_depth (so
 * nesting ends).  Its conclusion is this task's result: the coordinator
 * posts it into the parent's room as INFORM_TASK_RESULT with the task's id,
 * and task_status after the sub-goal's end: completed when it did every
 * part of its own, partial when some, failed when none (or it failed),
 * cancelled; the parent's review then treats it like any result, and a
 * partial one goes to a new sub-team in the next round (decide.c).
 *
 * Exactly once, across crashes:
 *   1. the sub-goal's id is chosen and saved in the task list;
 *   2. its record is created by goal_spawn.lua, which never overwrites;
 *   3. its job is queued (XADD), then queued = true is saved.
 * A worker dying between 3 and its save queues a second job for the same
 * sub-goal; the worker that takes a job checks the goal's "job" field
 * first (goal.c), so the second job is dropped.  The result post is a
 * coordinator step (12 + i, or 21 + 2i in a sequence) like any other.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


int
iw_sub_spawn(const iw_conf_t *conf, iw_goal_t *g, size_t i, const char *text)
{
    int          rc;
    char         hex[33];
    ioa_buf_t    req;
    iw_args_t    a;
    yajl_val     v;
    long long    depth;
    iw_task_t   *t;
    redisReply  *r;

    t = &g->tasks[i];

    if (t->child == NULL) {
        ioa_uuid4_hex(hex);
        t->child = ioa_strdup(hex);

        rc = iw_goal_save_tasks(conf, g);
        if (rc != IW_OK) {
            return rc;
        }
    }

    depth = (g->depth && *g->depth) ? atoll(g->depth) - 1 : 0;

    if (depth < 0) {
        depth = 0;
    }

    /* the request as nginx would have stored it */
    ioa_buf_init(&req);
    ioa_buf_adds(&req, "{\"goal\":");
    ioa_json_str(&req, text);
    ioa_buf_addf(&req, ",\"team_up_depth\":%lld,\"skip_naming\":true", depth);

    if (g->max_turns) {
        ioa_buf_addf(&req, ",\"max_turns\":%lld", g->max_turns);
    }

    v = ioa_json_get(g->req, "online_only");

    if (v && YAJL_IS_FALSE(v)) {
        ioa_buf_adds(&req, ",\"online_only\":false");
    }

    ioa_buf_addc(&req, '}');

    iw_args_init(&a);
    iw_args_addf(&a, "%s{goal:%s}:meta", conf->prefix, t->child);
    iw_args_add(&a, "goal_id");
    iw_args_add(&a, t->child);
    iw_args_add(&a, "goal");
    iw_args_add(&a, text);
    iw_args_add(&a, "request");
    iw_args_add(&a, req.data);
    iw_args_add(&a, "state");
    iw_args_add(&a, "queued");
    iw_args_add(&a, "created_at");
    iw_args_addf(&a, "%lld", ioa_wall_ms());
    iw_args_add(&a, "parent");
    iw_args_add(&a, g->goal_id);
    iw_args_add(&a, "depth");
    iw_args_addf(&a, "%lld", depth);

    r = iw_redis_eval(IW_LUA_GOAL_SPAWN, 1, &a);
    iw_args_free(&a);
    ioa_buf_free(&req);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_INTEGER) {
        iw_error("goal_spawn.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    freeReplyObject(r);

    /* indexed before its job is queued; repeated after a takeover it
     * changes nothing (the index only moves forward) */
    if (iw_store_index(conf, t->child, "queued", text, g->goal_id,
                       ioa_wall_ms())
        != IW_OK)
    {
        return IW_ERROR;
    }

    r = iw_redis_cmd("XADD %s * goal_id %s", conf->jobs_key, t->child);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    t->queued = 1;

    rc = iw_goal_save_tasks(conf, g);

    if (rc == IW_OK) {
        iw_info("goal %s: task %s goes to a sub-team: sub-goal %s (depth "
                "%lld)", g->goal_id, t->task_id, t->child, depth);
    }

    return rc;
}


/*
 * IW_GOAL_NEXT while the sub-goal runs; once it has ended, posts its
 * outcome as the task's result (step `step`) and returns what the post
 * returns.
 */

int
iw_sub_poll(const iw_conf_t *conf, iw_goal_t *g, size_t i, int step)
{
    int          rc;
    char        *state, *text, *extra, *done, *total;
    ioa_buf_t    b;
    iw_task_t   *t;
    const char  *status;

    t = &g->tasks[i];

    if (g->step >= step) {
        return IW_GOAL_NEXT;            /* posted; the room read settles it */
    }

    if (iw_store_meta_get(conf, t->child, "state", &state) != IW_OK) {
        return IW_ERROR;
    }

    if (state == NULL || !iw_state_final(state)) {
        free(state);
        return IW_GOAL_NEXT;
    }

    status = iw_streq(state, "concluded") ? "completed"
             : iw_streq(state, "cancelled") ? "cancelled" : "failed";

    /* reviewed like any result: a sub-team that did only some of its
     * parts did the task in part, one that did none did not do it */
    if (iw_streq(state, "concluded")) {
        if (iw_store_meta_get(conf, t->child, "parts_done", &done) != IW_OK
            || iw_store_meta_get(conf, t->child, "parts_total", &total)
               != IW_OK)
        {
            free(done);
            free(state);
            return IW_ERROR;
        }

        if (done && total && atoll(total) > 0
            && atoll(done) < atoll(total))
        {
            status = atoll(done) == 0 ? "failed" : "partial";
        }

        free(done);
        free(total);
    }

    if (iw_store_meta_get(conf, t->child,
                          iw_streq(state, "concluded") ? "conclusion"
                                                       : "error",
                          &text) != IW_OK)
    {
        free(state);
        return IW_ERROR;
    }

    if (text == NULL || *text == '\0') {
        free(text);
        text = ioa_sprintf("the sub-team's goal %s", state);
    }

    ioa_buf_init(&b);
    ioa_buf_addf(&b, "\"task_status\":\"%s\",\"task_conclusion\":", status);
    ioa_json_str(&b, text);
    ioa_buf_adds(&b, ",\"sub_goal\":");
    ioa_json_str(&b, t->child);
    extra = ioa_buf_take(&b);

    rc = iw_goal_post(conf, g, step, IW_TYPE_RESULT, text, "\"\"", t->task_id,
                      extra);

    free(extra);
    free(text);
    free(state);

    return rc;
}


/* the same cancel nginx's goal_cancel.lua makes, for one sub-goal */

int
iw_sub_cancel(const iw_conf_t *conf, iw_goal_t *g, size_t i)
{
    int          rc;
    char        *current;
    redisReply  *r;

    rc = iw_store_meta_state(conf, g->tasks[i].child, "cancelling", &current,
                             NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    free(current);

    if (rc == 0) {
        return IW_OK;                   /* ended, or cancelling already */
    }

    r = iw_redis_cmd("%s %s{goal:%s}:control cancel",
                     iw_redis_cluster() ? "SPUBLISH" : "PUBLISH",
                     conf->prefix, g->tasks[i].child);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    iw_info("goal %s: sub-goal %s cancelled (its task timed out)", g->goal_id,
            g->tasks[i].child);

    return IW_OK;
}
