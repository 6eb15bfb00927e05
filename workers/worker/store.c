/*
 * ioa-worker: a goal's record in Redis.
 *
 *   P{goal:<id>}:meta   written by nginx (goal, request, state "queued",
 *                       launched_by: the goal's person, person.c),
 *                       kept current by the worker (state, comm_id,
 *                       conclusion, error, updated_at, tokens) and read by
 *                       GET /goals/<id>.
 *   P{goal:<id>}:fsm    the worker's state machine, everything another
 *                       worker needs to resume the goal:
 *       phase           "" (new) forming running concluding
 *       comm_id         the room, chosen before it is created
 *       new_room        "1" when this goal creates the room (not continuing)
 *       team_name       "" when the team has no name
 *       team            JSON [{"name","type","desc","protocol"}], the
 *                       coordinator last
 *       tasks           JSON [{"agent","task_id","task_desc","round",
 *                       "parts","sub","child","queued"}] (round: the round
 *                       it belongs to, 0 when absent; parts: the goal's
 *                       parts it covers, a bit each; sub: a sub-team does
 *                       it, as the sub-goal child; queued: its job is
 *                       queued)
 *       parts           JSON [{"text","why"}]: the goal's parts (clauses,
 *                       or the LLM's tasks); why: no agent has it, and why
 *       decision:<r>    JSON: the decision taken after round r (decide.c)
 *       inbox_last      the last message read from P{goal:<id>}:inbox
 *       requests        JSON [{"sender","content"}]: a person's requests
 *                       for the next review ("" none; person.c)
 *       said            JSON [{"id","sender","content"}]: the person's
 *                       words in the room, decided in the same step
 *                       ("" none; person.c)
 *       stopped_by      "sender: message" when a person ended the goal,
 *                       or what a followed proposal to conclude said
 *       proposals       JSON [{"sid","sender","type","content","tasks"}]:
 *                       the members' proposals in the discussion
 *       proposal_answer JSON: the coordinator's answer (proposal.c)
 *       ask             JSON: the review's latest question to a member
 *                       (decide.c)
 *       sync            "1": the tasks run one after the other
 *       discussion      the LLM's plan text (absent: the built-in text)
 *       spoke           ",a,b," protocol speakers who took their turn
 *       turn_deadline   ms (Redis clock) when their turns end
 *       deadline        ms (Redis clock) after which open tasks time out
 *       deadline_step   the step (assignment) the deadline belongs to
 *       prompt_tokens, completion_tokens    LLM usage of the goal
 *       planner         builtin, llm
 *       st:<task_id>    pending in_progress completed failed timed_out
 *                       cancelled
 *       res:<task_id>   the task's result text
 *       lat:<task_id>   ms from its assignment to its result (0: unknown)
 *       last_id         the last room entry processed
 *       turns           envelopes in the room from the goal's start to last_id
 *       step            the last coordinator step known to be in the room
 *       intent          the step being posted (0: none), see goal.c
 *       ended           why the goal concludes: settled max_turns cancelled
 *       conclusion      the conclusion, fixed before it is posted
 *
 *       owner           the worker that holds the goal (fsm_save.lua)
 *
 * Progress (last_id, turns, task states, step) is always written with one
 * HSET, so the record never holds a position without the task states read
 * up to it.  Every fsm write is fenced by the owner field (fsm_save.lua):
 * a worker that lost the goal cannot write over its successor.  Both keys
 * share the {goal:<id>} hash tag.
 *
 * The goal index, P{goals}:... (the hub's goal_index.lua, which documents
 * its keys), follows the meta state: every state this worker writes is
 * written there right after (iw_store_meta_state), so GET /goals and
 * /metrics list and count goals from one slot.  It is written after the
 * record, never before, and only moves forward, so it can lag the record
 * (a crash between the two: the goal's next state, or its takeover, brings
 * it level) but never be ahead of it.  A goal the index has not seen (its
 * launch's write was lost) is added with what the loaded goal tells.
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


static void iw_store_field(iw_goal_t *g, const char *k, const char *v,
    size_t vlen);
static void iw_store_parse_parts(iw_goal_t *g, const char *json, size_t len);
static iw_task_t *iw_store_task(iw_goal_t *g, const char *task_id);


/* the goal this worker has loaded: what the index is told about a goal it
 * has not seen */
static const iw_goal_t  *iw_store_loaded;


static void
iw_store_replace(char **dst, const char *v, size_t n)
{
    free(*dst);
    *dst = ioa_strndup(v, n);
}


static iw_task_t *
iw_store_task(iw_goal_t *g, const char *task_id)
{
    size_t  i;

    for (i = 0; i < g->ntasks; i++) {
        if (strcmp(g->tasks[i].task_id, task_id) == 0) {
            return &g->tasks[i];
        }
    }

    return NULL;
}


static int
iw_store_parse_tasks(iw_goal_t *g, const char *json, size_t len)
{
    size_t       i;
    yajl_val     doc, t;
    yajl_val     v;
    long long    n;
    const char  *agent, *id, *desc, *child;

    doc = ioa_json_parse(json, len);

    if (doc == NULL || !YAJL_IS_ARRAY(doc)) {
        yajl_tree_free(doc);
        return IW_ERROR;
    }

    g->tasks = ioa_alloc(doc->u.array.len * sizeof(iw_task_t));
    g->ntasks = 0;

    for (i = 0; i < doc->u.array.len; i++) {
        t = doc->u.array.values[i];
        agent = ioa_json_get_str(t, "agent");
        id = ioa_json_get_str(t, "task_id");
        desc = ioa_json_get_str(t, "task_desc");

        if (agent == NULL || id == NULL || desc == NULL) {
            continue;
        }

        g->tasks[g->ntasks].agent = ioa_strdup(agent);
        g->tasks[g->ntasks].task_id = ioa_strdup(id);
        g->tasks[g->ntasks].desc = ioa_strdup(desc);
        g->tasks[g->ntasks].status = ioa_strdup("pending");
        g->tasks[g->ntasks].result = NULL;
        v = ioa_json_get(t, "sub");
        g->tasks[g->ntasks].sub = v && YAJL_IS_TRUE(v);
        child = ioa_json_get_str(t, "child");
        g->tasks[g->ntasks].child = child && *child ? ioa_strdup(child) : NULL;
        v = ioa_json_get(t, "queued");
        g->tasks[g->ntasks].queued = v && YAJL_IS_TRUE(v);
        g->tasks[g->ntasks].round = ioa_json_get_int(t, "round", &n) == 0
                                    && n > 0 && n < IW_MAX_ROUNDS
                                    ? (int) n : 0;
        g->tasks[g->ntasks].parts = ioa_json_get_int(t, "parts", &n) == 0
                                    && n > 0 ? (unsigned) n : 0;

        if (g->tasks[g->ntasks].round > g->round) {
            g->round = g->tasks[g->ntasks].round;
        }

        g->tasks[g->ntasks].dirty = 0;
        g->tasks[g->ntasks].offline_since = 0;
        g->tasks[g->ntasks].latency_ms = 0;
        g->ntasks++;
    }

    yajl_tree_free(doc);

    return IW_OK;
}


static void
iw_store_parse_parts(iw_goal_t *g, const char *json, size_t len)
{
    size_t       i;
    yajl_val     doc, p;
    const char  *text, *why;

    doc = ioa_json_parse(json, len);

    if (doc == NULL || !YAJL_IS_ARRAY(doc)) {
        yajl_tree_free(doc);
        return;
    }

    iw_store_free_parts(g);
    g->parts = ioa_alloc((doc->u.array.len + 1) * sizeof(char *));
    g->part_why = ioa_alloc((doc->u.array.len + 1) * sizeof(char *));

    for (i = 0; i < doc->u.array.len && i < IW_PLAN_MAX_CLAUSES; i++) {
        p = doc->u.array.values[i];
        text = ioa_json_get_str(p, "text");
        why = ioa_json_get_str(p, "why");
        g->parts[g->nparts] = ioa_strdup(text ? text : "");
        g->part_why[g->nparts] = why && *why ? ioa_strdup(why) : NULL;
        g->nparts++;
    }

    yajl_tree_free(doc);
}


void
iw_store_free_parts(iw_goal_t *g)
{
    size_t  i;

    for (i = 0; i < g->nparts; i++) {
        free(g->parts[i]);
        free(g->part_why[i]);
    }

    free(g->parts);
    free(g->part_why);
    g->parts = NULL;
    g->part_why = NULL;
    g->nparts = 0;
}


char *
iw_store_parts_json(iw_goal_t *g)
{
    size_t    i;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_addc(&b, '[');

    for (i = 0; i < g->nparts; i++) {
        ioa_buf_adds(&b, i ? ",{\"text\":" : "{\"text\":");
        ioa_json_str(&b, g->parts[i]);
        ioa_buf_adds(&b, ",\"why\":");
        ioa_json_str(&b, g->part_why[i] ? g->part_why[i] : "");
        ioa_buf_addc(&b, '}');
    }

    ioa_buf_addc(&b, ']');

    return ioa_buf_take(&b);
}


static void
iw_store_field(iw_goal_t *g, const char *k, const char *v, size_t vlen)
{
    int         r;
    iw_task_t  *t;

    if (strcmp(k, "phase") == 0) {
        g->phase = iw_phase_of(v);

    } else if (strcmp(k, "comm_id") == 0) {
        iw_store_replace(&g->comm_id, v, vlen);

    } else if (strcmp(k, "new_room") == 0) {
        g->new_room = (vlen == 1 && v[0] == '1');

    } else if (strcmp(k, "team_name") == 0) {
        iw_store_replace(&g->team_name, v, vlen);

    } else if (strcmp(k, "conclusion") == 0) {
        iw_store_replace(&g->conclusion, v, vlen);

    } else if (strcmp(k, "team") == 0) {
        iw_store_replace(&g->team, v, vlen);

    } else if (strcmp(k, "deadline") == 0) {
        g->deadline = atoll(v);

    } else if (strcmp(k, "deadline_step") == 0) {
        g->deadline_step = atoll(v);

    } else if (strcmp(k, "turn_deadline") == 0) {
        g->turn_deadline = atoll(v);

    } else if (strcmp(k, "sync") == 0) {
        g->sync = (vlen == 1 && v[0] == '1');

    } else if (strcmp(k, "discussion") == 0) {
        if (vlen) {
            iw_store_replace(&g->discussion, v, vlen);
        }

    } else if (strcmp(k, "spoke") == 0) {
        iw_store_replace(&g->spoke, v, vlen);

    } else if (strcmp(k, "prompt_tokens") == 0) {
        g->prompt_tokens = atoll(v);

    } else if (strcmp(k, "completion_tokens") == 0) {
        g->completion_tokens = atoll(v);

    } else if (strcmp(k, "last_id") == 0) {
        iw_store_replace(&g->last_id, v, vlen);

    } else if (strcmp(k, "turns") == 0) {
        g->turns = atoll(v);

    } else if (strcmp(k, "step") == 0) {
        g->step = atoi(v);

    } else if (strcmp(k, "intent") == 0) {
        g->intent = atoi(v);

    } else if (strcmp(k, "ended") == 0) {
        iw_store_replace(&g->ended, v, vlen);

    } else if (strcmp(k, "inbox_last") == 0) {
        iw_store_replace(&g->inbox_last, v, vlen);

    } else if (strcmp(k, "requests") == 0) {
        if (vlen) {
            iw_store_replace(&g->requests, v, vlen);
        }

    } else if (strcmp(k, "ask") == 0) {
        if (vlen) {
            iw_store_replace(&g->ask, v, vlen);
        }

    } else if (strcmp(k, "proposals") == 0) {
        if (vlen) {
            iw_store_replace(&g->proposals, v, vlen);
        }

    } else if (strcmp(k, "proposal_answer") == 0) {
        if (vlen) {
            iw_store_replace(&g->proposal_answer, v, vlen);
        }

    } else if (strcmp(k, "said") == 0) {
        if (vlen) {
            iw_store_replace(&g->said, v, vlen);
        }

    } else if (strcmp(k, "stopped_by") == 0) {
        if (vlen) {
            iw_store_replace(&g->stopped_by, v, vlen);
        }

    } else if (strcmp(k, "parts") == 0) {
        iw_store_parse_parts(g, v, vlen);

    } else if (strncmp(k, "decision:", 9) == 0) {
        r = atoi(k + 9);

        if (r >= 0 && r < IW_MAX_ROUNDS) {
            iw_store_replace(&g->decision[r], v, vlen);
        }

    } else if (strncmp(k, "st:", 3) == 0) {
        t = iw_store_task(g, k + 3);
        if (t) {
            iw_store_replace(&t->status, v, vlen);
        }

    } else if (strncmp(k, "res:", 4) == 0) {
        t = iw_store_task(g, k + 4);
        if (t) {
            iw_store_replace(&t->result, v, vlen);
        }

    } else if (strncmp(k, "lat:", 4) == 0) {
        t = iw_store_task(g, k + 4);
        if (t) {
            t->latency_ms = atoll(v);
        }
    }
}


/* IW_OK with g->state NULL when the goal does not exist */

int
iw_store_load(const iw_conf_t *conf, iw_goal_t *g)
{
    size_t       i;
    long long    n;
    const char  *cont;
    redisReply  *r, *k, *v;

    r = iw_redis_cmd("HGETALL %s{goal:%s}:meta", conf->prefix, g->goal_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return IW_ERROR;
    }

    for (i = 0; i + 1 < r->elements; i += 2) {
        k = r->element[i];
        v = r->element[i + 1];

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            continue;
        }

        if (strcmp(k->str, "state") == 0) {
            iw_store_replace(&g->state, v->str, v->len);

        } else if (strcmp(k->str, "goal") == 0) {
            iw_store_replace(&g->goal, v->str, v->len);

        } else if (strcmp(k->str, "request") == 0) {
            iw_store_replace(&g->request, v->str, v->len);

        } else if (strcmp(k->str, "parent") == 0) {
            iw_store_replace(&g->parent, v->str, v->len);

        } else if (strcmp(k->str, "depth") == 0) {
            iw_store_replace(&g->depth, v->str, v->len);

        } else if (strcmp(k->str, "created_at") == 0) {
            g->created_at = atoll(v->str);

        } else if (strcmp(k->str, "launched_by") == 0 && v->len) {
            iw_store_replace(&g->person, v->str, v->len);

        } else if (strcmp(k->str, "launcher_admin") == 0) {
            g->launcher_admin = iw_streq(v->str, "1");
        }
    }

    freeReplyObject(r);

    if (g->state == NULL) {
        return IW_OK;
    }

    iw_store_loaded = g;

    if (g->goal == NULL) {
        g->goal = ioa_strdup("");
    }

    if (g->request) {
        g->req = ioa_json_parse(g->request, strlen(g->request));
    }

    /* a continuation names its room in the request; the meta's comm_id is
     * the goal's own room once it runs, which is no continuation (read as
     * one, a goal loaded again would take only its team's members) */
    cont = ioa_json_get_str(g->req, "comm_id");
    if (cont && *cont) {
        g->cont_comm_id = ioa_strdup(cont);
    }

    if (ioa_json_get_int(g->req, "max_turns", &n) == 0 && n > 0) {
        g->max_turns = n;
    }

    /* "input_timeout_s": the review may ask the goal's person (decide.c) */
    if (ioa_json_get_int(g->req, "input_timeout_s", &n) == 0 && n > 0) {
        g->input_timeout_ms = n * 1000;
    }

    /* the goal's deadline: its own "deadline_s", within --goal-timeout */
    if (ioa_json_get_int(g->req, "deadline_s", &n) == 0 && n > 0) {
        g->deadline_ms = n * 1000;
    }

    if (conf->goal_timeout_ms
        && (g->deadline_ms == 0 || g->deadline_ms > conf->goal_timeout_ms))
    {
        g->deadline_ms = conf->goal_timeout_ms;
    }

    r = iw_redis_cmd("HGETALL %s{goal:%s}:fsm", conf->prefix, g->goal_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return IW_ERROR;
    }

    /* the task list first: the st: and res: fields refer to it */
    for (i = 0; i + 1 < r->elements; i += 2) {
        k = r->element[i];
        v = r->element[i + 1];

        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING
            && strcmp(k->str, "tasks") == 0
            && iw_store_parse_tasks(g, v->str, v->len) != IW_OK)
        {
            iw_error("goal %s: the fsm's task list is not valid JSON",
                     g->goal_id);
        }
    }

    for (i = 0; i + 1 < r->elements; i += 2) {
        k = r->element[i];
        v = r->element[i + 1];

        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING) {
            iw_store_field(g, k->str, v->str, v->len);
        }
    }

    freeReplyObject(r);

    if (g->ended == NULL) {
        g->ended = ioa_strdup("");
    }

    if (g->team_name == NULL) {
        g->team_name = ioa_strdup("");
    }

    if (g->last_id == NULL) {
        g->last_id = ioa_strdup("0-0");
    }

    if (g->spoke == NULL) {
        g->spoke = ioa_strdup(",");
    }

    /* a goal planned before parts were recorded: each task is a part */
    if (g->nparts == 0 && g->ntasks > 0) {
        g->parts = ioa_alloc(g->ntasks * sizeof(char *));
        g->part_why = ioa_alloc(g->ntasks * sizeof(char *));

        for (i = 0; i < g->ntasks && i < IW_PLAN_MAX_CLAUSES; i++) {
            g->parts[i] = ioa_strdup(g->tasks[i].desc);
            g->part_why[i] = NULL;
            g->tasks[i].parts = 1u << i;
            g->nparts++;
        }
    }

    return IW_OK;
}


/*
 * Every write to the fsm goes through fsm_save.lua with this worker as the
 * owner: IW_OK, IW_LOST when another worker owns the goal now (the caller
 * lets go), IW_ERROR.  a holds the field, value pairs.
 */

static int
iw_store_write(const iw_conf_t *conf, iw_goal_t *g, int take, iw_args_t *a)
{
    int          i, rc;
    iw_args_t    e;
    redisReply  *r;

    iw_args_init(&e);
    iw_args_addf(&e, "%s{goal:%s}:fsm", conf->prefix, g->goal_id);
    iw_args_add(&e, conf->consumer);
    iw_args_add(&e, take ? "1" : "0");

    for (i = 0; i < a->n; i++) {
        iw_args_addn(&e, a->v[i], a->len[i]);
    }

    r = iw_redis_eval(IW_LUA_FSM_SAVE, 1, &e);
    iw_args_free(&e);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_INTEGER) {
        iw_error("fsm_save.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    rc = r->integer == 1 ? IW_OK : IW_LOST;
    freeReplyObject(r);

    if (rc == IW_LOST) {
        iw_warn("goal %s: another worker owns its state now; leaving it",
                g->goal_id);
    }

    return rc;
}


/* the job was just handed to this worker: its writes win from now on */

int
iw_store_own(const iw_conf_t *conf, iw_goal_t *g)
{
    int        rc;
    iw_args_t  a;

    iw_args_init(&a);
    rc = iw_store_write(conf, g, 1, &a);
    iw_args_free(&a);

    return rc;
}


/* NULL-terminated name, value pairs */

int
iw_store_save(const iw_conf_t *conf, iw_goal_t *g, ...)
{
    int          rc;
    va_list      ap;
    iw_args_t    a;
    const char  *k, *v;

    iw_args_init(&a);

    va_start(ap, g);

    while ((k = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        iw_args_add(&a, k);
        iw_args_add(&a, v);
    }

    va_end(ap);

    rc = iw_store_write(conf, g, 0, &a);
    iw_args_free(&a);

    return rc;
}


int
iw_store_save_progress(const iw_conf_t *conf, iw_goal_t *g)
{
    int        rc;
    size_t     i;
    iw_args_t  a;

    iw_args_init(&a);
    iw_args_add(&a, "last_id");
    iw_args_add(&a, g->last_id);
    iw_args_add(&a, "turns");
    iw_args_addf(&a, "%lld", g->turns);
    iw_args_add(&a, "step");
    iw_args_addf(&a, "%d", g->step);
    iw_args_add(&a, "intent");
    iw_args_addf(&a, "%d", g->intent);

    if (g->conclusion) {
        iw_args_add(&a, "conclusion");
        iw_args_add(&a, g->conclusion);
    }

    /* what the person said in the room, with the position after it: read
     * again by a successor only if neither was written */
    if (g->person_said) {
        iw_args_add(&a, "said");
        iw_args_add(&a, g->said ? g->said : "");
    }

    for (i = 0; i < g->ntasks; i++) {
        if (!g->tasks[i].dirty) {
            continue;
        }

        iw_args_addf(&a, "st:%s", g->tasks[i].task_id);
        iw_args_add(&a, g->tasks[i].status);
        iw_args_addf(&a, "res:%s", g->tasks[i].task_id);
        iw_args_add(&a, g->tasks[i].result ? g->tasks[i].result : "");
        iw_args_addf(&a, "lat:%s", g->tasks[i].task_id);
        iw_args_addf(&a, "%lld", g->tasks[i].latency_ms);
    }

    rc = iw_store_write(conf, g, 0, &a);
    iw_args_free(&a);

    if (rc != IW_OK) {
        return rc;
    }

    for (i = 0; i < g->ntasks; i++) {
        g->tasks[i].dirty = 0;
    }

    g->person_said = 0;

    return IW_OK;
}


/*
 * meta_state.lua: state plus NULL-terminated name, value pairs, and
 * updated_at.  Returns 1 written, 0 refused (*current then says why:
 * "cancelling", a final state, or "" for a goal that is gone).
 */

int
iw_store_meta_state(const iw_conf_t *conf, const char *goal_id,
    const char *state, char **current, ...)
{
    int               rc;
    va_list           ap;
    iw_args_t         a;
    const char       *k, *v;
    redisReply       *r;
    const iw_goal_t  *g;

    iw_args_init(&a);
    iw_args_addf(&a, "%s{goal:%s}:meta", conf->prefix, goal_id);
    iw_args_add(&a, state);
    iw_args_add(&a, "updated_at");
    iw_args_addf(&a, "%lld", ioa_wall_ms());

    va_start(ap, current);

    while ((k = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        iw_args_add(&a, k);
        iw_args_add(&a, v);
    }

    va_end(ap);

    r = iw_redis_eval(IW_LUA_META_STATE, 1, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_INTEGER
        || r->element[1]->type != REDIS_REPLY_STRING)
    {
        iw_error("meta_state.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    rc = r->element[0]->integer == 1;

    if (current) {
        *current = ioa_strdup(r->element[1]->str);
    }

    freeReplyObject(r);

    if (rc != 1) {
        return rc;
    }

    /* meta_state.lua answers 1 to one writer only: a goal ended here is
     * counted once, fleet-wide */
    if (iw_state_final(state)) {
        iw_stats_addf(1, "goals:%s", state);
    }

    if (iw_store_loaded && iw_streq(iw_store_loaded->goal_id, goal_id)) {
        g = iw_store_loaded;

        if (iw_store_index(conf, goal_id, state, g->goal, g->parent,
                           g->created_at)
            != IW_OK)
        {
            return IW_ERROR;
        }

    } else if (iw_store_index(conf, goal_id, state, NULL, NULL, 0) != IW_OK) {
        return IW_ERROR;
    }

    return rc;
}


/*
 * goal_index.lua: the goal's state in the index; goal, parent and
 * created_at only matter to a goal the index has not seen (NULL, 0:
 * unknown).  A refusal (the index is past that state) is no error.
 */

int
iw_store_index(const iw_conf_t *conf, const char *goal_id, const char *state,
    const char *goal, const char *parent, long long created_at)
{
    iw_args_t    a;
    redisReply  *r;

    iw_args_init(&a);
    iw_args_add(&a, conf->goals_base);
    iw_args_add(&a, goal_id);
    iw_args_add(&a, state);
    iw_args_addf(&a, "%lld", conf->goal_retention_ms);

    if (created_at > 0) {
        iw_args_addf(&a, "%lld", created_at);

    } else {
        iw_args_add(&a, "");
    }

    iw_args_add(&a, goal ? goal : "");
    iw_args_add(&a,
                iw_store_loaded && iw_streq(iw_store_loaded->goal_id, goal_id)
                && iw_store_loaded->person ? iw_store_loaded->person : "");
    iw_args_add(&a, parent ? parent : "");

    r = iw_redis_eval(IW_LUA_GOAL_INDEX, 1, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("goal_index.lua: %s", r->str);
    }

    freeReplyObject(r);

    return IW_OK;
}


/* *value NULL when the field or the goal does not exist */

int
iw_store_meta_get(const iw_conf_t *conf, const char *goal_id,
    const char *field, char **value)
{
    redisReply  *r;

    *value = NULL;

    r = iw_redis_cmd("HGET %s{goal:%s}:meta %s", conf->prefix, goal_id,
                     field);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_STRING) {
        *value = ioa_strndup(r->str, r->len);
    }

    freeReplyObject(r);

    return IW_OK;
}


char *
iw_store_tasks_json(iw_goal_t *g)
{
    size_t    i;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_addc(&b, '[');

    for (i = 0; i < g->ntasks; i++) {
        if (i) {
            ioa_buf_addc(&b, ',');
        }

        ioa_buf_adds(&b, "{\"agent\":");
        ioa_json_str(&b, g->tasks[i].agent);
        ioa_buf_adds(&b, ",\"task_id\":");
        ioa_json_str(&b, g->tasks[i].task_id);
        ioa_buf_adds(&b, ",\"task_desc\":");
        ioa_json_str(&b, g->tasks[i].desc);

        ioa_buf_addf(&b, ",\"round\":%d,\"parts\":%u", g->tasks[i].round,
                    g->tasks[i].parts);

        if (g->tasks[i].sub) {
            ioa_buf_adds(&b, ",\"sub\":true,\"child\":");
            ioa_json_str_or_null(&b, g->tasks[i].child);
            ioa_buf_addf(&b, ",\"queued\":%s",
                        g->tasks[i].queued ? "true" : "false");
        }

        ioa_buf_addc(&b, '}');
    }

    ioa_buf_addc(&b, ']');

    return ioa_buf_take(&b);
}


void
iw_goal_free(iw_goal_t *g)
{
    size_t  i;

    if (iw_store_loaded == g) {
        iw_store_loaded = NULL;
    }

    for (i = 0; i < g->ntasks; i++) {
        free(g->tasks[i].agent);
        free(g->tasks[i].task_id);
        free(g->tasks[i].desc);
        free(g->tasks[i].status);
        free(g->tasks[i].result);
        free(g->tasks[i].child);
    }

    free(g->tasks);
    iw_store_free_parts(g);

    for (i = 0; i < IW_MAX_ROUNDS; i++) {
        free(g->decision[i]);
    }

    free(g->inbox_last);
    free(g->requests);
    free(g->stopped_by);
    free(g->said);
    free(g->proposals);
    free(g->proposal_answer);
    free(g->ask);
    free(g->state);
    free(g->goal);
    free(g->request);
    yajl_tree_free(g->req);
    free(g->parent);
    free(g->depth);
    free(g->cont_comm_id);
    free(g->person);
    free(g->comm_id);
    free(g->team_name);
    free(g->team);
    free(g->last_id);
    free(g->ended);
    free(g->conclusion);
    free(g->discussion);
    free(g->spoke);

    memset(g, 0, sizeof(*g));
}


/* a goal in this state has ended: nothing more happens to it */

int
iw_state_final(const char *state)
{
    return iw_streq(state, "concluded") || iw_streq(state, "failed")
           || iw_streq(state, "cancelled");
}


/* the phases by name, as the fsm keeps them: the one place they are
 * spelt */

static const char  *iw_phase_names[] = {
    [IW_PHASE_NEW] = "",
    [IW_PHASE_FORMING] = "forming",
    [IW_PHASE_RUNNING] = "running",
    [IW_PHASE_CONCLUDING] = "concluding",
    [IW_PHASE_UNKNOWN] = "?"
};


const char *
iw_phase_name(iw_phase_e phase)
{
    return phase <= IW_PHASE_UNKNOWN ? iw_phase_names[phase] : "?";
}


iw_phase_e
iw_phase_of(const char *name)
{
    int  p;

    for (p = IW_PHASE_NEW; p < IW_PHASE_UNKNOWN; p++) {
        if (strcmp(name, iw_phase_names[p]) == 0) {
            return (iw_phase_e) p;
        }
    }

    return IW_PHASE_UNKNOWN;
}
