
/*
 * Copyright (C) ioa authors
 *
 * Posting: an envelope from a client, over any transport, into its room.
 *
 * A frame is parsed and validated here (ngx_ioa_envelope.c does the JSON),
 * checked against the rate limits, and sent to Redis as one EVALSHA of
 * post.lua, which checks membership and the floor, appends the envelope to
 * the room's Stream, publishes it and updates the floor in one step: the
 * ACL is decided before anything is stored, and nothing is published that
 * is not stored.  The envelope reaches its room's members, the sender
 * included, through the room's channel (ngx_ioa_link.c); the script's
 * answer only tells the sender what happened: an ack with the id when it
 * asked for acks, or an error that says whether the envelope was stored.
 *
 * Until post.lua answers, the post is kept on its client's queue, so a
 * client that closes cancels the callbacks of its posts in flight.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_room.h"


/* post.lua's KEYS, then the room's channel, one of its ARGV */
#define NGX_IOA_POST_NKEYS  5
#define NGX_IOA_POST_KEYS   6


static void ngx_ioa_post_reply(redisReply *reply, void *data);


static const ngx_ioa_room_key_e  ngx_ioa_post_keys[] = {
    NGX_IOA_ROOM_MEMBERS,
    NGX_IOA_ROOM_LOG,
    NGX_IOA_ROOM_FLOOR,
    NGX_IOA_ROOM_META,
    /* the hash chain's head: declared, so that a slot migration answers
     * TRYAGAIN rather than the script failing on a key that moved */
    NGX_IOA_ROOM_CHAIN,
    NGX_IOA_ROOM_CH
};

/* scratch memory for parsing an envelope, see ngx_ioa_client_post() */
static ngx_pool_t         *ngx_ioa_post_pool;


ngx_int_t
ngx_ioa_post_init(ngx_cycle_t *cycle)
{
    ngx_ioa_post_pool = ngx_create_pool(4096, cycle->log);
    if (ngx_ioa_post_pool == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_ioa_post_exit(void)
{
    if (ngx_ioa_post_pool) {
        ngx_destroy_pool(ngx_ioa_post_pool);
        ngx_ioa_post_pool = NULL;
    }
}


/*
 * An envelope posted as name, over either transport.  In open mode a
 * client may speak as anyone (IoA's cont_input from "user"), as long as
 * the sender it names is a name; membership and the floor stay its own.
 */

ngx_int_t
ngx_ioa_envelope_read(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *name, ngx_ioa_loc_conf_t *lcf, ngx_ioa_envelope_t *env,
    ngx_ioa_error_t *err)
{
    u_char       why[NGX_IOA_NAME_WHY_LEN];
    ngx_uint_t   i;
    ngx_str_t   *speaker;

    if (ngx_ioa_envelope_parse_as(pool, data, len, name,
                                  lcf->auth == NGX_IOA_AUTH_OFF,
                                  lcf->max_json_depth, ngx_ioa_now_ms(), env,
                                  err)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (env->sender.len && ngx_ioa_name_check(&env->sender, why) != NGX_OK) {
        ngx_ioa_error_set(err, "invalid_name", "sender",
                          "\"sender\" is not a name: %s", why);
        return NGX_ERROR;
    }

    /*
     * A next_speaker that no agent could be called is a mistake the
     * sender should hear about, not a floor silently granted to nobody.
     */

    if (env->next_speaker) {
        speaker = env->next_speaker->elts;

        for (i = 0; i < env->next_speaker->nelts; i++) {
            if (ngx_ioa_name_check(&speaker[i], why) != NGX_OK) {
                ngx_ioa_error_set(err, "invalid_name", "next_speaker",
                                  "\"next_speaker\" entry %ui is not a "
                                  "name: %s", i, why);
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/* the agent side: an envelope or a control frame from a client */

void
ngx_ioa_client_post(ngx_ioa_client_t *cl, u_char *data, size_t len)
{
    ngx_int_t            rc;
    ngx_msec_t           retry;
    ngx_pool_t          *pool;
    ngx_ioa_post_t      *post;
    ngx_ioa_error_t      err;
    ngx_ioa_envelope_t   env;

    /*
     * One scratch pool per worker, reset after every envelope instead of a
     * pool created and destroyed for each: ngx_create_pool() aligns its
     * block with posix_memalign(), a slow path of malloc that was a visible
     * share of the cost of an envelope.  Nothing parsed here outlives this
     * call: the command sent to Redis is a copy.
     */

    if (cl->expired) {
        /* its token is over; the close waits only for posts in flight */
        ngx_ioa_error_set(&err, "token_expired", NULL,
                          "the connection's token expired: nothing more is "
                          "accepted on it; reconnect with a fresh token");
        ngx_ioa_client_error(cl, &err, NULL);
        return;
    }

    pool = ngx_ioa_post_pool;

    rc = ngx_ioa_envelope_read(pool, data, len, &cl->name, cl->lcf, &env,
                               &err);

    if (rc != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, NULL);
        goto done;
    }

    if (cl->wait_resume) {
        /* the first frame: a resume sets where the rooms start, anything
         * else means none is coming */
        cl->wait_resume = 0;

        if (env.is_control) {
            ngx_ioa_client_control(cl, &env, pool);
            ngx_ioa_client_load_rooms(cl);
            goto done;
        }

        ngx_ioa_client_load_rooms(cl);
    }

    if (env.is_control) {
        ngx_ioa_client_control(cl, &env, pool);
        goto done;
    }

    /*
     * An agent that speaks at once (its first envelope right behind the
     * handshake) must get the echo of that envelope, which is appended after
     * it connected.  Its rooms' starting point is the Redis time that loads
     * them; on a Redis Cluster that is another node than the room's, so the
     * envelope could be appended before that time and be taken for history.
     * A valid envelope is therefore held until the rooms are loaded, then
     * posted in order (ngx_ioa_client_replay), bounded like the send queue;
     * errors and control frames are answered at once, as always.
     */

    if (!cl->rooms_loaded && cl->kind == NGX_IOA_CLIENT_AGENT) {
        ngx_ioa_client_hold(cl, data, len);
        goto done;
    }

    /* over ioa_limit_rate or ioa_limit_room_rate: refused, not stored, the
     * connection stays */
    if (ngx_ioa_limit_post(&cl->name, &env.comm_id, &retry, &err) != NGX_OK) {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &env.comm_id);
        goto done;
    }

    post = ngx_alloc(sizeof(ngx_ioa_post_t), cl->log);
    if (post == NULL) {
        goto done;
    }

    post->client = cl;
    post->comm_id.len = ngx_min(env.comm_id.len, sizeof(post->data));
    post->comm_id.data = post->data;
    ngx_memcpy(post->data, env.comm_id.data, post->comm_id.len);

    post->req = ngx_ioa_post_send(&cl->name, &env, ngx_ioa_post_reply, post);

    if (post->req == NULL) {
        ngx_free(post);
        ngx_ioa_error_set(&err, "redis_unavailable", NULL,
                          "the hub cannot reach Redis; the envelope was "
                          "not stored, send it again later");
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &env.comm_id);
        goto done;
    }

    if (cl->posts.next == NULL) {
        ngx_queue_init(&cl->posts);
    }

    ngx_ioa_linger_note();

    ngx_queue_insert_tail(&cl->posts, &post->q);

done:

    ngx_reset_pool(pool);
}


/*
 * runs post.lua: membership check, floor check, append to the room's Stream,
 * publish and floor update, in one step inside Redis.  The type and the
 * next_speaker names go along with every envelope: which types are turns is
 * post.lua's to decide, in one place, and it reads no floor key for the
 * others.
 */

ngx_ioa_redis_req_t *
ngx_ioa_post_send(ngx_str_t *name, ngx_ioa_envelope_t *env,
    ngx_ioa_redis_handler_pt handler, void *data)
{
    u_char                buf[NGX_IOA_POST_KEYS * NGX_IOA_KEY_MAX];
    u_char                maxlen[NGX_INT_T_LEN], type[NGX_INT_T_LEN];
    ngx_str_t             keys[NGX_IOA_POST_KEYS], *speaker;
    ngx_uint_t            i, n;
    const char           *flags;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_ioa_main_conf();

    /* the room's keys in buf, which the builder points to: this runs for
     * every envelope, and the schema writes them with no formatting */

    if (ngx_ioa_key_room_set(buf, sizeof(buf), &env->comm_id,
                             ngx_ioa_post_keys, NGX_IOA_POST_KEYS, keys)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "ioa: room key for \"%V\" too long", &env->comm_id);
        return NULL;
    }

    ngx_ioa_args_init(&a);

    for (i = 0; i < NGX_IOA_POST_NKEYS; i++) {
        ngx_ioa_args_str(&a, &keys[i]);
    }

    /* ARGV */

    ngx_ioa_args_str(&a, name);
    ngx_ioa_args_str(&a, &env->json);
    ngx_ioa_args_buf(&a, maxlen,
                     ngx_sprintf(maxlen, "%ui", mcf->room_log_maxlen)
                     - maxlen);
    ngx_ioa_args_str(&a, &keys[NGX_IOA_POST_NKEYS]);     /* the channel */
    ngx_ioa_args_buf(&a, type,
                     (env->type == NGX_IOA_TYPE_NONE)
                     ? 0 : (size_t) (ngx_sprintf(type, "%i", env->type)
                                     - type));

    /* on a Cluster the room's channel is a shard channel, and observers
     * anywhere want the plain copy */
    if (!ngx_ioa_redis_cluster()) {
        flags = "";

    } else if (ngx_ioa_observed()) {
        flags = "sf";

    } else {
        flags = "s";
    }

    ngx_ioa_args_cstr(&a, flags);

    /* the next_speaker names: IoA addresses at most a team, so the
     * builder's stack space holds them but for a long list */

    n = env->next_speaker ? env->next_speaker->nelts : 0;
    speaker = n ? env->next_speaker->elts : NULL;

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &speaker[i]);
    }

    return ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_POST, handler, data,
                                     NGX_IOA_POST_NKEYS, &a);
}


/* maps post.lua's answer to an HTTP status and, unless 200, an error */

ngx_uint_t
ngx_ioa_post_result(redisReply *reply, ngx_str_t *name, ngx_str_t *comm_id,
    ngx_ioa_error_t *err, ngx_msec_t *retry)
{
    u_char     *p;
    ngx_str_t   code, text, next;

    *retry = 0;

    if (ngx_ioa_redis_error(reply, &code, &text) == NGX_OK) {
        return NGX_HTTP_OK;
    }

    if (reply == NULL) {
        ngx_ioa_error_set(err, "redis_unavailable", NULL,
                          "Redis did not confirm the envelope; it may or "
                          "may not be stored: resume from your last id "
                          "before sending it again");
        *retry = 1000;
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    if (code.len == 9 && ngx_strncmp(code.data, "NOTMEMBER", 9) == 0) {
        ngx_ioa_error_set(err, "not_member", "comm_id",
                          "\"%V\" is not a member of room \"%V\"; the "
                          "envelope was not stored", name, comm_id);
        return NGX_HTTP_FORBIDDEN;
    }

    if (code.len == 11 && ngx_strncmp(code.data, "NOTYOURTURN", 11) == 0) {

        /* "<sender> does not have the floor; next: <a>,<b>": the last
         * "; next: " starts the list (a name holding one only makes the
         * message read oddly) */

        next.len = 0;
        next.data = text.data;

        for (p = text.data + text.len; p - text.data >= 8; p--) {
            if (ngx_strncmp(p - 8, "; next: ", 8) == 0) {
                next.data = p;
                next.len = text.data + text.len - p;
                break;
            }
        }

        ngx_ioa_error_set(err, "not_your_turn", "sender",
                          "\"%V\" does not have the floor in room \"%V\"; "
                          "the envelope was not stored: send it again once "
                          "an envelope names you in next_speaker (next: %V)",
                          name, comm_id, &next);
        return NGX_HTTP_CONFLICT;
    }

    if (code.len == 6 && ngx_strncmp(code.data, "NOROOM", 6) == 0) {
        ngx_ioa_error_set(err, "unknown_room", "comm_id",
                          "there is no room \"%V\"; create one with "
                          "/teamup", comm_id);
        return NGX_HTTP_NOT_FOUND;
    }

    return ngx_ioa_redis_refusal(reply, err, retry);
}


static void
ngx_ioa_post_reply(redisReply *reply, void *data)
{
    ngx_ioa_post_t *post = data;

    u_char            *p, buf[256];
    ngx_str_t          s;
    ngx_msec_t         retry;
    ngx_ioa_error_t    err;
    ngx_ioa_client_t  *cl;

    cl = post->client;
    ngx_queue_remove(&post->q);

    if (ngx_ioa_post_result(reply, &cl->name, &post->comm_id, &err, &retry)
        != NGX_HTTP_OK)
    {
        ngx_ioa_stat_refused(&err.code);
        ngx_ioa_client_error(cl, &err, &post->comm_id);
        ngx_free(post);
        ngx_ioa_expiry_posted(cl);
        return;
    }

    ngx_ioa_stat_add(NGX_IOA_STAT_POSTED + cl->transport->via, 1);

    if (cl->acks && reply->type == REDIS_REPLY_STRING) {
        p = ngx_snprintf(buf, sizeof(buf),
                         "{\"op\":\"ack\",\"comm_id\":\"%V\",\"id\":\"%*s\"}",
                         &post->comm_id, reply->len, reply->str);
        s.data = buf;
        s.len = p - buf;
        (void) cl->transport->send_text(cl, &s);
    }

    ngx_free(post);

    /* a connection whose token expired was waiting for this answer */
    ngx_ioa_expiry_posted(cl);
}
