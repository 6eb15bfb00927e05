/*
 * workers/common: the two clocks, in milliseconds.
 *
 * ioa_mono_ms() for intervals and timers (immune to the wall clock being
 * set), ioa_wall_ms() for what leaves the process: timestamps in Redis and
 * envelopes, the hub's "since=".  Signed, so that "deadline - now" may go
 * negative without wrapping.
 */

#ifndef IOA_TIME_H
#define IOA_TIME_H

#include <stddef.h>


long long ioa_mono_ms(void);
long long ioa_wall_ms(void);

/* "2025-01-31T12:00:00.123Z" (UTC, milliseconds): the first field of both
 * programs' log records, so that their logs and nginx's merge by sorting;
 * size at least IOA_TIME_ISO_LEN + 1; returns the length */
#define IOA_TIME_ISO_LEN  24

int ioa_time_iso(char *buf, size_t size, long long ms);


#endif /* IOA_TIME_H */
