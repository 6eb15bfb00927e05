/*
 * ioa-worker: the small helpers only the worker needs.  Allocation,
 * buffers, JSON, clocks and ids are shared with ioa-agent in
 * workers/common/ (ioa_common.h).
 */

#include <string.h>
#include <time.h>

#include "iw.h"


int
iw_streq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}


/* NULL, "" or only white space: nothing a reader could use */

int
iw_blank(const char *s)
{
    if (s == NULL) {
        return 1;
    }

    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
        s++;
    }

    return *s == '\0';
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
