
/*
 * Small things every part of ioa-agent uses: growable byte buffers,
 * allocation, one-line logging, clocks and randomness.
 *
 * Allocation failure is fatal here, unlike in the nginx module.  The agent
 * is one process serving one agent and holds little memory; there is no
 * request to fail in its place, and an error path in every caller would
 * never be exercised.  A log line and exit(1) lets a supervisor restart it,
 * and the hub keeps what the agent has not handled yet (resume).
 *
 * Log records are one line each on stderr:
 *
 *   2025-01-31T12:00:00.123Z info ioa-agent[4242] Worker: inbox open
 *
 * Control characters in messages (a program's stderr, an envelope's text)
 * are escaped so that a record never spans lines, and a record is written
 * with one write(2) so records from a child's inherited stderr do not cut
 * through ours.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ioa_agent.h"


#define IOA_LOG_MAX 4096


int         ioa_log_level = IOA_LOG_INFO;
const char *ioa_log_agent = "-";

static const char *ioa_log_levels[] = { "error", "warn", "info", "debug" };

static uint64_t ioa_rand_state;


static void
ioa_oom(size_t size)
{
    ioa_log_error("out of memory (%zu bytes), exiting", size);
    exit(1);
}


void *
ioa_alloc(size_t size)
{
    void *p;

    p = malloc(size ? size : 1);
    if (p == NULL) {
        ioa_oom(size);
    }

    return p;
}


void *
ioa_calloc(size_t size)
{
    void *p;

    p = calloc(1, size ? size : 1);
    if (p == NULL) {
        ioa_oom(size);
    }

    return p;
}


char *
ioa_strndup(const char *s, size_t len)
{
    char *p;

    p = ioa_alloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';

    return p;
}


char *
ioa_strdup(const char *s)
{
    return ioa_strndup(s, strlen(s));
}


/* buffers: always room for a terminating NUL, so ioa_buf_cstr() is free */

static void
ioa_buf_reserve(ioa_buf_t *b, size_t extra)
{
    size_t cap;
    char  *p;

    if (b->len + extra + 1 <= b->cap) {
        return;
    }

    cap = b->cap ? b->cap : 128;

    while (cap < b->len + extra + 1) {
        cap *= 2;
    }

    p = realloc(b->data, cap);
    if (p == NULL) {
        ioa_oom(cap);
    }

    b->data = p;
    b->cap = cap;
}


void
ioa_buf_add(ioa_buf_t *b, const void *p, size_t len)
{
    ioa_buf_reserve(b, len);

    if (len) {
        memcpy(b->data + b->len, p, len);
    }

    b->len += len;
    b->data[b->len] = '\0';
}


void
ioa_buf_adds(ioa_buf_t *b, const char *s)
{
    ioa_buf_add(b, s, strlen(s));
}


void
ioa_buf_addf(ioa_buf_t *b, const char *fmt, ...)
{
    int     n;
    size_t  room;
    va_list ap;

    /* straight into the spare room; a second pass only if it was short */

    ioa_buf_reserve(b, 64);
    room = b->cap - b->len;

    va_start(ap, fmt);
    n = vsnprintf(b->data + b->len, room, fmt, ap);
    va_end(ap);

    if (n < 0) {
        b->data[b->len] = '\0';
        return;
    }

    if ((size_t) n >= room) {
        ioa_buf_reserve(b, (size_t) n);

        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
        va_end(ap);
    }

    b->len += (size_t) n;
}


void
ioa_buf_set(ioa_buf_t *b, const void *p, size_t len)
{
    b->len = 0;
    ioa_buf_add(b, p, len);
}


const char *
ioa_buf_cstr(ioa_buf_t *b)
{
    ioa_buf_reserve(b, 0);
    b->data[b->len] = '\0';

    return b->data;
}


void
ioa_buf_reset(ioa_buf_t *b)
{
    b->len = 0;

    if (b->data) {
        b->data[0] = '\0';
    }
}


void
ioa_buf_free(ioa_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}


/* logging */

void
ioa_log(int level, const char *fmt, ...)
{
    int             saved, n;
    char            msg[IOA_LOG_MAX], line[IOA_LOG_MAX * 2], *p, *end;
    size_t          i;
    time_t          sec;
    va_list         ap;
    struct tm       tm;
    struct timespec ts;

    if (level > ioa_log_level) {
        return;
    }

    saved = errno;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (n < 0) {
        errno = saved;
        return;
    }

    clock_gettime(CLOCK_REALTIME, &ts);
    sec = ts.tv_sec;
    gmtime_r(&sec, &tm);

    p = line;
    end = line + sizeof(line) - 8; /* room for "...\n" */

    p += snprintf(p, end - p,
                  "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s "
                  "ioa-agent[%ld] %s: ",
                  tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                  tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                  ioa_log_levels[level], (long) getpid(), ioa_log_agent);

    for (i = 0; msg[i] && p < end - 4; i++) {
        unsigned char c = (unsigned char) msg[i];

        if (c == '\n') {
            *p++ = '\\';
            *p++ = 'n';

        } else if (c == '\r') {
            *p++ = '\\';
            *p++ = 'r';

        } else if (c == '\t') {
            *p++ = '\\';
            *p++ = 't';

        } else if (c < 0x20 || c == 0x7f) {
            p += snprintf(p, end - p, "\\x%02x", c);

        } else {
            *p++ = (char) c;
        }
    }

    if (msg[i] || (size_t) n >= sizeof(msg)) {
        memcpy(p, "...", 3);
        p += 3;
    }

    *p++ = '\n';

    /* one write: a record is never interleaved with another */
    if (write(STDERR_FILENO, line, p - line) < 0) {
        /* nowhere left to report it */
    }

    errno = saved;
}


/* clocks: monotonic for timers, wall clock for the hub's "since=" */

uint64_t
ioa_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}


uint64_t
ioa_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);

    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}


/* randomness: task ids must be unpredictable and unique across agents, so
 * they come from the kernel; backoff jitter only needs to differ between
 * agents, so it comes from a generator seeded once from the kernel */

static void
ioa_random_bytes(void *buf, size_t len)
{
    ssize_t n;
    size_t  got;

    for (got = 0; got < len; got += (size_t) n) {
        n = getrandom((char *) buf + got, len - got, 0);

        if (n < 0) {
            if (errno == EINTR) {
                n = 0;
                continue;
            }

            ioa_log_error("getrandom() failed: %s", strerror(errno));
            exit(1);
        }
    }
}


void
ioa_random_init(void)
{
    ioa_random_bytes(&ioa_rand_state, sizeof(ioa_rand_state));
    ioa_rand_state |= 1;
}


uint64_t
ioa_random(void)
{
    /* xorshift64* */
    ioa_rand_state ^= ioa_rand_state >> 12;
    ioa_rand_state ^= ioa_rand_state << 25;
    ioa_rand_state ^= ioa_rand_state >> 27;

    return ioa_rand_state * 2685821657736338717ULL;
}


/* IoA's task ids are uuid4().hex: 32 lower-case hex digits */

void
ioa_uuid4_hex(char out[33])
{
    int           i;
    unsigned char b[16];

    static const char hex[] = "0123456789abcdef";

    ioa_random_bytes(b, sizeof(b));

    b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
    b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */

    for (i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 0x0f];
    }

    out[32] = '\0';
}
