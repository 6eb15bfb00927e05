
/*
 * Copyright (C) ioa authors
 *
 * The ioa_api content handler: IoA's endpoints, and ours, as one table.
 *
 * Each endpoint is a row: its path (exact, or a prefix and suffix around
 * one path segment, the argument: "/agents/" "{name}" "/inbox"), the
 * methods it answers, the scope its caller needs, whether it acts as the
 * agent its path names, and its handler.  One dispatcher reads the table
 * top to bottom; the first row whose path matches decides:
 *
 *   METHOD   a method the row does not answer is 405 with Allow (it says
 *            nothing about who may call, so it comes before the token);
 *   WHO      ngx_ioa_auth_check(): the scope, and the agent acted as when
 *            the path names it (a body's name is checked once the body
 *            is read, by the handler: ngx_ioa_rest_identity());
 *   HANDLER  called with the path's argument and the identity.
 *
 * No row: 404 unknown_endpoint.  The order of the rows matters where two
 * paths share a prefix ("/goals/{id}/events" before "/goals/{id}"), and
 * the argument never holds a '/', so "/agents/{name}" is not
 * "/agents/{name}/inbox".
 *
 * Paths are relative to a prefix location ("location /ioa/ { ioa_api; }"
 * serves the same paths under /ioa/); an exact or regex location sees the
 * whole URI.  The thin handlers below only adapt the table's one signature
 * to the endpoints' own.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


#define NGX_IOA_GET       0x01
#define NGX_IOA_POST      0x02
#define NGX_IOA_DELETE    0x04

/* a row's flags */
#define NGX_IOA_API_PUBLIC   0x01   /* no token asked for (health) */
#define NGX_IOA_API_AS_ARG   0x02   /* acts as the agent the path names */


typedef ngx_int_t (*ngx_ioa_api_pt)(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);


typedef struct {
    const char               *prefix;   /* the whole path if no argument */
    const char               *suffix;   /* after the argument, or NULL */
    ngx_uint_t                arg;      /* the path has an argument */
    ngx_uint_t                methods;  /* NGX_IOA_GET|... */
    ngx_uint_t                scope;    /* NGX_IOA_SCOPE_*, 0: the handler's */
    ngx_uint_t                flags;    /* NGX_IOA_API_* */
    ngx_ioa_api_pt            handler;
} ngx_ioa_api_endpoint_t;


static ngx_int_t ngx_ioa_api_match(ngx_ioa_api_endpoint_t *ep,
    ngx_str_t *rest, ngx_str_t *arg);
static ngx_int_t ngx_ioa_api_method(ngx_http_request_t *r,
    ngx_uint_t methods);
static ngx_int_t ngx_ioa_api_not_allowed(ngx_http_request_t *r,
    ngx_uint_t methods);

static ngx_int_t ngx_ioa_api_ws(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_observer_ws(ngx_http_request_t *r,
    ngx_str_t *arg, ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_observer_sse(ngx_http_request_t *r,
    ngx_str_t *arg, ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_post(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_inbox(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_audit(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_goal_list(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_launch(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_health(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_list_agents(ngx_http_request_t *r,
    ngx_str_t *arg, ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_register(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_retrieve(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_query(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_teamup(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);
static ngx_int_t ngx_ioa_api_record(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id);


/*
 * The endpoints.  Scope 0 rows decide in their handler, with the room or
 * goal at hand (a room's readers: ngx_ioa_room_api.c; /fetch_chat_record:
 * membership, read in Redis).  README's "Endpoint reference" lists them.
 */

static ngx_ioa_api_endpoint_t  ngx_ioa_api_endpoints[] = {

    /* a member of rooms: an agent, or a person in a goal's room (the
     * launcher, a member of its room only: workers/worker/person.c) */
    { "/ws/", NULL, 1, NGX_IOA_GET, NGX_IOA_SCOPE_MEMBER,
      NGX_IOA_API_AS_ARG, ngx_ioa_api_ws },
    { "/chatlist_ws", NULL, 0, NGX_IOA_GET, NGX_IOA_SCOPE_OBSERVER,
      0, ngx_ioa_api_observer_ws },
    { "/chatlist", NULL, 0, NGX_IOA_GET, NGX_IOA_SCOPE_OBSERVER,
      0, ngx_ioa_api_observer_sse },
    { "/agents/", "/messages", 1, NGX_IOA_POST, NGX_IOA_SCOPE_MEMBER,
      NGX_IOA_API_AS_ARG, ngx_ioa_api_post },
    { "/agents/", "/inbox", 1, NGX_IOA_GET, NGX_IOA_SCOPE_MEMBER,
      NGX_IOA_API_AS_ARG, ngx_ioa_api_inbox },

    /* deletion (ngx_ioa_delete.c): the agent itself or admin, a room's
     * creator or admin, checked there */
    { "/agents/", NULL, 1, NGX_IOA_DELETE,
      NGX_IOA_SCOPE_AGENT|NGX_IOA_SCOPE_ADMIN, 0,
      ngx_ioa_agent_delete_handler },
    { "/rooms/", NULL, 1, NGX_IOA_DELETE,
      NGX_IOA_SCOPE_AGENT|NGX_IOA_SCOPE_ADMIN, 0,
      ngx_ioa_room_delete_handler },
    { "/audit", NULL, 0, NGX_IOA_GET, NGX_IOA_SCOPE_ADMIN,
      0, ngx_ioa_api_audit },

    /* one room, for readers who need not be members: the scope is checked
     * with the room's name (ngx_ioa_room_api.c) */
    { "/rooms/", "/events", 1, NGX_IOA_GET, 0, 0,
      ngx_ioa_room_events_handler },
    { "/rooms/", "/verify", 1, NGX_IOA_GET, 0, 0,
      ngx_ioa_room_verify_handler },

    /* an admin's erasure of one sender's envelopes (ngx_ioa_room_erase.c) */
    { "/rooms/", "/erase", 1, NGX_IOA_POST, NGX_IOA_SCOPE_ADMIN, 0,
      ngx_ioa_room_erase_handler },

    /* goals: their launcher's, or an admin's (ngx_ioa_goal.c) */
    { "/goals/", "/events", 1, NGX_IOA_GET, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_goal_events_handler },
    { "/goals/", "/cancel", 1, NGX_IOA_POST, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_goal_cancel_handler },
    { "/goals/", "/messages", 1, NGX_IOA_POST, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_goal_message_handler },
    { "/goals/", NULL, 1, NGX_IOA_GET, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_goal_handler },
    /* the goals a caller may see, newest first (ngx_ioa_goal_list.c) */
    { "/goals", NULL, 0, NGX_IOA_GET, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_api_goal_list },
    { "/launch_goal", NULL, 0, NGX_IOA_POST, NGX_IOA_SCOPE_LAUNCH, 0,
      ngx_ioa_api_launch },

    /* a load balancer's: no token */
    { "/health_check", NULL, 0, NGX_IOA_GET|NGX_IOA_POST, 0,
      NGX_IOA_API_PUBLIC, ngx_ioa_api_health },

    { "/list_all_agents", NULL, 0, NGX_IOA_GET|NGX_IOA_POST,
      NGX_IOA_SCOPE_ADMIN, 0, ngx_ioa_api_list_agents },

    /* the name these act as is in their bodies: the body handlers ask
     * ngx_ioa_rest_identity() */
    { "/register", NULL, 0, NGX_IOA_POST, NGX_IOA_SCOPE_AGENT, 0,
      ngx_ioa_api_register },
    { "/retrieve_assistant", NULL, 0, NGX_IOA_POST, NGX_IOA_SCOPE_AGENT, 0,
      ngx_ioa_api_retrieve },
    /* any scope but none: an agent, an observer, a launcher */
    { "/query_assistant", NULL, 0, NGX_IOA_POST, NGX_IOA_SCOPE_ANY, 0,
      ngx_ioa_api_query },
    { "/teamup", NULL, 0, NGX_IOA_POST, NGX_IOA_SCOPE_AGENT, 0,
      ngx_ioa_api_teamup },
    { "/fetch_chat_record", NULL, 0, NGX_IOA_POST, 0, 0,
      ngx_ioa_api_record },

    { NULL, NULL, 0, 0, 0, 0, NULL }
};


ngx_int_t
ngx_ioa_api_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_str_t                  rest, arg;
    ngx_ioa_error_t            err;
    ngx_ioa_identity_t        *id;
    ngx_ioa_api_endpoint_t    *ep;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    /* ioa_cors_origins: headers on every answer, preflights answered */
    rc = ngx_ioa_cors(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    rest = r->uri;

    if (!clcf->exact_match
#if (NGX_PCRE)
        && clcf->regex == NULL
#endif
        && clcf->name.len > 1
        && rest.len >= clcf->name.len
        && ngx_strncmp(rest.data, clcf->name.data, clcf->name.len) == 0)
    {
        rest.data += clcf->name.len - 1;
        rest.len -= clcf->name.len - 1;

        if (clcf->name.data[clcf->name.len - 1] != '/') {
            rest.data++;
            rest.len--;
        }
    }

    for (ep = ngx_ioa_api_endpoints; ep->prefix; ep++) {

        if (ngx_ioa_api_match(ep, &rest, &arg) != NGX_OK) {
            continue;
        }

        /* METHOD */
        if (ngx_ioa_api_method(r, ep->methods) != NGX_OK) {
            return ngx_ioa_api_not_allowed(r, ep->methods);
        }

        if (ep->flags & NGX_IOA_API_PUBLIC) {
            return ep->handler(r, &arg, NULL);
        }

        /* WHO */
        rc = ngx_ioa_auth_check(r, ep->scope,
                                (ep->flags & NGX_IOA_API_AS_ARG)
                                ? &arg : NULL,
                                &id);
        if (id == NULL) {
            return rc;
        }

        /* HANDLER */
        return ep->handler(r, &arg, id);
    }

    ngx_ioa_error_set(&err, "unknown_endpoint", NULL,
                      "no ioa endpoint at \"%V\"", &r->uri);

    return ngx_ioa_send_error(r, NGX_HTTP_NOT_FOUND, &err);
}


/* an exact path, or "/agents/Alice/inbox" with prefix "/agents/" and
 * suffix "/inbox" giving "Alice"; the argument is one segment: not empty,
 * no '/' */

static ngx_int_t
ngx_ioa_api_match(ngx_ioa_api_endpoint_t *ep, ngx_str_t *rest,
    ngx_str_t *arg)
{
    size_t  plen, slen;

    plen = ngx_strlen(ep->prefix);

    if (!ep->arg) {
        arg->len = 0;
        arg->data = NULL;

        return (rest->len == plen
                && ngx_strncmp(rest->data, ep->prefix, plen) == 0)
               ? NGX_OK : NGX_DECLINED;
    }

    slen = ep->suffix ? ngx_strlen(ep->suffix) : 0;

    if (rest->len <= plen + slen
        || ngx_strncmp(rest->data, ep->prefix, plen) != 0
        || (slen && ngx_strncmp(rest->data + rest->len - slen, ep->suffix,
                                slen)
                    != 0))
    {
        return NGX_DECLINED;
    }

    arg->data = rest->data + plen;
    arg->len = rest->len - plen - slen;

    if (ngx_strlchr(arg->data, arg->data + arg->len, '/') != NULL) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_api_method(ngx_http_request_t *r, ngx_uint_t methods)
{
    if ((methods & NGX_IOA_GET) && (r->method & NGX_HTTP_GET)) {
        return NGX_OK;
    }

    if ((methods & NGX_IOA_POST) && (r->method & NGX_HTTP_POST)) {
        return NGX_OK;
    }

    if ((methods & NGX_IOA_DELETE) && (r->method & NGX_HTTP_DELETE)) {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_ioa_api_not_allowed(ngx_http_request_t *r, ngx_uint_t methods)
{
    ngx_ioa_error_t  err;

    ngx_ioa_error_set(&err, "method_not_allowed", NULL,
                      "method %V is not allowed on \"%V\"", &r->method_name,
                      &r->uri);

    return ngx_ioa_send_not_allowed(r,
                                    methods == (NGX_IOA_GET|NGX_IOA_POST)
                                    ? "GET, POST"
                                    : methods == NGX_IOA_GET ? "GET"
                                    : methods == NGX_IOA_DELETE ? "DELETE"
                                    : "POST",
                                    &err);
}


/* the endpoints' own signatures */

static ngx_int_t
ngx_ioa_api_ws(ngx_http_request_t *r, ngx_str_t *arg, ngx_ioa_identity_t *id)
{
    return ngx_ioa_ws_handler(r, arg, NGX_IOA_CLIENT_AGENT, id);
}


static ngx_int_t
ngx_ioa_api_observer_ws(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_ws_handler(r, arg, NGX_IOA_CLIENT_OBSERVER, id);
}


static ngx_int_t
ngx_ioa_api_observer_sse(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_inbox_handler(r, arg, NGX_IOA_CLIENT_OBSERVER, id);
}


static ngx_int_t
ngx_ioa_api_post(ngx_http_request_t *r, ngx_str_t *arg, ngx_ioa_identity_t *id)
{
    return ngx_ioa_agent_post_handler(r, arg);
}


static ngx_int_t
ngx_ioa_api_inbox(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_inbox_handler(r, arg, NGX_IOA_CLIENT_AGENT, id);
}


static ngx_int_t
ngx_ioa_api_audit(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_audit_handler(r);
}


static ngx_int_t
ngx_ioa_api_goal_list(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_goal_list_handler(r, id);
}


static ngx_int_t
ngx_ioa_api_launch(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_rest_identified(r, id, ngx_ioa_launch_goal_handler);
}


static ngx_int_t
ngx_ioa_api_health(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_health_handler(r);
}


static ngx_int_t
ngx_ioa_api_list_agents(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_list_agents_handler(r);
}


static ngx_int_t
ngx_ioa_api_register(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_rest_identified(r, id, ngx_ioa_register_handler);
}


static ngx_int_t
ngx_ioa_api_retrieve(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_rest_identified(r, id, ngx_ioa_retrieve_handler);
}


static ngx_int_t
ngx_ioa_api_query(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_query_handler(r);
}


static ngx_int_t
ngx_ioa_api_teamup(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_rest_identified(r, id, ngx_ioa_teamup_handler);
}


static ngx_int_t
ngx_ioa_api_record(ngx_http_request_t *r, ngx_str_t *arg,
    ngx_ioa_identity_t *id)
{
    return ngx_ioa_rest_identified(r, id, ngx_ioa_fetch_record_handler);
}
