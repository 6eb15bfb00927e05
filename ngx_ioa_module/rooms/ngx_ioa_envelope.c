
/*
 * ioa: parse, validate and normalise one IoA AgentMessage.
 *
 * Every frame an agent posts comes through here, so the envelope is read
 * and rewritten in a single pass: yajl's callback parser drives a writer
 * that re-emits each token compactly as it arrives.  No tree is built and
 * nothing recurses; the only state is the current depth, the top-level
 * member being read and a few flags.  The output can never be longer than
 * the input plus the stamped prefix (escapes only shrink or keep their
 * length, whitespace goes), so it is sized once and does not grow.
 *
 * The output starts {"sender":<identity>,"timestamp":<now> and then holds
 * the client's other top-level members in their order.  "sender" is
 * checked and dropped because identity comes from the connection, not
 * the message; "timestamp", "id", "frontend_type" (the observer feed's)
 * and every "ioa_..." (the coordinator's markers) are the server's, and
 * a client's are dropped silently: no frame the hub sends carries a
 * field twice, nor a marker it did not write.  Numbers, at any depth,
 * must be ones every JSON reader takes the same way (I-JSON).  There is no "id" yet: the stream id is only known
 * after the room log append, and delivery writes it right after the "{".
 *
 * Known IoA fields must have IoA's types: an IoA client would fail on
 * anything else, so refusing here keeps one bad sender from breaking its
 * room.  Unknown fields of any shape are forwarded untouched (fail-open).
 *
 * Whether a frame is an envelope or a control frame ({"op":..} without a
 * "comm_id") is only known at its end, since members come in any order.
 * So a field error is written down and the parse goes on; it is reported
 * only if the frame turns out to be an envelope.  Malformed JSON, depth
 * and duplicate names are refused at once whatever the frame is.
 *
 * Duplicate top-level names: known fields are one bit each; unknown names
 * are collected and sorted at the end, so a frame of a hundred thousand
 * keys costs n log n, not n squared.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa_json.h"
#include "ngx_ioa_envelope.h"


/* user text quoted in an error sentence is cut to this many bytes */
#define NGX_IOA_QUOTE_MAX          64


/* what a known top-level member must hold */
#define NGX_IOA_ENV_ANY            0    /* unknown: forwarded as is */
#define NGX_IOA_ENV_DROP           1    /* the server's: dropped */
#define NGX_IOA_ENV_SENDER         2
#define NGX_IOA_ENV_COMM_ID        3
#define NGX_IOA_ENV_OP             4
#define NGX_IOA_ENV_STRING         5
#define NGX_IOA_ENV_STRING_NULL    6
#define NGX_IOA_ENV_SPEAKER        7    /* string or array of strings */
#define NGX_IOA_ENV_STRINGS        8
#define NGX_IOA_ENV_OBJECTS_NULL   9
#define NGX_IOA_ENV_INT_NULL       10
#define NGX_IOA_ENV_BOOL           11
#define NGX_IOA_ENV_STATE          12
#define NGX_IOA_ENV_TYPE           13

/* JSON value kinds as the callbacks see them */
#define NGX_IOA_J_STRING           0
#define NGX_IOA_J_NUMBER           1
#define NGX_IOA_J_BOOL             2
#define NGX_IOA_J_NULL             3
#define NGX_IOA_J_MAP              4
#define NGX_IOA_J_ARRAY            5


typedef struct {
    ngx_str_t                     name;
    ngx_uint_t                    kind;
    const char                   *expect;   /* "\"name\" must be ..." */
} ngx_ioa_env_field_t;


typedef struct {
    ngx_pool_t                   *pool;
    ngx_ioa_envelope_t           *env;
    ngx_ioa_error_t              *err;      /* fatal: stops the parse */
    ngx_ioa_error_t               field_err;
    ngx_str_t                    *identity;
    ngx_uint_t                    open;      /* IoA's open mode */
    int64_t                       now_ms;
    ngx_ioa_jbuf_t                out;
    ngx_array_t                  *names;    /* unknown top-level names */
    const ngx_ioa_env_field_t    *field;    /* current member, or NULL */
    ngx_uint_t                    depth;
    ngx_uint_t                    max_depth;
    ngx_uint_t                    seen;     /* known fields, one bit each */

    unsigned                      emit:1;   /* current member is kept */
    unsigned                      comma:1;
    unsigned                      invalid:1;    /* field_err is set */
    unsigned                      has_comm_id:1;
    unsigned                      has_op:1;
} ngx_ioa_env_ctx_t;


static const ngx_ioa_env_field_t *ngx_ioa_env_lookup(u_char *name,
    size_t len, ngx_uint_t *bit);
static void ngx_ioa_env_check(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type);
static void ngx_ioa_env_invalid(ngx_ioa_env_ctx_t *ctx);
static int ngx_ioa_env_scalar(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type);
static void ngx_ioa_env_emit(ngx_ioa_env_ctx_t *ctx, const u_char *s,
    size_t len);
static ngx_int_t ngx_ioa_env_restamp(ngx_pool_t *pool,
    ngx_ioa_envelope_t *env, ngx_str_t *identity, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_env_copy(ngx_ioa_env_ctx_t *ctx, ngx_str_t *dst,
    const u_char *s, size_t len);
static ngx_int_t ngx_ioa_env_speaker(ngx_ioa_env_ctx_t *ctx,
    const u_char *s, size_t len);
static ngx_int_t ngx_ioa_env_comm_id(ngx_ioa_env_ctx_t *ctx,
    const u_char *s, size_t len);
static void ngx_ioa_env_sender(ngx_ioa_env_ctx_t *ctx, const u_char *s,
    size_t len);
static int ngx_ioa_env_not_object(ngx_ioa_env_ctx_t *ctx);
static int ngx_ioa_env_no_memory(ngx_ioa_env_ctx_t *ctx);
static ngx_int_t ngx_ioa_env_duplicates(ngx_ioa_env_ctx_t *ctx);
static int ngx_libc_cdecl ngx_ioa_env_cmp(const void *one, const void *two);

static int ngx_ioa_env_null(void *data);
static int ngx_ioa_env_boolean(void *data, int b);
static int ngx_ioa_env_number(void *data, const char *s, size_t len);
static int ngx_ioa_env_string(void *data, const unsigned char *s,
    size_t len);
static int ngx_ioa_env_start(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type);
static int ngx_ioa_env_start_map(void *data);
static int ngx_ioa_env_map_key(void *data, const unsigned char *s,
    size_t len);
static int ngx_ioa_env_end(ngx_ioa_env_ctx_t *ctx, u_char c);
static int ngx_ioa_env_end_map(void *data);
static int ngx_ioa_env_start_array(void *data);
static int ngx_ioa_env_end_array(void *data);


static const yajl_callbacks  ngx_ioa_env_callbacks = {
    ngx_ioa_env_null,
    ngx_ioa_env_boolean,
    NULL,                                  /* integer: number has it */
    NULL,                                  /* double: number has it */
    ngx_ioa_env_number,
    ngx_ioa_env_string,
    ngx_ioa_env_start_map,
    ngx_ioa_env_map_key,
    ngx_ioa_env_end_map,
    ngx_ioa_env_start_array,
    ngx_ioa_env_end_array
};


/* common/types/communication.py AgentMessage, plus the server's own */

static const ngx_ioa_env_field_t  ngx_ioa_env_fields[] = {

    { ngx_string("content"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("sender"), NGX_IOA_ENV_SENDER, "a string" },
    { ngx_string("comm_id"), NGX_IOA_ENV_COMM_ID,
      "1 to 64 characters from A-Z, a-z, 0-9, \"_\" and \"-\"" },
    { ngx_string("next_speaker"), NGX_IOA_ENV_SPEAKER,
      "a string or an array of strings" },
    { ngx_string("state"), NGX_IOA_ENV_STATE, "an integer from 0 to 3" },
    { ngx_string("type"), NGX_IOA_ENV_TYPE, "an integer from 0 to 11" },
    { ngx_string("proposal_id"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("goal"), NGX_IOA_ENV_STRING_NULL, "a string or null" },
    { ngx_string("team_members"), NGX_IOA_ENV_OBJECTS_NULL,
      "an array of objects or null" },
    { ngx_string("team_up_depth"), NGX_IOA_ENV_INT_NULL,
      "an integer or null" },
    { ngx_string("task_id"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("task_desc"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("task_conclusion"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("task_abstract"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("triggers"), NGX_IOA_ENV_STRINGS, "an array of strings" },
    { ngx_string("updated_plan"), NGX_IOA_ENV_STRING, "a string" },
    { ngx_string("is_collaborative_planning_enabled"), NGX_IOA_ENV_BOOL,
      "true or false" },
    { ngx_string("max_turns"), NGX_IOA_ENV_INT_NULL, "an integer or null" },
    { ngx_string("timestamp"), NGX_IOA_ENV_DROP, NULL },
    { ngx_string("id"), NGX_IOA_ENV_DROP, NULL },
    { ngx_string("frontend_type"), NGX_IOA_ENV_DROP, NULL },
    { ngx_string("op"), NGX_IOA_ENV_OP, NULL }
};

#define ngx_ioa_env_nfields                                                 \
    (sizeof(ngx_ioa_env_fields) / sizeof(ngx_ioa_env_fields[0]))


ngx_int_t
ngx_ioa_envelope_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *identity, ngx_uint_t max_depth, int64_t now_ms,
    ngx_ioa_envelope_t *env, ngx_ioa_error_t *err)
{
    return ngx_ioa_envelope_parse_as(pool, data, len, identity, 0, max_depth,
                                     now_ms, env, err);
}


ngx_int_t
ngx_ioa_envelope_parse_as(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *identity, ngx_uint_t open, ngx_uint_t max_depth,
    int64_t now_ms, ngx_ioa_envelope_t *env, ngx_ioa_error_t *err)
{
    size_t             size;
    ngx_ioa_env_ctx_t  ctx;

    ngx_memzero(env, sizeof(ngx_ioa_envelope_t));
    ngx_memzero(&ctx, sizeof(ngx_ioa_env_ctx_t));

    env->type = NGX_IOA_TYPE_NONE;

    ctx.pool = pool;
    ctx.env = env;
    ctx.err = err;
    ctx.identity = identity;
    ctx.open = open;
    ctx.now_ms = now_ms;
    ctx.max_depth = max_depth;

    size = len + sizeof("{\"sender\":,\"timestamp\":}") - 1
           + ngx_ioa_json_str_len(identity) + NGX_INT64_LEN;

    if (ngx_ioa_jbuf_init(&ctx.out, pool, size) != NGX_OK) {
        ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
        return NGX_ERROR;
    }

    if (ngx_ioa_json_stream(pool, &ngx_ioa_env_callbacks, &ctx, data, len,
                            err)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_ioa_env_duplicates(&ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!ctx.has_comm_id && ctx.has_op) {

        /* a control frame: the caller reads it as a tree */

        env->json.data = ngx_pnalloc(pool, len);
        if (env->json.data == NULL) {
            ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
            return NGX_ERROR;
        }

        ngx_memcpy(env->json.data, data, len);
        env->json.len = len;

        env->is_control = 1;
        env->type = NGX_IOA_TYPE_NONE;
        env->state = 0;
        env->next_speaker = NULL;

        return NGX_OK;
    }

    if (ctx.invalid) {
        *err = ctx.field_err;
        return NGX_ERROR;
    }

    if (!ctx.has_comm_id) {
        ngx_ioa_error_set(err, "missing_comm_id", "comm_id",
                          "an envelope needs a \"comm_id\"");
        return NGX_ERROR;
    }

    if (ngx_ioa_jbuf_done(&ctx.out, &env->json) != NGX_OK) {
        ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
        return NGX_ERROR;
    }

    ngx_str_null(&env->op);

    if (env->sender.len) {
        return ngx_ioa_env_restamp(pool, env, identity, err);
    }

    return NGX_OK;
}


/*
 * Open mode: {"sender":<identity>,... becomes {"sender":<env->sender>,...
 * (the stamp is written before the client's "sender" is read, in the
 * single pass; a copy of the rest is the price of a rare case).
 */

static ngx_int_t
ngx_ioa_env_restamp(ngx_pool_t *pool, ngx_ioa_envelope_t *env,
    ngx_str_t *identity, ngx_ioa_error_t *err)
{
    u_char   *p;
    size_t    skip;
    ngx_str_t json;

    skip = sizeof("{\"sender\":") - 1 + ngx_ioa_json_str_len(identity);

    json.len = sizeof("{\"sender\":") - 1
               + ngx_ioa_json_str_len(&env->sender) + env->json.len - skip;
    json.data = ngx_pnalloc(pool, json.len);
    if (json.data == NULL) {
        ngx_ioa_error_set(err, "internal_error", NULL, "out of memory");
        return NGX_ERROR;
    }

    p = ngx_cpymem(json.data, "{\"sender\":", sizeof("{\"sender\":") - 1);
    p = ngx_ioa_json_str(p, &env->sender);
    ngx_memcpy(p, env->json.data + skip, env->json.len - skip);

    env->json = json;

    return NGX_OK;
}


static const ngx_ioa_env_field_t *
ngx_ioa_env_lookup(u_char *name, size_t len, ngx_uint_t *bit)
{
    ngx_uint_t                  i;
    const ngx_ioa_env_field_t  *f;

    /* the coordinator's markers (ioa_goal, ioa_step, ioa_decision, ...):
     * the workers post them straight to Redis, never through here, so a
     * client's can only be a forgery of one */
    static const ngx_ioa_env_field_t  reserved =
        { ngx_string("ioa_"), NGX_IOA_ENV_DROP, NULL };

    if (len > 4 && ngx_strncmp(name, "ioa_", 4) == 0) {
        *bit = 0;
        return &reserved;
    }

    for (i = 0; i < ngx_ioa_env_nfields; i++) {
        f = &ngx_ioa_env_fields[i];

        if (f->name.len == len && ngx_memcmp(f->name.data, name, len) == 0) {
            *bit = (ngx_uint_t) 1 << i;
            return f;
        }
    }

    return NULL;
}


/* does a value of this JSON type fit where it stands? */

static void
ngx_ioa_env_check(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type)
{
    ngx_uint_t  ok;

    if (ctx->invalid || ctx->field == NULL) {
        return;
    }

    ok = 1;

    if (ctx->depth == 1) {

        switch (ctx->field->kind) {

        case NGX_IOA_ENV_STRING:
        case NGX_IOA_ENV_SENDER:
        case NGX_IOA_ENV_COMM_ID:
            ok = (type == NGX_IOA_J_STRING);
            break;

        case NGX_IOA_ENV_STRING_NULL:
            ok = (type == NGX_IOA_J_STRING || type == NGX_IOA_J_NULL);
            break;

        case NGX_IOA_ENV_SPEAKER:
            ok = (type == NGX_IOA_J_STRING || type == NGX_IOA_J_ARRAY);
            break;

        case NGX_IOA_ENV_STRINGS:
            ok = (type == NGX_IOA_J_ARRAY);
            break;

        case NGX_IOA_ENV_OBJECTS_NULL:
            ok = (type == NGX_IOA_J_ARRAY || type == NGX_IOA_J_NULL);
            break;

        case NGX_IOA_ENV_INT_NULL:
            ok = (type == NGX_IOA_J_NUMBER || type == NGX_IOA_J_NULL);
            break;

        case NGX_IOA_ENV_BOOL:
            ok = (type == NGX_IOA_J_BOOL);
            break;

        case NGX_IOA_ENV_STATE:
        case NGX_IOA_ENV_TYPE:
            ok = (type == NGX_IOA_J_NUMBER);
            break;

        default: /* unknown, dropped, "op": anything goes */
            break;
        }

    } else if (ctx->depth == 2) {

        /* an element of a member that passed as an array */

        switch (ctx->field->kind) {

        case NGX_IOA_ENV_SPEAKER:
        case NGX_IOA_ENV_STRINGS:
            ok = (type == NGX_IOA_J_STRING);
            break;

        case NGX_IOA_ENV_OBJECTS_NULL:
            ok = (type == NGX_IOA_J_MAP);
            break;

        default:
            break;
        }
    }

    if (!ok) {
        ngx_ioa_env_invalid(ctx);
    }
}


static void
ngx_ioa_env_invalid(ngx_ioa_env_ctx_t *ctx)
{
    const ngx_ioa_env_field_t  *f;

    f = ctx->field;

    ngx_ioa_error_set(&ctx->field_err, "invalid_envelope",
                      (const char *) f->name.data, "\"%V\" must be %s",
                      &f->name, f->expect);

    ctx->invalid = 1;
}


/* the part every scalar shares; returns 0 to stop the parse */

static int
ngx_ioa_env_scalar(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type)
{
    if (ctx->depth == 0) {
        return ngx_ioa_env_not_object(ctx);
    }

    ngx_ioa_env_check(ctx, type);

    return 1;
}


/* write a scalar that is already in JSON form */

static void
ngx_ioa_env_emit(ngx_ioa_env_ctx_t *ctx, const u_char *s, size_t len)
{
    if (!ctx->emit || ctx->invalid) {
        return;
    }

    if (ctx->comma) {
        ngx_ioa_jbuf_byte(&ctx->out, ',');
    }

    ngx_ioa_jbuf_raw(&ctx->out, s, len);

    ctx->comma = 1;
}


static ngx_int_t
ngx_ioa_env_copy(ngx_ioa_env_ctx_t *ctx, ngx_str_t *dst, const u_char *s,
    size_t len)
{
    dst->data = ngx_pnalloc(ctx->pool, len ? len : 1);
    if (dst->data == NULL) {
        return NGX_ERROR;
    }

    if (len) {
        ngx_memcpy(dst->data, s, len);
    }

    dst->len = len;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_env_speaker(ngx_ioa_env_ctx_t *ctx, const u_char *s, size_t len)
{
    ngx_str_t  *name;

    if (len == 0) {
        return NGX_OK;           /* "" addresses nobody */
    }

    if (ctx->env->next_speaker == NULL) {
        ctx->env->next_speaker = ngx_array_create(ctx->pool, 2,
                                                  sizeof(ngx_str_t));
        if (ctx->env->next_speaker == NULL) {
            return NGX_ERROR;
        }
    }

    name = ngx_array_push(ctx->env->next_speaker);
    if (name == NULL) {
        return NGX_ERROR;
    }

    return ngx_ioa_env_copy(ctx, name, s, len);
}


static ngx_int_t
ngx_ioa_env_comm_id(ngx_ioa_env_ctx_t *ctx, const u_char *s, size_t len)
{
    size_t  i;
    u_char  c;

    if (len == 0 || len > NGX_IOA_COMM_ID_MAX) {
        ngx_ioa_env_invalid(ctx);
        return NGX_OK;
    }

    for (i = 0; i < len; i++) {
        c = s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '_' || c == '-')
        {
            continue;
        }

        ngx_ioa_env_invalid(ctx);
        return NGX_OK;
    }

    return ngx_ioa_env_copy(ctx, &ctx->env->comm_id, s, len);
}


static void
ngx_ioa_env_sender(ngx_ioa_env_ctx_t *ctx, const u_char *s, size_t len)
{
    ngx_str_t   me, them;
    ngx_str_t  *id;

    id = ctx->identity;

    if (len == 0
        || (len == id->len && ngx_memcmp(s, id->data, len) == 0))
    {
        return;
    }

    if (ctx->open) {
        /* IoA's cont_input from "user": kept, stamped at the end */
        (void) ngx_ioa_env_copy(ctx, &ctx->env->sender, s, len);
        return;
    }

    me.data = id->data;
    me.len = ngx_ioa_utf8_clip(id->data, id->len, NGX_IOA_QUOTE_MAX);

    them.data = (u_char *) s;
    them.len = ngx_ioa_utf8_clip((u_char *) s, len, NGX_IOA_QUOTE_MAX);

    ngx_ioa_error_set(&ctx->field_err, "sender_mismatch", "sender",
                      "this connection speaks as \"%V\"; "
                      "it cannot send as \"%V\"", &me, &them);

    ctx->invalid = 1;
}


static int
ngx_ioa_env_not_object(ngx_ioa_env_ctx_t *ctx)
{
    ngx_ioa_error_set(ctx->err, "invalid_envelope", NULL,
                      "an envelope must be a JSON object");
    return 0;
}


static int
ngx_ioa_env_no_memory(ngx_ioa_env_ctx_t *ctx)
{
    ngx_ioa_error_set(ctx->err, "internal_error", NULL, "out of memory");
    return 0;
}


static ngx_int_t
ngx_ioa_env_duplicates(ngx_ioa_env_ctx_t *ctx)
{
    ngx_str_t   *name;
    ngx_uint_t   i;

    if (ctx->names == NULL || ctx->names->nelts < 2) {
        return NGX_OK;
    }

    name = ctx->names->elts;

    ngx_qsort(name, ctx->names->nelts, sizeof(ngx_str_t), ngx_ioa_env_cmp);

    for (i = 1; i < ctx->names->nelts; i++) {

        if (ngx_ioa_env_cmp(&name[i - 1], &name[i]) != 0) {
            continue;
        }

        name[i].len = ngx_ioa_utf8_clip(name[i].data, name[i].len,
                                        NGX_IOA_QUOTE_MAX);

        ngx_ioa_error_set(ctx->err, "invalid_envelope", NULL,
                          "duplicate field \"%V\"", &name[i]);
        ctx->err->field = name[i];

        return NGX_ERROR;
    }

    return NGX_OK;
}


static int ngx_libc_cdecl
ngx_ioa_env_cmp(const void *one, const void *two)
{
    int               rc;
    size_t            n;
    const ngx_str_t  *a, *b;

    a = one;
    b = two;

    n = ngx_min(a->len, b->len);

    rc = n ? ngx_memcmp(a->data, b->data, n) : 0;

    if (rc != 0) {
        return rc;
    }

    return (a->len > b->len) - (a->len < b->len);
}


static int
ngx_ioa_env_null(void *data)
{
    ngx_ioa_env_ctx_t  *ctx;

    ctx = data;

    if (!ngx_ioa_env_scalar(ctx, NGX_IOA_J_NULL)) {
        return 0;
    }

    ngx_ioa_env_emit(ctx, (u_char *) "null", 4);

    return 1;
}


static int
ngx_ioa_env_boolean(void *data, int b)
{
    ngx_ioa_env_ctx_t  *ctx;

    ctx = data;

    if (!ngx_ioa_env_scalar(ctx, NGX_IOA_J_BOOL)) {
        return 0;
    }

    if (b) {
        ngx_ioa_env_emit(ctx, (u_char *) "true", 4);

    } else {
        ngx_ioa_env_emit(ctx, (u_char *) "false", 5);
    }

    return 1;
}


static int
ngx_ioa_env_number(void *data, const char *s, size_t len)
{
    int64_t             v, max;
    ngx_uint_t          kind;
    ngx_ioa_env_ctx_t  *ctx;

    ctx = data;

    if (!ngx_ioa_env_scalar(ctx, NGX_IOA_J_NUMBER)) {
        return 0;
    }

    /* anywhere in the envelope: it is stored and sent to every reader */
    if (ngx_ioa_json_number_ok((u_char *) s, len) != NGX_OK) {
        ngx_ioa_error_set(ctx->err, "invalid_envelope", NULL,
                          "the number %*s%s is outside what every JSON "
                          "reader takes (I-JSON, RFC 7493): integers up to "
                          "+-9007199254740991, other numbers finite and at "
                          "most %d characters",
                          ngx_min(len, (size_t) NGX_IOA_QUOTE_MAX), s,
                          len > NGX_IOA_QUOTE_MAX ? "..." : "",
                          NGX_IOA_JSON_NUMBER_MAX);
        return 0;
    }

    if (ctx->depth == 1 && ctx->field && !ctx->invalid) {

        kind = ctx->field->kind;

        if (kind == NGX_IOA_ENV_INT_NULL
            || kind == NGX_IOA_ENV_STATE
            || kind == NGX_IOA_ENV_TYPE)
        {
            max = (kind == NGX_IOA_ENV_STATE) ? NGX_IOA_STATE_EXECUTION
                                              : NGX_IOA_TYPE_CONCLUSION;

            if (ngx_ioa_json_int((u_char *) s, len, &v) != NGX_OK
                || (kind != NGX_IOA_ENV_INT_NULL && (v < 0 || v > max)))
            {
                ngx_ioa_env_invalid(ctx);

            } else if (kind == NGX_IOA_ENV_STATE) {
                ctx->env->state = (ngx_int_t) v;

            } else if (kind == NGX_IOA_ENV_TYPE) {
                ctx->env->type = (ngx_int_t) v;
            }
        }
    }

    /* numbers keep their original text */
    ngx_ioa_env_emit(ctx, (u_char *) s, len);

    return 1;
}


static int
ngx_ioa_env_string(void *data, const unsigned char *s, size_t len)
{
    ngx_str_t           str;
    ngx_uint_t          kind;
    ngx_ioa_env_ctx_t  *ctx;

    ctx = data;

    if (!ngx_ioa_env_scalar(ctx, NGX_IOA_J_STRING)) {
        return 0;
    }

    if (ngx_ioa_utf8_valid((u_char *) s, len) != NGX_OK) {
        ngx_ioa_error_set(ctx->err, "invalid_json", NULL,
                          "a string is not valid UTF-8");
        return 0;
    }

    kind = ctx->field ? ctx->field->kind : NGX_IOA_ENV_ANY;

    if (ctx->depth == 1) {

        switch (kind) {

        case NGX_IOA_ENV_OP:
            /* kept even past a field error: it decides the frame kind */
            if (ngx_ioa_env_copy(ctx, &ctx->env->op, s, len) != NGX_OK) {
                return ngx_ioa_env_no_memory(ctx);
            }

            ctx->has_op = 1;
            break;

        case NGX_IOA_ENV_SENDER:
            if (!ctx->invalid) {
                ngx_ioa_env_sender(ctx, s, len);
            }

            break;

        case NGX_IOA_ENV_COMM_ID:
            if (!ctx->invalid
                && ngx_ioa_env_comm_id(ctx, s, len) != NGX_OK)
            {
                return ngx_ioa_env_no_memory(ctx);
            }

            break;

        case NGX_IOA_ENV_SPEAKER:
            if (!ctx->invalid && ngx_ioa_env_speaker(ctx, s, len) != NGX_OK) {
                return ngx_ioa_env_no_memory(ctx);
            }

            break;

        default:
            break;
        }

    } else if (ctx->depth == 2 && kind == NGX_IOA_ENV_SPEAKER
               && !ctx->invalid)
    {
        if (ngx_ioa_env_speaker(ctx, s, len) != NGX_OK) {
            return ngx_ioa_env_no_memory(ctx);
        }
    }

    if (!ctx->emit || ctx->invalid) {
        return 1;
    }

    if (ctx->comma) {
        ngx_ioa_jbuf_byte(&ctx->out, ',');
    }

    str.data = (u_char *) s;
    str.len = len;

    ngx_ioa_jbuf_str(&ctx->out, &str);

    ctx->comma = 1;

    return 1;
}


static int
ngx_ioa_env_start(ngx_ioa_env_ctx_t *ctx, ngx_uint_t type)
{
    if (ctx->depth >= ctx->max_depth) {
        ngx_ioa_error_set(ctx->err, "too_deep", NULL,
                          "JSON nests deeper than %ui levels",
                          ctx->max_depth);
        return 0;
    }

    if (ctx->depth == 0) {

        if (type != NGX_IOA_J_MAP) {
            return ngx_ioa_env_not_object(ctx);
        }

        /* the server's members first; then each member adds ",..." */

        ngx_ioa_jbuf_literal(&ctx->out, "{\"sender\":");
        ngx_ioa_jbuf_str(&ctx->out, ctx->identity);
        ngx_ioa_jbuf_literal(&ctx->out, ",\"timestamp\":");
        ngx_ioa_jbuf_int(&ctx->out, ctx->now_ms);

        ctx->comma = 1;
        ctx->depth = 1;

        return 1;
    }

    ngx_ioa_env_check(ctx, type);

    if (ctx->emit && !ctx->invalid) {

        if (ctx->comma) {
            ngx_ioa_jbuf_byte(&ctx->out, ',');
        }

        ngx_ioa_jbuf_byte(&ctx->out, type == NGX_IOA_J_MAP ? '{' : '[');

        ctx->comma = 0;
    }

    ctx->depth++;

    return 1;
}


static int
ngx_ioa_env_start_map(void *data)
{
    return ngx_ioa_env_start(data, NGX_IOA_J_MAP);
}


static int
ngx_ioa_env_start_array(void *data)
{
    return ngx_ioa_env_start(data, NGX_IOA_J_ARRAY);
}


static int
ngx_ioa_env_map_key(void *data, const unsigned char *s, size_t len)
{
    ngx_str_t                   key, *name;
    ngx_uint_t                  bit;
    ngx_ioa_env_ctx_t          *ctx;
    const ngx_ioa_env_field_t  *f;

    ctx = data;

    if (ngx_ioa_utf8_valid((u_char *) s, len) != NGX_OK) {
        ngx_ioa_error_set(ctx->err, "invalid_json", NULL,
                          "a field name is not valid UTF-8");
        return 0;
    }

    key.data = (u_char *) s;
    key.len = len;

    if (ctx->depth == 1) {

        bit = 0;
        f = ngx_ioa_env_lookup(key.data, len, &bit);

        if (f) {
            if (ctx->seen & bit) {
                ngx_ioa_error_set(ctx->err, "invalid_envelope",
                                  (const char *) f->name.data,
                                  "duplicate field \"%V\"", &f->name);
                return 0;
            }

            ctx->seen |= bit;

            if (f->kind == NGX_IOA_ENV_COMM_ID) {
                ctx->has_comm_id = 1;
            }

        } else {

            if (ctx->names == NULL) {
                ctx->names = ngx_array_create(ctx->pool, 8,
                                              sizeof(ngx_str_t));
                if (ctx->names == NULL) {
                    return ngx_ioa_env_no_memory(ctx);
                }
            }

            name = ngx_array_push(ctx->names);
            if (name == NULL
                || ngx_ioa_env_copy(ctx, name, s, len) != NGX_OK)
            {
                return ngx_ioa_env_no_memory(ctx);
            }
        }

        ctx->field = f;
        ctx->emit = !(f && (f->kind == NGX_IOA_ENV_DROP
                            || f->kind == NGX_IOA_ENV_SENDER));
    }

    if (!ctx->emit || ctx->invalid) {
        return 1;
    }

    if (ctx->comma) {
        ngx_ioa_jbuf_byte(&ctx->out, ',');
    }

    ngx_ioa_jbuf_str(&ctx->out, &key);
    ngx_ioa_jbuf_byte(&ctx->out, ':');

    ctx->comma = 0;

    return 1;
}


static int
ngx_ioa_env_end(ngx_ioa_env_ctx_t *ctx, u_char c)
{
    /* yajl pairs every end with its start, so depth is at least 1 here */

    ctx->depth--;

    if (ctx->depth == 0) {
        ctx->field = NULL;

        if (!ctx->invalid) {
            ngx_ioa_jbuf_byte(&ctx->out, '}');
        }

        return 1;
    }

    if (ctx->emit && !ctx->invalid) {
        ngx_ioa_jbuf_byte(&ctx->out, c);
        ctx->comma = 1;
    }

    return 1;
}


static int
ngx_ioa_env_end_map(void *data)
{
    return ngx_ioa_env_end(data, '}');
}


static int
ngx_ioa_env_end_array(void *data)
{
    return ngx_ioa_env_end(data, ']');
}
