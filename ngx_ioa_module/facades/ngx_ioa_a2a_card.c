
/*
 * Copyright (C) ioa authors
 *
 * The A2A facade's agent card (see ngx_ioa_a2a.c): GET on an ioa_a2a
 * location, and GetExtendedAgentCard (agent/getAuthenticatedExtendedCard).
 * One document for A2A 1.0 and 0.3 readers: 1.0's fields, with
 * supportedInterfaces naming the JSON-RPC endpoint for both versions, and
 * 0.3's (url, protocolVersion, preferredTransport, security), which 1.0
 * readers ignore; the security scheme object carries both versions'
 * spellings.  Skills: the hub's own, then one per registered agent when
 * the caller's credentials may list the registry.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_a2a.h"


static void ngx_ioa_a2a_card_listed(ngx_http_request_t *r, void *data);


/*
 * The agent card.  Its skills: one for what the hub does (a goal, solved
 * by a team), and one per registered agent (the first
 * NGX_IOA_A2A_SKILLS_MAX) when the caller's credentials may list the
 * registry (/list_all_agents: admin, or open mode).
 */

void
ngx_ioa_a2a_card(ngx_http_request_t *r, ngx_ioa_a2a_t *a)
{
    ngx_str_t  path;

    ngx_str_set(&path, "/list_all_agents");

    if (ngx_ioa_call(r, &a->call, 0, &path, "limit=" NGX_IOA_A2A_SKILLS_MAX,
                     NULL, ngx_ioa_a2a_card_listed)
        != NGX_OK)
    {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_ioa_a2a_card_listed(ngx_http_request_t *r, void *data)
{
    ngx_ioa_a2a_t *a = data;

    size_t               i, k;
    yajl_val             list, ag, tags, v;
    ngx_str_t            s, url, out, extended;
    ngx_uint_t           auth;
    ngx_table_elt_t     *host;
    ngx_ioa_jbuf_t       b;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);
    auth = lcf->auth;

    list = a->call.status == NGX_HTTP_OK ? ngx_ioa_call_answer(r, &a->call)
                                         : NULL;

    if (ngx_ioa_jbuf_init(&b, r->pool, 4096 + a->call.body.len) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* the JSON-RPC endpoint's URL: url=, absolute or a path on this host,
     * or this location */

    url = a->conf->url.len ? a->conf->url : r->uri;

    if (url.data[0] == '/') {
        host = r->headers_in.host;
        s = host ? host->value : r->headers_in.server;

        out.len = sizeof("https://") - 1 + s.len + url.len;
        out.data = ngx_pnalloc(r->pool, out.len);
        if (out.data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        out.len = ngx_sprintf(out.data, "%s://%V%V",
#if (NGX_HTTP_SSL)
                              r->connection->ssl ? "https" : "http",
#else
                              "http",
#endif
                              &s, &url)
                  - out.data;
        url = out;
    }

    ngx_ioa_jbuf_literal(&b, "{\"name\":");
    ngx_ioa_jbuf_str(&b, &a->conf->name);
    ngx_ioa_jbuf_literal(&b,
        ",\"description\":\"An Internet of Agents hub: a message sent here "
        "is a goal, worked on by a team of the agents of its network that "
        "it finds, forms and coordinates; the task streams their "
        "conversation and ends with the team's conclusion.\","
        "\"supportedInterfaces\":[{\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"protocolBinding\":\"JSONRPC\","
                         "\"protocolVersion\":\"1.0\"},{\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"protocolBinding\":\"JSONRPC\","
                         "\"protocolVersion\":\"0.3\"}],\"url\":");
    ngx_ioa_jbuf_str(&b, &url);
    ngx_ioa_jbuf_literal(&b, ",\"preferredTransport\":\"JSONRPC\","
                         "\"protocolVersion\":\"0.3.0\","
                         "\"version\":\"" NGX_IOA_VERSION "\","
                         "\"capabilities\":{\"streaming\":true,"
                         "\"pushNotifications\":false,"
                         "\"stateTransitionHistory\":false,"
                         "\"extendedAgentCard\":");
    extended.data = (u_char *) (auth != NGX_IOA_AUTH_OFF ? "true" : "false");
    extended.len = ngx_strlen(extended.data);
    ngx_ioa_jbuf_raw(&b, extended.data, extended.len);
    ngx_ioa_jbuf_literal(&b, "},\"supportsAuthenticatedExtendedCard\":");
    ngx_ioa_jbuf_raw(&b, extended.data, extended.len);

    /* the hub's tokens: "Authorization: Bearer", a JWT unless an auth
     * service decides (ioa_auth request); 1.0's and 0.3's spellings of the
     * scheme in one object, each reader takes its own */
    if (auth == NGX_IOA_AUTH_OFF) {
        ngx_ioa_jbuf_literal(&b, ",\"securitySchemes\":{},"
                             "\"securityRequirements\":[],\"security\":[]");

    } else {
        ngx_ioa_jbuf_literal(&b, ",\"securitySchemes\":{\"bearer\":{"
                             "\"type\":\"http\",\"scheme\":\"bearer\",");

        if (auth == NGX_IOA_AUTH_JWT) {
            ngx_ioa_jbuf_literal(&b, "\"bearerFormat\":\"JWT\",");
        }

        ngx_ioa_jbuf_literal(&b, "\"description\":\"the hub's token "
                             "(launch scope to send tasks)\","
                             "\"httpAuthSecurityScheme\":{"
                             "\"scheme\":\"Bearer\"");

        if (auth == NGX_IOA_AUTH_JWT) {
            ngx_ioa_jbuf_literal(&b, ",\"bearerFormat\":\"JWT\"");
        }

        ngx_ioa_jbuf_literal(&b, "}}},\"securityRequirements\":[{"
                             "\"schemes\":{\"bearer\":{\"list\":[]}}}],"
                             "\"security\":[{\"bearer\":[]}]");
    }

    ngx_ioa_jbuf_literal(&b,
        ",\"defaultInputModes\":[\"text/plain\",\"application/json\"],"
        "\"defaultOutputModes\":[\"text/plain\"],"
        "\"skills\":[{\"id\":\"goal\",\"name\":\"Solve a goal with a team\","
        "\"description\":\"The message is a goal: the hub finds the agents "
        "it needs, forms a team, runs their conversation (plan, tasks, "
        "review, re-routing) and answers the conclusion.  A message with "
        "the task's id reaches the running team as a person's message.\","
        "\"tags\":[\"multi-agent\",\"team\",\"goal\"],"
        "\"examples\":[\"Write a short report on the history of the "
        "printing press and check it for errors\"]}");

    for (i = 0; list && YAJL_IS_ARRAY(list) && i < list->u.array.len; i++) {
        ag = list->u.array.values[i];

        if (ngx_ioa_json_string(ngx_ioa_json_get(ag, "name"), &s) != NGX_OK) {
            continue;
        }

        ngx_ioa_jbuf_literal(&b, ",{\"id\":");
        out.len = sizeof("agent:") - 1 + s.len;
        out.data = ngx_pnalloc(r->pool, out.len);
        if (out.data == NULL) {
            ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_sprintf(out.data, "agent:%V", &s);
        ngx_ioa_jbuf_str(&b, &out);
        ngx_ioa_jbuf_literal(&b, ",\"name\":");
        ngx_ioa_jbuf_str(&b, &s);
        ngx_ioa_jbuf_literal(&b, ",\"description\":");

        if (ngx_ioa_json_string(ngx_ioa_json_get(ag, "desc"), &s) != NGX_OK) {
            ngx_str_set(&s, "");
        }

        ngx_ioa_jbuf_str(&b, &s);
        ngx_ioa_jbuf_literal(&b, ",\"tags\":[\"agent\"");

        tags = ngx_ioa_json_get(ag, "tags");

        for (k = 0; tags && YAJL_IS_ARRAY(tags) && k < tags->u.array.len;
             k++)
        {
            v = tags->u.array.values[k];

            if (ngx_ioa_json_string(v, &s) == NGX_OK) {
                ngx_ioa_jbuf_byte(&b, ',');
                ngx_ioa_jbuf_str(&b, &s);
            }
        }

        ngx_ioa_jbuf_literal(&b, "]}");
    }

    ngx_ioa_jbuf_literal(&b, "]}");

    if (a->op == NGX_IOA_A2A_CARD) {
        ngx_ioa_jsonrpc_result(r, &a->rpc_id, &b);
        return;
    }

    if (ngx_ioa_jbuf_done(&b, &out) != NGX_OK) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_ioa_finish(r, ngx_ioa_send_json(r, NGX_HTTP_OK, &out));
}