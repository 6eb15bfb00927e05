
/*
 * Copyright (C) ioa authors
 *
 * POST /fetch_chat_record: IoA's transcripts, in bounded pieces.
 *
 *   {"comm_id": "<id>" | ["<id>", ...] | null, "limit": n, "after": "<id>"}
 *
 * answers {"<comm_id>": {"comm_id","agent_names","team_name",
 * "chat_record":[envelopes with "id"],"more","next_after"}, ...}: IoA's
 * shape, plus where the page ended.  A room's log can hold millions of
 * envelopes and a list can name many rooms, so nothing here is ever read
 * or held whole:
 *
 *   - the list is deduplicated and capped (NGX_IOA_RECORD_MAX_ROOMS; null,
 *     every room, is an administrator's and means the newest that many,
 *     in IoA's order: the room that spoke last comes last);
 *   - a page asked for ("limit" or "after") gives at most "limit"
 *     envelopes (default NGX_IOA_RECORD_LIMIT, at most
 *     NGX_IOA_RECORD_LIMIT_MAX) from after "after" (exclusive, one room
 *     only), or from the start; "more" says whether the log goes on,
 *     "next_after" is the "after" of the next page;
 *   - no page asked for (IoA's own {} or {"comm_id": ...}, which reads no
 *     further page) gives each room's newest ioa_chat_record_latest
 *     envelopes, oldest first, and "older" says whether the log goes on
 *     before them: a person opening a room wants its latest conversation,
 *     and IoA's frontend shows what the first answer holds;
 *   - the answer is streamed: Redis is asked for one piece at a time
 *     (room_record.lua, at most NGX_IOA_RECORD_PIECE_ENTRIES envelopes and
 *     about NGX_IOA_RECORD_PIECE_BYTES), each piece is written to the
 *     client, and the next is asked for only once the client has taken
 *     it.  A request holds one piece and its Redis reply, whatever the
 *     rooms hold; a client that does not read stops the reading, and
 *     nginx's send_timeout ends it.
 *
 * The states of a request:
 *
 *   CHECK   every room, in turn, with room_record.lua count -1 (no log):
 *           may the caller read it (a member, or observer scopes), does
 *           it exist.  Any refusal is the whole answer (403, 404) and
 *           nothing else is sent, as before streaming: the status line
 *           waits for this pass.
 *   LATEST  (no page asked for) before a room's first piece: a walk back
 *           from its log's end over limit + 1 entries, room_tail.lua a
 *           step at a time (about a piece's bytes each, so a long room
 *           of big envelopes never holds Redis long); the last entry
 *           walked is the page's exclusive start.  A log of no more than
 *           limit is the page whole.
 *   SEND    the header, then for each room its pieces; a piece that ends
 *           before the room's limit with more in the log is followed by
 *           another from its last id.  A room removed since CHECK is left
 *           out (or closed where it stands).
 *   WAIT    between two pieces, while the client has not taken the last
 *           one: the write event resumes SEND.
 *
 * A Redis failure after the header is out cannot change the status any
 * more: the response is cut short (the connection closes without the
 * final chunk), which every HTTP client reports as an error.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


#define NGX_IOA_RECORD_MAX_ROOMS        100
#define NGX_IOA_RECORD_LAST_ROOM        "99"      /* for ZREVRANGE 0 .. */
#define NGX_IOA_RECORD_LIMIT            1000
#define NGX_IOA_RECORD_LIMIT_MAX        10000
#define NGX_IOA_RECORD_PIECE_ENTRIES    200
#define NGX_IOA_RECORD_PIECE_BYTES      "262144"  /* 256 KiB */

/* a Stream id: two 64-bit numbers and a dash */
#define NGX_IOA_RECORD_SID_LEN          (2 * NGX_INT64_LEN + 1)


typedef struct {
    ngx_str_t                 id;
    ngx_ioa_sid_t             spoke;        /* its last envelope's id */
} ngx_ioa_record_order_t;


typedef struct {
    ngx_array_t               ids;          /* of ngx_str_t, no repeats */
    ngx_array_t               spoke;        /* all: ngx_ioa_sid_t per id */
    ngx_uint_t                next;         /* the room checked or sent */
    ngx_uint_t                all;          /* null: every room */
    ngx_uint_t                sending;      /* CHECK done */
    ngx_uint_t                limit;        /* envelopes per room */
    ngx_str_t                 after;        /* the request's, or "" */
    ngx_uint_t                latest;       /* no page asked for */

    /* LATEST: where the room's newest page starts */
    ngx_uint_t                tail_room;    /* 1 + the room it is for */
    ngx_uint_t                tail_want;    /* entries still to walk */
    ngx_uint_t                tail_done;
    ngx_uint_t                older;        /* the log goes on before it */
    ngx_str_t                 start;        /* in start_buf; "": "-" */
    u_char                    start_buf[NGX_IOA_RECORD_SID_LEN];

    /* the room being sent */
    ngx_uint_t                in_room;      /* its head is written */
    ngx_uint_t                sent;         /* its envelopes so far */
    ngx_uint_t                rooms;        /* rooms written */
    ngx_str_t                 last;         /* its last id, in last_buf */
    u_char                    last_buf[NGX_IOA_RECORD_SID_LEN];

    ngx_ioa_jbuf_t            out;          /* the piece, reused */
    ngx_uint_t                finished;     /* the closing "}" is out */
} ngx_ioa_record_t;


/* a /fetch_chat_record body's paging fields (ngx_ioa_record_fields) */
typedef struct {
    int64_t                   limit;        /* 0: not given */
    ngx_str_t                 after;
} ngx_ioa_record_in_t;


static void ngx_ioa_record_body(ngx_http_request_t *r, ngx_str_t *body);
static ngx_int_t ngx_ioa_record_ids(ngx_http_request_t *r,
    ngx_ioa_record_t *rec, yajl_val id, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_record_options(ngx_ioa_record_t *rec, yajl_val doc,
    ngx_ioa_error_t *err);
static void ngx_ioa_record_listed(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_record_ask(ngx_http_request_t *r);
static void ngx_ioa_record_checked(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_record_order(ngx_ioa_record_t *rec);
static ngx_int_t ngx_ioa_record_order_cmp(const void *one, const void *two);
static void ngx_ioa_record_tailed(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_record_piece(ngx_http_request_t *r, redisReply *reply);
static void ngx_ioa_record_room_head(ngx_ioa_record_t *rec, ngx_str_t *id,
    redisReply *reply);
static void ngx_ioa_record_room_end(ngx_ioa_record_t *rec, ngx_uint_t more);
static ngx_int_t ngx_ioa_record_start(ngx_http_request_t *r);
static void ngx_ioa_record_flush(ngx_http_request_t *r, ngx_uint_t last);
static void ngx_ioa_record_write(ngx_http_request_t *r);
static ngx_int_t ngx_ioa_record_pending(ngx_http_request_t *r);


ngx_int_t
ngx_ioa_fetch_record_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_record_body);
}


static void
ngx_ioa_record_body(ngx_http_request_t *r, ngx_str_t *body)
{
    yajl_val             doc, id;
    ngx_ioa_args_t       a;
    ngx_ioa_error_t      err;
    ngx_ioa_record_t    *rec;
    ngx_ioa_identity_t  *who;
    ngx_ioa_loc_conf_t  *lcf;

    who = ngx_ioa_rest_identity(r);

    rec = ngx_pcalloc(r->pool, sizeof(ngx_ioa_record_t));
    if (rec == NULL
        || ngx_array_init(&rec->ids, r->pool, 4, sizeof(ngx_str_t)) != NGX_OK
        || ngx_array_init(&rec->spoke, r->pool, 4, sizeof(ngx_ioa_sid_t))
           != NGX_OK
        || ngx_ioa_jbuf_init(&rec->out, r->pool, 4096) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_rest_set_data(r, rec);

    lcf = ngx_ioa_loc_conf(r);
    rec->limit = NGX_IOA_RECORD_LIMIT;
    /* a page is asked for with "limit" or "after"; without either (IoA's
     * own request) a room gives its newest envelopes */
    rec->latest = 1;
    doc = NULL;
    id = NULL;

    if (body->len) {
        doc = ngx_ioa_body_json(r, body);
        if (doc == NULL) {
            return;
        }

        if (!YAJL_IS_OBJECT(doc)) {
            ngx_ioa_error_set(&err, "invalid_request", NULL,
                              "the body must be a JSON object");
            goto invalid;
        }

        id = ngx_ioa_json_get(doc, "comm_id");

        if (ngx_ioa_record_options(rec, doc, &err) != NGX_OK) {
            goto invalid;
        }
    }

    if (rec->latest) {
        rec->limit = lcf->chat_record_latest;
    }

    if (id && !YAJL_IS_NULL(id)) {
        switch (ngx_ioa_record_ids(r, rec, id, &err)) {

        case NGX_OK:
            break;

        case NGX_DECLINED:
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN,
                                                 &err));
            return;

        default:
            goto invalid;
        }

        if (rec->after.len && rec->ids.nelts != 1) {
            ngx_ioa_error_set(&err, "invalid_request", "after",
                              "\"after\" pages one room: name exactly one "
                              "in \"comm_id\"");
            goto invalid;
        }

        ngx_ioa_record_ask(r);
        return;
    }

    /* null: every room, which is an administrator's to enumerate */

    if (ngx_ioa_auth_allows(who, NGX_IOA_SCOPE_ADMIN, NULL, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return;
    }

    if (rec->after.len) {
        ngx_ioa_error_set(&err, "invalid_request", "after",
                          "\"after\" pages one room: name exactly one in "
                          "\"comm_id\"");
        goto invalid;
    }

    rec->all = 1;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "ZREVRANGE");
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMLIST);
    ngx_ioa_args_cstr(&a, "0");
    ngx_ioa_args_cstr(&a, NGX_IOA_RECORD_LAST_ROOM);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_record_listed, &a) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }

    return;

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


/* "comm_id": one id or a list, each kept once, at most
 * NGX_IOA_RECORD_MAX_ROOMS of them, each readable by scope or (checked
 * later, in Redis) by membership */

static ngx_int_t
ngx_ioa_record_ids(ngx_http_request_t *r, ngx_ioa_record_t *rec, yajl_val id,
    ngx_ioa_error_t *err)
{
    size_t               i, j, n;
    yajl_val             v;
    ngx_str_t            s, *p;
    ngx_ioa_identity_t  *who;

    who = ngx_ioa_rest_identity(r);
    n = YAJL_IS_ARRAY(id) ? id->u.array.len : 1;

    if (!YAJL_IS_ARRAY(id) && !YAJL_IS_STRING(id)) {
        goto invalid;
    }

    for (i = 0; i < n; i++) {
        v = YAJL_IS_ARRAY(id) ? id->u.array.values[i] : id;

        if (ngx_ioa_json_string(v, &s) != NGX_OK || s.len == 0) {
            goto invalid;
        }

        p = rec->ids.elts;

        for (j = 0; j < rec->ids.nelts; j++) {
            if (p[j].len == s.len && ngx_strncmp(p[j].data, s.data, s.len)
                                     == 0)
            {
                break;
            }
        }

        if (j < rec->ids.nelts) {
            continue;                   /* named twice: answered once */
        }

        if (rec->ids.nelts == NGX_IOA_RECORD_MAX_ROOMS) {
            ngx_ioa_error_set(err, "invalid_request", "comm_id",
                              "at most %d rooms per request; ask for the "
                              "others in another",
                              NGX_IOA_RECORD_MAX_ROOMS);
            return NGX_ERROR;
        }

        /* a room neither observer scope opens is checked for membership
         * once Redis answers; a token that is no agent or launcher (the
         * person of its goals' rooms) cannot be one */
        if (ngx_ioa_auth_room(who, &s, err) != NGX_OK
            && ngx_ioa_auth_allows(who, NGX_IOA_SCOPE_MEMBER, NULL, err)
               != NGX_OK)
        {
            (void) ngx_ioa_auth_room(who, &s, err);
            return NGX_DECLINED;
        }

        p = ngx_array_push(&rec->ids);
        if (p == NULL) {
            return NGX_ERROR;
        }

        *p = s;
    }

    return NGX_OK;

invalid:

    ngx_ioa_error_set(err, "invalid_request", "comm_id",
                      "\"comm_id\" must be a room id, a list of room ids, "
                      "or null for every room");
    return NGX_ERROR;
}


/*
 * /fetch_chat_record's paging fields.  "comm_id", a room id or a list of
 * them, is checked room by room with each room's access
 * (ngx_ioa_record_ids()); "after" must also be an envelope id, which the
 * table cannot say.  A page asked for with either is not the newest.
 */

#define NGX_IOA_RECORD_AFTER_TEXT                                             \
    "\"after\" must be an envelope id such as 1700000000000-0 (the page "    \
    "starts after it), or null"


static ngx_ioa_body_field_t  ngx_ioa_record_fields[] = {

    { "limit", NGX_IOA_BODY_INTEGER, NGX_IOA_BODY_NULL,
      1, NGX_IOA_RECORD_LIMIT_MAX, NULL, NULL,
      "\"limit\" must be an integer from 1 to "
      ngx_value(NGX_IOA_RECORD_LIMIT_MAX) " (envelopes per room), or null "
      "for " ngx_value(NGX_IOA_RECORD_LIMIT),
      offsetof(ngx_ioa_record_in_t, limit) },

    { "after", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL, 0, 0, NULL, NULL,
      NGX_IOA_RECORD_AFTER_TEXT, offsetof(ngx_ioa_record_in_t, after) },

    ngx_ioa_body_null_field
};


static ngx_int_t
ngx_ioa_record_options(ngx_ioa_record_t *rec, yajl_val doc,
    ngx_ioa_error_t *err)
{
    ngx_ioa_sid_t        sid;
    ngx_ioa_record_in_t  in;

    ngx_memzero(&in, sizeof(ngx_ioa_record_in_t));

    if (ngx_ioa_body_check(doc, ngx_ioa_record_fields, 0, &in, err)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (in.after.data
        && ngx_ioa_parse_sid(in.after.data, in.after.len, &sid) != NGX_OK)
    {
        ngx_ioa_error_set(err, "invalid_request", "after",
                          NGX_IOA_RECORD_AFTER_TEXT);
        return NGX_ERROR;
    }

    if (in.limit) {
        rec->limit = (ngx_uint_t) in.limit;
        rec->latest = 0;
    }

    if (in.after.data) {
        rec->after = in.after;
        rec->latest = 0;
    }

    return NGX_OK;
}


static void
ngx_ioa_record_listed(ngx_http_request_t *r, redisReply *reply)
{
    size_t             i;
    ngx_str_t         *p;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    for (i = 0; i < reply->elements; i++) {
        p = ngx_array_push(&rec->ids);
        if (p == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        p->len = reply->element[i]->len;
        p->data = ngx_pnalloc(r->pool, p->len);
        if (p->data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_memcpy(p->data, reply->element[i]->str, p->len);
    }

    ngx_ioa_record_ask(r);
}


/* the next question to Redis: the next room to check, the next piece to
 * send, or the end */

static void
ngx_ioa_record_ask(ngx_http_request_t *r)
{
    ngx_str_t         *id, start;
    ngx_ioa_args_t     a;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    if (!rec->sending && rec->next == rec->ids.nelts) {
        /* every room may be read: the answer starts */
        rec->sending = 1;
        rec->next = 0;

        if (rec->all) {
            ngx_ioa_record_order(rec);
        }

        if (ngx_ioa_record_start(r) != NGX_OK) {
            return;
        }
    }

    /* rooms listed for null and gone since are left out */
    while (rec->sending && rec->next < rec->ids.nelts
           && ((ngx_str_t *) rec->ids.elts)[rec->next].len == 0)
    {
        rec->next++;
    }

    if (rec->sending && rec->next == rec->ids.nelts) {
        ngx_ioa_jbuf_literal(&rec->out, "}\n");
        rec->finished = 1;
        ngx_ioa_record_flush(r, 1);
        return;
    }

    id = (ngx_str_t *) rec->ids.elts + rec->next;

    if (!rec->sending) {
        ngx_ioa_args_init(&a);
        ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_META);
        ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_MEMBERS);
        ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_LOG);
        ngx_ioa_args_cstr(&a, "-");
        ngx_ioa_args_cstr(&a, "-1");    /* the room and its members only */

        if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_RECORD,
                                     ngx_ioa_record_checked, 3, &a)
            != NGX_OK)
        {
            ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        }

        return;
    }

    /* LATEST: a room's newest page starts where a walk back over
     * limit + 1 entries ends (room_tail.lua, a step at a time) */

    if (rec->latest && !rec->in_room && rec->tail_room != rec->next + 1) {
        rec->tail_room = rec->next + 1;
        rec->tail_want = rec->limit + 1;
        rec->tail_done = 0;
        rec->older = 0;
        rec->start.len = 0;
    }

    if (rec->latest && !rec->in_room && !rec->tail_done) {
        /* room_tail.lua reads the log only */
        ngx_ioa_args_init(&a);
        ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_LOG);

        if (rec->start.len) {
            ngx_ioa_args_str(&a, &rec->start);

        } else {
            ngx_ioa_args_cstr(&a, "+");
        }

        ngx_ioa_args_fmt(&a, "%ui", rec->tail_want);
        ngx_ioa_args_cstr(&a, NGX_IOA_RECORD_PIECE_BYTES);

        if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_TAIL,
                                     ngx_ioa_record_tailed, 1, &a)
            != NGX_OK)
        {
            ngx_ioa_finish(r, NGX_ERROR);
        }

        return;
    }

    /* a piece: from the room's last id sent, the request's "after", or
     * the start of the newest page */

    if (rec->in_room) {
        start = rec->last;

    } else if (rec->after.len) {
        start = rec->after;

    } else if (rec->latest && rec->start.len) {
        start = rec->start;

    } else {
        ngx_str_set(&start, "-");
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_META);
    ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_MEMBERS);
    ngx_ioa_key_room(&a, id, NGX_IOA_ROOM_LOG);
    ngx_ioa_args_str(&a, &start);
    ngx_ioa_args_fmt(&a, "%ui",
                     ngx_min(rec->limit - rec->sent,
                             (ngx_uint_t) NGX_IOA_RECORD_PIECE_ENTRIES));
    ngx_ioa_args_cstr(&a, NGX_IOA_RECORD_PIECE_BYTES);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_RECORD,
                                 ngx_ioa_record_piece, 3, &a)
        != NGX_OK)
    {
        /* the header is out: the answer can only be cut short */
        ngx_ioa_finish(r, NGX_ERROR);
    }
}


/* CHECK: may the caller read the room, and is it there */

static void
ngx_ioa_record_checked(ngx_http_request_t *r, redisReply *reply)
{
    size_t               i;
    ngx_int_t            ms;
    ngx_str_t           *id;
    redisReply          *members, *e;
    ngx_ioa_sid_t       *spoke;
    ngx_ioa_error_t      err;
    ngx_ioa_record_t    *rec;
    ngx_ioa_identity_t  *who;

    rec = ngx_ioa_rest_get_data(r);
    who = ngx_ioa_rest_identity(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 7
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[4]->type != REDIS_REPLY_ARRAY)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    id = (ngx_str_t *) rec->ids.elts + rec->next;
    members = reply->element[4];

    if (ngx_ioa_auth_room(who, id, &err) != NGX_OK) {

        /* no observer scope for it: only a member reads it, and a room
         * that does not exist has none (so this says nothing about it) */

        for (i = 0; i < members->elements; i++) {
            if (members->element[i]->len == who->sub.len
                && ngx_strncmp(members->element[i]->str, who->sub.data,
                               who->sub.len)
                   == 0)
            {
                break;
            }
        }

        if (i == members->elements) {
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN,
                                                 &err));
            return;
        }
    }

    if (rec->all) {
        /* when it last spoke, or was made: the order of the list */
        spoke = ngx_array_push(&rec->spoke);
        if (spoke == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        spoke->ms = 0;
        spoke->seq = 0;
        e = reply->elements > 7 ? reply->element[7] : NULL;

        if (e == NULL || e->type != REDIS_REPLY_STRING
            || ngx_ioa_parse_sid((u_char *) e->str, e->len, spoke) != NGX_OK)
        {
            e = reply->element[3];

            if (e->type == REDIS_REPLY_STRING) {
                ms = ngx_atoi((u_char *) e->str, e->len);
                spoke->ms = ms == NGX_ERROR ? 0 : (uint64_t) ms;
            }
        }
    }

    if (reply->element[0]->str[0] != '1') {
        if (!rec->all) {
            /* unknown_room, or room_expired (ngx_ioa_retention.c) */
            if (ngx_ioa_room_gone(r, id) != NGX_OK) {
                ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
            }

            return;
        }

        id->len = 0;                    /* listed, and gone since */
    }

    rec->next++;
    ngx_ioa_record_ask(r);
}


/*
 * Every room (null) is listed as IoA lists it: the room that spoke last
 * comes last (IoA keeps its rooms in SQLite and rewrites a room's row with
 * each message; its frontend puts the last one on top), by Redis's clock
 * (a log's last id, or when a silent room was made: room_record.lua), so
 * that no hub's clock or scheduling can reorder them.  The rooms listed
 * are the newest NGX_IOA_RECORD_MAX_ROOMS by the room index; at most that
 * many, so an insertion sort (ngx_sort, stable) is all it takes.
 */

static void
ngx_ioa_record_order(ngx_ioa_record_t *rec)
{
    ngx_str_t               *ids;
    ngx_uint_t               i, n;
    ngx_ioa_sid_t           *spoke;
    ngx_ioa_record_order_t   o[NGX_IOA_RECORD_MAX_ROOMS];

    if (rec->spoke.nelts != rec->ids.nelts
        || rec->ids.nelts > NGX_IOA_RECORD_MAX_ROOMS)
    {
        return;
    }

    ids = rec->ids.elts;
    spoke = rec->spoke.elts;
    n = rec->ids.nelts;

    /* the index lists the newest first: reversed, a tie keeps the older
     * room first */
    for (i = 0; i < n; i++) {
        o[i].id = ids[n - 1 - i];
        o[i].spoke = spoke[n - 1 - i];
    }

    ngx_sort(o, n, sizeof(ngx_ioa_record_order_t), ngx_ioa_record_order_cmp);

    for (i = 0; i < n; i++) {
        ids[i] = o[i].id;
    }
}


static ngx_int_t
ngx_ioa_record_order_cmp(const void *one, const void *two)
{
    const ngx_ioa_record_order_t  *a = one, *b = two;

    if (a->spoke.ms != b->spoke.ms) {
        return a->spoke.ms < b->spoke.ms ? -1 : 1;
    }

    if (a->spoke.seq != b->spoke.seq) {
        return a->spoke.seq < b->spoke.seq ? -1 : 1;
    }

    return 0;
}


/* LATEST: a step of the walk back; its last id is where the next step
 * goes on, or, once limit + 1 entries are walked, the page's exclusive
 * start */

static void
ngx_ioa_record_tailed(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t         walked;
    redisReply        *last, *reached;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[0]->integer < 0
        || reply->element[1]->type != REDIS_REPLY_STRING
        || reply->element[1]->len > NGX_IOA_RECORD_SID_LEN
        || reply->element[2]->type != REDIS_REPLY_STRING)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ioa: /fetch_chat_record cut short: Redis failed "
                      "after the answer started");
        ngx_ioa_finish(r, NGX_ERROR);
        return;
    }

    walked = (ngx_uint_t) reply->element[0]->integer;
    last = reply->element[1];
    reached = reply->element[2];

    rec->tail_want -= ngx_min(walked, rec->tail_want);

    if (last->len) {
        ngx_memcpy(rec->start_buf, last->str, last->len);
        rec->start.data = rec->start_buf;
        rec->start.len = last->len;
    }

    if (reached->len == 1 && reached->str[0] == '1') {
        /* limit + 1 back: the page starts after it, and the log goes on
         * before the page */
        rec->tail_done = 1;
        rec->older = 1;

    } else if (reached->len || last->len == 0 || rec->tail_want == 0) {
        /* the log's start came first: the whole log is the page */
        rec->tail_done = 1;
        rec->start.len = 0;
    }

    ngx_ioa_record_ask(r);
}


/* SEND: one piece of the room's log */

static void
ngx_ioa_record_piece(ngx_http_request_t *r, redisReply *reply)
{
    size_t             i;
    ngx_str_t         *id;
    ngx_uint_t         more;
    redisReply        *log, *e;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 7
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[4]->type != REDIS_REPLY_ARRAY
        || reply->element[5]->type != REDIS_REPLY_ARRAY
        || reply->element[6]->type != REDIS_REPLY_STRING)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ioa: /fetch_chat_record cut short: Redis failed "
                      "after the answer started");
        ngx_ioa_finish(r, NGX_ERROR);
        return;
    }

    id = (ngx_str_t *) rec->ids.elts + rec->next;

    if (reply->element[0]->str[0] != '1' && !rec->in_room) {
        /* gone since it was checked: left out */
        rec->next++;
        ngx_ioa_record_ask(r);
        return;
    }

    if (!rec->in_room) {
        ngx_ioa_record_room_head(rec, id, reply);
    }

    log = reply->element[5];

    for (i = 0; i + 1 < log->elements; i += 2) {
        e = log->element[i + 1];

        if (e->type != REDIS_REPLY_STRING || e->len < 2
            || log->element[i]->len > NGX_IOA_RECORD_SID_LEN)
        {
            continue;
        }

        if (rec->sent) {
            ngx_ioa_jbuf_byte(&rec->out, ',');
        }

        ngx_ioa_jbuf_literal(&rec->out, "{\"id\":\"");
        ngx_ioa_jbuf_raw(&rec->out, (u_char *) log->element[i]->str,
                         log->element[i]->len);
        ngx_ioa_jbuf_literal(&rec->out, "\",");
        ngx_ioa_jbuf_raw(&rec->out, (u_char *) e->str + 1, e->len - 1);

        rec->last.len = log->element[i]->len;
        rec->last.data = rec->last_buf;
        ngx_memcpy(rec->last_buf, log->element[i]->str, rec->last.len);
        rec->sent++;
    }

    more = reply->element[6]->str[0] == '1';

    if (!more || rec->sent >= rec->limit) {
        ngx_ioa_record_room_end(rec, more);
        rec->next++;
    }

    ngx_ioa_record_flush(r, 0);
}


static void
ngx_ioa_record_room_head(ngx_ioa_record_t *rec, ngx_str_t *id,
    redisReply *reply)
{
    size_t       i;
    ngx_str_t    s;
    redisReply  *members;

    if (rec->rooms++) {
        ngx_ioa_jbuf_byte(&rec->out, ',');
    }

    ngx_ioa_jbuf_str(&rec->out, id);
    ngx_ioa_jbuf_literal(&rec->out, ":{\"comm_id\":");
    ngx_ioa_jbuf_str(&rec->out, id);
    ngx_ioa_jbuf_literal(&rec->out, ",\"agent_names\":[");

    members = reply->element[4];

    for (i = 0; i < members->elements; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&rec->out, ',');
        }

        s.data = (u_char *) members->element[i]->str;
        s.len = members->element[i]->len;
        ngx_ioa_jbuf_str(&rec->out, &s);
    }

    ngx_ioa_jbuf_literal(&rec->out, "],\"team_name\":");

    if (reply->element[1]->type == REDIS_REPLY_STRING
        && reply->element[1]->len)
    {
        s.data = (u_char *) reply->element[1]->str;
        s.len = reply->element[1]->len;
        ngx_ioa_jbuf_str(&rec->out, &s);

    } else {
        ngx_ioa_jbuf_literal(&rec->out, "null");
    }

    ngx_ioa_jbuf_literal(&rec->out, ",\"chat_record\":[");

    rec->in_room = 1;
    rec->sent = 0;
    rec->last.len = 0;
}


/* ],"more":..,"next_after":..}: where the next page of this room starts */

static void
ngx_ioa_record_room_end(ngx_ioa_record_t *rec, ngx_uint_t more)
{
    ngx_ioa_jbuf_literal(&rec->out, "],\"more\":");

    if (more) {
        ngx_ioa_jbuf_literal(&rec->out, "true");

    } else {
        ngx_ioa_jbuf_literal(&rec->out, "false");
    }

    ngx_ioa_jbuf_literal(&rec->out, ",\"next_after\":");

    if (more && rec->last.len) {
        ngx_ioa_jbuf_str(&rec->out, &rec->last);

    } else {
        ngx_ioa_jbuf_literal(&rec->out, "null");
    }

    if (rec->latest) {
        /* the newest page: do envelopes come before it */
        if (rec->older) {
            ngx_ioa_jbuf_literal(&rec->out, ",\"older\":true");

        } else {
            ngx_ioa_jbuf_literal(&rec->out, ",\"older\":false");
        }
    }

    ngx_ioa_jbuf_byte(&rec->out, '}');

    rec->in_room = 0;
}


/* the status line and headers, once every room is known to be readable */

static ngx_int_t
ngx_ioa_record_start(ngx_http_request_t *r)
{
    ngx_int_t          rc;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        ngx_ioa_finish(r, rc);
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_byte(&rec->out, '{');

    return NGX_OK;
}


/*
 * Hands the piece to nginx's output chain; once the client has taken it
 * all, the buffer is reused for the next piece, asked for here.  The last
 * piece finishes the request (nginx's own writer sends what is left).
 */

static void
ngx_ioa_record_flush(ngx_http_request_t *r, ngx_uint_t last)
{
    ngx_int_t          rc;
    ngx_buf_t         *b;
    ngx_chain_t        out;
    ngx_ioa_record_t  *rec;

    rec = ngx_ioa_rest_get_data(r);

    if (rec->out.failed) {
        ngx_ioa_finish(r, NGX_ERROR);
        return;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        ngx_ioa_finish(r, NGX_ERROR);
        return;
    }

    b->pos = rec->out.start;
    b->last = rec->out.pos;
    b->memory = 1;
    b->flush = 1;
    b->last_buf = last && r == r->main;
    b->last_in_chain = last;

    out.buf = b;
    out.next = NULL;

    rc = ngx_http_output_filter(r, &out);

    if (last || rc == NGX_ERROR) {
        ngx_ioa_finish(r, rc);
        return;
    }

    if (ngx_ioa_record_pending(r)) {
        /* WAIT: the client has not taken it yet */
        r->write_event_handler = ngx_ioa_record_write;
        ngx_ioa_record_write(r);
        return;
    }

    rec->out.pos = rec->out.start;
    ngx_ioa_record_ask(r);
}


static void
ngx_ioa_record_write(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_event_t               *wev;
    ngx_connection_t          *c;
    ngx_ioa_record_t          *rec;
    ngx_http_core_loc_conf_t  *clcf;

    c = r->connection;
    wev = c->write;
    rec = ngx_ioa_rest_get_data(r);
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out reading /fetch_chat_record");
        c->timedout = 1;
        ngx_ioa_finish(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (ngx_ioa_record_pending(r)) {
        rc = ngx_http_output_filter(r, NULL);

        if (rc == NGX_ERROR) {
            ngx_ioa_finish(r, NGX_ERROR);
            return;
        }
    }

    if (ngx_ioa_record_pending(r)) {
        if (!wev->delayed) {
            ngx_add_timer(wev, clcf->send_timeout);
        }

        if (ngx_handle_write_event(wev, clcf->send_lowat) != NGX_OK) {
            ngx_ioa_finish(r, NGX_ERROR);
        }

        return;
    }

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    /* SEND again: the piece is out, its buffer is free */
    rec->out.pos = rec->out.start;
    ngx_ioa_record_ask(r);
}


static ngx_int_t
ngx_ioa_record_pending(ngx_http_request_t *r)
{
    /* an in-memory subrequest (ngx_ioa_mcp.c) has taken it: its r->out is
     * the buffer it keeps */
    if (r->subrequest_in_memory) {
        return 0;
    }

    return r->out != NULL || r->connection->buffered || r->buffered;
}
