/*
 * ioa-worker: the agent registry, as the coordinator agent uses it.
 *
 * The worker is trusted code next to the hub, so instead of calling the
 * hub's REST endpoints it runs the same Redis scripts the endpoints run,
 * with the same keys and arguments (ngx_ioa_registry.c, ngx_ioa_rest.c):
 * what it does is exactly what /register, /query_assistant,
 * /retrieve_assistant and /teamup do, and nginx stays out of the path.
 * register.lua and retrieve.lua take terms, not text: they are made here
 * by the hub's own tokenizer, lib/ioa_tokenize.c, which the Makefile
 * compiles into the worker, so the coordinator's queries find what
 * /register indexed.
 *
 * A teamup is the three steps of /teamup plus its event: teamup_members.lua
 * (registry slot), room_create.lua (the room's slot), ZADD to the room
 * index, PUBLISH on P{reg}:events so that the hub starts delivering the
 * room to members that are connected.  Each step may be repeated by a
 * worker that takes over a goal half-way: SADD and ZADD NX repeat
 * harmlessly, ROOMEXISTS means the room is already there, and a second
 * teamup event is ignored by the hub for clients already in the room.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "iw.h"
#include "ioa_tokenize.h"


/* the coordinator's description: stored as it is, indexed as its terms */
#define IW_COORD_DESC  "ioa's built-in coordinator"


static void iw_agent_set(iw_agent_t *a, const char *name, const char *type,
    const char *desc);
static void iw_agent_record(iw_agent_t *a, const char *json);
static void iw_args_add_terms(iw_args_t *a, const char *text);
static int iw_reg_event(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, const char **members, size_t n);
static int iw_reg_room(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, int join,
    char **refused);


int
iw_reg_register(const iw_conf_t *conf)
{
    int          rc;
    char         created[32];
    time_t       now;
    struct tm    tm;
    iw_args_t    a;
    redisReply  *r;

    /* IoA's created_at format, used only when the name is new */
    now = time(NULL);
    localtime_r(&now, &tm);
    strftime(created, sizeof(created), "%Y-%m-%d-%H-%M-%S", &tm);

    iw_args_init(&a);
    iw_args_addf(&a, "%sagent:%s", conf->reg_base, conf->name);
    iw_args_addf(&a, "%sagents", conf->reg_base);
    iw_args_addf(&a, "%sstats", conf->reg_base);
    iw_args_add(&a, conf->reg_base);
    iw_args_add(&a, conf->name);
    iw_args_add(&a, "Human Assistant");
    iw_args_add(&a, IW_COORD_DESC);
    iw_args_add(&a, "[]");
    iw_args_add(&a, "1");
    iw_args_addf(&a, "%lld", ioa_wall_ms());
    iw_args_add(&a, created);
    iw_args_add(&a, "0");            /* max_agents: never refused */
    iw_args_add_terms(&a, IW_COORD_DESC);

    r = iw_redis_eval(IW_LUA_REGISTER, 3, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    rc = IW_OK;

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("registering %s: %s", conf->name, r->str);
        rc = IW_ERROR;
    }

    freeReplyObject(r);

    return rc;
}


/* text's terms as one argument, joined by spaces (ioa_tokenize.h) */

static void
iw_args_add_terms(iw_args_t *a, const char *text)
{
    size_t          len, n;
    unsigned char  *terms;

    len = strlen(text);
    terms = ioa_alloc(len + 1);

    n = ioa_token_join(terms, 0, (const unsigned char *) text, len);

    iw_args_addn(a, (char *) terms, n);
    free(terms);
}


static void
iw_agent_set(iw_agent_t *a, const char *name, const char *type,
    const char *desc)
{
    a->name = ioa_strdup(name);
    a->type = ioa_strdup(type);
    a->desc = ioa_strdup(desc);
    a->found = 1;
    a->online = 0;
    a->protocol = 0;
    a->score = 0;
}


/* query.lua: one agent per name, in order; found = 0 for unknown names */

int
iw_reg_query(const iw_conf_t *conf, char **names, size_t n, iw_agents_t *out)
{
    size_t       i;
    iw_args_t    a;
    redisReply  *r, **e;

    out->v = NULL;
    out->n = 0;

    if (n == 0) {
        return IW_OK;
    }

    iw_args_init(&a);
    iw_args_addf(&a, "%sonline", conf->reg_base);
    iw_args_add(&a, conf->reg_base);
    iw_args_addf(&a, "%lld", ioa_wall_ms());

    for (i = 0; i < n; i++) {
        iw_args_add(&a, names[i]);
    }

    r = iw_redis_eval(IW_LUA_QUERY, 1, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements != IW_QUERY_TUPLE * n) {
        iw_error("query.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    out->v = ioa_alloc(n * sizeof(iw_agent_t));
    out->n = n;

    for (i = 0; i < n; i++) {
        e = r->element + IW_QUERY_TUPLE * i;
        iw_agent_set(&out->v[i], iw_reply_str(e[1]), iw_reply_str(e[2]),
                     iw_reply_str(e[3]));
        out->v[i].found = iw_streq(iw_reply_str(e[0]), "1");
        out->v[i].online = iw_streq(iw_reply_str(e[6]), "1");
        out->v[i].protocol = iw_streq(iw_reply_str(e[7]), "1");
        iw_agent_record(&out->v[i], iw_reply_str(e[8]));
    }

    freeReplyObject(r);

    return IW_OK;
}


/* retrieve.lua for one capability query, without the coordinator itself,
 * ranked by match and record (iw_reg_rank); salt: see there */

int
iw_reg_retrieve(const iw_conf_t *conf, const char *query, int limit,
    int online_only, const char *salt, iw_agents_t *out)
{
    size_t       i, n;
    iw_args_t    a;
    redisReply  *r, **e;

    out->v = NULL;
    out->n = 0;

    iw_args_init(&a);
    iw_args_addf(&a, "%sstats", conf->reg_base);
    iw_args_addf(&a, "%sonline", conf->reg_base);
    iw_args_add(&a, conf->reg_base);
    iw_args_addf(&a, "%lld", ioa_wall_ms());
    iw_args_addf(&a, "%d", limit);
    iw_args_add(&a, online_only ? "1" : "0");
    iw_args_add(&a, conf->name);
    iw_args_add_terms(&a, query);

    r = iw_redis_eval(IW_LUA_RETRIEVE, 2, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements % IW_RETRIEVE_TUPLE != 0) {
        iw_error("retrieve.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    n = r->elements / IW_RETRIEVE_TUPLE;
    out->v = ioa_alloc(n * sizeof(iw_agent_t));
    out->n = n;

    for (i = 0; i < n; i++) {
        e = r->element + IW_RETRIEVE_TUPLE * i;
        iw_agent_set(&out->v[i], iw_reply_str(e[0]), iw_reply_str(e[1]),
                     iw_reply_str(e[2]));
        out->v[i].score = strtod(iw_reply_str(e[4]), NULL);
        out->v[i].online = iw_streq(iw_reply_str(e[5]), "1");
        out->v[i].protocol = iw_streq(iw_reply_str(e[6]), "1");
        iw_agent_record(&out->v[i], iw_reply_str(e[7]));
    }

    iw_reg_rank(conf, out, salt);

    freeReplyObject(r);

    return IW_OK;
}


/*
 * members: the room's members, the coordinator included (last, as IoA
 * orders agent_names + [sender]).  Returns IW_OK, IW_ERROR, or 1 when the
 * registry refused (an unknown name): *refused then holds the reason.
 */

/* the task record query.lua and retrieve.lua add to an agent */

static void
iw_agent_record(iw_agent_t *a, const char *json)
{
    long long  n;
    yajl_val   rec;

    rec = ioa_json_parse(json, strlen(json));
    a->completed = ioa_json_get_int(rec, "completed", &n) == 0 ? n : 0;
    a->partial = ioa_json_get_int(rec, "partial", &n) == 0 ? n : 0;
    a->unfinished = (ioa_json_get_int(rec, "failed", &n) == 0 ? n : 0)
                    + (ioa_json_get_int(rec, "timed_out", &n) == 0 ? n : 0);
    a->latency_ms = ioa_json_get_int(rec, "latency_ms", &n) == 0 ? n : -1;
    a->rank = a->score;
    yajl_tree_free(rec);
}


/*
 * Reputation as a gradient.  An agent's record is the coordinator's
 * verdicts on its tasks (decide.c, "Records": accepted, partial, failed,
 * timed out), and it weighs in every ranking:
 *
 *   r     = (accepted + partial / 2 + P * K) / (verdicts + K)
 *   rank  = match * (A + (1 - A) * r)
 *
 * r is the success rate smoothed by a Beta prior: P = 1/2 worth K = 2
 * verdicts, so a newcomer stands at 1/2 and one verdict moves it by a
 * third of the way, not all of it (1/1 is not "always").  A = 1/2 is the
 * weight the match keeps whatever the record: a perfect record can at most
 * double an agent's standing against a hopeless one, so a record decides
 * between close matches and never makes a poor match win (the planner's
 * min_score and IW_PLAN_MIN_SHARE still apply to the match alone).  With
 * one failure against a newcomer's 1/2 an agent falls from 0.75 to 0.67
 * of its match: a 12% better description is then worth less than a clean
 * record.  Equal ranks go to the faster agent (mean time from assignment
 * to result, an agent without one last), then retrieve.lua's order.
 *
 * Newcomers.  Ranked so, an agent with no record would rarely get work
 * where a proven one matches as well.  So an agent with fewer than
 * IW_REP_NEWCOMER verdicts that is eligible (the planner's rule:
 * min_score, and IW_PLAN_MIN_SHARE of the best match) is put first in
 * IW_REP_EXPLORE percent of the rankings that a proven agent leads (one
 * with IW_REP_NEWCOMER verdicts or more), chosen by a hash of the salt
 * (the goal and its part), so the same goal ranks the same on every worker
 * and after a takeover, and a test can tell in advance which goals
 * explore.  Among several newcomers the best ranked is chosen.  Without a
 * salt (the model's discovery, which sees the records itself) nobody is
 * put first.
 */

#define IW_REP_PRIOR     0.5
#define IW_REP_WEIGHT    2.0
#define IW_REP_MATCH     0.5
#define IW_REP_NEWCOMER  5
#define IW_REP_EXPLORE   20


long long
iw_reg_trials(const iw_agent_t *a)
{
    return a->completed + a->partial + a->unfinished;
}


double
iw_reg_rate(const iw_agent_t *a)
{
    return (a->completed + a->partial / 2.0 + IW_REP_PRIOR * IW_REP_WEIGHT)
           / (iw_reg_trials(a) + IW_REP_WEIGHT);
}


/* a before b: the better rank, then the faster, then as retrieve.lua had
 * them (the insertion sort below is stable) */

static int
iw_reg_before(const iw_agent_t *a, const iw_agent_t *b)
{
    if (a->rank != b->rank) {
        return a->rank > b->rank;
    }

    if (a->latency_ms >= 0 && b->latency_ms >= 0) {
        return a->latency_ms < b->latency_ms;
    }

    return a->latency_ms >= 0 && b->latency_ms < 0;
}


/* FNV-1a: small, and the same on every worker (a test computes it too) */

static uint32_t
iw_reg_hash(const char *s)
{
    uint32_t  h;

    for (h = 2166136261u; *s; s++) {
        h = (h ^ (unsigned char) *s) * 16777619u;
    }

    return h;
}


void
iw_reg_rank(const iw_conf_t *conf, iw_agents_t *ranked, const char *salt)
{
    size_t      i, j;
    double      best;
    iw_agent_t  a;

    best = 0;

    for (i = 0; i < ranked->n; i++) {
        a = ranked->v[i];
        best = a.score > best ? a.score : best;
        ranked->v[i].rank = a.score
                            * (IW_REP_MATCH
                               + (1 - IW_REP_MATCH) * iw_reg_rate(&a));
    }

    for (i = 1; i < ranked->n; i++) {
        a = ranked->v[i];

        for (j = i; j > 0 && iw_reg_before(&a, &ranked->v[j - 1]); j--) {
            ranked->v[j] = ranked->v[j - 1];
        }

        ranked->v[j] = a;
    }

    if (salt == NULL || ranked->n < 2
        || iw_reg_trials(&ranked->v[0]) < IW_REP_NEWCOMER
        || iw_reg_hash(salt) % 100 >= IW_REP_EXPLORE)
    {
        return;
    }

    for (i = 1; i < ranked->n; i++) {
        a = ranked->v[i];

        if (iw_reg_trials(&a) < IW_REP_NEWCOMER && a.score >= conf->min_score
            && a.score >= IW_PLAN_MIN_SHARE * best)
        {
            memmove(&ranked->v[1], &ranked->v[0], i * sizeof(iw_agent_t));
            ranked->v[0] = a;
            return;
        }
    }
}


/*
 * Counts a verdict in its agent's record (rep_record.lua), once per task
 * whoever calls it; a cancelled task is not the agent's doing.  status is
 * the coordinator's verdict (decide.c, "Records"), not what the agent
 * said.
 */

int
iw_reg_record(const iw_conf_t *conf, const char *agent, const char *task_id,
    const char *status, long long latency_ms)
{
    iw_args_t    a;
    redisReply  *r;

    if (!(iw_streq(status, "completed") || iw_streq(status, "partial")
          || iw_streq(status, "failed") || iw_streq(status, "timed_out")))
    {
        return IW_OK;
    }

    iw_args_init(&a);
    iw_args_addf(&a, "%srep:%s", conf->reg_base, agent);
    iw_args_addf(&a, "%srepdone:%s", conf->reg_base, task_id);
    iw_args_add(&a, status);
    iw_args_add(&a, "604800");
    iw_args_addf(&a, "%lld", latency_ms);
    /* the hubs' discovery indexes show the new record */
    iw_args_add(&a, conf->reg_base);
    iw_args_add(&a, agent);

    r = iw_redis_eval(IW_LUA_REP_RECORD, 2, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("rep_record.lua: %s", r->str);

    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        /* counted for the first time, by this worker */
        iw_stats_addf(1, "tasks:%s", status);
    }

    freeReplyObject(r);

    return IW_OK;
}


int
iw_reg_teamup(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, char **refused)
{
    return iw_reg_room(conf, comm_id, team_name, members, n, 0, refused);
}


/* members join an existing room of the coordinator's (a re-route's agent):
 * the same steps, the room's members set extended instead of created */

int
iw_reg_join(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, char **refused)
{
    return iw_reg_room(conf, comm_id, team_name, members, n, 1, refused);
}


static int
iw_reg_room(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, int join,
    char **refused)
{
    size_t       i;
    iw_args_t    a;
    long long    now;
    redisReply  *r;

    *refused = NULL;
    now = ioa_wall_ms();

    iw_args_init(&a);
    iw_args_addf(&a, "%sagents", conf->reg_base);
    iw_args_add(&a, conf->reg_base);
    iw_args_add(&a, comm_id);
    /* no ioa_max_agent_rooms for the coordinator's teams: it is trusted,
     * and its goals are bounded by who may launch them */
    iw_args_add(&a, "0");

    for (i = 0; i < n; i++) {
        iw_args_add(&a, members[i]);
    }

    r = iw_redis_eval(IW_LUA_TEAMUP_MEMBERS, 1, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (iw_reply_err(r, "UNKNOWN_AGENT")) {
        *refused = ioa_strdup(r->len > sizeof("UNKNOWN_AGENT")
                               ? r->str + sizeof("UNKNOWN_AGENT") : r->str);
        freeReplyObject(r);
        return 1;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("teamup_members.lua: %s", r->str);
        freeReplyObject(r);
        return IW_ERROR;
    }

    freeReplyObject(r);

    iw_args_init(&a);
    iw_args_addf(&a, "%s{room:%s}:meta", conf->prefix, comm_id);
    iw_args_addf(&a, "%s{room:%s}:members", conf->prefix, comm_id);
    iw_args_add(&a, comm_id);
    iw_args_add(&a, team_name ? team_name : "");
    iw_args_add(&a, conf->name);
    iw_args_addf(&a, "%lld", now);
    iw_args_add(&a, "");                /* ioa_room_retention applies */

    for (i = 0; i < n; i++) {
        iw_args_add(&a, members[i]);
    }

    r = iw_redis_eval(IW_LUA_ROOM_CREATE, 2, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR && !iw_reply_err(r, "ROOMEXISTS")) {
        iw_error("room_create.lua: %s", r->str);
        freeReplyObject(r);
        return IW_ERROR;
    }

    freeReplyObject(r);

    if (join) {
        /* before the event: a member linked to the room can post at once */
        iw_args_init(&a);
        iw_args_add(&a, "SADD");
        iw_args_addf(&a, "%s{room:%s}:members", conf->prefix, comm_id);

        for (i = 0; i < n; i++) {
            iw_args_add(&a, members[i]);
        }

        r = iw_redis_argv(&a);
        iw_args_free(&a);

        if (r == NULL) {
            return IW_ERROR;
        }

        freeReplyObject(r);
    }

    r = iw_redis_cmd("ZADD %sroomlist NX %lld %s", conf->reg_base, now,
                     comm_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    return iw_reg_event(conf, comm_id, team_name, (const char **) members, n);
}


/*
 * The goal's person (meta launched_by) joins its room: a member who is no
 * agent of the team, so neither registered nor checked by
 * teamup_members.lua; the room goes into its room set, which is what the
 * hub loads for a connection of that name, and the event links a live one.
 */

int
iw_reg_person(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, const char *person)
{
    redisReply  *r;

    r = iw_redis_cmd("SADD %srooms:%s %s", conf->reg_base, person, comm_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    /* marked before it is a member: a room's members are its team when a
     * goal continues it (iw_room_members), the person is not */
    r = iw_redis_cmd("HSET %s{room:%s}:meta person %s", conf->prefix,
                     comm_id, person);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    r = iw_redis_cmd("SADD %s{room:%s}:members %s", conf->prefix, comm_id,
                     person);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    return iw_reg_event(conf, comm_id, team_name, &person, 1);
}


/* the teamup event, byte for byte what /teamup publishes */

static int
iw_reg_event(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, const char **members, size_t n)
{
    size_t       i;
    ioa_buf_t    ev;
    redisReply  *r;

    ioa_buf_init(&ev);
    ioa_buf_adds(&ev, "{\"comm_id\":");
    ioa_json_str(&ev, comm_id);
    ioa_buf_adds(&ev, ",\"agent_names\":[");

    for (i = 0; i < n; i++) {
        if (i) {
            ioa_buf_addc(&ev, ',');
        }

        ioa_json_str(&ev, members[i]);
    }

    ioa_buf_adds(&ev, "],\"team_name\":");
    ioa_json_str_or_null(&ev, team_name);
    ioa_buf_adds(&ev, ",\"sender\":");
    ioa_json_str(&ev, conf->name);
    ioa_buf_addc(&ev, '}');

    /* on a Redis Cluster a shard channel, as the hub subscribes to it */
    r = iw_redis_cmd("%s %sevents %b",
                     iw_redis_cluster() ? "SPUBLISH" : "PUBLISH",
                     conf->reg_base, ev.data, ev.len);
    ioa_buf_free(&ev);

    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    return IW_OK;
}


void
iw_agents_free(iw_agents_t *a)
{
    size_t  i;

    for (i = 0; i < a->n; i++) {
        free(a->v[i].name);
        free(a->v[i].type);
        free(a->v[i].desc);
    }

    free(a->v);
    a->v = NULL;
    a->n = 0;
}
