
/*
 * Copyright (C) ioa authors
 *
 * Subscriptions: one object for every kind of pub/sub the hub holds.
 *
 * A subscription (ngx_ioa_sub_t) is a channel or a pattern, the kind of
 * command that follows it, the node it was sent to, its state and the
 * handler table of its owner.  The owners are a room (its channel,
 * ngx_ioa_room.c), the observers' feed (a pattern) and the registry's
 * events (a channel; both ngx_ioa_observer.c), and the discovery index
 * (a shard channel, ngx_ioa_index_sync.c).  The Redis layer finds the
 * subscription a pub/sub reply names in one tree, keyed by the channel
 * or the pattern, and calls its handler: it knows no owner by name.
 *
 * The kinds differ in the command and in where it goes:
 *
 *   CHANNEL   SUBSCRIBE; on a Cluster SSUBSCRIBE on the master of its
 *             slot (post.lua publishes with SPUBLISH there), following
 *             the slot when it moves;
 *   SHARD     SSUBSCRIBE on both setups, following the slot likewise;
 *   PATTERN   PSUBSCRIBE on any node: the plain PUBLISH copies it hears
 *             reach every node of a Cluster.
 *
 * An owner says what it wants, ngx_ioa_sub_start() or ngx_ioa_sub_stop(),
 * and this file gets there whatever Redis does meanwhile:
 *
 *   NONE ---send---> PENDING ---confirmed---> ACTIVE
 *     ^                 |                        |
 *     |   lost, refused |        stop: unsubscribe
 *     +-----------------+                        v
 *     +<----------------------confirmed------ LEAVING
 *
 * A subscription in NONE that is wanted is sent as soon as it can be:
 * when it is started, when a pub/sub connection becomes ready, after a
 * new slot map, after a refusal that named the new owner.  A start
 * while LEAVING waits for the unsubscribe's reply before it subscribes
 * again: hiredis 0.14 forgets a channel when an UNSUBSCRIBE reply
 * arrives, so a SUBSCRIBE sent while one is in flight would be lost.
 * Likewise a stop while PENDING unsubscribes once the subscription is
 * confirmed.
 *
 * What the owner hears (ngx_ioa_sub_handler_t):
 *
 *   message   a message on the channel (for a pattern: on the channel
 *             that matched it);
 *   ready     confirmed: from now on nothing published is missed, so a
 *             room's links read the Stream up to here and go live;
 *   lost      it was wanted and is gone without being asked: its pub/sub
 *             connection closed, a Cluster node dropped the channel
 *             (the slot moved, or a failover demoted the node), the
 *             slot map names another owner, or the (S)SUBSCRIBE was
 *             refused.  Whatever was published meanwhile is gone; this
 *             file subscribes again, and ready comes once more;
 *   gone      it is no longer wanted and nothing about it is in flight:
 *             the owner may free it.
 *
 * A subscription is in the tree while it is wanted or something about it
 * is in flight, so the walks below (a connection ready or lost, a
 * refusal, a new map) see every one that must act; they first collect
 * what they touch, then call the handlers, since a handler may free its
 * subscription or start another.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"
#include "ngx_ioa_redis.h"


/* what a walk over the tree looks for */
#define NGX_IOA_SUB_IN_FLIGHT  1          /* PENDING, LEAVING */
#define NGX_IOA_SUB_HELD       2          /* ACTIVE */

typedef struct {
    ngx_ioa_redis_node_t  *node;
    ngx_int_t              slot;          /* -1: any */
    ngx_uint_t             states;
} ngx_ioa_sub_match_t;

typedef ngx_uint_t (*ngx_ioa_sub_match_pt)(ngx_ioa_sub_t *sub, void *data);


static void ngx_ioa_sub_send(ngx_ioa_sub_t *sub);
static void ngx_ioa_sub_send_waiting(void);
static void ngx_ioa_sub_collect(ngx_queue_t *out, ngx_ioa_sub_match_pt match,
    void *data);
static ngx_uint_t ngx_ioa_sub_is_waiting(ngx_ioa_sub_t *sub, void *data);
static ngx_uint_t ngx_ioa_sub_on_node(ngx_ioa_sub_t *sub, void *data);
static ngx_uint_t ngx_ioa_sub_has_moved(ngx_ioa_sub_t *sub, void *data);
static ngx_ioa_sub_t *ngx_ioa_sub_find(ngx_str_t *name, ngx_uint_t pattern);
static void ngx_ioa_sub_list(ngx_ioa_sub_t *sub);
static void ngx_ioa_sub_unlist(ngx_ioa_sub_t *sub);
static void ngx_ioa_sub_fell(ngx_ioa_sub_t *sub);
static void ngx_ioa_sub_fell_all(ngx_queue_t *fell);
static ngx_uint_t ngx_ioa_sub_follows_slot(ngx_ioa_sub_t *sub);


static ngx_rbtree_t       ngx_ioa_subs;
static ngx_rbtree_node_t  ngx_ioa_subs_sentinel;


void
ngx_ioa_sub_init_process(void)
{
    ngx_rbtree_init(&ngx_ioa_subs, &ngx_ioa_subs_sentinel,
                    ngx_str_rbtree_insert_value);
}


/* name stays the owner's, and lives as long as the subscription */

void
ngx_ioa_sub_init(ngx_ioa_sub_t *sub, ngx_ioa_sub_kind_e kind,
    ngx_str_t *name, ngx_uint_t slot, const ngx_ioa_sub_handler_t *handler)
{
    ngx_memzero(sub, sizeof(ngx_ioa_sub_t));

    sub->sn.str = *name;
    sub->sn.node.key = ngx_crc32_short(name->data, name->len);
    sub->kind = kind;
    sub->state = NGX_IOA_SUB_NONE;
    sub->slot = slot;
    sub->handler = handler;
}


void
ngx_ioa_sub_start(ngx_ioa_sub_t *sub)
{
    sub->want = 1;
    ngx_ioa_sub_list(sub);

    if (sub->state == NGX_IOA_SUB_NONE) {
        ngx_ioa_sub_send(sub);
    }

    /* PENDING and ACTIVE are on their way; LEAVING subscribes again once
     * its unsubscribe is answered (see the top of this file) */
}


/* NGX_OK: over now, the owner may free it; NGX_AGAIN: gone() follows */

ngx_int_t
ngx_ioa_sub_stop(ngx_ioa_sub_t *sub)
{
    const char  *cmd;

    sub->want = 0;

    switch (sub->state) {

    case NGX_IOA_SUB_NONE:
        ngx_ioa_sub_unlist(sub);
        return NGX_OK;

    case NGX_IOA_SUB_ACTIVE:
        if (sub->kind == NGX_IOA_SUB_PATTERN) {
            cmd = "PUNSUBSCRIBE";

        } else if (sub->kind == NGX_IOA_SUB_SHARD
                   || ngx_ioa_redis_mode == NGX_IOA_REDIS_CLUSTER)
        {
            cmd = "SUNSUBSCRIBE";

        } else {
            cmd = "UNSUBSCRIBE";
        }

        if (ngx_ioa_redis_sub_send(sub->node, cmd, &sub->sn.str) != NGX_OK) {
            /* the connection is going: its loss ends every subscription
             * on it, and nobody wants this one again */
            sub->state = NGX_IOA_SUB_NONE;
            sub->node = NULL;
            ngx_ioa_sub_unlist(sub);
            return NGX_OK;
        }

        sub->state = NGX_IOA_SUB_LEAVING;
        return NGX_AGAIN;

    default:
        /* PENDING unsubscribes once confirmed; LEAVING is leaving */
        return NGX_AGAIN;
    }
}


static void
ngx_ioa_sub_send(ngx_ioa_sub_t *sub)
{
    const char            *cmd;
    ngx_uint_t             cluster;
    ngx_ioa_redis_node_t  *node;

    cluster = (ngx_ioa_redis_mode == NGX_IOA_REDIS_CLUSTER);

    node = ngx_ioa_redis_route(cluster ? (ngx_int_t) sub->slot : -1);

    if (sub->kind == NGX_IOA_SUB_PATTERN) {
        cmd = "PSUBSCRIBE";

    } else if (sub->kind == NGX_IOA_SUB_SHARD || cluster) {
        cmd = "SSUBSCRIBE";

    } else {
        cmd = "SUBSCRIBE";
    }

    if (node == NULL
        || ngx_ioa_redis_sub_send(node, cmd, &sub->sn.str) != NGX_OK)
    {
        /* it stays NONE and goes when pub/sub is back, or the map names
         * the slot's owner */
        return;
    }

    sub->node = node;
    sub->state = NGX_IOA_SUB_PENDING;
}


/* from the Redis layer: a message, a confirmation, an end */

void
ngx_ioa_sub_message(ngx_str_t *name, ngx_uint_t pattern, ngx_str_t *channel,
    ngx_str_t *payload)
{
    ngx_ioa_sub_t  *sub;

    sub = ngx_ioa_sub_find(name, pattern);

    /* a message may still arrive between an unsubscribe and its reply */
    if (sub && sub->state == NGX_IOA_SUB_ACTIVE) {
        sub->handler->message(sub, channel, payload);
    }
}


void
ngx_ioa_sub_confirmed(ngx_ioa_redis_node_t *node, ngx_str_t *name,
    ngx_uint_t pattern)
{
    ngx_ioa_sub_t  *sub;

    sub = ngx_ioa_sub_find(name, pattern);

    if (sub == NULL || sub->state != NGX_IOA_SUB_PENDING
        || sub->node != node)
    {
        /* an answer to a subscription this one has moved on from */
        return;
    }

    sub->state = NGX_IOA_SUB_ACTIVE;

    if (!sub->want) {
        /* stopped while it was on its way */
        (void) ngx_ioa_sub_stop(sub);
        return;
    }

    if (sub->handler->ready) {
        sub->handler->ready(sub);
    }
}


void
ngx_ioa_sub_ended(ngx_ioa_redis_node_t *node, ngx_str_t *name,
    ngx_uint_t pattern)
{
    ngx_ioa_sub_t  *sub;

    sub = ngx_ioa_sub_find(name, pattern);

    if (sub == NULL || sub->state == NGX_IOA_SUB_NONE || sub->node != node) {
        return;
    }

    if (sub->state == NGX_IOA_SUB_LEAVING) {
        /* the end that was asked for */
        sub->state = NGX_IOA_SUB_NONE;
        sub->node = NULL;

        if (sub->want) {
            ngx_ioa_sub_send(sub);
            return;
        }

        ngx_ioa_sub_unlist(sub);

        if (sub->handler->gone) {
            sub->handler->gone(sub);
        }

        return;
    }

    /* never asked for: a Cluster node dropped the channel because its slot
     * is no longer the node's own (migrated, or the node was demoted by a
     * failover).  The map is read again here: a refresh that ran just
     * before (after a MOVED) may have seen the old owner still, and the
     * next periodic one is seconds away; the new map subscribes on the new
     * owner */

    ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                  "ioa: pub/sub \"%V\" ended on %V, subscribing again",
                  &sub->sn.str, &node->addr);

    ngx_ioa_sub_fell(sub);
    ngx_ioa_redis_refresh(0);
}


/* a node's pub/sub connection is ready: what waits for it goes now (on a
 * Cluster, what its slots own; the rest waits for its own node) */

void
ngx_ioa_sub_node_ready(ngx_ioa_redis_node_t *node)
{
    ngx_ioa_sub_send_waiting();
}


/* a node's pub/sub connection is lost, and every subscription on it */

void
ngx_ioa_sub_node_lost(ngx_ioa_redis_node_t *node)
{
    ngx_queue_t          fell;
    ngx_ioa_sub_match_t  m;

    m.node = node;
    m.slot = -1;
    m.states = NGX_IOA_SUB_IN_FLIGHT | NGX_IOA_SUB_HELD;

    ngx_ioa_sub_collect(&fell, ngx_ioa_sub_on_node, &m);
    ngx_ioa_sub_fell_all(&fell);
}


/*
 * A (S)SUBSCRIBE or an unsubscribe was refused by a Cluster node; Redis'
 * error names no channel, so every one in flight on the node (of the
 * MOVED slot, when there was one) starts over.  After a MOVED the map
 * already names the new owner and they subscribe there at once; after
 * anything else (CLUSTERDOWN) they wait for the next map, which is being
 * read.
 */

void
ngx_ioa_sub_refused(ngx_ioa_redis_node_t *node, ngx_int_t slot)
{
    ngx_queue_t          fell, *q;
    ngx_ioa_sub_t       *sub;
    ngx_ioa_sub_match_t  m;

    m.node = node;
    m.slot = slot;
    m.states = NGX_IOA_SUB_IN_FLIGHT;

    ngx_ioa_sub_collect(&fell, ngx_ioa_sub_on_node, &m);

    if (slot < 0) {
        for (q = ngx_queue_head(&fell);
             q != ngx_queue_sentinel(&fell);
             q = ngx_queue_next(q))
        {
            sub = ngx_queue_data(q, ngx_ioa_sub_t, work_q);
            sub->retry_later = 1;
        }
    }

    ngx_ioa_sub_fell_all(&fell);
}


/* a new slot map: subscriptions follow their slots to the new owners, and
 * those that waited for an owner go */

void
ngx_ioa_sub_map_changed(void)
{
    ngx_queue_t     moved, *q;
    ngx_ioa_sub_t  *sub;

    ngx_ioa_sub_collect(&moved, ngx_ioa_sub_has_moved, NULL);

    /* the old owner may not have said so yet: leave it, and start over on
     * the new one; a room's id filter drops anything both deliver */

    for (q = ngx_queue_head(&moved);
         q != ngx_queue_sentinel(&moved);
         q = ngx_queue_next(q))
    {
        sub = ngx_queue_data(q, ngx_ioa_sub_t, work_q);

        (void) ngx_ioa_redis_sub_send(sub->node,
                                      sub->kind == NGX_IOA_SUB_SHARD
                                      || ngx_ioa_redis_mode
                                         == NGX_IOA_REDIS_CLUSTER
                                      ? "SUNSUBSCRIBE" : "UNSUBSCRIBE",
                                      &sub->sn.str);
    }

    ngx_ioa_sub_fell_all(&moved);
    ngx_ioa_sub_send_waiting();
}


/* every subscription that is wanted and waits for a connection or an
 * owner is sent, where it can be */

static void
ngx_ioa_sub_send_waiting(void)
{
    ngx_queue_t     todo, *q;
    ngx_ioa_sub_t  *sub;

    ngx_ioa_sub_collect(&todo, ngx_ioa_sub_is_waiting, NULL);

    while (!ngx_queue_empty(&todo)) {
        q = ngx_queue_head(&todo);
        ngx_queue_remove(q);
        sub = ngx_queue_data(q, ngx_ioa_sub_t, work_q);

        if (sub->want && sub->state == NGX_IOA_SUB_NONE) {
            ngx_ioa_sub_send(sub);
        }
    }
}


/* the walk: the subscriptions that match, into a queue, before anything
 * is done to them (see the top of this file) */

static void
ngx_ioa_sub_collect(ngx_queue_t *out, ngx_ioa_sub_match_pt match,
    void *data)
{
    ngx_ioa_sub_t      *sub;
    ngx_rbtree_node_t  *rn;

    ngx_queue_init(out);

    if (ngx_ioa_subs.root == ngx_ioa_subs.sentinel) {
        return;
    }

    for (rn = ngx_rbtree_min(ngx_ioa_subs.root, ngx_ioa_subs.sentinel);
         rn;
         rn = ngx_rbtree_next(&ngx_ioa_subs, rn))
    {
        sub = (ngx_ioa_sub_t *) rn;

        if (match(sub, data)) {
            ngx_queue_insert_tail(out, &sub->work_q);
        }
    }
}


static ngx_uint_t
ngx_ioa_sub_is_waiting(ngx_ioa_sub_t *sub, void *data)
{
    return sub->want && sub->state == NGX_IOA_SUB_NONE;
}


/* sent to the node (PENDING, LEAVING: in flight; ACTIVE: held), of the
 * slot when one is named */

static ngx_uint_t
ngx_ioa_sub_on_node(ngx_ioa_sub_t *sub, void *data)
{
    ngx_ioa_sub_match_t  *m = data;

    if (sub->node != m->node
        || (m->slot >= 0 && sub->slot != (ngx_uint_t) m->slot))
    {
        return 0;
    }

    switch (sub->state) {

    case NGX_IOA_SUB_PENDING:
    case NGX_IOA_SUB_LEAVING:
        return (m->states & NGX_IOA_SUB_IN_FLIGHT) != 0;

    case NGX_IOA_SUB_ACTIVE:
        return (m->states & NGX_IOA_SUB_HELD) != 0;

    default:
        return 0;
    }
}


/* subscribed (or on its way) on a node the new map no longer gives its
 * slot */

static ngx_uint_t
ngx_ioa_sub_has_moved(ngx_ioa_sub_t *sub, void *data)
{
    ngx_ioa_redis_node_t  *owner;

    if ((sub->state != NGX_IOA_SUB_ACTIVE
         && sub->state != NGX_IOA_SUB_PENDING)
        || !ngx_ioa_sub_follows_slot(sub))
    {
        return 0;
    }

    owner = ngx_ioa_redis_owner(sub->slot);

    return owner != NULL && owner != sub->node;
}


/* each subscription collected by a walk falls back to NONE in turn */

static void
ngx_ioa_sub_fell_all(ngx_queue_t *fell)
{
    ngx_queue_t    *q;
    ngx_ioa_sub_t  *sub;

    while (!ngx_queue_empty(fell)) {
        q = ngx_queue_head(fell);
        ngx_queue_remove(q);
        sub = ngx_queue_data(q, ngx_ioa_sub_t, work_q);

        ngx_ioa_sub_fell(sub);
    }
}


/*
 * A subscription is gone without being asked.  One that is wanted tells
 * its owner, and goes again at once where the map names an owner with a
 * ready connection (a slot that moved, a MOVED refusal), else when one is
 * ready; one that is not wanted is over.
 */

static void
ngx_ioa_sub_fell(ngx_ioa_sub_t *sub)
{
    ngx_uint_t  later;

    later = sub->retry_later;

    sub->state = NGX_IOA_SUB_NONE;
    sub->node = NULL;
    sub->retry_later = 0;

    if (!sub->want) {
        ngx_ioa_sub_unlist(sub);

        if (sub->handler->gone) {
            sub->handler->gone(sub);
        }

        return;
    }

    if (sub->handler->lost) {
        sub->handler->lost(sub);
    }

    /* the handler may have stopped it */
    if (sub->want && sub->state == NGX_IOA_SUB_NONE && !later) {
        ngx_ioa_sub_send(sub);
    }
}


static ngx_uint_t
ngx_ioa_sub_follows_slot(ngx_ioa_sub_t *sub)
{
    return sub->kind == NGX_IOA_SUB_SHARD
           || (sub->kind == NGX_IOA_SUB_CHANNEL
               && ngx_ioa_redis_mode == NGX_IOA_REDIS_CLUSTER);
}


static ngx_ioa_sub_t *
ngx_ioa_sub_find(ngx_str_t *name, ngx_uint_t pattern)
{
    ngx_ioa_sub_t  *sub;

    sub = (ngx_ioa_sub_t *) ngx_str_rbtree_lookup(&ngx_ioa_subs, name,
                                    ngx_crc32_short(name->data, name->len));

    if (sub == NULL || (sub->kind == NGX_IOA_SUB_PATTERN) != (pattern != 0)) {
        return NULL;
    }

    return sub;
}


static void
ngx_ioa_sub_list(ngx_ioa_sub_t *sub)
{
    if (!sub->listed) {
        ngx_rbtree_insert(&ngx_ioa_subs, &sub->sn.node);
        sub->listed = 1;
    }
}


static void
ngx_ioa_sub_unlist(ngx_ioa_sub_t *sub)
{
    if (sub->listed) {
        ngx_rbtree_delete(&ngx_ioa_subs, &sub->sn.node);
        sub->listed = 0;
    }
}
