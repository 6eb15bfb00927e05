/*
 * ioa-worker: the event loop.
 *
 * One libevent event_base per process (iw_loop), on which every socket
 * and timer of the worker waits: the Redis connections (rconn.c), and the
 * timers that the objects they time carry as their own struct event.
 *
 * Why libevent rather than a loop of our own: the worker needs readiness
 * of a few dozen sockets, many timers (one per waiting goal, later one per
 * LLM retry) and a clean way to be woken by them; libevent 2.1 (Debian's
 * libevent-core, as used by tmux, memcached and Tor) does exactly that
 * with epoll and a timer heap, and hiredis and libcurl both document how
 * to drive their sockets from it.  Only its core is linked (no evbuffer,
 * no HTTP, no threads).
 *
 * iw_loop_until() runs the loop until a flag is set: outside a goal's step
 * (the start, the engine's own commands, ioa-llm-check) the blocking calls
 * of redis.c (iw_redis_cmd() and the rest) are a command sent on the loop
 * and the loop run until its reply is in.  Inside a step, which runs on a
 * fiber (fiber.c), the same calls give the CPU back to the engine
 * instead, so other goals' steps run meanwhile.  iw_loop_until() must
 * never be called from inside a callback of the loop (libevent's loop is
 * not reentrant) nor from a fiber, and says so rather than hang.
 */

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "iw.h"


struct event_base  *iw_loop;

static int  iw_loop_running;


static void iw_loop_log(int severity, const char *msg);
static void iw_loop_fatal(int err);


int
iw_loop_init(void)
{
    event_set_log_callback(iw_loop_log);
    event_set_fatal_callback(iw_loop_fatal);

    iw_loop = event_base_new();

    if (iw_loop == NULL) {
        iw_error("libevent: cannot create an event base");
        return IW_ERROR;
    }

    return IW_OK;
}


void
iw_loop_free(void)
{
    if (iw_loop) {
        event_base_free(iw_loop);
        iw_loop = NULL;
    }
}


/* runs the loop, one turn at a time, until *done is set */

void
iw_loop_until(const int *done)
{
    if (iw_loop_running) {
        ioa_fatal("iw_loop_until() called from inside the event loop");
    }

    if (iw_fiber_current()) {
        ioa_fatal("iw_loop_until() called from a fiber (it waits with "
                  "iw_fiber_wait())");
    }

    iw_loop_running = 1;

    while (!*done) {
        if (event_base_loop(iw_loop, EVLOOP_ONCE) < 0) {
            ioa_fatal("libevent: the event loop failed");
        }
    }

    iw_loop_running = 0;
}


/* a timer of the object that owns ev, due in ms (replacing an earlier
 * due time) */

void
iw_timer_set(struct event *ev, long long ms)
{
    struct timeval  tv;

    if (ms < 0) {
        ms = 0;
    }

    tv.tv_sec = (time_t) (ms / 1000);
    tv.tv_usec = (suseconds_t) ((ms % 1000) * 1000);

    (void) evtimer_add(ev, &tv);
}


static void
iw_loop_log(int severity, const char *msg)
{
    if (severity >= EVENT_LOG_WARN) {
        iw_warn("libevent: %s", msg);
    }
}


static void
iw_loop_fatal(int err)
{
    ioa_fatal("libevent: fatal error %d", err);
}
