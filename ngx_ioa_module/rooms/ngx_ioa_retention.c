
/*
 * Copyright (C) ioa authors
 *
 * Retention: a room whose last envelope is older than its retention is
 * removed, its log, members, floor and chain with it, and so are its
 * entries in the members' room sets and in the room indexes; an agent not
 * seen (registered, connected) for ioa_agent_retention leaves the registry
 * (agent_forget.lua says what goes).  Without them Redis grows by every
 * envelope ever posted and every agent that ever registered.
 *
 * A room's retention is ioa_room_retention, or its own, asked for at
 * /teamup ("retention_s", kept in its meta as retention_ms), whichever is
 * shorter: a room may ask for less than the operator allows, never for
 * more.  Two indexes, both in the {reg} slot, find the rooms that may be
 * due without reading every room:
 *
 *   <reg>roomlist  every room, scored by its last activity (teamup, then
 *                  the sweep's "live" answers): due at now - retention;
 *   <reg>roomdue   the rooms with a retention of their own, scored by
 *                  when they are due (last activity + their retention),
 *                  so a room of 1 s is found without listing every room
 *                  older than 1 s.
 *
 * One nginx worker of the whole deployment sweeps at a time.  At every
 * tick of the room code (NGX_IOA_TICK) a worker that is not sweeping asks
 * for the lease, SET <reg>sweep <holder> NX PX <tick>, also with both
 * retentions off, since a room may have one of its own; the one that gets
 * it sweeps, one step at a time:
 *
 *   LIST     ZRANGEBYSCORE <reg>roomlist -inf <now - ioa_room_retention>
 *            (with ioa_room_retention only), then <reg>roomdue -inf <now>,
 *            LIMIT 0 NGX_IOA_SWEEP_BATCH each: the rooms that may be due
 *   EXPIRE   room_expire.lua on each room's own keys (its slot on a
 *            Cluster), which answers from the room's log and meta:
 *              "live" <last> [<due>]  the room spoke since: ZADD XX
 *                              moves it in roomlist (<last>) and roomdue
 *                              (<due>), so it is looked at again only a
 *                              retention after its last envelope;
 *              "expired" m...  its keys are gone, a tombstone
 *                              says when (for NGX_IOA_ROOM_TOMBSTONE);
 *              "gone"          nothing left of it;
 *   FORGET   room_forget.lua for "expired" and "gone": out of each
 *            member's room set and out of both indexes (the {reg} slot).
 *
 * Agents go the same way, after the rooms, from <reg>seen (name -> when
 * last seen): LIST the names due, then agent_forget.lua for each, which
 * keeps an agent connected right now or seen since (and moves it in
 * <reg>seen), and removes the others; all of it in the {reg} slot.
 *
 * A full batch is followed by the next one at once, up to
 * NGX_IOA_SWEEP_BATCHES a tick for each index; then the next tick, with a
 * new lease, goes on.  So a sweep costs Redis a few small commands per
 * room, one at a time, and UNLINK frees long logs in the background: Redis
 * is never held long.  A deployment without any retention pays a SET NX
 * per nginx worker and tick, and one ZRANGEBYSCORE of an empty roomdue per
 * tick.  The indexes' scores start at the room's creation (teamup), which
 * is also the right first guess of when it may be due.
 *
 * Every step can be repeated: a reply lost with its connection leaves the
 * room in the indexes, and a later sweep finds it again.  The age is
 * measured against this host's clock, the log's ids against Redis': a skew
 * of seconds matters nothing to retentions of hours or days, and makes a
 * retention of seconds (tests) a second or so longer or shorter.
 *
 * An expired room leaves a tombstone, {room:<id>}:expired (the ms it
 * expired at), for NGX_IOA_ROOM_TOMBSTONE: a client that resumes into it
 * (resume=, a resume frame, Last-Event-ID), reads its events or its
 * record is told room_expired, naming it and when, instead of a silence
 * or the unknown_room of a room that never was.  The tombstone is read
 * only where a room was found missing; a post, whose script would have to
 * name it as one more key on every post, still gets unknown_room.
 *
 * Clients still connected to a room that expires keep their link to it;
 * what they post then is refused with unknown_room, as in a room that
 * never existed, and a resume frame for it delivers nothing.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* rooms looked at per LIST, and LISTs per tick */
#define NGX_IOA_SWEEP_BATCH     100
#define NGX_IOA_SWEEP_BATCH_STR "100"
#define NGX_IOA_SWEEP_BATCHES   10

/* rooms a client named that wait to be looked up as expired */
#define NGX_IOA_GONE_MAX        256


typedef enum {
    NGX_IOA_SWEEP_ROOMS = 0,        /* <reg>roomlist: ioa_room_retention */
    NGX_IOA_SWEEP_DUE,              /* <reg>roomdue: their own retention */
    NGX_IOA_SWEEP_AGENTS            /* <reg>seen: ioa_agent_retention */
} ngx_ioa_sweep_phase_e;


typedef struct {
    ngx_uint_t             busy;    /* a step is in flight */
    ngx_ioa_sweep_phase_e  phase;
    ngx_uint_t             batches; /* LISTs made this phase */
    ngx_str_t             *ids;     /* the current LIST's rooms */
    ngx_uint_t             nids;
    ngx_uint_t             next;    /* the room being swept */
    ngx_uint_t             full;    /* the LIST filled its batch */
} ngx_ioa_sweep_t;


struct ngx_ioa_gone_s {
    ngx_ioa_gone_t        *next;
    ngx_uint_t             member;  /* not_member unless it expired */
    ngx_str_t              comm_id;
    u_char                 data[1];
};


static void ngx_ioa_sweep_leased(redisReply *reply, void *data);
static void ngx_ioa_sweep_phase(ngx_ioa_sweep_phase_e phase);
static void ngx_ioa_sweep_list(void);
static void ngx_ioa_sweep_listed(redisReply *reply, void *data);
static void ngx_ioa_sweep_next(void);
static void ngx_ioa_sweep_expired(redisReply *reply, void *data);
static void ngx_ioa_sweep_forgotten(redisReply *reply, void *data);
static void ngx_ioa_sweep_agent(ngx_str_t *name);
static void ngx_ioa_sweep_agent_done(redisReply *reply, void *data);
static void ngx_ioa_sweep_done(void);
static ngx_int_t ngx_ioa_gone_error(redisReply *reply, ngx_str_t *comm_id,
    const char *field, ngx_ioa_error_t *err);
static void ngx_ioa_room_gone_reply(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_ioa_client_gone_ask(ngx_ioa_client_t *cl);
static void ngx_ioa_client_gone_reply(redisReply *reply, void *data);


static ngx_ioa_sweep_t  ngx_ioa_sweep;


/*
 * The room code's tick: take the lease and sweep.  Also with both
 * retentions off, since a room may have one of its own (a SET NX per
 * worker and tick, and one ZRANGEBYSCORE of the due index per tick in the
 * deployment).
 */

void
ngx_ioa_retention_tick(void)
{
    ngx_str_t       *holder;
    ngx_ioa_args_t   a;

    if (ngx_ioa_sweep.busy || !ngx_ioa_redis_ready()) {
        return;
    }

    holder = ngx_ioa_holder();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "SET");
    ngx_ioa_key(&a, NGX_IOA_KEY_SWEEP);
    ngx_ioa_args_str(&a, holder);
    ngx_ioa_args_cstr(&a, "NX");
    ngx_ioa_args_cstr(&a, "PX");
    ngx_ioa_args_fmt(&a, "%M", (ngx_msec_t) NGX_IOA_TICK);

    if (ngx_ioa_redis_command_args(ngx_ioa_sweep_leased, NULL, &a) != NULL) {
        ngx_ioa_sweep.busy = 1;
    }
}


static void
ngx_ioa_sweep_leased(redisReply *reply, void *data)
{
    if (reply == NULL || reply->type != REDIS_REPLY_STATUS) {
        /* another worker sweeps this tick (a nil reply), or Redis is
         * away or refuses: the next tick asks again */
        ngx_ioa_redis_log_refusal(reply, "the retention sweep's lease");
        ngx_ioa_sweep.busy = 0;
        return;
    }

    ngx_ioa_sweep_phase(ngx_ioa_main_conf()->room_retention
                        ? NGX_IOA_SWEEP_ROOMS : NGX_IOA_SWEEP_DUE);
}


static void
ngx_ioa_sweep_phase(ngx_ioa_sweep_phase_e phase)
{
    ngx_ioa_sweep.phase = phase;
    ngx_ioa_sweep.batches = 0;
    ngx_ioa_sweep_list();
}


static void
ngx_ioa_sweep_list(void)
{
    int64_t               age;
    ngx_ioa_key_e         index;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    /* roomdue is scored by when each room is due, the others by when it
     * was last active */

    switch (ngx_ioa_sweep.phase) {

    case NGX_IOA_SWEEP_ROOMS:
        index = NGX_IOA_KEY_ROOMLIST;
        age = mcf->room_retention;
        break;

    case NGX_IOA_SWEEP_DUE:
        index = NGX_IOA_KEY_ROOMDUE;
        age = 0;
        break;

    default: /* NGX_IOA_SWEEP_AGENTS */
        index = NGX_IOA_KEY_SEEN;
        age = mcf->agent_retention;
        break;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "ZRANGEBYSCORE");
    ngx_ioa_key(&a, index);
    ngx_ioa_args_cstr(&a, "-inf");
    ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms() - age);
    ngx_ioa_args_cstr(&a, "LIMIT");
    ngx_ioa_args_cstr(&a, "0");
    ngx_ioa_args_cstr(&a, NGX_IOA_SWEEP_BATCH_STR);

    ngx_ioa_sweep.batches++;

    if (ngx_ioa_redis_command_args(ngx_ioa_sweep_listed, NULL, &a) == NULL) {
        ngx_ioa_sweep.busy = 0;
    }
}


static void
ngx_ioa_sweep_listed(redisReply *reply, void *data)
{
    u_char      *p;
    size_t       size;
    ngx_uint_t   i, n;
    redisReply  *e;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_redis_log_refusal(reply, "the retention sweep's list");
        ngx_ioa_sweep.busy = 0;
        return;
    }

    /* the room ids, copied: the reply is gone when this returns (ids
     * that cannot be ours are left out) */

    size = 0;

    for (i = 0; i < reply->elements; i++) {
        size += sizeof(ngx_str_t) + reply->element[i]->len;
    }

    if (size == 0) {
        ngx_ioa_sweep.full = 0;
        ngx_ioa_sweep_done();           /* nothing due: the next kind */
        return;
    }

    ngx_ioa_sweep.ids = ngx_alloc(size, ngx_cycle->log);

    if (ngx_ioa_sweep.ids == NULL) {
        ngx_ioa_sweep.busy = 0;
        return;
    }

    p = (u_char *) (ngx_ioa_sweep.ids + reply->elements);
    n = 0;

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_STRING || e->len == 0
            || e->len > (ngx_ioa_sweep.phase == NGX_IOA_SWEEP_AGENTS
                         ? NGX_IOA_NAME_MAX_BYTES : NGX_IOA_COMM_ID_MAX))
        {
            continue;
        }

        ngx_ioa_sweep.ids[n].data = p;
        ngx_ioa_sweep.ids[n].len = e->len;
        p = ngx_cpymem(p, e->str, e->len);
        n++;
    }

    ngx_ioa_sweep.nids = n;
    ngx_ioa_sweep.next = 0;
    ngx_ioa_sweep.full = (reply->elements >= NGX_IOA_SWEEP_BATCH);

    ngx_ioa_sweep_next();
}


/* room_expire.lua for the next room of the batch */

static void
ngx_ioa_sweep_next(void)
{
    ngx_str_t            *id;
    ngx_uint_t            i;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_sweep.next >= ngx_ioa_sweep.nids) {
        ngx_ioa_sweep_done();
        return;
    }

    id = &ngx_ioa_sweep.ids[ngx_ioa_sweep.next];

    if (ngx_ioa_sweep.phase == NGX_IOA_SWEEP_AGENTS) {
        ngx_ioa_sweep_agent(id);
        return;
    }

    ngx_ioa_args_init(&a);

    /* room_expire.lua's KEYS: meta to expired, in the schema's order */
    for (i = NGX_IOA_ROOM_META; i <= NGX_IOA_ROOM_EXPIRED; i++) {
        ngx_ioa_key_room(&a, id, i);
    }

    ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms());
    ngx_ioa_args_fmt(&a, "%M", mcf->room_retention);
    ngx_ioa_args_fmt(&a, "%d", NGX_IOA_ROOM_TOMBSTONE);

    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_ROOM_EXPIRE,
                                  ngx_ioa_sweep_expired, NULL, 6, &a)
        == NULL)
    {
        ngx_ioa_sweep_done();
    }
}


static void
ngx_ioa_sweep_expired(redisReply *reply, void *data)
{
    ngx_str_t            *id;
    ngx_uint_t            i;
    redisReply           *e;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();
    id = &ngx_ioa_sweep.ids[ngx_ioa_sweep.next];

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        ngx_ioa_redis_log_refusal(reply, "the retention sweep");
        ngx_ioa_sweep_done();
        return;
    }

    e = reply->element[0];

    if (e->len == 4 && ngx_strncmp(e->str, "live", 4) == 0) {

        /* seen again a retention after its last envelope: in roomlist
         * scored by that envelope, in roomdue (a room with its own) by
         * when it is due then; XX, so a room forgotten meanwhile is not
         * put back */

        for (i = 1; i < reply->elements && i < 3; i++) {
            if (reply->element[i]->type != REDIS_REPLY_STRING) {
                break;
            }

            ngx_ioa_args_init(&a);
            ngx_ioa_args_cstr(&a, "ZADD");
            ngx_ioa_key(&a, i == 1 ? NGX_IOA_KEY_ROOMLIST
                                   : NGX_IOA_KEY_ROOMDUE);
            ngx_ioa_args_cstr(&a, "XX");
            ngx_ioa_args_buf(&a, (u_char *) reply->element[i]->str,
                             reply->element[i]->len);
            ngx_ioa_args_str(&a, id);

            (void) ngx_ioa_redis_command_args(NULL, NULL, &a);
        }

        ngx_ioa_sweep.next++;
        ngx_ioa_sweep_next();
        return;
    }

    /* "expired" with its members, or "gone": out of the registry */

    ngx_ioa_args_init(&a);
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMLIST);
    ngx_ioa_key(&a, NGX_IOA_KEY_ROOMDUE);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, id);

    for (i = 1; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type == REDIS_REPLY_STRING) {
            ngx_ioa_args_buf(&a, (u_char *) e->str, e->len);

        } else {
            ngx_ioa_args_cstr(&a, "");
        }
    }

    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_ROOM_FORGET,
                                  ngx_ioa_sweep_forgotten, NULL, 2, &a)
        == NULL)
    {
        ngx_ioa_sweep_done();
    }
}


static void
ngx_ioa_sweep_forgotten(redisReply *reply, void *data)
{
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_ioa_redis_log_refusal(reply, "the retention sweep");
        ngx_ioa_sweep_done();
        return;
    }

    ngx_ioa_sweep.next++;
    ngx_ioa_sweep_next();
}


/* agent_forget.lua for one name */

static void
ngx_ioa_sweep_agent(ngx_str_t *name)
{
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_key_agent(&a, NGX_IOA_AGENT_RECORD, name);
    ngx_ioa_key(&a, NGX_IOA_KEY_AGENTS);
    ngx_ioa_key(&a, NGX_IOA_KEY_STATS);
    ngx_ioa_key(&a, NGX_IOA_KEY_SEEN);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_str(&a, name);
    ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms());
    ngx_ioa_args_fmt(&a, "%M", mcf->agent_retention);

    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_AGENT_FORGET,
                                  ngx_ioa_sweep_agent_done, NULL, 4, &a)
        == NULL)
    {
        ngx_ioa_sweep_done();
    }
}


static void
ngx_ioa_sweep_agent_done(redisReply *reply, void *data)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_ioa_redis_log_refusal(reply, "the retention sweep");
        ngx_ioa_sweep_done();
        return;
    }

    ngx_ioa_sweep.next++;
    ngx_ioa_sweep_next();
}


/* the batch is over: the next one now, if it was full and the tick allows */

static void
ngx_ioa_sweep_done(void)
{
    ngx_uint_t  full;

    full = ngx_ioa_sweep.full && ngx_ioa_sweep.next >= ngx_ioa_sweep.nids;

    ngx_free(ngx_ioa_sweep.ids);
    ngx_ioa_sweep.ids = NULL;
    ngx_ioa_sweep.nids = 0;

    if (ngx_exiting) {
        ngx_ioa_sweep.busy = 0;
        return;
    }

    if (full && ngx_ioa_sweep.batches < NGX_IOA_SWEEP_BATCHES) {
        ngx_ioa_sweep_list();
        return;
    }

    /* this kind is done for this tick: the next one's turn */

    if (ngx_ioa_sweep.phase == NGX_IOA_SWEEP_ROOMS) {
        ngx_ioa_sweep_phase(NGX_IOA_SWEEP_DUE);
        return;
    }

    if (ngx_ioa_sweep.phase == NGX_IOA_SWEEP_DUE
        && ngx_ioa_main_conf()->agent_retention)
    {
        ngx_ioa_sweep_phase(NGX_IOA_SWEEP_AGENTS);
        return;
    }

    ngx_ioa_sweep.busy = 0;
}


/*
 * room_expired (or room_deleted) from a tombstone's GET; NGX_DECLINED:
 * there is none.  An expired room's tombstone is "<ms>", a deleted one's
 * "deleted:<ms>:<actor>" (room_expire.lua).
 */

static ngx_int_t
ngx_ioa_gone_error(redisReply *reply, ngx_str_t *comm_id, const char *field,
    ngx_ioa_error_t *err)
{
    u_char    *p, *last, *colon;
    int64_t    ms;
    ngx_tm_t   tm;
    ngx_str_t  actor;

    if (reply == NULL || reply->type != REDIS_REPLY_STRING) {
        return NGX_DECLINED;
    }

    p = (u_char *) reply->str;
    last = p + reply->len;

    if (reply->len > sizeof("deleted:") - 1
        && ngx_strncmp(p, "deleted:", sizeof("deleted:") - 1) == 0)
    {
        p += sizeof("deleted:") - 1;
        colon = ngx_strlchr(p, last, ':');

        if (colon == NULL
            || ngx_ioa_json_int(p, colon - p, &ms) != NGX_OK || ms < 0)
        {
            return NGX_DECLINED;
        }

        actor.data = colon + 1;
        actor.len = last - actor.data;

        ngx_gmtime((time_t) (ms / 1000), &tm);

        ngx_ioa_error_set(err, "room_deleted", field,
                          "room \"%V\" was deleted by \"%V\" at "
                          "%4d-%02d-%02dT%02d:%02d:%02dZ (%L): its log and "
                          "members were removed",
                          comm_id, &actor, tm.ngx_tm_year, tm.ngx_tm_mon,
                          tm.ngx_tm_mday, tm.ngx_tm_hour, tm.ngx_tm_min,
                          tm.ngx_tm_sec, ms);

        return NGX_OK;
    }

    if (ngx_ioa_json_int(p, reply->len, &ms) != NGX_OK || ms < 0) {
        return NGX_DECLINED;
    }

    ngx_gmtime((time_t) (ms / 1000), &tm);

    ngx_ioa_error_set(err, "room_expired", field,
                      "room \"%V\" expired at %4d-%02d-%02dT%02d:%02d:%02dZ "
                      "(%L): nothing was said in it for its retention, and "
                      "its log and members were removed",
                      comm_id, tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                      tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec, ms);

    return NGX_OK;
}


/*
 * A request found no room comm_id: 404 room_expired if it expired, else
 * 404 unknown_room as before.  The request's REST data becomes the
 * comm_id; the caller returns and the reply finishes the request.
 */

ngx_int_t
ngx_ioa_room_gone(ngx_http_request_t *r, ngx_str_t *comm_id)
{
    ngx_str_t       *id;
    ngx_ioa_args_t   a;

    id = ngx_palloc(r->pool, sizeof(ngx_str_t));
    if (id == NULL) {
        return NGX_ERROR;
    }

    *id = *comm_id;
    ngx_ioa_rest_set_data(r, id);

    /* the tombstone, <prefix>{room:<id>}:expired */

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "GET");
    ngx_ioa_key_room(&a, comm_id, NGX_IOA_ROOM_EXPIRED);

    return ngx_ioa_rest_command_args(r, ngx_ioa_room_gone_reply, &a);
}


static void
ngx_ioa_room_gone_reply(ngx_http_request_t *r, redisReply *reply)
{
    ngx_str_t        *id;
    ngx_ioa_error_t   err;

    id = ngx_ioa_rest_get_data(r);

    /* no tombstone (or Redis away now): unknown_room, as before */

    if (ngx_ioa_gone_error(reply, id, "comm_id", &err) != NGX_OK) {
        ngx_ioa_error_set(&err, "unknown_room", "comm_id",
                          "there is no room \"%V\"", id);
    }

    ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err));
}


/*
 * A client named a room it is not in (resume=, Last-Event-ID, a resume
 * frame): an error frame room_expired if it expired; else not_member
 * where the client was told so before (member), nothing otherwise.  One
 * GET at a time per client, at most NGX_IOA_GONE_MAX waiting: a client
 * that names more gets for those what it got before.
 */

void
ngx_ioa_client_gone(ngx_ioa_client_t *cl, ngx_str_t *comm_id,
    ngx_uint_t member)
{
    ngx_ioa_gone_t   *g;
    ngx_ioa_error_t   err;

    if (cl->closed) {
        return;
    }

    if (cl->ngone >= NGX_IOA_GONE_MAX
        || comm_id->len == 0 || comm_id->len > NGX_IOA_COMM_ID_MAX)
    {
        if (member) {
            ngx_ioa_error_set(&err, "not_member", "rooms",
                              "\"%V\" is not a member of room \"%V\"",
                              &cl->name, comm_id);
            ngx_ioa_client_error(cl, &err, comm_id);
        }

        return;
    }

    g = ngx_alloc(offsetof(ngx_ioa_gone_t, data) + comm_id->len, cl->log);
    if (g == NULL) {
        return;
    }

    g->next = NULL;
    g->member = member;
    g->comm_id.data = g->data;
    g->comm_id.len = comm_id->len;
    ngx_memcpy(g->data, comm_id->data, comm_id->len);

    if (cl->gone == NULL) {
        cl->gone_tail = &cl->gone;
    }

    *cl->gone_tail = g;
    cl->gone_tail = &g->next;
    cl->ngone++;

    if (cl->gone_req == NULL) {
        ngx_ioa_client_gone_ask(cl);
    }
}


static void
ngx_ioa_client_gone_ask(ngx_ioa_client_t *cl)
{
    ngx_ioa_args_t  a;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "GET");
    ngx_ioa_key_room(&a, &cl->gone->comm_id, NGX_IOA_ROOM_EXPIRED);

    cl->gone_req = ngx_ioa_redis_command_args(ngx_ioa_client_gone_reply, cl,
                                              &a);

    if (cl->gone_req == NULL) {
        ngx_ioa_client_gone_free(cl);       /* Redis away: not told */
    }
}


static void
ngx_ioa_client_gone_reply(redisReply *reply, void *data)
{
    ngx_ioa_client_t *cl = data;

    ngx_ioa_gone_t   *g;
    ngx_ioa_error_t   err;

    cl->gone_req = NULL;

    g = cl->gone;
    cl->gone = g->next;
    cl->ngone--;

    if (ngx_ioa_gone_error(reply, &g->comm_id, "comm_id", &err) == NGX_OK) {
        ngx_ioa_client_error(cl, &err, &g->comm_id);

    } else if (g->member) {
        ngx_ioa_error_set(&err, "not_member", "rooms",
                          "\"%V\" is not a member of room \"%V\"",
                          &cl->name, &g->comm_id);
        ngx_ioa_client_error(cl, &err, &g->comm_id);
    }

    ngx_free(g);

    if (cl->gone && !cl->closed) {
        ngx_ioa_client_gone_ask(cl);
    }
}


void
ngx_ioa_client_gone_free(ngx_ioa_client_t *cl)
{
    ngx_ioa_gone_t  *g;

    if (cl->gone_req) {
        ngx_ioa_redis_cancel(cl->gone_req);
        cl->gone_req = NULL;
    }

    while (cl->gone) {
        g = cl->gone;
        cl->gone = g->next;
        ngx_free(g);
    }

    cl->ngone = 0;
}
