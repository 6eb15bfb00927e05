
/*
 * Copyright (C) ioa authors
 *
 * Observers and the registry's events inside one nginx worker.
 *
 * An observer (IoA's frontend, the console) sees every room: the worker
 * PSUBSCRIBEs the rooms' pattern while it has one (a subscription of its
 * own, kept here) and sends each envelope to every local observer, built
 * once with "frontend_type":"message" as IoA's frontend expects.
 *
 * Observers PSUBSCRIBE a pattern, which shard channels never reach, and a
 * plain PUBLISH on a Cluster is copied to every node: paying that for
 * every envelope while nobody observes would undo what shard channels
 * save.  So post.lua adds the PUBLISH copy ("sf") only while some nginx
 * worker of some instance has an observer: such a worker keeps its holder
 * id in <prefix>{reg}:observers, scored with an expiry it renews every
 * tick, and every worker counts the live entries every tick
 * (ngx_ioa_observed() says whether to ask for the copy).  An observer on
 * another instance sees the feed at most a tick after it connected; the
 * feed is a live view without resume, so that is all it can miss.
 *
 * A goal's feed is stored and published as a room, "goal-<id>" (the
 * worker's events.c), so that its followers use the room machinery; on a
 * single Redis its PUBLISH matches the rooms' pattern too.  It is no room
 * agents talk in: IoA's frontend would draw each of its state changes and
 * copies of envelopes as an empty "ioa-worker" message, and the room's own
 * envelopes already reach the feed.  So the feed drops it here, where
 * every observer transport passes (on a Cluster it never arrives: the
 * goal feed is a shard channel).  A goal's events stay on its own feed,
 * GET /goals/{id}/events.  No room is named so: the hub makes every
 * comm_id, 32 hex digits (ngx_ioa_rest.c).
 *
 * The registry's event channel (subscribed for as long as the worker
 * runs, following its slot on a Cluster) carries teamup events: the local
 * members of a new room start reading it from its beginning, and
 * observers see it as IoA's frontend does ("frontend_type":"teamup").  It
 * carries the deletions too, "agent_deleted" and "room_deleted"
 * (published by ngx_ioa_delete.c): this file ends the local connections
 * and links they name, and observers see them with that frontend_type.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"
#include "ngx_ioa_ws_frame.h"


static void ngx_ioa_observers_mark(ngx_uint_t present);
static void ngx_ioa_observers_count_reply(redisReply *reply, void *data);
static void ngx_ioa_observer_feed(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *payload);
static void ngx_ioa_registry_event(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *data);
static void ngx_ioa_registry_events_ready(ngx_ioa_sub_t *sub);
static void ngx_ioa_registry_deleted(ngx_pool_t *pool, yajl_val ev,
    ngx_str_t *event);


static const ngx_ioa_sub_handler_t  ngx_ioa_feed_handler = {
    ngx_ioa_observer_feed,
    NULL,                               /* ready: a live view, no resume */
    NULL,                               /* lost */
    NULL                                /* gone */
};


/* teamup events published while nobody listened are lost; the agents'
 * room sets in Redis are not: they are read again once it is ready */

static const ngx_ioa_sub_handler_t  ngx_ioa_events_handler = {
    ngx_ioa_registry_event,
    ngx_ioa_registry_events_ready,
    NULL,                               /* lost */
    NULL                                /* gone */
};


static ngx_ioa_sub_t       ngx_ioa_feed_sub;
static ngx_ioa_sub_t       ngx_ioa_events_sub;


static ngx_queue_t         ngx_ioa_observers;
static ngx_uint_t          ngx_ioa_nobservers;
/* some worker of some instance has observers (on a Cluster) */
static ngx_uint_t          ngx_ioa_feed_remote;


ngx_int_t
ngx_ioa_observer_init(ngx_cycle_t *cycle)
{
    ngx_str_t            *reg;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    ngx_queue_init(&ngx_ioa_observers);

    /* on a Cluster the pattern goes to the registry's master, as good a
     * node as any: the PUBLISH copies it hears reach every node */
    reg = &mcf->reg_base;

    ngx_ioa_sub_init(&ngx_ioa_feed_sub, NGX_IOA_SUB_PATTERN,
                     &mcf->feed_pattern,
                     ioa_key_slot(reg->data, reg->len),
                     &ngx_ioa_feed_handler);

    ngx_ioa_sub_init(&ngx_ioa_events_sub, NGX_IOA_SUB_CHANNEL,
                     &mcf->events_channel,
                     ioa_key_slot(mcf->events_channel.data,
                                  mcf->events_channel.len),
                     &ngx_ioa_events_handler);

    ngx_ioa_sub_start(&ngx_ioa_events_sub);

    return NGX_OK;
}


void
ngx_ioa_observer_attach(ngx_ioa_client_t *cl)
{
    ngx_queue_insert_tail(&ngx_ioa_observers, &cl->agent_q);

    if (ngx_ioa_nobservers++ == 0) {
        ngx_ioa_sub_start(&ngx_ioa_feed_sub);
        ngx_ioa_observers_mark(1);
    }
}


void
ngx_ioa_observer_detach(ngx_ioa_client_t *cl)
{
    ngx_queue_remove(&cl->agent_q);

    if (--ngx_ioa_nobservers) {
        return;
    }

    ngx_ioa_observers_mark(0);
    (void) ngx_ioa_sub_stop(&ngx_ioa_feed_sub);
}


/* does anybody anywhere want the feed's copy of an envelope */

ngx_uint_t
ngx_ioa_observed(void)
{
    return ngx_ioa_nobservers || ngx_ioa_feed_remote;
}


void
ngx_ioa_observers_tick(void)
{
    ngx_ioa_observers_mark(ngx_ioa_nobservers > 0);
}


/* an envelope from the pattern subscription, to every local observer */

static void
ngx_ioa_observer_feed(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *payload)
{
    ngx_str_t          comm_id, sid, json;
    ngx_queue_t       *q, *next;
    ngx_ioa_msg_t     *m;
    ngx_ioa_client_t  *cl;

    if (ngx_queue_empty(&ngx_ioa_observers)
        || ngx_ioa_comm_id_from_channel(channel, &comm_id) != NGX_OK
        || ngx_ioa_msg_split(payload, &sid, &json) != NGX_OK)
    {
        return;
    }

    if (comm_id.len > sizeof("goal-") - 1
        && ngx_strncmp(comm_id.data, "goal-", sizeof("goal-") - 1) == 0)
    {
        return;                         /* a goal's feed, not a room */
    }

    m = ngx_ioa_msg_create(&comm_id, &sid, &json, 1);
    if (m == NULL) {
        return;
    }

    m->refs++;

    for (q = ngx_queue_head(&ngx_ioa_observers);
         q != ngx_queue_sentinel(&ngx_ioa_observers);
         q = next)
    {
        /* sending may close an observer, which unlinks it */
        next = ngx_queue_next(q);
        cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);
        ngx_ioa_stat_add(NGX_IOA_STAT_DELIVERED + cl->transport->via, 1);
        (void) cl->transport->send(cl, m);
    }

    ngx_ioa_msg_release(m);
}


static void
ngx_ioa_registry_events_ready(ngx_ioa_sub_t *sub)
{
    ngx_ioa_clients_reload_rooms();
}


/* a teamup event: {"comm_id":"...","agent_names":[...],"team_name":...} */

static void
ngx_ioa_registry_event(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *data)
{
    size_t             i;
    yajl_val           ev, id, names, v;
    ngx_str_t          comm_id, name, s, type;
    ngx_pool_t        *pool;
    ngx_queue_t       *q, *next;
    ngx_ioa_sid_t      zero;
    ngx_ioa_agent_t   *a;
    ngx_ioa_error_t    err;
    ngx_ioa_client_t  *cl;

    pool = ngx_create_pool(1024, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    ev = ngx_ioa_json_parse(pool, data->data, data->len, 8, &err);

    if (ev == NULL || !YAJL_IS_OBJECT(ev)) {
        goto done;
    }

    /* a deletion (ngx_ioa_delete.c): the local connections and links it
     * ends, and the observers see it as {"frontend_type":"<event>",...} */

    v = ngx_ioa_json_get(ev, "event");

    if (v != NULL) {
        if (ngx_ioa_json_string(v, &type) != NGX_OK
            || !((type.len == sizeof("agent_deleted") - 1
                  && ngx_strncmp(type.data, "agent_deleted", type.len) == 0)
                 || (type.len == sizeof("room_deleted") - 1
                     && ngx_strncmp(type.data, "room_deleted", type.len)
                        == 0)))
        {
            goto done;
        }

        ngx_ioa_registry_deleted(pool, ev, &type);

        goto observers;
    }

    ngx_str_set(&type, "teamup");

    id = ngx_ioa_json_get(ev, "comm_id");
    names = ngx_ioa_json_get(ev, "agent_names");

    if (id == NULL || !YAJL_IS_STRING(id)
        || names == NULL || !YAJL_IS_ARRAY(names))
    {
        goto done;
    }

    if (ngx_ioa_json_string(id, &comm_id) != NGX_OK) {
        goto done;
    }

    zero.ms = 0;
    zero.seq = 0;

    for (i = 0; i < names->u.array.len; i++) {
        v = names->u.array.values[i];

        if (ngx_ioa_json_string(v, &name) != NGX_OK) {
            continue;
        }

        a = ngx_ioa_agent_get(&name, 0);
        if (a == NULL) {
            continue;
        }

        for (q = ngx_queue_head(&a->clients);
             q != ngx_queue_sentinel(&a->clients);
             q = next)
        {
            next = ngx_queue_next(q);
            cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);

            if (ngx_ioa_link(cl, &comm_id, &zero) != NGX_OK)
            {
                cl->transport->close(cl, NGX_IOA_WS_INTERNAL,
                                     "out of memory");
            }
        }
    }

observers:

    if (ngx_queue_empty(&ngx_ioa_observers)) {
        goto done;
    }

    /* {"frontend_type":"<type>", <the event's members>} */

    s.len = sizeof("{\"frontend_type\":\"\",") - 1 + type.len
            + data->len - 1;
    s.data = ngx_pnalloc(pool, s.len);
    if (s.data == NULL) {
        goto done;
    }

    ngx_sprintf(s.data, "{\"frontend_type\":\"%V\",%*s",
                &type, data->len - 1, data->data + 1);

    for (q = ngx_queue_head(&ngx_ioa_observers);
         q != ngx_queue_sentinel(&ngx_ioa_observers);
         q = next)
    {
        next = ngx_queue_next(q);
        cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);
        (void) cl->transport->send_text(cl, &s);
    }

done:

    ngx_destroy_pool(pool);
}


/* on a Cluster: this worker's observers in <prefix>{reg}:observers
 * (present: renewed; not: removed), and whether any worker has some */

static void
ngx_ioa_observers_mark(ngx_uint_t present)
{
    ngx_str_t       *holder;
    ngx_ioa_args_t   a;

    if (!ngx_ioa_redis_cluster() || !ngx_ioa_redis_ready()) {
        return;
    }

    holder = ngx_ioa_holder();

    ngx_ioa_args_init(&a);

    if (present) {
        ngx_ioa_args_cstr(&a, "ZADD");
        ngx_ioa_key(&a, NGX_IOA_KEY_OBSERVERS);
        ngx_ioa_args_fmt(&a, "%L", ngx_ioa_now_ms() + 3 * NGX_IOA_TICK);
        ngx_ioa_args_str(&a, holder);

    } else {
        ngx_ioa_args_cstr(&a, "ZREM");
        ngx_ioa_key(&a, NGX_IOA_KEY_OBSERVERS);
        ngx_ioa_args_str(&a, holder);
    }

    (void) ngx_ioa_redis_command_args(NULL, NULL, &a);

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "ZCOUNT");
    ngx_ioa_key(&a, NGX_IOA_KEY_OBSERVERS);
    ngx_ioa_args_fmt(&a, "(%L", ngx_ioa_now_ms());
    ngx_ioa_args_cstr(&a, "+inf");

    (void) ngx_ioa_redis_command_args(ngx_ioa_observers_count_reply, NULL,
                                      &a);
}


static void
ngx_ioa_observers_count_reply(redisReply *reply, void *data)
{
    if (reply && reply->type == REDIS_REPLY_INTEGER) {
        ngx_ioa_feed_remote = (reply->integer > 0);
    }
}


/*
 * A registry event of a deletion (api/ngx_ioa_delete.c publishes it), in
 * every nginx worker: the agent's local connections close with 1008; the
 * room's local links get its final envelope, then go.
 */

static void
ngx_ioa_registry_deleted(ngx_pool_t *pool, yajl_val ev, ngx_str_t *event)
{
    ngx_str_t          name, comm_id, sid, env;
    yajl_val           v;
    ngx_uint_t         n;
    ngx_ioa_jbuf_t     b;
    ngx_queue_t       *q;
    ngx_ioa_msg_t     *m;
    ngx_ioa_link_t    *lk;
    ngx_ioa_room_t    *room;
    ngx_ioa_agent_t   *a;
    ngx_ioa_client_t  *cl;

    if (event->len == sizeof("agent_deleted") - 1
        && ngx_strncmp(event->data, "agent_deleted", event->len) == 0)
    {
        v = ngx_ioa_json_get(ev, "name");

        if (v == NULL || ngx_ioa_json_string(v, &name) != NGX_OK) {
            return;
        }

        /* a close detaches the client at once, and the last one frees
         * the agent: look it up again each time; n bounds the loop should
         * a transport ever keep a client attached while it closes */

        a = ngx_ioa_agent_get(&name, 0);
        n = a ? a->n : 0;

        while (n-- && (a = ngx_ioa_agent_get(&name, 0)) != NULL
               && !ngx_queue_empty(&a->clients))
        {
            q = ngx_queue_head(&a->clients);
            cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);

            cl->transport->close(cl, NGX_IOA_WS_POLICY,
                                 "agent deleted");
        }

        return;
    }

    /* room_deleted */

    v = ngx_ioa_json_get(ev, "comm_id");

    if (v == NULL || ngx_ioa_json_string(v, &comm_id) != NGX_OK) {
        return;
    }

    room = ngx_ioa_room_get(&comm_id, 0);
    if (room == NULL || ngx_queue_empty(&room->links)) {
        return;
    }

    v = ngx_ioa_json_get(ev, "id");

    if (v == NULL || ngx_ioa_json_string(v, &sid) != NGX_OK) {
        return;
    }

    v = ngx_ioa_json_get(ev, "envelope");
    m = NULL;

    if (v && YAJL_IS_OBJECT(v) && ngx_ioa_jbuf_init(&b, pool, 512) == NGX_OK)
    {
        ngx_ioa_jbuf_val(&b, v);

        if (ngx_ioa_jbuf_done(&b, &env) == NGX_OK) {
            m = ngx_ioa_msg_create(&comm_id, &sid, &env, 0);
        }
    }

    if (m) {
        m->refs++;
    }

    /* a link's removal may free the room once it has none: count first */

    n = room->nlinks;

    while (n--) {
        room = ngx_ioa_room_get(&comm_id, 0);
        if (room == NULL || ngx_queue_empty(&room->links)) {
            break;
        }

        q = ngx_queue_head(&room->links);
        lk = ngx_queue_data(q, ngx_ioa_link_t, room_q);
        cl = lk->client;

        ngx_ioa_link_free(lk);

        if (m && cl->kind != NGX_IOA_CLIENT_OBSERVER) {
            if (cl->transport->send(cl, m) == NGX_ERROR) {
                continue;
            }
        }

        if (cl->kind == NGX_IOA_CLIENT_FOLLOWER) {
            /* it followed this room only: its stream is over */
            cl->transport->close(cl, NGX_IOA_WS_NORMAL, "room deleted");
        }
    }

    if (m) {
        ngx_ioa_msg_release(m);
    }
}
