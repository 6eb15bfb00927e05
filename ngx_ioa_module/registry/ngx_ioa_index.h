
/*
 * Copyright (C) ioa authors
 *
 * Private to the discovery index (ngx_ioa_index.c: the store in shared
 * memory; ngx_ioa_index_rank.c: BM25 over it; ngx_ioa_index_sync.c: how it
 * follows Redis).  The rest of the module sees the functions declared in
 * ngx_ioa.h.  The design is described at the top of ngx_ioa_index.c.
 */


#ifndef _NGX_IOA_INDEX_H_INCLUDED_
#define _NGX_IOA_INDEX_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"


/* postings per chunk at most: a chunk is then one page (4088 bytes of
 * 4096), the most an update moves (see ngx_ioa_index.c) */
#define NGX_IOA_IX_CHUNK         255

/* a document longer than this is not indexed (the module's limits on desc
 * and tags keep every document far below: about 5,500 tokens) */
#define NGX_IOA_IX_LEN_MAX       65535

/* holders (nginx workers, on any instance) the index tells apart */
#define NGX_IOA_IX_HOLDERS       1024
/* reads in progress at once: a process reads one query at a time */
#define NGX_IOA_IX_READERS       128
#define NGX_IOA_IX_HOLDER_LEN    64


typedef enum {
    NGX_IOA_IX_EMPTY = 0,     /* never built: queries go to Redis */
    NGX_IOA_IX_BUILDING,      /* the first build is running: same */
    NGX_IOA_IX_READY,         /* answers queries (a refresh may run) */
    NGX_IOA_IX_FULL,          /* the zone ran out of memory: Redis again */
    NGX_IOA_IX_BROKEN         /* a worker died writing it: Redis for good
                                 (ngx_ioa_index_lock.c) */
} ngx_ioa_ix_state_e;


typedef struct ngx_ioa_ix_term_s   ngx_ioa_ix_term_t;
typedef struct ngx_ioa_ix_agent_s  ngx_ioa_ix_agent_t;


/* one agent in one term's list; the list is sorted by length, then tf
 * (largest first), then the agent's name, so that one (length, tf) block
 * holds agents of equal share in name order */
typedef struct {
    uint32_t                  slot;
    uint16_t                  len;
    uint16_t                  tf;
    uint64_t                  sig;           /* the agent's term signature */
} ngx_ioa_ix_post_t;


/* a term's bit in a signature: an agent's signature has the bits of all
 * its terms, so a clear bit proves a term absent without reading the
 * agent (ngx_ioa_index_rank.c) */
#define ngx_ioa_ix_bit(hash)     ((uint64_t) 1 << ((hash) & 63))


typedef struct {
    uint16_t                  n;
    uint16_t                  cap;
    uint32_t                  pad;
    ngx_ioa_ix_post_t         p[1];
} ngx_ioa_ix_chunk_t;


struct ngx_ioa_ix_term_s {
    ngx_ioa_ix_term_t        *next;          /* hash chain */
    uint32_t                  hash;
    uint32_t                  df;            /* agents with the term */
    uint32_t                  nchunks;
    uint32_t                  chunks_cap;
    ngx_ioa_ix_chunk_t      **chunks;
    uint16_t                  len;
    u_char                    text[1];
};


typedef struct {
    ngx_ioa_ix_term_t        *term;
    uint32_t                  tf;
} ngx_ioa_ix_tref_t;


typedef struct {
    uint16_t                  holder;        /* index in sh->holders */
    int64_t                   expiry;        /* ms */
} ngx_ioa_ix_pair_t;


struct ngx_ioa_ix_agent_s {
    ngx_ioa_ix_agent_t       *next;          /* hash chain */
    uint32_t                  hash;
    uint32_t                  slot;
    uint32_t                  len;           /* tokens in the document */
    uint32_t                  gen;           /* refresh that saw it last */
    uint64_t                  sig;           /* its terms' bits */
    uint16_t                  nterms;
    uint8_t                   protocol;
    uint8_t                   npairs;
    uint8_t                   pairs_cap;
    ngx_ioa_ix_tref_t        *terms;         /* by term address */
    ngx_ioa_ix_pair_t        *pairs;         /* presence, per holder */

    /* the task record (rep_record.lua) */
    uint64_t                  rec[4];        /* completed, partial, failed,
                                                timed_out */
    uint64_t                  latency_ms;    /* summed */
    uint64_t                  timed;         /* tasks in latency_ms */

    /* desc's embedding (semantic discovery), length 1; NULL: none for the
     * configured model */
    float                    *vec;
    uint32_t                  dim;

    /* name, type, desc, tags_json, one after the other */
    u_char                   *text;
    uint16_t                  name_len;
    uint16_t                  type_len;
    uint32_t                  desc_len;
    uint32_t                  tags_len;
};


typedef struct {
    u_char                    name[NGX_IOA_IX_HOLDER_LEN];
    uint16_t                  len;
    uint32_t                  refs;          /* pairs naming it */
} ngx_ioa_ix_holder_t;


/* the zone's header: everything hangs from here */
typedef struct {
    /* the lock (ngx_ioa_index_lock.c) */
    ngx_atomic_t              lock;          /* readers, or a writer */
    ngx_atomic_t              wwait;         /* pid of a writer waiting:
                                                readers hold back */
    ngx_atomic_t              writer;        /* pid of the writer */
    ngx_atomic_t              readers[NGX_IOA_IX_READERS];
    ngx_atomic_t              keeper;        /* pid of the keeping worker */
    ngx_atomic_t              keeper_until;  /* its lease, ms */

    ngx_ioa_ix_state_e        state;
    uint32_t                  gen;           /* the running refresh */
    ngx_uint_t                nagents;
    uint64_t                  total_len;
    ngx_msec_t                build_ms;      /* last full refresh took */
    int64_t                   built_at;      /* ms, when it ended */
    ngx_uint_t                refreshes;
    ngx_uint_t                nvec;          /* agents with a vector */
    uint32_t                  embed_cursor;  /* where the search for
                                                agents to embed goes on */
    u_char                    epoch[16];     /* B..'epoch' as last read */

    ngx_ioa_ix_agent_t      **agents;        /* hash buckets */
    ngx_uint_t                agents_size;   /* a power of 2 */
    ngx_ioa_ix_term_t       **terms;
    ngx_uint_t                terms_size;
    ngx_uint_t                nterms;

    ngx_ioa_ix_agent_t      **slots;         /* slot -> agent */
    uint32_t                  nslots;
    uint32_t                  slots_cap;
    uint32_t                 *free_slots;
    uint32_t                  nfree;
    uint32_t                  free_cap;

    ngx_uint_t                nholders;
    ngx_ioa_ix_holder_t       holders[NGX_IOA_IX_HOLDERS];
} ngx_ioa_ix_sh_t;


typedef struct {
    ngx_ioa_ix_sh_t          *sh;
    ngx_slab_pool_t          *shpool;
} ngx_ioa_ix_ctx_t;


/* an agent as Redis holds it (index_fetch.lua), to put into the index */
typedef struct {
    ngx_str_t                 name;
    ngx_str_t                 type;
    ngx_str_t                 desc;
    ngx_str_t                 tags;          /* JSON array text */
    ngx_uint_t                protocol;
    uint64_t                  rec[4];
    uint64_t                  latency_ms;
    uint64_t                  timed;
    ngx_str_t                *holders;
    int64_t                  *expiries;
    ngx_uint_t                nholders;
    ngx_str_t                 vec_model;
    ngx_str_t                 vec;           /* float32 little-endian */
} ngx_ioa_ix_input_t;


/* ngx_ioa_index.c */
ngx_ioa_ix_ctx_t *ngx_ioa_ix_ctx(void);
/* ngx_ioa_index_lock.c: NGX_DECLINED once the index is BROKEN */
ngx_int_t ngx_ioa_ix_rlock(ngx_ioa_ix_sh_t *sh);
ngx_int_t ngx_ioa_ix_wlock(ngx_ioa_ix_sh_t *sh);
void ngx_ioa_ix_unlock(ngx_ioa_ix_sh_t *sh);
ngx_ioa_ix_agent_t *ngx_ioa_ix_agent(ngx_ioa_ix_sh_t *sh, u_char *name,
    size_t len);
ngx_ioa_ix_term_t *ngx_ioa_ix_term(ngx_ioa_ix_sh_t *sh, u_char *text,
    size_t len);
int64_t ngx_ioa_ix_online_until(ngx_ioa_ix_agent_t *a);
ngx_int_t ngx_ioa_ix_put(ngx_ioa_ix_input_t *in, ngx_log_t *log);
void ngx_ioa_ix_delete(ngx_str_t *name);
void ngx_ioa_ix_presence(ngx_str_t *holder, int64_t expiry,
    ngx_str_t *names, ngx_uint_t n);
void ngx_ioa_ix_refresh_start(void);
void ngx_ioa_ix_refresh_end(ngx_msec_t took);
ngx_int_t ngx_ioa_ix_before(u_char *a, size_t alen, u_char *b, size_t blen);
/* how a hybrid answer was ranked, shown with each agent */
typedef struct {
    double                    bm25;
    double                    similarity;
} ngx_ioa_ix_parts_t;

void ngx_ioa_ix_agent_json(ngx_ioa_jbuf_t *b, ngx_ioa_ix_agent_t *a,
    double score, int64_t now, ngx_ioa_ix_parts_t *parts,
    const char *ranking);

/* the position of a posting in a term's chunked list */
typedef struct {
    uint32_t                  chunk;
    uint32_t                  off;
} ngx_ioa_ix_pos_t;

ngx_ioa_ix_post_t *ngx_ioa_ix_at(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos);
void ngx_ioa_ix_block_end(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos,
    ngx_ioa_ix_pos_t *end, uint32_t *count);
ngx_int_t ngx_ioa_ix_next(ngx_ioa_ix_term_t *t, ngx_ioa_ix_pos_t *pos);


#endif /* _NGX_IOA_INDEX_H_INCLUDED_ */
