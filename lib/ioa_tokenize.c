
/*
 * Copyright (C) ioa authors
 *
 * The discovery tokenizer (see ioa_tokenize.h for who uses it).
 *
 * A word is a run of ASCII letters and digits and of bytes >= 0x80, so a
 * UTF-8 word of any script survives whole (splitting inside it would cut a
 * character in two); everything else separates words.  ASCII letters are
 * folded to lower case, other bytes are kept as they are: case folding
 * beyond ASCII needs Unicode tables, and a description and a query written
 * in the same script match anyway.  Dropped: words of one byte ("a",
 * "x"), which match nearly every description, and English stopwords, which
 * say nothing about a capability.  A plural is folded to its singular,
 * "queries" -> "query" and "apis" -> "api" (but "class" and "bus" stay),
 * so either form finds the other; both tests look at the folded word only
 * after the stopword test, which sees the word as written (lowercased).
 *
 * The rules are those the Lua scripts applied before this file existed, so
 * a registry indexed by an older release ranks the same.
 */


#include <string.h>

#include "ioa_tokenize.h"


/* sorted, for bsearch(); the list of the earlier scripts */
static const char  *ioa_stopwords[] = {
    "about", "all", "an", "and", "any", "are", "as", "at", "be", "been",
    "but", "by", "can", "could", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "his", "how", "if", "in", "into", "is", "it",
    "its", "may", "me", "my", "no", "not", "of", "on", "or", "our", "she",
    "should", "so", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "to", "us", "was", "we",
    "were", "what", "which", "who", "will", "with", "would", "you", "your"
};

#define IOA_NSTOPWORDS                                                        \
    (sizeof(ioa_stopwords) / sizeof(ioa_stopwords[0]))

/* the longest stopword: longer words need no lookup */
#define IOA_STOPWORD_MAX  6


static int ioa_token_stopword(const unsigned char *w, size_t len);


static int
ioa_token_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c >= 0x80;
}


size_t
ioa_token_next(const unsigned char **pos, const unsigned char *end,
    unsigned char *out)
{
    size_t               len;
    unsigned char        c;
    const unsigned char  *p;

    p = *pos;

    for ( ;; ) {
        while (p < end && !ioa_token_byte(*p)) {
            p++;
        }

        if (p == end) {
            *pos = p;
            return 0;
        }

        len = 0;

        while (p < end && ioa_token_byte(*p)) {
            c = *p++;
            out[len++] = (c >= 'A' && c <= 'Z') ? (unsigned char) (c | 0x20)
                                                : c;
        }

        if (len < 2 || ioa_token_stopword(out, len)) {
            continue;
        }

        if (len > 4 && memcmp(out + len - 3, "ies", 3) == 0) {
            out[len - 3] = 'y';
            len -= 2;

        } else if (len > 3 && out[len - 1] == 's' && out[len - 2] != 's') {
            len--;
        }

        *pos = p;
        return len;
    }
}


size_t
ioa_token_join(unsigned char *out, size_t n, const unsigned char *text,
    size_t len)
{
    size_t                tl;
    const unsigned char  *p, *end;

    p = text;
    end = text + len;

    /*
     * The term goes straight to its place in out, one byte after the
     * previous one (for the space), and ioa_token_next() may fill up
     * to end - p bytes there.  That stays within n + len + 1 because the
     * byte after a word is never part of the next one (a word is a
     * maximal run), so stepping over it pays for the space: a term and
     * its space never take more than the word and its separator.
     */

    for ( ;; ) {
        tl = ioa_token_next(&p, end, out + n + (n > 0));

        if (tl == 0) {
            return n;
        }

        if (n > 0) {
            out[n++] = ' ';
        }

        n += tl;

        if (p < end) {
            p++;
        }
    }
}


static int
ioa_token_stopword(const unsigned char *w, size_t len)
{
    int          c;
    size_t       lo, hi, mid;
    const char  *s;

    if (len > IOA_STOPWORD_MAX) {
        return 0;
    }

    lo = 0;
    hi = IOA_NSTOPWORDS;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        s = ioa_stopwords[mid];

        c = strncmp(s, (const char *) w, len);

        if (c == 0 && s[len] != '\0') {
            c = 1;   /* s is longer: w sorts first */
        }

        if (c == 0) {
            return 1;
        }

        if (c < 0) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return 0;
}
