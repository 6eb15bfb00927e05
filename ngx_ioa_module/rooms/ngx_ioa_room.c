
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
 * A room's subscription is its channel, an ngx_ioa_sub_t
 * (store/ngx_ioa_sub.c keeps its states and follows Redis: pub/sub
 * connections that go and come, a Cluster's slots that move, refusals).
 * Links wait in WAIT_SUB until it is confirmed (ready); whenever it is
 * lost, every link of the room goes back to WAIT_SUB and catches up from
 * its last id once it is confirmed again.  On a Redis Cluster a room's
 * channel is a shard channel (SSUBSCRIBE on the master that owns the
 * room's slot, SPUBLISH in post.lua), so an envelope crosses no other
 * node, and a room whose slot moves is lost on the old owner and
 * subscribed on the new one: the same path as a lost pub/sub connection
 * on a standalone Redis.
 *
 * Subscriptions are reference counted by links.  A room without links is
 * unsubscribed after a grace period rather than at once, so an agent
 * that reconnects finds it subscribed; the room is freed when its
 * subscription is over (gone).
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
static void ngx_ioa_room_message(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *payload);
static void ngx_ioa_room_sub_ready(ngx_ioa_sub_t *sub);
static void ngx_ioa_room_sub_lost(ngx_ioa_sub_t *sub);
static void ngx_ioa_room_sub_gone(ngx_ioa_sub_t *sub);
static void ngx_ioa_room_cmd_ready(void);
static void ngx_ioa_room_tick(ngx_event_t *ev);


static ngx_rbtree_t        ngx_ioa_rooms;
static ngx_rbtree_node_t   ngx_ioa_rooms_sentinel;

/* rooms without links, oldest first, waiting out NGX_IOA_ROOM_IDLE */
static ngx_queue_t         ngx_ioa_idle_rooms;

static ngx_event_t         ngx_ioa_tick_ev;

/* nginx's debug log names a timer by ev->data's descriptor, so a timer
 * that belongs to no connection points at one that has none */
static ngx_connection_t    ngx_ioa_tick_conn;


/* what the rooms hear from the Redis layer: their channels, and commands
 * that can go again */

static const ngx_ioa_sub_handler_t  ngx_ioa_room_sub_handler = {
    ngx_ioa_room_message,
    ngx_ioa_room_sub_ready,
    ngx_ioa_room_sub_lost,
    ngx_ioa_room_sub_gone
};


static const ngx_ioa_redis_hooks_t  ngx_ioa_room_redis_hooks = {
    "rooms",
    NULL,                                  /* node_up */
    ngx_ioa_room_cmd_ready
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
    ngx_str_t             channel;
    ngx_ioa_room_t       *room;

    hash = ngx_crc32_short(comm_id->data, comm_id->len);

    room = (ngx_ioa_room_t *) ngx_str_rbtree_lookup(&ngx_ioa_rooms, comm_id,
                                                    hash);
    if (room || !create) {
        return room;
    }

    /* comm_id, the room's channel and its log's key */
    len = comm_id->len + ngx_ioa_key_room_len(comm_id, NGX_IOA_ROOM_CH)
          + ngx_ioa_key_room_len(comm_id, NGX_IOA_ROOM_LOG);

    room = ngx_alloc(sizeof(ngx_ioa_room_t) + len, ngx_cycle->log);
    if (room == NULL) {
        return NULL;
    }

    ngx_memzero(room, sizeof(ngx_ioa_room_t));

    p = (u_char *) (room + 1);

    room->sn.str.data = p;
    room->sn.str.len = comm_id->len;
    p = ngx_cpymem(p, comm_id->data, comm_id->len);

    channel.data = p;
    p = ngx_ioa_key_room_write(p, comm_id, NGX_IOA_ROOM_CH);
    channel.len = p - channel.data;

    room->log_key.data = p;
    p = ngx_ioa_key_room_write(p, comm_id, NGX_IOA_ROOM_LOG);
    room->log_key.len = p - room->log_key.data;

    room->sn.node.key = hash;
    ngx_queue_init(&room->links);

    ngx_ioa_sub_init(&room->sub, NGX_IOA_SUB_CHANNEL, &channel,
                     ioa_key_slot(channel.data, channel.len),
                     &ngx_ioa_room_sub_handler);

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

    ngx_ioa_sub_start(&room->sub);
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
ngx_ioa_room_message(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *payload)
{
    ngx_ioa_room_deliver(ngx_ioa_sub_owner(sub, ngx_ioa_room_t, sub), payload);
}


/* confirmed: the links read the Stream up to here, then go live */

static void
ngx_ioa_room_sub_ready(ngx_ioa_sub_t *sub)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;
    ngx_ioa_room_t  *room;

    room = ngx_ioa_sub_owner(sub, ngx_ioa_room_t, sub);

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


/* the room's subscription is gone: its links read the Stream again once it
 * is back, from where each of them got to */

static void
ngx_ioa_room_sub_lost(ngx_ioa_sub_t *sub)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;
    ngx_ioa_room_t  *room;

    room = ngx_ioa_sub_owner(sub, ngx_ioa_room_t, sub);

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


/* unsubscribed after its grace without links (a link since then would
 * have wanted it again) */

static void
ngx_ioa_room_sub_gone(ngx_ioa_sub_t *sub)
{
    ngx_ioa_room_free(ngx_ioa_sub_owner(sub, ngx_ioa_room_t, sub));
}


static void
ngx_ioa_room_cmd_ready(void)
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

        if (ngx_ioa_sub_stop(&room->sub) == NGX_OK) {
            ngx_ioa_room_free(room);
        }

        /* else freed once the unsubscribe is answered (gone) */
    }

    if (!ngx_exiting) {
        ngx_add_timer(ev, NGX_IOA_TICK);
    }
}
