
/*
 * The agent's connection to the hub, over the hub's HTTP transport: no
 * WebSocket, three endpoints.
 *
 *   POST /register                  who we are (again after every reconnect:
 *                                   the registry may have been lost with
 *                                   Redis, and it is idempotent)
 *   GET  /agents/{name}/inbox       Server-Sent Events, every envelope of
 *                                   every room we are in
 *   POST /agents/{name}/messages    one envelope out
 *
 * The inbox cycle:
 *
 *        start
 *          |
 *          v        200                    200, then the stream ends
 *     REGISTERING -------> STREAMING ------------------------------+
 *          |   ^               |  not 200 / cannot connect          |
 *          |   |               v                                    |
 *          |   +----------- WAITING <-------------------------------+
 *          |    backoff      ^
 *          +-----------------+  error, 5xx, cannot connect
 *
 *   4xx on /register or on the inbox is a configuration error (bad name,
 *   wrong base URL): the agent says why and exits.
 *
 * Nothing missed, nothing twice.  Every inbox event carries "id:", the
 * agent's position in all its rooms.  We keep the last one and reconnect
 * with Last-Event-ID; the hub replays exactly what came after it.  The
 * position moves only once an event has been handled (after
 * ioa_task_envelope() returned), so a stream cut between receiving and
 * handling replays the event rather than dropping it.  On top of that, the
 * last IOA_HUB_SEEN envelope ids (comm_id:id) are remembered and a repeat
 * is skipped: a second defence if a position is ever refused or rewound.
 * A refused position (the hub's 400 naming Last-Event-ID, or nginx's own
 * 400/413/431 for a header too large: a position grows with the rooms) is
 * never a reason to exit: every room resumes from the oldest id in it,
 * within IOA_HUB_RESUME_WINDOW, with a gap report for rooms further back.
 * Before the first envelope there is no position, and a plain reconnect
 * would start "from now", losing whatever was posted while we were away;
 * so the agent then asks for ?since=<when the last stream opened>.  That
 * is exact while the agent's clock and Redis' agree (the same host, or
 * NTP).  It would be exact everywhere if the hub sent a position with the
 * stream's opening "retry:" block; the agent would take it like any id.
 *
 * Reconnects back off exponentially from IOA_HUB_BACKOFF_MIN to
 * --backoff-max, half of each delay random so that agents that lost the
 * same hub do not return in the same instant.  The backoff restarts only
 * after a stream stayed up IOA_HUB_STABLE ms: a hub that accepts and then
 * closes at once is not hammered.
 *
 * The outbox.  Envelopes are posted one at a time, in the order they were
 * queued: a task's progress must be in the room log before its result,
 * and each POST is answered only once Redis stored the envelope.  A post
 * that fails before the hub saw it (cannot connect) is simply sent again.
 * One whose answer was lost (timeout, reset, 5xx) may or may not have been
 * stored; sending it again could store it twice.  So the agent first reads
 * the room log (POST /fetch_chat_record) and looks for an envelope of ours
 * with the same type and task_id (or reply_to): found, the post is done;
 * not found, it is sent again.  A 4xx is final: logged and dropped.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


#define IOA_HUB_CONNECT_TIMEOUT 5000L  /* ms */
#define IOA_HUB_REQUEST_TIMEOUT 15000L /* ms, everything but the inbox */

/* the hub sends a keepalive every 15 s: three missed ones mean the
 * connection is dead even if TCP has not noticed */
#define IOA_HUB_IDLE_TIME 45L /* s */

#define IOA_HUB_BACKOFF_MIN 200
#define IOA_HUB_STABLE      2000 /* ms */
#define IOA_HUB_SEEN        1024
/* a refused position resumes every room from its oldest room's id, but
 * never from further back than this before its newest (ms) */
#define IOA_HUB_RESUME_WINDOW  600000

/* the hub caps envelopes at ioa_max_message_size (64k by default);
 * anything far larger is a broken stream, not an envelope */
#define IOA_HUB_EVENT_MAX    (8 * 1024 * 1024)
#define IOA_HUB_RESPONSE_MAX (64 * 1024 * 1024)
#define IOA_HUB_ERROR_MAX    2048


typedef enum {
    IOA_HUB_IDLE = 0,
    IOA_HUB_REGISTERING,
    IOA_HUB_STREAMING,
    IOA_HUB_WAITING,
    IOA_HUB_STOPPED
} ioa_hub_state_e;


typedef enum { IOA_HUB_SEND = 0, IOA_HUB_VERIFY } ioa_hub_phase_e;


/* an inbox event received in the write callback, handled after it */

typedef struct ioa_hub_ev_s ioa_hub_ev_t;

struct ioa_hub_ev_s {
    ioa_hub_ev_t *next;
    char         *event;
    char         *id; /* NULL: the event had none */
    char         *data;
    size_t        len;
    unsigned      has_data:1;
};


typedef struct {
    ioa_hub_state_e state;

    char              *register_url;
    char              *inbox_url;
    char              *post_url;
    char              *record_url;
    struct curl_slist *json_headers;
    ioa_buf_t          auth_header;   /* "Authorization: Bearer ..." */
    char               user_agent[64];

    /* registration */
    ioa_xfer_t reg;
    ioa_buf_t  reg_body;
    ioa_buf_t  reg_resp;
    char       reg_err[CURL_ERROR_SIZE];
    unsigned   registered;

    /* the inbox */
    ioa_xfer_t         inbox;
    struct curl_slist *inbox_headers;
    char               inbox_err[CURL_ERROR_SIZE];
    ioa_buf_t          inbox_body; /* of a non-200 answer */
    ioa_sse_parser_t   sse;
    long               inbox_status;
    ioa_buf_t          position; /* the last "id:" handled */
    uint64_t           opened_at;
    uint64_t           opened_wall;
    uint64_t           since; /* ?since= of this stream */
    uint64_t           resume_since; /* after a refused position */
    unsigned           attempt;
    unsigned           streaming:1;
    ioa_timer_t        backoff;

    ioa_hub_ev_t  *evs;
    ioa_hub_ev_t **evs_tail;
    ioa_event_t    process;

    char  *seen[IOA_HUB_SEEN];
    size_t seen_next;

    /* the outbox */
    ioa_post_t     *out;
    ioa_post_t    **out_tail;
    size_t          out_len;
    ioa_xfer_t      post;
    ioa_buf_t       post_resp;
    ioa_buf_t       verify_body;
    char            post_err[CURL_ERROR_SIZE];
    ioa_hub_phase_e phase;
    unsigned        post_attempt;
    ioa_timer_t     post_retry;
} ioa_hub_t;


static void     ioa_hub_register(void);
static void     ioa_hub_register_done(ioa_xfer_t *x, CURLcode rc);
static void     ioa_hub_inbox_open(void);
static size_t   ioa_hub_inbox_write(char *p, size_t size, size_t n, void *data);
static int      ioa_hub_sse_event(void *ctx, ioa_sse_event_t *ev);
static void     ioa_hub_inbox_done(ioa_xfer_t *x, CURLcode rc);
static void     ioa_hub_refused_position(long status, const char *body);
static void     ioa_hub_process(ioa_event_t *ev);
static void     ioa_hub_envelope(const char *data, size_t len);
static void     ioa_hub_control(const char *data, size_t len);
static void     ioa_hub_wait(void);
static void     ioa_hub_backoff_handler(ioa_timer_t *t);
static uint64_t ioa_hub_delay(unsigned attempt);
static void     ioa_hub_post_send(void);
static void     ioa_hub_post_verify(void);
static void     ioa_hub_post_done(ioa_xfer_t *x, CURLcode rc);
static void     ioa_hub_verify_done(ioa_post_t *p, CURLcode rc, long status);
static void     ioa_hub_post_pop(void);
static void     ioa_hub_post_later(ioa_hub_phase_e phase);
static void     ioa_hub_post_retry_handler(ioa_timer_t *t);
static char    *ioa_hub_record_find(ioa_post_t *p);
static void     ioa_hub_easy_common(CURL *easy, char *errbuf);
static size_t   ioa_hub_write_buf(char *p, size_t size, size_t n, void *data);
static const char *ioa_hub_body(ioa_buf_t *b);


static ioa_hub_t ioa_hub;


int
ioa_hub_init(void)
{
    char     *name;
    size_t    i;
    ioa_buf_t b = { 0 };

    ioa_hub.evs_tail = &ioa_hub.evs;
    ioa_hub.out_tail = &ioa_hub.out;

    ioa_hub.reg.easy = curl_easy_init();
    ioa_hub.inbox.easy = curl_easy_init();
    ioa_hub.post.easy = curl_easy_init();

    if (!ioa_hub.reg.easy || !ioa_hub.inbox.easy || !ioa_hub.post.easy) {
        ioa_log_error("curl_easy_init() failed");
        return -1;
    }

    ioa_hub.reg.done = ioa_hub_register_done;
    ioa_hub.inbox.done = ioa_hub_inbox_done;
    ioa_hub.post.done = ioa_hub_post_done;

    ioa_hub.backoff.handler = ioa_hub_backoff_handler;
    ioa_hub.post_retry.handler = ioa_hub_post_retry_handler;
    ioa_hub.process.handler = ioa_hub_process;

    name = curl_easy_escape(ioa_hub.post.easy, ioa_conf.name, 0);
    if (name == NULL) {
        ioa_log_error("curl_easy_escape() failed");
        return -1;
    }

    ioa_buf_addf(&b, "%s/register", ioa_conf.hub);
    ioa_hub.register_url = ioa_strdup(ioa_buf_cstr(&b));
    ioa_buf_reset(&b);

    ioa_buf_addf(&b, "%s/agents/%s/inbox", ioa_conf.hub, name);
    ioa_hub.inbox_url = ioa_strdup(ioa_buf_cstr(&b));
    ioa_buf_reset(&b);

    ioa_buf_addf(&b, "%s/agents/%s/messages", ioa_conf.hub, name);
    ioa_hub.post_url = ioa_strdup(ioa_buf_cstr(&b));
    ioa_buf_reset(&b);

    ioa_buf_addf(&b, "%s/fetch_chat_record", ioa_conf.hub);
    ioa_hub.record_url = ioa_strdup(ioa_buf_cstr(&b));
    ioa_buf_free(&b);

    curl_free(name);

    /* "Expect:" off: libcurl would otherwise hold a larger body back for
     * a 100 Continue, a round trip (or a 1 s wait) for nothing */
    ioa_hub.json_headers =
        curl_slist_append(NULL, "Content-Type: application/json");
    ioa_hub.json_headers = curl_slist_append(ioa_hub.json_headers, "Expect:");
    if (ioa_hub.json_headers == NULL) {
        return -1;
    }

    /* a hub with ioa_auth jwt wants the agent's token on every request */
    if (ioa_conf.token && ioa_conf.token[0]) {
        ioa_buf_addf(&ioa_hub.auth_header, "Authorization: Bearer %s",
                     ioa_conf.token);
        ioa_hub.json_headers = curl_slist_append(ioa_hub.json_headers,
                                   ioa_buf_cstr(&ioa_hub.auth_header));
        if (ioa_hub.json_headers == NULL) {
            return -1;
        }
    }

    snprintf(ioa_hub.user_agent, sizeof(ioa_hub.user_agent), "ioa-agent/%s",
             IOA_AGENT_VERSION);

    /* the registration never changes: build it once */

    b = (ioa_buf_t){ 0 };
    ioa_buf_adds(&b, "{\"name\":");
    ioa_json_str(&b, ioa_conf.name);
    ioa_buf_adds(&b, ",\"type\":");
    ioa_json_str(&b, ioa_conf.type);
    ioa_buf_adds(&b, ",\"desc\":");
    ioa_json_str(&b, ioa_conf.desc);
    ioa_buf_adds(&b, ",\"tags\":[");

    for (i = 0; i < ioa_conf.ntags; i++) {
        if (i) {
            ioa_buf_adds(&b, ",");
        }

        ioa_json_str(&b, ioa_conf.tags[i]);
    }

    ioa_buf_addf(&b, "],\"speaks_protocol\":%s",
                 ioa_conf.speaks_protocol ? "true" : "false");

    /* where the agent behind us is described (--a2a) */
    if (ioa_conf.a2a_card) {
        ioa_buf_adds(&b, ",\"a2a_url\":");
        ioa_json_str(&b, ioa_conf.a2a_card);
    }

    ioa_buf_addc(&b, '}');
    ioa_hub.reg_body = b;

    ioa_sse_init(&ioa_hub.sse, IOA_HUB_EVENT_MAX, ioa_hub_sse_event, NULL);

    return 0;
}


void
ioa_hub_start(void)
{
    ioa_log_info("hub %s, inbox %s", ioa_conf.hub, ioa_hub.inbox_url);
    ioa_hub_register();
}


/* shutting down: no more inbox; the outbox keeps going until main.c stops
 * waiting for it */

void
ioa_hub_stop(void)
{
    ioa_hub.state = IOA_HUB_STOPPED;
    ioa_timer_del(&ioa_hub.backoff);
    ioa_xfer_stop(&ioa_hub.reg);
    ioa_xfer_stop(&ioa_hub.inbox);
}


static void
ioa_hub_easy_common(CURL *easy, char *errbuf)
{
    curl_easy_reset(easy);

    errbuf[0] = '\0';
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, ioa_hub.user_agent);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, IOA_HUB_CONNECT_TIMEOUT);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
}


static size_t
ioa_hub_write_buf(char *p, size_t size, size_t n, void *data)
{
    ioa_buf_t *b = data;

    if (b->len + size * n > IOA_HUB_RESPONSE_MAX) {
        return 0;
    }

    ioa_buf_add(b, p, size * n);

    return size * n;
}


/* an answer's body for the log: one line, not too long */

static const char *
ioa_hub_body(ioa_buf_t *b)
{
    if (b->len > IOA_HUB_ERROR_MAX) {
        b->len = IOA_HUB_ERROR_MAX;
    }

    while (b->len
           && (b->data[b->len - 1] == '\n' || b->data[b->len - 1] == '\r')) {
        b->len--;
    }

    return b->len ? ioa_buf_cstr(b) : "(empty body)";
}


static uint64_t
ioa_hub_delay(unsigned attempt)
{
    uint64_t d;

    d = IOA_HUB_BACKOFF_MIN;

    while (attempt-- && d < ioa_conf.backoff_max) {
        d *= 2;
    }

    if (d > ioa_conf.backoff_max) {
        d = ioa_conf.backoff_max;
    }

    return d / 2 + ioa_random() % (d / 2 + 1);
}


static void
ioa_hub_wait(void)
{
    uint64_t delay;

    delay = ioa_hub_delay(ioa_hub.attempt);

    if (ioa_hub.attempt < 32) {
        ioa_hub.attempt++;
    }

    ioa_log_debug("reconnecting in %llu ms", (unsigned long long) delay);

    ioa_hub.state = IOA_HUB_WAITING;
    ioa_timer_add(&ioa_hub.backoff, delay);
}


static void
ioa_hub_backoff_handler(ioa_timer_t *t)
{
    (void) t;

    if (ioa_hub.state == IOA_HUB_WAITING) {
        ioa_hub_register();
    }
}


/* registration */

static void
ioa_hub_register(void)
{
    CURL *e;

    e = ioa_hub.reg.easy;

    ioa_hub_easy_common(e, ioa_hub.reg_err);
    curl_easy_setopt(e, CURLOPT_URL, ioa_hub.register_url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ioa_hub.json_headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, ioa_hub.reg_body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) ioa_hub.reg_body.len);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, IOA_HUB_REQUEST_TIMEOUT);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_hub_write_buf);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &ioa_hub.reg_resp);

    ioa_buf_reset(&ioa_hub.reg_resp);
    ioa_hub.state = IOA_HUB_REGISTERING;

    if (ioa_xfer_start(&ioa_hub.reg) != 0) {
        ioa_hub_wait();
    }
}


static void
ioa_hub_register_done(ioa_xfer_t *x, CURLcode rc)
{
    long status;

    if (ioa_hub.state == IOA_HUB_STOPPED) {
        return;
    }

    status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);

    if (rc != CURLE_OK) {
        ioa_log_warn("cannot register with the hub: %s",
                     ioa_hub.reg_err[0] ? ioa_hub.reg_err
                                        : curl_easy_strerror(rc));
        ioa_hub_wait();
        return;
    }

    if (status == 200) {
        ioa_log(ioa_hub.registered ? IOA_LOG_DEBUG : IOA_LOG_INFO,
                "registered as \"%s\" (%s): %s", ioa_conf.name, ioa_conf.type,
                ioa_hub_body(&ioa_hub.reg_resp));
        ioa_hub.registered++;
        ioa_hub_inbox_open();
        return;
    }

    if (status >= 400 && status < 500 && status != 408 && status != 429) {
        ioa_log_error("the hub refused the registration (HTTP %ld): %s", status,
                      ioa_hub_body(&ioa_hub.reg_resp));
        ioa_shutdown(1, "registration refused");
        return;
    }

    ioa_log_warn("registration failed (HTTP %ld): %s", status,
                 ioa_hub_body(&ioa_hub.reg_resp));
    ioa_hub_wait();
}


/* the inbox */

static void
ioa_hub_inbox_open(void)
{
    CURL     *e;
    ioa_buf_t b = { 0 };

    e = ioa_hub.inbox.easy;

    ioa_hub_easy_common(e, ioa_hub.inbox_err);

    ioa_buf_adds(&b, ioa_hub.inbox_url);

    ioa_hub.since = 0;

    if (ioa_hub.position.len == 0 && ioa_hub.resume_since) {
        /* the hub refused our position: see ioa_hub_refused_position() */
        ioa_hub.since = ioa_hub.resume_since;
        ioa_buf_addf(&b, "?since=%llu-0", (unsigned long long) ioa_hub.since);

    } else if (ioa_hub.position.len == 0 && ioa_hub.opened_wall) {
        /* no envelope yet, so no position: see the note at the top */
        ioa_hub.since = ioa_hub.opened_wall;
        ioa_buf_addf(&b, "?since=%llu-0", (unsigned long long) ioa_hub.since);
    }

    curl_easy_setopt(e, CURLOPT_URL, ioa_buf_cstr(&b));
    ioa_buf_free(&b);

    curl_slist_free_all(ioa_hub.inbox_headers);
    ioa_hub.inbox_headers =
        curl_slist_append(NULL, "Accept: text/event-stream");

    if (ioa_hub.auth_header.len) {
        ioa_hub.inbox_headers = curl_slist_append(ioa_hub.inbox_headers,
                                    ioa_buf_cstr(&ioa_hub.auth_header));
    }

    if (ioa_hub.position.len) {
        ioa_buf_addf(&b, "Last-Event-ID: %s", ioa_buf_cstr(&ioa_hub.position));
        ioa_hub.inbox_headers =
            curl_slist_append(ioa_hub.inbox_headers, ioa_buf_cstr(&b));
        ioa_buf_free(&b);
    }

    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ioa_hub.inbox_headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_hub_inbox_write);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, IOA_HUB_IDLE_TIME);

    ioa_sse_reset(&ioa_hub.sse);
    ioa_buf_reset(&ioa_hub.inbox_body);
    ioa_hub.inbox_status = 0;
    ioa_hub.streaming = 0;
    ioa_hub.state = IOA_HUB_STREAMING;

    if (ioa_xfer_start(&ioa_hub.inbox) != 0) {
        ioa_hub_wait();
    }
}


/* libcurl's write callback: only parse and queue, see loop.c */

static size_t
ioa_hub_inbox_write(char *p, size_t size, size_t n, void *data)
{
    size_t len;

    (void) data;

    len = size * n;

    if (ioa_hub.inbox_status == 0) {
        curl_easy_getinfo(ioa_hub.inbox.easy, CURLINFO_RESPONSE_CODE,
                          &ioa_hub.inbox_status);
    }

    if (ioa_hub.inbox_status != 200) {
        if (ioa_hub.inbox_body.len < IOA_HUB_ERROR_MAX) {
            ioa_buf_add(&ioa_hub.inbox_body, p, len);
        }

        return len;
    }

    ioa_health_touch();

    if (!ioa_hub.streaming) {
        ioa_hub.streaming = 1;
        ioa_hub.opened_at = ioa_mono_ms();
        ioa_hub.opened_wall = ioa_wall_ms();

        if (ioa_hub.position.len) {
            ioa_log_info("inbox open, resuming after \"%s\"",
                         ioa_buf_cstr(&ioa_hub.position));

        } else if (ioa_hub.since) {
            ioa_log_info("inbox open, resuming since %llu-0 (no envelope "
                         "received yet)",
                         (unsigned long long) ioa_hub.since);

        } else {
            ioa_log_info("inbox open");
        }
    }

    if (ioa_sse_feed(&ioa_hub.sse, p, len) != 0) {
        ioa_log_warn("inbox: an event larger than %d bytes; reconnecting",
                     IOA_HUB_EVENT_MAX);
        return 0;
    }

    return len;
}


static int
ioa_hub_sse_event(void *ctx, ioa_sse_event_t *ev)
{
    ioa_hub_ev_t *e;

    (void) ctx;

    e = ioa_calloc(sizeof(ioa_hub_ev_t));
    e->event = ioa_strdup(ev->event);
    e->id = ev->has_id ? ioa_strdup(ev->id) : NULL;
    e->data = ioa_strndup(ev->data, ev->data_len);
    e->len = ev->data_len;
    e->has_data = ev->has_data;

    *ioa_hub.evs_tail = e;
    ioa_hub.evs_tail = &e->next;

    ioa_post_event(&ioa_hub.process);

    return 0;
}


static void
ioa_hub_inbox_done(ioa_xfer_t *x, CURLcode rc)
{
    long        status;
    const char *body;

    (void) x;

    if (ioa_hub.state == IOA_HUB_STOPPED) {
        return;
    }

    status = ioa_hub.inbox_status;

    if (status == 0) {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    }

    if (status == 200) {
        if (ioa_mono_ms() - ioa_hub.opened_at >= IOA_HUB_STABLE) {
            ioa_hub.attempt = 0;
        }

        ioa_log_info("inbox closed (%s), reconnecting",
                     rc == CURLE_OK         ? "by the hub"
                     : ioa_hub.inbox_err[0] ? ioa_hub.inbox_err
                                            : curl_easy_strerror(rc));
        ioa_hub_wait();
        return;
    }

    if (status == 0) {
        ioa_log_warn("cannot open the inbox: %s", ioa_hub.inbox_err[0]
                                                      ? ioa_hub.inbox_err
                                                      : curl_easy_strerror(rc));
        ioa_hub_wait();
        return;
    }

    body = ioa_hub_body(&ioa_hub.inbox_body);

    /* our Last-Event-ID refused: by the hub (400 naming it), or by nginx
     * itself (400, 413, 431: a header too large for its buffers) */
    if (ioa_hub.position.len
        && ((status == 400 && strstr(body, "Last-Event-ID") != NULL)
            || status == 400 || status == 413 || status == 431))
    {
        ioa_hub_refused_position(status, body);
        ioa_hub_wait();
        return;
    }

    if (status >= 400 && status < 500 && status != 408 && status != 429) {
        ioa_log_error("the hub refused the inbox (HTTP %ld): %s", status, body);
        ioa_shutdown(1, "inbox refused");
        return;
    }

    ioa_log_warn("inbox failed (HTTP %ld): %s", status, body);
    ioa_hub_wait();
}


/*
 * The hub would not take our position: resume every room from the oldest
 * id in it (a room resumes from no later than its own position, so nothing
 * is lost; what comes twice is skipped by the seen list), but from no
 * further back than IOA_HUB_RESUME_WINDOW before the newest.  Rooms whose
 * position is older than that may miss what came in between: the report
 * says how many, and from when.
 */

static void
ioa_hub_refused_position(long status, const char *body)
{
    char        *p, *colon, *end;
    uint64_t     ms, oldest, newest, from;
    unsigned     rooms, behind;
    const char  *pos;

    pos = ioa_buf_cstr(&ioa_hub.position);
    oldest = UINT64_MAX;
    newest = 0;
    rooms = 0;

    for (p = (char *) pos; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1
                                                      : NULL)
    {
        colon = strchr(p, ':');
        if (colon == NULL) {
            break;
        }

        ms = strtoull(colon + 1, &end, 10);
        if (end == colon + 1) {
            continue;
        }

        rooms++;
        oldest = ms < oldest ? ms : oldest;
        newest = ms > newest ? ms : newest;
    }

    if (rooms == 0) {
        /* nothing to go by: from when the last stream opened */
        from = ioa_hub.opened_wall;
        behind = 0;

    } else {
        from = oldest;

        if (newest - oldest > IOA_HUB_RESUME_WINDOW) {
            from = newest - IOA_HUB_RESUME_WINDOW;
        }

        behind = 0;

        for (p = (char *) pos; p && *p;
             p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        {
            colon = strchr(p, ':');
            if (colon && strtoull(colon + 1, NULL, 10) < from) {
                behind++;
            }
        }
    }

    ioa_log_error("the hub refused the resume position (HTTP %ld, %zu "
                  "bytes): %.200s; resuming every room since %llu-0",
                  status, ioa_hub.position.len, body,
                  (unsigned long long) from);

    if (behind) {
        ioa_log_warn("gap report: %u of %u rooms were last read before "
                     "%llu-0; envelopes posted in them before then, after "
                     "their last one read, are not replayed", behind, rooms,
                     (unsigned long long) from);
    }

    ioa_buf_reset(&ioa_hub.position);
    ioa_hub.resume_since = from;
}


/* a posted event: handle what the write callback queued, in order */

static void
ioa_hub_process(ioa_event_t *ev)
{
    ioa_hub_ev_t *e;

    (void) ev;

    while (ioa_hub.evs) {
        e = ioa_hub.evs;
        ioa_hub.evs = e->next;

        if (ioa_hub.evs == NULL) {
            ioa_hub.evs_tail = &ioa_hub.evs;
        }

        if (e->has_data) {
            if (e->event[0] == '\0' || strcmp(e->event, "message") == 0) {
                ioa_hub_envelope(e->data, e->len);

            } else if (strcmp(e->event, "ioa") == 0) {
                ioa_hub_control(e->data, e->len);

            } else if (strcmp(e->event, "ping") == 0) {
                ioa_log_debug("inbox keepalive");

            } else {
                ioa_log_debug("inbox: ignoring an event \"%s\"", e->event);
            }
        }

        /* handled: only now does the position move past it */
        if (e->id) {
            ioa_buf_set(&ioa_hub.position, e->id, strlen(e->id));
            ioa_hub.resume_since = 0;
        }

        free(e->event);
        free(e->id);
        free(e->data);
        free(e);
    }
}


static int
ioa_hub_seen(const char *comm_id, const char *id)
{
    char  *key;
    size_t i;

    key = ioa_alloc(strlen(comm_id) + strlen(id) + 2);
    sprintf(key, "%s:%s", comm_id, id);

    /* a linear scan of 1024 short strings per envelope costs nothing
     * next to the HTTP and JSON work around it */
    for (i = 0; i < IOA_HUB_SEEN; i++) {
        if (ioa_hub.seen[i] && strcmp(ioa_hub.seen[i], key) == 0) {
            free(key);
            return 1;
        }
    }

    free(ioa_hub.seen[ioa_hub.seen_next]);
    ioa_hub.seen[ioa_hub.seen_next] = key;
    ioa_hub.seen_next = (ioa_hub.seen_next + 1) % IOA_HUB_SEEN;

    return 0;
}


static void
ioa_hub_envelope(const char *data, size_t len)
{
    char        err[128];
    yajl_val    doc;
    const char *id, *comm_id;

    doc = ioa_json_parse_err(data, len, err, sizeof(err));

    if (doc == NULL || !YAJL_IS_OBJECT(doc)) {
        ioa_log_warn("inbox: an event that is not a JSON object (%s): %.200s",
                     err[0] ? err : "not an object", data);
        yajl_tree_free(doc);
        return;
    }

    id = ioa_json_get_str(doc, "id");
    comm_id = ioa_json_get_str(doc, "comm_id");

    if (id && comm_id && ioa_hub_seen(comm_id, id)) {
        ioa_log_info("envelope %s in %s was already handled, skipped", id,
                     comm_id);
        yajl_tree_free(doc);
        return;
    }

    ioa_task_envelope(doc);

    yajl_tree_free(doc);
}


/* the hub's own frames: {"op":"error",...}, {"op":"close",...} */

static void
ioa_hub_control(const char *data, size_t len)
{
    yajl_val    doc;
    const char *op, *code, *msg;

    doc = ioa_json_parse(data, len);
    op = ioa_json_get_str(doc, "op");
    code = ioa_json_get_str(doc, "code");
    msg = ioa_json_get_str(doc, "message");

    if (op && strcmp(op, "error") == 0) {
        ioa_log_warn("the hub reports an error: %s: %s", code ? code : "?",
                     msg ? msg : "");

    } else if (op && strcmp(op, "close") == 0) {
        ioa_log_info("the hub closes the inbox: %s", msg ? msg : "");

    } else {
        ioa_log_info("the hub says: %.500s", data);
    }

    yajl_tree_free(doc);
}


/* the outbox */

void
ioa_hub_post(ioa_post_t *p)
{
    p->next = NULL;
    *ioa_hub.out_tail = p;
    ioa_hub.out_tail = &p->next;
    ioa_hub.out_len++;

    if (!ioa_hub.post.active && !ioa_hub.post_retry.active) {
        ioa_hub_post_send();
    }
}


size_t
ioa_hub_outbox_len(void)
{
    return ioa_hub.out_len;
}


static void
ioa_hub_post_send(void)
{
    CURL       *e;
    ioa_post_t *p;

    p = ioa_hub.out;

    if (p == NULL) {
        return;
    }

    e = ioa_hub.post.easy;

    ioa_hub_easy_common(e, ioa_hub.post_err);
    curl_easy_setopt(e, CURLOPT_URL, ioa_hub.post_url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ioa_hub.json_headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) p->body.len);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, IOA_HUB_REQUEST_TIMEOUT);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_hub_write_buf);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &ioa_hub.post_resp);

    ioa_buf_reset(&ioa_hub.post_resp);
    ioa_hub.phase = IOA_HUB_SEND;

    if (ioa_xfer_start(&ioa_hub.post) != 0) {
        ioa_hub_post_later(IOA_HUB_SEND);
    }
}


static void
ioa_hub_post_verify(void)
{
    CURL       *e;
    ioa_post_t *p;

    p = ioa_hub.out;

    if (p == NULL) {
        return;
    }

    ioa_buf_reset(&ioa_hub.verify_body);
    ioa_buf_adds(&ioa_hub.verify_body, "{\"comm_id\":");
    ioa_json_str(&ioa_hub.verify_body, p->comm_id);
    ioa_buf_adds(&ioa_hub.verify_body, "}");

    e = ioa_hub.post.easy;

    ioa_hub_easy_common(e, ioa_hub.post_err);
    curl_easy_setopt(e, CURLOPT_URL, ioa_hub.record_url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ioa_hub.json_headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, ioa_hub.verify_body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) ioa_hub.verify_body.len);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, IOA_HUB_REQUEST_TIMEOUT);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_hub_write_buf);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &ioa_hub.post_resp);

    ioa_buf_reset(&ioa_hub.post_resp);
    ioa_hub.phase = IOA_HUB_VERIFY;

    if (ioa_xfer_start(&ioa_hub.post) != 0) {
        ioa_hub_post_later(IOA_HUB_VERIFY);
    }
}


static void
ioa_hub_post_done(ioa_xfer_t *x, CURLcode rc)
{
    long        status;
    yajl_val    doc;
    ioa_buf_t   tmp;
    ioa_post_t *p;
    const char *id, *why;

    p = ioa_hub.out;
    status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);

    if (p == NULL) {
        return;
    }

    if (ioa_hub.phase == IOA_HUB_VERIFY) {
        ioa_hub_verify_done(p, rc, status);
        return;
    }

    if (rc == CURLE_OK && status == 200) {
        doc = ioa_json_parse(ioa_hub.post_resp.data, ioa_hub.post_resp.len);
        id = ioa_json_get_str(doc, "id");

        ioa_log_info("posted %s (%s %s) to %s as %s", p->what, p->key_field,
                     p->key, p->comm_id, id ? id : "?");

        yajl_tree_free(doc);
        ioa_hub.post_attempt = 0;
        ioa_hub_post_pop();
        ioa_hub_post_send();
        return;
    }

    if (rc == CURLE_OK && status == 413 && p->fallback.len) {
        ioa_log_warn("the hub refused %s (%s %s) as too large (%zu bytes); "
                     "sending a short failure notice instead",
                     p->what, p->key_field, p->key, p->body.len);
        tmp = p->body;
        p->body = p->fallback;
        p->fallback = tmp;
        ioa_buf_reset(&p->fallback);
        ioa_hub_post_send();
        return;
    }

    if (rc == CURLE_OK && status >= 400 && status < 500 && status != 408
        && status != 429)
    {
        ioa_log_error("the hub refused %s (%s %s) for %s (HTTP %ld): %s; "
                      "dropped",
                      p->what, p->key_field, p->key, p->comm_id, status,
                      ioa_hub_body(&ioa_hub.post_resp));
        ioa_hub.post_attempt = 0;
        ioa_hub_post_pop();
        ioa_hub_post_send();
        return;
    }

    why = rc != CURLE_OK ? (ioa_hub.post_err[0] ? ioa_hub.post_err
                                                : curl_easy_strerror(rc))
                         : ioa_hub_body(&ioa_hub.post_resp);

    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST
        || (rc == CURLE_OK && status == 429))
    {
        /* the hub never saw it */
        ioa_log_warn("cannot post %s (%s %s): %s; retrying", p->what,
                     p->key_field, p->key, why);
        ioa_hub_post_later(IOA_HUB_SEND);
        return;
    }

    ioa_log_warn("posting %s (%s %s) failed (HTTP %ld): %s; checking the "
                 "room log before sending it again",
                 p->what, p->key_field, p->key, status, why);
    ioa_hub_post_later(IOA_HUB_VERIFY);
}


static void
ioa_hub_verify_done(ioa_post_t *p, CURLcode rc, long status)
{
    char *id;

    if (rc == CURLE_OK && status == 200) {
        id = ioa_hub_record_find(p);

        if (id) {
            ioa_log_info("%s (%s %s) had been stored as %s although its "
                         "answer was lost",
                         p->what, p->key_field, p->key, id);
            free(id);
            ioa_hub.post_attempt = 0;
            ioa_hub_post_pop();
            ioa_hub_post_send();
            return;
        }

        ioa_log_info("%s (%s %s) was not stored; sending it again", p->what,
                     p->key_field, p->key);
        ioa_hub_post_send();
        return;
    }

    if (rc == CURLE_OK && status >= 400 && status < 500 && status != 408
        && status != 429)
    {
        ioa_log_error("cannot read room %s (HTTP %ld): %s; dropping %s "
                      "(%s %s)",
                      p->comm_id, status, ioa_hub_body(&ioa_hub.post_resp),
                      p->what, p->key_field, p->key);
        ioa_hub.post_attempt = 0;
        ioa_hub_post_pop();
        ioa_hub_post_send();
        return;
    }

    ioa_log_warn("cannot read room %s yet: %s", p->comm_id,
                 rc != CURLE_OK ? (ioa_hub.post_err[0] ? ioa_hub.post_err
                                                       : curl_easy_strerror(rc))
                                : ioa_hub_body(&ioa_hub.post_resp));
    ioa_hub_post_later(IOA_HUB_VERIFY);
}


/* our envelope of p's type and key in the room log: its id, or NULL */

static char *
ioa_hub_record_find(ioa_post_t *p)
{
    char       *found;
    size_t      i;
    yajl_val    doc, rec, env;
    long long   type;
    const char *s;

    found = NULL;

    doc = ioa_json_parse(ioa_hub.post_resp.data, ioa_hub.post_resp.len);
    rec = ioa_json_get(ioa_json_get(doc, p->comm_id), "chat_record");

    if (rec && YAJL_IS_ARRAY(rec)) {
        for (i = 0; i < rec->u.array.len && found == NULL; i++) {
            env = rec->u.array.values[i];

            s = ioa_json_get_str(env, "sender");
            if (s == NULL || strcmp(s, ioa_conf.name) != 0) {
                continue;
            }

            if (ioa_json_get_int(env, "type", &type) != 0 || type != p->type) {
                continue;
            }

            s = ioa_json_get_str(env, p->key_field);
            if (s == NULL || strcmp(s, p->key) != 0) {
                continue;
            }

            s = ioa_json_get_str(env, "id");
            found = ioa_strdup(s ? s : "?");
        }
    }

    yajl_tree_free(doc);

    return found;
}


static void
ioa_hub_post_pop(void)
{
    ioa_post_t *p;

    p = ioa_hub.out;

    if (p == NULL) {
        return;
    }

    ioa_hub.out = p->next;

    if (ioa_hub.out == NULL) {
        ioa_hub.out_tail = &ioa_hub.out;
    }

    ioa_hub.out_len--;

    free(p->comm_id);
    free(p->key);
    ioa_buf_free(&p->body);
    ioa_buf_free(&p->fallback);
    free(p);
}


static void
ioa_hub_post_later(ioa_hub_phase_e phase)
{
    uint64_t delay;

    delay = ioa_hub_delay(ioa_hub.post_attempt);

    if (ioa_hub.post_attempt < 32) {
        ioa_hub.post_attempt++;
    }

    ioa_hub.phase = phase;
    ioa_timer_add(&ioa_hub.post_retry, delay);
}


static void
ioa_hub_post_retry_handler(ioa_timer_t *t)
{
    (void) t;

    if (ioa_hub.phase == IOA_HUB_VERIFY) {
        ioa_hub_post_verify();

    } else {
        ioa_hub_post_send();
    }
}


void
ioa_hub_cleanup(void)
{
    size_t        i;
    ioa_hub_ev_t *e;

    ioa_hub_stop();
    ioa_xfer_stop(&ioa_hub.post);
    ioa_timer_del(&ioa_hub.post_retry);
    ioa_delete_posted_event(&ioa_hub.process);

    while (ioa_hub.out) {
        ioa_hub_post_pop();
    }

    while (ioa_hub.evs) {
        e = ioa_hub.evs;
        ioa_hub.evs = e->next;
        free(e->event);
        free(e->id);
        free(e->data);
        free(e);
    }

    for (i = 0; i < IOA_HUB_SEEN; i++) {
        free(ioa_hub.seen[i]);
    }

    curl_easy_cleanup(ioa_hub.reg.easy);
    curl_easy_cleanup(ioa_hub.inbox.easy);
    curl_easy_cleanup(ioa_hub.post.easy);
    curl_slist_free_all(ioa_hub.json_headers);
    curl_slist_free_all(ioa_hub.inbox_headers);

    free(ioa_hub.register_url);
    free(ioa_hub.inbox_url);
    free(ioa_hub.post_url);
    free(ioa_hub.record_url);

    ioa_buf_free(&ioa_hub.reg_body);
    ioa_buf_free(&ioa_hub.reg_resp);
    ioa_buf_free(&ioa_hub.inbox_body);
    ioa_buf_free(&ioa_hub.position);
    ioa_buf_free(&ioa_hub.post_resp);
    ioa_buf_free(&ioa_hub.verify_body);
    ioa_sse_free(&ioa_hub.sse);
}
