/*
 * ioa-worker: what the steps of every phase do, below the phases.
 *
 * The acts a step is made of, whatever its phase: renew the goal's lease
 * (iw_goal_lease), post a coordinator step exactly once (iw_goal_post, the
 * order of writes goal.c explains), end the goal failed (iw_goal_fail),
 * move it to concluding (iw_goal_to_concluding), wait (iw_goal_wait,
 * iw_goal_wake_in: a state, engine.c arms the timer), cancel its
 * sub-goals, and read its plan (the team, the tasks of the round, whether
 * a task has settled).  The phases (forming.c, conversation.c, decide.c,
 * concluding.c, ...) call these; nothing here calls a phase, so the goal's
 * code runs one way: engine.c, goal.c (the phase table), the phases, this
 * file, then store.c and the Redis client.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* test hook: die like kill -9 right after posting this step, before the
 * step is recorded (the hardest point to take over from);
 * IOA_WORKER_TEST_CRASH_AFTER_STEP, read once (-2: not yet) */
static int  iw_goal_crash_after = -2;


/*
 * The goal waits until `until` (Redis' clock, now its reading) or until
 * something it watches happens, whichever is first: a state, not a loop.
 * The step returns IW_GOAL_WAIT and the engine arms the goal's timer.
 */

int
iw_goal_wait(iw_goal_t *g, long long until, long long now)
{
    iw_goal_wake_in(g, until - now);

    return IW_GOAL_WAIT;
}


/* the goal must look again within ms at the latest */

void
iw_goal_wake_in(iw_goal_t *g, long long ms)
{
    if (ms < 1) {
        ms = 1;
    }

    if (g->wake_in < 0 || ms < g->wake_in) {
        g->wake_in = ms;
    }
}


/* Renews the lease when a third of --claim-idle has passed, or always with
 * now set (right before a post).  The time is taken before the call: the
 * lease is at least as fresh as that. */

int
iw_goal_lease(const iw_conf_t *conf, iw_goal_t *g, int now)
{
    int        rc;
    long long  t;

    t = ioa_mono_ms();

    if (!now && g->renewed && t - g->renewed < conf->claim_idle_ms / 3) {
        return IW_OK;
    }

    rc = iw_jobs_touch(conf, g->job_id, 0);

    if (rc == 1) {
        g->renewed = t;
        return IW_OK;
    }

    if (rc == 0) {
        iw_warn("goal %s: another worker holds the job now; leaving it",
                g->goal_id);
        return IW_LOST;
    }

    return IW_ERROR;
}


/* the task list (with the sub-goals' ids) after a change */

int
iw_goal_save_tasks(const iw_conf_t *conf, iw_goal_t *g)
{
    int    rc;
    char  *tasks;

    tasks = iw_store_tasks_json(g);
    rc = iw_store_save(conf, g, "tasks", tasks, NULL);
    free(tasks);

    return rc;
}


int
iw_goal_settled(iw_task_t *t)
{
    return !iw_streq(t->status, "pending")
           && !iw_streq(t->status, "in_progress");
}


/* the CONCLUSION is in the room: nothing follows it */

int
iw_goal_concluded(iw_goal_t *g)
{
    return g->step % IW_ROUND_STEPS == IW_STEP_CONCLUSION;
}


int
iw_goal_to_concluding(const iw_conf_t *conf, iw_goal_t *g, const char *ended)
{
    int  rc;

    rc = iw_store_save(conf, g, "phase", iw_phase_name(IW_PHASE_CONCLUDING),
                       "ended", ended, NULL);
    if (rc != IW_OK) {
        return rc;
    }

    free(g->ended);
    g->phase = IW_PHASE_CONCLUDING;
    g->ended = ioa_strdup(ended);

    iw_info("goal %s: concluding (%s)", g->goal_id, ended);

    return IW_OK;
}


/*
 * Posts coordinator step N (see the top of this file for the order of
 * writes).  next_speaker is JSON; extra, when given, is more members
 * ("name":value,...) put after IoA's fields.
 */

int
iw_goal_post(const iw_conf_t *conf, iw_goal_t *g, int step, int type,
    const char *content, const char *next_speaker, const char *task_id,
    const char *extra)
{
    int          rc;
    char        *sid, buf[16];
    ioa_buf_t    b;
    yajl_val     v;
    const char  *tname;

    static const char  *types[] = {
        "DEFAULT", "PROPOSAL", "VOTE", "VOTING_RESULT", "DISCUSSION",
        "SYNC_TASK_ASSIGNMENT", "ASYNC_TASK_ASSIGNMENT", "INFORM_TASK_RESULT",
        "INFORM_TASK_PROGRESS", "PAUSE", "CONCLUDE_GROUP_DISCUSSION",
        "CONCLUSION"
    };

    if (iw_goal_crash_after == -2) {
        tname = getenv("IOA_WORKER_TEST_CRASH_AFTER_STEP");
        iw_goal_crash_after = tname && *tname ? atoi(tname) : -1;
    }

    rc = iw_goal_lease(conf, g, 1);
    if (rc != IW_OK) {
        return rc;
    }

    g->intent = step;
    snprintf(buf, sizeof(buf), "%d", step);

    rc = iw_store_save(conf, g, "intent", buf, NULL);
    if (rc != IW_OK) {
        return rc;
    }

    /* normalised like the hub's: sender and timestamp first */
    ioa_buf_init(&b);
    ioa_buf_adds(&b, "{\"sender\":");
    ioa_json_str(&b, conf->name);
    ioa_buf_addf(&b, ",\"timestamp\":%lld,\"comm_id\":", ioa_wall_ms());
    ioa_json_str(&b, g->comm_id);
    ioa_buf_adds(&b, ",\"content\":");
    ioa_json_str(&b, content);
    ioa_buf_addf(&b, ",\"next_speaker\":%s,\"state\":1,\"type\":%d,\"goal\":",
                next_speaker, type);
    ioa_json_str(&b, g->goal);
    ioa_buf_addf(&b, ",\"team_members\":%s,\"team_up_depth\":",
                g->team ? g->team : "null");

    if (g->depth && *g->depth) {
        ioa_buf_addf(&b, "%lld", atoll(g->depth));

    } else {
        ioa_buf_adds(&b, "null");
    }

    ioa_buf_adds(&b, ",\"max_turns\":");

    if (g->max_turns) {
        ioa_buf_addf(&b, "%lld", g->max_turns);

    } else {
        ioa_buf_adds(&b, "null");
    }

    v = ioa_json_get(g->req, "is_collaborative_planning_enabled");
    ioa_buf_adds(&b, ",\"task_id\":");
    ioa_json_str(&b, task_id ? task_id : "");
    ioa_buf_addf(&b, ",\"task_desc\":\"\","
                "\"is_collaborative_planning_enabled\":%s",
                v && YAJL_IS_TRUE(v) ? "true" : "false");

    if (extra == NULL || strncmp(extra, "\"triggers\"", 10) != 0) {
        ioa_buf_adds(&b, ",\"triggers\":[]");
    }

    if (extra) {
        ioa_buf_addc(&b, ',');
        ioa_buf_adds(&b, extra);
    }

    ioa_buf_adds(&b, ",\"ioa_goal\":");
    ioa_json_str(&b, g->goal_id);
    ioa_buf_addf(&b, ",\"ioa_step\":%d}", step);

    rc = iw_room_post(conf, g->comm_id, b.data, type, next_speaker, &sid);
    ioa_buf_free(&b);

    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    if (rc == 1) {
        char  *error;

        error = ioa_sprintf("the room refused the coordinator's envelope: %s",
                           sid);
        free(sid);
        rc = iw_goal_fail(conf, g, error);
        free(error);

        return rc;
    }

    tname = type >= 0 && type <= 11 ? types[type] : "?";

    if (step == iw_goal_crash_after) {
        iw_warn("goal %s: posted step %d %s (%s); test hook: dying now",
                g->goal_id, step, tname, sid);
        raise(SIGKILL);
    }

    g->step = step;
    g->intent = 0;

    iw_info("goal %s: posted step %d %s (%s)", g->goal_id, step, tname, sid);
    free(sid);

    return iw_store_save(conf, g, "step", buf, "intent", "0", NULL);
}


int
iw_goal_fail(const iw_conf_t *conf, iw_goal_t *g, const char *error)
{
    int    rc;
    char  *current;

    iw_warn("goal %s: failed: %s", g->goal_id, error);

    rc = iw_store_meta_state(conf, g->goal_id, "failed", &current,
                             "error", error,
                             "comm_id", g->comm_id ? g->comm_id : "", NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    free(current);

    if (iw_event_state(conf, g->goal_id, "failed", g->comm_id, NULL, error)
        != IW_OK
        || iw_goal_retire(conf, g->goal_id, g->job_id) != IW_OK)
    {
        return IW_ERROR;
    }

    return IW_GOAL_ENDED;
}


/* sub-goals: the same cancel nginx's goal_cancel.lua makes */

int
iw_goal_cancel_children(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc;
    char        *current;
    size_t       i;
    redisReply  *r, *p;

    r = iw_redis_cmd("SMEMBERS %s{goal:%s}:children", conf->prefix,
                     g->goal_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    for (i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING) {
            continue;
        }

        rc = iw_store_meta_state(conf, r->element[i]->str, "cancelling",
                                 &current, NULL);
        if (rc == IW_ERROR) {
            freeReplyObject(r);
            return IW_ERROR;
        }

        free(current);

        if (rc == 0) {
            continue;                   /* ended, or cancelling already */
        }

        p = iw_redis_cmd("%s %s{goal:%s}:control cancel",
                         iw_redis_cluster() ? "SPUBLISH" : "PUBLISH",
                         conf->prefix, r->element[i]->str);
        if (p == NULL) {
            freeReplyObject(r);
            return IW_ERROR;
        }

        freeReplyObject(p);
        iw_info("goal %s: sub-goal %s cancelled", g->goal_id,
                r->element[i]->str);
    }

    freeReplyObject(r);

    return IW_OK;
}


int
iw_goal_members(iw_goal_t *g, iw_agents_t *out)
{
    size_t       i;
    yajl_val     team, m, v;
    const char  *s;

    out->v = NULL;
    out->n = 0;

    team = g->team ? ioa_json_parse(g->team, strlen(g->team)) : NULL;

    if (team == NULL || !YAJL_IS_ARRAY(team)) {
        yajl_tree_free(team);
        return IW_ERROR;
    }

    out->v = ioa_alloc((team->u.array.len + 1) * sizeof(iw_agent_t));

    for (i = 0; i < team->u.array.len; i++) {
        m = team->u.array.values[i];
        s = ioa_json_get_str(m, "name");

        if (s == NULL) {
            continue;
        }

        out->v[out->n].name = ioa_strdup(s);
        s = ioa_json_get_str(m, "type");
        out->v[out->n].type = ioa_strdup(s ? s : "");
        s = ioa_json_get_str(m, "desc");
        out->v[out->n].desc = ioa_strdup(s ? s : "");
        v = ioa_json_get(m, "protocol");
        out->v[out->n].protocol = v && YAJL_IS_TRUE(v);
        out->v[out->n].found = 1;
        out->v[out->n].online = 0;
        out->n++;
    }

    yajl_tree_free(team);

    return IW_OK;
}


/* the tasks of the current round: g->tasks[*first ..], the count returned
 * (the rounds' tasks are appended in order) */

size_t
iw_goal_round_tasks(iw_goal_t *g, size_t *first)
{
    size_t  i, n;

    for (i = 0, n = 0, *first = g->ntasks; i < g->ntasks; i++) {
        if (g->tasks[i].round == g->round) {
            *first = n++ ? *first : i;
        }
    }

    return n;
}
