/*
 * ioa-worker: the built-in planner, what takes the LLM's place when no
 * model is configured.  Deterministic: the same goal and the same registry
 * give the same team, the same tasks and the same texts, which is what
 * makes a conversation without a model testable.
 *
 * Decomposition.  The goal is cut into clauses: sentences (. ! ? ; and
 * newlines) and "then"-chained steps ("..., then ...").  Commas alone do
 * not cut: "poems about cats, dogs and birds" is one clause, not three.
 * Leading connectives ("and", "then", "finally", ...) are dropped, and so
 * are fragments without a word of two letters ("e.g." leaves nothing).
 * At most IW_PLAN_MAX_CLAUSES clauses; the rest are merged into the last.
 *
 * Matching.  Each clause is one capability query to the registry (BM25 over
 * the agents' descriptions, retrieve.lua), as IoA's LLM sends one query per
 * capability it needs.  Going through the clauses in order, a clause goes
 * to its best-ranked agent, who joins the team while there is room (at most
 * IW_PLAN_MAX_TEAM members, IoA's "no more than 4"); once the team is full
 * a clause goes to its best-ranked agent already in the team.  With
 * team_member_names the team is given and only the assignment is computed.
 * A clause nobody matches goes to the member with the least work (the
 * first such), and a given member that matched no clause gets the whole
 * goal, so every member has exactly one task and every clause an owner.
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


static void iw_plan_add_clause(iw_plan_t *plan, const char *s, size_t n);
static int iw_plan_member(iw_plan_t *plan, const char *name);
static void iw_plan_join(iw_plan_t *plan, iw_agent_t *a);
static int iw_word_at(const char *s, size_t n, size_t i, const char *w);


/* leading words that only chain clauses */
static const char  *iw_connectives[] = {
    "and", "then", "also", "finally", "next", "afterwards", "lastly",
    "first", "second", "third", NULL
};


static int
iw_word_at(const char *s, size_t n, size_t i, const char *w)
{
    size_t  k, len;

    len = strlen(w);

    if (i + len > n) {
        return 0;
    }

    for (k = 0; k < len; k++) {
        if (tolower((unsigned char) s[i + k]) != w[k]) {
            return 0;
        }
    }

    return 1;
}


static void
iw_plan_add_clause(iw_plan_t *plan, const char *s, size_t n)
{
    int      letters, word;
    char    *c, *merged;
    size_t   i, k, len;

    /* trim spaces and stray separators around the clause */
    while (n && (isspace((unsigned char) *s) || *s == ',' || *s == ':'
                 || *s == '-'))
    {
        s++;
        n--;
    }

    while (n && (isspace((unsigned char) s[n - 1]) || s[n - 1] == ','
                 || s[n - 1] == ':'))
    {
        n--;
    }

    /* drop leading connectives, repeatedly ("and then ...") */
    for (k = 0; iw_connectives[k]; k++) {
        len = strlen(iw_connectives[k]);

        if (iw_word_at(s, n, 0, iw_connectives[k])
            && len < n && (isspace((unsigned char) s[len]) || s[len] == ','))
        {
            s += len;
            n -= len;

            while (n && (isspace((unsigned char) *s) || *s == ',')) {
                s++;
                n--;
            }

            k = (size_t) -1;            /* start over */
        }
    }

    /* a clause needs one word of two letters or more (UTF-8 counts) */
    for (i = 0, letters = 0, word = 0; i < n && word < 2; i++) {
        if (isalnum((unsigned char) s[i]) || (unsigned char) s[i] >= 0x80) {
            word++;
            letters = 1;

        } else {
            word = 0;
        }
    }

    if (!letters || word < 2) {
        return;
    }

    c = iw_strndup(s, n);

    if (plan->nclauses == IW_PLAN_MAX_CLAUSES) {
        merged = iw_sprintf("%s; %s", plan->clauses[plan->nclauses - 1], c);
        free(plan->clauses[plan->nclauses - 1]);
        free(c);
        plan->clauses[plan->nclauses - 1] = merged;
        return;
    }

    plan->clauses[plan->nclauses++] = c;
}


void
iw_plan_clauses(const char *goal, iw_plan_t *plan)
{
    char    c;
    size_t  i, from, n, skip;

    memset(plan, 0, sizeof(*plan));
    plan->clauses = iw_alloc(IW_PLAN_MAX_CLAUSES * sizeof(char *));

    n = strlen(goal);

    for (i = 0, from = 0; i <= n; i++) {
        c = goal[i];
        skip = 0;

        if (c == '\0' || c == '\n' || c == ';' || c == '!' || c == '?') {
            skip = 1;

        } else if (c == '.'
                   && (i + 1 == n || isspace((unsigned char) goal[i + 1])))
        {
            skip = 1;

        } else if (c == ',' && iw_word_at(goal, n, i, ", then ")) {
            skip = 7;
            plan->then = 1;

        } else if (c == ' ' && iw_word_at(goal, n, i, " and then ")) {
            skip = 10;
            plan->then = 1;
        }

        if (skip) {
            iw_plan_add_clause(plan, goal + from, i - from);
            from = i + skip;
            i = from - 1;
        }
    }

    if (plan->nclauses == 0) {
        plan->clauses[plan->nclauses++] = iw_strdup(goal);
    }
}


static int
iw_plan_member(iw_plan_t *plan, const char *name)
{
    size_t  j;

    for (j = 0; j < plan->nteam; j++) {
        if (strcmp(plan->team[j].name, name) == 0) {
            return (int) j;
        }
    }

    return -1;
}


static void
iw_plan_join(iw_plan_t *plan, iw_agent_t *a)
{
    iw_agent_t  *m;

    plan->team = iw_realloc(plan->team, (plan->nteam + 1) * sizeof(iw_agent_t));
    m = &plan->team[plan->nteam++];
    m->name = iw_strdup(a->name);
    m->type = iw_strdup(a->type);
    m->desc = iw_strdup(a->desc);
    m->found = a->found;
    m->online = a->online;
    m->protocol = a->protocol;
}


/*
 * ranked[i]: the registry's agents for clause i, best first.  fixed: the
 * given team (team_member_names), or NULL to recruit.  allow_sub: the goal
 * may nest a team (team_up_depth >= 1): a clause whose best agent cannot
 * join a full team goes to a sub-team instead of to a member who is only
 * second best.  Leaves plan->nteam 0 when nobody matched anything (the
 * caller fails the goal).
 */

#define IW_PLAN_SUB  -2

void
iw_plan_pick(iw_plan_t *plan, iw_agents_t *ranked, iw_agents_t *fixed,
    const char *goal, const char *coordinator, int allow_sub)
{
    int        *owner, m;
    size_t      i, j, k, *load, least;
    iw_buf_t    b;

    if (fixed) {
        for (j = 0; j < fixed->n; j++) {
            if (iw_plan_member(plan, fixed->v[j].name) < 0) {
                iw_plan_join(plan, &fixed->v[j]);
            }
        }
    }

    owner = iw_alloc(plan->nclauses * sizeof(int));

    for (i = 0; i < plan->nclauses; i++) {
        owner[i] = -1;

        for (k = 0; k < ranked[i].n; k++) {
            m = iw_plan_member(plan, ranked[i].v[k].name);

            if (m < 0 && fixed == NULL && plan->nteam < IW_PLAN_MAX_TEAM) {
                iw_plan_join(plan, &ranked[i].v[k]);
                m = (int) plan->nteam - 1;
            }

            if (m < 0 && k == 0 && fixed == NULL && allow_sub) {
                owner[i] = IW_PLAN_SUB;
                break;
            }

            if (m >= 0) {
                owner[i] = m;
                break;
            }
        }
    }

    if (plan->nteam == 0) {
        free(owner);
        return;
    }

    load = iw_alloc(plan->nteam * sizeof(size_t));
    memset(load, 0, plan->nteam * sizeof(size_t));

    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] >= 0) {
            load[owner[i]]++;
        }
    }

    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] != -1) {
            continue;
        }

        for (j = 1, least = 0; j < plan->nteam; j++) {
            if (load[j] < load[least]) {
                least = j;
            }
        }

        owner[i] = (int) least;
        load[least]++;
    }

    plan->work = iw_alloc((plan->nteam + plan->nclauses + 1)
                          * sizeof(iw_assignment_t));
    plan->nwork = 0;
    plan->sync = plan->then;

    if (plan->sync) {
        /* "..., then ...": one task per clause, in order, each handed the
         * results before it; a member who matched nothing has no task */
        for (i = 0; i < plan->nclauses; i++) {
            plan->work[plan->nwork].agent = iw_strdup(owner[i] >= 0
                                            ? plan->team[owner[i]].name
                                            : coordinator);
            plan->work[plan->nwork].desc = iw_strdup(plan->clauses[i]);
            plan->work[plan->nwork].sub = (owner[i] == IW_PLAN_SUB);
            plan->nwork++;
        }

        free(load);
        free(owner);
        return;
    }

    /* in parallel: one task per member, its clauses joined */
    for (j = 0; j < plan->nteam; j++) {
        iw_buf_init(&b);

        for (i = 0; i < plan->nclauses; i++) {
            if (owner[i] != (int) j) {
                continue;
            }

            if (b.len) {
                iw_buf_adds(&b, "; ");
            }

            iw_buf_adds(&b, plan->clauses[i]);
        }

        if (b.len == 0) {
            iw_buf_adds(&b, goal);
        }

        plan->work[plan->nwork].agent = iw_strdup(plan->team[j].name);
        plan->work[plan->nwork].desc = iw_buf_take(&b);
        plan->work[plan->nwork].sub = 0;
        plan->nwork++;
    }

    /* and the clauses for a sub-team, as one sub-goal */
    iw_buf_init(&b);

    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] == IW_PLAN_SUB) {
            iw_buf_adds(&b, b.len ? " " : "");
            iw_buf_adds(&b, plan->clauses[i]);
            iw_buf_adds(&b, ".");
        }
    }

    if (b.len) {
        plan->work[plan->nwork].agent = iw_strdup(coordinator);
        plan->work[plan->nwork].desc = iw_buf_take(&b);
        plan->work[plan->nwork].sub = 1;
        plan->nwork++;

    } else {
        iw_buf_free(&b);
    }

    free(load);
    free(owner);
}


/* the LLM's assignment replaces the built-in one (work is taken over) */

void
iw_plan_set_work(iw_plan_t *plan, iw_assignment_t *work, size_t n, int sync)
{
    size_t  i;

    for (i = 0; i < plan->nwork; i++) {
        free(plan->work[i].agent);
        free(plan->work[i].desc);
    }

    free(plan->work);
    plan->work = work;
    plan->nwork = n;
    plan->sync = sync;
}


void
iw_plan_free(iw_plan_t *plan)
{
    size_t       i;
    iw_agents_t  team;

    for (i = 0; i < plan->nclauses; i++) {
        free(plan->clauses[i]);
    }

    if (plan->work) {
        for (i = 0; i < plan->nwork; i++) {
            free(plan->work[i].agent);
            free(plan->work[i].desc);
        }
    }

    team.v = plan->team;
    team.n = plan->nteam;
    iw_agents_free(&team);

    free(plan->clauses);
    free(plan->work);
    memset(plan, 0, sizeof(*plan));
}


/* IoA names a team with its LLM (at most 40 characters) unless skip_naming;
 * here: the goal's first 40 bytes, cut on a UTF-8 character boundary */

char *
iw_plan_team_name(const char *goal)
{
    size_t  n;

    n = strlen(goal);

    if (n > 40) {
        n = 40;

        while (n && ((unsigned char) goal[n] & 0xc0) == 0x80) {
            n--;
        }
    }

    while (n && isspace((unsigned char) goal[n - 1])) {
        n--;
    }

    return iw_strndup(goal, n);
}


/* ---- the texts of the coordinator's envelopes ---- */

char *
iw_plan_discussion(const char *goal, int sync, iw_task_t *t, size_t n)
{
    size_t    i;
    iw_buf_t  b;

    iw_buf_init(&b);

    if (sync) {
        iw_buf_addf(&b, "Team, our goal: %s\nI split it into %zu step%s, "
                    "one after the other, each building on the one before:",
                    goal, n, n == 1 ? "" : "s");

    } else {
        iw_buf_addf(&b, "Team, our goal: %s\nI split it into %zu task%s, "
                    "to run in parallel:", goal, n, n == 1 ? "" : "s");
    }

    for (i = 0; i < n; i++) {
        iw_buf_addf(&b, "\n- %s%s: %s", t[i].agent,
                    t[i].sub ? " (with a sub-team)" : "", t[i].desc);
    }

    iw_buf_adds(&b, "\nI will collect the results and conclude.");

    return iw_buf_take(&b);
}


/* what the coordinator says in the discussion for a member that only runs
 * tasks, from its registered description */

char *
iw_plan_behalf(const iw_agent_t *a, iw_task_t *t, size_t n)
{
    size_t    i, mine;
    iw_buf_t  b;

    iw_buf_init(&b);
    iw_buf_addf(&b, "On behalf of %s (%s%s%s): ", a->name,
                a->type && *a->type ? a->type : "agent",
                a->desc && *a->desc ? ", " : "",
                a->desc && *a->desc ? a->desc : "");

    for (i = 0, mine = 0; i < n; i++) {
        if (strcmp(t[i].agent, a->name) == 0) {
            iw_buf_addf(&b, "%s%s", mine++ ? "; " : "I can take on: ",
                        t[i].desc);
        }
    }

    if (mine == 0) {
        iw_buf_adds(&b, "I have no task in this plan and stand by.");

    } else {
        iw_buf_adds(&b, ". I will report the result when it is done.");
    }

    return iw_buf_take(&b);
}


char *
iw_plan_assignment(iw_task_t *t, size_t n)
{
    size_t    i;
    iw_buf_t  b;

    iw_buf_init(&b);
    iw_buf_adds(&b, "Tasks, to run in the background; report progress, then "
                "the result with the task_id:");

    for (i = 0; i < n; i++) {
        iw_buf_addf(&b, "\n- %s (task %s): %s", t[i].agent, t[i].task_id,
                    t[i].desc);
    }

    return iw_buf_take(&b);
}


/* step i of a sequence: its task, with what the steps before produced */

char *
iw_plan_sync_task(iw_task_t *t, size_t i)
{
    size_t    k;
    iw_buf_t  b;

    iw_buf_init(&b);
    iw_buf_adds(&b, t[i].desc);

    for (k = 0; k < i; k++) {
        if (iw_streq(t[k].status, "completed") && t[k].result
            && *t[k].result)
        {
            iw_buf_addf(&b, "%sStep %zu (%s): %s",
                        k == 0 ? "\n\nResults so far:\n" : "\n", k + 1,
                        t[k].agent, t[k].result);
        }
    }

    return iw_buf_take(&b);
}


char *
iw_plan_pause(iw_task_t *t, size_t n, long long timeout_ms)
{
    (void) t;

    return iw_sprintf("Pausing the discussion until the %zu task%s report%s "
                      "back (each has %lld s).", n, n == 1 ? "" : "s",
                      n == 1 ? "s" : "", timeout_ms / 1000);
}


char *
iw_plan_conclude(const char *ended, long long max_turns)
{
    if (iw_streq(ended, "max_turns")) {
        return iw_sprintf("The room reached max_turns (%lld); concluding "
                          "with what we have.", max_turns);
    }

    if (iw_streq(ended, "token_budget")) {
        return iw_strdup("The goal used up its token budget; concluding "
                         "with what we have.");
    }

    return iw_strdup("Every task has settled; concluding the discussion.");
}


/* the answer to the goal, assembled from the results in task order */

char *
iw_plan_conclusion(const char *goal, const char *ended, iw_task_t *t,
    size_t n, long long timeout_ms, long long max_turns)
{
    size_t    i, done;
    iw_buf_t  b;

    for (i = 0, done = 0; i < n; i++) {
        done += iw_streq(t[i].status, "completed");
    }

    iw_buf_init(&b);

    if (iw_streq(ended, "cancelled")) {
        iw_buf_adds(&b, "The goal was cancelled before it was achieved.\n");

    } else if (iw_streq(ended, "max_turns")) {
        iw_buf_addf(&b, "Concluded at the turn limit (max_turns %lld).\n",
                    max_turns);

    } else if (iw_streq(ended, "token_budget")) {
        iw_buf_adds(&b, "Concluded at the token budget.\n");
    }

    iw_buf_addf(&b, "Goal: %s\n%zu of %zu task%s completed.", goal, done, n,
                n == 1 ? "" : "s");

    for (i = 0; i < n; i++) {
        iw_buf_addf(&b, "\n- %s", t[i].agent);

        if (iw_streq(t[i].status, "completed")) {
            iw_buf_addf(&b, ": %s", t[i].result ? t[i].result : "");

        } else if (iw_streq(t[i].status, "failed")) {
            iw_buf_addf(&b, " (%s): %s", t[i].status,
                        t[i].result && *t[i].result ? t[i].result
                                                    : "no reason given");

        } else if (iw_streq(t[i].status, "timed_out")) {
            iw_buf_addf(&b, " (timed out): %s",
                        t[i].result && *t[i].result
                        ? t[i].result : "no result");

            if (t[i].result == NULL || *t[i].result == '\0') {
                iw_buf_addf(&b, " within %lld s", timeout_ms / 1000);
            }

        } else {
            iw_buf_addf(&b, " (%s): no result yet",
                        iw_streq(t[i].status, "in_progress") ? "in progress"
                        : t[i].status ? t[i].status : "pending");
        }
    }

    return iw_buf_take(&b);
}
