
/*
 * Copyright (C) ioa authors
 *
 * Rooms and their subscriptions inside one nginx worker.
 *
 * Every envelope is appended to its room's Stream and published on the
 * room's channel by one Lua script (redis-scripts/post.lua, see
 * ngx_ioa_post.c), so a published envelope is always already in the
 * Stream.  A worker subscribes to the channels of the rooms its local
 * clients are in; each (client, room) pair is a link (ngx_ioa_link.c),
 * which reads the Stream after its last id once the subscription is
 * confirmed and then takes live traffic: that file says why this is exact.
 * This one keeps the rooms (ngx_ioa_room_t, one per room with local links)
 * and their subscriptions, and follows the pub/sub connections as they
 * come and go.
 *
 * A room's subscription is NONE, PENDING (SUBSCRIBE sent), ACTIVE
 * (confirmed) or LEAVING (UNSUBSCRIBE sent).  Links wait in WAIT_SUB until
 * it is ACTIVE; whenever it falls back to NONE, every link of the room goes
 * back to WAIT_SUB and catches up from its last id after the resubscribe.
 *
 * Subscriptions are reference counted by links.  A room without links is
 * unsubscribed after a grace period rather than at once: hiredis 0.14 drops
 * its callback for a channel when an UNSUBSCRIBE reply arrives, so a
 * SUBSCRIBE sent while an UNSUBSCRIBE is in flight would silently lose the
 * channel.  A room in LEAVING therefore waits for the unsubscribe reply
 * before it subscribes again.
 *
 * On a Redis Cluster a room's channel is a shard channel (SSUBSCRIBE on the
 * master that owns the room's slot, SPUBLISH in post.lua), so an envelope
 * crosses no other node.  A subscription is tied to the node it was sent
 * to: when that node's pub/sub connection is lost, when the node drops the
 * channel because the slot moved away (an unasked sunsubscribe, also after
 * a failover demoted it), or when the slot map says another node owns the
 * slot now, the room goes back to NONE and its links to WAIT_SUB, and the
 * room subscribes again on the new owner and catches up from the Stream:
 * the same path as a lost pub/sub connection on a standalone Redis.  The
 * registry's event channel follows its own slot the same way, and after it
 * is (re)subscribed every local agent's room list is read again, since
 * teamup events published while nobody listened are gone.  The observers'
 * pattern (ngx_ioa_observer.c) is subscribed here too, while the worker
 * has observers.
 *
 * The tick (every NGX_IOA_TICK) renews the presence of local agents and
 * this worker's observer mark, runs retention, and unsubscribes rooms that
 * stayed without links for NGX_IOA_ROOM_IDLE.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"


#define NGX_IOA_ROOM_IDLE        30000


static void ngx_ioa_room_free(ngx_ioa_room_t *room);
static void ngx_ioa_room_subscribe(ngx_ioa_room_t *room);
static void ngx_ioa_room_sub_reset(ngx_ioa_room_t *room);
static void ngx_ioa_room_events_subscribe(void);
static void ngx_ioa_room_tick(ngx_event_t *ev);


static ngx_rbtree_t        ngx_ioa_rooms;
static ngx_rbtree_node_t   ngx_ioa_rooms_sentinel;

/* rooms without links, oldest first, waiting out NGX_IOA_ROOM_IDLE */
static ngx_queue_t         ngx_ioa_idle_rooms;

/* the observers' pattern and the registry's event channel */
static ngx_ioa_sub_state_e ngx_ioa_feed_sub;
static ngx_ioa_redis_node_t *ngx_ioa_feed_node;
static ngx_ioa_sub_state_e ngx_ioa_events_sub;
static ngx_ioa_redis_node_t *ngx_ioa_events_node;

static ngx_event_t         ngx_ioa_tick_ev;

/* nginx's debug log names a timer by ev->data's descriptor, so a timer
 * that belongs to no connection points at one that has none */
static ngx_connection_t    ngx_ioa_tick_conn;


/* what the rooms hear from the Redis layer: every channel the discovery
 * index does not claim is a room's, the observers' pattern or the
 * registry's events (ngx_ioa_link.c takes the messages apart) */
static const ngx_ioa_redis_hooks_t  ngx_ioa_room_redis_hooks = {
    "rooms",
    NULL,                                  /* node_up */
    ngx_ioa_room_on_cmd_ready,
    ngx_ioa_room_on_map_changed,
    ngx_ioa_room_on_sub_ready,
    ngx_ioa_room_on_sub_lost,
    ngx_ioa_room_on_sub_refused,
    NULL,                                  /* owns: the rest */
    ngx_ioa_room_on_message,
    ngx_ioa_room_on_subscribed,
    ngx_ioa_room_on_unsubscribed
};


ngx_int_t
ngx_ioa_room_init_process(ngx_cycle_t *cycle)
{
    if (ngx_ioa_redis_add_hooks(&ngx_ioa_room_redis_hooks) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_rbtree_init(&ngx_ioa_rooms, &ngx_ioa_rooms_sentinel,
                    ngx_str_rbtree_insert_value);

    ngx_queue_init(&ngx_ioa_idle_rooms);

    if (ngx_ioa_link_init(cycle) != NGX_OK
        || ngx_ioa_client_init(cycle) != NGX_OK
        || ngx_ioa_observer_init(cycle) != NGX_OK
        || ngx_ioa_post_init(cycle) != NGX_OK
        || ngx_ioa_linger_init(cycle) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_ioa_tick_ev.handler = ngx_ioa_room_tick;
    ngx_ioa_tick_ev.log = cycle->log;
    ngx_ioa_tick_conn.fd = (ngx_socket_t) -1;
    ngx_ioa_tick_ev.data = &ngx_ioa_tick_conn;
    ngx_ioa_tick_ev.cancelable = 1;

    ngx_add_timer(&ngx_ioa_tick_ev, NGX_IOA_TICK);

    return NGX_OK;
}


void
ngx_ioa_room_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_ioa_tick_ev.timer_set) {
        ngx_del_timer(&ngx_ioa_tick_ev);
    }

    ngx_ioa_post_exit();
}


ngx_ioa_room_t *
ngx_ioa_room_get(ngx_str_t *comm_id, ngx_uint_t create)
{
    size_t                len;
    u_char               *p;
    uint32_t              hash;
    ngx_ioa_room_t       *room;
    ngx_ioa_main_conf_t  *mcf;

    hash = ngx_crc32_short(comm_id->data, comm_id->len);

    room = (ngx_ioa_room_t *) ngx_str_rbtree_lookup(&ngx_ioa_rooms, comm_id,
                                                    hash);
    if (room || !create) {
        return room;
    }

    mcf = ngx_ioa_main_conf();

    /* comm_id, "<prefix>{room:<id>}:ch", "<prefix>{room:<id>}:log" */
    len = comm_id->len
          + 2 * (mcf->redis_prefix.len + sizeof("{room:}:log") - 1
                 + comm_id->len);

    room = ngx_alloc(sizeof(ngx_ioa_room_t) + len, ngx_cycle->log);
    if (room == NULL) {
        return NULL;
    }

    ngx_memzero(room, sizeof(ngx_ioa_room_t));

    p = (u_char *) (room + 1);

    room->sn.str.data = p;
    room->sn.str.len = comm_id->len;
    p = ngx_cpymem(p, comm_id->data, comm_id->len);

    room->channel.data = p;
    p = ngx_sprintf(p, "%V{room:%V}:ch", &mcf->redis_prefix, comm_id);
    room->channel.len = p - room->channel.data;

    room->log_key.data = p;
    p = ngx_sprintf(p, "%V{room:%V}:log", &mcf->redis_prefix, comm_id);
    room->log_key.len = p - room->log_key.data;

    room->sn.node.key = hash;
    ngx_queue_init(&room->links);
    room->sub = NGX_IOA_SUB_NONE;
    room->slot = ngx_ioa_redis_key_slot(room->log_key.data,
                                        room->log_key.len);

    ngx_rbtree_insert(&ngx_ioa_rooms, &room->sn.node);

    return room;
}


/* a room's first link, or one more */

void
ngx_ioa_room_link_added(ngx_ioa_room_t *room)
{
    if (room->nlinks++ == 0 && room->idle_q.next) {
        ngx_queue_remove(&room->idle_q);
        room->idle_q.next = NULL;
    }

    if (room->sub == NGX_IOA_SUB_NONE) {
        ngx_ioa_room_subscribe(room);
    }
}


/* its last link gone, a room waits NGX_IOA_ROOM_IDLE before it unsubscribes
 * (see the top of this file) */

void
ngx_ioa_room_link_removed(ngx_ioa_room_t *room)
{
    if (--room->nlinks == 0) {
        room->idle_since = ngx_current_msec;
        ngx_queue_insert_tail(&ngx_ioa_idle_rooms, &room->idle_q);
    }
}


static void
ngx_ioa_room_free(ngx_ioa_room_t *room)
{
    if (room->idle_q.next) {
        ngx_queue_remove(&room->idle_q);
    }

    ngx_rbtree_delete(&ngx_ioa_rooms, &room->sn.node);
    ngx_free(room);
}


static void
ngx_ioa_room_subscribe(ngx_ioa_room_t *room)
{
    if (ngx_ioa_redis_subscribe(&room->channel, 0, &room->sub_node)
        == NGX_OK)
    {
        room->sub = NGX_IOA_SUB_PENDING;
    }

    /* otherwise it stays NONE and is subscribed when pub/sub is back */
}


/* the room's subscription is gone: its links read the Stream again once it
 * is back, from where each of them got to */

static void
ngx_ioa_room_sub_reset(ngx_ioa_room_t *room)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;

    room->sub = NGX_IOA_SUB_NONE;
    room->sub_node = NULL;

    for (q = ngx_queue_head(&room->links);
         q != ngx_queue_sentinel(&room->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, room_q);

        ngx_ioa_link_cancel(lk);
        ngx_ioa_link_release_held(lk);
        lk->state = NGX_IOA_LINK_WAIT_SUB;
    }
}


static void
ngx_ioa_room_events_subscribe(void)
{
    if (ngx_ioa_events_sub == NGX_IOA_SUB_NONE
        && ngx_ioa_redis_subscribe(&ngx_ioa_main_conf()->events_channel, 0,
                                   &ngx_ioa_events_node)
           == NGX_OK)
    {
        ngx_ioa_events_sub = NGX_IOA_SUB_PENDING;
    }
}


void
ngx_ioa_room_feed_subscribe(void)
{
    if (ngx_ioa_observers_local() && ngx_ioa_feed_sub == NGX_IOA_SUB_NONE
        && ngx_ioa_redis_subscribe(&ngx_ioa_main_conf()->feed_pattern, 1,
                                   &ngx_ioa_feed_node)
           == NGX_OK)
    {
        ngx_ioa_feed_sub = NGX_IOA_SUB_PENDING;
    }
}


/* the worker's last observer left */

void
ngx_ioa_room_feed_unsubscribe(void)
{
    if (ngx_ioa_feed_sub == NGX_IOA_SUB_ACTIVE
        && ngx_ioa_redis_unsubscribe(&ngx_ioa_main_conf()->feed_pattern, 1,
                                     ngx_ioa_feed_node)
           == NGX_OK)
    {
        ngx_ioa_feed_sub = NGX_IOA_SUB_LEAVING;
    }
}


void
ngx_ioa_room_on_subscribed(ngx_ioa_redis_node_t *node, ngx_str_t *channel,
    ngx_uint_t pattern)
{
    ngx_str_t             comm_id;
    ngx_queue_t          *q;
    ngx_ioa_link_t       *lk;
    ngx_ioa_room_t       *room;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (pattern) {
        if (ngx_ioa_feed_sub == NGX_IOA_SUB_PENDING
            && ngx_ioa_feed_node == node)
        {
            ngx_ioa_feed_sub = NGX_IOA_SUB_ACTIVE;
        }

        return;
    }

    if (channel->len == mcf->events_channel.len
        && ngx_strncmp(channel->data, mcf->events_channel.data,
                       channel->len) == 0)
    {
        if (ngx_ioa_events_sub == NGX_IOA_SUB_PENDING
            && ngx_ioa_events_node == node)
        {
            ngx_ioa_events_sub = NGX_IOA_SUB_ACTIVE;

            /* teamup events published while we were not subscribed are
             * lost; the agents' room sets in Redis are not */
            ngx_ioa_clients_reload_rooms();
        }

        return;
    }

    if (ngx_ioa_comm_id_from_channel(channel, &comm_id) != NGX_OK) {
        return;
    }

    room = ngx_ioa_room_get(&comm_id, 0);

    if (room == NULL || room->sub != NGX_IOA_SUB_PENDING
        || room->sub_node != node)
    {
        return;
    }

    room->sub = NGX_IOA_SUB_ACTIVE;

    for (q = ngx_queue_head(&room->links);
         q != ngx_queue_sentinel(&room->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, room_q);

        if (lk->state == NGX_IOA_LINK_WAIT_SUB) {
            ngx_ioa_link_catchup(lk);
        }
    }
}


void
ngx_ioa_room_on_unsubscribed(ngx_ioa_redis_node_t *node, ngx_str_t *channel,
    ngx_uint_t pattern)
{
    ngx_str_t             comm_id;
    ngx_ioa_room_t       *room;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    if (pattern) {
        if (ngx_ioa_feed_sub == NGX_IOA_SUB_LEAVING
            && ngx_ioa_feed_node == node)
        {
            ngx_ioa_feed_sub = NGX_IOA_SUB_NONE;
            ngx_ioa_room_feed_subscribe();
        }

        return;
    }

    if (channel->len == mcf->events_channel.len
        && ngx_strncmp(channel->data, mcf->events_channel.data,
                       channel->len) == 0)
    {
        /* never asked for: the slot moved away from the node; the map
         * refresh that follows subscribes on the new owner */

        if (ngx_ioa_events_sub != NGX_IOA_SUB_NONE
            && ngx_ioa_events_node == node)
        {
            ngx_ioa_events_sub = NGX_IOA_SUB_NONE;
            ngx_ioa_events_node = NULL;
        }

        return;
    }

    if (ngx_ioa_comm_id_from_channel(channel, &comm_id) != NGX_OK) {
        return;
    }

    room = ngx_ioa_room_get(&comm_id, 0);

    if (room == NULL || room->sub == NGX_IOA_SUB_NONE
        || room->sub_node != node)
    {
        return;
    }

    if (room->sub != NGX_IOA_SUB_LEAVING) {
        /* not asked for: a Cluster node dropped the channel because the
         * room's slot is no longer its own (migrated, or the node was
         * demoted by a failover); the map refresh asked for here
         * subscribes on the new owner, and the links catch up from the
         * Stream.  It must be asked for: a refresh that ran just before
         * (after a MOVED) may have seen the old owner still, and the next
         * periodic one is seconds away */

        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "ioa: room \"%V\" lost its subscription, "
                      "subscribing again", &room->sn.str);

        ngx_ioa_room_sub_reset(room);
        ngx_ioa_redis_refresh(0);
        return;
    }

    room->sub = NGX_IOA_SUB_NONE;
    room->sub_node = NULL;

    if (room->nlinks == 0) {
        ngx_ioa_room_free(room);
        return;
    }

    ngx_ioa_room_subscribe(room);
}


/* connection state changes reported by ngx_ioa_redis.c */

void
ngx_ioa_room_on_sub_ready(ngx_ioa_redis_node_t *node)
{
    ngx_rbtree_node_t  *rn, *root, *sentinel;
    ngx_ioa_room_t     *room;

    ngx_ioa_room_events_subscribe();
    ngx_ioa_room_feed_subscribe();

    root = ngx_ioa_rooms.root;
    sentinel = ngx_ioa_rooms.sentinel;

    if (root == sentinel) {
        return;
    }

    /* on a Cluster only the rooms of this node's slots can go through;
     * the others wait for their own node */

    for (rn = ngx_rbtree_min(root, sentinel);
         rn;
         rn = ngx_rbtree_next(&ngx_ioa_rooms, rn))
    {
        room = (ngx_ioa_room_t *) rn;

        if (room->sub == NGX_IOA_SUB_NONE && room->nlinks) {
            ngx_ioa_room_subscribe(room);
        }
    }
}


void
ngx_ioa_room_on_sub_lost(ngx_ioa_redis_node_t *node)
{
    ngx_ioa_room_t     *room;
    ngx_rbtree_node_t  *rn, *next, *root, *sentinel;

    if (ngx_ioa_feed_node == node) {
        ngx_ioa_feed_sub = NGX_IOA_SUB_NONE;
        ngx_ioa_feed_node = NULL;
    }

    if (ngx_ioa_events_node == node) {
        ngx_ioa_events_sub = NGX_IOA_SUB_NONE;
        ngx_ioa_events_node = NULL;
    }

    root = ngx_ioa_rooms.root;
    sentinel = ngx_ioa_rooms.sentinel;

    if (root == sentinel) {
        return;
    }

    for (rn = ngx_rbtree_min(root, sentinel); rn; rn = next) {
        next = ngx_rbtree_next(&ngx_ioa_rooms, rn);
        room = (ngx_ioa_room_t *) rn;

        if (room->sub == NGX_IOA_SUB_NONE || room->sub_node != node) {
            continue;
        }

        if (room->nlinks == 0) {
            ngx_ioa_room_free(room);
            continue;
        }

        ngx_ioa_room_sub_reset(room);
    }
}


/*
 * A (S)SUBSCRIBE was refused by a Cluster node.  After a MOVED (slot >= 0)
 * the map already names the new owner and the room subscribes there at
 * once; after anything else (CLUSTERDOWN) the room waits for the next map.
 */

void
ngx_ioa_room_on_sub_refused(ngx_ioa_redis_node_t *node, ngx_int_t slot)
{
    ngx_ioa_room_t     *room;
    ngx_rbtree_node_t  *rn, *next, *root, *sentinel;

    if (ngx_ioa_events_sub == NGX_IOA_SUB_PENDING
        && ngx_ioa_events_node == node)
    {
        ngx_ioa_events_sub = NGX_IOA_SUB_NONE;
        ngx_ioa_events_node = NULL;

        if (slot >= 0) {
            ngx_ioa_room_events_subscribe();
        }
    }

    if (ngx_ioa_feed_sub == NGX_IOA_SUB_PENDING && ngx_ioa_feed_node == node)
    {
        ngx_ioa_feed_sub = NGX_IOA_SUB_NONE;
        ngx_ioa_feed_node = NULL;
    }

    root = ngx_ioa_rooms.root;
    sentinel = ngx_ioa_rooms.sentinel;

    if (root == sentinel) {
        return;
    }

    for (rn = ngx_rbtree_min(root, sentinel); rn; rn = next) {
        next = ngx_rbtree_next(&ngx_ioa_rooms, rn);
        room = (ngx_ioa_room_t *) rn;

        if (room->sub_node != node
            || (room->sub != NGX_IOA_SUB_PENDING
                && room->sub != NGX_IOA_SUB_LEAVING)
            || (slot >= 0 && room->slot != (ngx_uint_t) slot))
        {
            continue;
        }

        if (room->sub == NGX_IOA_SUB_LEAVING || room->nlinks == 0) {
            /* an unsubscribe that failed: the channel is not ours there */
            room->sub = NGX_IOA_SUB_NONE;
            room->sub_node = NULL;

            if (room->nlinks == 0) {
                ngx_ioa_room_free(room);
                continue;
            }
        }

        ngx_ioa_room_sub_reset(room);

        if (slot >= 0) {
            ngx_ioa_room_subscribe(room);
        }
    }
}


/* a new slot map: rooms follow their slots */

void
ngx_ioa_room_on_map_changed(void)
{
    ngx_ioa_room_t        *room;
    ngx_rbtree_node_t     *rn, *next, *root, *sentinel;
    ngx_ioa_redis_node_t  *owner;
    ngx_ioa_main_conf_t   *mcf;

    mcf = ngx_ioa_main_conf();

    if (ngx_ioa_events_sub == NGX_IOA_SUB_ACTIVE
        || ngx_ioa_events_sub == NGX_IOA_SUB_PENDING)
    {
        owner = ngx_ioa_redis_owner(
                    ngx_ioa_redis_key_slot(mcf->events_channel.data,
                                           mcf->events_channel.len));

        if (owner && owner != ngx_ioa_events_node) {
            (void) ngx_ioa_redis_unsubscribe(&mcf->events_channel, 0,
                                             ngx_ioa_events_node);
            ngx_ioa_events_sub = NGX_IOA_SUB_NONE;
            ngx_ioa_events_node = NULL;
        }
    }

    ngx_ioa_room_events_subscribe();
    ngx_ioa_room_feed_subscribe();

    root = ngx_ioa_rooms.root;
    sentinel = ngx_ioa_rooms.sentinel;

    if (root == sentinel) {
        return;
    }

    for (rn = ngx_rbtree_min(root, sentinel); rn; rn = next) {
        next = ngx_rbtree_next(&ngx_ioa_rooms, rn);
        room = (ngx_ioa_room_t *) rn;

        if (room->nlinks == 0) {
            continue;
        }

        if (room->sub == NGX_IOA_SUB_ACTIVE
            || room->sub == NGX_IOA_SUB_PENDING)
        {
            owner = ngx_ioa_redis_owner(room->slot);

            if (owner == NULL || owner == room->sub_node) {
                continue;
            }

            /* the old owner may not have said so yet: leave it, and
             * start over on the new one; the id filter drops anything
             * both deliver */

            (void) ngx_ioa_redis_unsubscribe(&room->channel, 0,
                                             room->sub_node);
            ngx_ioa_room_sub_reset(room);
        }

        if (room->sub == NGX_IOA_SUB_NONE) {
            ngx_ioa_room_subscribe(room);
        }
    }
}


void
ngx_ioa_room_on_cmd_ready(void)
{
    /* agents that connected while Redis was away are not marked online,
     * nor their connections counted for the fleet */
    ngx_ioa_clients_presence();
    ngx_ioa_limit_conn_fleet_tick();

    ngx_ioa_clients_retry();
    ngx_ioa_links_retry();
}


/* periodic: presence heartbeat and unsubscribing from idle rooms */

static void
ngx_ioa_room_tick(ngx_event_t *ev)
{
    ngx_queue_t     *q;
    ngx_ioa_room_t  *room;

    ngx_ioa_clients_presence();
    ngx_ioa_limit_conn_fleet_tick();
    ngx_ioa_observers_tick();
    ngx_ioa_retention_tick();

    while (!ngx_queue_empty(&ngx_ioa_idle_rooms)) {
        q = ngx_queue_head(&ngx_ioa_idle_rooms);
        room = ngx_queue_data(q, ngx_ioa_room_t, idle_q);

        if (ngx_current_msec - room->idle_since < NGX_IOA_ROOM_IDLE) {
            break;
        }

        ngx_queue_remove(q);
        room->idle_q.next = NULL;

        switch (room->sub) {

        case NGX_IOA_SUB_ACTIVE:
            if (ngx_ioa_redis_unsubscribe(&room->channel, 0, room->sub_node)
                == NGX_OK)
            {
                room->sub = NGX_IOA_SUB_LEAVING;
                break;
            }

            ngx_ioa_room_free(room);
            break;

        case NGX_IOA_SUB_NONE:
            ngx_ioa_room_free(room);
            break;

        default:
            /* a (un)subscribe is in flight: look again later */
            room->idle_since = ngx_current_msec;
            ngx_queue_insert_tail(&ngx_ioa_idle_rooms, &room->idle_q);
            goto next;
        }
    }

next:

    if (!ngx_exiting) {
        ngx_add_timer(ev, NGX_IOA_TICK);
    }
}


ngx_int_t
ngx_ioa_comm_id_from_channel(ngx_str_t *channel, ngx_str_t *comm_id)
{
    size_t                plen;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();
    plen = mcf->redis_prefix.len + sizeof("{room:") - 1;

    /* "<prefix>{room:<comm_id>}:ch" */

    if (channel->len <= plen + sizeof("}:ch") - 1
        || ngx_strncmp(channel->data + channel->len - 4, "}:ch", 4) != 0)
    {
        return NGX_DECLINED;
    }

    comm_id->data = channel->data + plen;
    comm_id->len = channel->len - plen - 4;

    return NGX_OK;
}
