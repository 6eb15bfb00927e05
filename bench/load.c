
/*
 * The workload: what publishers send, when, and what every receipt is
 * checked against.
 *
 * A message is JSON with the bench's mark and padding to --size bytes:
 *
 *   ioa:    {"comm_id":"<room>",["type":N,]"ioab":[g,s,t],"content":"abc.."}
 *   nchan:  {"ioab":[g,s,t],"content":"abc.."}
 *
 * g is the publisher (global index), s its sequence number from 1, t the
 * send time in ns since the generator started (CLOCK_MONOTONIC; sender and
 * receivers are this process, so the clocks agree).  ioa keeps fields it
 * does not know and forwards them, so the mark arrives as sent wherever the
 * server puts it among the fields it adds; it is found with memmem() (the
 * padding is letters and digits, so it cannot fake one).
 *
 * When to send:
 *
 *   --rate N       publisher g sends its k-th message at
 *                  start + g/P_total/N + k/N: the publishers are spread over
 *                  the period instead of firing together.  t is that
 *                  scheduled time, not the moment the bytes left, so a
 *                  server that stalls the generator (a full socket buffer)
 *                  is charged for the wait (no coordinated omission).
 *     --arrivals poisson
 *                  the gaps between a publisher's messages are exponential
 *                  with mean 1/N instead: message k is due at due(k-1) +
 *                  gap(k), the first at start + gap(1), so each publisher is
 *                  a Poisson process of rate N and the P_total of them
 *                  together one of rate P_total * N (bursts and lulls, as
 *                  independent clients make them).  The gaps come from the
 *                  publisher's own stream of --seed (util.c): the schedule
 *                  is fixed before the run, the same for every server given
 *                  the same seed.  A due time is always computed from the
 *                  previous due time, never from when the previous message
 *                  left or came back: the load stays open loop, and t is
 *                  still the due time.
 *                  Either way, what was due when the loop last looked in the
 *                  measured time and could not be sent (a full socket, a
 *                  closed connection, more than a turn's burst) is counted
 *                  as "behind": sent + behind is what the schedule offered.
 *   --saturate     each publisher keeps --window messages in flight: a new
 *                  one leaves when the echo of an earlier one comes back to
 *                  the publisher's own connection (ioa), or to its member's
 *                  subscriber connection (nchan), or when the hub acks it
 *                  (ioa with --echo 0).  t is the time it is queued.
 *
 * What every receipt is checked against, per (publisher, subscriber) pair:
 * the highest s seen, the number of distinct s seen, and a 256-bit window of
 * the s below the highest.  s above the highest: new (a jump leaves a gap
 * that later arrivals fill as "reordered"); s within the window: a
 * duplicate if its bit is set, else a late arrival (reordered); s further
 * back: counted as reordered (it cannot be told from a duplicate any more).
 * At the end lost = sent - distinct for every pair, so a message that never
 * arrived is counted even if nothing after it arrived either.  A message
 * from a publisher of another room, or with an s that was never sent, is a
 * protocol error: the check has to be able to fail.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_bench.h"


/*
 * A socket with this much output the kernel has not taken yet gets no new
 * message this turn (counted as "deferred"; rate mode sends it later with
 * its scheduled time, so the wait shows in the latency).  The kernel's own
 * socket buffer is the real queue; a big one of ours would only hide a
 * server that does not read, and cost memory and copying.
 */
#define IB_BACKLOG_MAX      (256 * 1024)
/* what one publisher may catch up on in one turn (rate mode): a bound in
 * messages and in bytes, so one turn never builds hundreds of megabytes */
#define IB_BURST_MAX        64
#define IB_BURST_BYTES      (256 * 1024)


static size_t ib_load_parse(const char *p, size_t len, uint64_t *v,
    size_t n);
static int  ib_load_content_ok(const char *p, size_t len, uint32_t room,
    const uint64_t *v);
static int  ib_load_send(ib_pub_t *pub, uint64_t ts);
static void ib_load_op(ib_conn_t *c, const char *p, size_t len);
static void ib_load_refill(ib_pub_t *pub);
static uint64_t ib_load_due(const ib_pub_t *pub, uint64_t seq,
    uint64_t prev, uint64_t *rng);


static char      **ib_room_head;     /* ioa: {"comm_id":"..",["type":N,] */
static size_t     *ib_room_head_len;
static uint32_t   *ib_refill;        /* publishers whose window opened */
static size_t      ib_nrefill;
static uint64_t    ib_rate_start;
static uint64_t    ib_next_due;
static uint64_t    ib_last_tick;     /* rate: when the schedule last ran */
static double      ib_interval;      /* ns between two messages */


size_t
ib_agent_name(char *buf, size_t size, uint32_t room, uint32_t member)
{
    int  n;

    n = snprintf(buf, size, "%s_r%u_m%u", ib.prefix, room, member);

    return n > 0 ? (size_t) n : 0;
}


void
ib_load_init(void)
{
    char      tmp[256];
    size_t    r, maxhead;
    int       n;

    ib_room_head = ib_calloc((size_t) ib.rooms, sizeof(char *));
    ib_room_head_len = ib_calloc((size_t) ib.rooms, sizeof(size_t));
    ib_refill = ib_calloc(ib.npubs, sizeof(uint32_t));

    maxhead = 0;

    for (r = 0; r < (size_t) ib.rooms; r++) {
        if (ib.target == IB_TARGET_IOA) {
            if (ib.type >= 0) {
                n = snprintf(tmp, sizeof(tmp), "{\"comm_id\":\"%s\","
                             "\"type\":%ld,", ib.comm_ids[r], ib.type);
            } else {
                n = snprintf(tmp, sizeof(tmp), "{\"comm_id\":\"%s\",",
                             ib.comm_ids[r]);
            }

        } else {
            n = snprintf(tmp, sizeof(tmp), "{");
        }

        ib_room_head[r] = ib_alloc((size_t) n + 1);
        memcpy(ib_room_head[r], tmp, (size_t) n + 1);
        ib_room_head_len[r] = (size_t) n;

        if ((size_t) n > maxhead) {
            maxhead = (size_t) n;
        }
    }

    /* the longest a message can be without padding: the widest numbers
     * (t below 10^13 ns is 2.7 hours) and the closing "} */

    n = snprintf(tmp, sizeof(tmp), IB_MARK "%zu,%u,%llu],\"content\":\"\"}",
                 ib.npubs, (uint32_t) -1, 9999999999999ULL);

    ib.msg_bytes = (size_t) ib.size;

    if (ib.npubs && maxhead + (size_t) n > ib.msg_bytes) {
        ib.msg_bytes = maxhead + (size_t) n;

        ib_warn("--size %ld is too small for the envelope's own fields: "
                "messages are %zu bytes", ib.size, ib.msg_bytes);
    }

    ib_interval = ib.rate > 0 ? 1e9 / ib.rate : 0;
}


/*
 * The ready phase, before the warmup: one message from every publisher,
 * now, and main.c waits until every member has it.  A server may still be
 * setting a member's room up when the connections are open (ioa subscribes
 * the room and reads its log first); a schedule that started then would
 * put that start-up into the first seconds of a fast room, which is not
 * what a steady load measures, and with a short room log (BENCH_BUFFER)
 * into losses.  Not with --count, whose messages must all be in the
 * measured time.
 */

void
ib_load_ready(uint64_t now)
{
    size_t  i;

    for (i = 0; i < ib.npubs; i++) {
        (void) ib_load_send(&ib.pubs[i], now);
    }
}


void
ib_load_start(uint64_t now)
{
    size_t     i;
    ib_pub_t  *pub;

    ib.publishing = 1;
    ib_rate_start = now;
    ib_next_due = now;

    for (i = 0; i < ib.npubs; i++) {
        pub = &ib.pubs[i];
        pub->base_seq = pub->seq;

        if (ib.saturate) {
            ib_load_refill(pub);
            continue;
        }

        if (ib.arrivals == IB_ARRIVALS_POISSON) {
            pub->rng = ib_stream_seed(ib.seed, i);

        } else {
            pub->offset_ns = (uint64_t) (ib_interval * (double) i
                                         / (double) ib.npubs);
        }

        pub->next_ns = ib_load_due(pub, pub->seq, now, &pub->rng);
    }
}


/*
 * When message seq + 1 is due, prev being when message seq was (the start
 * for the first).  Even: from the start, so rounding never accumulates.
 * Poisson: one exponential gap after prev, from *rng (the publisher's
 * stream, or a copy of it when ib_load_behind walks ahead).
 */

static uint64_t
ib_load_due(const ib_pub_t *pub, uint64_t seq, uint64_t prev, uint64_t *rng)
{
    if (ib.arrivals == IB_ARRIVALS_POISSON) {
        return prev + (uint64_t) (ib_interval * ib_stream_exp(rng) + 0.5);
    }

    return ib_rate_start + pub->offset_ns
           + (uint64_t) (ib_interval * (double) (seq - pub->base_seq));
}


static void
ib_load_refill(ib_pub_t *pub)
{
    if (!pub->queued) {
        pub->queued = 1;
        ib_refill[ib_nrefill++] = (uint32_t) (pub - ib.pubs);
    }
}


void
ib_load_tick(uint64_t now)
{
    size_t     i, burst, max_burst;
    uint64_t   min;
    ib_pub_t  *pub;

    if (!ib.publishing) {
        return;
    }

    if (ib.saturate) {
        while (ib_nrefill) {
            pub = &ib.pubs[ib_refill[--ib_nrefill]];
            pub->queued = 0;

            while (pub->inflight < (uint32_t) ib.window) {
                if (ib_load_send(pub, now) != 0) {
                    break;
                }
            }
        }

        return;
    }

    ib_last_tick = now;

    if (now < ib_next_due) {
        return;
    }

    min = UINT64_MAX;
    max_burst = IB_BURST_BYTES / ib.msg_bytes;

    if (max_burst > IB_BURST_MAX) {
        max_burst = IB_BURST_MAX;

    } else if (max_burst == 0) {
        max_burst = 1;
    }

    for (i = 0; i < ib.npubs; i++) {
        pub = &ib.pubs[i];

        if (pub->conn->state != IB_CONN_OPEN) {
            continue;
        }

        if (ib.count >= 0 && pub->seq >= (uint64_t) ib.count) {
            /* --count reached: no more turns for this one */
            pub->next_ns = UINT64_MAX;
            continue;
        }

        for (burst = 0; pub->next_ns <= now && burst < max_burst; burst++)
        {
            if (ib_load_send(pub, pub->next_ns) != 0) {
                break;
            }

            if (ib.measuring && now - pub->next_ns > ib.max_lag_ns) {
                ib.max_lag_ns = now - pub->next_ns;
            }

            pub->next_ns = ib_load_due(pub, pub->seq, pub->next_ns,
                                       &pub->rng);
        }

        if (pub->next_ns < min) {
            min = pub->next_ns;
        }
    }

    ib_next_due = min;
}


/* when the rate schedule next wants a turn (UINT64_MAX: events will do) */

uint64_t
ib_load_next_due(void)
{
    if (!ib.publishing || ib.saturate) {
        return UINT64_MAX;
    }

    return ib_next_due;
}


/*
 * Rate mode: the messages due by the last tick that it could not send,
 * summed over the publishers.  Each one's schedule is walked from its next
 * due time on a copy of its stream, so walking changes nothing; the walk
 * is as long as the count (a few hundred thousand at worst, once a run).
 */

uint64_t
ib_load_behind(void)
{
    size_t     i;
    uint64_t   n, seq, due, rng;
    ib_pub_t  *pub;

    if (ib.saturate || !ib.publishing) {
        return 0;
    }

    n = 0;

    for (i = 0; i < ib.npubs; i++) {
        pub = &ib.pubs[i];
        seq = pub->seq;
        due = pub->next_ns;
        rng = pub->rng;

        while (due <= ib_last_tick
               && (ib.count < 0 || seq < (uint64_t) ib.count))
        {
            n++;
            seq++;
            due = ib_load_due(pub, seq, due, &rng);
        }
    }

    return n;
}


/* 0: queued; -1: not now (connection gone or its output backed up) */

static int
ib_load_send(ib_pub_t *pub, uint64_t ts)
{
    int         n;
    char        head[512];
    size_t      hl, fill;
    ib_conn_t  *c;

    c = pub->conn;

    if (c->state != IB_CONN_OPEN
        || (ib.count >= 0 && pub->seq >= (uint64_t) ib.count))
    {
        return -1;
    }

    if (c->out_len - c->out_pos > IB_BACKLOG_MAX) {
        pub->held = 1;
        return -1;
    }

    if (pub->held) {
        /* counted once per message that had to wait, not per retry */
        pub->held = 0;
        ib.deferred++;
    }

    hl = ib_room_head_len[pub->room];
    memcpy(head, ib_room_head[pub->room], hl);

    n = snprintf(head + hl, sizeof(head) - hl, IB_MARK "%zu,%u,%llu],"
                 "\"content\":\"", (size_t) (pub - ib.pubs), pub->seq + 1,
                 (unsigned long long) (ts - ib.origin));
    hl += (size_t) n;

    fill = ib.msg_bytes > hl + 2 ? ib.msg_bytes - hl - 2 : 0;

    ib_conn_queue_frame(c, 0x1, head, hl, fill, "\"}", 2);

    pub->seq++;
    pub->inflight++;
    ib.sent++;

    if (ib.measuring) {
        ib.sent_window++;
    }

    return 0;
}


static size_t
ib_load_digits(uint64_t v)
{
    size_t  n;

    for (n = 1; v >= 10; n++) {
        v /= 10;
    }

    return n;
}


/*
 * The padding must arrive whole: "content" holds exactly the filler the
 * sender put there, and its length follows from the mark's numbers (the
 * sender's head was the room's head, the mark and "content":").  A server
 * that cut, corrupted or mangled a large message (fragments reassembled
 * wrongly, a buffer boundary) fails here even with the mark intact.
 */

static int
ib_load_content_ok(const char *p, size_t len, uint32_t room,
    const uint64_t *v)
{
    size_t       hl, fill, off;
    const char  *m;

    static const char  key[] = "\"content\":\"";

    hl = ib_room_head_len[room] + sizeof(IB_MARK) - 1
         + ib_load_digits(v[0]) + 1 + ib_load_digits(v[1]) + 1
         + ib_load_digits(v[2]) + 2 + sizeof(key) - 1;
    fill = ib.msg_bytes > hl + 2 ? ib.msg_bytes - hl - 2 : 0;

    m = memmem(p, len, key, sizeof(key) - 1);

    if (m == NULL) {
        return 0;
    }

    off = (size_t) (m - p) + sizeof(key) - 1;

    return off + fill < len && p[off + fill] == '"'
           && ib_fill_ok(p + off, fill);
}


/* up to n unsigned decimals separated by commas, ended by ']' */

static size_t
ib_load_parse(const char *p, size_t len, uint64_t *v, size_t n)
{
    size_t  i, k;

    i = 0;

    for (k = 0; k < n; k++) {
        if (i >= len || p[i] < '0' || p[i] > '9') {
            return 0;
        }

        v[k] = 0;

        while (i < len && p[i] >= '0' && p[i] <= '9') {
            v[k] = v[k] * 10 + (uint64_t) (p[i] - '0');
            i++;
        }

        if (i >= len || p[i] != (k + 1 < n ? ',' : ']')) {
            return 0;
        }

        i++;
    }

    return i;
}


void
ib_load_message(ib_conn_t *c, const char *p, size_t len, uint64_t now)
{
    int         unique;
    uint32_t    s, high, d;
    uint64_t    v[3], sent_at, bit;
    size_t      g;
    const char *m;
    ib_pub_t   *pub;
    ib_pair_t  *pair;

    if (c->kind == IB_KIND_PUB) {
        /* nchan answers every publish with the channel's info */
        ib.nchan_replies++;
        return;
    }

    if (len >= 6 && memcmp(p, "{\"op\":", 6) == 0) {
        ib_load_op(c, p, len);
        return;
    }

    m = memmem(p, len, IB_MARK, sizeof(IB_MARK) - 1);

    if (m == NULL
        || ib_load_parse(m + sizeof(IB_MARK) - 1,
                         len - (size_t) (m - p) - (sizeof(IB_MARK) - 1),
                         v, 3) == 0)
    {
        ib_error(&ib.err_protocol, "a message without the bench's mark: "
                 "%.100s", p);
        return;
    }

    g = (size_t) v[0];

    if (c->kind != IB_KIND_MEMBER || g >= ib.npubs
        || ib.pubs[g].room != c->room)
    {
        ib_error(&ib.err_protocol, "publisher %zu's message reached a "
                 "connection outside its room (room %u, member %u)", g,
                 c->room, c->member);
        return;
    }

    pub = &ib.pubs[g];

    if (v[1] == 0 || v[1] > pub->seq) {
        ib_error(&ib.err_protocol, "publisher %zu never sent seq %llu", g,
                 (unsigned long long) v[1]);
        return;
    }

    if (!ib_load_content_ok(p, len, pub->room, v)) {
        ib_error(&ib.err_protocol, "publisher %zu's message %llu arrived "
                 "altered: its \"content\" is not the %zu-byte message's "
                 "padding as sent (%zu bytes came)", g,
                 (unsigned long long) v[1], ib.msg_bytes, len);
        return;
    }

    s = (uint32_t) v[1];
    pair = &ib.pairs[(size_t) c->sub * (size_t) ib.publishers
                     + g % (size_t) ib.publishers];
    high = pair->high;
    unique = 1;

    ib.received++;

    if (s > high) {
        /* forget the bits the window slides past */
        if (s - high >= IB_DUP_WINDOW) {
            memset(pair->bits, 0, sizeof(pair->bits));

        } else {
            for (d = high + 1; d < s; d++) {
                pair->bits[(d % IB_DUP_WINDOW) / 64] &=
                    ~(1ULL << (d % 64));
            }
        }

        pair->high = s;

    } else if (high - s >= IB_DUP_WINDOW) {
        ib.reordered++;

    } else {
        bit = 1ULL << (s % 64);

        if (pair->bits[(s % IB_DUP_WINDOW) / 64] & bit) {
            ib.duplicated++;
            unique = 0;

        } else {
            ib.reordered++;
        }
    }

    if (!unique) {
        return;
    }

    pair->bits[(s % IB_DUP_WINDOW) / 64] |= 1ULL << (s % 64);
    pair->uniq++;
    ib.received_unique++;

    if (ib.measuring) {
        sent_at = ib.origin + v[2];
        ib_hist_record(&ib.hist, now > sent_at ? now - sent_at : 0);
        ib.received_window++;
    }

    if (c->echo_pub == (int32_t) g && pub->inflight) {
        pub->inflight--;

        if (ib.saturate) {
            ib_load_refill(pub);
        }
    }
}


/* ioa's own frames: {"op":"ack",..} with --echo 0, {"op":"error",..} */

static void
ib_load_op(ib_conn_t *c, const char *p, size_t len)
{
    ib_pub_t  *pub;

    if (len >= 12 && memcmp(p + 6, "\"ack\"", 5) == 0) {
        ib.acks++;

        if (c->pub >= 0 && !ib.echo) {
            pub = &ib.pubs[c->pub];

            if (pub->inflight) {
                pub->inflight--;
            }

            if (ib.saturate) {
                ib_load_refill(pub);
            }
        }

        return;
    }

    if (len >= 14 && memcmp(p + 6, "\"error\"", 7) == 0) {
        ib_error(&ib.err_server, "the server sent an error to room %u member "
                 "%u: %.*s", c->room, c->member, (int) (len > 300 ? 300 : len),
                 p);
        return;
    }
}


/* lost = sent - distinct received, over every pair that should have
 * received each message */

void
ib_load_integrity(void)
{
    size_t      s, j, g;
    uint64_t    sent;
    ib_conn_t  *c;
    ib_pair_t  *pair;

    ib.expected = 0;
    ib.lost = 0;

    for (s = 0; s < ib.nconns; s++) {
        c = &ib.conns[s];

        if (c->kind != IB_KIND_MEMBER) {
            continue;
        }

        for (j = 0; j < (size_t) ib.publishers; j++) {
            g = (size_t) c->room * (size_t) ib.publishers + j;

            /* with --echo 0 a publisher's own connection gets acks */
            if (ib.target == IB_TARGET_IOA && !ib.echo && c->pub == (int32_t) g)
            {
                continue;
            }

            sent = ib.pubs[g].seq;
            pair = &ib.pairs[(size_t) c->sub * (size_t) ib.publishers + j];

            ib.expected += sent;

            if (pair->uniq < sent) {
                ib.lost += sent - pair->uniq;
            }
        }
    }
}
