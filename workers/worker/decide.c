/*
 * ioa-worker: the review after each round of tasks, where the coordinator
 * decides what the conversation does next.  IoA's parent "decides whether
 * to iterate or conclude"; here every round ends with a decision, posted
 * into the room so that the transcript says why the conversation went on
 * or stopped.
 *
 * Parts.  A goal is cut into parts when it is planned (the built-in
 * planner's clauses, or the LLM's tasks as it wrote them; fsm "parts").
 * Every task covers some parts (a bit each), and a part's standing is the
 * status of the latest task that covered it:
 *
 *   completed   done, its result stands
 *   partial     the agent did some of it ("task_status": "partial"; the
 *               --partial-exit status of an ioa-agent --exec program): its
 *               result so far
 *   failed, timed_out   not done by that agent
 *   cancelled   the goal ended first
 *   (no task)   nobody matched it well enough (parts' "why")
 *
 * Rounds.  Round 0 is the plan: discussion, assignment, results
 * (conversation.c).  When every task of round r has settled, the review
 * takes one of these decisions, by rule (the built-in planner's, also used
 * when a model is configured, see below):
 *
 *   decision   when                               what follows
 *   reroute    a part failed or timed out, and    a task for the next best
 *              an online agent not tried on it    eligible agent (planner.c:
 *              matches it (iw_plan_eligible), and iw_plan_eligible), who
 *              it had fewer than --max-attempts   joins the room if needed
 *   iterate    a part came back partial           the same agent gets it
 *                                                 again with its result so
 *                                                 far
 *   ask        a member that speaks the protocol  a DISCUSSION to it (step
 *              failed a part and was not asked    100r + 36 + k, the floor
 *              about it yet (the model: any such  its); the review waits for
 *              member, any question)              the answer or --turn-timeout
 *                                                 and decides again
 *   conclude   nothing is left to try, or round   CONCLUDE_GROUP_DISCUSSION
 *              r + 1 would pass --max-rounds      and the CONCLUSION
 *
 * Re-routes and iterations of one review go out together as round r + 1,
 * in parallel (in sequence when the goal is a sequence, or one agent has
 * two of them: conversation.c, iw_goal_one_at_a_time), one task per part,
 * after a DISCUSSION from the coordinator that
 * carries "ioa_decision": {"decision", "round", "reason", "bound",
 * "tasks", "text"}; the coordinator keeps the floor (next_speaker) and
 * the round's assignment follows.  A conclude decision is the
 * CONCLUDE_GROUP_DISCUSSION itself, with the same "ioa_decision".  The
 * conclusion (iw_decide_account) lists every part with its result or the
 * reason it has none; "N of M parts done" counts completed parts only.
 *
 * Bounds.  --max-rounds (hard cap IW_MAX_ROUNDS) and --max-attempts bound
 * the review itself; max_turns, the token budget and a cancel end the
 * goal at any step (conversation.c, goal.c), and the meta record's
 * "ended" names the bound: settled, max_rounds, max_turns, token_budget,
 * cancelled.
 *
 * Records.  A task's status is the coordinator's verdict, not the
 * agent's word: completed only for a result that arrived in time (a late
 * one finds the task timed_out) and says something (an empty "completed"
 * is rejected as failed when it arrives, absorb.c), so the review
 * re-routes what it did not accept.  Every settled task (completed,
 * partial, failed, timed_out) is counted in its agent's record when its
 * round is reviewed and again when the goal concludes (rep_record.lua
 * counts a task once, whoever asks); query.lua and retrieve.lua return the
 * record, and every ranking of the planner and the re-route weighs it
 * against the match, with a share of the work for newcomers (registry.c:
 * iw_reg_rank).
 *
 * Exactly once.  Round r's steps are numbered from IW_ROUND_STEPS * r (the
 * offsets of iw.h), and its decision is step IW_ROUND_STEPS * r +
 * IW_STEP_DECIDE, above every step of round r and below round r + 1's.  The
 * decision is computed once and saved (decision:<r>, with round r + 1's
 * tasks and the new team) in one fsm write before it is posted, so a
 * worker that takes over posts the same decision, or finds it in the room
 * (goal.c's intent/step scheme), and never decides twice.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* candidates read from the registry for a re-route */
#define IW_DECIDE_CANDIDATES  10


typedef struct {
    iw_task_t    *last;              /* the latest task that covered it */
    int           failures;          /* its tasks that failed or timed out */
    ioa_buf_t     tried;             /* ",a,b,": agents that had it */
} iw_part_state_t;


static void iw_decide_parts(iw_goal_t *g, iw_part_state_t *ps);
static void iw_decide_parts_free(iw_goal_t *g, iw_part_state_t *ps);
static void iw_decide_take_requests(const iw_conf_t *conf, iw_goal_t *g,
    ioa_buf_t *why);
static int iw_decide_next(const iw_conf_t *conf, iw_goal_t *g, size_t p,
    iw_part_state_t *ps, iw_agent_t *to, const char **kind);
static void iw_decide_add_task(iw_goal_t *g, const iw_agent_t *a,
    size_t p, const char *kind, const char *text);
static void iw_decide_add_member(iw_goal_t *g, const iw_agent_t *a);
static int iw_decide_in_team(iw_goal_t *g, const char *name);
static int iw_decide_candidates(const iw_conf_t *conf, iw_goal_t *g,
    size_t p, iw_part_state_t *ps, iw_agents_t *out, size_t *matched);
static void iw_decide_copy_agent(iw_agent_t *to, const iw_agent_t *a);
static char *iw_decide_record(const char *decision, int round,
    const char *reason, const char *ended, const char *by, const char *text,
    iw_goal_t *g, size_t from);
static int iw_decide_by_model(const iw_conf_t *conf, iw_goal_t *g,
    iw_part_state_t *ps, const char **kind, iw_agent_t *to, char **descs,
    ioa_buf_t *why, char **ask_agent, char **ask_text);
static int iw_decide_ask_pending(const iw_conf_t *conf, iw_goal_t *g);
static int iw_decide_asks(iw_goal_t *g, unsigned *parts);
static void iw_decide_askable(iw_goal_t *g, iw_agents_t *out);
static void iw_decide_rule_ask(iw_goal_t *g, iw_part_state_t *ps,
    char **agent, char **text, unsigned *parts);
static int iw_decide_ask(const iw_conf_t *conf, iw_goal_t *g,
    const char *agent, const char *text, unsigned parts, const char *by);
static void iw_decide_mark_answered(iw_goal_t *g, const char *how);
static void iw_decide_person_ask(iw_goal_t *g, iw_part_state_t *ps,
    size_t done, char **agent, char **text, unsigned *parts);
static unsigned iw_decide_person_parts(iw_goal_t *g);
static int iw_decide_input(const iw_conf_t *conf, iw_goal_t *g, int awaiting,
    const char *text, long long round, long long k);
static int iw_decide_needs_work(const iw_conf_t *conf, iw_goal_t *g,
    iw_part_state_t *ps, size_t p);


static void
iw_decide_parts(iw_goal_t *g, iw_part_state_t *ps)
{
    size_t      i, p;
    iw_task_t  *t;

    for (p = 0; p < g->nparts; p++) {
        ps[p].last = NULL;
        ps[p].failures = 0;
        ioa_buf_init(&ps[p].tried);
        ioa_buf_addc(&ps[p].tried, ',');

        for (i = 0; i < g->ntasks; i++) {
            t = &g->tasks[i];

            if (!(t->parts & (1u << p))) {
                continue;
            }

            ps[p].last = t;
            ps[p].failures += iw_streq(t->status, "failed")
                              || iw_streq(t->status, "timed_out");
            ioa_buf_adds(&ps[p].tried, t->agent);
            ioa_buf_addc(&ps[p].tried, ',');
        }
    }
}


static void
iw_decide_parts_free(iw_goal_t *g, iw_part_state_t *ps)
{
    size_t  p;

    for (p = 0; p < g->nparts; p++) {
        ioa_buf_free(&ps[p].tried);
    }

    free(ps);
}


/*
 * Called when every task of the current round has settled.  Either saves
 * round + 1 (its tasks, the new members, the decision) and returns IW_OK,
 * the loop then posting the decision (iw_decide_post); or saves a
 * conclude decision and moves the goal to concluding.
 */

int
iw_decide(const iw_conf_t *conf, iw_goal_t *g)
{
    int               rc, r, reroutes, iterations, last;
    char             *tasks, *parts, *field, *rec, *reason, *ask_agent,
                     *ask_text, *descs[IW_PLAN_MAX_CLAUSES];
    unsigned          ask_parts;
    size_t            p, first, k, n, done;
    ioa_buf_t         why, text;
    iw_agent_t        to[IW_PLAN_MAX_CLAUSES];
    const char       *kind[IW_PLAN_MAX_CLAUSES], *ended, *decision, *by;
    iw_part_state_t  *ps;

    r = g->round;

    if (g->decision[r]) {
        /* decided before a takeover: only a conclude leaves no round r+1 */
        return iw_goal_to_concluding(conf, g, iw_decide_ended(g, r));
    }

    /* a question of this review: posted, then answered or timed out */
    rc = iw_decide_ask_pending(conf, g);
    if (rc != IW_GOAL_NEXT) {
        return rc;
    }

    if (iw_decide_record_tasks(conf, g, r) != IW_OK) {
        return IW_ERROR;
    }

    ask_agent = NULL;
    ask_text = NULL;
    ask_parts = 0;
    reroutes = 0;
    iterations = 0;
    rc = IW_OK;
    ioa_buf_init(&why);
    ioa_buf_init(&text);

    /* a person's requests since the last review: more parts */
    iw_decide_take_requests(conf, g, &why);

    ps = ioa_alloc((g->nparts + 1) * sizeof(iw_part_state_t));
    iw_decide_parts(g, ps);

    for (p = 0, done = 0; p < g->nparts; p++) {
        kind[p] = NULL;
        done += ps[p].last && iw_streq(ps[p].last->status, "completed");

        if (rc != IW_OK || (ps[p].last == NULL && g->part_why[p])
            || (ps[p].last && ps[p].last->round != r))
        {
            continue;
        }

        rc = iw_decide_next(conf, g, p, ps, &to[p], &kind[p]);

        if (rc != IW_OK || kind[p] == NULL) {
            continue;
        }

        if (iw_streq(kind[p], "request")) {
            iterations++;
            ioa_buf_addf(&why, "%spart %zu goes to %s", why.len ? "; " : "",
                        p + 1, to[p].name);

        } else if (iw_streq(kind[p], "iterate")) {
            iterations++;
            ioa_buf_addf(&why, "%spart %zu came back partial from %s",
                        why.len ? "; " : "", p + 1, to[p].name);

        } else {
            reroutes++;
            ioa_buf_addf(&why, "%spart %zu %s with %s, so %s takes it",
                        why.len ? "; " : "", p + 1,
                        iw_streq(ps[p].last->status, "failed")
                        ? "failed" : "timed out",
                        ps[p].last->agent, to[p].name);
        }
    }

    last = r + 1 >= conf->max_rounds || r + 1 >= IW_MAX_ROUNDS;
    first = g->ntasks;
    by = "rule";

    for (p = 0; p < g->nparts; p++) {
        descs[p] = NULL;
    }

    /* with a model, the decision is the model's when it is usable */
    if (rc == IW_OK && !last && g->planner->review) {
        rc = iw_decide_by_model(conf, g, ps, kind, to, descs, &why,
                                &ask_agent, &ask_text);

        if (rc == 2) {
            by = "llm";
            rc = IW_OK;

        } else if (rc == 1) {
            by = "llm";
            rc = IW_OK;

            for (p = 0, reroutes = 0, iterations = 0; p < g->nparts; p++) {
                reroutes += iw_streq(kind[p], "reroute");
                iterations += kind[p] && !iw_streq(kind[p], "reroute");
            }
        }
    }

    /* by rule: a member that speaks the protocol and failed a part is
     * asked what went wrong before the part moves on */
    if (rc == IW_OK && ask_agent == NULL && iw_streq(by, "rule")) {
        iw_decide_rule_ask(g, ps, &ask_agent, &ask_text, &ask_parts);
    }

    /* nothing left to try and parts undone: the goal's person, if its
     * launch allows (input_timeout_s), is asked how to go on first */
    if (rc == IW_OK && ask_agent == NULL && reroutes + iterations == 0
        && !last)
    {
        iw_decide_person_ask(g, ps, done, &ask_agent, &ask_text, &ask_parts);
    }

    /* round r + 1: the new members and their tasks */
    for (p = 0; p < g->nparts; p++) {
        if (kind[p] == NULL) {
            continue;
        }

        if (rc == IW_OK && !last && ask_agent == NULL) {
            iw_decide_add_member(g, &to[p]);
            iw_decide_add_task(g, &to[p], p, kind[p], descs[p]);

        } else if (iw_streq(kind[p], "request") && g->part_why[p] == NULL) {
            g->part_why[p] = ioa_strdup("asked for after the last round "
                                       "--max-rounds allows");
        }

        free(to[p].name);
        free(to[p].type);
        free(to[p].desc);
        free(descs[p]);
    }

    iw_decide_parts_free(g, ps);

    if (rc == IW_OK && ask_agent) {
        rc = iw_decide_ask(conf, g, ask_agent, ask_text, ask_parts, by);
        free(ask_agent);
        free(ask_text);
        ioa_buf_free(&why);
        ioa_buf_free(&text);
        return rc;
    }

    if (rc != IW_OK) {
        ioa_buf_free(&why);
        return rc;
    }

    n = reroutes + iterations;

    if (n == 0 || last) {
        ended = n == 0 ? "settled" : "max_rounds";
        decision = "conclude";

        if (n == 0) {
            reason = ioa_sprintf("%s%s%zu of %zu part%s done%s",
                                why.len ? why.data : "", why.len ? "; " : "",
                                done, g->nparts, g->nparts == 1 ? "" : "s",
                                iw_streq(by, "llm") ? ""
                                : ", and nothing is left to try");

        } else {
            reason = ioa_sprintf("round %d is the last one --max-rounds "
                                "allows, so this stays undone: %s", r + 1,
                                why.data);
        }

        ioa_buf_addf(&text, "Decision after round %d: conclude, %s.", r + 1,
                    reason);

    } else {
        ended = NULL;
        decision = reroutes ? (iterations ? "iterate" : "reroute")
                            : "iterate";
        reason = ioa_buf_take(&why);
        ioa_buf_init(&why);

        ioa_buf_addf(&text, "Decision after round %d: %s, because %s. "
                    "Round %d:", r + 1, decision, reason, r + 2);

        for (k = first; k < g->ntasks; k++) {
            ioa_buf_addf(&text, "\n- %s (task %s): %s", g->tasks[k].agent,
                        g->tasks[k].task_id, g->tasks[k].desc);
        }
    }

    rec = iw_decide_record(decision, r, reason, ended, by, text.data, g,
                           first);
    field = ioa_sprintf("decision:%d", r);
    tasks = iw_store_tasks_json(g);

    parts = iw_store_parts_json(g);

    rc = iw_store_save(conf, g, field, rec, "tasks", tasks, "parts", parts,
                       "requests", "", "team", g->team ? g->team : "[]",
                       NULL);
    free(parts);
    free(g->requests);
    g->requests = NULL;
    g->requests_taken = 0;

    iw_info("goal %s: after round %d: %s (%s)", g->goal_id, r + 1, decision,
            reason);

    free(g->decision[r]);
    g->decision[r] = rec;
    free(field);
    free(tasks);
    free(reason);
    ioa_buf_free(&why);
    ioa_buf_free(&text);

    if (rc != IW_OK) {
        return rc;
    }

    /* saved: this worker took the decision (a successor finds it made) */
    iw_stats_addf(1, "decisions:%s:%s", decision, by);

    if (ended) {
        return iw_goal_to_concluding(conf, g, ended);
    }

    g->round = r + 1;

    return IW_OK;
}


/*
 * Part p is open to another round: a request not handed out yet, or the
 * latest round's task of it came back partial, or failed or timed out with
 * attempts left.
 */

static int
iw_decide_needs_work(const iw_conf_t *conf, iw_goal_t *g,
    iw_part_state_t *ps, size_t p)
{
    iw_task_t  *t;

    t = ps[p].last;

    if (t == NULL) {
        return g->part_why[p] == NULL;  /* a request not handed out yet */
    }

    if (t->round != g->round || t->sub) {
        return 0;
    }

    return iw_streq(t->status, "partial")
           || ((iw_streq(t->status, "failed")
                || iw_streq(t->status, "timed_out"))
               && ps[p].failures < conf->max_attempts);
}


/*
 * With a model the decision is the model's (iw_llm_review), checked before
 * it replaces the rule's proposal in kind, to: each task's part must exist
 * and be open to another round (iw_decide_needs_work), its agent must be
 * one the rule would also allow (iw_decide_candidates: online, eligible,
 * not tried on that part) or, for a part done in part, its own agent; a
 * part gets one task.  The model may also conclude.  When the answer is
 * unusable (no answer, or another round without one valid task) the rule
 * decides, and the log says so.  Returns 1 when the model decided, IW_OK
 * when the rule's proposal stands, or an error.
 */

static int
iw_decide_by_model(const iw_conf_t *conf, iw_goal_t *g, iw_part_state_t *ps,
    const char **kind, iw_agent_t *to, char **descs, ioa_buf_t *why,
    char **ask_agent, char **ask_text)
{
    int                rc;
    char              *state;
    size_t             p, i, k, matched, nvalid;
    iw_agents_t        cands, more, askable;
    iw_review_t        rv;
    iw_review_task_t  *t;
    const char        *nkind[IW_PLAN_MAX_CLAUSES];
    iw_agent_t         nto[IW_PLAN_MAX_CLAUSES];
    unsigned           open_parts;

    cands.v = NULL;
    cands.n = 0;
    open_parts = 0;

    /* who may take what: the union of every open part's candidates */
    for (p = 0; p < g->nparts; p++) {
        if (!iw_decide_needs_work(conf, g, ps, p)) {
            continue;
        }

        open_parts |= 1u << p;

        rc = iw_decide_candidates(conf, g, p, ps, &more, &matched);
        if (rc != IW_OK) {
            iw_agents_free(&cands);
            return rc;
        }

        for (i = 0; i < more.n; i++) {
            for (k = 0; k < cands.n
                        && !iw_streq(cands.v[k].name, more.v[i].name); k++)
            {
                /* void */
            }

            if (k < cands.n) {
                continue;
            }

            cands.v = ioa_realloc(cands.v, (cands.n + 1) * sizeof(iw_agent_t));
            iw_decide_copy_agent(&cands.v[cands.n++], &more.v[i]);
        }

        iw_agents_free(&more);
    }

    /* nothing can be handed out: concluding needs nobody's judgement */
    if (open_parts == 0) {
        iw_agents_free(&cands);
        return IW_OK;
    }

    iw_decide_askable(g, &askable);

    state = iw_decide_account(conf, g);
    rc = g->planner->review(conf, g, state, &cands, &askable, &rv);
    free(state);

    /* a question for a member the model may ask */
    if (rc == IW_OK && rv.answer && rv.ask_agent) {
        for (k = 0; k < askable.n
                    && !iw_streq(askable.v[k].name, rv.ask_agent); k++)
        {
            /* void */
        }

        if (k < askable.n) {
            *ask_agent = ioa_strdup(rv.ask_agent);
            *ask_text = ioa_strdup(rv.ask_text);
            yajl_tree_free(rv.answer);
            iw_agents_free(&cands);
            iw_agents_free(&askable);
            return 2;
        }

        iw_warn("goal %s: the model asked %s, who may not be asked; "
                "ignored", g->goal_id, rv.ask_agent);
    }

    iw_agents_free(&askable);

    if (rc != IW_OK || rv.answer == NULL) {
        iw_agents_free(&cands);

        if (rc == IW_OK) {
            iw_warn("goal %s: the model's review was unusable; the rule "
                    "decides", g->goal_id);
        }

        return rc;
    }

    nvalid = 0;

    for (p = 0; p < g->nparts; p++) {
        nkind[p] = NULL;
        memset(&nto[p], 0, sizeof(iw_agent_t));
    }

    for (i = 0; !rv.conclude && i < rv.ntasks; i++) {
        t = &rv.tasks[i];
        p = (size_t) t->part;

        if (t->part < 0 || p >= g->nparts || !(open_parts & (1u << p))
            || nkind[p] != NULL)
        {
            continue;
        }

        for (k = 0; k < cands.n && !iw_streq(cands.v[k].name, t->agent); k++)
        {
            /* void */
        }

        if (k < cands.n) {
            iw_decide_copy_agent(&nto[p], &cands.v[k]);

        } else if (ps[p].last && iw_streq(ps[p].last->status, "partial")
                   && iw_streq(ps[p].last->agent, t->agent))
        {
            nto[p].name = ioa_strdup(t->agent);
            nto[p].type = ioa_strdup("");
            nto[p].desc = ioa_strdup("");

        } else {
            iw_warn("goal %s: the model gave part %zu to %s, who may not "
                    "take it; ignored", g->goal_id, p + 1, t->agent);
            continue;
        }

        nkind[p] = ps[p].last == NULL ? "request"
                   : iw_streq(ps[p].last->status, "partial") ? "iterate"
                   : "reroute";
        descs[p] = t->desc ? ioa_strdup(t->desc) : NULL;
        nvalid++;
    }

    if (!rv.conclude && nvalid == 0) {
        iw_warn("goal %s: the model asked for another round without a task "
                "it may give; the rule decides", g->goal_id);
        yajl_tree_free(rv.answer);
        iw_agents_free(&cands);
        return IW_OK;
    }

    /* the model's decision replaces the rule's proposal */
    for (p = 0; p < g->nparts; p++) {
        if (kind[p]) {
            free(to[p].name);
            free(to[p].type);
            free(to[p].desc);
        }

        kind[p] = nkind[p];
        to[p] = nto[p];
    }

    ioa_buf_free(why);
    ioa_buf_init(why);
    ioa_buf_addf(why, "the model: %s", rv.reason ? rv.reason
                                                : "(no reason given)");

    yajl_tree_free(rv.answer);
    iw_agents_free(&cands);

    return 1;
}


/*
 * A person's requests (person.c) become parts of the goal, cut like the
 * goal itself; they go to agents in the loop that follows, like
 * re-routed parts.  A change to part N (the model read the message so) is
 * one part, its new text, in place of part N: N keeps its result so far
 * in the account, and the new part is handed out.  The decision's reason
 * quotes the messages.
 */

static void
iw_decide_take_requests(const iw_conf_t *conf, iw_goal_t *g,
    ioa_buf_t *why)
{
    size_t       i, c;
    yajl_val     reqs, q;
    iw_plan_t    plan;
    long long    part;
    const char  *sender, *content, *text;

    reqs = g->requests && *g->requests
           ? ioa_json_parse(g->requests, strlen(g->requests)) : NULL;

    for (i = 0; reqs && YAJL_IS_ARRAY(reqs) && i < reqs->u.array.len; i++) {
        q = reqs->u.array.values[i];
        sender = ioa_json_get_str(q, "sender");
        content = ioa_json_get_str(q, "content");
        text = ioa_json_get_str(q, "text");

        if (sender == NULL || content == NULL) {
            continue;
        }

        if (ioa_json_get_int(q, "part", &part) != 0) {
            part = 0;
        }

        if (part) {
            ioa_buf_addf(why, "%s%s asked to change part %lld: \"%s\"",
                        why->len ? "; " : "", sender, part, content);

        } else {
            ioa_buf_addf(why, "%s%s asked: \"%s\"", why->len ? "; " : "",
                        sender, content);
        }

        if (i < g->requests_taken) {
            continue;                   /* a review entered again */
        }

        text = text ? text : content;

        if (part) {
            memset(&plan, 0, sizeof(plan));
            plan.clauses = ioa_alloc(sizeof(char *));
            plan.clauses[0] = ioa_strdup(text);
            plan.nclauses = 1;

        } else {
            iw_plan_clauses(text, &plan, iw_form_is_task, (void *) conf);
        }

        for (c = 0; c < plan.nclauses; c++) {
            if (g->nparts == IW_PLAN_MAX_CLAUSES) {
                ioa_buf_adds(why, " (the goal has as many parts as it may; "
                            "the rest is not taken on)");
                break;
            }

            g->parts = ioa_realloc(g->parts, (g->nparts + 1) * sizeof(char *));
            g->part_why = ioa_realloc(g->part_why,
                                     (g->nparts + 1) * sizeof(char *));
            g->parts[g->nparts] = ioa_strdup(plan.clauses[c]);
            g->part_why[g->nparts] = NULL;
            g->nparts++;
        }

        iw_plan_free(&plan);
    }

    g->requests_taken = i;
    yajl_tree_free(reqs);
}


/*
 * What part p needs after its latest task: *kind "reroute" with *to the
 * next agent, "iterate" with *to the same agent, or NULL for nothing
 * (done, or no one left to try: the account says so).
 */

static int
iw_decide_next(const iw_conf_t *conf, iw_goal_t *g, size_t p,
    iw_part_state_t *ps, iw_agent_t *to, const char **kind)
{
    int          rc;
    size_t       matched;
    iw_task_t   *last;
    iw_agents_t  ranked;

    last = ps[p].last;
    memset(to, 0, sizeof(*to));

    if (last == NULL) {
        /* a person's request, cut into parts at this review */
        *kind = "request";
        goto pick;
    }

    if (iw_streq(last->status, "partial")) {
        to->name = ioa_strdup(last->agent);
        to->type = ioa_strdup("");
        to->desc = ioa_strdup("");
        *kind = "iterate";
        return IW_OK;
    }

    if (!iw_streq(last->status, "failed")
        && !iw_streq(last->status, "timed_out"))
    {
        return IW_OK;
    }

    if (ps[p].failures >= conf->max_attempts) {
        return IW_OK;
    }

    *kind = "reroute";

pick:

    rc = iw_decide_candidates(conf, g, p, ps, &ranked, &matched);
    if (rc != IW_OK) {
        return rc;
    }

    if (ranked.n) {
        iw_decide_copy_agent(to, &ranked.v[0]);
    }

    iw_agents_free(&ranked);

    if (to->name == NULL) {
        if (last == NULL && g->part_why[p] == NULL) {
            g->part_why[p] = ioa_strdup(matched
                                       ? "no online agent matches it well "
                                         "enough"
                                       : "no online agent's description "
                                         "matches it");
        }

        *kind = NULL;
    }

    return IW_OK;
}


/*
 * The agents that may take part p over, best first: online, eligible
 * (iw_plan_eligible), not tried on it yet, and, when the team was given by
 * name (team_member_names, a continued room), its members only.  *matched:
 * whether the registry had any agent for it at all.
 */

static int
iw_decide_candidates(const iw_conf_t *conf, iw_goal_t *g, size_t p,
    iw_part_state_t *ps, iw_agents_t *out, size_t *matched)
{
    int          rc, given;
    char        *query, *mark, *salt;
    size_t       k;
    yajl_val     v;
    iw_agents_t  ranked;

    out->v = NULL;
    out->n = 0;

    v = ioa_json_get(g->req, "team_member_names");
    given = (v && YAJL_IS_ARRAY(v) && v->u.array.len > 0)
            || (g->cont_comm_id && *g->cont_comm_id);

    /* a re-route gives a newcomer its turn too, by its own salt
     * (iw_reg_rank); not within a given team */
    query = iw_plan_query(g->parts[p]);
    salt = given ? NULL : ioa_sprintf("%s:%zu:%d", g->goal_id, p, g->round);
    rc = iw_reg_retrieve(conf, query, given ? 50 : IW_DECIDE_CANDIDATES, 1,
                         salt, &ranked);
    free(salt);
    free(query);

    if (rc != IW_OK) {
        return rc;
    }

    *matched = ranked.n;
    out->v = ioa_alloc((ranked.n + 1) * sizeof(iw_agent_t));

    for (k = 0; k < ranked.n; k++) {
        if (!iw_plan_eligible(&ranked, k, conf->min_score)) {
            break;
        }

        mark = ioa_sprintf(",%s,", ranked.v[k].name);

        if (strstr(ps[p].tried.data, mark) == NULL
            && (!given || iw_decide_in_team(g, ranked.v[k].name)))
        {
            iw_decide_copy_agent(&out->v[out->n++], &ranked.v[k]);
        }

        free(mark);
    }

    iw_agents_free(&ranked);

    return IW_OK;
}


static void
iw_decide_copy_agent(iw_agent_t *to, const iw_agent_t *a)
{
    *to = *a;
    to->name = ioa_strdup(a->name);
    to->type = ioa_strdup(a->type ? a->type : "");
    to->desc = ioa_strdup(a->desc ? a->desc : "");
}


static int
iw_decide_in_team(iw_goal_t *g, const char *name)
{
    int          in;
    size_t       i;
    iw_agents_t  team;

    if (iw_goal_members(g, &team) != IW_OK) {
        return 0;
    }

    for (i = 0, in = 0; i < team.n; i++) {
        in |= iw_streq(team.v[i].name, name);
    }

    iw_agents_free(&team);

    return in;
}


/* the part as a task of the next round, a task of its own (a sub-team's
 * parts are joined into one sub-goal, which counts them itself); an
 * iteration carries the result so far */

static void
iw_decide_add_task(iw_goal_t *g, const iw_agent_t *a, size_t p,
    const char *kind, const char *text)
{
    int         sub;
    char       *desc, *joined, hex[33];
    size_t      i, prev;
    iw_task_t  *t;

    desc = text ? ioa_strdup(text) : NULL;

    for (i = 0, prev = g->ntasks; i < g->ntasks; i++) {
        if (g->tasks[i].parts & (1u << p) && g->tasks[i].round == g->round) {
            prev = i;
        }
    }

    /* a sub-team's part done in part goes to a new sub-team, whose
     * planner cuts its text like a goal's: the part alone */
    sub = iw_streq(kind, "iterate") && prev < g->ntasks && g->tasks[prev].sub;

    if (desc == NULL && iw_streq(kind, "iterate") && !sub) {
        if (prev < g->ntasks) {
            desc = ioa_sprintf("Continue: %s\nWhat you reported so far "
                              "(partial): %s", g->parts[p],
                              g->tasks[prev].result ? g->tasks[prev].result
                                                    : "");
        }
    }

    if (desc == NULL) {
        desc = ioa_strdup(g->parts[p]);
    }

    for (i = 0; i < g->ntasks; i++) {
        t = &g->tasks[i];

        if (t->round == g->round + 1 && strcmp(t->agent, a->name) == 0
            && t->sub && sub)
        {
            joined = ioa_sprintf(sub ? "%s %s." : "%s; %s", t->desc, desc);
            free(t->desc);
            free(desc);
            t->desc = joined;
            t->parts |= 1u << p;
            return;
        }
    }

    g->tasks = ioa_realloc(g->tasks, (g->ntasks + 1) * sizeof(iw_task_t));
    t = &g->tasks[g->ntasks++];
    memset(t, 0, sizeof(*t));
    ioa_uuid4_hex(hex);
    t->agent = ioa_strdup(a->name);
    t->task_id = ioa_strdup(hex);
    t->status = ioa_strdup("pending");
    t->round = g->round + 1;
    t->parts = 1u << p;
    t->sub = sub;
    t->desc = sub ? ioa_sprintf("%s.", desc) : desc;

    if (sub) {
        free(desc);
    }
}


/* a re-route's agent joins the team (the room follows when the decision
 * is posted, iw_decide_post); the coordinator stays last, as IoA orders
 * agent_names + [sender] */

static void
iw_decide_add_member(iw_goal_t *g, const iw_agent_t *a)
{
    size_t             i;
    ioa_buf_t          b;
    iw_agents_t        team;
    const iw_agent_t  *m;

    if (iw_goal_members(g, &team) != IW_OK || team.n == 0) {
        iw_agents_free(&team);
        return;
    }

    for (i = 0; i < team.n; i++) {
        if (strcmp(team.v[i].name, a->name) == 0) {
            iw_agents_free(&team);
            return;
        }
    }

    ioa_buf_init(&b);
    ioa_buf_addc(&b, '[');

    for (i = 0; i <= team.n; i++) {
        /* the members but the last, the newcomer, the coordinator */
        m = (i < team.n - 1) ? &team.v[i] : (i == team.n - 1) ? a
                                                              : &team.v[i - 1];

        ioa_buf_adds(&b, i ? ",{\"name\":" : "{\"name\":");
        ioa_json_str(&b, m->name);
        ioa_buf_adds(&b, ",\"type\":");
        ioa_json_str(&b, m->type ? m->type : "");
        ioa_buf_adds(&b, ",\"desc\":");
        ioa_json_str(&b, m->desc ? m->desc : "");
        ioa_buf_addf(&b, ",\"protocol\":%s}", m->protocol ? "true" : "false");
    }

    ioa_buf_addc(&b, ']');
    free(g->team);
    g->team = ioa_buf_take(&b);
    iw_agents_free(&team);
}


static char *
iw_decide_record(const char *decision, int round, const char *reason,
    const char *ended, const char *by, const char *text, iw_goal_t *g,
    size_t from)
{
    size_t    k, p;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_adds(&b, "{\"decision\":");
    ioa_json_str(&b, decision);
    ioa_buf_addf(&b, ",\"round\":%d,\"reason\":", round + 1);
    ioa_json_str(&b, reason);
    ioa_buf_adds(&b, ",\"bound\":");
    ioa_json_str_or_null(&b, ended);
    ioa_buf_adds(&b, ",\"by\":");
    ioa_json_str(&b, by);
    ioa_buf_adds(&b, ",\"tasks\":[");

    for (k = from; k < g->ntasks; k++) {
        ioa_buf_adds(&b, k > from ? ",{\"agent\":" : "{\"agent\":");
        ioa_json_str(&b, g->tasks[k].agent);
        ioa_buf_adds(&b, ",\"task_id\":");
        ioa_json_str(&b, g->tasks[k].task_id);
        ioa_buf_adds(&b, ",\"parts\":[");

        for (p = 0; p < g->nparts; p++) {
            if (g->tasks[k].parts & (1u << p)) {
                ioa_buf_addf(&b, "%s%zu",
                            b.data[b.len - 1] == '[' ? "" : ",", p + 1);
            }
        }

        ioa_buf_adds(&b, "]}");
    }

    ioa_buf_adds(&b, "],\"text\":");
    ioa_json_str(&b, text);
    ioa_buf_addc(&b, '}');

    return ioa_buf_take(&b);
}


/* the parts done (their latest task completed), of how many */

size_t
iw_decide_done(iw_goal_t *g)
{
    size_t            p, done;
    iw_part_state_t  *ps;

    ps = ioa_alloc((g->nparts + 1) * sizeof(iw_part_state_t));
    iw_decide_parts(g, ps);

    for (p = 0, done = 0; p < g->nparts; p++) {
        done += ps[p].last && iw_streq(ps[p].last->status, "completed");
    }

    iw_decide_parts_free(g, ps);

    return done;
}


/* Every settled task of round `round` (-1: of every round) goes into its
 * agent's record; a task of a nested team is not one agent's doing. */

int
iw_decide_record_tasks(const iw_conf_t *conf, iw_goal_t *g, int round)
{
    size_t      i;
    iw_task_t  *t;

    for (i = 0; i < g->ntasks; i++) {
        t = &g->tasks[i];

        if (t->sub || (round >= 0 && t->round != round)) {
            continue;
        }

        if (iw_reg_record(conf, t->agent, t->task_id, t->status,
                          t->latency_ms)
            != IW_OK)
        {
            return IW_ERROR;
        }
    }

    return IW_OK;
}


/* ---- questions of the review ---- */

/* the questions asked in the current round's review so far, and the parts
 * they were about */

static int
iw_decide_asks(iw_goal_t *g, unsigned *parts)
{
    int        k;
    yajl_val   a;
    long long  n;

    *parts = 0;
    k = 0;
    a = g->ask ? ioa_json_parse(g->ask, strlen(g->ask)) : NULL;

    if (ioa_json_get_int(a, "round", &n) == 0 && n == g->round) {
        k = ioa_json_get_int(a, "k", &n) == 0 ? (int) n + 1 : 0;
        *parts = ioa_json_get_int(a, "parts", &n) == 0 ? (unsigned) n : 0;
    }

    yajl_tree_free(a);

    return k;
}


/* the members that may be asked: they speak the protocol, and the round
 * has questions left */

static void
iw_decide_askable(iw_goal_t *g, iw_agents_t *out)
{
    size_t       i;
    unsigned     parts;
    iw_agents_t  team;

    out->v = NULL;
    out->n = 0;

    if (iw_decide_asks(g, &parts) >= IW_DECIDE_ASKS
        || iw_goal_members(g, &team) != IW_OK)
    {
        return;
    }

    out->v = ioa_alloc((team.n + 1) * sizeof(iw_agent_t));

    /* the coordinator is last, and asks nobody itself */
    for (i = 0; i + 1 < team.n; i++) {
        if (team.v[i].protocol) {
            iw_decide_copy_agent(&out->v[out->n++], &team.v[i]);
        }
    }

    iw_agents_free(&team);
}


static void
iw_decide_rule_ask(iw_goal_t *g, iw_part_state_t *ps, char **agent,
    char **text, unsigned *parts)
{
    size_t       p, k;
    unsigned     asked;
    iw_task_t   *t;
    iw_agents_t  askable;

    iw_decide_askable(g, &askable);
    iw_decide_asks(g, &asked);

    for (p = 0; p < g->nparts && *agent == NULL; p++) {
        t = ps[p].last;

        if (t == NULL || t->round != g->round || !iw_streq(t->status, "failed")
            || (asked & (1u << p)))
        {
            continue;
        }

        for (k = 0; k < askable.n && !iw_streq(askable.v[k].name, t->agent);
             k++)
        {
            /* void */
        }

        if (k < askable.n) {
            *agent = ioa_strdup(t->agent);
            *text = ioa_sprintf("%s, part %zu (%s) failed with you%s%s%s. "
                               "What went wrong, and can it be done?",
                               t->agent, p + 1, g->parts[p],
                               t->result && *t->result ? ": \"" : "",
                               t->result && *t->result ? t->result : "",
                               t->result && *t->result ? "\"" : "");
            *parts = asked | 1u << p;
        }
    }

    iw_agents_free(&askable);
}


/*
 * A question of the review: saved (who, what, until when) before it is
 * posted as step IW_STEP_ASK + k of the round, so a worker that takes over
 * posts it once; the review goes on when the member answers (absorbed by
 * conversation.c, iw_decide_answered) or at --turn-timeout.
 */

static int
iw_decide_ask(const iw_conf_t *conf, iw_goal_t *g, const char *agent,
    const char *text, unsigned parts, const char *by)
{
    int        rc, k;
    unsigned   asked, person;
    ioa_buf_t  b;
    long long  now;

    if (iw_redis_time_ms(&now) != IW_OK) {
        return IW_ERROR;
    }

    k = iw_decide_asks(g, &asked);
    person = iw_decide_person_parts(g)
             | (iw_streq(agent, g->person) ? parts : 0);

    ioa_buf_init(&b);
    ioa_buf_addf(&b, "{\"round\":%d,\"k\":%d,\"agent\":", g->round, k);
    ioa_json_str(&b, agent);
    ioa_buf_adds(&b, ",\"text\":");
    ioa_json_str(&b, text);
    ioa_buf_addf(&b, ",\"parts\":%u,\"person_parts\":%u,\"deadline\":%lld,"
                "\"answered\":false,\"by\":", parts | asked, person,
                now + (iw_streq(agent, g->person) ? g->input_timeout_ms
                                                   : conf->turn_timeout_ms));
    ioa_json_str(&b, by);
    ioa_buf_addc(&b, '}');

    free(g->ask);
    g->ask = ioa_buf_take(&b);

    rc = iw_store_save(conf, g, "ask", g->ask, NULL);
    if (rc != IW_OK) {
        return rc;
    }

    iw_info("goal %s: after round %d: ask %s (%s)", g->goal_id, g->round + 1,
            agent, by);
    iw_stats_addf(1, "decisions:ask:%s", by);

    return iw_decide_ask_pending(conf, g);
}


/*
 * IW_GOAL_NEXT when the review may decide: no question of this round
 * pending.  Otherwise the question is posted (once), or waited for until
 * its deadline, and IW_OK (or an error) comes back.
 */

static int
iw_decide_ask_pending(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, k, step;
    char        *extra;
    ioa_buf_t    b, next;
    yajl_val     a, v;
    long long    n, now, deadline;
    const char  *agent, *text;

    a = g->ask ? ioa_json_parse(g->ask, strlen(g->ask)) : NULL;

    if (a == NULL || ioa_json_get_int(a, "round", &n) != 0 || n != g->round) {
        yajl_tree_free(a);
        return IW_GOAL_NEXT;
    }

    k = ioa_json_get_int(a, "k", &n) == 0 ? (int) n : 0;
    deadline = ioa_json_get_int(a, "deadline", &n) == 0 ? n : 0;
    agent = ioa_json_get_str(a, "agent");
    text = ioa_json_get_str(a, "text");
    step = g->round * IW_ROUND_STEPS + IW_STEP_ASK + k;
    rc = IW_OK;

    if ((v = ioa_json_get(a, "answered")) && !YAJL_IS_FALSE(v)) {
        /* answered (or timed out): the person is not waited for now */
        if (iw_streq(agent, g->person)
            && iw_decide_input(conf, g, 0, NULL, g->round, k) != IW_OK)
        {
            rc = IW_ERROR;
        }

        yajl_tree_free(a);
        return rc == IW_OK ? IW_GOAL_NEXT : rc;
    }

    if (g->step < step) {
        ioa_buf_init(&b);
        ioa_buf_adds(&b, "\"ioa_decision\":{\"decision\":\"ask\",");
        ioa_buf_addf(&b, "\"round\":%d,\"reason\":", g->round + 1);
        ioa_json_str(&b, text ? text : "");
        ioa_buf_adds(&b, ",\"agent\":");
        ioa_json_str(&b, agent ? agent : "");
        ioa_buf_adds(&b, ",\"by\":");
        ioa_json_str(&b, ioa_json_get_str(a, "by") ? ioa_json_get_str(a, "by")
                                                  : "rule");
        ioa_buf_adds(&b, ",\"tasks\":[]}");
        extra = ioa_buf_take(&b);

        ioa_buf_init(&next);
        ioa_buf_addc(&next, '[');
        ioa_json_str(&next, agent ? agent : "");
        ioa_buf_addc(&next, ']');

        rc = iw_goal_post(conf, g, step, IW_TYPE_DISCUSSION,
                          text ? text : "", next.data, NULL, extra);
        free(extra);
        ioa_buf_free(&next);

        if (rc == IW_OK && iw_streq(agent, g->person)) {
            rc = iw_decide_input(conf, g, 1, text, g->round, k);
        }

        yajl_tree_free(a);

        return rc;
    }

    if (iw_streq(agent, g->person) && !g->input_written
        && iw_decide_input(conf, g, 1, text, g->round, k) != IW_OK)
    {
        /* posted by a worker that stopped before it said so */
        yajl_tree_free(a);
        return IW_ERROR;
    }

    if (iw_redis_time_ms(&now) != IW_OK) {
        yajl_tree_free(a);
        return IW_ERROR;
    }

    if (now < deadline) {
        yajl_tree_free(a);
        return iw_goal_wait(g, deadline, now);
    }

    iw_info("goal %s: %s did not answer within %lld s; deciding without it",
            g->goal_id, agent ? agent : "?",
            (iw_streq(agent, g->person) ? g->input_timeout_ms
                                        : conf->turn_timeout_ms) / 1000);
    iw_decide_mark_answered(g, "\"timeout\"");

    rc = iw_store_save(conf, g, "ask", g->ask, NULL);

    if (rc == IW_OK && iw_streq(agent, g->person)) {
        rc = iw_decide_input(conf, g, 0, NULL, g->round, k);
    }

    yajl_tree_free(a);

    return rc == IW_OK ? IW_GOAL_NEXT : IW_ERROR;
}


/*
 * The review would conclude with parts undone, and nobody is left to try
 * them: a goal launched with "input_timeout_s" asks its person how to go
 * on, about each part once ("person_parts" of the ask, carried from ask
 * to ask), and waits that long.  The answer is the person's
 * message like any other (person.c): a request, cut into parts for the
 * next round, or a stop.  Not at the last round --max-rounds allows, when
 * nothing could come of the answer.
 */

static void
iw_decide_person_ask(iw_goal_t *g, iw_part_state_t *ps, size_t done,
    char **agent, char **text, unsigned *parts)
{
    int          k;
    size_t       p;
    unsigned     asked, undone, before;
    yajl_val     a;
    ioa_buf_t    b;
    const char  *last;

    if (g->person == NULL || *g->person == '\0' || g->input_timeout_ms <= 0
        || done >= g->nparts)
    {
        return;
    }

    k = iw_decide_asks(g, &asked);

    if (k >= IW_DECIDE_ASKS) {
        return;
    }

    /* once a round: the round's latest question was not the person's */
    a = g->ask ? ioa_json_parse(g->ask, strlen(g->ask)) : NULL;
    last = k > 0 ? ioa_json_get_str(a, "agent") : NULL;

    if (last && iw_streq(last, g->person)) {
        yajl_tree_free(a);
        return;
    }

    yajl_tree_free(a);

    /* each part once: the person's answer about it was taken */
    before = iw_decide_person_parts(g);
    undone = 0;

    for (p = 0; p < g->nparts; p++) {
        if (!(ps[p].last && iw_streq(ps[p].last->status, "completed"))
            && !(before & (1u << p)))
        {
            undone |= 1u << p;
        }
    }

    if (undone == 0) {
        return;
    }

    ioa_buf_init(&b);
    ioa_buf_addf(&b, "%s, %zu of %zu part%s done; nobody is left to try "
                "the others:", g->person, done, g->nparts,
                g->nparts == 1 ? "" : "s");

    for (p = 0; p < g->nparts; p++) {
        if (!(undone & (1u << p))) {
            continue;
        }

        if (ps[p].last) {
            ioa_buf_addf(&b, "\n- part %zu (%s): %s with %s", p + 1,
                        g->parts[p], ps[p].last->status, ps[p].last->agent);

        } else {
            ioa_buf_addf(&b, "\n- part %zu (%s): %s", p + 1, g->parts[p],
                        g->part_why[p] ? g->part_why[p] : "no agent");
        }
    }

    ioa_buf_addf(&b, "\nHow should we go on?  Your answer becomes work for "
                "the team's next round; \"stop\" concludes with what is "
                "done.  I wait %lld s.", g->input_timeout_ms / 1000);

    *agent = ioa_strdup(g->person);
    *text = ioa_buf_take(&b);
    *parts = asked | undone;
}


/* the parts the person has been asked about, in any round */

static unsigned
iw_decide_person_parts(iw_goal_t *g)
{
    yajl_val   a;
    long long  n;
    unsigned   parts;

    a = g->ask ? ioa_json_parse(g->ask, strlen(g->ask)) : NULL;
    parts = ioa_json_get_int(a, "person_parts", &n) == 0 ? (unsigned) n : 0;
    yajl_tree_free(a);

    return parts;
}


/*
 * The goal waits for its person, or no longer: meta "awaiting_input" (the
 * question; GET /goals/{id}) and an "input" event in the goal's feed, the
 * way the A2A facade tells a task input-required.  Both are idempotent (a
 * field written again, an event appended once per change), so a worker
 * that takes over writes them again without harm.
 */

static int
iw_decide_input(const iw_conf_t *conf, iw_goal_t *g, int awaiting,
    const char *text, long long round, long long k)
{
    char        *key;
    int          rc;
    redisReply  *r;

    if (awaiting) {
        r = iw_redis_cmd("HSET %s{goal:%s}:meta awaiting_input %s",
                         conf->prefix, g->goal_id, text ? text : "");

    } else {
        r = iw_redis_cmd("HDEL %s{goal:%s}:meta awaiting_input",
                         conf->prefix, g->goal_id);
    }

    if (r == NULL) {
        return IW_ERROR;
    }

    rc = r->type == REDIS_REPLY_ERROR ? IW_ERROR : IW_OK;
    freeReplyObject(r);

    if (rc != IW_OK) {
        return rc;
    }

    key = ioa_sprintf("%lld.%lld:%d", round, k, awaiting);
    rc = iw_event_input(conf, g->goal_id, awaiting, text, key);
    free(key);

    if (rc == IW_OK) {
        g->input_written = awaiting;
    }

    return rc;
}


static void
iw_decide_mark_answered(iw_goal_t *g, const char *how)
{
    char  *p, *s;

    p = g->ask ? strstr(g->ask, "\"answered\":false") : NULL;

    if (p == NULL) {
        return;
    }

    s = ioa_sprintf("%.*s\"answered\":%s%s", (int) (p - g->ask), g->ask, how,
                   p + sizeof("\"answered\":false") - 1);
    free(g->ask);
    g->ask = s;
}


/* a member's DISCUSSION: the answer to the review's open question? 1 when
 * it is (the caller saves "ask") */

int
iw_decide_answered(iw_goal_t *g, const char *sender)
{
    int          yes;
    yajl_val     a, v;
    long long    n, k;
    const char  *agent;

    a = g->ask ? ioa_json_parse(g->ask, strlen(g->ask)) : NULL;
    agent = ioa_json_get_str(a, "agent");
    v = ioa_json_get(a, "answered");
    k = ioa_json_get_int(a, "k", &n) == 0 ? n : 0;

    yes = a && v && YAJL_IS_FALSE(v) && iw_streq(agent, sender)
          && ioa_json_get_int(a, "round", &n) == 0 && n == g->round
          && g->step >= g->round * IW_ROUND_STEPS + IW_STEP_ASK + (int) k;

    yajl_tree_free(a);

    if (yes) {
        iw_decide_mark_answered(g, "true");
        iw_info("goal %s: %s answered", g->goal_id, sender);
    }

    return yes;
}


/* the bound a saved conclude decision names */

const char *
iw_decide_ended(iw_goal_t *g, int round)
{
    yajl_val     d;
    const char  *ended;

    d = g->decision[round] ? ioa_json_parse(g->decision[round],
                                           strlen(g->decision[round]))
                           : NULL;
    ended = iw_streq(ioa_json_get_str(d, "bound"), "max_rounds")
            ? "max_rounds" : "settled";
    yajl_tree_free(d);

    return ended;
}


/*
 * Posts the decision of the round before the current one: the new members
 * join the room first (teamup of the same room: the registry's room sets,
 * the members set, the hub's event that links their connections), then the
 * DISCUSSION with "ioa_decision".  Joining again after a takeover changes
 * nothing.
 */

int
iw_decide_post(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, r, step;
    char       **names, *refused, *extra, *error;
    size_t       i, n;
    ioa_buf_t    next;
    yajl_val     d;
    iw_agents_t  team;
    const char  *text;

    r = g->round - 1;
    step = r * IW_ROUND_STEPS + IW_STEP_DECIDE;

    if (iw_goal_members(g, &team) != IW_OK) {
        return iw_goal_fail(conf, g, "the goal's team is not valid JSON");
    }

    names = ioa_alloc((team.n + 1) * sizeof(char *));

    for (i = 0, n = 0; i < team.n; i++) {
        names[n++] = team.v[i].name;
    }

    rc = iw_reg_join(conf, g->comm_id, g->team_name, names, n, &refused);
    free(names);
    iw_agents_free(&team);

    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    if (rc == 1) {
        error = ioa_sprintf("a re-routed agent could not join the room: %s",
                           refused);
        free(refused);
        rc = iw_goal_fail(conf, g, error);
        free(error);
        return rc;
    }

    d = g->decision[r] ? ioa_json_parse(g->decision[r],
                                       strlen(g->decision[r]))
                       : NULL;
    text = ioa_json_get_str(d, "text");

    /* the coordinator keeps the floor: the assignment follows at once */
    ioa_buf_init(&next);
    ioa_buf_addc(&next, '[');
    ioa_json_str(&next, conf->name);
    ioa_buf_addc(&next, ']');

    extra = ioa_sprintf("\"ioa_decision\":%s",
                       g->decision[r] ? g->decision[r] : "null");

    rc = iw_goal_post(conf, g, step, IW_TYPE_DISCUSSION,
                      text ? text : "Decision: another round.", next.data,
                      NULL, extra);

    free(extra);
    ioa_buf_free(&next);
    yajl_tree_free(d);

    return rc;
}


/* "ioa_decision" of the CONCLUDE_GROUP_DISCUSSION: the review's own, or
 * one naming the bound that ended the goal early */

char *
iw_decide_conclude_extra(iw_goal_t *g, const char *text)
{
    ioa_buf_t b;

    if (g->decision[g->round] && (iw_streq(g->ended, "settled")
                                  || iw_streq(g->ended, "max_rounds")))
    {
        return ioa_sprintf("\"ioa_decision\":%s", g->decision[g->round]);
    }

    ioa_buf_init(&b);
    ioa_buf_adds(&b, "\"ioa_decision\":{\"decision\":\"conclude\",\"round\":");
    ioa_buf_addf(&b, "%d,\"reason\":", g->round + 1);
    ioa_json_str(&b, text);
    ioa_buf_adds(&b, ",\"bound\":");
    ioa_json_str(&b, g->ended);
    ioa_buf_adds(&b, ",\"tasks\":[]}");

    return ioa_buf_take(&b);
}


/* the text of the CONCLUDE_GROUP_DISCUSSION */

char *
iw_decide_conclude_text(iw_goal_t *g)
{
    char        *text;
    yajl_val     d;
    const char  *s;

    if (g->decision[g->round] && (iw_streq(g->ended, "settled")
                                  || iw_streq(g->ended, "max_rounds")))
    {
        d = ioa_json_parse(g->decision[g->round],
                          strlen(g->decision[g->round]));
        s = ioa_json_get_str(d, "text");
        text = s ? ioa_strdup(s) : NULL;
        yajl_tree_free(d);

        if (text) {
            return text;
        }
    }

    if (iw_streq(g->ended, "person")) {
        return ioa_sprintf("Asked to stop (%s); concluding with what we "
                          "have.", g->stopped_by ? g->stopped_by : "");
    }

    if (iw_streq(g->ended, "proposal")) {
        return ioa_sprintf("Concluding on a member's proposal (%s).",
                          g->stopped_by ? g->stopped_by : "");
    }

    return iw_plan_conclude(g->ended, g->max_turns);
}


/*
 * The built-in conclusion, an honest account: every part of the goal with
 * its result, or why it has none.  Only completed parts count as done.
 */

char *
iw_decide_account(const iw_conf_t *conf, iw_goal_t *g)
{
    size_t            p, done, first;
    ioa_buf_t         b;
    iw_task_t        *t;
    iw_part_state_t  *ps;

    ps = ioa_alloc((g->nparts + 1) * sizeof(iw_part_state_t));
    iw_decide_parts(g, ps);

    for (p = 0, done = 0; p < g->nparts; p++) {
        done += ps[p].last && iw_streq(ps[p].last->status, "completed");
    }

    ioa_buf_init(&b);

    if (iw_streq(g->ended, "cancelled")) {
        ioa_buf_adds(&b, "The goal was cancelled before it was achieved.\n");

    } else if (iw_streq(g->ended, "max_turns")) {
        ioa_buf_addf(&b, "Concluded at the turn limit (max_turns %lld).\n",
                    g->max_turns);

    } else if (iw_streq(g->ended, "token_budget")) {
        ioa_buf_adds(&b, "Concluded at the token budget.\n");

    } else if (iw_streq(g->ended, "deadline")) {
        ioa_buf_addf(&b, "Concluded at the goal's deadline (%lld s).\n",
                    g->deadline_ms / 1000);

    } else if (iw_streq(g->ended, "max_rounds")) {
        ioa_buf_addf(&b, "Concluded at the round limit (%lld).\n",
                    conf->max_rounds);

    } else if (iw_streq(g->ended, "person")) {
        ioa_buf_addf(&b, "Concluded when asked to (%s).\n",
                    g->stopped_by ? g->stopped_by : "a person");

    } else if (iw_streq(g->ended, "proposal")) {
        ioa_buf_addf(&b, "Concluded on a member's proposal (%s).\n",
                    g->stopped_by ? g->stopped_by : "");
    }

    ioa_buf_addf(&b, "Goal: %s\n%zu of %zu part%s done.", g->goal, done,
                g->nparts, g->nparts == 1 ? "" : "s");

    for (p = 0; p < g->nparts; p++) {
        t = ps[p].last;
        ioa_buf_addf(&b, "\n%zu. %s\n   ", p + 1, g->parts[p]);

        /* one task for several parts: its result is told once */
        for (first = 0; t && !(t->parts & (1u << first)); first++) {
            /* void */
        }

        if (t && first < p) {
            ioa_buf_addf(&b, "With part %zu, in the same task.", first + 1);
            continue;
        }

        if (t == NULL) {
            ioa_buf_addf(&b, "Not done: %s.", g->part_why[p]
                        ? g->part_why[p] : "no agent was given it");

        } else if (iw_streq(t->status, "completed")) {
            ioa_buf_addf(&b, "%s: %s", t->agent, t->result ? t->result : "");

        } else if (iw_streq(t->status, "partial")) {
            ioa_buf_addf(&b, "Partly done by %s: %s", t->agent,
                        t->result && *t->result ? t->result : "no result");

        } else if (iw_streq(t->status, "failed")
                   || iw_streq(t->status, "timed_out"))
        {
            ioa_buf_addf(&b, "Not done: %s %s", t->agent,
                        iw_streq(t->status, "failed") ? "failed"
                                                      : "timed out");

            if (t->result && *t->result) {
                ioa_buf_addf(&b, " (%s)", t->result);

            } else if (iw_streq(t->status, "timed_out")) {
                ioa_buf_addf(&b, " (no result within %lld s)",
                            conf->task_timeout_ms / 1000);
            }

            ioa_buf_addf(&b, "; %d agent%s tried, %s.", ps[p].failures,
                        ps[p].failures == 1 ? "" : "s",
                        ps[p].failures >= conf->max_attempts
                        ? "the attempts allowed are used up"
                        : !iw_streq(g->ended, "settled")
                        ? "and the goal ended before another could"
                        : "no other online agent matches it well enough");

        } else {
            ioa_buf_addf(&b, "Not done: %s's task was %s.", t->agent,
                        iw_streq(t->status, "cancelled") ? "cancelled"
                        : iw_streq(t->status, "in_progress")
                        ? "still in progress" : "still pending");
        }
    }

    iw_decide_parts_free(g, ps);

    return ioa_buf_take(&b);
}
