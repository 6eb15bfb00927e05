
/*
 * Copyright (C) ioa authors
 *
 * Private to the Redis client (ngx_ioa_redis.c, ngx_ioa_redis_cluster.c):
 * the node and connection types and what the two files call of each other.
 * The rest of the module sees only ngx_ioa.h, where a node is opaque.
 *
 * A node is one Redis server: the single one of a standalone setup, or one
 * master of a Cluster.  Each node has a command connection and a pub/sub
 * connection, each with its own state machine (DOWN, CONNECTING, READY),
 * backoff and timers; what differs between the two setups is only how many
 * nodes there are and which one a command goes to.
 */


#ifndef _NGX_IOA_REDIS_H_INCLUDED_
#define _NGX_IOA_REDIS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_ioa.h"


typedef enum {
    NGX_IOA_REDIS_DOWN = 0,
    NGX_IOA_REDIS_CONNECTING,
    NGX_IOA_REDIS_READY
} ngx_ioa_redis_state_e;


typedef enum {
    NGX_IOA_REDIS_UNKNOWN = 0,   /* no answer to CLUSTER SLOTS yet */
    NGX_IOA_REDIS_STANDALONE,
    NGX_IOA_REDIS_CLUSTER
} ngx_ioa_redis_mode_e;


typedef struct {
    const char               *name;      /* "command" or "pub/sub" */
    ngx_ioa_redis_node_t     *node;
    redisAsyncContext        *ac;
    ngx_ioa_redis_state_e     state;
    ngx_uint_t                pending;
    ngx_msec_t                backoff;
    ngx_event_t               retry;
    ngx_event_t               timer;
    ngx_log_t                *log;
    ngx_queue_t               backlog;   /* requests not given to hiredis */
    ngx_resolver_ctx_t       *resolving; /* the node's name being looked up */

    unsigned                  is_sub:1;
    unsigned                  authing:1;   /* AUTH sent, not answered */
    unsigned                  up:1;      /* command: scripts sent, usable */
    unsigned                  connected:1;  /* once, so the next is a
                                               reconnect (/metrics) */
} ngx_ioa_redis_conn_t;


struct ngx_ioa_redis_node_s {
    ngx_str_t                 addr;      /* "127.0.0.1:7000", for logs */
    u_char                    host[NGX_INET_ADDRSTRLEN + 1];
    ngx_str_t                 name;      /* a seed's name, looked up at
                                            every connect, or empty */
    int                       port;

    ngx_ioa_redis_conn_t      cmd;
    ngx_ioa_redis_conn_t      sub;

    unsigned                  seed:1;    /* named by ioa_redis */
    unsigned                  master:1;  /* owns slots in the current map */
};


extern ngx_ioa_redis_mode_e   ngx_ioa_redis_mode;


/* ngx_ioa_redis.c */
void ngx_ioa_redis_conn_connect(ngx_ioa_redis_conn_t *rc);
void ngx_ioa_redis_conn_open(ngx_ioa_redis_conn_t *rc);
void ngx_ioa_redis_conn_failed(ngx_ioa_redis_conn_t *rc, const char *what);
void ngx_ioa_redis_conn_close(ngx_ioa_redis_conn_t *rc);
void ngx_ioa_redis_node_up(ngx_ioa_redis_node_t *node);
/* the users' hooks (ngx_ioa_redis_hooks_t), for the layer's own files */
void ngx_ioa_redis_hooks_node_up(ngx_ioa_redis_node_t *node);
void ngx_ioa_redis_hooks_cmd_ready(void);
ngx_int_t ngx_ioa_redis_sub_send(ngx_ioa_redis_node_t *node, const char *cmd,
    ngx_str_t *channel);
ngx_ioa_redis_req_t *ngx_ioa_redis_node_command(ngx_ioa_redis_node_t *node,
    ngx_ioa_redis_handler_pt handler, void *data, int argc,
    const char **argv, const size_t *argvlen);


/* ngx_ioa_sub.c: what pub/sub replies and connections mean for the
 * subscriptions */
void ngx_ioa_sub_message(ngx_str_t *name, ngx_uint_t pattern,
    ngx_str_t *channel, ngx_str_t *payload);
void ngx_ioa_sub_confirmed(ngx_ioa_redis_node_t *node, ngx_str_t *name,
    ngx_uint_t pattern);
void ngx_ioa_sub_ended(ngx_ioa_redis_node_t *node, ngx_str_t *name,
    ngx_uint_t pattern);
void ngx_ioa_sub_node_ready(ngx_ioa_redis_node_t *node);
void ngx_ioa_sub_node_lost(ngx_ioa_redis_node_t *node);
void ngx_ioa_sub_refused(ngx_ioa_redis_node_t *node, ngx_int_t slot);
void ngx_ioa_sub_map_changed(void);


/* ngx_ioa_redis_resolve.c */
void ngx_ioa_redis_resolve(ngx_ioa_redis_conn_t *rc);
void ngx_ioa_redis_resolve_cancel(ngx_ioa_redis_conn_t *rc);


/* ngx_ioa_redis_cluster.c */
ngx_int_t ngx_ioa_redis_cluster_init(ngx_cycle_t *cycle);
void ngx_ioa_redis_cluster_exit(void);
ngx_int_t ngx_ioa_redis_conn_wanted(ngx_ioa_redis_conn_t *rc);
ngx_uint_t ngx_ioa_redis_nnodes(void);
ngx_ioa_redis_node_t *ngx_ioa_redis_node(ngx_uint_t i);
ngx_ioa_redis_node_t *ngx_ioa_redis_route(ngx_int_t slot);
ngx_int_t ngx_ioa_redis_command_slot(int argc, const char **argv,
    const size_t *argvlen);
ngx_ioa_redis_node_t *ngx_ioa_redis_redirect(redisReply *reply,
    ngx_int_t *slot, ngx_uint_t *ask);
void ngx_ioa_redis_detect(ngx_ioa_redis_node_t *node);
void ngx_ioa_redis_node_lost(ngx_ioa_redis_node_t *node);


#endif /* _NGX_IOA_REDIS_H_INCLUDED_ */
