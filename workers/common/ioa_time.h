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


long long ioa_mono_ms(void);
long long ioa_wall_ms(void);


#endif /* IOA_TIME_H */
