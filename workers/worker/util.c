/*
 * ioa-worker: memory, strings, clocks and random ids.
 *
 * Allocation failure ends the process.  That is not laziness: a worker
 * keeps nothing that matters in memory (see iw.h), so dying is the one
 * recovery that is always correct, and it spares every caller an error
 * path that could only ever say "give up".
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "iw.h"


void *
iw_alloc(size_t n)
{
    void  *p;

    p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "ioa-worker: out of memory (%zu bytes)\n", n);
        abort();
    }

    return p;
}


void *
iw_realloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "ioa-worker: out of memory (%zu bytes)\n", n);
        abort();
    }

    return p;
}


char *
iw_strndup(const char *s, size_t n)
{
    char  *p;

    p = iw_alloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';

    return p;
}


char *
iw_strdup(const char *s)
{
    return iw_strndup(s ? s : "", s ? strlen(s) : 0);
}


char *
iw_sprintf(const char *fmt, ...)
{
    int       n;
    char     *p;
    va_list   ap;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);

    if (n < 0) {
        abort();
    }

    p = iw_alloc((size_t) n + 1);

    va_start(ap, fmt);
    vsnprintf(p, (size_t) n + 1, fmt, ap);
    va_end(ap);

    return p;
}


int
iw_streq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}


long long
iw_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_REALTIME, &ts);

    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* for intervals: immune to the wall clock being set */

long long
iw_mono_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* returns early when a signal arrives, so SIGTERM is not delayed */

void
iw_sleep_ms(long long ms)
{
    struct timespec  ts;

    if (ms <= 0) {
        return;
    }

    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000;

    (void) nanosleep(&ts, NULL);
}


/* 128 random bits as 32 hex digits, shaped like IoA's uuid4().hex */

void
iw_random_hex(char out[33])
{
    size_t          i, got;
    ssize_t         n;
    unsigned char   rnd[16];
    static const char  hex[] = "0123456789abcdef";

    for (got = 0; got < sizeof(rnd); got += (size_t) n) {
        n = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                n = 0;
                continue;
            }

            fprintf(stderr, "ioa-worker: getrandom failed\n");
            abort();
        }
    }

    rnd[6] = (rnd[6] & 0x0f) | 0x40;
    rnd[8] = (rnd[8] & 0x3f) | 0x80;

    for (i = 0; i < sizeof(rnd); i++) {
        out[2 * i] = hex[rnd[i] >> 4];
        out[2 * i + 1] = hex[rnd[i] & 0x0f];
    }

    out[32] = '\0';
}
