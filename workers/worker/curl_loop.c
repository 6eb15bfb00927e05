/*
 * ioa-worker: libcurl's multi interface on the event loop.
 *
 * libcurl's "multi_socket" API hands the program the sockets it waits on
 * and the one timeout it needs; the program waits for them in its own
 * loop and tells libcurl what happened.  Here that loop is loop.c's:
 *
 *   CURLMOPT_SOCKETFUNCTION  a libevent event per socket, kept by libcurl
 *                            with the socket (curl_multi_assign), changed
 *                            when libcurl wants to read, write, both or
 *                            neither;
 *   CURLMOPT_TIMERFUNCTION   one timer for the multi handle;
 *   either firing            curl_multi_socket_action(), then every
 *                            finished transfer is handed to its own done
 *                            handler (the transfer's CURLOPT_PRIVATE is an
 *                            iw_curl_xfer_t).
 *
 * So an LLM request in flight costs a socket watched by the loop and
 * nothing else, and any number of them share the process (and libcurl's
 * connection cache: keep-alive and TLS sessions survive from one request
 * to the next).
 */

#include <stdlib.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "iw.h"
#include "llm.h"


typedef struct {
    struct event  *ev;
    CURLM         *multi;
} iw_curl_sock_t;


static int iw_curl_on_socket(CURL *e, curl_socket_t s, int what, void *userp,
    void *socketp);
static int iw_curl_on_timer(CURLM *m, long timeout_ms, void *userp);
static void iw_curl_event(evutil_socket_t fd, short what, void *arg);
static void iw_curl_timeout(evutil_socket_t fd, short what, void *arg);
static void iw_curl_finished(CURLM *m);


static struct event  *iw_curl_timer;


/* m's sockets and timer from now on on the loop */

int
iw_curl_attach(void *m)
{
    iw_curl_timer = evtimer_new(iw_loop, iw_curl_timeout, m);

    if (iw_curl_timer == NULL) {
        return IW_ERROR;
    }

    curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, iw_curl_on_socket);
    curl_multi_setopt(m, CURLMOPT_SOCKETDATA, m);
    curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, iw_curl_on_timer);
    curl_multi_setopt(m, CURLMOPT_TIMERDATA, m);

    return IW_OK;
}


static int
iw_curl_on_socket(CURL *e, curl_socket_t s, int what, void *userp,
    void *socketp)
{
    short            kind;
    CURLM           *m;
    iw_curl_sock_t  *sock;

    (void) e;

    m = userp;
    sock = socketp;

    if (what == CURL_POLL_REMOVE) {
        if (sock) {
            event_free(sock->ev);
            free(sock);
            curl_multi_assign(m, s, NULL);
        }

        return 0;
    }

    kind = EV_PERSIST;
    kind |= (what & CURL_POLL_IN) ? EV_READ : 0;
    kind |= (what & CURL_POLL_OUT) ? EV_WRITE : 0;

    if (sock == NULL) {
        sock = ioa_calloc(sizeof(iw_curl_sock_t));
        sock->multi = m;
        curl_multi_assign(m, s, sock);

    } else {
        event_free(sock->ev);
    }

    sock->ev = event_new(iw_loop, s, kind, iw_curl_event, sock);

    if (sock->ev == NULL) {
        ioa_fatal("libevent: cannot allocate an event");
    }

    (void) event_add(sock->ev, NULL);

    return 0;
}


static int
iw_curl_on_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void) m;
    (void) userp;

    if (timeout_ms < 0) {
        (void) evtimer_del(iw_curl_timer);
        return 0;
    }

    iw_timer_set(iw_curl_timer, timeout_ms);

    return 0;
}


static void
iw_curl_event(evutil_socket_t fd, short what, void *arg)
{
    int              running, flags;
    iw_curl_sock_t  *sock;

    sock = arg;
    flags = 0;
    flags |= (what & EV_READ) ? CURL_CSELECT_IN : 0;
    flags |= (what & EV_WRITE) ? CURL_CSELECT_OUT : 0;

    /* sock may be freed inside (CURL_POLL_REMOVE): keep the handle */
    (void) curl_multi_socket_action(sock->multi, fd, flags, &running);
    iw_curl_finished(iw_curl_timer ? event_get_callback_arg(iw_curl_timer)
                                   : NULL);
}


static void
iw_curl_timeout(evutil_socket_t fd, short what, void *arg)
{
    int  running;

    (void) fd;
    (void) what;

    (void) curl_multi_socket_action(arg, CURL_SOCKET_TIMEOUT, 0, &running);
    iw_curl_finished(arg);
}


/* every transfer that ended, to its handler */

static void
iw_curl_finished(CURLM *m)
{
    int              left;
    char            *p;
    CURLMsg         *msg;
    iw_curl_xfer_t  *x;

    if (m == NULL) {
        return;
    }

    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }

        p = NULL;
        (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
        x = (iw_curl_xfer_t *) p;

        if (x && x->done) {
            x->done(x, msg->data.result);
        }
    }
}
