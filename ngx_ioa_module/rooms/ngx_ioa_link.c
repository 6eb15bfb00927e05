
/*
 * Copyright (C) ioa authors
 *
 * Links, catch-up and fan-out: how an envelope published in a room reaches
 * every local client in it exactly once and in order.  This is the hot
 * path: ngx_ioa_room_deliver() takes each envelope of a room's channel
 * (its subscription's message handler, ngx_ioa_room.c), builds it once
 * (ngx_ioa_msg_create) and hands it to each link of the room.
 *
 * Every envelope is appended to its room's Stream and published on the
 * room's channel by one Lua script (post.lua), so a published envelope is
 * always already in the Stream; the Stream is what makes delivery exact:
 *
 *   - each (client, room) pair is a link holding the last id delivered;
 *   - a link starts in WAIT_SUB until the worker's subscription to the room
 *     is confirmed (ngx_ioa_room.c), then CATCHING: it reads the Stream
 *     after its last id (XRANGE, in batches) while live traffic for it is
 *     held back, then releases what was held with ids above the last one
 *     and goes LIVE;
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
 * NGX_IOA_CATCHUP_BYTES of envelopes (half the client's catch-up window if
 * that is less), counted from the room's typical envelope
 * (ioa_catchup_batch at most).  Unmetered, a thousand rooms of
 * 1 MiB envelopes asked for gigabytes in one pipeline: Redis built every
 * reply before writing the first, stayed silent past ioa_redis_timeout,
 * the connection was dropped, and the same reads were sent again.  A
 * catch-up also pauses while its client has its window
 * (ioa_catchup_window) queued, and reads on once the client has taken half
 * of it: what a stream that never reads holds is that window and one read,
 * whatever the room's size.
 *
 * Messages are built once per worker (ngx_ioa_msg_t, reference counted):
 * the WebSocket frame header is written right in front of the JSON, so one
 * buffer is the frame every recipient's socket sends; clients that agreed
 * on permessage-deflate share one compressed frame, built the first time
 * one of them needs it (ngx_ioa_ws_deflate.c).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"
#include "ngx_ioa_ws_frame.h"


/* catch-up reads in flight per worker, and the bytes each asks for */
#define NGX_IOA_CATCHUP_SLOTS    16
#define NGX_IOA_CATCHUP_BYTES    (1024 * 1024)


static void ngx_ioa_link_catchup_read(ngx_ioa_link_t *lk);
static void ngx_ioa_catchup_slot_free(void);
static void ngx_ioa_room_entry_seen(ngx_ioa_room_t *room, size_t len);
static void ngx_ioa_link_catchup_reply(redisReply *reply, void *data);
static void ngx_ioa_link_live(ngx_ioa_link_t *lk);
static ngx_int_t ngx_ioa_link_deliver(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_link_hold(ngx_ioa_link_t *lk, ngx_ioa_msg_t *m);
static void ngx_ioa_link_check_gap(ngx_ioa_link_t *lk, redisReply *fields,
    ngx_str_t *sid);


/* links waiting for the command connection */
static ngx_array_t        *ngx_ioa_wait_links;
/* catch-up reads in flight, and the links waiting for one (catchup_q) */
static ngx_uint_t          ngx_ioa_catchups;
static ngx_queue_t         ngx_ioa_catchup_queue;


ngx_int_t
ngx_ioa_link_init(ngx_cycle_t *cycle)
{
    ngx_queue_init(&ngx_ioa_catchup_queue);

    ngx_ioa_wait_links = ngx_array_create(cycle->pool, 16,
                                          sizeof(ngx_ioa_link_t *));
    if (ngx_ioa_wait_links == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
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

    lk->state = NGX_IOA_LINK_WAIT_SUB;

    ngx_ioa_room_link_added(room);

    if (ngx_ioa_sub_active(&room->sub)) {
        ngx_ioa_link_catchup(lk);
    }

    return NGX_OK;
}


void
ngx_ioa_link_free(ngx_ioa_link_t *lk)
{
    ngx_uint_t        i;
    ngx_ioa_link_t  **w;

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

    ngx_ioa_room_link_removed(lk->room);
}


void
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

void
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

        if (!ngx_ioa_sub_active(&lk->room->sub)) {
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
    size_t            bytes;
    ngx_uint_t        n;
    ngx_ioa_args_t    a;
    ngx_ioa_link_t  **w;

    /*
     * About half the client's catch-up window, NGX_IOA_CATCHUP_BYTES at
     * most, one envelope at least: the reply waits in hiredis' reader
     * until it is queued, so a read the size of the window would double
     * what a stream that never reads holds.
     */

    n = lk->client->lcf->catchup_batch;
    bytes = ngx_min(NGX_IOA_CATCHUP_BYTES,
                    lk->client->lcf->catchup_window / 2);

    if (lk->room->entry_len && bytes / lk->room->entry_len < n) {
        n = ngx_max(bytes / lk->room->entry_len, 1);
    }

    lk->count = n;

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "XRANGE");
    ngx_ioa_args_str(&a, &lk->room->log_key);

    if (lk->last.seq == (uint64_t) -1) {
        /* Redis cannot step past the largest sequence of a millisecond
         * itself: "after <ms>-max" is "from <ms+1>-0" */
        ngx_ioa_args_fmt(&a, "%uL-0", lk->last.ms + 1);

    } else {
        /* exclusive, as ngx_ioa_sid_print() writes an id */
        ngx_ioa_args_fmt(&a, "(%uL-%uL", lk->last.ms, lk->last.seq);
    }

    ngx_ioa_args_cstr(&a, "+");
    ngx_ioa_args_cstr(&a, "COUNT");
    ngx_ioa_args_fmt(&a, "%ui", n);

    lk->req = ngx_ioa_redis_command_args(ngx_ioa_link_catchup_reply, lk, &a);

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

    if (!ngx_ioa_sub_active(&lk->room->sub)) {
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

        /* post.lua writes "e" first; "h" (the chain hash) and "p" (the
         * previous entry's id) follow */
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
         * close the very client that resumes to read it, and a thousand
         * streams that never read would each hold that much.  Once the
         * catch-up window (ioa_catchup_window) is queued, the catch-up
         * stops here (lk->last is the last entry queued) and reads on from
         * there when the client has taken half of it
         * (ngx_ioa_client_drained).  Live traffic stays held meanwhile, as
         * during any catch-up.  One envelope is always let through, so a
         * window smaller than an envelope still moves.
         */

        queued = cl->transport->queued(cl);

        if (queued && queued + f->len > cl->lcf->catchup_window) {
            lk->paused = 1;
            cl->catchup_paused = 1;
            return;
        }

        if (i == 0) {
            ngx_ioa_link_check_gap(lk, e->element[1], &sid);

            if (cl->closed) {
                return;
            }
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
 * The first entry a catch-up read returns, against where the link is: its
 * "p" (the id of the entry before it, see post.lua) above the link's last
 * id means the entries in between were in the room's log and are not any
 * more (ioa_room_log_maxlen trimmed them before this link read them: a
 * client away longer than the log lasts, or one whose catch-up could not
 * keep up with a room that fast).  They cannot be delivered; the client is
 * told which ones it missed instead of never learning of them.  Entries
 * appended before post.lua stored "p", and streams other scripts append
 * (a goal's feed), have no "p" and are not checked.
 */

static void
ngx_ioa_link_check_gap(ngx_ioa_link_t *lk, redisReply *fields,
    ngx_str_t *sid)
{
    size_t            j;
    redisReply       *k, *v;
    ngx_ioa_sid_t     prev;
    ngx_ioa_error_t   err;

    v = NULL;

    for (j = 2; j + 1 < fields->elements; j += 2) {
        k = fields->element[j];
        v = fields->element[j + 1];

        if (k->type == REDIS_REPLY_STRING && k->len == 1 && k->str[0] == 'p'
            && v->type == REDIS_REPLY_STRING)
        {
            break;
        }
    }

    if (v == NULL || j + 1 >= fields->elements
        || ngx_ioa_parse_sid((u_char *) v->str, v->len, &prev) != NGX_OK
        || ngx_ioa_sid_cmp(&prev, &lk->last) <= 0)
    {
        return;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_TRIMMED, 1);

    ngx_ioa_error_set(&err, "log_trimmed", "comm_id",
                      "room \"%V\" no longer holds the envelopes after "
                      "%uL-%uL up to %*s: its log (ioa_room_log_maxlen) "
                      "dropped them before this connection read them; "
                      "delivery goes on from %V",
                      &lk->room->sn.str, lk->last.ms, lk->last.seq,
                      v->len, v->str, sid);
    ngx_ioa_client_error(lk->client, &err, &lk->room->sn.str);
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


void
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


void
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


/* "<id> <envelope json>", as post.lua publishes it */

ngx_int_t
ngx_ioa_msg_split(ngx_str_t *data, ngx_str_t *sid, ngx_str_t *json)
{
    u_char  *sp;

    sp = ngx_strlchr(data->data, data->data + data->len, ' ');
    if (sp == NULL) {
        return NGX_DECLINED;
    }

    sid->data = data->data;
    sid->len = sp - data->data;
    json->data = sp + 1;
    json->len = data->data + data->len - json->data;

    return NGX_OK;
}


/* a message on the room's channel, to each of its links */

void
ngx_ioa_room_deliver(ngx_ioa_room_t *room, ngx_str_t *data)
{
    ngx_str_t          sid, json;
    ngx_queue_t       *q, *next;
    ngx_ioa_msg_t     *m;
    ngx_ioa_link_t    *lk;

    if (room->nlinks == 0 || ngx_ioa_msg_split(data, &sid, &json) != NGX_OK) {
        return;
    }

    ngx_ioa_room_entry_seen(room, json.len);
    ngx_ioa_linger_note();

    m = ngx_ioa_msg_create(&room->sn.str, &sid, &json, 0);
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


ngx_ioa_msg_t *
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


ngx_int_t
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


/* the command connection is back: the catch-ups that could not be sent */

void
ngx_ioa_links_retry(void)
{
    ngx_uint_t        i, n;
    ngx_ioa_link_t  **w, *lk;

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

        if (ngx_ioa_sub_active(&lk->room->sub)) {
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
