
/*
 * Copyright (C) ioa authors
 *
 * hiredis async <-> nginx event loop.
 *
 * hiredis 0.14 ships adapters for libevent, libev and others but not for
 * nginx, so this file is one: it wraps the socket hiredis opened in an
 * ngx_connection_t and maps hiredis' five hooks onto nginx events.
 *
 * Events are registered level-triggered.  nginx normally uses edge-triggered
 * epoll for connections, but hiredis reads at most 16 KiB per call
 * (REDIS_READER_MAX_BUF) and cannot be told to read until EAGAIN, so with an
 * edge trigger a burst of pub/sub traffic larger than that would sit in the
 * kernel until the next packet.  Level triggering costs one extra epoll
 * wakeup per burst and removes the problem entirely.
 *
 * Writes are not registered with epoll at first.  hiredis asks for a write
 * event after every command it buffers; on a connected context that request
 * posts the write handler on ngx_posted_events instead, which nginx runs
 * after the I/O handlers and timers of the turn, so the commands of a turn
 * of the event loop leave together in one write() at its end, without two
 * epoll_ctl() calls per batch.  An envelope's EVALSHA thus leaves in the
 * turn that read its frame: an agent posting one envelope at a time costs
 * one epoll_wait() less per envelope than the "next" queue did.  Commands
 * are also issued outside the event loop, when graceful shutdown closes
 * idle connections from the worker's cycle; nginx 1.22 runs no posted event
 * there, so while exiting the write goes on ngx_posted_next_events, which
 * makes nginx poll without blocking.  Only when a write cannot finish (the
 * socket buffer is full: hiredis asks again from inside the write handler)
 * or while connecting is the socket watched for writability.
 *
 * Those 16 KiB reads are also why a read handler goes on reading while
 * hiredis holds an incomplete reply and the socket holds more (FIONREAD),
 * up to NGX_IOA_REDIS_READS_PER_EVENT reads: with one read per event a
 * 1 MiB pub/sub message took 64 turns of a loop that may be busy with a
 * thousand clients, and Redis, whose output buffer for the subscriber grew
 * meanwhile, closed the connection.  When every reply read was complete
 * the ioctl is skipped: that is the common case (one small reply, one
 * envelope), and if more came meanwhile the level-triggered event reports
 * it on the next turn.
 *
 * A pub/sub connection brings its own read handler (see ngx_ioa_redis.c:
 * it dispatches the replies itself); everything else is the same.
 *
 * hiredis owns the file descriptor: the cleanup hook only unhooks the
 * events and frees the ngx_connection_t, hiredis closes the socket itself
 * right after.  Cleanup may run inside one of our handlers (a read that
 * finds EOF frees the context), so handlers never touch the connection after
 * calling into hiredis.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_ioa.h"


static void ngx_ioa_redis_read_handler(ngx_event_t *ev);
static void ngx_ioa_redis_write_handler(ngx_event_t *ev);
static void ngx_ioa_redis_add_read(void *data);
static void ngx_ioa_redis_del_read(void *data);
static void ngx_ioa_redis_add_write(void *data);
static void ngx_ioa_redis_del_write(void *data);
static void ngx_ioa_redis_cleanup(void *data);


/* the connection whose write handler is running, see add_write */
static ngx_connection_t  *ngx_ioa_redis_writing;

/* the connection whose read handler is running; cleanup clears it, so the
 * handler knows when hiredis freed the context under it */
static ngx_connection_t  *ngx_ioa_redis_reading;


ngx_int_t
ngx_ioa_redis_attach(redisAsyncContext *ac, ngx_log_t *log,
    ngx_event_handler_pt read)
{
    ngx_connection_t  *c;

    if (ac->ev.data != NULL) {
        return NGX_ERROR;
    }

    c = ngx_get_connection(ac->c.fd, log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = ac;
    c->read->handler = read ? read : ngx_ioa_redis_read_handler;
    c->write->handler = ngx_ioa_redis_write_handler;
    c->read->log = log;
    c->write->log = log;

    ac->ev.data = c;
    ac->ev.addRead = ngx_ioa_redis_add_read;
    ac->ev.delRead = ngx_ioa_redis_del_read;
    ac->ev.addWrite = ngx_ioa_redis_add_write;
    ac->ev.delWrite = ngx_ioa_redis_del_write;
    ac->ev.cleanup = ngx_ioa_redis_cleanup;

    return NGX_OK;
}


/* bytes the socket holds that hiredis has not read yet */

size_t
ngx_ioa_redis_unread(redisAsyncContext *ac)
{
    int  n;

    if (ac->c.fd < 0 || ngx_socket_nread(ac->c.fd, &n) == -1 || n < 0) {
        return 0;
    }

    return (size_t) n;
}


/*
 * Read again now: hiredis holds part of a reply (a large one arrives in
 * 16 KiB reads) and the socket has more of it.  Complete replies only: the
 * level-triggered read event says so if more arrives.
 */

ngx_uint_t
ngx_ioa_redis_read_more(redisAsyncContext *ac)
{
    redisReader  *r;

    r = ac->c.reader;

    if (r == NULL || r->pos >= r->len) {
        return 0;
    }

    return ngx_ioa_redis_unread(ac) > 0;
}


static void
ngx_ioa_redis_read_handler(ngx_event_t *ev)
{
    ngx_uint_t          n;
    ngx_connection_t   *c;
    redisAsyncContext  *ac;

    c = ev->data;

    for (n = 0; n < NGX_IOA_REDIS_READS_PER_EVENT; n++) {
        ac = c->data;

        ngx_ioa_redis_reading = c;

        redisAsyncHandleRead(ac);

        if (ngx_ioa_redis_reading == NULL) {
            return;                 /* the context and c are gone */
        }

        ngx_ioa_redis_reading = NULL;

        if (!ngx_ioa_redis_read_more(ac)) {
            return;
        }
    }
}


static void
ngx_ioa_redis_write_handler(ngx_event_t *ev)
{
    ngx_connection_t   *c;
    redisAsyncContext  *ac;

    c = ev->data;

    ac = c->data;

    ngx_ioa_redis_writing = c;

    /* may free the context and with it c (cleanup then clears the flag) */
    redisAsyncHandleWrite(ac);

    if (ngx_ioa_redis_writing == NULL) {
        return;
    }

    ngx_ioa_redis_writing = NULL;

    /* room in hiredis' buffer: commands waiting for it join */
    ngx_ioa_redis_wrote(ac);
}


static void
ngx_ioa_redis_add_read(void *data)
{
    ngx_connection_t *c = data;

    if (!c->read->active) {
        (void) ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_ioa_redis_del_read(void *data)
{
    ngx_connection_t *c = data;

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, 0);
    }
}


static void
ngx_ioa_redis_add_write(void *data)
{
    ngx_connection_t *c = data;

    redisAsyncContext  *ac;

    if (c->write->active) {
        return;
    }

    ac = c->data;

    if (c != ngx_ioa_redis_writing && (ac->c.flags & REDIS_CONNECTED)) {

        /* at the end of this turn; see the comment on top */

        if (!c->write->posted) {
            ngx_post_event(c->write, ngx_exiting ? &ngx_posted_next_events
                                                 : &ngx_posted_events);
        }

        return;
    }

    (void) ngx_add_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
}


static void
ngx_ioa_redis_del_write(void *data)
{
    ngx_connection_t *c = data;

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    }

    /* a posted write stays: with nothing buffered it writes nothing */
}


static void
ngx_ioa_redis_cleanup(void *data)
{
    ngx_connection_t *c = data;

    redisAsyncContext  *ac;

    if (c == ngx_ioa_redis_reading) {
        ngx_ioa_redis_reading = NULL;
    }

    if (c == ngx_ioa_redis_writing) {
        ngx_ioa_redis_writing = NULL;
    }

    ac = c->data;
    ac->ev.data = NULL;

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, 0);
    }

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);

    /* hiredis closes the descriptor; a free connection has none */
    c->fd = (ngx_socket_t) -1;
}
