/*
 * ioa-worker: the running phase of a goal, the conversation in the room.
 *
 * The coordinator chairs the room (it created it, so the hub's floor
 * control always lets it speak) and runs IoA's message types in an order
 * fixed by the persisted plan, one step per call of iw_goal_running():
 *
 *   discussion   DISCUSSION with the plan (step 1).  next_speaker: the
 *                members that speak the protocol themselves (registered
 *                with speaks_protocol), else the coordinator.  For every
 *                member that only runs tasks the coordinator speaks in its
 *                place, from its registered description, marked
 *                "on_behalf_of" (steps 2 + i).  Then it waits until each
 *                protocol speaker has taken its DISCUSSION turn, or until
 *                --turn-timeout has passed: a silent speaker cannot stall
 *                the room.
 *   parallel     ASYNC_TASK_ASSIGNMENT with every task (step 10), PAUSE
 *                with the task ids as triggers (step 11), then the answers
 *                (INFORM_TASK_PROGRESS, INFORM_TASK_RESULT) until every
 *                task has settled or --task-timeout marks the rest
 *                timed_out.
 *   sequence     ("..., then ..."; or the LLM's choice) one
 *                SYNC_TASK_ASSIGNMENT per task (step 20 + 2i), each with
 *                the results before it, waiting for its result (or its
 *                deadline) before the next.
 *
 * A task marked sub is done by a nested team: the coordinator is its
 * assignee, a sub-goal does the work (subteam.c), and its conclusion comes
 * back into this room as the task's INFORM_TASK_RESULT (step 12 + i, or
 * 21 + 2i in a sequence), posted by the coordinator.
 *
 * When every task of the round has settled, the review (decide.c) either
 * concludes or opens round r + 1 (re-routed and iterated parts), whose
 * steps are the same offsets from IW_ROUND_STEPS * r + 1 after the
 * decision's DISCUSSION; a later round has no plan discussion of its own.
 *
 * max_turns (envelopes in the room since the goal started), the token
 * budget and the goal's deadline (its "deadline_s" from its creation,
 * within --goal-timeout) are checked before every step, and end the phase
 * at once; a waiting goal's timer is never later than its deadline.
 *
 * Reading the room: every entry is copied to the goal's feed and absorbed
 * in Stream order, and the read position is saved with what was learnt
 * (iw_store_save_progress), so a successor re-reads at most one batch.
 * The goal's person is a member too: its plain envelopes are its messages,
 * kept with that write (fsm "said") and decided right after with the
 * inbox's (person.c); an end moves the phase to concluding there.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


static int iw_goal_discuss(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_parallel(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_sequence(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_set_deadline(const iw_conf_t *conf, iw_goal_t *g,
    int step, long long *now);
static int iw_goal_expire(const iw_conf_t *conf, iw_goal_t *g, size_t i,
    long long now);
static int iw_goal_check_present(const iw_conf_t *conf, iw_goal_t *g,
    iw_task_t *t, long long now);
static void iw_goal_task_json(ioa_buf_t *tasks, ioa_buf_t *subs, iw_task_t *t,
    const char *desc);


int
iw_goal_running(const iw_conf_t *conf, iw_goal_t *g)
{
    int        rc;
    long long  now;

    rc = iw_goal_drain(conf, g);
    if (rc != IW_OK || g->phase != IW_PHASE_RUNNING) {
        return rc;
    }

    if (g->max_turns && g->turns >= g->max_turns) {
        return iw_goal_to_concluding(conf, g, "max_turns");
    }

    if (conf->token_budget
        && g->prompt_tokens + g->completion_tokens >= conf->token_budget)
    {
        return iw_goal_to_concluding(conf, g, "token_budget");
    }

    if (g->deadline_ms && g->created_at) {
        if (iw_redis_time_ms(&now) != IW_OK) {
            return IW_ERROR;
        }

        if (now >= g->created_at + g->deadline_ms) {
            return iw_goal_to_concluding(conf, g, "deadline");
        }

        /* whatever the step waits for, it wakes at the goal's deadline */
        iw_goal_wake_in(g, g->created_at + g->deadline_ms - now);
    }

    /* a person's messages, the room's and the inbox's: an end concludes
     * the goal here, work waits for the review (person.c) */
    rc = iw_person_read(conf, g);
    if (rc != IW_OK || g->phase != IW_PHASE_RUNNING) {
        return rc;
    }

    /* a later round opens with the decision that made it */
    if (g->round > 0
        && g->step < (g->round - 1) * IW_ROUND_STEPS + IW_STEP_DECIDE)
    {
        return iw_decide_post(conf, g);
    }

    rc = g->round == 0 ? iw_goal_discuss(conf, g) : IW_GOAL_NEXT;

    if (rc == IW_GOAL_NEXT) {
        rc = iw_goal_one_at_a_time(g) ? iw_goal_sequence(conf, g)
                                      : iw_goal_parallel(conf, g);
    }

    if (rc == IW_GOAL_NEXT) {
        return iw_decide(conf, g);     /* the round has settled */
    }

    return rc;
}


static int
iw_goal_discuss(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, step;
    char        *text, *mark, *extra;
    size_t       i, nspeakers, waiting;
    ioa_buf_t    b, e;
    long long    now;
    iw_agents_t  team;

    if (iw_goal_members(g, &team) != IW_OK) {
        return iw_goal_fail(conf, g, "the goal's team is not valid JSON");
    }

    rc = IW_GOAL_NEXT;
    ioa_buf_init(&b);
    ioa_buf_addc(&b, '[');

    for (i = 0, nspeakers = 0; i < team.n; i++) {
        if (team.v[i].protocol && !iw_streq(team.v[i].name, conf->name)) {
            ioa_buf_adds(&b, nspeakers++ ? "," : "");
            ioa_json_str(&b, team.v[i].name);
        }
    }

    /* the floor during the discussion: the protocol speakers, else the
     * coordinator; the DISCUSSIONs it speaks for others leave it there */
    if (nspeakers == 0) {
        ioa_json_str(&b, conf->name);
    }

    ioa_buf_addc(&b, ']');

    if (g->step < IW_STEP_DISCUSSION) {
        if (nspeakers && g->turn_deadline == 0) {
            if (iw_redis_time_ms(&now) != IW_OK) {
                rc = IW_ERROR;
                goto done;
            }

            g->turn_deadline = now + conf->turn_timeout_ms;
            text = ioa_sprintf("%lld", g->turn_deadline);
            rc = iw_store_save(conf, g, "turn_deadline", text, NULL);
            free(text);

            if (rc != IW_OK) {
                goto done;
            }
        }

        text = g->discussion ? ioa_strdup(g->discussion)
                             : iw_plan_discussion(g->goal,
                                                  iw_goal_one_at_a_time(g),
                                                  g->tasks,
                                                  g->ntasks);
        rc = iw_goal_post(conf, g, IW_STEP_DISCUSSION, IW_TYPE_DISCUSSION,
                          text, b.data, NULL, NULL);
        free(text);
        goto done;
    }

    /* the coordinator speaks for the members that only run tasks */
    for (i = 0; i < team.n && i < IW_STEP_PROPOSALS - IW_STEP_BEHALF; i++) {
        step = IW_STEP_BEHALF + (int) i;

        if (team.v[i].protocol || iw_streq(team.v[i].name, conf->name)
            || g->step >= step)
        {
            continue;
        }

        ioa_buf_init(&e);
        ioa_buf_adds(&e, "\"on_behalf_of\":");
        ioa_json_str(&e, team.v[i].name);
        extra = ioa_buf_take(&e);

        text = iw_plan_behalf(&team.v[i], g->tasks, g->ntasks);
        rc = iw_goal_post(conf, g, step, IW_TYPE_DISCUSSION, text, b.data,
                          NULL, extra);
        free(text);
        free(extra);
        goto done;
    }

    /* and leaves the protocol speakers their turn, up to a deadline */
    if (nspeakers && g->step < IW_STEP_ASSIGN && g->step < IW_STEP_SYNC) {
        for (i = 0, waiting = 0; i < team.n; i++) {
            if (!team.v[i].protocol || iw_streq(team.v[i].name, conf->name)) {
                continue;
            }

            mark = ioa_sprintf(",%s,", team.v[i].name);
            waiting += strstr(g->spoke, mark) == NULL;
            free(mark);
        }

        if (waiting) {
            if (iw_redis_time_ms(&now) != IW_OK) {
                rc = IW_ERROR;
                goto done;
            }

            if (now < g->turn_deadline) {
                rc = iw_goal_wait(g, g->turn_deadline, now);
                goto done;
            }

            iw_info("goal %s: %zu speaker%s did not take the turn within "
                    "%lld s; going on", g->goal_id, waiting,
                    waiting == 1 ? "" : "s", conf->turn_timeout_ms / 1000);
        }
    }

    /* the members' proposals, answered once the turns are over */
    if (g->proposals && *g->proposals && g->step < IW_STEP_PROPOSALS) {
        rc = iw_proposal_answer(conf, g);
        goto done;
    }

    if (g->step >= IW_STEP_PROPOSALS && g->step < IW_STEP_ASSIGN
        && iw_proposal_concludes(g))
    {
        rc = iw_goal_to_concluding(conf, g, "proposal");
        goto done;
    }

done:

    ioa_buf_free(&b);
    iw_agents_free(&team);

    return rc;
}


/* every task at once, then PAUSE with the triggers, then the answers */

static int
iw_goal_parallel(const iw_conf_t *conf, iw_goal_t *g)
{
    int         rc, base;
    char       *text;
    size_t      i, j, open, npeople, first, n;
    ioa_buf_t   b, tasks, subs, extra;
    iw_task_t  *t;
    long long   now;

    n = iw_goal_round_tasks(g, &first);
    t = g->tasks + first;
    base = g->round * IW_ROUND_STEPS;

    if (g->step < base + IW_STEP_ASSIGN) {
        rc = iw_goal_set_deadline(conf, g, base + IW_STEP_ASSIGN, &now);
        if (rc != IW_OK) {
            return rc;
        }

        /* next_speaker: the assignees, once each; "tasks": each one's task,
         * "sub_teams": the tasks the coordinator hands to nested teams */
        ioa_buf_init(&b);
        ioa_buf_init(&tasks);
        ioa_buf_init(&subs);
        ioa_buf_addc(&b, '[');

        for (i = 0, npeople = 0; i < n; i++) {
            for (j = 0; j < i && strcmp(t[j].agent, t[i].agent) != 0; j++) {
                /* void */
            }

            if (j == i) {
                ioa_buf_adds(&b, npeople++ ? "," : "");
                ioa_json_str(&b, t[i].agent);
            }

            iw_goal_task_json(&tasks, &subs, &t[i], t[i].desc);
        }

        ioa_buf_addc(&b, ']');

        ioa_buf_init(&extra);
        ioa_buf_adds(&extra, "\"tasks\":{");
        ioa_buf_add(&extra, tasks.data ? tasks.data : "", tasks.len);
        ioa_buf_addc(&extra, '}');

        if (subs.len) {
            ioa_buf_adds(&extra, ",\"sub_teams\":[");
            ioa_buf_add(&extra, subs.data, subs.len);
            ioa_buf_addc(&extra, ']');
        }

        text = iw_plan_assignment(t, n);
        rc = iw_goal_post(conf, g, base + IW_STEP_ASSIGN, IW_TYPE_ASYNC_ASSIGN,
                          text, b.data, NULL, extra.data);
        free(text);
        ioa_buf_free(&b);
        ioa_buf_free(&tasks);
        ioa_buf_free(&subs);
        ioa_buf_free(&extra);

        return rc;
    }

    if (g->step < base + IW_STEP_PAUSE) {
        ioa_buf_init(&b);
        ioa_buf_adds(&b, "\"triggers\":[");

        for (i = 0; i < n; i++) {
            ioa_buf_adds(&b, i ? "," : "");
            ioa_json_str(&b, t[i].task_id);
        }

        ioa_buf_addc(&b, ']');
        text = iw_plan_pause(t, n, conf->task_timeout_ms);

        rc = iw_goal_post(conf, g, base + IW_STEP_PAUSE, IW_TYPE_PAUSE, text,
                          "\"\"", NULL, b.data);
        free(text);
        ioa_buf_free(&b);

        return rc;
    }

    /* nested teams: start them, and bring their results back in task
     * order (the steps must increase) */
    for (i = 0; i < n; i++) {
        if (!t[i].sub || iw_goal_settled(&t[i])) {
            continue;
        }

        if (!t[i].queued) {
            return iw_sub_spawn(conf, g, first + i, t[i].desc);
        }
    }

    for (i = 0; i < n; i++) {
        if (!t[i].sub || iw_goal_settled(&t[i])) {
            continue;
        }

        rc = iw_sub_poll(conf, g, first + i,
                         base + IW_STEP_SUB_RESULT + (int) i);

        if (rc != IW_GOAL_NEXT) {
            return rc;                  /* posted, or an error */
        }

        break;                          /* not done yet: wait for it */
    }

    /* waiting for the triggers */

    if (iw_redis_time_ms(&now) != IW_OK) {
        return IW_ERROR;
    }

    for (i = 0, open = 0; i < n; i++) {
        if (iw_goal_settled(&t[i])) {
            continue;
        }

        if (now >= g->deadline) {
            rc = iw_goal_expire(conf, g, first + i, now);
            if (rc != IW_OK) {
                return rc;
            }

            continue;
        }

        rc = iw_goal_check_present(conf, g, &t[i], now);
        if (rc != IW_OK) {
            return rc;
        }

        open += !iw_goal_settled(&t[i]);
    }

    rc = iw_store_save_progress(conf, g);
    if (rc != IW_OK) {
        return rc;
    }

    if (open == 0) {
        return IW_GOAL_NEXT;
    }

    return iw_goal_wait(g, g->deadline, now);
}


/*
 * Whether round g->round runs one task at a time: the goal is a sequence
 * ("..., then ..."), or the round gives one agent two tasks.  A part is a
 * task of its own (it is counted done only when its own task is), and
 * IoA's ASYNC_TASK_ASSIGNMENT maps each agent to one task, so an agent
 * with two parts takes them one after the other.  Known from the round's
 * saved tasks alone, so a worker that takes over runs the round the same
 * way.
 */

int
iw_goal_one_at_a_time(iw_goal_t *g)
{
    size_t      i, k, first, n;
    iw_task_t  *t;

    if (g->sync) {
        return 1;
    }

    n = iw_goal_round_tasks(g, &first);
    t = g->tasks + first;

    for (i = 0; i < n; i++) {
        for (k = i + 1; k < n; k++) {
            if (!t[i].sub && !t[k].sub && iw_streq(t[i].agent, t[k].agent)) {
                return 1;
            }
        }
    }

    return 0;
}


/* one task after the other: a sequence's steps each handed the results
 * before them */

static int
iw_goal_sequence(const iw_conf_t *conf, iw_goal_t *g)
{
    int         rc, step;
    char       *text;
    size_t      i, first, n;
    ioa_buf_t   b, tasks, subs, extra;
    iw_task_t  *t;
    long long   now;

    n = iw_goal_round_tasks(g, &first);
    t = g->tasks + first;

    for (i = 0; i < n; i++) {
        step = g->round * IW_ROUND_STEPS + IW_STEP_SYNC + 2 * (int) i;

        if (g->step < step) {
            rc = iw_goal_set_deadline(conf, g, step, &now);
            if (rc != IW_OK) {
                return rc;
            }

            text = iw_plan_sync_task(t, i, g->sync);

            ioa_buf_init(&b);
            ioa_buf_init(&tasks);
            ioa_buf_init(&subs);
            ioa_buf_init(&extra);
            ioa_buf_addc(&b, '[');
            ioa_json_str(&b, t[i].agent);
            ioa_buf_addc(&b, ']');
            iw_goal_task_json(&tasks, &subs, &t[i], text);
            ioa_buf_adds(&extra, "\"tasks\":{");
            ioa_buf_add(&extra, tasks.data ? tasks.data : "", tasks.len);
            ioa_buf_addc(&extra, '}');

            if (subs.len) {
                ioa_buf_adds(&extra, ",\"sub_teams\":[");
                ioa_buf_add(&extra, subs.data, subs.len);
                ioa_buf_addc(&extra, ']');
            }

            rc = iw_goal_post(conf, g, step, IW_TYPE_SYNC_ASSIGN, text,
                              b.data, t[i].task_id, extra.data);
            free(text);
            ioa_buf_free(&b);
            ioa_buf_free(&tasks);
            ioa_buf_free(&subs);
            ioa_buf_free(&extra);

            return rc;
        }

        if (iw_goal_settled(&t[i])) {
            continue;
        }

        if (t[i].sub) {
            if (!t[i].queued) {
                text = iw_plan_sync_task(t, i, g->sync);
                rc = iw_sub_spawn(conf, g, first + i, text);
                free(text);
                return rc;
            }

            rc = iw_sub_poll(conf, g, first + i, step + 1);
            if (rc != IW_GOAL_NEXT) {
                return rc;
            }
        }

        if (iw_redis_time_ms(&now) != IW_OK) {
            return IW_ERROR;
        }

        if (now >= g->deadline) {
            rc = iw_goal_expire(conf, g, first + i, now);
            if (rc != IW_OK) {
                return rc;
            }

            rc = iw_store_save_progress(conf, g);
            if (rc != IW_OK) {
                return rc;
            }

            continue;
        }

        rc = iw_goal_check_present(conf, g, &t[i], now);
        if (rc != IW_OK) {
            return rc;
        }

        if (iw_goal_settled(&t[i])) {
            rc = iw_store_save_progress(conf, g);
            if (rc != IW_OK) {
                return rc;
            }

            continue;
        }

        return iw_goal_wait(g, g->deadline, now);
    }

    return IW_GOAL_NEXT;
}


/* The deadline of the tasks of an assignment step is fixed once, before
 * the step is posted, so that a successor keeps it. */

static int
iw_goal_set_deadline(const iw_conf_t *conf, iw_goal_t *g, int step,
    long long *now)
{
    int    rc;
    char   deadline[32], which[16];

    if (iw_redis_time_ms(now) != IW_OK) {
        return IW_ERROR;
    }

    if (g->deadline_step == step && g->deadline) {
        return IW_OK;
    }

    g->deadline = *now + conf->task_timeout_ms;
    g->deadline_step = step;
    snprintf(deadline, sizeof(deadline), "%lld", g->deadline);
    snprintf(which, sizeof(which), "%d", step);

    rc = iw_store_save(conf, g, "deadline", deadline, "deadline_step", which,
                       NULL);

    return rc;
}


/* a task past its deadline: timed_out; a nested team working on it is
 * cancelled (its conclusion would come too late) */

static int
iw_goal_expire(const iw_conf_t *conf, iw_goal_t *g, size_t i, long long now)
{
    iw_task_t  *t;

    (void) now;

    t = &g->tasks[i];

    free(t->status);
    t->status = ioa_strdup("timed_out");
    t->dirty = 1;

    iw_info("goal %s: task %s (%s) timed out", g->goal_id, t->task_id,
            t->agent);

    if (t->sub && t->child) {
        return iw_sub_cancel(conf, g, i);
    }

    return IW_OK;
}


/*
 * An assignee that no hub holds a connection of (the registry's online
 * set) for --offline-grace will not report back: its task fails at once,
 * rather than at the deadline, and the review re-routes it.  The grace
 * covers a reconnect (ioa-agent resumes within a second or two).  The
 * time it was first seen gone is kept in memory only: a worker that takes
 * the goal over starts the grace again.
 */

static int
iw_goal_check_present(const iw_conf_t *conf, iw_goal_t *g, iw_task_t *t,
    long long now)
{
    int          online;
    long long    until;
    redisReply  *r;

    if (t->sub || conf->offline_grace_ms == 0) {
        return IW_OK;
    }

    r = iw_redis_cmd("ZSCORE %sonline %s", conf->reg_base, t->agent);
    if (r == NULL) {
        return IW_ERROR;
    }

    until = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    online = until > now;
    freeReplyObject(r);

    /* nobody publishes a presence running out: the goal looks again when
     * it would have (the hub renews it well before), or when the grace
     * ends */
    if (online) {
        t->offline_since = 0;
        iw_goal_wake_in(g, until - now + 1);
        return IW_OK;
    }

    if (t->offline_since == 0) {
        t->offline_since = now;
    }

    if (now - t->offline_since < conf->offline_grace_ms) {
        iw_goal_wake_in(g, t->offline_since + conf->offline_grace_ms - now);
        return IW_OK;
    }

    free(t->status);
    free(t->result);
    t->status = ioa_strdup("failed");
    t->result = ioa_sprintf("%s went offline and did not come back within "
                           "%lld s", t->agent, conf->offline_grace_ms / 1000);
    t->dirty = 1;

    iw_info("goal %s: task %s (%s) failed: its agent went offline",
            g->goal_id, t->task_id, t->agent);

    return IW_OK;
}


/* "agent": {"task_id","task_desc"} for the "tasks" map, or for a nested
 * team {"task_id","task_desc"} in "sub_teams" */

static void
iw_goal_task_json(ioa_buf_t *tasks, ioa_buf_t *subs, iw_task_t *t,
    const char *desc)
{
    ioa_buf_t *b;

    b = t->sub ? subs : tasks;
    ioa_buf_adds(b, b->len ? "," : "");

    if (t->sub) {
        ioa_buf_adds(b, "{\"task_id\":");

    } else {
        ioa_json_str(b, t->agent);
        ioa_buf_adds(b, ":{\"task_id\":");
    }

    ioa_json_str(b, t->task_id);
    ioa_buf_adds(b, ",\"task_desc\":");
    ioa_json_str(b, desc);
    ioa_buf_addc(b, '}');
}


