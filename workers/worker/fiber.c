/*
 * ioa-worker: fibers, so that a step's Redis commands do not stop the
 * other goals.
 *
 * A goal's step (goal.c and the phases below it) is written as straight
 * code: load the fsm, read the room, decide, post, save.  Each of those is
 * a Redis command, a loopback round trip of some tens of microseconds,
 * and a Cluster's failover can hold one for seconds.  Were the step to
 * run to its replies on the loop (as iw_loop_until() does for the
 * engine's own commands), every other goal of the process would wait for
 * each of them, and a thousand goals' steps would take turns on one
 * connection instead of sharing it.
 *
 * So the engine runs each step on a fiber: a small stack of its own on
 * which the step's code runs until its next Redis command is sent, then
 * gives the CPU back to the engine (iw_fiber_wait(), from
 * iw_redis_wait()); the command's reply wakes the fiber (iw_fiber_wake()
 * calls the handler the engine gave it), and the engine continues it from
 * the top of its loop.  Meanwhile other goals' steps start, and their
 * commands go out pipelined behind the first one.  The alternative, every
 * step cut by hand into callbacks at each of its fifty Redis commands,
 * would put the goal's logic (goal.c's exactly-once argument among it)
 * into a shape nobody could check; this keeps the logic as it reads and
 * makes only the waiting cooperative.
 *
 * A fiber's states:
 *
 *   FREE      in the pool, its stack kept for the next step
 *   RUNNING   on the CPU: at most one fiber at a time, and only ever
 *             entered from the engine (iw_fiber_run, iw_fiber_resume),
 *             never from a callback of the loop
 *   WAITING   its step waits for a reply; iw_fiber_wake() tells the
 *             engine, which resumes it
 *
 * A goal that waits for an agent, a person or a model is not on a fiber:
 * its step has returned IW_GOAL_WAIT (engine.c), and the goal costs its
 * state in memory and nothing else.  Only steps under way hold one, at
 * most IW_FIBERS at a time (more ready goals wait their turn on the ready
 * queue): stacks are mapped when first needed, with a guard page below
 * each (an overflow is a crash at the guard, not memory overwritten),
 * and only the pages a step touched are ever resident.
 *
 * The switch is getcontext()/setcontext() from glibc (no library does
 * this better for C; a hand-written switch would be assembly per
 * architecture).  Not swapcontext(): AddressSanitizer intercepts that one
 * and reports every use as unsupported, while with the two calls below
 * and its fiber annotations (__sanitizer_start_switch_fiber) it follows
 * each stack exactly.
 */

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "iw.h"


#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define IW_FIBER_ASAN  1
/* a sanitized step's frames are several times larger */
#define IW_FIBER_STACK  (2 * 1024 * 1024)
#else
#define IW_FIBER_ASAN  0
#define IW_FIBER_STACK  (512 * 1024)
#endif


typedef enum {
    IW_FIBER_FREE = 0,
    IW_FIBER_RUNNING,
    IW_FIBER_WAITING
} iw_fiber_state_e;


struct iw_fiber_s {
    ucontext_t          ctx;
    iw_fiber_state_e    state;
    int                 done;        /* fn returned: back to the pool */
    char               *map;         /* the guard page, then the stack */
    size_t              map_size;
    iw_fiber_pt         fn;
    void               *data;
    void              (*wake)(void *data);
    void               *wake_data;
    iw_fiber_t         *next_free;
#if IW_FIBER_ASAN
    void               *asan_fake;   /* this fiber's fake stack */
#endif
};


static iw_fiber_t   iw_fibers[IW_FIBERS];
static iw_fiber_t  *iw_fiber_free_list;
static int          iw_fiber_ready;
static int          iw_fibers_busy;
static iw_fiber_t  *iw_fiber_now;          /* on the CPU, NULL: the engine */
static ucontext_t   iw_fiber_engine;        /* where a fiber goes back to */
#if IW_FIBER_ASAN
static const void  *iw_fiber_engine_bottom; /* the engine's stack */
static size_t       iw_fiber_engine_size;
#endif


static void iw_fiber_init(void);
static int iw_fiber_map(iw_fiber_t *fb);
static void iw_fiber_entry(void);
static int iw_fiber_enter(iw_fiber_t *fb);
static void iw_fiber_leave(iw_fiber_t *fb);
static void iw_fiber_switch(ucontext_t *from, ucontext_t *to);


static void
iw_fiber_init(void)
{
    int  i;

    for (i = IW_FIBERS - 1; i >= 0; i--) {
        iw_fibers[i].next_free = iw_fiber_free_list;
        iw_fiber_free_list = &iw_fibers[i];
    }

    iw_fiber_ready = 1;
}


/*
 * Runs fn(data) on a free fiber until it returns (IW_OK: done) or waits
 * for a reply (IW_GOAL_WAIT: *out is its fiber, which wake(wake_data)
 * announces ready to go on).  IW_ERROR: no fiber is free (or no stack
 * could be mapped); nothing ran.
 */

int
iw_fiber_run(iw_fiber_pt fn, void *data, void (*wake)(void *data),
    void *wake_data, iw_fiber_t **out)
{
    iw_fiber_t  *fb;

    if (!iw_fiber_ready) {
        iw_fiber_init();
    }

    if (iw_fiber_now) {
        ioa_fatal("iw_fiber_run() called from inside a fiber");
    }

    fb = iw_fiber_free_list;

    if (fb == NULL) {
        return IW_ERROR;
    }

    if (fb->map == NULL && iw_fiber_map(fb) != IW_OK) {
        return IW_ERROR;
    }

    iw_fiber_free_list = fb->next_free;
    fb->next_free = NULL;
    fb->fn = fn;
    fb->data = data;
    fb->wake = wake;
    fb->wake_data = wake_data;
    fb->done = 0;
    iw_fibers_busy++;

    *out = fb;

    return iw_fiber_enter(fb);
}


/* from the engine: the fiber's reply is in, it goes on until it returns
 * (IW_OK, back in the pool) or waits again (IW_GOAL_WAIT) */

int
iw_fiber_resume(iw_fiber_t *fb)
{
    if (iw_fiber_now) {
        ioa_fatal("iw_fiber_resume() called from inside a fiber");
    }

    if (fb->state != IW_FIBER_WAITING) {
        ioa_fatal("iw_fiber_resume() of a fiber that does not wait");
    }

    return iw_fiber_enter(fb);
}


/* from inside a fiber: back to the engine until iw_fiber_resume() */

void
iw_fiber_wait(void)
{
    iw_fiber_t  *fb;

    fb = iw_fiber_now;

    if (fb == NULL) {
        ioa_fatal("iw_fiber_wait() called outside a fiber");
    }

    fb->state = IW_FIBER_WAITING;
    iw_fiber_leave(fb);

    /* resumed: iw_fiber_enter() set RUNNING */
}


/* a reply for a waiting fiber (from the loop): the engine is told */

void
iw_fiber_wake(iw_fiber_t *fb)
{
    if (fb->state == IW_FIBER_WAITING && fb->wake) {
        fb->wake(fb->wake_data);
    }
}


iw_fiber_t *
iw_fiber_current(void)
{
    return iw_fiber_now;
}


/* steps under way, and whether another can start */

int
iw_fiber_busy(void)
{
    return iw_fibers_busy;
}


int
iw_fiber_available(void)
{
    return !iw_fiber_ready || iw_fiber_free_list != NULL;
}


static int
iw_fiber_map(iw_fiber_t *fb)
{
    char    *map;
    size_t   page, size;

    page = (size_t) sysconf(_SC_PAGESIZE);
    size = IW_FIBER_STACK + page;

    map = mmap(NULL, size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
               -1, 0);

    if (map == MAP_FAILED) {
        iw_error("cannot map a fiber's stack of %d KiB",
                 IW_FIBER_STACK / 1024);
        return IW_ERROR;
    }

    /* stacks grow down: the guard is the lowest page */
    if (mprotect(map, page, PROT_NONE) != 0) {
        iw_error("cannot protect a fiber's guard page");
        (void) munmap(map, size);
        return IW_ERROR;
    }

    if (getcontext(&fb->ctx) != 0) {
        ioa_fatal("getcontext() failed");
    }

    fb->ctx.uc_stack.ss_sp = map + page;
    fb->ctx.uc_stack.ss_size = IW_FIBER_STACK;
    fb->ctx.uc_link = NULL;

    /* the fiber's whole life is iw_fiber_entry()'s loop: one step per
     * turn, then back to the engine, for as long as the process runs */
    makecontext(&fb->ctx, iw_fiber_entry, 0);

    fb->map = map;
    fb->map_size = size;

    return IW_OK;
}


static void
iw_fiber_entry(void)
{
    iw_fiber_t  *fb;

#if IW_FIBER_ASAN
    /* the first time on this stack: where the engine's stack is */
    __sanitizer_finish_switch_fiber(NULL, &iw_fiber_engine_bottom,
                                    &iw_fiber_engine_size);
#endif

    for ( ;; ) {
        fb = iw_fiber_now;

        fb->fn(fb->data);

        fb->done = 1;
        iw_fiber_leave(fb);
    }
}


/* engine -> fiber, until the fiber comes back: IW_OK when its fn
 * returned (the fiber is free again), IW_GOAL_WAIT when it waits */

static int
iw_fiber_enter(iw_fiber_t *fb)
{
#if IW_FIBER_ASAN
    void  *fake;
#endif

    fb->state = IW_FIBER_RUNNING;
    iw_fiber_now = fb;

#if IW_FIBER_ASAN
    __sanitizer_start_switch_fiber(&fake, fb->ctx.uc_stack.ss_sp,
                                   fb->ctx.uc_stack.ss_size);
#endif

    iw_fiber_switch(&iw_fiber_engine, &fb->ctx);

#if IW_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif

    iw_fiber_now = NULL;

    if (!fb->done) {
        return IW_GOAL_WAIT;
    }

    fb->state = IW_FIBER_FREE;
    fb->fn = NULL;
    fb->data = NULL;
    fb->wake = NULL;
    fb->wake_data = NULL;
    fb->next_free = iw_fiber_free_list;
    iw_fiber_free_list = fb;
    iw_fibers_busy--;

    return IW_OK;
}


/* fiber -> engine; returns when the engine enters the fiber again */

static void
iw_fiber_leave(iw_fiber_t *fb)
{
#if IW_FIBER_ASAN
    __sanitizer_start_switch_fiber(&fb->asan_fake, iw_fiber_engine_bottom,
                                   iw_fiber_engine_size);
#endif

    iw_fiber_switch(&fb->ctx, &iw_fiber_engine);

#if IW_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fb->asan_fake, &iw_fiber_engine_bottom,
                                    &iw_fiber_engine_size);
#endif
}


/*
 * Saves where we are in from and continues to: getcontext() returns a
 * second time when someone switches back to from, and `back` tells the
 * two returns apart (volatile: it must be read from memory, not from a
 * register that setcontext() restored).
 */

static void
iw_fiber_switch(ucontext_t *from, ucontext_t *to)
{
    volatile int  back;

    back = 0;

    if (getcontext(from) != 0) {
        ioa_fatal("getcontext() failed");
    }

    if (!back) {
        back = 1;
        (void) setcontext(to);
        ioa_fatal("setcontext() failed");
    }
}
