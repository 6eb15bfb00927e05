/*
 * workers/common: a growing byte buffer, the one both programs build every
 * JSON body, Redis argument and log text in.
 *
 * There is always room for a terminating NUL after len bytes, so data is a
 * C string whenever it is not NULL, ioa_buf_cstr() costs nothing and
 * ioa_buf_take() can hand the text over without a copy.  A zeroed struct
 * (static, ioa_calloc'ed, or ioa_buf_init()) is an empty buffer.
 */

#ifndef IOA_BUF_H
#define IOA_BUF_H


#include <stddef.h>

#include "ioa_alloc.h"


typedef struct {
    char  *data;
    size_t len;
    size_t cap;
} ioa_buf_t;


void        ioa_buf_init(ioa_buf_t *b);
void        ioa_buf_free(ioa_buf_t *b);
void        ioa_buf_reset(ioa_buf_t *b);
char       *ioa_buf_take(ioa_buf_t *b);
const char *ioa_buf_cstr(ioa_buf_t *b);
void        ioa_buf_add(ioa_buf_t *b, const void *p, size_t len);
void        ioa_buf_adds(ioa_buf_t *b, const char *s);
void        ioa_buf_addc(ioa_buf_t *b, char c);
void        ioa_buf_addf(ioa_buf_t *b, const char *fmt, ...) IOA_PRINTF(2, 3);
void        ioa_buf_set(ioa_buf_t *b, const void *p, size_t len);


#endif /* IOA_BUF_H */
