/*
 * ioa-worker: what every file of the worker shares.
 *
 * ioa-worker takes goals from the Redis Stream P{jobs}:goals (consumer
 * group "workers"), forms a team, runs IoA's conversation in the team's
 * room as the coordinator agent, and writes the outcome back to the goal's
 * record.  One process runs many goals at once (engine.c, up to
 * --max-goals) on one event loop (loop.c: libevent), each a state machine
 * whose waits are states: a timer of its own and the channels that wake
 * it (pubsub.c).  Its connections to Redis are event-driven (rconn.c: one
 * connection; redis.c: the calls, standalone or Cluster).  A goal's step
 * is straight code on a fiber of its own (fiber.c): when it sends a Redis
 * command it gives the CPU back to the loop until the reply is in, so one
 * goal's slow command holds up no other goal.  No threads: one step is on
 * the CPU at a time, and it leaves it only inside a Redis call.
 *
 * Everything a goal needs to go on lives in Redis (the meta and fsm hashes,
 * the room log), so a worker can die at any instruction and another one
 * finishes its goal: see goal.c for the state machine and the exactly-once
 * argument.  For the same reason an allocation failure simply ends the
 * process (ioa_alloc() aborts): the job stays pending and is taken over.
 *
 * Naming: the worker's own code is prefixed iw_ (ioa worker); what it
 * shares with ioa-agent (allocation, buffers, JSON, clocks, ids) lives in
 * workers/common/ under the project's ioa_ prefix (ioa_common.h), and what
 * it shares with the hub (the Cluster key slot, the discovery tokenizer,
 * the list of the hub's scripts) in lib/, under the same prefix.  Files
 * are named for their one concern, and the goal's code runs one way, from
 * the top down:
 *
 *   main.c        the command line, the start
 *   engine.c      many goals on the loop: intake, the ready queue, each
 *                 goal's timer, its lease, SIGTERM
 *   goal.c        one goal: loading it, its phase table, cancel
 *   forming.c, conversation.c, concluding.c
 *                 the phases' step functions; decide.c (the review after
 *                 each round), proposal.c (members' proposals), person.c
 *                 (a person's messages), subteam.c (nested teams),
 *                 absorb.c (reading the room) below them
 *   llm_planner.c, planner.c
 *                 the two planners (iw_planner_t), chosen once per goal
 *   step.c        what every step does: post exactly once, fail, wait
 *   store.c, events.c, room.c, registry.c, jobs.c, stats.c
 *                 the goal's record and feed, rooms, agents, the queue,
 *                 the worker's counters: Redis keys and scripts
 *   pubsub.c, redis.c, cluster.c, rconn.c, llm.c, curl_loop.c, loop.c,
 *   fiber.c       the channels that wake goals, the Redis client (calls,
 *                 Cluster routing, one connection), the LLM client,
 *                 libcurl's sockets, the event loop, the steps' stacks
 *   log.c, util.c, verify.c
 *                 one line per event, small helpers, verify-room
 */

#ifndef IW_H
#define IW_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>

#include <hiredis/hiredis.h>
#include <yajl/yajl_tree.h>

#include "ioa_common.h"
#include "ioa_scripts.h"


/* results of the operations that can be interrupted */
#define IW_OK        0
#define IW_ERROR    -1     /* Redis failed: reconnect, then try again */
#define IW_LOST     -2     /* another worker holds the job now */
#define IW_STOPPED  -3     /* SIGTERM: the job was released */


typedef struct {
    char         *host;
    int           port;
} iw_addr_t;


typedef struct {
    char         *redis;             /* --redis as given, for the log */
    iw_addr_t    *seeds;             /* its addresses */
    int           nseeds;
    char         *redis_user;        /* AUTH user, NULL: default */
    char         *redis_password_file; /* AUTH password, NULL: */
                                     /* IOA_REDIS_PASSWORD or none */
    char         *prefix;            /* "ioa:" */
    char         *scripts_dir;       /* the hub's redis-scripts/ */
    char         *name;              /* the coordinator agent */
    char         *consumer;          /* name in the consumer group */
    long long     task_timeout_ms;
    long long     turn_timeout_ms;   /* a protocol speaker's discussion turn */
    long long     claim_idle_ms;
    long long     goal_retention_ms; /* an ended goal's keys, 0: kept */
    long long     token_budget;      /* LLM tokens per goal, 0: no limit */
    long long     max_rounds;        /* rounds of tasks per goal (decide.c) */
    long long     max_attempts;      /* agents tried per part of a goal */
    long long     goal_timeout_ms;   /* the longest a goal may run, 0: no
                                        limit but its own deadline_s */
    long long     offline_grace_ms;  /* an assignee offline this long gives
                                        its task up; 0: wait the deadline */
    long long     max_goals;         /* goals in flight at once (engine.c) */
    double        min_score;         /* weakest match handed a part */

    struct iw_llm_conf_s  *llm;      /* NULL: the built-in planner */

    char         *reg_base;          /* P{reg}: */
    char         *jobs_key;          /* P{jobs}:goals */
    char         *goals_base;        /* P{goals}: the goal index */
    char         *workers_base;      /* P{workers}: heartbeats (stats.c) */
} iw_conf_t;


extern volatile sig_atomic_t  iw_stop;


/* util.c: what only the worker needs; the rest is in ../common/ */
int iw_streq(const char *a, const char *b);
int iw_blank(const char *s);
void iw_sleep_ms(long long ms);


/* log.c */
void iw_log(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void iw_log_fatal(const char *msg);

#define iw_info(...)   iw_log("info", __VA_ARGS__)
#define iw_warn(...)   iw_log("warn", __VA_ARGS__)
#define iw_error(...)  iw_log("error", __VA_ARGS__)


/* main.c */
int iw_parse_redis(iw_conf_t *conf, const char *v);


/* verify.c: ioa-worker verify-room */
int iw_verify_room_main(iw_conf_t *conf, int argc, char **argv);


/* loop.c: the event loop */
struct event;
struct event_base;

extern struct event_base  *iw_loop;

int iw_loop_init(void);
void iw_loop_free(void);
void iw_loop_until(const int *done);
void iw_timer_set(struct event *ev, long long ms);


/* fiber.c: a step's code on a stack of its own, so that its Redis
 * commands wait without stopping the other goals */
#define IW_FIBERS  64                /* steps under way at once */

typedef struct iw_fiber_s  iw_fiber_t;
typedef void (*iw_fiber_pt)(void *data);

int iw_fiber_run(iw_fiber_pt fn, void *data, void (*wake)(void *data),
    void *wake_data, iw_fiber_t **out);
int iw_fiber_resume(iw_fiber_t *fb);
void iw_fiber_wait(void);
void iw_fiber_wake(iw_fiber_t *fb);
iw_fiber_t *iw_fiber_current(void);
int iw_fiber_busy(void);
int iw_fiber_available(void);


/* rconn.c: one Redis connection on the event loop */
typedef struct iw_rreq_s   iw_rreq_t;
typedef struct iw_rconn_s  iw_rconn_t;

/* r: the reply, now the handler's to free; NULL: the connection was lost
 * (or closed) before it came */
typedef void (*iw_rreq_pt)(iw_rreq_t *q, redisReply *r);
typedef void (*iw_rconn_close_pt)(iw_rconn_t *c, const char *why);
typedef void (*iw_rconn_push_pt)(iw_rconn_t *c, redisReply *r);

struct iw_rreq_s {
    iw_rreq_t          *next;
    iw_rreq_pt          done;
    void               *data;
    long long           deadline;    /* ioa_mono_ms() */
    int                 unsent;      /* failed before the connect was
                                        done: it never left */
};

struct iw_rconn_s {
    char               *host;
    int                 port;
    redisContext       *ctx;         /* non-blocking: fd, buffers, reader */
    struct event       *rev;
    struct event       *wev;
    struct event       *timer;       /* the oldest request's deadline */
    iw_rreq_t          *head;        /* sent, unanswered, oldest first */
    iw_rreq_t          *tail;
    iw_rconn_close_pt   on_close;    /* once, before the requests fail */
    iw_rconn_push_pt    push;        /* a subscriber's: replies with no
                                        request waiting (pubsub.c) */
    void               *data;
    int                 node;        /* cluster.c: its node, else -1 */
    iw_rreq_t           setup[2];    /* redis.c: AUTH, CLIENT SETNAME */
    unsigned            up:1;        /* the connect completed */
    unsigned            closed:1;
    int                 busy;        /* in a handler: freed when back */
};

iw_rconn_t *iw_rconn_open(const char *host, int port,
    iw_rconn_close_pt on_close, void *data);
void iw_rconn_send(iw_rconn_t *c, const char *cmd, size_t len, iw_rreq_t *q,
    long long timeout_ms);
void iw_rconn_close(iw_rconn_t *c, const char *why);


/* redis.c */

/* the scripts the worker runs: the hub's that lib/ioa_scripts.h marks W
 * (read from --scripts DIR), then its own (lua/, compiled in) */
#define IW_LUA_NONE(NAME, file)
#define IW_LUA_ENUM(NAME, file)  IW_LUA_##NAME,

typedef enum {
    IOA_HUB_SCRIPTS(IW_LUA_NONE, IW_LUA_ENUM)
    IW_LUA_GOAL_EVENT,
    IW_LUA_JOB_TOUCH,
    IW_LUA_META_STATE,
    IW_LUA_FSM_SAVE,
    IW_LUA_GOAL_SPAWN,
    IW_LUA_REP_RECORD,
    IW_LUA_WORKER_BEAT,
    IW_LUA_N
} iw_lua_e;

typedef struct {
    int           n;
    int           cap;
    char        **v;
    size_t       *len;
} iw_args_t;

/* an answer for iw_redis_send()'s caller, now its to free; NULL: Redis is
 * gone (every connection was closed: reconnect and resume) */
typedef void (*iw_redis_pt)(void *data, redisReply *r);

int iw_redis_init(const iw_conf_t *conf);
int iw_redis_connect(void);
int iw_redis_connected(void);
int iw_redis_cluster(void);
int iw_redis_standalone_addr(const char **host, int *port);
void iw_redis_close(void);
iw_rconn_t *iw_redis_open(const char *host, int port,
    iw_rconn_close_pt on_close);
const char *iw_redis_script_of(const char *sha, size_t len);
void iw_redis_broken(const char *what, const char *err);
void iw_redis_send(char *cmd, size_t len, iw_redis_pt handler, void *data);

void iw_args_init(iw_args_t *a);
void iw_args_add(iw_args_t *a, const char *s);
void iw_args_addn(iw_args_t *a, const char *s, size_t n);
void iw_args_addf(iw_args_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void iw_args_free(iw_args_t *a);

redisReply *iw_redis_argv(iw_args_t *a);
redisReply *iw_redis_cmd(const char *fmt, ...);
redisReply *iw_redis_eval(iw_lua_e script, int nkeys, iw_args_t *a);
redisReply *iw_redis_eval_soft(iw_lua_e script, int nkeys, iw_args_t *a);
void iw_redis_set_hook(void (*hook)(void));
int iw_reply_err(redisReply *r, const char *code);
const char *iw_reply_str(redisReply *r);
int iw_redis_time_ms(long long *ms);


/* engine.c: many goals on one loop */
void iw_engine_run(const iw_conf_t *conf);


/* pubsub.c: a waiting goal is woken by a message on a channel */
typedef struct iw_watch_s  iw_watch_t;

struct iw_watch_s {
    iw_watch_t         *next;        /* the channel's watchers */
    struct iw_chan_s   *chan;        /* NULL: not watching */
    void              (*wake)(iw_watch_t *w);   /* from the loop */
    void               *data;
};

void iw_pubsub_watch(iw_watch_t *w, const char *channel);
void iw_pubsub_unwatch(iw_watch_t *w);
int iw_pubsub_live(iw_watch_t *w);
void iw_pubsub_reconnected(void);
void iw_pubsub_close(void);
size_t iw_pubsub_channels(void);


/* stats.c: this worker's counters and heartbeat (P{workers}:...) */
void iw_stats_init(const iw_conf_t *conf);
void iw_stats_add(const char *name, long long n);
void iw_stats_set(const char *name, long long value);
void iw_stats_addf(long long n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void iw_stats_tick(void);
void iw_stats_beat(int stopped);


/* cluster.c: routing on a Redis Cluster */
typedef struct {
    int           slot;              /* of the first key, -1: none */
    const char   *sha;               /* EVALSHA's script, or NULL */
    size_t        sha_len;
    long long     block_ms;          /* XREAD[GROUP] BLOCK n: n, else 0 */
} iw_cmd_info_t;

int iw_cluster_start(iw_rconn_t *seed, const char *host, int port,
    redisReply *slots);
int iw_cluster_on(void);
void iw_cluster_close(void);
int iw_cluster_node_of(int slot);
iw_rconn_t *iw_cluster_conn(int node);
iw_rconn_t *iw_cluster_block_conn(int node);
int iw_cluster_node_addr(int node, const char **host, int *port);
iw_rconn_t *iw_cluster_any_conn(void);
int iw_cluster_apply(redisReply *r, int from);
int iw_cluster_redirect(redisReply *r, int *slot, int *node);
void iw_cmd_info(const char *cmd, size_t len, iw_cmd_info_t *info);


/* jobs.c */
typedef struct {
    char         *id;                /* the job's stream id */
    char         *goal_id;
} iw_job_t;

int iw_jobs_group(const iw_conf_t *conf);
int iw_jobs_parse(redisReply *r, iw_job_t *jobs, int max, int *nogroup);
char *iw_jobs_read_cmd(const iw_conf_t *conf, int count, long long block_ms,
    size_t *len);
int iw_jobs_pending(const iw_conf_t *conf, iw_job_t *jobs, int max);
int iw_jobs_autoclaim(const iw_conf_t *conf, char **cursor, iw_job_t *jobs,
    int max);
int iw_jobs_touch(const iw_conf_t *conf, const char *id, int release);
int iw_jobs_deliveries(const iw_conf_t *conf, const char *id,
    long long *count);
int iw_jobs_ack(const iw_conf_t *conf, const char *id);
int iw_goal_retire(const iw_conf_t *conf, const char *goal_id,
    const char *job);
void iw_job_free(iw_job_t *job);


/* registry.c */
typedef struct {
    char         *name;
    char         *type;
    char         *desc;
    int           found;
    int           online;
    int           protocol;          /* speaks IoA itself: its turns are its own */
    double        score;             /* BM25 against the query, retrieve only */
    long long     completed;         /* its record (rep_record.lua): */
    long long     partial;           /* the coordinator's verdicts */
    long long     unfinished;        /* failed + timed_out */
    long long     latency_ms;        /* mean, -1: not known */
    double        rank;              /* score weighed by the record */
} iw_agent_t;

typedef struct {
    iw_agent_t   *v;
    size_t        n;
} iw_agents_t;

/* the replies of query.lua and retrieve.lua: values per agent */
#define IW_QUERY_TUPLE       10
#define IW_RETRIEVE_TUPLE    8

int iw_reg_register(const iw_conf_t *conf);
int iw_reg_query(const iw_conf_t *conf, char **names, size_t n,
    iw_agents_t *out);
int iw_reg_retrieve(const iw_conf_t *conf, const char *query, int limit,
    int online_only, const char *salt, iw_agents_t *out);
int iw_reg_teamup(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, char **refused);
void iw_reg_rank(const iw_conf_t *conf, iw_agents_t *ranked,
    const char *salt);
double iw_reg_rate(const iw_agent_t *a);
long long iw_reg_trials(const iw_agent_t *a);
int iw_reg_record(const iw_conf_t *conf, const char *agent,
    const char *task_id, const char *status, long long latency_ms);
int iw_reg_person(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, const char *person);
int iw_reg_join(const iw_conf_t *conf, const char *comm_id,
    const char *team_name, char **members, size_t n, char **refused);
void iw_agents_free(iw_agents_t *a);


/* rounds of tasks a goal may have, whatever --max-rounds says: the steps
 * of round r are numbered from IW_ROUND_STEPS * r (decide.c) */
#define IW_MAX_ROUNDS        9


/* planner.c: the built-in, deterministic planner */
typedef struct {
    char         *agent;
    char         *task_id;
    char         *desc;
    char         *status;            /* pending in_progress completed failed
                                        timed_out cancelled */
    char         *result;
    int           sub;               /* a sub-team does it: agent is the
                                        coordinator, child the sub-goal */
    char         *child;             /* the sub-goal's id, NULL until chosen */
    int           queued;            /* the sub-goal's job is queued */
    int           round;             /* the round it belongs to (decide.c) */
    long long     offline_since;     /* ms its agent was first seen offline,
                                        0: online (memory only) */
    long long     latency_ms;        /* assignment to result, 0: unknown */
    unsigned      parts;             /* the goal's parts it covers, a bit
                                        each; 0: none recorded */
    int           dirty;
} iw_task_t;

typedef struct {
    char         *agent;
    char         *desc;
    int           sub;
    unsigned      parts;             /* a bit per clause it covers */
} iw_assignment_t;

typedef struct {
    char            **clauses;
    char            **why;           /* per clause: why nobody has it, or
                                        NULL when it is assigned */
    size_t            nclauses;
    int               then;          /* clauses chained with "then" */
    iw_agent_t       *team;          /* without the coordinator */
    size_t            nteam;
    iw_assignment_t  *work;
    size_t            nwork;
    int               sync;          /* one task after the other */
} iw_plan_t;

#define IW_PLAN_MAX_CLAUSES  8
#define IW_PLAN_MAX_TEAM     4
#define IW_PLAN_MAX_TASKS    8

/* an agent scoring under this share of a clause's best score is no match
 * for it (iw_plan_eligible) */
#define IW_PLAN_MIN_SHARE    0.5

/* whether an agent online does what a piece of a goal says (a clause
 * boundary the text leaves open, planner.c) */
typedef int (*iw_plan_task_pt)(void *data, const char *piece, size_t n);

void iw_plan_clauses(const char *goal, iw_plan_t *plan,
    iw_plan_task_pt is_task, void *data);
int iw_form_is_task(void *data, const char *piece, size_t n);
void iw_plan_pick(iw_plan_t *plan, iw_agents_t *ranked, iw_agents_t *fixed,
    const char *coordinator, int allow_sub, double min_score);
int iw_plan_eligible(iw_agents_t *ranked, size_t k, double min_score);
char *iw_plan_query(const char *clause);
void iw_plan_set_work(iw_plan_t *plan, iw_assignment_t *work, size_t n,
    int sync, char **parts, size_t nparts);
void iw_plan_free(iw_plan_t *plan);
char *iw_plan_team_name(const char *goal);

char *iw_plan_discussion(const char *goal, int sync, iw_task_t *t, size_t n);
char *iw_plan_behalf(const iw_agent_t *a, iw_task_t *t, size_t n);
char *iw_plan_assignment(iw_task_t *t, size_t n);
char *iw_plan_sync_task(iw_task_t *t, size_t i, int chained);
char *iw_plan_pause(iw_task_t *t, size_t n, long long timeout_ms);
char *iw_plan_conclude(const char *ended, long long max_turns);


/* the goal's phases, in their order; goal.c runs each one's step function
 * from a table indexed by these, store.c keeps them by name in the fsm */
typedef enum {
    IW_PHASE_NEW = 0,                /* "": taken, nothing done yet */
    IW_PHASE_FORMING,                /* "forming" (forming.c) */
    IW_PHASE_RUNNING,                /* "running" (conversation.c) */
    IW_PHASE_CONCLUDING,             /* "concluding" (concluding.c) */
    IW_PHASE_UNKNOWN                 /* a name this worker does not know */
} iw_phase_e;


/* store.c: the goal's record, P{goal:<id>}:meta and P{goal:<id>}:fsm */
typedef struct {
    /* the job and the goal as nginx wrote it (job_id, goal_id borrowed) */
    const char   *job_id;
    const char   *goal_id;
    char         *state;             /* meta state when loaded */
    char         *goal;
    char         *request;
    yajl_val      req;
    char         *parent;
    char         *depth;
    char         *cont_comm_id;      /* the request's comm_id: continue
                                        this room */
    char         *person;            /* meta launched_by: the person in
                                        the room (person.c), NULL none */
    int           launcher_admin;    /* meta launcher_admin: launched by an
                                        administrator */

    /* the persisted state machine (fsm hash) */
    iw_phase_e    phase;             /* fsm "phase", by name (store.c) */
    char         *comm_id;
    int           new_room;          /* 1: this goal creates the room */
    char         *team_name;         /* "" none */
    char         *team;              /* JSON [{"name","type","desc"}] */
    iw_task_t    *tasks;
    size_t        ntasks;
    long long     deadline;          /* ms, every task's; 0 until assigned */
    char         *last_id;           /* last room entry processed */
    long long     turns;             /* envelopes in the room since start */
    int           step;              /* last coordinator step posted */
    int           intent;            /* step being posted, 0 none */
    char         *ended;             /* why concluding: "" settled
                                        max_turns cancelled */
    char         *conclusion;        /* fixed before the CONCLUSION is
                                        posted */
    int           sync;              /* tasks one after the other */
    char         *discussion;        /* the plan's text, NULL: built-in */
    char         *spoke;             /* ",a,b," protocol speakers who took
                                        their discussion turn */
    long long     turn_deadline;     /* ms: their turns end */
    long long     deadline_step;     /* the step the deadline belongs to */
    long long     prompt_tokens;     /* LLM usage so far */
    long long     completion_tokens;
    const struct iw_planner_s  *planner;  /* chosen once (iw_goal_open) */
    char        **parts;             /* the goal's parts (its clauses, or
                                        the LLM's tasks), fsm "parts" */
    char        **part_why;          /* why a part has no agent, NULL: it
                                        has one */
    size_t        nparts;
    char         *decision[IW_MAX_ROUNDS];  /* decision:<round>, JSON */
    char         *inbox_last;        /* the last message read from the
                                        goal's inbox (person.c) */
    char         *requests;          /* JSON [{"sender","content"}] for
                                        the next review, NULL: none */
    size_t        requests_taken;    /* how many are parts already (memory
                                        only) */
    char         *stopped_by;        /* "sender: message" that ended it */
    char         *said;              /* JSON [{"id","sender","content"}]:
                                        the person's words in the room, not
                                        decided yet (person.c) */
    char         *proposals;         /* JSON: members' proposals in the
                                        discussion (proposal.c) */
    char         *proposal_answer;   /* JSON: the coordinator's answer,
                                        with the plan it accepted */
    char         *ask;               /* JSON: the review's latest question
                                        {"round","k","agent","parts",
                                        "deadline","answered"} */

    /* only in memory */
    int           round;             /* the highest round of the tasks */
    long long     created_at;        /* ms, meta created_at (nginx) */
    long long     deadline_ms;       /* the goal's time from created_at,
                                        0: none */
    long long     max_turns;         /* 0: no limit */
    long long     input_timeout_ms;  /* "input_timeout_s": how long the
                                        review waits for the person it
                                        asks; 0: it asks nobody */
    int           input_written;     /* the open question to the person
                                        is in meta and the feed */
    long long     renewed;           /* ioa_mono_ms() of the lease renewal */
    int           person_said;       /* the person posted in the room:
                                        "said" goes into the next progress
                                        write */
    struct iw_llm_memo_s  *llm_memo; /* the engine's, not freed with the
                                        goal (llm_planner.c) */
    long long     wake_in;           /* ms: the waiting step looks again
                                        this soon at the latest, -1: no
                                        time of its own (engine.c) */
} iw_goal_t;

int iw_store_load(const iw_conf_t *conf, iw_goal_t *g);
int iw_store_own(const iw_conf_t *conf, iw_goal_t *g);
int iw_store_save(const iw_conf_t *conf, iw_goal_t *g, ...);
int iw_store_save_progress(const iw_conf_t *conf, iw_goal_t *g);
int iw_store_meta_state(const iw_conf_t *conf, const char *goal_id,
    const char *state, char **current, ...);
int iw_store_meta_get(const iw_conf_t *conf, const char *goal_id,
    const char *field, char **value);
int iw_store_index(const iw_conf_t *conf, const char *goal_id,
    const char *state, const char *goal, const char *parent,
    long long created_at);
void iw_goal_free(iw_goal_t *g);
char *iw_store_tasks_json(iw_goal_t *g);
char *iw_store_parts_json(iw_goal_t *g);
void iw_store_free_parts(iw_goal_t *g);
int iw_state_final(const char *state);
const char *iw_phase_name(iw_phase_e phase);
iw_phase_e iw_phase_of(const char *name);


/* events.c: the goal's event feed, P{room:goal-<id>}:log */
int iw_event_state(const iw_conf_t *conf, const char *goal_id,
    const char *state, const char *comm_id, const char *conclusion,
    const char *error);
int iw_event_input(const iw_conf_t *conf, const char *goal_id,
    int awaiting, const char *question, const char *key);
int iw_event_person(const iw_conf_t *conf, const char *goal_id,
    const char *decision, const char *id);
int iw_event_envelope(const iw_conf_t *conf, const char *goal_id,
    const char *sid, const char *env, size_t len);


/* room.c */
typedef struct {
    char         *sid;
    char         *json;
    size_t        len;
} iw_entry_t;

typedef struct {
    iw_entry_t   *v;
    size_t        n;
} iw_entries_t;

int iw_room_post(const iw_conf_t *conf, const char *comm_id,
    const char *json, int type, const char *next_speaker, char **sid);
int iw_room_read(const iw_conf_t *conf, const char *comm_id,
    const char *after, iw_entries_t *out);
int iw_room_last_id(const iw_conf_t *conf, const char *comm_id, char **sid);
int iw_room_members(const iw_conf_t *conf, const char *comm_id,
    iw_agents_t *out, char **owner);
void iw_entries_free(iw_entries_t *e);


/*
 * goal.c, conversation.c, subteam.c: the goal's state machine.
 *
 * The coordinator's steps, each posted exactly once (goal.c), numbered so
 * that they are posted in increasing order whatever the plan; offsets in
 * a round (see IW_ROUND_STEPS):
 */
#define IW_STEP_DISCUSSION      1   /* the plan */
#define IW_STEP_BEHALF          2   /* + i (i < 7): for member i, who only runs
                                       tasks */
#define IW_STEP_PROPOSALS       9   /* round 0: the answer to the members'
                                       proposals (proposal.c) */
#define IW_STEP_ASSIGN         10   /* parallel: every task at once */
#define IW_STEP_PAUSE          11   /* triggers: the task ids */
#define IW_STEP_SUB_RESULT     12   /* + i: the sub-team result of task i */
#define IW_STEP_SYNC           20   /* + 2i: task i of a sequence,
                                       + 2i + 1: its sub-team result */
#define IW_STEP_ASK            36   /* + k (k < IW_DECIDE_ASKS): a question
                                       of the review to a member */
#define IW_DECIDE_ASKS          4
#define IW_STEP_DECIDE         40   /* the review after the round: a
                                       DISCUSSION (re-route, iterate) or the
                                       CONCLUDE_GROUP_DISCUSSION (decide.c) */
#define IW_STEP_CONCLUDE       40
#define IW_STEP_CONCLUSION     41

/* round r's steps are r * IW_ROUND_STEPS + the offsets above (round 0:
 * the numbers as they are); the conclusion is in the last round's */
#define IW_ROUND_STEPS        100

#define IW_TYPE_DISCUSSION      4
#define IW_TYPE_SYNC_ASSIGN     5
#define IW_TYPE_ASYNC_ASSIGN    6
#define IW_TYPE_RESULT          7
#define IW_TYPE_PROGRESS        8
#define IW_TYPE_PAUSE           9
#define IW_TYPE_CONCLUDE        10
#define IW_TYPE_CONCLUSION      11

/* how soon a waiting goal looks again when one of its channels is not
 * subscribed (yet, or any more): the subscriber connection is down, so
 * nothing would wake it (engine.c) */
#define IW_GOAL_POLL_MS         500

/* returned by the phase functions when the goal is over and acknowledged */
#define IW_GOAL_ENDED           1

/* returned by a part of the running phase that has nothing left to do */
#define IW_GOAL_NEXT            2

/* returned by a step that waits (iw_goal_wait): for g->wake_in ms at most,
 * or until a message on one of its channels (engine.c, pubsub.c) */
#define IW_GOAL_WAIT            3

/* a phase's step function (goal.c's table) */
typedef int (*iw_phase_pt)(const iw_conf_t *conf, iw_goal_t *g);

int iw_goal_open(const iw_conf_t *conf, iw_job_t *job, iw_goal_t *g,
    int again);
int iw_goal_step(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_release(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_wait(iw_goal_t *g, long long until, long long now);
void iw_goal_wake_in(iw_goal_t *g, long long ms);
size_t iw_goal_channels(const iw_conf_t *conf, iw_goal_t *g, char ***out);
int iw_goal_form(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_lease(const iw_conf_t *conf, iw_goal_t *g, int now);
int iw_goal_post(const iw_conf_t *conf, iw_goal_t *g, int step, int type,
    const char *content, const char *next_speaker, const char *task_id,
    const char *extra);
int iw_goal_fail(const iw_conf_t *conf, iw_goal_t *g, const char *error);
int iw_goal_to_concluding(const iw_conf_t *conf, iw_goal_t *g,
    const char *ended);
int iw_goal_settled(iw_task_t *t);
int iw_goal_concluded(iw_goal_t *g);
int iw_goal_cancel_children(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_concluding(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_save_tasks(const iw_conf_t *conf, iw_goal_t *g);

/* conversation.c: the running phase */
int iw_goal_running(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_one_at_a_time(iw_goal_t *g);
int iw_goal_drain(const iw_conf_t *conf, iw_goal_t *g);
int iw_goal_members(iw_goal_t *g, iw_agents_t *out);
size_t iw_goal_round_tasks(iw_goal_t *g, size_t *first);

/* decide.c: the review after each round (re-route, iterate, conclude) and
 * the built-in account of what was done */
int iw_decide(const iw_conf_t *conf, iw_goal_t *g);
int iw_decide_post(const iw_conf_t *conf, iw_goal_t *g);
int iw_decide_record_tasks(const iw_conf_t *conf, iw_goal_t *g, int round);
int iw_decide_answered(iw_goal_t *g, const char *sender);
const char *iw_decide_ended(iw_goal_t *g, int round);
char *iw_decide_conclude_text(iw_goal_t *g);
char *iw_decide_conclude_extra(iw_goal_t *g, const char *text);
char *iw_decide_account(const iw_conf_t *conf, iw_goal_t *g);
size_t iw_decide_done(iw_goal_t *g);

/* proposal.c: proposals of the members that speak the protocol */
int iw_proposal_keep(iw_goal_t *g, const char *sid, yajl_val env,
    const char *sender, long long type);
int iw_proposal_has_plan(yajl_val env);
int iw_proposal_answer(const iw_conf_t *conf, iw_goal_t *g);
int iw_proposal_concludes(iw_goal_t *g);

/* person.c: a person's messages to a running goal */
int iw_person_read(const iw_conf_t *conf, iw_goal_t *g);
int iw_person_in_room(iw_goal_t *g, const char *sid, yajl_val env,
    const char *sender, long long type);

/* subteam.c: a task done by a nested team */
int iw_sub_spawn(const iw_conf_t *conf, iw_goal_t *g, size_t i,
    const char *text);
int iw_sub_poll(const iw_conf_t *conf, iw_goal_t *g, size_t i, int step);
int iw_sub_cancel(const iw_conf_t *conf, iw_goal_t *g, size_t i);


/* llm_planner.c: the LLM's part, each with the built-in as the fallback.
 * The memo holds a goal's calls across the reruns of the step that waits
 * for them (iw_llm_call() in llm_planner.c explains). */
typedef struct iw_llm_entry_s  iw_llm_entry_t;

typedef struct iw_llm_memo_s {
    iw_llm_entry_t    *head;
    int                waiting;      /* the last step waits for a call */
    void             (*wake)(void *data);   /* from the loop */
    void              *data;
} iw_llm_memo_t;

void iw_llm_memo_clear(iw_llm_memo_t *memo);


/* the model's review of a round (decide.c checks it before acting) */
typedef struct {
    int           part;              /* 0-based, as the model named it - 1 */
    const char   *agent;             /* borrowed from the answer */
    const char   *desc;              /* NULL or blank: the part's text */
} iw_review_task_t;

typedef struct {
    yajl_val           answer;       /* owns the strings below */
    int                conclude;
    const char        *ask_agent;    /* "ask": the member, and ... */
    const char        *ask_text;     /* ... the question */
    const char        *reason;
    iw_review_task_t   tasks[IW_PLAN_MAX_TASKS];
    size_t             ntasks;
} iw_review_t;

/* the model's reading of a person's message (person.c checks it) */
typedef struct {
    yajl_val      answer;            /* owns the strings below, NULL: none */
    const char   *decision;          /* end, change_part, add_work */
    long long     part;              /* change_part: 1-based */
    const char   *text;              /* the work, or the part's new text */
    const char   *reason;
} iw_person_reading_t;

/*
 * A goal's planner, chosen once when the goal is loaded (iw_goal_open):
 * the built-in one (planner.c), or the LLM's (llm_planner.c) when an
 * endpoint is configured.  Every decision a planner makes goes through
 * this: the team (names, or none: the ranking recruits), the assignment
 * (plan, changed or left as the built-in planner made it), the review
 * after a round (NULL: the rule decides; a review without an answer too),
 * the reading of a person's message (NULL: it is work, person.c), and the
 * conclusion's text (NULL: the account of every part alone).
 */
typedef struct iw_planner_s {
    const char  *name;               /* meta "planner": builtin, llm */
    int        (*team)(const iw_conf_t *conf, iw_goal_t *g, const char *text,
                       int online_only, char ***names, size_t *n);
    int        (*plan)(const iw_conf_t *conf, iw_goal_t *g, const char *text,
                       int allow_sub, iw_plan_t *plan, char **discussion);
    int        (*review)(const iw_conf_t *conf, iw_goal_t *g,
                         const char *state, iw_agents_t *cands,
                         iw_agents_t *askable, iw_review_t *out);
    int        (*person)(const iw_conf_t *conf, iw_goal_t *g,
                         const char *sender, const char *content,
                         iw_person_reading_t *out);
    int        (*conclusion)(const iw_conf_t *conf, iw_goal_t *g,
                             char **text);
} iw_planner_t;

extern const iw_planner_t  iw_planner_builtin;
extern const iw_planner_t  iw_planner_llm;


/* the transcript a prompt shows: the room's latest envelopes, at most this
 * many bytes, each cut at IW_LLM_LINE_MAX */
#define IW_LLM_TRANSCRIPT_MAX  4000
#define IW_LLM_LINE_MAX        300



#endif /* IW_H */
