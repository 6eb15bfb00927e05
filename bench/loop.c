
/*
 * The event loop and the WebSocket client (RFC 6455).
 *
 * A connection goes
 *
 *   IDLE --start--> CONNECTING --writable, SO_ERROR 0--> HANDSHAKE
 *        --"101" + the right Sec-WebSocket-Accept--> OPEN
 *        --close frame sent (end of run)--> CLOSING --EOF--> CLOSED
 *
 * and any failure on the way (refused, timed out, a non-101 answer, a
 * protocol error, a close from the server while the run is on) closes it
 * and counts one error of its kind, keeping the first message for the
 * report.  Connections are never re-opened: a run with a lost connection
 * shows it as errors and lost messages, which is the point.
 *
 * epoll is level-triggered.  Each turn reads once from every readable
 * socket, lets the workload queue what it wants to send, then flushes every
 * socket that has output with one send(): whatever was queued for a socket
 * during a turn (its publisher's messages, pongs) leaves in one call and,
 * with TCP_NODELAY, in as few packets as the kernel can make of it.
 * EPOLLOUT is armed only while a send() left bytes behind.
 *
 * Reading: there is one read buffer for the whole process.  A socket's
 * bytes are read into it and complete frames are handed on where they lie
 * (parsed in place, no copy); only the partial frame a read ended in is kept
 * per connection, and copied in front of the next read.  Idle connections
 * therefore cost no buffer at all, and a busy one at most one frame.  A
 * fragmented message is the exception: it is assembled in a per-connection
 * buffer that grows to the largest one seen and is kept (servers under test
 * do not fragment; nchan and ioa send whole messages).
 *
 * Writing: frames are built straight into the connection's output buffer
 * (grown by doubling, reused once flushed, so there is no allocation per
 * message) and masked there.
 *
 * Source addresses: one source address has ~28,000 ephemeral ports towards
 * one server port (net.ipv4.ip_local_port_range), and ports in TIME_WAIT
 * from earlier runs count against it.  When connect() says EADDRNOTAVAIL
 * and the server is on loopback, the address is marked exhausted, the next
 * one (127.0.0.2, .3, ...; all of 127/8 is local) is added, and connections
 * are spread round-robin over the addresses still usable.  Binding uses
 * IP_BIND_ADDRESS_NO_PORT so the port is chosen at connect() time for the
 * 4-tuple, not reserved by bind() for the address alone.
 */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "ioa_bench.h"


#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT  24
#endif

#define IB_EVENTS           4096
/* bytes a single recv() may bring beyond a carried partial frame */
#define IB_READ_CHUNK       (256 * 1024)
#define IB_HANDSHAKE_MAX    8192
#define IB_MAX_SOURCES      250
/* filler of a message: plain letters, never needing a JSON escape */
#define IB_FILL_MAX         (1024 * 1024)

#define IB_WS_GUID          "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


static void ib_conn_connected(ib_conn_t *c);
static void ib_conn_handshake_read(ib_conn_t *c);
static int  ib_conn_handshake_check(ib_conn_t *c, char *hdr, size_t len);
static void ib_conn_read(ib_conn_t *c);
static void ib_conn_frames(ib_conn_t *c, char *buf, size_t len);
static void ib_conn_on_close(ib_conn_t *c, unsigned char *p, uint64_t len);
static void ib_conn_fail(ib_conn_t *c, uint64_t *counter, const char *fmt,
    ...) IB_PRINTF(3, 4);
static void ib_conn_flush(ib_conn_t *c);
static void ib_conn_mark(ib_conn_t *c);
static void ib_conn_events(ib_conn_t *c, uint32_t events, int op);
static void ib_conn_reserve(ib_conn_t *c, size_t need);
static void ib_conn_describe(ib_conn_t *c, char *buf, size_t size);
static size_t ib_conn_path(ib_conn_t *c, char *buf, size_t size);
static void ib_mask(unsigned char *p, size_t len, const unsigned char key[4]);


static char      *ib_fill;
static int        ib_src_bind;
static uint8_t    ib_src_exhausted[IB_MAX_SOURCES + 1];


int
ib_loop_init(void)
{
    size_t  i;
    static const char  alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

    ib.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ib.epfd < 0) {
        ib_die("epoll_create1: %s", strerror(errno));
    }

    ib.rbuf_size = IB_MAX_MESSAGE + 14 + IB_READ_CHUNK;
    ib.rbuf = ib_alloc(ib.rbuf_size);

    ib_fill = ib_alloc(IB_FILL_MAX);

    for (i = 0; i < IB_FILL_MAX; i++) {
        ib_fill[i] = alphabet[i % (sizeof(alphabet) - 1)];
    }

    /* --source-addrs N starts with 127.0.0.1 .. 127.0.0.N in rotation */
    ib.nsrc = ib.source_addrs > 0 ? (uint32_t) ib.source_addrs : 1;
    ib_src_bind = ib.source_addrs > 1;

    return 0;
}


/* the source address for the next connection, 127.0.0.<n>: 0 leaves the
 * choice to the kernel, which is what a run does until a source runs out */

static uint32_t
ib_source_next(void)
{
    uint32_t  i, n;

    if (!ib_src_bind) {
        return 0;
    }

    for (n = 0; n < ib.nsrc; n++) {
        i = 1 + (ib.src_rr++ % ib.nsrc);

        if (!ib_src_exhausted[i]) {
            return i;
        }
    }

    return ib.nsrc;
}


void
ib_conn_start(ib_conn_t *c)
{
    int                 fd, one, rc, err, attempt;
    uint32_t            src;
    struct sockaddr_in  sa;

    c->state = IB_CONN_CONNECTING;
    c->deadline = ib_now() + (uint64_t) (ib.connect_timeout * IB_NS);
    c->fd = -1;
    ib.connecting++;

    for (attempt = 0; attempt < IB_MAX_SOURCES; attempt++) {

        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            ib_conn_fail(c, &ib.err_connect, "socket(): %s", strerror(errno));
            return;
        }

        one = 1;
        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

        src = ib_source_next();

        if (src) {
            (void) setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                              sizeof(one));

            memset(&sa, 0, sizeof(sa));
            sa.sin_family = AF_INET;
            sa.sin_addr.s_addr = htonl(0x7f000000U | src);

            if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
                err = errno;
                close(fd);
                ib_conn_fail(c, &ib.err_connect, "bind(127.0.0.%u): %s", src,
                             strerror(err));
                return;
            }
        }

        rc = connect(fd, (struct sockaddr *) &ib.addr, sizeof(ib.addr));

        if (rc == 0 || errno == EINPROGRESS) {
            break;
        }

        err = errno;
        close(fd);
        fd = -1;

        if (err != EADDRNOTAVAIL
            || (ntohl(ib.addr.sin_addr.s_addr) >> 24) != 127)
        {
            ib_conn_fail(c, &ib.err_connect, "connect to %s: %s", ib.host,
                         strerror(err));
            return;
        }

        /* this source address ran out of ports: the next one joins in */

        ib_src_exhausted[src ? src : 1] = 1;
        ib_src_bind = 1;

        if (ib.nsrc < IB_MAX_SOURCES) {
            ib.nsrc++;

            if (!ib.quiet) {
                ib_warn("127.0.0.%u is out of ports, adding 127.0.0.%u as a "
                        "source address", src ? src : 1, ib.nsrc);
            }
        }
    }

    if (fd < 0) {
        ib_conn_fail(c, &ib.err_connect, "connect to %s: no source address "
                     "has a free port", ib.host);
        return;
    }

    c->fd = fd;
    ib_conn_events(c, EPOLLOUT, EPOLL_CTL_ADD);
}


static void
ib_conn_connected(ib_conn_t *c)
{
    int             err;
    char            path[512], keyb64[32];
    char            buf[sizeof(keyb64) + sizeof(IB_WS_GUID)];
    size_t          n;
    socklen_t       len;
    unsigned char   key[16], sha[20];

    err = 0;
    len = sizeof(err);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
    }

    if (err) {
        ib_conn_fail(c, &ib.err_connect, "connect to %s: %s", ib.host,
                     strerror(err));
        return;
    }

    /* the key is a fresh random nonce; its accept value is what the server
     * must answer */

    ib_random_bytes(key, sizeof(key));
    ib_base64(key, sizeof(key), keyb64);

    n = (size_t) snprintf(buf, sizeof(buf), "%s%s", keyb64, IB_WS_GUID);
    ib_sha1(buf, n, sha);
    ib_base64(sha, sizeof(sha), c->accept);

    ib_conn_path(c, path, sizeof(path));

    ib_conn_reserve(c, 1024);

    n = (size_t) snprintf(c->out + c->out_len, c->out_cap - c->out_len,
                          "GET %s%s HTTP/1.1\r\n"
                          "Host: %s\r\n"
                          "Upgrade: websocket\r\n"
                          "Connection: Upgrade\r\n"
                          "Sec-WebSocket-Key: %s\r\n"
                          "Sec-WebSocket-Version: 13\r\n"
                          "User-Agent: ioa-bench/" IB_VERSION "\r\n"
                          "\r\n",
                          ib.base, path, ib.host, keyb64);
    c->out_len += n;

    c->state = IB_CONN_HANDSHAKE;
    ib_conn_events(c, EPOLLIN, EPOLL_CTL_MOD);
    ib_conn_mark(c);
}


/* the request path of a connection, below the url's own path */

static size_t
ib_conn_path(ib_conn_t *c, char *buf, size_t size)
{
    int   n;
    char  name[128];

    if (ib.target == IB_TARGET_IOA) {
        if (c->kind == IB_KIND_IDLE) {
            n = snprintf(buf, size, "/ws/%s_idle_%u", ib.prefix, c->member);

        } else {
            /* since=0-0: the rooms are new, so reading each from its start
             * is exact, where "from the moment of connecting" would race
             * the first publishes */
            ib_agent_name(name, sizeof(name), c->room, c->member);
            n = snprintf(buf, size, "/ws/%s?since=0-0%s", name,
                         (c->pub >= 0 && !ib.echo) ? "&echo=0" : "");
        }

    } else {
        if (c->kind == IB_KIND_IDLE) {
            n = snprintf(buf, size, "/sub/%s_idle_%u", ib.prefix, c->member);

        } else {
            n = snprintf(buf, size, "/%s/%s_r%u",
                         c->kind == IB_KIND_PUB ? "pub" : "sub", ib.prefix,
                         c->room);
        }
    }

    return n > 0 ? (size_t) n : 0;
}


static void
ib_conn_describe(ib_conn_t *c, char *buf, size_t size)
{
    char  path[512];

    ib_conn_path(c, path, sizeof(path));
    snprintf(buf, size, "%.200s%.300s", ib.base, path);
}


static void
ib_conn_handshake_read(ib_conn_t *c)
{
    char     *end;
    size_t    hlen, rest;
    ssize_t   n;

    if (c->in_cap < IB_HANDSHAKE_MAX) {
        c->in = ib_realloc(c->in, IB_HANDSHAKE_MAX);
        c->in_cap = IB_HANDSHAKE_MAX;
    }

    n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);

    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return;
        }

        ib_conn_fail(c, &ib.err_handshake, "handshake: read: %s",
                     strerror(errno));
        return;
    }

    if (n == 0) {
        ib_conn_fail(c, &ib.err_handshake, "handshake: the server closed the "
                     "connection before answering");
        return;
    }

    c->in_len += (size_t) n;
    c->in[c->in_len] = '\0';

    end = strstr(c->in, "\r\n\r\n");

    if (end == NULL) {
        if (c->in_len >= c->in_cap - 1) {
            ib_conn_fail(c, &ib.err_handshake, "handshake: an answer header "
                         "longer than %d bytes", IB_HANDSHAKE_MAX);
        }

        return;
    }

    hlen = (size_t) (end - c->in) + 4;

    if (ib_conn_handshake_check(c, c->in, hlen) != 0) {
        return;
    }

    c->state = IB_CONN_OPEN;
    c->deadline = 0;
    ib.connecting--;
    ib.open++;
    ib.opened++;

    /* the handshake buffers go: an idle connection should cost the
     * generator a socket and this structure, nothing more (the request was
     * sent in full, or the answer could not have come) */

    rest = c->in_len - hlen;

    if (rest) {
        memcpy(ib.rbuf, c->in + hlen, rest);
    }

    free(c->in);
    c->in = NULL;
    c->in_len = 0;
    c->in_cap = 0;

    if (c->out_pos == c->out_len) {
        free(c->out);
        c->out = NULL;
        c->out_pos = c->out_len = c->out_cap = 0;
    }

    /* frames the server sent right behind its 101 */

    if (rest) {
        ib_conn_frames(c, ib.rbuf, rest);
    }
}


static int
ib_conn_handshake_check(ib_conn_t *c, char *hdr, size_t len)
{
    int     status;
    char   *line, *next, *v, *e, *end, what[600];
    size_t  n;

    end = hdr + len;

    if (sscanf(hdr, "HTTP/1.%*d %d", &status) != 1) {
        ib_conn_fail(c, &ib.err_handshake, "handshake: not an HTTP answer: "
                     "%.60s", hdr);
        return -1;
    }

    if (status != 101) {
        ib_conn_describe(c, what, sizeof(what));
        n = strcspn(hdr, "\r\n");

        /* the body, if it came along, says why (ioa answers JSON) */
        v = (c->in_len > len) ? c->in + len : "";

        ib_conn_fail(c, &ib.err_handshake, "handshake: GET %s answered "
                     "\"%.*s\" %.200s", what, (int) n, hdr, v);
        return -1;
    }

    for (line = strstr(hdr, "\r\n") + 2; line < end - 2; line = next + 2) {
        next = strstr(line, "\r\n");

        if (next == NULL) {
            break;
        }

        if (strncasecmp(line, "Sec-WebSocket-Accept:", 21) != 0) {
            continue;
        }

        v = line + 21;

        while (*v == ' ' || *v == '\t') {
            v++;
        }

        e = next;

        while (e > v && (e[-1] == ' ' || e[-1] == '\t')) {
            e--;
        }

        if ((size_t) (e - v) == strlen(c->accept)
            && memcmp(v, c->accept, (size_t) (e - v)) == 0)
        {
            return 0;
        }

        ib_conn_fail(c, &ib.err_handshake, "handshake: Sec-WebSocket-Accept "
                     "is \"%.*s\", expected \"%s\"", (int) (e - v), v,
                     c->accept);
        return -1;
    }

    ib_conn_fail(c, &ib.err_handshake, "handshake: the 101 answer has no "
                 "Sec-WebSocket-Accept");
    return -1;
}


static void
ib_conn_read(ib_conn_t *c)
{
    size_t   carry;
    ssize_t  n;

    carry = c->in_len;

    if (carry) {
        memcpy(ib.rbuf, c->in, carry);
    }

    n = recv(c->fd, ib.rbuf + carry, ib.rbuf_size - carry, 0);

    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return;
        }

        if (c->state == IB_CONN_CLOSING) {
            ib_conn_close(c);
            return;
        }

        ib_conn_fail(c, &ib.err_closed, "read: %s", strerror(errno));
        return;
    }

    if (n == 0) {
        if (c->state == IB_CONN_CLOSING || ib.stopping) {
            ib_conn_close(c);
            return;
        }

        ib_conn_fail(c, &ib.err_closed, "the server closed the connection "
                     "without a close frame");
        return;
    }

    c->in_len = 0;
    ib_conn_frames(c, ib.rbuf, carry + (size_t) n);
}


/* complete frames are handled where they lie; a partial one is carried */

static void
ib_conn_frames(ib_conn_t *c, char *buf, size_t len)
{
    int             fin, op;
    size_t          hl, left;
    uint64_t        plen, now;
    unsigned char  *p, *end, *payload;

    p = (unsigned char *) buf;
    end = p + len;
    now = ib_now();

    while (end - p >= 2) {

        hl = 2;
        plen = p[1] & 0x7f;

        if (p[1] & 0x80) {
            ib_conn_fail(c, &ib.err_protocol, "a masked frame from the "
                         "server");
            return;
        }

        if (p[0] & 0x70) {
            ib_conn_fail(c, &ib.err_protocol, "a frame with reserved bits "
                         "set (0x%02x)", p[0]);
            return;
        }

        if (plen == 126) {
            if (end - p < 4) {
                break;
            }

            plen = (uint64_t) p[2] << 8 | p[3];
            hl = 4;

        } else if (plen == 127) {
            if (end - p < 10) {
                break;
            }

            plen = (uint64_t) p[2] << 56 | (uint64_t) p[3] << 48
                   | (uint64_t) p[4] << 40 | (uint64_t) p[5] << 32
                   | (uint64_t) p[6] << 24 | (uint64_t) p[7] << 16
                   | (uint64_t) p[8] << 8 | p[9];
            hl = 10;
        }

        if (plen > IB_MAX_MESSAGE) {
            ib_conn_fail(c, &ib.err_protocol, "a frame of %llu bytes (the "
                         "limit is %d)", (unsigned long long) plen,
                         IB_MAX_MESSAGE);
            return;
        }

        if ((uint64_t) (end - p) < hl + plen) {
            break;
        }

        fin = p[0] & 0x80;
        op = p[0] & 0x0f;
        payload = p + hl;
        p += hl + plen;

        switch (op) {

        case 0x8:
            ib_conn_on_close(c, payload, plen);
            return;

        case 0x9:
            if (!fin || plen > 125) {
                ib_conn_fail(c, &ib.err_protocol, "a fragmented or oversized "
                             "ping");
                return;
            }

            ib_conn_queue_frame(c, 0xa, (char *) payload, plen, 0, NULL, 0);
            break;

        case 0xa:
            break;

        case 0x1:
        case 0x2:
            if (c->frag_op) {
                ib_conn_fail(c, &ib.err_protocol, "a new message inside a "
                             "fragmented one");
                return;
            }

            if (fin) {
                ib_load_message(c, (char *) payload, plen, now);
                break;
            }

            c->frag_op = (uint8_t) op;
            c->frag_len = 0;

            /* fall through */

        case 0x0:
            if (!c->frag_op) {
                ib_conn_fail(c, &ib.err_protocol, "a continuation frame "
                             "without a message to continue");
                return;
            }

            if (c->frag_len + plen > IB_MAX_MESSAGE) {
                ib_conn_fail(c, &ib.err_protocol, "a fragmented message "
                             "over %d bytes", IB_MAX_MESSAGE);
                return;
            }

            if (c->frag_cap < c->frag_len + plen) {
                c->frag_cap = c->frag_len + plen;
                c->frag = ib_realloc(c->frag, c->frag_cap);
            }

            memcpy(c->frag + c->frag_len, payload, plen);
            c->frag_len += plen;

            if (fin && op == 0x0) {
                c->frag_op = 0;
                ib_load_message(c, c->frag, c->frag_len, now);
            }

            break;

        default:
            ib_conn_fail(c, &ib.err_protocol, "a frame with opcode %d", op);
            return;
        }

        if (c->state == IB_CONN_CLOSED) {
            return;
        }
    }

    left = (size_t) (end - p);

    if (left) {
        if (c->in_cap < left) {
            c->in_cap = left < 4096 ? 4096 : left;
            c->in = ib_realloc(c->in, c->in_cap);
        }

        memcpy(c->in, p, left);
        c->in_len = left;
    }
}


static void
ib_conn_on_close(ib_conn_t *c, unsigned char *p, uint64_t len)
{
    unsigned  code;
    char      what[600];

    code = len >= 2 ? (unsigned) p[0] << 8 | p[1] : 1005;

    if (!c->close_sent) {
        ib_conn_send_close(c, code == 1005 ? 1000 : code);
        ib_conn_flush(c);
    }

    if (c->state == IB_CONN_CLOSED) {
        return;
    }

    if (!ib.stopping) {
        ib_conn_describe(c, what, sizeof(what));
        ib_error(&ib.err_closed, "the server closed %s with %u \"%.*s\"",
                 what, code, len > 2 ? (int) (len - 2) : 0, (char *) p + 2);
    }

    ib_conn_close(c);
}


static void
ib_conn_fail(ib_conn_t *c, uint64_t *counter, const char *fmt, ...)
{
    char     msg[700], what[600];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (!ib.stopping || counter != &ib.err_closed) {
        ib_conn_describe(c, what, sizeof(what));
        ib_error(counter, "%s: %s", what, msg);
    }

    c->failed = 1;
    ib_conn_close(c);
}


void
ib_conn_close(ib_conn_t *c)
{
    if (c->state == IB_CONN_CONNECTING || c->state == IB_CONN_HANDSHAKE) {
        ib.connecting--;

    } else if (c->state == IB_CONN_OPEN || c->state == IB_CONN_CLOSING) {
        ib.open--;
    }

    if (c->fd >= 0) {
        close(c->fd);   /* also leaves the epoll set */
        c->fd = -1;
    }

    c->state = IB_CONN_CLOSED;

    free(c->out);
    free(c->in);
    free(c->frag);
    c->out = NULL;
    c->in = NULL;
    c->frag = NULL;
    c->out_len = c->out_pos = c->out_cap = 0;
    c->in_len = c->in_cap = 0;
    c->frag_len = c->frag_cap = 0;
}


static void
ib_conn_reserve(ib_conn_t *c, size_t need)
{
    size_t  cap;

    if (c->out_pos == c->out_len) {
        c->out_pos = 0;
        c->out_len = 0;
    }

    if (c->out_cap - c->out_len >= need) {
        return;
    }

    if (c->out_pos) {
        memmove(c->out, c->out + c->out_pos, c->out_len - c->out_pos);
        c->out_len -= c->out_pos;
        c->out_pos = 0;

        if (c->out_cap - c->out_len >= need) {
            return;
        }
    }

    cap = c->out_cap ? c->out_cap * 2 : 4096;

    while (cap - c->out_len < need) {
        cap *= 2;
    }

    c->out = ib_realloc(c->out, cap);
    c->out_cap = cap;
}


/*
 * Queues one frame whose payload is head + fill bytes of filler + tail,
 * masked with a fresh key.  The payload is assembled in the output buffer
 * and masked where it lies: one pass to copy, one to mask, both in cache.
 */

void
ib_conn_queue_frame(ib_conn_t *c, int opcode, const char *head,
    size_t head_len, size_t fill, const char *tail, size_t tail_len)
{
    size_t          plen, hl;
    uint32_t        mask;
    unsigned char  *q;

    if (c->state != IB_CONN_OPEN || c->close_sent) {
        return;
    }

    if (fill > IB_FILL_MAX) {
        fill = IB_FILL_MAX;
    }

    plen = head_len + fill + tail_len;
    ib_conn_reserve(c, plen + 14);

    q = (unsigned char *) c->out + c->out_len;
    q[0] = (unsigned char) (0x80 | opcode);

    if (plen < 126) {
        q[1] = (unsigned char) (0x80 | plen);
        hl = 2;

    } else if (plen < 65536) {
        q[1] = 0x80 | 126;
        q[2] = (unsigned char) (plen >> 8);
        q[3] = (unsigned char) plen;
        hl = 4;

    } else {
        q[1] = 0x80 | 127;
        q[2] = q[3] = q[4] = q[5] = 0;
        q[6] = (unsigned char) (plen >> 24);
        q[7] = (unsigned char) (plen >> 16);
        q[8] = (unsigned char) (plen >> 8);
        q[9] = (unsigned char) plen;
        hl = 10;
    }

    mask = (uint32_t) ib_rand();
    memcpy(q + hl, &mask, 4);

    if (head_len) {
        memcpy(q + hl + 4, head, head_len);
    }

    if (fill) {
        memcpy(q + hl + 4 + head_len, ib_fill, fill);
    }

    if (tail_len) {
        memcpy(q + hl + 4 + head_len + fill, tail, tail_len);
    }

    ib_mask(q + hl + 4, plen, q + hl);

    c->out_len += hl + 4 + plen;
    ib_conn_mark(c);
}


/* the n bytes at p are the filler a message of that much padding was
 * sent with: what arrives is checked against what left, not only its mark */

int
ib_fill_ok(const char *p, size_t n)
{
    return n <= IB_FILL_MAX && memcmp(p, ib_fill, n) == 0;
}


/* XOR with the 4-byte key, 8 bytes at a time: the key repeats every 4
 * bytes, so it repeats every 8 as well */

static void
ib_mask(unsigned char *p, size_t len, const unsigned char key[4])
{
    size_t    i;
    uint64_t  k8, v;

    memcpy(&k8, key, 4);
    memcpy((unsigned char *) &k8 + 4, key, 4);

    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&v, p + i, 8);
        v ^= k8;
        memcpy(p + i, &v, 8);
    }

    for ( /* void */ ; i < len; i++) {
        p[i] ^= key[i & 3];
    }
}


void
ib_conn_send_close(ib_conn_t *c, unsigned code)
{
    char  b[2];

    if (c->state != IB_CONN_OPEN || c->close_sent) {
        return;
    }

    b[0] = (char) (code >> 8);
    b[1] = (char) code;

    ib_conn_queue_frame(c, 0x8, b, 2, 0, NULL, 0);
    c->close_sent = 1;
    c->state = IB_CONN_CLOSING;
}


static void
ib_conn_mark(ib_conn_t *c)
{
    if (!c->dirty) {
        c->dirty = 1;
        c->next_dirty = ib.dirty;
        ib.dirty = c;
    }
}


static void
ib_conn_events(ib_conn_t *c, uint32_t events, int op)
{
    struct epoll_event  ev;

    ev.events = events;
    ev.data.ptr = c;

    if (epoll_ctl(ib.epfd, op, c->fd, &ev) != 0) {
        ib_die("epoll_ctl: %s", strerror(errno));
    }
}


static void
ib_conn_flush(ib_conn_t *c)
{
    ssize_t  n;

    if (c->state == IB_CONN_CLOSED || c->state == IB_CONN_CONNECTING
        || c->out_pos == c->out_len)
    {
        return;
    }

    n = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos,
             MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            ib_conn_fail(c, &ib.err_closed, "write: %s", strerror(errno));
            return;
        }

        n = 0;
    }

    c->out_pos += (size_t) n;

    if (c->out_pos == c->out_len) {
        c->out_pos = 0;
        c->out_len = 0;

        if (c->want_out) {
            c->want_out = 0;
            ib_conn_events(c, EPOLLIN, EPOLL_CTL_MOD);
        }

    } else if (!c->want_out) {
        c->want_out = 1;
        ib_conn_events(c, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
    }
}


/*
 * epoll_pwait2() takes the timeout in ns: a rate-mode publisher (or a
 * replayed request, replay.c) is due at a precise instant, and
 * epoll_wait()'s milliseconds (rounded up) would add up to a millisecond of
 * the generator's own lateness to every latency measured from the scheduled
 * time.  epoll_wait() is the fallback for kernels before 5.11.
 */

int
ib_epoll_wait(int epfd, struct epoll_event *events, int max,
    uint64_t timeout_ns)
{
    int               n;
    struct timespec   ts;
    static int        no_pwait2;

    n = -1;

    if (!no_pwait2) {
        ts.tv_sec = (time_t) (timeout_ns / IB_NS);
        ts.tv_nsec = (long) (timeout_ns % IB_NS);

        n = epoll_pwait2(epfd, events, max, &ts, NULL);

        if (n < 0 && errno == ENOSYS) {
            no_pwait2 = 1;
        }
    }

    if (no_pwait2) {
        n = epoll_wait(epfd, events, max,
                       (int) ((timeout_ns + 999999) / 1000000));
    }

    if (n < 0) {
        if (errno != EINTR) {
            ib_die("epoll_wait: %s", strerror(errno));
        }

        n = 0;
    }

    return n;
}


/* one turn: wait at most timeout_ns, handle what is ready, let the
 * workload queue, flush */

void
ib_loop_turn(uint64_t timeout_ns)
{
    int                 i, n;
    uint32_t            ev;
    ib_conn_t          *c;
    static struct epoll_event  events[IB_EVENTS];

    n = ib_epoll_wait(ib.epfd, events, IB_EVENTS, timeout_ns);

    for (i = 0; i < n; i++) {
        c = events[i].data.ptr;
        ev = events[i].events;

        switch (c->state) {

        case IB_CONN_CONNECTING:
            ib_conn_connected(c);
            break;

        case IB_CONN_HANDSHAKE:
            if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                ib_conn_handshake_read(c);
            }

            if ((ev & EPOLLOUT) && c->state == IB_CONN_HANDSHAKE) {
                ib_conn_mark(c);
            }

            break;

        case IB_CONN_OPEN:
        case IB_CONN_CLOSING:
            if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                ib_conn_read(c);
            }

            if ((ev & EPOLLOUT) && c->state != IB_CONN_CLOSED) {
                ib_conn_mark(c);
            }

            break;

        default:
            break;
        }
    }

    ib_load_tick(ib_now());

    while (ib.dirty) {
        c = ib.dirty;
        ib.dirty = c->next_dirty;
        c->dirty = 0;
        ib_conn_flush(c);
    }
}


void
ib_loop_check_deadlines(void)
{
    size_t      i;
    uint64_t    now;
    ib_conn_t  *c;

    now = ib_now();

    for (i = 0; i < ib.nconns; i++) {
        c = &ib.conns[i];

        if (c->deadline && c->deadline < now
            && (c->state == IB_CONN_CONNECTING
                || c->state == IB_CONN_HANDSHAKE))
        {
            ib_conn_fail(c, c->state == IB_CONN_CONNECTING ? &ib.err_connect
                                                           : &ib.err_handshake,
                         "no %s within %.1f s",
                         c->state == IB_CONN_CONNECTING ? "connection"
                                                        : "handshake answer",
                         ib.connect_timeout);
        }
    }
}
