/*
 * ioa-floor: what the kernel charges any fan-out hub on this machine, open
 * loop against saturated, with nothing of ioa in it.
 *
 *   ioa-floor [--rooms 100] [--members 4] [--size 200]
 *             (--rate POSTS_PER_S | --saturate [--window 8])
 *             [--duration 5] [--warmup 2] [--pidfile FILE] [--json FILE|-]
 *
 * Issue 16 asks that the nginx worker spend no more than twice its saturated
 * CPU per envelope when envelopes arrive one by one (10,000 posts/s into 100
 * rooms of 4).  Part of an envelope's cost at a low rate is not the hub's
 * code but the kernel's: the read that wakes the hub, the four writes to four
 * members' sockets (on loopback the sender also runs the receiver's TCP
 * work and wakes it), and the epoll_wait that sleeps between envelopes.
 * Saturated, one wake and one read serve many envelopes and a write carries
 * several.  This tool measures that part alone, so the benchmark can say
 * how much of ioa's open-loop cost any design would pay.
 *
 * It forks a relay, the least a hub can be: plain TCP, no framing beyond
 * fixed-size records, no parsing, no storage, no Redis.  Each connection
 * says once which room it is in; the relay reads what a member sends and
 * writes it to every member of the room (the sender too, as ioa echoes),
 * one send() per member for all the complete records one read brought:
 * level-triggered epoll, one read per readable socket per turn, as nginx
 * does.  Sends are blocking: the window (saturated) or the rate (open
 * loop) keep what is in flight far below a loopback socket's buffer, so a
 * send never waits in practice, and a relay that queued instead would only
 * add work to the floor.
 *
 * The generator is this process: rooms x members connections, member 0 of
 * each room the publisher, one thread, epoll_pwait2 with a nanosecond
 * timeout so that a post leaves at its due time.  Open loop: posts are due
 * evenly over all rooms (room k % rooms posts the k-th), each from its due
 * time whatever happened to the previous one.  Saturated: every publisher
 * keeps --window records in flight (sent, not yet back at the publisher).
 * Latency runs from a record's due time to its receipt by each member.
 *
 * The relay's CPU over the measured phase is read from
 * /proc/PID/schedstat (nanoseconds on a CPU) and divided by the posts of
 * the phase.  --pidfile gives the relay's pid to a profiler (bench/
 * openloop-profile.sh runs perf on it exactly as on the nginx worker).  At
 * the end every record posted in the measured phase must have reached all
 * of its room's members: the count of those that did not is "lost".
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS          1000000000ull
#define READ_MAX    65536
#define RECORD_MIN  16

/* a record: when it was due, its room, its number in the room; then padding */
typedef struct {
    uint64_t  due;
    uint32_t  room;
    uint32_t  seq;
} record_head_t;

typedef struct {
    int       fd;
    uint32_t  room;
    uint32_t  member;
    size_t    have;          /* bytes of a partial record kept in buf */
    char     *buf;
} conn_t;

static struct {
    uint32_t   rooms;
    uint32_t   members;
    size_t     size;
    double     rate;
    int        saturate;
    uint32_t   window;
    double     duration;
    double     warmup;
    const char *pidfile;
    const char *json;
} opt = { 100, 4, 200, 0, 0, 8, 5, 2, NULL, NULL };


static void
die(const char *what)
{
    fprintf(stderr, "ioa-floor: %s: %s\n", what, strerror(errno));
    exit(1);
}


static uint64_t
now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * NS + (uint64_t) ts.tv_nsec;
}


static void
nodelay(int fd)
{
    int  one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
        die("TCP_NODELAY");
    }
}


static void
send_all(int fd, const char *p, size_t n)
{
    ssize_t  w;

    while (n) {
        w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            die("send");
        }
        p += w;
        n -= (size_t) w;
    }
}


/*
 * Reads what one readable socket has (one recv, as a level-triggered loop
 * would) and hands every complete record to fn; a partial record stays in
 * c->buf.  Returns 0 at EOF.
 */

static int
read_records(conn_t *c, char *tmp, void (*fn)(conn_t *, char *, size_t))
{
    ssize_t  n;
    size_t   len, whole;

    memcpy(tmp, c->buf, c->have);

    n = recv(c->fd, tmp + c->have, READ_MAX, MSG_DONTWAIT);
    if (n == 0) {
        return 0;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return 1;
        }
        die("recv");
    }

    len = c->have + (size_t) n;
    whole = len - len % opt.size;

    if (whole) {
        fn(c, tmp, whole);
    }

    c->have = len - whole;
    memcpy(c->buf, tmp + whole, c->have);

    return 1;
}


/* ------------------------------------------------------------ the relay */

static conn_t   *relay_room;       /* rooms x members, by room */

static void
relay_forward(conn_t *c, char *data, size_t len)
{
    uint32_t  m;
    conn_t   *room;

    room = &relay_room[(size_t) c->room * opt.members];

    for (m = 0; m < opt.members; m++) {
        send_all(room[m].fd, data, len);
    }
}


static void
relay(int lfd)
{
    int                 ep, fd, n, i, open;
    char               *tmp;
    size_t              total, k;
    uint32_t            hello, *filled;
    conn_t             *c;
    struct epoll_event  ev, events[256];

    total = (size_t) opt.rooms * opt.members;
    relay_room = calloc(total, sizeof(conn_t));
    filled = calloc(opt.rooms, sizeof(uint32_t));
    tmp = malloc(READ_MAX + opt.size);
    ep = epoll_create1(0);

    if (relay_room == NULL || filled == NULL || tmp == NULL || ep < 0) {
        die("relay setup");
    }

    for (k = 0; k < total; k++) {
        fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            die("accept");
        }
        if (recv(fd, &hello, sizeof(hello), MSG_WAITALL) != sizeof(hello)
            || hello >= opt.rooms || filled[hello] == opt.members)
        {
            fprintf(stderr, "ioa-floor: relay: a bad hello\n");
            exit(1);
        }
        nodelay(fd);

        c = &relay_room[(size_t) hello * opt.members + filled[hello]];
        c->fd = fd;
        c->room = hello;
        c->member = filled[hello]++;
        c->buf = malloc(opt.size);
        if (c->buf == NULL) {
            die("malloc");
        }

        ev.events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            die("epoll_ctl");
        }
    }

    close(lfd);

    for (open = (int) total; open > 0; /* void */) {
        n = epoll_wait(ep, events, 256, -1);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            die("epoll_wait");
        }
        for (i = 0; i < n; i++) {
            c = events[i].data.ptr;
            if (!read_records(c, tmp, relay_forward)) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                open--;
            }
        }
    }

    exit(0);
}


/* -------------------------------------------------------- the generator */

static conn_t    *gen_conn;
static uint64_t  *gen_sent;         /* per room: records sent */
static uint64_t  *gen_back;         /* per room: records back at member 0 */
static char      *gen_record;
static uint64_t   phase_start, phase_end;
static uint64_t  *lat;              /* latencies of the measured phase, ns */
static size_t     lat_n, lat_cap;
static uint64_t   posted_in_phase, delivered_in_phase;

static void
gen_post(uint32_t room, uint64_t due)
{
    record_head_t  *h;

    h = (record_head_t *) gen_record;
    h->due = due;
    h->room = room;
    h->seq = (uint32_t) gen_sent[room]++;

    if (due >= phase_start && due < phase_end) {
        posted_in_phase++;
    }

    send_all(gen_conn[(size_t) room * opt.members].fd, gen_record, opt.size);
}


static void
gen_received(conn_t *c, char *data, size_t len)
{
    size_t          off;
    uint64_t        now;
    record_head_t   h;

    now = now_ns();

    for (off = 0; off < len; off += opt.size) {
        memcpy(&h, data + off, sizeof(h));

        if (h.due >= phase_start && h.due < phase_end) {
            delivered_in_phase++;
            if (lat_n == lat_cap) {
                lat_cap = lat_cap ? lat_cap * 2 : 1 << 16;
                lat = realloc(lat, lat_cap * sizeof(uint64_t));
                if (lat == NULL) {
                    die("realloc");
                }
            }
            lat[lat_n++] = now - h.due;
        }

        if (c->member == 0) {
            gen_back[c->room]++;

            if (opt.saturate && now < phase_end) {
                gen_post(c->room, now);
            }
        }
    }
}


static uint64_t
relay_cpu_ns(pid_t pid)
{
    char                path[64];
    FILE               *f;
    unsigned long long  ns;

    snprintf(path, sizeof(path), "/proc/%d/schedstat", (int) pid);

    f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%llu", &ns) != 1) {
        die("read the relay's schedstat");
    }
    fclose(f);

    return ns;
}


static int
cmp_u64(const void *a, const void *b)
{
    uint64_t  x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return (x > y) - (x < y);
}


static double
pct_ms(double p)
{
    size_t  i;

    if (lat_n == 0) {
        return 0;
    }
    i = (size_t) (p * (double) (lat_n - 1));
    return (double) lat[i] / 1e6;
}


static double
number(const char *name, const char *v, double min)
{
    char    *end;
    double   d;

    d = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || d < min) {
        fprintf(stderr, "ioa-floor: %s: \"%s\" is not a number >= %g\n",
                name, v, min);
        exit(2);
    }
    return d;
}


static void
usage(int rc)
{
    fprintf(rc ? stderr : stdout,
        "usage: ioa-floor [--rooms 100] [--members 4] [--size 200]\n"
        "                 (--rate POSTS_PER_S | --saturate [--window 8])\n"
        "                 [--duration 5] [--warmup 2] [--pidfile FILE]"
        " [--json FILE|-]\n");
    exit(rc);
}


static void
options(int argc, char **argv)
{
    int  i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0) {
            usage(0);
        } else if (strcmp(a, "--saturate") == 0) {
            opt.saturate = 1;
            continue;
        }
        if (v == NULL) {
            usage(2);
        }
        i++;
        if (strcmp(a, "--rooms") == 0) {
            opt.rooms = (uint32_t) number(a, v, 1);
        } else if (strcmp(a, "--members") == 0) {
            opt.members = (uint32_t) number(a, v, 1);
        } else if (strcmp(a, "--size") == 0) {
            opt.size = (size_t) number(a, v, RECORD_MIN);
        } else if (strcmp(a, "--rate") == 0) {
            opt.rate = number(a, v, 1);
        } else if (strcmp(a, "--window") == 0) {
            opt.window = (uint32_t) number(a, v, 1);
        } else if (strcmp(a, "--duration") == 0) {
            opt.duration = number(a, v, 0.1);
        } else if (strcmp(a, "--warmup") == 0) {
            opt.warmup = number(a, v, 0);
        } else if (strcmp(a, "--pidfile") == 0) {
            opt.pidfile = v;
        } else if (strcmp(a, "--json") == 0) {
            opt.json = v;
        } else {
            usage(2);
        }
    }

    if (opt.saturate == (opt.rate > 0)) {
        fprintf(stderr, "ioa-floor: one of --rate or --saturate\n");
        exit(2);
    }
}


int
main(int argc, char **argv)
{
    int                 lfd, ep, n, i;
    pid_t               pid;
    FILE               *out;
    size_t              total, k;
    uint32_t            room, hello;
    uint64_t            now, start, next_due, post_k, interval, cpu0, cpu1;
    uint64_t            wake, lost;
    socklen_t           alen;
    conn_t             *c;
    struct timespec     ts;
    struct sockaddr_in  sa;
    struct epoll_event  ev, events[256];
    char               *tmp;

    options(argc, argv);

    total = (size_t) opt.rooms * opt.members;

    lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    alen = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *) &sa, sizeof(sa)) < 0
        || listen(lfd, 4096) < 0
        || getsockname(lfd, (struct sockaddr *) &sa, &alen) < 0)
    {
        die("listen");
    }

    pid = fork();
    if (pid < 0) {
        die("fork");
    }
    if (pid == 0) {
        relay(lfd);
    }
    close(lfd);

    if (opt.pidfile) {
        out = fopen(opt.pidfile, "w");
        if (out == NULL) {
            die(opt.pidfile);
        }
        fprintf(out, "%d\n", (int) pid);
        fclose(out);
    }

    gen_conn = calloc(total, sizeof(conn_t));
    gen_sent = calloc(opt.rooms, sizeof(uint64_t));
    gen_back = calloc(opt.rooms, sizeof(uint64_t));
    gen_record = calloc(1, opt.size);
    tmp = malloc(READ_MAX + opt.size);
    ep = epoll_create1(0);
    if (gen_conn == NULL || gen_sent == NULL || gen_back == NULL
        || gen_record == NULL || tmp == NULL || ep < 0)
    {
        die("setup");
    }

    for (k = 0; k < total; k++) {
        c = &gen_conn[k];
        c->room = (uint32_t) (k / opt.members);
        c->member = (uint32_t) (k % opt.members);
        c->buf = malloc(opt.size);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->buf == NULL || c->fd < 0
            || connect(c->fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
        {
            die("connect");
        }
        nodelay(c->fd);
        hello = c->room;
        send_all(c->fd, (char *) &hello, sizeof(hello));

        ev.events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
            die("epoll_ctl");
        }
    }

    start = now_ns();
    phase_start = start + (uint64_t) (opt.warmup * NS);
    phase_end = phase_start + (uint64_t) (opt.duration * NS);
    cpu0 = 0;

    if (opt.saturate) {
        for (room = 0; room < opt.rooms; room++) {
            for (k = 0; k < opt.window; k++) {
                gen_post(room, start);
            }
        }
    }

    interval = opt.saturate ? 0 : (uint64_t) ((double) NS / opt.rate);
    post_k = 0;
    next_due = start;

    for ( ;; ) {
        now = now_ns();

        if (cpu0 == 0 && now >= phase_start) {
            cpu0 = relay_cpu_ns(pid);
        }

        if (now >= phase_end) {
            break;
        }

        if (!opt.saturate) {
            while (next_due <= now && next_due < phase_end) {
                gen_post((uint32_t) (post_k % opt.rooms), next_due);
                post_k++;
                next_due = start + post_k * interval;
            }
        }

        /* until the next post is due, or the phase starts or ends */
        wake = phase_end;
        if (!opt.saturate && next_due < wake) {
            wake = next_due;
        }
        if (cpu0 == 0 && phase_start < wake) {
            wake = phase_start;
        }
        now = now_ns();
        wake = wake > now ? wake - now : 0;
        ts.tv_sec = (time_t) (wake / NS);
        ts.tv_nsec = (long) (wake % NS);

        n = epoll_pwait2(ep, events, 256, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            die("epoll_pwait2");
        }
        for (i = 0; i < n; i++) {
            if (!read_records(events[i].data.ptr, tmp, gen_received)) {
                fprintf(stderr, "ioa-floor: the relay closed a connection\n");
                exit(1);
            }
        }
    }

    cpu1 = relay_cpu_ns(pid);

    /* drain: every record of the phase back at every member, or 5 s */
    for (start = now_ns();
         delivered_in_phase < posted_in_phase * opt.members
         && now_ns() - start < 5 * NS;
         /* void */)
    {
        ts.tv_sec = 0;
        ts.tv_nsec = 50000000;
        n = epoll_pwait2(ep, events, 256, &ts, NULL);
        for (i = 0; i < n; i++) {
            read_records(events[i].data.ptr, tmp, gen_received);
        }
    }

    for (k = 0; k < total; k++) {
        close(gen_conn[k].fd);
    }
    waitpid(pid, NULL, 0);

    qsort(lat, lat_n, sizeof(uint64_t), cmp_u64);
    lost = posted_in_phase * opt.members - delivered_in_phase;

    out = stdout;
    if (opt.json && strcmp(opt.json, "-") != 0) {
        out = fopen(opt.json, "w");
        if (out == NULL) {
            die(opt.json);
        }
    }

    fprintf(out,
        "{\"mode\": \"%s\", \"rooms\": %u, \"members\": %u, \"size\": %zu, "
        "\"publish_rate\": %.1f, \"delivered\": %llu, \"lost\": %llu, "
        "\"p50_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"relay_cpu_us_per_post\": %.2f}\n",
        opt.saturate ? "saturated" : "rate", opt.rooms, opt.members,
        opt.size, (double) posted_in_phase / opt.duration,
        (unsigned long long) delivered_in_phase, (unsigned long long) lost,
        pct_ms(0.50), pct_ms(0.99),
        posted_in_phase
            ? (double) (cpu1 - cpu0) / 1000.0 / (double) posted_in_phase : 0);

    if (out != stdout) {
        fclose(out);
    }

    return lost ? 3 : 0;
}
