
/*
 * The event loop: one thread, one libcurl multi handle.
 *
 * Everything the agent waits for is one of four things, each an object
 * embedded in whatever owns it (as nginx keeps ngx_event_t in its objects):
 *
 *   ioa_xfer_t   a libcurl transfer: the inbox stream, a registration, a
 *                post, an http adapter call; done() runs when it ends
 *   ioa_fd_t     a descriptor of ours: a child's stdin/stdout/stderr pipe,
 *                the signal self-pipe
 *   ioa_timer_t  a deadline: task timeouts, kill escalation, backoff
 *   ioa_event_t  work posted to run at the end of this turn
 *
 * One turn of ioa_loop_once():
 *
 *   curl_multi_poll(curl's sockets + our descriptors, next timer)
 *     -> our descriptors' handlers
 *     -> curl_multi_perform(): write callbacks run here
 *     -> done() of every finished transfer
 *     -> expired timers
 *     -> posted events
 *
 * Why posted events: libcurl forbids adding or removing transfers from
 * inside its callbacks, and the inbox's write callback is where envelopes
 * arrive.  So callbacks only buffer and post; decisions (start a task,
 * post an envelope) are made after curl_multi_perform() has returned.  A
 * posted event is also where memory is freed: a task may own three
 * descriptors that are all ready in one turn, and must outlive the turn.
 *
 * Why a second poll(): curl_multi_poll() reports POLLIN/POLLOUT of extra
 * descriptors but not POLLHUP or POLLERR, and a pipe whose writer exited
 * reports only POLLHUP; it would wake us forever without being read.  So
 * once it returns, a zero-timeout poll() over our few descriptors gives
 * their exact state.
 *
 * Signals reach the loop through a self-pipe: the handler writes the
 * signal number, and the loop calls the handler given to ioa_loop_init()
 * in normal context, where anything may be done.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ioa_agent.h"


/* the longest sleep: shutdown deadlines are checked at least this often */
#define IOA_LOOP_MAX_WAIT 1000


static CURLM        *ioa_multi;
static ioa_fd_t     *ioa_fds;
static ioa_timer_t  *ioa_timers;
static uint64_t      ioa_timer_gen;
static ioa_event_t  *ioa_posted;
static ioa_event_t **ioa_posted_tail = &ioa_posted;

static int                   ioa_sig_pipe[2] = { -1, -1 };
static ioa_fd_t              ioa_sig_fd;
static ioa_signal_handler_pt ioa_on_signal;

/* per-turn arrays, grown as needed */
static struct curl_waitfd *ioa_wfds;
static struct pollfd      *ioa_pfds;
static ioa_fd_t          **ioa_snap;
static size_t              ioa_nalloc;


static void
ioa_loop_signal(int signo)
{
    int           saved;
    unsigned char c;

    saved = errno;
    c = (unsigned char) signo;

    /* a full pipe already holds a wake-up; losing a repeated signal
     * number is harmless (SIGCHLD reaps every child anyway) */
    if (write(ioa_sig_pipe[1], &c, 1) < 0) {
        /* void */
    }

    errno = saved;
}


static void
ioa_loop_sig_read(ioa_fd_t *f, short revents)
{
    ssize_t       n, i;
    unsigned char buf[64];

    (void) revents;

    for (;;) {
        n = read(f->fd, buf, sizeof(buf));

        if (n <= 0) {
            return;
        }

        for (i = 0; i < n; i++) {
            ioa_on_signal(buf[i]);
        }
    }
}


int
ioa_loop_init(ioa_signal_handler_pt on_signal)
{
    size_t           i;
    struct sigaction sa;

    static const int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        ioa_log_error("curl_global_init() failed");
        return -1;
    }

    ioa_multi = curl_multi_init();
    if (ioa_multi == NULL) {
        ioa_log_error("curl_multi_init() failed");
        return -1;
    }

    if (pipe2(ioa_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        ioa_log_error("pipe2() failed: %s", strerror(errno));
        return -1;
    }

    ioa_on_signal = on_signal;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = ioa_loop_signal;

    for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        sa.sa_flags = SA_RESTART | (sigs[i] == SIGCHLD ? SA_NOCLDSTOP : 0);

        if (sigaction(sigs[i], &sa, NULL) != 0) {
            ioa_log_error("sigaction(%d) failed: %s", sigs[i], strerror(errno));
            return -1;
        }
    }

    /* a child that closed its stdin must give EPIPE, not kill us */
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = 0;
    sigaction(SIGPIPE, &sa, NULL);

    ioa_sig_fd.fd = ioa_sig_pipe[0];
    ioa_sig_fd.events = POLLIN;
    ioa_sig_fd.handler = ioa_loop_sig_read;
    ioa_fd_add(&ioa_sig_fd);

    return 0;
}


void
ioa_loop_done(void)
{
    if (ioa_multi) {
        curl_multi_cleanup(ioa_multi);
        ioa_multi = NULL;
    }

    curl_global_cleanup();

    free(ioa_wfds);
    free(ioa_pfds);
    free(ioa_snap);
}


/* descriptors */

void
ioa_fd_add(ioa_fd_t *f)
{
    if (f->active) {
        return;
    }

    f->active = 1;
    f->next = ioa_fds;
    ioa_fds = f;
}


void
ioa_fd_del(ioa_fd_t *f)
{
    ioa_fd_t **pp;

    if (!f->active) {
        return;
    }

    for (pp = &ioa_fds; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }

    f->active = 0;
    f->next = NULL;
}


/* timers: a handful at most (one per task and a few of the hub's), so an
 * unsorted list is enough */

void
ioa_timer_add(ioa_timer_t *t, uint64_t ms)
{
    t->when = ioa_mono_ms() + ms;
    t->gen = ++ioa_timer_gen;

    if (t->active) {
        return;
    }

    t->active = 1;
    t->next = ioa_timers;
    ioa_timers = t;
}


void
ioa_timer_del(ioa_timer_t *t)
{
    ioa_timer_t **pp;

    if (!t->active) {
        return;
    }

    for (pp = &ioa_timers; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }

    t->active = 0;
    t->next = NULL;
}


/* transfers */

int
ioa_xfer_start(ioa_xfer_t *x)
{
    CURLMcode rc;

    if (x->active) {
        return 0;
    }

    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);

    rc = curl_multi_add_handle(ioa_multi, x->easy);
    if (rc != CURLM_OK) {
        ioa_log_error("curl_multi_add_handle() failed: %s",
                      curl_multi_strerror(rc));
        return -1;
    }

    x->active = 1;

    return 0;
}


void
ioa_xfer_stop(ioa_xfer_t *x)
{
    if (!x->active) {
        return;
    }

    curl_multi_remove_handle(ioa_multi, x->easy);
    x->active = 0;
}


/* posted events */

void
ioa_post_event(ioa_event_t *ev)
{
    if (ev->posted) {
        return;
    }

    ev->posted = 1;
    ev->next = NULL;
    *ioa_posted_tail = ev;
    ioa_posted_tail = &ev->next;
}


void
ioa_delete_posted_event(ioa_event_t *ev)
{
    ioa_event_t **pp;

    if (!ev->posted) {
        return;
    }

    for (pp = &ioa_posted; *pp; pp = &(*pp)->next) {
        if (*pp == ev) {
            *pp = ev->next;

            if (ioa_posted_tail == &ev->next) {
                ioa_posted_tail = pp;
            }

            break;
        }
    }

    ev->posted = 0;
    ev->next = NULL;
}


/* one turn */

static void
ioa_loop_fds(size_t n)
{
    size_t i;

    /* our descriptors' exact state, POLLHUP and POLLERR included */

    for (i = 0; i < n; i++) {
        ioa_pfds[i].fd = ioa_snap[i]->fd;
        ioa_pfds[i].events = ioa_snap[i]->events;
        ioa_pfds[i].revents = 0;
    }

    if (poll(ioa_pfds, n, 0) <= 0) {
        return;
    }

    for (i = 0; i < n; i++) {
        /* a handler may have removed a later descriptor this turn; its
         * memory lives until the posted events run */
        if (ioa_pfds[i].revents && ioa_snap[i]->active
            && ioa_snap[i]->fd == ioa_pfds[i].fd)
        {
            ioa_snap[i]->handler(ioa_snap[i], ioa_pfds[i].revents);
        }
    }
}


void
ioa_loop_once(void)
{
    int          running, left;
    size_t       n;
    CURLMsg     *msg;
    CURLMcode    mrc;
    uint64_t     now, wait, gen;
    ioa_fd_t    *f;
    ioa_xfer_t  *x;
    ioa_timer_t *t;
    ioa_event_t *ev;

    now = ioa_mono_ms();
    wait = ioa_posted ? 0 : IOA_LOOP_MAX_WAIT;

    for (t = ioa_timers; t; t = t->next) {
        if (t->when <= now) {
            wait = 0;

        } else if (t->when - now < wait) {
            wait = t->when - now;
        }
    }

    n = 0;

    for (f = ioa_fds; f; f = f->next) {
        n++;
    }

    if (n > ioa_nalloc) {
        ioa_nalloc = n * 2;
        free(ioa_wfds);
        free(ioa_pfds);
        free(ioa_snap);
        ioa_wfds = ioa_calloc(ioa_nalloc * sizeof(struct curl_waitfd));
        ioa_pfds = ioa_calloc(ioa_nalloc * sizeof(struct pollfd));
        ioa_snap = ioa_calloc(ioa_nalloc * sizeof(ioa_fd_t *));
    }

    n = 0;

    for (f = ioa_fds; f; f = f->next) {
        ioa_snap[n] = f;
        ioa_wfds[n].fd = f->fd;
        ioa_wfds[n].events =
            (f->events & POLLOUT) ? CURL_WAIT_POLLOUT : CURL_WAIT_POLLIN;
        ioa_wfds[n].revents = 0;
        n++;
    }

    mrc = curl_multi_poll(ioa_multi, ioa_wfds, (unsigned) n, (int) wait, NULL);

    if (mrc != CURLM_OK) {
        /* nothing a retry would fix, but do not spin on it */
        ioa_log_error("curl_multi_poll() failed: %s", curl_multi_strerror(mrc));
        poll(NULL, 0, (int) wait);
    }

    if (n) {
        ioa_loop_fds(n);
    }

    curl_multi_perform(ioa_multi, &running);

    while ((msg = curl_multi_info_read(ioa_multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }

        x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &x);
        curl_multi_remove_handle(ioa_multi, msg->easy_handle);

        if (x) {
            x->active = 0;
            x->done(x, msg->data.result);
        }
    }

    /* a handler may add and delete timers: rescan after each one; a timer
     * armed during this scan waits for the next turn, so a handler that
     * re-arms itself with no delay cannot hold the loop */

    now = ioa_mono_ms();
    gen = ioa_timer_gen;

    for (t = ioa_timers; t; /* void */) {
        if (t->when > now || t->gen > gen) {
            t = t->next;
            continue;
        }

        ioa_timer_del(t);
        t->handler(t);
        t = ioa_timers;
    }

    while (ioa_posted) {
        ev = ioa_posted;
        ioa_posted = ev->next;

        if (ioa_posted == NULL) {
            ioa_posted_tail = &ioa_posted;
        }

        ev->posted = 0;
        ev->next = NULL;
        ev->handler(ev);
    }
}
