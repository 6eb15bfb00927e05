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
static int iw_goal_cancel_early(const iw_conf_t *conf, iw_goal_t *g,
    const char *why);




/*
 * The phase table: each phase's step function, indexed by the phase (as
 * nginx's phase engine indexes its handlers); iw_goal_step() runs the
 * current one.  A step function does what its phase has to do next, and
 * returns IW_OK when there is more at once (the same or the next phase),
 * IW_GOAL_WAIT when it waits, or the goal's end or a failure.
 */

static const iw_phase_pt  iw_phases[IW_PHASE_UNKNOWN] = {
    [IW_PHASE_NEW] = iw_goal_start,
    [IW_PHASE_FORMING] = iw_goal_form,
    [IW_PHASE_RUNNING] = iw_goal_running,
    [IW_PHASE_CONCLUDING] = iw_goal_concluding,
};


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
    char        *job_of;
    long long    deliveries;
    redisReply  *r;

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
    g->planner = conf->llm ? &iw_planner_llm : &iw_planner_builtin;

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

    if (iw_state_final(g->state)) {
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

    } else if (g->phase == IW_PHASE_NEW) {
        iw_info("goal %s: taken (%s)", g->goal_id, g->goal);

    } else {
        iw_info("goal %s: resumed in phase %s at step %d (intent %d), room "
                "%s after %s", g->goal_id, iw_phase_name(g->phase), g->step,
                g->intent,
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

    if (g->phase >= IW_PHASE_UNKNOWN) {
        return iw_goal_fail(conf, g, "the goal's state machine is in an "
                            "unknown phase");
    }

    return iw_phases[g->phase](conf, g);
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
        && (g->phase == IW_PHASE_RUNNING
            || g->phase == IW_PHASE_CONCLUDING))
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

    if (iw_state_final(state)) {
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
        if (g->phase == IW_PHASE_NEW || g->phase == IW_PHASE_FORMING) {
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
                             "planner", g->planner->name,
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

    rc = iw_store_save(conf, g, "phase", iw_phase_name(IW_PHASE_FORMING),
                       NULL);
    if (rc != IW_OK) {
        return rc;
    }

    g->phase = IW_PHASE_FORMING;

    return IW_OK;
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


