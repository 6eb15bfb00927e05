
/*
 * Copyright (C) ioa authors
 *
 * The resume position of an SSE inbox, kept small.
 *
 * An SSE client hands back one string, Last-Event-ID, and an agent's exact
 * position is one Stream id per room: "<comm_id>:<id>,...", about 50 bytes
 * a room.  Up to NGX_IOA_POSITION_INLINE bytes that text is the event id
 * itself, as it always was.  Past it (an agent in dozens of rooms or more)
 * every event would carry kilobytes, and nginx refuses a Last-Event-ID
 * larger than its header buffers, so the connection switches to a cursor
 * kept in Redis:
 *
 *   id   "~<cursor>.<version>+<comm_id>:<id>,..."
 *
 *   cursor    16 hex digits, random, one per connection
 *   version   the cursor's versions: version 1 is the whole position when
 *             the cursor began; each later one is the one before plus the
 *             rooms that changed (position_save.lua, "s<v>" and "d<v>" of
 *             the HASH P{pos:<cursor>})
 *   +...      the rooms changed since that version, at most
 *             NGX_IOA_POSITION_DELTA: one more makes a new version of them
 *
 * So an id never passes about a kilobyte whatever the rooms, a version is
 * written once per NGX_IOA_POSITION_DELTA changes (with the whole position
 * every NGX_IOA_POSITION_EVERY versions, so rebuilding one reads few), and
 * the position an id names is exact: the version's rooms, then its own.
 *
 * A client may come back with any id it has received, also one sent well
 * before its connection died, so NGX_IOA_POSITION_KEEP versions stay
 * resolvable (at least 16 x 256 = 4096 events behind the newest).  A
 * cursor lives NGX_IOA_POSITION_TTL after its last version, and
 * NGX_IOA_POSITION_RETRY after a client resumed from it (the new
 * connection has a cursor of its own).  A position that is gone is refused
 * with a 400 naming Last-Event-ID (ngx_ioa_sse.c); ioa-agent then resumes
 * from its oldest id, with a gap report.
 *
 * Versions are written without waiting for Redis: the event naming one
 * leaves after the write was queued on the same Redis connection, and a
 * client would have to receive it, reconnect and be served by another
 * worker before Redis ran the write for the race to show, as a refused
 * position.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <sys/random.h>

#include "ngx_ioa.h"


#define NGX_IOA_POSITION_INLINE   2048
#define NGX_IOA_POSITION_DELTA    16
#define NGX_IOA_POSITION_EVERY    32
#define NGX_IOA_POSITION_KEEP     "256"
#define NGX_IOA_POSITION_TTL      "3600"
#define NGX_IOA_POSITION_RETRY    "600"

/* a comm_id in an envelope (ngx_ioa_envelope.c) */
#define NGX_IOA_POSITION_ROOM_MAX 64
#define NGX_IOA_POSITION_SID_MAX  (2 * NGX_INT64_LEN + 1)
#define NGX_IOA_POSITION_CURSOR   16

/* the longest "<comm_id>:<id>,..." of the changes and one more room */
#define NGX_IOA_POSITION_DELTA_LEN                                            \
    ((NGX_IOA_POSITION_DELTA + 1)                                             \
     * (NGX_IOA_POSITION_ROOM_MAX + NGX_IOA_POSITION_SID_MAX + 2))


struct ngx_ioa_position_s {
    u_char                    cursor[NGX_IOA_POSITION_CURSOR];
    ngx_uint_t                version;       /* 0: none written yet */
    ngx_uint_t                ndelta;
    ngx_ioa_sid_t             sid[NGX_IOA_POSITION_DELTA];
    size_t                    room_len[NGX_IOA_POSITION_DELTA];
    u_char                    room[NGX_IOA_POSITION_DELTA]
                                  [NGX_IOA_POSITION_ROOM_MAX];
};


static ngx_int_t ngx_ioa_position_save(ngx_ioa_client_t *cl,
    ngx_ioa_position_t *pos, const char *kind, ngx_str_t *text);
static void ngx_ioa_position_saved(redisReply *reply, void *data);
static ngx_int_t ngx_ioa_position_key(ngx_pool_t *pool, u_char *cursor,
    ngx_str_t *key);
static size_t ngx_ioa_position_delta(ngx_ioa_position_t *pos, u_char *p,
    u_char *last);


/*
 * The SSE event id for the client's position, m just delivered (NULL: the
 * id-only block that gives the starting position).  *id is ngx_alloc()ed;
 * the caller frees it.
 */

ngx_int_t
ngx_ioa_position_id(ngx_ioa_client_t *cl, ngx_ioa_position_t **posp,
    ngx_ioa_msg_t *m, ngx_str_t *id)
{
    u_char              *p, *last, rnd[NGX_IOA_POSITION_CURSOR / 2];
    size_t               len;
    ngx_str_t            text;
    ngx_uint_t           i;
    ngx_ioa_position_t  *pos;

    pos = *posp;

    /* the whole position is walked (every room) only while it is inline
     * or when a version is written, not for every event of a cursor */
    len = pos ? 0 : ngx_ioa_client_position_len(cl);

    if (pos == NULL && len <= NGX_IOA_POSITION_INLINE) {
        id->data = ngx_alloc(len + 1, cl->log);
        if (id->data == NULL) {
            return NGX_ERROR;
        }

        id->len = ngx_ioa_client_position(cl, id->data, id->data + len)
                  - id->data;
        return NGX_OK;
    }

    if (pos == NULL) {
        /* past the inline size once: a cursor for the connection's life */
        pos = ngx_pcalloc(cl->pool, sizeof(ngx_ioa_position_t));
        if (pos == NULL
            || getrandom(rnd, sizeof(rnd), 0) != (ssize_t) sizeof(rnd))
        {
            return NGX_ERROR;
        }

        ngx_hex_dump(pos->cursor, rnd, sizeof(rnd));
        *posp = pos;
    }

    if (pos->version == 0 || m != NULL) {

        for (i = 0; m && i < pos->ndelta; i++) {
            if (pos->room_len[i] == m->comm_id.len
                && ngx_strncmp(pos->room[i], m->comm_id.data,
                               m->comm_id.len)
                   == 0)
            {
                break;
            }
        }

        if (m && i < pos->ndelta) {
            pos->sid[i] = m->sid;                   /* changed again */

        } else if (m && pos->version && pos->ndelta < NGX_IOA_POSITION_DELTA
                   && m->comm_id.len <= NGX_IOA_POSITION_ROOM_MAX)
        {
            i = pos->ndelta++;
            pos->room_len[i] = m->comm_id.len;
            ngx_memcpy(pos->room[i], m->comm_id.data, m->comm_id.len);
            pos->sid[i] = m->sid;

        } else {
            /*
             * A new version: the first (the whole position), or the one
             * before plus the changes so far and this one.  Every
             * NGX_IOA_POSITION_EVERY versions the whole position too.
             */

            if (len == 0) {
                len = ngx_ioa_client_position_len(cl);
            }

            text.len = len + NGX_IOA_POSITION_DELTA_LEN;
            text.data = ngx_alloc(text.len, cl->log);
            if (text.data == NULL) {
                return NGX_ERROR;
            }

            pos->version++;

            if (pos->version > 1) {
                p = text.data;
                last = text.data + text.len;
                p += ngx_ioa_position_delta(pos, p, last);

                if (m) {
                    p = ngx_slprintf(p, last, "%s%V:%uL-%uL",
                                     pos->ndelta ? "," : "", &m->comm_id,
                                     m->sid.ms, m->sid.seq);
                }

                text.len = p - text.data;

                if (ngx_ioa_position_save(cl, pos, "d", &text) != NGX_OK) {
                    ngx_free(text.data);
                    return NGX_ERROR;
                }

                text.len = len + NGX_IOA_POSITION_DELTA_LEN;
            }

            if (pos->version == 1
                || pos->version % NGX_IOA_POSITION_EVERY == 0)
            {
                /* the links already hold m: this is the new version */
                text.len = ngx_ioa_client_position(cl, text.data,
                                                   text.data + len)
                           - text.data;

                if (ngx_ioa_position_save(cl, pos, "s", &text) != NGX_OK) {
                    ngx_free(text.data);
                    return NGX_ERROR;
                }
            }

            ngx_free(text.data);
            pos->ndelta = 0;
        }
    }

    len = 1 + NGX_IOA_POSITION_CURSOR + 1 + NGX_INT_T_LEN + 1
          + NGX_IOA_POSITION_DELTA_LEN;

    id->data = ngx_alloc(len, cl->log);
    if (id->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(id->data, "~%*s.%ui", (size_t) NGX_IOA_POSITION_CURSOR,
                    pos->cursor, pos->version);

    if (pos->ndelta) {
        *p++ = '+';
        p += ngx_ioa_position_delta(pos, p, id->data + len);
    }

    id->len = p - id->data;

    return NGX_OK;
}


/* "<comm_id>:<id>,..." of the changes since the version */

static size_t
ngx_ioa_position_delta(ngx_ioa_position_t *pos, u_char *p, u_char *last)
{
    u_char      *start;
    ngx_str_t    room;
    ngx_uint_t   i;

    start = p;

    for (i = 0; i < pos->ndelta; i++) {
        room.data = pos->room[i];
        room.len = pos->room_len[i];

        p = ngx_slprintf(p, last, "%s%V:%uL-%uL", i ? "," : "", &room,
                         pos->sid[i].ms, pos->sid[i].seq);
    }

    return p - start;
}


static ngx_int_t
ngx_ioa_position_save(ngx_ioa_client_t *cl, ngx_ioa_position_t *pos,
    const char *kind, ngx_str_t *text)
{
    ngx_str_t        key;
    ngx_ioa_args_t   a;

    if (ngx_ioa_position_key(cl->pool, pos->cursor, &key) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_args_init(&a);
    ngx_ioa_args_str(&a, &key);
    ngx_ioa_args_fmt(&a, "%ui", pos->version);
    ngx_ioa_args_buf(&a, (u_char *) kind, 1);
    ngx_ioa_args_str(&a, text);
    ngx_ioa_args_cstr(&a, NGX_IOA_POSITION_KEEP);
    ngx_ioa_args_cstr(&a, NGX_IOA_POSITION_TTL);

    /* not waited for (see the top); a lost write shows as a refused
     * position if the client ever comes back with it */
    if (ngx_ioa_redis_script_args(NGX_IOA_SCRIPT_POSITION_SAVE,
                                  ngx_ioa_position_saved, NULL, 1, &a)
        == NULL)
    {
        ngx_log_error(NGX_LOG_WARN, cl->log, 0,
                      "ioa: the resume position of \"%V\" could not be "
                      "saved: Redis is not reachable", &cl->name);
    }

    return NGX_OK;
}


static void
ngx_ioa_position_saved(redisReply *reply, void *data)
{
    ngx_ioa_redis_log_refusal(reply, "saving a resume position");
}


static ngx_int_t
ngx_ioa_position_key(ngx_pool_t *pool, u_char *cursor, ngx_str_t *key)
{
    ngx_str_t  s;

    s.len = NGX_IOA_POSITION_CURSOR;
    s.data = cursor;

    return ngx_ioa_key_position_alloc(pool, &s, key);
}


/*
 * A Last-Event-ID in the cursor form: NGX_OK with the Redis key, the
 * version and the changes after it (empty, or "<comm_id>:<id>,..."),
 * NGX_DECLINED for any other form, NGX_ERROR when malformed.
 */

ngx_int_t
ngx_ioa_position_parse(ngx_pool_t *pool, ngx_str_t *id, ngx_str_t *key,
    ngx_str_t *version, ngx_str_t *delta)
{
    u_char  *p, *last, *dot, *plus;
    size_t   i;

    if (id->len == 0 || id->data[0] != '~') {
        return NGX_DECLINED;
    }

    p = id->data + 1;
    last = id->data + id->len;
    dot = ngx_strlchr(p, last, '.');

    if (dot == NULL || dot - p != NGX_IOA_POSITION_CURSOR) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_IOA_POSITION_CURSOR; i++) {
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) {
            return NGX_ERROR;
        }
    }

    plus = ngx_strlchr(dot + 1, last, '+');

    version->data = dot + 1;
    version->len = (plus ? plus : last) - version->data;

    if (version->len == 0 || version->len > NGX_INT_T_LEN
        || ngx_atoi(version->data, version->len) < 1)
    {
        return NGX_ERROR;
    }

    delta->data = plus ? plus + 1 : last;
    delta->len = last - delta->data;

    return ngx_ioa_position_key(pool, p, key);
}


/* the TTL a cursor is given once a client resumed from it */

const char *
ngx_ioa_position_retry_ttl(void)
{
    return NGX_IOA_POSITION_RETRY;
}
