/*
 * ioa-worker verify-room: check a room log's hash chain, for operators.
 *
 *   ioa-worker verify-room [--redis HOST:PORT[,...]] [--prefix P]
 *                          [--scripts DIR] [--batch N] COMM_ID
 *
 * post.lua chains every envelope it appends to the one before (the "h"
 * field of each Stream entry, and a head key R..'chain'); the hub's
 * redis-scripts/verify.lua recomputes the links of one batch.  This loop
 * calls it until the end of the log and prints one line:
 *
 *   exit 0  intact   ("room R: intact: N entries chained ..., K redacted
 *                    ..."): redacted entries (an admin erased their
 *                    content, POST /rooms/{id}/erase) still chain by their
 *                    digest and are intact
 *   exit 1  broken   ("room R: BROKEN at ID: why"), the first link that
 *                    fails (tampered: an envelope that does not match its
 *                    digest and is no redaction, or a link that does not
 *                    hold), so an operator knows where to look
 *   exit 2  error    (no such room, Redis unreachable, bad arguments)
 *
 * Why batches in a loop rather than one script: a script blocks Redis for
 * as long as it runs, and a room log may hold millions of entries.  The
 * script keeps no state; the cursor and the last link travel through its
 * arguments, so the walk can use any connection, and on a Redis Cluster
 * each call goes to the master of the room's slot like any other (all
 * keys carry the room's hash tag).
 *
 * It lives in ioa-worker because the worker already has what it needs:
 * standalone and Cluster connections, the scripts loaded by SHA, the
 * --redis/--prefix/--scripts conventions of the hub.
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iw.h"


/* entries per script call: a few ms of Redis time at most */
#define IW_VERIFY_BATCH  1000


static void iw_verify_usage(FILE *f);
static const char *iw_verify_elt(redisReply *r, size_t i);


static void
iw_verify_usage(FILE *f)
{
    fprintf(f,
        "usage: ioa-worker verify-room [options] COMM_ID\n"
        "\n"
        "Checks the hash chain of a room's log (every envelope chains to\n"
        "the one before) and names the first broken link.\n"
        "Exit status: 0 intact, 1 broken, 2 error.\n"
        "\n"
        "  --redis HOST:PORT    Redis of the agent network (127.0.0.1:6379);\n"
        "                       Cluster nodes, comma-separated\n"
        "  --prefix P           key prefix, as ioa_redis_prefix (ioa:)\n"
        "  --scripts DIR        the hub's redis-scripts directory\n"
        "                       (./redis-scripts)\n"
        "  --batch N            entries per script call (%d)\n"
        "  --help\n", IW_VERIFY_BATCH);
}


/* the i-th element of the script's answer as a string ("" if absent) */

static const char *
iw_verify_elt(redisReply *r, size_t i)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) {
        return "";
    }

    return r->element[i]->str;
}


int
iw_verify_room_main(iw_conf_t *conf, int argc, char **argv)
{
    int                c;
    char              *end, *cursor, *state, *start, *log_key, *head_key,
                      *meta_key, *comm_id;
    long               batch;
    long long          checked, unchained, redacted, legacy, calls;
    const char        *status, *note, *s;
    redisReply        *r, *m;
    iw_args_t          a;

    static const struct option  opts[] = {
        { "redis", required_argument, NULL, 'r' },
        { "prefix", required_argument, NULL, 'p' },
        { "scripts", required_argument, NULL, 's' },
        { "batch", required_argument, NULL, 'b' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };

    batch = IW_VERIFY_BATCH;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if (iw_parse_redis(conf, optarg) != 0) {
                return 2;
            }
            break;
        case 'p':
            free(conf->prefix);
            conf->prefix = ioa_strdup(optarg);
            break;
        case 's':
            free(conf->scripts_dir);
            conf->scripts_dir = ioa_strdup(optarg);
            break;
        case 'b':
            errno = 0;
            batch = strtol(optarg, &end, 10);

            if (errno || end == optarg || *end != '\0' || batch < 1
                || batch > 100000)
            {
                fprintf(stderr, "ioa-worker: --batch: \"%s\" is not a "
                        "number from 1 to 100000\n", optarg);
                return 2;
            }
            break;
        case 'h':
            iw_verify_usage(stdout);
            return 0;
        default:
            iw_verify_usage(stderr);
            return 2;
        }
    }

    if (optind != argc - 1 || argv[optind][0] == '\0') {
        iw_verify_usage(stderr);
        return 2;
    }

    comm_id = argv[optind];
    conf->consumer = ioa_sprintf("verify-room-%d", (int) getpid());

    if (iw_redis_init(conf) != IW_OK) {
        return 2;
    }

    if (iw_redis_connect() != IW_OK) {
        fprintf(stderr, "ioa-worker: cannot connect to redis %s\n",
                conf->redis);
        return 2;
    }

    /* the same keys as the hub's: P{room:<comm_id>}:... */
    log_key = ioa_sprintf("%s{room:%s}:log", conf->prefix, comm_id);
    head_key = ioa_sprintf("%s{room:%s}:chain", conf->prefix, comm_id);
    meta_key = ioa_sprintf("%s{room:%s}:meta", conf->prefix, comm_id);

    cursor = ioa_strdup("");
    state = ioa_strdup("");
    start = NULL;
    checked = unchained = redacted = legacy = calls = 0;

    for ( ;; ) {
        iw_args_init(&a);
        iw_args_add(&a, log_key);
        iw_args_add(&a, head_key);
        iw_args_add(&a, cursor);
        iw_args_add(&a, state);
        iw_args_addf(&a, "%ld", batch);

        r = iw_redis_eval(IW_LUA_VERIFY, 2, &a);
        iw_args_free(&a);

        if (r == NULL) {
            fprintf(stderr, "ioa-worker: room %s: redis failed\n", comm_id);
            return 2;
        }

        if (r->type != REDIS_REPLY_ARRAY || r->elements < 6
            || r->element[3]->type != REDIS_REPLY_INTEGER
            || r->element[4]->type != REDIS_REPLY_INTEGER)
        {
            fprintf(stderr, "ioa-worker: room %s: verify.lua: %s\n", comm_id,
                    r->type == REDIS_REPLY_ERROR ? r->str
                                                 : "unexpected answer");
            freeReplyObject(r);
            return 2;
        }

        calls++;
        status = iw_verify_elt(r, 0);
        note = iw_verify_elt(r, 5);
        checked += r->element[3]->integer;
        unchained += r->element[4]->integer;

        /* verify.lua of chain v2: redacted and v1 entries counted */
        if (r->elements > 8 && r->element[7]->type == REDIS_REPLY_INTEGER
            && r->element[8]->type == REDIS_REPLY_INTEGER)
        {
            redacted += r->element[7]->integer;
            legacy += r->element[8]->integer;
        }

        /* where the chain starts, found by this call ("broken" carries
         * the reason in its place and the start after it) */
        s = strcmp(status, "broken") == 0 ? iw_verify_elt(r, 6) : note;

        if (s[0] != '\0') {
            free(start);
            start = ioa_strdup(s);
        }

        if (strcmp(status, "more") == 0) {
            free(cursor);
            free(state);
            cursor = ioa_strdup(iw_verify_elt(r, 1));
            state = ioa_strdup(iw_verify_elt(r, 2));
            freeReplyObject(r);
            continue;
        }

        break;
    }

    if (strcmp(status, "broken") == 0) {
        printf("room %s: BROKEN at %s: %s (%lld links intact before it, "
               "chain from %s)\n", comm_id, iw_verify_elt(r, 1), note,
               checked, start ? start : "nowhere yet");
        freeReplyObject(r);
        return 1;
    }

    if (strcmp(status, "empty") == 0) {
        /* an empty log is fine for a room that exists */
        m = iw_redis_cmd("EXISTS %s", meta_key);

        if (m == NULL || m->type != REDIS_REPLY_INTEGER || m->integer == 0) {
            fprintf(stderr, "ioa-worker: room %s: no such room (no %s)\n",
                    comm_id, meta_key);
            if (m) {
                freeReplyObject(m);
            }
            freeReplyObject(r);
            return 2;
        }

        freeReplyObject(m);
        printf("room %s: intact: empty log\n", comm_id);
        freeReplyObject(r);
        return 0;
    }

    if (strcmp(status, "ok") != 0) {
        fprintf(stderr, "ioa-worker: room %s: verify.lua: status \"%s\"\n",
                comm_id, status);
        freeReplyObject(r);
        return 2;
    }

    /* the counts of redacted and v1 entries only when there are some, so
     * that the line of an ordinary room reads as it always did */
    printf("room %s: intact: %lld entries chained from %s, %lld unchained "
           "before it", comm_id, checked,
           start ? start : "nowhere (no chained entry)", unchained);

    if (redacted) {
        printf(", %lld redacted", redacted);
    }

    if (legacy) {
        printf(", %lld under chain v1", legacy);
    }

    printf("; head %s\n",
           iw_verify_elt(r, 2)[0] == '-' ? "none" : iw_verify_elt(r, 2));
    freeReplyObject(r);

    return 0;
}
