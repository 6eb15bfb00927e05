/*
 * ioa-worker: reading a goal's room.
 *
 * Every entry after the goal's read position (last_id) is copied to the
 * goal's feed and absorbed in Stream order: a task's progress and result
 * (matched by task id, or by name for IoA's clients, which make their own
 * ids; a result for another member's task is ignored), the members'
 * proposals (proposal.c), a person's messages (person.c), the answer to a
 * question of the review (decide.c), and the envelopes that count towards
 * max_turns.  The position is saved with what was learnt
 * (iw_store_save_progress), so a successor re-reads at most one batch, and
 * re-reading is harmless: task states only move forward and the feed
 * copy is deduplicated (goal_event.lua).  After a full read, an intent
 * above the step was never posted (see goal.c).
 *
 * Used by the running and the concluding phases, each step of which reads
 * the room first.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* what the coordinator keeps of a "completed" result with nothing in it:
 * the conclusion and the record say why the part is not done */
#define IW_REJECTED_EMPTY  "an empty result, not accepted by the coordinator"


static int iw_goal_absorb(const iw_conf_t *conf, iw_goal_t *g,
    iw_entries_t *e);
static iw_task_t *iw_goal_task_update(iw_goal_t *g, yajl_val env,
    const char *sender, long long type);
static int iw_goal_assigned(iw_goal_t *g, size_t i);


/* Reads the room to its end.  Then an intent still above step was never
 * posted (see goal.c). */

int
iw_goal_drain(const iw_conf_t *conf, iw_goal_t *g)
{
    int           rc;
    size_t        n;
    iw_entries_t  e;

    do {
        rc = iw_room_read(conf, g->comm_id, g->last_id, &e);
        if (rc != IW_OK) {
            return rc;
        }

        n = e.n;
        rc = n ? iw_goal_absorb(conf, g, &e) : IW_OK;
        iw_entries_free(&e);

        if (rc != IW_OK) {
            return rc;
        }

    } while (n > 0);

    if (g->intent > g->step) {
        iw_info("goal %s: step %d is not in the room; it will be posted",
                g->goal_id, g->intent);
        g->intent = 0;

        return iw_store_save(conf, g, "intent", "0", NULL);
    }

    return IW_OK;
}


static int
iw_goal_absorb(const iw_conf_t *conf, iw_goal_t *g, iw_entries_t *e)
{
    int          spoke, loaded;
    char        *mark, *s;
    size_t       i, k;
    yajl_val     env;
    iw_task_t   *t;
    long long    type, step;
    iw_agents_t  team;
    const char  *sender, *goal, *content;

    /* the team is read only for a DISCUSSION, the one type that can be a
     * protocol speaker's turn: progress and results are the common case */
    team.v = NULL;
    team.n = 0;
    loaded = 0;
    spoke = 0;

    for (i = 0; i < e->n; i++) {
        if (iw_event_envelope(conf, g->goal_id, e->v[i].sid, e->v[i].json,
                              e->v[i].len)
            != IW_OK)
        {
            iw_agents_free(&team);
            return IW_ERROR;
        }

        g->turns++;
        free(g->last_id);
        g->last_id = ioa_strdup(e->v[i].sid);

        env = ioa_json_parse(e->v[i].json, e->v[i].len);
        sender = ioa_json_get_str(env, "sender");

        if (sender == NULL || ioa_json_get_int(env, "type", &type) != 0) {
            type = -1;
        }

        if (sender == NULL) {
            yajl_tree_free(env);
            continue;
        }

        if (strcmp(sender, conf->name) == 0) {
            goal = ioa_json_get_str(env, "ioa_goal");

            if (iw_streq(goal, g->goal_id)
                && ioa_json_get_int(env, "ioa_step", &step) == 0
                && step > g->step)
            {
                /* a step of ours found in the room: it was posted */
                if (step == g->intent) {
                    iw_info("goal %s: step %lld is already in the room "
                            "(%s); not posting it again", g->goal_id, step,
                            e->v[i].sid);
                }

                g->step = (int) step;

                if (g->intent <= g->step) {
                    g->intent = 0;
                }

                /* the record must say what the room says */
                if (step % IW_ROUND_STEPS == IW_STEP_CONCLUSION
                    && (content = ioa_json_get_str(env, "content")))
                {
                    free(g->conclusion);
                    g->conclusion = ioa_strdup(content);
                }

            }

            /* a nested team's result, posted by us (whether this worker
             * or the one before it: task states only move forward) */
            if (iw_streq(goal, g->goal_id) && type == IW_TYPE_RESULT) {
                iw_goal_task_update(g, env, sender, type);
            }

        } else if (iw_person_in_room(g, e->v[i].sid, env, sender, type)) {
            /* the person spoke: saved with the progress below, and the
             * answer to the review's question to it, if one is open */
            spoke |= iw_decide_answered(g, sender);

        } else if (!iw_goal_concluded(g)
                   && (type == IW_TYPE_PROGRESS || type == IW_TYPE_RESULT))
        {
            t = iw_goal_task_update(g, env, sender, type);

            /* how long the agent took: the result's Stream id (Redis'
             * clock) since the assignment (its deadline less the time
             * a task has) */
            if (t && type == IW_TYPE_RESULT && g->deadline) {
                t->latency_ms = strtoll(e->v[i].sid, NULL, 10)
                                - (g->deadline - conf->task_timeout_ms);
                t->latency_ms = t->latency_ms > 0 ? t->latency_ms : 1;
            }

        } else if ((type == IW_TYPE_DISCUSSION
                    && g->step >= IW_STEP_DISCUSSION)
                   || ((type == IW_TYPE_SYNC_ASSIGN
                        || type == IW_TYPE_ASYNC_ASSIGN
                        || type == IW_TYPE_CONCLUDE)
                       && g->round == 0 && g->step >= IW_STEP_DISCUSSION
                       && g->step < IW_STEP_PROPOSALS))
        {
            /* a protocol speaker took its turn, maybe with a proposal */
            if (!loaded) {
                loaded = 1;

                if (iw_goal_members(g, &team) != IW_OK) {
                    team.n = 0;
                }
            }

            for (k = 0; k < team.n; k++) {
                if (team.v[k].protocol && strcmp(team.v[k].name, sender) == 0)
                {
                    if (type != IW_TYPE_DISCUSSION) {
                        spoke |= iw_proposal_keep(g, e->v[i].sid, env,
                                                  sender, type);

                    } else {
                        spoke |= iw_decide_answered(g, sender);

                        /* IoA's collaborative planning: a turn of the
                         * plan's discussion may carry an updated_plan */
                        if (g->round == 0 && g->step < IW_STEP_PROPOSALS
                            && iw_proposal_has_plan(env))
                        {
                            spoke |= iw_proposal_keep(g, e->v[i].sid, env,
                                                      sender, type);
                        }
                    }

                    mark = ioa_sprintf(",%s,", sender);

                    if (strstr(g->spoke, mark) == NULL) {
                        s = ioa_sprintf("%s%s,", g->spoke, sender);
                        free(g->spoke);
                        g->spoke = s;
                        spoke = 1;
                        iw_info("goal %s: %s took its turn", g->goal_id,
                                sender);
                    }

                    free(mark);
                }
            }
        }

        yajl_tree_free(env);
    }

    iw_agents_free(&team);

    if (spoke
        && iw_store_save(conf, g, "spoke", g->spoke,
                         "proposals", g->proposals ? g->proposals : "",
                         "ask", g->ask ? g->ask : "", NULL)
           != IW_OK)
    {
        return IW_ERROR;
    }

    return iw_store_save_progress(conf, g);
}


/*
 * A task is found by its task_id, and must belong to the sender.  An agent
 * that made up its own task_id (IoA's clients do: the assignee creates it)
 * is matched by name instead: its first open task that was assigned.
 * States only move forward.
 */

static iw_task_t *
iw_goal_task_update(iw_goal_t *g, yajl_val env, const char *sender,
    long long type)
{
    size_t       i;
    iw_task_t   *t, *mine;
    const char  *id, *status, *text;

    id = ioa_json_get_str(env, "task_id");
    t = NULL;
    mine = NULL;

    for (i = 0; i < g->ntasks; i++) {
        if (mine == NULL && strcmp(g->tasks[i].agent, sender) == 0
            && !iw_goal_settled(&g->tasks[i]) && iw_goal_assigned(g, i))
        {
            mine = &g->tasks[i];
        }

        if (id && strcmp(g->tasks[i].task_id, id) == 0) {
            t = &g->tasks[i];
        }
    }

    if (t && strcmp(t->agent, sender) != 0) {
        iw_warn("goal %s: %s reported on %s's task %s; ignored", g->goal_id,
                sender, t->agent, t->task_id);
        return NULL;
    }

    if (t == NULL) {
        t = mine;
    }

    if (t == NULL || iw_goal_settled(t)) {
        return NULL;
    }

    if (type == IW_TYPE_PROGRESS) {
        if (iw_streq(t->status, "pending")) {
            free(t->status);
            t->status = ioa_strdup("in_progress");
            t->dirty = 1;
            iw_info("goal %s: task %s (%s) in progress", g->goal_id,
                    t->task_id, t->agent);
        }

        return NULL;
    }

    status = ioa_json_get_str(env, "task_status");

    if (!iw_streq(status, "failed") && !iw_streq(status, "timed_out")
        && !iw_streq(status, "cancelled") && !iw_streq(status, "partial"))
    {
        status = "completed";
    }

    text = ioa_json_get_str(env, "task_conclusion");

    if (text == NULL || *text == '\0') {
        text = ioa_json_get_str(env, "content");
    }

    /* the coordinator's verdict, not the agent's word: "completed" with
     * nothing in it is not accepted, so the review re-routes the part and
     * the agent's record counts a failure (decide.c, "Records") */
    if (iw_streq(status, "completed") && iw_blank(text)) {
        iw_warn("goal %s: task %s (%s) reported completed with an empty "
                "result; rejected", g->goal_id, t->task_id, t->agent);
        status = "failed";
        text = IW_REJECTED_EMPTY;
    }

    free(t->status);
    free(t->result);
    t->status = ioa_strdup(status);
    t->result = ioa_strdup(text ? text : "");
    t->dirty = 1;

    iw_info("goal %s: task %s (%s) %s", g->goal_id, t->task_id, t->agent,
            status);

    return t;
}


/* a task's assignment is in the room: only then can it be answered */

static int
iw_goal_assigned(iw_goal_t *g, size_t i)
{
    int     base;
    size_t  first;

    if (g->tasks[i].round < g->round) {
        return 1;
    }

    iw_goal_round_tasks(g, &first);
    base = g->round * IW_ROUND_STEPS;

    if (iw_goal_one_at_a_time(g)) {
        return g->step >= base + IW_STEP_SYNC + 2 * (int) (i - first);
    }

    return g->step >= base + IW_STEP_ASSIGN;
}
