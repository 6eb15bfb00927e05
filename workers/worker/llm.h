/*
 * ioa-worker: the LLM client (llm.c), one chat completion at a time
 * against any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp's
 * llama-server, Ollama's /v1).
 *
 * The caller asks for one JSON object described by a JSON Schema and gets
 * it parsed, or a precise reason why not; retries, backoff, the server's
 * quirks and the repair of a model's sloppy output are all in here.  A
 * call is an object on the worker's event loop (iw_llm_start), with the
 * process' limits on the endpoint: requests in flight, retries with
 * backoff, a circuit breaker; iw_llm_chat() is its blocking form, for
 * ioa-llm-check.
 */

#ifndef IW_LLM_H
#define IW_LLM_H

#include "iw.h"


#define IW_LLM_FORMAT_SCHEMA  0   /* response_format json_schema (strict) */
#define IW_LLM_FORMAT_OBJECT  1   /* response_format json_object */
#define IW_LLM_FORMAT_NONE    2   /* no response_format: JSON asked in the
                                     prompt only */

/* the longest the tick waits, in flight or backing off */
#define IW_LLM_TICK_MS        200

/* curl_loop.c: libcurl's multi handle on the event loop; a transfer's
 * CURLOPT_PRIVATE is its iw_curl_xfer_t, whose done() gets the CURLcode */
typedef struct iw_curl_xfer_s  iw_curl_xfer_t;

struct iw_curl_xfer_s {
    void  (*done)(iw_curl_xfer_t *x, int result);
};

int iw_curl_attach(void *multi);


/* iw_llm_chat()'s results besides the tick's own (which must be < 0) */
#define IW_LLM_OK             0
#define IW_LLM_FAILED         1


typedef struct iw_llm_conf_s {
    char        *base_url;           /* http://127.0.0.1:8080/v1, no
                                        trailing slash */
    char        *url;                /* base_url + /chat/completions */
    char        *api_key;            /* NULL: no Authorization header */
    char        *model;              /* default "gpt-4o-mini" */
    long long    timeout_ms;         /* per attempt, whole request: 60000 */
    long long    connect_timeout_ms; /* 5000 */
    int          max_attempts;       /* 4 */
    long long    backoff_ms;         /* the first backoff, doubled on each
                                        retry, jittered, at most 10 s: 500 */
    int          format;             /* IW_LLM_FORMAT_*: downgraded for the
                                        process' lifetime when the server
                                        refuses it */
    long long    max_tokens;         /* 1024 */
    double       temperature;        /* 0.2 */

    /* learnt from the server's 400s, like format (OpenAI's reasoning
     * models want max_completion_tokens and only the default temperature) */
    int          max_completion_tokens;
    int          no_temperature;
    /* learnt likewise: the server refuses our schema in strict mode (OpenAI
     * accepts only a subset of JSON Schema there), so send strict: false
     * and keep the schema, before giving up json_schema altogether */
    int          no_strict;

    /* the limits of the process' calls to the endpoint */
    int          concurrency;        /* requests in flight: 8 */
    int          breaker_fails;      /* attempts failed in a row that open
                                        the breaker: 5, 0: never */
    long long    breaker_open_ms;    /* how long it stays open: 30000 */
} iw_llm_conf_t;


typedef struct {
    yajl_val     json;               /* the answer, a JSON object (parsed,
                                        repaired), or NULL on failure */
    char        *content;            /* the message content of the last
                                        attempt that had one, or NULL */
    long long    prompt_tokens;      /* summed over every attempt whose */
    long long    completion_tokens;  /* answer reported usage */
    int          attempts;           /* HTTP requests made */
    char        *error;              /* on failure: one line, the reason */
} iw_llm_result_t;


/*
 * Reads IOA_LLM_BASE_URL (or OPENAI_BASE_URL), IOA_LLM_API_KEY (or
 * OPENAI_API_KEY), IOA_LLM_MODEL (or OPENAI_MODEL), IOA_LLM_TIMEOUT
 * (seconds, fractions allowed), IOA_LLM_MAX_ATTEMPTS,
 * IOA_LLM_RESPONSE_FORMAT (json_schema, json_object, none),
 * IOA_LLM_MAX_TOKENS and IOA_LLM_TEMPERATURE; an empty variable is unset.
 * 1: an endpoint is configured; 0: none (c is left unallocated, the
 * built-in planner is used); -1: an invalid value, said on stderr.
 */
int iw_llm_conf_from_env(iw_llm_conf_t *c);
void iw_llm_conf_free(iw_llm_conf_t *c);

/*
 * One chat completion whose answer must be a JSON object.
 *
 * messages_json: a JSON array of {"role","content"}.  schema_json (may be
 * NULL) describes the object: sent as response_format json_schema named
 * schema_name, or, for the other formats, appended to the last message
 * ("Answer with one JSON object matching this JSON Schema: ...").
 *
 * tick(tick_data), if not NULL, is called at least every IW_LLM_TICK_MS
 * while a request is in flight and while backing off; a nonzero (negative)
 * return aborts at once and is returned.
 *
 * IW_LLM_OK: out->json is set.  IW_LLM_FAILED: every attempt failed or the
 * server refused the request (out->error says why).  Either way out's
 * tokens and attempts are set and it must be freed with
 * iw_llm_result_free(); out need not be initialised.
 */
int iw_llm_chat(iw_llm_conf_t *c, const char *messages_json,
    const char *schema_name, const char *schema_json,
    int (*tick)(void *data), void *tick_data, iw_llm_result_t *out);

void iw_llm_result_free(iw_llm_result_t *r);

/*
 * The same call without blocking: it runs on the loop and done(call, data)
 * is called from the loop when it has finished (never from inside
 * iw_llm_start(), even when it could not be made at all).  Then
 * iw_llm_take() moves its result out, as iw_llm_chat() returns it.  A call
 * freed before it finished is abandoned.
 */
typedef struct iw_llm_call_s  iw_llm_call_t;
typedef void (*iw_llm_done_pt)(iw_llm_call_t *call, void *data);

iw_llm_call_t *iw_llm_start(iw_llm_conf_t *c, const char *messages_json,
    const char *schema_name, const char *schema_json, iw_llm_done_pt done,
    void *data);
int iw_llm_finished(iw_llm_call_t *call);
int iw_llm_take(iw_llm_call_t *call, iw_llm_result_t *out);
void iw_llm_free(iw_llm_call_t *call);
void iw_llm_gauges(long long *in_flight, long long *queued,
    int *breaker_open, long long *trips);

/*
 * The JSON object in a model's text: skips a <think> block, ```json
 * fences, prose before and junk after; the first balanced {...} that
 * parses (trailing commas forgiven), NULL if none.
 */
yajl_val iw_llm_extract_json(const char *text, size_t len);


#endif /* IW_LLM_H */
