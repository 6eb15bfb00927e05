
/*
 * Copyright (C) ioa authors
 *
 * The discovery tokenizer: the one definition of what a "term" is, for
 * agent descriptions and tags (indexed) and for capability queries (ranked
 * against them).  Plain C with no nginx type, so that the worker compiles
 * the same file (workers/worker/Makefile) and every party that turns text
 * into terms, the hub's discovery index, /register, the worker's own
 * queries, does it with this code and nothing else.  The Redis scripts get
 * terms, never text (register.lua, retrieve.lua).
 */


#ifndef _NGX_IOA_TOKENIZE_H_INCLUDED_
#define _NGX_IOA_TOKENIZE_H_INCLUDED_


#include <stddef.h>


/*
 * The next term of [*pos, end): written to out, which has room for at
 * least end - *pos bytes (a term is never longer than the word it comes
 * from); returns its length, 0 when no term is left.  *pos advances past
 * the word.
 */
size_t ngx_ioa_token_next(const unsigned char **pos, const unsigned char *end,
    unsigned char *out);


#endif /* _NGX_IOA_TOKENIZE_H_INCLUDED_ */
