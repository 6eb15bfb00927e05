
/*
 * The setup's HTTP/1.1 client and ioa's setup: every agent is registered
 * (POST /register) and every room formed (POST /teamup, whose answer holds
 * the comm_id) before the first WebSocket opens.
 *
 * Blocking on purpose: setup is not measured, happens once, and a plain
 * request-answer loop on one keep-alive connection is the simplest thing
 * that can be right.  Registrations are pipelined in batches (requests
 * written back to back, answers read in order, which HTTP/1.1 guarantees)
 * because thousands of agents one round trip at a time would make setup
 * the longest part of a short run.
 *
 * Answers are framed by Content-Length, chunked encoding, or the end of the
 * connection.  A keep-alive connection the server closed between two
 * requests is reopened once; every other failure ends the run with the
 * request that failed, its status and the start of the body, since nothing
 * after a failed setup would measure anything.
 */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ioa_bench.h"


#define IB_HTTP_TIMEOUT     10          /* s, connect and every read */
#define IB_HTTP_PIPELINE    64          /* registrations in flight */


typedef struct {
    char    *data;
    size_t   len;
    size_t   cap;
    size_t   pos;       /* bytes of data already consumed */
} ib_hbuf_t;


static int  ib_http_connect(char *err, size_t errlen);
static void ib_hbuf_add(ib_hbuf_t *b, const char *p, size_t len);
static int  ib_http_fill(char *err, size_t errlen);
static int  ib_http_read(int *status, char **body, size_t *body_len,
    char *err, size_t errlen);


static int        ib_http_fd = -1;
static ib_hbuf_t  ib_http_in;      /* bytes read, answers not yet taken */
static ib_hbuf_t  ib_http_body;    /* the body of the last answer */
static int        ib_http_eof;     /* the server closed the connection */


static int
ib_http_connect(char *err, size_t errlen)
{
    int             fd, one;
    struct timeval  tv;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket(): %s", strerror(errno));
        return -1;
    }

    /* SO_SNDTIMEO bounds connect() too on Linux */
    tv.tv_sec = IB_HTTP_TIMEOUT;
    tv.tv_usec = 0;
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    one = 1;
    (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (connect(fd, (struct sockaddr *) &ib.addr, sizeof(ib.addr)) != 0) {
        snprintf(err, errlen, "connect to %s: %s", ib.host,
                 errno == EINPROGRESS ? "timed out" : strerror(errno));
        close(fd);
        return -1;
    }

    ib_http_fd = fd;
    ib_http_eof = 0;
    ib_http_in.len = 0;
    ib_http_in.pos = 0;

    /* the answers are searched as a string: without this, the previous
     * connection's last answer (the one that said "Connection: close",
     * e.g. at nginx's keepalive_requests) would be found again */
    if (ib_http_in.data) {
        ib_http_in.data[0] = '\0';
    }

    return 0;
}


void
ib_http_close(void)
{
    if (ib_http_fd >= 0) {
        close(ib_http_fd);
        ib_http_fd = -1;
    }
}


static void
ib_hbuf_add(ib_hbuf_t *b, const char *p, size_t len)
{
    if (b->cap - b->len < len + 1) {
        while (b->cap - b->len < len + 1) {
            b->cap = b->cap ? b->cap * 2 : 8192;
        }

        b->data = ib_realloc(b->data, b->cap);
    }

    memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = '\0';
}


static int
ib_http_send(const char *data, size_t len, char *err, size_t errlen)
{
    ssize_t  n;

    while (len) {
        n = send(ib_http_fd, data, len, MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            snprintf(err, errlen, "write: %s", strerror(errno));
            return -1;
        }

        data += n;
        len -= (size_t) n;
    }

    return 0;
}


/* reads more bytes into ib_http_in; 0 on data, 1 on EOF, -1 on error */

static int
ib_http_fill(char *err, size_t errlen)
{
    char     buf[16384];
    ssize_t  n;

    if (ib_http_in.pos && ib_http_in.pos == ib_http_in.len) {
        ib_http_in.pos = 0;
        ib_http_in.len = 0;
        ib_http_in.data[0] = '\0';
    }

    for ( ;; ) {
        n = recv(ib_http_fd, buf, sizeof(buf), 0);

        if (n < 0 && errno == EINTR) {
            continue;
        }

        break;
    }

    if (n < 0) {
        snprintf(err, errlen, "read: %s",
                 errno == EAGAIN ? "timed out" : strerror(errno));
        return -1;
    }

    if (n == 0) {
        ib_http_eof = 1;
        return 1;
    }

    ib_hbuf_add(&ib_http_in, buf, (size_t) n);

    return 0;
}


/*
 * An answer's head, h up to end (where its blank line starts; h is
 * NUL-terminated somewhere at or after end): the status, how the body is
 * framed, and, when want is a header name, that header's value (trimmed,
 * not NUL-terminated; NULL when the answer has none).  0, or -1 when it is
 * not an HTTP/1.x status line.  The replay load (replay.c) reads its
 * answers with the same function.
 */

int
ib_http_head(const char *h, const char *end, ib_http_head_t *head,
    const char *want)
{
    size_t       wlen;
    const char  *line, *next, *v;

    memset(head, 0, sizeof(*head));
    head->content_length = -1;

    if (sscanf(h, "HTTP/1.%*d %d", &head->status) != 1) {
        return -1;
    }

    wlen = want ? strlen(want) : 0;

    for (line = strstr(h, "\r\n"); line && line < end; line = next) {
        line += 2;
        next = strstr(line, "\r\n");

        if (next == NULL || next > end) {
            next = end;
        }

        if (strncasecmp(line, "Content-Length:", 15) == 0) {
            head->content_length = strtol(line + 15, NULL, 10);

        } else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0) {
            v = strstr(line, "chunked");
            head->chunked = v != NULL && v < next;

        } else if (strncasecmp(line, "Connection:", 11) == 0) {
            v = strstr(line, "close");
            head->close = v != NULL && v < next;

        } else if (wlen && strncasecmp(line, want, wlen) == 0
                   && line[wlen] == ':')
        {
            v = line + wlen + 1;
            v += strspn(v, " \t");
            head->value = v;
            head->value_len = (size_t) (next - v);

            while (head->value_len && (v[head->value_len - 1] == ' '
                                       || v[head->value_len - 1] == '\t'))
            {
                head->value_len--;
            }
        }

        if (next == end) {
            break;
        }
    }

    return 0;
}


/*
 * One answer from ib_http_in (reading more as needed).  Returns 0 with
 * the status and the body, -1 on error; -2 when the connection ended before
 * the first byte of the answer (a stale keep-alive connection: retry).
 */

static int
ib_http_read(int *status, char **body, size_t *body_len, char *err,
    size_t errlen)
{
    int             rc, chunked, close_delim;
    char           *h, *end;
    size_t          hlen, clen, size, start;
    long            cl;
    ib_http_head_t  head;

    /* the header */

    for ( ;; ) {
        h = ib_http_in.data ? ib_http_in.data + ib_http_in.pos : NULL;
        end = h ? strstr(h, "\r\n\r\n") : NULL;

        if (end) {
            break;
        }

        rc = ib_http_fill(err, errlen);

        if (rc < 0) {
            return -1;
        }

        if (rc == 1) {
            if (ib_http_in.len == ib_http_in.pos) {
                snprintf(err, errlen, "the server closed the connection "
                         "without answering");
                return -2;
            }

            snprintf(err, errlen, "the server closed the connection in the "
                     "middle of an answer header");
            return -1;
        }
    }

    if (ib_http_head(h, end, &head, NULL) != 0) {
        snprintf(err, errlen, "not an HTTP answer: %.60s", h);
        return -1;
    }

    *status = head.status;
    hlen = (size_t) (end - h) + 4;
    cl = head.content_length;
    chunked = head.chunked;
    close_delim = head.close;

    ib_http_in.pos += hlen;
    ib_http_body.len = 0;

    if (*status == 204 || *status == 304 || (*status >= 100 && *status < 200))
    {
        cl = 0;
        chunked = 0;
    }

    if (chunked) {
        for ( ;; ) {
            /* a size line */
            for ( ;; ) {
                h = ib_http_in.data + ib_http_in.pos;
                end = strstr(h, "\r\n");

                if (end) {
                    break;
                }

                if (ib_http_fill(err, errlen) != 0) {
                    snprintf(err, errlen, "the answer ended inside a chunk");
                    return -1;
                }
            }

            size = strtoul(h, NULL, 16);
            start = ib_http_in.pos + (size_t) (end - h) + 2;

            while (ib_http_in.len < start + size + 2) {
                if (ib_http_fill(err, errlen) != 0) {
                    snprintf(err, errlen, "the answer ended inside a chunk");
                    return -1;
                }
            }

            if (size == 0) {
                /* no trailers expected: the last chunk's CRLF ends it */
                ib_http_in.pos = start + 2;
                break;
            }

            ib_hbuf_add(&ib_http_body, ib_http_in.data + start, size);
            ib_http_in.pos = start + size + 2;
        }

    } else if (cl >= 0) {
        clen = (size_t) cl;

        while (ib_http_in.len - ib_http_in.pos < clen) {
            if (ib_http_fill(err, errlen) != 0) {
                snprintf(err, errlen, "the answer ended after %zu of %zu "
                         "bytes", ib_http_in.len - ib_http_in.pos, clen);
                return -1;
            }
        }

        ib_hbuf_add(&ib_http_body, ib_http_in.data + ib_http_in.pos, clen);
        ib_http_in.pos += clen;

    } else {
        while (!ib_http_eof) {
            if (ib_http_fill(err, errlen) < 0) {
                return -1;
            }
        }

        ib_hbuf_add(&ib_http_body, ib_http_in.data + ib_http_in.pos,
                    ib_http_in.len - ib_http_in.pos);
        ib_http_in.pos = ib_http_in.len;
        close_delim = 1;
    }

    if (ib_http_body.data == NULL) {
        ib_hbuf_add(&ib_http_body, "", 0);
    }

    *body = ib_http_body.data;
    *body_len = ib_http_body.len;

    if (close_delim) {
        ib_http_close();
    }

    return 0;
}


size_t
ib_http_request(char *buf, size_t size, const char *path, const char *body,
    size_t len)
{
    int  n;

    n = snprintf(buf, size, "POST %s%s HTTP/1.1\r\n"
                 "Host: %s\r\n"
                 "Content-Type: application/json\r\n"
                 "Content-Length: %zu\r\n"
                 "User-Agent: ioa-bench/" IB_VERSION "\r\n"
                 "\r\n%s", ib.base, path, ib.host, len, body);

    return n > 0 ? (size_t) n : 0;
}


int
ib_http_post(const char *path, const char *body, size_t len, int *status,
    char **resp, size_t *resp_len, char *err, size_t errlen)
{
    int     attempt, rc, reused;
    char   *req;
    size_t  n;

    req = ib_alloc(len + 1024);
    n = ib_http_request(req, len + 1024, path, body, len);
    rc = -1;

    for (attempt = 0; attempt < 2; attempt++) {
        reused = ib_http_fd >= 0;

        if (!reused && ib_http_connect(err, errlen) != 0) {
            break;
        }

        rc = ib_http_send(req, n, err, errlen);

        if (rc == 0) {
            rc = ib_http_read(status, resp, resp_len, err, errlen);
        }

        if (rc == 0) {
            break;
        }

        ib_http_close();

        if (!reused) {
            break;
        }
    }

    free(req);

    return rc == 0 ? 0 : -1;
}


/* registers agents [from, to) of the run (room-major), pipelined; a
 * connection that ends part way is reopened for the rest */

static void
ib_ioa_register(size_t from, size_t to)
{
    int        status, rc, attempts;
    char       name[128], body[512], err[512], *req, *resp;
    size_t     i, n, len, resp_len, cap, done;

    cap = (to - from) * 2048;
    req = ib_alloc(cap);
    attempts = 0;
    err[0] = '\0';

    while (from < to) {

        if (attempts++ == 3) {
            ib_die("cannot register at %s: POST %s/register: %s", ib.url,
                   ib.base, err);
        }

        if (ib_http_fd < 0 && ib_http_connect(err, sizeof(err)) != 0) {
            ib_die("cannot reach the hub at %s: POST %s/register: %s",
                   ib.url, ib.base, err);
        }

        len = 0;

        for (i = from; i < to; i++) {
            ib_agent_name(name, sizeof(name),
                          (uint32_t) (i / (size_t) ib.members),
                          (uint32_t) (i % (size_t) ib.members));
            n = (size_t) snprintf(body, sizeof(body),
                                  "{\"name\":\"%s\",\"type\":"
                                  "\"Thing Assistant\",\"desc\":"
                                  "\"ioa-bench load agent\"}", name);
            len += ib_http_request(req + len, cap - len, "/register", body, n);
        }

        if (ib_http_send(req, len, err, sizeof(err)) != 0) {
            ib_http_close();
            continue;
        }

        done = from;

        while (from < to) {
            rc = ib_http_read(&status, &resp, &resp_len, err, sizeof(err));

            if (rc != 0) {
                ib_http_close();
                break;
            }

            if (status != 200) {
                ib_die("POST %s/register answered %d: %.300s", ib.base,
                       status, resp);
            }

            from++;

            if (ib_http_fd < 0) {
                break;      /* "Connection: close" after this answer */
            }
        }

        if (from > done) {
            attempts = 0;
        }
    }

    free(req);
}


int
ib_ioa_setup(void)
{
    int        status;
    char       err[512], *resp, *p, *q, *body, name[128];
    size_t     r, m, len, cap, total, from, resp_len;

    total = (size_t) ib.rooms * (size_t) ib.members;

    for (from = 0; from < total; from += IB_HTTP_PIPELINE) {
        ib_ioa_register(from, from + IB_HTTP_PIPELINE < total
                              ? from + IB_HTTP_PIPELINE : total);
    }

    cap = (size_t) ib.members * 160 + 512;
    body = ib_alloc(cap);
    ib.comm_ids = ib_calloc((size_t) ib.rooms, sizeof(char *));

    for (r = 0; r < (size_t) ib.rooms; r++) {
        ib_agent_name(name, sizeof(name), (uint32_t) r, 0);
        len = (size_t) snprintf(body, cap, "{\"sender\":\"%s\","
                                "\"team_name\":\"%s_r%zu\",\"agent_names\":[",
                                name, ib.prefix, r);

        for (m = 1; m < (size_t) ib.members; m++) {
            ib_agent_name(name, sizeof(name), (uint32_t) r, (uint32_t) m);
            len += (size_t) snprintf(body + len, cap - len, "%s\"%s\"",
                                     m > 1 ? "," : "", name);
        }

        len += (size_t) snprintf(body + len, cap - len, "]}");

        if (ib_http_post("/teamup", body, len, &status, &resp, &resp_len, err,
                         sizeof(err))
            != 0)
        {
            ib_die("cannot reach the hub at %s: POST %s/teamup: %s", ib.url,
                   ib.base, err);
        }

        if (status != 200) {
            ib_die("POST %s/teamup answered %d: %.300s", ib.base, status,
                   resp);
        }

        p = strstr(resp, "\"comm_id\":\"");
        q = p ? strchr(p + 11, '"') : NULL;

        if (q == NULL || q - (p + 11) > 200) {
            ib_die("POST %s/teamup answered without a comm_id: %.300s",
                   ib.base, resp);
        }

        ib.comm_ids[r] = ib_alloc((size_t) (q - (p + 11)) + 1);
        memcpy(ib.comm_ids[r], p + 11, (size_t) (q - (p + 11)));
        ib.comm_ids[r][q - (p + 11)] = '\0';
    }

    free(body);
    ib_http_close();

    return 0;
}
