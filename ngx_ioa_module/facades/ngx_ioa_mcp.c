
/*
 * Copyright (C) ioa authors
 *
 * The hub as an MCP server (Model Context Protocol, Streamable HTTP): any
 * MCP client can find agents, launch a goal, follow it, post to it and
 * cancel it, and read a goal's transcript as a resource.
 *
 *   location = /mcp { ioa_mcp; }
 *
 * Transport.  The client POSTs one JSON-RPC 2.0 message per request and
 * gets one answer as application/json: the spec lets a server answer so
 * instead of opening an SSE stream, and nothing here streams (a tool call
 * is one REST call, or two).  A notification or a response from the client
 * gets 202 and no body; GET (the server-initiated stream) and DELETE (the
 * end of a session) get 405, which the spec allows: the hub sends nothing
 * unasked and keeps nothing to end.  Batches are refused: the protocol
 * versions served (NGX_IOA_MCP_VERSIONS) have none.
 *
 * Sessions are stateless.  The answer to initialize carries an
 * Mcp-Session-Id made of 128 random bits and an HMAC-SHA256 of them and of
 * the token's subject, under a key every worker has (made when nginx reads
 * its configuration, or read from session_key=, for several instances
 * behind one name).  Every later request must bring it, and it is checked
 * by recomputing the MAC: no Redis key, no shared memory, nothing to
 * expire, and a session id is no use with another identity's token.  A
 * reload with a fresh key ends every session (404, and clients initialize
 * again, as the spec asks of them).  The id carries no authority: the
 * token does, on every request.
 *
 * Tool calls are calls of the hub's own REST endpoints (ngx_ioa_call.c):
 * each tool is one endpoint, reached by an in-memory subrequest with the
 * caller's headers, its Authorization among them, and a body built from
 * the tool's arguments, so a tool is exactly its endpoint (scopes, limits,
 * validation, error texts).  JSON-RPC itself is ngx_ioa_jsonrpc.c.
 *
 * Bounds: the request body is ioa_max_message_size at most (as every
 * REST body), an answer taken from an endpoint is at most the ioa_api
 * location's subrequest_output_buffer_size (conf.d/ioa.conf: 1m; a larger
 * one becomes a tool error saying so), a transcript reads at most
 * NGX_IOA_MCP_RECORD_MAX envelopes.  An endpoint's refusal is a tool result
 * with isError (the model can read it and try again); arguments that do
 * not fit the tool's schema are JSON-RPC's -32602.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ngx_ioa.h"


/* the protocol versions served, newest first: the newest is offered to a
 * client asking for one not in the list (MCP's negotiation) */
static ngx_str_t  ngx_ioa_mcp_versions[] = {
    ngx_string("2025-11-25"),
    ngx_string("2025-06-18"),
    ngx_null_string
};

#define NGX_IOA_MCP_KEY_LEN      32
#define NGX_IOA_MCP_NONCE_LEN    16
#define NGX_IOA_MCP_MAC_LEN      16          /* of SHA-256's 32 */
#define NGX_IOA_MCP_SESSION_LEN  (2 * (NGX_IOA_MCP_NONCE_LEN                 \
                                       + NGX_IOA_MCP_MAC_LEN))
/* a goal id in a path: the hub's are 32 hex digits */
#define NGX_IOA_MCP_GOAL_ID_MAX  64
/* envelopes of a transcript read: a team's conversation is far shorter */
#define NGX_IOA_MCP_RECORD_MAX   1000
/* goals resources/list names: GET /goals' largest page */
#define NGX_IOA_MCP_LIST_MAX     "100"

/* MCP's own error codes (JSON-RPC's: ngx_ioa.h) */
#define NGX_IOA_MCP_NO_SESSION        -32001
#define NGX_IOA_MCP_NO_RESOURCE       -32002


struct ngx_ioa_mcp_conf_s {
    ngx_str_t                 api;        /* the ioa_api prefix, "" for / */
    u_char                    key[NGX_IOA_MCP_KEY_LEN];
};


typedef enum {
    NGX_IOA_MCP_STRING = 0,
    NGX_IOA_MCP_INTEGER,
    NGX_IOA_MCP_BOOLEAN,
    NGX_IOA_MCP_STRINGS,                 /* an array of strings */
    NGX_IOA_MCP_STRING_OR_STRINGS
} ngx_ioa_mcp_type_e;


typedef struct {
    const char               *name;
    ngx_ioa_mcp_type_e        type;
    unsigned                  required:1;
    unsigned                  path:1;     /* the goal id of the URI */
    const char               *description;
} ngx_ioa_mcp_param_t;


typedef struct {
    const char               *name;
    const char               *title;
    const char               *description;
    const char               *annotations;   /* JSON object */
    ngx_ioa_mcp_param_t      *params;
    const char               *path;          /* before the goal id, if any */
    const char               *suffix;        /* after it */
    const char               *args;          /* of the subrequest */
    const char               *wrap;          /* key for an array answer */
    unsigned                  post:1;
    unsigned                  sender:1;      /* the body names the caller */
} ngx_ioa_mcp_tool_t;


typedef struct ngx_ioa_mcp_s  ngx_ioa_mcp_t;

struct ngx_ioa_mcp_s {
    ngx_ioa_call_t            call;          /* must be first */
    ngx_ioa_mcp_conf_t       *conf;
    ngx_ioa_identity_t       *id;
    ngx_str_t                 rpc_id;        /* the request's id, as JSON */
    ngx_ioa_mcp_tool_t       *tool;
    ngx_str_t                 uri;           /* resources/read */
    ngx_str_t                 goal_id;
    yajl_val                  goal;          /* its GET /goals/{id} */
};


static ngx_ioa_mcp_param_t  ngx_ioa_mcp_find_params[] = {
    { "capabilities", NGX_IOA_MCP_STRINGS, 1, 0,
      "What the agents must be able to do, one phrase each; every phrase "
      "is searched and the results merged" },
    { "limit", NGX_IOA_MCP_INTEGER, 0, 0,
      "Agents per capability, 1 to 50 (3)" },
    { "online_only", NGX_IOA_MCP_BOOLEAN, 0, 0,
      "Only agents connected now" },
    { NULL, 0, 0, 0, NULL }
};

static ngx_ioa_mcp_param_t  ngx_ioa_mcp_launch_params[] = {
    { "goal", NGX_IOA_MCP_STRING, 1, 0,
      "What the team should achieve, in words" },
    { "team_member_names", NGX_IOA_MCP_STRINGS, 0, 0,
      "Agents to team up with (otherwise the planner finds them)" },
    { "max_turns", NGX_IOA_MCP_INTEGER, 0, 0,
      "Most turns of the team's conversation" },
    { "team_up_depth", NGX_IOA_MCP_INTEGER, 0, 0,
      "How deep sub-teams may nest" },
    { "deadline_s", NGX_IOA_MCP_INTEGER, 0, 0,
      "Seconds, 1 to 86400: the goal concludes with what it has then" },
    { "comm_id", NGX_IOA_MCP_STRING, 0, 0,
      "Continue in this room of an earlier goal (with cont_input)" },
    { "cont_input", NGX_IOA_MCP_STRING, 0, 0,
      "What to say when continuing in comm_id" },
    { "is_collaborative_planning_enabled", NGX_IOA_MCP_BOOLEAN, 0, 0,
      "Let the team plan together" },
    { "skip_naming", NGX_IOA_MCP_BOOLEAN, 0, 0,
      "Do not ask for a team name" },
    { "person", NGX_IOA_MCP_STRING, 0, 0,
      "The goal's person in its room: with a token only the caller itself "
      "(the default)" },
    { NULL, 0, 0, 0, NULL }
};

static ngx_ioa_mcp_param_t  ngx_ioa_mcp_goal_params[] = {
    { "goal_id", NGX_IOA_MCP_STRING, 1, 1,
      "The goal_id launch_goal answered" },
    { NULL, 0, 0, 0, NULL }
};

static ngx_ioa_mcp_param_t  ngx_ioa_mcp_post_params[] = {
    { "goal_id", NGX_IOA_MCP_STRING, 1, 1,
      "The goal_id launch_goal answered" },
    { "content", NGX_IOA_MCP_STRING, 1, 0,
      "The message, 1 to 8192 bytes; the command \"stop\" (the whole "
      "message) ends the goal with what it has, anything else is work "
      "(or, with a model, what the model reads it as asking)" },
    { "sender", NGX_IOA_MCP_STRING, 0, 0,
      "Open mode only: who speaks (user)" },
    { NULL, 0, 0, 0, NULL }
};


static ngx_ioa_mcp_tool_t  ngx_ioa_mcp_tools[] = {

    { "find_agents", "Find agents",
      "Find agents of the hub by what they can do (POST "
      "/retrieve_assistant, as the caller): name, type, description, "
      "score, whether online, and their record of finished tasks.  Needs "
      "a token with the agent scope.",
      "{\"readOnlyHint\":true,\"openWorldHint\":false}",
      ngx_ioa_mcp_find_params, "/retrieve_assistant", NULL, NULL, "agents",
      1, 1 },

    { "launch_goal", "Launch a goal",
      "Give a goal to a team of agents (POST /launch_goal).  Answers at "
      "once with the goal_id; follow it with goal_status and read its "
      "conversation as the resource ioa://goals/{goal_id}/transcript.  "
      "Needs the launch scope.",
      "{\"readOnlyHint\":false,\"destructiveHint\":false,"
      "\"idempotentHint\":false,\"openWorldHint\":true}",
      ngx_ioa_mcp_launch_params, "/launch_goal", NULL, "wait=0", NULL,
      1, 0 },

    { "goal_status", "Goal status",
      "A goal's state (queued, planning, running, concluded, failed, "
      "cancelled ...), its room (comm_id), its conclusion once it has one, "
      "and the tokens it used (GET /goals/{goal_id}).",
      "{\"readOnlyHint\":true,\"openWorldHint\":false}",
      ngx_ioa_mcp_goal_params, "/goals/", "", NULL, NULL,
      0, 0 },

    { "post_to_goal", "Post to a goal",
      "Join a running goal's conversation as its person (POST "
      "/goals/{goal_id}/messages): the coordinator takes the message at "
      "its next decision.",
      "{\"readOnlyHint\":false,\"destructiveHint\":false,"
      "\"idempotentHint\":false,\"openWorldHint\":true}",
      ngx_ioa_mcp_post_params, "/goals/", "/messages", NULL, NULL,
      1, 0 },

    { "cancel_goal", "Cancel a goal",
      "Stop a goal and its sub-teams (POST /goals/{goal_id}/cancel).",
      "{\"readOnlyHint\":false,\"destructiveHint\":true,"
      "\"idempotentHint\":true,\"openWorldHint\":false}",
      ngx_ioa_mcp_goal_params, "/goals/", "/cancel", NULL, NULL,
      1, 0 },

    { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 }
};



static ngx_str_t  ngx_ioa_mcp_scheme = ngx_string("ioa://goals/");
static ngx_str_t  ngx_ioa_mcp_suffix = ngx_string("/transcript");


static void ngx_ioa_mcp_body(ngx_http_request_t *r, ngx_str_t *body);
static void ngx_ioa_mcp_dispatch(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    ngx_str_t *method, yajl_val params);
static ngx_int_t ngx_ioa_mcp_version_ok(ngx_str_t *v);
static ngx_int_t ngx_ioa_mcp_session(ngx_ioa_mcp_t *m, u_char *nonce,
    u_char *out);
static ngx_int_t ngx_ioa_mcp_session_check(ngx_http_request_t *r,
    ngx_ioa_mcp_t *m);
static void ngx_ioa_mcp_initialize(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val params);
static void ngx_ioa_mcp_tools_list(ngx_http_request_t *r, ngx_ioa_mcp_t *m);
static void ngx_ioa_mcp_jbuf_cstr(ngx_ioa_jbuf_t *b, const char *s);
static void ngx_ioa_mcp_tools_call(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val params);
static ngx_int_t ngx_ioa_mcp_arguments(ngx_ioa_mcp_t *m, yajl_val args,
    ngx_ioa_jbuf_t *body, ngx_ioa_error_t *err);
static ngx_uint_t ngx_ioa_mcp_type_ok(ngx_ioa_mcp_type_e type, yajl_val v);
static void ngx_ioa_mcp_tool_done(ngx_http_request_t *r, void *data);
static void ngx_ioa_mcp_resources_list(ngx_http_request_t *r,
    ngx_ioa_mcp_t *m);
static void ngx_ioa_mcp_resources_listed(ngx_http_request_t *r, void *data);
static void ngx_ioa_mcp_resources_read(ngx_http_request_t *r,
    ngx_ioa_mcp_t *m, yajl_val params);
static void ngx_ioa_mcp_goal_read(ngx_http_request_t *r, void *data);
static void ngx_ioa_mcp_record_read(ngx_http_request_t *r, void *data);
static void ngx_ioa_mcp_transcript(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val goal, yajl_val room);
static ngx_int_t ngx_ioa_mcp_not_allowed(ngx_http_request_t *r);


/* ioa_mcp [api=/prefix] [session_key=file] */

char *
ngx_ioa_mcp_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    char                      *rv;
    ngx_str_t                 *value, key, file;
    ngx_uint_t                 i;
    ngx_ioa_mcp_conf_t        *mc;
    ngx_http_core_loc_conf_t  *clcf;

    if (lcf->mcp) {
        return "is duplicate";
    }

    mc = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_mcp_conf_t));
    if (mc == NULL) {
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;
    ngx_str_null(&file);

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "api=", 4) == 0) {
            rv = ngx_ioa_call_api_conf(&value[i], &mc->api);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "session_key=", 12) == 0
            && value[i].len > 12)
        {
            file.data = value[i].data + 12;
            file.len = value[i].len - 12;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_mcp\": unknown parameter \"%V\"",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    if (file.len) {
        /* one key for several instances behind one name: a session begun
         * on one is good on the others */
        if (ngx_ioa_conf_read_file(cf, &file, 4096, &key) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        ngx_ioa_conf_trim(&key);

        if (key.len < NGX_IOA_MCP_KEY_LEN) {
            return "needs a session_key= file of at least 32 bytes";
        }

        /* the key of the MAC is the file's SHA-256 */
        if (EVP_Digest(key.data, key.len, mc->key, NULL, EVP_sha256(), NULL)
            != 1)
        {
            return NGX_CONF_ERROR;
        }

    } else if (getrandom(mc->key, sizeof(mc->key), 0) != sizeof(mc->key)) {
        return "cannot make a session key: getrandom() failed";
    }

    lcf->mcp = mc;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_ioa_mcp_handler;

    return NGX_CONF_OK;
}


ngx_int_t
ngx_ioa_mcp_handler(ngx_http_request_t *r)
{
    ngx_int_t            rc;
    ngx_str_t            origin, text;
    ngx_ioa_mcp_t       *m;
    ngx_table_elt_t     *h;
    ngx_ioa_identity_t  *id;
    ngx_ioa_loc_conf_t  *lcf;

    rc = ngx_ioa_cors(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (ngx_ioa_origin_check(r, &origin) != NGX_OK) {
        return ngx_ioa_jsonrpc_refuse_origin(r, &origin);
    }

    if (!(r->method & NGX_HTTP_POST)) {
        return ngx_ioa_mcp_not_allowed(r);
    }

    /* any valid token: each tool's endpoint checks its own scope */
    rc = ngx_ioa_auth_check(r, 0, NULL, &id);
    if (id == NULL) {
        return rc;
    }

    lcf = ngx_ioa_loc_conf(r);

    m = ngx_pcalloc(r->pool, sizeof(ngx_ioa_mcp_t));
    if (m == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    m->call.api = lcf->mcp->api;
    m->conf = lcf->mcp;
    m->id = id;
    ngx_str_set(&m->rpc_id, "null");

    ngx_ioa_rest_set_data(r, m);

    if (ngx_ioa_rest_get_data(r) != m) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a version the client says it speaks must be one of ours */
    h = ngx_ioa_header_in(r, "MCP-Protocol-Version");

    if (h && ngx_ioa_mcp_version_ok(&h->value) != NGX_OK) {
        ngx_str_set(&text, "unsupported MCP-Protocol-Version: this server "
                           "speaks 2025-11-25 and 2025-06-18");

        return ngx_ioa_jsonrpc_refuse_early(r, NGX_HTTP_BAD_REQUEST,
                                            NGX_IOA_JSONRPC_INVALID_REQUEST,
                                            &text);
    }

    return ngx_ioa_read_body(r, ngx_ioa_mcp_body);
}


static void
ngx_ioa_mcp_body(ngx_http_request_t *r, ngx_str_t *body)
{
    ngx_int_t           rc;
    ngx_ioa_mcp_t      *m;
    ngx_ioa_jsonrpc_t   rpc;

    m = ngx_ioa_rest_get_data(r);

    rc = ngx_ioa_jsonrpc_parse(r, body, NGX_HTTP_BAD_REQUEST, &rpc);

    if (rc != NGX_OK) {
        if (rc == NGX_ERROR) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    m->rpc_id = rpc.id;

    if (rpc.response) {
        /* a response to a request of ours: we send none, so any is taken
         * and dropped */
        ngx_ioa_finish(r, ngx_ioa_jsonrpc_accepted(r));
        return;
    }

    if (!rpc.notification && rpc.method.len == 10
        && ngx_strncmp(rpc.method.data, "initialize", 10) == 0)
    {
        ngx_ioa_mcp_initialize(r, m, rpc.params);
        return;
    }

    if (ngx_ioa_mcp_session_check(r, m) != NGX_OK) {
        return;
    }

    if (rpc.notification) {
        /* notifications (initialized, cancelled, ...) need nothing */
        ngx_ioa_finish(r, ngx_ioa_jsonrpc_accepted(r));
        return;
    }

    ngx_ioa_mcp_dispatch(r, m, &rpc.method, rpc.params);
}


static void
ngx_ioa_mcp_dispatch(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    ngx_str_t *method, yajl_val params)
{
    ngx_ioa_jbuf_t  b;

#define ngx_ioa_mcp_is(s)                                                     \
    (method->len == sizeof(s) - 1                                             \
     && ngx_strncmp(method->data, s, sizeof(s) - 1) == 0)

    if (ngx_ioa_mcp_is("ping")) {
        if (ngx_ioa_jbuf_init(&b, r->pool, 8) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_ioa_jbuf_literal(&b, "{}");
        ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
        return;
    }

    if (ngx_ioa_mcp_is("tools/list")) {
        ngx_ioa_mcp_tools_list(r, m);
        return;
    }

    if (ngx_ioa_mcp_is("tools/call")) {
        ngx_ioa_mcp_tools_call(r, m, params);
        return;
    }

    if (ngx_ioa_mcp_is("resources/list")) {
        ngx_ioa_mcp_resources_list(r, m);
        return;
    }

    if (ngx_ioa_mcp_is("resources/templates/list")) {
        if (ngx_ioa_jbuf_init(&b, r->pool, 512) != NGX_OK) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_ioa_jbuf_literal(&b,
            "{\"resourceTemplates\":[{"
            "\"uriTemplate\":\"ioa://goals/{goal_id}/transcript\","
            "\"name\":\"goal-transcript\","
            "\"title\":\"A goal's transcript\","
            "\"description\":\"The goal's state and conclusion, and every "
            "envelope of its room so far, oldest first (at most 1000)\","
            "\"mimeType\":\"application/json\"}]}");
        ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
        return;
    }

    if (ngx_ioa_mcp_is("resources/read")) {
        ngx_ioa_mcp_resources_read(r, m, params);
        return;
    }

#undef ngx_ioa_mcp_is

    ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_NO_METHOD,
                       "method not found");
}


static ngx_int_t
ngx_ioa_mcp_version_ok(ngx_str_t *v)
{
    ngx_str_t  *s;

    for (s = ngx_ioa_mcp_versions; s->len; s++) {
        if (v->len == s->len && ngx_strncmp(v->data, s->data, s->len) == 0) {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/* the session id of nonce for this caller: hex(nonce) hex(MAC) */

static ngx_int_t
ngx_ioa_mcp_session(ngx_ioa_mcp_t *m, u_char *nonce, u_char *out)
{
    u_char        mac[EVP_MAX_MD_SIZE];
    unsigned int  len;
    HMAC_CTX     *h;
    ngx_int_t     rc;

    h = HMAC_CTX_new();
    if (h == NULL) {
        return NGX_ERROR;
    }

    rc = NGX_ERROR;

    if (HMAC_Init_ex(h, m->conf->key, NGX_IOA_MCP_KEY_LEN, EVP_sha256(),
                     NULL) == 1
        && HMAC_Update(h, nonce, NGX_IOA_MCP_NONCE_LEN) == 1
        && HMAC_Update(h, m->id->sub.data ? m->id->sub.data
                                          : (u_char *) "",
                       m->id->sub.len) == 1
        && HMAC_Final(h, mac, &len) == 1)
    {
        out = ngx_hex_dump(out, nonce, NGX_IOA_MCP_NONCE_LEN);
        ngx_hex_dump(out, mac, NGX_IOA_MCP_MAC_LEN);
        rc = NGX_OK;
    }

    HMAC_CTX_free(h);

    return rc;
}


/* NGX_OK, or the refusal is sent: 400 without the header, 404 with one
 * this key did not make for this caller */

static ngx_int_t
ngx_ioa_mcp_session_check(ngx_http_request_t *r, ngx_ioa_mcp_t *m)
{
    u_char            nonce[NGX_IOA_MCP_NONCE_LEN];
    u_char            want[NGX_IOA_MCP_SESSION_LEN];
    ngx_int_t         hi, lo;
    ngx_uint_t        i;
    ngx_table_elt_t  *h;

    h = ngx_ioa_header_in(r, "Mcp-Session-Id");

    if (h == NULL) {
        ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_BAD_REQUEST,
                           NGX_IOA_JSONRPC_INVALID_REQUEST,
                           "Mcp-Session-Id is required: initialize first");
        return NGX_ERROR;
    }

    if (h->value.len != NGX_IOA_MCP_SESSION_LEN) {
        goto unknown;
    }

    for (i = 0; i < NGX_IOA_MCP_NONCE_LEN; i++) {
        hi = ngx_hextoi(&h->value.data[2 * i], 1);
        lo = ngx_hextoi(&h->value.data[2 * i + 1], 1);

        if (hi == NGX_ERROR || lo == NGX_ERROR) {
            goto unknown;
        }

        nonce[i] = (u_char) (hi << 4 | lo);
    }

    if (ngx_ioa_mcp_session(m, nonce, want) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_ERROR;
    }

    if (CRYPTO_memcmp(want, h->value.data, NGX_IOA_MCP_SESSION_LEN) == 0) {
        return NGX_OK;
    }

unknown:

    ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_NOT_FOUND, NGX_IOA_MCP_NO_SESSION,
                       "unknown session: initialize again");
    return NGX_ERROR;
}


static void
ngx_ioa_mcp_initialize(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val params)
{
    u_char            nonce[NGX_IOA_MCP_NONCE_LEN], *sid;
    ngx_str_t         asked, *version;
    ngx_ioa_jbuf_t    b;
    ngx_table_elt_t  *h;

    if (ngx_ioa_json_string(ngx_ioa_json_get(params, "protocolVersion"),
                            &asked)
        != NGX_OK)
    {
        ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS,
                           "initialize needs params.protocolVersion");
        return;
    }

    /* the one asked for if we speak it, else our newest: the client then
     * decides whether it speaks that */
    version = &ngx_ioa_mcp_versions[0];

    if (ngx_ioa_mcp_version_ok(&asked) == NGX_OK) {
        version = &asked;
    }

    sid = ngx_pnalloc(r->pool, NGX_IOA_MCP_SESSION_LEN);
    h = ngx_list_push(&r->headers_out.headers);

    if (sid == NULL || h == NULL
        || getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce)
        || ngx_ioa_mcp_session(m, nonce, sid) != NGX_OK
        || ngx_ioa_jbuf_init(&b, r->pool, 1024) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Mcp-Session-Id");
    h->value.data = sid;
    h->value.len = NGX_IOA_MCP_SESSION_LEN;

    ngx_ioa_jbuf_literal(&b, "{\"protocolVersion\":");
    ngx_ioa_jbuf_str(&b, version);
    ngx_ioa_jbuf_literal(&b,
        ",\"capabilities\":{\"tools\":{\"listChanged\":false},"
        "\"resources\":{\"subscribe\":false,\"listChanged\":false}},"
        "\"serverInfo\":{\"name\":\"ioa\",\"title\":\"ioa hub\","
        "\"version\":\"" NGX_IOA_VERSION "\"},"
        "\"instructions\":\"An Internet of Agents hub.  find_agents "
        "searches its agents by capability; launch_goal gives a goal to a "
        "team the hub's planner forms and answers with a goal_id at once; "
        "goal_status tells how it goes and, once concluded, its "
        "conclusion; post_to_goal talks to the team while it works; "
        "cancel_goal stops it.  The resource "
        "ioa://goals/{goal_id}/transcript is the team's conversation.\"}");

    ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
}


static void
ngx_ioa_mcp_tools_list(ngx_http_request_t *r, ngx_ioa_mcp_t *m)
{
    ngx_uint_t            first;
    ngx_ioa_jbuf_t        b;
    ngx_ioa_mcp_tool_t   *t;
    ngx_ioa_mcp_param_t  *p;

    static const char  *types[] = {
        "{\"type\":\"string\"",
        "{\"type\":\"integer\"",
        "{\"type\":\"boolean\"",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"}",
        "{\"type\":[\"string\",\"array\"],\"items\":{\"type\":\"string\"}"
    };

    if (ngx_ioa_jbuf_init(&b, r->pool, 8192) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* each input schema is made from the same table that checks the
     * arguments, so the two cannot disagree */

    ngx_ioa_jbuf_literal(&b, "{\"tools\":[");

    for (t = ngx_ioa_mcp_tools; t->name; t++) {
        if (t != ngx_ioa_mcp_tools) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_literal(&b, "{\"name\":\"");
        ngx_ioa_jbuf_raw(&b, (u_char *) t->name, ngx_strlen(t->name));
        ngx_ioa_jbuf_literal(&b, "\",\"title\":");
        ngx_ioa_mcp_jbuf_cstr(&b, t->title);
        ngx_ioa_jbuf_literal(&b, ",\"description\":");
        ngx_ioa_mcp_jbuf_cstr(&b, t->description);
        ngx_ioa_jbuf_literal(&b, ",\"annotations\":");
        ngx_ioa_jbuf_raw(&b, (u_char *) t->annotations,
                         ngx_strlen(t->annotations));
        ngx_ioa_jbuf_literal(&b, ",\"inputSchema\":{\"type\":\"object\","
                                 "\"properties\":{");

        for (p = t->params; p->name; p++) {
            if (p != t->params) {
                ngx_ioa_jbuf_byte(&b, ',');
            }

            ngx_ioa_jbuf_byte(&b, '"');
            ngx_ioa_jbuf_raw(&b, (u_char *) p->name, ngx_strlen(p->name));
            ngx_ioa_jbuf_literal(&b, "\":");
            ngx_ioa_jbuf_raw(&b, (u_char *) types[p->type],
                             ngx_strlen(types[p->type]));
            ngx_ioa_jbuf_literal(&b, ",\"description\":");
            ngx_ioa_mcp_jbuf_cstr(&b, p->description);
            ngx_ioa_jbuf_byte(&b, '}');
        }

        ngx_ioa_jbuf_literal(&b, "},\"required\":[");
        first = 1;

        for (p = t->params; p->name; p++) {
            if (p->required) {
                if (!first) {
                    ngx_ioa_jbuf_byte(&b, ',');
                }

                first = 0;
                ngx_ioa_jbuf_byte(&b, '"');
                ngx_ioa_jbuf_raw(&b, (u_char *) p->name,
                                 ngx_strlen(p->name));
                ngx_ioa_jbuf_byte(&b, '"');
            }
        }

        ngx_ioa_jbuf_literal(&b, "],\"additionalProperties\":false}}");
    }

    ngx_ioa_jbuf_literal(&b, "]}");

    ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
}


/* a C string as a JSON string, escaped */

static void
ngx_ioa_mcp_jbuf_cstr(ngx_ioa_jbuf_t *b, const char *s)
{
    ngx_str_t  v;

    v.data = (u_char *) s;
    v.len = ngx_strlen(s);

    ngx_ioa_jbuf_str(b, &v);
}


static void
ngx_ioa_mcp_tools_call(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val params)
{
    size_t               len;
    u_char              *p;
    ngx_str_t            name, path, body, msg;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_error_t      err;
    ngx_ioa_mcp_tool_t  *t;

    if (ngx_ioa_json_string(ngx_ioa_json_get(params, "name"), &name)
        != NGX_OK)
    {
        ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS,
                           "tools/call needs params.name");
        return;
    }

    for (t = ngx_ioa_mcp_tools; t->name; t++) {
        if (name.len == ngx_strlen(t->name)
            && ngx_strncmp(name.data, t->name, name.len) == 0)
        {
            break;
        }
    }

    if (t->name == NULL) {
        ngx_ioa_error_set(&err, "", NULL, "unknown tool \"%V\"", &name);
        goto invalid;
    }

    m->tool = t;

    if (ngx_ioa_jbuf_init(&b, r->pool, 256) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_ioa_mcp_arguments(m, ngx_ioa_json_get(params, "arguments"), &b,
                              &err)
        != NGX_OK)
    {
        goto invalid;
    }

    if (ngx_ioa_jbuf_done(&b, &body) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (!t->post) {
        body.len = 0;
    }

    /* the endpoint's path, with the goal id in it */
    len = ngx_strlen(t->path) + m->goal_id.len
          + (t->suffix ? ngx_strlen(t->suffix) : 0);

    path.data = ngx_pnalloc(r->pool, len);
    if (path.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_cpymem(path.data, t->path, ngx_strlen(t->path));

    if (t->suffix) {
        p = ngx_cpymem(p, m->goal_id.data, m->goal_id.len);
        p = ngx_cpymem(p, t->suffix, ngx_strlen(t->suffix));
    }

    path.len = p - path.data;

    if (ngx_ioa_call(r, &m->call, t->post, &path, t->args, &body,
                         ngx_ioa_mcp_tool_done)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }

    return;

invalid:

    msg.data = err.text;
    msg.len = err.len;
    ngx_ioa_jsonrpc_error(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS, &msg);
}


/*
 * The arguments against the tool's table: an object, known names, their
 * types, the required ones present, a goal id that is one.  They are the
 * endpoint's body but for the goal id, which goes into the path.
 */

static ngx_int_t
ngx_ioa_mcp_arguments(ngx_ioa_mcp_t *m, yajl_val args, ngx_ioa_jbuf_t *body,
    ngx_ioa_error_t *err)
{
    size_t                i, k;
    ngx_str_t             s, key;
    yajl_val              v;
    ngx_uint_t            ok, first;
    ngx_ioa_mcp_tool_t   *t;
    ngx_ioa_mcp_param_t  *p;

    static const char  *want[] = {
        "a string", "an integer", "true or false", "an array of strings",
        "a string or an array of strings"
    };

    t = m->tool;

    if (args && !YAJL_IS_OBJECT(args)) {
        ngx_ioa_error_set(err, "", NULL, "%s: \"arguments\" must be an "
                          "object", t->name);
        return NGX_ERROR;
    }

    ngx_ioa_jbuf_byte(body, '{');
    first = 1;

    if (t->sender) {
        /* as the caller: its token's subject (in open mode, "mcp") */
        if (m->id->sub.len) {
            s = m->id->sub;

        } else {
            ngx_str_set(&s, "mcp");
        }

        ngx_ioa_jbuf_literal(body, "\"sender\":");
        ngx_ioa_jbuf_str(body, &s);
        first = 0;
    }

    for (i = 0; args && i < args->u.object.len; i++) {
        key.data = (u_char *) args->u.object.keys[i];
        key.len = ngx_strlen(key.data);
        v = args->u.object.values[i];

        for (p = t->params; p->name; p++) {
            if (key.len == ngx_strlen(p->name)
                && ngx_strncmp(key.data, p->name, key.len) == 0)
            {
                break;
            }
        }

        if (p->name == NULL) {
            ngx_ioa_error_set(err, "", NULL, "%s: unknown argument \"%V\"",
                              t->name, &key);
            return NGX_ERROR;
        }

        ok = ngx_ioa_mcp_type_ok(p->type, v);

        if (!ok) {
            ngx_ioa_error_set(err, "", NULL, "%s: \"%s\" must be %s",
                              t->name, p->name, want[p->type]);
            return NGX_ERROR;
        }

        if (p->path) {
            (void) ngx_ioa_json_string(v, &s);

            for (k = 0; k < s.len; k++) {
                if (!isalnum(s.data[k]) && s.data[k] != '-'
                    && s.data[k] != '_')
                {
                    break;
                }
            }

            if (s.len == 0 || s.len > NGX_IOA_MCP_GOAL_ID_MAX || k < s.len) {
                ngx_ioa_error_set(err, "", NULL, "%s: \"%s\" is not a goal "
                                  "id (the 32 hex digits launch_goal "
                                  "answered)", t->name, p->name);
                return NGX_ERROR;
            }

            m->goal_id = s;
            continue;
        }

        if (!first) {
            ngx_ioa_jbuf_byte(body, ',');
        }

        first = 0;
        ngx_ioa_jbuf_str(body, &key);
        ngx_ioa_jbuf_byte(body, ':');
        ngx_ioa_jbuf_val(body, v);
    }

    ngx_ioa_jbuf_byte(body, '}');

    for (p = t->params; p->name; p++) {
        if (p->required
            && (args == NULL || ngx_ioa_json_get(args, p->name) == NULL))
        {
            ngx_ioa_error_set(err, "", NULL, "%s: \"%s\" is required",
                              t->name, p->name);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a value of the type a tool's table gives */

static ngx_uint_t
ngx_ioa_mcp_type_ok(ngx_ioa_mcp_type_e type, yajl_val v)
{
    size_t  k;

    switch (type) {

    case NGX_IOA_MCP_STRING:
        return YAJL_IS_STRING(v);

    case NGX_IOA_MCP_INTEGER:
        return YAJL_IS_INTEGER(v);

    case NGX_IOA_MCP_BOOLEAN:
        return YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v);

    default: /* NGX_IOA_MCP_STRINGS, NGX_IOA_MCP_STRING_OR_STRINGS */
        if (type == NGX_IOA_MCP_STRING_OR_STRINGS && YAJL_IS_STRING(v)) {
            return 1;
        }

        if (!YAJL_IS_ARRAY(v)) {
            return 0;
        }

        for (k = 0; k < v->u.array.len; k++) {
            if (!YAJL_IS_STRING(v->u.array.values[k])) {
                return 0;
            }
        }

        return 1;
    }
}


/* the endpoint answered: its JSON is the tool's result, an error too */

static void
ngx_ioa_mcp_tool_done(ngx_http_request_t *r, void *data)
{
    ngx_ioa_mcp_t *m = data;

    size_t           len;
    yajl_val         doc;
    ngx_str_t        text;
    ngx_ioa_jbuf_t   b;
    ngx_uint_t       error;

    doc = ngx_ioa_call_answer(r, &m->call);

    if (ngx_ioa_jbuf_init(&b, r->pool, m->call.body.len * 2 + 256) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    error = (m->call.status < 200 || m->call.status > 299 || doc == NULL);

    text = m->call.body;
    len = text.len;

    while (len && (text.data[len - 1] == '\n')) {
        len--;
    }

    text.len = len;

    ngx_ioa_jbuf_literal(&b, "{\"content\":[{\"type\":\"text\",\"text\":");

    if (doc == NULL) {
        /* not the endpoint's JSON: nginx's own error page, or nothing */
        ngx_str_set(&text, "the hub's endpoint gave no JSON answer (HTTP "
                           "status in structuredContent); an answer larger "
                           "than subrequest_output_buffer_size of the "
                           "ioa_api location is cut off");
    }

    ngx_ioa_jbuf_str(&b, &text);
    ngx_ioa_jbuf_literal(&b, "}],\"structuredContent\":");

    if (error) {
        ngx_ioa_jbuf_literal(&b, "{\"status\":");
        ngx_ioa_jbuf_int(&b, m->call.status);

        if (doc && YAJL_IS_OBJECT(doc)) {
            ngx_ioa_jbuf_literal(&b, ",\"error\":");
            ngx_ioa_jbuf_val(&b, doc);
        }

        ngx_ioa_jbuf_literal(&b, "},\"isError\":true}");

    } else if (!YAJL_IS_OBJECT(doc)) {
        /* structuredContent is an object: an array answer gets a name */
        ngx_ioa_jbuf_literal(&b, "{\"");
        ngx_ioa_jbuf_raw(&b, (u_char *) (m->tool->wrap ? m->tool->wrap
                                                       : "answer"),
                         ngx_strlen(m->tool->wrap ? m->tool->wrap
                                                  : "answer"));
        ngx_ioa_jbuf_literal(&b, "\":");
        ngx_ioa_jbuf_val(&b, doc);
        ngx_ioa_jbuf_literal(&b, "},\"isError\":false}");

    } else {
        ngx_ioa_jbuf_val(&b, doc);
        ngx_ioa_jbuf_literal(&b, ",\"isError\":false}");
    }

    ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
}


/* resources/list: the transcripts of the goals the caller may see */

static void
ngx_ioa_mcp_resources_list(ngx_http_request_t *r, ngx_ioa_mcp_t *m)
{
    ngx_str_t  path, body;

    ngx_str_set(&path, "/goals");
    ngx_str_null(&body);

    if (ngx_ioa_call(r, &m->call, 0, &path, "limit=" NGX_IOA_MCP_LIST_MAX,
                         &body, ngx_ioa_mcp_resources_listed)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_ioa_mcp_resources_listed(ngx_http_request_t *r, void *data)
{
    ngx_ioa_mcp_t *m = data;

    size_t           i, n;
    yajl_val         doc, goals, g;
    ngx_str_t        id, text;
    ngx_ioa_jbuf_t   b;

    doc = ngx_ioa_call_answer(r, &m->call);
    goals = (m->call.status == NGX_HTTP_OK) ? ngx_ioa_json_get(doc, "goals")
                                       : NULL;

    if (ngx_ioa_jbuf_init(&b, r->pool, m->call.body.len + 256) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* a token that may see no goals has no transcripts to list: the list
     * is empty rather than an error */

    ngx_ioa_jbuf_literal(&b, "{\"resources\":[");
    n = 0;

    for (i = 0; goals && YAJL_IS_ARRAY(goals) && i < goals->u.array.len; i++)
    {
        g = goals->u.array.values[i];

        if (ngx_ioa_json_string(ngx_ioa_json_get(g, "goal_id"), &id)
            != NGX_OK)
        {
            continue;
        }

        if (n++) {
            ngx_ioa_jbuf_byte(&b, ',');
        }

        ngx_ioa_jbuf_literal(&b, "{\"uri\":\"ioa://goals/");
        ngx_ioa_jbuf_raw(&b, id.data, id.len);
        ngx_ioa_jbuf_literal(&b, "/transcript\",\"name\":\"goal ");
        ngx_ioa_jbuf_raw(&b, id.data, ngx_min(id.len, 8));
        ngx_ioa_jbuf_literal(&b, "\",\"mimeType\":\"application/json\"");

        if (ngx_ioa_json_string(ngx_ioa_json_get(g, "goal"), &text)
            == NGX_OK)
        {
            ngx_ioa_jbuf_literal(&b, ",\"title\":");
            ngx_ioa_jbuf_str(&b, &text);
        }

        ngx_ioa_jbuf_byte(&b, '}');
    }

    ngx_ioa_jbuf_literal(&b, "]}");

    ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
}


/* resources/read ioa://goals/{goal_id}/transcript: the goal, then its
 * room's record */

static void
ngx_ioa_mcp_resources_read(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val params)
{
    size_t     k;
    ngx_str_t  uri, id, path, body;

    if (ngx_ioa_json_string(ngx_ioa_json_get(params, "uri"), &uri)
        != NGX_OK)
    {
        ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_INVALID_PARAMS,
                           "resources/read needs params.uri");
        return;
    }

    m->uri = uri;

    if (uri.len <= ngx_ioa_mcp_scheme.len + ngx_ioa_mcp_suffix.len
        || ngx_strncmp(uri.data, ngx_ioa_mcp_scheme.data,
                       ngx_ioa_mcp_scheme.len) != 0
        || ngx_strncmp(uri.data + uri.len - ngx_ioa_mcp_suffix.len,
                       ngx_ioa_mcp_suffix.data,
                       ngx_ioa_mcp_suffix.len) != 0)
    {
        goto unknown;
    }

    id.data = uri.data + ngx_ioa_mcp_scheme.len;
    id.len = uri.len - ngx_ioa_mcp_scheme.len - ngx_ioa_mcp_suffix.len;

    for (k = 0; k < id.len; k++) {
        if (!isalnum(id.data[k]) && id.data[k] != '-' && id.data[k] != '_') {
            goto unknown;
        }
    }

    if (id.len > NGX_IOA_MCP_GOAL_ID_MAX) {
        goto unknown;
    }

    m->goal_id = id;

    path.len = sizeof("/goals/") - 1 + id.len;
    path.data = ngx_pnalloc(r->pool, path.len);
    if (path.data == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memcpy(ngx_cpymem(path.data, "/goals/", 7), id.data, id.len);
    ngx_str_null(&body);

    if (ngx_ioa_call(r, &m->call, 0, &path, NULL, &body, ngx_ioa_mcp_goal_read)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }

    return;

unknown:

    ngx_ioa_jsonrpc_refuse(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_MCP_NO_RESOURCE,
                       "no such resource: this server has "
                       "ioa://goals/{goal_id}/transcript");
}


static void
ngx_ioa_mcp_goal_read(ngx_http_request_t *r, void *data)
{
    ngx_ioa_mcp_t *m = data;

    yajl_val         doc, error;
    ngx_str_t        comm_id, path, body, msg;
    ngx_ioa_jbuf_t   b;

    doc = ngx_ioa_call_answer(r, &m->call);

    if (m->call.status != NGX_HTTP_OK || !YAJL_IS_OBJECT(doc)) {
        error = ngx_ioa_json_get(doc, "message");

        if (ngx_ioa_json_string(error, &msg) != NGX_OK) {
            ngx_str_set(&msg, "the goal could not be read");
        }

        ngx_ioa_jsonrpc_error(r, &m->rpc_id, NGX_HTTP_OK,
                          m->call.status == NGX_HTTP_NOT_FOUND
                          ? NGX_IOA_MCP_NO_RESOURCE : NGX_IOA_JSONRPC_INTERNAL,
                          &msg);
        return;
    }

    m->goal = doc;

    if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "comm_id"), &comm_id)
        != NGX_OK || comm_id.len == 0)
    {
        /* no room yet (queued, planning): the goal and no envelope */
        ngx_ioa_mcp_transcript(r, m, doc, NULL);
        return;
    }

    if (ngx_ioa_jbuf_init(&b, r->pool, comm_id.len + 64) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"comm_id\":");
    ngx_ioa_jbuf_str(&b, &comm_id);
    ngx_ioa_jbuf_literal(&b, ",\"limit\":");
    ngx_ioa_jbuf_int(&b, NGX_IOA_MCP_RECORD_MAX);
    ngx_ioa_jbuf_byte(&b, '}');

    if (ngx_ioa_jbuf_done(&b, &body) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_str_set(&path, "/fetch_chat_record");

    if (ngx_ioa_call(r, &m->call, 1, &path, NULL, &body,
                         ngx_ioa_mcp_record_read)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_ioa_mcp_record_read(ngx_http_request_t *r, void *data)
{
    ngx_ioa_mcp_t *m = data;

    yajl_val   doc, room;
    ngx_str_t  msg;

    doc = ngx_ioa_call_answer(r, &m->call);
    room = NULL;

    if (m->call.status == NGX_HTTP_OK && YAJL_IS_OBJECT(doc)
        && doc->u.object.len == 1)
    {
        room = doc->u.object.values[0];
    }

    if (room == NULL || !YAJL_IS_OBJECT(room)) {
        if (ngx_ioa_json_string(ngx_ioa_json_get(doc, "message"), &msg)
            != NGX_OK)
        {
            ngx_str_set(&msg, "the goal's room could not be read (an answer "
                              "larger than subrequest_output_buffer_size of "
                              "the ioa_api location is cut off)");
        }

        ngx_ioa_jsonrpc_error(r, &m->rpc_id, NGX_HTTP_OK, NGX_IOA_JSONRPC_INTERNAL, &msg);
        return;
    }

    ngx_ioa_mcp_transcript(r, m, m->goal, room);
}


/* {"contents":[{"uri","mimeType","text":{"goal":..,"room":..}}]} */

static void
ngx_ioa_mcp_transcript(ngx_http_request_t *r, ngx_ioa_mcp_t *m,
    yajl_val goal, yajl_val room)
{
    ngx_str_t        text;
    ngx_ioa_jbuf_t   t, b;

    if (ngx_ioa_jbuf_init(&t, r->pool, m->call.body.len + 1024) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&t, "{\"goal\":");

    if (goal) {
        ngx_ioa_jbuf_val(&t, goal);

    } else {
        ngx_ioa_jbuf_literal(&t, "null");
    }

    ngx_ioa_jbuf_literal(&t, ",\"room\":");

    if (room) {
        ngx_ioa_jbuf_val(&t, room);

    } else {
        ngx_ioa_jbuf_literal(&t, "null");
    }

    ngx_ioa_jbuf_byte(&t, '}');

    if (ngx_ioa_jbuf_done(&t, &text) != NGX_OK
        || ngx_ioa_jbuf_init(&b, r->pool, text.len * 2 + 256) != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_jbuf_literal(&b, "{\"contents\":[{\"uri\":");
    ngx_ioa_jbuf_str(&b, &m->uri);
    ngx_ioa_jbuf_literal(&b, ",\"mimeType\":\"application/json\","
                             "\"text\":");
    ngx_ioa_jbuf_str(&b, &text);
    ngx_ioa_jbuf_literal(&b, "}]}");

    ngx_ioa_jsonrpc_result(r, &m->rpc_id, &b);
}


/* GET (a stream the server would open) and DELETE (the end of a session
 * that holds nothing) are not offered */

static ngx_int_t
ngx_ioa_mcp_not_allowed(ngx_http_request_t *r)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "method_not_allowed", NULL,
                      "the MCP endpoint takes POST only: this server opens "
                      "no stream of its own and keeps no session to end");

    return ngx_ioa_send_not_allowed(r, "POST", &err);
}
