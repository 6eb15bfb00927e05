
/*
 * Copyright (C) ioa authors
 *
 * A bounded linger at the end of a busy turn of the event loop
 * (ioa_linger).
 *
 * Why: under saturation one turn of the loop serves many envelopes: one
 * epoll_wait, one read per busy socket, one write of every EVALSHA to
 * Redis, one write per member that several envelopes share.  Agents post
 * one envelope at a time, though, and at a steady 10,000 posts/s each
 * envelope used to be a turn of its own, twice (its frame, then Redis'
 * answer and publish): a sleep and a wake of the worker per step, Redis
 * woken per EVALSHA, and the generator of the traffic woken per frame.
 * BENCHMARKS.md ("Where an envelope's time goes, open loop") measured that
 * as 8 times the CPU per envelope of a saturated worker, most of it in the
 * kernel switching tasks, and the knee of latency far below capacity.
 *
 * What: once a worker handles envelopes (posted, or fanned out from
 * pub/sub) about as often as one per linger or more, it waits at the end
 * of each turn, after every write of the turn is out, for what is left of
 * the linger, counted from the turn's first envelope.  What arrives
 * meanwhile (frames, Redis' answers, publishes) is taken by the next
 * epoll_wait together, and Redis gets the EVALSHAs of the linger in one
 * write.  A turn whose own work took longer than the linger does not wait
 * at all: a saturated worker never sleeps, the linger only fills time the
 * worker would have spent idle, in smaller pieces.  The worker is busy if
 * the current or the previous millisecond had at least 1 ms / linger
 * envelopes; an idle hub, and one agent posting now and then, pay nothing.
 *
 * The price is latency: an envelope may wait up to one linger on each of
 * its two hops through the worker.  That is the trade BENCHMARKS.md
 * measures ("Open loop against nchan"), and why the linger is bounded to
 * NGX_IOA_LINGER_MAX.  The wait is a nanosleep(): nginx's timers count
 * milliseconds, and a worker that sleeps is exactly the point (the two
 * cores of a small machine go to Redis and the clients meanwhile).  The
 * worker's timer slack is lowered to a tenth of the linger so the kernel
 * does not stretch it by its default 50 us.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <sys/prctl.h>

#include "ngx_ioa.h"


static void ngx_ioa_linger_handler(ngx_event_t *ev);


static ngx_event_t       ngx_ioa_linger_ev;
/* nginx's debug log names an event by ev->data's descriptor */
static ngx_connection_t  ngx_ioa_linger_conn;

static ngx_uint_t        ngx_ioa_linger_us;
/* envelopes per millisecond that make the worker busy */
static ngx_uint_t        ngx_ioa_linger_busy;

/* envelopes in the current millisecond, and in the one before */
static ngx_msec_t        ngx_ioa_linger_ms;
static ngx_uint_t        ngx_ioa_linger_now;
static ngx_uint_t        ngx_ioa_linger_prev;

/* when the turn's first envelope was handled */
static struct timespec   ngx_ioa_linger_start;


ngx_int_t
ngx_ioa_linger_init(ngx_cycle_t *cycle)
{
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_linger_us = mcf->linger_us;

    if (ngx_ioa_linger_us == 0) {
        return NGX_OK;
    }

    ngx_ioa_linger_busy = ngx_max(1000 / ngx_ioa_linger_us, 1);

    if (prctl(PR_SET_TIMERSLACK, ngx_ioa_linger_us * 100UL, 0, 0, 0) == -1) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, ngx_errno,
                      "ioa: prctl(PR_SET_TIMERSLACK) failed, "
                      "ioa_linger may last longer than asked");
    }

    ngx_ioa_linger_ev.handler = ngx_ioa_linger_handler;
    ngx_ioa_linger_ev.log = cycle->log;
    ngx_ioa_linger_conn.fd = (ngx_socket_t) -1;
    ngx_ioa_linger_ev.data = &ngx_ioa_linger_conn;

    return NGX_OK;
}


/* an envelope was handled: posted by a client, or fanned out */

void
ngx_ioa_linger_note(void)
{
    if (ngx_ioa_linger_us == 0) {
        return;
    }

    if (ngx_current_msec != ngx_ioa_linger_ms) {
        ngx_ioa_linger_prev = (ngx_current_msec - ngx_ioa_linger_ms == 1)
                              ? ngx_ioa_linger_now : 0;
        ngx_ioa_linger_ms = ngx_current_msec;
        ngx_ioa_linger_now = 0;
    }

    ngx_ioa_linger_now++;

    if (ngx_ioa_linger_ev.posted || ngx_exiting
        || ngx_ioa_linger_now + ngx_ioa_linger_prev < ngx_ioa_linger_busy)
    {
        return;
    }

    (void) clock_gettime(CLOCK_MONOTONIC, &ngx_ioa_linger_start);

    ngx_post_event(&ngx_ioa_linger_ev, &ngx_posted_events);
}


static void
ngx_ioa_linger_handler(ngx_event_t *ev)
{
    long             spent;
    struct timespec  now, wait;

    if (!ngx_queue_empty(&ngx_posted_events)) {
        /* the turn's writes (clients, Redis) are posted events too: they
         * go first, so nothing of this turn waits for the linger */
        ngx_post_event(ev, &ngx_posted_events);
        return;
    }

    if (ngx_exiting) {
        return;
    }

    (void) clock_gettime(CLOCK_MONOTONIC, &now);

    spent = (now.tv_sec - ngx_ioa_linger_start.tv_sec) * 1000000
            + (now.tv_nsec - ngx_ioa_linger_start.tv_nsec) / 1000;

    if (spent < 0 || spent >= (long) ngx_ioa_linger_us) {
        /* a turn that took the linger's time or more: no wait */
        return;
    }

    wait.tv_sec = 0;
    wait.tv_nsec = (ngx_ioa_linger_us - spent) * 1000;

    ngx_ioa_stat_add(NGX_IOA_STAT_LINGERS, 1);

    /* a signal ends it early, and nginx handles the signal next */
    (void) nanosleep(&wait, NULL);
}
