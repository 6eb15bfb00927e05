/*
 * workers/common: what ioa-worker and ioa-agent share, one header for the
 * programs' own headers (iw.h, ioa_agent.h) to include.
 *
 * Every name here is prefixed ioa_, the project's, not a program's: the
 * agent already used it for these very functions, and the worker's iw_
 * names for them (iw_buf_*, iw_json_*, iw_alloc, ...) are gone rather than
 * kept as aliases, so a reader meets one name for one thing in both
 * programs.  What only one program needs stays in that program (the
 * worker's iw_streq() and iw_sleep_ms(), the agent's name rule), and so do
 * the two loggers, whose record formats differ and are part of what each
 * program promises (tests and operators parse them).
 *
 *   ioa_alloc.c   allocation, ioa_fatal(): one out-of-memory policy
 *   ioa_buf.c     the growing byte buffer
 *   ioa_json.c    the JSON writer (one escaper) and yajl tree access
 *   ioa_time.c    monotonic and wall clocks in ms
 *   ioa_random.c  kernel randomness, uuid4 hex ids, seeded jitter
 *   ioa_health.c  --health-file, touched while the program works
 *
 * The programs compile these files into their own build directories with
 * their own flags (common.mk), as Redis links zmalloc.o and anet.o into
 * each of its binaries.
 */

#ifndef IOA_COMMON_H
#define IOA_COMMON_H


#include "ioa_alloc.h"
#include "ioa_buf.h"
#include "ioa_health.h"
#include "ioa_json.h"
#include "ioa_random.h"
#include "ioa_time.h"


#endif /* IOA_COMMON_H */
