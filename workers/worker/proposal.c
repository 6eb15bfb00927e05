/*
 * ioa-worker: proposals from the members that speak the protocol.
 *
 * In IoA the agents themselves move the conversation on: a member holding
 * the floor may assign tasks or propose to conclude.  Here the members that
 * registered with speaks_protocol hold the floor during the plan's
 * discussion (conversation.c), and instead of (or besides) a DISCUSSION they
 * may post:
 *
 *   SYNC_TASK_ASSIGNMENT (5) or ASYNC_TASK_ASSIGNMENT (6) with
 *       "tasks": {"<member>": {"task_desc": "..."}}: more work, for members
 *       of the team;
 *   CONCLUDE_GROUP_DISCUSSION (10): conclude now; its content is the
 *       proposer's answer;
 *   any of these or a DISCUSSION (4) with a non-empty "updated_plan":
 *       IoA's collaborative planning (its "Dynamic Collaborative
 *       Planner": objectives, milestones, dependencies, as markdown), a
 *       new plan for the team.
 *
 * conversation.c keeps each proposal (fsm "proposals", with its Stream id,
 * so a re-read after a takeover adds nothing twice).  When the turns are
 * over the coordinator answers all of them in one envelope, step
 * IW_STEP_PROPOSALS: a DISCUSSION to the proposers with "ioa_proposals":
 * [{"sender","accepted","reason"}] and, when one was refused, "ioa_error":
 * {"code":"invalid_proposal","message"}.  A valid task proposal adds its
 * tasks to the first round as parts of the goal; a valid conclude ends the
 * goal with the proposer's answer (ended "proposal").  The server decides
 * what is valid:
 *
 *   - every task names a member of the team other than the coordinator,
 *     with a task_desc of 1 to IW_PROPOSAL_DESC_MAX bytes, and there is at
 *     least one task;
 *   - the goal keeps at most IW_PLAN_MAX_CLAUSES parts;
 *   - a proposal to conclude is followed unless a task proposal was
 *     accepted before it; after a followed conclude, task proposals are
 *     refused;
 *   - an updated_plan is taken only from a goal launched with
 *     is_collaborative_planning_enabled, at most IW_PROPOSAL_PLAN_MAX
 *     bytes, and not after a followed conclude; the last one taken is the
 *     team's plan.
 *
 * A plan is reviewed like the other proposals (its own entry in
 * "ioa_proposals", "kind": "plan") and recorded as a decision: the
 * answer carries "ioa_decision": {"decision": "update_plan", "round": 0,
 * "by": "rule", "reason", "plan"} and, as IoA's clients expect, the plan
 * taken in "updated_plan", so every member's planner holds the same one.
 *
 * The answer is computed once and saved with the amended tasks before it
 * is posted (fsm "proposal_answer"), so a worker that takes over posts the
 * same answer, exactly once (goal.c), and then concludes if it said so.
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


#define IW_PROPOSAL_DESC_MAX  600

/* an updated_plan: a page of markdown, as IoA's planner prompt asks for */
#define IW_PROPOSAL_PLAN_MAX  4000


static char *iw_proposal_check(iw_goal_t *g, iw_agents_t *team,
    yajl_val tasks);
static void iw_proposal_take(iw_goal_t *g, yajl_val tasks);
static char *iw_proposal_decide(iw_goal_t *g, iw_agents_t *team);
static char *iw_proposal_plan_check(iw_goal_t *g, const char *plan,
    int conclude);


/* the envelope carries IoA's collaborative plan: a non-empty updated_plan */

int
iw_proposal_has_plan(yajl_val env)
{
    const char  *plan;

    plan = ioa_json_get_str(env, "updated_plan");

    return plan != NULL && plan[strspn(plan, " \t\r\n")] != '\0';
}


/* a member's envelope during the discussion, kept for the answer; 1 when
 * it is new */

int
iw_proposal_keep(iw_goal_t *g, const char *sid, yajl_val env,
    const char *sender, long long type)
{
    ioa_buf_t    b;
    yajl_val     tasks;
    const char  *content;

    if (g->proposals && strstr(g->proposals, sid)) {
        return 0;                       /* read again after a takeover */
    }

    ioa_buf_init(&b);

    if (g->proposals && strlen(g->proposals) > 2) {
        ioa_buf_add(&b, g->proposals, strlen(g->proposals) - 1);
        ioa_buf_addc(&b, ',');

    } else {
        ioa_buf_addc(&b, '[');
    }

    ioa_buf_adds(&b, "{\"sid\":");
    ioa_json_str(&b, sid);
    ioa_buf_adds(&b, ",\"sender\":");
    ioa_json_str(&b, sender);
    ioa_buf_addf(&b, ",\"type\":%lld,\"content\":", type);
    content = ioa_json_get_str(env, "content");
    ioa_json_str(&b, content ? content : "");
    ioa_buf_adds(&b, ",\"tasks\":");
    tasks = ioa_json_get(env, "tasks");

    if (tasks && type != IW_TYPE_DISCUSSION) {
        ioa_json_emit(&b, tasks);

    } else {
        ioa_buf_adds(&b, "null");
    }

    if (iw_proposal_has_plan(env)) {
        ioa_buf_adds(&b, ",\"plan\":");
        ioa_json_str(&b, ioa_json_get_str(env, "updated_plan"));
    }

    ioa_buf_adds(&b, "}]");

    free(g->proposals);
    g->proposals = ioa_buf_take(&b);

    iw_info("goal %s: %s proposes %s", g->goal_id, sender,
            type == IW_TYPE_CONCLUDE ? "to conclude"
            : type == IW_TYPE_DISCUSSION ? "a plan" : "tasks");

    return 1;
}


/* the answer said to conclude (a followed proposal) */

int
iw_proposal_concludes(iw_goal_t *g)
{
    int       yes;
    yajl_val  a, v;

    if (g->proposal_answer == NULL) {
        return 0;
    }

    a = ioa_json_parse(g->proposal_answer, strlen(g->proposal_answer));
    v = ioa_json_get(a, "conclude");
    yes = v && YAJL_IS_TRUE(v);
    yajl_tree_free(a);

    return yes;
}


/*
 * After the discussion turns: the answer to every proposal, computed and
 * saved once, then posted as step IW_STEP_PROPOSALS.
 */

int
iw_proposal_answer(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc;
    char        *tasks, *parts, *extra;
    yajl_val     a, v;
    ioa_buf_t    e;
    iw_agents_t  team;
    const char  *text, *error, *plan, *by;

    if (g->proposal_answer == NULL) {
        if (iw_goal_members(g, &team) != IW_OK) {
            return iw_goal_fail(conf, g, "the goal's team is not valid JSON");
        }

        g->proposal_answer = iw_proposal_decide(g, &team);
        iw_agents_free(&team);

        a = ioa_json_parse(g->proposal_answer, strlen(g->proposal_answer));
        v = ioa_json_get(a, "plan");

        if (v) {
            iw_stats_addf(1, "decisions:%s:rule",
                          YAJL_IS_STRING(v) ? "update_plan" : "keep_plan");
        }

        yajl_tree_free(a);

        tasks = iw_store_tasks_json(g);
        parts = iw_store_parts_json(g);
        rc = iw_store_save(conf, g, "proposal_answer", g->proposal_answer,
                           "tasks", tasks, "parts", parts,
                           "stopped_by", g->stopped_by ? g->stopped_by : "",
                           NULL);
        free(tasks);
        free(parts);

        if (rc != IW_OK) {
            return rc;
        }
    }

    a = ioa_json_parse(g->proposal_answer, strlen(g->proposal_answer));
    text = ioa_json_get_str(a, "text");
    error = ioa_json_get_str(a, "error");

    ioa_buf_init(&e);
    ioa_buf_adds(&e, "\"ioa_proposals\":");
    v = ioa_json_get(a, "answers");

    if (v) {
        ioa_json_emit(&e, v);

    } else {
        ioa_buf_adds(&e, "[]");
    }

    if (error && *error) {
        ioa_buf_adds(&e, ",\"ioa_error\":{\"code\":\"invalid_proposal\","
                    "\"message\":");
        ioa_json_str(&e, error);
        ioa_buf_addc(&e, '}');
    }

    /* a plan was proposed: the decision on it, and the plan taken, in
     * IoA's own field, for every member's planner */
    v = ioa_json_get(a, "plan");

    if (v) {
        plan = YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
        by = ioa_json_get_str(a, "plan_by");

        ioa_buf_addf(&e, ",\"ioa_decision\":{\"decision\":\"%s\","
                    "\"round\":0,\"by\":\"rule\",\"reason\":",
                    plan ? "update_plan" : "keep_plan");
        ioa_json_str(&e, text ? text : "");

        if (plan) {
            ioa_buf_adds(&e, ",\"plan_by\":");
            ioa_json_str(&e, by ? by : "");
            ioa_buf_adds(&e, ",\"plan\":");
            ioa_json_str(&e, plan);
            ioa_buf_adds(&e, "},\"updated_plan\":");
            ioa_json_str(&e, plan);

        } else {
            ioa_buf_addc(&e, '}');
        }
    }

    extra = ioa_buf_take(&e);
    ioa_buf_init(&e);
    v = ioa_json_get(a, "next");

    if (v) {
        ioa_json_emit(&e, v);

    } else {
        ioa_buf_adds(&e, "\"\"");
    }

    rc = iw_goal_post(conf, g, IW_STEP_PROPOSALS, IW_TYPE_DISCUSSION,
                      text ? text : "", e.data, NULL, extra);

    free(extra);
    ioa_buf_free(&e);
    yajl_tree_free(a);

    if (rc == IW_OK && iw_proposal_concludes(g)) {
        return iw_goal_to_concluding(conf, g, "proposal");
    }

    return rc;
}


/*
 * Checks every proposal in order and takes the valid ones into the plan;
 * returns the answer as JSON {"text","next","answers","error","conclude"}.
 */

static char *
iw_proposal_decide(iw_goal_t *g, iw_agents_t *team)
{
    int          conclude, accepted, plans;
    char        *error, *taken, *taken_by;
    size_t       i;
    ioa_buf_t    ans, text, next, errs, out;
    yajl_val     all, p, t, type;
    const char  *sender, *content, *plan;

    all = ioa_json_parse(g->proposals, strlen(g->proposals));
    conclude = 0;
    accepted = 0;
    plans = 0;
    taken = NULL;
    taken_by = NULL;
    ioa_buf_init(&ans);
    ioa_buf_init(&text);
    ioa_buf_init(&next);
    ioa_buf_init(&errs);

    for (i = 0; all && YAJL_IS_ARRAY(all) && i < all->u.array.len; i++) {
        p = all->u.array.values[i];
        sender = ioa_json_get_str(p, "sender");
        content = ioa_json_get_str(p, "content");
        type = ioa_json_get(p, "type");
        t = ioa_json_get(p, "tasks");

        if (sender == NULL) {
            continue;
        }

        plan = ioa_json_get_str(p, "plan");

        if (type && YAJL_IS_INTEGER(type)
            && YAJL_GET_INTEGER(type) == IW_TYPE_DISCUSSION)
        {
            goto take_plan;             /* a plan and nothing else */
        }

        if (type && YAJL_IS_INTEGER(type)
            && YAJL_GET_INTEGER(type) == IW_TYPE_CONCLUDE)
        {
            error = accepted ? ioa_strdup("a task proposal was followed "
                                         "before it")
                    : conclude ? ioa_strdup("the goal already concludes on "
                                           "an earlier proposal")
                    : NULL;

            if (error == NULL) {
                conclude = 1;
                free(g->stopped_by);
                g->stopped_by = ioa_sprintf("%s proposed it: %s", sender,
                                           content ? content : "");
            }

        } else {
            error = conclude ? ioa_strdup("the goal concludes on an earlier "
                                         "proposal")
                             : iw_proposal_check(g, team, t);

            if (error == NULL) {
                iw_proposal_take(g, t);
                accepted++;
            }
        }

        ioa_buf_adds(&ans, ans.len ? ",{\"sender\":" : "{\"sender\":");
        ioa_json_str(&ans, sender);
        ioa_buf_addf(&ans, ",\"accepted\":%s,\"reason\":",
                    error ? "false" : "true");
        ioa_json_str(&ans, error ? error : "");
        ioa_buf_addc(&ans, '}');

        ioa_buf_addf(&text, "%s%s's proposal ", text.len ? " " : "", sender);

        if (error) {
            ioa_buf_addf(&text, "is refused: %s.", error);
            ioa_buf_addf(&errs, "%s%s: %s", errs.len ? "; " : "", sender,
                        error);

        } else {
            ioa_buf_adds(&text, conclude && type && YAJL_IS_INTEGER(type)
                               && YAJL_GET_INTEGER(type) == IW_TYPE_CONCLUDE
                               ? "to conclude is followed."
                               : "is followed: its tasks join the plan.");
        }

        ioa_buf_adds(&next, next.len ? "," : "");
        ioa_json_str(&next, sender);
        free(error);

    take_plan:

        if (plan == NULL || *plan == '\0') {
            continue;
        }

        plans++;
        error = iw_proposal_plan_check(g, plan, conclude);

        if (error == NULL) {
            free(taken);
            free(taken_by);
            taken = ioa_strdup(plan);
            taken_by = ioa_strdup(sender);
        }

        ioa_buf_adds(&ans, ans.len ? ",{\"sender\":" : "{\"sender\":");
        ioa_json_str(&ans, sender);
        ioa_buf_addf(&ans, ",\"kind\":\"plan\",\"accepted\":%s,"
                    "\"reason\":", error ? "false" : "true");
        ioa_json_str(&ans, error ? error : "");
        ioa_buf_addc(&ans, '}');

        ioa_buf_addf(&text, "%s%s's plan ", text.len ? " " : "", sender);

        if (error) {
            ioa_buf_addf(&text, "is refused: %s.", error);
            ioa_buf_addf(&errs, "%s%s: %s", errs.len ? "; " : "", sender,
                        error);

        } else {
            ioa_buf_adds(&text, "is taken: it is the team's plan now.");
        }

        if (next.len == 0 || strstr(next.data, sender) == NULL) {
            ioa_buf_adds(&next, next.len ? "," : "");
            ioa_json_str(&next, sender);
        }

        free(error);
    }

    yajl_tree_free(all);

    ioa_buf_init(&out);
    ioa_buf_adds(&out, "{\"text\":");
    ioa_json_str(&out, text.len ? text.data : "No proposal.");
    ioa_buf_adds(&out, ",\"next\":[");
    ioa_buf_add(&out, next.data ? next.data : "", next.len);
    ioa_buf_adds(&out, "],\"answers\":[");
    ioa_buf_add(&out, ans.data ? ans.data : "", ans.len);
    ioa_buf_adds(&out, "],\"error\":");
    ioa_json_str(&out, errs.len ? errs.data : "");
    ioa_buf_addf(&out, ",\"conclude\":%s", conclude ? "true" : "false");

    if (plans) {
        ioa_buf_adds(&out, ",\"plan\":");

        if (taken) {
            ioa_json_str(&out, taken);
            ioa_buf_adds(&out, ",\"plan_by\":");
            ioa_json_str(&out, taken_by);

        } else {
            ioa_buf_adds(&out, "null");
        }
    }

    ioa_buf_addc(&out, '}');

    free(taken);
    free(taken_by);

    ioa_buf_free(&ans);
    ioa_buf_free(&text);
    ioa_buf_free(&next);
    ioa_buf_free(&errs);

    return ioa_buf_take(&out);
}


/* NULL when an updated_plan can be taken, else why not */

static char *
iw_proposal_plan_check(iw_goal_t *g, const char *plan, int conclude)
{
    yajl_val  v;

    v = ioa_json_get(g->req, "is_collaborative_planning_enabled");

    if (!(v && YAJL_IS_TRUE(v))) {
        return ioa_strdup("the goal was not launched with "
                          "is_collaborative_planning_enabled");
    }

    if (conclude) {
        return ioa_strdup("the goal concludes on an earlier proposal");
    }

    if (strlen(plan) > IW_PROPOSAL_PLAN_MAX) {
        return ioa_sprintf("an updated_plan is at most %d bytes",
                           IW_PROPOSAL_PLAN_MAX);
    }

    return NULL;
}


/* NULL when the tasks can be followed, else why not */

static char *
iw_proposal_check(iw_goal_t *g, iw_agents_t *team, yajl_val tasks)
{
    size_t       i, k, n;
    yajl_val     t;
    const char  *agent, *desc;

    if (tasks == NULL || !YAJL_IS_OBJECT(tasks)
        || tasks->u.object.len == 0)
    {
        return ioa_strdup("it names no task (\"tasks\": {\"<member>\": "
                         "{\"task_desc\"}})");
    }

    n = tasks->u.object.len;

    if (g->nparts + n > IW_PLAN_MAX_CLAUSES) {
        return ioa_sprintf("the goal would have more than %d parts",
                          IW_PLAN_MAX_CLAUSES);
    }

    for (i = 0; i < n; i++) {
        agent = tasks->u.object.keys[i];
        t = tasks->u.object.values[i];
        desc = ioa_json_get_str(t, "task_desc");

        /* the coordinator is last in the team and takes no task */
        for (k = 0; k + 1 < team->n && !iw_streq(team->v[k].name, agent);
             k++)
        {
            /* void */
        }

        if (k + 1 >= team->n) {
            return ioa_sprintf("%s is not a member of this team", agent);
        }

        if (desc == NULL || *desc == '\0'
            || strlen(desc) > IW_PROPOSAL_DESC_MAX)
        {
            return ioa_sprintf("the task for %s needs a task_desc of 1 to "
                              "%d bytes", agent, IW_PROPOSAL_DESC_MAX);
        }
    }

    return NULL;
}


/* the proposal's tasks join the first round, each a part of the goal and
 * a task of its own (a part is done only when its own task is: an agent
 * given two takes them one after the other, conversation.c) */

static void
iw_proposal_take(iw_goal_t *g, yajl_val tasks)
{
    char        hex[33];
    size_t      i;
    iw_task_t  *t;
    const char *agent, *desc;

    for (i = 0; i < tasks->u.object.len; i++) {
        agent = tasks->u.object.keys[i];
        desc = ioa_json_get_str(tasks->u.object.values[i], "task_desc");

        g->parts = ioa_realloc(g->parts, (g->nparts + 1) * sizeof(char *));
        g->part_why = ioa_realloc(g->part_why,
                                 (g->nparts + 1) * sizeof(char *));
        g->parts[g->nparts] = ioa_strdup(desc);
        g->part_why[g->nparts] = NULL;

        g->tasks = ioa_realloc(g->tasks, (g->ntasks + 1) * sizeof(iw_task_t));
        t = &g->tasks[g->ntasks++];
        memset(t, 0, sizeof(*t));
        ioa_uuid4_hex(hex);
        t->agent = ioa_strdup(agent);
        t->task_id = ioa_strdup(hex);
        t->desc = ioa_strdup(desc);
        t->status = ioa_strdup("pending");
        t->parts = 1u << g->nparts;

        g->nparts++;
    }
}
