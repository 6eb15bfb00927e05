
/*
 * --replay FILE: an HTTP load instead of rooms.  Each line of FILE is one
 * request body (JSON has no raw newline); they are POSTed to --path in
 * order, round and round, on --connections keep-alive connections, and
 * every answer is timed.  Built for discovery (POST /retrieve_assistant,
 * bench/discovery-load.sh) and for registering many agents fast (POST
 * /register, pipelined), but nothing in it knows either endpoint.
 *
 * Two ways to send:
 *
 *   closed loop   (no --rate) each connection keeps --window requests in
 *                 flight (1 by default: a client that waits for each
 *                 answer; more is HTTP/1.1 pipelining, answers come back
 *                 in order).  A request is timed from the moment it is
 *                 queued.  The server sets the pace: saturation.
 *   open loop     (--rate N) request k is due at start + k/N, whatever the
 *                 answers do, and goes out on a connection with fewer than
 *                 --window in flight.  When none has room it waits, and its
 *                 latency still counts from its due time (no coordinated
 *                 omission); requests sent 1 ms or more after their time
 *                 are counted as late.  With --arrivals poisson the gaps
 *                 between due times are exponential with mean 1/N, from
 *                 one stream of --seed (util.c), each due time computed
 *                 from the one before, never from an answer; what was due
 *                 at the end of the measured time and not yet sent is
 *                 "behind".
 *
 * --count M sends exactly M requests (every body once when M is the number
 * of lines) and the run ends when the last is answered.
 *
 * Answers are framed by Content-Length (ib_http_head, shared with http.c);
 * chunked answers are not read (nginx sends a length for the hub's JSON).
 * A status other than 2xx is a server error, with the first one's body in
 * the report.  A "Connection: close" answer (nginx's keepalive_requests)
 * reopens the connection; requests still in flight on a connection that
 * closes are errors.  --tally NAME counts the answers by the value of that
 * header (e.g. X-Ioa-Discovery: index or redis), over the whole run.
 *
 * A handful of connections (tens): one epoll, level-triggered, one read per
 * readable socket per turn, and everything queued during a turn leaves in
 * one send() per socket.
 */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ioa_bench.h"


#define IB_REPLAY_READ      (64 * 1024)
/* distinct values of the --tally header kept by name; more are "other" */
#define IB_REPLAY_VALUES    8
#define IB_REPLAY_VALUE_MAX 47
/* what a request's line and headers take beyond its body (the host and
 * the path are bounded by ib_parse_url and the options) */
#define IB_REPLAY_HEAD_MAX  2048
/* a request sent this late is counted as late (open loop) */
#define IB_REPLAY_LATE      (1000000ULL)


typedef struct {
    int                 fd;
    unsigned            want_out:1;

    char               *in;             /* answers not yet complete; kept */
    size_t              in_len;         /* NUL-terminated for the parser */
    size_t              in_cap;

    char               *out;            /* requests not yet sent */
    size_t              out_pos;
    size_t              out_len;
    size_t              out_cap;

    uint64_t           *t;              /* ring of --window: each request's */
    uint32_t            head;           /* time, oldest at head */
    uint32_t            inflight;
} ib_rconn_t;


static void ib_replay_load_file(void);
static int  ib_rconn_open(ib_rconn_t *c);
static void ib_rconn_lost(ib_rconn_t *c, const char *why);
static void ib_rconn_read(ib_rconn_t *c);
static int  ib_rconn_answers(ib_rconn_t *c);
static void ib_rconn_answer(ib_rconn_t *c, const ib_http_head_t *h,
    const char *body, size_t len);
static void ib_rconn_fill(ib_rconn_t *c, uint64_t now);
static void ib_rconn_send(ib_rconn_t *c, uint64_t t);
static void ib_rconn_flush(ib_rconn_t *c);
static void ib_replay_tick(uint64_t now);
static uint64_t ib_replay_due_after(uint64_t prev, uint64_t n,
    uint64_t *rng);
static void ib_replay_tally(const ib_http_head_t *h);


static int          ib_rp_epfd = -1;
static ib_rconn_t  *ib_rp_conns;
static size_t       ib_rp_nconns;
static size_t       ib_rp_rr;           /* open loop: next connection tried */

static char        *ib_rp_file;         /* the bodies, NUL-terminated */
static char       **ib_rp_body;
static size_t      *ib_rp_len;
static size_t       ib_rp_nbodies;
static size_t       ib_rp_next;

static uint64_t     ib_rp_start;        /* open loop: request 0's time */
static uint64_t     ib_rp_issued;       /* requests sent (or due, open) */
static uint64_t     ib_rp_due;          /* open loop: the next one's time */
static uint64_t     ib_rp_rng;          /* poisson: the gaps' stream */
static uint64_t     ib_rp_last_tick;    /* open loop: last look at the
                                         * schedule */
static int          ib_rp_blocked;      /* open loop: due, no room */

static uint64_t     ib_rp_ok;           /* 2xx answers, whole run */
static uint64_t     ib_rp_not_ok;
static uint64_t     ib_rp_lost;         /* in flight when a connection
                                         * closed */
static struct {
    char            value[IB_REPLAY_VALUE_MAX + 1];
    uint64_t        n;
}                   ib_rp_values[IB_REPLAY_VALUES];
static size_t       ib_rp_nvalues;
static uint64_t     ib_rp_value_none;
static uint64_t     ib_rp_value_other;


void
ib_replay_init(void)
{
    ib_replay_load_file();

    ib_rp_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ib_rp_epfd < 0) {
        ib_die("epoll_create1: %s", strerror(errno));
    }

    ib_rp_nconns = (size_t) ib.connections;
    ib_rp_conns = ib_calloc(ib_rp_nconns, sizeof(ib_rconn_t));
    ib.nconns = ib_rp_nconns;
}


static void
ib_replay_load_file(void)
{
    FILE    *f;
    char    *p, *nl, *end;
    long     size;
    size_t   n, cap;

    f = fopen(ib.replay, "r");
    if (f == NULL) {
        ib_die("--replay %s: %s", ib.replay, strerror(errno));
    }

    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        ib_die("--replay %s: cannot tell its size", ib.replay);
    }

    ib_rp_file = ib_alloc((size_t) size + 1);
    n = fread(ib_rp_file, 1, (size_t) size, f);
    fclose(f);

    if (n != (size_t) size) {
        ib_die("--replay %s: short read", ib.replay);
    }

    ib_rp_file[n] = '\0';
    end = ib_rp_file + n;
    cap = 0;

    for (p = ib_rp_file; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t) (end - p));
        nl = nl ? nl : end;
        *nl = '\0';

        if (nl > p && nl[-1] == '\r') {
            nl[-1] = '\0';
        }

        if (*p == '\0') {
            continue;
        }

        if (ib_rp_nbodies == cap) {
            cap = cap ? cap * 2 : 1024;
            ib_rp_body = ib_realloc(ib_rp_body, cap * sizeof(char *));
            ib_rp_len = ib_realloc(ib_rp_len, cap * sizeof(size_t));
        }

        ib_rp_body[ib_rp_nbodies] = p;
        ib_rp_len[ib_rp_nbodies] = strlen(p);
        ib_rp_nbodies++;
    }

    if (ib_rp_nbodies == 0) {
        ib_die("--replay %s has no request body (one per line)", ib.replay);
    }
}


/* a blocking connect (there are few connections, opened before the load),
 * then non-blocking for the run */

static int
ib_rconn_open(ib_rconn_t *c)
{
    int                 fd, one, err;
    struct timeval      tv;
    struct epoll_event  ev;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ib_error(&ib.err_connect, "socket(): %s", strerror(errno));
        return -1;
    }

    /* SO_SNDTIMEO bounds connect() on Linux */
    tv.tv_sec = (time_t) ib.connect_timeout;
    tv.tv_usec = (suseconds_t) ((ib.connect_timeout - (double) tv.tv_sec)
                                * 1e6);
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    one = 1;
    (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (connect(fd, (struct sockaddr *) &ib.addr, sizeof(ib.addr)) != 0) {
        err = errno;
        close(fd);
        ib_error(&ib.err_connect, "connect to %s: %s", ib.host,
                 err == EINPROGRESS ? "timed out" : strerror(err));
        return -1;
    }

    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        ib_die("fcntl(O_NONBLOCK): %s", strerror(errno));
    }

    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = c;

    if (epoll_ctl(ib_rp_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ib_die("epoll_ctl: %s", strerror(errno));
    }

    c->fd = fd;
    c->want_out = 0;
    c->in_len = 0;
    c->out_pos = 0;
    c->out_len = 0;
    c->head = 0;
    c->inflight = 0;

    if (c->t == NULL) {
        c->t = ib_calloc((size_t) ib.window, sizeof(uint64_t));
        c->in_cap = IB_REPLAY_READ + 1;
        c->in = ib_alloc(c->in_cap);
    }

    c->in[0] = '\0';
    ib.open++;
    ib.opened++;

    return 0;
}


void
ib_replay_connect(void)
{
    size_t    i;
    uint64_t  start;

    start = ib_now();

    for (i = 0; i < ib_rp_nconns; i++) {
        if (ib_rconn_open(&ib_rp_conns[i]) != 0) {
            ib_die("cannot open connection %zu of %zu: %s", i + 1,
                   ib_rp_nconns, ib.first_error);
        }
    }

    ib.t_connect = ib_now() - start;
}


/* the connection is gone (or going): what was in flight is lost; it is
 * opened again while requests are still to be sent */

static void
ib_rconn_lost(ib_rconn_t *c, const char *why)
{
    if (c->inflight) {
        ib_rp_lost += c->inflight;
        ib_error(&ib.err_closed, "%s with %u request%s in flight", why,
                 c->inflight, c->inflight == 1 ? "" : "s");
    }

    close(c->fd);
    c->fd = -1;
    c->inflight = 0;
    ib.open--;

    if (ib.publishing && !ib_replay_done()) {
        (void) ib_rconn_open(c);
    }
}


/* closed loop: c gets requests up to --window in flight */

static void
ib_rconn_fill(ib_rconn_t *c, uint64_t now)
{
    while (c->fd >= 0 && c->inflight < (uint32_t) ib.window
           && (ib.count < 0 || ib_rp_issued < (uint64_t) ib.count))
    {
        ib_rconn_send(c, now);
    }
}


/* the first requests leave in the next turn (ib_replay_next_due says
 * "now"), so a run without warmup counts them in its window */

void
ib_replay_start(uint64_t now)
{
    ib.publishing = 1;
    ib_rp_start = now;
    ib_rp_rng = ib_stream_seed(ib.seed, 0);
    ib_rp_due = ib.arrivals == IB_ARRIVALS_POISSON
                ? ib_replay_due_after(now, 0, &ib_rp_rng) : now;
}


/* open loop: when request n is due, prev being when request n - 1 was
 * (even: from the start, so rounding never accumulates; poisson: one
 * exponential gap after prev, from *rng) */

static uint64_t
ib_replay_due_after(uint64_t prev, uint64_t n, uint64_t *rng)
{
    double  gap;

    if (ib.arrivals == IB_ARRIVALS_POISSON) {
        gap = ib_stream_exp(rng) * 1e9 / ib.rate;
        return prev + (uint64_t) (gap + 0.5);
    }

    return ib_rp_start + (uint64_t) ((double) n * 1e9 / ib.rate);
}


/* open loop: requests due by the last look at the schedule in the
 * measured time and not sent (every connection full), walked on a copy
 * of the stream */

uint64_t
ib_replay_behind(void)
{
    uint64_t  n, issued, due, rng;

    if (ib.rate <= 0 || !ib.publishing) {
        return 0;
    }

    n = 0;
    issued = ib_rp_issued;
    due = ib_rp_due;
    rng = ib_rp_rng;

    while (due <= ib_rp_last_tick
           && (ib.count < 0 || issued < (uint64_t) ib.count))
    {
        n++;
        issued++;
        due = ib_replay_due_after(due, issued, &rng);
    }

    return n;
}


/* the request after the last one, timed from t, queued on c */

static void
ib_rconn_send(ib_rconn_t *c, uint64_t t)
{
    size_t  need, n;

    need = ib_rp_len[ib_rp_next] + IB_REPLAY_HEAD_MAX;

    if (c->out_cap - c->out_len < need) {
        if (c->out_pos) {
            memmove(c->out, c->out + c->out_pos, c->out_len - c->out_pos);
            c->out_len -= c->out_pos;
            c->out_pos = 0;
        }

        while (c->out_cap - c->out_len < need) {
            c->out_cap = c->out_cap ? c->out_cap * 2 : 16384;
        }

        c->out = ib_realloc(c->out, c->out_cap);
    }

    n = ib_http_request(c->out + c->out_len, c->out_cap - c->out_len,
                        ib.path, ib_rp_body[ib_rp_next],
                        ib_rp_len[ib_rp_next]);
    c->out_len += n;

    ib_rp_next = (ib_rp_next + 1) % ib_rp_nbodies;

    c->t[(c->head + c->inflight) % (uint32_t) ib.window] = t;
    c->inflight++;
    ib_rp_issued++;
    ib.sent++;

    if (ib.measuring) {
        ib.sent_window++;
    }
}


/* open loop: every request due by now goes out, on the next connection
 * with room; when none has any, the rest wait for an answer */

static void
ib_replay_tick(uint64_t now)
{
    size_t       i;
    uint64_t     due, lag;
    ib_rconn_t  *c;

    ib_rp_last_tick = now;

    while (ib.publishing
           && (ib.count < 0 || ib_rp_issued < (uint64_t) ib.count))
    {
        due = ib_rp_due;

        if (due > now) {
            ib_rp_blocked = 0;
            return;
        }

        c = NULL;

        for (i = 0; i < ib_rp_nconns; i++) {
            c = &ib_rp_conns[(ib_rp_rr + i) % ib_rp_nconns];

            if (c->fd >= 0 && c->inflight < (uint32_t) ib.window) {
                break;
            }

            c = NULL;
        }

        if (c == NULL) {
            ib_rp_blocked = 1;
            return;
        }

        ib_rp_rr = (size_t) (c - ib_rp_conns) + 1;
        lag = now - due;

        if (ib.measuring) {
            if (lag > ib.max_lag_ns) {
                ib.max_lag_ns = lag;
            }

            if (lag >= IB_REPLAY_LATE) {
                ib.deferred++;
            }
        }

        ib_rconn_send(c, due);
        ib_rp_due = ib_replay_due_after(due, ib_rp_issued, &ib_rp_rng);
    }

    ib_rp_blocked = 0;
}


/* open loop: the next request's time, unless it already waits for room;
 * closed loop: now, if a connection has room (the turn fills it) */

uint64_t
ib_replay_next_due(void)
{
    size_t       i;
    ib_rconn_t  *c;

    if (!ib.publishing
        || (ib.count >= 0 && ib_rp_issued >= (uint64_t) ib.count))
    {
        return UINT64_MAX;
    }

    if (ib.rate > 0) {
        return ib_rp_blocked ? UINT64_MAX : ib_rp_due;
    }

    for (i = 0; i < ib_rp_nconns; i++) {
        c = &ib_rp_conns[i];

        if (c->fd >= 0 && c->inflight < (uint32_t) ib.window) {
            return 0;
        }
    }

    return UINT64_MAX;
}


size_t
ib_replay_inflight(void)
{
    size_t  i, n;

    n = 0;

    for (i = 0; i < ib_rp_nconns; i++) {
        n += ib_rp_conns[i].inflight;
    }

    return n;
}


/* --count: every request sent, and answered or lost */

int
ib_replay_done(void)
{
    return ib.count >= 0 && ib_rp_issued >= (uint64_t) ib.count
           && ib_replay_inflight() == 0;
}


static void
ib_rconn_read(ib_rconn_t *c)
{
    ssize_t  n;

    if (c->in_cap - c->in_len < IB_REPLAY_READ + 1) {
        c->in_cap = c->in_len + IB_REPLAY_READ + 1;
        c->in = ib_realloc(c->in, c->in_cap);
    }

    n = recv(c->fd, c->in + c->in_len, IB_REPLAY_READ, 0);

    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return;
        }

        ib_rconn_lost(c, strerror(errno));
        return;
    }

    if (n == 0) {
        ib_rconn_lost(c, "the server closed the connection");
        return;
    }

    c->in_len += (size_t) n;
    c->in[c->in_len] = '\0';

    if (ib_rconn_answers(c) != 0) {
        ib_rconn_lost(c, "the server closed the connection after "
                         "\"Connection: close\"");
    }
}


/* every complete answer in c->in; 1 when one said "Connection: close" */

static int
ib_rconn_answers(ib_rconn_t *c)
{
    int             closing;
    char           *p, *end;
    size_t          left, total;
    ib_http_head_t  h;

    p = c->in;
    left = c->in_len;
    closing = 0;

    while (left && !closing) {
        end = memmem(p, left, "\r\n\r\n", 4);

        if (end == NULL) {
            break;
        }

        if (ib_http_head(p, end, &h, ib.tally) != 0 || h.chunked
            || (h.content_length < 0 && h.status != 204 && h.status != 304))
        {
            ib_error(&ib.err_protocol, "an answer %s: %.80s",
                     h.chunked ? "in chunks (not read by --replay)"
                               : "without Content-Length",
                     p);
            return 1;
        }

        total = (size_t) (end - p) + 4
                + (size_t) (h.content_length > 0 ? h.content_length : 0);

        if (left < total) {
            break;
        }

        if (c->inflight == 0) {
            ib_error(&ib.err_protocol, "an answer to no request: %.80s", p);
            return 1;
        }

        ib_rconn_answer(c, &h, end + 4, total - (size_t) (end - p) - 4);
        closing = h.close;
        p += total;
        left -= total;
    }

    memmove(c->in, p, left);
    c->in_len = left;
    c->in[left] = '\0';

    return closing;
}


static void
ib_rconn_answer(ib_rconn_t *c, const ib_http_head_t *h, const char *body,
    size_t len)
{
    uint64_t  now, t;

    now = ib_now();
    t = c->t[c->head];
    c->head = (c->head + 1) % (uint32_t) ib.window;
    c->inflight--;

    ib.received++;

    if (ib.measuring) {
        ib.received_window++;
        ib_hist_record(&ib.hist, now > t ? now - t : 0);
    }

    if (h->status >= 200 && h->status < 300) {
        ib_rp_ok++;

    } else {
        ib_rp_not_ok++;
        ib_error(&ib.err_server, "POST %s%s answered %d: %.*s", ib.base,
                 ib.path, h->status, (int) (len < 200 ? len : 200), body);
    }

    if (ib.tally) {
        ib_replay_tally(h);
    }
}


static void
ib_replay_tally(const ib_http_head_t *h)
{
    size_t  i;

    if (h->value == NULL) {
        ib_rp_value_none++;
        return;
    }

    for (i = 0; i < ib_rp_nvalues; i++) {
        if (strlen(ib_rp_values[i].value) == h->value_len
            && memcmp(ib_rp_values[i].value, h->value, h->value_len) == 0)
        {
            ib_rp_values[i].n++;
            return;
        }
    }

    if (ib_rp_nvalues == IB_REPLAY_VALUES
        || h->value_len > IB_REPLAY_VALUE_MAX)
    {
        ib_rp_value_other++;
        return;
    }

    memcpy(ib_rp_values[i].value, h->value, h->value_len);
    ib_rp_values[i].value[h->value_len] = '\0';
    ib_rp_values[i].n = 1;
    ib_rp_nvalues++;
}


static void
ib_rconn_flush(ib_rconn_t *c)
{
    ssize_t             n;
    struct epoll_event  ev;

    while (c->out_pos < c->out_len) {
        n = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos,
                 MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            if (errno == EAGAIN) {
                break;
            }

            c->out_pos = c->out_len = 0;
            ib_rconn_lost(c, strerror(errno));
            return;
        }

        c->out_pos += (size_t) n;
    }

    if (c->out_pos == c->out_len) {
        c->out_pos = c->out_len = 0;
    }

    if ((c->out_len != 0) != c->want_out) {
        c->want_out = c->out_len != 0;

        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
        ev.data.ptr = c;
        (void) epoll_ctl(ib_rp_epfd, EPOLL_CTL_MOD, c->fd, &ev);
    }
}


void
ib_replay_turn(uint64_t timeout_ns)
{
    int                        i, n;
    size_t                     k;
    uint64_t                   now;
    ib_rconn_t                *c;
    static struct epoll_event  events[64];

    n = ib_epoll_wait(ib_rp_epfd, events, 64, timeout_ns);

    for (i = 0; i < n; i++) {
        c = events[i].data.ptr;

        if (c->fd >= 0
            && (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        {
            ib_rconn_read(c);
        }
    }

    /* what the answers made room for, and what fell due */
    now = ib_now();

    if (ib.rate > 0) {
        ib_replay_tick(now);
    }

    for (k = 0; k < ib_rp_nconns; k++) {
        c = &ib_rp_conns[k];

        if (ib.rate <= 0 && ib.publishing) {
            ib_rconn_fill(c, now);
        }

        if (c->fd >= 0 && c->out_len) {
            ib_rconn_flush(c);
        }
    }
}


void
ib_replay_close(void)
{
    size_t  i;

    for (i = 0; i < ib_rp_nconns; i++) {
        if (ib_rp_conns[i].fd >= 0) {
            close(ib_rp_conns[i].fd);
            ib_rp_conns[i].fd = -1;
        }
    }
}


void
ib_replay_report_table(FILE *f)
{
    size_t  i;
    char    a[32];
    double  w;

    w = ib_window_s();

    fprintf(f, "\nioa-bench %s  replay  POST %s%s  %s\n", IB_VERSION,
            ib.base, ib.path, ib.url);
    fprintf(f, "workload    %zu bodies from %s, %ld connection%s, ",
            ib_rp_nbodies, ib.replay, ib.connections,
            ib.connections == 1 ? "" : "s");

    if (ib.rate > 0) {
        fprintf(f, "open loop %g requests/s", ib.rate);

        if (ib.arrivals == IB_ARRIVALS_POISSON) {
            fprintf(f, ", poisson arrivals (seed %llu)",
                    (unsigned long long) ib.seed);
        }

    } else {
        fprintf(f, "closed loop");
    }

    fprintf(f, " (at most %ld in flight on each)", ib.window);

    if (ib.count >= 0) {
        fprintf(f, ", %ld requests", ib.count);
    }

    fprintf(f, "\nrun         %.2f s measured (warmup %.1f s)%s, %zu open "
            "at the end\n", w, ib.warmup,
            ib.interrupted ? ", INTERRUPTED" : "", ib.open);
    fprintf(f, "throughput  answered %10.0f requests/s  (%llu), sent "
            "%.0f/s\n", (double) ib.received_window / w,
            (unsigned long long) ib.received_window,
            (double) ib.sent_window / w);

    ib_report_latency_table(f, ib.rate > 0 ? "due time to answer"
                                           : "send to answer");

    fprintf(f, "answers     2xx %llu, other %llu, lost %llu (whole run)",
            (unsigned long long) ib_rp_ok, (unsigned long long) ib_rp_not_ok,
            (unsigned long long) ib_rp_lost);

    if (ib.tally) {
        fprintf(f, "; %s:", ib.tally);

        for (i = 0; i < ib_rp_nvalues; i++) {
            fprintf(f, " %s %llu,", ib_rp_values[i].value,
                    (unsigned long long) ib_rp_values[i].n);
        }

        fprintf(f, " none %llu", (unsigned long long) ib_rp_value_none);

        if (ib_rp_value_other) {
            fprintf(f, ", other %llu",
                    (unsigned long long) ib_rp_value_other);
        }
    }

    fprintf(f, "\n");

    ib_report_errors_table(f);
    ib_report_server_table(f);

    fprintf(f, "generator   cpu %.1f%%  rss %.1f MiB",
            (ib.self_cpu_end - ib.self_cpu_start) / w * 100.0,
            ib.self_rss_kb / 1024.0);

    if (ib.rate > 0) {
        ib_fmt_ns(a, sizeof(a), ib.max_lag_ns);
        fprintf(f, "  max send lag %s  late %llu  behind %llu", a,
                (unsigned long long) ib.deferred,
                (unsigned long long) ib.behind);
    }

    fprintf(f, "  connect %.3f s\n", ib.t_connect / 1e9);
}


void
ib_replay_report_json(FILE *f)
{
    size_t  i;
    double  w;

    w = ib_window_s();

    fprintf(f, "{\"version\":\"%s\",\"params\":{\"mode\":\"replay\","
            "\"url\":", IB_VERSION);
    ib_json_str(f, ib.url);
    fprintf(f, ",\"path\":");
    ib_json_str(f, ib.path);
    fprintf(f, ",\"bodies_file\":");
    ib_json_str(f, ib.replay);
    fprintf(f, ",\"bodies\":%zu,\"connections\":%ld,\"window\":%ld,"
            "\"rate\":", ib_rp_nbodies, ib.connections, ib.window);

    if (ib.rate > 0) {
        fprintf(f, "%g,\"arrivals\":\"%s\",\"seed\":%llu", ib.rate,
                ib.arrivals == IB_ARRIVALS_POISSON ? "poisson" : "even",
                (unsigned long long) ib.seed);
    } else {
        fprintf(f, "null,\"arrivals\":null,\"seed\":null");
    }

    fprintf(f, ",\"duration_s\":%g,\"warmup_s\":%g,\"drain_s\":%g,"
            "\"count\":", ib.duration, ib.warmup, ib.drain);

    if (ib.count >= 0) {
        fprintf(f, "%ld", ib.count);
    } else {
        fprintf(f, "null");
    }

    fprintf(f, ",\"tally\":");

    if (ib.tally) {
        ib_json_str(f, ib.tally);
    } else {
        fprintf(f, "null");
    }

    fprintf(f, "},\"interrupted\":%s,\"duration_s\":%.3f,"
            "\"connections\":{\"total\":%zu,\"opened\":%zu,"
            "\"open_at_end\":%zu},",
            ib.interrupted ? "true" : "false", w, ib_rp_nconns, ib.opened,
            ib.open);

    fprintf(f, "\"sent\":%llu,\"send_rate\":%.1f,\"answered\":%llu,"
            "\"answer_rate\":%.1f,",
            (unsigned long long) ib.sent_window, (double) ib.sent_window / w,
            (unsigned long long) ib.received_window,
            (double) ib.received_window / w);

    ib_report_latency_json(f);

    fprintf(f, "\"answers\":{\"sent_total\":%llu,\"answered_total\":%llu,"
            "\"ok\":%llu,\"not_ok\":%llu,\"lost\":%llu,\"drained\":%s},",
            (unsigned long long) ib.sent, (unsigned long long) ib.received,
            (unsigned long long) ib_rp_ok, (unsigned long long) ib_rp_not_ok,
            (unsigned long long) ib_rp_lost, ib.drained ? "true" : "false");

    fprintf(f, "\"tally\":");

    if (ib.tally) {
        fprintf(f, "{\"header\":");
        ib_json_str(f, ib.tally);
        fprintf(f, ",\"values\":{");

        for (i = 0; i < ib_rp_nvalues; i++) {
            fprintf(f, "%s", i ? "," : "");
            ib_json_str(f, ib_rp_values[i].value);
            fprintf(f, ":%llu", (unsigned long long) ib_rp_values[i].n);
        }

        fprintf(f, "},\"none\":%llu,\"other\":%llu},",
                (unsigned long long) ib_rp_value_none,
                (unsigned long long) ib_rp_value_other);

    } else {
        fprintf(f, "null,");
    }

    ib_report_errors_json(f);
    ib_report_server_json(f, 0);

    fprintf(f, ",\"generator\":{\"cpu_pct\":%.1f,\"rss_kb\":%ld,"
            "\"max_send_lag_us\":%.1f,\"late\":%llu,\"behind\":%llu,"
            "\"connect_s\":%.3f}}\n",
            (ib.self_cpu_end - ib.self_cpu_start) / w * 100.0,
            ib.self_rss_kb, ib.max_lag_ns / 1e3,
            (unsigned long long) ib.deferred,
            (unsigned long long) ib.behind, ib.t_connect / 1e9);
}
