
/*
 * Copyright (C) ioa authors
 *
 * BM25 over the discovery index (ngx_ioa_index.c): the answers of
 * retrieve.lua, the same floating-point scores and the same ties, without
 * reading whole posting lists.
 *
 * The score.  For query terms t (distinct, in query order, those no agent
 * has left out, at most 32) an agent of length dl with term frequencies f_t
 * scores the sum, in query order, of
 *
 *     idf_t * f * (K1 + 1) / (f + K1 * (1 - B + B * dl / avgdl))
 *
 * with K1 = 1.2, B = 0.75, idf_t = ln(1 + (N - df + 0.5) / (df + 0.5)),
 * each written as retrieve.lua writes it, so the doubles are equal (the
 * module is built with -ffp-contract=off: a fused multiply-add would round
 * differently).  Top `limit` by score, then name in byte order.
 *
 * The walk.  An agent's score depends only on its length and on its tf in
 * each query term: its "shape".  All agents of one length and one shape
 * score the same number, so among them the first names win, and a term's
 * list keeps each (length, tf) block in name order.  So:
 *
 *   1. the query terms' lists are cut into their blocks (a binary search
 *      per block: a few dozen per term, not its df);
 *   2. per length, the best score any agent of that length can have is
 *      that of the shape with every term at its largest tf there; lengths
 *      are taken best first, and the walk ends at the first length whose
 *      best is below the last kept score;
 *   3. within a length, the shapes (a choice of block, or absent, per
 *      term) are taken best first, up to a shape below the last kept
 *      score; the agents of a shape are read from its smallest block in
 *      name order, each checked to have exactly that shape (a lookup in
 *      the agent's own terms), until the shape has given `limit` agents or
 *      its next name would lose the tie with the last kept one.
 *
 * A shape that nobody has costs the reading of its smallest block; the
 * shapes that fill the answer cost a few agents each.  A length with more
 * shapes than NGX_IOA_RANK_SHAPES (many terms with several tf each) is
 * scored agent by agent instead, which is exact too.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_index.h"
#include "ioa_tokenize.h"

#include <math.h>


#define NGX_IOA_RANK_K1       1.2
#define NGX_IOA_RANK_B        0.75

/* distinct terms of one query, as retrieve.lua's MAX_TERMS */
#define NGX_IOA_RANK_TERMS    32

/* shapes of one length taken one by one; past this, agent by agent */
#define NGX_IOA_RANK_SHAPES   512


typedef struct {
    uint16_t                  len;
    uint16_t                  tf;
    uint16_t                  term;          /* index in the query */
    ngx_ioa_ix_pos_t          pos;
    uint32_t                  count;
} ngx_ioa_rank_block_t;


typedef struct {
    ngx_ioa_ix_term_t        *term;
    double                    idf;
} ngx_ioa_rank_term_t;


/* one length: its blocks (runs of the sorted block array) */
typedef struct {
    uint16_t                  len;
    double                    x;             /* K1 * (1 - B + B dl/avgdl) */
    double                    bound;
    ngx_ioa_rank_block_t     *first;
    ngx_uint_t                nblocks;
} ngx_ioa_rank_len_t;


typedef struct {
    double                    s;
    uint8_t                   pick[NGX_IOA_RANK_TERMS];  /* 0: absent,
                                                            k: block k-1 */
} ngx_ioa_rank_shape_t;


typedef struct {
    ngx_ioa_ix_agent_t       *a;
    double                    s;
} ngx_ioa_rank_hit_t;


/* a shape's place in the order they are read */
typedef struct {
    double                    s;
    ngx_uint_t                shape;
} ngx_ioa_rank_order_t;


/* a candidate of a hybrid answer */
typedef struct {
    ngx_ioa_ix_agent_t       *a;
    double                    s;             /* the hybrid score */
    ngx_ioa_ix_parts_t        parts;
} ngx_ioa_rank_cand_t;


typedef struct {
    ngx_ioa_ix_sh_t          *sh;
    ngx_pool_t               *pool;
    double                    avgdl;
    int64_t                   now;
    ngx_uint_t                limit;
    ngx_uint_t                online_only;
    ngx_str_t                *exclude;

    ngx_ioa_rank_term_t       terms[NGX_IOA_RANK_TERMS];
    ngx_uint_t                nterms;

    ngx_ioa_rank_hit_t       *top;
    ngx_uint_t                ntop;
} ngx_ioa_rank_t;


static ngx_int_t ngx_ioa_rank_query(ngx_ioa_rank_t *rk, ngx_str_t *query);
static ngx_int_t ngx_ioa_rank_blocks(ngx_ioa_rank_t *rk, ngx_array_t *blocks,
    ngx_ioa_rank_block_t **merged);
static ngx_int_t ngx_ioa_rank_length(ngx_ioa_rank_t *rk,
    ngx_ioa_rank_len_t *ln);
static void ngx_ioa_rank_every(ngx_ioa_rank_t *rk, ngx_ioa_rank_len_t *ln);
static void ngx_ioa_rank_shape(ngx_ioa_rank_t *rk, ngx_ioa_rank_len_t *ln,
    ngx_ioa_rank_shape_t *sp, ngx_ioa_rank_block_t **chosen);
static uint32_t ngx_ioa_rank_tf(ngx_ioa_ix_agent_t *a, ngx_ioa_ix_term_t *t);
static void ngx_ioa_rank_admit(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a,
    double s);
static ngx_int_t ngx_ioa_rank_loses(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a,
    double s);
static double ngx_ioa_rank_score(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a);
static ngx_uint_t ngx_ioa_rank_hybrid(ngx_ioa_rank_t *rk, float *qvec,
    ngx_uint_t dim, double weight, ngx_ioa_rank_cand_t *out,
    ngx_uint_t limit);


static ngx_inline double
ngx_ioa_rank_share(double idf, double f, double x)
{
    return idf * f * (NGX_IOA_RANK_K1 + 1) / (f + x);
}


/*
 * The answer to /retrieve_assistant from the index: each query's top,
 * concatenated in query order, an agent met again dropped (retrieve.lua's
 * contract).  NGX_DECLINED: the index cannot answer (not built, or full);
 * the caller asks Redis.
 */

ngx_int_t
ngx_ioa_index_retrieve(ngx_pool_t *pool, ngx_str_t *queries, ngx_uint_t n,
    ngx_uint_t limit, ngx_uint_t online_only, ngx_str_t *exclude,
    int64_t now, ngx_ioa_index_semantic_t *sem, ngx_ioa_jbuf_t *out)
{
    ngx_int_t             rc;
    ngx_uint_t            q, i, j, nout, nhits, cands;
    const char           *ranking;
    ngx_ioa_rank_t        rk;
    ngx_ioa_ix_ctx_t     *ctx;
    ngx_ioa_ix_agent_t  **emitted;
    ngx_ioa_rank_cand_t  *hits;

    ctx = ngx_ioa_ix_ctx();

    if (ctx == NULL) {
        return NGX_DECLINED;
    }

    /* hybrid: BM25's best NGX_IOA_RANK_CANDS-ish and cosine's are the
     * candidates (see ngx_ioa_rank_hybrid) */
    cands = (sem && sem->qvecs) ? ngx_min(ngx_max(4 * limit, 20), 200)
                                : limit;

    ngx_memzero(&rk, sizeof(ngx_ioa_rank_t));
    rk.sh = ctx->sh;
    rk.pool = pool;
    rk.limit = cands;
    rk.online_only = online_only;
    rk.exclude = exclude;
    rk.now = now;

    rk.top = ngx_palloc(pool, cands * sizeof(ngx_ioa_rank_hit_t));
    hits = ngx_palloc(pool, 2 * cands * sizeof(ngx_ioa_rank_cand_t));
    emitted = ngx_palloc(pool, n * limit * sizeof(ngx_ioa_ix_agent_t *));

    if (rk.top == NULL || hits == NULL || emitted == NULL) {
        return NGX_ERROR;
    }

    ranking = sem ? (sem->qvecs ? "hybrid" : "bm25") : NULL;

    if (ngx_ioa_ix_rlock(rk.sh) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (rk.sh->state != NGX_IOA_IX_READY) {
        ngx_ioa_ix_unlock(rk.sh);
        return NGX_DECLINED;
    }

    nout = 0;
    rc = NGX_OK;

    ngx_ioa_jbuf_byte(out, '[');

    for (q = 0; q < n && rc == NGX_OK; q++) {
        rk.ntop = 0;
        rk.nterms = 0;

        if (rk.sh->nagents && rk.sh->total_len) {
            rk.avgdl = (double) rk.sh->total_len / (double) rk.sh->nagents;
            rc = ngx_ioa_rank_query(&rk, &queries[q]);
        }

        if (sem && sem->qvecs) {
            nhits = ngx_ioa_rank_hybrid(&rk, &sem->qvecs[q * sem->dim],
                                        sem->dim, sem->weight, hits, limit);

        } else {
            nhits = ngx_min(rk.ntop, limit);

            for (i = 0; i < nhits; i++) {
                hits[i].a = rk.top[i].a;
                hits[i].s = rk.top[i].s;
            }
        }

        for (i = 0; i < nhits; i++) {
            for (j = 0; j < nout; j++) {
                if (emitted[j] == hits[i].a) {
                    break;
                }
            }

            if (j < nout) {
                continue;
            }

            if (nout) {
                ngx_ioa_jbuf_byte(out, ',');
            }

            emitted[nout++] = hits[i].a;
            ngx_ioa_ix_agent_json(out, hits[i].a, hits[i].s, now,
                                  (sem && sem->qvecs) ? &hits[i].parts : NULL,
                                  ranking);
        }
    }

    ngx_ioa_jbuf_byte(out, ']');

    ngx_ioa_ix_unlock(rk.sh);

    return rc;
}


static ngx_int_t
ngx_ioa_rank_query(ngx_ioa_rank_t *rk, ngx_str_t *query)
{
    u_char               *buf;
    size_t                len;
    double                N, df;
    ngx_uint_t            i, k, nlens, left;
    ngx_array_t           blocks;
    const u_char         *p, *end;
    ngx_ioa_ix_term_t    *t;
    ngx_ioa_rank_len_t   *lens, *ln;
    ngx_ioa_rank_block_t *b;

    buf = ngx_pnalloc(rk->pool, query->len + 1);
    if (buf == NULL) {
        return NGX_ERROR;
    }

    rk->nterms = 0;
    N = (double) rk->sh->nagents;
    p = query->data;
    end = p + query->len;

    while (rk->nterms < NGX_IOA_RANK_TERMS
           && (len = ioa_token_next(&p, end, buf)))
    {
        t = ngx_ioa_ix_term(rk->sh, buf, len);

        if (t == NULL || t->df == 0) {
            continue;
        }

        for (i = 0; i < rk->nterms; i++) {
            if (rk->terms[i].term == t) {
                break;
            }
        }

        if (i < rk->nterms) {
            continue;
        }

        df = (double) t->df;
        rk->terms[rk->nterms].term = t;
        rk->terms[rk->nterms].idf = log(1 + (N - df + 0.5) / (df + 0.5));
        rk->nterms++;
    }

    if (rk->nterms == 0) {
        return NGX_OK;
    }

    if (ngx_ioa_rank_blocks(rk, &blocks, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the lengths, each with its best possible score */
    lens = ngx_palloc(rk->pool, blocks.nelts * sizeof(ngx_ioa_rank_len_t));
    if (lens == NULL) {
        return NGX_ERROR;
    }

    nlens = 0;

    for (i = 0; i < blocks.nelts; i = k) {
        ln = &lens[nlens++];
        ln->len = b[i].len;
        ln->first = &b[i];
        ln->x = NGX_IOA_RANK_K1 * ((1 - NGX_IOA_RANK_B)
                                   + NGX_IOA_RANK_B * b[i].len / rk->avgdl);
        ln->bound = 0;

        for (k = i; k < blocks.nelts && b[k].len == b[i].len; k++) {
            /* a term's first block at a length has its largest tf; the
             * terms come in query order */
            if (k == i || b[k].term != b[k - 1].term) {
                ln->bound = ln->bound
                            + ngx_ioa_rank_share(rk->terms[b[k].term].idf,
                                                 b[k].tf, ln->x);
            }
        }

        ln->nblocks = k - i;
    }

    /* best bound first; the walk usually ends after a few lengths, so the
     * best is picked from those left rather than all of them sorted */
    for (left = nlens; left; left--) {
        ln = &lens[0];

        for (i = 1; i < left; i++) {
            if (lens[i].bound > ln->bound) {
                ln = &lens[i];
            }
        }

        if (rk->ntop == rk->limit && ln->bound < rk->top[rk->limit - 1].s) {
            break;
        }

        if (ngx_ioa_rank_length(rk, ln) != NGX_OK) {
            return NGX_ERROR;
        }

        *ln = lens[left - 1];
    }

    return NGX_OK;
}


/*
 * Every (length, tf) block of every query term, in the order the lengths
 * are read: by length, then term (query order), then tf (largest first).
 * Each term's list gives its blocks in that order already, so the lists
 * are merged rather than sorted.
 */

static ngx_int_t
ngx_ioa_rank_blocks(ngx_ioa_rank_t *rk, ngx_array_t *blocks,
    ngx_ioa_rank_block_t **merged)
{
    uint16_t               len;
    uint32_t               count;
    ngx_uint_t             i, n, best;
    ngx_uint_t             at[NGX_IOA_RANK_TERMS], end[NGX_IOA_RANK_TERMS];
    ngx_ioa_ix_pos_t       pos, stop;
    ngx_ioa_ix_term_t     *t;
    ngx_ioa_ix_post_t     *p;
    ngx_ioa_rank_block_t  *b, *all, *out;

    if (ngx_array_init(blocks, rk->pool, 64, sizeof(ngx_ioa_rank_block_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < rk->nterms; i++) {
        t = rk->terms[i].term;
        pos.chunk = 0;
        pos.off = 0;
        at[i] = blocks->nelts;

        while (pos.chunk < t->nchunks) {
            p = ngx_ioa_ix_at(t, &pos);
            ngx_ioa_ix_block_end(t, &pos, &stop, &count);

            b = ngx_array_push(blocks);
            if (b == NULL) {
                return NGX_ERROR;
            }

            b->len = p->len;
            b->tf = p->tf;
            b->term = (uint16_t) i;
            b->pos = pos;
            b->count = count;

            pos = stop;
        }

        end[i] = blocks->nelts;
    }

    all = blocks->elts;
    n = blocks->nelts;

    out = ngx_palloc(rk->pool, n * sizeof(ngx_ioa_rank_block_t));
    if (out == NULL) {
        return NGX_ERROR;
    }

    *merged = out;

    while (n) {
        best = NGX_IOA_RANK_TERMS;

        for (i = 0; i < rk->nterms; i++) {
            if (at[i] < end[i]
                && (best == NGX_IOA_RANK_TERMS
                    || all[at[i]].len < all[at[best]].len))
            {
                best = i;
            }
        }

        /* the term's blocks of that length, largest tf first */
        len = all[at[best]].len;

        while (at[best] < end[best] && all[at[best]].len == len) {
            *out++ = all[at[best]++];
            n--;
        }
    }

    return NGX_OK;
}


/* one length: its shapes best first, or every agent when too many */

static ngx_int_t
ngx_ioa_rank_length(ngx_ioa_rank_t *rk, ngx_ioa_rank_len_t *ln)
{
    ngx_uint_t             i, j, k, n, nshapes, code, v;
    ngx_ioa_rank_order_t  *order;
    ngx_uint_t             start[NGX_IOA_RANK_TERMS];
    ngx_uint_t             nopts[NGX_IOA_RANK_TERMS];
    ngx_ioa_rank_shape_t  *shapes, *sp;
    ngx_ioa_rank_block_t  *b, *chosen[NGX_IOA_RANK_TERMS];

    ngx_memzero(nopts, sizeof(nopts));

    b = ln->first;

    for (k = 0; k < ln->nblocks; k++) {
        if (nopts[b[k].term]++ == 0) {
            start[b[k].term] = k;
        }
    }

    nshapes = 1;

    for (i = 0; i < rk->nterms; i++) {
        nshapes *= nopts[i] + 1;

        if (nshapes > NGX_IOA_RANK_SHAPES + 1) {
            ngx_ioa_rank_every(rk, ln);
            return NGX_OK;
        }
    }

    shapes = ngx_palloc(rk->pool, nshapes * sizeof(ngx_ioa_rank_shape_t));
    if (shapes == NULL) {
        return NGX_ERROR;
    }

    /* every choice but all-absent: code's digits, in the mixed radix of
     * the terms' (blocks + 1), are the picks */
    n = 0;

    for (code = 1; code < nshapes; code++) {
        sp = &shapes[n++];
        sp->s = 0;
        v = code;

        for (i = 0; i < rk->nterms; i++) {
            sp->pick[i] = (uint8_t) (v % (nopts[i] + 1));
            v /= nopts[i] + 1;

            if (sp->pick[i]) {
                sp->s = sp->s
                        + ngx_ioa_rank_share(rk->terms[i].idf,
                                             b[start[i] + sp->pick[i] - 1].tf,
                                             ln->x);
            }
        }
    }

    /* best first: an insertion sort of the scores alone (a few dozen,
     * often nearly in order already), the shapes left where they are */
    order = ngx_palloc(rk->pool, n * sizeof(ngx_ioa_rank_order_t));
    if (order == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < n; k++) {
        j = k;

        while (j > 0 && order[j - 1].s < shapes[k].s) {
            order[j] = order[j - 1];
            j--;
        }

        order[j].s = shapes[k].s;
        order[j].shape = k;
    }

    for (k = 0; k < n; k++) {
        sp = &shapes[order[k].shape];

        if (rk->ntop == rk->limit && sp->s < rk->top[rk->limit - 1].s) {
            break;
        }

        for (i = 0; i < rk->nterms; i++) {
            chosen[i] = sp->pick[i] ? &b[start[i] + sp->pick[i] - 1] : NULL;
        }

        ngx_ioa_rank_shape(rk, ln, sp, chosen);
    }

    return NGX_OK;
}


/* the agents of one shape at one length, from its smallest block */

static void
ngx_ioa_rank_shape(ngx_ioa_rank_t *rk, ngx_ioa_rank_len_t *ln,
    ngx_ioa_rank_shape_t *sp, ngx_ioa_rank_block_t **chosen)
{
    uint32_t               k;
    uint64_t               need;
    ngx_uint_t             i;
    ngx_ioa_ix_pos_t       pos;
    ngx_ioa_ix_post_t     *p;
    ngx_ioa_ix_agent_t    *a;
    ngx_ioa_rank_block_t  *from;
    ngx_ioa_ix_term_t     *t;

    from = NULL;

    for (i = 0; i < rk->nterms; i++) {
        if (chosen[i] && (from == NULL || chosen[i]->count < from->count)) {
            from = chosen[i];
        }
    }

    /* the bits every agent of the shape has: a posting whose signature
     * lacks one is not of the shape, and its agent is not read (most of
     * a long walk: the agents are scattered in memory, the postings not) */
    need = 0;

    for (i = 0; i < rk->nterms; i++) {
        if (chosen[i]) {
            need |= ngx_ioa_ix_bit(rk->terms[i].term->hash);
        }
    }

    t = rk->terms[from->term].term;
    pos = from->pos;

    for (k = 0; k < from->count; k++, (void) ngx_ioa_ix_next(t, &pos)) {
        p = ngx_ioa_ix_at(t, &pos);

        if ((p->sig & need) != need) {
            continue;
        }

        a = rk->sh->slots[p->slot];

        /* the block is in name order: once one name loses the tie with
         * the last kept, all the rest do (a lower score never got here) */
        if (rk->ntop == rk->limit && ngx_ioa_rank_loses(rk, a, sp->s)) {
            return;
        }

        for (i = 0; i < rk->nterms; i++) {
            if (ngx_ioa_rank_tf(a, rk->terms[i].term)
                != (chosen[i] ? chosen[i]->tf : 0))
            {
                break;
            }
        }

        if (i == rk->nterms) {
            ngx_ioa_rank_admit(rk, a, sp->s);
        }
    }
}


/* every agent of one length, each scored on its own; an agent with
 * several of the terms is scored from the first of them */

static void
ngx_ioa_rank_every(ngx_ioa_rank_t *rk, ngx_ioa_rank_len_t *ln)
{
    uint32_t               k;
    ngx_uint_t             i, j;
    ngx_ioa_ix_pos_t       pos;
    ngx_ioa_ix_agent_t    *a;
    ngx_ioa_ix_term_t     *t;
    ngx_ioa_rank_block_t  *b;

    for (i = 0; i < ln->nblocks; i++) {
        b = &ln->first[i];
        t = rk->terms[b->term].term;
        pos = b->pos;

        for (k = 0; k < b->count; k++, (void) ngx_ioa_ix_next(t, &pos)) {
            a = rk->sh->slots[ngx_ioa_ix_at(t, &pos)->slot];

            for (j = 0; j < b->term; j++) {
                if (ngx_ioa_rank_tf(a, rk->terms[j].term)) {
                    break;
                }
            }

            if (j < b->term) {
                continue;
            }

            ngx_ioa_rank_admit(rk, a, ngx_ioa_rank_score(rk, a));
        }
    }
}


/* the agent's tf in a term, 0 if it does not have it */

static uint32_t
ngx_ioa_rank_tf(ngx_ioa_ix_agent_t *a, ngx_ioa_ix_term_t *t)
{
    ngx_uint_t  lo, hi, mid;

    if (!(a->sig & ngx_ioa_ix_bit(t->hash))) {
        return 0;
    }

    lo = 0;
    hi = a->nterms;

    while (lo < hi) {
        mid = (lo + hi) / 2;

        if (a->terms[mid].term == t) {
            return a->terms[mid].tf;
        }

        if (a->terms[mid].term < t) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return 0;
}


/* the answer is full and s (with this name) does not beat its last */

static ngx_int_t
ngx_ioa_rank_loses(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a, double s)
{
    ngx_ioa_rank_hit_t  *last;

    if (rk->ntop < rk->limit) {
        return 0;
    }

    last = &rk->top[rk->limit - 1];

    return s < last->s
           || (s == last->s
               && !ngx_ioa_ix_before(a->text, a->name_len, last->a->text,
                                     last->a->name_len));
}


/* keep a in the answer (score desc, then name asc) if it gets in and
 * passes the filters: not the sender, online when asked */

static void
ngx_ioa_rank_admit(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a, double s)
{
    ngx_uint_t           n;
    ngx_ioa_rank_hit_t  *prev;

    if (ngx_ioa_rank_loses(rk, a, s)) {
        return;
    }

    if (rk->exclude->len == a->name_len
        && ngx_memcmp(rk->exclude->data, a->text, a->name_len) == 0)
    {
        return;
    }

    if (rk->online_only && ngx_ioa_ix_online_until(a) <= rk->now) {
        return;
    }

    n = rk->ntop;

    if (n < rk->limit) {
        rk->ntop++;

    } else {
        n--;
    }

    while (n > 0) {
        prev = &rk->top[n - 1];

        if (s < prev->s
            || (s == prev->s
                && ngx_ioa_ix_before(prev->a->text, prev->a->name_len,
                                     a->text, a->name_len)))
        {
            break;
        }

        rk->top[n] = *prev;
        n--;
    }

    rk->top[n].a = a;
    rk->top[n].s = s;
}


/* an agent's BM25 score for the query terms, as every path computes it */

static double
ngx_ioa_rank_score(ngx_ioa_rank_t *rk, ngx_ioa_ix_agent_t *a)
{
    double      s, x;
    uint32_t    tf;
    ngx_uint_t  j;

    x = NGX_IOA_RANK_K1 * ((1 - NGX_IOA_RANK_B)
                           + NGX_IOA_RANK_B * a->len / rk->avgdl);
    s = 0;

    for (j = 0; j < rk->nterms; j++) {
        tf = ngx_ioa_rank_tf(a, rk->terms[j].term);

        if (tf) {
            s = s + ngx_ioa_rank_share(rk->terms[j].idf, tf, x);
        }
    }

    return s;
}


/*
 * Semantic discovery's hybrid (README "Discovery"): the candidates are
 * BM25's best rk->limit (already in rk->top) and the rk->limit agents
 * whose embeddings are nearest the query's (cosine: both have length 1,
 * so the dot product); each candidate scores
 *
 *     weight * bm25 / (the best bm25 among the candidates)
 *       + (1 - weight) * cosine
 *
 * (an agent without a vector has cosine 0, a query without terms BM25 0),
 * and the best `limit` are kept, ties by name.  The nearest are found by
 * reading every vector: O(agents * dim) per query.
 */

static int ngx_libc_cdecl
ngx_ioa_rank_cand_cmp(const void *one, const void *two)
{
    const ngx_ioa_rank_cand_t  *a = one, *b = two;

    if (a->s != b->s) {
        return a->s > b->s ? -1 : 1;
    }

    return ngx_ioa_ix_before(a->a->text, a->a->name_len, b->a->text,
                             b->a->name_len) ? -1 : 1;
}


static double
ngx_ioa_rank_cosine(ngx_ioa_ix_agent_t *a, float *qvec, ngx_uint_t dim)
{
    double      dot;
    ngx_uint_t  k;

    if (a->vec == NULL || a->dim != dim) {
        return 0;
    }

    dot = 0;

    for (k = 0; k < dim; k++) {
        dot += (double) a->vec[k] * qvec[k];
    }

    return dot;
}


static ngx_uint_t
ngx_ioa_rank_hybrid(ngx_ioa_rank_t *rk, float *qvec, ngx_uint_t dim,
    double weight, ngx_ioa_rank_cand_t *out, ngx_uint_t limit)
{
    double                sim, best;
    uint32_t              slot;
    ngx_uint_t            i, j, n, nnear;
    ngx_ioa_ix_agent_t   *a;
    ngx_ioa_rank_cand_t  *near, *c;

    /* BM25's candidates */
    n = 0;

    for (i = 0; i < rk->ntop; i++) {
        out[n].a = rk->top[i].a;
        out[n].parts.bm25 = rk->top[i].s;
        out[n].parts.similarity = ngx_ioa_rank_cosine(rk->top[i].a, qvec,
                                                      dim);
        n++;
    }

    /* the nearest, kept sorted (similarity desc, then name) after the
     * BM25 ones in out */
    near = &out[n];
    nnear = 0;

    for (slot = 0; slot < rk->sh->nslots; slot++) {
        a = rk->sh->slots[slot];

        if (a == NULL || a->vec == NULL || a->dim != dim) {
            continue;
        }

        sim = ngx_ioa_rank_cosine(a, qvec, dim);

        if (nnear == rk->limit
            && (sim < near[nnear - 1].parts.similarity
                || (sim == near[nnear - 1].parts.similarity
                    && !ngx_ioa_ix_before(a->text, a->name_len,
                                          near[nnear - 1].a->text,
                                          near[nnear - 1].a->name_len))))
        {
            continue;
        }

        if ((rk->exclude->len == a->name_len
             && ngx_memcmp(rk->exclude->data, a->text, a->name_len) == 0)
            || (rk->online_only && ngx_ioa_ix_online_until(a) <= rk->now))
        {
            continue;
        }

        j = (nnear < rk->limit) ? nnear++ : nnear - 1;

        while (j > 0
               && (sim > near[j - 1].parts.similarity
                   || (sim == near[j - 1].parts.similarity
                       && ngx_ioa_ix_before(a->text, a->name_len,
                                            near[j - 1].a->text,
                                            near[j - 1].a->name_len))))
        {
            near[j] = near[j - 1];
            j--;
        }

        near[j].a = a;
        near[j].parts.similarity = sim;
    }

    /* the nearest that BM25 did not bring, with their BM25 */
    for (i = 0; i < nnear; i++) {
        for (j = 0; j < n; j++) {
            if (out[j].a == near[i].a) {
                break;
            }
        }

        if (j < n) {
            continue;
        }

        c = &out[n++];
        c->a = near[i].a;
        c->parts.similarity = near[i].parts.similarity;
        c->parts.bm25 = rk->nterms ? ngx_ioa_rank_score(rk, c->a) : 0;
    }

    best = 0;

    for (i = 0; i < n; i++) {
        if (out[i].parts.bm25 > best) {
            best = out[i].parts.bm25;
        }
    }

    for (i = 0; i < n; i++) {
        out[i].s = (1 - weight) * out[i].parts.similarity;

        if (best > 0) {
            out[i].s += weight * out[i].parts.bm25 / best;
        }
    }

    ngx_qsort(out, n, sizeof(ngx_ioa_rank_cand_t), ngx_ioa_rank_cand_cmp);

    return ngx_min(n, limit);
}
