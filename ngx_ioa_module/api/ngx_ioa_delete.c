
/*
 * Copyright (C) ioa authors
 *
 * Deletion: DELETE /agents/{name}, DELETE /rooms/{comm_id}.
 *
 * What goes is what the retention sweep removes (ngx_ioa_retention.c), by
 * the same scripts in a "delete" mode that skips their age tests:
 *
 *   agent  1. EXISTS <reg>agent:<name>           404 unknown_agent
 *          2. SMEMBERS <reg>rooms:<name>         the rooms it is in
 *          3. SREM {room:<id>}:members <name>    one room (slot) at a time,
 *             SREM {room:<id>}:floor <name>      and out of its floor: a
 *                                                floor of only this agent
 *                                                becomes empty, which is
 *                                                an open floor, so the
 *                                                room cannot wait for a
 *                                                turn nobody can take
 *          4. agent_forget.lua "delete"          registry entry, index
 *                                                terms, statistics share,
 *                                                presence, room set, task
 *                                                record, holders ({reg})
 *          5. the event "agent_deleted"          every hub worker closes
 *                                                its connections: 1008
 *                                                "agent deleted"
 *
 *          With ?erase=1 (admin), between 2 and 3: what the agent said in
 *          each of those rooms is erased, and every copy of it
 *          (ngx_ioa_room_erase.c), each room audited as its own erasure;
 *          a room that refuses (409 room_tampered, goal_running) stops the
 *          DELETE there, the agent not deleted.
 *
 *   room   1. HGET {room:<id>}:meta creator      404 (tombstone: expired,
 *                                                deleted) or 403
 *          2. SMEMBERS {room:<id>}:members
 *          3. room_forget.lua                    out of the members' room
 *                                                sets and both indexes
 *          4. room_expire.lua "delete"           the final envelope is
 *                                                appended, then every key
 *                                                goes; a tombstone
 *                                                "deleted:<ms>:<actor>"
 *          5. the event "room_deleted"           every hub worker hands
 *                                                the final envelope to its
 *                                                links of the room, then
 *                                                drops them
 *
 * Without ?erase=1 the rooms an agent was in keep their logs: what it said
 * stays, only its membership goes.  The flag is explicit, not the default:
 * an erasure rewrites history the other members share and rely on (their
 * results, a goal's conclusion), which is not what deleting an account
 * says by itself, and it takes an admin, as POST /rooms/{id}/erase does.
 *
 * On a Redis Cluster the room keys and the registry keys are in different
 * slots, so no one script can do either deletion.  The steps are ordered
 * so that each reads what the next ones need before a later one removes
 * it (the agent's room set, the room's members), and each is harmless to
 * repeat: a DELETE interrupted by a lost connection is finished by the
 * next DELETE, which finds the same sets and repeats every step.
 *
 * The events go on the registry's event channel (the teamup events'), to
 * which every nginx worker of every instance is subscribed
 * (ngx_ioa_observer.c), which ends the local connections and links they
 * name (ngx_ioa_registry_deleted()).  A worker
 * whose pub/sub connection is down at that moment misses the event: its
 * connections of a deleted agent stay open (they are in no room any more,
 * and the agent is no longer registered) until they close; its links to a
 * deleted room get nothing more, posts into it are refused unknown_room.
 *
 * Each deletion that succeeded is recorded in the audit stream
 * (ngx_ioa_audit.c); if that write fails the deletion stands.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"
#include "ngx_ioa_ws_frame.h"


typedef struct {
    ngx_str_t                 target;     /* the agent's name, a comm_id */
    ngx_str_t                 actor;      /* the token's sub, "-": open */
    ngx_str_t                 creator;
    ngx_str_t                *sets;       /* rooms, or members */
    ngx_uint_t                nsets;
    ngx_uint_t                next;
    ngx_uint_t                left;       /* memberships removed */
    ngx_uint_t                floor;      /* the room's floor is next */
    ngx_str_t                 envelope;   /* a room's final envelope */
    ngx_str_t                 sid;        /* its id */
    ngx_ioa_erase_t          *erase;      /* ?erase=1: what it said */
} ngx_ioa_delete_t;


static ngx_ioa_delete_t *ngx_ioa_delete_start(ngx_http_request_t *r,
    ngx_str_t *target, ngx_ioa_identity_t *who);
static ngx_int_t ngx_ioa_delete_copy(ngx_http_request_t *r,
    redisReply *reply, ngx_str_t **sets, ngx_uint_t *n);
static void ngx_ioa_agent_delete_exists(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_agent_delete_rooms(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_agent_delete_erased(ngx_http_request_t *r,
    ngx_ioa_erase_t *er);
static ngx_int_t ngx_ioa_agent_delete_next(ngx_http_request_t *r);
static void ngx_ioa_agent_delete_left(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_agent_delete_forgotten(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_room_delete_meta(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_room_delete_members(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_room_delete_forgotten(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_room_delete_done(ngx_http_request_t *r,
    redisReply *reply);
static ngx_int_t ngx_ioa_room_delete_envelope(ngx_http_request_t *r,
    ngx_ioa_delete_t *d);
static ngx_int_t ngx_ioa_delete_publish(ngx_pool_t *pool, const char *event,
    ngx_ioa_delete_t *d);
static void ngx_ioa_room_delete_answer(ngx_http_request_t *r);


/* DELETE /agents/{name}: the agent itself, or admin; open mode: anyone */

ngx_int_t
ngx_ioa_agent_delete_handler(ngx_http_request_t *r, ngx_str_t *name,
    ngx_ioa_identity_t *who)
{
    ngx_str_t          v;
    ngx_int_t          rc;
    ngx_uint_t         erase;
    ngx_ioa_args_t     a;
    ngx_ioa_error_t    err;
    ngx_ioa_delete_t  *d;

    /*
     * A look-alike name (ngx_ioa_name_check()) is deleted, not refused:
     * one registered before the rule refused it must still be removable,
     * and no token can carry such a name, so it takes an admin (or open
     * mode) to name it.
     */

    rc = ngx_ioa_valid_name(name);

    if (rc != NGX_OK && rc != NGX_IOA_NAME_LOOKALIKE) {
        ngx_ioa_error_set(&err, "invalid_name", "name",
                          "an agent name has " NGX_IOA_NAME_RULE);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    /* ?erase=1 (or true): what the agent said goes too; 0, false or
     * absent: as without the flag */
    erase = 0;

    if (ngx_http_arg(r, (u_char *) "erase", 5, &v) == NGX_OK) {
        if ((v.len == 1 && v.data[0] == '1')
            || (v.len == 4 && ngx_strncmp(v.data, "true", 4) == 0))
        {
            erase = 1;

        } else if (!(v.len == 1 && v.data[0] == '0')
                   && !(v.len == 5 && ngx_strncmp(v.data, "false", 5) == 0))
        {
            ngx_ioa_error_set(&err, "invalid_request", "erase",
                              "\"erase\" is 1 (what the agent said is "
                              "erased too) or 0");
            return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
        }
    }

    if (!who->open
        && !(who->scopes & NGX_IOA_SCOPE_ADMIN)
        && (name->len != who->sub.len
            || ngx_strncmp(name->data, who->sub.data, name->len) != 0))
    {
        ngx_ioa_error_set(&err, "forbidden", "name",
                          "only \"%V\" itself or an \"admin\" token may "
                          "delete it; the token is \"%V\"'s",
                          name, &who->sub);
        return ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err);
    }

    if (erase && !who->open && !(who->scopes & NGX_IOA_SCOPE_ADMIN)) {
        ngx_ioa_error_set(&err, "forbidden", "erase",
                          "erasing what \"%V\" said takes an \"admin\" "
                          "token, as POST /rooms/{comm_id}/erase does; "
                          "without ?erase=1 it may delete itself", name);
        return ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err);
    }

    d = ngx_ioa_delete_start(r, name, who);
    if (d == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (erase) {
        d->erase = ngx_ioa_erase_create(r, &d->target, &d->actor);
        if (d->erase == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "EXISTS");
    ngx_ioa_key_agent(&a, NGX_IOA_AGENT_RECORD, &d->target);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_agent_delete_exists, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static ngx_ioa_delete_t *
ngx_ioa_delete_start(ngx_http_request_t *r, ngx_str_t *target,
    ngx_ioa_identity_t *who)
{
    ngx_ioa_delete_t  *d;

    d = ngx_pcalloc(r->pool, sizeof(ngx_ioa_delete_t));
    if (d == NULL) {
        return NULL;
    }

    /* the router's argument points into the URI, which lives as long as
     * the request */
    d->target = *target;

    if (who->open || who->sub.len == 0) {
        ngx_str_set(&d->actor, "-");

    } else {
        d->actor = who->sub;
    }

    ngx_ioa_rest_set_data(r, d);

    return d;
}


static void
ngx_ioa_agent_delete_exists(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_args_t     a;
    ngx_ioa_error_t    err;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->integer == 0) {
        ngx_ioa_error_set(&err, "unknown_agent", "name",
                          "there is no agent \"%V\" in the registry",
                          &d->target);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err));
        return;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "SMEMBERS");
    ngx_ioa_key_agent(&a, NGX_IOA_AGENT_ROOMS, &d->target);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_agent_delete_rooms, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_agent_delete_rooms(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t         i;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_delete_copy(r, reply, &d->sets, &d->nsets) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (d->erase == NULL) {
        ngx_ioa_finish(r, ngx_ioa_agent_delete_next(r));
        return;
    }

    /* while it is still a member, so that nothing is left half done: an
     * erasure that stops leaves the agent as it was, to be asked again */
    for (i = 0; i < d->nsets; i++) {
        if (ngx_ioa_erase_add(r, d->erase, &d->sets[i]) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    ngx_ioa_finish(r, ngx_ioa_erase_run(r, d->erase,
                                        ngx_ioa_agent_delete_erased, d));
}


static ngx_int_t
ngx_ioa_agent_delete_erased(ngx_http_request_t *r, ngx_ioa_erase_t *er)
{
    ngx_ioa_rest_set_data(r, ngx_ioa_erase_data(er));

    return ngx_ioa_agent_delete_next(r);
}


/* out of the next room's members (its own slot), else the registry */

static ngx_int_t
ngx_ioa_agent_delete_next(ngx_http_request_t *r)
{
    ngx_ioa_args_t        a;
    ngx_ioa_delete_t     *d;
    ngx_ioa_main_conf_t  *mcf;

    d = ngx_ioa_rest_get_data(r);
    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);

    if (d->next < d->nsets) {
        ngx_ioa_args_cstr(&a, "SREM");
        ngx_ioa_key_room(&a, &d->sets[d->next],
                         d->floor ? NGX_IOA_ROOM_FLOOR : NGX_IOA_ROOM_MEMBERS);
        ngx_ioa_args_str(&a, &d->target);

        if (ngx_ioa_rest_command_args(r, ngx_ioa_agent_delete_left, &a)
            != NGX_OK)
        {
            return ngx_ioa_send_unavailable(r);
        }

        r->main->count++;

        return NGX_DONE;
    }

    ngx_ioa_key_agent(&a, NGX_IOA_AGENT_RECORD, &d->target);
    ngx_ioa_key(&a, NGX_IOA_KEY_AGENTS);
    ngx_ioa_key(&a, NGX_IOA_KEY_STATS);
    ngx_ioa_key(&a, NGX_IOA_KEY_SEEN);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &d->target);
    ngx_ioa_args_int(&a, ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, "0");
    ngx_ioa_args_cstr(&a, "delete");

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_AGENT_FORGET,
                                 ngx_ioa_agent_delete_forgotten, 4, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_agent_delete_left(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (d->floor) {
        d->floor = 0;
        d->next++;

    } else {
        d->left += (ngx_uint_t) reply->integer;
        d->floor = 1;
    }

    ngx_ioa_finish(r, ngx_ioa_agent_delete_next(r));
}


static void
ngx_ioa_agent_delete_forgotten(ngx_http_request_t *r, redisReply *reply)
{
    u_char             *p;
    ngx_str_t           detail, out;
    ngx_ioa_jbuf_t      b;
    ngx_ioa_error_t     err;
    ngx_ioa_delete_t   *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->element[0]->len == 4
        && ngx_strncmp(reply->element[0]->str, "gone", 4) == 0)
    {
        /* deleted meanwhile by another request */
        ngx_ioa_error_set(&err, "unknown_agent", "name",
                          "there is no agent \"%V\" in the registry",
                          &d->target);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err));
        return;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_AGENTS_DELETED, 1);

    if (ngx_ioa_delete_publish(r->pool, "agent_deleted", d) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_pnalloc(r->pool, 2 * NGX_INT_T_LEN + NGX_INT64_LEN
                             + sizeof("rooms= left= erased="));
    if (p == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    detail.data = p;
    p = ngx_sprintf(p, "rooms=%ui left=%ui", d->nsets, d->left);

    if (d->erase) {
        p = ngx_sprintf(p, " erased=%L", ngx_ioa_erase_erased(d->erase));
    }

    detail.len = p - detail.data;

    ngx_ioa_audit("agent_deleted", &d->actor, &d->target, &detail);

    if (ngx_ioa_jbuf_init(&b, r->pool, 128) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"deleted\":\"agent\",\"name\":");
    ngx_ioa_jbuf_str(&b, &d->target);
    ngx_ioa_jbuf_literal(&b, ",\"rooms\":");
    ngx_ioa_jbuf_int(&b, (int64_t) d->nsets);

    if (d->erase) {
        ngx_ioa_jbuf_literal(&b, ",\"erased\":");
        ngx_ioa_erase_summary(d->erase, &b);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


/* DELETE /rooms/{comm_id}: its creator, or admin; open mode: anyone */

ngx_int_t
ngx_ioa_room_delete_handler(ngx_http_request_t *r, ngx_str_t *comm_id,
    ngx_ioa_identity_t *who)
{
    ngx_ioa_args_t     a;
    ngx_ioa_error_t    err;
    ngx_ioa_delete_t  *d;

    if (comm_id->len == 0 || comm_id->len > NGX_IOA_COMM_ID_MAX) {
        ngx_ioa_error_set(&err, "invalid_request", "comm_id",
                          "a comm_id has 1 to %d bytes",
                          NGX_IOA_COMM_ID_MAX);
        return ngx_ioa_send_error(r, NGX_HTTP_BAD_REQUEST, &err);
    }

    d = ngx_ioa_delete_start(r, comm_id, who);
    if (d == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* who may: settled once the creator is read (the identity is kept in
     * the creator's place until then) */
    d->creator = who->open || (who->scopes & NGX_IOA_SCOPE_ADMIN)
                 ? d->actor : who->sub;
    d->left = who->open || (who->scopes & NGX_IOA_SCOPE_ADMIN);

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "HGET");
    ngx_ioa_key_room(&a, &d->target, NGX_IOA_ROOM_META);
    ngx_ioa_args_cstr(&a, "creator");

    if (ngx_ioa_rest_command_args(r, ngx_ioa_room_delete_meta, &a)
        != NGX_OK)
    {
        return ngx_ioa_send_unavailable(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_ioa_room_delete_meta(ngx_http_request_t *r, redisReply *reply)
{
    ngx_ioa_args_t     a;
    ngx_ioa_error_t    err;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL
        || (reply->type != REDIS_REPLY_STRING
            && reply->type != REDIS_REPLY_NIL))
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->type == REDIS_REPLY_NIL) {
        /* unknown_room, room_expired or room_deleted (the tombstone) */
        if (ngx_ioa_room_gone(r, &d->target) != NGX_OK) {
            ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
        }

        return;
    }

    /* d->left: the caller is admin (or open mode) */

    if (!d->left
        && ((size_t) reply->len != d->creator.len
            || ngx_strncmp(reply->str, d->creator.data, reply->len) != 0))
    {
        ngx_ioa_error_set(&err, "forbidden", "comm_id",
                          "only the creator of room \"%V\" or an \"admin\" "
                          "token may delete it", &d->target);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return;
    }

    d->left = 0;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "SMEMBERS");
    ngx_ioa_key_room(&a, &d->target, NGX_IOA_ROOM_MEMBERS);

    if (ngx_ioa_rest_command_args(r, ngx_ioa_room_delete_members, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


/* the registry half first (room_forget.lua), while the members can still
 * be read again should this be interrupted */

static void
ngx_ioa_room_delete_members(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t            i;
    ngx_ioa_args_t        a;
    ngx_ioa_delete_t     *d;
    ngx_ioa_main_conf_t  *mcf;

    d = ngx_ioa_rest_get_data(r);
    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_delete_copy(r, reply, &d->sets, &d->nsets) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMLIST);
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMDUE);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, &d->target);

    /* the members, in the pool (ngx_ioa_delete_copy()) */
    for (i = 0; i < d->nsets; i++) {
        ngx_ioa_args_str(&a, &d->sets[i]);
    }

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_FORGET,
                                 ngx_ioa_room_delete_forgotten, 2, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


static void
ngx_ioa_room_delete_forgotten(ngx_http_request_t *r, redisReply *reply)
{
    ngx_uint_t         i;
    ngx_ioa_args_t     a;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    d->left = (ngx_uint_t) reply->integer;

    if (ngx_ioa_room_delete_envelope(r, d) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_args_init(&a);

    /* room_expire.lua's KEYS: meta to expired, in the schema's order */
    for (i = NGX_IOA_ROOM_META; i <= NGX_IOA_ROOM_EXPIRED; i++) {
        ngx_ioa_key_room(&a, &d->target, i);
    }

    ngx_ioa_args_int(&a, ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, "0");
    ngx_ioa_args_fmt(&a, "%d", NGX_IOA_ROOM_TOMBSTONE);
    ngx_ioa_args_cstr(&a, "delete");
    ngx_ioa_args_str(&a, &d->envelope);
    ngx_ioa_args_str(&a, &d->actor);

    if (ngx_ioa_rest_script_args(r, NGX_IOA_SCRIPT_ROOM_EXPIRE,
                                 ngx_ioa_room_delete_done, 6, &a)
        != NGX_OK)
    {
        ngx_ioa_finish(r, ngx_ioa_send_unavailable(r));
    }
}


/*
 * The room's last envelope, from the hub itself, in the room's normal
 * format (its "id" is given by room_expire.lua's XADD):
 *
 *   {"sender":"ioa","timestamp":<ms>,"comm_id":"<id>","content":"...",
 *    "state":1,"type":0,"ioa_room_deleted":{"by":"<actor>","at":<ms>}}
 *
 * "ioa" may be an agent's name too: what says the hub wrote it is the
 * server-owned "ioa_room_deleted" (a client's ioa_* fields are dropped, so
 * no member forges one).  type 0 (DEFAULT): nothing the conversation acts
 * on.
 */

static ngx_int_t
ngx_ioa_room_delete_envelope(ngx_http_request_t *r, ngx_ioa_delete_t *d)
{
    int64_t          now;
    ngx_ioa_jbuf_t   b;

    now = ngx_ioa_now_ms();

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"sender\":\"ioa\",\"timestamp\":");
    ngx_ioa_jbuf_int(&b, now);
    ngx_ioa_jbuf_literal(&b, ",\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &d->target);
    ngx_ioa_jbuf_literal(&b, ",\"content\":\"this room was deleted: its "
                             "log and members are removed\","
                             "\"state\":1,\"type\":0,"
                             "\"ioa_room_deleted\":{\"by\":");
    ngx_ioa_jbuf_str(&b, &d->actor);
    ngx_ioa_jbuf_literal(&b, ",\"at\":");
    ngx_ioa_jbuf_int(&b, now);
    ngx_ioa_jbuf_literal(&b, "}}");

    return ngx_ioa_jbuf_done(&b, &d->envelope);
}


static void
ngx_ioa_room_delete_done(ngx_http_request_t *r, redisReply *reply)
{
    u_char            *p;
    ngx_str_t          detail;
    ngx_ioa_error_t    err;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        ngx_ioa_finish(r, ngx_ioa_rest_redis_failed(r, reply));
        return;
    }

    if (reply->elements < 2
        || reply->element[1]->type != REDIS_REPLY_STRING)
    {
        /* "gone": deleted meanwhile by another request */
        ngx_ioa_error_set(&err, "unknown_room", "comm_id",
                          "there is no room \"%V\"", &d->target);
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err));
        return;
    }

    d->sid.data = ngx_pnalloc(r->pool, reply->element[1]->len);
    if (d->sid.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    d->sid.len = reply->element[1]->len;
    ngx_memcpy(d->sid.data, reply->element[1]->str, d->sid.len);

    ngx_ioa_stat_add(NGX_IOA_STAT_ROOMS_DELETED, 1);

    if (ngx_ioa_delete_publish(r->pool, "room_deleted", d) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_pnalloc(r->pool, 2 * NGX_INT_T_LEN + sizeof("members= sets="));
    if (p == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    detail.data = p;
    detail.len = ngx_sprintf(p, "members=%ui sets=%ui", d->nsets, d->left)
                 - p;

    ngx_ioa_audit("room_deleted", &d->actor, &d->target, &detail);

    ngx_ioa_room_delete_answer(r);
}


static void
ngx_ioa_room_delete_answer(ngx_http_request_t *r)
{
    ngx_str_t          out;
    ngx_ioa_jbuf_t     b;
    ngx_ioa_delete_t  *d;

    d = ngx_ioa_rest_get_data(r);

    if (ngx_ioa_jbuf_init(&b, r->pool, 128) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"deleted\":\"room\",\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &d->target);
    ngx_ioa_jbuf_literal(&b, ",\"members\":");
    ngx_ioa_jbuf_int(&b, (int64_t) d->nsets);
    ngx_ioa_jbuf_literal(&b, ",\"id\":");
    ngx_ioa_jbuf_str(&b, &d->sid);
    ngx_ioa_jbuf_byte(&b, '}');

    if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}


/*
 * The event, on the registry's channel (PUBLISH, or SPUBLISH on a Cluster
 * as the teamup events), not waited for:
 *
 *   {"event":"agent_deleted","name":"<name>","by":"<actor>"}
 *   {"event":"room_deleted","comm_id":"<id>","by":"<actor>",
 *    "id":"<sid>","envelope":{<the final envelope>}}
 */

static ngx_int_t
ngx_ioa_delete_publish(ngx_pool_t *pool, const char *event,
    ngx_ioa_delete_t *d)
{
    ngx_str_t             s;
    ngx_ioa_args_t        a;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_jbuf_init(&b, pool, 256 + d->envelope.len) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_literal(&b, "{\"event\":\"");
    ngx_ioa_jbuf_raw(&b, (u_char *) event, ngx_strlen(event));

    if (d->sid.len) {
        ngx_ioa_jbuf_literal(&b, "\",\"comm_id\":");

    } else {
        ngx_ioa_jbuf_literal(&b, "\",\"name\":");
    }

    ngx_ioa_jbuf_str(&b, &d->target);
    ngx_ioa_jbuf_literal(&b, ",\"by\":");
    ngx_ioa_jbuf_str(&b, &d->actor);

    if (d->sid.len) {
        ngx_ioa_jbuf_literal(&b, ",\"id\":");
        ngx_ioa_jbuf_str(&b, &d->sid);
        ngx_ioa_jbuf_literal(&b, ",\"envelope\":");
        ngx_ioa_jbuf_raw(&b, d->envelope.data, d->envelope.len);
    }

    ngx_ioa_jbuf_byte(&b, '}');

    if (ngx_ioa_jbuf_done(&b, &s) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, ngx_ioa_redis_cluster() ? "SPUBLISH" : "PUBLISH");
    ngx_ioa_args_str(&a, &mcf->events_channel);
    ngx_ioa_args_str(&a, &s);

    if (ngx_ioa_redis_command_args(NULL, NULL, &a) == NULL) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "ioa: the event \"%s\" of \"%V\" could not be sent: "
                      "hub workers will not close its connections",
                      event, &d->target);
    }

    return NGX_OK;
}


/* a set's members, copied into the request's pool */

static ngx_int_t
ngx_ioa_delete_copy(ngx_http_request_t *r, redisReply *reply,
    ngx_str_t **sets, ngx_uint_t *n)
{
    ngx_uint_t   i, k;
    redisReply  *e;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        return NGX_ERROR;
    }

    *sets = ngx_palloc(r->pool, (reply->elements + 1) * sizeof(ngx_str_t));
    if (*sets == NULL) {
        return NGX_ERROR;
    }

    k = 0;

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_STRING || e->len == 0) {
            continue;
        }

        (*sets)[k].data = ngx_pnalloc(r->pool, e->len);
        if ((*sets)[k].data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy((*sets)[k].data, e->str, e->len);
        (*sets)[k].len = e->len;
        k++;
    }

    *n = k;

    return NGX_OK;
}
