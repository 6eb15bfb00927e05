/*
 * ioa-worker: one line per event on stderr.
 *
 *   2024-11-22T03:58:00.123Z ioa-worker[4711] info: goal 9f..: posted step 2
 *
 * UTC with milliseconds so lines from several workers (and nginx's
 * error.log) can be merged by sorting.  The line is formatted first and
 * written with one write(2), so lines of concurrent workers sharing a file
 * do not interleave.
 */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "iw.h"


void
iw_log(const char *level, const char *fmt, ...)
{
    int         i, n, m;
    char        line[2048];
    va_list     ap;

    n = ioa_time_iso(line, sizeof(line), ioa_wall_ms());
    n += snprintf(line + n, sizeof(line) - (size_t) n, " ioa-worker[%d] %s: ",
                  (int) getpid(), level);

    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
    va_end(ap);

    if (m < 0) {
        m = 0;
    }

    if ((size_t) (n + m) > sizeof(line) - 2) {
        m = (int) sizeof(line) - 2 - n;
    }

    /* one event, one line: goal texts and Redis errors may hold newlines */
    for (i = n; i < n + m; i++) {
        if ((unsigned char) line[i] < 0x20) {
            line[i] = ' ';
        }
    }

    n += m;

    line[n++] = '\n';

    (void) !write(STDERR_FILENO, line, (size_t) n);
}


/* ioa_fatal()'s last words (workers/common/ioa_alloc.c): a record like
 * any other, so whoever reads the log sees why the worker stopped */

void
iw_log_fatal(const char *msg)
{
    iw_log("error", "%s", msg);
}
