/*
 * workers/common: allocation and the one way a worker program dies.
 *
 * Both programs treat an allocation failure as the end of the process:
 * ioa-worker keeps nothing in memory that Redis does not also hold (its job
 * stays pending and another worker takes it over), ioa-agent holds little
 * and the hub keeps what it has not handled (resume).  An error path in
 * every caller would never run, so there is none: ioa_alloc() and friends
 * return memory or do not return.
 *
 * ioa_fatal() is that ending, shared by the allocators and by whatever else
 * cannot go on (getrandom() refusing, curl_slist_append() failing).  It
 * abort()s rather than exit(1)s so a core is left for a post-mortem and no
 * atexit() handler runs on a heap that just failed.  Its last words go
 * through ioa_fatal_log when the program set one (each program has its own
 * log record format, see their log.c), else straight to stderr.
 */

#ifndef IOA_ALLOC_H
#define IOA_ALLOC_H


#include <stdarg.h>
#include <stddef.h>


#define IOA_PRINTF(f, a) __attribute__((format(printf, f, a)))


typedef void (*ioa_fatal_log_pt)(const char *msg);

extern ioa_fatal_log_pt ioa_fatal_log;

_Noreturn void ioa_fatal(const char *fmt, ...) IOA_PRINTF(1, 2);

void *ioa_alloc(size_t size);
void *ioa_calloc(size_t size);
void *ioa_realloc(void *p, size_t size);
char *ioa_strdup(const char *s);
char *ioa_strndup(const char *s, size_t len);
char *ioa_sprintf(const char *fmt, ...) IOA_PRINTF(1, 2);
char *ioa_vsprintf(const char *fmt, va_list ap) IOA_PRINTF(1, 0);


#endif /* IOA_ALLOC_H */
