/*
 * ioa-worker: this worker's counters and heartbeat, for the hub's /metrics.
 *
 * The counters live in this process (a small table of named values) and
 * are written whole, with a heartbeat, about once a second and once more
 * at exit, to P{workers}:w:<consumer> by worker_beat.lua; P{workers}:all
 * lists the workers by their last heartbeat.  nginx reads both
 * (worker_list.lua) and exposes them as ioa_worker_* (README "Metrics").
 * Every key carries the {workers} tag, so on a Cluster one slot holds the
 * fleet and one call reads it.
 *
 * Why written from here and not pushed by each event: a counter changes
 * dozens of times a goal, while one EVALSHA a second costs a goal about
 * a tenth of a millisecond, whatever happens.  Absolute values rather than
 * increments, so a lost write loses nothing (the next one carries it) and
 * a write that is repeated counts nothing twice.
 *
 * When: between two commands of the goals' steps (redis.c calls
 * iw_stats_tick() before each blocking command, a hook set in
 * iw_stats_init), from the engine's loop, which wakes at least every
 * IW_ENGINE_TICK_MS when every goal waits, and while a model thinks (the
 * LLM client's tick, llm_planner.c), so a live worker beats about every
 * IW_STATS_BEAT_MS.  A beat never slows a goal down:
 * a refusal (Redis full, loading) is logged once and dropped instead of
 * breaking the connection (iw_redis_eval_soft), and a lost connection is
 * the goal's own problem anyway (its next command would have found it).
 *
 * What is counted, and where (each at the one place the event is certain,
 * so that a takeover does not count twice where it can be avoided):
 *
 *   decisions:<kind>:<by>   a review's decision, saved (decide.c): kind
 *                           reroute iterate conclude ask, by rule llm;
 *                           update_plan keep_plan (proposal.c), by rule
 *   llm_calls, llm_failures, llm_requests, prompt_tokens,
 *   completion_tokens       per structured call (llm_planner.c): a failure
 *                           is a call that gave no usable answer (the
 *                           built-in planner decided instead); requests
 *                           counts every HTTP attempt
 *   retries:llm             requests sent again after a failed attempt
 *   retries:redis           connection attempts that failed (main.c)
 *   retries:goal            goals run again after a Redis error (main.c)
 *   tasks:<outcome>         tasks counted in an agent's record for the
 *                           first time (rep_record.lua said 1): completed
 *                           partial failed timed_out, once per task
 *                           fleet-wide
 *   goals:<state>           goals this worker ended: concluded failed
 *                           cancelled (meta_state.lua wrote the state:
 *                           once per goal fleet-wide)
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iw.h"


#define IW_STATS_BEAT_MS    1000

/* a silent worker is forgotten after an hour: long enough for an alert on
 * ioa_worker_up to see it gone, short enough that scaled-down fleets and
 * renamed workers do not pile up */
#define IW_STATS_STALE_MS   3600000

/* distinct counters: the names above, with their kinds, are about 30 */
#define IW_STATS_MAX        64
#define IW_STATS_NAME       48


typedef struct {
    char          name[IW_STATS_NAME];
    long long     value;
} iw_stat_t;


static const iw_conf_t  *iw_stats_conf;
static iw_stat_t         iw_stats[IW_STATS_MAX];
static size_t            iw_stats_n;
static long long         iw_stats_started;
static long long         iw_stats_next;
static int               iw_stats_busy;
static int               iw_stats_warned;


void
iw_stats_init(const iw_conf_t *conf)
{
    iw_stats_conf = conf;
    iw_stats_started = ioa_wall_ms();
    iw_stats_next = 0;

    iw_redis_set_hook(iw_stats_tick);
}


void
iw_stats_add(const char *name, long long n)
{
    size_t  i;

    for (i = 0; i < iw_stats_n; i++) {
        if (strcmp(iw_stats[i].name, name) == 0) {
            iw_stats[i].value += n;
            return;
        }
    }

    /* a name too long or a full table is a bug here, not a reason to stop
     * a goal: the count is dropped */
    if (iw_stats_n == IW_STATS_MAX || strlen(name) >= IW_STATS_NAME) {
        return;
    }

    strcpy(iw_stats[iw_stats_n].name, name);
    iw_stats[iw_stats_n].value = n;
    iw_stats_n++;
}


/* a gauge: the value now (goals in flight, LLM requests waiting) */

void
iw_stats_set(const char *name, long long value)
{
    size_t  i;

    for (i = 0; i < iw_stats_n; i++) {
        if (strcmp(iw_stats[i].name, name) == 0) {
            iw_stats[i].value = value;
            return;
        }
    }

    iw_stats_add(name, value);
}


void
iw_stats_addf(long long n, const char *fmt, ...)
{
    char     name[IW_STATS_NAME];
    va_list  ap;
    int      len;

    va_start(ap, fmt);
    len = vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);

    if (len > 0 && (size_t) len < sizeof(name)) {
        iw_stats_add(name, n);
    }
}


/* the hook: a beat when one is due */

void
iw_stats_tick(void)
{
    if (ioa_mono_ms() >= iw_stats_next) {
        iw_stats_beat(0);
    }
}


void
iw_stats_beat(int stopped)
{
    size_t       i;
    iw_args_t    a;
    redisReply  *r;

    if (iw_stats_busy || iw_stats_conf == NULL || !iw_redis_connected()) {
        return;
    }

    /* set first: a beat that fails is not tried again before the next
     * second, whatever the goal sends meanwhile */
    iw_stats_next = ioa_mono_ms() + IW_STATS_BEAT_MS;
    iw_stats_busy = 1;

    iw_args_init(&a);
    iw_args_add(&a, iw_stats_conf->workers_base);
    iw_args_add(&a, iw_stats_conf->consumer);
    iw_args_addf(&a, "%lld", iw_stats_started);
    iw_args_addf(&a, "%d", IW_STATS_STALE_MS);
    iw_args_add(&a, stopped ? "1" : "0");
    iw_args_add(&a, "pid");
    iw_args_addf(&a, "%ld", (long) getpid());
    iw_args_add(&a, "planner");
    iw_args_add(&a, iw_stats_conf->llm ? "llm" : "builtin");

    for (i = 0; i < iw_stats_n; i++) {
        iw_args_add(&a, iw_stats[i].name);
        iw_args_addf(&a, "%lld", iw_stats[i].value);
    }

    r = iw_redis_eval_soft(IW_LUA_WORKER_BEAT, 1, &a);
    iw_args_free(&a);

    if (r && r->type == REDIS_REPLY_INTEGER) {
        iw_stats_warned = 0;
        ioa_health_touch();

    } else if (r && !iw_stats_warned) {
        /* once until a beat gets through again: a full Redis would
         * otherwise fill the log at one line a second */
        iw_warn("heartbeat not written: %s",
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        iw_stats_warned = 1;
    }

    if (r) {
        freeReplyObject(r);
    }

    iw_stats_busy = 0;
}
