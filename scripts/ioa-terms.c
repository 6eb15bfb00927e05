/*
 * ioa-terms: the discovery terms of texts, from the one tokenizer the hub
 * and the worker use (lib/ioa_tokenize.c), for whoever calls register.lua
 * or retrieve.lua without going through them: the tests
 * (t/redis-scripts.t, t/031-tokenizer.t) and the discovery bench's direct
 * mode (bench/discovery/client.py).  Built by `make` into build/ioa-terms.
 *
 *   ioa-terms < texts         one text per line
 *   ioa-terms -0 < texts      NUL-terminated texts (a text may hold newlines)
 *   ioa-terms -- DESC TAG...  one document: the terms of each argument in
 *                             turn, as /register indexes a description and
 *                             its tags
 *
 * Writes one line per text (per document): its terms joined by single
 * spaces, as the scripts take them; an empty line when it has none.  Each
 * line is flushed at once, so a test can keep one process and ask it one
 * text at a time.  The output buffer is allocated at exactly the size
 * ioa_token_join() asks for, so that a sanitizer or valgrind run sees
 * any byte it writes beyond.
 *
 * The name is not "ioa-tokenize" so that it is not mistaken for
 * scripts/ioa-token, the JWT tool.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_tokenize.h"


static int ioa_terms_write(const unsigned char *terms, size_t n);


int
main(int argc, char **argv)
{
    int             i, delim;
    char           *rec;
    size_t          cap, n, size;
    ssize_t         len;
    unsigned char  *out;

    if (argc >= 2 && strcmp(argv[1], "--") == 0) {
        size = 0;

        for (i = 2; i < argc; i++) {
            size += strlen(argv[i]) + 1;
        }

        out = malloc(size ? size : 1);
        if (out == NULL) {
            perror("ioa-terms");
            return 1;
        }

        n = 0;

        for (i = 2; i < argc; i++) {
            n = ioa_token_join(out, n, (unsigned char *) argv[i],
                               strlen(argv[i]));
        }

        i = ioa_terms_write(out, n);
        free(out);

        return i;
    }

    if (argc == 1) {
        delim = '\n';

    } else if (argc == 2 && strcmp(argv[1], "-0") == 0) {
        delim = '\0';

    } else {
        fprintf(stderr, "usage: ioa-terms [-0] < texts\n"
                        "       ioa-terms -- TEXT...\n");
        return 2;
    }

    rec = NULL;
    cap = 0;

    while ((len = getdelim(&rec, &cap, delim, stdin)) > 0) {
        if (rec[len - 1] == delim) {
            len--;
        }

        out = malloc((size_t) len + 1);
        if (out == NULL) {
            perror("ioa-terms");
            return 1;
        }

        n = ioa_token_join(out, 0, (unsigned char *) rec, (size_t) len);

        if (ioa_terms_write(out, n) != 0) {
            return 1;
        }

        free(out);
    }

    free(rec);

    if (ferror(stdin)) {
        perror("ioa-terms");
        return 1;
    }

    return 0;
}


static int
ioa_terms_write(const unsigned char *terms, size_t n)
{
    if (fwrite(terms, 1, n, stdout) != n || putchar('\n') == EOF
        || fflush(stdout) != 0)
    {
        perror("ioa-terms");
        return 1;
    }

    return 0;
}
