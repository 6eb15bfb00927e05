
/*
 * Copyright (C) ioa authors
 *
 * Shared types of ngx_http_ioa_module.
 *
 * The module is a set of small parts that meet in this header, in one
 * folder per subsystem (config lists them):
 *
 *   ngx_ioa_module.c         directives, configuration, worker start/stop;
 *   ngx_ioa_conf.c           the configuration as the parts read it, so
 *                            that none of them names the face above;
 *   ngx_ioa_conf_file.c      files the configuration names (keys,
 *                            passwords);
 *
 *   transports/  the agents' connections
 *     ngx_ioa_ws.c           WebSocket handshake and connection life cycle
 *                            (read loop, send queue, pings, close);
 *     ngx_ioa_ws_frame.c     RFC 6455 frame codec and UTF-8 validation,
 *                            free of I/O so it can be fuzzed alone;
 *     ngx_ioa_ws_deflate.c   permessage-deflate (RFC 7692): negotiation,
 *                            a broadcast's compressed frame built once and
 *                            shared, bounded inflation;
 *     ngx_ioa_sse.c          the HTTP transport: POST an envelope, receive
 *                            an SSE inbox (HTTP/1.1 and HTTP/2);
 *     ngx_ioa_position.c     an SSE client's position, for resume;
 *     ngx_ioa_linger.c       ioa_linger: a turn's writes batched;
 *
 *   store/       Redis, and pub/sub
 *     ngx_ioa_redis_adapter.c  hiredis async <-> nginx event loop glue;
 *     ngx_ioa_redis.c        the per-worker Redis client: connections,
 *                            reconnects, timeouts, scripts, pub/sub
 *                            replies, MOVED/ASK, and the hooks its users
 *                            register (ngx_ioa_redis_hooks_t): it calls
 *                            none of them by name;
 *     ngx_ioa_sub.c          subscriptions: one object (state, node, kind,
 *                            handler table) for a room's channel, the
 *                            observers' pattern, the registry's events
 *                            and the index's shard channel, and how each
 *                            follows Redis;
 *     ngx_ioa_redis_args.c   a command's arguments built in order (no
 *                            numbered slots), below the rest of the
 *                            module (its header names only nginx types);
 *     ngx_ioa_keys.c         the Redis key schema: every key the module
 *                            names, written in one place;
 *     ngx_ioa_redis_cluster.c  Redis Cluster: setup detection, a
 *                            command's key slot (lib/ioa_key_slot.c), the
 *                            slot map and its refresh;
 *     ngx_ioa_redis_reply.c, ngx_ioa_redis_resolve.c  replies, addresses;
 *
 *   rooms/       envelopes and the rooms they travel in
 *     ngx_ioa_envelope.c     IoA AgentMessage parse/validate/normalise;
 *     ngx_ioa_room.c         rooms, their subscriptions' owner;
 *     ngx_ioa_link.c         links: catch-up from the room Stream, then
 *                            live fan-out, exactly once and in order;
 *     ngx_ioa_client.c       clients: agents' rooms, resume, presence;
 *     ngx_ioa_observer.c     the feed of every room, registry events;
 *     ngx_ioa_post.c         an envelope from a client into its room;
 *     ngx_ioa_retention.c    the sweep of rooms and agents past retention;
 *
 *   registry/    agents and discovery
 *     ngx_ioa_registry.c     /register, /retrieve_assistant, ... presence;
 *     ngx_ioa_index*.c       the discovery index: BM25 inside nginx, in a
 *                            shared memory zone that follows Redis;
 *     ngx_ioa_embed.c        embeddings for semantic discovery, through a
 *                            subrequest to a proxied /v1/embeddings;
 *     ngx_ioa_name.c         the one rule for agent names (libunistring);
 *
 *   api/         the REST API
 *     ngx_ioa_api.c          the ioa_api content handler: the endpoints as
 *                            one table (path, methods, scope, handler) and
 *                            the dispatcher that reads it;
 *     ngx_ioa_rest.c         request bodies, JSON answers, Redis calls
 *                            for a request, /health_check;
 *     ngx_ioa_teamup.c       /teamup;
 *     ngx_ioa_json.c         JSON helpers for REST bodies and answers;
 *     ngx_ioa_body.c         REST bodies declared as tables of fields, and
 *                            their one checker;
 *     ngx_ioa_cors.c         ioa_cors_origins;
 *     ngx_ioa_record.c       /fetch_chat_record, streamed in pieces;
 *     ngx_ioa_room_api.c     one room's events and verify for non-members;
 *     ngx_ioa_goal.c, ngx_ioa_goal_list.c  /launch_goal, /goals;
 *     ngx_ioa_delete.c       DELETE /agents/{name}, /rooms/{comm_id};
 *     ngx_ioa_audit.c        the audit stream, GET /audit;
 *     ngx_ioa_room_erase.c   erasure of one sender's envelopes;
 *
 *   facades/     the hub as an MCP server and an A2A agent
 *     ngx_ioa_mcp.c          ioa_mcp: tools and resources answered by
 *                            subrequests to the REST endpoints;
 *     ngx_ioa_a2a*.c         ioa_a2a: JSON-RPC and operations, tasks that
 *                            are goals (streams, waits), the agent card;
 *     ngx_ioa_call.c         a facade's in-memory call of an endpoint;
 *     ngx_ioa_wait.c         a request that waits on a stream (a goal's
 *                            feed) and answers once;
 *     ngx_ioa_jsonrpc.c      JSON-RPC 2.0 messages of the facades;
 *
 *   trust/       who may do what, and how much
 *     ngx_ioa_auth.c         JWT, auth_request, scopes;
 *     ngx_ioa_expiry.c       token expiry on open connections: the
 *                            warning, the close, in-band refresh;
 *     ngx_ioa_limit*.c       rates and connections, per instance or fleet;
 *
 *   ops/         operations
 *     ngx_ioa_stats.c        the instance's counters for /metrics (shm);
 *     ngx_ioa_metrics*.c     /metrics, this instance's and the fleet's.
 *
 * Beside the module, lib/ holds what the hub and the worker both build
 * from, plain C with no nginx type (lib/README.md): the Cluster key slot
 * (ioa_key_slot.c), the one tokenizer of descriptions and queries
 * (ioa_tokenize.c, which the index and /register use), and the list of
 * the hub's scripts (ioa_scripts.h), which numbers ngx_ioa_script_e below.
 *
 * The parts call down: the face and the endpoints call the rooms, the
 * registry, trust and the store; the store calls its users only through
 * what they registered (subscriptions, hooks); every part reads its
 * configuration through ngx_ioa_conf.c, never through the face.  Files
 * call each other both ways in three places only, each one subsystem
 * whose parts are one machine split by concern: the rooms' routing core
 * (ngx_ioa_room.c, _link.c, _client.c, _post.c, _observer.c,
 * _retention.c, with ngx_ioa_expiry.c, which closes and warns clients
 * that post and read), the Redis client (ngx_ioa_redis.c, _cluster.c,
 * _adapter.c, _resolve.c, ngx_ioa_sub.c), and the A2A facade
 * (ngx_ioa_a2a.c, whose operations answer through it, and
 * ngx_ioa_a2a_task.c).
 *
 * A "client" is anything that receives room traffic: a WebSocket agent, an
 * SSE inbox or an observer feed.  Rooms hold links to clients; a link keeps
 * the client's position in that room's Stream, which is what makes resume
 * exact.  Messages are reference counted and framed once per transport.
 */


#ifndef _NGX_IOA_H_INCLUDED_
#define _NGX_IOA_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_sha1.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "ioa_key_slot.h"
#include "ioa_scripts.h"
#include "ngx_ioa_redis_args.h"

#include "ngx_ioa_json.h"
#include "ngx_ioa_body.h"
#include "ngx_ioa_envelope.h"


#define NGX_IOA_VERSION              "0.1.0"

/* nginx 1.22 has no name for it */
#define NGX_HTTP_UPGRADE_REQUIRED    426

/* largest WebSocket frame header we write: 2 + 8 bytes, server frames are
 * never masked */
#define NGX_IOA_WS_HEADER_MAX        10


/* an address of ioa_redis */
typedef struct {
    ngx_str_t                 host;           /* numeric, NUL-terminated;
                                                 empty for a name */
    ngx_str_t                 name;           /* looked up by nginx's
                                                 resolver at every connect
                                                 (ngx_ioa_redis_resolve.c),
                                                 or empty */
    in_port_t                 port;
} ngx_ioa_redis_addr_t;


/* a rate of ioa_limit_rate: thousandths of a request per second, and a
 * burst in requests; rate 0 is off */
typedef struct {
    ngx_uint_t                rate;
    ngx_uint_t                burst;
    ngx_flag_t                set;
} ngx_ioa_limit_rate_t;


typedef struct {
    ngx_array_t              *redis_seeds;    /* of ngx_ioa_redis_addr_t */
    ngx_msec_t                redis_connect_timeout;
    ngx_msec_t                redis_timeout;
    ngx_msec_t                redis_backoff_max;
    ngx_resolver_t           *redis_resolver; /* the http block's, or NULL */
    ngx_str_t                 redis_prefix;
    ngx_str_t                 redis_user;     /* AUTH user, "" for none */
    ngx_str_t                 redis_password; /* AUTH password, "" none */

    ngx_str_t                 name_pattern;
    ngx_regex_t              *name_regex;

    ngx_uint_t                room_log_maxlen;
    ngx_uint_t                linger_us;       /* ioa_linger, 0: off */
    ngx_msec_t                room_retention;  /* 0: rooms kept forever */
    ngx_msec_t                agent_retention; /* 0: agents kept forever */
    ngx_msec_t                presence_ttl;

    /* limits (ngx_ioa_limit.c) */
    ngx_shm_zone_t           *limit_zone;
    size_t                    limit_zone_size;
    ngx_ioa_limit_rate_t      limit_rate;     /* per agent */
    ngx_ioa_limit_rate_t      room_rate;      /* per room */
    ngx_ioa_limit_rate_t      teamup_rate;    /* per agent, /teamup */
    ngx_ioa_limit_rate_t      launch_rate;    /* per launcher, goals */
    ngx_uint_t                limit_conn;     /* per agent, 0: none */
    ngx_uint_t                goals_in_flight;  /* per launcher, 0: none */
    ngx_flag_t                limit_fleet;    /* ioa_limit_scope fleet */
    ngx_msec_t                limit_slice;    /* fleet: a lease's worth */
    ngx_msec_t                limit_lease;    /* fleet: a lease's life */
    ngx_uint_t                max_room_members;
    ngx_uint_t                max_agent_rooms;   /* 0: no limit */
    ngx_uint_t                max_agents;

    /* semantic discovery (ngx_ioa_embed.c): uri "" when off */
    ngx_str_t                 embed_uri;
    ngx_str_t                 embed_model;
    double                    embed_weight;   /* BM25's share, 0..1 */

    /* the discovery index (ngx_ioa_index.c): NULL when "off" */
    ngx_shm_zone_t           *index_zone;
    size_t                    index_zone_size;

    ngx_flag_t                used;           /* some location has ioa_api */

    /* keys built once from the prefix (ngx_ioa_keys_conf) */
    ngx_str_t                 reg_base;       /* "<prefix>{reg}:" */
    ngx_str_t                 events_channel; /* "<prefix>{reg}:events" */
    ngx_str_t                 feed_pattern;   /* "<prefix>{room:*}:ch" */
    ngx_str_t                 index_channel;  /* "<prefix>{reg}:index" */
    ngx_str_t                 index_agents_key;  /* "<prefix>{reg}:agents" */
} ngx_ioa_main_conf_t;


typedef struct ngx_ioa_jwt_key_s  ngx_ioa_jwt_key_t;
typedef struct ngx_ioa_mcp_conf_s  ngx_ioa_mcp_conf_t;
typedef struct ngx_ioa_a2a_conf_s  ngx_ioa_a2a_conf_t;

/* ioa_auth */
#define NGX_IOA_AUTH_OFF          0
#define NGX_IOA_AUTH_JWT          1
#define NGX_IOA_AUTH_REQUEST      2

typedef struct {
    ngx_flag_t                api;
    size_t                    max_message_size;
    size_t                    max_message_conf;   /* as given, or unset */
    size_t                    send_queue_limit;
    ngx_msec_t                ping_interval;
    ngx_flag_t                ws_deflate;     /* ioa_ws_deflate */
    ngx_uint_t                max_json_depth;
    ngx_uint_t                catchup_batch;
    size_t                    catchup_window; /* queued before a catch-up
                                               * waits for its client */
    size_t                    catchup_window_conf;  /* as given */
    ngx_uint_t                chat_record_latest;   /* a room's newest
                                               * envelopes when no page is
                                               * asked for */
    ngx_flag_t                launch_goal_wait;  /* IoA's blocking answer */
    time_t                    goal_input_timeout_max;  /* seconds */
    ngx_array_t              *cors_origins;   /* ngx_str_t; NULL: no CORS */

    ngx_uint_t                auth;           /* NGX_IOA_AUTH_* */
    ngx_array_t              *jwt_keys;       /* ngx_ioa_jwt_key_t */
    time_t                    auth_leeway;
    time_t                    auth_expiry_warning;  /* 0: none */
    ngx_http_complex_value_t *auth_identity;  /* ioa_auth request */
    ngx_http_complex_value_t *auth_scopes;

    ngx_ioa_mcp_conf_t       *mcp;            /* ioa_mcp: NULL elsewhere */
    ngx_ioa_a2a_conf_t       *a2a;            /* ioa_a2a: NULL elsewhere */
} ngx_ioa_loc_conf_t;


/* Who a request or a connection is (ngx_ioa_auth.c) */

#define NGX_IOA_SCOPE_AGENT       0x01
#define NGX_IOA_SCOPE_OBSERVER    0x02
#define NGX_IOA_SCOPE_ADMIN       0x04
#define NGX_IOA_SCOPE_LAUNCH      0x08
#define NGX_IOA_SCOPE_METRICS     0x10   /* ioa_metrics token */
/* either: what may connect as a member of rooms (agents, a goal's person) */
#define NGX_IOA_SCOPE_MEMBER      (NGX_IOA_SCOPE_AGENT|NGX_IOA_SCOPE_LAUNCH)
/* some scope: a token with none may only ask /health_check */
#define NGX_IOA_SCOPE_ANY         (NGX_IOA_SCOPE_AGENT|NGX_IOA_SCOPE_OBSERVER \
                                   |NGX_IOA_SCOPE_LAUNCH)

typedef struct {
    ngx_str_t                 sub;            /* the agent name */
    ngx_uint_t                scopes;         /* NGX_IOA_SCOPE_* */
    ngx_array_t              *rooms;          /* ngx_str_t: observer:<id> */
    time_t                    expires;        /* 0: never (open, request) */
    unsigned                  open:1;         /* ioa_auth off */
} ngx_ioa_identity_t;


/* a Redis Stream id */
typedef struct {
    uint64_t                  ms;
    uint64_t                  seq;
} ngx_ioa_sid_t;


/* a message's permessage-deflate frames (ngx_ioa_ws_deflate.c) */
typedef struct ngx_ioa_msg_z_s  ngx_ioa_msg_z_t;

/* One envelope as delivered: {"id":"<sid>",...}.  Framed once per transport
 * and shared by every recipient on this worker. */
typedef struct {
    ngx_uint_t                refs;
    ngx_ioa_sid_t             sid;
    ngx_str_t                 comm_id;
    ngx_str_t                 sender;        /* JSON-escaped, no quotes */

    u_char                   *payload;       /* the JSON text */
    size_t                    payload_len;

    u_char                   *ws;            /* frame header + payload */
    size_t                    ws_len;

    ngx_ioa_msg_z_t          *wsz;           /* compressed frames, built
                                                when a client needs one */

    u_char                   *sse;           /* "id: ...\ndata: ...\n\n" */
    size_t                    sse_len;

    ngx_uint_t                feed:1;        /* observer copy */
} ngx_ioa_msg_t;


typedef struct ngx_ioa_client_s  ngx_ioa_client_t;
typedef struct ngx_ioa_expiry_s  ngx_ioa_expiry_t;
typedef struct ngx_ioa_redis_node_s  ngx_ioa_redis_node_t;
typedef struct ngx_ioa_room_s    ngx_ioa_room_t;
typedef struct ngx_ioa_link_s    ngx_ioa_link_t;
typedef struct ngx_ioa_position_s  ngx_ioa_position_t;


typedef enum {
    NGX_IOA_CLIENT_AGENT = 0,
    NGX_IOA_CLIENT_OBSERVER,
    NGX_IOA_CLIENT_FOLLOWER      /* reads one stream, e.g. a goal's events */
} ngx_ioa_client_kind_e;


/* how a client is connected: a label of several counters */
typedef enum {
    NGX_IOA_VIA_WEBSOCKET = 0,
    NGX_IOA_VIA_SSE,
    NGX_IOA_VIA_HTTP,            /* one request: a POST, a goal's wait */
    NGX_IOA_VIA_N
} ngx_ioa_via_e;


typedef struct {
    /* queue one message; NGX_ERROR means the client was closed */
    ngx_int_t               (*send)(ngx_ioa_client_t *cl, ngx_ioa_msg_t *m);
    /* queue a control frame (error, ack, hello) built in a pool */
    ngx_int_t               (*send_text)(ngx_ioa_client_t *cl, ngx_str_t *s);
    /* close with a WebSocket status code and reason */
    void                    (*close)(ngx_ioa_client_t *cl, ngx_uint_t code,
                                     const char *reason);
    /* the client's starting position is known (NULL: not needed) */
    void                    (*positioned)(ngx_ioa_client_t *cl);
    /* bytes queued for the client and not written yet */
    size_t                  (*queued)(ngx_ioa_client_t *cl);
    /* its label in /metrics */
    ngx_ioa_via_e           via;
} ngx_ioa_transport_t;


typedef struct ngx_ioa_early_s  ngx_ioa_early_t;
typedef struct ngx_ioa_gone_s   ngx_ioa_gone_t;

struct ngx_ioa_early_s {
    ngx_ioa_early_t          *next;
    size_t                    len;
    u_char                    data[1];
};


struct ngx_ioa_client_s {
    ngx_str_t                 name;          /* identity */
    ngx_str_t                 follow;        /* FOLLOWER: the room read */
    ngx_str_t                 name_json;     /* JSON-escaped identity */
    ngx_ioa_client_kind_e     kind;
    ngx_ioa_transport_t      *transport;
    void                     *data;          /* transport state */
    ngx_pool_t               *pool;
    ngx_log_t                *log;
    ngx_ioa_loc_conf_t       *lcf;

    ngx_queue_t               agent_q;       /* in the agent's client list */
    ngx_queue_t               links;         /* ngx_ioa_link_t.client_q */

    /* resume request: per room positions, and one for every room */
    ngx_array_t              *resume;        /* of ngx_ioa_resume_t */
    ngx_ioa_sid_t             since;
    int64_t                   connected_ms;  /* nginx's time at attach */
    ngx_uint_t                has_since:1;
    ngx_uint_t                wait_resume:1; /* rooms load after 1st frame */
    ngx_uint_t                echo:1;
    ngx_uint_t                acks:1;
    ngx_uint_t                rooms_loaded:1;
    ngx_uint_t                closed:1;
    ngx_uint_t                catchup_paused:1; /* a link waits for room */
    ngx_uint_t                rooms_first:1; /* loading, the first time */
    ngx_uint_t                expired:1;     /* its token is over: frames
                                                are refused, the close
                                                waits for posts in flight */

    ngx_ioa_expiry_t         *expiry;        /* NULL: the token never
                                                expires (ngx_ioa_expiry.c) */

    void                     *rooms_req;     /* pending agent_rooms.lua */
    ngx_ioa_sid_t             rooms_start;   /* the first load's "now" */
    u_char                    rooms_cursor[NGX_INT64_LEN];  /* "0": begin */
    ngx_queue_t               posts;         /* envelopes awaiting Redis */

    /* frames that came before the rooms were loaded (ngx_ioa_client.c) */
    ngx_ioa_early_t          *early;
    ngx_ioa_early_t         **early_tail;
    size_t                    early_bytes;
    ngx_queue_t               wait_q;        /* waiting for Redis */

    /* rooms it named that it is not in: expired? (ngx_ioa_retention.c) */
    ngx_ioa_gone_t           *gone;
    ngx_ioa_gone_t          **gone_tail;
    ngx_uint_t                ngone;
    void                     *gone_req;
};


typedef struct {
    ngx_str_t                 comm_id;
    ngx_ioa_sid_t             sid;
    ngx_uint_t                linked;        /* the room load found it */
} ngx_ioa_resume_t;


typedef enum {
    NGX_IOA_LINK_WAIT_SUB = 0,   /* room subscription not confirmed yet */
    NGX_IOA_LINK_CATCHING,       /* reading the Stream, live traffic held */
    NGX_IOA_LINK_LIVE            /* caught up, live traffic delivered */
} ngx_ioa_link_state_e;




struct ngx_ioa_link_s {
    ngx_queue_t               client_q;
    ngx_queue_t               room_q;
    ngx_ioa_client_t         *client;
    ngx_ioa_room_t           *room;
    ngx_ioa_sid_t             last;          /* last id delivered */
    ngx_ioa_sid_t             first;         /* where the link started */
    ngx_ioa_link_state_e      state;

    ngx_ioa_msg_t           **held;          /* live traffic while catching */
    ngx_uint_t                nheld;
    ngx_uint_t                held_cap;
    size_t                    held_bytes;
    ngx_uint_t                paused;        /* catch-up waits for a drain */

    void                     *req;           /* pending catch-up command */
    ngx_uint_t                count;         /* entries it asked for */
    ngx_uint_t                caught;        /* entries it caught up on */
    ngx_queue_t               catchup_q;     /* waiting for a read slot */
};


/* a subscription (store/ngx_ioa_sub.c says how it goes) */

typedef enum {
    NGX_IOA_SUB_NONE = 0,
    NGX_IOA_SUB_PENDING,
    NGX_IOA_SUB_ACTIVE,
    NGX_IOA_SUB_LEAVING
} ngx_ioa_sub_state_e;


typedef enum {
    NGX_IOA_SUB_CHANNEL = 0,     /* SUBSCRIBE; SSUBSCRIBE on a Cluster */
    NGX_IOA_SUB_SHARD,           /* SSUBSCRIBE on both setups */
    NGX_IOA_SUB_PATTERN          /* PSUBSCRIBE, on any node */
} ngx_ioa_sub_kind_e;


typedef struct ngx_ioa_sub_s  ngx_ioa_sub_t;

typedef struct {
    /* a message; for a pattern, channel is the one that matched */
    void                    (*message)(ngx_ioa_sub_t *sub,
                                       ngx_str_t *channel,
                                       ngx_str_t *payload);
    /* confirmed: nothing published from now on is missed */
    void                    (*ready)(ngx_ioa_sub_t *sub);
    /* wanted, and gone unasked: it is subscribed again, ready follows */
    void                    (*lost)(ngx_ioa_sub_t *sub);
    /* not wanted, and nothing in flight: the owner may free it */
    void                    (*gone)(ngx_ioa_sub_t *sub);
} ngx_ioa_sub_handler_t;


struct ngx_ioa_sub_s {
    ngx_str_node_t                 sn;        /* key: channel or pattern */
    ngx_ioa_sub_kind_e             kind;
    ngx_ioa_sub_state_e            state;
    ngx_ioa_redis_node_t          *node;      /* where it was sent */
    ngx_uint_t                     slot;      /* the master it goes to */
    const ngx_ioa_sub_handler_t   *handler;
    ngx_queue_t                    work_q;    /* during a walk */
    unsigned                       want:1;
    unsigned                       listed:1;  /* in the tree */
    unsigned                       retry_later:1;  /* after the next map */
};


struct ngx_ioa_room_s {
    ngx_str_node_t            sn;            /* key: comm_id */
    ngx_queue_t               links;
    ngx_uint_t                nlinks;
    ngx_ioa_sub_t             sub;           /* its channel */
    ngx_str_t                 log_key;
    ngx_msec_t                idle_since;
    ngx_queue_t               idle_q;
    size_t                    entry_len;     /* typical envelope, bytes */
};


/* ngx_ioa_conf.c: the configuration as the parts read it, handed over by
 * ngx_ioa_module.c (so that no part names the module's face) */
extern ngx_uint_t  ngx_ioa_ctx_index;

void ngx_ioa_conf_set_index(ngx_uint_t ctx_index);
void ngx_ioa_conf_set_main(ngx_ioa_main_conf_t *mcf);
ngx_ioa_main_conf_t *ngx_ioa_main_conf(void);
#define ngx_ioa_loc_conf(r)                                                  \
    ((ngx_ioa_loc_conf_t *) (r)->loc_conf[ngx_ioa_ctx_index])
#define ngx_ioa_get_ctx(r)        (r)->ctx[ngx_ioa_ctx_index]
#define ngx_ioa_set_ctx(r, c)     (r)->ctx[ngx_ioa_ctx_index] = c
/* the tag of the module's shared memory zones */
#define NGX_IOA_SHM_TAG           ((void *) &ngx_ioa_ctx_index)

/* ngx_ioa_api.c, ngx_ioa_name.c */
ngx_int_t ngx_ioa_api_handler(ngx_http_request_t *r);
/* an agent name: characters and bytes (ngx_ioa_valid_name) */
#define NGX_IOA_NAME_MAX_CHARS    64
#define NGX_IOA_NAME_MAX_BYTES    256
/* the rule in words, for error messages */
#define NGX_IOA_NAME_RULE                                                     \
    "1 to 64 characters of UTF-8, no control character, \"/\", \"{\" or "    \
    "\"}\", no space at either end, no invisible or bidirectional-control "  \
    "character, in Unicode NFC (and ioa_agent_name_pattern, if set)"
/* ngx_ioa_name_check()'s reason, NUL included: the rule is the longest */
#define NGX_IOA_NAME_WHY_LEN      256

/*
 * ngx_ioa_name_check() answers NGX_OK, NGX_DECLINED (outside the rule) or
 * NGX_IOA_NAME_LOOKALIKE (an invisible or bidirectional-control character,
 * or not NFC): deletion accepts the last, so that an agent registered
 * under such a name before the rule refused it can still be removed
 */
#define NGX_IOA_NAME_LOOKALIKE    NGX_ABORT

ngx_int_t ngx_ioa_name_check(ngx_str_t *name, u_char *why);
#define ngx_ioa_valid_name(name)  ngx_ioa_name_check(name, NULL)

/* the wall clock in ms, as of this event-loop turn (nginx's cached time):
 * timestamps and created_at, not durations */
static ngx_inline int64_t
ngx_ioa_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}



/* ngx_ioa_redis.c */
typedef void (*ngx_ioa_redis_handler_pt)(redisReply *reply, void *data);

typedef struct ngx_ioa_redis_req_s  ngx_ioa_redis_req_t;

/* the hub's scripts, in the order config embeds them (lib/ioa_scripts.h) */
#define NGX_IOA_SCRIPT_ENUM(NAME, file)  NGX_IOA_SCRIPT_##NAME,

typedef enum {
    IOA_HUB_SCRIPTS(NGX_IOA_SCRIPT_ENUM, NGX_IOA_SCRIPT_ENUM)
    NGX_IOA_SCRIPT_N
} ngx_ioa_script_e;


/*
 * What the Redis layer tells its users (rooms, goals) of its command
 * connections: each registers its hooks once per worker, before
 * ngx_ioa_redis_init_process(), and the layer calls them in the order they
 * were registered; a hook may be NULL.  Pub/sub reaches its users through
 * their subscriptions (ngx_ioa_sub_t), a lost connection through their
 * requests' NULL replies.  So ngx_ioa_redis*.c know no user by name.
 */
typedef struct {
    const char  *name;
    /* a node's command connection came up (first, or again) */
    void       (*node_up)(ngx_ioa_redis_node_t *node);
    /* commands can go again: a node came up, or the Cluster healed */
    void       (*cmd_ready)(void);
} ngx_ioa_redis_hooks_t;

ngx_int_t ngx_ioa_redis_add_hooks(const ngx_ioa_redis_hooks_t *hooks);
ngx_int_t ngx_ioa_redis_init_process(ngx_cycle_t *cycle);
void ngx_ioa_redis_exit_process(ngx_cycle_t *cycle);
ngx_ioa_redis_req_t *ngx_ioa_redis_command(ngx_ioa_redis_handler_pt handler,
    void *data, int argc, const char **argv, const size_t *argvlen);
ngx_ioa_redis_req_t *ngx_ioa_redis_script(ngx_ioa_script_e script,
    ngx_ioa_redis_handler_pt handler, void *data, int nkeys, int argc,
    const char **argv, const size_t *argvlen);
void ngx_ioa_redis_cancel(ngx_ioa_redis_req_t *req);

/* the sends of a builder (ngx_ioa_redis_args.h): formatted now, the
 * builder released */
ngx_ioa_redis_req_t *ngx_ioa_redis_command_args(
    ngx_ioa_redis_handler_pt handler, void *data, ngx_ioa_args_t *a);
ngx_ioa_redis_req_t *ngx_ioa_redis_script_args(ngx_ioa_script_e script,
    ngx_ioa_redis_handler_pt handler, void *data, int nkeys,
    ngx_ioa_args_t *a);

/* store/ngx_ioa_sub.c: subscriptions */
void ngx_ioa_sub_init_process(void);
void ngx_ioa_sub_init(ngx_ioa_sub_t *sub, ngx_ioa_sub_kind_e kind,
    ngx_str_t *name, ngx_uint_t slot, const ngx_ioa_sub_handler_t *handler);
void ngx_ioa_sub_start(ngx_ioa_sub_t *sub);
ngx_int_t ngx_ioa_sub_stop(ngx_ioa_sub_t *sub);
#define ngx_ioa_sub_active(sub)  ((sub)->state == NGX_IOA_SUB_ACTIVE)
/* the struct a subscription is the member of */
#define ngx_ioa_sub_owner(sub, type, member)                                 \
    ((type *) ((u_char *) (sub) - offsetof(type, member)))

/* the Redis key schema, README's "What Redis holds" (store/ngx_ioa_keys.c) */
#define NGX_IOA_KEY_MAX          320

typedef enum {
    NGX_IOA_KEY_ROOMLIST = 0,           /* <p>{reg}:roomlist */
    NGX_IOA_KEY_ROOMDUE,                /* <p>{reg}:roomdue */
    NGX_IOA_KEY_SWEEP,                  /* <p>{reg}:sweep */
    NGX_IOA_KEY_AGENTS,                 /* <p>{reg}:agents */
    NGX_IOA_KEY_STATS,                  /* <p>{reg}:stats */
    NGX_IOA_KEY_SEEN,                   /* <p>{reg}:seen */
    NGX_IOA_KEY_ONLINE,                 /* <p>{reg}:online */
    NGX_IOA_KEY_EPOCH,                  /* <p>{reg}:epoch */
    NGX_IOA_KEY_OBSERVERS,              /* <p>{reg}:observers */
    NGX_IOA_KEY_EVENTS,                 /* <p>{reg}:events, a channel */
    NGX_IOA_KEY_INDEX,                  /* <p>{reg}:index, a channel */
    NGX_IOA_KEY_REG,                    /* <p>{reg}:, for the scripts */
    NGX_IOA_KEY_JOBS,                   /* <p>{jobs}:goals */
    NGX_IOA_KEY_GOALS,                  /* <p>{goals}:, goal_index.lua's */
    NGX_IOA_KEY_AUDIT,                  /* <p>{audit}:log */
    NGX_IOA_KEY_WORKERS                 /* <p>{workers}:, worker_list.lua's */
} ngx_ioa_key_e;

typedef enum {                          /* <p>{room:<comm_id>}... */
    NGX_IOA_ROOM_META = 0,
    NGX_IOA_ROOM_MEMBERS,
    NGX_IOA_ROOM_LOG,
    NGX_IOA_ROOM_FLOOR,
    NGX_IOA_ROOM_CHAIN,
    NGX_IOA_ROOM_EXPIRED,
    NGX_IOA_ROOM_LOG_RW,
    NGX_IOA_ROOM_LOG_RWQ,
    NGX_IOA_ROOM_CH                     /* the room's channel */
} ngx_ioa_room_key_e;

typedef enum {                          /* what an id's keys are */
    NGX_IOA_KEYS_ROOM = 0,              /* <p>{room:<comm_id>}... */
    NGX_IOA_KEYS_FEED,                  /* <p>{room:goal-<goal_id>}... */
    NGX_IOA_KEYS_GOAL                   /* <p>{goal:<goal_id>}... */
} ngx_ioa_keys_e;

typedef enum {
    NGX_IOA_AGENT_ROOMS = 0,            /* <p>{reg}:rooms:<name> */
    NGX_IOA_AGENT_RECORD                /* <p>{reg}:agent:<name> */
} ngx_ioa_agent_key_e;

typedef enum {                          /* <p>{goal:<id>}... */
    NGX_IOA_GOAL_META = 0,
    NGX_IOA_GOAL_FSM,
    NGX_IOA_GOAL_CONTROL,
    NGX_IOA_GOAL_INBOX
} ngx_ioa_goal_key_e;

ngx_int_t ngx_ioa_keys_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf);
void ngx_ioa_key(ngx_ioa_args_t *a, ngx_ioa_key_e which);
ngx_int_t ngx_ioa_key_alloc(ngx_pool_t *pool, ngx_ioa_key_e which,
    ngx_str_t *key);
void ngx_ioa_key_id(ngx_ioa_args_t *a, ngx_ioa_keys_e keys, ngx_str_t *id,
    ngx_uint_t which);
ngx_int_t ngx_ioa_key_id_alloc(ngx_pool_t *pool, ngx_ioa_keys_e keys,
    ngx_str_t *id, ngx_uint_t which, ngx_str_t *key);
#define ngx_ioa_key_room(a, comm_id, which)                                  \
    ngx_ioa_key_id(a, NGX_IOA_KEYS_ROOM, comm_id, which)
#define ngx_ioa_key_room_alloc(pool, comm_id, which, key)                    \
    ngx_ioa_key_id_alloc(pool, NGX_IOA_KEYS_ROOM, comm_id, which, key)
#define ngx_ioa_key_goal_feed(a, goal_id, which)                             \
    ngx_ioa_key_id(a, NGX_IOA_KEYS_FEED, goal_id, which)
#define ngx_ioa_key_goal(a, goal_id, which)                                  \
    ngx_ioa_key_id(a, NGX_IOA_KEYS_GOAL, goal_id, which)
#define ngx_ioa_key_goal_alloc(pool, goal_id, which, key)                    \
    ngx_ioa_key_id_alloc(pool, NGX_IOA_KEYS_GOAL, goal_id, which, key)
size_t ngx_ioa_key_room_len(ngx_str_t *comm_id, ngx_ioa_room_key_e which);
u_char *ngx_ioa_key_room_write(u_char *p, ngx_str_t *comm_id,
    ngx_ioa_room_key_e which);
ngx_int_t ngx_ioa_key_room_set(u_char *buf, size_t size, ngx_str_t *comm_id,
    const ngx_ioa_room_key_e *which, ngx_uint_t n, ngx_str_t *keys);
ngx_int_t ngx_ioa_comm_id_from_channel(ngx_str_t *channel,
    ngx_str_t *comm_id);
void ngx_ioa_key_agent(ngx_ioa_args_t *a, ngx_ioa_agent_key_e which,
    ngx_str_t *name);
ngx_int_t ngx_ioa_key_agent_alloc(ngx_pool_t *pool, ngx_ioa_agent_key_e which,
    ngx_str_t *name, ngx_str_t *key);
void ngx_ioa_key_conn(ngx_ioa_args_t *a, ngx_str_t *name);
void ngx_ioa_key_limit(ngx_ioa_args_t *a, u_char kind, ngx_str_t *name);
ngx_int_t ngx_ioa_key_position_alloc(ngx_pool_t *pool, ngx_str_t *cursor,
    ngx_str_t *key);
extern redisReplyObjectFunctions  ngx_ioa_redis_reply_functions;
ngx_int_t ngx_ioa_redis_error(redisReply *reply, ngx_str_t *code,
    ngx_str_t *text);
ngx_uint_t ngx_ioa_redis_refusal(redisReply *reply, ngx_ioa_error_t *err,
    ngx_msec_t *retry);
void ngx_ioa_redis_log_refusal(redisReply *reply, const char *what);


/* ngx_ioa_redis_cluster.c */
ngx_uint_t ngx_ioa_redis_cluster(void);
ngx_uint_t ngx_ioa_redis_ready(void);
ngx_uint_t ngx_ioa_redis_healthy(void);
void ngx_ioa_redis_note_health(void);
ngx_ioa_redis_node_t *ngx_ioa_redis_data_node(ngx_uint_t i);
ngx_ioa_redis_node_t *ngx_ioa_redis_owner(ngx_uint_t slot);
/* a Cluster's slot map is read again soon (trouble: work that failed is
 * retried once every slot has its master); nothing on a standalone Redis */
void ngx_ioa_redis_refresh(ngx_uint_t trouble);


/* ngx_ioa_redis_adapter.c */
/* reads of hiredis' 16 KiB a read handler makes per event at most (4 MiB) */
#define NGX_IOA_REDIS_READS_PER_EVENT  256

ngx_int_t ngx_ioa_redis_attach(redisAsyncContext *ac, ngx_log_t *log,
    ngx_event_handler_pt read);
size_t ngx_ioa_redis_unread(redisAsyncContext *ac);
ngx_uint_t ngx_ioa_redis_read_more(redisAsyncContext *ac);
void ngx_ioa_redis_wrote(redisAsyncContext *ac);


/* ngx_ioa_room.c: rooms and subscriptions */
ngx_int_t ngx_ioa_room_init_process(ngx_cycle_t *cycle);
void ngx_ioa_room_exit_process(ngx_cycle_t *cycle);

/* the room code's periodic work: presence, idle rooms, retention */
#define NGX_IOA_TICK  5000

/* ngx_ioa_link.c: links, catch-up, fan-out, messages */
void ngx_ioa_msg_release(ngx_ioa_msg_t *m);
ngx_int_t ngx_ioa_msg_sse(ngx_ioa_msg_t *m);
ngx_int_t ngx_ioa_parse_sid(u_char *p, size_t len, ngx_ioa_sid_t *sid);
u_char *ngx_ioa_sid_print(u_char *p, ngx_ioa_sid_t *sid);

/* ngx_ioa_client.c */
void ngx_ioa_client_follower(ngx_ioa_client_t *cl, ngx_http_request_t *r,
    ngx_ioa_transport_t *t, void *data, ngx_str_t *stream);
ngx_int_t ngx_ioa_client_attach(ngx_ioa_client_t *cl);
void ngx_ioa_client_detach(ngx_ioa_client_t *cl);
ngx_int_t ngx_ioa_client_parse_resume(ngx_ioa_client_t *cl, ngx_str_t *vec,
    ngx_ioa_error_t *err);
void ngx_ioa_client_error(ngx_ioa_client_t *cl, ngx_ioa_error_t *err,
    ngx_str_t *comm_id);
u_char *ngx_ioa_client_position(ngx_ioa_client_t *cl, u_char *p,
    u_char *last);
size_t ngx_ioa_client_position_len(ngx_ioa_client_t *cl);
ngx_uint_t ngx_ioa_local_clients(void);

/* ngx_ioa_post.c */
void ngx_ioa_client_post(ngx_ioa_client_t *cl, u_char *data, size_t len);
ngx_int_t ngx_ioa_envelope_read(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *name, ngx_ioa_loc_conf_t *lcf, ngx_ioa_envelope_t *env,
    ngx_ioa_error_t *err);
ngx_ioa_redis_req_t *ngx_ioa_post_send(ngx_str_t *name,
    ngx_ioa_envelope_t *env, ngx_ioa_redis_handler_pt handler, void *data);
ngx_uint_t ngx_ioa_post_result(redisReply *reply, ngx_str_t *name,
    ngx_str_t *comm_id, ngx_ioa_error_t *err, ngx_msec_t *retry);

/* ngx_ioa_linger.c */
ngx_int_t ngx_ioa_linger_init(ngx_cycle_t *cycle);
void ngx_ioa_linger_note(void);

/* the longest ioa_linger: beyond it the wait costs more than it saves */
#define NGX_IOA_LINGER_MAX  5000
/* measured in BENCHMARKS.md ("Open loop against nchan") */
#define NGX_IOA_LINGER_DEFAULT  0

/* ngx_ioa_retention.c */
/* the longest retention a room may ask for at /teamup without
 * ioa_room_retention (ten years: Redis' scores and ms stay exact) */
#define NGX_IOA_ROOM_RETENTION_MAX_S  (3650 * 86400)
/* how long an expired room is known as one (its tombstone): a client
 * away for longer gets unknown_room instead of room_expired */
#define NGX_IOA_ROOM_TOMBSTONE        (7 * 86400 * 1000)

void ngx_ioa_retention_tick(void);
ngx_int_t ngx_ioa_room_gone(ngx_http_request_t *r, ngx_str_t *comm_id);
void ngx_ioa_client_gone(ngx_ioa_client_t *cl, ngx_str_t *comm_id,
    ngx_uint_t member);
void ngx_ioa_client_gone_free(ngx_ioa_client_t *cl);

/* ngx_ioa_position.c */
ngx_int_t ngx_ioa_position_id(ngx_ioa_client_t *cl, ngx_ioa_position_t **posp,
    ngx_ioa_msg_t *m, ngx_str_t *id);
ngx_int_t ngx_ioa_position_parse(ngx_pool_t *pool, ngx_str_t *id,
    ngx_str_t *key, ngx_str_t *version, ngx_str_t *delta);
const char *ngx_ioa_position_retry_ttl(void);


/* ngx_ioa_ws.c */
ngx_int_t ngx_ioa_ws_handler(ngx_http_request_t *r, ngx_str_t *name,
    ngx_ioa_client_kind_e kind, ngx_ioa_identity_t *id);

/* ngx_ioa_expiry.c: a connection's token expiry */
ngx_int_t ngx_ioa_expiry_start(ngx_ioa_client_t *cl, ngx_ioa_identity_t *id);
void ngx_ioa_expiry_stop(ngx_ioa_client_t *cl);
void ngx_ioa_expiry_posted(ngx_ioa_client_t *cl);
void ngx_ioa_expiry_refresh(ngx_ioa_client_t *cl, yajl_val doc,
    ngx_pool_t *pool);
void ngx_ioa_expiry_frame(ngx_ioa_client_t *cl, u_char *data, size_t len);

/* ngx_ioa_ws_deflate.c (the rest is in ngx_ioa_ws_deflate.h): m->wsz,
 * when the message goes; the worker's deflate streams, when it exits */
void ngx_ioa_ws_deflate_msg_free(ngx_ioa_msg_t *m);
void ngx_ioa_ws_deflate_exit_process(void);


/* ngx_ioa_registry.c */
ngx_int_t ngx_ioa_register_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_retrieve_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_query_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_list_agents_handler(ngx_http_request_t *r);
void ngx_ioa_presence_set(ngx_str_t *names, ngx_uint_t n,
    ngx_uint_t online);
ngx_str_t *ngx_ioa_holder(void);


/* ngx_ioa_rest.c */
typedef void (*ngx_ioa_body_handler_pt)(ngx_http_request_t *r,
    ngx_str_t *body);
typedef void (*ngx_ioa_rest_handler_pt)(ngx_http_request_t *r,
    redisReply *reply);

ngx_int_t ngx_ioa_read_body(ngx_http_request_t *r,
    ngx_ioa_body_handler_pt handler);
yajl_val ngx_ioa_body_json(ngx_http_request_t *r, ngx_str_t *body);
ngx_int_t ngx_ioa_cors(ngx_http_request_t *r);
ngx_int_t ngx_ioa_origin_check(ngx_http_request_t *r, ngx_str_t *origin);
char *ngx_ioa_cors_origins_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_table_elt_t *ngx_ioa_header_in(ngx_http_request_t *r, const char *name);
ngx_int_t ngx_ioa_send_json(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *json);
char *ngx_ioa_limit_rate_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_ioa_limit_init_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf);
char *ngx_ioa_limit_count_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_ioa_limit_scope_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_ioa_limit_teamup(ngx_str_t *name, ngx_msec_t *retry,
    ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_limit_launch(ngx_str_t *name, ngx_msec_t *retry,
    ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_limit_post(ngx_str_t *name, ngx_str_t *comm_id,
    ngx_msec_t *retry, ngx_ioa_error_t *err);
void ngx_ioa_client_drained(ngx_ioa_client_t *cl);
/* one connection counted by ioa_limit_conn (the pool cleanup's data) */
typedef struct {
    ngx_str_t                 name;       /* its bytes follow the struct */
    ngx_ioa_client_t         *client;     /* closed if the fleet refuses */
    ngx_ioa_redis_req_t      *req;        /* the fleet's check in flight */
    ngx_uint_t                fleet;      /* counted for the fleet */
} ngx_ioa_limit_conn_t;

ngx_int_t ngx_ioa_limit_conn(ngx_pool_t *pool, ngx_str_t *name,
    ngx_ioa_client_t *cl, ngx_ioa_error_t *err);
void ngx_ioa_limit_conn_fleet_open(ngx_ioa_limit_conn_t *lc);
void ngx_ioa_limit_conn_fleet_close(ngx_ioa_limit_conn_t *lc);
void ngx_ioa_limit_conn_fleet_tick(void);
ngx_str_t *ngx_ioa_limit_conn_who(ngx_ioa_client_kind_e kind,
    ngx_str_t *agent, ngx_ioa_identity_t *who);
void ngx_ioa_conf_trim(ngx_str_t *s);
ngx_int_t ngx_ioa_conf_read_file(ngx_conf_t *cf, ngx_str_t *name,
    size_t max, ngx_str_t *out);
char *ngx_ioa_redis_resolve_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf);
char *ngx_ioa_auth_mode(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_ioa_auth_jwt_key(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_ioa_auth_merge(ngx_conf_t *cf, ngx_ioa_loc_conf_t *prev,
    ngx_ioa_loc_conf_t *conf);
ngx_int_t ngx_ioa_auth_check(ngx_http_request_t *r, ngx_uint_t scope,
    ngx_str_t *name, ngx_ioa_identity_t **idp);
ngx_int_t ngx_ioa_auth_jwt(ngx_pool_t *pool, ngx_ioa_loc_conf_t *lcf,
    ngx_str_t *token, ngx_ioa_identity_t *id, ngx_ioa_error_t *err);
/* the body's name is the caller's own, else 403 (the request finished) */
ngx_int_t ngx_ioa_auth_acts_as(ngx_http_request_t *r, ngx_str_t *name);
ngx_int_t ngx_ioa_auth_allows(ngx_ioa_identity_t *id, ngx_uint_t scope,
    ngx_str_t *name, ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_auth_room(ngx_ioa_identity_t *id, ngx_str_t *comm_id,
    ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_rest_identified(ngx_http_request_t *r,
    ngx_ioa_identity_t *id, ngx_http_handler_pt handler);
ngx_ioa_identity_t *ngx_ioa_rest_identity(ngx_http_request_t *r);
void ngx_ioa_rest_set_embed(ngx_http_request_t *r, void *embed);
void *ngx_ioa_rest_get_embed(ngx_http_request_t *r);

ngx_int_t ngx_ioa_send_retry(ngx_http_request_t *r, ngx_uint_t status,
    ngx_msec_t ms, ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_send_answer(ngx_http_request_t *r, ngx_uint_t status,
    ngx_msec_t retry, ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_send_error(ngx_http_request_t *r, ngx_uint_t status,
    ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_send_not_allowed(ngx_http_request_t *r, const char *allow,
    ngx_ioa_error_t *err);
ngx_int_t ngx_ioa_send_jbuf(ngx_http_request_t *r, ngx_uint_t status,
    ngx_ioa_jbuf_t *b);
ngx_int_t ngx_ioa_send_unavailable(ngx_http_request_t *r);
void ngx_ioa_finish(ngx_http_request_t *r, ngx_int_t rc);
void ngx_ioa_rest_set_data(ngx_http_request_t *r, void *data);
void *ngx_ioa_rest_get_data(ngx_http_request_t *r);
ngx_int_t ngx_ioa_rest_redis_failed(ngx_http_request_t *r,
    redisReply *reply);
/* Redis for a request, from a builder the send releases: a script, a
 * command to its keys' node, a command to one node (NULL: its keys') */
ngx_int_t ngx_ioa_rest_script_args(ngx_http_request_t *r,
    ngx_ioa_script_e script, ngx_ioa_rest_handler_pt handler, int nkeys,
    ngx_ioa_args_t *a);
ngx_int_t ngx_ioa_rest_command_args(ngx_http_request_t *r,
    ngx_ioa_rest_handler_pt handler, ngx_ioa_args_t *a);
ngx_int_t ngx_ioa_rest_node_command_args(ngx_http_request_t *r,
    ngx_ioa_redis_node_t *node, ngx_ioa_rest_handler_pt handler,
    ngx_ioa_args_t *a);
ngx_int_t ngx_ioa_teamup_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_fetch_record_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_health_handler(ngx_http_request_t *r);


/* ngx_ioa_embed.c */
typedef struct {
    ngx_uint_t                ok;
    ngx_str_t                 error;          /* why not, when not ok */
    ngx_uint_t                status;         /* the endpoint's, if any */
    ngx_uint_t                n;
    ngx_uint_t                dim;
    float                    *vecs;           /* n * dim, each of length 1 */
} ngx_ioa_embed_result_t;

typedef void (*ngx_ioa_embed_handler_pt)(ngx_http_request_t *r, void *data,
    ngx_ioa_embed_result_t *res);

ngx_int_t ngx_ioa_embed_add_variable(ngx_conf_t *cf);
char *ngx_ioa_embed_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_ioa_embed(ngx_http_request_t *r, ngx_str_t *texts,
    ngx_uint_t n, ngx_ioa_embed_handler_pt handler, void *data);
#define ngx_ioa_embed_on()  (ngx_ioa_main_conf()->embed_uri.len != 0)


/* ngx_ioa_index.c, ngx_ioa_index_rank.c, ngx_ioa_index_sync.c */
char *ngx_ioa_index_init_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf);
ngx_uint_t ngx_ioa_index_usable(void);
/* semantic discovery for one /retrieve_assistant: qvecs NULL when the
 * endpoint failed (BM25 only, and each agent says so) */
typedef struct {
    float                    *qvecs;          /* one per query, length 1 */
    ngx_uint_t                dim;
    double                    weight;         /* BM25's share */
} ngx_ioa_index_semantic_t;

ngx_int_t ngx_ioa_index_retrieve(ngx_pool_t *pool, ngx_str_t *queries,
    ngx_uint_t n, ngx_uint_t limit, ngx_uint_t online_only,
    ngx_str_t *exclude, int64_t now, ngx_ioa_index_semantic_t *sem,
    ngx_ioa_jbuf_t *out);
ngx_uint_t ngx_ioa_index_unembedded(ngx_pool_t *pool, ngx_uint_t max,
    ngx_str_t *names, ngx_str_t *descs);
void ngx_ioa_index_init_process(ngx_cycle_t *cycle);
void ngx_ioa_index_exit_process(void);
void ngx_ioa_index_exit_process_sync(void);
void ngx_ioa_index_apply(redisReply *reply);
u_char *ngx_ioa_index_metrics(u_char *p, u_char *last);


/* ngx_ioa_stats.c: the instance's counters, in shared memory */

/* the limits an operator sets (README "Directive reference") */
typedef enum {
    NGX_IOA_LIMIT_RATE = 0,      /* ioa_limit_rate */
    NGX_IOA_LIMIT_ROOM_RATE,     /* ioa_limit_room_rate */
    NGX_IOA_LIMIT_TEAMUP_RATE,   /* ioa_limit_teamup_rate */
    NGX_IOA_LIMIT_CONN,          /* ioa_limit_conn */
    NGX_IOA_LIMIT_ZONE,          /* ioa_limit_zone full */
    NGX_IOA_LIMIT_ROOM_MEMBERS,  /* ioa_max_room_members */
    NGX_IOA_LIMIT_AGENT_ROOMS,   /* ioa_max_agent_rooms */
    NGX_IOA_LIMIT_AGENTS,        /* ioa_max_agents */
    NGX_IOA_LIMIT_LAUNCH_RATE,   /* ioa_limit_launch_rate */
    NGX_IOA_LIMIT_GOALS_IN_FLIGHT,  /* ioa_limit_goals_in_flight */
    NGX_IOA_LIMIT_N
} ngx_ioa_limit_e;

/* what became of the fleet's leases (ioa_limit_scope fleet) */
typedef enum {
    NGX_IOA_LEASE_ASKED = 0,     /* limit_lease.lua sent */
    NGX_IOA_LEASE_GRANTED,       /* it gave at least one request */
    NGX_IOA_LEASE_REFUSED,       /* the fleet's bucket was empty */
    NGX_IOA_LEASE_FAILED         /* no answer: the instance's own limit */
} ngx_ioa_lease_e;

/* counters with fixed labels; "+ via" and "+ limit" pick the series */
typedef enum {
    NGX_IOA_STAT_DISCOVERY_INDEX = 0,
    NGX_IOA_STAT_DISCOVERY_REDIS,
    /* gauges, + via * 3 + ngx_ioa_client_kind_e */
    NGX_IOA_STAT_CONNECTIONS,
    NGX_IOA_STAT_OPENED = NGX_IOA_STAT_CONNECTIONS + 3 * NGX_IOA_VIA_N,
    NGX_IOA_STAT_POSTED = NGX_IOA_STAT_OPENED + 3 * NGX_IOA_VIA_N,
    NGX_IOA_STAT_DELIVERED = NGX_IOA_STAT_POSTED + NGX_IOA_VIA_N,
    NGX_IOA_STAT_RECEIVED_BYTES = NGX_IOA_STAT_DELIVERED + NGX_IOA_VIA_N,
    NGX_IOA_STAT_SENT_BYTES = NGX_IOA_STAT_RECEIVED_BYTES + NGX_IOA_VIA_N,
    NGX_IOA_STAT_OVERFLOWS = NGX_IOA_STAT_SENT_BYTES + NGX_IOA_VIA_N,
    NGX_IOA_STAT_RESUMES = NGX_IOA_STAT_OVERFLOWS + NGX_IOA_VIA_N,
    NGX_IOA_STAT_LIMITS = NGX_IOA_STAT_RESUMES + NGX_IOA_VIA_N,
    NGX_IOA_STAT_LINGERS = NGX_IOA_STAT_LIMITS + NGX_IOA_LIMIT_N,
    NGX_IOA_STAT_TRIMMED,
    /* + via */
    NGX_IOA_STAT_TOKEN_EXPIRIES,
    NGX_IOA_STAT_TOKEN_REFRESHES = NGX_IOA_STAT_TOKEN_EXPIRIES
                                   + NGX_IOA_VIA_N,
    NGX_IOA_STAT_TOKEN_REFRESHES_REFUSED,
    /* + ngx_ioa_lease_e */
    NGX_IOA_STAT_LEASES,
    NGX_IOA_STAT_LIMIT_FALLBACKS = NGX_IOA_STAT_LEASES + 4,
    NGX_IOA_STAT_AGENTS_DELETED,
    NGX_IOA_STAT_ROOMS_DELETED,
    NGX_IOA_STAT_N
} ngx_ioa_stat_e;

typedef enum {
    NGX_IOA_HIST_DISCOVERY = 0,  /* microseconds */
    NGX_IOA_HIST_REDIS,          /* microseconds */
    NGX_IOA_HIST_CATCHUP,        /* envelopes */
    NGX_IOA_HIST_N
} ngx_ioa_hist_e;

ngx_int_t ngx_ioa_stats_init_conf(ngx_conf_t *cf);
void ngx_ioa_stat_add(ngx_uint_t stat, ngx_atomic_int_t n);
void ngx_ioa_stat_observe(ngx_ioa_hist_e hist, int64_t value);
void ngx_ioa_stat_refused(ngx_str_t *code);
void ngx_ioa_stat_redis(ngx_str_t *node, const char *what);
int64_t ngx_ioa_stats_now_us(void);
size_t ngx_ioa_stats_metrics_size(void);
u_char *ngx_ioa_stats_metrics(u_char *p, u_char *last);


/* ngx_ioa_metrics.c */
ngx_int_t ngx_ioa_metrics_handler(ngx_http_request_t *r);
ngx_int_t ngx_ioa_metrics_token_handler(ngx_http_request_t *r);


/* ngx_ioa_goal.c */
ngx_int_t ngx_ioa_launch_goal_handler(ngx_http_request_t *r);
void ngx_ioa_goal_owner(ngx_ioa_identity_t *who, ngx_str_t *owner);
ngx_int_t ngx_ioa_goal_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_goal_cancel_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_goal_message_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_goal_events_handler(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_goal_init_process(ngx_cycle_t *cycle);
void ngx_ioa_goal_ensure_group(void);
ngx_int_t ngx_ioa_goal_id_valid(ngx_str_t *id);
ngx_int_t ngx_ioa_goal_feed_name(ngx_pool_t *pool, ngx_str_t *id,
    ngx_str_t *name);

/* ngx_ioa_metrics_fleet.c: /metrics' goals and goal workers */
typedef struct ngx_ioa_fleet_s  ngx_ioa_fleet_t;

ngx_ioa_fleet_t *ngx_ioa_fleet_create(ngx_pool_t *pool);
void ngx_ioa_fleet_ask(ngx_http_request_t *r, ngx_ioa_fleet_t *f,
    void (*done)(ngx_http_request_t *r));
ngx_buf_t *ngx_ioa_fleet_metrics(ngx_pool_t *pool, ngx_ioa_fleet_t *f);

/* ngx_ioa_goal_list.c */
ngx_int_t ngx_ioa_goal_list_handler(ngx_http_request_t *r,
    ngx_ioa_identity_t *who);


/* ngx_ioa_room_api.c */
ngx_int_t ngx_ioa_room_events_handler(ngx_http_request_t *r,
    ngx_str_t *comm_id, ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_room_verify_handler(ngx_http_request_t *r,
    ngx_str_t *comm_id, ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_room_api_copy(ngx_http_request_t *r, redisReply *reply,
    size_t i, ngx_str_t *s);

/* ngx_ioa_room_erase.c */
typedef struct ngx_ioa_erase_s  ngx_ioa_erase_t;
typedef ngx_int_t (*ngx_ioa_erase_done_pt)(ngx_http_request_t *r,
    ngx_ioa_erase_t *er);

ngx_int_t ngx_ioa_room_erase_handler(ngx_http_request_t *r,
    ngx_str_t *comm_id, ngx_ioa_identity_t *who);
ngx_ioa_erase_t *ngx_ioa_erase_create(ngx_http_request_t *r,
    ngx_str_t *sender, ngx_str_t *actor);
ngx_int_t ngx_ioa_erase_add(ngx_http_request_t *r, ngx_ioa_erase_t *er,
    ngx_str_t *comm_id);
ngx_int_t ngx_ioa_erase_run(ngx_http_request_t *r, ngx_ioa_erase_t *er,
    ngx_ioa_erase_done_pt done, void *data);
void *ngx_ioa_erase_data(ngx_ioa_erase_t *er);
void ngx_ioa_erase_summary(ngx_ioa_erase_t *er, ngx_ioa_jbuf_t *b);
int64_t ngx_ioa_erase_erased(ngx_ioa_erase_t *er);


/* ngx_ioa_delete.c */
ngx_int_t ngx_ioa_agent_delete_handler(ngx_http_request_t *r,
    ngx_str_t *name, ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_room_delete_handler(ngx_http_request_t *r,
    ngx_str_t *comm_id, ngx_ioa_identity_t *who);
ngx_int_t ngx_ioa_audit_handler(ngx_http_request_t *r);
/* one entry of <prefix>{audit}:log: at, action, actor, target, detail */
void ngx_ioa_audit(const char *action, ngx_str_t *actor, ngx_str_t *target,
    ngx_str_t *detail);


/* ngx_ioa_mcp.c */
char *ngx_ioa_mcp_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_ioa_mcp_handler(ngx_http_request_t *r);


/* ngx_ioa_a2a.c */
char *ngx_ioa_a2a_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_ioa_a2a_handler(ngx_http_request_t *r);


/* ngx_ioa_call.c: one of the hub's endpoints, called in memory */
typedef struct ngx_ioa_call_s  ngx_ioa_call_t;

/* data: the request's REST data, which begins with its ngx_ioa_call_t */
typedef void (*ngx_ioa_call_pt)(ngx_http_request_t *r, void *data);

struct ngx_ioa_call_s {
    ngx_str_t                 api;        /* the ioa_api prefix, "" for / */

    /* the subrequest under way, then its outcome */
    ngx_http_request_t       *sr;
    ngx_ioa_call_pt           next;
    ngx_uint_t                status;
    ngx_str_t                 body;
    ngx_event_t               wake;
};

ngx_int_t ngx_ioa_call(ngx_http_request_t *r, ngx_ioa_call_t *call,
    ngx_uint_t post, ngx_str_t *path, const char *args, ngx_str_t *body,
    ngx_ioa_call_pt next);
yajl_val ngx_ioa_call_answer(ngx_http_request_t *r, ngx_ioa_call_t *call);
char *ngx_ioa_call_api_conf(ngx_str_t *value, ngx_str_t *api);


/* ngx_ioa_jsonrpc.c */
#define NGX_IOA_JSONRPC_PARSE_ERROR      -32700
#define NGX_IOA_JSONRPC_INVALID_REQUEST  -32600
#define NGX_IOA_JSONRPC_NO_METHOD        -32601
#define NGX_IOA_JSONRPC_INVALID_PARAMS   -32602
#define NGX_IOA_JSONRPC_INTERNAL         -32603

typedef struct {
    ngx_str_t                 id;         /* as JSON; "null" if none */
    ngx_str_t                 method;
    yajl_val                  params;     /* an object, or NULL */
    unsigned                  notification:1;    /* no id */
    unsigned                  response:1; /* to a request of ours */
} ngx_ioa_jsonrpc_t;

ngx_int_t ngx_ioa_jsonrpc_parse(ngx_http_request_t *r, ngx_str_t *body,
    ngx_uint_t refused, ngx_ioa_jsonrpc_t *rpc);
ngx_int_t ngx_ioa_jsonrpc_message(ngx_pool_t *pool, ngx_str_t *id,
    const char *member, ngx_str_t *value, ngx_str_t *out);
ngx_int_t ngx_ioa_jsonrpc_error_object(ngx_pool_t *pool, ngx_int_t code,
    ngx_str_t *message, ngx_str_t *out);
void ngx_ioa_jsonrpc_result(ngx_http_request_t *r, ngx_str_t *id,
    ngx_ioa_jbuf_t *result);
void ngx_ioa_jsonrpc_error(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_int_t code, ngx_str_t *message);
void ngx_ioa_jsonrpc_refuse(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_int_t code, const char *message);
ngx_int_t ngx_ioa_jsonrpc_refuse_early(ngx_http_request_t *r,
    ngx_uint_t status, ngx_int_t code, ngx_str_t *message);
ngx_int_t ngx_ioa_jsonrpc_refuse_origin(ngx_http_request_t *r,
    ngx_str_t *origin);
ngx_int_t ngx_ioa_jsonrpc_accepted(ngx_http_request_t *r);


/* ngx_ioa_wait.c: a request that waits on a stream and answers once */
typedef struct ngx_ioa_wait_s  ngx_ioa_wait_t;

struct ngx_ioa_wait_s {
    ngx_ioa_client_t          client;        /* must be first */
    ngx_http_request_t       *request;
    /* an entry; the owner stops the wait before it answers */
    ngx_int_t               (*message)(ngx_ioa_wait_t *w, ngx_ioa_msg_t *m);
    /* the hub closed the follower (why), or the timeout passed (NULL) */
    void                    (*closed)(ngx_ioa_wait_t *w, const char *why);
    void                     *data;
    ngx_event_t               timer;
    unsigned                  attached:1;
    unsigned                  done:1;
};

ngx_int_t ngx_ioa_wait_start(ngx_ioa_wait_t *w, ngx_http_request_t *r,
    ngx_str_t *stream, ngx_ioa_sid_t *since, ngx_msec_t timeout);
void ngx_ioa_wait_stop(ngx_ioa_wait_t *w);


/* ngx_ioa_sse.c */
typedef struct ngx_ioa_sse_s  ngx_ioa_sse_t;

/* NGX_ERROR: the stream was closed */
typedef ngx_int_t (*ngx_ioa_sse_rewrite_pt)(ngx_ioa_sse_t *sse,
    ngx_ioa_msg_t *m, void *data);
typedef void (*ngx_ioa_sse_closing_pt)(ngx_ioa_sse_t *sse,
    ngx_uint_t expired, const char *reason, void *data);

ngx_int_t ngx_ioa_agent_post_handler(ngx_http_request_t *r,
    ngx_str_t *name);
ngx_int_t ngx_ioa_inbox_handler(ngx_http_request_t *r, ngx_str_t *name,
    ngx_ioa_client_kind_e kind, ngx_ioa_identity_t *id);
ngx_int_t ngx_ioa_sse_follow(ngx_http_request_t *r, ngx_str_t *stream,
    ngx_ioa_sid_t *since, ngx_ioa_identity_t *who,
    ngx_ioa_sse_rewrite_pt rewrite, ngx_ioa_sse_closing_pt closing,
    void *data, ngx_str_t *first);
ngx_int_t ngx_ioa_sse_event(ngx_ioa_sse_t *sse, ngx_str_t *id,
    ngx_str_t *data);
void ngx_ioa_sse_end(ngx_ioa_sse_t *sse);


#endif /* _NGX_IOA_H_INCLUDED_ */
