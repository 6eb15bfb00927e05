
/*
 * Copyright (C) ioa authors
 *
 * How the discovery index (ngx_ioa_index.c) follows Redis.
 *
 * One worker per instance keeps the index: the keeper.  It holds a lease
 * in the zone (its pid and an expiry, renewed every second, taken over by
 * another worker once it is NGX_IOA_IXS_LEASE old or let go when the
 * worker exits), so an instance has one keeper whatever its workers do,
 * and a new one within seconds of a crash or a reload.
 *
 * The keeper subscribes to the registry's shard channel B..'index' (a
 * subscription of the SHARD kind, store/ngx_ioa_sub.c: SSUBSCRIBE on a
 * standalone Redis too, since the scripts SPUBLISH, which on a Cluster
 * stays on the registry's node).  The scripts that change what discovery shows
 * publish there:
 *
 *   "c<name>"                            register.lua, agent_forget.lua,
 *                                        rep_record.lua: the agent changed;
 *   "p<holder>\n<expiry>\n<name>\n..."   presence.lua: the holder holds the
 *                                        names until expiry (0: lets them
 *                                        go).
 *
 * A change is read back whole (index_fetch.lua "names", the changes of one
 * event-loop turn in one call) and put in place of the index's copy; a
 * presence event is applied as it is.  Both are idempotent, and replies
 * come in the order the commands were sent, so the index converges on
 * Redis's state whatever the interleaving.
 *
 * What the channel cannot tell is what happened while nobody listened.  So
 * whenever the subscription starts (the keeper's first, after Redis or the
 * pub/sub connection came back, after a failover, after a reload that made
 * another worker keeper), the keeper refreshes: it reads every agent again
 * (index_fetch.lua "scan", NGX_IOA_IXS_BATCH at a time, so that Redis is
 * never held for long) while events keep being applied, and at the end
 * drops the agents Redis no longer has (ngx_ioa_ix_refresh_end).  A fetch
 * that fails (Redis went away) asks for a refresh too.
 *
 * Nor does the channel tell of a FLUSHALL, or of a Redis restored from an
 * older dump without the connection noticing.  So the keeper also reads
 * B..'epoch' every second (SET NX GET: whoever finds it missing writes a
 * random one); an epoch other than the one it saw last means the data is
 * not the data it followed, and it refreshes.
 *
 * The bound on staleness, as the README states it: a change is in the index
 * one Redis round trip after its event; after the subscription (re)starts,
 * the index is exact again when the refresh ends (its length is the
 * ioa_discovery_index_build_seconds metric).  One race is left: a presence
 * event that overtakes the read of the same agent in a refresh or a change
 * is undone by that read, and the next heartbeat (ioa_presence_ttl / 6
 * later at most) or expiry corrects it.  Until the first refresh ends,
 * queries go to Redis (retrieve.lua).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"
#include "ngx_ioa_index.h"

#include <sys/random.h>


/* the keeper's lease and how often it renews it */
#define NGX_IOA_IXS_LEASE      3000
#define NGX_IOA_IXS_RENEW      1000

/* agents read per index_fetch.lua call: about a millisecond of Redis */
#define NGX_IOA_IXS_BATCH      "200"

/* changed agents read back per call */
#define NGX_IOA_IXS_NAMES      256

/* fields per agent in index_fetch.lua's reply */
#define NGX_IOA_IXS_TUPLE      15


typedef enum {
    NGX_IOA_IXS_REFRESH_NONE = 0,
    NGX_IOA_IXS_REFRESH_WANTED,
    NGX_IOA_IXS_REFRESH_RUNNING
} ngx_ioa_ixs_refresh_e;


typedef struct {
    ngx_event_t               timer;
    ngx_event_t               flush;          /* posted: read changes */
    ngx_uint_t                keeping;
    ngx_ioa_sub_t             sub;            /* the registry's channel */
    ngx_ioa_ixs_refresh_e     refresh;
    ngx_msec_t                started;
    ngx_uint_t                seq;            /* of the running refresh */
    u_char                    cursor[NGX_INT64_LEN + 1];
    size_t                    cursor_len;

    ngx_uint_t                epoch_req;      /* SET NX GET in flight */
    u_char                    epoch_new[16];

    ngx_str_t                 changed[NGX_IOA_IXS_NAMES];
    ngx_uint_t                nchanged;
} ngx_ioa_ixs_t;


static void ngx_ioa_ixs_tick(ngx_event_t *ev);
static ngx_uint_t ngx_ioa_ixs_lease(ngx_ioa_ix_sh_t *sh);
static void ngx_ioa_ixs_release(void);
static void ngx_ioa_ixs_refresh_next(void);
static void ngx_ioa_ixs_refresh_done(redisReply *reply, void *data);
static void ngx_ioa_ixs_flush(ngx_event_t *ev);
static void ngx_ioa_ixs_fetched(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_ixs_apply(redisReply *reply, ngx_log_t *log);
static ngx_int_t ngx_ioa_ixs_put(redisReply **f, ngx_log_t *log);
static void ngx_ioa_ixs_presence(ngx_str_t *msg);
static uint64_t ngx_ioa_ixs_count(redisReply *r);
static void ngx_ioa_ixs_epoch(void);
static void ngx_ioa_ixs_epoch_done(redisReply *reply, void *data);
static void ngx_ioa_ixs_message(ngx_ioa_sub_t *sub, ngx_str_t *channel,
    ngx_str_t *msg);
static void ngx_ioa_ixs_ready(ngx_ioa_sub_t *sub);


static ngx_ioa_ixs_t  ngx_ioa_ixs;


/* what the index hears from the Redis layer: its own channel; a lost
 * subscription is subscribed again, and ready refreshes */

static const ngx_ioa_sub_handler_t  ngx_ioa_ixs_sub_handler = {
    ngx_ioa_ixs_message,
    ngx_ioa_ixs_ready,
    NULL,                                  /* lost */
    NULL                                   /* gone */
};


void
ngx_ioa_index_init_process(ngx_cycle_t *cycle)
{
    ngx_ioa_main_conf_t  *mcf;

    ngx_memzero(&ngx_ioa_ixs, sizeof(ngx_ioa_ixs_t));

    if (ngx_ioa_ix_ctx() == NULL) {
        return;
    }

    mcf = ngx_ioa_main_conf();

    ngx_ioa_sub_init(&ngx_ioa_ixs.sub, NGX_IOA_SUB_SHARD,
                     &mcf->index_channel,
                     ioa_key_slot(mcf->index_channel.data,
                                  mcf->index_channel.len),
                     &ngx_ioa_ixs_sub_handler);

    ngx_ioa_ixs.timer.handler = ngx_ioa_ixs_tick;
    ngx_ioa_ixs.timer.log = cycle->log;
    ngx_ioa_ixs.timer.data = &ngx_ioa_ixs;
    ngx_ioa_ixs.timer.cancelable = 1;

    ngx_ioa_ixs.flush.handler = ngx_ioa_ixs_flush;
    ngx_ioa_ixs.flush.log = cycle->log;

    /* soon, not at once: the Redis connections are being made */
    ngx_add_timer(&ngx_ioa_ixs.timer, 100);
}


void
ngx_ioa_index_exit_process_sync(void)
{
    if (ngx_ioa_ix_ctx() == NULL) {
        return;
    }

    ngx_ioa_ixs_release();

    if (ngx_ioa_ixs.timer.timer_set) {
        ngx_del_timer(&ngx_ioa_ixs.timer);
    }

    if (ngx_ioa_ixs.flush.posted) {
        ngx_delete_posted_event(&ngx_ioa_ixs.flush);
    }
}


static void
ngx_ioa_ixs_tick(ngx_event_t *ev)
{
    ngx_ioa_ix_sh_t  *sh;

    sh = ngx_ioa_ix_ctx()->sh;

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        /* a worker on its way out hands the index over now */
        ngx_ioa_ixs_release();
        return;
    }

    ngx_ioa_ixs.keeping = ngx_ioa_ixs_lease(sh);

    if (ngx_ioa_ixs.keeping) {

        /* subscribed now, or as soon as pub/sub is there */
        ngx_ioa_sub_start(&ngx_ioa_ixs.sub);

        if (ngx_ioa_sub_active(&ngx_ioa_ixs.sub)) {
            ngx_ioa_ixs_epoch();

            if (ngx_ioa_ixs.refresh == NGX_IOA_IXS_REFRESH_WANTED) {
                ngx_ioa_ixs_refresh_next();
            }
        }

    } else if (ngx_ioa_ixs.sub.want) {
        /* the lease went to another worker (this one was too slow to renew
         * it): that one refreshes; stop listening */
        (void) ngx_ioa_sub_stop(&ngx_ioa_ixs.sub);
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_NONE;
    }

    ngx_add_timer(ev, NGX_IOA_IXS_RENEW);
}


/* this worker is (or becomes) the keeper */

static ngx_uint_t
ngx_ioa_ixs_lease(ngx_ioa_ix_sh_t *sh)
{
    int64_t           now;
    ngx_atomic_uint_t  keeper;

    now = ngx_ioa_now_ms();
    keeper = sh->keeper;

    if (keeper == (ngx_atomic_uint_t) ngx_pid) {
        sh->keeper_until = (ngx_atomic_uint_t) (now + NGX_IOA_IXS_LEASE);
        return 1;
    }

    if ((keeper == 0 || (int64_t) sh->keeper_until < now)
        && ngx_atomic_cmp_set(&sh->keeper, keeper, (ngx_atomic_uint_t) ngx_pid))
    {
        sh->keeper_until = (ngx_atomic_uint_t) (now + NGX_IOA_IXS_LEASE);

        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "ioa discovery index: this worker keeps it");

        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_NONE;
        return 1;
    }

    return 0;
}


static void
ngx_ioa_ixs_release(void)
{
    ngx_ioa_ix_sh_t  *sh;

    sh = ngx_ioa_ix_ctx()->sh;

    if (sh->keeper == (ngx_atomic_uint_t) ngx_pid) {
        sh->keeper_until = 0;
        (void) ngx_atomic_cmp_set(&sh->keeper, (ngx_atomic_uint_t) ngx_pid, 0);
    }

    ngx_ioa_ixs.keeping = 0;
}


static void
ngx_ioa_ixs_epoch(void)
{
    u_char          rnd[8], epoch[16];
    ngx_ioa_args_t  a;

    if (ngx_ioa_ixs.epoch_req) {
        return;
    }

    if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t) sizeof(rnd)) {
        /* no entropy yet (early boot): an epoch only has to differ from
         * the one before it, which this process' pid and the time do */
        uint32_t  pid = (uint32_t) ngx_pid, ms = (uint32_t) ngx_current_msec;

        ngx_memcpy(rnd, &pid, sizeof(pid));
        ngx_memcpy(rnd + sizeof(pid), &ms, sizeof(ms));
    }

    ngx_hex_dump(epoch, rnd, sizeof(rnd));

    ngx_ioa_args_init(&a);
    ngx_ioa_args_cstr(&a, "SET");
    ngx_ioa_key(&a, NGX_IOA_KEY_EPOCH);
    ngx_ioa_args_buf(&a, epoch, sizeof(epoch));
    ngx_ioa_args_cstr(&a, "NX");
    ngx_ioa_args_cstr(&a, "GET");

    ngx_memcpy(ngx_ioa_ixs.epoch_new, epoch, sizeof(epoch));

    if (ngx_ioa_redis_command_args(ngx_ioa_ixs_epoch_done, NULL, &a) != NULL)
    {
        ngx_ioa_ixs.epoch_req = 1;
    }
}


static void
ngx_ioa_ixs_epoch_done(redisReply *reply, void *data)
{
    u_char           *epoch;
    ngx_ioa_ix_sh_t  *sh;

    ngx_ioa_ixs.epoch_req = 0;

    if (reply == NULL || !ngx_ioa_ixs.keeping) {
        return;
    }

    if (reply->type == REDIS_REPLY_NIL) {
        epoch = ngx_ioa_ixs.epoch_new;   /* it was missing: ours now */

    } else if (reply->type == REDIS_REPLY_STRING && reply->len == 16) {
        epoch = (u_char *) reply->str;

    } else {
        return;
    }

    sh = ngx_ioa_ix_ctx()->sh;

    if (ngx_memcmp(sh->epoch, epoch, 16) == 0) {
        return;
    }

    if (sh->epoch[0] && ngx_ioa_ixs.refresh == NGX_IOA_IXS_REFRESH_NONE) {
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "ioa discovery index: the registry in Redis is not "
                      "the one it followed (flushed or restored); reading "
                      "it again");
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
        ngx_ioa_ixs_refresh_next();
    }

    ngx_memcpy(sh->epoch, epoch, 16);
}


/* (re)subscribed: whatever happened while nobody listened is read whole */

static void
ngx_ioa_ixs_ready(ngx_ioa_sub_t *sub)
{
    ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                  "ioa discovery index: following %V; reading the registry",
                  &ngx_ioa_main_conf()->index_channel);

    /* whatever happened before now is read whole */
    ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
    ngx_ioa_ixs_refresh_next();
}


static void
ngx_ioa_ixs_message(ngx_ioa_sub_t *sub, ngx_str_t *channel, ngx_str_t *msg)
{
    ngx_str_t  name;

    if (!ngx_ioa_ixs.keeping || msg->len < 2)
    {
        return;
    }

    if (msg->data[0] == 'p') {
        ngx_ioa_ixs_presence(msg);
        return;
    }

    if (msg->data[0] != 'c') {
        return;
    }

    if (ngx_ioa_ixs.nchanged == NGX_IOA_IXS_NAMES) {
        ngx_ioa_ixs_flush(&ngx_ioa_ixs.flush);
    }

    name.len = msg->len - 1;
    name.data = ngx_alloc(name.len, ngx_cycle->log);

    if (name.data == NULL) {
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
        return;
    }

    ngx_memcpy(name.data, msg->data + 1, name.len);
    ngx_ioa_ixs.changed[ngx_ioa_ixs.nchanged++] = name;

    if (!ngx_ioa_ixs.flush.posted) {
        ngx_post_event(&ngx_ioa_ixs.flush, &ngx_posted_events);
    }
}


/* read back the agents that changed during this event-loop turn */

static void
ngx_ioa_ixs_flush(ngx_event_t *ev)
{
    ngx_uint_t            i, n;
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    if (ev->posted) {
        ngx_delete_posted_event(ev);
    }

    n = ngx_ioa_ixs.nchanged;

    if (n == 0) {
        return;
    }

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &mcf->index_agents_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_cstr(&a, "names");

    for (i = 0; i < n; i++) {
        ngx_ioa_args_str(&a, &ngx_ioa_ixs.changed[i]);
    }

    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_INDEX_FETCH,
                                  ngx_ioa_ixs_fetched, NULL, 1, &a)
        == NULL)
    {
        /* not sent: what changed is read with everything else */
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
    }

    for (i = 0; i < n; i++) {
        ngx_free(ngx_ioa_ixs.changed[i].data);
    }

    ngx_ioa_ixs.nchanged = 0;
}


/* index_fetch.lua's reply got by another part (/register reads its agent
 * back before it answers) */

void
ngx_ioa_index_apply(redisReply *reply)
{
    if (ngx_ioa_ix_ctx() != NULL) {
        (void) ngx_ioa_ixs_apply(reply, ngx_cycle->log);
    }
}


static void
ngx_ioa_ixs_fetched(redisReply *reply, void *data)
{
    if (ngx_ioa_ixs_apply(reply, ngx_cycle->log) != NGX_OK) {
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
    }
}


/*
 * A refresh: index_fetch.lua "scan" batch after batch; the cursor of the
 * reply asks for the next.
 */

static void
ngx_ioa_ixs_refresh_next(void)
{
    ngx_ioa_args_t        a;
    ngx_ioa_main_conf_t  *mcf;

    if (ngx_ioa_ixs.refresh == NGX_IOA_IXS_REFRESH_WANTED) {
        ngx_ioa_ix_refresh_start();
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_RUNNING;
        ngx_ioa_ixs.seq++;
        ngx_ioa_ixs.started = ngx_current_msec;
        ngx_ioa_ixs.cursor[0] = '0';
        ngx_ioa_ixs.cursor_len = 1;
    }

    mcf = ngx_ioa_main_conf();

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &mcf->index_agents_key);
    ngx_ioa_args_str(&a, &mcf->reg_base);
    ngx_ioa_args_cstr(&a, "scan");
    ngx_ioa_args_buf(&a, ngx_ioa_ixs.cursor, ngx_ioa_ixs.cursor_len);
    ngx_ioa_args_cstr(&a, NGX_IOA_IXS_BATCH);

    /* the reply of a refresh that was started over is not this one's */
    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_INDEX_FETCH,
                                  ngx_ioa_ixs_refresh_done,
                                  (void *) (uintptr_t) ngx_ioa_ixs.seq, 1, &a)
        == NULL)
    {
        /* Redis is away: the next tick starts over */
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
    }
}


static void
ngx_ioa_ixs_refresh_done(redisReply *reply, void *data)
{
    redisReply  *cur;

    if (ngx_ioa_ixs.refresh != NGX_IOA_IXS_REFRESH_RUNNING
        || (uintptr_t) data != ngx_ioa_ixs.seq)
    {
        return;
    }

    if (ngx_ioa_ixs_apply(reply, ngx_cycle->log) != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "ioa discovery index: reading the registry failed; "
                      "trying again");
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
        return;
    }

    cur = reply->element[0];

    if (cur->len == 1 && cur->str[0] == '0') {
        ngx_ioa_ix_refresh_end(ngx_current_msec - ngx_ioa_ixs.started);
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_NONE;

        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "ioa discovery index: %ui agents read from Redis in "
                      "%M ms", ngx_ioa_ix_ctx()->sh->nagents,
                      ngx_current_msec - ngx_ioa_ixs.started);
        return;
    }

    if (cur->len > NGX_INT64_LEN) {
        ngx_ioa_ixs.refresh = NGX_IOA_IXS_REFRESH_WANTED;
        return;
    }

    ngx_memcpy(ngx_ioa_ixs.cursor, cur->str, cur->len);
    ngx_ioa_ixs.cursor_len = cur->len;

    ngx_ioa_ixs_refresh_next();
}


/* index_fetch.lua's reply into the index */

static ngx_int_t
ngx_ioa_ixs_apply(redisReply *reply, ngx_log_t *log)
{
    size_t       i;
    ngx_str_t    name;
    redisReply  **f;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements % NGX_IOA_IXS_TUPLE != 1
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "ioa discovery index: index_fetch.lua: %*s",
                          (size_t) reply->len, reply->str);
        }

        return NGX_ERROR;
    }

    for (i = 1; i < reply->elements; i += NGX_IOA_IXS_TUPLE) {
        f = &reply->element[i];

        if (f[0]->type != REDIS_REPLY_STRING || f[0]->len != 1) {
            return NGX_ERROR;
        }

        if (f[0]->str[0] == '1') {
            if (ngx_ioa_ixs_put(f, log) != NGX_OK) {
                return NGX_OK;   /* full: said, and the index is off */
            }

            continue;
        }

        name.data = (u_char *) f[1]->str;
        name.len = f[1]->len;
        ngx_ioa_ix_delete(&name);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_ixs_put(redisReply **f, ngx_log_t *log)
{
    u_char              *p, *end, *sp;
    int64_t              expiry;
    ngx_uint_t           i, n;
    ngx_str_t            holders[64];
    int64_t              expiries[64];
    ngx_ioa_ix_input_t   in;

    for (i = 0; i < NGX_IOA_IXS_TUPLE; i++) {
        if (f[i]->type != REDIS_REPLY_STRING) {
            return NGX_OK;
        }
    }

#define ngx_ioa_ixs_str(s, i)                                                 \
    (s).data = (u_char *) f[i]->str; (s).len = f[i]->len

    ngx_memzero(&in, sizeof(ngx_ioa_ix_input_t));
    ngx_ioa_ixs_str(in.name, 1);
    ngx_ioa_ixs_str(in.type, 2);
    ngx_ioa_ixs_str(in.desc, 3);
    ngx_ioa_ixs_str(in.tags, 4);

#undef ngx_ioa_ixs_str

    in.protocol = f[5]->len == 1 && f[5]->str[0] == '1';

    for (i = 0; i < 4; i++) {
        in.rec[i] = ngx_ioa_ixs_count(f[6 + i]);
    }

    in.latency_ms = ngx_ioa_ixs_count(f[10]);
    in.timed = ngx_ioa_ixs_count(f[11]);

    /* "holder expiry holder expiry ..." (holder ids have no space) */
    p = (u_char *) f[12]->str;
    end = p + f[12]->len;
    n = 0;

    while (p < end && n < 64) {
        sp = ngx_strlchr(p, end, ' ');
        if (sp == NULL) {
            break;
        }

        holders[n].data = p;
        holders[n].len = sp - p;
        p = sp + 1;

        sp = ngx_strlchr(p, end, ' ');
        if (sp == NULL) {
            sp = end;
        }

        if (ngx_ioa_json_int(p, sp - p, &expiry) == NGX_OK) {
            expiries[n++] = expiry;
        }

        p = sp + 1;
    }

    in.holders = holders;
    in.expiries = expiries;
    in.nholders = n;

    in.vec_model.data = (u_char *) f[13]->str;
    in.vec_model.len = f[13]->len;
    in.vec.data = (u_char *) f[14]->str;
    in.vec.len = f[14]->len;

    return ngx_ioa_ix_put(&in, log);
}


static uint64_t
ngx_ioa_ixs_count(redisReply *r)
{
    ngx_int_t  n;

    n = ngx_atoi((u_char *) r->str, r->len);

    return n == NGX_ERROR ? 0 : (uint64_t) n;
}


/* "p<holder>\n<expiry>\n<name>\n<name>..." */

static void
ngx_ioa_ixs_presence(ngx_str_t *msg)
{
    u_char      *p, *end, *nl;
    int64_t      expiry;
    ngx_str_t    holder, names[256];
    ngx_uint_t   n;

    p = msg->data + 1;
    end = msg->data + msg->len;

    nl = ngx_strlchr(p, end, '\n');
    if (nl == NULL) {
        return;
    }

    holder.data = p;
    holder.len = nl - p;
    p = nl + 1;

    nl = ngx_strlchr(p, end, '\n');
    if (nl == NULL) {
        nl = end;
    }

    if (ngx_ioa_json_int(p, nl - p, &expiry) != NGX_OK) {
        return;
    }

    p = nl + 1;
    n = 0;

    while (p < end) {
        nl = ngx_strlchr(p, end, '\n');
        if (nl == NULL) {
            nl = end;
        }

        names[n].data = p;
        names[n].len = nl - p;
        p = nl + 1;

        if (++n == 256) {
            ngx_ioa_ix_presence(&holder, expiry, names, n);
            n = 0;
        }
    }

    if (n) {
        ngx_ioa_ix_presence(&holder, expiry, names, n);
    }
}
