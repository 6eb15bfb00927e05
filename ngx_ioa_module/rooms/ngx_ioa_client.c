
/*
 * Copyright (C) ioa authors
 *
 * Clients inside one nginx worker: whatever reads rooms, over any
 * transport (a WebSocket, an SSE stream, one HTTP request).  Three kinds:
 *
 *   - an agent: a name, in the rooms its registry entry lists
 *     (<prefix>{reg}:rooms:<name>, read in batches by agent_rooms.lua),
 *     linked to each of them (ngx_ioa_link.c);
 *   - an observer: the feed of every room (ngx_ioa_observer.c);
 *   - a follower: one stream, such as a goal's feed.
 *
 * Where an agent's rooms start: on the first load, at the moment it
 * connected, or where it says it stopped (resume= in the URL, a resume
 * frame, Last-Event-ID), room by room; a room found on a later load (a
 * teamup event that was missed) from its beginning; a room it resumes
 * and is not in is looked up as an expired room (ngx_ioa_retention.c), and
 * if it is one the client gets room_expired.  A client connecting
 * with wait_resume=1 has its rooms loaded only after its first frame, so
 * that frame can be the resume.  Envelopes an agent sends before its rooms
 * are loaded are held, bounded like its send queue, and posted in order
 * once they are (see ngx_ioa_client_post).
 *
 * Agents are also counted by name in this worker (ngx_ioa_agent_t): the
 * first connection of a name marks it online in the registry, the last one
 * to leave marks it offline, and the tick renews every local name.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"
#include "ngx_ioa_ws_frame.h"


/* rooms an agent_rooms.lua batch asks for (see there) */
#define NGX_IOA_ROOMS_BATCH      "100"


static ngx_uint_t ngx_ioa_client_series(ngx_ioa_client_t *cl);
static void ngx_ioa_client_replay(ngx_ioa_client_t *cl);
static void ngx_ioa_client_rooms_reply(redisReply *reply, void *data);


static ngx_rbtree_t        ngx_ioa_agents;
static ngx_rbtree_node_t   ngx_ioa_agents_sentinel;
static ngx_uint_t          ngx_ioa_nclients;

/* clients waiting for the command connection to load their rooms */
static ngx_queue_t         ngx_ioa_wait_clients;


ngx_int_t
ngx_ioa_client_init(ngx_cycle_t *cycle)
{
    ngx_rbtree_init(&ngx_ioa_agents, &ngx_ioa_agents_sentinel,
                    ngx_str_rbtree_insert_value);
    ngx_queue_init(&ngx_ioa_wait_clients);

    return NGX_OK;
}


ngx_uint_t
ngx_ioa_local_clients(void)
{
    return ngx_ioa_nclients;
}


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
    cl->lcf = ngx_ioa_loc_conf(r);
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
        ngx_ioa_observer_attach(cl);
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

    ngx_ioa_expiry_stop(cl);

    ngx_ioa_stat_add(NGX_IOA_STAT_CONNECTIONS + ngx_ioa_client_series(cl), -1);

    if (cl->rooms_req) {
        ngx_ioa_redis_cancel(cl->rooms_req);
        cl->rooms_req = NULL;
    }

    ngx_ioa_client_gone_free(cl);

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

    if (cl->kind == NGX_IOA_CLIENT_OBSERVER) {
        ngx_ioa_observer_detach(cl);
        return;
    }

    ngx_queue_remove(&cl->agent_q);

    a = ngx_ioa_agent_get(&cl->name, 0);

    if (a && --a->n == 0) {
        ngx_ioa_presence_set(&cl->name, 1, 0);
        ngx_rbtree_delete(&ngx_ioa_agents, &a->sn.node);
        ngx_free(a);
    }
}


ngx_ioa_agent_t *
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

void
ngx_ioa_client_load_rooms(ngx_ioa_client_t *cl)
{
    ngx_ioa_args_t  a;

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

    ngx_ioa_args_init(&a);
    ngx_ioa_key_agent(&a, NGX_IOA_AGENT_ROOMS, &cl->name);
    ngx_ioa_args_cstr(&a, (const char *) cl->rooms_cursor);
    ngx_ioa_args_cstr(&a, NGX_IOA_ROOMS_BATCH);

    cl->rooms_req = ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_AGENT_ROOMS,
                                              ngx_ioa_client_rooms_reply, cl,
                                              1, &a);

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
                        res[j].linked = 1;
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

    /* a room the client resumes that it is not in: if it expired, it is
     * told so (a room that never was stays unmentioned, as before) */

    if (first && cl->resume) {
        res = cl->resume->elts;

        for (j = 0; j < cl->resume->nelts; j++) {
            if (!res[j].linked) {
                ngx_ioa_client_gone(cl, &res[j].comm_id, 0);
            }
        }
    }

    if (first) {
        ngx_ioa_client_replay(cl);
    }
}


void
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


/* the registry's events were not heard for a while: every agent's room list
 * is read again (rooms already linked are kept as they are) */

void
ngx_ioa_clients_reload_rooms(void)
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


/* the heartbeat that keeps this worker's agents "online" in the registry */

void
ngx_ioa_clients_presence(void)
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
 *
 * {"op":"token","token":"<JWT>"} is a fresh token for the connection
 * (ngx_ioa_expiry.c).
 */

void
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

    if (!(env->op.len == 6 && ngx_strncmp(env->op.data, "resume", 6) == 0)
        && !(env->op.len == 5 && ngx_strncmp(env->op.data, "token", 5) == 0))
    {
        ngx_ioa_error_set(&err, "unknown_op", "op",
                          "unknown control op \"%V\"; known: resume, token",
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

    if (env->op.len == 5) {
        /* a fresh token for the connection (ngx_ioa_expiry.c) */
        ngx_ioa_expiry_refresh(cl, doc, pool);
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
            res->linked = 0;
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
            /* room_expired if it expired, else not_member */
            ngx_ioa_client_gone(cl, &comm_id, 1);
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

        res->linked = 0;
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


/* the command connection is back: the room lists that could not be read */

void
ngx_ioa_clients_retry(void)
{
    ngx_queue_t       *q, waiting;
    ngx_ioa_client_t  *cl;

    /* a client whose room list still cannot be read (on a Cluster: the
     * registry's master is not up yet) queues itself again: take the
     * queue as it is now */

    if (ngx_queue_empty(&ngx_ioa_wait_clients)) {
        return;
    }

    waiting = ngx_ioa_wait_clients;
    waiting.next->prev = &waiting;
    waiting.prev->next = &waiting;
    ngx_queue_init(&ngx_ioa_wait_clients);

    while (!ngx_queue_empty(&waiting)) {
        q = ngx_queue_head(&waiting);
        ngx_queue_remove(q);
        cl = ngx_queue_data(q, ngx_ioa_client_t, wait_q);
        cl->wait_q.next = NULL;
        ngx_ioa_client_load_rooms(cl);
    }
}
