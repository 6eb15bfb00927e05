
/*
 * Copyright (C) ioa authors
 *
 * The agent registry: /register, /retrieve_assistant, /query_assistant,
 * /list_all_agents, and the presence heartbeat behind "online".
 *
 * All state is in Redis under one hash tag ({reg}), maintained by
 * redis-scripts/register.lua, retrieve.lua, query.lua, list_agents.lua and
 * presence.lua.  Discovery ranks agents with BM25 over an inverted index of
 * their descriptions and tags that register.lua keeps exact on every
 * (re-)registration.  The scripts take terms, not text: this file turns a
 * description and its tags, and each capability of a query, into terms with
 * lib/ioa_tokenize.c, the one tokenizer, which the worker compiles too,
 * so that indexing and querying cannot disagree whoever calls the scripts.
 * This file validates input (names through the configured PCRE2 pattern
 * before they become Redis keys), calls the scripts and writes IoA's JSON
 * shapes, with our extra fields (tags, online, score, speaks_protocol) added
 * where IoA's models ignore unknown fields.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>

#include "ngx_ioa.h"
#include "ioa_tokenize.h"


#define NGX_IOA_DESC_MAX       8192
#define NGX_IOA_TAGS_MAX       32
#define NGX_IOA_TAG_MAX        64      /* bytes of one tag */
#define NGX_IOA_QUERIES_MAX    16
#define NGX_IOA_RETRIEVE_MAX   50


/* agents without a vector embedded along with a query, at most */
#define NGX_IOA_EMBED_LATER    16


/* one /retrieve_assistant on its way */
typedef struct {
    ngx_str_t                 texts[NGX_IOA_QUERIES_MAX];  /* as written */
    ngx_uint_t                nq;
    ngx_uint_t                limit;
    ngx_uint_t                online_only;
    ngx_str_t                 sender;
    ngx_ioa_index_semantic_t  sem;

    ngx_str_t                 later[NGX_IOA_EMBED_LATER];
    ngx_str_t                 later_descs[NGX_IOA_EMBED_LATER];
    ngx_uint_t                nlater;

    /* retrieve.lua's arguments, kept for when the index cannot answer */
    ngx_str_t                 stats_key;
    ngx_str_t                 online_key;
    ngx_str_t                 terms[NGX_IOA_QUERIES_MAX];
    int64_t                   now;
    int64_t                   t0;         /* µs, for /metrics */
} ngx_ioa_retrieve_t;


/* a /retrieve_assistant body, as checked (ngx_ioa_retrieve_fields) */
typedef struct {
    ngx_str_t                 sender;
    yajl_val                  caps;
    int64_t                   limit;
    ngx_uint_t                online_only;
} ngx_ioa_retrieve_in_t;


typedef struct {
    ngx_uint_t                single;     /* query_assistant with a string */
    ngx_str_t                 name;       /* register: the agent */
    ngx_str_t                 answer;     /* register: sent once indexed */

    /* register.lua's arguments, kept for when the description is
     * embedded */
    ngx_str_t                 agent_key;
    ngx_str_t                 agents_key;
    ngx_str_t                 stats_key;
    ngx_str_t                 type;
    ngx_str_t                 desc;
    yajl_val                  tags;       /* register: the body's */
    ngx_str_t                 tags_json;
    ngx_str_t                 terms;
    ngx_str_t                 a2a_url;
    ngx_uint_t                proto;
    int64_t                   now;
    ngx_tm_t                  tm;
} ngx_ioa_registry_ctx_t;


static void ngx_ioa_register_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_register_done(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_retrieve_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_retrieve_done(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_register_embedded(ngx_http_request_t *r, void *data,
    ngx_ioa_embed_result_t *res);
static void ngx_ioa_register_send(ngx_http_request_t *r,
    ngx_ioa_registry_ctx_t *rctx, ngx_ioa_embed_result_t *res);
static ngx_int_t ngx_ioa_register_index(ngx_http_request_t *r,
    ngx_ioa_registry_ctx_t *rctx);
static void ngx_ioa_register_indexed(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_retrieve_answer(ngx_http_request_t *r,
    ngx_ioa_retrieve_t *rt);
static ngx_int_t ngx_ioa_retrieve_embed(ngx_http_request_t *r,
    ngx_ioa_retrieve_t *rt);
static void ngx_ioa_retrieve_embedded(ngx_http_request_t *r, void *data,
    ngx_ioa_embed_result_t *res);
static void ngx_ioa_embed_store(ngx_str_t *names, ngx_str_t *descs,
    float *vecs, ngx_uint_t n, ngx_uint_t dim);
static void ngx_ioa_embed_failed(ngx_http_request_t *r,
    ngx_ioa_embed_result_t *res);
static ngx_int_t ngx_ioa_ranking_header(ngx_http_request_t *r,
    const char *how, ngx_str_t *why);
static ngx_int_t ngx_ioa_discovery_header(ngx_http_request_t *r,
    const char *who);
/* the replies' tuples: retrieve.lua, query.lua, list_agents.lua */
#define NGX_IOA_RETRIEVE_TUPLE  8
#define NGX_IOA_QUERY_TUPLE     10
#define NGX_IOA_LIST_TUPLE      8
/* an agent's A2A card URL (ioa-agent --a2a) */
#define NGX_IOA_A2A_URL_MAX     2048
#define NGX_IOA_A2A_URL_TEXT                                                  \
    "\"a2a_url\" must be an http:// or https:// URL of at most "            \
    ngx_value(NGX_IOA_A2A_URL_MAX) " bytes, without spaces"

static void ngx_ioa_query_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_query_done(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_list_done(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_agent_json(ngx_ioa_jbuf_t *b, redisReply **f,
    ngx_uint_t created, ngx_uint_t score, ngx_uint_t record, ngx_uint_t a2a);
static ngx_int_t ngx_ioa_reg_terms(ngx_http_request_t *r, ngx_str_t *texts,
    ngx_uint_t n, ngx_str_t *terms);
static void ngx_ioa_presence_done(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_invalid(ngx_http_request_t *r, const char *field,
    const char *text);
static ngx_int_t ngx_ioa_invalid_name(ngx_http_request_t *r,
    const char *field, u_char *why);


static ngx_str_t  ngx_ioa_agent_types[] = {
    ngx_string("Human Assistant"),
    ngx_string("Thing Assistant"),
    ngx_null_string
};


/*
 * POST /register's body.  The name comes first and alone: an agent
 * registers itself only, and a token acting for another is refused (403)
 * before the rest of the body is looked at.
 */

static ngx_ioa_body_field_t  ngx_ioa_register_tag = {
    NULL, NGX_IOA_BODY_STRING, 0, 1, NGX_IOA_TAG_MAX, NULL, NULL, NULL,
    NGX_IOA_BODY_NONE
};


static ngx_ioa_body_field_t  ngx_ioa_register_fields[] = {

    { "name", NGX_IOA_BODY_NAME, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      "\"name\" must be a name: " NGX_IOA_NAME_RULE,
      offsetof(ngx_ioa_registry_ctx_t, name) },

    ngx_ioa_body_step,

    { "type", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED, 0, 0,
      ngx_ioa_agent_types, NULL,
      "\"type\" must be \"Human Assistant\" or \"Thing Assistant\"",
      offsetof(ngx_ioa_registry_ctx_t, type) },

    { "desc", NGX_IOA_BODY_STRING, NGX_IOA_BODY_REQUIRED,
      0, NGX_IOA_DESC_MAX, NULL, NULL,
      "\"desc\" must be a string of at most " ngx_value(NGX_IOA_DESC_MAX)
      " bytes",
      offsetof(ngx_ioa_registry_ctx_t, desc) },

    { "tags", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_NULL, 0, NGX_IOA_TAGS_MAX,
      NULL, &ngx_ioa_register_tag,
      "\"tags\" must be an array of at most " ngx_value(NGX_IOA_TAGS_MAX)
      " non-empty strings of at most " ngx_value(NGX_IOA_TAG_MAX) " bytes",
      offsetof(ngx_ioa_registry_ctx_t, tags) },

    { "speaks_protocol", NGX_IOA_BODY_BOOLEAN, NGX_IOA_BODY_NULL, 0, 0,
      NULL, NULL, NULL,
      offsetof(ngx_ioa_registry_ctx_t, proto) },

    /* and an http(s) URL without spaces: below */
    { "a2a_url", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL,
      0, NGX_IOA_A2A_URL_MAX, NULL, NULL, NGX_IOA_A2A_URL_TEXT,
      offsetof(ngx_ioa_registry_ctx_t, a2a_url) },

    ngx_ioa_body_null_field
};


/*
 * POST /register {"name","type","desc"} as IoA, plus optional "tags"
 * (capability tags, indexed with the description), "speaks_protocol"
 * (true: the agent runs its own conversation turns) and "a2a_url" (the
 * card of the A2A agent it stands for, shown by /query_assistant and
 * /list_all_agents).  Re-registering updates the entry; IoA ignored a
 * changed description.
 */

ngx_int_t
ngx_ioa_register_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_register_body);
}


static void
ngx_ioa_register_body(ngx_http_request_t *r, ngx_str_t *body)
{
    size_t                   i;
    yajl_val                 doc;
    ngx_str_t                s;
    ngx_str_t                texts[1 + NGX_IOA_TAGS_MAX];
    ngx_uint_t               ntexts;
    ngx_ioa_jbuf_t           b;
    ngx_ioa_error_t          err;
    ngx_ioa_registry_ctx_t  *rctx;

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    /* kept in the pool: with semantic discovery the script runs once the
     * description is embedded */
    rctx = ngx_pcalloc(r->pool, sizeof(ngx_ioa_registry_ctx_t));

    if (rctx == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_ioa_body_object(doc, &err) != NGX_OK
        || ngx_ioa_body_check(doc, ngx_ioa_register_fields, 0, rctx, &err)
           != NGX_OK)
    {
        goto invalid;
    }

    if (ngx_ioa_auth_acts_as(r, &rctx->name) != NGX_OK) {
        return;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_register_fields, 1, rctx, &err)
        != NGX_OK)
    {
        goto invalid;
    }

    /* an A2A agent's card (ioa-agent --a2a registers it): stored and
     * shown, never fetched by the hub */
    s = rctx->a2a_url;

    if (s.data
        && !((s.len > 7 && ngx_strncmp(s.data, "http://", 7) == 0)
             || (s.len > 8 && ngx_strncmp(s.data, "https://", 8) == 0)))
    {
        goto bad_a2a_url;
    }

    for (i = 0; i < s.len; i++) {
        if (s.data[i] <= ' ' || s.data[i] == 0x7f) {
            goto bad_a2a_url;
        }
    }

    /* tags: re-serialised by us, so the script gets a clean JSON array;
     * the document indexed is desc, then each tag (see register.lua) */

    if (ngx_ioa_jbuf_init(&b, r->pool, 64) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_byte(&b, '[');

    texts[0] = rctx->desc;
    ntexts = 1;

    for (i = 0; rctx->tags && i < rctx->tags->u.array.len; i++) {
        (void) ngx_ioa_json_string(rctx->tags->u.array.values[i], &s);

        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_str(&b, &s);
        texts[ntexts++] = s;
    }

    ngx_ioa_jbuf_byte(&b, ']');

    if (ngx_ioa_jbuf_done(&b, &rctx->tags_json) != NGX_OK
        || ngx_ioa_reg_terms(r, texts, ntexts, &rctx->terms) != NGX_OK
        || ngx_ioa_key_agent_alloc(r->pool, NGX_IOA_AGENT_RECORD,
                                   &rctx->name, &rctx->agent_key)
           != NGX_OK
        || ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_AGENTS, &rctx->agents_key)
           != NGX_OK
        || ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_STATS, &rctx->stats_key)
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* IoA's created_at format, "%Y-%m-%d-%H-%M-%S", in UTC */
    ngx_gmtime(ngx_time(), &rctx->tm);
    rctx->now = ngx_ioa_now_ms();

    ngx_ioa_rest_set_data(r, rctx);

    if (ngx_ioa_embed_on() && rctx->desc.len
        && ngx_ioa_embed(r, &rctx->desc, 1, ngx_ioa_register_embedded, rctx)
           == NGX_OK)
    {
        return;
    }

    ngx_ioa_register_send(r, rctx, NULL);

    return;

bad_a2a_url:

    ngx_ioa_error_set(&err, "invalid_request", "a2a_url",
                      NGX_IOA_A2A_URL_TEXT);

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


/* desc's embedding, if the endpoint gave one: stored with the agent */

static void
ngx_ioa_register_embedded(ngx_http_request_t *r, void *data,
    ngx_ioa_embed_result_t *res)
{
    ngx_ioa_registry_ctx_t  *rctx = data;

    if (!res->ok) {
        /* registered without: a discovery request embeds it later */
        ngx_ioa_embed_failed(r, res);
        ngx_ioa_register_send(r, rctx, NULL);
        return;
    }

    ngx_ioa_register_send(r, rctx, res);
}


/* register.lua; res: desc's embedding, or NULL for none (yet) */

static void
ngx_ioa_register_send(ngx_http_request_t *r, ngx_ioa_registry_ctx_t *rctx,
    ngx_ioa_embed_result_t *res)
{
    ngx_ioa_args_t        a;
    ngx_tm_t             *tm;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();
    tm = &rctx->tm;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &rctx->agent_key);
    ngx_ioa_args_str(&a, &rctx->agents_key);
    ngx_ioa_args_str(&a, &rctx->stats_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &rctx->name);
    ngx_ioa_args_str(&a, &rctx->type);

    if (rctx->desc.len) {
        ngx_ioa_args_str(&a, &rctx->desc);

    } else {
        ngx_ioa_args_cstr(&a, "");
    }

    ngx_ioa_args_str(&a, &rctx->tags_json);
    ngx_ioa_args_cstr(&a, rctx->proto ? "1" : "0");
    ngx_ioa_args_fmt(&a, "%L", rctx->now);
    ngx_ioa_args_fmt(&a, "%4d-%02d-%02d-%02d-%02d-%02d",
                     tm->ngx_tm_year, tm->ngx_tm_mon, tm->ngx_tm_mday,
                     tm->ngx_tm_hour, tm->ngx_tm_min, tm->ngx_tm_sec);
    ngx_ioa_args_fmt(&a, "%ui", mcf->max_agents);
    ngx_ioa_args_str(&a, &rctx->terms);

    if (res) {
        ngx_ioa_args_str(&a, &mcf->embed_model);
        ngx_ioa_args_buf(&a, (u_char *) res->vecs, res->dim * sizeof(float));

    } else {
        ngx_ioa_args_cstr(&a, "");      /* no embedding (yet) */
        ngx_ioa_args_cstr(&a, "");
    }

    if (rctx->a2a_url.len) {
        ngx_ioa_args_str(&a, &rctx->a2a_url);

    } else {
        ngx_ioa_args_cstr(&a, "");
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_REGISTER,
                                 ngx_ioa_register_done, 3, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_register_done(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t                s;
    ngx_ioa_jbuf_t           b;
    ngx_ioa_error_t          err;
    ngx_ioa_registry_ctx_t  *rctx;

    if (reply && reply->type == REDIS_REPLY_ERROR && reply->len > 5
        && ngx_strncmp(reply->str, "FULL ", 5) == 0)
    {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_AGENTS, 1);
        ngx_ioa_error_set(&err, "registry_full", "name",
                          "%*s; nothing was stored", (size_t) reply->len - 5,
                          reply->str + 5);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_INSUFFICIENT_STORAGE,
                                             &err));
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 128) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"status\":");
    s.data = (u_char *) reply->element[0]->str;
    s.len = reply->element[0]->len;
    ngx_ioa_jbuf_str(&b, &s);
    ngx_ioa_jbuf_literal(&b, ",\"created_at\":");
    s.data = (u_char *) reply->element[1]->str;
    s.len = reply->element[1]->len;
    ngx_ioa_jbuf_str(&b, &s);
    ngx_ioa_jbuf_byte(&b, '}');

    rctx = ngx_ioa_rest_get_data(r);

    /* this instance's discovery index has the agent before the answer
     * goes: a client that registers and then asks the same instance finds
     * it (other instances hear of it from register.lua's event) */
    if (ngx_ioa_index_usable()
        && ngx_ioa_jbuf_done(&b, &rctx->answer) == NGX_OK
        && ngx_ioa_register_index(r, rctx) == NGX_OK)
    {
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


static ngx_int_t
ngx_ioa_register_index(ngx_http_request_t *r, ngx_ioa_registry_ctx_t *rctx)
{
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &mcf->index_agents_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_cstr(&a, "names");
    ngx_ioa_args_str(&a, &rctx->name);

    return ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_INDEX_FETCH,
                                    ngx_ioa_register_indexed, 1, &a);
}


static void
ngx_ioa_register_indexed(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_registry_ctx_t  *rctx;

    rctx = ngx_ioa_rest_get_data(r);

    /* registered either way; if this read failed, the event brings it */
    ngx_ioa_index_apply(reply);

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &rctx->answer));
}


/*
 * POST /retrieve_assistant {"sender","capabilities":[..]} as IoA, plus
 * optional "online_only" (default false) and "limit" per capability
 * (default 3, IoA's top-k).  The sender is left out of its own results.
 */

ngx_int_t
ngx_ioa_retrieve_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_retrieve_body);
}


/*
 * POST /retrieve_assistant's body: the sender first and alone, since only
 * one's own name may be left out of the answer (a 403 before the rest);
 * each capability's bytes are checked as it is tokenized.
 */

static ngx_ioa_body_field_t  ngx_ioa_retrieve_fields[] = {

    { "sender", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL, 0, 0, NULL, NULL,
      "\"sender\" must be a string",
      offsetof(ngx_ioa_retrieve_in_t, sender) },

    ngx_ioa_body_step,

    { "capabilities", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_REQUIRED,
      1, NGX_IOA_QUERIES_MAX, NULL, NULL,
      "\"capabilities\" must be an array of 1 to "
      ngx_value(NGX_IOA_QUERIES_MAX) " strings",
      offsetof(ngx_ioa_retrieve_in_t, caps) },

    { "limit", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL,
      1, NGX_IOA_RETRIEVE_MAX, NULL, NULL,
      "\"limit\" must be an integer from 1 to "
      ngx_value(NGX_IOA_RETRIEVE_MAX),
      offsetof(ngx_ioa_retrieve_in_t, limit) },

    { "online_only", NGX_IOA_BODY_BOOLEAN, NGX_IOA_BODY_NULL, 0, 0,
      NULL, NULL, NULL, offsetof(ngx_ioa_retrieve_in_t, online_only) },

    ngx_ioa_body_null_field
};


static void
ngx_ioa_retrieve_body(ngx_http_request_t *r, ngx_str_t *body)
{
    size_t                  i;
    yajl_val                doc;
    ngx_str_t               s;
    ngx_ioa_error_t         err;
    ngx_ioa_retrieve_t     *rt;
    ngx_ioa_retrieve_in_t   in;

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    ngx_memzero(&in, sizeof(ngx_ioa_retrieve_in_t));
    ngx_str_set(&in.sender, "");
    in.limit = 3;

    if (ngx_ioa_body_object(doc, &err) != NGX_OK
        || ngx_ioa_body_check(doc, ngx_ioa_retrieve_fields, 0, &in, &err)
           != NGX_OK)
    {
        goto invalid;
    }

    /* the sender is left out of the answer: only one's own name */
    if (in.sender.len && ngx_ioa_auth_acts_as(r, &in.sender) != NGX_OK) {
        return;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_retrieve_fields, 1, &in, &err)
        != NGX_OK)
    {
        goto invalid;
    }

    rt = ngx_pcalloc(r->pool, sizeof(ngx_ioa_retrieve_t));

    if (rt == NULL
        || ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_STATS, &rt->stats_key)
           != NGX_OK
        || ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_ONLINE, &rt->online_key)
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rt->t0 = ngx_ioa_stats_now_us();
    rt->limit = (ngx_uint_t) in.limit;
    rt->online_only = in.online_only;
    rt->sender = in.sender;
    rt->now = ngx_ioa_now_ms();

    for (i = 0; i < in.caps->u.array.len; i++) {
        if (ngx_ioa_json_string(in.caps->u.array.values[i], &s) != NGX_OK
            || s.len > 1024)
        {
            ngx_ioa_finish(r, ngx_ioa_invalid(r, "capabilities",
                           "every capability must be a string of at most "
                           "1024 bytes"));
            return;
        }

        if (ngx_ioa_reg_terms(r, &s, 1, &rt->terms[rt->nq]) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        /* the index reads the text itself (ngx_ioa_index_rank.c) */
        rt->texts[rt->nq++] = s;
    }

    ngx_ioa_rest_set_data(r, rt);

    if (ngx_ioa_index_usable() && ngx_ioa_embed_on()
        && ngx_ioa_retrieve_embed(r, rt) == NGX_OK)
    {
        return;
    }

    ngx_ioa_retrieve_answer(r, rt);

    return;

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


/* the index's answer (BM25, or the hybrid when rt->sem has vectors), or
 * retrieve.lua's while the index cannot give one */

static void
ngx_ioa_retrieve_answer(ngx_http_request_t *r, ngx_ioa_retrieve_t *rt)
{
    ngx_int_t             rc;
    ngx_uint_t            i;
    ngx_ioa_args_t        a;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_main_conf_t  *mcf;

    if (ngx_ioa_index_usable()) {

        if (ngx_ioa_jbuf_init(&b, r->pool, 256 + rt->nq * rt->limit * 256)
            != NGX_OK)
        {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        rc = ngx_ioa_index_retrieve(r->pool, rt->texts, rt->nq, rt->limit,
                                    rt->online_only, &rt->sender,
                                    ngx_ioa_now_ms(),
                                    ngx_ioa_embed_on() ? &rt->sem : NULL, &b);

        if (rc == NGX_OK) {
            ngx_ioa_stat_add(NGX_IOA_STAT_DISCOVERY_INDEX, 1);
            ngx_ioa_stat_observe(NGX_IOA_HIST_DISCOVERY,
                                 ngx_ioa_stats_now_us() - rt->t0);

            if (ngx_ioa_discovery_header(r, "index") != NGX_OK) {
                ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }

            ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
            return;
        }

        if (rc != NGX_DECLINED) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    if (ngx_ioa_discovery_header(r, "redis") != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        return;
    }

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &rt->stats_key);
    ngx_ioa_args_str(&a, &rt->online_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_fmt(&a, "%L", rt->now);
    ngx_ioa_args_fmt(&a, "%L", (int64_t) rt->limit);
    ngx_ioa_args_cstr(&a, rt->online_only ? "1" : "0");
    ngx_ioa_args_str(&a, &rt->sender);

    for (i = 0; i < rt->nq; i++) {
        ngx_ioa_args_str(&a, &rt->terms[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_RETRIEVE,
                                 ngx_ioa_retrieve_done, 2, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


/*
 * Semantic discovery: the queries are embedded first, in one call with
 * the descriptions of a few agents that have no vector yet (registered
 * while the endpoint was away, or before it was configured), whose
 * vectors are then stored for everyone (embed_store.lua).  A worker sends
 * such a batch at most once a second, so an endpoint that is down is not
 * asked for them by every request.
 */

static ngx_int_t
ngx_ioa_retrieve_embed(ngx_http_request_t *r, ngx_ioa_retrieve_t *rt)
{
    ngx_uint_t  i, n;
    ngx_str_t  *texts;

    static ngx_msec_t  last;

    n = 0;

    if (ngx_current_msec - last >= 1000) {
        n = ngx_ioa_index_unembedded(r->pool, NGX_IOA_EMBED_LATER,
                                     rt->later, rt->later_descs);
        if (n) {
            last = ngx_current_msec;
        }
    }

    rt->nlater = n;

    texts = ngx_palloc(r->pool, (rt->nq + n) * sizeof(ngx_str_t));
    if (texts == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < rt->nq; i++) {
        texts[i] = rt->texts[i];
    }

    for (i = 0; i < n; i++) {
        texts[rt->nq + i] = rt->later_descs[i];
    }

    return ngx_ioa_embed(r, texts, rt->nq + n, ngx_ioa_retrieve_embedded, rt);
}


static void
ngx_ioa_retrieve_embedded(ngx_http_request_t *r, void *data,
    ngx_ioa_embed_result_t *res)
{
    ngx_ioa_retrieve_t  *rt = data;

    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();
    rt->sem.weight = mcf->embed_weight;

    if (!res->ok) {
        ngx_ioa_embed_failed(r, res);
        rt->sem.qvecs = NULL;

        if (ngx_ioa_ranking_header(r, "bm25", &res->error) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_ioa_retrieve_answer(r, rt);
        return;
    }

    rt->sem.qvecs = res->vecs;
    rt->sem.dim = res->dim;

    if (rt->nlater) {
        ngx_ioa_embed_store(rt->later, rt->later_descs,
                            &res->vecs[rt->nq * res->dim], rt->nlater,
                            res->dim);
    }

    if (ngx_ioa_ranking_header(r, "hybrid", NULL) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_retrieve_answer(r, rt);
}


/* vectors for agents embedded late: stored if their desc is still the one
 * embedded (embed_store.lua); nobody waits for the answer */

static void
ngx_ioa_embed_store(ngx_str_t *names, ngx_str_t *descs, float *vecs,
    ngx_uint_t n, ngx_uint_t dim)
{
    ngx_uint_t            i;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &mcf->index_agents_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &mcf->embed_model);

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &names[i]);
        ngx_ioa_args_str(&a, &descs[i]);
        ngx_ioa_args_buf(&a, (u_char *) &vecs[i * dim], dim * sizeof(float));
    }

    /* the send formats the command at once: the vectors need not outlive
     * it */
    (void) ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_EMBED_STORE, NULL, NULL, 1,
                                     &a);
}


/* the endpoint failed: said in the log at most once a minute per worker,
 * with its reason; the answer says so in each agent and a header */

static void
ngx_ioa_embed_failed(ngx_http_request_t *r, ngx_ioa_embed_result_t *res)
{
    static ngx_msec_t  last;

    if (last == 0 || ngx_current_msec - last >= 60000) {
        last = ngx_current_msec;
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "ioa_embedding: %V (status %ui); discovery ranks by "
                      "BM25 alone and registrations wait for their vectors "
                      "(said once a minute)",
                      &res->error, res->status);
    }
}


/* X-Ioa-Ranking: "hybrid", or "bm25; <why the embedder was not used>" */

static ngx_int_t
ngx_ioa_ranking_header(ngx_http_request_t *r, const char *how,
    ngx_str_t *why)
{
    u_char           *p;
    size_t            len;
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    len = ngx_strlen(how) + (why ? 2 + why->len : 0);

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "X-Ioa-Ranking");
    h->value.data = p;
    p = ngx_cpymem(p, how, ngx_strlen(how));

    if (why) {
        p = ngx_cpymem(p, "; ", 2);
        p = ngx_cpymem(p, why->data, why->len);
    }

    h->value.len = p - h->value.data;

    return NGX_OK;
}


/* X-Ioa-Discovery: who ranked the answer, "index" or "redis" */

static ngx_int_t
ngx_ioa_discovery_header(ngx_http_request_t *r, const char *who)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "X-Ioa-Discovery");
    h->value.data = (u_char *) who;
    h->value.len = ngx_strlen(who);

    return NGX_OK;
}


static void
ngx_ioa_retrieve_done(ngx_http_request_t *r, redisReply *reply)
{
    size_t               i;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_retrieve_t  *rt;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements % NGX_IOA_RETRIEVE_TUPLE)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    rt = ngx_ioa_rest_get_data(r);

    ngx_ioa_stat_add(NGX_IOA_STAT_DISCOVERY_REDIS, 1);
    ngx_ioa_stat_observe(NGX_IOA_HIST_DISCOVERY,
                         ngx_ioa_stats_now_us() - rt->t0);

    if (ngx_ioa_jbuf_init(&b, r->pool, 256 + reply->elements * 64)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_byte(&b, '[');

    /* name, type, desc, tags_json, score, online, protocol */

    for (i = 0; i < reply->elements; i += NGX_IOA_RETRIEVE_TUPLE) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_agent_json(&b, &reply->element[i], 0, 1, 1, 0);
    }

    ngx_ioa_jbuf_byte(&b, ']');

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


/*
 * POST /query_assistant {"name": "<name>" | ["<name>",..]}: the agent, or a
 * list in the same order with null for a name not registered (IoA's
 * declared answer).  A single unknown name is a 404 naming it; IoA's own
 * server probably answered that with a 500.
 */

ngx_int_t
ngx_ioa_query_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_query_body);
}


/* POST /query_assistant's body: "name", one name or a list (checked after) */

#define NGX_IOA_QUERY_NAMES_MAX  1000

static ngx_ioa_body_field_t  ngx_ioa_query_fields[] = {

    { "name", NGX_IOA_BODY_VALUE, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      "\"name\" must be an agent name or a list of 1 to "
      ngx_value(NGX_IOA_QUERY_NAMES_MAX) " names", 0 },

    ngx_ioa_body_null_field
};


static void
ngx_ioa_query_body(ngx_http_request_t *r, ngx_str_t *body)
{
    size_t                   i, n;
    yajl_val                 doc, v;
    ngx_str_t                s, online_key;
    ngx_ioa_args_t           a;
    ngx_ioa_error_t          err;
    ngx_ioa_main_conf_t     *mcf;
    ngx_ioa_registry_ctx_t  *rctx;
    u_char                   why[NGX_IOA_NAME_WHY_LEN];

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    v = NULL;

    if (ngx_ioa_body_check(doc, ngx_ioa_query_fields, 0, &v, &err) != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
        return;
    }

    /* one name or a list of them: more than a table says */

    if ((!YAJL_IS_STRING(v) && !YAJL_IS_ARRAY(v))
        || (YAJL_IS_ARRAY(v)
            && (v->u.array.len == 0
                || v->u.array.len > NGX_IOA_QUERY_NAMES_MAX)))
    {
        ngx_ioa_finish(r, ngx_ioa_invalid(r, "name",
                                          ngx_ioa_query_fields[0].text));
        return;
    }

    rctx = ngx_pcalloc(r->pool, sizeof(ngx_ioa_registry_ctx_t));
    if (rctx == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rctx->single = YAJL_IS_STRING(v);
    n = rctx->single ? 1 : v->u.array.len;

    if (ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_ONLINE, &online_key) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &online_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms());

    for (i = 0; i < n; i++) {
        if (ngx_ioa_json_string(rctx->single ? v : v->u.array.values[i], &s)
            != NGX_OK)
        {
            ngx_ioa_args_free(&a);
            ngx_ioa_finish(r, ngx_ioa_invalid(r, "name",
                           "every name must be a name: "
                           NGX_IOA_NAME_RULE));
            return;
        }

        if (ngx_ioa_name_check(&s, why) != NGX_OK) {
            ngx_ioa_args_free(&a);
            ngx_ioa_finish(r, ngx_ioa_invalid_name(r, "name", why));
            return;
        }

        ngx_ioa_args_str(&a, &s);
    }

    ngx_ioa_rest_set_data(r, rctx);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_QUERY, ngx_ioa_query_done,
                                 1, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_query_done(ngx_http_request_t *r, redisReply *reply)
{
    size_t                   i, n;
    redisReply             **f;
    ngx_ioa_jbuf_t           b;
    ngx_ioa_error_t          err;
    ngx_ioa_registry_ctx_t  *rctx;

    rctx = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements % NGX_IOA_QUERY_TUPLE)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    /* found, name, type, desc, tags_json, created_at, online, protocol,
     * record, a2a_url */

    n = reply->elements / NGX_IOA_QUERY_TUPLE;
    f = reply->element;

    if (rctx->single && n == 1 && f[0]->str[0] != '1') {
        ngx_ioa_error_set(&err, "unknown_agent", "name",
                          "not registered: %*s", (size_t) f[1]->len,
                          f[1]->str);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err));
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 256 + reply->elements * 64) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* a list answers a list, with null where a name is not registered:
     * IoA's declared list[AgentInfo | None], so that one agent gone does
     * not fail a whole team's lookup */

    if (!rctx->single) {
        ngx_ioa_jbuf_byte(&b, '[');
    }

    for (i = 0; i < n; i++, f += NGX_IOA_QUERY_TUPLE) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        if (f[0]->str[0] != '1') {
            ngx_ioa_jbuf_literal(&b, "null");
            continue;
        }

        ngx_ioa_agent_json(&b, &f[1], 1, 0, 1, 8);
    }

    if (!rctx->single) {
        ngx_ioa_jbuf_byte(&b, ']');
    }

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


/* GET|POST /list_all_agents[?offset=N&limit=M]: IoA's dump of the registry
 * with "key" = name, oldest first; at most 10000 per call */

ngx_int_t
ngx_ioa_list_agents_handler(ngx_http_request_t *r)
{
    ngx_int_t             offset, limit;
    ngx_str_t             v, agents_key, online_key;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    offset = 0;
    limit = 10000;

    if (ngx_http_arg(r, (u_char *) "offset", 6, &v) == NGX_OK) {
        offset = ngx_atoi(v.data, v.len);

        if (offset == NGX_ERROR) {
            return ngx_ioa_invalid(r, "offset",
                                   "\"offset\" must be a number");
        }
    }

    if (ngx_http_arg(r, (u_char *) "limit", 5, &v) == NGX_OK) {
        limit = ngx_atoi(v.data, v.len);

        if (limit == NGX_ERROR || limit > 10000) {
            return ngx_ioa_invalid(r, "limit",
                                   "\"limit\" must be a number up to 10000");
        }
    }

    if (ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_AGENTS, &agents_key) != NGX_OK
        || ngx_ioa_key_alloc(r->pool, NGX_IOA_KEY_ONLINE, &online_key)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    mcf = ngx_ioa_main_conf();

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &agents_key);
    ngx_ioa_args_str(&a, &online_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms());
    ngx_ioa_args_fmt(&a, "%i", offset);
    ngx_ioa_args_fmt(&a, "%i", limit);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_LIST_AGENTS,
                                 ngx_ioa_list_done, 2, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_list_done(ngx_http_request_t *r, redisReply *reply)
{
    size_t          i;
    ngx_ioa_jbuf_t  b;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 1
        || (reply->elements - 1) % NGX_IOA_LIST_TUPLE)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, 256 + reply->elements * 64) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_byte(&b, '[');

    /* name, type, desc, tags_json, created_at, online, protocol, a2a_url */

    for (i = 1; i + NGX_IOA_LIST_TUPLE <= reply->elements;
         i += NGX_IOA_LIST_TUPLE)
    {
        if (i > 1) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_literal(&b, "{\"key\":");
        {
            ngx_str_t  s;

            s.data = (u_char *) reply->element[i]->str;
            s.len = reply->element[i]->len;
            ngx_ioa_jbuf_str(&b, &s);
        }

        ngx_ioa_jbuf_byte(&b, ',');

        /* the rest of the object, without its opening brace */
        {
            u_char  *mark;

            mark = b.pos;
            ngx_ioa_agent_json(&b, &reply->element[i], 1, 0, 0, 7);

            if (!b.failed && b.pos > mark) {
                ngx_memmove(mark, mark + 1, b.pos - mark - 1);
                b.pos--;
            }
        }
    }

    ngx_ioa_jbuf_byte(&b, ']');

    ngx_ioa_finish(r, ngx_ioa_send_jbuf(r, NGX_HTTP_OK, &b));
}


/*
 * One agent as IoA's AgentInfo plus ours:
 * {"name","type","desc","tags":[..],"online":bool,"speaks_protocol":bool,
 *  "created_at" | "score", "record", "a2a_url"}.  f points at name, type,
 * desc, tags_json, then created_at or score, online, protocol, and with
 * record the agent's task record (JSON written by query.lua and
 * retrieve.lua); a2a, if not 0, is where the agent's A2A card URL is
 * ("a2a_url" only when it has one).
 */

static void
ngx_ioa_agent_json(ngx_ioa_jbuf_t *b, redisReply **f, ngx_uint_t created,
    ngx_uint_t score, ngx_uint_t record, ngx_uint_t a2a)
{
    ngx_str_t  s;

#define ngx_ioa_field(i)                                                      \
    s.data = (u_char *) f[i]->str; s.len = f[i]->len

    ngx_ioa_jbuf_literal(b, "{\"name\":");
    ngx_ioa_field(0);
    ngx_ioa_jbuf_str(b, &s);

    ngx_ioa_jbuf_literal(b, ",\"type\":");
    ngx_ioa_field(1);
    ngx_ioa_jbuf_str(b, &s);

    ngx_ioa_jbuf_literal(b, ",\"desc\":");
    ngx_ioa_field(2);
    ngx_ioa_jbuf_str(b, &s);

    /* tags_json was written by us at registration: a JSON array */
    ngx_ioa_jbuf_literal(b, ",\"tags\":");
    ngx_ioa_field(3);

    if (s.len) {
        ngx_ioa_jbuf_raw(b, s.data, s.len);

    } else {
        ngx_ioa_jbuf_literal(b, "[]");
    }

    if (created) {
        ngx_ioa_jbuf_literal(b, ",\"created_at\":");
        ngx_ioa_field(4);
        ngx_ioa_jbuf_str(b, &s);
    }

    if (score) {
        ngx_ioa_jbuf_literal(b, ",\"score\":");
        ngx_ioa_field(4);
        ngx_ioa_jbuf_raw(b, s.data, s.len);
    }

    ngx_ioa_jbuf_literal(b, ",\"online\":");
    ngx_ioa_field(5);

    if (s.len && s.data[0] == '1') {
        ngx_ioa_jbuf_literal(b, "true");

    } else {
        ngx_ioa_jbuf_literal(b, "false");
    }

    ngx_ioa_jbuf_literal(b, ",\"speaks_protocol\":");
    ngx_ioa_field(6);

    if (s.len && s.data[0] == '1') {
        ngx_ioa_jbuf_literal(b, "true");

    } else {
        ngx_ioa_jbuf_literal(b, "false");
    }

    if (record) {
        ngx_ioa_field(7);
        ngx_ioa_jbuf_literal(b, ",\"record\":");

        if (s.len) {
            ngx_ioa_jbuf_raw(b, s.data, s.len);

        } else {
            ngx_ioa_jbuf_literal(b, "{}");
        }
    }

    if (a2a && f[a2a]->type == REDIS_REPLY_STRING && f[a2a]->len) {
        ngx_ioa_field(a2a);
        ngx_ioa_jbuf_literal(b, ",\"a2a_url\":");
        ngx_ioa_jbuf_str(b, &s);
    }

    ngx_ioa_jbuf_byte(b, '}');

#undef ngx_ioa_field
}


/*
 * The terms of texts, in order, joined by single spaces: the argument
 * register.lua (a description and its tags) and retrieve.lua (one
 * capability) take.  A text's terms never take more than its length plus
 * one byte (ioa_token_join()), so one allocation is enough.
 */

static ngx_int_t
ngx_ioa_reg_terms(ngx_http_request_t *r, ngx_str_t *texts, ngx_uint_t n,
    ngx_str_t *terms)
{
    size_t      size;
    ngx_uint_t  i;

    size = 0;

    for (i = 0; i < n; i++) {
        size += texts[i].len + 1;
    }

    terms->data = ngx_pnalloc(r->pool, size);
    if (terms->data == NULL) {
        return NGX_ERROR;
    }

    terms->len = 0;

    for (i = 0; i < n; i++) {
        terms->len = ioa_token_join(terms->data, terms->len,
                                    texts[i].data, texts[i].len);
    }

    return NGX_OK;
}


/* this worker's holder id: pid plus random bits, so a restarted worker
 * that gets the same pid is still someone else */

ngx_str_t *
ngx_ioa_holder(void)
{
    u_char  rnd[8];

    static u_char     data[64];
    static ngx_str_t  holder;

    if (holder.len == 0) {
        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
            ngx_memzero(rnd, sizeof(rnd));
        }

        holder.data = data;
        holder.len = ngx_sprintf(data, "%P-", ngx_pid) - data;
        holder.len = ngx_hex_dump(data + holder.len, rnd, sizeof(rnd)) - data;
    }

    return &holder;
}


/* this worker holds names online until now + ioa_presence_ttl, or lets
 * them go (presence.lua keeps an agent online while any other worker or
 * instance still holds it); the tick (ngx_ioa_client.c's presence) renews
 * it for every connected agent, so an instance that dies lets its agents
 * expire instead of leaving them online forever */

void
ngx_ioa_presence_set(ngx_str_t *names, ngx_uint_t n, ngx_uint_t online)
{
    int64_t               ms;
    ngx_str_t            *holder;
    ngx_uint_t            i;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    if (!ngx_ioa_redis_ready()) {
        return;
    }

    holder = ngx_ioa_holder();

    mcf = ngx_ioa_main_conf();
    ms = ngx_ioa_now_ms();

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_ONLINE);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, holder);
    ngx_ioa_args_fmt(&a, "%L", online ? ms + mcf->presence_ttl : 0);
    ngx_ioa_args_fmt(&a, "%L", ms);

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &names[i]);
    }

    (void) ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_PRESENCE,
                                     ngx_ioa_presence_done, NULL, 1, &a);
}


static void
ngx_ioa_presence_done(redisReply *reply, void *data)
{
    /* the next tick tries again: a full Redis is said once a while */
    ngx_ioa_redis_log_refusal(reply, "a presence update");
}


static ngx_int_t
ngx_ioa_invalid(ngx_http_request_t *r, const char *field, const char *text)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "invalid_request", field, "%s", text);

    return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
}


/*
 * A name the rule refuses, and why (ngx_ioa_name_check()).  The name
 * itself is not echoed: it may hold the very bidirectional control that
 * got it refused, which would reorder the message around it.
 */

static ngx_int_t
ngx_ioa_invalid_name(ngx_http_request_t *r, const char *field, u_char *why)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "invalid_request", field,
                      "\"%s\" is not a name: %s", field, why);

    return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
}
