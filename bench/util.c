
/*
 * Small things every file uses: allocation that cannot return NULL (a
 * generator out of memory has nothing sensible left to measure), messages,
 * the monotonic clock, randomness, and the SHA-1 + base64 the WebSocket
 * handshake needs.
 *
 * Randomness comes in three grades.  Handshake keys are read from
 * getrandom(): RFC 6455 asks for a random nonce per connection.  Frame
 * masks come from xorshift64*: a mask exists to stop cache poisoning by
 * scripts in browsers, which is not a threat here, and a syscall per frame
 * would cost more than the frame.  Poisson arrivals (--arrivals poisson)
 * come from splitmix64 streams seeded by --seed, one stream per publisher:
 * a run is reproducible, and the same seed gives every server the same
 * arrival times whatever order the loop happens to send in (one shared
 * stream would hand out its numbers in an order that depends on timing).
 * splitmix64's output passes BigCrush and its 64-bit state fits in the
 * publisher; streams seeded far apart on its 2^64 cycle do not meet in a
 * run's few million draws.
 *
 * SHA-1 is written out rather than taken from OpenSSL so the generator
 * links against libc alone; it runs once per connection.
 */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ioa_bench.h"


static uint64_t  ib_rng_state = 0x9e3779b97f4a7c15ULL;


void *
ib_alloc(size_t size)
{
    void  *p;

    p = malloc(size ? size : 1);
    if (p == NULL) {
        ib_die("out of memory (%zu bytes)", size);
    }

    return p;
}


void *
ib_calloc(size_t n, size_t size)
{
    void  *p;

    p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        ib_die("out of memory (%zu x %zu bytes)", n, size);
    }

    return p;
}


void *
ib_realloc(void *p, size_t size)
{
    p = realloc(p, size ? size : 1);
    if (p == NULL) {
        ib_die("out of memory (%zu bytes)", size);
    }

    return p;
}


void
ib_die(const char *fmt, ...)
{
    va_list  ap;

    fputs("ioa-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);

    exit(1);
}


void
ib_warn(const char *fmt, ...)
{
    va_list  ap;

    fputs("ioa-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}


uint64_t
ib_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * IB_NS + (uint64_t) ts.tv_nsec;
}


void
ib_random_bytes(void *p, size_t n)
{
    ssize_t  r;
    char    *b = p;

    while (n) {
        r = getrandom(b, n, 0);

        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }

            ib_die("getrandom: %s", strerror(errno));
        }

        b += r;
        n -= (size_t) r;
    }
}


void
ib_rand_seed(void)
{
    ib_random_bytes(&ib_rng_state, sizeof(ib_rng_state));

    if (ib_rng_state == 0) {
        ib_rng_state = 0x9e3779b97f4a7c15ULL;
    }
}


uint64_t
ib_rand(void)
{
    uint64_t  x = ib_rng_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    ib_rng_state = x;

    return x * 0x2545f4914f6cdd1dULL;
}


/* splitmix64 (Steele, Lea, Flood 2014): add the golden gamma, then mix */

uint64_t
ib_stream_next(uint64_t *state)
{
    uint64_t  z;

    *state += 0x9e3779b97f4a7c15ULL;
    z = *state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;

    return z ^ (z >> 31);
}


/* stream k of seed: the state is itself mixed, so streams 0, 1, 2 of a
 * seed start far apart on the cycle rather than one step apart */

uint64_t
ib_stream_seed(uint64_t seed, uint64_t k)
{
    uint64_t  s;

    s = seed ^ (k * 0xd1342543de82ef95ULL);

    return ib_stream_next(&s);
}


/*
 * A gap of an exponential distribution with mean 1: -ln(u), u uniform in
 * (0, 1] from the top 53 bits (never 0, so the log is finite: the longest
 * gap is 36.7 means).
 */

double
ib_stream_exp(uint64_t *state)
{
    double  u;

    u = (double) ((ib_stream_next(state) >> 11) + 1) * 0x1.0p-53;

    return -log(u);
}


/* SHA-1 (FIPS 180-4), for Sec-WebSocket-Accept only */

#define IB_ROL(v, n)  (((v) << (n)) | ((v) >> (32 - (n))))

static void
ib_sha1_block(uint32_t h[5], const unsigned char *p)
{
    int       i;
    uint32_t  w[80], a, b, c, d, e, f, k, t;

    for (i = 0; i < 16; i++) {
        w[i] = (uint32_t) p[i * 4] << 24 | (uint32_t) p[i * 4 + 1] << 16
               | (uint32_t) p[i * 4 + 2] << 8 | (uint32_t) p[i * 4 + 3];
    }

    for (i = 16; i < 80; i++) {
        w[i] = IB_ROL(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    }

    a = h[0];
    b = h[1];
    c = h[2];
    d = h[3];
    e = h[4];

    for (i = 0; i < 80; i++) {
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;

        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;

        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;

        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }

        t = IB_ROL(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = IB_ROL(b, 30);
        b = a;
        a = t;
    }

    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}


void
ib_sha1(const void *data, size_t len, unsigned char out[20])
{
    int                   i;
    size_t                n;
    uint32_t              h[5];
    uint64_t              bits;
    unsigned char         block[64];
    const unsigned char  *p = data;

    h[0] = 0x67452301;
    h[1] = 0xefcdab89;
    h[2] = 0x98badcfe;
    h[3] = 0x10325476;
    h[4] = 0xc3d2e1f0;

    bits = (uint64_t) len * 8;

    for (n = len; n >= 64; n -= 64, p += 64) {
        ib_sha1_block(h, p);
    }

    memset(block, 0, sizeof(block));
    memcpy(block, p, n);
    block[n] = 0x80;

    if (n >= 56) {
        ib_sha1_block(h, block);
        memset(block, 0, sizeof(block));
    }

    for (i = 0; i < 8; i++) {
        block[63 - i] = (unsigned char) (bits >> (i * 8));
    }

    ib_sha1_block(h, block);

    for (i = 0; i < 20; i++) {
        out[i] = (unsigned char) (h[i / 4] >> (24 - (i % 4) * 8));
    }
}


/* writes 4 * ceil(len / 3) characters and a NUL; returns their number */

size_t
ib_base64(const unsigned char *in, size_t len, char *out)
{
    size_t       i, n;
    uint32_t     v;
    static const char  tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    n = 0;

    for (i = 0; i + 2 < len; i += 3) {
        v = (uint32_t) in[i] << 16 | (uint32_t) in[i + 1] << 8 | in[i + 2];
        out[n++] = tab[v >> 18];
        out[n++] = tab[(v >> 12) & 63];
        out[n++] = tab[(v >> 6) & 63];
        out[n++] = tab[v & 63];
    }

    if (i < len) {
        v = (uint32_t) in[i] << 16;

        if (i + 1 < len) {
            v |= (uint32_t) in[i + 1] << 8;
        }

        out[n++] = tab[v >> 18];
        out[n++] = tab[(v >> 12) & 63];
        out[n++] = (i + 1 < len) ? tab[(v >> 6) & 63] : '=';
        out[n++] = '=';
    }

    out[n] = '\0';

    return n;
}
