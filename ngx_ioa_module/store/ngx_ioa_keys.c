
/*
 * Copyright (C) ioa authors
 *
 * The Redis key schema: every key, channel and key prefix the module
 * names, in one place.  This is the code's half of README's "What Redis
 * holds" and follows its table's order, the {reg} keys gathered under
 * their tag.  The Lua scripts build the keys they derive from the
 * prefixes given to them (redis-scripts/), and the goal worker has its
 * own copy of the goal's keys (workers/).
 *
 * <p> is ioa_redis_prefix (it holds no "{", checked at configuration, so
 * the first "{...}" of a key is its Redis Cluster hash tag); the tags are
 * what a Cluster places by, and each is the widest set of keys that one
 * script must touch together, no wider:
 *
 *   <p>{room:<comm_id>}:meta, :members, :log, :floor, :chain, :expired,
 *   :log:rw, :log:rwq, and :ch, the room's channel
 *       a room in one slot: post.lua checks the members and the floor,
 *       appends to the log, moves the chain's head and publishes in one
 *       step; retention and deletion end a room as a whole
 *       (room_expire.lua), an erasure rewrites its log and chain.
 *       On a Cluster :ch is a shard channel in that slot, so an envelope
 *       crosses no other node.  The observers' pattern is <p>{room:*}:ch.
 *
 *   <p>{reg}:rooms:<agent>, :roomlist, :roomdue, :sweep, :agents,
 *   :agent:<name>, :stats, :seen, :online, :epoch, :observers, and the
 *   channels :events and :index
 *       the registry in one slot: registering, searching (retrieve.lua
 *       reads the agents with the index), presence and the sweep's
 *       removal of an agent touch several of them at once.  The scripts
 *       get <p>{reg}: itself and append the rest (:idx:<term>, ...).
 *
 *   <p>{conn:<name>}, <p>{lim:<kind>:<name>}
 *       one identity's connection count, one token bucket: each its own
 *       tag, as no script reads two, so the fleet's limits spread over
 *       the slots rather than load one.
 *
 *   <p>{pos:<cursor>}
 *       an SSE inbox's resume position, read and written alone.
 *
 *   <p>{goal:<id>}:meta, :fsm, :control, :inbox
 *       a goal's record and state, one slot per goal for the worker's
 *       scripts.
 *
 *   <p>{room:goal-<id>}:log, :log:rw, :log:rwq
 *       a goal's feed is a room whose comm_id is "goal-<id>": it is
 *       followed, paged and erased with the room machinery.
 *
 *   <p>{jobs}:goals, <p>{goals}:..., <p>{audit}:log, <p>{workers}:...
 *       the goal queue (a Stream with its consumer group), the goal index
 *       (goal_index.lua keeps its sets together), the audit stream and
 *       the workers' heartbeats: each a whole of its own.
 *
 * A key is written as <p>, a head (up to and with the variable part's
 * start), the variable part and a tail, so that the families below are
 * one table each and one writer.  The sends take a key in the builder
 * (ngx_ioa_key*(a, ...)); what keeps a key (a room's channel and log, a
 * request's keys, the main configuration's channels) has it written into
 * its own memory (_len()/_write(), _alloc()).
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"


typedef struct {
    ngx_str_t                 head;
    ngx_str_t                *tails;
} ngx_ioa_keys_id_t;


/* the fixed keys, by ngx_ioa_key_e */
static ngx_str_t  ngx_ioa_keys_fixed[] = {
    ngx_string("{reg}:roomlist"),
    ngx_string("{reg}:roomdue"),
    ngx_string("{reg}:sweep"),
    ngx_string("{reg}:agents"),
    ngx_string("{reg}:stats"),
    ngx_string("{reg}:seen"),
    ngx_string("{reg}:online"),
    ngx_string("{reg}:epoch"),
    ngx_string("{reg}:observers"),
    ngx_string("{reg}:events"),
    ngx_string("{reg}:index"),
    ngx_string("{reg}:"),
    ngx_string("{jobs}:goals"),
    ngx_string("{goals}:"),
    ngx_string("{audit}:log"),
    ngx_string("{workers}:")
};


/* a room's keys, by ngx_ioa_room_key_e: what follows "{room:<comm_id>" */
static ngx_str_t  ngx_ioa_keys_room[] = {
    ngx_string("}:meta"),
    ngx_string("}:members"),
    ngx_string("}:log"),
    ngx_string("}:floor"),
    ngx_string("}:chain"),
    ngx_string("}:expired"),
    ngx_string("}:log:rw"),
    ngx_string("}:log:rwq"),
    ngx_string("}:ch")
};


/* an agent's keys in the registry, by ngx_ioa_agent_key_e */
static ngx_str_t  ngx_ioa_keys_agent[] = {
    ngx_string("{reg}:rooms:"),
    ngx_string("{reg}:agent:")
};


/* a goal's keys, by ngx_ioa_goal_key_e */
static ngx_str_t  ngx_ioa_keys_goal[] = {
    ngx_string("}:meta"),
    ngx_string("}:fsm"),
    ngx_string("}:control"),
    ngx_string("}:inbox")
};


/* the keys of one room or goal, by ngx_ioa_keys_e: the head, before the
 * id, and the tails after it, by the family's own enum */
static ngx_ioa_keys_id_t  ngx_ioa_keys_ids[] = {
    { ngx_string("{room:"), ngx_ioa_keys_room },
    { ngx_string("{room:goal-"), ngx_ioa_keys_room },
    { ngx_string("{goal:"), ngx_ioa_keys_goal }
};

#define ngx_ioa_keys_room_head  ngx_ioa_keys_ids[NGX_IOA_KEYS_ROOM].head

static ngx_str_t  ngx_ioa_keys_conn_head = ngx_string("{conn:");
static ngx_str_t  ngx_ioa_keys_pos_head = ngx_string("{pos:");
static ngx_str_t  ngx_ioa_keys_tag_end = ngx_string("}");
static ngx_str_t  ngx_ioa_keys_none = ngx_null_string;
static ngx_str_t  ngx_ioa_keys_any = ngx_string("*");


static void ngx_ioa_key_args(ngx_ioa_args_t *a, ngx_str_t *head,
    ngx_str_t *id, ngx_str_t *tail);
static ngx_int_t ngx_ioa_key_make(ngx_pool_t *pool, ngx_str_t *prefix,
    ngx_str_t *head, ngx_str_t *id, ngx_str_t *tail, ngx_str_t *key);


/* the main configuration's keys: the registry's prefix and channels, the
 * observers' pattern, the discovery index's agents */

ngx_int_t
ngx_ioa_keys_conf(ngx_conf_t *cf, ngx_ioa_main_conf_t *mcf)
{
    ngx_str_t  *prefix;

    /* ngx_ioa_main_conf() is the running cycle's until this one is done */
    prefix = &mcf->redis_prefix;

    if (ngx_ioa_key_make(cf->pool, prefix,
                         &ngx_ioa_keys_fixed[NGX_IOA_KEY_REG],
                         &ngx_ioa_keys_none, &ngx_ioa_keys_none,
                         &mcf->reg_base)
           != NGX_OK
        || ngx_ioa_key_make(cf->pool, prefix,
                            &ngx_ioa_keys_fixed[NGX_IOA_KEY_EVENTS],
                            &ngx_ioa_keys_none, &ngx_ioa_keys_none,
                            &mcf->events_channel)
           != NGX_OK
        || ngx_ioa_key_make(cf->pool, prefix, &ngx_ioa_keys_room_head,
                            &ngx_ioa_keys_any,
                            &ngx_ioa_keys_room[NGX_IOA_ROOM_CH],
                            &mcf->feed_pattern)
           != NGX_OK
        || ngx_ioa_key_make(cf->pool, prefix,
                            &ngx_ioa_keys_fixed[NGX_IOA_KEY_INDEX],
                            &ngx_ioa_keys_none, &ngx_ioa_keys_none,
                            &mcf->index_channel)
           != NGX_OK
        || ngx_ioa_key_make(cf->pool, prefix,
                            &ngx_ioa_keys_fixed[NGX_IOA_KEY_AGENTS],
                            &ngx_ioa_keys_none, &ngx_ioa_keys_none,
                            &mcf->index_agents_key)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* a fixed key */

void
ngx_ioa_key(ngx_ioa_args_t *a, ngx_ioa_key_e which)
{
    ngx_ioa_key_args(a, &ngx_ioa_keys_fixed[which], &ngx_ioa_keys_none,
                     &ngx_ioa_keys_none);
}


ngx_int_t
ngx_ioa_key_alloc(ngx_pool_t *pool, ngx_ioa_key_e which, ngx_str_t *key)
{
    return ngx_ioa_key_make(pool, &ngx_ioa_main_conf()->redis_prefix,
                            &ngx_ioa_keys_fixed[which],
                            &ngx_ioa_keys_none, &ngx_ioa_keys_none, key);
}


/* a room's keys, a goal's feed's, a goal's */

void
ngx_ioa_key_id(ngx_ioa_args_t *a, ngx_ioa_keys_e keys, ngx_str_t *id,
    ngx_uint_t which)
{
    ngx_ioa_key_args(a, &ngx_ioa_keys_ids[keys].head, id,
                     &ngx_ioa_keys_ids[keys].tails[which]);
}


ngx_int_t
ngx_ioa_key_id_alloc(ngx_pool_t *pool, ngx_ioa_keys_e keys, ngx_str_t *id,
    ngx_uint_t which, ngx_str_t *key)
{
    return ngx_ioa_key_make(pool, &ngx_ioa_main_conf()->redis_prefix,
                            &ngx_ioa_keys_ids[keys].head, id,
                            &ngx_ioa_keys_ids[keys].tails[which], key);
}


size_t
ngx_ioa_key_room_len(ngx_str_t *comm_id, ngx_ioa_room_key_e which)
{
    return ngx_ioa_main_conf()->redis_prefix.len
           + ngx_ioa_keys_room_head.len + comm_id->len
           + ngx_ioa_keys_room[which].len;
}


/* ngx_ioa_key_room_len() bytes at p; the end of them */

u_char *
ngx_ioa_key_room_write(u_char *p, ngx_str_t *comm_id,
    ngx_ioa_room_key_e which)
{
    ngx_str_t  *prefix;

    prefix = &ngx_ioa_main_conf()->redis_prefix;

    p = ngx_cpymem(p, prefix->data, prefix->len);
    p = ngx_cpymem(p, ngx_ioa_keys_room_head.data, ngx_ioa_keys_room_head.len);
    p = ngx_cpymem(p, comm_id->data, comm_id->len);

    return ngx_cpymem(p, ngx_ioa_keys_room[which].data,
                      ngx_ioa_keys_room[which].len);
}


/*
 * n keys of one room, one after another in buf (size bytes), keys[i] the
 * one of which[i]: the post path's, for every envelope.  The first is
 * written whole and each next one copies its "<p>{room:<comm_id>" with
 * its own tail, no formatting: ngx_ioa_args_fmt() per key cost the post
 * path 5% more instructions per envelope (bench/callgrind.sh).  NGX_ERROR
 * if one would be longer than NGX_IOA_KEY_MAX or they do not fit.
 */

ngx_int_t
ngx_ioa_key_room_set(u_char *buf, size_t size, ngx_str_t *comm_id,
    const ngx_ioa_room_key_e *which, ngx_uint_t n, ngx_str_t *keys)
{
    u_char      *p, *last;
    size_t       base;
    ngx_uint_t   i;
    ngx_str_t   *tail;

    base = ngx_ioa_key_room_len(comm_id, which[0])
           - ngx_ioa_keys_room[which[0]].len;

    last = buf + size;
    p = buf;

    for (i = 0; i < n; i++) {
        tail = &ngx_ioa_keys_room[which[i]];

        if (base + tail->len > NGX_IOA_KEY_MAX
            || (size_t) (last - p) < base + tail->len)
        {
            return NGX_ERROR;
        }

        keys[i].data = p;

        if (i == 0) {
            p = ngx_ioa_key_room_write(p, comm_id, which[0]);

        } else {
            p = ngx_cpymem(p, buf, base);
            p = ngx_cpymem(p, tail->data, tail->len);
        }

        keys[i].len = p - keys[i].data;
    }

    return NGX_OK;
}


/* the comm_id of a room's channel, "<p>{room:<comm_id>}:ch" */

ngx_int_t
ngx_ioa_comm_id_from_channel(ngx_str_t *channel, ngx_str_t *comm_id)
{
    size_t      plen;
    ngx_str_t  *tail;

    plen = ngx_ioa_main_conf()->redis_prefix.len + ngx_ioa_keys_room_head.len;
    tail = &ngx_ioa_keys_room[NGX_IOA_ROOM_CH];

    if (channel->len <= plen + tail->len
        || ngx_strncmp(channel->data + channel->len - tail->len, tail->data,
                       tail->len)
           != 0)
    {
        return NGX_DECLINED;
    }

    comm_id->data = channel->data + plen;
    comm_id->len = channel->len - plen - tail->len;

    return NGX_OK;
}


/* an agent's keys in the registry */

void
ngx_ioa_key_agent(ngx_ioa_args_t *a, ngx_ioa_agent_key_e which,
    ngx_str_t *name)
{
    ngx_ioa_key_args(a, &ngx_ioa_keys_agent[which], name, &ngx_ioa_keys_none);
}


ngx_int_t
ngx_ioa_key_agent_alloc(ngx_pool_t *pool, ngx_ioa_agent_key_e which,
    ngx_str_t *name, ngx_str_t *key)
{
    return ngx_ioa_key_make(pool, &ngx_ioa_main_conf()->redis_prefix,
                            &ngx_ioa_keys_agent[which], name,
                            &ngx_ioa_keys_none, key);
}


/* one identity's connections across the fleet */

void
ngx_ioa_key_conn(ngx_ioa_args_t *a, ngx_str_t *name)
{
    ngx_ioa_key_args(a, &ngx_ioa_keys_conn_head, name, &ngx_ioa_keys_tag_end);
}


/* a fleet token bucket: kind 'a' an agent's posts, 'r' a room's, 't' an
 * agent's teamups (ngx_ioa_limit.c) */

void
ngx_ioa_key_limit(ngx_ioa_args_t *a, u_char kind, ngx_str_t *name)
{
    ngx_ioa_args_fmt(a, "%V{lim:%c:%V}", &ngx_ioa_main_conf()->redis_prefix,
                     kind, name);
}


/* an SSE inbox's resume position */

ngx_int_t
ngx_ioa_key_position_alloc(ngx_pool_t *pool, ngx_str_t *cursor,
    ngx_str_t *key)
{
    return ngx_ioa_key_make(pool, &ngx_ioa_main_conf()->redis_prefix,
                            &ngx_ioa_keys_pos_head, cursor,
                            &ngx_ioa_keys_tag_end, key);
}


static void
ngx_ioa_key_args(ngx_ioa_args_t *a, ngx_str_t *head, ngx_str_t *id,
    ngx_str_t *tail)
{
    ngx_ioa_args_fmt(a, "%V%V%V%V", &ngx_ioa_main_conf()->redis_prefix,
                     head, id, tail);
}


static ngx_int_t
ngx_ioa_key_make(ngx_pool_t *pool, ngx_str_t *prefix, ngx_str_t *head,
    ngx_str_t *id, ngx_str_t *tail, ngx_str_t *key)
{
    u_char  *p;

    key->len = prefix->len + head->len + id->len + tail->len;
    key->data = ngx_pnalloc(pool, key->len);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(key->data, prefix->data, prefix->len);
    p = ngx_cpymem(p, head->data, head->len);
    p = ngx_cpymem(p, id->data, id->len);
    (void) ngx_cpymem(p, tail->data, tail->len);

    return NGX_OK;
}
