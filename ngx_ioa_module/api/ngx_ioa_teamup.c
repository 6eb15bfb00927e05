
/*
 * Copyright (C) ioa authors
 *
 * POST /teamup: IoA's way of forming a room, a team of agents that one of
 * them asks for.  Its body is a table (ngx_ioa_body.c), then the members
 * are recorded, the room is made and the registry's event channel told,
 * each step a Redis call whose reply runs the next (the request waits in
 * none of them: ngx_ioa_rest.c finishes it once, from the last).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>

#include "ngx_ioa.h"


typedef struct {
    ngx_str_t                 comm_id;
    ngx_str_t                 team_name;
    ngx_uint_t                has_team_name;
    ngx_str_t                 creator;
    yajl_val                  names;       /* the body's agent_names */
    ngx_array_t               members;     /* of ngx_str_t */
    ngx_msec_t                retention;   /* its own, 0: none */
} ngx_ioa_teamup_t;


/* the bytes of a team's name */
#define NGX_IOA_TEAM_NAME_MAX  256



static void ngx_ioa_teamup_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_teamup_members_done(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_teamup_room_done(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_teamup_published(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_teamup_retention(ngx_ioa_teamup_t *t, yajl_val v,
    ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_teamup_members(ngx_ioa_teamup_t *t);
static ngx_int_t ngx_ioa_teamup_event(ngx_http_request_t *r,
    ngx_ioa_teamup_t *t, ngx_uint_t event, ngx_str_t *out);


/*
 * POST /teamup's body, in three steps as it has always been checked: the
 * sender (a team is formed by one of its members, as itself: a 403 comes
 * before the rest), the fields, then after retention_s (bounded by
 * configuration, so code) each member's name.
 */

static ngx_ioa_body_field_t  ngx_ioa_teamup_member = {
    NULL, NGX_IOA_BODY_NAME, 0, 0, 0, NULL, NULL,
    "\"agent_names\"[%uz] is not a valid agent name", NGX_IOA_BODY_NONE
};


static ngx_ioa_body_field_t  ngx_ioa_teamup_fields[] = {

    { "sender", NGX_IOA_BODY_NAME, NGX_IOA_BODY_REQUIRED, 0, 0, NULL, NULL,
      "\"sender\" must be a registered agent name",
      offsetof(ngx_ioa_teamup_t, creator) },

    ngx_ioa_body_step,

    { "agent_names", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_REQUIRED, 0, 0,
      NULL, NULL, "\"agent_names\" must be an array of agent names",
      offsetof(ngx_ioa_teamup_t, names) },

    { "team_name", NGX_IOA_BODY_STRING, NGX_IOA_BODY_NULL,
      0, NGX_IOA_TEAM_NAME_MAX, NULL, NULL,
      "\"team_name\" must be a string of at most "
      ngx_value(NGX_IOA_TEAM_NAME_MAX) " bytes, or null",
      offsetof(ngx_ioa_teamup_t, team_name) },

    ngx_ioa_body_step,

    /* again, now for each member's name */
    { "agent_names", NGX_IOA_BODY_ARRAY, NGX_IOA_BODY_REQUIRED, 0, 0,
      NULL, &ngx_ioa_teamup_member, NULL, NGX_IOA_BODY_NONE },

    ngx_ioa_body_null_field
};


/*
 * POST /teamup {"sender":..,"agent_names":[..],"team_name":..}, and ours:
 * "retention_s" (the room's own retention, see ngx_ioa_retention.c)
 *
 * Three steps: record the room in every member's room set (refused as a
 * whole if any name is unknown: IoA drops unknown names silently, which
 * leaves a caller talking to a team it does not have), create the room, and
 * publish a teamup event so that workers with members online start reading
 * the room at once.
 */

ngx_int_t
ngx_ioa_teamup_handler(ngx_http_request_t *r)
{
    return ngx_ioa_read_body(r, ngx_ioa_teamup_body);
}


static void
ngx_ioa_teamup_body(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char                rnd[16], *hex;
    ngx_msec_t            retry;
    size_t                i, n;
    yajl_val              doc;
    ngx_str_t            *m;
    ngx_ioa_error_t       err;
    ngx_ioa_teamup_t     *t;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    doc = ngx_ioa_body_json(r, body);
    if (doc == NULL) {
        return;
    }

    mcf = ngx_ioa_main_conf();

    t = ngx_pcalloc(r->pool, sizeof(ngx_ioa_teamup_t));
    if (t == NULL
        || ngx_array_init(&t->members, r->pool, 8, sizeof(ngx_str_t))
           != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_rest_set_data(r, t);

    if (ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 0, t, &err) != NGX_OK) {
        goto invalid;
    }

    if (ngx_ioa_auth_acts_as(r, &t->creator) != NGX_OK) {
        return;
    }

    if (ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 1, t, &err) != NGX_OK
        || ngx_ioa_teamup_retention(t, ngx_ioa_json_get(doc, "retention_s"),
                                    &err)
           != NGX_OK
        || ngx_ioa_body_check(doc, ngx_ioa_teamup_fields, 2, t, &err)
           != NGX_OK)
    {
        goto invalid;
    }

    /* a null team_name is none */
    t->has_team_name = (t->team_name.data != NULL);

    if (ngx_ioa_teamup_members(t) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (t->members.nelts > ngx_ioa_main_conf()->max_room_members) {
        ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_ROOM_MEMBERS, 1);
        ngx_ioa_error_set(&err, "room_too_large", "agent_names",
                          "a team of %ui members, sender included; "
                          "ioa_max_room_members allows %ui",
                          t->members.nelts,
                          ngx_ioa_main_conf()->max_room_members);
        goto invalid;
    }

    /* ioa_limit_teamup_rate: a valid teamup is charged, nothing is made
     * when it is over */
    if (ngx_ioa_limit_teamup(&t->creator, &retry, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_retry(r, NGX_HTTP_TOO_MANY_REQUESTS,
                                             retry, &err));
        return;
    }

    /* comm_id: 128 random bits in hex, like IoA's uuid4().hex */

    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rnd[6] = (rnd[6] & 0x0f) | 0x40;
    rnd[8] = (rnd[8] & 0x3f) | 0x80;

    hex = ngx_pnalloc(r->pool, 32);
    if (hex == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_hex_dump(hex, rnd, sizeof(rnd));
    t->comm_id.data = hex;
    t->comm_id.len = 32;

    n = t->members.nelts;

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_AGENTS);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &t->comm_id);
    ngx_ioa_args_fmt(&a, "%ui", mcf->max_agent_rooms);

    m = t->members.elts;

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &m[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_TEAMUP_MEMBERS,
                                 ngx_ioa_teamup_members_done, 1, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }

    return;

invalid:

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err));
}


/* members: agent_names then the sender, without duplicates, in IoA's order */

static ngx_int_t
ngx_ioa_teamup_members(ngx_ioa_teamup_t *t)
{
    size_t      i, j;
    ngx_str_t   s, *m;

    for (i = 0; i <= t->names->u.array.len; i++) {

        if (i < t->names->u.array.len) {
            (void) ngx_ioa_json_string(t->names->u.array.values[i], &s);

        } else {
            s = t->creator;
        }

        m = t->members.elts;

        for (j = 0; j < t->members.nelts; j++) {
            if (m[j].len == s.len && ngx_strncmp(m[j].data, s.data, s.len) == 0)
            {
                break;
            }
        }

        if (j < t->members.nelts) {
            continue;
        }

        m = ngx_array_push(&t->members);
        if (m == NULL) {
            return NGX_ERROR;
        }

        *m = s;
    }

    return NGX_OK;
}


/*
 * "retention_s": how long the room is kept after its last envelope, in
 * seconds.  A room may ask for less than ioa_room_retention, never for
 * more: the operator's limit bounds what Redis holds, so a longer one is
 * refused (naming the limit) rather than cut silently, which would leave
 * the caller believing in a retention it does not have.
 */

static ngx_int_t
ngx_ioa_teamup_retention(ngx_ioa_teamup_t *t, yajl_val v,
    ngx_ioa_error_t *err)
{
    int64_t               s;
    ngx_msec_t            max;
    ngx_ioa_main_conf_t  *mcf;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_OK;
    }

    mcf = ngx_ioa_main_conf();

    max = mcf->room_retention ? mcf->room_retention / 1000
                              : NGX_IOA_ROOM_RETENTION_MAX_S;

    s = YAJL_IS_INTEGER(v) ? YAJL_GET_INTEGER(v) : 0;

    if (s < 1 || (uint64_t) s > max) {
        ngx_ioa_error_set(err, "invalid_request", "retention_s",
                          "\"retention_s\" must be an integer from 1 to %M "
                          "(seconds)%s, or null", max,
                          mcf->room_retention ? ": ioa_room_retention allows "
                                                "no more"
                                              : "");
        return NGX_ERROR;
    }

    t->retention = (ngx_msec_t) s * 1000;

    return NGX_OK;
}


static void
ngx_ioa_teamup_members_done(ngx_http_request_t *r, redisReply *reply)
{
    size_t               i, n;
    ngx_str_t            code, text, *m;
    ngx_ioa_args_t       a;
    ngx_ioa_error_t      err;
    ngx_ioa_teamup_t    *t;

    t = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {

        if (reply && code.len == 13
            && ngx_strncmp(code.data, "UNKNOWN_AGENT", 13) == 0)
        {
            ngx_ioa_error_set(&err, "unknown_agent", "agent_names",
                              "%V; register them with /register first",
                              &text);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND,
                                                 &err));
            return;
        }

        if (reply && code.len == 12
            && ngx_strncmp(code.data, "TOOMANYROOMS", 12) == 0)
        {
            ngx_ioa_stat_add(NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_AGENT_ROOMS,
                             1);
            ngx_ioa_error_set(&err, "too_many_rooms", "agent_names",
                              "%V (ioa_max_agent_rooms); nothing was "
                              "created", &text);
            ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_CONFLICT,
                                                 &err));
            return;
        }

        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    n = t->members.nelts;

    ngx_ioa_args_init(&a);
    ngx_ioa_key_room(&a, &t->comm_id, NGX_IOA_ROOM_META);
    ngx_ioa_key_room(&a, &t->comm_id, NGX_IOA_ROOM_MEMBERS);
    ngx_ioa_args_str(&a, &t->comm_id);
    ngx_ioa_args_buf(&a, t->team_name.data ? t->team_name.data
                                           : (u_char *) "",
                     t->team_name.len);
    ngx_ioa_args_str(&a, &t->creator);
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());

    /* no retention of its own: an empty argument */
    if (t->retention) {
        ngx_ioa_args_fmt(&a, "%M", t->retention);

    } else {
        ngx_ioa_args_cstr(&a, "");
    }

    m = t->members.elts;

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &m[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_CREATE,
                                 ngx_ioa_teamup_room_done, 2, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_teamup_room_done(ngx_http_request_t *r, redisReply *reply)
{
    int64_t               ms;
    ngx_str_t             code, text, event;
    ngx_ioa_args_t        a;
    ngx_ioa_teamup_t     *t;
    ngx_ioa_main_conf_t  *mcf;

    t = ngx_ioa_rest_get_data(r);
    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_redis_error(reply, &code, &text) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    /* the room index, for /fetch_chat_record without a comm_id and the
     * retention sweep, and for a room with a retention of its own the due
     * index (ngx_ioa_retention.c); not waited for, the event below is on
     * the same connection after them */

    ms = ngx_ioa_now_ms();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "ZADD");
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMLIST);
    ngx_ioa_args_int(&a, ms);
    ngx_ioa_args_str(&a, &t->comm_id);

    (void) ngx_ioa_redis_command_args(NULL, NULL, &a);

    if (t->retention) {
        ngx_ioa_args_init(&a);
        ngx_ioa_args_cstr(&a, "ZADD");
        ngx_ioa_key(&a, NGX_IOA_KEY_ROOMDUE);
        ngx_ioa_args_int(&a, ms + (int64_t) t->retention);
        ngx_ioa_args_str(&a, &t->comm_id);

        (void) ngx_ioa_redis_command_args(NULL, NULL, &a);
    }

    if (ngx_ioa_teamup_event(r, t, 1, &event) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* on a Cluster a shard channel, on the registry's node: the event
     * crosses no other node (and is in order after the ZADD, same node) */
    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, ngx_ioa_redis_cluster() ? "SPUBLISH" : "PUBLISH");
    ngx_ioa_args_str(&a, &mcf->events_channel);
    ngx_ioa_args_str(&a, &event);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_teamup_published, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_teamup_published(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t            out;
    ngx_ioa_teamup_t    *t;

    t = ngx_ioa_rest_get_data(r);

    /* the room exists even if the event was lost: members' workers find it
     * in their room sets on the next resubscribe, so answer success */

    if (ngx_ioa_teamup_event(r, t, 0, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


/* {"comm_id":..,"agent_names":[..],"team_name":..}: the answer to /teamup
 * and, with the creator, the teamup event */

static ngx_int_t
ngx_ioa_teamup_event(ngx_http_request_t *r, ngx_ioa_teamup_t *t,
    ngx_uint_t event, ngx_str_t *out)
{
    ngx_uint_t            i;
    ngx_str_t            *m;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &t->comm_id);
    ngx_ioa_jbuf_literal(&b, ",\"agent_names\":[");

    m = t->members.elts;

    for (i = 0; i < t->members.nelts; i++) {
        if (i) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_str(&b, &m[i]);
    }

    ngx_ioa_jbuf_literal(&b, "],\"team_name\":");

    if (t->has_team_name) {
        ngx_ioa_jbuf_str(&b, &t->team_name);

    } else {
        ngx_ioa_jbuf_literal(&b, "null");
    }

    if (event) {
        ngx_ioa_jbuf_literal(&b, ",\"sender\":");
        ngx_ioa_jbuf_str(&b, &t->creator);

    } else if (t->retention || mcf->room_retention) {
        /* ours, where a retention applies: the room's own, or else the
         * deployment's (IoA's three fields alone where none does) */
        ngx_ioa_jbuf_literal(&b, ",\"retention_s\":");
        ngx_ioa_jbuf_int(&b, (int64_t) (t->retention ? t->retention
                                                    : mcf->room_retention)
                             / 1000);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    return ngx_ioa_jbuf_done(&b, out);
}


