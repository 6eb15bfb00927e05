/*
 * workers/common: JSON out by hand, JSON in through yajl's tree.
 *
 * Out: both programs write JSON with ioa_buf_* and these string writers
 * rather than yajl_gen, because they control the order of members (an
 * envelope starts with "sender" and "timestamp", which the hub relies on)
 * and place raw JSON they did not build (a room envelope, a program's
 * output) inside JSON they build.  yajl_gen can do neither.
 *
 * In: yajl's tree parser, with accessors that answer NULL or -1 instead of
 * crashing on a shape the caller did not expect (envelopes are written by
 * arbitrary agents, answers by arbitrary LLM servers).
 */

#ifndef IOA_JSON_H
#define IOA_JSON_H


#include <stddef.h>

#include <yajl/yajl_tree.h>

#include "ioa_buf.h"


size_t ioa_utf8_len(const unsigned char *s, size_t len);
size_t ioa_utf8_cut(const char *s, size_t len, size_t max);

size_t ioa_json_escape(ioa_buf_t *b, const char *s, size_t len, size_t max);
void   ioa_json_str(ioa_buf_t *b, const char *s);
void   ioa_json_strn(ioa_buf_t *b, const char *s, size_t len);
void   ioa_json_str_or_null(ioa_buf_t *b, const char *s);
void   ioa_json_emit(ioa_buf_t *b, yajl_val v);

yajl_val    ioa_json_parse(const char *text, size_t len);
yajl_val    ioa_json_parse_err(const char *text, size_t len, char *err,
                               size_t errlen);
yajl_val    ioa_json_get(yajl_val obj, const char *key);
const char *ioa_json_string(yajl_val v);
const char *ioa_json_get_str(yajl_val obj, const char *key);
int         ioa_json_get_int(yajl_val obj, const char *key, long long *out);


#endif /* IOA_JSON_H */
