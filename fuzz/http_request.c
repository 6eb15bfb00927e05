
/*
 * Copyright (C) ioa authors
 *
 * libFuzzer harness: whole HTTP requests, through nginx's own HTTP code,
 * into every handler of the module.  The input is what clients write on
 * their sockets; the harness runs a real hub in its own process (nginx's
 * cycle from a configuration of its own, the module's init_process, a real
 * Redis) and is its clients, so a request is accepted, parsed, authorized,
 * read, answered and finalized exactly as in a worker: REST, /mcp, /a2a,
 * the SSE feeds, WebSocket upgrades and the frames after them.
 *
 * Why in process rather than a mutation loop against a separate nginx: the
 * bugs this is for (a handler that finalizes a request and returns NGX_DONE
 * as well, a read handler left on a finalized request, a body arriving
 * after a refusal) are in the order of steps, and only coverage of the
 * module's and nginx's branches tells a mutator that an input reached a new
 * order.  A crash is then an ASan report in this process, with the input
 * that caused it written by libFuzzer, and replaying it is running the
 * binary on the file.  What it costs: the hub is one worker that lives
 * across inputs, so each input starts from a Redis put back to one
 * snapshot (below), and nginx's timers run on the wall clock.
 *
 * The input.  Bytes are sent as they are, except for these markers:
 *
 *   @@pause@@   wait until the hub is quiet, then go on writing: a body or
 *               a frame in two pieces, a second request after an answer
 *   @@next@@    the following bytes go on a new connection; this one stays
 *               open (an SSE feed or a WebSocket that hears what the next
 *               connection posts)
 *   @@close@@   half-close this connection now (the client is gone while
 *               its request is on its way), then a new connection
 *   @@reset@@   reset this connection after a few loop turns, with its
 *               request in flight, then a new connection
 *
 * and these names, replaced by what the snapshot's hub gave out (each id
 * 32 bytes long, so a seed's Content-Length can count them): @@room@@ (a
 * room of Alice and Bob with one envelope), @@goal@@ (a queued goal),
 * @@sid@@ (an MCP session of the open server), @@jsid@@ (one of the token
 * server for Alice), @@alice@@, @@bob@@, @@mal@@ (tokens: Alice with every
 * scope, Bob with "agent", Mal with none).  The open server answers every
 * Host but "jwt", which selects the server with ioa_auth jwt, small body
 * buffers (bodies in temp files) and a small client_max_body_size.
 *
 * One input runs in steps, each ending when the hub is quiet: a turn of
 * the event loop that delivered nothing and no command of the module's
 * that Redis has not answered, twice, IOA_HTTP_QUIET_US apart (events are
 * posted, as nginx itself does under accept_mutex, so that a turn can tell
 * whether any came).  After the last bytes: quiet; every connection
 * half-closed, until the hub has closed them all (a keep-alive one ends, a
 * feed sees its client go) or is quiet; every connection closed; then up
 * to IOA_HTTP_CLOSE_MS for the hub to close its side.  One it still holds
 * after that is named on stderr and counted as the hub's own from then on:
 * nginx, discarding a body whose client half-closed before its end, waits
 * for lingering_timeout (1 s here) once it has answered, as epoll told of
 * the end only once.
 *
 * Redis.  The harness starts a redis-server of its own on a free loopback
 * port (IOA_FUZZ_REDIS=host:port uses one that runs; =off runs without,
 * which exercises every handler up to its "Redis is away" refusal).  At
 * start, real requests to the hub register Alice, Bob and Carol, team up
 * Alice and Bob, post one envelope and queue one goal; the keys that left
 * in Redis are dumped, and before every input Redis is emptied and they
 * are restored, so each input meets the same registry, room and goal and
 * a crash replays from its input alone.  Nothing answers in Redis' place.
 *
 * IOA_FUZZ_VERBOSE=1 prints what the hub wrote back, for a seed's author.
 *
 * What fails an input: anything ASan or UBSan reports, and anything nginx
 * or the module logs at crit, alert or emerg ("http request count is
 * zero", "zero size buf", the module's own "cannot happen" alerts), which
 * the link's --wrap=ngx_log_error_core turns into an abort() with the
 * message on stderr.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa_redis.h"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <netinet/tcp.h>
#include <ftw.h>
#include <sys/prctl.h>
#include <sys/wait.h>


#define IOA_HTTP_PEERS        8
#define IOA_HTTP_QUIET_MS     1      /* the longest turn that waits */
#define IOA_HTTP_QUIET_US     200
#define IOA_HTTP_STEP_MS      2000   /* the longest one step waits */
#define IOA_HTTP_CLOSE_MS     50     /* for the hub to close its side */
#define IOA_HTTP_RESET_TURNS  4      /* accepted, read, not yet answered */
#define IOA_HTTP_CAPTURE      65536

/* the token server's HS256 secret, written to the work directory */
#define IOA_HTTP_JWT_KEY      "ioa-fuzz-http-request-secret-of-48-bytes-000000"


typedef struct {
    int                 fd;
    unsigned            shut:1;     /* our side no longer writes */
    unsigned            eof:1;      /* the hub closed its side */
    u_char             *capture;    /* the fixture keeps its answers */
    size_t              captured;
} ioa_http_peer_t;


typedef struct {
    const char         *name;
    ngx_str_t           value;
} ioa_http_name_t;


typedef struct {
    char               *key;
    size_t              key_len;
    char               *dump;
    size_t              dump_len;
    long long           pttl;
} ioa_http_key_t;


int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

void __real_ngx_log_error_core(ngx_uint_t level, ngx_log_t *log,
    ngx_err_t err, const char *fmt, ...);
void __wrap_ngx_log_error_core(ngx_uint_t level, ngx_log_t *log,
    ngx_err_t err, const char *fmt, ...);

static void ioa_http_fail(const char *what);
static int ioa_http_free_port(void);
static void ioa_http_redis_start(void);
static void ioa_http_exit(void);
static int ioa_http_remove(const char *path, const struct stat *st, int type,
    struct FTW *ftw);
static void ioa_http_conf_write(int port);
static void ioa_http_nginx_start(char **argv);
static ngx_uint_t ioa_http_turn(ngx_msec_t wait);
static ngx_uint_t ioa_http_drain(void);
static void ioa_http_settle(ngx_msec_t limit);
static ngx_uint_t ioa_http_quiet(void);
static ngx_uint_t ioa_http_redis_waiting(void);
static ngx_uint_t ioa_http_active(void);
static ioa_http_peer_t *ioa_http_open(void);
static void ioa_http_send(ioa_http_peer_t *p, const u_char *data,
    size_t len);
static void ioa_http_reset(ioa_http_peer_t *p);
static void ioa_http_finish(void);
static void ioa_http_fixture(void);
static void ioa_http_fixture_ask(const char *fmt, const char *arg,
    const char *field, ngx_str_t *out);
static void ioa_http_token(const char *sub, const char *scope, ngx_str_t *out);
static void ioa_http_snapshot(void);
static void ioa_http_restore(void);
static u_char *ioa_http_expand(const u_char *data, size_t size, size_t *len);
static const u_char *ioa_http_marker(const u_char *p, const u_char *last,
    ngx_uint_t *which);


static char               ioa_http_dir[256];
static char               ioa_http_conf[300];
static int                ioa_http_port;
static char               ioa_http_redis_host[64] = "127.0.0.1";
static int                ioa_http_redis_port;
static pid_t              ioa_http_redis_pid;
static redisContext      *ioa_http_redis;
static ngx_uint_t         ioa_http_ready;
static ngx_uint_t         ioa_http_stuck;
static ngx_uint_t         ioa_http_base;   /* listening, Redis, ... */
static ngx_uint_t         ioa_http_verbose;
static ngx_uint_t         ioa_http_keep;   /* the work directory, at exit */

static ioa_http_peer_t    ioa_http_peers[IOA_HTTP_PEERS];
static ngx_uint_t         ioa_http_npeers;

static ioa_http_key_t    *ioa_http_keys;
static size_t             ioa_http_nkeys;

/* in the order of the IOA_HTTP_N_* numbers */
static ioa_http_name_t    ioa_http_names[] = {
    { "@@room@@", ngx_null_string },
    { "@@goal@@", ngx_null_string },
    { "@@sid@@", ngx_null_string },
    { "@@jsid@@", ngx_null_string },
    { "@@alice@@", ngx_null_string },
    { "@@bob@@", ngx_null_string },
    { "@@mal@@", ngx_null_string },
    { NULL, ngx_null_string }
};

/* the markers, in the order of their numbers below */
static ngx_str_t          ioa_http_markers[] = {
    ngx_string("@@pause@@"),
    ngx_string("@@next@@"),
    ngx_string("@@close@@"),
    ngx_string("@@reset@@")
};

#define IOA_HTTP_N_ROOM   0
#define IOA_HTTP_N_GOAL   1
#define IOA_HTTP_N_SID    2
#define IOA_HTTP_N_JSID   3
#define IOA_HTTP_N_ALICE  4
#define IOA_HTTP_N_BOB    5
#define IOA_HTTP_N_MAL    6

#define IOA_HTTP_PAUSE   0
#define IOA_HTTP_NEXT    1
#define IOA_HTTP_CLOSE   2
#define IOA_HTTP_RESET   3
#define IOA_HTTP_END     4


static ngx_cycle_t        ioa_http_init_cycle;


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char  *base;

    (void) argc;

    signal(SIGPIPE, SIG_IGN);

    base = getenv("IOA_FUZZ_DIR");
    if (base == NULL || *base == '\0') {
        base = "/tmp";
    }

    if ((size_t) snprintf(ioa_http_dir, sizeof(ioa_http_dir),
                          "%s/ioa-http.XXXXXX", base)
        >= sizeof(ioa_http_dir)
        || mkdtemp(ioa_http_dir) == NULL)
    {
        ioa_http_fail("cannot make the work directory (IOA_FUZZ_DIR)");
    }

    atexit(ioa_http_exit);
    ioa_http_redis_start();

    ioa_http_port = ioa_http_free_port();
    ioa_http_conf_write(ioa_http_port);
    ioa_http_nginx_start(*argv);

    ioa_http_token("Alice", "agent launch admin metrics observer",
                   &ioa_http_names[IOA_HTTP_N_ALICE].value);
    ioa_http_token("Bob", "agent", &ioa_http_names[IOA_HTTP_N_BOB].value);
    ioa_http_token("Mal", "", &ioa_http_names[IOA_HTTP_N_MAL].value);

    if (ioa_http_redis) {
        ioa_http_fixture();
        ioa_http_snapshot();
    }

    ioa_http_verbose = (getenv("IOA_FUZZ_VERBOSE") != NULL);

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char             *text, *last;
    const u_char       *p, *m;
    size_t              len;
    ngx_uint_t          which;
    ioa_http_peer_t    *peer;

    ioa_http_restore();

    /* one that an input before this left behind may have closed since */
    ioa_http_base = ngx_min(ioa_http_base, ioa_http_active());

    text = ioa_http_expand(data, size, &len);
    last = text + len;

    peer = ioa_http_open();
    p = text;

    for ( ;; ) {
        m = ioa_http_marker(p, last, &which);

        if (peer) {
            ioa_http_send(peer, p, m - p);
        }

        if (which == IOA_HTTP_END) {
            break;
        }

        p = m + ioa_http_markers[which].len;

        switch (which) {

        case IOA_HTTP_PAUSE:
            ioa_http_settle(IOA_HTTP_STEP_MS);
            break;

        case IOA_HTTP_CLOSE:
            if (peer && !peer->shut) {
                (void) shutdown(peer->fd, SHUT_WR);
                peer->shut = 1;
            }

            peer = ioa_http_open();
            break;

        case IOA_HTTP_RESET:
            if (peer) {
                ioa_http_reset(peer);
            }

            peer = ioa_http_open();
            break;

        default: /* IOA_HTTP_NEXT */
            ioa_http_settle(IOA_HTTP_STEP_MS);
            peer = ioa_http_open();
            break;
        }
    }

    ioa_http_finish();
    free(text);

    return 0;
}


/* a client gone with its request in flight: the hub has accepted it and
 * read what it could in a few turns, then gets a reset */

static void
ioa_http_reset(ioa_http_peer_t *p)
{
    ngx_uint_t     i;
    struct linger  l;

    for (i = 0; i < IOA_HTTP_RESET_TURNS; i++) {
        (void) ioa_http_turn(0);
        (void) ioa_http_drain();
    }

    if (p->fd == -1) {
        return;
    }

    if (!p->eof) {
        l.l_onoff = 1;
        l.l_linger = 0;
        (void) setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }

    (void) close(p->fd);
    p->fd = -1;
    p->shut = 1;
    p->eof = 1;
}


/* one turn of the event loop, as ngx_process_events_and_timers() takes it
 * under accept_mutex: events are posted first, so the turn knows whether
 * epoll had anything; 1 when it did or a timer of nginx's came due */

static ngx_uint_t
ioa_http_turn(ngx_msec_t wait)
{
    ngx_msec_t    timer;
    ngx_uint_t    busy;
    ngx_cycle_t  *cycle;

    cycle = (ngx_cycle_t *) ngx_cycle;
    busy = 0;

    timer = ngx_event_find_timer();

    if (timer <= wait) {
        busy = 1;

    } else {
        timer = wait;
    }

    if (!ngx_queue_empty(&ngx_posted_next_events)) {
        ngx_event_move_posted_next(cycle);
        timer = 0;
        busy = 1;
    }

    (void) ngx_process_events(cycle, timer, NGX_UPDATE_TIME|NGX_POST_EVENTS);

    if (!ngx_queue_empty(&ngx_posted_accept_events)
        || !ngx_queue_empty(&ngx_posted_events))
    {
        busy = 1;
    }

    ngx_event_process_posted(cycle, &ngx_posted_accept_events);
    ngx_event_expire_timers();
    ngx_event_process_posted(cycle, &ngx_posted_events);

    return busy;
}


/* reads what the hub wrote to every connection, so that it never waits on
 * a full socket; 1 if anything came */

static ngx_uint_t
ioa_http_drain(void)
{
    u_char            buf[16384];
    ssize_t           n;
    ngx_uint_t        i, moved;
    ioa_http_peer_t  *p;

    moved = 0;

    for (i = 0; i < ioa_http_npeers; i++) {
        p = &ioa_http_peers[i];

        while (p->fd != -1 && !p->eof) {
            n = recv(p->fd, buf, sizeof(buf), 0);

            if (n > 0) {
                moved = 1;

                if (ioa_http_verbose) {
                    fprintf(stderr, "<<< connection %lu, %d bytes:\n%.*s\n",
                            (unsigned long) i, (int) n, (int) n, buf);
                }

                if (p->capture) {
                    n = ngx_min((size_t) n, IOA_HTTP_CAPTURE - p->captured);
                    ngx_memcpy(p->capture + p->captured, buf, n);
                    p->captured += n;
                }

                continue;
            }

            if (n == -1 && (errno == EAGAIN || errno == EINTR)) {
                break;
            }

            p->eof = 1;
            moved = 1;
        }
    }

    return moved;
}


/* turns until the hub is quiet, or limit ms have passed */

static void
ioa_http_settle(ngx_msec_t limit)
{
    ngx_msec_t  start;

    start = ngx_current_msec;

    while (ngx_current_msec - start < limit) {
        if (ioa_http_quiet()) {
            return;
        }
    }
}


/*
 * 1 if the hub has nothing left to do for now.  Writes on loopback reach
 * the other socket before send() returns, so what the hub answers is there
 * when its turn ends; what it waits on Redis for is counted by the module
 * (a turn then blocks until the answer); and a Redis that answers on two
 * connections at once (a PUBLISH and the message) is given
 * IOA_HTTP_QUIET_US between two empty turns.  A millisecond's wait in
 * epoll instead made every input 2 ms longer.
 */

static ngx_uint_t
ioa_http_quiet(void)
{
    ngx_uint_t  busy;

    busy = ioa_http_turn(0);
    busy |= ioa_http_drain();

    if (busy) {
        return 0;
    }

    if (ioa_http_redis_waiting()) {
        (void) ioa_http_turn(IOA_HTTP_QUIET_MS);
        return 0;
    }

    usleep(IOA_HTTP_QUIET_US);

    busy = ioa_http_turn(0);
    busy |= ioa_http_drain();

    return !busy && !ioa_http_redis_waiting();
}


/* a command the module sent and Redis has not answered: on a loaded
 * machine an answer can take longer than a quiet turn */

static ngx_uint_t
ioa_http_redis_waiting(void)
{
    ngx_uint_t             i;
    ngx_ioa_redis_node_t  *node;

    for (i = 0; i < ngx_ioa_redis_nnodes(); i++) {
        node = ngx_ioa_redis_node(i);

        if (node->cmd.pending || node->sub.pending) {
            return 1;
        }
    }

    return 0;
}


/* the connections nginx holds: its listening socket and Redis' too */

static ngx_uint_t
ioa_http_active(void)
{
    return ngx_cycle->connection_n - ngx_cycle->free_connection_n;
}


static ioa_http_peer_t *
ioa_http_open(void)
{
    int                  fd, one;
    struct sockaddr_in   sin;
    ioa_http_peer_t     *p;

    if (ioa_http_npeers == IOA_HTTP_PEERS) {
        return NULL;                    /* the rest of the input is dropped */
    }

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd == -1) {
        ioa_http_fail("socket()");
    }

    ngx_memzero(&sin, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(ioa_http_port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* blocking: on loopback the kernel completes the handshake without
     * nginx, which accepts it on the next turn */
    if (connect(fd, (struct sockaddr *) &sin, sizeof(sin)) == -1) {
        ioa_http_fail("connect() to the hub");
    }

    one = 1;
    (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (ngx_nonblocking(fd) == -1) {
        ioa_http_fail("ngx_nonblocking()");
    }

    p = &ioa_http_peers[ioa_http_npeers++];
    ngx_memzero(p, sizeof(ioa_http_peer_t));
    p->fd = fd;

    return p;
}


/* writes all of data, turning the loop while the socket is full; a hub
 * that closed, or that reads nothing for a whole step, ends the writing */

static void
ioa_http_send(ioa_http_peer_t *p, const u_char *data, size_t len)
{
    ssize_t     n;
    ngx_msec_t  start;

    start = ngx_current_msec;

    while (len && !p->shut && p->fd != -1) {
        n = send(p->fd, data, len, MSG_NOSIGNAL|MSG_DONTWAIT);

        if (n > 0) {
            data += n;
            len -= n;
            start = ngx_current_msec;
            continue;
        }

        if (n == -1 && (errno == EAGAIN || errno == EINTR)
            && ngx_current_msec - start < IOA_HTTP_STEP_MS)
        {
            (void) ioa_http_turn(IOA_HTTP_QUIET_MS);
            (void) ioa_http_drain();
            continue;
        }

        p->shut = 1;                    /* reset, or never read: give up */
    }
}


/* the end of an input: quiet; every client half-closed, until the hub has
 * closed them all or is quiet; every one closed; then a little time for
 * the hub to close its side and hear Redis on what it sent meanwhile */

static void
ioa_http_finish(void)
{
    ngx_uint_t        i, left;
    ngx_msec_t        start;
    ioa_http_peer_t  *p;

    ioa_http_settle(IOA_HTTP_STEP_MS);

    for (i = 0; i < ioa_http_npeers; i++) {
        p = &ioa_http_peers[i];

        if (p->fd != -1 && !p->shut) {
            (void) shutdown(p->fd, SHUT_WR);
            p->shut = 1;
        }
    }

    start = ngx_current_msec;

    while (ngx_current_msec - start < IOA_HTTP_STEP_MS) {
        left = 0;

        for (i = 0; i < ioa_http_npeers; i++) {
            left += (ioa_http_peers[i].fd != -1 && !ioa_http_peers[i].eof);
        }

        if (left == 0 || ioa_http_quiet()) {
            break;
        }
    }

    for (i = 0; i < ioa_http_npeers; i++) {
        p = &ioa_http_peers[i];

        if (p->fd != -1) {
            (void) close(p->fd);
            p->fd = -1;
        }
    }

    ioa_http_npeers = 0;

    /* above the hub's own connections (counted at start): one it has not
     * closed yet */
    start = ngx_current_msec;

    while ((ioa_http_active() > ioa_http_base || ioa_http_redis_waiting())
           && ngx_current_msec - start < IOA_HTTP_CLOSE_MS)
    {
        (void) ioa_http_turn(IOA_HTTP_QUIET_MS);
    }

    /* a connection it still holds counts as the hub's own from now on,
     * so that the inputs after this one do not wait for it too */
    if (ioa_http_active() > ioa_http_base) {
        ioa_http_stuck++;
        fprintf(stderr, "http_request: the hub still holds %lu connection(s) "
                "%d ms after the input's clients closed\n",
                (unsigned long) (ioa_http_active() - ioa_http_base),
                IOA_HTTP_CLOSE_MS);
        ioa_http_base = ioa_http_active();
    }
}


/* "@@pause@@" and the other markers: the first one at or after p */

static const u_char *
ioa_http_marker(const u_char *p, const u_char *last, ngx_uint_t *which)
{
    ngx_uint_t  i;

    for ( /* void */ ; last - p >= 8; p++) {
        if (p[0] != '@' || p[1] != '@') {
            continue;
        }

        for (i = 0; i < IOA_HTTP_END; i++) {
            if ((size_t) (last - p) >= ioa_http_markers[i].len
                && ngx_memcmp(p, ioa_http_markers[i].data,
                              ioa_http_markers[i].len) == 0)
            {
                *which = i;
                return p;
            }
        }
    }

    *which = IOA_HTTP_END;

    return last;
}


/* the input with its names replaced; the caller frees it */

static u_char *
ioa_http_expand(const u_char *data, size_t size, size_t *len)
{
    u_char           *out, *o;
    size_t            n, grow;
    ngx_uint_t        i;
    const u_char     *p, *last;
    ioa_http_name_t  *name;

    grow = 0;

    for (name = ioa_http_names; name->name; name++) {
        grow = ngx_max(grow, name->value.len);
    }

    /* a name is at least 7 bytes: never more than size / 7 of them */
    n = size + (size / 7 + 1) * grow;

    out = malloc(n + 1);
    if (out == NULL) {
        ioa_http_fail("malloc()");
    }

    o = out;
    last = data + size;

    for (p = data; p < last; /* void */) {
        if (*p == '@' && last - p >= 7) {
            for (i = 0; ioa_http_names[i].name; i++) {
                name = &ioa_http_names[i];
                n = ngx_strlen(name->name);

                if ((size_t) (last - p) >= n
                    && ngx_memcmp(p, name->name, n) == 0)
                {
                    if (name->value.len) {  /* none without Redis */
                        o = ngx_cpymem(o, name->value.data, name->value.len);
                    }

                    p += n;
                    break;
                }
            }

            if (ioa_http_names[i].name) {
                continue;
            }
        }

        *o++ = *p++;
    }

    *len = o - out;

    return out;
}


/* nginx as its main() starts it, up to the loop: the cycle from the
 * configuration, then every module's init_process as a single process */

static void
ioa_http_nginx_start(char **argv)
{
    ngx_log_t    *log;
    ngx_uint_t    i;
    ngx_cycle_t  *cycle, *init;
    ngx_msec_t    start;

    /* the process's own: ngx_os_init() moves the environment that follows
     * them in memory, as it does in nginx, and keeps the copy referenced */
    ngx_argc = 1;
    ngx_argv = argv;
    ngx_os_argv = argv;

    if (ngx_strerror_init() != NGX_OK) {
        ioa_http_fail("ngx_strerror_init()");
    }

    ngx_max_sockets = -1;
    ngx_time_init();
#if (NGX_PCRE)
    ngx_regex_init();
#endif
    ngx_pid = ngx_getpid();
    ngx_parent = ngx_getppid();

    log = ngx_log_init((u_char *) ioa_http_dir, (u_char *) "");
    if (log == NULL) {
        ioa_http_fail("ngx_log_init()");
    }

#if (NGX_OPENSSL)
    ngx_ssl_init(log);
#endif

    init = &ioa_http_init_cycle;
    init->log = log;
    ngx_cycle = init;

    init->pool = ngx_create_pool(1024, log);
    if (init->pool == NULL) {
        ioa_http_fail("ngx_create_pool()");
    }

    /* what ngx_process_options() would make of -p DIR/ -c DIR/nginx.conf */
    init->prefix.len = ngx_strlen(ioa_http_dir) + 1;
    init->prefix.data = ngx_pnalloc(init->pool, init->prefix.len + 1);
    if (init->prefix.data == NULL) {
        ioa_http_fail("ngx_pnalloc()");
    }

    ngx_sprintf(init->prefix.data, "%s/%Z", ioa_http_dir);
    init->conf_prefix = init->prefix;
    init->conf_file.data = (u_char *) ioa_http_conf;
    init->conf_file.len = ngx_strlen(ioa_http_conf);
    ngx_str_set(&init->error_log, "error.log");

    /* not NULL: ngx_init_cycle() copies it with memcpy() (the one UBSan
     * finding in nginx's core that t/ubsan.supp names) */
    ngx_str_set(&init->conf_param, "");

    if (ngx_os_init(log) != NGX_OK
        || ngx_crc32_table_init() != NGX_OK)
    {
        ioa_http_fail("ngx_os_init()");
    }

    ngx_slab_sizes_init();

    if (ngx_preinit_modules() != NGX_OK) {
        ioa_http_fail("ngx_preinit_modules()");
    }

    cycle = ngx_init_cycle(init);
    if (cycle == NULL) {
        ioa_http_fail("the configuration (see the messages above)");
    }

    ngx_cycle = cycle;
    ngx_use_stderr = 0;
    ngx_process = NGX_PROCESS_SINGLE;

    /* no ngx_set_environment(): it would leave the process no variable but
     * TZ, and libFuzzer's -fork and the sanitizers' symbolizer want PATH */

    for (i = 0; cycle->modules[i]; i++) {
        if (cycle->modules[i]->init_process
            && cycle->modules[i]->init_process(cycle) == NGX_ERROR)
        {
            ioa_http_fail("a module's init_process");
        }
    }

    if (ioa_http_redis == NULL) {
        ioa_http_settle(IOA_HTTP_STEP_MS);
        ioa_http_base = ioa_http_active();
        return;
    }

    /* until the module says every command can be sent (its notice, which
     * t/lib/IoaTest/Ready.pm waits for too) */
    start = ngx_current_msec;

    while (!ioa_http_ready) {
        if (ngx_current_msec - start > 20000) {
            ioa_http_fail("the hub never became ready (its error.log)");
        }

        (void) ioa_http_turn(10);
    }

    ioa_http_settle(IOA_HTTP_STEP_MS);
    ioa_http_base = ioa_http_active();
}


static void
ioa_http_conf_write(int port)
{
    FILE  *f;
    char   key[300];

    if ((size_t) snprintf(ioa_http_conf, sizeof(ioa_http_conf),
                          "%s/nginx.conf", ioa_http_dir)
        >= sizeof(ioa_http_conf)
        || (size_t) snprintf(key, sizeof(key), "%s/jwt.key", ioa_http_dir)
           >= sizeof(key))
    {
        ioa_http_fail("IOA_FUZZ_DIR is too long");
    }

    f = fopen(key, "w");
    if (f == NULL) {
        ioa_http_fail("cannot write jwt.key");
    }

    fprintf(f, "%s\n", IOA_HTTP_JWT_KEY);
    fclose(f);

    f = fopen(ioa_http_conf, "w");
    if (f == NULL) {
        ioa_http_fail("cannot write nginx.conf");
    }

    /*
     * The two servers of t/295-malformed-requests.t, open mode and tokens,
     * on one port, the open one with CORS and permessage-deflate.
     * Timeouts are short so that a connection an input left behind goes
     * within seconds.  The limits count in Redis (fleet), which is put
     * back before each input, and are far above what inputs reach: an
     * input's answer must not depend on the inputs before it, in this
     * worker's memory.  Bodies, headers and catch-up batches are kept small
     * on the token server, so that inputs of a few KB reach the temp-file
     * body, the 413, the large header buffers and a catch-up in rounds.
     */
    fprintf(f,
        "daemon off;\n"
        "master_process off;\n"
        "worker_processes 1;\n"
        "pid %s/nginx.pid;\n"
        "error_log %s/error.log notice;\n"
        "events { worker_connections 8192; }\n"
        "http {\n"
        "    access_log off;\n"
        "    client_header_timeout 2s;\n"
        "    client_body_timeout 2s;\n"
        "    send_timeout 2s;\n"
        "    keepalive_timeout 2s;\n"
        "    lingering_timeout 1s;\n"
        "    reset_timedout_connection on;\n"
        "    ioa_limit_scope fleet;\n"
        "    ioa_limit_rate 100000r/s burst=100000;\n"
        "    ioa_limit_room_rate 100000r/s burst=100000;\n"
        "    ioa_limit_teamup_rate 100000r/s burst=100000;\n"
        "    ioa_limit_launch_rate 100000r/s burst=100000;\n"
        "    ioa_limit_conn 1000;\n",
        ioa_http_dir, ioa_http_dir);

    if (ioa_http_redis) {
        fprintf(f, "    ioa_redis %s:%d;\n", ioa_http_redis_host,
                ioa_http_redis_port);

    } else {
        /* a port where nothing listens: Redis is away */
        fprintf(f, "    ioa_redis 127.0.0.1:%d;\n", ioa_http_free_port());
    }

    fprintf(f,
        "    server {\n"
        "        listen 127.0.0.1:%d;\n"
        "        server_name open;\n"
        "        ioa_cors_origins http://example.com;\n"
        "        ioa_ws_deflate on;\n"
        "        location / { ioa_api; ioa_auth off;\n"
        "                     subrequest_output_buffer_size 1m; }\n"
        "        location = /mcp { ioa_mcp; ioa_auth off; }\n"
        "        location = /.well-known/agent-card.json {\n"
        "            ioa_a2a url=/a2a name=fuzz-hub; ioa_auth off; }\n"
        "        location = /a2a { ioa_a2a; ioa_auth off; }\n"
        "        location = /metrics { ioa_metrics; }\n"
        "    }\n"
        "    server {\n"
        "        listen 127.0.0.1:%d;\n"
        "        server_name jwt;\n"
        "        client_max_body_size 16k;\n"
        "        client_body_buffer_size 1k;\n"
        "        client_header_buffer_size 1k;\n"
        "        large_client_header_buffers 4 4k;\n"
        "        ioa_catchup_batch 2;\n"
        "        ioa_auth jwt;\n"
        "        ioa_auth_jwt_key %s;\n"
        "        location / { ioa_api; subrequest_output_buffer_size 1m; }\n"
        "        location = /mcp { ioa_mcp; }\n"
        "        location = /.well-known/agent-card.json {\n"
        "            ioa_a2a url=/a2a; }\n"
        "        location = /a2a { ioa_a2a; }\n"
        "        location = /metrics { ioa_metrics token; }\n"
        "    }\n"
        "}\n",
        port, port, key);

    fclose(f);
}


/* a loopback port nothing listens on now */

static int
ioa_http_free_port(void)
{
    int                 fd, port;
    socklen_t           len;
    struct sockaddr_in  sin;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd == -1) {
        ioa_http_fail("socket()");
    }

    ngx_memzero(&sin, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(sin);

    if (bind(fd, (struct sockaddr *) &sin, sizeof(sin)) == -1
        || getsockname(fd, (struct sockaddr *) &sin, &len) == -1)
    {
        ioa_http_fail("bind() to a free port");
    }

    port = ntohs(sin.sin_port);
    close(fd);

    return port;
}


static void
ioa_http_redis_start(void)
{
    int          i;
    char         port[16], dir[300], logf[320];
    const char  *env, *colon;

    env = getenv("IOA_FUZZ_REDIS");

    if (env && ngx_strcmp(env, "off") == 0) {
        return;
    }

    if (env && *env) {
        colon = strrchr(env, ':');

        if (colon == NULL
            || (size_t) (colon - env) >= sizeof(ioa_http_redis_host))
        {
            ioa_http_fail("IOA_FUZZ_REDIS wants host:port or off");
        }

        ngx_memcpy(ioa_http_redis_host, env, colon - env);
        ioa_http_redis_host[colon - env] = '\0';
        ioa_http_redis_port = atoi(colon + 1);

    } else {
        ioa_http_redis_port = ioa_http_free_port();
        snprintf(port, sizeof(port), "%d", ioa_http_redis_port);
        snprintf(dir, sizeof(dir), "%s", ioa_http_dir);
        snprintf(logf, sizeof(logf), "%s/redis.log", ioa_http_dir);

        ioa_http_redis_pid = fork();

        if (ioa_http_redis_pid == -1) {
            ioa_http_fail("fork()");
        }

        if (ioa_http_redis_pid == 0) {
            /* it goes with the harness, however the harness ends */
            (void) prctl(PR_SET_PDEATHSIG, SIGKILL);

            execlp("redis-server", "redis-server", "--port", port,
                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", dir, "--logfile", logf, "--daemonize", "no",
                   (char *) NULL);
            _exit(127);
        }
    }

    for (i = 0; i < 200; i++) {
        ioa_http_redis = redisConnect(ioa_http_redis_host,
                                      ioa_http_redis_port);

        if (ioa_http_redis && ioa_http_redis->err == 0) {
            return;
        }

        if (ioa_http_redis) {
            redisFree(ioa_http_redis);
            ioa_http_redis = NULL;
        }

        usleep(25000);
    }

    ioa_http_fail("Redis does not answer (install redis-server, or set "
                  "IOA_FUZZ_REDIS=off)");
}


/* at exit: what the run left, Redis stopped, the work directory removed
 * (a crash exits without this, and leaves the directory and its logs) */

static void
ioa_http_exit(void)
{
    if (ioa_http_stuck) {
        fprintf(stderr, "http_request: %lu inputs left a connection the hub "
                "had not closed %d ms after its client\n",
                (unsigned long) ioa_http_stuck, IOA_HTTP_CLOSE_MS);
    }

    if (ioa_http_redis_pid > 0) {
        kill(ioa_http_redis_pid, SIGTERM);
        (void) waitpid(ioa_http_redis_pid, NULL, 0);
        ioa_http_redis_pid = 0;
    }

    if (!ioa_http_keep && ioa_http_dir[0]) {
        (void) nftw(ioa_http_dir, ioa_http_remove, 16, FTW_DEPTH|FTW_PHYS);
    }
}


static int
ioa_http_remove(const char *path, const struct stat *st, int type,
    struct FTW *ftw)
{
    (void) st;
    (void) type;
    (void) ftw;

    (void) remove(path);

    return 0;
}


/*
 * The world every input meets, made by the hub itself through its API,
 * and the ids it gave out kept for the names of the input.
 */

static void
ioa_http_fixture(void)
{
    char       hdr[1024];
    ngx_str_t  jsid, auth;

    ioa_http_fixture_ask("POST /register HTTP/1.1\r\nHost: open\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"name\":\"Alice\",\"type\":\"Human Assistant\","
        "\"desc\":\"writes and reviews code\",\"tags\":[\"code\"]}",
        NULL, NULL);
    ioa_http_fixture_ask("POST /register HTTP/1.1\r\nHost: open\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"name\":\"Bob\",\"type\":\"Thing Assistant\","
        "\"desc\":\"searches the web and summarises pages\"}",
        NULL, NULL);
    ioa_http_fixture_ask("POST /register HTTP/1.1\r\nHost: open\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"name\":\"Carol\",\"type\":\"Human Assistant\","
        "\"desc\":\"plans trips\",\"speaks_protocol\":true}",
        NULL, NULL);
    ioa_http_fixture_ask("POST /teamup HTTP/1.1\r\nHost: open\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"sender\":\"Alice\",\"agent_names\":[\"Bob\"],"
        "\"team_name\":\"fixture\"}",
        "\"comm_id\":\"", &ioa_http_names[IOA_HTTP_N_ROOM].value);

    if (ioa_http_names[IOA_HTTP_N_ROOM].value.len != 32) {
        ioa_http_fail("the fixture's /teamup gave no comm_id");
    }

    snprintf(hdr, sizeof(hdr),
             "{\"comm_id\":\"%.*s\",\"content\":\"hello Bob\","
             "\"type\":0,\"state\":1}",
             (int) ioa_http_names[IOA_HTTP_N_ROOM].value.len,
             (char *) ioa_http_names[IOA_HTTP_N_ROOM].value.data);
    ioa_http_fixture_ask("POST /agents/Alice/messages HTTP/1.1\r\n"
        "Host: open\r\nContent-Type: application/json\r\n"
        "Content-Length: %uz\r\n\r\n%s", hdr, NULL, NULL);

    ioa_http_fixture_ask("POST /launch_goal HTTP/1.1\r\nHost: open\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"goal\":\"summarise the fixture\","
        "\"team_member_names\":[\"Bob\"]}",
        "\"goal_id\":\"", &ioa_http_names[IOA_HTTP_N_GOAL].value);

    if (ioa_http_names[IOA_HTTP_N_GOAL].value.len != 32) {
        ioa_http_fail("the fixture's /launch_goal gave no goal_id");
    }

    ioa_http_fixture_ask("POST /mcp HTTP/1.1\r\nHost: open\r\n"
        "Accept: application/json, text/event-stream\r\n"
        "Content-Type: application/json\r\nContent-Length: %uz\r\n\r\n%s",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-06-18\"}}",
        "Mcp-Session-Id: ", &ioa_http_names[IOA_HTTP_N_SID].value);

    auth = ioa_http_names[IOA_HTTP_N_ALICE].value;
    snprintf(hdr, sizeof(hdr),
             "POST /mcp HTTP/1.1\r\nHost: jwt\r\n"
             "Authorization: Bearer %.*s\r\n"
             "Accept: application/json, text/event-stream\r\n"
             "Content-Type: application/json\r\n"
             "Content-Length: %%uz\r\n\r\n%%s", (int) auth.len,
             (char *) auth.data);
    ioa_http_fixture_ask(hdr,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-06-18\"}}",
        "Mcp-Session-Id: ", &jsid);
    ioa_http_names[IOA_HTTP_N_JSID].value = jsid;

    if (ioa_http_names[IOA_HTTP_N_SID].value.len != 64 || jsid.len != 64) {
        ioa_http_fail("the fixture's MCP initialize gave no session");
    }
}


/* one request of the fixture on a connection of its own; with field, the
 * token after it in the answer (up to a quote or the end of the line) */

static void
ioa_http_fixture_ask(const char *fmt, const char *arg, const char *field,
    ngx_str_t *out)
{
    u_char           *p, *q, *last, text[4096];
    ioa_http_peer_t  *peer;

    last = ngx_snprintf(text, sizeof(text), fmt, ngx_strlen(arg), arg);

    peer = ioa_http_open();
    peer->capture = malloc(IOA_HTTP_CAPTURE);

    if (peer->capture == NULL) {
        ioa_http_fail("malloc()");
    }

    ioa_http_send(peer, text, last - text);
    ioa_http_settle(IOA_HTTP_STEP_MS);

    if (field) {
        p = ngx_strlcasestrn(peer->capture, peer->capture + peer->captured,
                             (u_char *) field, ngx_strlen(field) - 1);

        if (p == NULL) {
            fprintf(stderr, "http_request: the fixture's answer has no %s:\n"
                    "%.*s\n", field, (int) peer->captured, peer->capture);
            ioa_http_fail("the fixture");
        }

        p += ngx_strlen(field);

        for (q = p; q < peer->capture + peer->captured
                    && *q != '"' && *q != '\r'; q++)
        {
            /* void */
        }

        out->len = q - p;
        out->data = malloc(out->len);

        if (out->data == NULL) {
            ioa_http_fail("malloc()");
        }

        ngx_memcpy(out->data, p, out->len);
    }

    /* the fixture's connections go before its next request */
    free(peer->capture);
    peer->capture = NULL;
    ioa_http_finish();
}


/* an HS256 JWT for the token server, valid for a day */

static void
ioa_http_token(const char *sub, const char *scope, ngx_str_t *out)
{
    u_char        claims[256], data[512], mac[EVP_MAX_MD_SIZE], *p;
    time_t        now;
    ngx_str_t     src, dst, hs;
    unsigned int  mlen;

    static u_char  head[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";

    now = time(NULL);

    src.data = claims;
    src.len = ngx_snprintf(claims, sizeof(claims),
                           "{\"sub\":\"%s\",\"scope\":\"%s\","
                           "\"iat\":%T,\"exp\":%T}",
                           sub, scope, now, now + 86400) - claims;

    hs.data = head;
    hs.len = sizeof(head) - 1;
    dst.data = data;
    ngx_encode_base64url(&dst, &hs);
    p = data + dst.len;
    *p++ = '.';
    dst.data = p;
    ngx_encode_base64url(&dst, &src);
    p += dst.len;

    if (HMAC(EVP_sha256(), IOA_HTTP_JWT_KEY, sizeof(IOA_HTTP_JWT_KEY) - 1,
             data, p - data, mac, &mlen)
        == NULL)
    {
        ioa_http_fail("HMAC()");
    }

    hs.data = mac;
    hs.len = mlen;
    *p++ = '.';
    dst.data = p;
    ngx_encode_base64url(&dst, &hs);
    p += dst.len;

    out->len = p - data;
    out->data = malloc(out->len);

    if (out->data == NULL) {
        ioa_http_fail("malloc()");
    }

    ngx_memcpy(out->data, data, out->len);
}


/* every key the fixture left, with its time to live */

static void
ioa_http_snapshot(void)
{
    size_t           i;
    redisReply      *keys, *r;
    ioa_http_key_t  *k;

    keys = redisCommand(ioa_http_redis, "KEYS *");

    if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
        ioa_http_fail("KEYS *");
    }

    ioa_http_keys = calloc(keys->elements + 1, sizeof(ioa_http_key_t));
    if (ioa_http_keys == NULL) {
        ioa_http_fail("calloc()");
    }

    for (i = 0; i < keys->elements; i++) {
        k = &ioa_http_keys[ioa_http_nkeys];

        r = redisCommand(ioa_http_redis, "DUMP %b", keys->element[i]->str,
                         keys->element[i]->len);

        if (r == NULL || r->type != REDIS_REPLY_STRING) {
            ioa_http_fail("DUMP");
        }

        k->key_len = keys->element[i]->len;
        k->key = malloc(k->key_len);
        k->dump_len = r->len;
        k->dump = malloc(k->dump_len);

        if (k->key == NULL || k->dump == NULL) {
            ioa_http_fail("malloc()");
        }

        ngx_memcpy(k->key, keys->element[i]->str, k->key_len);
        ngx_memcpy(k->dump, r->str, k->dump_len);
        freeReplyObject(r);

        r = redisCommand(ioa_http_redis, "PTTL %b", k->key, k->key_len);

        if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer == -2) {
            ioa_http_fail("PTTL");
        }

        k->pttl = r->integer > 0 ? r->integer : 0;
        freeReplyObject(r);

        ioa_http_nkeys++;
    }

    freeReplyObject(keys);
}


/* Redis as the snapshot has it: one pipelined FLUSHALL and RESTOREs */

static void
ioa_http_restore(void)
{
    size_t           i;
    redisReply      *r;
    ioa_http_key_t  *k;

    if (ioa_http_redis == NULL) {
        return;
    }

    (void) redisAppendCommand(ioa_http_redis, "FLUSHALL");

    for (i = 0; i < ioa_http_nkeys; i++) {
        k = &ioa_http_keys[i];
        (void) redisAppendCommand(ioa_http_redis, "RESTORE %b %lld %b",
                                  k->key, k->key_len, k->pttl,
                                  k->dump, k->dump_len);
    }

    for (i = 0; i < ioa_http_nkeys + 1; i++) {
        if (redisGetReply(ioa_http_redis, (void **) &r) != REDIS_OK
            || r == NULL || r->type == REDIS_REPLY_ERROR)
        {
            ioa_http_fail("restoring Redis");
        }

        freeReplyObject(r);
    }
}


static void
ioa_http_fail(const char *what)
{
    fprintf(stderr, "http_request: %s: %s (the hub's files are in %s)\n",
            what, errno ? strerror(errno) : "", ioa_http_dir);
    ioa_http_keep = 1;
    exit(1);
}


/*
 * Every message nginx or the module logs goes through here (the link's
 * --wrap): crit and worse is a finding, the module's readiness notice ends
 * the wait at start, and the rest goes on to the error log.
 */

void
__wrap_ngx_log_error_core(ngx_uint_t level, ngx_log_t *log, ngx_err_t err,
    const char *fmt, ...)
{
    u_char   *p, msg[NGX_MAX_ERROR_STR];
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    va_end(args);

    if (level <= NGX_LOG_CRIT) {
        fprintf(stderr, "http_request: nginx logged at level %lu: %.*s "
                "(errno %d)\n", (unsigned long) level, (int) (p - msg), msg,
                (int) err);
        abort();
    }

    if (!ioa_http_ready
        && ngx_strlcasestrn(msg, p, (u_char *) "ioa redis: ready", 16 - 1))
    {
        ioa_http_ready = 1;
    }

    __real_ngx_log_error_core(level, log, err, "%*s", (size_t) (p - msg),
                              msg);
}
