
/*
 * Copyright (C) ioa authors
 *
 * The discovery tokenizer: the one definition of what a "term" is, for
 * agent descriptions and tags (indexed) and for capability queries (ranked
 * against them).  It lives in lib/ so that the module (config), the worker
 * (workers/worker/Makefile) and build/ioa-terms compile the same file, and
 * every party that turns text into terms, the hub's discovery index,
 * /register, the worker's own queries, does it with this code and nothing
 * else.  The Redis scripts get
 * terms, never text (register.lua, retrieve.lua): a text's terms joined by
 * single spaces, which is what ioa_token_join() writes.  Tests and the
 * discovery bench get the same terms from scripts/ioa-terms.c.
 */


#ifndef _IOA_TOKENIZE_H_INCLUDED_
#define _IOA_TOKENIZE_H_INCLUDED_


#include <stddef.h>


/*
 * The next term of [*pos, end): written to out, which has room for at
 * least end - *pos bytes (a term is never longer than the word it comes
 * from); returns its length, 0 when no term is left.  *pos advances past
 * the word.
 */
size_t ioa_token_next(const unsigned char **pos, const unsigned char *end,
    unsigned char *out);

/*
 * Appends the terms of [text, text + len) to out, which holds n bytes
 * already: each term after one space unless out is empty, so calling it
 * for each text of a document gives the document's terms as the scripts
 * take them.  out has room for at least n + len + 1 bytes (a document of
 * several texts needs the sum of len + 1).  Returns the new length of out.
 */
size_t ioa_token_join(unsigned char *out, size_t n,
    const unsigned char *text, size_t len);


#endif /* _IOA_TOKENIZE_H_INCLUDED_ */
