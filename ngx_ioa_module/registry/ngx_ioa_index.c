
/*
 * Copyright (C) ioa authors
 *
 * The discovery index: every registered agent, ranked by BM25 inside nginx
 * instead of inside Redis.
 *
 * Why.  retrieve.lua ranks in Redis, and Redis runs one thread: a query
 * holds it for about a millisecond, every room on the network waits that
 * long, and more nginx instances add no discovery capacity.  Redis stays
 * the source of truth for the registry; each nginx instance keeps a copy
 * of what ranking needs in one shared memory zone (ioa_discovery_zone),
 * which all its workers read, so a query costs Redis nothing and every
 * instance added adds capacity.
 *
 * Layout (all in the zone, from its slab allocator):
 *
 *   agents   hash name -> agent: name, type, desc, tags (the JSON text
 *            /register stored), speaks_protocol, the task record, the
 *            document's length in tokens, its terms with their tf (sorted
 *            by term address, for lookups while ranking) and its presence:
 *            one (holder, expiry) pair per nginx worker holding it online,
 *            as presence.lua keeps them in Redis;
 *   slots    agent number -> agent, so that a posting is 8 bytes;
 *   terms    hash term -> df and its postings (slot, length, tf), sorted by
 *            length, then tf (largest first), then name.  A (length, tf)
 *            block holds agents whose share of any score is the same
 *            number, in name order, which is what lets the ranking stop
 *            early, ties included (ngx_ioa_index_rank.c).  The list is
 *            stored as chunks of at most 255 postings (a page), so an
 *            update moves at most 4 KiB whatever the term's df; a
 *            rare term's list starts at 2 postings and grows by doubling.
 *
 * N and the total length (avgdl) are the index's own sums, which are the
 * registry's as long as the index follows it.
 *
 * Updates.  One worker per instance, the keeper (ngx_ioa_index_sync.c),
 * follows Redis and writes; every worker reads.  A writer takes the lock
 * for one agent at a time, so a reader never waits for more than one
 * agent's update; readers take it shared for one whole query.  A waiting
 * writer holds new readers back, or steady queries from several workers
 * could starve the keeper; and a worker that dies holding the lock does
 * not hang the others (ngx_ioa_index_lock.c).
 *
 * When the zone is full, the agent being written is dropped from the index
 * and the index stops answering (state FULL): queries go to Redis as before
 * the index existed, exact but slower, and the error log says to raise
 * ioa_discovery_zone.  A partial index is never used: it would rank wrong.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_index.h"
#include "ioa_tokenize.h"


static ngx_int_t ngx_ioa_ix_init_zone(ngx_shm_zone_t *zone, void *data);
static void *ngx_ioa_ix_alloc(size_t size);
static void ngx_ioa_ix_free(void *p);
static ngx_int_t ngx_ioa_ix_grow_agents(ngx_ioa_ix_sh_t *sh);
static ngx_int_t ngx_ioa_ix_grow_terms(ngx_ioa_ix_sh_t *sh);
static ngx_ioa_ix_term_t *ngx_ioa_ix_term_add(ngx_ioa_ix_sh_t *sh,
    u_char *text, size_t len);
static void ngx_ioa_ix_term_drop(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t);
static ngx_int_t ngx_ioa_ix_post_cmp(ngx_ioa_ix_sh_t *sh,
    ngx_ioa_ix_post_t *p, ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a);
static ngx_int_t ngx_ioa_ix_post_add(ngx_ioa_ix_sh_t *sh,
    ngx_ioa_ix_term_t *t, ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a);
static void ngx_ioa_ix_post_del(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a);
static ngx_int_t ngx_ioa_ix_document(ngx_pool_t *pool, ngx_ioa_ix_input_t *in,
    ngx_array_t *terms, uint32_t *len);
static ngx_int_t ngx_ioa_ix_same_document(ngx_ioa_ix_agent_t *a,
    ngx_array_t *doc, uint32_t len);
static void ngx_ioa_ix_unpost(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a);
static ngx_int_t ngx_ioa_ix_repost(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_array_t *doc, uint32_t len);
static ngx_int_t ngx_ioa_ix_set_text(ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in);
static ngx_int_t ngx_ioa_ix_same_text(ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in);
static ngx_int_t ngx_ioa_ix_set_rest(ngx_ioa_ix_sh_t *sh,
    ngx_ioa_ix_agent_t *a, ngx_ioa_ix_input_t *in);
static ngx_int_t ngx_ioa_ix_set_pairs(ngx_ioa_ix_sh_t *sh,
    ngx_ioa_ix_agent_t *a, ngx_ioa_ix_input_t *in);
static ngx_int_t ngx_ioa_ix_pair(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_uint_t holder, int64_t expiry);
static void ngx_ioa_ix_unpair(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_uint_t holder);
static void ngx_ioa_ix_prune_pairs(ngx_ioa_ix_sh_t *sh);
static void ngx_ioa_ix_prune_agent(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    int64_t now);
static ngx_int_t ngx_ioa_ix_holder(ngx_ioa_ix_sh_t *sh, ngx_str_t *name);
static ngx_ioa_ix_agent_t *ngx_ioa_ix_agent_add(ngx_ioa_ix_sh_t *sh,
    ngx_str_t *name);
static void ngx_ioa_ix_agent_drop(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a);
static void ngx_ioa_ix_full(ngx_ioa_ix_sh_t *sh, ngx_log_t *log);
static ngx_int_t ngx_ioa_ix_set_vec(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in);


static ngx_ioa_ix_ctx_t  *ngx_ioa_ix_zone_ctx;


/* ioa_discovery_zone: created unless "off" */

char *
ngx_ioa_index_init_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf)
{
    ngx_str_t          name;
    ngx_ioa_ix_ctx_t  *ctx;

    if (mcf->index_zone_size == NGX_CONF_UNSET_SIZE) {
        mcf->index_zone_size = 256 * 1024 * 1024;
    }

    if (mcf->index_zone_size == 0) {
        mcf->index_zone = NULL;
        return NGX_CONF_OK;
    }

    if (mcf->index_zone_size < 64 * ngx_pagesize) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_discovery_zone\" must be at least %uz "
                           "bytes", 64 * ngx_pagesize);
        return NGX_CONF_ERROR;
    }

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_ix_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "ioa_discovery");

    mcf->index_zone = ngx_shared_memory_add(cf, &name, mcf->index_zone_size,
                                            NGX_IOA_SHM_TAG);
    if (mcf->index_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    mcf->index_zone->init = ngx_ioa_ix_init_zone;
    mcf->index_zone->data = ctx;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_ioa_ix_init_zone(ngx_shm_zone_t *zone, void *data)
{
    ngx_ioa_ix_ctx_t  *octx = data;

    size_t             len;
    ngx_ioa_ix_sh_t   *sh;
    ngx_ioa_ix_ctx_t  *ctx;

    ctx = zone->data;

    if (octx) {
        /* a reload with the same size: the index is kept, and the new
         * keeper refreshes it (ngx_ioa_index_sync.c) */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) zone->shm.addr;

    if (zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    sh = ngx_slab_calloc(ctx->shpool, sizeof(ngx_ioa_ix_sh_t));
    if (sh == NULL) {
        return NGX_ERROR;
    }

    ctx->sh = sh;
    ctx->shpool->data = sh;

    sh->agents_size = 1024;
    sh->agents = ngx_slab_calloc(ctx->shpool,
                                 sh->agents_size * sizeof(void *));
    sh->terms_size = 4096;
    sh->terms = ngx_slab_calloc(ctx->shpool, sh->terms_size * sizeof(void *));

    if (sh->agents == NULL || sh->terms == NULL) {
        return NGX_ERROR;
    }

    len = sizeof(" in ioa_discovery_zone \"\"") + zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in ioa_discovery_zone \"%V\"%Z",
                &zone->shm.name);

    /* running out is handled (state FULL) and said once by us */
    ctx->shpool->log_nomem = 0;

    return NGX_OK;
}


ngx_ioa_ix_ctx_t *
ngx_ioa_ix_ctx(void)
{
    ngx_ioa_main_conf_t  *mcf;

    if (ngx_ioa_ix_zone_ctx == NULL) {
        mcf = ngx_ioa_main_conf();

        if (mcf == NULL || mcf->index_zone == NULL) {
            return NULL;
        }

        ngx_ioa_ix_zone_ctx = mcf->index_zone->data;
    }

    return ngx_ioa_ix_zone_ctx;
}


/* the index answers queries */

ngx_uint_t
ngx_ioa_index_usable(void)
{
    ngx_ioa_ix_ctx_t  *ctx;

    ctx = ngx_ioa_ix_ctx();

    return ctx != NULL && ctx->sh->state == NGX_IOA_IX_READY;
}


void
ngx_ioa_index_exit_process(void)
{
    ngx_ioa_ix_zone_ctx = NULL;
}


/* only the keeper allocates, under the write lock */

static void *
ngx_ioa_ix_alloc(size_t size)
{
    return ngx_slab_alloc_locked(ngx_ioa_ix_zone_ctx->shpool, size);
}


static void
ngx_ioa_ix_free(void *p)
{
    if (p) {
        ngx_slab_free_locked(ngx_ioa_ix_zone_ctx->shpool, p);
    }
}


/* a < b in byte order, a prefix first: the order of Redis's sorted sets,
 * which retrieve.lua's ties follow */

ngx_int_t
ngx_ioa_ix_before(u_char *a, size_t alen, u_char *b, size_t blen)
{
    int  c;

    c = ngx_memcmp(a, b, ngx_min(alen, blen));

    return c < 0 || (c == 0 && alen < blen);
}


ngx_ioa_ix_agent_t *
ngx_ioa_ix_agent(ngx_ioa_ix_sh_t *sh, u_char *name, size_t len)
{
    uint32_t             hash;
    ngx_ioa_ix_agent_t  *a;

    hash = ngx_murmur_hash2(name, len);

    for (a = sh->agents[hash & (sh->agents_size - 1)]; a; a = a->next) {
        if (a->hash == hash && a->name_len == len
            && ngx_memcmp(a->text, name, len) == 0)
        {
            return a;
        }
    }

    return NULL;
}


ngx_ioa_ix_term_t *
ngx_ioa_ix_term(ngx_ioa_ix_sh_t *sh, u_char *text, size_t len)
{
    uint32_t            hash;
    ngx_ioa_ix_term_t  *t;

    hash = ngx_murmur_hash2(text, len);

    for (t = sh->terms[hash & (sh->terms_size - 1)]; t; t = t->next) {
        if (t->hash == hash && t->len == len
            && ngx_memcmp(t->text, text, len) == 0)
        {
            return t;
        }
    }

    return NULL;
}


/* the latest expiry of any holder: online while it lies ahead (the online
 * zset's score, which presence.lua keeps the same way) */

int64_t
ngx_ioa_ix_online_until(ngx_ioa_ix_agent_t *a)
{
    int64_t     until;
    ngx_uint_t  i;

    until = 0;

    for (i = 0; i < a->npairs; i++) {
        if (a->pairs[i].expiry > until) {
            until = a->pairs[i].expiry;
        }
    }

    return until;
}


/* hash tables double when they hold as many entries as buckets */

static ngx_int_t
ngx_ioa_ix_grow_agents(ngx_ioa_ix_sh_t *sh)
{
    ngx_uint_t           i, size;
    ngx_ioa_ix_agent_t  *a, *next, **buckets;

    size = sh->agents_size * 2;

    buckets = ngx_ioa_ix_alloc(size * sizeof(void *));
    if (buckets == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(buckets, size * sizeof(void *));

    for (i = 0; i < sh->agents_size; i++) {
        for (a = sh->agents[i]; a; a = next) {
            next = a->next;
            a->next = buckets[a->hash & (size - 1)];
            buckets[a->hash & (size - 1)] = a;
        }
    }

    ngx_ioa_ix_free(sh->agents);
    sh->agents = buckets;
    sh->agents_size = size;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ix_grow_terms(ngx_ioa_ix_sh_t *sh)
{
    ngx_uint_t          i, size;
    ngx_ioa_ix_term_t  *t, *next, **buckets;

    size = sh->terms_size * 2;

    buckets = ngx_ioa_ix_alloc(size * sizeof(void *));
    if (buckets == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(buckets, size * sizeof(void *));

    for (i = 0; i < sh->terms_size; i++) {
        for (t = sh->terms[i]; t; t = next) {
            next = t->next;
            t->next = buckets[t->hash & (size - 1)];
            buckets[t->hash & (size - 1)] = t;
        }
    }

    ngx_ioa_ix_free(sh->terms);
    sh->terms = buckets;
    sh->terms_size = size;

    return NGX_OK;
}


static ngx_ioa_ix_term_t *
ngx_ioa_ix_term_add(ngx_ioa_ix_sh_t *sh, u_char *text, size_t len)
{
    ngx_ioa_ix_term_t  *t;

    t = ngx_ioa_ix_term(sh, text, len);
    if (t) {
        return t;
    }

    if (sh->nterms >= sh->terms_size && ngx_ioa_ix_grow_terms(sh) != NGX_OK)
    {
        return NULL;
    }

    t = ngx_ioa_ix_alloc(offsetof(ngx_ioa_ix_term_t, text) + len);
    if (t == NULL) {
        return NULL;
    }

    ngx_memzero(t, offsetof(ngx_ioa_ix_term_t, text));
    ngx_memcpy(t->text, text, len);
    t->len = (uint16_t) len;
    t->hash = ngx_murmur_hash2(text, len);

    t->next = sh->terms[t->hash & (sh->terms_size - 1)];
    sh->terms[t->hash & (sh->terms_size - 1)] = t;
    sh->nterms++;

    return t;
}


static void
ngx_ioa_ix_term_drop(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t)
{
    uint32_t            i;
    ngx_ioa_ix_term_t **pp;

    for (pp = &sh->terms[t->hash & (sh->terms_size - 1)]; *pp;
         pp = &(*pp)->next)
    {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }

    for (i = 0; i < t->nchunks; i++) {
        ngx_ioa_ix_free(t->chunks[i]);
    }

    ngx_ioa_ix_free(t->chunks);
    ngx_ioa_ix_free(t);
    sh->nterms--;
}


/*
 * Postings.  The order: length ascending, tf descending, name ascending;
 * the key of an agent's own posting is compared with its name (a, given
 * because the posting may not be in the list yet).
 */

static ngx_int_t
ngx_ioa_ix_post_cmp(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_post_t *p,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a)
{
    ngx_ioa_ix_agent_t  *b;

    if (p->len != key->len) {
        return p->len < key->len ? -1 : 1;
    }

    if (p->tf != key->tf) {
        return p->tf > key->tf ? -1 : 1;
    }

    if (p->slot == key->slot) {
        return 0;
    }

    b = sh->slots[p->slot];

    return ngx_ioa_ix_before(b->text, b->name_len, a->text, a->name_len)
           ? -1 : 1;
}


/* the chunk a key belongs in: the first whose last posting sorts at or
 * after it, else the last chunk */

static uint32_t
ngx_ioa_ix_chunk_for(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a)
{
    uint32_t             lo, hi, mid;
    ngx_ioa_ix_chunk_t  *c;

    lo = 0;
    hi = t->nchunks - 1;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        c = t->chunks[mid];

        if (ngx_ioa_ix_post_cmp(sh, &c->p[c->n - 1], key, a) >= 0) {
            hi = mid;

        } else {
            lo = mid + 1;
        }
    }

    return lo;
}


/* the first position in c that sorts at or after key */

static uint32_t
ngx_ioa_ix_in_chunk(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_chunk_t *c,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a)
{
    uint32_t  lo, hi, mid;

    lo = 0;
    hi = c->n;

    while (lo < hi) {
        mid = (lo + hi) / 2;

        if (ngx_ioa_ix_post_cmp(sh, &c->p[mid], key, a) >= 0) {
            hi = mid;

        } else {
            lo = mid + 1;
        }
    }

    return lo;
}


static ngx_ioa_ix_chunk_t *
ngx_ioa_ix_chunk_alloc(uint32_t cap)
{
    ngx_ioa_ix_chunk_t  *c;

    c = ngx_ioa_ix_alloc(offsetof(ngx_ioa_ix_chunk_t, p)
                         + cap * sizeof(ngx_ioa_ix_post_t));
    if (c == NULL) {
        return NULL;
    }

    c->n = 0;
    c->cap = (uint16_t) cap;

    return c;
}


/* room for one more chunk pointer after index at */

static ngx_int_t
ngx_ioa_ix_chunk_insert(ngx_ioa_ix_term_t *t, uint32_t at,
    ngx_ioa_ix_chunk_t *c)
{
    uint32_t              cap;
    ngx_ioa_ix_chunk_t  **chunks;

    if (t->nchunks == t->chunks_cap) {
        cap = t->chunks_cap ? t->chunks_cap * 2 : 1;

        chunks = ngx_ioa_ix_alloc(cap * sizeof(void *));
        if (chunks == NULL) {
            return NGX_ERROR;
        }

        if (t->nchunks) {
            ngx_memcpy(chunks, t->chunks, t->nchunks * sizeof(void *));
        }

        ngx_ioa_ix_free(t->chunks);
        t->chunks = chunks;
        t->chunks_cap = cap;
    }

    ngx_memmove(&t->chunks[at + 1], &t->chunks[at],
                (t->nchunks - at) * sizeof(void *));
    t->chunks[at] = c;
    t->nchunks++;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ix_post_add(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a)
{
    uint32_t             ci, i, half, cap;
    ngx_ioa_ix_chunk_t  *c, *n;

    if (t->nchunks == 0) {
        c = ngx_ioa_ix_chunk_alloc(2);
        if (c == NULL || ngx_ioa_ix_chunk_insert(t, 0, c) != NGX_OK) {
            ngx_ioa_ix_free(c);
            return NGX_ERROR;
        }
    }

    ci = ngx_ioa_ix_chunk_for(sh, t, key, a);
    c = t->chunks[ci];
    i = ngx_ioa_ix_in_chunk(sh, c, key, a);

    if (c->n == c->cap) {

        if (c->cap < NGX_IOA_IX_CHUNK) {
            /* a small list grows by doubling */
            cap = ngx_min((uint32_t) c->cap * 2, NGX_IOA_IX_CHUNK);

            n = ngx_ioa_ix_chunk_alloc(cap);
            if (n == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(n->p, c->p, c->n * sizeof(ngx_ioa_ix_post_t));
            n->n = c->n;
            t->chunks[ci] = n;
            ngx_ioa_ix_free(c);
            c = n;

        } else {
            /* a full chunk splits in two halves */
            n = ngx_ioa_ix_chunk_alloc(NGX_IOA_IX_CHUNK);
            if (n == NULL) {
                return NGX_ERROR;
            }

            if (ngx_ioa_ix_chunk_insert(t, ci + 1, n) != NGX_OK) {
                ngx_ioa_ix_free(n);
                return NGX_ERROR;
            }

            half = c->n / 2;
            n->n = (uint16_t) (c->n - half);
            ngx_memcpy(n->p, &c->p[half], n->n * sizeof(ngx_ioa_ix_post_t));
            c->n = (uint16_t) half;

            if (i > half) {
                c = n;
                i -= half;
            }
        }
    }

    ngx_memmove(&c->p[i + 1], &c->p[i], (c->n - i) * sizeof(ngx_ioa_ix_post_t));
    c->p[i] = *key;
    c->n++;
    t->df++;

    return NGX_OK;
}


static void
ngx_ioa_ix_post_del(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_term_t *t,
    ngx_ioa_ix_post_t *key, ngx_ioa_ix_agent_t *a)
{
    uint32_t             ci, i;
    ngx_ioa_ix_chunk_t  *c;

    if (t->nchunks == 0) {
        return;
    }

    ci = ngx_ioa_ix_chunk_for(sh, t, key, a);
    c = t->chunks[ci];
    i = ngx_ioa_ix_in_chunk(sh, c, key, a);

    if (i == c->n || c->p[i].slot != key->slot) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "ioa discovery index: a posting of \"%*s\" is missing",
                      (size_t) a->name_len, a->text);
        return;
    }

    ngx_memmove(&c->p[i], &c->p[i + 1],
                (c->n - i - 1) * sizeof(ngx_ioa_ix_post_t));
    c->n--;
    t->df--;

    if (c->n == 0) {
        ngx_ioa_ix_free(c);
        ngx_memmove(&t->chunks[ci], &t->chunks[ci + 1],
                    (t->nchunks - ci - 1) * sizeof(void *));
        t->nchunks--;
    }
}


/*
 * Positions, for the ranking: a posting is (chunk, offset); a block is the
 * run of postings with one (length, tf).
 */

ngx_ioa_ix_post_t *
ngx_ioa_ix_at(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos)
{
    return &t->chunks[pos->chunk]->p[pos->off];
}


ngx_int_t
ngx_ioa_ix_next(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos)
{
    if (++pos->off < t->chunks[pos->chunk]->n) {
        return NGX_OK;
    }

    pos->off = 0;

    return ++pos->chunk < t->nchunks ? NGX_OK : NGX_DONE;
}


/* where the block at pos ends (the end of the list: chunk = nchunks) and
 * how many postings it has */

void
ngx_ioa_ix_block_end(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos,
    ngx_ioa_ix_pos_t *end, uint32_t *count)
{
    uint16_t             len, tf;
    uint32_t             lo, hi, mid, ci, n;
    ngx_ioa_ix_chunk_t  *c;

    c = t->chunks[pos->chunk];
    len = c->p[pos->off].len;
    tf = c->p[pos->off].tf;

#define ngx_ioa_ix_same(q)  ((q)->len == len && (q)->tf == tf)

    ci = pos->chunk;

    if (ngx_ioa_ix_same(&c->p[c->n - 1])) {
        /* past this chunk: the first later chunk that ends elsewhere */
        n = c->n - pos->off;
        lo = ci + 1;
        hi = t->nchunks;

        while (lo < hi) {
            mid = (lo + hi) / 2;
            c = t->chunks[mid];

            if (ngx_ioa_ix_same(&c->p[c->n - 1])) {
                lo = mid + 1;

            } else {
                hi = mid;
            }
        }

        for (ci = pos->chunk + 1; ci < lo; ci++) {
            n += t->chunks[ci]->n;
        }

        if (lo == t->nchunks) {
            end->chunk = lo;
            end->off = 0;
            *count = n;
            return;
        }

        c = t->chunks[lo];
        ci = lo;
        lo = 0;

    } else {
        n = 0;
        lo = pos->off;
    }

    hi = c->n - 1;

    while (lo < hi) {
        mid = (lo + hi) / 2;

        if (ngx_ioa_ix_same(&c->p[mid])) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

#undef ngx_ioa_ix_same

    end->chunk = ci;
    end->off = lo;
    *count = n + lo - (ci == pos->chunk ? pos->off : 0);
}


/*
 * Writing an agent: the whole state Redis has (index_fetch.lua), put in
 * place of what the index had.
 */

ngx_int_t
ngx_ioa_ix_put(ngx_ioa_ix_input_t *in, ngx_log_t *log)
{
    uint32_t             len;
    ngx_int_t            rc, same;
    ngx_pool_t          *pool;
    ngx_array_t          doc;
    ngx_ioa_ix_sh_t     *sh;
    ngx_ioa_ix_ctx_t    *ctx;
    ngx_ioa_ix_agent_t  *a;

    ctx = ngx_ioa_ix_ctx();
    sh = ctx->sh;

    if (sh->state == NGX_IOA_IX_FULL || sh->state == NGX_IOA_IX_BROKEN) {
        return NGX_ERROR;
    }

    /* the same text is the same document: most puts (a record, a
     * presence read back, the same agent read by this instance twice) need
     * no tokenizing and no postings touched */
    if (ngx_ioa_ix_rlock(sh) != NGX_OK) {
        return NGX_ERROR;
    }

    a = ngx_ioa_ix_agent(sh, in->name.data, in->name.len);
    same = (a != NULL && ngx_ioa_ix_same_text(a, in));
    ngx_ioa_ix_unlock(sh);

    if (same) {
        if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
            return NGX_ERROR;
        }

        a = ngx_ioa_ix_agent(sh, in->name.data, in->name.len);

        if (a && ngx_ioa_ix_same_text(a, in)) {
            rc = ngx_ioa_ix_set_rest(sh, a, in);
            ngx_ioa_ix_unlock(sh);

            if (rc != NGX_OK) {
                goto fail;
            }

            return NGX_OK;
        }

        /* changed meanwhile (another worker wrote it): the long way */
        ngx_ioa_ix_unlock(sh);
    }

    pool = ngx_create_pool(4096, log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_ioa_ix_document(pool, in, &doc, &len);

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "ioa discovery index: \"%V\" has more than %d tokens "
                      "and is not indexed", &in->name, NGX_IOA_IX_LEN_MAX);
        ngx_ioa_ix_delete(&in->name);
        ngx_destroy_pool(pool);
        return NGX_OK;
    }

    if (rc != NGX_OK) {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    a = ngx_ioa_ix_agent(sh, in->name.data, in->name.len);

    if (a == NULL) {
        a = ngx_ioa_ix_agent_add(sh, &in->name);
        if (a == NULL) {
            goto full;
        }
    }

    if (ngx_ioa_ix_set_text(a, in) != NGX_OK) {
        goto full;
    }

    if (!ngx_ioa_ix_same_document(a, &doc, len)) {
        ngx_ioa_ix_unpost(sh, a);

        if (ngx_ioa_ix_repost(sh, a, &doc, len) != NGX_OK) {
            goto full;
        }
    }

    if (ngx_ioa_ix_set_rest(sh, a, in) != NGX_OK) {
        goto full;
    }

    ngx_ioa_ix_unlock(sh);
    ngx_destroy_pool(pool);

    return NGX_OK;

fail:

    /* the same-text path ran out of memory: drop the agent as below */
    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        return NGX_ERROR;
    }

    pool = NULL;

full:

    a = ngx_ioa_ix_agent(sh, in->name.data, in->name.len);

    if (a) {
        ngx_ioa_ix_agent_drop(sh, a);
    }

    ngx_ioa_ix_full(sh, log);
    ngx_ioa_ix_unlock(sh);

    if (pool) {
        ngx_destroy_pool(pool);
    }

    return NGX_ERROR;
}


/* everything of an agent but its text and postings */

static ngx_int_t
ngx_ioa_ix_set_rest(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in)
{
    if (ngx_ioa_ix_set_pairs(sh, a, in) != NGX_OK
        || ngx_ioa_ix_set_vec(sh, a, in) != NGX_OK)
    {
        return NGX_ERROR;
    }

    a->protocol = (uint8_t) in->protocol;
    ngx_memcpy(a->rec, in->rec, sizeof(a->rec));
    a->latency_ms = in->latency_ms;
    a->timed = in->timed;
    a->gen = sh->gen;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ix_same_text(ngx_ioa_ix_agent_t *a, ngx_ioa_ix_input_t *in)
{
    u_char  *p;

    p = a->text + a->name_len;

    return a->type_len == in->type.len && a->desc_len == in->desc.len
           && a->tags_len == in->tags.len
           && ngx_memcmp(p, in->type.data, in->type.len) == 0
           && ngx_memcmp(p + a->type_len, in->desc.data, in->desc.len) == 0
           && ngx_memcmp(p + a->type_len + a->desc_len, in->tags.data,
                         in->tags.len) == 0;
}


static void
ngx_ioa_ix_full(ngx_ioa_ix_sh_t *sh, ngx_log_t *log)
{
    if (sh->state != NGX_IOA_IX_FULL) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ioa discovery index: ioa_discovery_zone is full at "
                      "%ui agents; discovery is answered by Redis (slower) "
                      "until nginx runs with a larger zone", sh->nagents);
        sh->state = NGX_IOA_IX_FULL;
    }
}


/* a term of the document and how often it occurs */
typedef struct {
    ngx_str_t                 text;
    uint32_t                  tf;
} ngx_ioa_ix_dterm_t;


static int ngx_libc_cdecl
ngx_ioa_ix_str_cmp(const void *one, const void *two)
{
    const ngx_str_t  *a = one, *b = two;

    return ngx_ioa_ix_before(a->data, a->len, b->data, b->len) ? -1
           : (a->len == b->len && ngx_memcmp(a->data, b->data, a->len) == 0)
             ? 0 : 1;
}


/* the document register.lua indexes: the terms of desc, then those of
 * every tag; its distinct terms with their tf, and its length */

static ngx_int_t
ngx_ioa_ix_document(ngx_pool_t *pool, ngx_ioa_ix_input_t *in,
    ngx_array_t *terms, uint32_t *len)
{
    u_char               *buf;
    size_t                i, ntexts;
    yajl_val              tags, v;
    ngx_str_t            *tok, *toks, text;
    ngx_array_t           all;
    const u_char         *p, *end;
    ngx_ioa_error_t       err;
    ngx_ioa_ix_dterm_t   *dt;

    if (ngx_array_init(&all, pool, 16, sizeof(ngx_str_t)) != NGX_OK
        || ngx_array_init(terms, pool, 16, sizeof(ngx_ioa_ix_dterm_t))
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the module wrote tags as a JSON array of strings at /register */
    tags = NULL;

    if (in->tags.len) {
        tags = ngx_ioa_json_parse(pool, in->tags.data, in->tags.len, 2, &err);
    }

    ntexts = 1 + ((tags && YAJL_IS_ARRAY(tags)) ? tags->u.array.len : 0);

    for (i = 0; i < ntexts; i++) {
        if (i == 0) {
            text = in->desc;

        } else {
            v = tags->u.array.values[i - 1];

            if (ngx_ioa_json_string(v, &text) != NGX_OK) {
                continue;
            }
        }

        /* a term is never longer than its word: the text's size will do
         * for all its terms, written one after the other */
        buf = ngx_pnalloc(pool, text.len + 1);
        if (buf == NULL) {
            return NGX_ERROR;
        }

        p = text.data;
        end = p + text.len;

        for ( ;; ) {
            tok = ngx_array_push(&all);
            if (tok == NULL) {
                return NGX_ERROR;
            }

            tok->data = buf;
            tok->len = ioa_token_next(&p, end, buf);

            if (tok->len == 0) {
                all.nelts--;
                break;
            }

            buf += tok->len;
        }
    }

    if (all.nelts > NGX_IOA_IX_LEN_MAX) {
        return NGX_DECLINED;
    }

    *len = (uint32_t) all.nelts;
    toks = all.elts;

    ngx_qsort(toks, all.nelts, sizeof(ngx_str_t), ngx_ioa_ix_str_cmp);

    dt = NULL;

    for (i = 0; i < all.nelts; i++) {
        if (dt && dt->text.len == toks[i].len
            && ngx_memcmp(dt->text.data, toks[i].data, toks[i].len) == 0)
        {
            dt->tf++;
            continue;
        }

        dt = ngx_array_push(terms);
        if (dt == NULL) {
            return NGX_ERROR;
        }

        dt->text = toks[i];
        dt->tf = 1;
    }

    return NGX_OK;
}


/* the agent's postings are those of this document already */

static ngx_int_t
ngx_ioa_ix_same_document(ngx_ioa_ix_agent_t *a, ngx_array_t *doc,
    uint32_t len)
{
    ngx_uint_t           i, j;
    ngx_ioa_ix_dterm_t  *dt;

    if (a->len != len || a->nterms != doc->nelts || a->terms == NULL) {
        return a->nterms == 0 && doc->nelts == 0 && a->len == len;
    }

    dt = doc->elts;

    for (i = 0; i < doc->nelts; i++) {
        for (j = 0; j < a->nterms; j++) {
            if (a->terms[j].term->len == dt[i].text.len
                && ngx_memcmp(a->terms[j].term->text, dt[i].text.data,
                              dt[i].text.len) == 0)
            {
                break;
            }
        }

        if (j == a->nterms || a->terms[j].tf != dt[i].tf) {
            return 0;
        }
    }

    return 1;
}


static void
ngx_ioa_ix_unpost(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a)
{
    ngx_uint_t          i;
    ngx_ioa_ix_post_t   key;
    ngx_ioa_ix_term_t  *t;

    for (i = 0; i < a->nterms; i++) {
        t = a->terms[i].term;

        key.slot = a->slot;
        key.len = (uint16_t) a->len;
        key.tf = (uint16_t) a->terms[i].tf;
        key.sig = a->sig;

        ngx_ioa_ix_post_del(sh, t, &key, a);

        if (t->df == 0) {
            ngx_ioa_ix_term_drop(sh, t);
        }
    }

    ngx_ioa_ix_free(a->terms);
    a->terms = NULL;
    a->nterms = 0;

    sh->total_len -= a->len;
    a->len = 0;
}


static int ngx_libc_cdecl
ngx_ioa_ix_tref_cmp(const void *one, const void *two)
{
    const ngx_ioa_ix_tref_t  *a = one, *b = two;

    return (a->term < b->term) ? -1 : (a->term > b->term);
}


static ngx_int_t
ngx_ioa_ix_repost(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_array_t *doc, uint32_t len)
{
    ngx_uint_t           i;
    ngx_ioa_ix_post_t    key;
    ngx_ioa_ix_term_t   *t;
    ngx_ioa_ix_dterm_t  *dt;

    a->len = len;
    sh->total_len += len;

    dt = doc->elts;
    a->sig = 0;

    for (i = 0; i < doc->nelts; i++) {
        a->sig |= ngx_ioa_ix_bit(ngx_murmur_hash2(dt[i].text.data,
                                                  dt[i].text.len));
    }

    if (doc->nelts == 0) {
        return NGX_OK;
    }

    a->terms = ngx_ioa_ix_alloc(doc->nelts * sizeof(ngx_ioa_ix_tref_t));
    if (a->terms == NULL) {
        return NGX_ERROR;
    }

    dt = doc->elts;

    for (i = 0; i < doc->nelts; i++) {
        t = ngx_ioa_ix_term_add(sh, dt[i].text.data, dt[i].text.len);
        if (t == NULL) {
            return NGX_ERROR;
        }

        key.slot = a->slot;
        key.len = (uint16_t) len;
        key.tf = (uint16_t) dt[i].tf;
        key.sig = a->sig;

        if (ngx_ioa_ix_post_add(sh, t, &key, a) != NGX_OK) {
            if (t->df == 0) {
                ngx_ioa_ix_term_drop(sh, t);
            }

            return NGX_ERROR;
        }

        /* counted as it goes, so that a failure half-way unposts exactly
         * what was posted */
        a->terms[a->nterms].term = t;
        a->terms[a->nterms].tf = dt[i].tf;
        a->nterms++;
    }

    ngx_qsort(a->terms, a->nterms, sizeof(ngx_ioa_ix_tref_t),
              ngx_ioa_ix_tref_cmp);

    return NGX_OK;
}


/* desc's embedding, if it comes from the model semantic discovery uses
 * now (another model's vectors are not comparable: the agent waits to be
 * embedded again); Redis holds float32 little-endian, as x86-64 and arm64
 * do in memory */

static ngx_int_t
ngx_ioa_ix_set_vec(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in)
{
    uint32_t              dim;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();
    dim = (uint32_t) (in->vec.len / sizeof(float));

    if (mcf->embed_uri.len == 0 || dim == 0
        || in->vec.len % sizeof(float) != 0
        || in->vec_model.len != mcf->embed_model.len
        || ngx_memcmp(in->vec_model.data, mcf->embed_model.data,
                      in->vec_model.len) != 0)
    {
        if (a->vec) {
            ngx_ioa_ix_free(a->vec);
            a->vec = NULL;
            a->dim = 0;
            sh->nvec--;
        }

        return NGX_OK;
    }

    if (a->vec && a->dim != dim) {
        ngx_ioa_ix_free(a->vec);
        a->vec = NULL;
        sh->nvec--;
    }

    if (a->vec == NULL) {
        a->vec = ngx_ioa_ix_alloc(in->vec.len);
        if (a->vec == NULL) {
            return NGX_ERROR;
        }

        sh->nvec++;
    }

    ngx_memcpy(a->vec, in->vec.data, in->vec.len);
    a->dim = dim;

    return NGX_OK;
}


/* name, type, desc, tags in one allocation; the name never changes */

static ngx_int_t
ngx_ioa_ix_set_text(ngx_ioa_ix_agent_t *a, ngx_ioa_ix_input_t *in)
{
    u_char  *p, *text;
    size_t   size;

    if (ngx_ioa_ix_same_text(a, in)) {
        return NGX_OK;
    }

    size = in->name.len + in->type.len + in->desc.len + in->tags.len;

    text = ngx_ioa_ix_alloc(size ? size : 1);
    if (text == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(text, in->name.data, in->name.len);
    p = ngx_cpymem(p, in->type.data, in->type.len);
    p = ngx_cpymem(p, in->desc.data, in->desc.len);
    ngx_memcpy(p, in->tags.data, in->tags.len);

    ngx_ioa_ix_free(a->text);
    a->text = text;
    a->type_len = (uint16_t) in->type.len;
    a->desc_len = (uint32_t) in->desc.len;
    a->tags_len = (uint32_t) in->tags.len;

    return NGX_OK;
}


static ngx_ioa_ix_agent_t *
ngx_ioa_ix_agent_add(ngx_ioa_ix_sh_t *sh, ngx_str_t *name)
{
    uint32_t              cap;
    ngx_ioa_ix_agent_t   *a, **slots;

    if (sh->nagents >= sh->agents_size && ngx_ioa_ix_grow_agents(sh) != NGX_OK)
    {
        return NULL;
    }

    if (sh->nfree == 0 && sh->nslots == sh->slots_cap) {
        cap = sh->slots_cap ? sh->slots_cap * 2 : 1024;

        slots = ngx_ioa_ix_alloc(cap * sizeof(void *));
        if (slots == NULL) {
            return NULL;
        }

        if (sh->nslots) {
            ngx_memcpy(slots, sh->slots, sh->nslots * sizeof(void *));
        }

        ngx_ioa_ix_free(sh->slots);
        sh->slots = slots;
        sh->slots_cap = cap;
    }

    a = ngx_ioa_ix_alloc(sizeof(ngx_ioa_ix_agent_t));
    if (a == NULL) {
        return NULL;
    }

    ngx_memzero(a, sizeof(ngx_ioa_ix_agent_t));

    a->text = ngx_ioa_ix_alloc(name->len);
    if (a->text == NULL) {
        ngx_ioa_ix_free(a);
        return NULL;
    }

    ngx_memcpy(a->text, name->data, name->len);
    a->name_len = (uint16_t) name->len;
    a->hash = ngx_murmur_hash2(name->data, name->len);
    a->slot = sh->nfree ? sh->free_slots[--sh->nfree] : sh->nslots++;
    sh->slots[a->slot] = a;

    a->next = sh->agents[a->hash & (sh->agents_size - 1)];
    sh->agents[a->hash & (sh->agents_size - 1)] = a;
    sh->nagents++;

    return a;
}


static void
ngx_ioa_ix_agent_drop(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a)
{
    uint32_t              cap, *free_slots;
    ngx_uint_t            i;
    ngx_ioa_ix_agent_t  **pp;

    ngx_ioa_ix_unpost(sh, a);

    for (i = 0; i < a->npairs; i++) {
        sh->holders[a->pairs[i].holder].refs--;
    }

    for (pp = &sh->agents[a->hash & (sh->agents_size - 1)]; *pp;
         pp = &(*pp)->next)
    {
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    }

    sh->slots[a->slot] = NULL;

    if (sh->nfree == sh->free_cap) {
        cap = sh->free_cap ? sh->free_cap * 2 : 256;
        free_slots = ngx_ioa_ix_alloc(cap * sizeof(uint32_t));

        if (free_slots) {
            if (sh->nfree) {
                ngx_memcpy(free_slots, sh->free_slots,
                           sh->nfree * sizeof(uint32_t));
            }

            ngx_ioa_ix_free(sh->free_slots);
            sh->free_slots = free_slots;
            sh->free_cap = cap;
        }
    }

    /* a slot that cannot be listed for reuse is simply not reused */
    if (sh->nfree < sh->free_cap) {
        sh->free_slots[sh->nfree++] = a->slot;
    }

    if (a->vec) {
        ngx_ioa_ix_free(a->vec);
        sh->nvec--;
    }

    ngx_ioa_ix_free(a->pairs);
    ngx_ioa_ix_free(a->text);
    ngx_ioa_ix_free(a);
    sh->nagents--;
}


void
ngx_ioa_ix_delete(ngx_str_t *name)
{
    ngx_ioa_ix_sh_t     *sh;
    ngx_ioa_ix_agent_t  *a;

    sh = ngx_ioa_ix_ctx()->sh;

    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        return;
    }

    a = ngx_ioa_ix_agent(sh, name->data, name->len);

    if (a) {
        ngx_ioa_ix_agent_drop(sh, a);
    }

    ngx_ioa_ix_unlock(sh);
}


/*
 * Presence: the (holder, expiry) pairs of presence.lua's B..'holders:'..name,
 * mirrored from its events (ngx_ioa_index_sync.c) or read whole with the
 * agent.  A holder is one nginx worker somewhere: the index keeps their
 * names once, and an agent refers to them by number.
 */

static ngx_int_t
ngx_ioa_ix_holder(ngx_ioa_ix_sh_t *sh, ngx_str_t *name)
{
    ngx_uint_t            i, free;
    ngx_ioa_ix_holder_t  *h;

    if (name->len == 0 || name->len > NGX_IOA_IX_HOLDER_LEN) {
        return NGX_ERROR;
    }

    free = NGX_IOA_IX_HOLDERS;

    for (i = 0; i < sh->nholders; i++) {
        h = &sh->holders[i];

        if (h->len == name->len && ngx_memcmp(h->name, name->data, h->len) == 0)
        {
            return i;
        }

        if (h->refs == 0 && free == NGX_IOA_IX_HOLDERS) {
            free = i;
        }
    }

    if (free == NGX_IOA_IX_HOLDERS && sh->nholders == NGX_IOA_IX_HOLDERS) {
        /* every slot named by some pair: most are workers gone long ago
         * (each restart is a new holder) whose expired pairs stayed with
         * agents nothing touched since; drop those and look again */
        ngx_ioa_ix_prune_pairs(sh);

        for (i = 0; i < sh->nholders; i++) {
            if (sh->holders[i].refs == 0) {
                free = i;
                break;
            }
        }

        if (free == NGX_IOA_IX_HOLDERS) {
            return NGX_ERROR;
        }
    }

    if (free == NGX_IOA_IX_HOLDERS) {
        free = sh->nholders++;
    }

    h = &sh->holders[free];
    ngx_memcpy(h->name, name->data, name->len);
    h->len = (uint16_t) name->len;
    h->refs = 0;

    return free;
}


/* pairs whose expiry has passed count for nothing (online is "some
 * expiry ahead"): every agent's are dropped, which frees the holders only
 * they named */

static void
ngx_ioa_ix_prune_pairs(ngx_ioa_ix_sh_t *sh)
{
    int64_t   now;
    uint32_t  slot;

    now = ngx_ioa_now_ms();

    for (slot = 0; slot < sh->nslots; slot++) {
        if (sh->slots[slot]) {
            ngx_ioa_ix_prune_agent(sh, sh->slots[slot], now);
        }
    }
}


static void
ngx_ioa_ix_prune_agent(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a, int64_t now)
{
    ngx_uint_t  i;

    for (i = 0; i < a->npairs; /* void */) {
        if (a->pairs[i].expiry <= now) {
            sh->holders[a->pairs[i].holder].refs--;
            a->pairs[i] = a->pairs[--a->npairs];
            continue;
        }

        i++;
    }
}


static ngx_int_t
ngx_ioa_ix_pair(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a, ngx_uint_t holder,
    int64_t expiry)
{
    ngx_uint_t          i, cap;
    ngx_ioa_ix_pair_t  *pairs;

    for (i = 0; i < a->npairs; i++) {
        if (a->pairs[i].holder == holder) {
            a->pairs[i].expiry = expiry;
            return NGX_OK;
        }
    }

    if (a->npairs == a->pairs_cap) {
        /* make room from pairs of holders gone (their expiry passed) */
        ngx_ioa_ix_prune_agent(sh, a, ngx_ioa_now_ms());
    }

    if (a->npairs == a->pairs_cap) {
        cap = a->pairs_cap ? a->pairs_cap * 2 : 1;

        if (cap > 255) {
            return NGX_DECLINED;
        }

        pairs = ngx_ioa_ix_alloc(cap * sizeof(ngx_ioa_ix_pair_t));
        if (pairs == NULL) {
            return NGX_ERROR;
        }

        if (a->npairs) {
            ngx_memcpy(pairs, a->pairs, a->npairs * sizeof(ngx_ioa_ix_pair_t));
        }

        ngx_ioa_ix_free(a->pairs);
        a->pairs = pairs;
        a->pairs_cap = (uint8_t) cap;
    }

    a->pairs[a->npairs].holder = (uint16_t) holder;
    a->pairs[a->npairs].expiry = expiry;
    a->npairs++;
    sh->holders[holder].refs++;

    return NGX_OK;
}


static void
ngx_ioa_ix_unpair(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_uint_t holder)
{
    ngx_uint_t  i;

    for (i = 0; i < a->npairs; i++) {
        if (a->pairs[i].holder == holder) {
            a->pairs[i] = a->pairs[--a->npairs];
            sh->holders[holder].refs--;
            return;
        }
    }
}


static ngx_int_t
ngx_ioa_ix_set_pairs(ngx_ioa_ix_sh_t *sh, ngx_ioa_ix_agent_t *a,
    ngx_ioa_ix_input_t *in)
{
    int64_t     now;
    ngx_int_t   h;
    ngx_uint_t  i;

    while (a->npairs) {
        ngx_ioa_ix_unpair(sh, a, a->pairs[0].holder);
    }

    now = ngx_ioa_now_ms();

    for (i = 0; i < in->nholders; i++) {
        if (in->expiries[i] <= now) {
            continue;   /* a holder gone: its entry waits for its key's TTL */
        }

        h = ngx_ioa_ix_holder(sh, &in->holders[i]);

        if (h == NGX_ERROR) {
            continue;
        }

        if (ngx_ioa_ix_pair(sh, a, h, in->expiries[i]) == NGX_ERROR) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* presence.lua's event: holder holds names until expiry, or (expiry 0)
 * no longer holds them; names the index does not have are not agents */

void
ngx_ioa_ix_presence(ngx_str_t *holder, int64_t expiry, ngx_str_t *names,
    ngx_uint_t n)
{
    ngx_int_t            h;
    ngx_uint_t           i;
    ngx_ioa_ix_sh_t     *sh;
    ngx_ioa_ix_agent_t  *a;

    sh = ngx_ioa_ix_ctx()->sh;

    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        return;
    }

    h = ngx_ioa_ix_holder(sh, holder);

    for (i = 0; h != NGX_ERROR && i < n; i++) {
        a = ngx_ioa_ix_agent(sh, names[i].data, names[i].len);

        if (a == NULL) {
            continue;
        }

        if (expiry > 0) {
            if (ngx_ioa_ix_pair(sh, a, h, expiry) == NGX_ERROR) {
                ngx_ioa_ix_agent_drop(sh, a);
                ngx_ioa_ix_full(sh, ngx_cycle->log);
                break;
            }

        } else {
            ngx_ioa_ix_unpair(sh, a, h);
        }
    }

    ngx_ioa_ix_unlock(sh);
}


/*
 * A refresh reads every agent from Redis again (ngx_ioa_index_sync.c):
 * those it puts carry the new generation, and at its end the agents that
 * did not come back are gone from Redis and go from the index.
 */

void
ngx_ioa_ix_refresh_start(void)
{
    ngx_ioa_ix_sh_t  *sh;

    sh = ngx_ioa_ix_ctx()->sh;

    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        return;
    }

    sh->gen++;

    if (sh->state == NGX_IOA_IX_EMPTY) {
        sh->state = NGX_IOA_IX_BUILDING;
    }

    ngx_ioa_ix_unlock(sh);
}


void
ngx_ioa_ix_refresh_end(ngx_msec_t took)
{
    uint32_t             i;
    ngx_ioa_ix_sh_t     *sh;
    ngx_ioa_ix_agent_t  *a;

    sh = ngx_ioa_ix_ctx()->sh;

    for (i = 0; i < sh->nslots; i++) {
        if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
            return;
        }

        a = sh->slots[i];

        if (a && a->gen != sh->gen) {
            ngx_ioa_ix_agent_drop(sh, a);
        }

        ngx_ioa_ix_unlock(sh);
    }

    if (ngx_ioa_ix_wlock(sh) != NGX_OK) {
        return;
    }

    if (sh->state != NGX_IOA_IX_FULL) {
        sh->state = NGX_IOA_IX_READY;
    }

    sh->build_ms = took;
    sh->built_at = ngx_ioa_now_ms();
    sh->refreshes++;

    ngx_ioa_ix_unlock(sh);
}


/* an agent as /retrieve_assistant shows it, the fields in retrieve.lua's
 * order (ngx_ioa_registry.c writes the same from Redis's reply) */

void
ngx_ioa_ix_agent_json(ngx_ioa_jbuf_t *b, ngx_ioa_ix_agent_t *a, double score,
    int64_t now, ngx_ioa_ix_parts_t *parts, const char *ranking)
{
    u_char     num[64];
    ngx_str_t  s;

    ngx_ioa_jbuf_literal(b, "{\"name\":");
    s.data = a->text;
    s.len = a->name_len;
    ngx_ioa_jbuf_str(b, &s);

    ngx_ioa_jbuf_literal(b, ",\"type\":");
    s.data += s.len;
    s.len = a->type_len;
    ngx_ioa_jbuf_str(b, &s);

    ngx_ioa_jbuf_literal(b, ",\"desc\":");
    s.data += s.len;
    s.len = a->desc_len;
    ngx_ioa_jbuf_str(b, &s);

    ngx_ioa_jbuf_literal(b, ",\"tags\":");
    s.data += s.len;
    s.len = a->tags_len;

    if (s.len) {
        ngx_ioa_jbuf_raw(b, s.data, s.len);

    } else {
        ngx_ioa_jbuf_literal(b, "[]");
    }

    /* retrieve.lua's string.format('%.4f'): libc's rounding, which
     * ngx_sprintf's "%.4f" does not reproduce */
    ngx_ioa_jbuf_literal(b, ",\"score\":");
    ngx_ioa_jbuf_raw(b, num, snprintf((char *) num, sizeof(num), "%.4f",
                                      score));

    /* semantic discovery on: how the agent got there */
    if (ranking) {
        ngx_ioa_jbuf_literal(b, ",\"ranking\":\"");
        ngx_ioa_jbuf_raw(b, (u_char *) ranking, ngx_strlen(ranking));
        ngx_ioa_jbuf_byte(b, '"');
    }

    if (parts) {
        ngx_ioa_jbuf_literal(b, ",\"bm25\":");
        ngx_ioa_jbuf_raw(b, num, snprintf((char *) num, sizeof(num), "%.4f",
                                          parts->bm25));
        ngx_ioa_jbuf_literal(b, ",\"similarity\":");
        ngx_ioa_jbuf_raw(b, num, snprintf((char *) num, sizeof(num), "%.4f",
                                          parts->similarity));
    }

    if (ngx_ioa_ix_online_until(a) > now) {
        ngx_ioa_jbuf_literal(b, ",\"online\":true");

    } else {
        ngx_ioa_jbuf_literal(b, ",\"online\":false");
    }

    if (a->protocol) {
        ngx_ioa_jbuf_literal(b, ",\"speaks_protocol\":true");

    } else {
        ngx_ioa_jbuf_literal(b, ",\"speaks_protocol\":false");
    }

    ngx_ioa_jbuf_literal(b, ",\"record\":{\"completed\":");
    ngx_ioa_jbuf_int(b, (int64_t) a->rec[0]);
    ngx_ioa_jbuf_literal(b, ",\"partial\":");
    ngx_ioa_jbuf_int(b, (int64_t) a->rec[1]);
    ngx_ioa_jbuf_literal(b, ",\"failed\":");
    ngx_ioa_jbuf_int(b, (int64_t) a->rec[2]);
    ngx_ioa_jbuf_literal(b, ",\"timed_out\":");
    ngx_ioa_jbuf_int(b, (int64_t) a->rec[3]);
    ngx_ioa_jbuf_literal(b, ",\"latency_ms\":");

    if (a->timed) {
        ngx_ioa_jbuf_int(b, (int64_t) (a->latency_ms / a->timed));

    } else {
        ngx_ioa_jbuf_literal(b, "null");
    }

    ngx_ioa_jbuf_literal(b, "}}");
}


/* the index's part of /metrics (ngx_ioa_metrics.c) */

u_char *
ngx_ioa_index_metrics(u_char *p, u_char *last)
{
    size_t             used;
    ngx_uint_t         agents, terms, state;
    ngx_msec_t         build;
    ngx_slab_pool_t   *pool;
    ngx_ioa_ix_sh_t   *sh;
    ngx_ioa_ix_ctx_t  *ctx;

    ctx = ngx_ioa_ix_ctx();

    if (ctx == NULL) {
        return p;
    }

    sh = ctx->sh;
    pool = ctx->shpool;

    if (ngx_ioa_ix_rlock(sh) == NGX_OK) {
        agents = sh->nagents;
        terms = sh->nterms;
        state = sh->state;
        build = sh->build_ms;

        ngx_ioa_ix_unlock(sh);

    } else {
        /* given up: what it held no longer counts */
        agents = 0;
        terms = 0;
        state = NGX_IOA_IX_BROKEN;
        build = sh->build_ms;
    }

    /* pages handed out, whole: what the zone cannot give to anything else */
    ngx_shmtx_lock(&pool->mutex);
    used = ((pool->end - pool->start) / ngx_pagesize - pool->pfree)
           * ngx_pagesize;
    ngx_shmtx_unlock(&pool->mutex);

    return ngx_slprintf(p, last,
        "# HELP ioa_discovery_index_state 0 empty, 1 first build running, "
        "2 answering, 3 zone full, 4 given up after a worker died writing "
        "it (3 and 4: discovery answered by Redis).\n"
        "# TYPE ioa_discovery_index_state gauge\n"
        "ioa_discovery_index_state %ui\n"
        "# HELP ioa_discovery_index_agents Agents in this instance's "
        "discovery index.\n"
        "# TYPE ioa_discovery_index_agents gauge\n"
        "ioa_discovery_index_agents %ui\n"
        "# HELP ioa_discovery_index_terms Distinct terms in the index.\n"
        "# TYPE ioa_discovery_index_terms gauge\n"
        "ioa_discovery_index_terms %ui\n"
        "# HELP ioa_discovery_index_bytes Shared memory the index holds "
        "(whole pages of ioa_discovery_zone).\n"
        "# TYPE ioa_discovery_index_bytes gauge\n"
        "ioa_discovery_index_bytes %uz\n"
        "# HELP ioa_discovery_index_zone_bytes The size of "
        "ioa_discovery_zone.\n"
        "# TYPE ioa_discovery_index_zone_bytes gauge\n"
        "ioa_discovery_index_zone_bytes %uz\n"
        "# HELP ioa_discovery_index_build_seconds How long the last full "
        "read of the registry from Redis took.\n"
        "# TYPE ioa_discovery_index_build_seconds gauge\n"
        "ioa_discovery_index_build_seconds %ui.%03ui\n",
        state, agents, terms, used, (size_t) (pool->end - (u_char *) pool),
        build / 1000, build % 1000);
}


/*
 * Agents without a vector for the configured model, to embed on the next
 * discovery request (ngx_ioa_registry.c): at most max of them, found from
 * where the last search stopped, reading at most 4096 agents, so a request
 * never pays for a walk over the whole registry.  Names and descs are
 * copied into the pool.
 */

ngx_uint_t
ngx_ioa_index_unembedded(ngx_pool_t *pool, ngx_uint_t max, ngx_str_t *names,
    ngx_str_t *descs)
{
    uint32_t             i, slot;
    ngx_uint_t           n;
    ngx_ioa_ix_sh_t     *sh;
    ngx_ioa_ix_ctx_t    *ctx;
    ngx_ioa_ix_agent_t  *a;

    ctx = ngx_ioa_ix_ctx();

    if (ctx == NULL) {
        return 0;
    }

    sh = ctx->sh;
    n = 0;

    if (ngx_ioa_ix_rlock(sh) != NGX_OK) {
        return 0;
    }

    if (sh->state != NGX_IOA_IX_READY || sh->nvec >= sh->nagents
        || sh->nslots == 0)
    {
        ngx_ioa_ix_unlock(sh);
        return 0;
    }

    slot = sh->embed_cursor;

    for (i = 0; i < ngx_min(sh->nslots, 4096) && n < max; i++) {
        slot = (slot + 1) % sh->nslots;
        a = sh->slots[slot];

        if (a == NULL || a->vec || a->desc_len == 0) {
            continue;
        }

        names[n].len = a->name_len;
        descs[n].len = a->desc_len;
        names[n].data = ngx_pnalloc(pool, a->name_len + a->desc_len + 1);

        if (names[n].data == NULL) {
            break;
        }

        ngx_memcpy(names[n].data, a->text, a->name_len);
        descs[n].data = names[n].data + a->name_len;
        ngx_memcpy(descs[n].data, a->text + a->name_len + a->type_len,
                   a->desc_len);
        n++;
    }

    /* a plain store from under a read lock: any value is a fine place to
     * start the next search */
    sh->embed_cursor = slot;

    ngx_ioa_ix_unlock(sh);

    return n;
}
