/*
 * ioa-worker: the LLM's part of a goal, when an endpoint is configured
 * (IOA_LLM_BASE_URL, see llm.c).  Five decisions, each one structured
 * call whose answer is checked before it is used, and each with the
 * built-in planner as its fallback:
 *
 *   team     IoA's two tools: the model either calls agent_discovery
 *            (capability queries, answered from the registry with BM25,
 *            online agents only unless asked otherwise) or team_up (the
 *            member names).  At most IW_LLM_TEAM_ATTEMPTS rounds; in the
 *            last the schema allows team_up only, so the loop always ends.
 *            Names the registry does not know, offline agents and the
 *            coordinator are dropped; nobody left: the built-in planner
 *            recruits.
 *   plan     the discussion text, parallel or sequence, and the tasks:
 *            each for a team member (an enum in the schema), optionally
 *            for a sub-team when team_up_depth allows.  Tasks for unknown
 *            agents or without text are dropped; no task left: the
 *            built-in assignment.  In parallel one member gets one task
 *            (the "tasks" map of the assignment is keyed by agent), so a
 *            member's tasks are joined.
 *   review   after each round (decide.c): conclude, or another round with
 *            tasks, each for a part still open and an agent from the
 *            list the rule would also allow (an enum in the schema); the
 *            prompt shows where the parts stand and the room's latest
 *            envelopes (IW_LLM_TRANSCRIPT_MAX bytes).  decide.c checks the
 *            answer and keeps the rule's decision when it is unusable.
 *   person   what a person's message asks (person.c): end, change_part
 *            (a part, its new text) or add_work; person.c checks it, and
 *            an unusable answer makes the message work, never an end.
 *   conclusion  the answer to the goal from the results.
 *
 * Why checks and not trust: with a schema-constrained server the answer
 * has the right shape but any content (the random-weight model of
 * t/110-llm-goals.t answers noise), and without one not even the shape.
 * Whatever comes back, the state machine gets a valid plan.
 *
 * Every call's token usage is added to the goal (fsm and meta, so GET
 * /goals/<id> shows it as it grows).  The token budget (--token-budget)
 * is a hard limit: once reached, no further call is made (the built-in
 * planner takes over) and the running phase concludes (conversation.c).
 *
 * A call never blocks: the goal waits for the model like it waits for an
 * agent (iw_llm_call() says how), and its lease is renewed meanwhile by
 * its own timer (engine.c), so a slow model cannot make another worker
 * take the goal, nor delay any other goal.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"
#include "llm.h"


#define IW_LLM_TEAM_ATTEMPTS  3

/* a call of the goal's memo: running, or its result */
struct iw_llm_entry_s {
    iw_llm_entry_t   *next;
    iw_llm_memo_t    *memo;
    char             *key;           /* what, schema and messages */
    iw_llm_call_t    *call;          /* NULL once its result is here */
    char             *answer;        /* the JSON object, NULL: none */
    char             *error;
    long long         prompt_tokens;
    long long         completion_tokens;
    int               attempts;
    int               counted;       /* its tokens are the goal's */
};


static int iw_llm_call(const iw_conf_t *conf, iw_goal_t *g,
    const char *what, const char *system, const char *user,
    const char *schema, yajl_val *answer);
static void iw_llm_memo_done(iw_llm_call_t *call, void *data);
static void iw_llm_memo_keep(iw_llm_entry_t *e);
static int iw_llm_account(const iw_conf_t *conf, iw_goal_t *g,
    long long prompt, long long completion);
static void iw_llm_team_list(ioa_buf_t *b, const char *coordinator,
    iw_agents_t *a);
static void iw_llm_record(ioa_buf_t *b, const iw_agent_t *a);


static int
iw_llm_on(const iw_conf_t *conf, iw_goal_t *g)
{
    if (conf->llm == NULL) {
        return 0;
    }

    return conf->token_budget == 0
           || g->prompt_tokens + g->completion_tokens < conf->token_budget;
}


/*
 * One structured call.  IW_OK with *answer set (an object) or NULL (the
 * model failed: the caller falls back), IW_GOAL_WAIT (the model has not
 * answered yet), IW_ERROR.
 *
 * The call never blocks the step.  The first time a step asks, the call
 * is started (llm.c) and remembered in the goal's memo, and the step
 * returns IW_GOAL_WAIT: the goal waits, holding nothing but the call.
 * When the answer is in, the engine runs the step again from what Redis
 * holds (exactly as a worker taking the goal over would), and the step
 * arrives at the same call with the same prompt (prompts are made from the
 * persisted state only): now the memo has the answer.  A step that makes
 * several calls (the team's discussion rounds) finds the earlier answers
 * there too.  The memo lives until a step ends without waiting for a
 * model (engine.c clears it); an answer's tokens and counters are counted
 * once, when it is first used.
 */

static int
iw_llm_call(const iw_conf_t *conf, iw_goal_t *g, const char *what,
    const char *system, const char *user, const char *schema,
    yajl_val *answer)
{
    ioa_buf_t         m, key;
    iw_llm_memo_t    *memo;
    iw_llm_entry_t   *e;

    *answer = NULL;
    memo = g->llm_memo;

    if (memo == NULL) {
        iw_error("goal %s: an LLM call outside the engine", g->goal_id);
        return IW_ERROR;
    }

    ioa_buf_init(&m);
    ioa_buf_adds(&m, "[{\"role\":\"system\",\"content\":");
    ioa_json_str(&m, system);
    ioa_buf_adds(&m, "},{\"role\":\"user\",\"content\":");
    ioa_json_str(&m, user);
    ioa_buf_adds(&m, "}]");

    /* the whole request is the key: the same step asks the same */
    ioa_buf_init(&key);
    ioa_buf_adds(&key, what);
    ioa_buf_addc(&key, '\n');
    ioa_buf_adds(&key, schema ? schema : "");
    ioa_buf_addc(&key, '\n');
    ioa_buf_add(&key, m.data, m.len);

    for (e = memo->head; e; e = e->next) {
        if (strcmp(e->key, key.data) == 0) {
            break;
        }
    }

    if (e == NULL) {
        e = ioa_calloc(sizeof(iw_llm_entry_t));
        e->key = ioa_buf_take(&key);
        e->memo = memo;
        e->next = memo->head;
        memo->head = e;
        e->call = iw_llm_start(conf->llm, m.data, what, schema,
                               iw_llm_memo_done, e);
        ioa_buf_free(&m);

        memo->waiting = 1;
        return IW_GOAL_WAIT;
    }

    ioa_buf_free(&key);
    ioa_buf_free(&m);

    if (e->call && !iw_llm_finished(e->call)) {
        memo->waiting = 1;
        return IW_GOAL_WAIT;
    }

    if (e->call) {
        iw_llm_memo_keep(e);
    }

    if (!e->counted) {
        iw_stats_add("llm_requests", e->attempts);
        iw_stats_add("retries:llm", e->attempts > 1 ? e->attempts - 1 : 0);
        iw_stats_add("prompt_tokens", e->prompt_tokens);
        iw_stats_add("completion_tokens", e->completion_tokens);
        iw_stats_add("llm_calls", 1);
        iw_stats_add("llm_failures", e->answer ? 0 : 1);

        if (iw_llm_account(conf, g, e->prompt_tokens, e->completion_tokens)
            != IW_OK)
        {
            return IW_ERROR;
        }

        e->counted = 1;

        if (e->answer == NULL) {
            iw_warn("goal %s: the LLM gave no usable %s (%s); the built-in "
                    "planner decides instead", g->goal_id, what,
                    e->error ? e->error : "no JSON object");
        }
    }

    if (e->answer) {
        *answer = ioa_json_parse(e->answer, strlen(e->answer));
    }

    return IW_OK;
}


/* from the loop: the call of e has finished; its goal looks again */

static void
iw_llm_memo_done(iw_llm_call_t *call, void *data)
{
    iw_llm_entry_t  *e;

    (void) call;

    e = data;

    if (e->memo->wake) {
        e->memo->wake(e->memo->data);
    }
}


/* the finished call's result into the entry (the answer as JSON text,
 * parsed again each time a step uses it), the call freed */

static void
iw_llm_memo_keep(iw_llm_entry_t *e)
{
    int              rc;
    ioa_buf_t        b;
    iw_llm_result_t  res;

    rc = iw_llm_take(e->call, &res);
    iw_llm_free(e->call);
    e->call = NULL;

    e->attempts = res.attempts;
    e->prompt_tokens = res.prompt_tokens;
    e->completion_tokens = res.completion_tokens;

    if (rc == IW_LLM_OK && res.json && YAJL_IS_OBJECT(res.json)) {
        ioa_buf_init(&b);
        ioa_json_emit(&b, res.json);
        e->answer = ioa_buf_take(&b);

    } else {
        e->error = ioa_strdup(res.error ? res.error : "no JSON object");
    }

    iw_llm_result_free(&res);
}


/* the memo forgotten: calls still running are abandoned */

void
iw_llm_memo_clear(iw_llm_memo_t *memo)
{
    iw_llm_entry_t  *e;

    while ((e = memo->head) != NULL) {
        memo->head = e->next;
        iw_llm_free(e->call);
        free(e->key);
        free(e->answer);
        free(e->error);
        free(e);
    }

    memo->waiting = 0;
}


static int
iw_llm_account(const iw_conf_t *conf, iw_goal_t *g, long long prompt,
    long long completion)
{
    int          rc;
    char         p[32], c[32];
    redisReply  *r;

    if (prompt <= 0 && completion <= 0) {
        return IW_OK;
    }

    g->prompt_tokens += prompt > 0 ? prompt : 0;
    g->completion_tokens += completion > 0 ? completion : 0;
    snprintf(p, sizeof(p), "%lld", g->prompt_tokens);
    snprintf(c, sizeof(c), "%lld", g->completion_tokens);

    rc = iw_store_save(conf, g, "prompt_tokens", p, "completion_tokens", c,
                       NULL);
    if (rc != IW_OK) {
        return rc;
    }

    r = iw_redis_cmd("HSET %s{goal:%s}:meta prompt_tokens %s "
                     "completion_tokens %s tokens %lld", conf->prefix,
                     g->goal_id, p, c,
                     g->prompt_tokens + g->completion_tokens);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    if (conf->token_budget
        && g->prompt_tokens + g->completion_tokens >= conf->token_budget)
    {
        iw_warn("goal %s: token budget reached (%lld of %lld)", g->goal_id,
                g->prompt_tokens + g->completion_tokens, conf->token_budget);
    }

    return IW_OK;
}


/*
 * An agent's record as the model reads it, one bounded line (numbers
 * only, about 100 bytes): the coordinator's verdicts, the smoothed rate the
 * built-in ranking uses (registry.c: iw_reg_rank), the mean time to a
 * result.  A newcomer is called one, so that the model can give it a
 * low-stakes part rather than read "0 tasks" as a bad sign.
 */

static void
iw_llm_record(ioa_buf_t *b, const iw_agent_t *a)
{
    long long  n;

    n = iw_reg_trials(a);

    if (n == 0) {
        ioa_buf_adds(b, "\n  record: newcomer, no verdicts yet");
        return;
    }

    ioa_buf_addf(b, "\n  record: %lld tasks, %lld accepted, %lld partial, "
                "%lld failed, timed out or rejected; smoothed success "
                "rate %.2f", n, a->completed, a->partial, a->unfinished,
                iw_reg_rate(a));

    if (a->latency_ms >= 0) {
        ioa_buf_addf(b, "; mean time to result %lld ms", a->latency_ms);
    }
}


static void
iw_llm_team_list(ioa_buf_t *b, const char *coordinator, iw_agents_t *a)
{
    size_t  i;

    for (i = 0; i < a->n; i++) {
        if (coordinator && iw_streq(a->v[i].name, coordinator)) {
            continue;
        }

        ioa_buf_addf(b, "\n- %s (%s): %s", a->v[i].name, a->v[i].type,
                    a->v[i].desc);
        iw_llm_record(b, &a->v[i]);
    }
}


/* ---- team formation: agent_discovery and team_up ---- */

static int
iw_llm_team(const iw_conf_t *conf, iw_goal_t *g, const char *text,
    int online_only, char ***names, size_t *n)
{
    int          rc, attempt, last;
    char        *user, *system, **picked;
    size_t       i, j, k, np;
    ioa_buf_t    seen;
    yajl_val     ans, v, q;
    iw_agents_t  found, known;
    const char  *tool, *s;

    static const char  *schema_any =
        "{\"type\":\"object\",\"properties\":{"
        "\"tool\":{\"type\":\"string\","
        "\"enum\":[\"agent_discovery\",\"team_up\"]},"
        "\"queries\":{\"type\":\"array\",\"maxItems\":4,"
        "\"items\":{\"type\":\"string\",\"maxLength\":120}},"
        "\"team_members\":{\"type\":\"array\",\"maxItems\":4,"
        "\"items\":{\"type\":\"string\",\"maxLength\":64}}},"
        "\"required\":[\"tool\",\"queries\",\"team_members\"],"
        "\"additionalProperties\":false}";

    static const char  *schema_last =
        "{\"type\":\"object\",\"properties\":{"
        "\"tool\":{\"type\":\"string\",\"enum\":[\"team_up\"]},"
        "\"queries\":{\"type\":\"array\",\"maxItems\":0,"
        "\"items\":{\"type\":\"string\"}},"
        "\"team_members\":{\"type\":\"array\",\"maxItems\":4,"
        "\"items\":{\"type\":\"string\",\"maxLength\":64}}},"
        "\"required\":[\"tool\",\"queries\",\"team_members\"],"
        "\"additionalProperties\":false}";

    *names = NULL;
    *n = 0;

    if (!iw_llm_on(conf, g)) {
        return IW_OK;                   /* the built-in planner recruits */
    }

    picked = NULL;
    np = 0;

    ioa_buf_init(&seen);

    for (attempt = 1; attempt <= IW_LLM_TEAM_ATTEMPTS; attempt++) {
        last = (attempt == IW_LLM_TEAM_ATTEMPTS);

        system = ioa_sprintf(
            "You are %s, the coordinator of a network of AI agents. Form a "
            "team of at most 4 agents for the goal. You have two tools: "
            "agent_discovery (\"queries\": short descriptions of the "
            "capabilities you need; the registry answers with matching "
            "agents) and team_up (\"team_members\": the names of the "
            "agents you choose, taken from the discovery results). Answer "
            "with one JSON object: {\"tool\", \"queries\", "
            "\"team_members\"}.%s", conf->name,
            last ? " This is your last turn: you must call team_up now."
                 : "");
        user = ioa_sprintf("Goal: %s\n\nDiscovery results so far:%s", text,
                          seen.len ? seen.data : "\n(none yet)");

        rc = iw_llm_call(conf, g, "team", system, user,
                         last ? schema_last : schema_any, &ans);
        free(system);
        free(user);

        if (rc != IW_OK) {
            ioa_buf_free(&seen);
            return rc;
        }

        if (ans == NULL) {
            break;
        }

        tool = ioa_json_get_str(ans, "tool");

        if (!last && iw_streq(tool, "agent_discovery")) {
            v = ioa_json_get(ans, "queries");

            for (i = 0, k = 0; v && YAJL_IS_ARRAY(v) && i < v->u.array.len
                               && k < 4; i++)
            {
                q = v->u.array.values[i];

                if (!YAJL_IS_STRING(q) || *YAJL_GET_STRING(q) == '\0') {
                    continue;
                }

                k++;
                rc = iw_reg_retrieve(conf, YAJL_GET_STRING(q), 3,
                                     online_only, NULL, &found);
                if (rc != IW_OK) {
                    yajl_tree_free(ans);
                    ioa_buf_free(&seen);
                    return rc;
                }

                ioa_buf_addf(&seen, "\nagent_discovery(\"%s\"):",
                            YAJL_GET_STRING(q));
                iw_llm_team_list(&seen, conf->name, &found);

                if (found.n == 0) {
                    ioa_buf_adds(&seen, " no agent");
                }

                iw_agents_free(&found);
            }

            if (k == 0) {
                ioa_buf_adds(&seen, "\n(agent_discovery needs at least one "
                            "query)");
            }

            iw_info("goal %s: LLM team round %d: agent_discovery with %zu "
                    "quer%s", g->goal_id, attempt, k, k == 1 ? "y" : "ies");
            yajl_tree_free(ans);
            continue;
        }

        /* team_up: keep the names the registry knows and may recruit */
        v = ioa_json_get(ans, "team_members");
        picked = ioa_alloc(4 * sizeof(char *));
        np = 0;

        for (i = 0; v && YAJL_IS_ARRAY(v) && i < v->u.array.len && np < 4;
             i++)
        {
            q = v->u.array.values[i];

            if (!YAJL_IS_STRING(q)) {
                continue;
            }

            s = YAJL_GET_STRING(q);

            for (j = 0; j < np && strcmp(picked[j], s) != 0; j++) {
                /* void */
            }

            if (j == np && *s && !iw_streq(s, conf->name)) {
                picked[np++] = ioa_strdup(s);
            }
        }

        yajl_tree_free(ans);

        rc = iw_reg_query(conf, picked, np, &known);
        if (rc != IW_OK) {
            break;
        }

        for (i = 0, j = 0; i < np; i++) {
            if (known.v[i].found && (known.v[i].online || !online_only)) {
                picked[j++] = picked[i];

            } else {
                ioa_buf_addf(&seen, "\nteam_up: %s is not an available "
                            "agent", picked[i]);
                free(picked[i]);
            }
        }

        np = j;
        iw_agents_free(&known);

        iw_info("goal %s: LLM team round %d: team_up with %zu usable "
                "member%s", g->goal_id, attempt, np, np == 1 ? "" : "s");

        if (np) {
            break;
        }

        free(picked);
        picked = NULL;
    }

    ioa_buf_free(&seen);

    if (rc != IW_OK) {
        for (i = 0; i < np; i++) {
            free(picked[i]);
        }

        free(picked);
        return rc;
    }

    *names = picked;
    *n = np;

    return IW_OK;
}


/* ---- the plan: discussion, parallel or sequence, tasks ---- */

static int
iw_llm_plan(const iw_conf_t *conf, iw_goal_t *g, const char *text,
    int allow_sub, iw_plan_t *plan, char **discussion)
{
    int               rc, sync, sub;
    char             *system, *user, **parts;
    size_t            i, j, nw, nparts, first_unassigned;
    ioa_buf_t         schema, team, joined;
    yajl_val          ans, v, t;
    iw_agents_t       members;
    const char       *agent, *desc, *mode, *d;
    iw_assignment_t  *work;

    *discussion = NULL;

    if (!iw_llm_on(conf, g)) {
        return IW_OK;                   /* the built-in assignment stands */
    }

    ioa_buf_init(&schema);
    ioa_buf_adds(&schema, "{\"type\":\"object\",\"properties\":{"
                "\"discussion\":{\"type\":\"string\",\"maxLength\":800},"
                "\"mode\":{\"type\":\"string\","
                "\"enum\":[\"parallel\",\"sequence\"]},"
                "\"tasks\":{\"type\":\"array\",\"minItems\":1,"
                "\"maxItems\":8,\"items\":{\"type\":\"object\","
                "\"properties\":{\"agent\":{\"type\":\"string\",\"enum\":[");

    for (i = 0; i < plan->nteam; i++) {
        ioa_buf_adds(&schema, i ? "," : "");
        ioa_json_str(&schema, plan->team[i].name);
    }

    ioa_buf_adds(&schema, "]},\"task_desc\":{\"type\":\"string\","
                "\"maxLength\":600}");

    if (allow_sub) {
        ioa_buf_adds(&schema, ",\"sub_team\":{\"type\":\"boolean\"}");
    }

    ioa_buf_addf(&schema, "},\"required\":[\"agent\",\"task_desc\"%s],"
                "\"additionalProperties\":false}},"
                "\"unassigned\":{\"type\":\"array\",\"maxItems\":%d,"
                "\"items\":{\"type\":\"object\",\"properties\":{"
                "\"part\":{\"type\":\"string\",\"maxLength\":600},"
                "\"why\":{\"type\":\"string\",\"maxLength\":300}},"
                "\"required\":[\"part\",\"why\"],"
                "\"additionalProperties\":false}}},"
                "\"required\":[\"discussion\",\"mode\",\"tasks\"],"
                "\"additionalProperties\":false}",
                allow_sub ? ",\"sub_team\"" : "", IW_PLAN_MAX_TASKS);

    ioa_buf_init(&team);
    members.v = plan->team;
    members.n = plan->nteam;
    iw_llm_team_list(&team, NULL, &members);

    system = ioa_sprintf(
        "You are %s, the coordinator of a team of AI agents working on a "
        "goal. Split the goal into tasks for the team members, each task "
        "for the member whose description fits it. Choose \"parallel\" "
        "when the tasks are independent, \"sequence\" when each builds on "
        "the one before (they then run in the order given, each with the "
        "results before it).%s List in \"unassigned\" every part of the "
        "goal that no member can do, with why: it is reported as not done. "
        "Write \"discussion\": a short message to the team explaining the "
        "plan. Answer with one JSON object.",
        conf->name,
        allow_sub ? " Set \"sub_team\" on a task too large for one agent: "
                    "a nested team will do it." : "");
    user = ioa_sprintf("Goal: %s\n\nTeam:%s", text, team.data);
    ioa_buf_free(&team);

    rc = iw_llm_call(conf, g, "plan", system, user, schema.data, &ans);
    free(system);
    free(user);
    ioa_buf_free(&schema);

    if (rc != IW_OK || ans == NULL) {
        return rc;
    }

    mode = ioa_json_get_str(ans, "mode");
    sync = iw_streq(mode, "sequence");
    v = ioa_json_get(ans, "tasks");

    /* the goal's parts, for the review and the conclusion, become the
     * model's tasks as it wrote them */
    work = ioa_alloc(IW_PLAN_MAX_TASKS * sizeof(iw_assignment_t));
    parts = ioa_alloc(IW_PLAN_MAX_TASKS * sizeof(char *));
    nw = 0;
    nparts = 0;

    for (i = 0; v && YAJL_IS_ARRAY(v) && i < v->u.array.len
                && nparts < IW_PLAN_MAX_TASKS; i++)
    {
        t = v->u.array.values[i];
        agent = ioa_json_get_str(t, "agent");
        desc = ioa_json_get_str(t, "task_desc");
        sub = allow_sub && YAJL_IS_TRUE(ioa_json_get(t, "sub_team"));

        for (j = 0; agent && j < plan->nteam; j++) {
            if (strcmp(plan->team[j].name, agent) == 0) {
                break;
            }
        }

        /* skip what cannot be done: an unknown agent, no text */
        for (d = desc; d && (*d == ' ' || *d == '\n' || *d == '\t'); d++) {
            /* void */
        }

        if (agent == NULL || j == plan->nteam || d == NULL || *d == '\0') {
            continue;
        }

        if (sub) {
            agent = conf->name;
        }

        /* in parallel a member has one task: join its parts */
        if (!sync && !sub) {
            for (j = 0; j < nw; j++) {
                if (!work[j].sub && strcmp(work[j].agent, agent) == 0) {
                    break;
                }
            }

            if (j < nw) {
                ioa_buf_init(&joined);
                ioa_buf_addf(&joined, "%s; %s", work[j].desc, d);
                free(work[j].desc);
                work[j].desc = ioa_buf_take(&joined);
                work[j].parts |= 1u << nparts;
                parts[nparts++] = ioa_strdup(d);
                continue;
            }
        }

        work[nw].agent = ioa_strdup(agent);
        work[nw].desc = ioa_strdup(d);
        work[nw].sub = sub;
        work[nw].parts = 1u << nparts;
        parts[nparts++] = ioa_strdup(d);
        nw++;
    }

    if (nw == 0) {
        iw_warn("goal %s: the LLM's plan names no task the team can do; "
                "the built-in assignment is used", g->goal_id);

        for (i = 0; i < nparts; i++) {
            free(parts[i]);
        }

        free(work);
        free(parts);
        yajl_tree_free(ans);
        return IW_OK;
    }

    /* what the model says nobody can do stays a part of the goal, not
     * done, with its reason: the account tells it, and "N of M parts"
     * cannot shrink to what was done by leaving parts out */
    v = ioa_json_get(ans, "unassigned");
    first_unassigned = nparts;

    for (i = 0; v && YAJL_IS_ARRAY(v) && i < v->u.array.len
                && nparts < IW_PLAN_MAX_TASKS; i++)
    {
        d = ioa_json_get_str(v->u.array.values[i], "part");

        if (!iw_blank(d)) {
            parts[nparts++] = ioa_strdup(d);
        }
    }

    iw_plan_set_work(plan, work, nw, sync, parts, nparts);

    for (i = 0, j = first_unassigned; v && YAJL_IS_ARRAY(v)
                && i < v->u.array.len && j < nparts; i++)
    {
        t = v->u.array.values[i];

        if (iw_blank(ioa_json_get_str(t, "part"))) {
            continue;
        }

        desc = ioa_json_get_str(t, "why");
        plan->why[j++] = ioa_strdup(iw_blank(desc)
                                   ? "no member of the team can do it"
                                   : desc);
    }

    d = ioa_json_get_str(ans, "discussion");

    if (!iw_blank(d)) {
        *discussion = ioa_strdup(d);
    }

    iw_info("goal %s: LLM plan: %zu task%s, %s", g->goal_id, nw,
            nw == 1 ? "" : "s", sync ? "in sequence" : "in parallel");

    yajl_tree_free(ans);

    return IW_OK;
}


/* ---- the conclusion ---- */

static int
iw_llm_conclusion(const iw_conf_t *conf, iw_goal_t *g, char **text)
{
    int          rc;
    char        *system, *user;
    size_t       i;
    ioa_buf_t    results;
    yajl_val     ans;
    const char  *c;

    static const char  *schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"conclusion\":{\"type\":\"string\",\"maxLength\":3000}},"
        "\"required\":[\"conclusion\"],\"additionalProperties\":false}";

    *text = NULL;

    if (!iw_llm_on(conf, g)) {
        return IW_OK;                   /* the account alone */
    }

    ioa_buf_init(&results);

    for (i = 0; i < g->ntasks; i++) {
        ioa_buf_addf(&results, "\n- %s, task \"%s\" (%s): %s",
                    g->tasks[i].agent, g->tasks[i].desc, g->tasks[i].status,
                    g->tasks[i].result && *g->tasks[i].result
                    ? g->tasks[i].result : "no result");
    }

    system = ioa_sprintf(
        "You are %s, the coordinator of a team of AI agents. The team has "
        "worked on a goal; write the conclusion: the answer to the goal, "
        "built from the results, saying plainly what is missing when a "
        "task failed or timed out. Answer with one JSON object "
        "{\"conclusion\"}.", conf->name);
    user = ioa_sprintf("Goal: %s\n\nResults:%s%s", g->goal,
                      results.len ? results.data : "\n(none)",
                      iw_streq(g->ended, "max_turns")
                      ? "\n\nThe room reached its turn limit." : "");
    ioa_buf_free(&results);

    rc = iw_llm_call(conf, g, "conclusion", system, user, schema, &ans);
    free(system);
    free(user);

    if (rc != IW_OK || ans == NULL) {
        return rc;
    }

    c = ioa_json_get_str(ans, "conclusion");

    if (!iw_blank(c)) {
        *text = ioa_strdup(c);
    }

    yajl_tree_free(ans);

    return IW_OK;
}


/* ---- the review after a round ---- */

/*
 * The room's latest envelopes, oldest first, as "sender: content" lines,
 * each cut at IW_LLM_LINE_MAX bytes, at most IW_LLM_TRANSCRIPT_MAX bytes in
 * all: the newest are kept, since the review is about how the round ended.
 */

static int
iw_llm_transcript(const iw_conf_t *conf, iw_goal_t *g, ioa_buf_t *b)
{
    size_t       i, used, n;
    yajl_val     env;
    ioa_buf_t    line;
    redisReply  *r, *e, *f;
    const char  *sender, *content, **lines;

    r = iw_redis_cmd("XREVRANGE %s{room:%s}:log + - COUNT 40", conf->prefix,
                     g->comm_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    lines = ioa_alloc((r->elements + 1) * sizeof(char *));
    used = 0;

    for (i = 0, n = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        e = r->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2) {
            continue;
        }

        f = e->element[1];

        if (f->type != REDIS_REPLY_ARRAY || f->elements < 2) {
            continue;
        }

        env = ioa_json_parse(f->element[1]->str, f->element[1]->len);
        sender = ioa_json_get_str(env, "sender");
        content = ioa_json_get_str(env, "task_conclusion");

        if (content == NULL || *content == '\0') {
            content = ioa_json_get_str(env, "content");
        }

        ioa_buf_init(&line);
        ioa_buf_addf(&line, "%s: %.*s", sender ? sender : "?",
                    IW_LLM_LINE_MAX, content ? content : "");
        yajl_tree_free(env);

        if (used + line.len + 1 > IW_LLM_TRANSCRIPT_MAX) {
            ioa_buf_free(&line);
            break;
        }

        used += line.len + 1;
        lines[n++] = ioa_buf_take(&line);
    }

    freeReplyObject(r);

    while (n--) {
        ioa_buf_addf(b, "\n%s", lines[n]);
        free((char *) lines[n]);
    }

    free(lines);

    return IW_OK;
}


/*
 * One structured call: conclude, or another round with tasks for the
 * listed agents.  IW_OK with out->answer set when the model answered with
 * the right shape (decide.c checks the content), NULL when it did not.
 */

static int
iw_llm_review(const iw_conf_t *conf, iw_goal_t *g, const char *state,
    iw_agents_t *cands, iw_agents_t *askable, iw_review_t *out)
{
    int          rc;
    char        *system, *user;
    size_t       i;
    ioa_buf_t    schema, agents, transcript;
    yajl_val     ans, v, t;
    long long    part;
    const char  *d;

    memset(out, 0, sizeof(*out));

    if (!iw_llm_on(conf, g)) {
        return IW_OK;                   /* no answer: the rule decides */
    }

    ioa_buf_init(&schema);
    ioa_buf_addf(&schema, "{\"type\":\"object\",\"properties\":{"
                "\"decision\":{\"type\":\"string\","
                "\"enum\":[\"conclude\",\"another_round\"%s]},",
                askable->n ? ",\"ask\"" : "");

    if (askable->n) {
        ioa_buf_adds(&schema, "\"question\":{\"type\":\"object\","
                    "\"properties\":{\"agent\":{\"type\":\"string\","
                    "\"enum\":[");

        for (i = 0; i < askable->n; i++) {
            ioa_buf_adds(&schema, i ? "," : "");
            ioa_json_str(&schema, askable->v[i].name);
        }

        ioa_buf_adds(&schema, "]},\"text\":{\"type\":\"string\","
                    "\"maxLength\":400}},"
                    "\"required\":[\"agent\",\"text\"],"
                    "\"additionalProperties\":false},");
    }

    ioa_buf_adds(&schema, "\"reason\":{\"type\":\"string\","
                "\"maxLength\":400},");

    /* nobody can take a task: the list must stay empty (an empty enum is
     * not a schema every server takes) */
    if (cands->n == 0) {
        ioa_buf_adds(&schema, "\"tasks\":{\"type\":\"array\","
                    "\"maxItems\":0}},");

    } else {
        ioa_buf_addf(&schema, "\"tasks\":{\"type\":\"array\","
                    "\"maxItems\":%d,\"items\":{\"type\":\"object\","
                    "\"properties\":{\"part\":{\"type\":\"integer\","
                    "\"minimum\":1,\"maximum\":%zu},"
                    "\"agent\":{\"type\":\"string\",\"enum\":[",
                    IW_PLAN_MAX_TASKS, g->nparts);

        for (i = 0; i < cands->n; i++) {
            ioa_buf_adds(&schema, i ? "," : "");
            ioa_json_str(&schema, cands->v[i].name);
        }

        ioa_buf_adds(&schema, "]},\"task_desc\":{\"type\":\"string\","
                    "\"maxLength\":600}},"
                    "\"required\":[\"part\",\"agent\",\"task_desc\"],"
                    "\"additionalProperties\":false}}},");
    }

    ioa_buf_adds(&schema, "\"required\":[\"decision\",\"reason\","
                "\"tasks\"],\"additionalProperties\":false}");

    ioa_buf_init(&agents);
    iw_llm_team_list(&agents, NULL, cands);

    ioa_buf_init(&transcript);

    rc = iw_llm_transcript(conf, g, &transcript);
    if (rc != IW_OK) {
        ioa_buf_free(&schema);
        ioa_buf_free(&agents);
        ioa_buf_free(&transcript);
        return rc;
    }

    system = ioa_sprintf(
        "You are %s, the coordinator of a team of AI agents. A round of "
        "tasks has ended; decide what the team does next. Answer "
        "\"conclude\" when the goal is achieved or nothing more can be "
        "done, with tasks []. Answer \"another_round\" with tasks: a part "
        "that failed or timed out goes to another listed agent, a part "
        "done only in part goes back with what is missing, a person's "
        "request goes to the agent that fits it. Only the listed agents can "
        "take tasks; parts are numbered as below.%s Say why in "
        "\"reason\". Answer with one JSON object.", conf->name,
        askable->n ? " Answer \"ask\" with a \"question\" to one of the "
                     "listed members when you need to know more before "
                     "deciding; its answer comes before your next review."
                   : "");
    user = ioa_sprintf("Goal: %s\n\nWhere the parts stand:\n%s\n\n"
                      "Agents who can take tasks:%s\n\nThe room, most "
                      "recent last:%s", g->goal, state,
                      agents.len ? agents.data : "\n(none)",
                      transcript.len ? transcript.data : "\n(empty)");
    ioa_buf_free(&agents);
    ioa_buf_free(&transcript);

    rc = iw_llm_call(conf, g, "review", system, user, schema.data, &ans);
    free(system);
    free(user);
    ioa_buf_free(&schema);

    if (rc != IW_OK || ans == NULL) {
        return rc;
    }

    out->answer = ans;
    out->conclude = iw_streq(ioa_json_get_str(ans, "decision"), "conclude");

    if (iw_streq(ioa_json_get_str(ans, "decision"), "ask")) {
        v = ioa_json_get(ans, "question");
        out->ask_agent = ioa_json_get_str(v, "agent");
        out->ask_text = ioa_json_get_str(v, "text");

        if (out->ask_agent == NULL || iw_blank(out->ask_text)) {
            out->ask_agent = NULL;
            out->ask_text = NULL;
        }
    }

    out->reason = ioa_json_get_str(ans, "reason");
    v = ioa_json_get(ans, "tasks");

    for (i = 0; v && YAJL_IS_ARRAY(v) && i < v->u.array.len
                && out->ntasks < IW_PLAN_MAX_TASKS; i++)
    {
        t = v->u.array.values[i];

        if (ioa_json_get_int(t, "part", &part) != 0
            || ioa_json_get_str(t, "agent") == NULL)
        {
            continue;
        }

        d = ioa_json_get_str(t, "task_desc");
        out->tasks[out->ntasks].part = (int) part - 1;
        out->tasks[out->ntasks].agent = ioa_json_get_str(t, "agent");
        out->tasks[out->ntasks].desc = iw_blank(d) ? NULL : d;
        out->ntasks++;
    }

    if (iw_blank(out->reason)) {
        out->reason = NULL;
    }

    return IW_OK;
}


/* ---- a person's message ---- */

/*
 * One structured call: what a person's message asks, end, change_part or
 * add_work, with the part and the text.  IW_OK with out->answer set when
 * the model answered (person.c checks it against the goal), NULL when it
 * did not: the message is then work.  The prompt is made from the goal's
 * text, its parts and the message, all persisted before the call, so the
 * step that runs again after the answer asks the same.
 */

static int
iw_llm_person(const iw_conf_t *conf, iw_goal_t *g, const char *sender,
    const char *content, iw_person_reading_t *out)
{
    int        rc;
    char      *system, *user;
    size_t     p;
    ioa_buf_t  schema, parts;
    yajl_val   ans;

    memset(out, 0, sizeof(*out));

    if (!iw_llm_on(conf, g)) {
        return IW_OK;
    }

    ioa_buf_init(&schema);
    ioa_buf_addf(&schema, "{\"type\":\"object\",\"properties\":{"
                "\"decision\":{\"type\":\"string\","
                "\"enum\":[\"end\",%s\"add_work\"]},",
                g->nparts ? "\"change_part\"," : "");

    if (g->nparts) {
        ioa_buf_addf(&schema, "\"part\":{\"type\":\"integer\","
                    "\"minimum\":1,\"maximum\":%zu},", g->nparts);
    }

    ioa_buf_adds(&schema, "\"text\":{\"type\":\"string\","
                "\"maxLength\":600},"
                "\"reason\":{\"type\":\"string\",\"maxLength\":400}},"
                "\"required\":[\"decision\",\"text\",\"reason\"],"
                "\"additionalProperties\":false}");

    ioa_buf_init(&parts);

    for (p = 0; p < g->nparts; p++) {
        ioa_buf_addf(&parts, "\n%zu. %s", p + 1, g->parts[p]);
    }

    system = ioa_sprintf(
        "You are %s, the coordinator of a team of AI agents working on a "
        "goal. A person in the goal's conversation has written to you; "
        "decide what the message asks. Answer \"end\" only when it asks to "
        "end the goal now, with text \"\". Answer \"change_part\" when it "
        "changes how one of the listed parts is done: its number in "
        "\"part\" and the part as it should now read in \"text\". Answer "
        "\"add_work\" when it asks for more work, the work in \"text\". "
        "A message that asks for more before ending (\"conclude with a "
        "table\") is work. Say why in \"reason\". Answer with one JSON "
        "object.", conf->name);
    user = ioa_sprintf("Goal: %s\n\nIts parts:%s\n\nThe message, from %s:\n"
                      "%s", g->goal, parts.len ? parts.data : "\n(none)",
                      sender, content);
    ioa_buf_free(&parts);

    rc = iw_llm_call(conf, g, "person", system, user, schema.data, &ans);
    free(system);
    free(user);
    ioa_buf_free(&schema);

    if (rc != IW_OK || ans == NULL) {
        return rc;
    }

    out->answer = ans;
    out->decision = ioa_json_get_str(ans, "decision");
    out->text = ioa_json_get_str(ans, "text");
    out->reason = ioa_json_get_str(ans, "reason");

    if (ioa_json_get_int(ans, "part", &out->part) != 0) {
        out->part = 0;
    }

    return IW_OK;
}


/* the LLM's planner; each of its decisions falls back on the built-in one
 * (planner.c) when the model gives nothing usable or the token budget is
 * spent */

const iw_planner_t  iw_planner_llm = {
    "llm",
    iw_llm_team,
    iw_llm_plan,
    iw_llm_review,
    iw_llm_person,
    iw_llm_conclusion
};
