
/*
 * Copyright (C) ioa authors
 *
 * Rooms and routing inside one nginx worker.
 *
 * Every envelope is appended to its room's Stream and published on the
 * room's channel by one Lua script (redis-scripts/post.lua), so a published
 * envelope is always already in the Stream.  A worker subscribes to the
 * channels of the rooms its local clients are in and fans each envelope out
 * to them; the Stream is what makes delivery exact:
 *
 *   - each (client, room) pair is a link holding the last id delivered;
 *   - a link starts in WAIT_SUB until the worker's subscription to the room
 *     is confirmed, then CATCHING: it reads the Stream after its last id
 *     (XRANGE, in batches) while live traffic for it is held back, then
 *     releases what was held with ids above the last one and goes LIVE;
 *   - because the subscription was confirmed before the read was sent,
 *     every envelope is either in what the read returns or arrives live
 *     after it: together they have no gap, and the id filter removes the
 *     overlap, so there is no duplicate either.
 *
 * The same path serves resume (a client reconnecting with the ids it last
 * saw), rooms created while a client is connected (start from the Stream's
 * beginning, so the first envelope of a new room is never missed), and the
 * loss of the pub/sub connection (every link falls back to WAIT_SUB and
 * catches up from its last id after the resubscribe).
 *
 * That last case puts every link of the worker into CATCHING at once, so
 * the reads are metered: at most NGX_IOA_CATCHUP_SLOTS are in flight per
 * worker (the others queue for a slot, in order), and each asks for about
 * NGX_IOA_CATCHUP_BYTES of envelopes, counted from the room's typical
 * envelope (ioa_catchup_batch at most).  Unmetered, a thousand rooms of
 * 1 MiB envelopes asked for gigabytes in one pipeline: Redis built every
 * reply before writing the first, stayed silent past ioa_redis_timeout,
 * the connection was dropped, and the same reads were sent again.
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
 * teamup events published while nobody listened are gone.
 *
 * Observers (the feed of every room) PSUBSCRIBE a pattern, which shard
 * channels never reach, and a plain PUBLISH on a Cluster is copied to every
 * node: paying that for every envelope while nobody observes would undo
 * what shard channels save.  So post.lua adds the PUBLISH copy ("sf") only
 * while some nginx worker of some instance has an observer: such a worker
 * keeps its holder id in <prefix>{reg}:observers, scored with an expiry it
 * renews every tick, and every worker counts the live entries every tick.
 * An observer on another instance sees the feed at most a tick after it
 * connected; the feed is a live view without resume, so that is all it
 * can miss.
 *
 * Messages are built once per worker (ngx_ioa_msg_t, reference counted):
 * the WebSocket frame header is written right in front of the JSON, so one
 * buffer is the frame every recipient's socket sends.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_ws_frame.h"


#define NGX_IOA_KEY_MAX          320
/* catch-up reads in flight per worker, and the bytes each asks for */
#define NGX_IOA_CATCHUP_SLOTS    16
#define NGX_IOA_CATCHUP_BYTES    (1024 * 1024)
/* rooms an agent_rooms.lua batch asks for (see there) */
#define NGX_IOA_ROOMS_BATCH      "100"
#define NGX_IOA_ROOM_IDLE        30000

/* post.lua's 5 keys and ARGV[1..6]; the next_speaker names follow */
#define NGX_IOA_POST_ARGC        11
/* arguments passed without an allocation: IoA addresses at most a team */
#define NGX_IOA_POST_STACK       (NGX_IOA_POST_ARGC + 16)


typedef struct {
    ngx_str_node_t            sn;
    ngx_queue_t               clients;
    ngx_uint_t                n;
    ngx_uint_t                loaded;     /* name bytes follow */
} ngx_ioa_agent_t;


typedef struct {
    ngx_queue_t               q;
    ngx_ioa_client_t         *client;
    ngx_ioa_redis_req_t      *req;
    ngx_str_t                 comm_id;
    u_char                    data[64];
} ngx_ioa_post_t;


static ngx_uint_t ngx_ioa_client_series(ngx_ioa_client_t *cl);
static ngx_ioa_room_t *ngx_ioa_room_get(ngx_str_t *comm_id, ngx_uint_t create);
static void ngx_ioa_room_free(ngx_ioa_room_t *room);
static void ngx_ioa_room_subscribe(ngx_ioa_room_t *room);
static void ngx_ioa_room_sub_reset(ngx_ioa_room_t *room);
static void ngx_ioa_room_events_subscribe(void);
static void ngx_ioa_room_feed_subscribe(void);
static void ngx_ioa_room_reload_agents(void);
static void ngx_ioa_room_observers(ngx_uint_t present);
static void ngx_ioa_room_observers_reply(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_link(ngx_ioa_client_t *cl, ngx_str_t *comm_id,
    ngx_ioa_sid_t *after);
static void ngx_ioa_link_free(ngx_ioa_link_t *lk);
static void ngx_ioa_link_catchup(ngx_ioa_link_t *lk);
static void ngx_ioa_link_catchup_read(ngx_ioa_link_t *lk);
static void ngx_ioa_link_cancel(ngx_ioa_link_t *lk);
static void ngx_ioa_catchup_slot_free(void);
static void ngx_ioa_room_entry_seen(ngx_ioa_room_t *room, size_t len);
static void ngx_ioa_link_catchup_reply(redisReply *reply, void *data);
static void ngx_ioa_link_live(ngx_ioa_link_t *lk);
static void ngx_ioa_link_release_held(ngx_ioa_link_t *lk);
static ngx_int_t ngx_ioa_link_deliver(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_link_hold(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m);
static void ngx_ioa_client_load_rooms(ngx_ioa_client_t *cl);
static void ngx_ioa_client_hold(ngx_ioa_client_t *cl, u_char *data,
    size_t len);
static void ngx_ioa_client_replay(ngx_ioa_client_t *cl);
static void ngx_ioa_client_rooms_reply(redisReply *reply, void *data);
static void ngx_ioa_client_control(ngx_ioa_client_t *cl,
    ngx_ioa_envelope_t *env, ngx_pool_t *pool);
static void ngx_ioa_post_reply(redisReply *reply, void *data);
static void ngx_ioa_link_resume(ngx_ioa_link_t *lk, ngx_ioa_sid_t *sid);
static ngx_ioa_msg_t *ngx_ioa_msg_create(ngx_str_t *comm_id, ngx_str_t *sid,
    ngx_str_t *json, ngx_uint_t feed);
static void ngx_ioa_room_on_event(ngx_str_t *data);
static void ngx_ioa_room_tick(ngx_event_t *ev);
static void ngx_ioa_room_presence(void);
static ngx_int_t ngx_ioa_comm_id_from_channel(ngx_str_t *channel,
    ngx_str_t *comm_id);
static u_char *ngx_ioa_post_key(u_char *p, const char **arg, size_t *len,
    ngx_str_t *base, const char *suffix);
static ngx_int_t ngx_ioa_sid_cmp(ngx_ioa_sid_t *a, ngx_ioa_sid_t *b);
static ngx_ioa_agent_t *ngx_ioa_agent_get(ngx_str_t *name,
    ngx_uint_t create);


static ngx_rbtree_t        ngx_ioa_rooms;
static ngx_rbtree_node_t   ngx_ioa_rooms_sentinel;
static ngx_rbtree_t        ngx_ioa_agents;
static ngx_rbtree_node_t   ngx_ioa_agents_sentinel;

static ngx_queue_t         ngx_ioa_idle_rooms;
static ngx_queue_t         ngx_ioa_observers;
static ngx_uint_t          ngx_ioa_nobservers;
static ngx_uint_t          ngx_ioa_nclients;
static ngx_ioa_sub_state_e ngx_ioa_feed_sub;
static ngx_ioa_redis_node_t *ngx_ioa_feed_node;
static ngx_uint_t          ngx_ioa_feed_remote;
static ngx_ioa_sub_state_e ngx_ioa_events_sub;
static ngx_ioa_redis_node_t *ngx_ioa_events_node;

/* links and clients waiting for the command connection */
static ngx_array_t        *ngx_ioa_wait_links;
/* catch-up reads in flight, and the links waiting for one (catchup_q) */
static ngx_uint_t          ngx_ioa_catchups;
static ngx_queue_t         ngx_ioa_catchup_queue;
static ngx_queue_t         ngx_ioa_wait_clients;

/* scratch memory for parsing an envelope, see ngx_ioa_client_post() */
static ngx_pool_t         *ngx_ioa_post_pool;

static ngx_event_t         ngx_ioa_tick_ev;

/* nginx's debug log names a timer by ev->data's descriptor, so a timer
 * that belongs to no connection points at one that has none */
static ngx_connection_t    ngx_ioa_tick_conn;


ngx_int_t
ngx_ioa_room_init_process(ngx_cycle_t *cycle)
{
    ngx_rbtree_init(&ngx_ioa_rooms, &ngx_ioa_rooms_sentinel,
                    ngx_str_rbtree_insert_value);
    ngx_rbtree_init(&ngx_ioa_agents, &ngx_ioa_agents_sentinel,
                    ngx_str_rbtree_insert_value);

    ngx_queue_init(&ngx_ioa_idle_rooms);
    ngx_queue_init(&ngx_ioa_observers);
    ngx_queue_init(&ngx_ioa_wait_clients);
    ngx_queue_init(&ngx_ioa_catchup_queue);

    ngx_ioa_wait_links = ngx_array_create(cycle->pool, 16,
                                          sizeof(ngx_ioa_link_t *));
    if (ngx_ioa_wait_links == NULL) {
        return NGX_ERROR;
    }

    ngx_ioa_post_pool = ngx_create_pool(4096, cycle->log);
    if (ngx_ioa_post_pool == NULL) {
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

    if (ngx_ioa_post_pool) {
        ngx_destroy_pool(ngx_ioa_post_pool);
        ngx_ioa_post_pool = NULL;
    }
}


ngx_uint_t
ngx_ioa_local_clients(void)
{
    return ngx_ioa_nclients;
}


/* clients */

/* the client's series of ioa_connections (ngx_ioa_stats.c) */

static ngx_uint_t
ngx_ioa_client_series(ngx_ioa_client_t *cl)
{
    return cl->transport->via * 3 + cl->kind;
}


/*
 * A follower of one stream (a goal's feed, "goal-<id>") read inside request
 * r by transport t: what every follower is before it attaches.  It reads
 * from the stream's beginning unless cl->since is set after this.
 */

void
ngx_ioa_client_follower(ngx_ioa_client_t *cl, ngx_http_request_t *r,
    ngx_ioa_transport_t *t, void *data, ngx_str_t *stream)
{
    cl->kind = NGX_IOA_CLIENT_FOLLOWER;
    cl->transport = t;
    cl->data = data;
    cl->pool = r->pool;
    cl->log = r->connection->log;
    cl->lcf = ngx_http_get_module_loc_conf(r, ngx_http_ioa_module);
    cl->echo = 1;
    cl->name = *stream;
    cl->follow = *stream;
    ngx_queue_init(&cl->links);
}


ngx_int_t
ngx_ioa_client_attach(ngx_ioa_client_t *cl)
{
    ngx_ioa_agent_t  *a;

    ngx_ioa_nclients++;

    ngx_ioa_stat_add(NGX_IOA_STAT_CONNECTIONS + ngx_ioa_client_series(cl), 1);
    ngx_ioa_stat_add(NGX_IOA_STAT_OPENED + ngx_ioa_client_series(cl), 1);

    if (cl->has_since || cl->resume) {
        ngx_ioa_stat_add(NGX_IOA_STAT_RESUMES + cl->transport->via, 1);
    }

    /* nginx's time of the connect: see ngx_ioa_client_rooms_reply */
    cl->connected_ms = ngx_ioa_now_ms();

    if (cl->kind == NGX_IOA_CLIENT_FOLLOWER) {
        ngx_ioa_sid_t      start, *after;
        ngx_uint_t         i;
        ngx_ioa_resume_t  *res;

        /* a follower reads its one stream from the beginning, or from
         * where it says it stopped (Last-Event-ID) */

        start.ms = 0;
        start.seq = 0;
        after = &start;

        if (cl->has_since) {
            after = &cl->since;
        }

        if (cl->resume) {
            res = cl->resume->elts;

            for (i = 0; i < cl->resume->nelts; i++) {
                if (res[i].comm_id.len == cl->follow.len
                    && ngx_strncmp(res[i].comm_id.data, cl->follow.data,
                                   cl->follow.len) == 0)
                {
                    after = &res[i].sid;
                }
            }
        }

        cl->rooms_loaded = 1;

        return ngx_ioa_link(cl, &cl->follow, after);
    }

    if (cl->kind == NGX_IOA_CLIENT_OBSERVER) {
        ngx_queue_insert_tail(&ngx_ioa_observers, &cl->agent_q);

        if (ngx_ioa_nobservers++ == 0) {
            ngx_ioa_room_feed_subscribe();
            ngx_ioa_room_observers(1);
        }

        return NGX_OK;
    }

    cl->name_json.len = ngx_ioa_json_str_len(&cl->name) - 2;
    cl->name_json.data = ngx_pnalloc(cl->pool, cl->name_json.len + 2);
    if (cl->name_json.data == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_ioa_json_str(cl->name_json.data, &cl->name);
    ngx_memmove(cl->name_json.data, cl->name_json.data + 1,
                cl->name_json.len);

    a = ngx_ioa_agent_get(&cl->name, 1);
    if (a == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_insert_tail(&a->clients, &cl->agent_q);

    if (a->n++ == 0) {
        ngx_ioa_presence_set(&cl->name, 1, 1);
    }

    if (!cl->wait_resume) {
        ngx_ioa_client_load_rooms(cl);
    }

    return NGX_OK;
}


void
ngx_ioa_client_detach(ngx_ioa_client_t *cl)
{
    ngx_ioa_early_t  *e;
    ngx_queue_t      *q;
    ngx_ioa_link_t   *lk;
    ngx_ioa_post_t   *post;
    ngx_ioa_agent_t  *a;

    if (cl->closed) {
        return;
    }

    cl->closed = 1;
    ngx_ioa_nclients--;

    ngx_ioa_stat_add(NGX_IOA_STAT_CONNECTIONS + ngx_ioa_client_series(cl), -1);

    if (cl->rooms_req) {
        ngx_ioa_redis_cancel(cl->rooms_req);
        cl->rooms_req = NULL;
    }

    if (cl->posts.next) {
        while (!ngx_queue_empty(&cl->posts)) {
            q = ngx_queue_head(&cl->posts);
            ngx_queue_remove(q);
            post = ngx_queue_data(q, ngx_ioa_post_t, q);
            ngx_ioa_redis_cancel(post->req);
            ngx_free(post);
        }
    }

    if (cl->wait_q.next) {
        ngx_queue_remove(&cl->wait_q);
        cl->wait_q.next = NULL;
    }

    while (cl->early) {
        e = cl->early;
        cl->early = e->next;
        ngx_free(e);
    }

    cl->early_bytes = 0;

    while (!ngx_queue_empty(&cl->links)) {
        q = ngx_queue_head(&cl->links);
        lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);
        ngx_ioa_link_free(lk);
    }

    if (cl->kind == NGX_IOA_CLIENT_FOLLOWER) {
        return;
    }

    ngx_queue_remove(&cl->agent_q);

    if (cl->kind == NGX_IOA_CLIENT_OBSERVER) {
        if (--ngx_ioa_nobservers) {
            return;
        }

        ngx_ioa_room_observers(0);

        if (ngx_ioa_feed_sub == NGX_IOA_SUB_ACTIVE
            && ngx_ioa_redis_unsubscribe(&ngx_ioa_main_conf()->feed_pattern,
                                         1, ngx_ioa_feed_node)
               == NGX_OK)
        {
            ngx_ioa_feed_sub = NGX_IOA_SUB_LEAVING;
        }

        return;
    }

    a = ngx_ioa_agent_get(&cl->name, 0);

    if (a && --a->n == 0) {
        ngx_ioa_presence_set(&cl->name, 1, 0);
        ngx_rbtree_delete(&ngx_ioa_agents, &a->sn.node);
        ngx_free(a);
    }
}


static ngx_ioa_agent_t *
ngx_ioa_agent_get(ngx_str_t *name, ngx_uint_t create)
{
    uint32_t          hash;
    ngx_ioa_agent_t  *a;

    hash = ngx_crc32_short(name->data, name->len);

    a = (ngx_ioa_agent_t *) ngx_str_rbtree_lookup(&ngx_ioa_agents, name,
                                                  hash);
    if (a || !create) {
        return a;
    }

    a = ngx_alloc(sizeof(ngx_ioa_agent_t) + name->len, ngx_cycle->log);
    if (a == NULL) {
        return NULL;
    }

    ngx_memzero(a, sizeof(ngx_ioa_agent_t));

    a->sn.str.data = (u_char *) (a + 1);
    a->sn.str.len = name->len;
    ngx_memcpy(a->sn.str.data, name->data, name->len);
    a->sn.node.key = hash;

    ngx_queue_init(&a->clients);
    ngx_rbtree_insert(&ngx_ioa_agents, &a->sn.node);

    return a;
}


/* the rooms an agent is in live in Redis (<prefix>{reg}:rooms:<name>) */

static void
ngx_ioa_client_load_rooms(ngx_ioa_client_t *cl)
{
    u_char                key[NGX_IOA_KEY_MAX];
    const char           *argv[3];
    size_t                argvlen[3];
    ngx_ioa_main_conf_t  *mcf;

    if (cl->rooms_req || cl->closed) {
        return;
    }

    if (cl->rooms_cursor[0] == '\0') {
        /* a load begins: from the first batch */
        cl->rooms_cursor[0] = '0';
        cl->rooms_cursor[1] = '\0';
        cl->rooms_first = !cl->rooms_loaded;
    }

    if (!ngx_ioa_redis_ready()) {
        if (cl->wait_q.next == NULL) {
            ngx_queue_insert_tail(&ngx_ioa_wait_clients, &cl->wait_q);
        }

        return;
    }

    mcf = ngx_ioa_main_conf();

    argv[0] = (const char *) key;
    argvlen[0] = ngx_snprintf(key, sizeof(key), "%Vrooms:%V",
                              &mcf->reg_base, &cl->name) - key;
    argv[1] = (const char *) cl->rooms_cursor;
    argvlen[1] = ngx_strlen(cl->rooms_cursor);
    argv[2] = NGX_IOA_ROOMS_BATCH;
    argvlen[2] = sizeof(NGX_IOA_ROOMS_BATCH) - 1;

    cl->rooms_req = ngx_ioa_redis_script(NGX_IOA_SCRIPT_AGENT_ROOMS,
                                         ngx_ioa_client_rooms_reply, cl,
                                         1, 3, argv, argvlen);

    if (cl->rooms_req == NULL && cl->wait_q.next == NULL) {
        ngx_queue_insert_tail(&ngx_ioa_wait_clients, &cl->wait_q);
    }
}


static void
ngx_ioa_client_rooms_reply(redisReply *reply, void *data)
{
    ngx_ioa_client_t *cl = data;

    size_t             i;
    ngx_str_t          comm_id;
    ngx_uint_t         j, first, last;
    redisReply        *rooms, *e;
    ngx_ioa_sid_t      now, zero, *after;
    ngx_ioa_resume_t  *res;

    cl->rooms_req = NULL;

    /* {now_ms, {comm_id, ...}, cursor} from agent_rooms.lua */

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_ARRAY
        || reply->element[2]->type != REDIS_REPLY_STRING
        || reply->element[2]->len >= sizeof(cl->rooms_cursor)
        || ngx_ioa_parse_sid((u_char *) reply->element[0]->str,
                             reply->element[0]->len, &now) != NGX_OK)
    {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, cl->log, 0,
                          "ioa: loading the rooms of \"%V\" failed: %*s",
                          &cl->name, reply->len, reply->str);
        }

        /* retried when the command connection is back */
        if (cl->wait_q.next == NULL) {
            ngx_queue_insert_tail(&ngx_ioa_wait_clients, &cl->wait_q);
        }

        return;
    }

    /*
     * "From the moment it connected": Redis' time when the rooms were read,
     * or nginx's when the client connected if that is earlier.  On a Redis
     * Cluster the rooms are read on the registry's node while envelopes are
     * appended on their rooms' nodes, with no order between the two: an
     * envelope a member posts right after this client's handshake can be
     * appended before the registry node runs the script, and Redis' time
     * alone would take it for history.  The earlier of the two keeps it
     * (and nginx's clock running ahead of Redis' changes nothing).
     */

    if (cl->connected_ms > 0 && (uint64_t) cl->connected_ms < now.ms) {
        now.ms = cl->connected_ms;
    }

    /* "after (now - 1 ms, the largest sequence)" is "from now on" */
    now.ms--;
    now.seq = (uint64_t) -1;

    /* every batch of the load starts where its first did */
    if (cl->rooms_cursor[0] == '0' && cl->rooms_cursor[1] == '\0') {
        cl->rooms_start = now;

    } else {
        now = cl->rooms_start;
    }

    zero.ms = 0;
    zero.seq = 0;

    first = cl->rooms_first;
    last = reply->element[2]->len == 1 && reply->element[2]->str[0] == '0';
    rooms = reply->element[1];

    for (i = 0; i < rooms->elements; i++) {
        e = rooms->element[i];

        if (e->type != REDIS_REPLY_STRING) {
            continue;
        }

        comm_id.data = (u_char *) e->str;
        comm_id.len = e->len;

        /*
         * A room found on the first load starts where the client asked
         * (resume) or at the moment it connected; a room found on a later
         * load was created while the client was connected and its teamup
         * event was missed, so it is read from the beginning.
         */

        after = &zero;

        if (first) {
            after = &now;

            if (cl->has_since) {
                after = &cl->since;
            }

            if (cl->resume && cl->resume->nelts) {
                res = cl->resume->elts;

                /* a room the client did not name was unknown to it when it
                 * last heard from us, i.e. created later: everything in it
                 * comes after the newest id it did name */
                after = &res[0].sid;

                for (j = 0; j < cl->resume->nelts; j++) {
                    if (ngx_ioa_sid_cmp(&res[j].sid, after) > 0) {
                        after = &res[j].sid;
                    }
                }

                if (cl->has_since && ngx_ioa_sid_cmp(&cl->since, after) < 0) {
                    after = &cl->since;
                }

                for (j = 0; j < cl->resume->nelts; j++) {
                    if (res[j].comm_id.len == comm_id.len
                        && ngx_strncmp(res[j].comm_id.data, comm_id.data,
                                       comm_id.len) == 0)
                    {
                        after = &res[j].sid;
                        break;
                    }
                }
            }
        }

        if (ngx_ioa_link(cl, &comm_id, after) != NGX_OK) {
            cl->transport->close(cl, NGX_IOA_WS_INTERNAL, "out of memory");
            return;
        }
    }

    if (!last) {
        /* the next batch, behind this one's commands on the connection */
        ngx_memcpy(cl->rooms_cursor, reply->element[2]->str,
                   reply->element[2]->len);
        cl->rooms_cursor[reply->element[2]->len] = '\0';
        ngx_ioa_client_load_rooms(cl);
        return;
    }

    cl->rooms_cursor[0] = '\0';
    cl->rooms_loaded = 1;

    if (first && cl->transport->positioned) {
        cl->transport->positioned(cl);
    }

    if (first) {
        ngx_ioa_client_replay(cl);
    }
}


static void
ngx_ioa_client_hold(ngx_ioa_client_t *cl, u_char *data, size_t len)
{
    ngx_ioa_early_t  *e;

    if (cl->early_bytes + len > cl->lcf->send_queue_limit) {
        cl->transport->close(cl, NGX_IOA_WS_POLICY,
                             "too many envelopes before the rooms were "
                             "loaded; reconnect and send again");
        return;
    }

    e = ngx_alloc(offsetof(ngx_ioa_early_t, data) + len, cl->log);
    if (e == NULL) {
        cl->transport->close(cl, NGX_IOA_WS_INTERNAL, "out of memory");
        return;
    }

    e->next = NULL;
    e->len = len;
    ngx_memcpy(e->data, data, len);

    if (cl->early == NULL) {
        cl->early_tail = &cl->early;
    }

    *cl->early_tail = e;
    cl->early_tail = &e->next;
    cl->early_bytes += len;
}


/* the frames held while the rooms loaded, posted in the order they came */

static void
ngx_ioa_client_replay(ngx_ioa_client_t *cl)
{
    ngx_ioa_early_t  *e;

    while (cl->early) {
        e = cl->early;
        cl->early = e->next;
        cl->early_bytes -= e->len;

        if (!cl->closed) {
            ngx_ioa_client_post(cl, e->data, e->len);
        }

        ngx_free(e);
    }
}


/* links */

static ngx_int_t
ngx_ioa_link(ngx_ioa_client_t *cl, ngx_str_t *comm_id, ngx_ioa_sid_t *after)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;
    ngx_ioa_room_t  *room;

    for (q = ngx_queue_head(&cl->links);
         q != ngx_queue_sentinel(&cl->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);

        if (lk->room->sn.str.len == comm_id->len
            && ngx_strncmp(lk->room->sn.str.data, comm_id->data,
                           comm_id->len) == 0)
        {
            return NGX_OK;
        }
    }

    room = ngx_ioa_room_get(comm_id, 1);
    if (room == NULL) {
        return NGX_ERROR;
    }

    lk = ngx_pcalloc(cl->pool, sizeof(ngx_ioa_link_t));
    if (lk == NULL) {
        return NGX_ERROR;
    }

    lk->client = cl;
    lk->room = room;
    lk->last = *after;
    lk->first = *after;

    ngx_queue_insert_tail(&cl->links, &lk->client_q);
    ngx_queue_insert_tail(&room->links, &lk->room_q);

    if (room->nlinks++ == 0 && room->idle_q.next) {
        ngx_queue_remove(&room->idle_q);
        room->idle_q.next = NULL;
    }

    lk->state = NGX_IOA_LINK_WAIT_SUB;

    if (room->sub == NGX_IOA_SUB_ACTIVE) {
        ngx_ioa_link_catchup(lk);

    } else if (room->sub == NGX_IOA_SUB_NONE) {
        ngx_ioa_room_subscribe(room);
    }

    return NGX_OK;
}


static void
ngx_ioa_link_free(ngx_ioa_link_t *lk)
{
    ngx_uint_t        i;
    ngx_ioa_link_t  **w;
    ngx_ioa_room_t   *room;

    ngx_ioa_link_cancel(lk);

    w = ngx_ioa_wait_links->elts;

    for (i = 0; i < ngx_ioa_wait_links->nelts; i++) {
        if (w[i] == lk) {
            w[i] = NULL;
        }
    }

    ngx_ioa_link_release_held(lk);

    if (lk->held) {
        ngx_free(lk->held);
        lk->held = NULL;
    }

    ngx_queue_remove(&lk->client_q);
    ngx_queue_remove(&lk->room_q);

    room = lk->room;

    if (--room->nlinks == 0) {
        room->idle_since = ngx_current_msec;
        ngx_queue_insert_tail(&ngx_ioa_idle_rooms, &room->idle_q);
    }
}


static void
ngx_ioa_link_catchup(ngx_ioa_link_t *lk)
{
    ngx_ioa_link_cancel(lk);

    lk->state = NGX_IOA_LINK_CATCHING;

    if (ngx_ioa_catchups >= NGX_IOA_CATCHUP_SLOTS) {
        ngx_queue_insert_tail(&ngx_ioa_catchup_queue, &lk->catchup_q);
        return;
    }

    ngx_ioa_link_catchup_read(lk);
}


/* a pending read or a place in the queue, given up */

static void
ngx_ioa_link_cancel(ngx_ioa_link_t *lk)
{
    if (lk->req) {
        ngx_ioa_redis_cancel(lk->req);
        lk->req = NULL;
        ngx_ioa_catchup_slot_free();
    }

    if (lk->catchup_q.next) {
        ngx_queue_remove(&lk->catchup_q);
        lk->catchup_q.next = NULL;
    }
}


/* a read is done: the slot goes to the links that wait, in order */

static void
ngx_ioa_catchup_slot_free(void)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;

    ngx_ioa_catchups--;

    while (ngx_ioa_catchups < NGX_IOA_CATCHUP_SLOTS
           && !ngx_queue_empty(&ngx_ioa_catchup_queue))
    {
        q = ngx_queue_head(&ngx_ioa_catchup_queue);
        ngx_queue_remove(q);

        lk = ngx_queue_data(q, ngx_ioa_link_t, catchup_q);
        lk->catchup_q.next = NULL;

        if (lk->room->sub != NGX_IOA_SUB_ACTIVE) {
            /* its room is being resubscribed: it starts over then */
            lk->state = NGX_IOA_LINK_WAIT_SUB;
            continue;
        }

        ngx_ioa_link_catchup_read(lk);
    }
}


/* what a room's envelopes are like: an average that follows changes */

static void
ngx_ioa_room_entry_seen(ngx_ioa_room_t *room, size_t len)
{
    room->entry_len = room->entry_len ? (room->entry_len * 3 + len) / 4 : len;
}


static void
ngx_ioa_link_catchup_read(ngx_ioa_link_t *lk)
{
    u_char            start[NGX_INT64_LEN * 2 + 4], count[NGX_INT_T_LEN];
    size_t            argvlen[6];
    ngx_uint_t        n;
    const char       *argv[6];
    ngx_ioa_link_t  **w;

    /* about NGX_IOA_CATCHUP_BYTES, one envelope at least */

    n = lk->client->lcf->catchup_batch;

    if (lk->room->entry_len
        && NGX_IOA_CATCHUP_BYTES / lk->room->entry_len < n)
    {
        n = ngx_max(NGX_IOA_CATCHUP_BYTES / lk->room->entry_len, 1);
    }

    lk->count = n;

    argv[1] = (const char *) lk->room->log_key.data;
    argvlen[1] = lk->room->log_key.len;

    argv[0] = "XRANGE";
    argvlen[0] = sizeof("XRANGE") - 1;
    argv[2] = (const char *) start;

    if (lk->last.seq == (uint64_t) -1) {
        /* Redis cannot step past the largest sequence of a millisecond
         * itself: "after <ms>-max" is "from <ms+1>-0" */
        argvlen[2] = ngx_sprintf(start, "%uL-0", lk->last.ms + 1) - start;

    } else {
        start[0] = '(';
        argvlen[2] = ngx_ioa_sid_print(start + 1, &lk->last) - start;
    }
    argv[3] = "+";
    argvlen[3] = 1;
    argv[4] = "COUNT";
    argvlen[4] = 5;
    argv[5] = (const char *) count;
    argvlen[5] = ngx_sprintf(count, "%ui", n) - count;

    lk->req = ngx_ioa_redis_command(ngx_ioa_link_catchup_reply, lk,
                                    6, argv, argvlen);

    if (lk->req) {
        ngx_ioa_catchups++;

    } else {
        w = ngx_array_push(ngx_ioa_wait_links);
        if (w == NULL) {
            lk->client->transport->close(lk->client, NGX_IOA_WS_INTERNAL,
                                         "out of memory");
            return;
        }

        *w = lk;
    }
}


static void
ngx_ioa_link_catchup_reply(redisReply *reply, void *data)
{
    ngx_ioa_link_t *lk = data;

    size_t             i;
    ngx_str_t          sid, json, comm_id;
    size_t             queued;
    redisReply        *e, *f;
    ngx_ioa_msg_t     *m;
    ngx_ioa_client_t  *cl;
    ngx_ioa_link_t   **w;

    lk->req = NULL;
    cl = lk->client;

    ngx_ioa_catchup_slot_free();

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {

        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, cl->log, 0,
                          "ioa: reading room \"%V\" failed: %*s",
                          &lk->room->sn.str, reply->len, reply->str);
        }

        /* try again when the command connection is back */
        w = ngx_array_push(ngx_ioa_wait_links);
        if (w) {
            *w = lk;
        }

        return;
    }

    if (lk->room->sub != NGX_IOA_SUB_ACTIVE) {
        /* the subscription was lost meanwhile: start over after it is
         * restored, or live traffic could slip between read and resubscribe */
        lk->state = NGX_IOA_LINK_WAIT_SUB;
        return;
    }

    comm_id = lk->room->sn.str;

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING
            || e->element[1]->type != REDIS_REPLY_ARRAY
            || e->element[1]->elements < 2)
        {
            continue;
        }

        /* post.lua writes "e" first; "h" (the chain hash) follows */
        f = e->element[1]->element[1];

        if (f->type != REDIS_REPLY_STRING) {
            continue;
        }

        sid.data = (u_char *) e->element[0]->str;
        sid.len = e->element[0]->len;
        json.data = (u_char *) f->str;
        json.len = f->len;

        ngx_ioa_room_entry_seen(lk->room, json.len);

        /*
         * Flow control: a backlog larger than ioa_send_queue_limit would
         * close the very client that resumes to read it.  Once half the
         * limit is queued, the catch-up stops here (lk->last is the last
         * entry queued) and reads on from there when the client has taken
         * most of it (ngx_ioa_client_drained).  Live traffic stays held
         * meanwhile, as during any catch-up.
         */

        queued = cl->transport->queued(cl);

        if (queued && queued + f->len > cl->lcf->send_queue_limit / 2) {
            lk->paused = 1;
            cl->catchup_paused = 1;
            return;
        }

        m = ngx_ioa_msg_create(&comm_id, &sid, &json, 0);
        if (m == NULL) {
            cl->transport->close(cl, NGX_IOA_WS_INTERNAL, "out of memory");
            return;
        }

        m->refs++;
        (void) ngx_ioa_link_deliver(lk, m);
        ngx_ioa_msg_release(m);
        lk->caught++;

        if (cl->closed) {
            return;
        }
    }

    if (reply->elements >= lk->count) {
        /* more to read */
        ngx_ioa_link_catchup(lk);
        return;
    }

    ngx_ioa_link_live(lk);
}


/*
 * The transport wrote most of its queue (see the catch-up's flow control):
 * the catch-ups that stopped go on reading after their last entry.
 */

void
ngx_ioa_client_drained(ngx_ioa_client_t *cl)
{
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;

    cl->catchup_paused = 0;

    if (cl->closed) {
        return;
    }

    for (q = ngx_queue_head(&cl->links);
         q != ngx_queue_sentinel(&cl->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);

        if (lk->paused && lk->state == NGX_IOA_LINK_CATCHING) {
            lk->paused = 0;
            ngx_ioa_link_catchup(lk);
        }
    }
}


static void
ngx_ioa_link_live(ngx_ioa_link_t *lk)
{
    ngx_uint_t      i;
    ngx_ioa_msg_t  *m;

    lk->state = NGX_IOA_LINK_LIVE;

    ngx_ioa_stat_observe(NGX_IOA_HIST_CATCHUP, lk->caught);
    lk->caught = 0;

    for (i = 0; i < lk->nheld && !lk->client->closed; i++) {
        m = lk->held[i];

        if (ngx_ioa_sid_cmp(&m->sid, &lk->last) > 0) {
            (void) ngx_ioa_link_deliver(lk, m);
        }
    }

    if (!lk->client->closed) {
        ngx_ioa_link_release_held(lk);
    }
}


static void
ngx_ioa_link_release_held(ngx_ioa_link_t *lk)
{
    ngx_uint_t  i;

    for (i = 0; i < lk->nheld; i++) {
        ngx_ioa_msg_release(lk->held[i]);
    }

    lk->nheld = 0;
    lk->held_bytes = 0;
}


static ngx_int_t
ngx_ioa_link_hold(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m)
{
    ngx_uint_t        cap;
    ngx_ioa_msg_t   **held;
    ngx_ioa_client_t *cl;

    cl = lk->client;

    if (lk->held_bytes + m->payload_len > cl->lcf->send_queue_limit) {
        ngx_ioa_stat_add(NGX_IOA_STAT_OVERFLOWS + cl->transport->via, 1);
        cl->transport->close(cl, NGX_IOA_WS_POLICY,
                             "send queue limit exceeded while catching up; "
                             "reconnect and resume");
        return NGX_ERROR;
    }

    if (lk->nheld == lk->held_cap) {
        cap = lk->held_cap ? lk->held_cap * 2 : 16;

        held = ngx_alloc(cap * sizeof(ngx_ioa_msg_t *), cl->log);
        if (held == NULL) {
            cl->transport->close(cl, NGX_IOA_WS_INTERNAL, "out of memory");
            return NGX_ERROR;
        }

        if (lk->held) {
            ngx_memcpy(held, lk->held, lk->nheld * sizeof(ngx_ioa_msg_t *));
            ngx_free(lk->held);
        }

        lk->held = held;
        lk->held_cap = cap;
    }

    m->refs++;
    lk->held[lk->nheld++] = m;
    lk->held_bytes += m->payload_len;

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_link_deliver(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m)
{
    ngx_ioa_client_t  *cl;

    cl = lk->client;

    if (ngx_ioa_sid_cmp(&m->sid, &lk->last) <= 0) {
        return NGX_OK;
    }

    lk->last = m->sid;

    /* with echo off the agent learns the id of its own envelope from the
     * ack it got when posting */

    if (!cl->echo
        && m->sender.len == cl->name_json.len
        && ngx_strncmp(m->sender.data, cl->name_json.data, m->sender.len)
           == 0)
    {
        return NGX_OK;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_DELIVERED + cl->transport->via, 1);

    return cl->transport->send(cl, m);
}


/* rooms */

static ngx_ioa_room_t *
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


static void
ngx_ioa_room_feed_subscribe(void)
{
    if (ngx_ioa_nobservers && ngx_ioa_feed_sub == NGX_IOA_SUB_NONE
        && ngx_ioa_redis_subscribe(&ngx_ioa_main_conf()->feed_pattern, 1,
                                   &ngx_ioa_feed_node)
           == NGX_OK)
    {
        ngx_ioa_feed_sub = NGX_IOA_SUB_PENDING;
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
            ngx_ioa_room_reload_agents();
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


void
ngx_ioa_room_on_message(ngx_str_t *channel, ngx_str_t *data,
    ngx_uint_t pattern)
{
    u_char            *sp;
    ngx_str_t          comm_id, sid, json;
    ngx_queue_t       *q, *next;
    ngx_ioa_msg_t     *m;
    ngx_ioa_link_t    *lk;
    ngx_ioa_room_t    *room;
    ngx_ioa_client_t  *cl;

    if (channel->len == ngx_ioa_main_conf()->events_channel.len
        && ngx_strncmp(channel->data, ngx_ioa_main_conf()->events_channel.data,
                       channel->len) == 0)
    {
        ngx_ioa_room_on_event(data);
        return;
    }

    if (ngx_ioa_comm_id_from_channel(channel, &comm_id) != NGX_OK) {
        return;
    }

    /* "<id> <envelope json>", as post.lua publishes it */

    sp = ngx_strlchr(data->data, data->data + data->len, ' ');
    if (sp == NULL) {
        return;
    }

    sid.data = data->data;
    sid.len = sp - data->data;
    json.data = sp + 1;
    json.len = data->data + data->len - json.data;

    if (pattern) {
        if (ngx_queue_empty(&ngx_ioa_observers)) {
            return;
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
            next = ngx_queue_next(q);
            cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);
            ngx_ioa_stat_add(NGX_IOA_STAT_DELIVERED + cl->transport->via, 1);
            (void) cl->transport->send(cl, m);
        }

        ngx_ioa_msg_release(m);
        return;
    }

    room = ngx_ioa_room_get(&comm_id, 0);

    if (room == NULL || room->nlinks == 0) {
        return;
    }

    ngx_ioa_room_entry_seen(room, json.len);

    m = ngx_ioa_msg_create(&comm_id, &sid, &json, 0);
    if (m == NULL) {
        return;
    }

    m->refs++;

    for (q = ngx_queue_head(&room->links);
         q != ngx_queue_sentinel(&room->links);
         q = next)
    {
        /* delivering may close a client, which unlinks it */
        next = ngx_queue_next(q);
        lk = ngx_queue_data(q, ngx_ioa_link_t, room_q);

        if (lk->state == NGX_IOA_LINK_LIVE) {
            (void) ngx_ioa_link_deliver(lk, m);

        } else {
            (void) ngx_ioa_link_hold(lk, m);
        }
    }

    ngx_ioa_msg_release(m);
}


/*
 * A teamup event: {"comm_id":"...","agent_names":[...],"team_name":...}.
 * Local members start reading the new room from its beginning, and
 * observers see it as IoA's frontend does ("frontend_type":"teamup").
 */

static void
ngx_ioa_room_on_event(ngx_str_t *data)
{
    size_t             i;
    yajl_val           ev, id, names, v;
    ngx_str_t          comm_id, name, s;
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

    if (ngx_queue_empty(&ngx_ioa_observers)) {
        goto done;
    }

    /* {"frontend_type":"teamup", <the event's members>} */

    s.len = sizeof("{\"frontend_type\":\"teamup\",") - 1 + data->len - 1;
    s.data = ngx_pnalloc(pool, s.len);
    if (s.data == NULL) {
        goto done;
    }

    ngx_sprintf(s.data, "{\"frontend_type\":\"teamup\",%*s",
                data->len - 1, data->data + 1);

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


/* teamup events published while we were not subscribed are lost; the
 * agents' room sets in Redis are not */

static void
ngx_ioa_room_reload_agents(void)
{
    ngx_queue_t        *q;
    ngx_ioa_agent_t    *a;
    ngx_ioa_client_t   *cl;
    ngx_rbtree_node_t  *rn, *root, *sentinel;

    root = ngx_ioa_agents.root;
    sentinel = ngx_ioa_agents.sentinel;

    if (root == sentinel) {
        return;
    }

    for (rn = ngx_rbtree_min(root, sentinel);
         rn;
         rn = ngx_rbtree_next(&ngx_ioa_agents, rn))
    {
        a = (ngx_ioa_agent_t *) rn;

        for (q = ngx_queue_head(&a->clients);
             q != ngx_queue_sentinel(&a->clients);
             q = ngx_queue_next(q))
        {
            cl = ngx_queue_data(q, ngx_ioa_client_t, agent_q);

            if (cl->rooms_loaded) {
                ngx_ioa_client_load_rooms(cl);
            }
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
    ngx_uint_t         i, n;
    ngx_queue_t       *q, waiting;
    ngx_ioa_link_t   **w, *lk;
    ngx_ioa_client_t  *cl;

    /* agents that connected while Redis was away are not marked online */
    ngx_ioa_room_presence();

    /* a client whose room list still cannot be read (on a Cluster: the
     * registry's master is not up yet) queues itself again: take the
     * queue as it is now */

    if (ngx_queue_empty(&ngx_ioa_wait_clients)) {
        ngx_queue_init(&waiting);

    } else {
        waiting = ngx_ioa_wait_clients;
        waiting.next->prev = &waiting;
        waiting.prev->next = &waiting;
        ngx_queue_init(&ngx_ioa_wait_clients);
    }

    while (!ngx_queue_empty(&waiting)) {
        q = ngx_queue_head(&waiting);
        ngx_queue_remove(q);
        cl = ngx_queue_data(q, ngx_ioa_client_t, wait_q);
        cl->wait_q.next = NULL;
        ngx_ioa_client_load_rooms(cl);
    }

    /* catch-ups retried here may queue themselves again if the connection
     * drops once more, so take the list as it is now */

    n = ngx_ioa_wait_links->nelts;

    for (i = 0; i < n; i++) {
        w = ngx_ioa_wait_links->elts;
        lk = w[i];
        w[i] = NULL;

        if (lk == NULL || lk->client->closed) {
            continue;
        }

        if (lk->room->sub == NGX_IOA_SUB_ACTIVE) {
            ngx_ioa_link_catchup(lk);

        } else {
            lk->state = NGX_IOA_LINK_WAIT_SUB;
        }
    }

    w = ngx_ioa_wait_links->elts;

    for (i = n; i < ngx_ioa_wait_links->nelts; i++) {
        w[i - n] = w[i];
    }

    ngx_ioa_wait_links->nelts -= n;
}


/* periodic: presence heartbeat and unsubscribing from idle rooms */

static void
ngx_ioa_room_tick(ngx_event_t *ev)
{
    ngx_queue_t     *q;
    ngx_ioa_room_t  *room;

    ngx_ioa_room_presence();
    ngx_ioa_room_observers(ngx_ioa_nobservers > 0);
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


/* on a Cluster: this worker's observers in <prefix>{reg}:observers
 * (present: renewed; not: removed), and whether any worker has some */

static void
ngx_ioa_room_observers(ngx_uint_t present)
{
    u_char                key[NGX_IOA_KEY_MAX], ms[NGX_INT64_LEN];
    const char           *argv[4];
    size_t                argvlen[4];
    ngx_str_t            *holder;
    ngx_ioa_main_conf_t  *mcf;

    if (!ngx_ioa_redis_cluster() || !ngx_ioa_redis_ready()) {
        return;
    }

    mcf = ngx_ioa_main_conf();
    holder = ngx_ioa_holder();

    argv[1] = (const char *) key;
    argvlen[1] = ngx_snprintf(key, sizeof(key), "%Vobservers", &mcf->reg_base)
                 - key;

    if (present) {
        argv[0] = "ZADD";
        argvlen[0] = 4;
        argv[2] = (const char *) ms;
        argvlen[2] = ngx_sprintf(ms, "%L", ngx_ioa_now_ms() + 3 * NGX_IOA_TICK)
                     - ms;
        argv[3] = (const char *) holder->data;
        argvlen[3] = holder->len;

        (void) ngx_ioa_redis_command(NULL, NULL, 4, argv, argvlen);

    } else {
        argv[0] = "ZREM";
        argvlen[0] = 4;
        argv[2] = (const char *) holder->data;
        argvlen[2] = holder->len;

        (void) ngx_ioa_redis_command(NULL, NULL, 3, argv, argvlen);
    }

    argv[0] = "ZCOUNT";
    argvlen[0] = 6;
    argv[2] = (const char *) ms;
    argvlen[2] = ngx_sprintf(ms, "(%L", ngx_ioa_now_ms()) - ms;
    argv[3] = "+inf";
    argvlen[3] = 4;

    (void) ngx_ioa_redis_command(ngx_ioa_room_observers_reply, NULL, 4, argv,
                                 argvlen);
}


static void
ngx_ioa_room_observers_reply(redisReply *reply, void *data)
{
    if (reply && reply->type == REDIS_REPLY_INTEGER) {
        ngx_ioa_feed_remote = (reply->integer > 0);
    }
}


/* the heartbeat that keeps this worker's agents "online" in the registry */

static void
ngx_ioa_room_presence(void)
{
    ngx_uint_t          n;
    ngx_str_t           names[256];
    ngx_ioa_agent_t    *a;
    ngx_rbtree_node_t  *node, *root, *sentinel;

    root = ngx_ioa_agents.root;
    sentinel = ngx_ioa_agents.sentinel;

    if (root == sentinel || !ngx_ioa_redis_ready()) {
        return;
    }

    n = 0;

    for (node = ngx_rbtree_min(root, sentinel);
         node;
         node = ngx_rbtree_next(&ngx_ioa_agents, node))
    {
        a = (ngx_ioa_agent_t *) node;
        names[n++] = a->sn.str;

        if (n == 256) {
            ngx_ioa_presence_set(names, n, 1);
            n = 0;
        }
    }

    if (n) {
        ngx_ioa_presence_set(names, n, 1);
    }
}


/* "<comm_id>:<id>,..." for every room the client is in: its exact position,
 * used as the SSE event id so that Last-Event-ID resumes every room */

size_t
ngx_ioa_client_position_len(ngx_ioa_client_t *cl)
{
    size_t           len;
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;

    len = 0;

    for (q = ngx_queue_head(&cl->links);
         q != ngx_queue_sentinel(&cl->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);
        len += lk->room->sn.str.len + 2 + 2 * NGX_INT64_LEN + 1;
    }

    return len;
}


u_char *
ngx_ioa_client_position(ngx_ioa_client_t *cl, u_char *p, u_char *last)
{
    u_char          *start;
    ngx_queue_t     *q;
    ngx_ioa_link_t  *lk;

    start = p;

    for (q = ngx_queue_head(&cl->links);
         q != ngx_queue_sentinel(&cl->links);
         q = ngx_queue_next(q))
    {
        lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);

        if (p != start) {
            *p++ = ',';
        }

        p = ngx_slprintf(p, last, "%V:%uL-%uL", &lk->room->sn.str,
                         lk->last.ms, lk->last.seq);
    }

    return p;
}


/*
 * An envelope posted as name, over either transport.  In open mode a
 * client may speak as anyone (IoA's cont_input from "user"), as long as
 * the sender it names is a name; membership and the floor stay its own.
 */

ngx_int_t
ngx_ioa_envelope_read(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *name, ngx_ioa_loc_conf_t *lcf, ngx_ioa_envelope_t *env,
    ngx_ioa_error_t *err)
{
    ngx_uint_t   i;
    ngx_str_t   *speaker;

    if (ngx_ioa_envelope_parse_as(pool, data, len, name,
                                  lcf->auth == NGX_IOA_AUTH_OFF,
                                  lcf->max_json_depth, ngx_ioa_now_ms(), env,
                                  err)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (env->sender.len && ngx_ioa_valid_name(&env->sender) != NGX_OK) {
        ngx_ioa_error_set(err, "invalid_name", "sender",
                          "\"sender\" is not a name: " NGX_IOA_NAME_RULE);
        return NGX_ERROR;
    }

    /*
     * A next_speaker that no agent could be called is a mistake the
     * sender should hear about, not a floor silently granted to nobody.
     */

    if (env->next_speaker) {
        speaker = env->next_speaker->elts;

        for (i = 0; i < env->next_speaker->nelts; i++) {
            if (ngx_ioa_valid_name(&speaker[i]) != NGX_OK) {
                ngx_ioa_error_set(err, "invalid_name", "next_speaker",
                                  "\"next_speaker\" entry %ui is not a "
                                  "name: " NGX_IOA_NAME_RULE, i);
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/* the agent side: an envelope or a control frame from a client */

void
ngx_ioa_client_post(ngx_ioa_client_t *cl, u_char *data, size_t len)
{
    ngx_int_t            rc;
    ngx_msec_t           retry;
    ngx_pool_t          *pool;
    ngx_ioa_post_t      *post;
    ngx_ioa_error_t      err;
    ngx_ioa_envelope_t   env;

    /*
     * One scratch pool per worker, reset after every envelope instead of a
     * pool created and destroyed for each: ngx_create_pool() aligns its
     * block with posix_memalign(), a slow path of malloc that was a visible
     * share of the cost of an envelope.  Nothing parsed here outlives this
     * call: the command sent to Redis is a copy.
     */

    pool = ngx_ioa_post_pool;

    rc = ngx_ioa_envelope_read(pool, data, len, &cl->name, cl->lcf, &env,
                               &err);

    if (rc != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, NULL);
        goto done;
    }

    if (cl->wait_resume) {
        /* the first frame: a resume sets where the rooms start, anything
         * else means none is coming */
        cl->wait_resume = 0;

        if (env.is_control) {
            ngx_ioa_client_control(cl, &env, pool);
            ngx_ioa_client_load_rooms(cl);
            goto done;
        }

        ngx_ioa_client_load_rooms(cl);
    }

    if (env.is_control) {
        ngx_ioa_client_control(cl, &env, pool);
        goto done;
    }

    /*
     * An agent that speaks at once (its first envelope right behind the
     * handshake) must get the echo of that envelope, which is appended after
     * it connected.  Its rooms' starting point is the Redis time that loads
     * them; on a Redis Cluster that is another node than the room's, so the
     * envelope could be appended before that time and be taken for history.
     * A valid envelope is therefore held until the rooms are loaded, then
     * posted in order (ngx_ioa_client_replay), bounded like the send queue;
     * errors and control frames are answered at once, as always.
     */

    if (!cl->rooms_loaded && cl->kind == NGX_IOA_CLIENT_AGENT) {
        ngx_ioa_client_hold(cl, data, len);
        goto done;
    }

    /* over ioa_limit_rate or ioa_limit_room_rate: refused, not stored, the
     * connection stays */
    if (ngx_ioa_limit_post(&cl->name, &env.comm_id, &retry, &err) != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &env.comm_id);
        goto done;
    }

    post = ngx_alloc(sizeof(ngx_ioa_post_t), cl->log);
    if (post == NULL) {
        goto done;
    }

    post->client = cl;
    post->comm_id.len = ngx_min(env.comm_id.len, sizeof(post->data));
    post->comm_id.data = post->data;
    ngx_memcpy(post->data, env.comm_id.data, post->comm_id.len);

    post->req = ngx_ioa_post_send(&cl->name, &env, ngx_ioa_post_reply, post);

    if (post->req == NULL) {
        ngx_free(post);
        ngx_ioa_error_set(&err, "redis_unavailable", NULL,
                          "the hub cannot reach Redis; the envelope was "
                          "not stored, send it again later");
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &env.comm_id);
        goto done;
    }

    if (cl->posts.next == NULL) {
        ngx_queue_init(&cl->posts);
    }

    ngx_queue_insert_tail(&cl->posts, &post->q);

done:

    ngx_reset_pool(pool);
}


/*
 * runs post.lua: membership check, floor check, append to the room's Stream,
 * publish and floor update, in one step inside Redis.  The type and the
 * next_speaker names go along with every envelope: which types are turns is
 * post.lua's to decide, in one place, and it reads no floor key for the
 * others.
 */

ngx_ioa_redis_req_t *
ngx_ioa_post_send(ngx_str_t *name, ngx_ioa_envelope_t *env,
    ngx_ioa_redis_handler_pt handler, void *data)
{
    u_char               *p, keys[6 * NGX_IOA_KEY_MAX];
    u_char                maxlen[NGX_INT_T_LEN], type[NGX_INT_T_LEN];
    size_t                argvlen_buf[NGX_IOA_POST_STACK];
    size_t               *argvlen;
    ngx_str_t             base, *speaker;
    ngx_uint_t            i, n;
    const char           *argv_buf[NGX_IOA_POST_STACK];
    const char          **argv;
    ngx_ioa_redis_req_t  *req;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    base.len = mcf->redis_prefix.len + sizeof("{room:}") - 1
               + env->comm_id.len;

    if (base.len + sizeof(":members") - 1 > NGX_IOA_KEY_MAX) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "ioa: room key for \"%V\" too long", &env->comm_id);
        return NULL;
    }

    n = env->next_speaker ? env->next_speaker->nelts : 0;

    if (NGX_IOA_POST_ARGC + n <= NGX_IOA_POST_STACK) {
        argv = argv_buf;
        argvlen = argvlen_buf;

    } else {
        argv = ngx_alloc((NGX_IOA_POST_ARGC + n) * sizeof(const char *),
                         ngx_cycle->log);
        argvlen = ngx_alloc((NGX_IOA_POST_ARGC + n) * sizeof(size_t),
                            ngx_cycle->log);

        if (argv == NULL || argvlen == NULL) {
            if (argv) {
                ngx_free(argv);
            }

            if (argvlen) {
                ngx_free(argvlen);
            }

            return NULL;
        }
    }

    /*
     * KEYS: "<prefix>{room:<id>}" is written once and each key copies it
     * with its suffix (this runs for every envelope; snprintf per key was
     * a measurable share of the post path)
     */

    p = keys;
    base.data = p;
    p = ngx_cpymem(p, mcf->redis_prefix.data, mcf->redis_prefix.len);
    p = ngx_cpymem(p, "{room:", sizeof("{room:") - 1);
    p = ngx_cpymem(p, env->comm_id.data, env->comm_id.len);
    *p++ = '}';

    p = ngx_ioa_post_key(p, &argv[0], &argvlen[0], &base, ":members");
    p = ngx_ioa_post_key(p, &argv[1], &argvlen[1], &base, ":log");
    p = ngx_ioa_post_key(p, &argv[2], &argvlen[2], &base, ":floor");
    p = ngx_ioa_post_key(p, &argv[3], &argvlen[3], &base, ":meta");
    /* the hash chain's head: declared, so that a slot migration answers
     * TRYAGAIN rather than the script failing on a key that moved */
    p = ngx_ioa_post_key(p, &argv[4], &argvlen[4], &base, ":chain");

    /* ARGV */

    argv[5] = (const char *) name->data;
    argvlen[5] = name->len;
    argv[6] = (const char *) env->json.data;
    argvlen[6] = env->json.len;
    argv[7] = (const char *) maxlen;
    argvlen[7] = ngx_sprintf(maxlen, "%ui", mcf->room_log_maxlen) - maxlen;
    (void) ngx_ioa_post_key(p, &argv[8], &argvlen[8], &base, ":ch");
    argv[9] = (const char *) type;
    argvlen[9] = (env->type == NGX_IOA_TYPE_NONE)
                 ? 0 : (size_t) (ngx_sprintf(type, "%i", env->type) - type);

    /* on a Cluster the room's channel is a shard channel, and observers
     * anywhere want the plain copy */
    if (!ngx_ioa_redis_cluster()) {
        argv[10] = "";

    } else if (ngx_ioa_nobservers || ngx_ioa_feed_remote) {
        argv[10] = "sf";

    } else {
        argv[10] = "s";
    }

    argvlen[10] = ngx_strlen(argv[10]);

    speaker = n ? env->next_speaker->elts : NULL;

    for (i = 0; i < n; i++) {
        argv[NGX_IOA_POST_ARGC + i] = (const char *) speaker[i].data;
        argvlen[NGX_IOA_POST_ARGC + i] = speaker[i].len;
    }

    req = ngx_ioa_redis_script(NGX_IOA_SCRIPT_POST, handler, data, 5,
                               NGX_IOA_POST_ARGC + n, argv, argvlen);

    if (argv != argv_buf) {
        ngx_free(argv);
        ngx_free(argvlen);
    }

    return req;
}


/* one key of post.lua: the room's base, which is already in front of p
 * for the first key only, and a suffix */

static u_char *
ngx_ioa_post_key(u_char *p, const char **arg, size_t *len, ngx_str_t *base,
    const char *suffix)
{
    size_t  n;

    n = ngx_strlen(suffix);

    if (p != base->data + base->len) {
        p = ngx_cpymem(p, base->data, base->len);
    }

    p = ngx_cpymem(p, suffix, n);

    *arg = (const char *) (p - base->len - n);
    *len = base->len + n;

    return p;
}


/* maps post.lua's answer to an HTTP status and, unless 200, an error */

ngx_uint_t
ngx_ioa_post_result(redisReply *reply, ngx_str_t *name, ngx_str_t *comm_id,
    ngx_ioa_error_t *err, ngx_msec_t *retry)
{
    u_char     *p;
    ngx_str_t   code, text, next;

    *retry = 0;

    if (ngx_ioa_redis_error(reply, &code, &text) == NGX_OK) {
        return NGX_HTTP_OK;
    }

    if (reply == NULL) {
        ngx_ioa_error_set(err, "redis_unavailable", NULL,
                          "Redis did not confirm the envelope; it may or "
                          "may not be stored: resume from your last id "
                          "before sending it again");
        *retry = 1000;
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    if (code.len == 9 && ngx_strncmp(code.data, "NOTMEMBER", 9) == 0) {
        ngx_ioa_error_set(err, "not_member", "comm_id",
                          "\"%V\" is not a member of room \"%V\"; the "
                          "envelope was not stored", name, comm_id);
        return NGX_HTTP_FORBIDDEN;
    }

    if (code.len == 11 && ngx_strncmp(code.data, "NOTYOURTURN", 11) == 0) {

        /* "<sender> does not have the floor; next: <a>,<b>": the last
         * "; next: " starts the list (a name holding one only makes the
         * message read oddly) */

        next.len = 0;
        next.data = text.data;

        for (p = text.data + text.len; p - text.data >= 8; p--) {
            if (ngx_strncmp(p - 8, "; next: ", 8) == 0) {
                next.data = p;
                next.len = text.data + text.len - p;
                break;
            }
        }

        ngx_ioa_error_set(err, "not_your_turn", "sender",
                          "\"%V\" does not have the floor in room \"%V\"; "
                          "the envelope was not stored: send it again once "
                          "an envelope names you in next_speaker (next: %V)",
                          name, comm_id, &next);
        return NGX_HTTP_CONFLICT;
    }

    if (code.len == 6 && ngx_strncmp(code.data, "NOROOM", 6) == 0) {
        ngx_ioa_error_set(err, "unknown_room", "comm_id",
                          "there is no room \"%V\"; create one with "
                          "/teamup", comm_id);
        return NGX_HTTP_NOT_FOUND;
    }

    return ngx_ioa_redis_refusal(reply, err, retry);
}


static void
ngx_ioa_post_reply(redisReply *reply, void *data)
{
    ngx_ioa_post_t *post = data;

    u_char            *p, buf[256];
    ngx_str_t          s;
    ngx_msec_t         retry;
    ngx_ioa_error_t    err;
    ngx_ioa_client_t  *cl;

    cl = post->client;
    ngx_queue_remove(&post->q);

    if (ngx_ioa_post_result(reply, &cl->name, &post->comm_id, &err, &retry)
        != NGX_HTTP_OK)
    {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &post->comm_id);
        ngx_free(post);
        return;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_POSTED + cl->transport->via, 1);

    if (cl->acks && reply->type == REDIS_REPLY_STRING) {
        p = ngx_snprintf(buf, sizeof(buf),
                         "{\"op\":\"ack\",\"comm_id\":\"%V\",\"id\":\"%*s\"}",
                         &post->comm_id, reply->len, reply->str);
        s.data = buf;
        s.len = p - buf;
        (void) cl->transport->send_text(cl, &s);
    }

    ngx_free(post);
}


/*
 * Control frames from a client: {"op":"resume","rooms":{"<comm_id>":"<id>"}}
 * re-reads those rooms after the given ids (the first-frame alternative to
 * the resume= query argument), {"op":"resume","since":"<id>"} every room.
 *
 * A resume is exact while the room has delivered nothing to this connection
 * yet: the link simply starts over from the new position.  Once live
 * envelopes went out, going back would deliver old envelopes after newer
 * ones, so that room answers "resume_too_late" instead; a client that cannot
 * put resume= in its URL connects with wait_resume=1, and its rooms are not
 * loaded before its first frame has been read.
 */

static void
ngx_ioa_client_control(ngx_ioa_client_t *cl, ngx_ioa_envelope_t *env,
    ngx_pool_t *pool)
{
    size_t             i;
    yajl_val           doc, rooms, since, v;
    ngx_str_t          comm_id, str;
    ngx_queue_t       *q;
    ngx_ioa_sid_t      sid;
    ngx_ioa_link_t    *lk;
    ngx_ioa_error_t    err;
    ngx_ioa_resume_t  *res;

    /* clang cannot see that the room loop below always sets it */
    lk = NULL;

    if (env->op.len != 6 || ngx_strncmp(env->op.data, "resume", 6) != 0) {
        ngx_ioa_error_set(&err, "unknown_op", "op",
                          "unknown control op \"%V\"; known: resume",
                          &env->op);
        ngx_ioa_client_error(cl, &err, NULL);
        return;
    }

    doc = ngx_ioa_json_parse(pool, env->json.data, env->json.len,
                             cl->lcf->max_json_depth, &err);
    if (doc == NULL) {
        ngx_ioa_client_error(cl, &err, NULL);
        return;
    }

    rooms = ngx_ioa_json_get(doc, "rooms");
    since = ngx_ioa_json_get(doc, "since");

    if ((rooms && !YAJL_IS_OBJECT(rooms)) || (rooms == NULL && since == NULL))
    {
        goto bad;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_RESUMES + cl->transport->via, 1);

    if (since) {
        if (ngx_ioa_json_string(since, &str) != NGX_OK
            || ngx_ioa_parse_sid(str.data, str.len, &sid) != NGX_OK)
        {
            goto bad;
        }

        if (!cl->rooms_loaded) {
            cl->since = sid;
            cl->has_since = 1;

        } else {
            for (q = ngx_queue_head(&cl->links);
                 q != ngx_queue_sentinel(&cl->links);
                 q = ngx_queue_next(q))
            {
                lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);
                ngx_ioa_link_resume(lk, &sid);
            }
        }
    }

    for (i = 0; rooms && i < rooms->u.object.len; i++) {
        v = rooms->u.object.values[i];

        comm_id.data = (u_char *) rooms->u.object.keys[i];
        comm_id.len = ngx_strlen(comm_id.data);

        if (ngx_ioa_json_string(v, &str) != NGX_OK
            || ngx_ioa_parse_sid(str.data, str.len, &sid) != NGX_OK)
        {
            goto bad;
        }

        if (!cl->rooms_loaded) {
            /* the room list is still loading: it starts from here */

            if (cl->resume == NULL) {
                cl->resume = ngx_array_create(cl->pool, 4,
                                              sizeof(ngx_ioa_resume_t));
                if (cl->resume == NULL) {
                    return;
                }
            }

            res = ngx_array_push(cl->resume);
            if (res == NULL) {
                return;
            }

            res->comm_id.data = ngx_pstrdup(cl->pool, &comm_id);
            if (res->comm_id.data == NULL) {
                return;
            }

            res->comm_id.len = comm_id.len;
            res->sid = sid;
            continue;
        }

        for (q = ngx_queue_head(&cl->links);
             q != ngx_queue_sentinel(&cl->links);
             q = ngx_queue_next(q))
        {
            lk = ngx_queue_data(q, ngx_ioa_link_t, client_q);

            if (lk->room->sn.str.len == comm_id.len
                && ngx_strncmp(lk->room->sn.str.data, comm_id.data,
                               comm_id.len) == 0)
            {
                break;
            }
        }

        if (q == ngx_queue_sentinel(&cl->links)) {
            ngx_ioa_error_set(&err, "not_member", "rooms",
                              "\"%V\" is not a member of room \"%V\"",
                              &cl->name, &comm_id);
            ngx_ioa_client_error(cl, &err, &comm_id);
            continue;
        }

        ngx_ioa_link_resume(lk, &sid);
    }

    return;

bad:

    ngx_ioa_error_set(&err, "bad_resume", "rooms",
                      "resume takes {\"rooms\":{\"<comm_id>\":\"<id>\"}} "
                      "and/or {\"since\":\"<id>\"} with Stream ids such as "
                      "1700000000000-0");
    ngx_ioa_client_error(cl, &err, NULL);
}


static void
ngx_ioa_link_resume(ngx_ioa_link_t *lk, ngx_ioa_sid_t *sid)
{
    ngx_ioa_error_t  err;

    if (ngx_ioa_sid_cmp(&lk->last, &lk->first) != 0) {
        ngx_ioa_error_set(&err, "resume_too_late", "rooms",
                          "room \"%V\" already delivered live envelopes to "
                          "this connection; resume with resume= in the URL, "
                          "or connect with wait_resume=1 and send the resume "
                          "frame first", &lk->room->sn.str);
        ngx_ioa_client_error(lk->client, &err, &lk->room->sn.str);
        return;
    }

    lk->last = *sid;
    lk->first = *sid;

    if (lk->state != NGX_IOA_LINK_WAIT_SUB) {
        ngx_ioa_link_catchup(lk);
    }
}


void
ngx_ioa_client_error(ngx_ioa_client_t *cl, ngx_ioa_error_t *err,
    ngx_str_t *comm_id)
{
    ngx_str_t    out;
    ngx_pool_t  *pool;

    pool = ngx_create_pool(1024, cl->log);
    if (pool == NULL) {
        return;
    }

    if (ngx_ioa_error_json(pool, err, comm_id, &out) == NGX_OK) {
        (void) cl->transport->send_text(cl, &out);
    }

    ngx_destroy_pool(pool);
}


/* "<comm_id>:<id>,<comm_id>:<id>" (the resume= argument and the SSE
 * Last-Event-ID) */

ngx_int_t
ngx_ioa_client_parse_resume(ngx_ioa_client_t *cl, ngx_str_t *vec,
    ngx_ioa_error_t *err)
{
    u_char            *p, *last, *item, *colon;
    ngx_ioa_resume_t  *res;

    if (cl->resume == NULL) {
        cl->resume = ngx_array_create(cl->pool, 4, sizeof(ngx_ioa_resume_t));
        if (cl->resume == NULL) {
            return NGX_ERROR;
        }
    }

    p = vec->data;
    last = p + vec->len;

    while (p < last) {
        item = p;

        while (p < last && *p != ',') {
            p++;
        }

        colon = ngx_strlchr(item, p, ':');

        if (colon == NULL || colon == item) {
            goto bad;
        }

        res = ngx_array_push(cl->resume);
        if (res == NULL) {
            return NGX_ERROR;
        }

        res->comm_id.len = colon - item;
        res->comm_id.data = ngx_pnalloc(cl->pool, res->comm_id.len);
        if (res->comm_id.data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(res->comm_id.data, item, res->comm_id.len);

        if (ngx_ioa_parse_sid(colon + 1, p - colon - 1, &res->sid) != NGX_OK) {
            goto bad;
        }

        if (p < last) {
            p++;
        }
    }

    return NGX_OK;

bad:

    ngx_ioa_error_set(err, "bad_option", "resume",
                      "\"resume\" must look like <comm_id>:<id>,"
                      "<comm_id>:<id> with Stream ids such as "
                      "1700000000000-0");
    return NGX_ERROR;
}


/* messages */

static ngx_ioa_msg_t *
ngx_ioa_msg_create(ngx_str_t *comm_id, ngx_str_t *sid, ngx_str_t *json,
    ngx_uint_t feed)
{
    size_t          plen, hlen;
    u_char         *p, *s, *last;
    ngx_ioa_msg_t  *m;

    static u_char   sender[] = "{\"sender\":\"";
    static u_char   fe[] = "\"frontend_type\":\"message\",";

    if (json->len < 2 || json->data[0] != '{' || sid->len > 41) {
        return NULL;
    }

    /* {"id":"<sid>",["frontend_type":"message",]<rest of the envelope> */

    plen = sizeof("{\"id\":\"\",") - 1 + sid->len + json->len - 1
           + (feed ? sizeof(fe) - 1 : 0);

    hlen = ngx_ioa_ws_frame_header_len(plen);

    m = ngx_alloc(sizeof(ngx_ioa_msg_t) + hlen + plen + comm_id->len,
                  ngx_cycle->log);
    if (m == NULL) {
        return NULL;
    }

    ngx_memzero(m, sizeof(ngx_ioa_msg_t));

    if (ngx_ioa_parse_sid(sid->data, sid->len, &m->sid) != NGX_OK) {
        ngx_free(m);
        return NULL;
    }

    m->feed = feed;
    m->ws = (u_char *) (m + 1);
    m->ws_len = hlen + plen;

    p = ngx_ioa_ws_frame_header(m->ws, NGX_IOA_WS_TEXT, plen);

    m->payload = p;
    m->payload_len = plen;

    p = ngx_cpymem(p, "{\"id\":\"", sizeof("{\"id\":\"") - 1);
    p = ngx_cpymem(p, sid->data, sid->len);
    *p++ = '"';
    *p++ = ',';

    if (feed) {
        p = ngx_cpymem(p, fe, sizeof(fe) - 1);
    }

    s = p;
    p = ngx_cpymem(p, json->data + 1, json->len - 1);

    m->comm_id.data = p;
    m->comm_id.len = comm_id->len;
    ngx_memcpy(p, comm_id->data, comm_id->len);

    /* the sender, still JSON-escaped, for the echo check: our envelopes
     * always start with it */

    if (json->len > sizeof(sender) - 1
        && ngx_strncmp(json->data, sender, sizeof(sender) - 1) == 0)
    {
        s += sizeof(sender) - 2;
        last = m->payload + m->payload_len;
        m->sender.data = s;

        while (s < last && *s != '"') {
            if (*s == '\\') {
                s++;
            }

            s++;
        }

        m->sender.len = s - m->sender.data;
    }

    return m;
}


void
ngx_ioa_msg_release(ngx_ioa_msg_t *m)
{
    if (--m->refs) {
        return;
    }

    if (m->sse) {
        ngx_free(m->sse);
    }

    if (m->wsz) {
        ngx_ioa_ws_deflate_msg_free(m);
    }

    ngx_free(m);
}


ngx_int_t
ngx_ioa_msg_sse(ngx_ioa_msg_t *m)
{
    u_char  *p;

    if (m->sse) {
        return NGX_OK;
    }

    m->sse_len = sizeof("data: \n\n") - 1 + m->payload_len;

    m->sse = ngx_alloc(m->sse_len, ngx_cycle->log);
    if (m->sse == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(m->sse, "data: ", 6);
    p = ngx_cpymem(p, m->payload, m->payload_len);
    *p++ = '\n';
    *p++ = '\n';

    return NGX_OK;
}


/* helpers */

static ngx_int_t
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


ngx_int_t
ngx_ioa_parse_sid(u_char *p, size_t len, ngx_ioa_sid_t *sid)
{
    u_char    *last, *dash;
    uint64_t   ms, seq;

    last = p + len;
    dash = ngx_strlchr(p, last, '-');

    if (len == 0 || len > 41) {
        return NGX_ERROR;
    }

    ms = 0;
    seq = 0;

    if (dash == p) {
        return NGX_ERROR;
    }

    for ( /* void */ ; p < (dash ? dash : last); p++) {
        if (*p < '0' || *p > '9'
            || ms > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
        {
            return NGX_ERROR;
        }

        ms = ms * 10 + (*p - '0');
    }

    if (dash) {
        if (dash + 1 == last) {
            return NGX_ERROR;
        }

        for (p = dash + 1; p < last; p++) {
            if (*p < '0' || *p > '9'
                || seq > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
            {
                return NGX_ERROR;
            }

            seq = seq * 10 + (*p - '0');
        }
    }

    sid->ms = ms;
    sid->seq = seq;

    return NGX_OK;
}


u_char *
ngx_ioa_sid_print(u_char *p, ngx_ioa_sid_t *sid)
{
    return ngx_sprintf(p, "%uL-%uL", sid->ms, sid->seq);
}


static ngx_int_t
ngx_ioa_sid_cmp(ngx_ioa_sid_t *a, ngx_ioa_sid_t *b)
{
    if (a->ms != b->ms) {
        return a->ms < b->ms ? -1 : 1;
    }

    if (a->seq != b->seq) {
        return a->seq < b->seq ? -1 : 1;
    }

    return 0;
}
