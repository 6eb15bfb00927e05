
/*
 * ioa-bench's main: options, then the phases of a run.
 *
 *   setup     ioa: register every agent, form every room (http.c);
 *             nchan: nothing, channels appear when first used
 *   connect   every WebSocket, at most --connect-concurrency handshakes at
 *             a time; any failure ends the run (exit 1) with the first
 *             error, since a run with missing members would report losses
 *             that say nothing about the server
 *   ready     one message from every publisher, until every member has
 *             it (not with --count; load.c says why)
 *   warmup    publishing, nothing recorded
 *   measure   --duration seconds: counters and the histogram record, the
 *             server's /proc figures are read at both ends
 *   drain     publishing stops; wait (at most --drain seconds) until every
 *             message sent has reached every member, so that what is still
 *             missing afterwards is lost, not late
 *   close     a close frame to every connection, then the report
 *
 * --count M makes the load exact: each publisher sends M messages, all in
 * the measured time (no warmup), and a run that cannot fit them fails; with
 * --on-measure a command runs just before the measured time and after its
 * drain (bench/callgrind.sh zeroes and dumps callgrind's counters there).
 *
 * --replay FILE is an HTTP load instead of rooms (replay.c): no setup, no
 * WebSockets; its connections are opened, then the same warmup, measure
 * and drain (waiting for the answers still due), and its own report.
 *
 * --idle N alone skips the rooms: N agents connect and are held for
 * --duration seconds; the server's RSS is read before the first connects
 * and at the end, and divided by N.  With --rooms too, the idle agents are
 * held beside the load.
 *
 * Exit status: 0 a clean run; 1 the run could not be made (setup or
 * connections failed); 2 bad options; 3 the run was made but had errors or
 * failed the integrity check (lost, duplicated or reordered messages), or
 * was interrupted.
 *
 * The nchan target expects a WebSocket publisher location at /pub/<channel>
 * and a WebSocket subscriber location at /sub/<channel> below --url; a room
 * is the channel "<prefix>_r<room>", and a publishing member holds both a
 * /pub/ and a /sub/ connection (nchan does not echo to the publisher):
 *
 *   nchan_max_reserved_memory 256M;          # the memory store's shm
 *   location ~ ^/pub/(.+)$ {
 *       nchan_publisher websocket;
 *       nchan_channel_id $1;
 *       nchan_message_buffer_length 1000;    # per channel
 *       nchan_message_timeout 5m;
 *   }
 *   location ~ ^/sub/(.+)$ {
 *       nchan_subscriber websocket;
 *       nchan_channel_id $1;
 *       nchan_subscriber_first_message oldest;
 *   }
 *
 * "oldest" is the counterpart of ioa's since=0-0: channels are new, so a
 * subscriber reading from the start cannot miss a message published while
 * it was still connecting.
 */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <arpa/inet.h>

#include "ioa_bench.h"


#define IB_ERRORS_SHOWN     5
/* the longest the ready phase waits for its messages (see load.c) */
#define IB_READY_MAX  30

/* the longest a turn waits for events: phases and progress are checked
 * between turns */
#define IB_TURN_MAX         (10 * 1000000ULL)


ib_run_t  ib;

static volatile sig_atomic_t  ib_signalled;


static void
ib_usage(FILE *f)
{
    fprintf(f,
        "usage: ioa-bench [options]\n"
        "\n"
        "A WebSocket room load generator for the ioa hub (and nchan).\n"
        "\n"
        "target\n"
        "  --target ioa|nchan     server kind (ioa)\n"
        "  --url URL              http://HOST:PORT[/PATH] "
        "(http://127.0.0.1:7788)\n"
        "workload\n"
        "  --rooms R              rooms (10; 0 with --idle alone)\n"
        "  --members K            members per room, all subscribed (4)\n"
        "  --publishers P         publishing members per room (1)\n"
        "  --size BYTES           message size, padded (200)\n"
        "  --rate N               messages/s per publisher (10)\n"
        "  --arrivals even|poisson  with --rate: evenly spaced (even), or\n"
        "                         exponential gaps of mean 1/N (poisson)\n"
        "  --seed N               poisson: the gaps' seed, the same seed the "
        "same\n"
        "                         arrival times (1)\n"
        "  --saturate             as fast as the echoes come back, with\n"
        "  --window W             at most W messages in flight per "
        "publisher (8)\n"
        "  --duration SEC         measured time (10)\n"
        "  --count M              each publisher sends exactly M messages, "
        "all in the\n"
        "                         measured time (no warmup)\n"
        "  --warmup SEC           unmeasured time before it (2)\n"
        "  --drain SEC            longest wait for late messages (5)\n"
        "  --idle N               hold N idle agents; alone: report server "
        "RSS per connection\n"
        "  --echo 0|1             ioa: publishers get their own envelopes "
        "(1) or acks (0)\n"
        "  --type N               ioa: envelope \"type\" (none: never "
        "floor-controlled)\n"
        "replay (an HTTP load instead of rooms)\n"
        "  --replay FILE          POST each line of FILE (one body a line),"
        " round and round\n"
        "  --path PATH            where to (/retrieve_assistant)\n"
        "  --connections N        keep-alive connections (4)\n"
        "                         closed loop: --window requests in flight "
        "on each (1);\n"
        "                         --rate N: open loop, N requests/s in all"
        "\n"
        "                         (--arrivals and --seed as for rooms);\n"
        "                         --count M: M requests, then the run ends\n"
        "  --tally NAME           count the answers by this header's value\n"
        "measurement and output\n"
        "  --server-pid PID[,PID] server process to sample (repeatable)\n"
        "  --json FILE|-          one JSON object with every figure\n"
        "  --on-measure CMD       run \"CMD start\" before the measured "
        "time and \"CMD stop\"\n"
        "                         after its drain (e.g. callgrind_control "
        "-z / -d)\n"
        "  --quiet                no progress lines\n"
        "connections\n"
        "  --prefix STR           agent and channel name prefix (random)\n"
        "  --connect-concurrency N  handshakes in flight (256)\n"
        "  --connect-timeout SEC  per connection (10)\n"
        "  --source-addrs N       rotate over 127.0.0.1..N from the start "
        "(1; more are\n"
        "                         added when one runs out of ports)\n"
        "  --help, --version\n");
}


static void IB_PRINTF(1, 2) IB_NORETURN
ib_die_usage(const char *fmt, ...)
{
    va_list  ap;

    fputs("ioa-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(ioa-bench --help lists the options)\n", stderr);

    exit(2);
}


static long
ib_opt_long(const char *name, const char *v, long min, long max)
{
    long   n;
    char  *end;

    errno = 0;
    n = strtol(v, &end, 10);

    if (errno || end == v || *end || n < min || n > max) {
        ib_die_usage("--%s wants a whole number from %ld to %ld, not \"%s\"",
                     name, min, max, v);
    }

    return n;
}


static double
ib_opt_double(const char *name, const char *v, double min, double max)
{
    char    *end;
    double   d;

    errno = 0;
    d = strtod(v, &end);

    if (errno || end == v || *end || !(d >= min && d <= max)) {
        ib_die_usage("--%s wants a number from %g to %g, not \"%s\"", name,
                     min, max, v);
    }

    return d;
}


static void
ib_add_pids(const char *v)
{
    char  *s, *tok, *save;

    s = ib_alloc(strlen(v) + 1);
    strcpy(s, v);

    for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    {
        ib.procs = ib_realloc(ib.procs, (ib.nprocs + 1) * sizeof(ib_proc_t));
        memset(&ib.procs[ib.nprocs], 0, sizeof(ib_proc_t));
        ib.procs[ib.nprocs].pid =
            (int) ib_opt_long("server-pid", tok, 1, 0x7fffffff);
        ib.nprocs++;
    }

    free(s);
}


/* http://host[:port][/path]: the address, the Host header, the base path */

static void
ib_parse_url(void)
{
    int               rc;
    char              host[256], port[16];
    const char       *p, *slash, *colon;
    size_t            n;
    struct addrinfo   hints, *res;

    p = ib.url;

    if (strncmp(p, "http://", 7) == 0) {
        p += 7;

    } else if (strncmp(p, "ws://", 5) == 0) {
        p += 5;

    } else {
        ib_die_usage("--url must start with http:// (TLS is not supported), "
                     "not \"%s\"", ib.url);
    }

    slash = strchr(p, '/');
    n = slash ? (size_t) (slash - p) : strlen(p);

    if (n == 0 || n >= sizeof(ib.host)) {
        ib_die_usage("--url has no host: \"%s\"", ib.url);
    }

    memcpy(ib.host, p, n);
    ib.host[n] = '\0';

    if (slash) {
        snprintf(ib.base, sizeof(ib.base), "%s", slash);
        n = strlen(ib.base);

        while (n && ib.base[n - 1] == '/') {
            ib.base[--n] = '\0';
        }
    }

    colon = strrchr(ib.host, ':');

    if (colon) {
        snprintf(host, sizeof(host), "%.*s", (int) (colon - ib.host),
                 ib.host);
        snprintf(port, sizeof(port), "%s", colon + 1);
        (void) ib_opt_long("url's port", port, 1, 65535);

    } else {
        snprintf(host, sizeof(host), "%s", ib.host);
        snprintf(port, sizeof(port), "80");
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;

    rc = getaddrinfo(host, port, &hints, &res);

    if (rc != 0) {
        ib_die("cannot resolve \"%s\" (IPv4): %s", host, gai_strerror(rc));
    }

    memcpy(&ib.addr, res->ai_addr, sizeof(ib.addr));
    freeaddrinfo(res);
}


void
ib_error(uint64_t *counter, const char *fmt, ...)
{
    char      msg[sizeof(ib.first_error)];
    va_list   ap;
    uint64_t  total;

    (*counter)++;

    total = ib.err_connect + ib.err_handshake + ib.err_closed
            + ib.err_protocol + ib.err_server;

    if (total > IB_ERRORS_SHOWN && ib.first_error[0]) {
        return;
    }

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (ib.first_error[0] == '\0') {
        memcpy(ib.first_error, msg, sizeof(msg));
    }

    if (!ib.quiet) {
        ib_warn("%s%s", msg, total == IB_ERRORS_SHOWN
                             ? " (further errors are counted, not shown)"
                             : "");
    }
}


static void
ib_on_signal(int sig)
{
    (void) sig;
    ib_signalled = 1;
}


static void
ib_options(int argc, char **argv)
{
    int            ch, idx, rate_set, window_set, rooms_set;
    unsigned char  rnd[4];
    enum {
        O_TARGET = 256, O_URL, O_ROOMS, O_MEMBERS, O_PUBLISHERS, O_SIZE,
        O_RATE, O_SATURATE, O_WINDOW, O_DURATION, O_WARMUP, O_DRAIN, O_IDLE,
        O_ECHO, O_TYPE, O_PID, O_JSON, O_QUIET, O_PREFIX, O_CONC, O_CTIMEOUT,
        O_SOURCES, O_COUNT, O_ON_MEASURE, O_REPLAY, O_PATH, O_CONNECTIONS,
        O_TALLY, O_ARRIVALS, O_SEED, O_HELP, O_VERSION
    };
    static const struct option  opts[] = {
        { "target", required_argument, NULL, O_TARGET },
        { "url", required_argument, NULL, O_URL },
        { "rooms", required_argument, NULL, O_ROOMS },
        { "members", required_argument, NULL, O_MEMBERS },
        { "publishers", required_argument, NULL, O_PUBLISHERS },
        { "size", required_argument, NULL, O_SIZE },
        { "rate", required_argument, NULL, O_RATE },
        { "saturate", no_argument, NULL, O_SATURATE },
        { "window", required_argument, NULL, O_WINDOW },
        { "duration", required_argument, NULL, O_DURATION },
        { "warmup", required_argument, NULL, O_WARMUP },
        { "drain", required_argument, NULL, O_DRAIN },
        { "idle", required_argument, NULL, O_IDLE },
        { "echo", required_argument, NULL, O_ECHO },
        { "type", required_argument, NULL, O_TYPE },
        { "server-pid", required_argument, NULL, O_PID },
        { "json", required_argument, NULL, O_JSON },
        { "quiet", no_argument, NULL, O_QUIET },
        { "prefix", required_argument, NULL, O_PREFIX },
        { "connect-concurrency", required_argument, NULL, O_CONC },
        { "connect-timeout", required_argument, NULL, O_CTIMEOUT },
        { "source-addrs", required_argument, NULL, O_SOURCES },
        { "count", required_argument, NULL, O_COUNT },
        { "on-measure", required_argument, NULL, O_ON_MEASURE },
        { "replay", required_argument, NULL, O_REPLAY },
        { "path", required_argument, NULL, O_PATH },
        { "connections", required_argument, NULL, O_CONNECTIONS },
        { "tally", required_argument, NULL, O_TALLY },
        { "arrivals", required_argument, NULL, O_ARRIVALS },
        { "seed", required_argument, NULL, O_SEED },
        { "help", no_argument, NULL, O_HELP },
        { "version", no_argument, NULL, O_VERSION },
        { NULL, 0, NULL, 0 }
    };

    ib.target = IB_TARGET_IOA;
    ib.url = "http://127.0.0.1:7788";
    ib.rooms = -1;
    ib.members = 4;
    ib.publishers = 1;
    ib.size = 200;
    ib.rate = 10;
    ib.window = 8;
    ib.duration = 10;
    ib.warmup = 2;
    ib.drain = 5;
    ib.echo = 1;
    ib.type = -1;
    ib.concurrency = 256;
    ib.connect_timeout = 10;
    ib.count = -1;
    ib.path = "/retrieve_assistant";
    ib.connections = 4;
    ib.arrivals = IB_ARRIVALS_EVEN;
    ib.seed = 1;
    rate_set = 0;
    window_set = 0;
    rooms_set = 0;

    opterr = 0;

    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        switch (ch) {

        case O_TARGET:
            if (strcmp(optarg, "ioa") == 0) {
                ib.target = IB_TARGET_IOA;
            } else if (strcmp(optarg, "nchan") == 0) {
                ib.target = IB_TARGET_NCHAN;
            } else {
                ib_die_usage("--target is ioa or nchan, not \"%s\"", optarg);
            }
            break;

        case O_URL:
            ib.url = optarg;
            break;

        case O_ROOMS:
            ib.rooms = ib_opt_long("rooms", optarg, 0, 1000000);
            rooms_set = 1;
            break;

        case O_MEMBERS:
            ib.members = ib_opt_long("members", optarg, 1, 100000);
            break;

        case O_PUBLISHERS:
            ib.publishers = ib_opt_long("publishers", optarg, 1, 100000);
            break;

        case O_SIZE:
            /* room for what a server adds within IB_MAX_MESSAGE */
            ib.size = ib_opt_long("size", optarg, 1, IB_MAX_MESSAGE - 4096);
            break;

        case O_RATE:
            ib.rate = ib_opt_double("rate", optarg, 0.001, 1e7);
            rate_set = 1;
            break;

        case O_SATURATE:
            ib.saturate = 1;
            break;

        case O_WINDOW:
            ib.window = ib_opt_long("window", optarg, 1, 1000000);
            window_set = 1;
            break;

        case O_DURATION:
            ib.duration = ib_opt_double("duration", optarg, 0.1, 86400);
            break;

        case O_WARMUP:
            ib.warmup = ib_opt_double("warmup", optarg, 0, 3600);
            break;

        case O_DRAIN:
            ib.drain = ib_opt_double("drain", optarg, 0, 3600);
            break;

        case O_IDLE:
            ib.idle = ib_opt_long("idle", optarg, 0, 10000000);
            break;

        case O_ECHO:
            ib.echo = (int) ib_opt_long("echo", optarg, 0, 1);
            break;

        case O_TYPE:
            ib.type = ib_opt_long("type", optarg, 0, 11);
            break;

        case O_PID:
            ib_add_pids(optarg);
            break;

        case O_JSON:
            ib.json = optarg;
            break;

        case O_QUIET:
            ib.quiet = 1;
            break;

        case O_PREFIX:
            if (strlen(optarg) == 0 || strlen(optarg) > 40
                || optarg[0] == '_'
                || strspn(optarg, "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
                   != strlen(optarg))
            {
                /* names stay \w+ (channel locations are often written
                 * ~ ^/sub/(\w+)$) and start as ioa's default
                 * ioa_agent_name_pattern wants */
                ib_die_usage("--prefix wants 1 to 40 of [A-Za-z0-9_], not "
                             "starting with '_', not \"%s\"", optarg);
            }

            snprintf(ib.prefix, sizeof(ib.prefix), "%s", optarg);
            break;

        case O_CONC:
            ib.concurrency = ib_opt_long("connect-concurrency", optarg, 1,
                                         100000);
            break;

        case O_CTIMEOUT:
            ib.connect_timeout = ib_opt_double("connect-timeout", optarg, 0.1,
                                               3600);
            break;

        case O_SOURCES:
            ib.source_addrs = ib_opt_long("source-addrs", optarg, 1, 250);
            break;

        case O_COUNT:
            ib.count = ib_opt_long("count", optarg, 0, 1000000000);
            break;

        case O_ON_MEASURE:
            ib.on_measure = optarg;
            break;

        case O_REPLAY:
            ib.replay = optarg;
            break;

        case O_PATH:
            if (optarg[0] != '/' || strlen(optarg) > 512
                || strpbrk(optarg, " \r\n"))
            {
                ib_die_usage("--path wants /PATH (at most 512 bytes, no "
                             "spaces), not \"%s\"", optarg);
            }

            ib.path = optarg;
            break;

        case O_CONNECTIONS:
            ib.connections = ib_opt_long("connections", optarg, 1, 1000);
            break;

        case O_TALLY:
            if (strlen(optarg) == 0 || strlen(optarg) > 64
                || strpbrk(optarg, ": \r\n"))
            {
                ib_die_usage("--tally wants a header name, not \"%s\"",
                             optarg);
            }

            ib.tally = optarg;
            break;

        case O_ARRIVALS:
            if (strcmp(optarg, "even") == 0) {
                ib.arrivals = IB_ARRIVALS_EVEN;
            } else if (strcmp(optarg, "poisson") == 0) {
                ib.arrivals = IB_ARRIVALS_POISSON;
            } else {
                ib_die_usage("--arrivals is even or poisson, not \"%s\"",
                             optarg);
            }
            break;

        case O_SEED:
            ib.seed = (uint64_t) ib_opt_long("seed", optarg, 0, LONG_MAX);
            break;

        case O_HELP:
            ib_usage(stdout);
            exit(0);

        case O_VERSION:
            printf("ioa-bench %s\n", IB_VERSION);
            exit(0);

        default:
            ib_die_usage("unknown option or missing value: \"%s\"",
                         argv[optind - 1]);
        }
    }

    if (optind < argc) {
        ib_die_usage("unexpected argument \"%s\"", argv[optind]);
    }

    if (ib.arrivals == IB_ARRIVALS_POISSON
        && (ib.saturate || (ib.replay && !rate_set)))
    {
        ib_die_usage("--arrivals poisson is a schedule for --rate: a "
                     "closed loop (--saturate, --replay without --rate) "
                     "sends when answers come");
    }

    if (ib.replay) {
        if (rooms_set || ib.idle) {
            ib_die_usage("--replay is an HTTP load: no --rooms or --idle");
        }

        ib.rooms = 0;
        /* closed loop unless a rate is asked for */
        ib.rate = rate_set ? ib.rate : 0;
        ib.window = window_set ? ib.window : 1;

        if (ib.count >= 0) {
            ib.warmup = 0;
        }

        return;
    }

    if (ib.rooms < 0) {
        ib.rooms = ib.idle ? 0 : 10;
    }

    if (ib.rooms == 0 && ib.idle == 0) {
        ib_die_usage("nothing to do: give --rooms or --idle");
    }

    if (ib.publishers > ib.members) {
        ib_die_usage("--publishers %ld is more than --members %ld",
                     ib.publishers, ib.members);
    }

    if (ib.saturate && rate_set) {
        ib_die_usage("--rate and --saturate exclude each other");
    }

    if (ib.count >= 0) {
        /* every message of a counted run is in the measured time */
        ib.warmup = 0;
    }

    if (ib.target == IB_TARGET_NCHAN && (!ib.echo || ib.type >= 0)) {
        ib_die_usage("--echo and --type are options of the ioa target");
    }

    if (ib.prefix[0] == '\0') {
        ib_random_bytes(rnd, sizeof(rnd));
        snprintf(ib.prefix, sizeof(ib.prefix), "ib%02x%02x%02x%02x", rnd[0],
                 rnd[1], rnd[2], rnd[3]);
    }
}


/* who is who: connections, publishers, the pair table */

static void
ib_plan(void)
{
    size_t         r, m, i, nmembers, extra;
    ib_conn_t     *c;
    struct rlimit  rl;

    nmembers = (size_t) ib.rooms * (size_t) ib.members;
    ib.npubs = (size_t) ib.rooms * (size_t) ib.publishers;
    ib.nsubs = nmembers;

    /* nchan: a publisher is a member with a second connection, to /pub/ */
    extra = ib.target == IB_TARGET_NCHAN ? ib.npubs : 0;
    ib.nconns = nmembers + extra + (size_t) ib.idle;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void) setrlimit(RLIMIT_NOFILE, &rl);
        }

        if (ib.nconns + 32 > rl.rlim_cur) {
            ib_die("%zu connections need %zu descriptors and this process "
                   "may have %llu (RLIMIT_NOFILE): run several ioa-bench "
                   "processes, each with part of the rooms", ib.nconns,
                   ib.nconns + 32, (unsigned long long) rl.rlim_cur);
        }
    }

    ib.conns = ib_calloc(ib.nconns, sizeof(ib_conn_t));
    ib.pubs = ib_calloc(ib.npubs, sizeof(ib_pub_t));
    ib.pairs = ib_calloc(ib.nsubs * (size_t) ib.publishers, sizeof(ib_pair_t));

    for (r = 0; r < (size_t) ib.rooms; r++) {
        for (m = 0; m < (size_t) ib.members; m++) {
            c = &ib.conns[r * (size_t) ib.members + m];
            c->kind = IB_KIND_MEMBER;
            c->room = (uint32_t) r;
            c->member = (uint32_t) m;
            c->sub = (int32_t) (r * (size_t) ib.members + m);
            c->pub = -1;
            c->echo_pub = -1;

            if (m < (size_t) ib.publishers) {
                i = r * (size_t) ib.publishers + m;
                ib.pubs[i].room = (uint32_t) r;

                /* nchan has no echo: the publishing member's own
                 * subscription sees its message come back */
                if (ib.target == IB_TARGET_IOA) {
                    c->pub = (int32_t) i;
                    ib.pubs[i].conn = c;
                    c->echo_pub = ib.echo ? (int32_t) i : -1;

                } else {
                    c->echo_pub = (int32_t) i;
                }
            }
        }
    }

    for (i = 0; i < extra; i++) {
        c = &ib.conns[nmembers + i];
        c->kind = IB_KIND_PUB;
        c->room = (uint32_t) (i / (size_t) ib.publishers);
        c->member = (uint32_t) (i % (size_t) ib.publishers);
        c->sub = -1;
        c->pub = (int32_t) i;
        c->echo_pub = -1;
        ib.pubs[i].conn = c;
    }

    for (i = 0; i < (size_t) ib.idle; i++) {
        c = &ib.conns[nmembers + extra + i];
        c->kind = IB_KIND_IDLE;
        c->member = (uint32_t) i;
        c->sub = -1;
        c->pub = -1;
        c->echo_pub = -1;
    }

    for (i = 0; i < ib.nconns; i++) {
        ib.conns[i].fd = -1;
    }
}


static void
ib_progress(const char *phase, uint64_t now, uint64_t *last,
    uint64_t *last_sent, uint64_t *last_recv)
{
    double  dt;

    if (ib.quiet || now - *last < IB_NS) {
        return;
    }

    dt = (double) (now - *last) / 1e9;

    fprintf(stderr, "ioa-bench: %6.1fs %-8s sent %8.0f/s  received %9.0f/s  "
            "open %zu  errors %llu\n", (double) (now - ib.origin) / 1e9,
            phase, (double) (ib.sent - *last_sent) / dt,
            (double) (ib.received - *last_recv) / dt, ib.open,
            (unsigned long long) (ib.err_connect + ib.err_handshake
                                  + ib.err_closed + ib.err_protocol
                                  + ib.err_server));

    *last = now;
    *last_sent = ib.sent;
    *last_recv = ib.received;
}


/* one turn of the load's loop: rooms (loop.c) or replay (replay.c) */

static void
ib_turn(uint64_t timeout)
{
    if (ib.replay) {
        ib_replay_turn(timeout);
    } else {
        ib_loop_turn(timeout);
    }
}


/* everything sent has arrived: every member has every message, or every
 * request has its answer */

static int
ib_all_in(void)
{
    uint64_t  receivers;

    if (ib.replay) {
        return ib_replay_inflight() == 0;
    }

    /* every member gets every message; with --echo 0 the sender does not */
    receivers = (uint64_t) ib.members;

    if (ib.target == IB_TARGET_IOA && !ib.echo) {
        receivers--;
    }

    return ib.received_unique >= ib.sent * receivers;
}


static void
ib_run_until(uint64_t end, const char *phase)
{
    uint64_t  now, due, timeout, last, last_sent, last_recv;

    now = ib_now();
    last = now;
    last_sent = ib.sent;
    last_recv = ib.received;

    while (now < end && !ib_signalled && !(ib.replay && ib_replay_done()))
    {
        timeout = IB_TURN_MAX;
        due = ib.replay ? ib_replay_next_due() : ib_load_next_due();

        if (due != UINT64_MAX) {
            timeout = due > now ? due - now : 0;

            if (timeout > IB_TURN_MAX) {
                timeout = IB_TURN_MAX;
            }
        }

        ib_turn(timeout);
        now = ib_now();
        ib_progress(phase, now, &last, &last_sent, &last_recv);
    }
}


static void
ib_connect_all(void)
{
    size_t    next, failed;
    uint64_t  now, start, check, last;

    start = ib_now();
    check = start;
    last = start;
    next = 0;

    while ((next < ib.nconns || ib.connecting) && !ib_signalled) {

        while (next < ib.nconns && ib.connecting < (size_t) ib.concurrency) {
            ib_conn_start(&ib.conns[next++]);
        }

        ib_loop_turn(IB_TURN_MAX);
        now = ib_now();

        if (now - check > IB_NS / 10) {
            ib_loop_check_deadlines();
            check = now;
        }

        if (!ib.quiet && now - last > IB_NS) {
            fprintf(stderr, "ioa-bench: connecting: %zu of %zu open\n",
                    ib.open, ib.nconns);
            last = now;
        }
    }

    ib.t_connect = ib_now() - start;

    if (ib_signalled) {
        ib_die("interrupted while connecting (%zu of %zu open)", ib.open,
               ib.nconns);
    }

    failed = ib.nconns - ib.opened;

    if (failed || ib.open != ib.nconns) {
        ib_die("%zu of %zu connections failed (connect %llu, handshake "
               "%llu, closed %llu, protocol %llu, server %llu); first: %s",
               failed ? failed : ib.nconns - ib.open, ib.nconns,
               (unsigned long long) ib.err_connect,
               (unsigned long long) ib.err_handshake,
               (unsigned long long) ib.err_closed,
               (unsigned long long) ib.err_protocol,
               (unsigned long long) ib.err_server, ib.first_error);
    }
}


/* --on-measure: "CMD start" / "CMD stop", waited for (a profiler's
 * control command takes a moment; nothing is measured in time meanwhile
 * that a counted run cares about) */

static void
ib_on_measure(const char *what)
{
    int     rc;
    char   *cmd;
    size_t  n;

    if (ib.on_measure == NULL) {
        return;
    }

    n = strlen(ib.on_measure) + strlen(what) + 2;
    cmd = ib_alloc(n);
    snprintf(cmd, n, "%s %s", ib.on_measure, what);

    fflush(stdout);
    fflush(stderr);
    rc = system(cmd);

    if (rc != 0) {
        ib_warn("--on-measure: \"%s\" exited with status %d", cmd,
                rc == -1 ? -1 : WEXITSTATUS(rc));
    }

    free(cmd);
}


static void
ib_run_load(void)
{
    uint64_t  now, end, want;

    /* without a warmup the hook runs before the first message, so that
     * its own time does not make the rate schedule late */
    if (ib.warmup == 0) {
        ib_on_measure("start");
    }

    if (!ib.replay && ib.count < 0) {
        ib_load_ready(ib_now());

        end = ib_now() + (uint64_t) IB_READY_MAX * IB_NS;

        while (!ib_all_in() && !ib_signalled && ib_now() < end) {
            ib_turn(IB_TURN_MAX);
        }

        if (!ib_all_in()) {
            ib_warn("ready: the first message of every publisher had not "
                    "reached every member after %d s; starting anyway",
                    IB_READY_MAX);
        }
    }

    now = ib_now();

    if (ib.replay) {
        ib_replay_start(now);
    } else {
        ib_load_start(now);
    }

    ib_run_until(now + (uint64_t) (ib.warmup * IB_NS), "warmup");

    if (ib.warmup > 0) {
        ib_on_measure("start");
    }

    ib_hist_reset(&ib.hist);
    ib.sent_window = 0;
    ib.received_window = 0;
    ib.max_lag_ns = 0;
    ib.deferred = 0;

    ib_proc_sample(0);
    ib.measuring = 1;
    ib.measure_start = ib_now();

    ib_run_until(ib.measure_start + (uint64_t) (ib.duration * IB_NS),
                 "measure");

    ib.behind = ib.replay ? ib_replay_behind() : ib_load_behind();
    ib.measure_end = ib_now();
    ib.measuring = 0;
    ib_proc_sample(1);
    ib.publishing = 0;
    ib.interrupted = ib_signalled;
    ib_signalled = 0;

    end = ib_now() + (uint64_t) (ib.drain * IB_NS);

    while (!ib_all_in() && !ib_signalled && ib_now() < end) {
        ib_turn(IB_TURN_MAX);
    }

    ib.drained = ib_all_in();

    ib_on_measure("stop");

    /* rooms: M per publisher; replay: M in all */
    want = (uint64_t) ib.count * (ib.replay ? 1 : ib.npubs);

    if (ib.count >= 0 && ib.sent != want) {
        ib.count_short = 1;
        ib_warn("--count %ld: %llu of %llu %s were sent in the "
                "measured time (a longer --duration or a higher --rate "
                "would fit them)", ib.count,
                 (unsigned long long) ib.sent, (unsigned long long) want,
                 ib.replay ? "requests" : "messages");
    }
}


static void
ib_run_idle(void)
{
    ib_run_until(ib_now() + (uint64_t) (ib.duration * IB_NS), "hold");

    ib.measure_end = ib_now();
    ib_proc_sample(1);
    ib.interrupted = ib_signalled;
    ib.drained = 1;
}


static void
ib_close_all(void)
{
    size_t    i;
    uint64_t  end;

    ib.stopping = 1;
    ib_signalled = 0;

    for (i = 0; i < ib.nconns; i++) {
        ib_conn_send_close(&ib.conns[i], 1000);
    }

    end = ib_now() + 2 * IB_NS;

    while (ib.open && ib_now() < end && !ib_signalled) {
        ib_loop_turn(IB_TURN_MAX);
    }

    for (i = 0; i < ib.nconns; i++) {
        if (ib.conns[i].state != IB_CONN_CLOSED
            && ib.conns[i].state != IB_CONN_IDLE)
        {
            ib_conn_close(&ib.conns[i]);
        }
    }
}


/* --replay: connections, the load, the report; the exit status as for
 * rooms (3: errors, an answer other than 2xx, --count not reached) */

static int
ib_replay_main(void)
{
    ib_replay_init();

    if (!ib.quiet) {
        fprintf(stderr, "ioa-bench: replaying %s to POST %s%s on %ld "
                "connection%s\n", ib.replay, ib.base, ib.path,
                ib.connections, ib.connections == 1 ? "" : "s");
    }

    ib_replay_connect();
    ib_run_load();

    ib_replay_close();
    ib_report();

    if (ib.err_connect + ib.err_closed + ib.err_protocol + ib.err_server
        || ib.interrupted || ib.count_short)
    {
        return 3;
    }

    return 0;
}


int
main(int argc, char **argv)
{
    uint64_t          t;
    size_t            open_at_end;
    struct sigaction  sa;

    ib_rand_seed();
    ib.origin = ib_now();

    ib_options(argc, argv);
    ib_parse_url();

    if (ib.replay == NULL) {
        ib_plan();
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ib_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (ib.replay) {
        return ib_replay_main();
    }

    t = ib_now();

    if (ib.target == IB_TARGET_IOA && ib.rooms > 0) {
        if (!ib.quiet) {
            fprintf(stderr, "ioa-bench: registering %ld agents and forming "
                    "%ld rooms at %s\n", ib.rooms * ib.members, ib.rooms,
                    ib.url);
        }

        ib_ioa_setup();
    }

    ib.t_setup = ib_now() - t;

    ib_load_init();
    ib_loop_init();

    if (ib.rooms == 0) {
        /* idle alone: the server's baseline is taken before any connects */
        ib_proc_sample(0);
        ib.measure_start = ib_now();
    }

    if (!ib.quiet) {
        fprintf(stderr, "ioa-bench: opening %zu WebSocket connections "
                "(prefix %s)\n", ib.nconns, ib.prefix);
    }

    ib_connect_all();

    if (ib.rooms > 0) {
        ib_run_load();
    } else {
        ib_run_idle();
    }

    open_at_end = ib.open;
    ib_close_all();
    ib.open = open_at_end;

    ib_load_integrity();
    ib_report();

    if (ib.err_connect + ib.err_handshake + ib.err_closed + ib.err_protocol
        + ib.err_server
        || ib.lost || ib.duplicated || ib.reordered || ib.interrupted
        || ib.count_short)
    {
        return 3;
    }

    return 0;
}
