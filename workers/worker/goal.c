/*
 * ioa-worker: one goal, from the job to its conclusion.
 *
 * The state machine (phase in P{goal:<id>}:fsm, see store.c):
 *
 *   ""          new: meta state "forming", feed event, phase forming
 *   forming     (forming.c) plan the team and the tasks (the LLM's,
 *               checked, or the built-in planner's: llm_planner.c,
 *               planner.c), persist the plan with a fresh comm_id, then
 *               form the room exactly like
 *               /teamup; meta "running" with the comm_id; phase running
 *   running     the conversation (conversation.c): the plan, the
 *               DISCUSSIONs spoken for members that only run tasks, the
 *               protocol speakers' turns, then the tasks in parallel
 *               (ASYNC_TASK_ASSIGNMENT, PAUSE, the answers) or in sequence
 *               (one SYNC_TASK_ASSIGNMENT at a time), sub-teams for nested
 *               tasks (subteam.c); every task has a deadline, and
 *               max_turns and the token budget cut this short at any point
 *   concluding  CONCLUDE_GROUP_DISCUSSION (10), CONCLUSION (11) with the
 *               conclusion (the LLM's, or assembled from the results); meta
 *               "concluded", feed event, XACK
 *
 * Each envelope of the coordinator is a numbered step (IW_STEP_* in iw.h),
 * the numbers increasing in the order they are posted whatever the plan.
 *
 * Steps.  The engine (engine.c) opens a goal (iw_goal_open: the job
 * checked, the record loaded, the fsm owned) and then runs it one step at
 * a time (iw_goal_step: the lease, a cancel, the phase's step).  A step
 * that has to wait for something (an agent, a person, a deadline) returns
 * IW_GOAL_WAIT with the time it may wait at most (iw_goal_wait,
 * iw_goal_wake_in); a message on one of its channels (iw_goal_channels:
 * its room, its control channel, its open sub-goals' feeds) wakes it
 * sooner.  Waiting holds nothing but the goal's memory.
 *
 * A cancel (meta state "cancelling", set by POST /goals/<id>/cancel) is
 * checked before every step, and its "cancel" on the goal's control
 * channel wakes a waiting goal at once: before the room exists the goal just ends "cancelled"; after,
 * it goes to concluding with ended = cancelled, posts only the CONCLUSION
 * ("cancelled"), marks open tasks cancelled and cancels its sub-goals
 * (P{goal:<id>}:children, filled by each sub-goal's worker).
 *
 * Exactly once, across crashes.  Every room entry is processed in Stream
 * order and the position (last_id) is saved together with what was learnt
 * from it, so a worker that takes over re-reads at most one batch, and
 * re-reading is harmless: task states only move forward and the feed copy
 * is deduplicated by goal_event.lua.  Posting a step is the part that must
 * not repeat:
 *
 *   1. renew the lease (the job's pending entry) right before posting, so
 *      no other worker can take the job while the post is on its way;
 *   2. write intent = N to the fsm;
 *   3. post the envelope, which carries "ioa_goal" and "ioa_step": N;
 *   4. write step = N, intent = 0.
 *
 * A worker that dies between 2 and 4 leaves intent > step.  Its successor
 * first reads the room to its end from last_id (which is older than the
 * post, since last_id is only saved after reading): an envelope from the
 * coordinator with this goal and step N in it means the post happened and
 * step becomes N; if the room holds none, the post never happened, and the
 * intent is dropped and the step posted again.  The Stream is the only
 * witness consulted, and post.lua makes the post atomic, so the answer is
 * exact; no other worker can be posting at that moment because the one
 * that resumes holds the lease, and the dead one's lease was idle for
 * --claim-idle before it was taken over.
 *
 * A worker that was only frozen (SIGSTOP, a stalled host) past
 * --claim-idle and wakes up is fenced twice: its next lease renewal fails
 * (job_touch.lua), and any fsm write it tries before that is refused
 * (fsm_save.lua: the successor took the owner field).  Either way it gets
 * IW_LOST and drops the goal.  The one window left is a freeze longer than
 * --claim-idle between the renewal in 1 and the post in 3: the post itself
 * cannot be fenced from here, since the room's keys live in another slot
 * and post.lua is the hub's own script.
 *
 * The texts of the steps are derived only from the persisted plan and
 * states, and the conclusion is saved before it is posted, so a step that
 * is posted again after a crash says the same thing, and the meta record
 * says what the room says.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* a goal handed out this many times has killed every worker that took it */
#define IW_GOAL_MAX_DELIVERIES  10

static int iw_goal_check_cancel(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_start(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_concluding(const iw_conf_t *conf, iw_goal_t *g);
static int iw_goal_cancel_early(const iw_conf_t *conf, iw_goal_t *g,
    const char *why);
static int iw_goal_cancel_children(const iw_conf_t *conf, iw_goal_t *g);


/* test hook: die like kill -9 right after posting this step, before the
 * step is recorded (the hardest point to take over from) */
static int  iw_goal_crash_after = -1;


/*
 * A goal taken from the queue (or taken over), up to where its steps can
 * run: the job checked, the record loaded, the fsm owned.  IW_OK: g is
 * loaded and iw_goal_step() runs it; IW_GOAL_ENDED: nothing to run (the
 * job was dropped or acknowledged; g is freed); IW_ERROR, IW_LOST (g is
 * freed).  again: the goal is loaded once more for a step that waited
 * (engine.c), not taken: nothing is logged.
 */

int
iw_goal_open(const iw_conf_t *conf, iw_job_t *job, iw_goal_t *g, int again)
{
    int          rc, created;
    char        *env, *job_of;
    long long    deliveries;
    redisReply  *r;

    env = getenv("IOA_WORKER_TEST_CRASH_AFTER_STEP");
    if (env && *env) {
        iw_goal_crash_after = atoi(env);
    }

    memset(g, 0, sizeof(iw_goal_t));

    if (job->goal_id == NULL || strlen(job->goal_id) != 32
        || strspn(job->goal_id, "0123456789abcdef") != 32)
    {
        iw_warn("job %s names no valid goal; dropped", job->id);
        rc = iw_jobs_ack(conf, job->id);
        return rc == IW_OK ? IW_GOAL_ENDED : rc;
    }

    g->job_id = job->id;
    g->goal_id = job->goal_id;

    /* after a reconnect the job may have changed hands: check first */
    rc = iw_goal_lease(conf, g, 1);
    if (rc != IW_OK) {
        return rc;
    }

    rc = iw_store_load(conf, g);
    if (rc != IW_OK) {
        goto failed;
    }

    if (g->state == NULL) {
        iw_warn("goal %s: no record (P{goal:%s}:meta); job dropped",
                g->goal_id, g->goal_id);
        rc = iw_jobs_ack(conf, g->job_id);
        goto ended;
    }

    if (iw_goal_final(g->state)) {
        iw_info("goal %s: already %s; job acknowledged", g->goal_id,
                g->state);

        /* the worker that ended it may have died before the index heard */
        rc = iw_store_index(conf, g->goal_id, g->state, g->goal, g->parent,
                            g->created_at);
        if (rc == IW_OK) {
            rc = iw_goal_retire(conf, g->goal_id, g->job_id);
        }

        goto ended;
    }

    /* one job per goal: a second one (a spawn repeated after a crash) is
     * dropped; the first job to be taken names itself in the record */
    r = iw_redis_cmd("HSETNX %s{goal:%s}:meta job %s", conf->prefix,
                     g->goal_id, g->job_id);
    if (r == NULL) {
        rc = IW_ERROR;
        goto failed;
    }

    created = (r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);

    if (!created) {
        if (iw_store_meta_get(conf, g->goal_id, "job", &job_of) != IW_OK) {
            rc = IW_ERROR;
            goto failed;
        }

        if (job_of && strcmp(job_of, g->job_id) != 0) {
            iw_warn("goal %s: job %s is a second job for it (the first is "
                    "%s); dropped", g->goal_id, g->job_id, job_of);
            free(job_of);
            rc = iw_jobs_ack(conf, g->job_id);
            goto ended;
        }

        free(job_of);
    }

    rc = iw_jobs_deliveries(conf, g->job_id, &deliveries);
    if (rc != IW_OK) {
        goto failed;
    }

    if (deliveries > IW_GOAL_MAX_DELIVERIES) {
        rc = iw_goal_fail(conf, g, "abandoned: every worker that took this "
                          "goal stopped before it ended");
        rc = (rc == IW_GOAL_ENDED) ? IW_OK : rc;
        goto ended;
    }

    rc = iw_store_own(conf, g);
    if (rc != IW_OK) {
        goto failed;
    }

    if (again) {
        /* loaded again for a step that waited (engine.c): nothing new */

    } else if (g->phase[0] == '\0') {
        iw_info("goal %s: taken (%s)", g->goal_id, g->goal);

    } else {
        iw_info("goal %s: resumed in phase %s at step %d (intent %d), room "
                "%s after %s", g->goal_id, g->phase, g->step, g->intent,
                g->comm_id ? g->comm_id : "-", g->last_id);
    }

    return IW_OK;

ended:

    iw_goal_free(g);

    return rc == IW_OK ? IW_GOAL_ENDED : rc;

failed:

    iw_goal_free(g);

    return rc;
}


/*
 * One step of a loaded goal: the lease, a cancel, then its phase's step
 * function.  IW_OK: it has more to do at once; IW_GOAL_WAIT: it waits
 * (g->wake_in says for how long at most, and iw_goal_channels() what
 * wakes it sooner); IW_GOAL_ENDED; IW_ERROR, IW_LOST, IW_STOPPED.
 */

int
iw_goal_step(const iw_conf_t *conf, iw_goal_t *g)
{
    int  rc;

    g->wake_in = -1;

    rc = iw_goal_lease(conf, g, 0);
    if (rc != IW_OK) {
        return rc;
    }

    rc = iw_goal_check_cancel(conf, g);
    if (rc != IW_OK) {
        return rc;
    }

    if (g->phase[0] == '\0') {
        return iw_goal_start(conf, g);
    }

    if (strcmp(g->phase, "forming") == 0) {
        return iw_goal_form(conf, g);
    }

    if (strcmp(g->phase, "running") == 0) {
        return iw_goal_running(conf, g);
    }

    if (strcmp(g->phase, "concluding") == 0) {
        return iw_goal_concluding(conf, g);
    }

    return iw_goal_fail(conf, g, "the goal's state machine is in an "
                        "unknown phase");
}


/* gives the job back for another worker to take at once (SIGTERM) */

int
iw_goal_release(const iw_conf_t *conf, iw_goal_t *g)
{
    int  rc;

    rc = iw_jobs_touch(conf, g->job_id, 1);
    if (rc == 1) {
        iw_info("goal %s: released at step %d for another worker",
                g->goal_id, g->step);
    }

    return rc == IW_ERROR ? IW_ERROR : IW_OK;
}


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


/* the channels whose messages wake the waiting goal (pubsub.c): its
 * control channel (a cancel, a person's message), its room, and the feed
 * of every sub-goal still open; each a string of its own in out */

size_t
iw_goal_channels(const iw_conf_t *conf, iw_goal_t *g, char ***out)
{
    size_t   i, n;
    char   **v;

    v = ioa_alloc((g->ntasks + 2) * sizeof(char *));
    n = 0;

    v[n++] = ioa_sprintf("%s{goal:%s}:control", conf->prefix, g->goal_id);

    if (g->comm_id && *g->comm_id
        && (iw_streq(g->phase, "running")
            || iw_streq(g->phase, "concluding")))
    {
        v[n++] = ioa_sprintf("%s{room:%s}:ch", conf->prefix, g->comm_id);
    }

    for (i = 0; i < g->ntasks; i++) {
        if (g->tasks[i].sub && g->tasks[i].queued && g->tasks[i].child
            && !iw_goal_settled(&g->tasks[i]))
        {
            v[n++] = ioa_sprintf("%s{room:goal-%s}:ch", conf->prefix,
                                 g->tasks[i].child);
        }
    }

    *out = v;

    return n;
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


/* IW_OK to go on, IW_GOAL_ENDED, or IW_ERROR */

static int
iw_goal_check_cancel(const iw_conf_t *conf, iw_goal_t *g)
{
    int    rc;
    char  *state;

    if (iw_store_meta_get(conf, g->goal_id, "state", &state) != IW_OK) {
        return IW_ERROR;
    }

    if (state == NULL) {
        iw_warn("goal %s: its record is gone; job dropped", g->goal_id);
        return iw_jobs_ack(conf, g->job_id) == IW_OK ? IW_GOAL_ENDED
                                                     : IW_ERROR;
    }

    if (iw_goal_final(state)) {
        /* ended elsewhere (by hand, or a worker that lost its lease late) */
        iw_info("goal %s: %s meanwhile; job acknowledged", g->goal_id, state);
        rc = iw_store_index(conf, g->goal_id, state, g->goal, g->parent,
                            g->created_at);
        free(state);

        if (rc != IW_OK) {
            return IW_ERROR;
        }

        return iw_goal_retire(conf, g->goal_id, g->job_id) == IW_OK
               ? IW_GOAL_ENDED : IW_ERROR;
    }

    rc = IW_OK;

    if (strcmp(state, "cancelling") == 0
        && !iw_streq(g->ended, "cancelled")
        && !iw_goal_concluded(g))
    {
        iw_info("goal %s: cancel requested", g->goal_id);

        /* nginx indexes the cancel itself; should that write have been
         * lost, the index hears it here */
        if (iw_store_index(conf, g->goal_id, "cancelling", g->goal,
                           g->parent, g->created_at)
            != IW_OK)
        {
            free(state);
            return IW_ERROR;
        }

        /* before the room is formed nobody is told but the feed */
        if (g->phase[0] == '\0' || iw_streq(g->phase, "forming")) {
            rc = iw_goal_cancel_early(conf, g, NULL);

        } else {
            rc = iw_goal_to_concluding(conf, g, "cancelled");
        }
    }

    free(state);

    return rc;
}


static int
iw_goal_start(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc;
    char        *parent_state, *current;
    redisReply  *r;

    if (g->parent && *g->parent) {
        /* a sub-goal: its parent's cancel must reach it */
        r = iw_redis_cmd("SADD %s{goal:%s}:children %s", conf->prefix,
                         g->parent, g->goal_id);
        if (r == NULL) {
            return IW_ERROR;
        }

        freeReplyObject(r);

        if (iw_store_meta_get(conf, g->parent, "state", &parent_state)
            != IW_OK)
        {
            return IW_ERROR;
        }

        if (iw_streq(parent_state, "cancelling")
            || iw_streq(parent_state, "cancelled"))
        {
            free(parent_state);
            return iw_goal_cancel_early(conf, g,
                                        "its parent goal was cancelled");
        }

        free(parent_state);
    }

    rc = iw_store_meta_state(conf, g->goal_id, "forming", &current,
                             "worker", conf->consumer,
                             "planner", conf->llm ? "llm" : "builtin",
                             "tokens", "0", "prompt_tokens", "0",
                             "completion_tokens", "0", NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    free(current);

    if (rc == 0) {
        return IW_OK;                   /* cancelled meanwhile: next round */
    }

    if (iw_event_state(conf, g->goal_id, "forming", NULL, NULL, NULL)
        != IW_OK)
    {
        return IW_ERROR;
    }

    rc = iw_store_save(conf, g, "phase", "forming", NULL);
    if (rc != IW_OK) {
        return rc;
    }

    free(g->phase);
    g->phase = ioa_strdup("forming");

    return IW_OK;
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
iw_goal_final(const char *state)
{
    return iw_streq(state, "concluded") || iw_streq(state, "failed")
           || iw_streq(state, "cancelled");
}


int
iw_goal_to_concluding(const iw_conf_t *conf, iw_goal_t *g, const char *ended)
{
    int  rc;

    rc = iw_store_save(conf, g, "phase", "concluding", "ended", ended, NULL);
    if (rc != IW_OK) {
        return rc;
    }

    free(g->phase);
    free(g->ended);
    g->phase = ioa_strdup("concluding");
    g->ended = ioa_strdup(ended);

    iw_info("goal %s: concluding (%s)", g->goal_id, ended);

    return IW_OK;
}


static int
iw_goal_concluding(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, cancelled, base;
    char        *text, *extra, *current, tokens[32], done[32], total[32];
    size_t       i;
    ioa_buf_t    b;
    const char  *final;

    rc = iw_goal_drain(conf, g);
    if (rc != IW_OK) {
        return rc;
    }

    cancelled = iw_streq(g->ended, "cancelled");
    base = g->round * IW_ROUND_STEPS;

    if (g->step < base + IW_STEP_CONCLUSION
        && !iw_streq(g->ended, "settled"))
    {
        for (i = 0; i < g->ntasks; i++) {
            if (!iw_goal_settled(&g->tasks[i])) {
                free(g->tasks[i].status);
                g->tasks[i].status = ioa_strdup("cancelled");
                g->tasks[i].dirty = 1;
            }
        }

        rc = iw_store_save_progress(conf, g);
        if (rc != IW_OK) {
            return rc;
        }
    }

    if (!cancelled && g->step < base + IW_STEP_CONCLUDE) {
        if (iw_decide_record_tasks(conf, g, -1) != IW_OK) {
            return IW_ERROR;
        }

        text = iw_decide_conclude_text(g);
        extra = iw_decide_conclude_extra(g, text);
        ioa_buf_init(&b);
        ioa_buf_addc(&b, '[');
        ioa_json_str(&b, conf->name);
        ioa_buf_addc(&b, ']');

        rc = iw_goal_post(conf, g, base + IW_STEP_CONCLUDE, IW_TYPE_CONCLUDE,
                          text, b.data, NULL, extra);
        free(text);
        free(extra);
        ioa_buf_free(&b);

        return rc;
    }

    if (g->step < base + IW_STEP_CONCLUSION) {
        text = NULL;

        if (g->conclusion == NULL && !cancelled
            && !iw_streq(g->ended, "token_budget") && iw_llm_on(conf, g))
        {
            rc = iw_llm_conclusion(conf, g, &text);
            if (rc != IW_OK) {
                return rc;
            }
        }

        if (g->conclusion == NULL) {
            g->conclusion = iw_decide_account(conf, g);

            /* the model's answer comes first, and the account after it:
             * whatever the model wrote, what is said to be done is what
             * the room shows was done */
            if (text) {
                extra = g->conclusion;
                g->conclusion = ioa_sprintf("%s\n\n%s", text, extra);
                free(extra);
                free(text);
                text = NULL;
            }

            rc = iw_store_save(conf, g, "conclusion", g->conclusion, NULL);
            if (rc != IW_OK) {
                return rc;
            }
        }

        return iw_goal_post(conf, g, base + IW_STEP_CONCLUSION,
                            IW_TYPE_CONCLUSION, g->conclusion, "\"\"", NULL,
                            NULL);
    }

    /* the CONCLUSION is in the room (and, after the drain above, in the
     * feed): record the outcome, then the final event */

    final = cancelled ? "cancelled" : "concluded";

    snprintf(tokens, sizeof(tokens), "%lld",
             g->prompt_tokens + g->completion_tokens);
    snprintf(done, sizeof(done), "%zu", iw_decide_done(g));
    snprintf(total, sizeof(total), "%zu", g->nparts);

    /* parts_done and parts_total: what a parent goal reviews (subteam.c) */
    rc = iw_store_meta_state(conf, g->goal_id, final, &current,
                             "comm_id", g->comm_id,
                             "conclusion", g->conclusion ? g->conclusion : "",
                             "tokens", tokens, "ended", g->ended,
                             "parts_done", done, "parts_total", total, NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    if (rc == 0 && !iw_streq(current, final)) {
        iw_warn("goal %s: already %s; not marked %s", g->goal_id, current,
                final);
    }

    free(current);

    if (iw_event_state(conf, g->goal_id, final, g->comm_id, g->conclusion,
                       NULL)
        != IW_OK)
    {
        return IW_ERROR;
    }

    if (cancelled && iw_goal_cancel_children(conf, g) != IW_OK) {
        return IW_ERROR;
    }

    if (iw_goal_retire(conf, g->goal_id, g->job_id) != IW_OK) {
        return IW_ERROR;
    }

    iw_info("goal %s: %s in room %s", g->goal_id, final, g->comm_id);

    return IW_GOAL_ENDED;
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


/* a cancel before the room exists: nothing to tell anyone but the feed */

static int
iw_goal_cancel_early(const iw_conf_t *conf, iw_goal_t *g, const char *why)
{
    int    rc;
    char  *current;

    rc = iw_store_meta_state(conf, g->goal_id, "cancelled", &current,
                             "error", why ? why : "", NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    free(current);

    if (iw_event_state(conf, g->goal_id, "cancelled", NULL, NULL, why)
        != IW_OK
        || iw_goal_cancel_children(conf, g) != IW_OK
        || iw_goal_retire(conf, g->goal_id, g->job_id) != IW_OK)
    {
        return IW_ERROR;
    }

    iw_info("goal %s: cancelled%s%s", g->goal_id, why ? ": " : "",
            why ? why : "");

    return IW_GOAL_ENDED;
}


/* sub-goals: the same cancel nginx's goal_cancel.lua makes */

static int
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
