
/*
 * Copyright (C) ioa authors
 *
 * The discovery index's lock, which survives the death of its holders.
 *
 * Every worker of an instance reads the index (a query holds it shared)
 * and a worker at a time writes it (one agent's update holds it
 * exclusive), all in one shared memory zone (ngx_ioa_index.c).  nginx's
 * ngx_rwlock is a bare counter: a worker that dies while it holds the
 * lock (a crash, kill -9, the OOM killer) leaves the count behind, and
 * every other worker then spins in its event loop for ever.  nginx frees
 * its own slab mutex of a dead worker (the master does, by pid); nothing
 * does that for a lock of ours, so this one keeps who holds it:
 *
 *   lock      0 free, N readers, NGX_IOA_IX_WLOCK a writer;
 *   writer    the pid of the writer holding it;
 *   wwait     the pid of a writer waiting for it: readers that have not
 *             started hold back meanwhile, or queries from several
 *             workers could starve the writer;
 *   readers   one slot per reader, holding 2 * pid while it waits and
 *             2 * pid + 1 once it holds its share (a process reads one
 *             query at a time).
 *
 * A lock that has been waited for NGX_IOA_IX_STALL_US is suspect, and the
 * waiter checks whether its holders are alive (kill(pid, 0)):
 *
 *   - a dead reader only read: its share is given back and the index goes
 *     on as if it had finished;
 *   - a dead waiting writer had changed nothing: its wwait is cleared;
 *   - a dead writer may have left the index half written (a posting list
 *     between two chunks, a slab page half carved: nginx's slab allocator
 *     is used without its mutex here, since only the lock holder
 *     allocates).  Nothing in it can be trusted any more, so the index is
 *     marked BROKEN, the lock is released, and from then on no worker
 *     reads or writes it: discovery is answered by Redis (exact, slower)
 *     until nginx is restarted, or reloaded with another
 *     ioa_discovery_zone size (which makes a new zone).  The error log
 *     says so, once, at alert level.
 *
 * The one window this cannot see is a few instructions wide: a reader
 * that dies between taking its share and marking its slot leaks the share
 * (a writer then waits for ever, as any writer did before this lock).
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"
#include "ngx_ioa_index.h"


#define NGX_IOA_IX_WLOCK     ((ngx_atomic_uint_t) -1)
/* waited this long, a lock's holders are checked */
#define NGX_IOA_IX_STALL_US  1000000


static ngx_uint_t ngx_ioa_ix_alive(ngx_atomic_uint_t pid);
static ngx_uint_t ngx_ioa_ix_stalled(int64_t *since);
static void ngx_ioa_ix_dead_readers(ngx_ioa_ix_sh_t *sh);
static void ngx_ioa_ix_dead_writer(ngx_ioa_ix_sh_t *sh);


/* the slot of this process's read in progress */
static ngx_atomic_t  *ngx_ioa_ix_slot;


ngx_int_t
ngx_ioa_ix_rlock(ngx_ioa_ix_sh_t *sh)
{
    int64_t             since;
    ngx_uint_t          i, start;
    ngx_atomic_t       *slot;
    ngx_atomic_uint_t   n, me;

    since = 0;
    slot = NULL;
    me = 2 * (ngx_atomic_uint_t) ngx_pid;
    start = (ngx_uint_t) ngx_pid % NGX_IOA_IX_READERS;

    for ( ;; ) {
        if (sh->state == NGX_IOA_IX_BROKEN) {
            if (slot) {
                *slot = 0;
            }

            return NGX_DECLINED;
        }

        /* a slot first, marked "waiting", so that a reader that dies
         * before its share is not taken for one that holds it */

        for (i = 0; slot == NULL && i < NGX_IOA_IX_READERS; i++) {
            slot = &sh->readers[(start + i) % NGX_IOA_IX_READERS];

            if (*slot != 0 || !ngx_atomic_cmp_set(slot, 0, me)) {
                slot = NULL;
            }
        }

        n = sh->lock;

        if (slot && !sh->wwait && n != NGX_IOA_IX_WLOCK
            && ngx_atomic_cmp_set(&sh->lock, n, n + 1))
        {
            *slot = me + 1;
            ngx_ioa_ix_slot = slot;
            return NGX_OK;
        }

        if (ngx_ioa_ix_stalled(&since)) {
            ngx_ioa_ix_dead_writer(sh);
        }

        ngx_sched_yield();
    }
}


ngx_int_t
ngx_ioa_ix_wlock(ngx_ioa_ix_sh_t *sh)
{
    int64_t  since;

    since = 0;

    /* first in line among writers */

    for ( ;; ) {
        if (sh->state == NGX_IOA_IX_BROKEN) {
            return NGX_DECLINED;
        }

        if (ngx_atomic_cmp_set(&sh->wwait, 0, ngx_pid)) {
            break;
        }

        if (ngx_ioa_ix_stalled(&since)) {
            ngx_ioa_ix_dead_writer(sh);
        }

        ngx_sched_yield();
    }

    /* then the readers in progress finish (new ones hold back) */

    since = 0;

    for ( ;; ) {
        if (sh->state == NGX_IOA_IX_BROKEN) {
            sh->wwait = 0;
            return NGX_DECLINED;
        }

        if (sh->lock == 0 && ngx_atomic_cmp_set(&sh->lock, 0, NGX_IOA_IX_WLOCK))
        {
            sh->writer = ngx_pid;
            sh->wwait = 0;
            return NGX_OK;
        }

        if (ngx_ioa_ix_stalled(&since)) {
            ngx_ioa_ix_dead_readers(sh);
            ngx_ioa_ix_dead_writer(sh);
        }

        ngx_sched_yield();
    }
}


void
ngx_ioa_ix_unlock(ngx_ioa_ix_sh_t *sh)
{
    if (sh->lock == NGX_IOA_IX_WLOCK && sh->writer == (ngx_atomic_uint_t) ngx_pid)
    {
        sh->writer = 0;
        ngx_memory_barrier();
        sh->lock = 0;
        return;
    }

    if (ngx_ioa_ix_slot == NULL) {
        return;
    }

    (void) ngx_atomic_fetch_add(&sh->lock, -1);
    *ngx_ioa_ix_slot = 0;
    ngx_ioa_ix_slot = NULL;
}


static ngx_uint_t
ngx_ioa_ix_alive(ngx_atomic_uint_t pid)
{
    return kill((ngx_pid_t) pid, 0) == 0 || ngx_errno != NGX_ESRCH;
}


/* true once every NGX_IOA_IX_STALL_US of waiting */

static ngx_uint_t
ngx_ioa_ix_stalled(int64_t *since)
{
    int64_t  now;

    now = ngx_ioa_stats_now_us();

    if (*since == 0) {
        *since = now;
        return 0;
    }

    if (now - *since < NGX_IOA_IX_STALL_US) {
        return 0;
    }

    *since = now;

    return 1;
}


/* the shares of readers that died while reading go back */

static void
ngx_ioa_ix_dead_readers(ngx_ioa_ix_sh_t *sh)
{
    ngx_uint_t          i;
    ngx_atomic_uint_t   v;

    for (i = 0; i < NGX_IOA_IX_READERS; i++) {
        v = sh->readers[i];

        if (v == 0 || ngx_ioa_ix_alive(v / 2)) {
            continue;
        }

        /* the slot is emptied first, so that two writers that both find
         * the dead reader give its share back once */

        if (!ngx_atomic_cmp_set(&sh->readers[i], v, 0)) {
            continue;
        }

        if (v % 2 == 0) {
            continue;           /* it died waiting: no share taken */
        }

        (void) ngx_atomic_fetch_add(&sh->lock, -1);

        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "ioa discovery index: worker %uA died while reading "
                      "the index; its share of the lock is released", v / 2);
    }
}


/* a writer that died waiting is forgotten; one that died holding the
 * lock gives the index up */

static void
ngx_ioa_ix_dead_writer(ngx_ioa_ix_sh_t *sh)
{
    ngx_atomic_uint_t  pid;

    /* a writer that died waiting had changed nothing */

    pid = sh->wwait;

    if (pid && !ngx_ioa_ix_alive(pid)) {
        (void) ngx_atomic_cmp_set(&sh->wwait, pid, 0);
    }

    if (sh->lock != NGX_IOA_IX_WLOCK) {
        return;
    }

    pid = sh->writer;

    /* 0: it died between taking the lock and writing its pid */
    if (pid && ngx_ioa_ix_alive(pid)) {
        return;
    }

    sh->state = NGX_IOA_IX_BROKEN;
    ngx_memory_barrier();

    if (!ngx_atomic_cmp_set(&sh->writer, pid, 0)) {
        return;
    }

    sh->lock = 0;

    ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                  "ioa discovery index: worker %uA died while writing the "
                  "index, which can no longer be trusted; discovery is "
                  "answered by Redis until nginx is restarted (or reloaded "
                  "with another ioa_discovery_zone size)", pid);
}
