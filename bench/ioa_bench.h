
/*
 * ioa-bench: a WebSocket room load generator for the ioa hub and, for
 * comparison, for nchan.  One process, one thread, one epoll loop holds
 * every connection of a run: rooms of K members, P of them publishing,
 * every member subscribed, and optionally N idle agents.
 *
 *   main.c     options, the phases of a run (setup, connect, warmup,
 *              measure, drain, close), the exit status
 *   loop.c     the epoll loop and the WebSocket client: non-blocking
 *              connect (with source addresses round-robin when a source
 *              runs out of ports), the RFC 6455 handshake, frames parsed in
 *              place, masked frames out, one send() per socket per turn
 *   load.c     the workload: what a publisher sends and when (rate, evenly
 *              spaced or Poisson, or window), what a subscriber checks on
 *              every envelope (loss, duplicates, order, latency)
 *   http.c     the small blocking HTTP/1.1 client of the setup (ioa's
 *              POST /register and POST /teamup), and the answer-head
 *              parser replay.c shares
 *   replay.c   --replay: an HTTP load instead of rooms, request bodies from
 *              a file POSTed on keep-alive connections, closed loop
 *              (--window in flight per connection) or open loop (--rate
 *              requests/s in all); e.g. discovery (bench/discovery-load.sh)
 *   hist.c     the latency histogram (log-linear, ~1% precision)
 *   report.c   /proc sampling of the server, the table, the JSON
 *   util.c     allocation, clocks, randomness (and the seeded streams of
 *              Poisson arrivals), SHA-1 and base64
 *
 * One header: the program is small, and one place that lists every type
 * and every cross-file call is easier to read than seven.
 *
 * Why one thread: the machines this runs on have two cores and the server
 * under test needs them; a generator that takes one core and does only
 * O(1) work per frame (no allocation, no copy beyond the socket buffers)
 * keeps the server the bottleneck.  The report prints the generator's own
 * CPU so a run where it was not can be recognised.
 */

#ifndef IOA_BENCH_H
#define IOA_BENCH_H


#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <netinet/in.h>


#define IB_VERSION          "0.1.0"

#define IB_PRINTF(f, a)     __attribute__((format(printf, f, a)))
#define IB_NORETURN         __attribute__((noreturn))

/* the largest message a server may send us; a bigger frame is a protocol
 * error rather than an allocation (ioa's own limit is 64k by default) */
#define IB_MAX_MESSAGE      (1024 * 1024)

/* the number that marks a bench message: "ioab":[publisher,seq,ns] */
#define IB_MARK             "\"ioab\":["

/* the per-pair duplicate window: seqs this far behind the highest one seen
 * can still be told apart as duplicate or late */
#define IB_DUP_WINDOW       256

#define IB_NS               1000000000ULL


typedef enum {
    IB_TARGET_IOA = 0,
    IB_TARGET_NCHAN
} ib_target_e;

/* --arrivals: when rate mode's messages fall due */
typedef enum {
    IB_ARRIVALS_EVEN = 0,       /* every 1/rate, publishers spread out */
    IB_ARRIVALS_POISSON         /* exponential gaps of mean 1/rate */
} ib_arrivals_e;


/* util.c */

void *ib_alloc(size_t size);
void *ib_calloc(size_t n, size_t size);
void *ib_realloc(void *p, size_t size);
void  ib_die(const char *fmt, ...) IB_PRINTF(1, 2) IB_NORETURN;
void  ib_warn(const char *fmt, ...) IB_PRINTF(1, 2);

uint64_t ib_now(void);                    /* CLOCK_MONOTONIC, ns */
uint64_t ib_rand(void);                   /* xorshift64*, not for secrets */
void     ib_rand_seed(void);
void     ib_random_bytes(void *p, size_t n);     /* getrandom() */
uint64_t ib_stream_next(uint64_t *state);       /* splitmix64 */
uint64_t ib_stream_seed(uint64_t seed, uint64_t k);
double   ib_stream_exp(uint64_t *state);        /* exponential, mean 1 */

void   ib_sha1(const void *data, size_t len, unsigned char out[20]);
size_t ib_base64(const unsigned char *in, size_t len, char *out);


/* hist.c: values in ns, 1 ns .. 2^37 ns (137 s), 128 sub-buckets per
 * power of two: every recorded value is within 1/128 (0.8%) of the truth */

#define IB_HIST_SUB_BITS    7
#define IB_HIST_SUB         (1 << IB_HIST_SUB_BITS)
#define IB_HIST_BUCKETS     30
#define IB_HIST_LEN         ((IB_HIST_BUCKETS + 1) * IB_HIST_SUB)
#define IB_HIST_MAX         ((1ULL << (IB_HIST_BUCKETS + IB_HIST_SUB_BITS)) - 1)

typedef struct {
    uint64_t    counts[IB_HIST_LEN];
    uint64_t    total;
    uint64_t    min;
    uint64_t    max;            /* exact, even beyond IB_HIST_MAX */
    uint64_t    clamped;        /* values above IB_HIST_MAX */
} ib_hist_t;

void     ib_hist_reset(ib_hist_t *h);
void     ib_hist_record(ib_hist_t *h, uint64_t v);
uint64_t ib_hist_percentile(const ib_hist_t *h, double pct);


/* loop.c: connections */

typedef enum {
    IB_CONN_IDLE = 0,           /* not started */
    IB_CONN_CONNECTING,
    IB_CONN_HANDSHAKE,
    IB_CONN_OPEN,
    IB_CONN_CLOSING,            /* our close frame sent */
    IB_CONN_CLOSED
} ib_conn_state_e;

typedef enum {
    IB_KIND_MEMBER = 0,         /* ioa agent, nchan subscriber of a room */
    IB_KIND_PUB,                /* nchan publisher (sends, reads replies) */
    IB_KIND_IDLE                /* only held open */
} ib_kind_e;

typedef struct ib_conn_s  ib_conn_t;

struct ib_conn_s {
    int                 fd;
    uint8_t             state;
    uint8_t             kind;
    uint8_t             frag_op;        /* opcode of a fragmented message */
    unsigned            dirty:1;        /* on the flush list */
    unsigned            want_out:1;     /* EPOLLOUT armed */
    unsigned            close_sent:1;
    unsigned            failed:1;

    uint32_t            room;
    uint32_t            member;         /* index in the room, or idle index */
    int32_t             pub;            /* publisher sending here, or -1 */
    int32_t             echo_pub;       /* publisher whose echo comes here */
    int32_t             sub;            /* row in the pair table, or -1 */

    char               *out;            /* frames waiting for send() */
    size_t              out_pos;
    size_t              out_len;
    size_t              out_cap;

    char               *in;             /* handshake answer, then the */
    size_t              in_len;         /* partial frame a read ended in */
    size_t              in_cap;

    char               *frag;           /* a fragmented message */
    size_t              frag_len;
    size_t              frag_cap;

    uint64_t            deadline;       /* connect + handshake */
    char                accept[29];     /* expected Sec-WebSocket-Accept */

    ib_conn_t          *next_dirty;
};

struct epoll_event;
int  ib_epoll_wait(int epfd, struct epoll_event *events, int max,
    uint64_t timeout_ns);
int  ib_loop_init(void);
void ib_conn_start(ib_conn_t *c);
void ib_loop_turn(uint64_t timeout_ns);
void ib_loop_check_deadlines(void);
void ib_conn_queue_frame(ib_conn_t *c, int opcode, const char *head,
    size_t head_len, size_t fill, const char *tail, size_t tail_len);
void ib_conn_send_close(ib_conn_t *c, unsigned code);
void ib_conn_close(ib_conn_t *c);
int  ib_fill_ok(const char *p, size_t len);


/* load.c: the workload */

typedef struct {
    ib_conn_t          *conn;           /* where its frames go */
    uint32_t            room;
    uint32_t            seq;            /* last seq sent, from 1 */
    uint32_t            inflight;       /* sent, echo (or ack) not back */
    uint64_t            next_ns;        /* rate: when the next one is due */
    uint64_t            offset_ns;      /* rate: its place in the period */
    uint64_t            base_seq;       /* rate: messages before the start
                                           (the ready phase's) */
    uint64_t            rng;            /* poisson: its gaps' stream */
    unsigned            queued:1;       /* on the refill list */
    unsigned            held:1;         /* its socket's output is full */
} ib_pub_t;

typedef struct {
    uint32_t            high;           /* highest seq seen */
    uint32_t            uniq;           /* distinct seqs seen */
    uint64_t            bits[IB_DUP_WINDOW / 64];
} ib_pair_t;

size_t ib_agent_name(char *buf, size_t size, uint32_t room,
    uint32_t member);
void ib_load_init(void);
void ib_load_ready(uint64_t now);
void ib_load_start(uint64_t now);
void ib_load_tick(uint64_t now);
uint64_t ib_load_next_due(void);
void ib_load_message(ib_conn_t *c, const char *p, size_t len, uint64_t now);
uint64_t ib_load_behind(void);
void ib_load_integrity(void);


/* http.c */

typedef struct {
    int                 status;
    long                content_length; /* -1: none */
    unsigned            chunked:1;
    unsigned            close:1;        /* "Connection: close" */
    const char         *value;          /* the header asked for, or NULL */
    size_t              value_len;
} ib_http_head_t;

int ib_http_head(const char *h, const char *end, ib_http_head_t *head,
    const char *want);
size_t ib_http_request(char *buf, size_t size, const char *path,
    const char *body, size_t len);
int ib_http_post(const char *path, const char *body, size_t len,
    int *status, char **resp, size_t *resp_len, char *err, size_t errlen);
void ib_http_close(void);
int  ib_ioa_setup(void);


/* replay.c */

void ib_replay_init(void);
void ib_replay_connect(void);
void ib_replay_start(uint64_t now);
void ib_replay_turn(uint64_t timeout_ns);
uint64_t ib_replay_next_due(void);
uint64_t ib_replay_behind(void);
size_t ib_replay_inflight(void);
int  ib_replay_done(void);
void ib_replay_close(void);
void ib_replay_report_table(FILE *f);
void ib_replay_report_json(FILE *f);


/* report.c */

typedef struct {
    int                 pid;
    char                name[32];
    long                rss_start_kb;
    long                rss_end_kb;
    unsigned long long  ticks_start;
    unsigned long long  ticks_end;
    int                 ok;
} ib_proc_t;

void ib_proc_sample(int end);
void ib_report(void);
void ib_json_str(FILE *f, const char *s);
void ib_fmt_ns(char *buf, size_t size, uint64_t ns);
double ib_window_s(void);
void ib_report_latency_table(FILE *f, const char *what);
void ib_report_latency_json(FILE *f);
void ib_report_errors_table(FILE *f);
void ib_report_errors_json(FILE *f);
void ib_report_server_table(FILE *f);
void ib_report_server_json(FILE *f, int idle);


/* the run: options, state and counters, shared by every file */

typedef struct {
    /* options */
    ib_target_e         target;
    const char         *url;
    char                host[256];
    char                base[256];      /* path prefix of the url, no '/' at
                                         * the end */
    struct sockaddr_in  addr;
    long                rooms;
    long                members;
    long                publishers;
    long                size;
    double              rate;
    ib_arrivals_e       arrivals;
    uint64_t            seed;           /* --seed: the poisson streams */
    int                 saturate;
    long                window;
    double              duration;
    double              warmup;
    double              drain;
    long                idle;
    int                 echo;
    long                type;           /* -1: no "type" field */
    const char         *json;
    char                prefix[64];
    long                concurrency;
    double              connect_timeout;
    long                source_addrs;
    int                 quiet;
    long                count;          /* -1: publish for --duration */
    const char         *on_measure;     /* "CMD start" / "CMD stop" */
    const char         *replay;         /* --replay FILE: an HTTP load */
    const char         *path;           /* where it POSTs */
    long                connections;    /* its keep-alive connections */
    const char         *tally;          /* answer header counted by value */
    ib_proc_t          *procs;
    size_t              nprocs;

    /* derived */
    size_t              nconns;
    size_t              npubs;
    size_t              nsubs;
    ib_conn_t          *conns;
    ib_pub_t           *pubs;
    ib_pair_t          *pairs;          /* nsubs x publishers */
    char              **comm_ids;       /* ioa: one per room */
    size_t              msg_bytes;      /* what a publisher sends */

    /* loop */
    int                 epfd;
    char               *rbuf;           /* the one read buffer */
    size_t              rbuf_size;
    ib_conn_t          *dirty;
    uint32_t            nsrc;           /* source addresses in use */
    uint32_t            src_rr;
    size_t              connecting;     /* started, not yet open or failed */
    size_t              open;
    size_t              opened;
    int                 stopping;       /* closes are expected now */

    /* phases */
    uint64_t            origin;         /* ib_now() at start */
    int                 publishing;
    int                 measuring;
    uint64_t            t_setup;        /* ns spent in each phase */
    uint64_t            t_connect;
    uint64_t            measure_start;
    uint64_t            measure_end;
    uint64_t            drained_ns;
    int                 drained;        /* every expected message came */
    int                 interrupted;
    int                 count_short;    /* --count not reached in time */

    /* counters: totals over the run, and the measured window */
    uint64_t            sent;
    uint64_t            sent_window;
    uint64_t            received;       /* bench messages, duplicates too */
    uint64_t            received_unique;
    uint64_t            received_window;
    uint64_t            acks;
    uint64_t            nchan_replies;
    uint64_t            duplicated;
    uint64_t            reordered;
    uint64_t            lost;
    uint64_t            expected;
    uint64_t            max_lag_ns;     /* rate: sent after its due time */
    uint64_t            behind;         /* rate: due by the end of the
                                         * measured time, not sent */
    uint64_t            deferred;       /* messages that waited for a full
                                         * socket to drain */
    ib_hist_t           hist;

    /* errors */
    uint64_t            err_connect;
    uint64_t            err_handshake;
    uint64_t            err_closed;
    uint64_t            err_protocol;
    uint64_t            err_server;
    char                first_error[512];

    /* the generator itself */
    double              self_cpu_start;
    double              self_cpu_end;
    long                self_rss_kb;
} ib_run_t;

extern ib_run_t  ib;

void ib_error(uint64_t *counter, const char *fmt, ...) IB_PRINTF(2, 3);


#endif /* IOA_BENCH_H */
