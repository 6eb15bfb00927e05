/*
 * ioa-worker: the LLM client, one chat completion against an
 * OpenAI-compatible endpoint (POST {base_url}/chat/completions).
 *
 * A call is a loop of attempts.  Each attempt is judged by what came back:
 *
 *   answer     2xx, choices[0].message.content holds a JSON object (after
 *              repair, see iw_llm_extract_json()): done.
 *   refusal    400 or 422 that names response_format or the schema, or
 *              a 5xx that names response_format or json_schema (older
 *              servers fail so): the server cannot do this format, so
 *              c->format steps down (json_schema, json_object, none: the
 *              schema then goes into the prompt) and the request is sent
 *              again at once.  The same for max_tokens (OpenAI's reasoning
 *              models want max_completion_tokens) and temperature.  These
 *              change the conf, so they happen once per process (one
 *              warning each), and they do not use up the attempts: they
 *              can happen at most four times in all.
 *   transient  connection refused or reset, a timeout, 408, 409, 429, 5xx,
 *              a 2xx that is not a completion, a completion that is not a
 *              JSON object (a sampled model may do better next time): try
 *              again after a backoff, exponential with jitter so that
 *              workers that failed together do not retry together, or
 *              after the server's Retry-After when it is longer.
 *   fatal      401, 403, 404, any other 4xx, a redirect, a TLS
 *              verification failure, an oversized answer: a wrong key, URL
 *              or model name, which no retry mends and the operator must
 *              see, so the call fails at once with the server's own words.
 *
 * A call is an object on the event loop (iw_llm_start), in one of these
 * states:
 *
 *   QUEUED    waiting for a slot: at most IOA_LLM_CONCURRENCY requests of
 *             the process are in flight at once, and the others wait in
 *             the order they came, so a slow endpoint is not asked for more
 *             than it can take, however many goals want it
 *   SENDING   its attempt is in flight on libcurl's multi handle, whose
 *             sockets and timer are watched by the loop (curl_loop.c); its
 *             own easy handle, the connections pooled by the multi handle
 *             (TLS included, reused from call to call); each attempt has
 *             IOA_LLM_TIMEOUT
 *   BACKOFF   a transient failure: its own timer sends it again (into the
 *             queue) after the backoff
 *   FINISHED  its done() handler has been called; the owner takes the
 *             result and frees it (a call freed earlier is abandoned: its
 *             transfer is removed and its slot passed on)
 *
 * The breaker: after IOA_LLM_BREAKER_FAILURES attempts in a row that
 * failed (the endpoint down, timing out, refusing), no request is sent for
 * IOA_LLM_BREAKER_OPEN seconds: a call fails at once ("its circuit breaker
 * is open") and the goal's built-in planner decides, instead of every goal
 * spending its attempts and timeouts on a dead endpoint.  Then one call is
 * let through (half open): its success closes the breaker, its failure
 * opens it again.
 *
 * iw_llm_chat() is the blocking form (ioa-llm-check): the call, and the
 * loop run until it has finished.

 * Nothing a server sends can crash the worker: the answer's size is
 * capped (IW_LLM_MAX_BODY), its nesting too (yajl_tree_free() recurses),
 * invalid UTF-8 and NULs are replaced before yajl sees them, and every
 * string in the result is valid UTF-8 so the caller may copy it into the
 * room's JSON as it is (json.c relies on that).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "iw.h"
#include "llm.h"


/* a completion of max_tokens is a few KiB; megabytes mean a wrong URL or
 * a broken server, and must not become the worker's memory */
#define IW_LLM_MAX_BODY          (4 * 1024 * 1024)

/* yajl_tree_free() and ioa_json_emit() recurse: a deeper answer is refused
 * before it is parsed, so 4 MiB of "[" cannot exhaust the stack */
#define IW_LLM_MAX_DEPTH         128

#define IW_LLM_BACKOFF_CAP_MS    10000
#define IW_LLM_RETRY_AFTER_CAP   30000

/* candidates iw_llm_extract_json() tries: each costs a pass over the text */
#define IW_LLM_EXTRACT_TRIES     16

/* how much of a server's or a model's text goes into an error */
#define IW_LLM_SNIPPET           200

#define IW_LLM_DEFAULT_MODEL     "gpt-4o-mini"


/* how an attempt ended */
#define IW_LLM_DONE      0
#define IW_LLM_AGAIN     1           /* the conf changed: send again now */
#define IW_LLM_RETRY     2
#define IW_LLM_FATAL     3


/* one HTTP exchange, what came back */
typedef struct {
    iw_curl_xfer_t  xfer;            /* first: curl_loop.c's view */
    ioa_buf_t    body;
    int          too_big;
    CURLcode     curl_rc;
    long         status;
    long long    retry_after_ms;
    char        *redirect;
    char         errbuf[CURL_ERROR_SIZE];
} iw_llm_http_t;


/* a call's states (see the top of the file) */
typedef enum {
    IW_LLM_CALL_NEW = 0,
    IW_LLM_CALL_QUEUED,              /* waiting for a slot */
    IW_LLM_CALL_SENDING,             /* its attempt is in flight */
    IW_LLM_CALL_BETWEEN,             /* an attempt ended, being judged */
    IW_LLM_CALL_BACKOFF,             /* its timer sends it again */
    IW_LLM_CALL_ENDING,              /* its timer finishes it */
    IW_LLM_CALL_FINISHED
} iw_llm_call_state_e;


struct iw_llm_call_s {
    iw_llm_http_t         h;         /* first: the transfer's */
    iw_llm_call_t        *next;      /* the limiter's queue */
    iw_llm_conf_t        *c;
    iw_llm_call_state_e   state;
    CURL                 *easy;      /* its own: calls run side by side */
    struct curl_slist    *headers;
    yajl_val              msgs;
    yajl_val              schema;
    char                  name[65];
    char                 *body;      /* the attempt's request */
    int                   format;    /* the attempt's */
    int                   failed;    /* attempts that failed (not the
                                        refusals that adapt the conf) */
    long long             start;
    struct event         *timer;     /* backoff, or the finish of a call
                                        that could not be made */
    iw_llm_result_t       out;
    int                   rc;
    int                  *wake;      /* iw_llm_chat()'s flag */
    iw_llm_done_pt        done;
    void                 *data;
};


static int iw_llm_curl_init(void);
static const char *iw_llm_getenv(const char *name, const char *fallback,
    const char **used);
static int iw_llm_bad_text(const char *s, int allow_space);
static struct curl_slist *iw_llm_header(struct curl_slist *l,
    const char *header);
static char *iw_llm_body(iw_llm_conf_t *c, yajl_val msgs, const char *name,
    yajl_val schema, int format);
static size_t iw_llm_write(char *p, size_t size, size_t nmemb, void *data);
static void iw_llm_xfer_done(iw_curl_xfer_t *x, int result);
static void iw_llm_on_wake(evutil_socket_t fd, short what, void *arg);
static int iw_llm_breaker_threshold(void);
static int iw_llm_breaker_open(iw_llm_call_t *k);
static void iw_llm_breaker_count(iw_llm_call_t *k, int failed);
static void iw_llm_enqueue(iw_llm_call_t *k);
static void iw_llm_enqueue_first(iw_llm_call_t *k);
static void iw_llm_dequeue(iw_llm_call_t *k);
static void iw_llm_pump(void);
static void iw_llm_send(iw_llm_call_t *k);
static void iw_llm_end_transfer(iw_llm_call_t *k);
static void iw_llm_attempt_done(iw_llm_call_t *k);
static void iw_llm_on_timer(evutil_socket_t fd, short what, void *arg);
static void iw_llm_finish_soon(iw_llm_call_t *k, int rc);
static void iw_llm_finish(iw_llm_call_t *k, int rc);
static int iw_llm_judge(iw_llm_conf_t *c, int format, iw_llm_http_t *h,
    iw_llm_result_t *out);
static int iw_llm_refused(iw_llm_conf_t *c, int format, iw_llm_http_t *h,
    const char *msg);
static char *iw_llm_content(yajl_val message);
static long long iw_llm_backoff(iw_llm_conf_t *c, int n);
static void iw_llm_error(iw_llm_result_t *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static char *iw_llm_clean(const char *s, size_t n, size_t max);
static const char *iw_llm_server_message(yajl_val doc);
static int iw_llm_mentions(const char *s, size_t n, const char *word);
static void iw_llm_utf8_fix(char *s, size_t n);
static void iw_llm_fix_tree(yajl_val v);
static int iw_llm_depth_ok(const char *s, size_t n);
static yajl_val iw_llm_parse(const char *s, size_t n);
static const char *iw_llm_balanced(const char *s, const char *end);
static const char *iw_llm_format_name(int format);


static CURLM          *iw_llm_multi;

/* the limiter: requests in flight, and the calls waiting for a slot */
static long long       iw_llm_active;
static long long       iw_llm_nqueued;
static iw_llm_call_t  *iw_llm_queue_head;
static iw_llm_call_t  *iw_llm_queue_tail;

/* the breaker: attempts failed in a row, and until when it stays open */
static int             iw_llm_breaker_fails;   /* the threshold, 0: off */
static int             iw_llm_fails;
static long long       iw_llm_open_until;
static iw_llm_call_t  *iw_llm_probe;           /* the half-open try */
static long long       iw_llm_trips;


static int
iw_llm_curl_init(void)
{
    static int  done;

    if (done) {
        return iw_llm_multi ? 0 : -1;
    }

    done = 1;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        return -1;
    }

    /* ioa-llm-check has no loop of its own before this */
    if (iw_loop == NULL && iw_loop_init() != IW_OK) {
        return -1;
    }

    iw_llm_multi = curl_multi_init();

    if (iw_llm_multi == NULL || iw_curl_attach(iw_llm_multi) != IW_OK)
    {
        iw_llm_multi = NULL;
        return -1;
    }

    return 0;
}


/* an empty variable counts as unset: compose files write "VAR=" */

static const char *
iw_llm_getenv(const char *name, const char *fallback, const char **used)
{
    const char  *v;

    *used = name;
    v = getenv(name);

    if ((v == NULL || *v == '\0') && fallback) {
        *used = fallback;
        v = getenv(fallback);
    }

    return (v && *v) ? v : NULL;
}


/* control characters would break the request's header lines */

static int
iw_llm_bad_text(const char *s, int allow_space)
{
    for ( /* void */ ; *s; s++) {
        if ((unsigned char) *s < 0x20 || *s == 0x7f
            || (*s == ' ' && !allow_space))
        {
            return 1;
        }
    }

    return 0;
}


int
iw_llm_conf_from_env(iw_llm_conf_t *c)
{
    char                    *end, *q, *path;
    size_t                   n;
    double                   d;
    long long                ll;
    const char              *base, *key, *model, *v, *name;
    curl_version_info_data  *ver;
    const char *const       *p;

    memset(c, 0, sizeof(iw_llm_conf_t));

    /* the defaults */
    c->timeout_ms = 60000;
    c->connect_timeout_ms = 5000;
    c->max_attempts = 4;
    c->backoff_ms = 500;
    c->format = IW_LLM_FORMAT_SCHEMA;
    c->max_tokens = 1024;
    c->temperature = 0.2;
    c->concurrency = 8;
    c->breaker_fails = 5;
    c->breaker_open_ms = 30000;

    base = iw_llm_getenv("IOA_LLM_BASE_URL", "OPENAI_BASE_URL", &name);
    if (base == NULL) {
        return 0;
    }

    if ((strncasecmp(base, "http://", 7) != 0
         && strncasecmp(base, "https://", 8) != 0)
        || iw_llm_bad_text(base, 0))
    {
        iw_error("%s must be an http:// or https:// URL such as "
                 "http://127.0.0.1:8080/v1, not \"%s\"", name, base);
        return -1;
    }

    if (iw_llm_curl_init() != 0) {
        iw_error("libcurl failed to initialise");
        return -1;
    }

    if (strncasecmp(base, "https://", 8) == 0) {
        ver = curl_version_info(CURLVERSION_NOW);

        for (p = ver->protocols; *p && strcmp(*p, "https") != 0; p++) {
            /* void */
        }

        if (*p == NULL) {
            iw_error("%s is https but this libcurl has no TLS", name);
            return -1;
        }
    }

    /*
     * The base URL as the OpenAI SDKs take it (".../v1"), with any
     * trailing slash dropped; the whole endpoint is accepted too, since
     * that is what a server's documentation usually shows.  A query string
     * (Azure's api-version) stays at the end.
     */

    q = strchr(base, '?');
    path = ioa_strndup(base, q ? (size_t) (q - base) : strlen(base));
    n = strlen(path);

    while (n > 8 && path[n - 1] == '/') {
        path[--n] = '\0';
    }

    if (n > 17 && strcmp(path + n - 17, "/chat/completions") == 0) {
        n -= 17;
        path[n] = '\0';

        while (n > 8 && path[n - 1] == '/') {
            path[--n] = '\0';
        }
    }

    c->base_url = ioa_sprintf("%s%s", path, q ? q : "");
    c->url = ioa_sprintf("%s/chat/completions%s", path, q ? q : "");
    free(path);

    key = iw_llm_getenv("IOA_LLM_API_KEY", "OPENAI_API_KEY", &name);
    if (key) {
        if (iw_llm_bad_text(key, 0)) {
            iw_error("%s holds spaces or control characters", name);
            goto failed;
        }

        c->api_key = ioa_strdup(key);
    }

    model = iw_llm_getenv("IOA_LLM_MODEL", "OPENAI_MODEL", &name);
    if (model && iw_llm_bad_text(model, 1)) {
        iw_error("%s holds control characters", name);
        goto failed;
    }

    c->model = ioa_strdup(model ? model : IW_LLM_DEFAULT_MODEL);

    v = iw_llm_getenv("IOA_LLM_TIMEOUT", NULL, &name);
    if (v) {
        d = strtod(v, &end);
        if (end == v || *end != '\0' || !(d >= 0.001 && d <= 86400)) {
            iw_error("IOA_LLM_TIMEOUT must be seconds (0.001 to 86400), "
                     "not \"%s\"", v);
            goto failed;
        }

        c->timeout_ms = (long long) (d * 1000 + 0.5);

        /* a connect slower than the whole request is no use */
        if (c->connect_timeout_ms > c->timeout_ms) {
            c->connect_timeout_ms = c->timeout_ms;
        }
    }

    v = iw_llm_getenv("IOA_LLM_MAX_ATTEMPTS", NULL, &name);
    if (v) {
        ll = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || ll < 1 || ll > 100) {
            iw_error("IOA_LLM_MAX_ATTEMPTS must be 1 to 100, not \"%s\"", v);
            goto failed;
        }

        c->max_attempts = (int) ll;
    }

    v = iw_llm_getenv("IOA_LLM_RESPONSE_FORMAT", NULL, &name);
    if (v) {
        if (strcmp(v, "json_schema") == 0) {
            c->format = IW_LLM_FORMAT_SCHEMA;

        } else if (strcmp(v, "json_object") == 0) {
            c->format = IW_LLM_FORMAT_OBJECT;

        } else if (strcmp(v, "none") == 0) {
            c->format = IW_LLM_FORMAT_NONE;

        } else {
            iw_error("IOA_LLM_RESPONSE_FORMAT must be json_schema, "
                     "json_object or none, not \"%s\"", v);
            goto failed;
        }
    }

    v = iw_llm_getenv("IOA_LLM_MAX_TOKENS", NULL, &name);
    if (v) {
        ll = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || ll < 16 || ll > 1000000) {
            iw_error("IOA_LLM_MAX_TOKENS must be 16 to 1000000, not \"%s\"",
                     v);
            goto failed;
        }

        c->max_tokens = ll;
    }

    v = iw_llm_getenv("IOA_LLM_CONCURRENCY", NULL, &name);
    if (v) {
        ll = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || ll < 1 || ll > 1024) {
            iw_error("IOA_LLM_CONCURRENCY must be 1 to 1024, not \"%s\"", v);
            goto failed;
        }

        c->concurrency = (int) ll;
    }

    v = iw_llm_getenv("IOA_LLM_BREAKER_FAILURES", NULL, &name);
    if (v) {
        ll = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || ll < 0 || ll > 1000) {
            iw_error("IOA_LLM_BREAKER_FAILURES must be 0 (off) to 1000, "
                     "not \"%s\"", v);
            goto failed;
        }

        c->breaker_fails = (int) ll;
    }

    v = iw_llm_getenv("IOA_LLM_BREAKER_OPEN", NULL, &name);
    if (v) {
        d = strtod(v, &end);
        if (end == v || *end != '\0' || !(d >= 0.001 && d <= 86400)) {
            iw_error("IOA_LLM_BREAKER_OPEN must be seconds (0.001 to "
                     "86400), not \"%s\"", v);
            goto failed;
        }

        c->breaker_open_ms = (long long) (d * 1000 + 0.5);
    }

    v = iw_llm_getenv("IOA_LLM_TEMPERATURE", NULL, &name);
    if (v) {
        d = strtod(v, &end);
        if (end == v || *end != '\0' || !(d >= 0 && d <= 2)) {
            iw_error("IOA_LLM_TEMPERATURE must be 0 to 2, not \"%s\"", v);
            goto failed;
        }

        c->temperature = d;
    }

    return 1;

failed:

    iw_llm_conf_free(c);

    return -1;
}


void
iw_llm_conf_free(iw_llm_conf_t *c)
{
    free(c->base_url);
    free(c->url);
    free(c->api_key);
    free(c->model);
    memset(c, 0, sizeof(iw_llm_conf_t));
}


static const char *
iw_llm_format_name(int format)
{
    switch (format) {
    case IW_LLM_FORMAT_SCHEMA: return "json_schema";
    case IW_LLM_FORMAT_OBJECT: return "json_object";
    default:                   return "none";
    }
}


/* out of memory ends the process, as ioa_alloc() does (ioa_alloc.h) */

static struct curl_slist *
iw_llm_header(struct curl_slist *l, const char *header)
{
    struct curl_slist  *n;

    n = curl_slist_append(l, header);
    if (n == NULL) {
        ioa_fatal("out of memory (curl_slist_append)");
    }

    return n;
}


/* ------------------------------------------------------------ a call */


iw_llm_call_t *
iw_llm_start(iw_llm_conf_t *c, const char *messages_json,
    const char *schema_name, const char *schema_json, iw_llm_done_pt done,
    void *data)
{
    size_t          i;
    ioa_buf_t       hb;
    iw_llm_call_t  *k;

    k = ioa_calloc(sizeof(iw_llm_call_t));
    k->c = c;
    k->done = done;
    k->data = data;
    k->start = ioa_mono_ms();
    k->h.xfer.done = iw_llm_xfer_done;
    ioa_buf_init(&k->h.body);

    /* OpenAI's rule for the name: [a-zA-Z0-9_-]{1,64} */
    for (i = 0; schema_name && schema_name[i] && i < 64; i++) {
        k->name[i] = (strchr("_-", schema_name[i])
                      || (schema_name[i] >= 'a' && schema_name[i] <= 'z')
                      || (schema_name[i] >= 'A' && schema_name[i] <= 'Z')
                      || (schema_name[i] >= '0' && schema_name[i] <= '9'))
                     ? schema_name[i] : '_';
    }

    if (i == 0) {
        strcpy(k->name, "answer");

    } else {
        k->name[i] = '\0';
    }

    iw_llm_breaker_fails = c->breaker_fails;

    if (iw_llm_curl_init() != 0
        || (k->timer = evtimer_new(iw_loop, iw_llm_on_timer, k)) == NULL)
    {
        iw_llm_error(&k->out, "libcurl failed to initialise");
        iw_llm_finish_soon(k, IW_LLM_FAILED);
        return k;
    }

    k->msgs = messages_json
              ? iw_llm_parse(messages_json, strlen(messages_json)) : NULL;
    if (k->msgs == NULL || !YAJL_IS_ARRAY(k->msgs)
        || k->msgs->u.array.len == 0)
    {
        iw_llm_error(&k->out, "the messages are not a JSON array of "
                     "messages");
        iw_llm_finish_soon(k, IW_LLM_FAILED);
        return k;
    }

    if (schema_json) {
        k->schema = iw_llm_parse(schema_json, strlen(schema_json));
        if (k->schema == NULL || !YAJL_IS_OBJECT(k->schema)) {
            iw_llm_error(&k->out, "the schema of %s is not a JSON object",
                         k->name);
            iw_llm_finish_soon(k, IW_LLM_FAILED);
            return k;
        }
    }

    /* an empty "Expect:" stops curl from waiting for a 100 Continue on a
     * long prompt, which some servers never send */
    k->headers = iw_llm_header(NULL, "Content-Type: application/json");
    k->headers = iw_llm_header(k->headers, "Accept: application/json");
    k->headers = iw_llm_header(k->headers, "Expect:");

    if (c->api_key) {
        ioa_buf_init(&hb);
        ioa_buf_addf(&hb, "Authorization: Bearer %s", c->api_key);
        k->headers = iw_llm_header(k->headers, hb.data);
        ioa_buf_free(&hb);
    }

    iw_llm_enqueue(k);

    return k;
}


/* the answer, moved out of the finished call: IW_LLM_OK (out->json set) or
 * IW_LLM_FAILED (out->error says why); out must be freed with
 * iw_llm_result_free() */

int
iw_llm_take(iw_llm_call_t *k, iw_llm_result_t *out)
{
    *out = k->out;
    memset(&k->out, 0, sizeof(iw_llm_result_t));

    return k->rc;
}


int
iw_llm_finished(iw_llm_call_t *k)
{
    return k->state == IW_LLM_CALL_FINISHED;
}


/* frees the call; one still running is abandoned (its transfer removed,
 * its slot given to the next call waiting) */

void
iw_llm_free(iw_llm_call_t *k)
{
    if (k == NULL) {
        return;
    }

    switch (k->state) {

    case IW_LLM_CALL_QUEUED:
        iw_llm_dequeue(k);
        break;

    case IW_LLM_CALL_SENDING:
        iw_llm_end_transfer(k);
        iw_llm_pump();
        break;

    default:
        break;
    }

    if (k->timer) {
        event_free(k->timer);
    }

    iw_llm_result_free(&k->out);
    ioa_buf_free(&k->h.body);
    free(k->h.redirect);
    free(k->body);
    curl_slist_free_all(k->headers);
    yajl_tree_free(k->msgs);
    yajl_tree_free(k->schema);
    free(k);
}


/* what the limiter and the breaker hold now, for the worker's metrics */

void
iw_llm_gauges(long long *in_flight, long long *queued, int *breaker_open,
    long long *trips)
{
    *in_flight = iw_llm_active;
    *queued = iw_llm_nqueued;
    *breaker_open = iw_llm_fails >= iw_llm_breaker_threshold()
                    && iw_llm_breaker_threshold() > 0;
    *trips = iw_llm_trips;
}


/*
 * The blocking form, for ioa-llm-check: the call on the loop, run until it
 * has finished; tick(tick_data) at least every IW_LLM_TICK_MS, and a
 * nonzero (negative) return abandons the call and is returned.
 */

int
iw_llm_chat(iw_llm_conf_t *c, const char *messages_json,
    const char *schema_name, const char *schema_json,
    int (*tick)(void *data), void *tick_data, iw_llm_result_t *out)
{
    int             rc, wake;
    struct event   *t;
    iw_llm_call_t  *k;

    if (iw_llm_curl_init() != 0) {
        memset(out, 0, sizeof(iw_llm_result_t));
        iw_llm_error(out, "libcurl failed to initialise");
        return IW_LLM_FAILED;
    }

    k = iw_llm_start(c, messages_json, schema_name, schema_json, NULL, NULL);

    t = evtimer_new(iw_loop, iw_llm_on_wake, &wake);
    if (t == NULL) {
        ioa_fatal("libevent: cannot allocate a timer");
    }

    rc = 0;

    while (!iw_llm_finished(k)) {
        wake = 0;
        k->wake = &wake;
        iw_timer_set(t, IW_LLM_TICK_MS);
        iw_loop_until(&wake);
        k->wake = NULL;

        if (!iw_llm_finished(k) && tick && (rc = tick(tick_data)) != 0) {
            break;
        }
    }

    event_free(t);

    if (rc != 0) {
        iw_info("llm: %s from %s: stopped during attempt %d (%lld ms)",
                k->name, c->model, k->out.attempts + 1,
                ioa_mono_ms() - k->start);
        iw_llm_free(k);
        memset(out, 0, sizeof(iw_llm_result_t));
        out->error = ioa_strdup("stopped");
        return rc;
    }

    rc = iw_llm_take(k, out);
    iw_llm_free(k);

    return rc;
}


static void
iw_llm_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;

    *(int *) arg = 1;
}


/* ------------------------------------------- the limiter and the breaker */


static int
iw_llm_breaker_threshold(void)
{
    return iw_llm_breaker_fails;
}


/* the breaker is open: a call now would fail without being sent */

static int
iw_llm_breaker_open(iw_llm_call_t *k)
{
    long long  now;

    if (iw_llm_breaker_fails == 0 || iw_llm_fails < iw_llm_breaker_fails) {
        return 0;
    }

    now = ioa_mono_ms();

    if (now < iw_llm_open_until || iw_llm_probe) {
        return 1;
    }

    /* half open: this one call tries the endpoint for everyone */
    iw_llm_probe = k;

    return 0;
}


static void
iw_llm_enqueue(iw_llm_call_t *k)
{
    k->state = IW_LLM_CALL_QUEUED;
    k->next = NULL;

    if (iw_llm_queue_tail) {
        iw_llm_queue_tail->next = k;

    } else {
        iw_llm_queue_head = k;
    }

    iw_llm_queue_tail = k;
    iw_llm_nqueued++;

    iw_llm_pump();
}


static void
iw_llm_dequeue(iw_llm_call_t *k)
{
    iw_llm_call_t  **pk, *last;

    last = NULL;

    for (pk = &iw_llm_queue_head; *pk; /* void */ ) {
        if (*pk == k) {
            *pk = k->next;
            iw_llm_nqueued--;
            continue;
        }

        last = *pk;
        pk = &(*pk)->next;
    }

    iw_llm_queue_tail = last;
    k->next = NULL;
}


/* calls waiting for a slot get one, in the order they came, while fewer
 * than IOA_LLM_CONCURRENCY requests are in flight */

static void
iw_llm_pump(void)
{
    iw_llm_call_t  *k;

    while (iw_llm_queue_head
           && iw_llm_active < iw_llm_queue_head->c->concurrency)
    {
        k = iw_llm_queue_head;
        iw_llm_queue_head = k->next;
        if (iw_llm_queue_head == NULL) {
            iw_llm_queue_tail = NULL;
        }

        k->next = NULL;
        iw_llm_nqueued--;

        if (iw_llm_breaker_open(k)) {
            iw_llm_error(&k->out, "the LLM endpoint %s failed %d times in "
                         "a row; not asked for %lld s (its circuit breaker "
                         "is open)", k->c->url, iw_llm_fails,
                         k->c->breaker_open_ms / 1000);
            iw_llm_finish_soon(k, IW_LLM_FAILED);
            continue;
        }

        iw_llm_send(k);
    }
}


/* an attempt ended: the breaker counts failures in a row, and a success
 * closes it */

static void
iw_llm_breaker_count(iw_llm_call_t *k, int failed)
{
    if (iw_llm_probe == k) {
        iw_llm_probe = NULL;
    }

    if (!failed) {
        if (iw_llm_breaker_fails && iw_llm_fails >= iw_llm_breaker_fails) {
            iw_info("llm: %s answers again; its circuit breaker is closed",
                    k->c->url);
        }

        iw_llm_fails = 0;
        return;
    }

    iw_llm_fails++;

    if (iw_llm_breaker_fails && iw_llm_fails >= iw_llm_breaker_fails) {
        if (iw_llm_fails == iw_llm_breaker_fails) {
            iw_warn("llm: %s failed %d times in a row; its circuit breaker "
                    "opens: no request for %lld s, the built-in planner "
                    "decides meanwhile", k->c->url, iw_llm_fails,
                    k->c->breaker_open_ms / 1000);
            iw_llm_trips++;
        }

        iw_llm_open_until = ioa_mono_ms() + k->c->breaker_open_ms;
    }
}


/* --------------------------------------------------------- an attempt */


static void
iw_llm_send(iw_llm_call_t *k)
{
    int            format;
    CURL          *e;
    CURLMcode      mc;
    iw_llm_conf_t *c;

    c = k->c;

    /* json_schema needs a schema: without one, ask for any object */
    format = c->format;
    if (format == IW_LLM_FORMAT_SCHEMA && k->schema == NULL) {
        format = IW_LLM_FORMAT_OBJECT;
    }

    k->format = format;
    free(k->body);
    k->body = iw_llm_body(c, k->msgs, k->name, k->schema, format);

    k->h.body.len = 0;
    k->h.too_big = 0;
    k->h.curl_rc = CURLE_OK;
    k->h.status = 0;
    k->h.retry_after_ms = 0;
    free(k->h.redirect);
    k->h.redirect = NULL;
    k->h.errbuf[0] = '\0';

    if (k->easy == NULL) {
        k->easy = curl_easy_init();
        if (k->easy == NULL) {
            ioa_fatal("out of memory (curl_easy_init)");
        }
    }

    e = k->easy;

    curl_easy_setopt(e, CURLOPT_URL, c->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, k->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                     (curl_off_t) strlen(k->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, k->headers);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ioa-worker");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, iw_llm_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &k->h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, k->h.errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long) c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long) c->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);

    /* a dead peer must not hold a connection open until the timeout */
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);

    /* curl_loop.c hands the end of the transfer to the call */
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *) &k->h.xfer);

    k->state = IW_LLM_CALL_SENDING;
    iw_llm_active++;

    mc = curl_multi_add_handle(iw_llm_multi, e);
    if (mc != CURLM_OK) {
        k->h.curl_rc = CURLE_FAILED_INIT;
        snprintf(k->h.errbuf, sizeof(k->h.errbuf), "%s",
                 curl_multi_strerror(mc));
        iw_llm_end_transfer(k);
        iw_llm_attempt_done(k);
    }
}


/* the transfer out of the multi handle, its slot free; the easy handle is
 * kept for the next attempt (its connection stays in the multi's pool) */

static void
iw_llm_end_transfer(iw_llm_call_t *k)
{
    (void) curl_multi_remove_handle(iw_llm_multi, k->easy);
    iw_llm_active--;
    k->state = IW_LLM_CALL_BETWEEN;
}


static void
iw_llm_xfer_done(iw_curl_xfer_t *x, int result)
{
    char            *url;
    curl_off_t       ra;
    iw_llm_call_t   *k;

    k = (iw_llm_call_t *) ((char *) x - offsetof(iw_llm_call_t, h));

    k->h.curl_rc = (CURLcode) result;

    (void) curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &k->h.status);

    ra = 0;
    if (curl_easy_getinfo(k->easy, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK
        && ra > 0)
    {
        k->h.retry_after_ms = ra > IW_LLM_RETRY_AFTER_CAP / 1000
                              ? IW_LLM_RETRY_AFTER_CAP
                              : (long long) ra * 1000;
    }

    url = NULL;
    if (curl_easy_getinfo(k->easy, CURLINFO_REDIRECT_URL, &url) == CURLE_OK
        && url)
    {
        k->h.redirect = ioa_strdup(url);
    }

    iw_llm_end_transfer(k);
    iw_llm_attempt_done(k);
    iw_llm_pump();
}


/* what the attempt's answer means decides what the call does next */

static void
iw_llm_attempt_done(iw_llm_call_t *k)
{
    int        verdict;
    long long  wait;

    k->out.attempts++;

    verdict = iw_llm_judge(k->c, k->format, &k->h, &k->out);

    if (verdict == IW_LLM_DONE) {
        iw_llm_breaker_count(k, 0);
        iw_llm_finish(k, IW_LLM_OK);
        return;
    }

    if (verdict == IW_LLM_AGAIN) {
        /* the conf changed for everyone: this call goes again at once */
        iw_llm_enqueue_first(k);
        return;
    }

    iw_llm_breaker_count(k, 1);

    if (verdict == IW_LLM_FATAL || ++k->failed >= k->c->max_attempts) {
        iw_llm_finish(k, IW_LLM_FAILED);
        return;
    }

    wait = iw_llm_backoff(k->c, k->failed);
    if (k->h.retry_after_ms > wait) {
        wait = k->h.retry_after_ms;
    }

    iw_warn("llm: %s from %s: attempt %d of %d failed: %s; again in "
            "%lld ms", k->name, k->c->model, k->failed, k->c->max_attempts,
            k->out.error, wait);

    k->state = IW_LLM_CALL_BACKOFF;
    iw_timer_set(k->timer, wait);
}


static void
iw_llm_enqueue_first(iw_llm_call_t *k)
{
    k->state = IW_LLM_CALL_QUEUED;
    k->next = iw_llm_queue_head;
    iw_llm_queue_head = k;

    if (iw_llm_queue_tail == NULL) {
        iw_llm_queue_tail = k;
    }

    iw_llm_nqueued++;
    iw_llm_pump();
}


/* the backoff is over (back into the queue), or a call that could not be
 * made finishes from the loop rather than inside iw_llm_start() */

static void
iw_llm_on_timer(evutil_socket_t fd, short what, void *arg)
{
    iw_llm_call_t  *k;

    (void) fd;
    (void) what;

    k = arg;

    if (k->state == IW_LLM_CALL_BACKOFF) {
        iw_llm_enqueue(k);
        return;
    }

    if (k->state == IW_LLM_CALL_ENDING) {
        iw_llm_finish(k, k->rc);
    }
}


static void
iw_llm_finish_soon(iw_llm_call_t *k, int rc)
{
    k->rc = rc;
    k->state = IW_LLM_CALL_ENDING;

    if (k->timer) {
        iw_timer_set(k->timer, 0);

    } else {
        k->state = IW_LLM_CALL_FINISHED;
    }
}


static void
iw_llm_finish(iw_llm_call_t *k, int rc)
{
    char           *body;
    iw_llm_conf_t  *c;

    c = k->c;
    k->rc = rc;
    k->state = IW_LLM_CALL_FINISHED;

    if (rc == IW_LLM_OK) {
        free(k->out.error);
        k->out.error = NULL;

        iw_info("llm: %s from %s: %d attempt%s, %lld prompt + %lld "
                "completion tokens, %lld ms", k->name, c->model,
                k->out.attempts, k->out.attempts == 1 ? "" : "s",
                k->out.prompt_tokens, k->out.completion_tokens,
                ioa_mono_ms() - k->start);

    } else {
        if (k->failed > 1) {
            body = k->out.error;
            k->out.error = ioa_sprintf("%s (after %d attempts)",
                                       body ? body : "failed", k->failed);
            free(body);
        }

        if (k->out.error == NULL) {
            k->out.error = ioa_strdup("failed");
        }

        iw_warn("llm: %s from %s failed: %d attempt%s, %lld prompt + %lld "
                "completion tokens, %lld ms: %s", k->name, c->model,
                k->out.attempts, k->out.attempts == 1 ? "" : "s",
                k->out.prompt_tokens, k->out.completion_tokens,
                ioa_mono_ms() - k->start, k->out.error);

        if (k->out.json) {
            yajl_tree_free(k->out.json);
            k->out.json = NULL;
        }
    }

    if (k->wake) {
        *k->wake = 1;
    }

    if (k->done) {
        k->done(k, k->data);
    }
}


void
iw_llm_result_free(iw_llm_result_t *r)
{
    if (r->json) {
        yajl_tree_free(r->json);
    }

    free(r->content);
    free(r->error);
    memset(r, 0, sizeof(iw_llm_result_t));
}


/*
 * The request body.  Rebuilt for every attempt because a refusal changes
 * the format, and with it where the schema goes: for json_object and none
 * it is appended to the last message (json_object also needs the word
 * "JSON" in the prompt, on OpenAI).
 */

static char *
iw_llm_body(iw_llm_conf_t *c, yajl_val msgs, const char *name,
    yajl_val schema, int format)
{
    int        appended;
    size_t     i, j, last;
    yajl_val   m, content;
    ioa_buf_t  b, instr, text;

    ioa_buf_init(&b);
    ioa_buf_init(&instr);

    if (format != IW_LLM_FORMAT_SCHEMA) {
        ioa_buf_adds(&instr, "Answer with one JSON object");

        if (schema) {
            ioa_buf_adds(&instr, " matching this JSON Schema");
        }

        ioa_buf_adds(&instr, ", and nothing else: no prose, no code fence.");

        if (schema) {
            ioa_buf_adds(&instr, "\nJSON Schema: ");
            ioa_json_emit(&instr, schema);
        }
    }

    ioa_buf_adds(&b, "{\"model\":");
    ioa_json_str(&b, c->model);
    ioa_buf_adds(&b, ",\"messages\":[");

    last = msgs->u.array.len - 1;
    appended = 0;

    for (i = 0; i <= last; i++) {
        m = msgs->u.array.values[i];
        content = ioa_json_get(m, "content");

        if (i) {
            ioa_buf_addc(&b, ',');
        }

        if (i < last || instr.len == 0 || content == NULL
            || !YAJL_IS_STRING(content))
        {
            ioa_json_emit(&b, m);
            continue;
        }

        ioa_buf_addc(&b, '{');

        for (j = 0; j < m->u.object.len; j++) {
            if (j) {
                ioa_buf_addc(&b, ',');
            }

            ioa_json_str(&b, m->u.object.keys[j]);
            ioa_buf_addc(&b, ':');

            if (m->u.object.values[j] != content) {
                ioa_json_emit(&b, m->u.object.values[j]);
                continue;
            }

            ioa_buf_init(&text);
            ioa_buf_adds(&text, YAJL_GET_STRING(content));
            ioa_buf_adds(&text, "\n\n");
            ioa_buf_add(&text, instr.data, instr.len);
            ioa_json_strn(&b, text.data, text.len);
            ioa_buf_free(&text);
        }

        ioa_buf_addc(&b, '}');
        appended = 1;
    }

    if (instr.len && !appended) {
        ioa_buf_adds(&b, ",{\"role\":\"user\",\"content\":");
        ioa_json_strn(&b, instr.data, instr.len);
        ioa_buf_addc(&b, '}');
    }

    ioa_buf_addc(&b, ']');

    if (c->max_completion_tokens) {
        ioa_buf_addf(&b, ",\"max_completion_tokens\":%lld", c->max_tokens);

    } else {
        ioa_buf_addf(&b, ",\"max_tokens\":%lld", c->max_tokens);
    }

    if (!c->no_temperature) {
        ioa_buf_addf(&b, ",\"temperature\":%g", c->temperature);
    }

    ioa_buf_adds(&b, ",\"stream\":false");

    if (format == IW_LLM_FORMAT_SCHEMA) {
        ioa_buf_adds(&b, ",\"response_format\":{\"type\":\"json_schema\","
                    "\"json_schema\":{\"name\":");
        ioa_json_str(&b, name);
        ioa_buf_adds(&b, ",\"schema\":");
        ioa_json_emit(&b, schema);
        ioa_buf_adds(&b, c->no_strict ? ",\"strict\":false}}"
                                  : ",\"strict\":true}}");

    } else if (format == IW_LLM_FORMAT_OBJECT) {
        ioa_buf_adds(&b, ",\"response_format\":{\"type\":\"json_object\"}");
    }

    ioa_buf_addc(&b, '}');
    ioa_buf_free(&instr);

    return ioa_buf_take(&b);
}


static size_t
iw_llm_write(char *p, size_t size, size_t nmemb, void *data)
{
    size_t          n;
    iw_llm_http_t  *h;

    h = data;
    n = size * nmemb;

    if (h->body.len + n > IW_LLM_MAX_BODY) {
        h->too_big = 1;
        return 0;                         /* curl ends with a write error */
    }

    ioa_buf_add(&h->body, p, n);

    return n;
}


/*
 * What the attempt's answer means (see the top of the file); out->error
 * says why for everything but IW_LLM_DONE.
 */

static int
iw_llm_judge(iw_llm_conf_t *c, int format, iw_llm_http_t *h,
    iw_llm_result_t *out)
{
    int          verdict;
    char        *msg, *snip;
    yajl_val     doc, ch, message;
    long long    v;
    const char  *finish, *said;

    if (h->too_big) {
        iw_llm_error(out, "the answer from %s is larger than %d MiB",
                     c->url, IW_LLM_MAX_BODY / 1024 / 1024);
        return IW_LLM_FATAL;
    }

    if (h->curl_rc != CURLE_OK) {
        iw_llm_error(out, "%s: %s%s", c->url,
                     h->errbuf[0] ? h->errbuf
                                  : curl_easy_strerror(h->curl_rc),
                     h->curl_rc == CURLE_OPERATION_TIMEDOUT
                     ? " (IOA_LLM_TIMEOUT)" : "");

        switch (h->curl_rc) {
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
            return IW_LLM_FATAL;
        default:
            return IW_LLM_RETRY;
        }
    }

    iw_llm_utf8_fix(h->body.data, h->body.len);
    doc = h->body.len ? iw_llm_parse(h->body.data, h->body.len) : NULL;

    if (h->status < 200 || h->status > 299) {
        said = iw_llm_server_message(doc);
        msg = said ? iw_llm_clean(said, strlen(said), IW_LLM_SNIPPET) : NULL;

        if (msg == NULL || *msg == '\0') {
            free(msg);
            msg = h->body.len ? iw_llm_clean(h->body.data, h->body.len,
                                             IW_LLM_SNIPPET)
                              : ioa_strdup("(no body)");
        }

        yajl_tree_free(doc);

        if (iw_llm_refused(c, format, h, msg)) {
            iw_llm_error(out, "HTTP %ld from %s: %s", h->status, c->url,
                         msg);
            free(msg);
            return IW_LLM_AGAIN;
        }

        iw_llm_error(out, "HTTP %ld from %s: %s%s%s%s", h->status, c->url,
                     msg, h->redirect ? " (redirected to " : "",
                     h->redirect ? h->redirect : "",
                     h->redirect ? ": check IOA_LLM_BASE_URL)" : "");
        free(msg);

        if (h->status == 408 || h->status == 409 || h->status == 425
            || h->status == 429 || h->status >= 500)
        {
            return IW_LLM_RETRY;
        }

        h->retry_after_ms = 0;

        return IW_LLM_FATAL;
    }

    if (doc == NULL) {
        snip = iw_llm_clean(h->body.data ? h->body.data : "", h->body.len,
                            IW_LLM_SNIPPET);
        iw_llm_error(out, "HTTP %ld from %s is not a JSON completion: %s",
                     h->status, c->url, *snip ? snip : "(no body)");
        free(snip);
        return IW_LLM_RETRY;
    }

    /* the tokens count even when the content is of no use */
    if (ioa_json_get_int(ioa_json_get(doc, "usage"), "prompt_tokens", &v) == 0
        && v > 0)
    {
        out->prompt_tokens += v;
    }

    if (ioa_json_get_int(ioa_json_get(doc, "usage"), "completion_tokens", &v)
        == 0 && v > 0)
    {
        out->completion_tokens += v;
    }

    ch = ioa_json_get(doc, "choices");
    ch = (ch && YAJL_IS_ARRAY(ch) && ch->u.array.len)
         ? ch->u.array.values[0] : NULL;
    message = ioa_json_get(ch, "message");

    if (message == NULL || !YAJL_IS_OBJECT(message)) {
        said = iw_llm_server_message(doc);
        msg = said ? iw_llm_clean(said, strlen(said), IW_LLM_SNIPPET)
                   : iw_llm_clean(h->body.data, h->body.len, IW_LLM_SNIPPET);
        iw_llm_error(out, "the answer from %s has no choices[0].message: %s",
                     c->url, msg);
        free(msg);
        yajl_tree_free(doc);
        return IW_LLM_RETRY;
    }

    free(out->content);
    out->content = iw_llm_content(message);

    if (out->content) {
        iw_llm_utf8_fix(out->content, strlen(out->content));
    }

    finish = ioa_json_get_str(ch, "finish_reason");

    if (out->content) {
        out->json = iw_llm_extract_json(out->content, strlen(out->content));
    }

    verdict = IW_LLM_DONE;

    if (out->json) {
        /* "\udc00" decodes to bytes that are not UTF-8 */
        iw_llm_fix_tree(out->json);

    } else if ((said = ioa_json_get_str(message, "refusal")) != NULL) {
        msg = iw_llm_clean(said, strlen(said), IW_LLM_SNIPPET);
        iw_llm_error(out, "the model refused: %s", msg);
        free(msg);
        verdict = IW_LLM_RETRY;

    } else {
        snip = out->content
               ? iw_llm_clean(out->content, strlen(out->content),
                              IW_LLM_SNIPPET)
               : ioa_strdup("");

        if (iw_streq(finish, "length")) {
            iw_llm_error(out, "model output was cut at max_tokens (%lld, "
                         "IOA_LLM_MAX_TOKENS) before the JSON object ended: "
                         "%s", c->max_tokens, snip);

        } else if (*snip == '\0') {
            iw_llm_error(out, "model output is empty (finish_reason %s)",
                         finish ? finish : "null");

        } else {
            iw_llm_error(out, "model output is not a JSON object: %s", snip);
        }

        free(snip);
        verdict = IW_LLM_RETRY;
    }

    yajl_tree_free(doc);

    return verdict;
}


/*
 * A 4xx (or a 5xx that says so) about a part of the request this server
 * does not take: adapt the conf for good and send again.  1 when adapted.
 */

static int
iw_llm_refused(iw_llm_conf_t *c, int format, iw_llm_http_t *h,
    const char *msg)
{
    int          client;
    const char  *b;
    size_t       n;

    b = h->body.data ? h->body.data : "";
    n = h->body.len;
    client = (h->status == 400 || h->status == 422);

    /* "Invalid schema for response_format ...: 'maxLength' is not
     * permitted": the schema is fine for us, only not for strict mode */
    if (client && format == IW_LLM_FORMAT_SCHEMA && !c->no_strict
        && (iw_llm_mentions(b, n, "invalid schema")
            || iw_llm_mentions(b, n, "not permitted")
            || iw_llm_mentions(b, n, "strict")))
    {
        c->no_strict = 1;
        iw_warn("llm: %s refused the schema in strict mode (HTTP %ld: %s); "
                "sending it with strict false from now on", c->url,
                h->status, msg);
        return 1;
    }

    if (format != IW_LLM_FORMAT_NONE
        && (iw_llm_mentions(b, n, "response_format")
            || iw_llm_mentions(b, n, "json_schema")
            || (client && (iw_llm_mentions(b, n, "schema")
                           || iw_llm_mentions(b, n, "json_object"))))
        && (client || h->status >= 500))
    {
        c->format = format + 1;
        iw_warn("llm: %s refused response_format %s (HTTP %ld: %s); using "
                "%s from now on", c->url, iw_llm_format_name(format),
                h->status, msg, iw_llm_format_name(c->format));
        return 1;
    }

    if (client && !c->max_completion_tokens
        && iw_llm_mentions(b, n, "max_completion_tokens"))
    {
        c->max_completion_tokens = 1;
        iw_warn("llm: %s wants max_completion_tokens (HTTP %ld: %s); using "
                "it from now on", c->url, h->status, msg);
        return 1;
    }

    if (client && !c->no_temperature
        && iw_llm_mentions(b, n, "temperature"))
    {
        c->no_temperature = 1;
        iw_warn("llm: %s refused the temperature (HTTP %ld: %s); sending "
                "none from now on", c->url, h->status, msg);
        return 1;
    }

    return 0;
}


/* content is a string, or (some servers) an array of text parts */

static char *
iw_llm_content(yajl_val message)
{
    size_t       i;
    ioa_buf_t    b;
    yajl_val     v;
    const char  *t;

    v = ioa_json_get(message, "content");

    if (v && YAJL_IS_STRING(v)) {
        return ioa_strdup(YAJL_GET_STRING(v));
    }

    if (v == NULL || !YAJL_IS_ARRAY(v)) {
        return NULL;
    }

    ioa_buf_init(&b);

    for (i = 0; i < v->u.array.len; i++) {
        t = ioa_json_get_str(v->u.array.values[i], "text");
        if (t) {
            ioa_buf_adds(&b, t);
        }
    }

    return b.len ? ioa_buf_take(&b) : (ioa_buf_free(&b), NULL);
}


/* "equal jitter": half the delay fixed, half random (rand() is seeded by
 * main), so that workers that failed together spread out */

static long long
iw_llm_backoff(iw_llm_conf_t *c, int n)
{
    long long  d;

    d = c->backoff_ms;

    while (--n > 0 && d < IW_LLM_BACKOFF_CAP_MS) {
        d *= 2;
    }

    if (d > IW_LLM_BACKOFF_CAP_MS) {
        d = IW_LLM_BACKOFF_CAP_MS;
    }

    if (d <= 1) {
        return d;
    }

    return d / 2 + (long long) rand() % (d / 2 + 1);
}


static void
iw_llm_error(iw_llm_result_t *out, const char *fmt, ...)
{
    char     *s;
    va_list   ap;

    va_start(ap, fmt);
    s = ioa_vsprintf(fmt, ap);
    va_end(ap);

    free(out->error);
    out->error = s;
}


/* at most max bytes of s as one line of UTF-8, "..." when cut */

static char *
iw_llm_clean(const char *s, size_t n, size_t max)
{
    char    *p;
    size_t   i, m, cut;

    while (n && (unsigned char) *s <= ' ') {
        s++;
        n--;
    }

    cut = n > max;
    m = cut ? max : n;

    /* do not cut a character in two */
    while (cut && m && ((unsigned char) s[m] & 0xc0) == 0x80) {
        m--;
    }

    p = ioa_alloc(m + 4);
    memcpy(p, s, m);

    for (i = 0; i < m; i++) {
        if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f) {
            p[i] = ' ';
        }
    }

    iw_llm_utf8_fix(p, m);

    while (m && p[m - 1] == ' ') {
        m--;
    }

    if (cut) {
        memcpy(p + m, "...", 3);
        m += 3;
    }

    p[m] = '\0';

    return p;
}


/*
 * The error text of a failed request, as each server family writes it:
 * OpenAI, llama-server, Ollama {"error":{"message"}}, Ollama also
 * {"error":"..."}, vLLM {"object":"error","message"}, FastAPI's 422
 * {"detail": "..." or [{"msg"}]}.
 */

static const char *
iw_llm_server_message(yajl_val doc)
{
    yajl_val     e;
    const char  *s;

    e = ioa_json_get(doc, "error");

    if (e && YAJL_IS_STRING(e)) {
        return YAJL_GET_STRING(e);
    }

    s = ioa_json_get_str(e, "message");
    if (s) {
        return s;
    }

    s = ioa_json_get_str(doc, "message");
    if (s) {
        return s;
    }

    e = ioa_json_get(doc, "detail");

    if (e && YAJL_IS_STRING(e)) {
        return YAJL_GET_STRING(e);
    }

    if (e && YAJL_IS_ARRAY(e) && e->u.array.len) {
        return ioa_json_get_str(e->u.array.values[0], "msg");
    }

    return NULL;
}


/* case-insensitive, ASCII: the servers' messages vary in case */

static int
iw_llm_mentions(const char *s, size_t n, const char *word)
{
    size_t  i, j, w;
    char    a, b;

    w = strlen(word);

    for (i = 0; i + w <= n; i++) {
        for (j = 0; j < w; j++) {
            a = s[i + j];
            b = word[j];
            a = (a >= 'A' && a <= 'Z') ? a + 32 : a;

            if (a != b) {
                break;
            }
        }

        if (j == w) {
            return 1;
        }
    }

    return 0;
}


/*
 * In place: every byte that is not part of a well-formed UTF-8 sequence
 * (overlongs and surrogates included) becomes '?', and NUL becomes a
 * space, so that yajl (which stops at a NUL and refuses bad UTF-8) parses
 * what can be parsed and nothing else downstream sees bad bytes.
 */

static void
iw_llm_utf8_fix(char *s, size_t n)
{
    size_t          i, len;
    unsigned char  *u;

    u = (unsigned char *) s;

    for (i = 0; i < n; i += len) {
        if (u[i] == 0) {
            u[i] = ' ';
        }

        len = ioa_utf8_len(u + i, n - i);

        if (len == 0) {
            u[i] = '?';
            len = 1;
        }
    }
}


static void
iw_llm_fix_tree(yajl_val v)
{
    size_t  i;

    if (v == NULL) {
        return;
    }

    if (YAJL_IS_STRING(v)) {
        iw_llm_utf8_fix(v->u.string, strlen(v->u.string));

    } else if (YAJL_IS_ARRAY(v)) {
        for (i = 0; i < v->u.array.len; i++) {
            iw_llm_fix_tree(v->u.array.values[i]);
        }

    } else if (YAJL_IS_OBJECT(v)) {
        for (i = 0; i < v->u.object.len; i++) {
            iw_llm_utf8_fix((char *) v->u.object.keys[i],
                            strlen(v->u.object.keys[i]));
            iw_llm_fix_tree(v->u.object.values[i]);
        }
    }
}


static int
iw_llm_depth_ok(const char *s, size_t n)
{
    int     depth, str;
    size_t  i;

    depth = 0;
    str = 0;

    for (i = 0; i < n; i++) {
        if (str) {
            if (s[i] == '\\') {
                i++;

            } else if (s[i] == '"') {
                str = 0;
            }

        } else if (s[i] == '"') {
            str = 1;

        } else if (s[i] == '{' || s[i] == '[') {
            if (++depth > IW_LLM_MAX_DEPTH) {
                return 0;
            }

        } else if (s[i] == '}' || s[i] == ']') {
            depth--;
        }
    }

    return 1;
}


static yajl_val
iw_llm_parse(const char *s, size_t n)
{
    if (!iw_llm_depth_ok(s, n)) {
        return NULL;
    }

    return ioa_json_parse(s, n);
}


/* the end of the {...} that starts at s, strings skipped; NULL if open */

static const char *
iw_llm_balanced(const char *s, const char *end)
{
    int          str;
    size_t       depth;
    const char  *p;

    depth = 0;
    str = 0;

    for (p = s; p < end; p++) {
        if (str) {
            if (*p == '\\') {
                p++;

            } else if (*p == '"') {
                str = 0;
            }

        } else if (*p == '"') {
            str = 1;

        } else if (*p == '{') {
            depth++;

        } else if (*p == '}' && --depth == 0) {
            return p + 1;
        }
    }

    return NULL;
}


/*
 * The candidates are the top-level {...} spans in order: one that does
 * not parse is skipped as a whole, because the objects inside a broken
 * answer are parts of it, not the answer (a task of a plan would pass for
 * the plan).  An opening brace that never closes (a lone "{" in prose,
 * an answer cut short) is skipped by itself.  Models' commonest
 * slip, the trailing comma, is forgiven, and so are comments (yajl's
 * tree parser skips them); single quotes and the like are not: the
 * request is sent again instead.
 */

yajl_val
iw_llm_extract_json(const char *text, size_t len)
{
    int          tries;
    char        *copy;
    size_t       i, j, k, n;
    yajl_val     v;
    const char  *p, *end, *e, *t;

    if (text == NULL) {
        return NULL;
    }

    end = text + len;
    p = text;

    /* a reasoning model's thoughts come first and may hold braces */
    for (t = text; (size_t) (end - t) >= 8; t++) {
        if (memcmp(t, "</think>", 8) == 0) {
            p = t + 8;
        }
    }

    for (tries = 0; tries < IW_LLM_EXTRACT_TRIES; tries++) {
        p = memchr(p, '{', (size_t) (end - p));
        if (p == NULL) {
            return NULL;
        }

        e = iw_llm_balanced(p, end);
        if (e == NULL) {
            p++;
            continue;
        }

        n = (size_t) (e - p);

        v = iw_llm_parse(p, n);
        if (v && YAJL_IS_OBJECT(v)) {
            return v;
        }

        yajl_tree_free(v);

        /* drop each comma followed only by blanks and a closing bracket */
        copy = ioa_alloc(n + 1);

        for (i = 0, j = 0; i < n; i++) {
            copy[j++] = p[i];

            if (p[i] == '"') {
                for (i++; i < n && p[i] != '"'; i++) {
                    copy[j++] = p[i];

                    if (p[i] == '\\' && i + 1 < n) {
                        copy[j++] = p[++i];
                    }
                }

                if (i < n) {
                    copy[j++] = p[i];
                }

                continue;
            }

            if (p[i] == ',') {
                for (k = i + 1; k < n && strchr(" \t\r\n", p[k]) && p[k];
                     k++)
                {
                    /* void */
                }

                if (k < n && (p[k] == '}' || p[k] == ']')) {
                    j--;
                }
            }
        }

        v = iw_llm_parse(copy, j);
        free(copy);

        if (v && YAJL_IS_OBJECT(v)) {
            return v;
        }

        yajl_tree_free(v);
        p = e;
    }

    return NULL;
}
