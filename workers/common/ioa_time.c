/*
 * workers/common: the clocks (see ioa_time.h).
 */

#include <stdio.h>
#include <time.h>

#include "ioa_time.h"


long long
ioa_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


long long
ioa_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);

    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


int
ioa_time_iso(char *buf, size_t size, long long ms)
{
    time_t     sec;
    struct tm  tm;

    sec = (time_t) (ms / 1000);
    gmtime_r(&sec, &tm);

    return snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                    tm.tm_min, tm.tm_sec, (int) (ms % 1000));
}
