/*
 * workers/common: allocation that does not fail (see ioa_alloc.h for why
 * failing ends the process).  A zero size is served as one byte, so a
 * NULL from here always means "out of memory" and never "nothing asked".
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ioa_alloc.h"


ioa_fatal_log_pt ioa_fatal_log;


void
ioa_fatal(const char *fmt, ...)
{
    int     n;
    char    msg[256];
    va_list ap;

    /* formatted on the stack: the heap may be what failed */
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
    va_end(ap);

    if (n < 0) {
        msg[0] = '\0';
        n = 0;

    } else if ((size_t) n > sizeof(msg) - 2) {
        n = sizeof(msg) - 2;
    }

    if (ioa_fatal_log) {
        ioa_fatal_log(msg);

    } else {
        msg[n++] = '\n';
        (void) !write(STDERR_FILENO, msg, (size_t) n);
    }

    abort();
}


void *
ioa_alloc(size_t size)
{
    void *p;

    p = malloc(size ? size : 1);
    if (p == NULL) {
        ioa_fatal("out of memory (%zu bytes)", size);
    }

    return p;
}


void *
ioa_calloc(size_t size)
{
    void *p;

    p = calloc(1, size ? size : 1);
    if (p == NULL) {
        ioa_fatal("out of memory (%zu bytes)", size);
    }

    return p;
}


void *
ioa_realloc(void *p, size_t size)
{
    p = realloc(p, size ? size : 1);
    if (p == NULL) {
        ioa_fatal("out of memory (%zu bytes)", size);
    }

    return p;
}


char *
ioa_strndup(const char *s, size_t len)
{
    char *p;

    p = ioa_alloc(len + 1);

    if (len) {
        memcpy(p, s, len);
    }

    p[len] = '\0';

    return p;
}


/* NULL copies as "": a missing JSON member is an empty text to callers */

char *
ioa_strdup(const char *s)
{
    return ioa_strndup(s ? s : "", s ? strlen(s) : 0);
}


/* a string of its own, for the callers that take a format themselves */

char *
ioa_vsprintf(const char *fmt, va_list ap)
{
    int     n;
    char   *p;
    va_list copy;

    /* measured on a copy: ap is read twice */
    va_copy(copy, ap);
    n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);

    if (n < 0) {
        ioa_fatal("vsnprintf(\"%s\") failed", fmt);
    }

    p = ioa_alloc((size_t) n + 1);
    vsnprintf(p, (size_t) n + 1, fmt, ap);

    return p;
}


char *
ioa_sprintf(const char *fmt, ...)
{
    char   *p;
    va_list ap;

    va_start(ap, fmt);
    p = ioa_vsprintf(fmt, ap);
    va_end(ap);

    return p;
}
