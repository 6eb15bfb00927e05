
/*
 * The a2a adapter: an A2A agent (Agent2Agent, the JSON-RPC binding) as a
 * member of ioa teams.  An A2A agent is, like IoA's tool agents (http.c),
 * a program behind HTTP that turns a text into a result; but its task has
 * a life of its own: it is created, moves through states, says what it is
 * doing, produces artifacts, and can be cancelled.  So each ioa task
 * becomes one A2A task, followed to its end:
 *
 *   start-up   GET the card; pick the JSON-RPC interface (1.0 if offered,
 *              else 0.3); register with its name, description and tags
 *   a task     send --> [stream or poll] --> an end state --> the result
 *                          |                     |
 *                          v                     v (input/auth required)
 *                 INFORM_TASK_PROGRESS      tasks/cancel, then failed
 *   timeout,   tasks/cancel, its answer awaited (IOA_A2A_CANCEL_TIMEOUT),
 *   cancel     then timed_out / failed saying what the agent answered
 *
 * The card.  <URL>/.well-known/agent-card.json, or URL itself if it ends
 * in .json, fetched without an A2A-Version header: a server that speaks
 * both versions then answers with its 0.3 card, which (in the @a2a-js SDK)
 * carries every interface in supportedInterfaces too, and a 1.0-only
 * server answers with its 1.0 card either way.  Required: a name, a
 * description and a JSON-RPC interface with an http(s) URL.  A card that
 * is wrong, or a URL that answers 4xx, ends the start at once (exit 2); a
 * URL that cannot be reached, or answers 5xx, is tried IOA_A2A_CARD_TRIES
 * times first: an agent started beside its A2A server should not lose
 * the race.
 *
 * The two versions differ in names and spellings, not in the exchange:
 *
 *                  1.0 (A2A-Version: 1.0)       0.3 (A2A-Version: 0.3)
 *   interface      supportedInterfaces[]        url (+ preferredTransport)
 *   send           SendMessage                  message/send
 *   stream         SendStreamingMessage         message/stream
 *   poll, cancel   GetTask, CancelTask          tasks/get, tasks/cancel
 *   message        role ROLE_USER, {"text"}     role user, {"kind":"text"}
 *   results        {"task"}, {"message"}, ...   {"kind":"task"}, ...
 *   states         TASK_STATE_WORKING           working
 *
 * Both are read by one parser: an answer is recognised by its "kind" (0.3)
 * or by its single key (1.0: task, message, statusUpdate, artifactUpdate;
 * GetTask answers a bare Task), and a state in either spelling.
 *
 * Sending.  With capabilities.streaming the task goes out as a streaming
 * message and the answer is Server-Sent Events, one JSON-RPC answer per
 * event; otherwise as a plain message asking not to wait (1.0's
 * returnImmediately, 0.3's blocking false): the task id comes back at
 * once, so a task that hangs can still be cancelled, and the task is then
 * polled with tasks/get, every IOA_A2A_POLL_MIN ms doubling up to
 * IOA_A2A_POLL_MAX: one request a second or two costs the agent nothing,
 * and a result waits at most that long.  A stream that ends before the
 * task did is followed by polling too.
 *
 * States, and what they become:
 *
 *   submitted, working   progress: each new status message text is an
 *                        INFORM_TASK_PROGRESS (at most IOA_A2A_NOTES)
 *   completed            completed: the artifacts' text parts, then the
 *                        final status message's text
 *   failed, rejected     failed, with the agent's status message
 *   canceled             failed: "the A2A agent cancelled the task"
 *   input-required,      failed, with the agent's question, and the A2A
 *   auth-required        task is cancelled: an ioa task is one request
 *                        and one result, nobody could answer the question
 *                        (a "partial" would tell the coordinator that part
 *                        of the work is done, and none is)
 *   (a message instead   completed, its text
 *    of a task)
 *
 * A JSON-RPC error, a non-2xx answer, an answer that is not what A2A says
 * it is, or a transport error is "failed" with the method, the URL and the
 * reason.  Every answer is bounded (IOA_A2A_RESPONSE_MAX; the texts kept
 * for the result like http.c's), so a runaway agent costs memory once.
 *
 * Everything is a transfer on the loop's multi handle; answers are read in
 * the write callback but handled in a posted event (or done()), because
 * handling may post envelopes and start transfers, which libcurl forbids
 * in its callbacks (loop.c).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


#define IOA_A2A_CARD_PATH  "/.well-known/agent-card.json"
#define IOA_A2A_CARD_MAX   (1024 * 1024)
#define IOA_A2A_CARD_TRIES 3
#define IOA_A2A_CARD_RETRY 1000 /* ms, doubled after each try */

#define IOA_A2A_CONNECT_TIMEOUT 10000L /* ms */
#define IOA_A2A_GET_TIMEOUT     30000L /* ms, a tasks/get */
/* below main.c's drain time, so a cancel at shutdown is still answered */
#define IOA_A2A_CANCEL_TIMEOUT 3000L /* ms */

#define IOA_A2A_RESPONSE_MAX (4 * 1024 * 1024)
#define IOA_A2A_POLL_MIN     200  /* ms */
#define IOA_A2A_POLL_MAX     2000 /* ms */
#define IOA_A2A_NOTES        50   /* progress envelopes per task */
#define IOA_A2A_ERROR_BODY   500  /* bytes of a failure's body */

/* the hub's registration limits (ngx_ioa.h): a card's description and
 * tags are cut to them rather than refused */
#define IOA_A2A_DESC_MAX 8192
#define IOA_A2A_TAGS_MAX 32
#define IOA_A2A_TAG_MAX  64


typedef struct {
    const char *version; /* the A2A-Version header */
    const char *send;
    const char *stream;
    const char *get;
    const char *cancel;
} ioa_a2a_dialect_t;


static const ioa_a2a_dialect_t ioa_a2a_v10 = { "1.0", "SendMessage",
                                               "SendStreamingMessage",
                                               "GetTask", "CancelTask" };

static const ioa_a2a_dialect_t ioa_a2a_v03 = { "0.3", "message/send",
                                               "message/stream", "tasks/get",
                                               "tasks/cancel" };


/* the agent behind this process, from its card */

typedef struct {
    char                    *rpc_url;
    const ioa_a2a_dialect_t *d;
    struct curl_slist       *headers;
    unsigned                 streaming:1;
} ioa_a2a_peer_t;


typedef enum {
    IOA_A2A_UNKNOWN = 0,
    IOA_A2A_SUBMITTED,
    IOA_A2A_WORKING,
    IOA_A2A_INPUT_REQUIRED,
    IOA_A2A_AUTH_REQUIRED,
    IOA_A2A_COMPLETED,
    IOA_A2A_FAILED,
    IOA_A2A_CANCELED,
    IOA_A2A_REJECTED
} ioa_a2a_state_e;


/* in ioa_a2a_state_e's order: 0.3's spelling, 1.0's */
static const char *ioa_a2a_states[][2] = {
    { "unknown", "TASK_STATE_UNSPECIFIED" },
    { "submitted", "TASK_STATE_SUBMITTED" },
    { "working", "TASK_STATE_WORKING" },
    { "input-required", "TASK_STATE_INPUT_REQUIRED" },
    { "auth-required", "TASK_STATE_AUTH_REQUIRED" },
    { "completed", "TASK_STATE_COMPLETED" },
    { "failed", "TASK_STATE_FAILED" },
    { "canceled", "TASK_STATE_CANCELED" },
    { "rejected", "TASK_STATE_REJECTED" },
};


typedef enum {
    IOA_A2A_SEND = 0, /* the message is out, its answer is coming */
    IOA_A2A_WAIT,     /* polling: the next tasks/get is a timer away */
    IOA_A2A_GET,      /* a tasks/get is out */
    IOA_A2A_CANCEL,   /* a tasks/cancel is out; the outcome is decided */
    IOA_A2A_DONE
} ioa_a2a_step_e;


typedef struct ioa_a2a_art_s ioa_a2a_art_t;

struct ioa_a2a_art_s {
    ioa_a2a_art_t *next;
    char          *id;
    ioa_buf_t      text;  /* at most ioa_a2a_keep() bytes */
    size_t         total; /* how many there were */
};


typedef struct {
    ioa_task_t       *task;
    ioa_a2a_step_e    step;
    const char       *method; /* of the request out */
    ioa_xfer_t        xfer;
    ioa_buf_t         body;
    ioa_buf_t         in; /* answer bytes not handled yet */
    size_t            received;
    long              status;
    ioa_sse_parser_t  sse;
    ioa_event_t       process;
    ioa_event_t       free_ev;
    ioa_event_t       cancel_ev; /* the A2A task's id came: cancel it */
    ioa_timer_t       deadline;
    ioa_timer_t       poll;
    unsigned          poll_ms;
    char             *a2a_id;
    ioa_a2a_state_e   state;
    ioa_a2a_art_t    *arts;
    ioa_a2a_art_t   **arts_tail;
    ioa_buf_t         said;  /* the last status message's text */
    ioa_buf_t         noted; /* the last one posted as progress */
    unsigned          notes;
    ioa_task_status_e outcome; /* while cancelling */
    ioa_buf_t         why;
    char              err[CURL_ERROR_SIZE];
    unsigned          typed:1;  /* the answer's type was looked at */
    unsigned          events:1; /* it is text/event-stream */
    unsigned          too_large:1;
    unsigned          replied:1; /* a message, not a task, answered */
    unsigned          cancel_wait:1; /* to cancel once its id is known */
} ioa_a2a_call_t;


static void     ioa_a2a_start(ioa_task_t *t);
static void     ioa_a2a_cancel(ioa_task_t *t);
static int      ioa_a2a_card(yajl_val card, ioa_buf_t *err);
static void     ioa_a2a_card_defaults(yajl_val card);
static int      ioa_a2a_request(ioa_a2a_call_t *c, const char *method,
                                ioa_buf_t *params, long timeout);
static size_t   ioa_a2a_write(char *p, size_t size, size_t n, void *data);
static void     ioa_a2a_process(ioa_event_t *ev);
static int      ioa_a2a_sse_event(void *ctx, ioa_sse_event_t *ev);
static void     ioa_a2a_done(ioa_xfer_t *x, CURLcode rc);
static void     ioa_a2a_answer(ioa_a2a_call_t *c, const char *text, size_t len);
static yajl_val ioa_a2a_rpc(const char *text, size_t len, yajl_val *result,
                            ioa_buf_t *err);
static int      ioa_a2a_result(ioa_a2a_call_t *c, yajl_val r, ioa_buf_t *err);
static int      ioa_a2a_task(ioa_a2a_call_t *c, yajl_val task, ioa_buf_t *err);
static int      ioa_a2a_status(ioa_a2a_call_t *c, yajl_val st, ioa_buf_t *err);
static int      ioa_a2a_artifact(ioa_a2a_call_t *c, yajl_val art, int append,
                                 ioa_buf_t *err);
static void     ioa_a2a_texts(yajl_val parts, ioa_buf_t *b, size_t *total);
static size_t   ioa_a2a_append(ioa_buf_t *b, const char *sep, const char *s,
                               size_t len);
static void     ioa_a2a_id(ioa_a2a_call_t *c, const char *id);
static void     ioa_a2a_cancel_now(ioa_event_t *ev);
static int      ioa_a2a_state(const char *s);
static void     ioa_a2a_settle(ioa_a2a_call_t *c);
static void     ioa_a2a_next(ioa_a2a_call_t *c);
static void     ioa_a2a_unstarted(ioa_a2a_call_t *c);
static void     ioa_a2a_poll_handler(ioa_timer_t *tm);
static void     ioa_a2a_deadline_handler(ioa_timer_t *tm);
static void     ioa_a2a_fail(ioa_a2a_call_t *c, ioa_buf_t *why);
static void     ioa_a2a_abort(ioa_a2a_call_t *c, ioa_task_status_e status,
                              ioa_buf_t *why);
static void     ioa_a2a_cancel_done(ioa_a2a_call_t *c, CURLcode rc);
static void     ioa_a2a_end(ioa_a2a_call_t *c, ioa_task_status_e status,
                            const char *text, size_t len, size_t total);
static void     ioa_a2a_completed(ioa_a2a_call_t *c);
static void     ioa_a2a_stop(ioa_a2a_call_t *c);
static void     ioa_a2a_arts_free(ioa_a2a_call_t *c);
static void     ioa_a2a_free(ioa_event_t *ev);
static size_t   ioa_a2a_keep(void);
static int      ioa_a2a_http_url(const char *s);
static void     ioa_a2a_easy(CURL *e, const char *url, char *errbuf);


const ioa_adapter_t ioa_a2a_adapter = { "a2a", ioa_a2a_start, ioa_a2a_cancel };

static ioa_a2a_peer_t ioa_a2a;
static long long      ioa_a2a_rpc_id;


/* ------------------------------------------------------------ the card */

typedef struct {
    ioa_buf_t body;
    size_t    received;
    unsigned  done:1;
    unsigned  too_large:1;
    CURLcode  rc;
} ioa_a2a_fetch_t;


static size_t
ioa_a2a_card_write(char *p, size_t size, size_t n, void *data)
{
    ioa_a2a_fetch_t *f = data;

    f->received += size * n;

    if (f->received > IOA_A2A_CARD_MAX) {
        f->too_large = 1;
        return 0;
    }

    ioa_buf_add(&f->body, p, size * n);

    return size * n;
}


static void
ioa_a2a_card_done(ioa_xfer_t *x, CURLcode rc)
{
    ioa_a2a_fetch_t *f = x->data;

    f->rc = rc;
    f->done = 1;
}


static void
ioa_a2a_wake(ioa_timer_t *tm)
{
    *(int *) tm->data = 1;
}


/* one GET of the card: 0 fetched (*status its HTTP status), 1 worth
 * another try, -1 not (err says why) */

static int
ioa_a2a_card_get(const char *url, ioa_buf_t *body, ioa_buf_t *err)
{
    int             rc;
    long            status;
    char            errbuf[CURL_ERROR_SIZE];
    ioa_xfer_t      x = { 0 };
    ioa_a2a_fetch_t f = { 0 };

    x.easy = curl_easy_init();
    if (x.easy == NULL) {
        ioa_buf_adds(err, "curl_easy_init() failed");
        return -1;
    }

    x.done = ioa_a2a_card_done;
    x.data = &f;

    ioa_a2a_easy(x.easy, url, errbuf);
    curl_easy_setopt(x.easy, CURLOPT_TIMEOUT_MS, IOA_A2A_GET_TIMEOUT);
    curl_easy_setopt(x.easy, CURLOPT_WRITEFUNCTION, ioa_a2a_card_write);
    curl_easy_setopt(x.easy, CURLOPT_WRITEDATA, &f);

    if (ioa_xfer_start(&x) != 0) {
        curl_easy_cleanup(x.easy);
        ioa_buf_adds(err, "cannot start the request");
        return -1;
    }

    while (!f.done && !ioa_shutting_down()) {
        ioa_loop_once();
    }

    ioa_xfer_stop(&x);

    status = 0;
    curl_easy_getinfo(x.easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(x.easy);

    rc = 0;

    if (!f.done) {
        rc = -1; /* a signal: main() exits */

    } else if (f.too_large) {
        ioa_buf_addf(err, "the card at %s is larger than %d bytes", url,
                     IOA_A2A_CARD_MAX);
        rc = -1;

    } else if (f.rc != CURLE_OK) {
        ioa_buf_addf(err, "cannot fetch the card at %s: %s", url,
                     errbuf[0] ? errbuf : curl_easy_strerror(f.rc));
        rc = 1;

    } else if (status < 200 || status > 299) {
        ioa_buf_addf(err, "HTTP %ld from %s", status, url);
        rc = (status >= 500 || status == 408 || status == 429) ? 1 : -1;

        if (status == 404) {
            ioa_buf_adds(err, " (is --a2a the agent's base URL, or its "
                              "card's URL ending in .json?)");
        }
    }

    *body = f.body;

    return rc;
}


/*
 * Start-up, before the hub: fetch and check the card, take its interface,
 * fill in --name, --desc and --tag.  0, or -1 after saying why on stderr
 * (main() exits 2).
 */

int
ioa_a2a_discover(void)
{
    int         rc, woke;
    char        errtext[256];
    size_t      len, i, tries;
    uint64_t    delay;
    yajl_val    doc;
    ioa_buf_t   url = { 0 }, body = { 0 }, err = { 0 };
    ioa_timer_t wait = { 0 };

    len = strlen(ioa_conf.a2a_url);

    if (len > 5 && strcmp(ioa_conf.a2a_url + len - 5, ".json") == 0) {
        ioa_buf_adds(&url, ioa_conf.a2a_url);

    } else {
        ioa_buf_addf(&url, "%s%s", ioa_conf.a2a_url, IOA_A2A_CARD_PATH);
    }

    ioa_conf.a2a_card = ioa_buf_take(&url);

    delay = IOA_A2A_CARD_RETRY;
    rc = 1;

    for (tries = 1; rc == 1; tries++) {
        ioa_buf_reset(&err);
        ioa_buf_free(&body);

        rc = ioa_a2a_card_get(ioa_conf.a2a_card, &body, &err);

        if (rc != 1 || tries == IOA_A2A_CARD_TRIES) {
            break;
        }

        ioa_log_warn("%s; trying again in %llu ms", ioa_buf_cstr(&err),
                     (unsigned long long) delay);

        woke = 0;
        wait.handler = ioa_a2a_wake;
        wait.data = &woke;
        ioa_timer_add(&wait, delay);

        while (!woke && !ioa_shutting_down()) {
            ioa_loop_once();
        }

        ioa_timer_del(&wait);
        delay *= 2;

        if (!woke) {
            rc = -1;
        }
    }

    doc = NULL;

    if (rc == 0) {
        errtext[0] = '\0';
        doc = ioa_json_parse_err(body.data ? body.data : "", body.len, errtext,
                                 sizeof(errtext));

        if (doc == NULL || !YAJL_IS_OBJECT(doc)) {
            ioa_buf_addf(&err, "the card at %s is not a JSON object%s%s",
                         ioa_conf.a2a_card, errtext[0] ? ": " : "", errtext);
            rc = -1;

        } else if (ioa_a2a_card(doc, &err) != 0) {
            rc = -1;
        }
    }

    if (rc != 0) {
        if (!ioa_shutting_down()) {
            /* one line, whatever the body or the parser said */
            for (i = 0; i < err.len; i++) {
                if ((unsigned char) err.data[i] < 0x20) {
                    err.data[i] = ' ';
                }
            }

            fprintf(stderr, "ioa-agent: --a2a %s: %s\n", ioa_conf.a2a_url,
                    ioa_buf_cstr(&err));
        }

        yajl_tree_free(doc);
        ioa_buf_free(&body);
        ioa_buf_free(&err);
        return -1;
    }

    ioa_a2a_card_defaults(doc);

    ioa_log_info("A2A agent \"%s\" at %s: JSON-RPC %s%s, A2A %s",
                 ioa_json_get_str(doc, "name"), ioa_conf.a2a_card,
                 ioa_a2a.rpc_url, ioa_a2a.streaming ? " (streaming)" : "",
                 ioa_a2a.d->version);

    yajl_tree_free(doc);
    ioa_buf_free(&body);
    ioa_buf_free(&err);

    return 0;
}


static int
ioa_a2a_http_url(const char *s)
{
    return s
           && (strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0)
           && strlen(s) < 4096;
}


/* the interface to use: 1.0's supportedInterfaces (a JSON-RPC one of
 * version 1.x, else 0.x), or 0.3's url with its transport */

static int
ioa_a2a_card(yajl_val card, ioa_buf_t *err)
{
    size_t      i;
    yajl_val    ifs, it, caps;
    const char *s, *url, *binding, *version, *v10, *v03;

    s = ioa_json_get_str(card, "name");

    if (s == NULL || *s == '\0') {
        ioa_buf_addf(err, "the card at %s has no \"name\"", ioa_conf.a2a_card);
        return -1;
    }

    if (ioa_conf.name == NULL && !ioa_valid_name(s)) {
        ioa_buf_addf(err,
                     "the card's name \"%s\" is not a name the hub "
                     "accepts (" IOA_NAME_RULE "): give --name",
                     s);
        return -1;
    }

    if (ioa_json_get_str(card, "description") == NULL) {
        ioa_buf_addf(err, "the card at %s has no \"description\"",
                     ioa_conf.a2a_card);
        return -1;
    }

    v10 = NULL;
    v03 = NULL;
    ifs = ioa_json_get(card, "supportedInterfaces");

    for (i = 0; ifs && YAJL_IS_ARRAY(ifs) && i < ifs->u.array.len; i++) {
        it = ifs->u.array.values[i];
        url = ioa_json_get_str(it, "url");
        binding = ioa_json_get_str(it, "protocolBinding");
        version = ioa_json_get_str(it, "protocolVersion");

        if (url == NULL || binding == NULL || strcmp(binding, "JSONRPC") != 0) {
            continue;
        }

        if (version && strncmp(version, "1.", 2) == 0) {
            v10 = v10 ? v10 : url;

        } else if (version == NULL || strncmp(version, "0.", 2) == 0) {
            v03 = v03 ? v03 : url;
        }
    }

    /* a 0.3 card: url speaks preferredTransport (JSONRPC by default) */

    url = ioa_json_get_str(card, "url");
    binding = ioa_json_get_str(card, "preferredTransport");

    if (v03 == NULL && url
        && (binding == NULL || strcmp(binding, "JSONRPC") == 0)) {
        v03 = url;
    }

    ifs = ioa_json_get(card, "additionalInterfaces");

    for (i = 0; ifs && YAJL_IS_ARRAY(ifs) && i < ifs->u.array.len; i++) {
        it = ifs->u.array.values[i];
        binding = ioa_json_get_str(it, "transport");

        if (v03 == NULL && binding && strcmp(binding, "JSONRPC") == 0) {
            v03 = ioa_json_get_str(it, "url");
        }
    }

    if (v10 == NULL && v03 == NULL) {
        ioa_buf_addf(err,
                     "the card at %s offers no JSON-RPC interface "
                     "(supportedInterfaces with protocolBinding \"JSONRPC\", "
                     "or a 0.3 \"url\")",
                     ioa_conf.a2a_card);
        return -1;
    }

    url = v10 ? v10 : v03;

    if (!ioa_a2a_http_url(url)) {
        ioa_buf_addf(err,
                     "the card's JSON-RPC URL \"%.200s\" is not an "
                     "http:// or https:// URL",
                     url);
        return -1;
    }

    ioa_a2a.rpc_url = ioa_strdup(url);
    ioa_a2a.d = v10 ? &ioa_a2a_v10 : &ioa_a2a_v03;

    caps = ioa_json_get(card, "capabilities");
    ioa_a2a.streaming = YAJL_IS_TRUE(ioa_json_get(caps, "streaming"));

    return 0;
}


/* what the options did not say, the card does */

static void
ioa_a2a_card_defaults(yajl_val card)
{
    size_t      i, j, k;
    yajl_val    skills, tags;
    ioa_buf_t   b = { 0 };
    const char *s;

    if (ioa_conf.name == NULL) {
        ioa_conf.name = ioa_strdup(ioa_json_get_str(card, "name"));
    }

    if (ioa_conf.desc == NULL) {
        s = ioa_json_get_str(card, "description");
        ioa_conf.desc =
            ioa_strndup(s, ioa_utf8_cut(s, strlen(s), IOA_A2A_DESC_MAX));
    }

    if (ioa_conf.ntags == 0) {
        /* every skill's tags, once each, as many as the hub takes */
        free((void *) ioa_conf.tags);
        ioa_conf.tags = ioa_calloc(sizeof(char *) * IOA_A2A_TAGS_MAX);
        skills = ioa_json_get(card, "skills");

        for (i = 0; skills && YAJL_IS_ARRAY(skills) && i < skills->u.array.len;
             i++) {
            tags = ioa_json_get(skills->u.array.values[i], "tags");

            for (j = 0; tags && YAJL_IS_ARRAY(tags) && j < tags->u.array.len
                        && ioa_conf.ntags < IOA_A2A_TAGS_MAX;
                 j++)
            {
                s = ioa_json_string(tags->u.array.values[j]);

                if (s == NULL || *s == '\0' || strlen(s) > IOA_A2A_TAG_MAX) {
                    continue;
                }

                for (k = 0; k < ioa_conf.ntags; k++) {
                    if (strcmp(ioa_conf.tags[k], s) == 0) {
                        break;
                    }
                }

                if (k == ioa_conf.ntags) {
                    ioa_conf.tags[ioa_conf.ntags++] = ioa_strdup(s);
                }
            }
        }
    }

    /* every JSON-RPC request carries the same headers */
    ioa_buf_addf(&b, "A2A-Version: %s", ioa_a2a.d->version);
    ioa_a2a.headers = curl_slist_append(NULL, "Content-Type: application/json");
    ioa_a2a.headers =
        curl_slist_append(ioa_a2a.headers, "Accept: application/json, "
                                           "text/event-stream");
    ioa_a2a.headers = curl_slist_append(ioa_a2a.headers, ioa_buf_cstr(&b));
    ioa_a2a.headers = curl_slist_append(ioa_a2a.headers, "Expect:");
    ioa_buf_free(&b);

    if (ioa_a2a.headers == NULL) {
        ioa_fatal("curl_slist_append() failed");
    }
}


static void
ioa_a2a_easy(CURL *e, const char *url, char *errbuf)
{
    curl_easy_reset(e);
    errbuf[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ioa-agent/" IOA_AGENT_VERSION);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, IOA_A2A_CONNECT_TIMEOUT);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
}


/* ------------------------------------------------------------ a task */

static size_t
ioa_a2a_keep(void)
{
    /* room for the JSON around a conclusion of --max-result bytes */
    return ioa_conf.max_result * 2 + 4096;
}


static void
ioa_a2a_start(ioa_task_t *t)
{
    char            id[33];
    ioa_buf_t       params = { 0 };
    ioa_a2a_call_t *c;

    c = ioa_calloc(sizeof(ioa_a2a_call_t));
    c->task = t;
    c->arts_tail = &c->arts;
    c->poll_ms = IOA_A2A_POLL_MIN;
    c->xfer.done = ioa_a2a_done;
    c->xfer.data = c;
    c->process.handler = ioa_a2a_process;
    c->process.data = c;
    c->free_ev.handler = ioa_a2a_free;
    c->free_ev.data = c;
    c->cancel_ev.handler = ioa_a2a_cancel_now;
    c->cancel_ev.data = c;
    c->deadline.handler = ioa_a2a_deadline_handler;
    c->deadline.data = c;
    c->poll.handler = ioa_a2a_poll_handler;
    c->poll.data = c;
    ioa_sse_init(&c->sse, IOA_A2A_RESPONSE_MAX, ioa_a2a_sse_event, c);

    t->adapter_data = c;

    ioa_uuid4_hex(id);

    if (ioa_a2a.d == &ioa_a2a_v10) {
        ioa_buf_addf(&params,
                     "{\"message\":{\"messageId\":\"%s\","
                     "\"role\":\"ROLE_USER\",\"parts\":[{\"text\":",
                     id);
        ioa_json_strn(&params, t->input.data, t->input.len);
        ioa_buf_adds(&params, "}]}");

        if (!ioa_a2a.streaming) {
            ioa_buf_adds(&params, ",\"configuration\":"
                                  "{\"returnImmediately\":true}");
        }

    } else {
        ioa_buf_addf(&params,
                     "{\"message\":{\"kind\":\"message\","
                     "\"messageId\":\"%s\",\"role\":\"user\",\"parts\":"
                     "[{\"kind\":\"text\",\"text\":",
                     id);
        ioa_json_strn(&params, t->input.data, t->input.len);
        ioa_buf_adds(&params, "}]}");

        if (!ioa_a2a.streaming) {
            ioa_buf_adds(&params, ",\"configuration\":{\"blocking\":false}");
        }
    }

    ioa_buf_adds(&params, "}");

    c->xfer.easy = curl_easy_init();
    if (c->xfer.easy == NULL) {
        ioa_fatal("curl_easy_init() failed");
    }

    if (ioa_conf.timeout) {
        ioa_timer_add(&c->deadline, (uint64_t) ioa_conf.timeout * 1000);
    }

    /* the deadline bounds the message, not libcurl: a timeout must leave
     * the call able to send tasks/cancel */
    if (ioa_a2a_request(c,
                        ioa_a2a.streaming ? ioa_a2a.d->stream : ioa_a2a.d->send,
                        &params, 0)
        != 0)
    {
        ioa_a2a_unstarted(c);
    }

    ioa_buf_free(&params);
}


static void
ioa_a2a_unstarted(ioa_a2a_call_t *c)
{
    ioa_buf_t why = { 0 };

    ioa_buf_addf(&why, "cannot start the %s request", c->method);
    ioa_a2a_fail(c, &why);
    ioa_buf_free(&why);
}


/* one JSON-RPC request on the call's transfer: 0, or -1 (the caller ends
 * the task) */

static int
ioa_a2a_request(ioa_a2a_call_t *c, const char *method, ioa_buf_t *params,
                long timeout)
{
    CURL *e;

    e = c->xfer.easy;

    ioa_buf_reset(&c->body);
    ioa_buf_addf(&c->body,
                 "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"%s\","
                 "\"params\":",
                 ++ioa_a2a_rpc_id, method);
    ioa_buf_add(&c->body, params->data, params->len);
    ioa_buf_adds(&c->body, "}");

    ioa_a2a_easy(e, ioa_a2a.rpc_url, c->err);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ioa_a2a.headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) c->body.len);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_a2a_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);

    c->method = method;
    ioa_buf_reset(&c->in);
    ioa_sse_reset(&c->sse);
    c->received = 0;
    c->status = 0;
    c->typed = 0;
    c->events = 0;
    c->too_large = 0;

    if (ioa_xfer_start(&c->xfer) != 0) {
        return -1;
    }

    ioa_log_debug("task %s: %s %s", ioa_task_key(c->task), method,
                  ioa_a2a.rpc_url);

    return 0;
}


/* libcurl's write callback: keep the bytes, handle them after it */

static size_t
ioa_a2a_write(char *p, size_t size, size_t n, void *data)
{
    char           *type;
    size_t          len;
    ioa_a2a_call_t *c;

    c = data;
    len = size * n;
    c->received += len;

    if (!c->typed) {
        c->typed = 1;
        type = NULL;
        curl_easy_getinfo(c->xfer.easy, CURLINFO_RESPONSE_CODE, &c->status);
        curl_easy_getinfo(c->xfer.easy, CURLINFO_CONTENT_TYPE, &type);
        c->events = c->status >= 200 && c->status <= 299 && type
                    && strncmp(type, "text/event-stream", 17) == 0;
    }

    if (c->received > IOA_A2A_RESPONSE_MAX && !c->events) {
        c->too_large = 1;
        return 0;
    }

    ioa_buf_add(&c->in, p, len);

    if (c->events) {
        /* a stream's events are handled as they come; its size is the
         * parser's bound on one event */
        ioa_post_event(&c->process);
    }

    return len;
}


/* a posted event: the stream's bytes so far, through the SSE parser */

static void
ioa_a2a_process(ioa_event_t *ev)
{
    ioa_buf_t       in;
    ioa_buf_t       why = { 0 };
    ioa_a2a_call_t *c;

    c = ev->data;

    if (c->in.len == 0 || c->step != IOA_A2A_SEND) {
        return;
    }

    /* the handler may end the call or start another request */
    in = c->in;
    c->in = (ioa_buf_t){ 0 };

    if (ioa_sse_feed(&c->sse, in.data, in.len) != 0 && c->step == IOA_A2A_SEND)
    {
        ioa_buf_addf(&why,
                     "an event of the %s stream from %s is larger "
                     "than %d bytes",
                     c->method, ioa_a2a.rpc_url, IOA_A2A_RESPONSE_MAX);
        ioa_a2a_fail(c, &why);
    }

    ioa_buf_free(&in);
    ioa_buf_free(&why);
}


static int
ioa_a2a_sse_event(void *ctx, ioa_sse_event_t *ev)
{
    ioa_a2a_call_t *c = ctx;

    if (ev->has_data) {
        ioa_a2a_answer(c, ev->data, ev->data_len);
    }

    /* once ended, the rest of the stream does not matter */
    return (c->step == IOA_A2A_SEND) ? 0 : -1;
}


static void
ioa_a2a_done(ioa_xfer_t *x, CURLcode rc)
{
    size_t          len;
    ioa_buf_t       why = { 0 };
    ioa_a2a_call_t *c;

    c = x->data;

    ioa_xfer_stop(x);

    if (c->step == IOA_A2A_CANCEL) {
        ioa_a2a_cancel_done(c, rc);
        return;
    }

    if (c->status == 0) {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &c->status);
    }

    if (c->events) {
        ioa_delete_posted_event(&c->process);
        ioa_a2a_process(&c->process); /* what the last turn brought */

        if (c->step != IOA_A2A_SEND) {
            return; /* the stream ended the task */
        }

        if (c->a2a_id) {
            ioa_a2a_next(c); /* ended or cut early: the task goes on */
            return;
        }
    }

    if (c->too_large) {
        ioa_buf_addf(&why, "the answer to %s from %s is larger than %d bytes",
                     c->method, ioa_a2a.rpc_url, IOA_A2A_RESPONSE_MAX);

    } else if (rc != CURLE_OK) {
        ioa_buf_addf(&why, "%s to %s: %s", c->method, ioa_a2a.rpc_url,
                     c->err[0] ? c->err : curl_easy_strerror(rc));

    } else if (c->status < 200 || c->status > 299) {
        len = c->in.len > IOA_A2A_ERROR_BODY ? IOA_A2A_ERROR_BODY : c->in.len;
        ioa_buf_addf(&why, "HTTP %ld from %s to %s%s%.*s", c->status,
                     ioa_a2a.rpc_url, c->method, len ? ": " : "", (int) len,
                     c->in.data ? c->in.data : "");
    }

    if (why.len) {
        ioa_a2a_fail(c, &why);
        ioa_buf_free(&why);
        return;
    }

    if (!c->events) {
        ioa_a2a_answer(c, c->in.data ? c->in.data : "", c->in.len);
        ioa_buf_reset(&c->in);
    }

    if (c->step == IOA_A2A_SEND || c->step == IOA_A2A_GET) {
        ioa_a2a_next(c);
    }
}


/* the task is still on: poll it, or give up if no task was named */

static void
ioa_a2a_next(ioa_a2a_call_t *c)
{
    ioa_buf_t why = { 0 };

    if (c->a2a_id == NULL) {
        ioa_buf_addf(&why, "the answer to %s from %s named no task", c->method,
                     ioa_a2a.rpc_url);
        ioa_a2a_fail(c, &why);
        ioa_buf_free(&why);
        return;
    }

    if (c->events) {
        ioa_log_info("task %s: the %s stream ended with A2A task %s still %s; "
                     "polling it",
                     ioa_task_key(c->task), c->method, c->a2a_id,
                     ioa_a2a_states[c->state][0]);
    }

    c->step = IOA_A2A_WAIT;
    ioa_timer_add(&c->poll, c->poll_ms);

    if (c->poll_ms < IOA_A2A_POLL_MAX) {
        c->poll_ms *= 2;

        if (c->poll_ms > IOA_A2A_POLL_MAX) {
            c->poll_ms = IOA_A2A_POLL_MAX;
        }
    }
}


static void
ioa_a2a_poll_handler(ioa_timer_t *tm)
{
    ioa_buf_t       params = { 0 };
    ioa_a2a_call_t *c = tm->data;

    if (c->step != IOA_A2A_WAIT) {
        return;
    }

    c->step = IOA_A2A_GET;

    /* no history: only the status and the artifacts are read */
    ioa_buf_adds(&params, "{\"id\":");
    ioa_json_str(&params, c->a2a_id);
    ioa_buf_adds(&params, ",\"historyLength\":0}");

    if (ioa_a2a_request(c, ioa_a2a.d->get, &params, IOA_A2A_GET_TIMEOUT) != 0) {
        ioa_a2a_unstarted(c);
    }

    ioa_buf_free(&params);
}


/* ------------------------------------------------------------ answers */

/* a JSON-RPC answer: the document, with *result set, or NULL with err
 * saying why (a JSON-RPC error is a "why" too) */

static yajl_val
ioa_a2a_rpc(const char *text, size_t len, yajl_val *result, ioa_buf_t *err)
{
    char        errtext[128];
    yajl_val    doc, e;
    long long   code;
    const char *msg;

    *result = NULL;
    errtext[0] = '\0';

    doc = ioa_json_parse_err(text, len, errtext, sizeof(errtext));

    if (doc == NULL || !YAJL_IS_OBJECT(doc)) {
        ioa_buf_addf(err, "not a JSON-RPC answer (%s): %.*s",
                     errtext[0] ? errtext : "not a JSON object",
                     (int) (len > 200 ? 200 : len), text);
        yajl_tree_free(doc);
        return NULL;
    }

    e = ioa_json_get(doc, "error");

    if (e && !YAJL_IS_NULL(e)) {
        if (ioa_json_get_int(e, "code", &code) != 0) {
            code = 0;
        }

        msg = ioa_json_get_str(e, "message");
        ioa_buf_addf(err, "JSON-RPC error %lld: %.1000s", code,
                     msg ? msg : "(no message)");
        yajl_tree_free(doc);
        return NULL;
    }

    *result = ioa_json_get(doc, "result");

    if (*result == NULL || !YAJL_IS_OBJECT(*result)) {
        ioa_buf_adds(err, "a JSON-RPC answer without a result object");
        yajl_tree_free(doc);
        return NULL;
    }

    return doc;
}


static void
ioa_a2a_answer(ioa_a2a_call_t *c, const char *text, size_t len)
{
    yajl_val  doc, result;
    ioa_buf_t err = { 0 }, why = { 0 };

    doc = ioa_a2a_rpc(text, len, &result, &err);

    if (doc && ioa_a2a_result(c, result, &err) == 0) {
        yajl_tree_free(doc);
        ioa_a2a_settle(c);
        return;
    }

    ioa_buf_addf(&why, "%s from %s: %s", c->method, ioa_a2a.rpc_url,
                 ioa_buf_cstr(&err));
    ioa_a2a_fail(c, &why);

    yajl_tree_free(doc);
    ioa_buf_free(&err);
    ioa_buf_free(&why);
}


/* one result, in either version's shape: see the top */

static int
ioa_a2a_result(ioa_a2a_call_t *c, yajl_val r, ioa_buf_t *err)
{
    yajl_val    v;
    const char *kind;

    kind = ioa_json_get_str(r, "kind");

    if (kind == NULL) {
        if ((v = ioa_json_get(r, "task")) != NULL) {
            return ioa_a2a_task(c, v, err);
        }

        if ((v = ioa_json_get(r, "message")) != NULL) {
            r = v;
            kind = "message";

        } else if ((v = ioa_json_get(r, "statusUpdate")) != NULL) {
            r = v;
            kind = "status-update";

        } else if ((v = ioa_json_get(r, "artifactUpdate")) != NULL) {
            r = v;
            kind = "artifact-update";

        } else if (ioa_json_get(r, "status") && ioa_json_get_str(r, "id")) {
            return ioa_a2a_task(c, r, err); /* GetTask's bare Task */

        } else {
            ioa_buf_adds(err, "a result that is neither a task, a message "
                              "nor an update");
            return -1;
        }
    }

    if (strcmp(kind, "task") == 0) {
        return ioa_a2a_task(c, r, err);
    }

    if (strcmp(kind, "message") == 0) {
        /* the agent answered without a task: that is the answer */
        ioa_buf_reset(&c->said);
        ioa_a2a_texts(ioa_json_get(r, "parts"), &c->said, NULL);
        c->replied = 1;
        c->state = IOA_A2A_COMPLETED;
        return 0;
    }

    if (strcmp(kind, "status-update") == 0) {
        ioa_a2a_id(c, ioa_json_get_str(r, "taskId"));
        return ioa_a2a_status(c, ioa_json_get(r, "status"), err);
    }

    if (strcmp(kind, "artifact-update") == 0) {
        ioa_a2a_id(c, ioa_json_get_str(r, "taskId"));
        return ioa_a2a_artifact(c, ioa_json_get(r, "artifact"),
                                YAJL_IS_TRUE(ioa_json_get(r, "append")), err);
    }

    ioa_buf_addf(err, "a result of an unknown kind \"%.100s\"", kind);

    return -1;
}


static void
ioa_a2a_id(ioa_a2a_call_t *c, const char *id)
{
    if (c->a2a_id == NULL && id && *id) {
        c->a2a_id = ioa_strdup(id);
        ioa_log_info("task %s: A2A task %s", ioa_task_key(c->task), id);

        if (c->cancel_wait) {
            ioa_post_event(&c->cancel_ev);
        }
    }
}


/* a whole Task: its state, and all its artifacts so far */

static int
ioa_a2a_task(ioa_a2a_call_t *c, yajl_val task, ioa_buf_t *err)
{
    size_t      i;
    yajl_val    arts;
    const char *id;

    id = ioa_json_get_str(task, "id");

    if (id == NULL || *id == '\0') {
        ioa_buf_adds(err, "a task without an id");
        return -1;
    }

    ioa_a2a_id(c, id);

    arts = ioa_json_get(task, "artifacts");

    if (arts && YAJL_IS_ARRAY(arts)) {
        ioa_a2a_arts_free(c); /* a snapshot: all of them */

        for (i = 0; i < arts->u.array.len; i++) {
            if (ioa_a2a_artifact(c, arts->u.array.values[i], 0, err) != 0) {
                return -1;
            }
        }
    }

    return ioa_a2a_status(c, ioa_json_get(task, "status"), err);
}


/* the state in either spelling, -1 for none we know */

static int
ioa_a2a_state(const char *s)
{
    size_t i;

    for (i = 0; s && i < sizeof(ioa_a2a_states) / sizeof(ioa_a2a_states[0]);
         i++) {
        if (strcmp(s, ioa_a2a_states[i][0]) == 0
            || strcmp(s, ioa_a2a_states[i][1]) == 0)
        {
            return (int) i;
        }
    }

    return -1;
}


static int
ioa_a2a_status(ioa_a2a_call_t *c, yajl_val st, ioa_buf_t *err)
{
    int         state;
    ioa_buf_t   text = { 0 };
    const char *s;

    s = ioa_json_get_str(st, "state");
    state = ioa_a2a_state(s);

    if (state < 0) {
        ioa_buf_addf(err, "a status with %s state%s%.100s%s",
                     s ? "an unknown" : "no", s ? " \"" : "", s ? s : "",
                     s ? "\"" : "");
        return -1;
    }

    c->state = (ioa_a2a_state_e) state;

    /* what this status says, not an older one's */
    ioa_buf_reset(&c->said);
    ioa_a2a_texts(ioa_json_get(ioa_json_get(st, "message"), "parts"), &text,
                  NULL);

    if (text.len == 0) {
        ioa_buf_free(&text);
        return 0;
    }

    ioa_buf_set(&c->said, text.data, text.len);

    /* news while it works: a progress envelope, once per text */
    if ((c->state == IOA_A2A_SUBMITTED || c->state == IOA_A2A_WORKING)
        && (text.len != c->noted.len
            || memcmp(text.data, c->noted.data, text.len) != 0))
    {
        ioa_buf_set(&c->noted, text.data, text.len);

        if (c->notes++ < IOA_A2A_NOTES) {
            ioa_task_note(c->task, text.data, text.len);

        } else if (c->notes == IOA_A2A_NOTES + 1) {
            ioa_log_info("task %s: more than %d status messages; the rest "
                         "are not posted",
                         ioa_task_key(c->task), IOA_A2A_NOTES);
        }
    }

    ioa_buf_free(&text);

    return 0;
}


/* an artifact, or a chunk of one: a new id is added, a known one is
 * replaced (or, with append, continued) */

static int
ioa_a2a_artifact(ioa_a2a_call_t *c, yajl_val art, int append, ioa_buf_t *err)
{
    yajl_val       parts;
    const char    *id;
    ioa_a2a_art_t *a;

    parts = ioa_json_get(art, "parts");

    if (art == NULL || !YAJL_IS_OBJECT(art) || parts == NULL
        || !YAJL_IS_ARRAY(parts))
    {
        ioa_buf_adds(err, "an artifact without parts");
        return -1;
    }

    id = ioa_json_get_str(art, "artifactId");
    id = id ? id : "";

    for (a = c->arts; a; a = a->next) {
        if (strcmp(a->id, id) == 0) {
            break;
        }
    }

    if (a == NULL) {
        a = ioa_calloc(sizeof(ioa_a2a_art_t));
        a->id = ioa_strdup(id);
        *c->arts_tail = a;
        c->arts_tail = &a->next;

    } else if (!append) {
        ioa_buf_reset(&a->text);
        a->total = 0;
    }

    ioa_a2a_texts(parts, &a->text, &a->total);

    return 0;
}


/* sep (when b is not empty) and s, as much as fits in ioa_a2a_keep()
 * bytes; returns how many bytes there were */

static size_t
ioa_a2a_append(ioa_buf_t *b, const char *sep, const char *s, size_t len)
{
    size_t keep, n;

    keep = ioa_a2a_keep();
    n = b->len ? strlen(sep) : 0;

    if (b->len + n < keep) {
        ioa_buf_add(b, sep, n);
        ioa_buf_add(b, s, ioa_utf8_cut(s, len, keep - b->len));
    }

    return n + len;
}


/* the text parts of a message or an artifact, one per line; *total (if
 * given) counts the bytes, kept or not */

static void
ioa_a2a_texts(yajl_val parts, ioa_buf_t *b, size_t *total)
{
    size_t      i, n;
    const char *s;

    for (i = 0; parts && YAJL_IS_ARRAY(parts) && i < parts->u.array.len; i++) {
        s = ioa_json_get_str(parts->u.array.values[i], "text");

        if (s == NULL) {
            continue; /* a file or data part: not text for a room */
        }

        n = ioa_a2a_append(b, "\n", s, strlen(s));

        if (total) {
            *total += n;
        }
    }
}


/* after each answer: has the task reached a state we end on? */

static void
ioa_a2a_settle(ioa_a2a_call_t *c)
{
    ioa_buf_t   why = { 0 };
    const char *said;

    said = c->said.len ? ioa_buf_cstr(&c->said) : "(no reason given)";

    switch (c->state) {

    case IOA_A2A_COMPLETED:
        ioa_a2a_completed(c);
        return;

    case IOA_A2A_FAILED:
        ioa_buf_addf(&why, "the A2A agent reports the task failed: %s", said);
        break;

    case IOA_A2A_REJECTED:
        ioa_buf_addf(&why, "the A2A agent rejected the task: %s", said);
        break;

    case IOA_A2A_CANCELED:
        ioa_buf_addf(&why, "the A2A agent cancelled the task: %s", said);
        break;

    case IOA_A2A_INPUT_REQUIRED:
    case IOA_A2A_AUTH_REQUIRED:
        /* see the top: nobody can answer, so the A2A task is cancelled */
        ioa_buf_addf(&why,
                     "the A2A agent %s, which an ioa task cannot "
                     "give: %s",
                     c->state == IOA_A2A_INPUT_REQUIRED
                         ? "needs more input"
                         : "asks for authentication",
                     said);
        ioa_a2a_abort(c, IOA_TASK_FAILED, &why);
        ioa_buf_free(&why);
        return;

    default:
        return; /* still at work */
    }

    ioa_a2a_end(c, IOA_TASK_FAILED, why.data, why.len, why.len);
    ioa_buf_free(&why);
}


/* the result: every artifact's text, then the final message's */

static void
ioa_a2a_completed(ioa_a2a_call_t *c)
{
    size_t         total;
    ioa_buf_t      out = { 0 };
    ioa_a2a_art_t *a;

    total = 0;

    for (a = c->arts; a; a = a->next) {
        if (a->total) {
            /* what was cut from the artifact counts as well */
            total += ioa_a2a_append(&out, "\n\n", a->text.data, a->text.len)
                     + (a->total - a->text.len);
        }
    }

    if (c->said.len) {
        total += ioa_a2a_append(&out, "\n\n", c->said.data, c->said.len);
    }

    ioa_a2a_end(c, IOA_TASK_COMPLETED, out.data ? out.data : "", out.len,
                total);
    ioa_buf_free(&out);
}


/* ------------------------------------------------------------ the end */

static void
ioa_a2a_fail(ioa_a2a_call_t *c, ioa_buf_t *why)
{
    ioa_a2a_end(c, IOA_TASK_FAILED, why->data, why->len, why->len);
}


static void
ioa_a2a_deadline_handler(ioa_timer_t *tm)
{
    ioa_buf_t       why = { 0 };
    ioa_a2a_call_t *c = tm->data;

    if (c->cancel_wait) {
        /* the task's id never came: nothing the agent could cancel */
        c->cancel_wait = 0;
        ioa_a2a_stop(c);
        ioa_buf_adds(&c->why, "; no A2A task was created yet, so none was "
                              "cancelled");
        ioa_a2a_end(c, c->outcome, c->why.data, c->why.len, c->why.len);
        return;
    }

    ioa_buf_addf(&why, "no result within %u s", ioa_conf.timeout);
    ioa_a2a_abort(c, IOA_TASK_TIMED_OUT, &why);
    ioa_buf_free(&why);
}


/* the hub (the goal ended) or shutdown: task.c set cancel_why */

static void
ioa_a2a_cancel(ioa_task_t *t)
{
    ioa_buf_t       why = { 0 };
    ioa_a2a_call_t *c = t->adapter_data;

    if (c == NULL || c->step == IOA_A2A_CANCEL || c->step == IOA_A2A_DONE
        || c->cancel_wait)
    {
        return;
    }

    ioa_buf_adds(&why, t->cancel_why);
    ioa_a2a_abort(c, IOA_TASK_FAILED, &why);
    ioa_buf_free(&why);
}


/* end the task as status/why, after asking the A2A agent to cancel it
 * (when there is an A2A task to cancel) */

static void
ioa_a2a_abort(ioa_a2a_call_t *c, ioa_task_status_e status, ioa_buf_t *why)
{
    ioa_buf_t params = { 0 };

    if (c->a2a_id == NULL && c->step == IOA_A2A_SEND) {
        /* the message is out and the agent may be working on it already:
         * its answer names the task, which is cancelled then (a cancel
         * that comes right after the assignment is no rarity: the worker
         * hears it at once); IOA_A2A_CANCEL_TIMEOUT bounds the wait */
        c->cancel_wait = 1;
        c->outcome = status;
        ioa_buf_set(&c->why, why->data, why->len);
        ioa_timer_del(&c->deadline);
        ioa_timer_add(&c->deadline, IOA_A2A_CANCEL_TIMEOUT);
        return;
    }

    ioa_a2a_stop(c);

    if (c->a2a_id == NULL) {
        ioa_buf_adds(why, "; no A2A task was created yet, so none was "
                          "cancelled");
        ioa_a2a_end(c, status, why->data, why->len, why->len);
        return;
    }

    c->outcome = status;
    ioa_buf_set(&c->why, why->data, why->len);
    c->step = IOA_A2A_CANCEL;

    ioa_log_info("task %s: %s; sending %s for A2A task %s",
                 ioa_task_key(c->task), ioa_buf_cstr(&c->why),
                 ioa_a2a.d->cancel, c->a2a_id);

    ioa_buf_adds(&params, "{\"id\":");
    ioa_json_str(&params, c->a2a_id);
    ioa_buf_adds(&params, "}");

    if (ioa_a2a_request(c, ioa_a2a.d->cancel, &params, IOA_A2A_CANCEL_TIMEOUT)
        != 0) {
        ioa_buf_addf(&c->why, "; %s could not be sent", c->method);
        ioa_a2a_end(c, c->outcome, c->why.data, c->why.len, c->why.len);
    }

    ioa_buf_free(&params);
}


/* posted by ioa_a2a_id(): the cancel that waited for the task's id */

static void
ioa_a2a_cancel_now(ioa_event_t *ev)
{
    ioa_buf_t       why = { 0 };
    ioa_a2a_call_t *c = ev->data;

    if (!c->cancel_wait || c->step == IOA_A2A_DONE) {
        return;
    }

    c->cancel_wait = 0;
    ioa_buf_set(&why, c->why.data, c->why.len);
    c->step = IOA_A2A_WAIT;             /* no longer the send's */
    ioa_a2a_abort(c, c->outcome, &why);
    ioa_buf_free(&why);
}


static void
ioa_a2a_cancel_done(ioa_a2a_call_t *c, CURLcode rc)
{
    long      status;
    yajl_val  doc, result;
    ioa_buf_t err = { 0 };
    int       state;

    status = 0;
    curl_easy_getinfo(c->xfer.easy, CURLINFO_RESPONSE_CODE, &status);

    ioa_buf_addf(&c->why, "; %s sent to the A2A agent: ", c->method);

    if (rc != CURLE_OK) {
        ioa_buf_addf(&c->why, "no answer (%s)",
                     c->err[0] ? c->err : curl_easy_strerror(rc));

    } else if (status < 200 || status > 299) {
        ioa_buf_addf(&c->why, "HTTP %ld", status);

    } else if ((doc = ioa_a2a_rpc(c->in.data ? c->in.data : "", c->in.len,
                                  &result, &err))
               == NULL)
    {
        ioa_buf_addf(&c->why, "refused (%s)", ioa_buf_cstr(&err));

    } else {
        /* 1.0 answers a bare Task, 0.3 one with "kind" */
        state = ioa_a2a_state(
            ioa_json_get_str(ioa_json_get(result, "status"), "state"));
        ioa_buf_addf(&c->why, "the task is now %s",
                     state >= 0 ? ioa_a2a_states[state][0]
                                : "in an unknown state");
        yajl_tree_free(doc);
    }

    ioa_buf_free(&err);

    ioa_a2a_end(c, c->outcome, c->why.data, c->why.len, c->why.len);
}


/* no transfer, no timer, no pending handling */

static void
ioa_a2a_stop(ioa_a2a_call_t *c)
{
    ioa_xfer_stop(&c->xfer);
    ioa_timer_del(&c->deadline);
    ioa_timer_del(&c->poll);
    ioa_delete_posted_event(&c->process);
    ioa_delete_posted_event(&c->cancel_ev);
}


static void
ioa_a2a_end(ioa_a2a_call_t *c, ioa_task_status_e status, const char *text,
            size_t len, size_t total)
{
    ioa_task_t *t;

    if (c->step == IOA_A2A_DONE) {
        return;
    }

    ioa_a2a_stop(c);
    c->step = IOA_A2A_DONE;

    t = c->task;
    t->adapter_data = NULL;

    /* the call may be on the stack (a handler, the SSE parser): it goes
     * at the end of the turn, as the task does */
    ioa_post_event(&c->free_ev);

    ioa_task_finish(t, status, text ? text : "", len, total);
}


static void
ioa_a2a_arts_free(ioa_a2a_call_t *c)
{
    ioa_a2a_art_t *a;

    while (c->arts) {
        a = c->arts;
        c->arts = a->next;
        free(a->id);
        ioa_buf_free(&a->text);
        free(a);
    }

    c->arts_tail = &c->arts;
}


static void
ioa_a2a_free(ioa_event_t *ev)
{
    ioa_a2a_call_t *c = ev->data;

    ioa_a2a_stop(c);

    if (c->xfer.easy) {
        curl_easy_cleanup(c->xfer.easy);
    }

    ioa_a2a_arts_free(c);

    ioa_sse_free(&c->sse);
    ioa_buf_free(&c->body);
    ioa_buf_free(&c->in);
    ioa_buf_free(&c->said);
    ioa_buf_free(&c->noted);
    ioa_buf_free(&c->why);
    free(c->a2a_id);
    free(c);
}
