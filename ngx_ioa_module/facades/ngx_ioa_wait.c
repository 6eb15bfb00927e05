
/*
 * Copyright (C) ioa authors
 *
 * A request that waits on a stream and answers once: IoA's blocking
 * /launch_goal (ngx_ioa_goal.c) and the A2A facade's blocking sends and
 * cancels (ngx_ioa_a2a_task.c) read a goal's feed this way.  The waiter is
 * a follower client of the room machinery whose transport reads each entry
 * as it comes (nothing ever queues), so a wait costs no polling and no
 * buffer, only its place in the room's links.
 *
 * The wait ends one of three ways, and the owner's code runs once:
 *   message(w, m)   an entry of the stream; the owner reads it, and when
 *                   it has its answer stops the wait (ngx_ioa_wait_stop)
 *                   before it answers
 *   closed(w, why)  the hub closed the follower (why: its reason), or the
 *                   timeout given to ngx_ioa_wait_start passed (why NULL);
 *                   the wait is stopped already
 *   the request goes away (the client left): the pool cleanup stops it,
 *                   and nothing is answered
 * Stopping detaches from the room before anything is written, since an
 * answer may finalize the request whose pool holds the client.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


static ngx_int_t ngx_ioa_wait_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m);
static ngx_int_t ngx_ioa_wait_text(ngx_ioa_client_t *cl, ngx_str_t *s);
static void ngx_ioa_wait_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason);
static size_t ngx_ioa_wait_queued(ngx_ioa_client_t *cl);
static void ngx_ioa_wait_timeout(ngx_event_t *ev);
static void ngx_ioa_wait_cleanup(void *data);


static ngx_ioa_transport_t  ngx_ioa_wait_transport = {
    ngx_ioa_wait_send,
    ngx_ioa_wait_text,
    ngx_ioa_wait_close,
    NULL,
    ngx_ioa_wait_queued,
    NGX_IOA_VIA_HTTP
};


/*
 * w->message, w->closed and w->data are the owner's; the stream is read
 * from its beginning, or after since; timeout 0: no limit.
 */

ngx_int_t
ngx_ioa_wait_start(ngx_ioa_wait_t *w, ngx_http_request_t *r,
    ngx_str_t *stream, ngx_ioa_sid_t *since, ngx_msec_t timeout)
{
    ngx_pool_cleanup_t  *cln;

    w->request = r;

    ngx_ioa_client_follower(&w->client, r, &ngx_ioa_wait_transport, w,
                            stream);

    if (since) {
        w->client.since = *since;
        w->client.has_since = 1;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_ioa_wait_cleanup;
    cln->data = w;

    w->timer.handler = ngx_ioa_wait_timeout;
    w->timer.data = w;
    w->timer.log = r->connection->log;

    if (timeout) {
        ngx_add_timer(&w->timer, timeout);
    }

    if (ngx_ioa_client_attach(&w->client) != NGX_OK) {
        return NGX_ERROR;
    }

    w->attached = 1;

    /* a client that goes away is noticed; its request cleanup detaches.
     * One that closed its side with the request's last bytes was told by
     * epoll then (pending_eof), and no event will tell of it again: the
     * read event is posted, so that ngx_http_test_reading() sees it */
    r->read_event_handler = ngx_http_test_reading;

    if (r->connection->read->pending_eof) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    }

    return NGX_OK;
}


/* the wait is over: no more messages, no timeout; idempotent */

void
ngx_ioa_wait_stop(ngx_ioa_wait_t *w)
{
    w->done = 1;

    if (w->attached) {
        w->attached = 0;
        ngx_ioa_client_detach(&w->client);
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    if (w->request) {
        w->request->read_event_handler = ngx_http_block_reading;
    }
}


static ngx_int_t
ngx_ioa_wait_send(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m)
{
    ngx_ioa_wait_t *w = cl->data;

    if (w->done) {
        return NGX_OK;
    }

    return w->message(w, m);
}


static ngx_int_t
ngx_ioa_wait_text(ngx_ioa_client_t *cl, ngx_str_t *s)
{
    return NGX_OK;
}


static void
ngx_ioa_wait_close(ngx_ioa_client_t *cl, ngx_uint_t code,
    const char *reason)
{
    ngx_ioa_wait_t *w = cl->data;

    if (w->done) {
        return;
    }

    ngx_ioa_wait_stop(w);

    w->closed(w, reason ? reason : "closed");
}


/* a waiter reads each message as it comes: nothing ever queues */

static size_t
ngx_ioa_wait_queued(ngx_ioa_client_t *cl)
{
    return 0;
}


static void
ngx_ioa_wait_timeout(ngx_event_t *ev)
{
    ngx_ioa_wait_t *w = ev->data;

    ngx_connection_t  *c;

    if (w->done) {
        return;
    }

    c = w->request->connection;

    ngx_ioa_wait_stop(w);

    w->closed(w, NULL);

    ngx_http_run_posted_requests(c);
}


static void
ngx_ioa_wait_cleanup(void *data)
{
    ngx_ioa_wait_t *w = data;

    w->request = NULL;

    ngx_ioa_wait_stop(w);
}
