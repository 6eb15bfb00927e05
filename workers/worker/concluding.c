/*
 * ioa-worker: the concluding phase of a goal.
 *
 * Once the review concludes (decide.c), or at max_turns, the token budget,
 * the deadline, a person's stop or a cancel (conversation.c, person.c,
 * goal.c), the goal is "concluding" with why in `ended`, and each step
 * here does the next thing still missing, so a successor after a crash
 * does exactly what is left:
 *
 *   1. open tasks are marked cancelled (unless the round settled);
 *   2. CONCLUDE_GROUP_DISCUSSION (step 100r + 40, not after a cancel),
 *      with the conclude decision, the tasks recorded in the agents'
 *      records first;
 *   3. the conclusion is fixed (the planner's text, if it has one, then
 *      the account of every part: what the room shows was done) and saved
 *      before it is posted as CONCLUSION (step 100r + 41), so a CONCLUSION
 *      posted again says the same;
 *   4. the meta record "concluded" (or "cancelled") with the conclusion
 *      and parts_done/parts_total, the feed's final event, the sub-goals
 *      cancelled after a cancel, and the job acknowledged.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


int
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
            && !iw_streq(g->ended, "token_budget"))
        {
            rc = g->planner->conclusion(conf, g, &text);
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
