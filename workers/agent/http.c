
/*
 * The http adapter: IoA's tool-agent convention.  IoA runs its tool agents
 * (ReAct, Open Interpreter) as containers that answer
 *
 *   POST <url>/run   {"task_desc": "..."}
 *
 * and this adapter speaks the same, so those containers plug in unchanged.
 * Each one declares one more required field in its request model: ReAct a
 * "uid", Open Interpreter a "model" (empty means its default).  Both are
 * sent, and each container ignores the other's: {"task_desc","uid","model"},
 * uid being the task id.
 *
 * The answer is the result: a 2xx body, either plain text or JSON.  From
 * JSON, an object's "conclusion" (Open Interpreter's shape) or a bare JSON
 * string (what a FastAPI endpoint returning str sends, ReAct's case) is
 * taken; anything else is passed on as it came.  A non-2xx answer or a
 * transport error is "failed", with the status and the start of the body;
 * --timeout is libcurl's whole-transfer timeout and gives "timed_out".
 *
 * Calls are transfers on the loop's multi handle, so any number run at
 * once beside the inbox; cancelling one (shutdown) just removes it.
 */

#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


#define IOA_HTTP_CONNECT_TIMEOUT 10000L /* ms */
#define IOA_HTTP_ERROR_BODY      1000   /* bytes of a failure's body */


typedef struct {
    ioa_task_t        *task;
    ioa_xfer_t         xfer;
    char              *url;
    ioa_buf_t          body;
    ioa_buf_t          resp;
    size_t             total;
    struct curl_slist *headers;
    char               err[CURL_ERROR_SIZE];
} ioa_http_t;


static void   ioa_http_start(ioa_task_t *t);
static void   ioa_http_cancel(ioa_task_t *t);
static size_t ioa_http_write(char *p, size_t size, size_t n, void *data);
static void   ioa_http_done(ioa_xfer_t *x, CURLcode rc);
static void   ioa_http_free(ioa_http_t *h);


const ioa_adapter_t ioa_http_adapter = { "http", ioa_http_start,
                                         ioa_http_cancel };


static void
ioa_http_start(ioa_task_t *t)
{
    CURL       *e;
    ioa_buf_t   b = { 0 };
    ioa_http_t *h;

    h = ioa_calloc(sizeof(ioa_http_t));
    h->task = t;

    ioa_buf_addf(&b, "%s/run", ioa_conf.http_url);
    h->url = ioa_strdup(ioa_buf_cstr(&b));
    ioa_buf_free(&b);

    ioa_buf_adds(&h->body, "{\"task_desc\":");
    ioa_json_strn(&h->body, t->input.data, t->input.len);
    ioa_buf_adds(&h->body, ",\"uid\":");
    ioa_json_str(&h->body, ioa_task_key(t));
    ioa_buf_adds(&h->body, ",\"model\":\"\"}");

    h->headers = curl_slist_append(NULL, "Content-Type: application/json");
    h->headers = curl_slist_append(h->headers, "Expect:");

    e = curl_easy_init();
    if (e == NULL || h->headers == NULL) {
        ioa_http_free(h);
        ioa_task_finish(t, IOA_TASK_FAILED, "curl_easy_init() failed", 23, 23);
        return;
    }

    h->xfer.easy = e;
    h->xfer.done = ioa_http_done;
    h->xfer.data = h;

    curl_easy_setopt(e, CURLOPT_URL, h->url);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ioa-agent/" IOA_AGENT_VERSION);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, h->body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) h->body.len);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ioa_http_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, IOA_HTTP_CONNECT_TIMEOUT);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long) ioa_conf.timeout * 1000);

    t->adapter_data = h;

    if (ioa_xfer_start(&h->xfer) != 0) {
        t->adapter_data = NULL;
        ioa_http_free(h);
        ioa_task_finish(t, IOA_TASK_FAILED, "cannot start the request", 24, 24);
        return;
    }

    ioa_log_info("task %s: POST %s", ioa_task_key(t), h->url);
}


static size_t
ioa_http_write(char *p, size_t size, size_t n, void *data)
{
    size_t      len, keep;
    ioa_http_t *h;

    h = data;
    len = size * n;
    h->total += len;

    /* room for the JSON around a conclusion of --max-result bytes */
    keep = ioa_conf.max_result * 2 + 4096;

    if (h->resp.len < keep) {
        ioa_buf_add(&h->resp, p,
                    len < keep - h->resp.len ? len : keep - h->resp.len);
    }

    return len;
}


static void
ioa_http_done(ioa_xfer_t *x, CURLcode rc)
{
    long              status;
    size_t            len, total;
    yajl_val          doc;
    ioa_buf_t         msg = { 0 };
    const char       *text, *s, *p;
    ioa_task_t       *t;
    ioa_http_t       *h;
    ioa_task_status_e st;

    h = x->data;
    t = h->task;
    doc = NULL;
    status = 0;

    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);

    len = h->resp.len;

    while (len && strchr(" \t\r\n", h->resp.data[len - 1])) {
        len--;
    }

    if (rc == CURLE_OPERATION_TIMEDOUT) {
        st = IOA_TASK_TIMED_OUT;
        ioa_buf_addf(&msg, "no answer from %s within %u s", h->url,
                     ioa_conf.timeout);

    } else if (rc != CURLE_OK) {
        st = IOA_TASK_FAILED;
        ioa_buf_addf(&msg, "%s: %s", h->url,
                     h->err[0] ? h->err : curl_easy_strerror(rc));

    } else if (status < 200 || status > 299) {
        st = IOA_TASK_FAILED;
        ioa_buf_addf(&msg, "HTTP %ld from %s", status, h->url);

        if (len) {
            ioa_buf_addf(
                &msg, ": %.*s",
                (int) (len > IOA_HTTP_ERROR_BODY ? IOA_HTTP_ERROR_BODY : len),
                h->resp.data);
        }

    } else {
        st = IOA_TASK_COMPLETED;
    }

    if (st != IOA_TASK_COMPLETED) {
        text = msg.data;
        len = msg.len;
        total = len;

    } else {
        text = len ? h->resp.data : "";
        total = h->total - (h->resp.len - len); /* without the blanks */

        for (p = text; p < text + len && strchr(" \t\r\n", *p); p++) {
            /* void */
        }

        if (p < text + len && (*p == '{' || *p == '"')) {
            doc = ioa_json_parse(text, len);
            s = ioa_json_string(doc);

            if (s == NULL) {
                s = ioa_json_get_str(doc, "conclusion");
            }

            if (s) {
                text = s;
                len = strlen(s);
                total = len;
            }
        }
    }

    t->adapter_data = NULL;
    ioa_task_finish(t, st, text, len, total);

    yajl_tree_free(doc);
    ioa_buf_free(&msg);
    ioa_http_free(h);
}


static void
ioa_http_cancel(ioa_task_t *t)
{
    size_t      len;
    ioa_http_t *h = t->adapter_data;

    if (h == NULL) {
        return;
    }

    ioa_xfer_stop(&h->xfer);
    t->adapter_data = NULL;
    ioa_http_free(h);

    len = strlen(t->cancel_why);
    ioa_task_finish(t, IOA_TASK_FAILED, t->cancel_why, len, len);
}


static void
ioa_http_free(ioa_http_t *h)
{
    if (h->xfer.easy) {
        ioa_xfer_stop(&h->xfer);
        curl_easy_cleanup(h->xfer.easy);
    }

    curl_slist_free_all(h->headers);
    free(h->url);
    ioa_buf_free(&h->body);
    ioa_buf_free(&h->resp);
    free(h);
}
