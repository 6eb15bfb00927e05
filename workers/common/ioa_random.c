/*
 * workers/common: kernel randomness and a seeded generator (see
 * ioa_random.h).  getrandom() on a kernel that has not gathered entropy
 * yet blocks rather than answers weakly, which is what an id wants; a
 * failure other than a signal is fatal, as there is no weaker source worth
 * falling back on.
 */

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

#include "ioa_alloc.h"
#include "ioa_random.h"


static uint64_t ioa_random_state;


void
ioa_random_bytes(void *buf, size_t len)
{
    size_t  got;
    ssize_t n;

    for (got = 0; got < len; got += (size_t) n) {
        n = getrandom((char *) buf + got, len - got, 0);

        if (n < 0) {
            if (errno == EINTR) {
                n = 0;
                continue;
            }

            ioa_fatal("getrandom() failed: %s", strerror(errno));
        }
    }
}


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


void
ioa_random_init(void)
{
    ioa_random_bytes(&ioa_random_state, sizeof(ioa_random_state));
    ioa_random_state |= 1;
}


uint64_t
ioa_random(void)
{
    /* xorshift64* */
    ioa_random_state ^= ioa_random_state >> 12;
    ioa_random_state ^= ioa_random_state << 25;
    ioa_random_state ^= ioa_random_state >> 27;

    return ioa_random_state * 2685821657736338717ULL;
}
