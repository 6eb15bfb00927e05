/*
 * workers/common: --health-file (see ioa_health.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ioa_health.h"
#include "ioa_time.h"


static const char  *ioa_health_path;
static long long    ioa_health_last;
static int          ioa_health_warned;


void
ioa_health_set(const char *path)
{
    ioa_health_path = path;
    ioa_health_last = 0;
    ioa_health_warned = 0;
}


void
ioa_health_touch(void)
{
    int        fd;
    long long  now;

    if (ioa_health_path == NULL) {
        return;
    }

    now = ioa_mono_ms();

    if (ioa_health_last && now - ioa_health_last < 1000) {
        return;
    }

    ioa_health_last = now;

    fd = open(ioa_health_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

    if (fd == -1 || futimens(fd, NULL) == -1) {
        if (!ioa_health_warned) {
            /* stderr: both programs log there, and this is said once */
            fprintf(stderr, "cannot touch the health file %s: %s\n",
                    ioa_health_path, strerror(errno));
            ioa_health_warned = 1;
        }

    } else {
        ioa_health_warned = 0;
    }

    if (fd != -1) {
        (void) close(fd);
    }
}
