/*
 * ioa-worker: a room as the coordinator sees it: post into it, read it.
 *
 * Posting goes through the hub's post.lua with the same keys and arguments
 * nginx uses (membership check, XADD, PUBLISH in one script), so the
 * coordinator's envelopes get the same ACL, the same global order and the
 * same resume guarantees as any agent's, and nginx delivers them like its
 * own.  The envelope is built by the caller already normalised, starting
 * {"sender":..,"timestamp":.., as the hub stores what clients send.  Its
 * type and next_speaker go along, as nginx sends them, so the room's floor
 * follows the coordinator's turns (the coordinator created the room and
 * may always speak; the agents it addresses speak next).
 *
 * On a Redis Cluster the envelope goes out on the room's shard channel
 * (SPUBLISH), and also PUBLISHed while some hub has an observer: the hub
 * keeps those in P{reg}:observers (see ngx_ioa_observer.c), which is counted
 * here at most every IW_ROOM_OBSERVERS_MS.
 *
 * Reading is XREAD on the room's Stream after an id, without BLOCK: a goal
 * never holds a read open while it waits (the room's channel wakes it,
 * pubsub.c).  At most IW_ROOM_BATCH entries per call.
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


#define IW_ROOM_BATCH         128
#define IW_ROOM_OBSERVERS_MS  5000


static const char *iw_room_publish(const iw_conf_t *conf);


/* post.lua's publish mode: "" PUBLISH; on a Cluster "s" SPUBLISH, "sf"
 * both, while a hub has observers */

static const char *
iw_room_publish(const iw_conf_t *conf)
{
    redisReply  *r;

    static int        observed;
    static long long  checked;

    if (!iw_redis_cluster()) {
        return "";
    }

    if (ioa_mono_ms() - checked >= IW_ROOM_OBSERVERS_MS || checked == 0) {
        r = iw_redis_cmd("ZCOUNT %sobservers (%lld +inf", conf->reg_base,
                         ioa_wall_ms());

        if (r && r->type == REDIS_REPLY_INTEGER) {
            observed = r->integer > 0;
            checked = ioa_mono_ms();
        }

        if (r) {
            freeReplyObject(r);
        }
    }

    return observed ? "sf" : "s";
}


/* IW_OK (*sid the new id), IW_ERROR, or 1 when post.lua refused (NOROOM,
 * NOTMEMBER, NOTYOURTURN; *sid is then the reason).  type < 0: none;
 * next_speaker: JSON, a string or an array of strings. */

int
iw_room_post(const iw_conf_t *conf, const char *comm_id, const char *json,
    int type, const char *next_speaker, char **sid)
{
    int          rc;
    size_t       i;
    yajl_val     ns, v;
    iw_args_t    a;
    redisReply  *r;

    *sid = NULL;

    iw_args_init(&a);
    iw_args_addf(&a, "%s{room:%s}:members", conf->prefix, comm_id);
    iw_args_addf(&a, "%s{room:%s}:log", conf->prefix, comm_id);
    iw_args_addf(&a, "%s{room:%s}:floor", conf->prefix, comm_id);
    iw_args_addf(&a, "%s{room:%s}:meta", conf->prefix, comm_id);
    /* the hash chain's head, declared as nginx does (slot migrations) */
    iw_args_addf(&a, "%s{room:%s}:chain", conf->prefix, comm_id);
    iw_args_add(&a, conf->name);
    iw_args_add(&a, json);
    iw_args_add(&a, "0");
    iw_args_addf(&a, "%s{room:%s}:ch", conf->prefix, comm_id);

    if (type >= 0) {
        iw_args_addf(&a, "%d", type);

    } else {
        iw_args_add(&a, "");
    }

    /* on a Redis Cluster the room's channel is a shard channel */
    iw_args_add(&a, iw_room_publish(conf));

    ns = next_speaker ? ioa_json_parse(next_speaker, strlen(next_speaker))
                      : NULL;

    if (ns && YAJL_IS_STRING(ns) && *YAJL_GET_STRING(ns)) {
        iw_args_add(&a, YAJL_GET_STRING(ns));

    } else if (ns && YAJL_IS_ARRAY(ns)) {
        for (i = 0; i < ns->u.array.len; i++) {
            v = ns->u.array.values[i];

            if (YAJL_IS_STRING(v) && *YAJL_GET_STRING(v)) {
                iw_args_add(&a, YAJL_GET_STRING(v));
            }
        }
    }

    yajl_tree_free(ns);

    r = iw_redis_eval(IW_LUA_POST, 5, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_STRING) {
        *sid = ioa_strndup(r->str, r->len);
        rc = IW_OK;

    } else if (iw_reply_err(r, "NOROOM") || iw_reply_err(r, "NOTMEMBER")
               || iw_reply_err(r, "NOTYOURTURN"))
    {
        *sid = ioa_strdup(r->str);
        rc = 1;

    } else {
        iw_error("post.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        rc = IW_ERROR;
    }

    freeReplyObject(r);

    return rc;
}


int
iw_room_read(const iw_conf_t *conf, const char *comm_id, const char *after,
    iw_entries_t *out)
{
    size_t       i, k;
    redisReply  *r, *list, *e, *f;

    out->v = NULL;
    out->n = 0;

    r = iw_redis_cmd("XREAD COUNT %d STREAMS %s{room:%s}:log %s",
                     IW_ROOM_BATCH, conf->prefix, comm_id, after);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("XREAD room %s: %s", comm_id, r->str);
        freeReplyObject(r);
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1
        || r->element[0]->type != REDIS_REPLY_ARRAY
        || r->element[0]->elements != 2
        || r->element[0]->element[1]->type != REDIS_REPLY_ARRAY)
    {
        freeReplyObject(r);             /* nil: nothing new */
        return IW_OK;
    }

    list = r->element[0]->element[1];
    out->v = ioa_alloc(list->elements * sizeof(iw_entry_t));

    for (i = 0; i < list->elements; i++) {
        e = list->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        out->v[out->n].sid = ioa_strndup(e->element[0]->str,
                                        e->element[0]->len);
        out->v[out->n].json = ioa_strdup("");
        out->v[out->n].len = 0;
        f = e->element[1];

        for (k = 0; f->type == REDIS_REPLY_ARRAY && k + 1 < f->elements;
             k += 2)
        {
            if (f->element[k]->type == REDIS_REPLY_STRING
                && f->element[k + 1]->type == REDIS_REPLY_STRING
                && strcmp(f->element[k]->str, "e") == 0)
            {
                free(out->v[out->n].json);
                out->v[out->n].json = ioa_strndup(f->element[k + 1]->str,
                                                 f->element[k + 1]->len);
                out->v[out->n].len = f->element[k + 1]->len;
            }
        }

        out->n++;
    }

    freeReplyObject(r);

    return IW_OK;
}


/* the room's newest id, "0-0" for an empty room: where a goal that
 * continues a room starts reading */

int
iw_room_last_id(const iw_conf_t *conf, const char *comm_id, char **sid)
{
    redisReply  *r;

    r = iw_redis_cmd("XREVRANGE %s{room:%s}:log + - COUNT 1", conf->prefix,
                     comm_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1
        && r->element[0]->type == REDIS_REPLY_ARRAY
        && r->element[0]->elements == 2
        && r->element[0]->element[0]->type == REDIS_REPLY_STRING)
    {
        *sid = ioa_strdup(r->element[0]->element[0]->str);

    } else {
        *sid = ioa_strdup("0-0");
    }

    freeReplyObject(r);

    return IW_OK;
}


/* the room's members but its goal's person (meta "person", person.c),
 * who is *person (NULL: none) */

int
iw_room_members(const iw_conf_t *conf, const char *comm_id, iw_agents_t *out,
    char **owner)
{
    char        *person;
    size_t       i;
    redisReply  *r;

    out->v = NULL;
    out->n = 0;
    *owner = NULL;

    r = iw_redis_cmd("HGET %s{room:%s}:meta person", conf->prefix, comm_id);
    if (r == NULL) {
        return IW_ERROR;
    }

    person = r->type == REDIS_REPLY_STRING ? ioa_strdup(r->str) : NULL;
    freeReplyObject(r);

    r = iw_redis_cmd("SMEMBERS %s{room:%s}:members", conf->prefix, comm_id);
    if (r == NULL) {
        free(person);
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY) {
        free(person);
        freeReplyObject(r);
        return IW_ERROR;
    }

    out->v = ioa_alloc((r->elements + 1) * sizeof(iw_agent_t));

    for (i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING
            || iw_streq(r->element[i]->str, person))
        {
            continue;
        }

        memset(&out->v[out->n], 0, sizeof(iw_agent_t));
        out->v[out->n].name = ioa_strdup(r->element[i]->str);
        out->v[out->n].type = ioa_strdup("");
        out->v[out->n].desc = ioa_strdup("");
        out->n++;
    }

    *owner = person;
    freeReplyObject(r);

    return IW_OK;
}


void
iw_entries_free(iw_entries_t *e)
{
    size_t  i;

    for (i = 0; i < e->n; i++) {
        free(e->v[i].sid);
        free(e->v[i].json);
    }

    free(e->v);
    e->v = NULL;
    e->n = 0;
}
