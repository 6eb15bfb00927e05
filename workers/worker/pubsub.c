/*
 * ioa-worker: being told when something a waiting goal waits for happens.
 *
 * A goal that waits (for an agent's answer in its room, a person's
 * message, a sub-goal's end, a cancel) holds no read of its own on Redis:
 * it watches channels, and a message on any of them wakes it.  The hub
 * already publishes everything a goal waits for:
 *
 *   P{room:<comm_id>}:ch        every envelope of the room (post.lua)
 *   P{room:goal-<child>}:ch     every event of a sub-goal's feed, its end
 *                               included (goal_event.lua)
 *   P{goal:<id>}:control        "cancel" (goal_cancel.lua) and "message",
 *                               a person's message (goal_message.lua)
 *
 * A wake says only "look again": the goal's next step reads the room, the
 * inbox and the meta record as it always does, so a message that is lost
 * (a broken subscriber connection, a slot that moved) costs time and
 * nothing else, and the engine's timer on every waiting goal bounds that
 * time (engine.c).  Nothing here ever reads a payload.
 *
 * One subscriber connection per server: on a standalone Redis one, on a
 * Cluster one per master, and a channel is a shard channel (SSUBSCRIBE, as
 * the hub SPUBLISHes) subscribed on the master of its slot.  Many goals may
 * watch a channel (a parent and its child watch the child's feed); it is
 * subscribed while anyone watches it and unsubscribed after the last one
 * leaves.
 *
 * Not missing the first message: a goal reads the room, then watches.
 * Whatever is posted after the subscription is confirmed wakes it; what
 * was posted between its read and the confirmation would not, so the
 * confirmation itself wakes every watcher of the channel once.  A watcher
 * that joins a channel already subscribed is woken at once for the same
 * reason.
 *
 * The replies of a subscriber connection come in the order of its
 * commands, with messages in between: the connection keeps the channels
 * of its SUBSCRIBE and UNSUBSCRIBE commands in order (ops), and each reply
 * that is not a message answers the oldest.  Every command names one
 * channel, so an error reply (MOVED: the slot is elsewhere) belongs to
 * exactly one.  A sunsubscribe nobody asked for (the slot moved away) puts
 * the channel back to be subscribed again where the map now says.
 *
 * A lost connection marks its channels unsubscribed and wakes all of their
 * watchers; the channels are subscribed again on a new connection, tried
 * every IW_PUBSUB_RETRY_MS.  Until then the engine wakes those goals on
 * its short timer (iw_pubsub_live() tells it), as a worker without
 * subscriptions would poll.
 */

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "ioa_key_slot.h"
#include "iw.h"


#define IW_PUBSUB_BUCKETS    4096      /* a power of two */
#define IW_PUBSUB_RETRY_MS   250


typedef struct iw_chan_s   iw_chan_t;
typedef struct iw_psconn_s iw_psconn_t;
typedef struct iw_psop_s   iw_psop_t;

struct iw_chan_s {
    iw_chan_t      *next;            /* the bucket's */
    char           *name;
    size_t          len;
    iw_watch_t     *watchers;
    iw_psconn_t    *conn;            /* subscribed or asked on, or NULL */
    int             live;            /* the subscription is confirmed */
    int             ops;             /* its commands not yet answered */
};

struct iw_psop_s {
    iw_psop_t      *next;
    iw_chan_t      *chan;
    int             subscribe;       /* 0: UNSUBSCRIBE */
};

struct iw_psconn_s {
    iw_psconn_t    *next;
    iw_rconn_t     *c;
    int             node;            /* cluster.c's, -1 standalone */
    iw_psop_t      *head;            /* commands sent, oldest first */
    iw_psop_t      *tail;
};


static iw_chan_t     *iw_chans[IW_PUBSUB_BUCKETS];
static size_t         iw_nchans;
static iw_psconn_t   *iw_psconns;
static struct event  *iw_pubsub_retry;


static iw_chan_t *iw_chan_get(const char *name, int create);
static void iw_chan_drop(iw_chan_t *ch);
static void iw_chan_wake(iw_chan_t *ch);
static void iw_chan_subscribe(iw_chan_t *ch);
static void iw_chan_send(iw_chan_t *ch, iw_psconn_t *p, int subscribe);
static iw_psconn_t *iw_psconn_for(int node);
static void iw_psconn_on_push(iw_rconn_t *c, redisReply *r);
static void iw_psconn_on_close(iw_rconn_t *c, const char *why);
static void iw_pubsub_on_retry(evutil_socket_t fd, short what, void *arg);
static void iw_pubsub_later(void);


void
iw_pubsub_watch(iw_watch_t *w, const char *channel)
{
    iw_chan_t  *ch;

    ch = iw_chan_get(channel, 1);

    w->chan = ch;
    w->next = ch->watchers;
    ch->watchers = w;

    if (ch->live) {
        /* anything posted before this line would be missed: look now */
        w->wake(w);
        return;
    }

    if (ch->conn == NULL) {
        iw_chan_subscribe(ch);
    }
}


void
iw_pubsub_unwatch(iw_watch_t *w)
{
    iw_chan_t   *ch;
    iw_watch_t **pw;

    ch = w->chan;

    if (ch == NULL) {
        return;
    }

    for (pw = &ch->watchers; *pw; pw = &(*pw)->next) {
        if (*pw == w) {
            *pw = w->next;
            break;
        }
    }

    w->chan = NULL;
    w->next = NULL;

    if (ch->watchers) {
        return;
    }

    if (ch->conn && ch->live) {
        iw_chan_send(ch, ch->conn, 0);
        return;
    }

    if (ch->ops == 0) {
        iw_chan_drop(ch);
    }

    /* else the answer to its SUBSCRIBE is on its way: dropped then */
}


/* whether w's channel is subscribed now: a message would reach it */

int
iw_pubsub_live(iw_watch_t *w)
{
    return w->chan && w->chan->live;
}


/* subscriptions a Redis that was lost and found again no longer holds
 * are asked for again at once (redis.c's connection is new, and so is
 * the slot map) */

void
iw_pubsub_reconnected(void)
{
    size_t      i;
    iw_chan_t  *ch;

    for (i = 0; i < IW_PUBSUB_BUCKETS; i++) {
        for (ch = iw_chans[i]; ch; ch = ch->next) {
            if (ch->conn == NULL && ch->watchers) {
                iw_chan_subscribe(ch);
            }
        }
    }
}


/* every subscriber connection closed, every channel forgotten (exit) */

void
iw_pubsub_close(void)
{
    size_t        i;
    iw_chan_t    *ch, *next;
    iw_psop_t    *op;
    iw_psconn_t  *p;

    while ((p = iw_psconns) != NULL) {
        iw_psconns = p->next;

        while ((op = p->head) != NULL) {
            p->head = op->next;
            free(op);
        }

        p->c->on_close = NULL;
        p->c->push = NULL;
        iw_rconn_close(p->c, "closed");
        free(p);
    }

    for (i = 0; i < IW_PUBSUB_BUCKETS; i++) {
        for (ch = iw_chans[i]; ch; ch = next) {
            next = ch->next;
            free(ch->name);
            free(ch);
        }

        iw_chans[i] = NULL;
    }

    iw_nchans = 0;

    if (iw_pubsub_retry) {
        event_free(iw_pubsub_retry);
        iw_pubsub_retry = NULL;
    }
}


size_t
iw_pubsub_channels(void)
{
    return iw_nchans;
}


/* FNV-1a: channels are short and the table only needs a spread */

static iw_chan_t **
iw_chan_bucket(const char *name, size_t len)
{
    size_t    i;
    unsigned  h;

    h = 2166136261u;

    for (i = 0; i < len; i++) {
        h = (h ^ (unsigned char) name[i]) * 16777619u;
    }

    return &iw_chans[h & (IW_PUBSUB_BUCKETS - 1)];
}


static iw_chan_t *
iw_chan_get(const char *name, int create)
{
    size_t       len;
    iw_chan_t   *ch, **b;

    len = strlen(name);
    b = iw_chan_bucket(name, len);

    for (ch = *b; ch; ch = ch->next) {
        if (ch->len == len && memcmp(ch->name, name, len) == 0) {
            return ch;
        }
    }

    if (!create) {
        return NULL;
    }

    ch = ioa_calloc(sizeof(iw_chan_t));
    ch->name = ioa_strndup(name, len);
    ch->len = len;
    ch->next = *b;
    *b = ch;
    iw_nchans++;

    return ch;
}


static void
iw_chan_drop(iw_chan_t *ch)
{
    iw_chan_t  **pp;

    for (pp = iw_chan_bucket(ch->name, ch->len); *pp; pp = &(*pp)->next) {
        if (*pp == ch) {
            *pp = ch->next;
            free(ch->name);
            free(ch);
            iw_nchans--;
            return;
        }
    }
}


/* the watchers are woken from a copy of the list: a wake may unwatch */

static void
iw_chan_wake(iw_chan_t *ch)
{
    size_t       n, i;
    iw_watch_t  *w, **v;

    for (n = 0, w = ch->watchers; w; w = w->next) {
        n++;
    }

    if (n == 0) {
        return;
    }

    v = ioa_alloc(n * sizeof(iw_watch_t *));

    for (i = 0, w = ch->watchers; w; w = w->next) {
        v[i++] = w;
    }

    for (i = 0; i < n; i++) {
        v[i]->wake(v[i]);
    }

    free(v);
}


static void
iw_chan_subscribe(iw_chan_t *ch)
{
    int           node;
    iw_psconn_t  *p;

    if (!iw_redis_connected()) {
        iw_pubsub_later();
        return;
    }

    node = -1;

    if (iw_redis_cluster()) {
        node = iw_cluster_node_of((int) ioa_key_slot(ch->name, ch->len));
        if (node < 0) {
            iw_pubsub_later();
            return;
        }
    }

    p = iw_psconn_for(node);
    if (p == NULL) {
        iw_pubsub_later();
        return;
    }

    iw_chan_send(ch, p, 1);
}


static void
iw_chan_send(iw_chan_t *ch, iw_psconn_t *p, int subscribe)
{
    int         len;
    char       *cmd;
    iw_psop_t  *op;
    const char *verb;

    if (iw_redis_cluster()) {
        verb = subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE";

    } else {
        verb = subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE";
    }

    len = redisFormatCommand(&cmd, "%s %b", verb, ch->name, ch->len);
    if (len < 0) {
        ioa_fatal("redis: cannot format %s", verb);
    }

    op = ioa_alloc(sizeof(iw_psop_t));
    op->next = NULL;
    op->chan = ch;
    op->subscribe = subscribe;

    if (p->tail) {
        p->tail->next = op;

    } else {
        p->head = op;
    }

    p->tail = op;

    ch->ops++;
    ch->conn = p;

    if (!subscribe) {
        ch->live = 0;
    }

    iw_rconn_send(p->c, cmd, (size_t) len, NULL, 0);
    free(cmd);
}


static iw_psconn_t *
iw_psconn_for(int node)
{
    int           port;
    const char   *host;
    iw_rconn_t   *c;
    iw_psconn_t  *p;

    for (p = iw_psconns; p; p = p->next) {
        if (p->node == node) {
            return p;
        }
    }

    if (node >= 0) {
        if (iw_cluster_node_addr(node, &host, &port) != IW_OK) {
            return NULL;
        }

    } else if (iw_redis_standalone_addr(&host, &port) != IW_OK) {
        return NULL;
    }

    c = iw_redis_open(host, port, iw_psconn_on_close);
    if (c == NULL) {
        return NULL;
    }

    p = ioa_calloc(sizeof(iw_psconn_t));
    p->c = c;
    p->node = node;
    c->push = iw_psconn_on_push;
    c->data = p;
    p->next = iw_psconns;
    iw_psconns = p;

    return p;
}


/* ["message", channel, payload], ["smessage", ...], or the answer to the
 * oldest command: ["(s)subscribe", channel, n], ["(s)unsubscribe", ...],
 * an error */

static void
iw_psconn_on_push(iw_rconn_t *c, redisReply *r)
{
    int           asked, refused;
    iw_psop_t    *op;
    iw_chan_t    *ch;
    iw_psconn_t  *p;
    const char   *kind;

    p = c->data;
    kind = NULL;
    ch = NULL;

    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2
        && r->element[0]->type == REDIS_REPLY_STRING)
    {
        kind = r->element[0]->str;

        if (r->element[1]->type == REDIS_REPLY_STRING) {
            ch = iw_chan_get(r->element[1]->str, 0);
        }
    }

    if (kind && (strcmp(kind, "message") == 0
                 || strcmp(kind, "smessage") == 0))
    {
        if (ch) {
            iw_chan_wake(ch);
        }

        freeReplyObject(r);
        return;
    }

    /* a sunsubscribe the slot's move caused answers nothing we sent */
    op = p->head;
    asked = op != NULL;

    if (kind && strstr(kind, "unsubscribe")
        && (op == NULL || op->subscribe || op->chan != ch))
    {
        asked = 0;
    }

    if (!asked) {
        if (ch && ch->conn == p) {
            ch->live = 0;
            ch->conn = NULL;

            if (ch->watchers) {
                iw_chan_wake(ch);
                iw_chan_subscribe(ch);
            }
        }

        freeReplyObject(r);
        return;
    }

    p->head = op->next;
    if (p->head == NULL) {
        p->tail = NULL;
    }

    ch = op->chan;
    ch->ops--;
    refused = 0;

    if (op->subscribe && kind && strstr(kind, "subscribe")
        && !strstr(kind, "unsubscribe"))
    {
        ch->live = 1;
        iw_chan_wake(ch);

    } else if (op->subscribe) {
        /* refused (MOVED, on a Cluster): where the map says, a moment
         * later; the command's error says why */
        iw_warn("redis %s:%d: cannot subscribe to %s: %s", c->host, c->port,
                ch->name, r->type == REDIS_REPLY_ERROR ? r->str
                                                       : "unexpected reply");
        ch->conn = NULL;
        ch->live = 0;
        refused = 1;

    } else {
        ch->live = 0;
        ch->conn = NULL;
    }

    free(op);
    freeReplyObject(r);

    if (ch->ops > 0) {
        return;                         /* its next answer decides */
    }

    if (ch->watchers == NULL) {
        if (ch->live) {
            iw_chan_send(ch, p, 0);     /* nobody wants it any more */

        } else {
            iw_chan_drop(ch);
        }

        return;
    }

    if (ch->conn == NULL) {
        if (refused) {
            iw_pubsub_later();

        } else {
            iw_chan_subscribe(ch);      /* unsubscribed, then watched */
        }
    }
}


static void
iw_psconn_on_close(iw_rconn_t *c, const char *why)
{
    size_t        i;
    iw_psop_t    *op;
    iw_chan_t    *ch, *next;
    iw_psconn_t  *p, **pp;

    p = c->data;

    for (pp = &iw_psconns; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }

    while ((op = p->head) != NULL) {
        p->head = op->next;
        op->chan->ops--;
        free(op);
    }

    iw_warn("redis subscriber connection lost (%s:%d): %s", c->host,
            c->port, why);

    for (i = 0; i < IW_PUBSUB_BUCKETS; i++) {
        for (ch = iw_chans[i]; ch; ch = next) {
            next = ch->next;

            if (ch->conn != p) {
                continue;
            }

            ch->conn = NULL;
            ch->live = 0;

            if (ch->watchers == NULL) {
                if (ch->ops == 0) {
                    iw_chan_drop(ch);
                }

                continue;
            }

            iw_chan_wake(ch);
        }
    }

    free(p);

    iw_pubsub_later();
}


static void
iw_pubsub_later(void)
{
    if (iw_pubsub_retry == NULL) {
        iw_pubsub_retry = evtimer_new(iw_loop, iw_pubsub_on_retry, NULL);

        if (iw_pubsub_retry == NULL) {
            ioa_fatal("libevent: cannot allocate a timer");
        }
    }

    if (!evtimer_pending(iw_pubsub_retry, NULL)) {
        iw_timer_set(iw_pubsub_retry, IW_PUBSUB_RETRY_MS);
    }
}


static void
iw_pubsub_on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    (void) arg;

    iw_pubsub_reconnected();
}
