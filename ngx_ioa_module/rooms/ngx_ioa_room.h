
/*
 * Copyright (C) ioa authors
 *
 * What the files of one nginx worker's routing share, and nothing else
 * includes: rooms and subscriptions (ngx_ioa_room.c), links, catch-up and
 * fan-out (ngx_ioa_link.c), clients (ngx_ioa_client.c), observers and
 * registry events (ngx_ioa_observer.c), posting (ngx_ioa_post.c).  The
 * types they share with the rest of the module (rooms, links, clients,
 * messages) are in ngx_ioa.h.
 */


#ifndef _NGX_IOA_ROOM_H_INCLUDED_
#define _NGX_IOA_ROOM_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"


/* the local clients of one agent name (an agent may connect several times) */

typedef struct {
    ngx_str_node_t            sn;
    ngx_queue_t               clients;
    ngx_uint_t                n;
    ngx_uint_t                loaded;     /* name bytes follow */
} ngx_ioa_agent_t;


/* an envelope on its way to Redis, until post.lua answers */

typedef struct {
    ngx_queue_t               q;
    ngx_ioa_client_t         *client;
    ngx_ioa_redis_req_t      *req;
    ngx_str_t                 comm_id;
    u_char                    data[64];
} ngx_ioa_post_t;


/* ngx_ioa_room.c: rooms and their subscriptions */
ngx_ioa_room_t *ngx_ioa_room_get(ngx_str_t *comm_id, ngx_uint_t create);
void ngx_ioa_room_link_added(ngx_ioa_room_t *room);
void ngx_ioa_room_link_removed(ngx_ioa_room_t *room);

/* ngx_ioa_link.c: links, catch-up and fan-out */
void ngx_ioa_room_deliver(ngx_ioa_room_t *room, ngx_str_t *data);
ngx_int_t ngx_ioa_msg_split(ngx_str_t *data, ngx_str_t *sid,
    ngx_str_t *json);
ngx_int_t ngx_ioa_link_init(ngx_cycle_t *cycle);
ngx_int_t ngx_ioa_link(ngx_ioa_client_t *cl, ngx_str_t *comm_id,
    ngx_ioa_sid_t *after);
void ngx_ioa_link_free(ngx_ioa_link_t *lk);
void ngx_ioa_link_catchup(ngx_ioa_link_t *lk);
void ngx_ioa_link_cancel(ngx_ioa_link_t *lk);
void ngx_ioa_link_release_held(ngx_ioa_link_t *lk);
void ngx_ioa_link_resume(ngx_ioa_link_t *lk, ngx_ioa_sid_t *sid);
void ngx_ioa_links_retry(void);
ngx_ioa_msg_t *ngx_ioa_msg_create(ngx_str_t *comm_id, ngx_str_t *sid,
    ngx_str_t *json, ngx_uint_t feed);
ngx_int_t ngx_ioa_sid_cmp(ngx_ioa_sid_t *a, ngx_ioa_sid_t *b);

/* ngx_ioa_client.c: agents, observers and followers as clients */
ngx_int_t ngx_ioa_client_init(ngx_cycle_t *cycle);
ngx_ioa_agent_t *ngx_ioa_agent_get(ngx_str_t *name, ngx_uint_t create);
void ngx_ioa_client_load_rooms(ngx_ioa_client_t *cl);
void ngx_ioa_client_hold(ngx_ioa_client_t *cl, u_char *data, size_t len);
void ngx_ioa_client_control(ngx_ioa_client_t *cl, ngx_ioa_envelope_t *env,
    ngx_pool_t *pool);
void ngx_ioa_clients_retry(void);
void ngx_ioa_clients_reload_rooms(void);
void ngx_ioa_clients_presence(void);

/* ngx_ioa_observer.c: the feed of every room, and registry events */
ngx_int_t ngx_ioa_observer_init(ngx_cycle_t *cycle);
void ngx_ioa_observer_attach(ngx_ioa_client_t *cl);
void ngx_ioa_observer_detach(ngx_ioa_client_t *cl);
ngx_uint_t ngx_ioa_observed(void);
void ngx_ioa_observers_tick(void);

/* ngx_ioa_post.c: envelopes from clients into Redis */
ngx_int_t ngx_ioa_post_init(ngx_cycle_t *cycle);
void ngx_ioa_post_exit(void);


#endif /* _NGX_IOA_ROOM_H_INCLUDED_ */
