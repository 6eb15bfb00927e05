/*
 * ioa-worker: the engine, many goals in one process.
 *
 * A goal spends nearly all of its life waiting: for an agent's answer,
 * a person, a model, a sub-goal, a deadline.  So a goal is not a process
 * or a thread here but an object (a flight: the job, the goal's state,
 * one timer, the channels it watches), and the process runs as many of
 * them as --max-goals allows on one event loop, the way nginx runs its
 * connections:
 *
 *            intake (XREADGROUP BLOCK, its own connection)
 *            XAUTOCLAIM (every second: goals of silent workers)
 *                 |
 *                 v
 *     +------> ready queue ----> step ----+--> IW_OK: ready again (tail)
 *     |          ^   ^                    |
 *     |          |   |                    +--> IW_GOAL_WAIT: waiting
 *     |  timer --+   +-- message on a     |      (timer + channels)
 *     |  (the goal's)    watched channel  +--> ended, lost: freed
 *     |                  (pubsub.c)       +--> error: again after 1 s,
 *     |                                          or after the reconnect
 *     +-- a flight woken while its step runs goes round once more
 *
 * A flight's states:
 *
 *   READY      on the ready queue, in the order it was woken (fair: every
 *              goal that can go on gets one step before any gets two)
 *   RUNNING    its step is under way on a fiber of its own (fiber.c):
 *              on the CPU, or parked until the reply to the Redis command
 *              it sent is in (the reply puts it on the resume queue, and
 *              the top of the loop goes on with it); up to IW_FIBERS steps
 *              are under way at once, a wake meanwhile sets `again`
 *   WAITING    its timer is armed for the step's wake_in (a task's or a
 *              turn's deadline, an agent's presence running out), at the
 *              latest when the lease needs renewing (claim_idle / 3), and
 *              IW_GOAL_POLL_MS when one of its channels is not subscribed;
 *              its channels wake it sooner
 *   RETRY      a step failed on a healthy Redis: its timer brings it back
 *              in IW_ENGINE_RETRY_MS, reloaded from Redis (as a takeover
 *              would); after IW_ENGINE_MAX_ERRORS in a row its job is
 *              released for another worker
 *   PAUSED     Redis is gone: every flight waits for the reconnect, then
 *              is reloaded from Redis and ready again
 *
 * Callbacks of the loop (a timer, a message, a command's reply, the
 * intake's reply) only move flights between these states; every step
 * starts, and every parked step goes on, from the top of iw_engine_run()'s
 * loop, never from inside a callback.  A step is written as straight
 * code (HGET, then post.lua, then the fsm's writes), and the fiber is
 * what keeps that code from blocking: a step that sends a command gives
 * the CPU back to the loop, so while one goal's command waits for a slow
 * Redis (a busy script, a node failing over) every other goal's steps
 * run.  What a goal waits for that takes time (an agent, a person, a
 * model, a deadline) is a state, not a parked step.
 *
 * Backpressure: the intake asks only for as many jobs as there is room
 * for under --max-goals and stops asking at the cap; XAUTOCLAIM likewise.
 * A goal that is not taken stays in the Stream for another worker.
 *
 * The lease of each goal is its own (the job's pending entry, renewed by
 * its own step), so another worker takes over one goal, not a process.
 * SIGTERM releases every job the process holds at once, and exits.
 */

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "iw.h"
#include "llm.h"


#define IW_ENGINE_BACKOFF_MIN_MS   100
#define IW_ENGINE_BACKOFF_MAX_MS   5000
#define IW_ENGINE_RETRY_MS         1000
#define IW_ENGINE_MAX_ERRORS       5

/* the most jobs one intake read or one XAUTOCLAIM takes */
#define IW_ENGINE_TAKE_MAX         32

/* an intake read waits this long for a job, then is sent again */
#define IW_ENGINE_INTAKE_BLOCK_MS  1000

/* steps run before the loop looks at its sockets again: a queue of a
 * thousand ready goals does not keep a reply or a signal waiting */
#define IW_ENGINE_BATCH            64

/* the loop wakes at least this often for the heartbeat and XAUTOCLAIM */
#define IW_ENGINE_TICK_MS          250


typedef enum {
    IW_FLIGHT_READY = 0,
    IW_FLIGHT_RUNNING,
    IW_FLIGHT_WAITING,
    IW_FLIGHT_RETRY,
    IW_FLIGHT_PAUSED
} iw_flight_state_e;


typedef struct iw_flight_s  iw_flight_t;

struct iw_flight_s {
    iw_flight_t        *prev;        /* every flight */
    iw_flight_t        *next;
    iw_flight_t        *next_ready;
    iw_job_t            job;
    iw_goal_t           g;
    int                 loaded;      /* g holds the goal (iw_goal_open) */
    iw_flight_state_e   state;
    int                 queued;      /* on the ready queue */
    int                 again;       /* woken while its step ran */
    int                 errors;      /* failed steps in a row */
    int                 rc;          /* what its last step returned */
    iw_fiber_t         *fiber;       /* its step's, while under way */
    iw_flight_t        *next_resume;
    struct event       *timer;
    iw_watch_t         *watch;       /* one per channel */
    char              **chans;
    size_t              nchans;
    iw_llm_memo_t       memo;        /* its model calls (llm_planner.c) */
};


static const iw_conf_t  *iw_conf;
static iw_flight_t      *iw_flights;
static long long         iw_nflights;
static iw_flight_t      *iw_ready_head;
static iw_flight_t      *iw_ready_tail;
static iw_flight_t      *iw_resume_head;  /* steps whose reply is in */
static iw_flight_t      *iw_resume_tail;
static int               iw_intake_out;    /* a read is on its way */
static int               iw_intake_nogroup;
static char             *iw_claim_cursor;
static long long         iw_next_claim;


static void iw_engine_on_signal(evutil_socket_t fd, short what, void *arg);
static void iw_engine_on_tick(evutil_socket_t fd, short what, void *arg);
static int iw_engine_connect(void);
static void iw_engine_wait_ms(long long ms);
static void iw_engine_on_wake_timer(evutil_socket_t fd, short what,
    void *arg);
static void iw_engine_lost(void);
static void iw_engine_intake(void);
static void iw_engine_on_intake(void *data, redisReply *r);
static void iw_engine_claim(void);
static void iw_engine_take(iw_job_t *jobs, int n);
static void iw_engine_release_all(void);
static void iw_engine_gauges(void);
static iw_flight_t *iw_flight_new(iw_job_t *job);
static iw_flight_t *iw_flight_find(const char *job_id);
static void iw_engine_resume(void);
static int iw_engine_runnable(void);
static void iw_flight_run(iw_flight_t *f);
static void iw_flight_turn(void *data);
static void iw_flight_on_reply(void *data);
static void iw_flight_done(iw_flight_t *f);
static void iw_flight_ready(iw_flight_t *f);
static void iw_flight_wake(iw_flight_t *f);
static void iw_flight_on_timer(evutil_socket_t fd, short what, void *arg);
static void iw_flight_on_message(iw_watch_t *w);
static void iw_flight_on_llm(void *data);
static void iw_flight_wait(iw_flight_t *f);
static void iw_flight_watch(iw_flight_t *f);
static void iw_flight_unwatch(iw_flight_t *f);
static void iw_flight_unload(iw_flight_t *f);
static void iw_flight_free(iw_flight_t *f);


/*
 * The engine's loop, until SIGTERM: (re)connect with backoff, run the
 * ready goals, keep the intake reading while there is room, look for
 * orphaned goals every second, then wait for the loop's next event.
 */

void
iw_engine_run(const iw_conf_t *conf)
{
    int            n;
    long long      backoff, now;
    iw_flight_t   *f;
    struct event  *sigterm, *sigint, *tick;
    struct timeval tv;

    iw_conf = conf;
    iw_claim_cursor = ioa_strdup("0-0");
    backoff = IW_ENGINE_BACKOFF_MIN_MS;

    /* the loop's own signal events: a SIGTERM wakes its wait (a plain
     * handler would leave epoll asleep until the next event) */
    sigterm = evsignal_new(iw_loop, SIGTERM, iw_engine_on_signal, NULL);
    sigint = evsignal_new(iw_loop, SIGINT, iw_engine_on_signal, NULL);

    if (sigterm == NULL || sigint == NULL) {
        ioa_fatal("libevent: cannot allocate a signal event");
    }

    (void) event_add(sigterm, NULL);
    (void) event_add(sigint, NULL);

    /* wakes the loop for the heartbeat and XAUTOCLAIM while every goal
     * waits */
    tick = event_new(iw_loop, -1, EV_PERSIST, iw_engine_on_tick, NULL);
    if (tick == NULL) {
        ioa_fatal("libevent: cannot allocate a timer");
    }

    tv.tv_sec = 0;
    tv.tv_usec = IW_ENGINE_TICK_MS * 1000;
    (void) event_add(tick, &tv);

    while (!iw_stop) {

        iw_engine_resume();

        if (!iw_redis_connected()) {
            iw_engine_lost();

            if (iw_engine_connect() != IW_OK) {
                iw_redis_close();
                iw_stats_add("retries:redis", 1);
                iw_engine_wait_ms(backoff / 2 + rand() % (backoff / 2 + 1));
                backoff = backoff * 2 > IW_ENGINE_BACKOFF_MAX_MS
                          ? IW_ENGINE_BACKOFF_MAX_MS : backoff * 2;
                continue;
            }

            backoff = IW_ENGINE_BACKOFF_MIN_MS;
        }

        for (n = 0; n < IW_ENGINE_BATCH && !iw_stop; n++) {
            f = iw_ready_head;

            if (f == NULL || !iw_redis_connected() || !iw_fiber_available())
            {
                break;
            }

            iw_ready_head = f->next_ready;
            if (iw_ready_head == NULL) {
                iw_ready_tail = NULL;
            }

            f->next_ready = NULL;
            f->queued = 0;

            iw_flight_run(f);
        }

        if (iw_stop || !iw_redis_connected()) {
            continue;
        }

        if (iw_intake_nogroup) {
            iw_intake_nogroup = 0;

            if (iw_jobs_group(conf) != IW_OK) {
                continue;
            }
        }

        now = ioa_mono_ms();

        if (now >= iw_next_claim) {
            iw_next_claim = now + (conf->claim_idle_ms / 2 < 1000
                                   ? conf->claim_idle_ms / 2 : 1000);
            iw_engine_claim();
        }

        iw_engine_gauges();
        iw_stats_tick();
        iw_engine_intake();

        if (event_base_loop(iw_loop, iw_engine_runnable() ? EVLOOP_NONBLOCK
                                                          : EVLOOP_ONCE)
            < 0)
        {
            ioa_fatal("libevent: the event loop failed");
        }
    }

    /* the steps under way end first: their commands are short, and a
     * connection lost meanwhile answers them at once */
    while (iw_fiber_busy()) {
        iw_engine_resume();

        if (iw_fiber_busy() && event_base_loop(iw_loop, EVLOOP_ONCE) < 0) {
            ioa_fatal("libevent: the event loop failed");
        }
    }

    iw_engine_release_all();

    /* the last beat says "stopped": /metrics shows the worker down at
     * once rather than when its heartbeat grows old */
    iw_stats_set("goals_in_flight", 0);
    iw_stats_beat(1);

    while ((f = iw_flights) != NULL) {
        iw_flight_free(f);
    }

    iw_pubsub_close();
    iw_redis_close();

    event_free(tick);
    event_free(sigterm);
    event_free(sigint);
    free(iw_claim_cursor);
    iw_claim_cursor = NULL;
}


static void
iw_engine_on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    (void) arg;

    iw_stop = 1;
}


static void
iw_engine_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    (void) arg;
}


/* the connection, the group, the coordinator's registration, then this
 * consumer's own pending jobs (a restart under the same --consumer) and
 * every flight reloaded */

static int
iw_engine_connect(void)
{
    int           n;
    iw_job_t      jobs[IW_ENGINE_TAKE_MAX];
    iw_flight_t  *f;

    if (iw_redis_connect() != IW_OK
        || iw_jobs_group(iw_conf) != IW_OK
        || iw_reg_register(iw_conf) != IW_OK)
    {
        return IW_ERROR;
    }

    iw_intake_out = 0;
    iw_next_claim = 0;
    iw_pubsub_reconnected();

    for (f = iw_flights; f; f = f->next) {
        if (f->state == IW_FLIGHT_PAUSED) {
            iw_flight_ready(f);
        }
    }

    if (iw_nflights < iw_conf->max_goals) {
        n = iw_jobs_pending(iw_conf, jobs, IW_ENGINE_TAKE_MAX);

        if (n == IW_ERROR) {
            return IW_ERROR;
        }

        iw_engine_take(jobs, n);
    }

    return IW_OK;
}


/* the backoff between two connects, on the loop (a SIGTERM ends it) */

static void
iw_engine_wait_ms(long long ms)
{
    int            done;
    struct event  *t;

    done = 0;
    t = evtimer_new(iw_loop, iw_engine_on_wake_timer, &done);
    if (t == NULL) {
        ioa_fatal("libevent: cannot allocate a timer");
    }

    iw_timer_set(t, ms);

    while (!done && !iw_stop) {
        if (event_base_loop(iw_loop, EVLOOP_ONCE) < 0) {
            ioa_fatal("libevent: the event loop failed");
        }
    }

    event_free(t);
}


static void
iw_engine_on_wake_timer(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;

    *(int *) arg = 1;
}


/* Redis is gone: every flight waits for the reconnect, its memory state
 * dropped (it is reloaded from what Redis holds, as after a takeover) */

static void
iw_engine_lost(void)
{
    iw_flight_t  *f;

    iw_intake_out = 0;
    iw_ready_head = NULL;
    iw_ready_tail = NULL;

    for (f = iw_flights; f; f = f->next) {
        f->queued = 0;
        f->next_ready = NULL;

        if (f->fiber) {
            continue;       /* its step ends with the error, then waits */
        }

        (void) evtimer_del(f->timer);
        iw_flight_unload(f);
        f->state = IW_FLIGHT_PAUSED;
    }
}


/* one read for new jobs on its way while there is room for them */

static void
iw_engine_intake(void)
{
    int     room;
    char   *cmd;
    size_t  len;

    if (iw_intake_out || iw_stop) {
        return;
    }

    room = (int) (iw_conf->max_goals - iw_nflights);

    if (room <= 0) {
        return;
    }

    if (room > IW_ENGINE_TAKE_MAX) {
        room = IW_ENGINE_TAKE_MAX;
    }

    cmd = iw_jobs_read_cmd(iw_conf, room, IW_ENGINE_INTAKE_BLOCK_MS, &len);
    iw_intake_out = 1;
    iw_redis_send(cmd, len, iw_engine_on_intake, NULL);
}


/* from the loop: the new jobs become flights, ready (a NULL reply: Redis
 * is gone, and the top of the loop sees that) */

static void
iw_engine_on_intake(void *data, redisReply *r)
{
    int       n, nogroup;
    iw_job_t  jobs[IW_ENGINE_TAKE_MAX];

    (void) data;

    iw_intake_out = 0;

    if (r == NULL) {
        return;
    }

    n = iw_jobs_parse(r, jobs, IW_ENGINE_TAKE_MAX, &nogroup);
    freeReplyObject(r);

    if (nogroup) {
        iw_intake_nogroup = 1;
        return;
    }

    if (n > 0) {
        iw_engine_take(jobs, n);
    }
}


/* goals whose worker has been silent for --claim-idle */

static void
iw_engine_claim(void)
{
    int       i, n, room;
    iw_job_t  jobs[IW_ENGINE_TAKE_MAX];

    room = (int) (iw_conf->max_goals - iw_nflights);

    if (room <= 0) {
        return;
    }

    n = iw_jobs_autoclaim(iw_conf, &iw_claim_cursor, jobs,
                          room < IW_ENGINE_TAKE_MAX ? room
                                                    : IW_ENGINE_TAKE_MAX);
    if (n <= 0) {
        return;
    }

    for (i = 0; i < n; i++) {
        if (iw_flight_find(jobs[i].id) == NULL) {
            iw_info("took over job %s (goal %s) from a silent worker",
                    jobs[i].id, jobs[i].goal_id ? jobs[i].goal_id : "-");
        }
    }

    iw_engine_take(jobs, n);
}


/* jobs taken become flights (the jobs' strings are theirs now); a job
 * already in flight here (our own pending entry, read again after a
 * reconnect) is not run twice */

static void
iw_engine_take(iw_job_t *jobs, int n)
{
    int           i;
    iw_flight_t  *f;

    for (i = 0; i < n; i++) {
        if (iw_flight_find(jobs[i].id)) {
            iw_job_free(&jobs[i]);
            continue;
        }

        f = iw_flight_new(&jobs[i]);
        iw_flight_ready(f);
    }
}


/* what /metrics shows of the engine: goals in flight, and the limiter
 * and breaker of the LLM endpoint */

static void
iw_engine_gauges(void)
{
    int        open;
    long long  in_flight, queued, trips;

    iw_stats_set("goals_in_flight", iw_nflights);

    if (iw_conf->llm) {
        iw_llm_gauges(&in_flight, &queued, &open, &trips);
        iw_stats_set("llm_in_flight", in_flight);
        iw_stats_set("llm_queued", queued);
        iw_stats_set("llm_breaker_open", open);
        iw_stats_set("llm_breaker_trips", trips);
    }
}


/* SIGTERM: every job this process holds goes back at once */

static void
iw_engine_release_all(void)
{
    long long     n;
    iw_flight_t  *f;

    if (!iw_redis_connected()) {
        return;
    }

    n = 0;

    for (f = iw_flights; f && iw_redis_connected(); f = f->next) {
        if (f->loaded) {
            (void) iw_goal_release(iw_conf, &f->g);

        } else {
            (void) iw_jobs_touch(iw_conf, f->job.id, 1);
        }

        n++;
    }

    if (n) {
        iw_info("released %lld goal%s for other workers", n,
                n == 1 ? "" : "s");
    }
}


static iw_flight_t *
iw_flight_new(iw_job_t *job)
{
    iw_flight_t  *f;

    f = ioa_calloc(sizeof(iw_flight_t));
    f->job = *job;
    f->state = IW_FLIGHT_PAUSED;
    f->memo.wake = iw_flight_on_llm;
    f->memo.data = f;

    f->timer = evtimer_new(iw_loop, iw_flight_on_timer, f);
    if (f->timer == NULL) {
        ioa_fatal("libevent: cannot allocate a timer");
    }

    f->next = iw_flights;
    if (iw_flights) {
        iw_flights->prev = f;
    }

    iw_flights = f;
    iw_nflights++;

    return f;
}


static iw_flight_t *
iw_flight_find(const char *job_id)
{
    iw_flight_t  *f;

    for (f = iw_flights; f; f = f->next) {
        if (strcmp(f->job.id, job_id) == 0) {
            return f;
        }
    }

    return NULL;
}


/*
 * Every step whose Redis reply is in goes on (fiber.c), in the order the
 * replies came; a step that ends is handled as iw_flight_run() would.
 */

static void
iw_engine_resume(void)
{
    iw_flight_t  *f;

    while ((f = iw_resume_head) != NULL) {
        iw_resume_head = f->next_resume;
        if (iw_resume_head == NULL) {
            iw_resume_tail = NULL;
        }

        f->next_resume = NULL;

        if (iw_fiber_resume(f->fiber) == IW_GOAL_WAIT) {
            continue;                   /* its next command is out */
        }

        f->fiber = NULL;
        iw_flight_done(f);
    }
}


/* something to do without waiting for the loop */

static int
iw_engine_runnable(void)
{
    return iw_resume_head != NULL
           || (iw_ready_head != NULL && iw_fiber_available());
}


/*
 * One step of the flight's goal, from the top of the loop, on a fiber of
 * its own: it runs until it ends or sends a Redis command, and in the
 * latter case the flight stays RUNNING, with its fiber, until the reply
 * brings it back (iw_flight_on_reply, iw_engine_resume).
 */

static void
iw_flight_run(iw_flight_t *f)
{
    int  rc;

    f->state = IW_FLIGHT_RUNNING;
    f->again = 0;

    rc = iw_fiber_run(iw_flight_turn, f, iw_flight_on_reply, f, &f->fiber);

    if (rc == IW_GOAL_WAIT) {
        return;
    }

    if (rc == IW_ERROR) {
        /* no stack could be mapped: the step had not started */
        f->fiber = NULL;
        f->state = IW_FLIGHT_RETRY;
        iw_timer_set(f->timer, IW_ENGINE_RETRY_MS);
        return;
    }

    f->fiber = NULL;
    iw_flight_done(f);
}


/* on the flight's fiber: the step itself */

static void
iw_flight_turn(void *data)
{
    int           rc, reload;
    iw_flight_t  *f;

    f = data;

    /* a step that waited for a model runs again from what Redis holds
     * (llm_planner.c: iw_llm_call) */
    reload = f->memo.waiting;
    f->memo.waiting = 0;

    if (reload && f->loaded) {
        iw_flight_unload(f);
        rc = iw_goal_open(iw_conf, &f->job, &f->g, 1);
        f->loaded = (rc == IW_OK);
        f->g.llm_memo = &f->memo;

        if (rc == IW_OK) {
            rc = iw_goal_step(iw_conf, &f->g);
        }

    } else if (!f->loaded) {
        rc = iw_goal_open(iw_conf, &f->job, &f->g, 0);
        f->loaded = (rc == IW_OK);
        f->g.llm_memo = &f->memo;

    } else {
        rc = iw_goal_step(iw_conf, &f->g);
    }

    f->rc = rc;
}


/* from the loop: the reply its step waited for is in */

static void
iw_flight_on_reply(void *data)
{
    iw_flight_t  *f;

    f = data;

    f->next_resume = NULL;

    if (iw_resume_tail) {
        iw_resume_tail->next_resume = f;

    } else {
        iw_resume_head = f;
    }

    iw_resume_tail = f;
}


/* the step has ended: what it returned decides the flight's state */

static void
iw_flight_done(iw_flight_t *f)
{
    int  rc;

    rc = f->rc;

    if (!f->memo.waiting) {
        iw_llm_memo_clear(&f->memo);
    }

    switch (rc) {

    case IW_OK:
        iw_flight_ready(f);
        return;

    case IW_GOAL_WAIT:
        f->errors = 0;
        iw_flight_wait(f);
        return;

    case IW_GOAL_ENDED:
    case IW_LOST:
        iw_flight_free(f);
        return;

    case IW_STOPPED:
        /* released with the others when the loop ends */
        f->state = IW_FLIGHT_PAUSED;
        return;

    default:
        break;
    }

    /* IW_ERROR */

    iw_flight_unload(f);

    if (!iw_redis_connected()) {
        iw_stats_add("retries:goal", 1);
        f->state = IW_FLIGHT_PAUSED;    /* resumed after the reconnect */
        return;
    }

    if (++f->errors < IW_ENGINE_MAX_ERRORS) {
        iw_stats_add("retries:goal", 1);
        f->state = IW_FLIGHT_RETRY;
        iw_timer_set(f->timer, IW_ENGINE_RETRY_MS);
        return;
    }

    iw_error("goal %s: giving it up after %d errors; released for another "
             "worker", f->job.goal_id ? f->job.goal_id : "-", f->errors);
    (void) iw_jobs_touch(iw_conf, f->job.id, 1);
    iw_flight_free(f);
}


static void
iw_flight_ready(iw_flight_t *f)
{
    f->state = IW_FLIGHT_READY;

    if (f->queued) {
        return;
    }

    f->queued = 1;
    f->next_ready = NULL;

    if (iw_ready_tail) {
        iw_ready_tail->next_ready = f;

    } else {
        iw_ready_head = f;
    }

    iw_ready_tail = f;
}


static void
iw_flight_wake(iw_flight_t *f)
{
    switch (f->state) {

    case IW_FLIGHT_WAITING:
        (void) evtimer_del(f->timer);
        iw_flight_ready(f);
        break;

    case IW_FLIGHT_RUNNING:
        f->again = 1;
        break;

    default:
        break;                          /* it looks anyway, or cannot */
    }
}


static void
iw_flight_on_timer(evutil_socket_t fd, short what, void *arg)
{
    iw_flight_t  *f;

    (void) fd;
    (void) what;

    f = arg;

    if (f->state == IW_FLIGHT_RETRY) {
        iw_flight_ready(f);
        return;
    }

    iw_flight_wake(f);
}


static void
iw_flight_on_message(iw_watch_t *w)
{
    iw_flight_wake(w->data);
}


static void
iw_flight_on_llm(void *data)
{
    iw_flight_wake(data);
}


/* the step waits: its channels watched, its timer armed for the earliest
 * of its own time, the lease's renewal, and the poll when a channel is
 * not subscribed */

static void
iw_flight_wait(iw_flight_t *f)
{
    size_t     i;
    long long  ms, lease;

    f->state = IW_FLIGHT_WAITING;

    iw_flight_watch(f);

    if (f->again || f->state != IW_FLIGHT_WAITING) {
        iw_flight_ready(f);             /* woken meanwhile: look again */
        return;
    }

    ms = f->g.wake_in;

    lease = f->g.renewed + iw_conf->claim_idle_ms / 3 - ioa_mono_ms();
    if (ms < 0 || lease < ms) {
        ms = lease;
    }

    for (i = 0; i < f->nchans; i++) {
        if (!iw_pubsub_live(&f->watch[i])) {
            if (ms > IW_GOAL_POLL_MS) {
                ms = IW_GOAL_POLL_MS;
            }

            break;
        }
    }

    iw_timer_set(f->timer, ms > 0 ? ms : 1);
}


/* the channels of the goal now; the same list as before is kept as it is
 * (its subscriptions stay), a changed one is watched anew */

static void
iw_flight_watch(iw_flight_t *f)
{
    size_t   i, n;
    char   **v;

    n = iw_goal_channels(iw_conf, &f->g, &v);

    if (n == f->nchans) {
        for (i = 0; i < n; i++) {
            if (strcmp(v[i], f->chans[i]) != 0) {
                break;
            }
        }

        if (i == n) {
            for (i = 0; i < n; i++) {
                free(v[i]);
            }

            free(v);
            return;
        }
    }

    iw_flight_unwatch(f);

    f->chans = v;
    f->nchans = n;
    f->watch = ioa_calloc(n * sizeof(iw_watch_t));

    for (i = 0; i < n; i++) {
        f->watch[i].wake = iw_flight_on_message;
        f->watch[i].data = f;
        iw_pubsub_watch(&f->watch[i], v[i]);
    }
}


static void
iw_flight_unwatch(iw_flight_t *f)
{
    size_t  i;

    for (i = 0; i < f->nchans; i++) {
        iw_pubsub_unwatch(&f->watch[i]);
        free(f->chans[i]);
    }

    free(f->watch);
    free(f->chans);
    f->watch = NULL;
    f->chans = NULL;
    f->nchans = 0;
}


static void
iw_flight_unload(iw_flight_t *f)
{
    if (f->loaded) {
        iw_goal_free(&f->g);
        f->loaded = 0;
    }
}


static void
iw_flight_free(iw_flight_t *f)
{
    iw_flight_t  **pp;

    if (f->queued) {
        for (pp = &iw_ready_head; *pp; pp = &(*pp)->next_ready) {
            if (*pp == f) {
                *pp = f->next_ready;
                break;
            }
        }

        iw_ready_tail = NULL;

        for (pp = &iw_ready_head; *pp; pp = &(*pp)->next_ready) {
            iw_ready_tail = *pp;
        }
    }

    if (f->prev) {
        f->prev->next = f->next;

    } else {
        iw_flights = f->next;
    }

    if (f->next) {
        f->next->prev = f->prev;
    }

    iw_nflights--;

    iw_flight_unwatch(f);
    iw_flight_unload(f);
    iw_llm_memo_clear(&f->memo);
    event_free(f->timer);
    iw_job_free(&f->job);
    free(f);
}
