/*
 * ioa-worker: the forming phase of a goal: the team, the tasks, the room.
 *
 * iw_goal_plan() reads as its steps:
 *
 *   1. the text to plan from: a continuation's new input, else the goal
 *      (iw_form_text), cut into clauses (planner.c);
 *   2. a team given by name: the members of a room being continued, or
 *      team_member_names (iw_form_given); else, with a model, the team it
 *      recruits with IoA's two tools (llm_planner.c);
 *   3. the given names must be registered (iw_form_known);
 *   4. one capability query per clause and the assignment (iw_form_rank,
 *      iw_plan_pick): who takes which clause, or why nobody does;
 *   5. with a model, its plan replaces the built-in assignment when usable;
 *   6. the room (a new comm_id, or the continued one, iw_form_room) and
 *      everything above saved in one fsm write (iw_form_save), so that a
 *      worker taking over mid-way reuses the same room and task ids.
 *
 * Then iw_goal_form() creates the room exactly like /teamup and moves the
 * goal to running.  A goal that cannot be done (an unknown name, nobody
 * matching) fails here with an error that says why.
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* discovery: agents read per capability query; more than IoA's 3, so that
 * a close match with a better record can be found (iw_reg_rank) */
#define IW_FORM_RETRIEVE_LIMIT  10

/* agents read per clause for a given team: it ranks every member */
#define IW_FORM_RETRIEVE_GIVEN  50


static int iw_goal_plan(const iw_conf_t *conf, iw_goal_t *g, char **error);
static const char *iw_form_text(iw_goal_t *g);
static int iw_form_given(const iw_conf_t *conf, iw_goal_t *g,
    iw_agents_t *members, char ***names, size_t *n, char **error);
static int iw_form_known(const iw_conf_t *conf, char **names, size_t n,
    iw_agents_t *given, char **error);
static int iw_form_rank(const iw_conf_t *conf, iw_goal_t *g, iw_plan_t *plan,
    iw_agents_t *given, int online_only, int allow_sub);
static int iw_form_room(const iw_conf_t *conf, iw_goal_t *g, char **start);
static char *iw_form_team_json(const iw_conf_t *conf, iw_plan_t *plan);
static int iw_form_save(const iw_conf_t *conf, iw_goal_t *g,
    iw_plan_t *plan, char *discussion, const char *start);


int
iw_goal_form(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc;
    char        *error, *refused, *current, **names;
    size_t       i, n;
    yajl_val     team, m;
    const char  *name;

    if (g->comm_id == NULL) {
        error = NULL;
        rc = iw_goal_plan(conf, g, &error);

        if (rc != IW_OK) {
            free(error);
            return rc;
        }

        if (error) {
            rc = iw_goal_fail(conf, g, error);
            free(error);
            return rc;
        }
    }

    if (g->new_room) {
        team = ioa_json_parse(g->team, strlen(g->team));
        n = team && YAJL_IS_ARRAY(team) ? team->u.array.len : 0;
        names = ioa_alloc((n ? n : 1) * sizeof(char *));

        for (i = 0; i < n; i++) {
            m = team->u.array.values[i];
            name = ioa_json_get_str(m, "name");
            names[i] = (char *) (name ? name : "");
        }

        rc = iw_reg_teamup(conf, g->comm_id, g->team_name, names, n,
                           &refused);
        free(names);
        yajl_tree_free(team);

        if (rc == IW_ERROR) {
            return IW_ERROR;
        }

        if (rc == 1) {
            error = ioa_sprintf("teamup refused: %s", refused);
            free(refused);
            rc = iw_goal_fail(conf, g, error);
            free(error);
            return rc;
        }

        /* the person joins after the team: a repeat after a takeover is
         * harmless (SADD, and the hub ignores a second event) */
        if (g->person && iw_reg_person(conf, g->comm_id, g->team_name,
                                       g->person)
                         != IW_OK)
        {
            return IW_ERROR;
        }

        iw_info("goal %s: room %s formed%s%s", g->goal_id, g->comm_id,
                g->person ? ", with the person " : "",
                g->person ? g->person : "");
    }

    rc = iw_store_save(conf, g, "phase", iw_phase_name(IW_PHASE_RUNNING),
                       NULL);
    if (rc != IW_OK) {
        return rc;
    }

    g->phase = IW_PHASE_RUNNING;

    rc = iw_store_meta_state(conf, g->goal_id, "running", &current,
                             "comm_id", g->comm_id, NULL);
    if (rc == IW_ERROR) {
        return IW_ERROR;
    }

    free(current);

    if (rc == 1
        && iw_event_state(conf, g->goal_id, "running", g->comm_id, NULL, NULL)
           != IW_OK)
    {
        return IW_ERROR;
    }

    return IW_OK;
}


/* Chooses the team and the tasks and saves them; *error set: the goal
 * cannot be done (it fails). */

static int
iw_goal_plan(const iw_conf_t *conf, iw_goal_t *g, char **error)
{
    int          rc, online_only, allow_sub;
    char        *start, **names, **llm_names, *discussion;
    size_t       i, n;
    yajl_val     v;
    iw_plan_t    plan;
    iw_agents_t  given, members;
    const char  *text;

    memset(&given, 0, sizeof(given));
    memset(&members, 0, sizeof(members));
    names = NULL;
    llm_names = NULL;
    discussion = NULL;
    start = NULL;
    n = 0;

    text = iw_form_text(g);
    iw_plan_clauses(text, &plan, iw_form_is_task, (void *) conf);

    rc = iw_form_given(conf, g, &members, &names, &n, error);
    if (rc != IW_OK || *error) {
        goto done;
    }

    v = ioa_json_get(g->req, "online_only");
    online_only = !(v && YAJL_IS_FALSE(v));

    /* the LLM recruits with IoA's two tools; nobody usable: the built-in
     * planner recruits instead */
    if (names == NULL) {
        rc = g->planner->team(conf, g, text, online_only, &llm_names, &n);
        if (rc != IW_OK) {
            goto done;
        }

        names = n ? llm_names : NULL;
    }

    if (names) {
        rc = iw_form_known(conf, names, n, &given, error);
        if (rc != IW_OK || *error) {
            goto done;
        }
    }

    allow_sub = g->depth && *g->depth && atoll(g->depth) >= 1
                && !(g->cont_comm_id && *g->cont_comm_id);

    rc = iw_form_rank(conf, g, &plan, names ? &given : NULL, online_only,
                      allow_sub);
    if (rc != IW_OK) {
        goto done;
    }

    if (plan.nteam == 0) {
        *error = ioa_sprintf("no %sagent matches the goal%s%s; register "
                            "agents whose descriptions match it, or name "
                            "them in team_member_names",
                            online_only ? "online " : "",
                            plan.why[0] ? ": " : "",
                            plan.why[0] ? plan.why[0] : "");
        goto done;
    }

    /* the LLM assigns the work; invalid or no answer: the built-in one */
    rc = g->planner->plan(conf, g, text, allow_sub, &plan, &discussion);
    if (rc != IW_OK) {
        goto done;
    }

    rc = iw_form_room(conf, g, &start);
    if (rc != IW_OK) {
        goto done;
    }

    rc = iw_form_save(conf, g, &plan, discussion, start);
    discussion = NULL;

done:

    free(start);

    if (names != llm_names) {
        free(names);
    }

    for (i = 0; i < n && llm_names; i++) {
        free(llm_names[i]);
    }

    free(llm_names);
    free(discussion);
    iw_agents_free(&given);
    iw_agents_free(&members);
    iw_plan_free(&plan);

    return rc;
}


/* the text to plan from: a continuation's new input, else the goal */

static const char *
iw_form_text(iw_goal_t *g)
{
    yajl_val     cont;
    const char  *s;

    cont = ioa_json_get(g->req, "cont_input");

    if (g->cont_comm_id && *g->cont_comm_id && cont) {
        if (YAJL_IS_STRING(cont) && *YAJL_GET_STRING(cont)) {
            return YAJL_GET_STRING(cont);
        }

        if ((s = ioa_json_get_str(cont, "content")) && *s) {
            return s;
        }
    }

    return g->goal;
}


/*
 * A team given by name: a continued room's members (only the coordinator
 * that formed it may continue it) or team_member_names, deduplicated and
 * without the coordinator.  *names stays NULL when the team is not given;
 * its strings are borrowed from members or from the request.
 */

static int
iw_form_given(const iw_conf_t *conf, iw_goal_t *g, iw_agents_t *members,
    char ***names, size_t *n, char **error)
{
    int          is_member;
    char        *owner;
    size_t       i, j;
    yajl_val     v;
    const char  *s;

    if (g->cont_comm_id && *g->cont_comm_id) {
        if (iw_room_members(conf, g->cont_comm_id, members, &owner)
            != IW_OK)
        {
            return IW_ERROR;
        }

        /* a goal's room is its launcher's: another launcher (not an
         * administrator) does not continue it */
        if (owner && g->person && !g->launcher_admin
            && !iw_streq(owner, g->person))
        {
            *error = ioa_sprintf("room %s belongs to the goals of %s; only "
                                "that launcher or an administrator can "
                                "continue it", g->cont_comm_id, owner);
            free(owner);
            return IW_OK;
        }

        free(owner);

        for (i = 0, is_member = 0; i < members->n; i++) {
            is_member |= iw_streq(members->v[i].name, conf->name);
        }

        if (members->n == 0) {
            *error = ioa_sprintf("no room %s to continue", g->cont_comm_id);
            return IW_OK;
        }

        if (!is_member) {
            *error = ioa_sprintf("room %s was not formed by %s; only its "
                                "coordinator can continue it",
                                g->cont_comm_id, conf->name);
            return IW_OK;
        }

        *names = ioa_alloc(members->n * sizeof(char *));

        for (i = 0; i < members->n; i++) {
            if (!iw_streq(members->v[i].name, conf->name)) {
                (*names)[(*n)++] = members->v[i].name;
            }
        }

        return IW_OK;
    }

    v = ioa_json_get(g->req, "team_member_names");

    if (v == NULL || !YAJL_IS_ARRAY(v) || v->u.array.len == 0) {
        return IW_OK;
    }

    *names = ioa_alloc(v->u.array.len * sizeof(char *));

    for (i = 0; i < v->u.array.len; i++) {
        if (!YAJL_IS_STRING(v->u.array.values[i])) {
            continue;
        }

        s = YAJL_GET_STRING(v->u.array.values[i]);

        for (j = 0; j < *n && strcmp((*names)[j], s) != 0; j++) {
            /* void */
        }

        if (j == *n && strcmp(s, conf->name) != 0) {
            (*names)[(*n)++] = (char *) s;
        }
    }

    if (*n == 0) {
        *error = ioa_sprintf("team_member_names names nobody but the "
                            "coordinator %s", conf->name);
    }

    return IW_OK;
}


/* the given names, each registered; *error names those that are not */

static int
iw_form_known(const iw_conf_t *conf, char **names, size_t n,
    iw_agents_t *given, char **error)
{
    size_t    i;
    ioa_buf_t unknown;

    if (iw_reg_query(conf, names, n, given) != IW_OK) {
        return IW_ERROR;
    }

    ioa_buf_init(&unknown);

    for (i = 0; i < given->n; i++) {
        if (!given->v[i].found) {
            ioa_buf_adds(&unknown, unknown.len ? ", " : "");
            ioa_buf_adds(&unknown, given->v[i].name);
        }
    }

    if (unknown.len) {
        *error = ioa_sprintf("unknown agent%s in team_member_names: %s; "
                            "register %s with /register first",
                            strchr(unknown.data, ',') ? "s" : "",
                            unknown.data,
                            strchr(unknown.data, ',') ? "them" : "it");
    }

    ioa_buf_free(&unknown);

    return IW_OK;
}


/*
 * The registry's say on a clause boundary the text leaves open (planner.c,
 * "maybe"): the piece after it is a task of its own when an agent online
 * matches it well enough on its own (iw_plan_eligible), as it would be
 * matched as a clause.  A registry that does not answer cuts nothing: the
 * text stays as the person wrote it.
 */

int
iw_form_is_task(void *data, const char *piece, size_t n)
{
    int              ok;
    char            *text, *query;
    iw_agents_t      ranked;
    const iw_conf_t *conf = data;

    text = ioa_strndup(piece, n);
    query = iw_plan_query(text);
    free(text);

    ok = iw_reg_retrieve(conf, query, IW_FORM_RETRIEVE_LIMIT, 1, NULL,
                         &ranked)
         == IW_OK
         && iw_plan_eligible(&ranked, 0, conf->min_score);

    iw_agents_free(&ranked);

    free(query);

    return ok;
}


/* one capability query per clause, then the assignment; a given team
 * ranks everyone, online or not, and keeps its own members */

static int
iw_form_rank(const iw_conf_t *conf, iw_goal_t *g, iw_plan_t *plan,
    iw_agents_t *given, int online_only, int allow_sub)
{
    int           rc;
    char         *query, *salt;
    size_t        i;
    iw_agents_t  *ranked;

    rc = IW_OK;
    ranked = ioa_alloc((plan->nclauses + 1) * sizeof(iw_agents_t));
    memset(ranked, 0, (plan->nclauses + 1) * sizeof(iw_agents_t));

    for (i = 0; i < plan->nclauses && rc == IW_OK; i++) {
        /* a newcomer's turn is the goal's and the clause's (iw_reg_rank);
         * a given team is the launcher's choice, not a trial */
        query = iw_plan_query(plan->clauses[i]);
        salt = given ? NULL : ioa_sprintf("%s:%zu", g->goal_id, i);
        rc = iw_reg_retrieve(conf, query,
                             given ? IW_FORM_RETRIEVE_GIVEN
                                   : IW_FORM_RETRIEVE_LIMIT,
                             given ? 0 : online_only, salt, &ranked[i]);
        free(salt);
        free(query);
    }

    if (rc == IW_OK) {
        iw_plan_pick(plan, ranked, given, conf->name, allow_sub,
                     conf->min_score);
    }

    for (i = 0; i < plan->nclauses; i++) {
        iw_agents_free(&ranked[i]);
    }

    free(ranked);

    return rc;
}


/* the room: the continued one (read from its end), or a new comm_id */

static int
iw_form_room(const iw_conf_t *conf, iw_goal_t *g, char **start)
{
    char      hex[33];
    yajl_val  v;

    if (g->cont_comm_id && *g->cont_comm_id) {
        g->comm_id = ioa_strdup(g->cont_comm_id);
        g->new_room = 0;

        return iw_room_last_id(conf, g->comm_id, start) == IW_OK ? IW_OK
                                                                 : IW_ERROR;
    }

    ioa_uuid4_hex(hex);
    g->comm_id = ioa_strdup(hex);
    g->new_room = 1;
    *start = ioa_strdup("0-0");

    v = ioa_json_get(g->req, "skip_naming");
    free(g->team_name);
    g->team_name = (v && YAJL_IS_FALSE(v)) ? iw_plan_team_name(g->goal)
                                           : ioa_strdup("");

    return IW_OK;
}


/* the team as the envelopes carry it, the coordinator last */

static char *
iw_form_team_json(const iw_conf_t *conf, iw_plan_t *plan)
{
    size_t    i;
    ioa_buf_t team;

    ioa_buf_init(&team);
    ioa_buf_addc(&team, '[');

    for (i = 0; i <= plan->nteam; i++) {
        ioa_buf_adds(&team, i ? ",{\"name\":" : "{\"name\":");

        if (i < plan->nteam) {
            ioa_json_str(&team, plan->team[i].name);
            ioa_buf_adds(&team, ",\"type\":");
            ioa_json_str(&team, plan->team[i].type);
            ioa_buf_adds(&team, ",\"desc\":");
            ioa_json_str(&team, plan->team[i].desc);
            ioa_buf_addf(&team, ",\"protocol\":%s",
                        plan->team[i].protocol ? "true" : "false");

        } else {
            ioa_json_str(&team, conf->name);
            ioa_buf_adds(&team, ",\"type\":\"Human Assistant\",\"desc\":"
                        "\"ioa's built-in coordinator\",\"protocol\":true");
        }

        ioa_buf_addc(&team, '}');
    }

    ioa_buf_addc(&team, ']');

    return ioa_buf_take(&team);
}


/* the plan, persisted in one fsm write: room, team, tasks, parts (the
 * discussion text is taken over) */

static int
iw_form_save(const iw_conf_t *conf, iw_goal_t *g, iw_plan_t *plan,
    char *discussion, const char *start)
{
    int       rc;
    char     *tasks, *parts, hex[33];
    size_t    i;
    ioa_buf_t who;

    free(g->team);
    g->team = iw_form_team_json(conf, plan);

    g->tasks = ioa_alloc((plan->nwork + 1) * sizeof(iw_task_t));
    g->ntasks = plan->nwork;

    for (i = 0; i < plan->nwork; i++) {
        ioa_uuid4_hex(hex);
        memset(&g->tasks[i], 0, sizeof(iw_task_t));
        g->tasks[i].agent = ioa_strdup(plan->work[i].agent);
        g->tasks[i].task_id = ioa_strdup(hex);
        g->tasks[i].desc = ioa_strdup(plan->work[i].desc);
        g->tasks[i].status = ioa_strdup("pending");
        g->tasks[i].sub = plan->work[i].sub;
        g->tasks[i].parts = plan->work[i].parts;
    }

    iw_store_free_parts(g);
    g->parts = ioa_alloc((plan->nclauses + 1) * sizeof(char *));
    g->part_why = ioa_alloc((plan->nclauses + 1) * sizeof(char *));
    g->nparts = plan->nclauses;

    for (i = 0; i < plan->nclauses; i++) {
        g->parts[i] = ioa_strdup(plan->clauses[i]);
        g->part_why[i] = plan->why[i] ? ioa_strdup(plan->why[i]) : NULL;
    }

    g->sync = plan->sync;
    free(g->discussion);
    g->discussion = discussion;

    free(g->last_id);
    g->last_id = ioa_strdup(start);
    g->turns = 0;
    g->step = 0;
    g->intent = 0;

    tasks = iw_store_tasks_json(g);
    parts = iw_store_parts_json(g);

    rc = iw_store_save(conf, g, "comm_id", g->comm_id,
                       "new_room", g->new_room ? "1" : "0",
                       "team_name", g->team_name, "team", g->team,
                       "tasks", tasks, "parts", parts,
                       "last_id", g->last_id, "turns", "0",
                       "step", "0", "intent", "0", "deadline", "0",
                       "sync", g->sync ? "1" : "0",
                       "discussion", g->discussion ? g->discussion : "",
                       NULL);
    free(tasks);
    free(parts);

    if (rc != IW_OK) {
        return rc;
    }

    ioa_buf_init(&who);

    for (i = 0; i < g->ntasks; i++) {
        ioa_buf_addf(&who, "%s%s%s", i ? ", " : "", g->tasks[i].agent,
                    g->tasks[i].sub ? " (sub-team)" : "");
    }

    iw_info("goal %s: tasks for %s in room %s (%zu clause%s, %s)",
            g->goal_id, who.data ? who.data : "nobody", g->comm_id,
            plan->nclauses, plan->nclauses == 1 ? "" : "s",
            g->sync ? "one after the other" : "in parallel");
    ioa_buf_free(&who);

    return IW_OK;
}
