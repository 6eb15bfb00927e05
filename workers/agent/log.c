/*
 * ioa-agent's log: one line a record on stderr,
 *
 *   2025-01-31T12:00:00.123Z info ioa-agent[4242] Worker: inbox open
 *
 * Control characters in messages (a program's stderr, an envelope's text)
 * are escaped so that a record never spans lines, and a record is written
 * with one write(2) so records from a child's inherited stderr do not cut
 * through ours.  The format is the agent's own, not shared with ioa-worker
 * (workers/common/ holds what is): supervisors and tests read it.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ioa_agent.h"


#define IOA_LOG_MAX 4096


int         ioa_log_level = IOA_LOG_INFO;
const char *ioa_log_agent = "-";

static const char *ioa_log_levels[] = { "error", "warn", "info", "debug" };


void
ioa_log(int level, const char *fmt, ...)
{
    int             saved, n;
    char            msg[IOA_LOG_MAX], line[IOA_LOG_MAX * 2], *p, *end;
    size_t          i;
    va_list         ap;

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

    p = line;
    end = line + sizeof(line) - 8; /* room for "...\n" */

    p += ioa_time_iso(p, end - p, ioa_wall_ms());
    p += snprintf(p, end - p, " %s ioa-agent[%ld] %s: ",
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


/* ioa_fatal()'s last words (workers/common/ioa_alloc.c), as a record */

void
ioa_log_fatal(const char *msg)
{
    ioa_log(IOA_LOG_ERROR, "%s", msg);
}
