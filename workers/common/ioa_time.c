/*
 * workers/common: the clocks (see ioa_time.h).
 */

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
