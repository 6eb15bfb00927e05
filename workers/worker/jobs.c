/*
 * ioa-worker: the job queue, a Redis Stream with a consumer group.
 *
 * nginx appends one entry per goal to P{jobs}:goals (goal_id <id>).  Every
 * worker reads with XREADGROUP under its own consumer name, so each job
 * goes to one worker; the entry stays in the group's pending list until
 * the worker acknowledges it when the goal has ended.
 *
 * The pending entry is the worker's lease on the goal.  Its idle time is
 * reset by job_touch.lua (XCLAIM JUSTID to itself) every claim_idle / 3
 * while the goal runs; a worker that dies stops touching, and once the
 * entry has been idle for --claim-idle another worker's XAUTOCLAIM takes
 * it and resumes the goal from Redis.  A worker stopping on SIGTERM
 * releases its job by setting a huge idle time, so the takeover is at
 * once instead of after --claim-idle.
 */

#include <stdlib.h>
#include <string.h>

#include "iw.h"


#define IW_JOBS_GROUP      "workers"
#define IW_JOBS_RELEASED   "86400000"     /* a day: any --claim-idle is less */


static int iw_job_from_entry(redisReply *e, iw_job_t *job);


/* The group starts at the beginning of the Stream (like nginx's), so a goal
 * queued before any worker or nginx made the group is still served. */

int
iw_jobs_group(const iw_conf_t *conf)
{
    redisReply  *r;

    r = iw_redis_cmd("XGROUP CREATE %s " IW_JOBS_GROUP " 0 MKSTREAM",
                     conf->jobs_key);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type == REDIS_REPLY_ERROR && !iw_reply_err(r, "BUSYGROUP")) {
        iw_error("XGROUP CREATE %s: %s", conf->jobs_key, r->str);
        freeReplyObject(r);
        return IW_ERROR;
    }

    freeReplyObject(r);

    return IW_OK;
}


/* [id, [field, value, ...]]; a job without goal_id gets goal_id NULL (the
 * caller acknowledges it away) */

static int
iw_job_from_entry(redisReply *e, iw_job_t *job)
{
    size_t       i;
    redisReply  *f;

    job->id = NULL;
    job->goal_id = NULL;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING)
    {
        return 0;
    }

    job->id = ioa_strdup(e->element[0]->str);
    f = e->element[1];

    if (f->type != REDIS_REPLY_ARRAY) {
        return 1;                       /* deleted from the Stream */
    }

    for (i = 0; i + 1 < f->elements; i += 2) {
        if (f->element[i]->type == REDIS_REPLY_STRING
            && f->element[i + 1]->type == REDIS_REPLY_STRING
            && strcmp(f->element[i]->str, "goal_id") == 0)
        {
            job->goal_id = ioa_strdup(f->element[i + 1]->str);
            break;
        }
    }

    return 1;
}


/*
 * The entries of an XREADGROUP reply, at most max of them, into jobs: how
 * many, or IW_ERROR.  *nogroup is set when the Stream or the group went
 * away (FLUSHALL, a new Redis): the caller makes it again.
 */

int
iw_jobs_parse(redisReply *r, iw_job_t *jobs, int max, int *nogroup)
{
    int          n;
    size_t       i;
    redisReply  *entries;

    *nogroup = 0;

    if (iw_reply_err(r, "NOGROUP")) {
        *nogroup = 1;
        return 0;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        iw_error("XREADGROUP: %s", r->str);
        return IW_ERROR;
    }

    n = 0;

    /* [[key, [[id, fields], ...]]] or nil */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1
        && r->element[0]->type == REDIS_REPLY_ARRAY
        && r->element[0]->elements == 2)
    {
        entries = r->element[0]->element[1];

        for (i = 0; entries->type == REDIS_REPLY_ARRAY
                    && i < entries->elements && n < max; i++)
        {
            n += iw_job_from_entry(entries->element[i], &jobs[n]);
        }
    }

    return n;
}


/* XREADGROUP for at most count new jobs, waiting up to block_ms: the
 * formatted command, for iw_redis_send() (engine.c reads with it) */

char *
iw_jobs_read_cmd(const iw_conf_t *conf, int count, long long block_ms,
    size_t *len)
{
    int    n;
    char  *cmd;

    n = redisFormatCommand(&cmd, "XREADGROUP GROUP " IW_JOBS_GROUP " %s "
                           "COUNT %d BLOCK %lld STREAMS %s >", conf->consumer,
                           count, block_ms, conf->jobs_key);
    if (n < 0) {
        ioa_fatal("redis: cannot format XREADGROUP");
    }

    *len = (size_t) n;

    return cmd;
}


/* this consumer's own pending jobs (a restart under the same --consumer,
 * or a reconnect), at most max: how many, or IW_ERROR */

int
iw_jobs_pending(const iw_conf_t *conf, iw_job_t *jobs, int max)
{
    int          n, nogroup;
    redisReply  *r;

    r = iw_redis_cmd("XREADGROUP GROUP " IW_JOBS_GROUP " %s COUNT %d "
                     "STREAMS %s 0", conf->consumer, max, conf->jobs_key);
    if (r == NULL) {
        return IW_ERROR;
    }

    n = iw_jobs_parse(r, jobs, max, &nogroup);
    freeReplyObject(r);

    if (nogroup) {
        return iw_jobs_group(conf) == IW_OK ? 0 : IW_ERROR;
    }

    return n;
}


/* Takes over at most max jobs idle for --claim-idle, scanning the pending
 * list with *cursor (XAUTOCLAIM's, "0-0" to start again): how many, or
 * IW_ERROR. */

int
iw_jobs_autoclaim(const iw_conf_t *conf, char **cursor, iw_job_t *jobs,
    int max)
{
    int          n;
    size_t       i;
    redisReply  *r, *claimed;

    r = iw_redis_cmd("XAUTOCLAIM %s " IW_JOBS_GROUP " %s %lld %s COUNT %d",
                     conf->jobs_key, conf->consumer, conf->claim_idle_ms,
                     *cursor, max);
    if (r == NULL) {
        return IW_ERROR;
    }

    if (iw_reply_err(r, "NOGROUP")) {
        freeReplyObject(r);
        return iw_jobs_group(conf) == IW_OK ? 0 : IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2
        || r->element[0]->type != REDIS_REPLY_STRING)
    {
        iw_error("XAUTOCLAIM: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    free(*cursor);
    *cursor = ioa_strdup(r->element[0]->str);

    n = 0;
    claimed = r->element[1];

    for (i = 0; claimed->type == REDIS_REPLY_ARRAY && i < claimed->elements
                && n < max; i++)
    {
        n += iw_job_from_entry(claimed->element[i], &jobs[n]);
    }

    freeReplyObject(r);

    return n;
}


/* 1 still ours (renewed, or released when release is set), 0 lost */

int
iw_jobs_touch(const iw_conf_t *conf, const char *id, int release)
{
    int          rc;
    iw_args_t    a;
    redisReply  *r;

    iw_args_init(&a);
    iw_args_add(&a, conf->jobs_key);
    iw_args_add(&a, IW_JOBS_GROUP);
    iw_args_add(&a, conf->consumer);
    iw_args_add(&a, id);
    iw_args_add(&a, release ? IW_JOBS_RELEASED : "0");

    r = iw_redis_eval(IW_LUA_JOB_TOUCH, 1, &a);
    iw_args_free(&a);

    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_INTEGER) {
        iw_error("job_touch.lua: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return IW_ERROR;
    }

    rc = r->integer == 1;
    freeReplyObject(r);

    return rc;
}


/* how many times the job was handed out (a goal that kills every worker
 * that touches it must end some day) */

int
iw_jobs_deliveries(const iw_conf_t *conf, const char *id, long long *count)
{
    redisReply  *r, *e;

    r = iw_redis_cmd("XPENDING %s " IW_JOBS_GROUP " %s %s 1", conf->jobs_key,
                     id, id);
    if (r == NULL) {
        return IW_ERROR;
    }

    *count = 0;

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        e = r->element[0];

        if (e->type == REDIS_REPLY_ARRAY && e->elements == 4
            && e->element[3]->type == REDIS_REPLY_INTEGER)
        {
            *count = e->element[3]->integer;
        }
    }

    freeReplyObject(r);

    return IW_OK;
}


int
iw_jobs_ack(const iw_conf_t *conf, const char *id)
{
    redisReply  *r;

    r = iw_redis_cmd("XACK %s " IW_JOBS_GROUP " %s", conf->jobs_key, id);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    /* a done job is of no more use to anyone: out of the queue, which
     * would otherwise keep every goal ever launched */

    r = iw_redis_cmd("XDEL %s %s", conf->jobs_key, id);
    if (r == NULL) {
        return IW_ERROR;
    }

    freeReplyObject(r);

    return IW_OK;
}


/*
 * A goal has ended: its job leaves the queue, and its record (meta, fsm,
 * control, children, inbox) and event feed expire --goal-retention later,
 * long enough for its launcher to read the conclusion and the events.
 * The team's room is a room like any other (ioa_room_retention).  Run
 * again (a job delivered twice) it only sets the same expiry again.
 */

int
iw_goal_retire(const iw_conf_t *conf, const char *goal_id, const char *job)
{
    int                 i;
    redisReply         *r;
    static const char  *goal_keys[] = { "meta", "fsm", "control", "children",
                                        "inbox" };
    static const char  *feed_keys[] = { "log", "mirror" };

    if (iw_jobs_ack(conf, job) != IW_OK) {
        return IW_ERROR;
    }

    if (conf->goal_retention_ms == 0) {
        return IW_OK;
    }

    for (i = 0; i < (int) (sizeof(goal_keys) / sizeof(goal_keys[0])); i++) {
        r = iw_redis_cmd("PEXPIRE %s{goal:%s}:%s %lld", conf->prefix,
                         goal_id, goal_keys[i], conf->goal_retention_ms);
        if (r == NULL) {
            return IW_ERROR;
        }

        freeReplyObject(r);
    }

    for (i = 0; i < (int) (sizeof(feed_keys) / sizeof(feed_keys[0])); i++) {
        r = iw_redis_cmd("PEXPIRE %s{room:goal-%s}:%s %lld", conf->prefix,
                         goal_id, feed_keys[i], conf->goal_retention_ms);
        if (r == NULL) {
            return IW_ERROR;
        }

        freeReplyObject(r);
    }

    return IW_OK;
}


void
iw_job_free(iw_job_t *job)
{
    free(job->id);
    free(job->goal_id);
    job->id = NULL;
    job->goal_id = NULL;
}
