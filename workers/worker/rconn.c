/*
 * ioa-worker: one Redis connection on the event loop.
 *
 * A connection carries requests in order: each is a formatted command
 * (hiredis' RESP bytes) and a request object the caller owns, linked into
 * the connection's queue until its reply is in.  Redis answers a
 * connection's commands in the order they came, so the first reply read
 * belongs to the oldest request: the queue is all the bookkeeping there is.
 *
 *   iw_rconn_open()   a non-blocking connect (hiredis' redisConnectNonBlock)
 *   iw_rconn_send()   append the command to the output buffer and link the
 *                     request; the bytes go out when the socket is writable,
 *                     so every command one loop turn sends leaves in one
 *                     write (a turn's commands are pipelined for free)
 *   reply             the oldest request is unlinked and its done() handler
 *                     called with the reply, which it then owns
 *   iw_rconn_close()  the connection's close handler runs once, then every
 *                     request still queued gets done(q, NULL)
 *
 * Why not hiredis' own async API: 0.14 frees each reply as soon as its
 * callback returns, and it has no timeout for a command or for a connect.
 * The worker keeps replies past the callback (a goal's step reads them when
 * all of its replies are in) and must notice a Redis that stops answering,
 * so the connection is ours, while hiredis still does the parts it is good
 * at: the connect, the output buffer, and the reply parser (redisReader).
 *
 * Time limits.  Each request carries its deadline.  Only the oldest one can
 * be overdue in a way that matters (the others cannot be answered before
 * it), so one timer per connection, set for the oldest request's deadline,
 * is enough; when it fires with that request still unanswered the
 * connection is closed as lost ("timeout"), which fails every request on
 * it.  A blocking read (XREAD BLOCK n) is given n more.  The connect is
 * timed the same way: until it completes, the commands wait in the output
 * buffer and the oldest one's deadline counts.
 *
 * A subscriber connection (pubsub.c) sets a push handler: Redis sends it
 * messages nobody asked for, so once the queue is empty (AUTH and CLIENT
 * SETNAME are answered first) every reply goes to the push handler, and
 * its SUBSCRIBE commands are sent without a request (q NULL).
 *
 * Closing from inside a done() handler (a handler that decides Redis is
 * broken) is safe: while replies are being handed out the connection only
 * marks itself closed, and the reading code frees it when it is back on
 * top.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "iw.h"


#define IW_RCONN_READ_MAX   64     /* replies handled per read event: a */
                                   /* pipeline of thousands does not keep */
                                   /* the loop from its other sockets */


static void iw_rconn_on_read(evutil_socket_t fd, short what, void *arg);
static void iw_rconn_on_write(evutil_socket_t fd, short what, void *arg);
static void iw_rconn_on_timer(evutil_socket_t fd, short what, void *arg);
static void iw_rconn_arm_timer(iw_rconn_t *c);
static int iw_rconn_connected(iw_rconn_t *c);
static void iw_rconn_fail(iw_rconn_t *c, const char *why);
static void iw_rconn_free(iw_rconn_t *c);


iw_rconn_t *
iw_rconn_open(const char *host, int port, iw_rconn_close_pt on_close,
    void *data)
{
    iw_rconn_t    *c;
    redisContext  *ctx;

    ctx = redisConnectNonBlock(host, port);

    if (ctx == NULL || ctx->err) {
        iw_warn("redis %s:%d: %s", host, port,
                ctx ? ctx->errstr : "cannot allocate a context");

        if (ctx) {
            redisFree(ctx);
        }

        return NULL;
    }

    (void) redisEnableKeepAlive(ctx);

    c = ioa_calloc(sizeof(iw_rconn_t));
    c->host = ioa_strdup(host);
    c->port = port;
    c->ctx = ctx;
    c->on_close = on_close;
    c->data = data;

    c->rev = event_new(iw_loop, ctx->fd, EV_READ | EV_PERSIST,
                       iw_rconn_on_read, c);
    c->wev = event_new(iw_loop, ctx->fd, EV_WRITE, iw_rconn_on_write, c);
    c->timer = evtimer_new(iw_loop, iw_rconn_on_timer, c);

    if (c->rev == NULL || c->wev == NULL || c->timer == NULL) {
        ioa_fatal("libevent: cannot allocate an event");
    }

    /* the first writable event says the connect is done (or failed) */
    (void) event_add(c->wev, NULL);

    return c;
}


/* queues the command; the reply (or NULL: the connection was lost) goes to
 * q->done.  timeout_ms counts from now. */

void
iw_rconn_send(iw_rconn_t *c, const char *cmd, size_t len, iw_rreq_t *q,
    long long timeout_ms)
{
    if (q == NULL) {
        /* a subscriber's command: its answers come to the push handler */
        if (!c->closed) {
            (void) redisAppendFormattedCommand(c->ctx, cmd, len);

            if (c->up) {
                (void) event_add(c->wev, NULL);
            }
        }

        return;
    }

    q->next = NULL;
    q->deadline = ioa_mono_ms() + timeout_ms;

    q->unsent = 0;

    if (c->closed
        || redisAppendFormattedCommand(c->ctx, cmd, len) != REDIS_OK)
    {
        /* as if sent and lost: the caller has one path for both */
        q->unsent = 1;
        q->done(q, NULL);
        return;
    }

    if (c->tail) {
        c->tail->next = q;

    } else {
        c->head = q;
        iw_rconn_arm_timer(c);
    }

    c->tail = q;

    if (c->up) {
        (void) event_add(c->wev, NULL);
    }
}


void
iw_rconn_close(iw_rconn_t *c, const char *why)
{
    iw_rconn_fail(c, why);

    if (!c->busy) {
        iw_rconn_free(c);
    }
}


static void
iw_rconn_on_write(evutil_socket_t fd, short what, void *arg)
{
    int          done;
    iw_rconn_t  *c;

    (void) fd;
    (void) what;

    c = arg;

    if (!c->up) {
        if (iw_rconn_connected(c) != IW_OK) {
            iw_rconn_close(c, c->ctx->errstr[0] ? c->ctx->errstr
                                                : "cannot connect");
            return;
        }

        c->up = 1;
        (void) event_add(c->rev, NULL);
    }

    done = 0;

    if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
        iw_rconn_close(c, c->ctx->errstr);
        return;
    }

    if (!done) {
        (void) event_add(c->wev, NULL);
    }
}


static void
iw_rconn_on_read(evutil_socket_t fd, short what, void *arg)
{
    int          n;
    void        *reply;
    iw_rreq_t   *q;
    iw_rconn_t  *c;

    (void) fd;
    (void) what;

    c = arg;

    if (redisBufferRead(c->ctx) != REDIS_OK) {
        iw_rconn_close(c, c->ctx->errstr[0] ? c->ctx->errstr : "closed");
        return;
    }

    c->busy = 1;

    for (n = 0; !c->closed; n++) {
        reply = NULL;

        if (redisGetReplyFromReader(c->ctx, &reply) != REDIS_OK) {
            iw_rconn_fail(c, c->ctx->errstr[0] ? c->ctx->errstr
                                               : "protocol error");
            break;
        }

        if (reply == NULL) {
            break;
        }

        q = c->head;

        if (q == NULL && c->push) {
            c->push(c, reply);

        } else if (q == NULL) {
            freeReplyObject(reply);
            iw_rconn_fail(c, "a reply nobody asked for");
            break;

        } else {
            c->head = q->next;
            if (c->head == NULL) {
                c->tail = NULL;
            }

            q->next = NULL;

            q->done(q, reply);
        }

        if (n + 1 >= IW_RCONN_READ_MAX) {
            /* more may be buffered in the reader: come back next turn
             * (the read event is persistent; activate it by hand) */
            event_active(c->rev, EV_READ, 0);
            break;
        }
    }

    c->busy = 0;

    if (c->closed) {
        iw_rconn_free(c);
        return;
    }

    iw_rconn_arm_timer(c);
}


static void
iw_rconn_on_timer(evutil_socket_t fd, short what, void *arg)
{
    iw_rconn_t  *c;

    (void) fd;
    (void) what;

    c = arg;

    if (c->head == NULL) {
        return;
    }

    if (ioa_mono_ms() < c->head->deadline) {
        iw_rconn_arm_timer(c);
        return;
    }

    iw_rconn_close(c, c->up ? "timeout: no reply in time"
                            : "timeout: the connect did not complete");
}


static void
iw_rconn_arm_timer(iw_rconn_t *c)
{
    if (c->head == NULL) {
        (void) evtimer_del(c->timer);
        return;
    }

    iw_timer_set(c->timer, c->head->deadline - ioa_mono_ms() + 1);
}


static int
iw_rconn_connected(iw_rconn_t *c)
{
    int        err;
    socklen_t  len;

    err = 0;
    len = sizeof(err);

    if (getsockopt(c->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
    }

    if (err) {
        snprintf(c->ctx->errstr, sizeof(c->ctx->errstr), "%s",
                 strerror(err));
        return IW_ERROR;
    }

    c->ctx->flags |= REDIS_CONNECTED;

    return IW_OK;
}


/* marks the connection closed and fails every request on it, once */

static void
iw_rconn_fail(iw_rconn_t *c, const char *why)
{
    iw_rreq_t  *q;

    if (c->closed) {
        return;
    }

    c->closed = 1;
    c->busy++;

    (void) event_del(c->rev);
    (void) event_del(c->wev);
    (void) evtimer_del(c->timer);

    /* the owner first, so that it no longer hands this connection out
     * (and says why) by the time the requests learn of the loss */
    if (c->on_close) {
        c->on_close(c, why && why[0] ? why : "closed");
    }

    while ((q = c->head) != NULL) {
        c->head = q->next;
        q->next = NULL;
        q->unsent = !c->up;
        q->done(q, NULL);
    }

    c->tail = NULL;

    c->busy--;
}


static void
iw_rconn_free(iw_rconn_t *c)
{
    event_free(c->rev);
    event_free(c->wev);
    event_free(c->timer);
    redisFree(c->ctx);
    free(c->host);
    free(c);
}
