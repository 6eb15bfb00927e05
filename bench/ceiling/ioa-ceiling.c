/*
 * ioa-ceiling: how fast Redis itself takes the work of ioa's post path.
 *
 *   ioa-ceiling --redis 127.0.0.1:6379 [--script bare|post] [--size 200]
 *               [--rooms 100] [--procs 2] [--pipeline 1] [--duration 10]
 *               [--maxlen 1000] [--scripts DIR] [--json FILE|-]
 *
 * Every envelope ioa routes costs Redis one EVALSHA: the room's Stream gets
 * the envelope (XADD MAXLEN ~ maxlen) and the room's channel gets it too
 * (PUBLISH), atomically.  This tool drives exactly that, with nothing in
 * front of Redis, so the benchmark can say how close the hub comes to the
 * physical limit of the machine's Redis:
 *
 *   --script bare   a minimal script: XADD + PUBLISH, the floor of the cost
 *   --script post   the hub's own redis-scripts/post.lua with the keys and
 *                   arguments nginx passes (membership check included), so
 *                   the difference to bare is the price of ioa's ACL
 *
 * --procs client processes (one blocking connection each) call it in a
 * loop: with --pipeline 1 one call in flight per connection (what a
 * request/reply client gets), with --pipeline D batches of D calls (what a
 * client that pipelines gets).  One more process subscribes to every
 * room's channel and counts what is published, so PUBLISH pays for a real
 * subscriber as it does behind the hub, and the count proves the work was
 * done.  Redis' own CPU time (INFO cpu) over the run is reported, since
 * Redis is single-threaded: at 100% it is the ceiling.
 *
 * Processes, not threads: hiredis' blocking API per process is the plainest
 * way to keep several calls in flight, and the counts come back over a pipe.
 *
 * Redis Cluster: point --redis at one master.  The tool finds out (CLUSTER
 * SLOTS) and then measures that master alone, as the hub uses it: every
 * room's hash tag is chosen among the slots that master owns (room N is
 * {room:N.S} with the first S that lands there), the bare script and
 * post.lua publish with SPUBLISH (post.lua's ARGV[6] "s"), and the
 * subscriber SSUBSCRIBEs every room's shard channel, since patterns never
 * see those.  A Cluster's ceiling is then about this figure times the
 * number of masters, the rooms being spread over them.
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>


typedef struct {
    const char  *host;
    int          port;
    const char  *script;            /* "bare" or "post" */
    const char  *scripts_dir;
    const char  *json;              /* NULL, "-" or a file */
    size_t       size;
    int          rooms;
    int          procs;
    int          pipeline;
    double       duration;
    long         maxlen;
    int          cluster;           /* --redis is a Cluster master */
    char       **tags;              /* per room: "room:N" or "room:N.S" */
} ic_conf_t;


static const char  ic_bare_lua[] =
    "local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', "
    "'e', ARGV[2])\n"
    "redis.call('PUBLISH', ARGV[4], id .. ' ' .. ARGV[2])\n"
    "return id\n";

/* the same on a Cluster: the room's shard channel */
static const char  ic_bare_cluster_lua[] =
    "local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', "
    "'e', ARGV[2])\n"
    "redis.call('SPUBLISH', ARGV[4], id .. ' ' .. ARGV[2])\n"
    "return id\n";


/* the Cluster key slot: CRC16/XMODEM of the hash tag, modulo 16384 */

static unsigned
ic_slot(const char *tag)
{
    int        i;
    unsigned   crc;

    crc = 0;

    for ( /* void */ ; *tag; tag++) {
        crc ^= (unsigned) (unsigned char) *tag << 8;

        for (i = 0; i < 8; i++) {
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff
                                 : (crc << 1) & 0xffff;
        }
    }

    return crc & 16383;
}


static double
ic_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static void
ic_usage(FILE *f)
{
    fprintf(f,
        "usage: ioa-ceiling --redis HOST:PORT [options]\n"
        "  (a Redis Cluster master: that master alone, its own slots)\n"
        "  --script bare|post   XADD+PUBLISH only, or the hub's post.lua (bare)\n"
        "  --scripts DIR        the hub's redis-scripts (./redis-scripts)\n"
        "  --size BYTES         envelope size (200)\n"
        "  --rooms N            rooms the calls are spread over (100)\n"
        "  --procs N            client processes, one connection each (2)\n"
        "  --pipeline D         calls in flight per connection (1)\n"
        "  --duration SEC       (10)\n"
        "  --maxlen N           XADD MAXLEN ~ N (1000)\n"
        "  --json FILE|-        the figures as one JSON object\n");
}


static char *
ic_read_file(const char *path)
{
    FILE    *f;
    long     n;
    char    *s;

    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }

    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);

    s = malloc(n + 1);
    if (s == NULL || fread(s, 1, n, f) != (size_t) n) {
        free(s);
        fclose(f);
        return NULL;
    }

    s[n] = '\0';
    fclose(f);

    return s;
}


static redisContext *
ic_connect(const ic_conf_t *c)
{
    redisContext  *r;

    r = redisConnect(c->host, c->port);

    if (r == NULL || r->err) {
        fprintf(stderr, "ioa-ceiling: redis %s:%d: %s\n", c->host, c->port,
                r ? r->errstr : "out of memory");
        exit(1);
    }

    return r;
}


/*
 * The rooms' hash tags.  Standalone: room:N.  Cluster (CLUSTER SLOTS
 * answers): room:N.S with the first S whose slot the master at --redis
 * owns, so every call and every shard channel stays on it.
 */

static int
ic_rooms(ic_conf_t *c, redisContext *r)
{
    int          i, s, own[16384], any;
    char         tag[64];
    size_t       k;
    long long    a, b;
    redisReply  *rep, *e, *m;

    c->tags = calloc(c->rooms, sizeof(char *));
    memset(own, 0, sizeof(own));
    any = 0;

    rep = redisCommand(r, "CLUSTER SLOTS");
    c->cluster = (rep && rep->type == REDIS_REPLY_ARRAY);

    for (k = 0; c->cluster && k < rep->elements; k++) {
        e = rep->element[k];

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3
            || e->element[2]->type != REDIS_REPLY_ARRAY
            || e->element[2]->elements < 2)
        {
            continue;
        }

        m = e->element[2];

        /* this master, by its port (a test Cluster is on one host) */
        if (m->element[1]->integer != c->port) {
            continue;
        }

        a = e->element[0]->integer;
        b = e->element[1]->integer;

        for (s = (int) a; s <= (int) b && s < 16384; s++) {
            own[s] = 1;
            any = 1;
        }
    }

    freeReplyObject(rep);

    if (c->cluster && !any) {
        fprintf(stderr, "ioa-ceiling: %s:%d is a Cluster node without "
                "slots: point --redis at a master\n", c->host, c->port);
        return -1;
    }

    for (i = 0; i < c->rooms; i++) {
        snprintf(tag, sizeof(tag), "room:%d", i);

        for (s = 0; c->cluster; s++) {
            snprintf(tag, sizeof(tag), "room:%d.%d", i, s);

            if (own[ic_slot(tag)]) {
                break;
            }
        }

        c->tags[i] = strdup(tag);
    }

    return 0;
}


/* Redis' CPU seconds so far (user + sys, INFO cpu) */

static double
ic_redis_cpu(redisContext *r)
{
    double       u, s;
    const char  *p;
    redisReply  *rep;

    rep = redisCommand(r, "INFO cpu");
    if (rep == NULL || rep->type != REDIS_REPLY_STRING) {
        return -1;
    }

    u = s = 0;

    if ((p = strstr(rep->str, "used_cpu_user:"))) {
        u = atof(p + 14);
    }

    if ((p = strstr(rep->str, "used_cpu_sys:"))) {
        s = atof(p + 13);
    }

    freeReplyObject(rep);

    return u + s;
}


/* one client process: calls until the deadline, writes its count */

static void
ic_client(const ic_conf_t *c, const char *sha, const char *env, int id,
    int out)
{
    int            i, k, room;
    long long      calls, errors, counts[2];
    int            argc;
    char           keys[4][96], chan[96], maxlen[24];
    const char    *argv[13];
    size_t         argvlen[13];
    redisReply    *rep;
    redisContext  *r;
    double         end;

    r = ic_connect(c);
    calls = errors = 0;
    room = id;
    snprintf(maxlen, sizeof(maxlen), "%ld", c->maxlen);
    end = ic_now() + c->duration;

    while (ic_now() < end) {
        for (k = 0; k < c->pipeline; k++) {
            room = (room + 1) % c->rooms;
            snprintf(keys[0], sizeof(keys[0]), "ceil:{%s}:members",
                     c->tags[room]);
            snprintf(keys[1], sizeof(keys[1]), "ceil:{%s}:log", c->tags[room]);
            snprintf(keys[2], sizeof(keys[2]), "ceil:{%s}:floor",
                     c->tags[room]);
            snprintf(keys[3], sizeof(keys[3]), "ceil:{%s}:meta", c->tags[room]);
            snprintf(chan, sizeof(chan), "ceil:{%s}:ch", c->tags[room]);

            /* EVALSHA sha 4 members log floor meta
             *         sender envelope maxlen channel: post.lua's call */
            argv[0] = "EVALSHA";
            argv[1] = sha;
            argv[2] = "4";
            for (i = 0; i < 4; i++) {
                argv[3 + i] = keys[i];
            }
            argv[7] = "bench";
            argv[8] = env;
            argv[9] = maxlen;
            argv[10] = chan;
            argc = 11;

            if (c->cluster) {
                /* no type (no floor read), and the shard channel */
                argv[11] = "";
                argv[12] = "s";
                argc = 13;
            }

            for (i = 0; i < argc; i++) {
                argvlen[i] = strlen(argv[i]);
            }

            redisAppendCommandArgv(r, argc, argv, argvlen);
        }

        for (k = 0; k < c->pipeline; k++) {
            if (redisGetReply(r, (void **) &rep) != REDIS_OK) {
                fprintf(stderr, "ioa-ceiling: %s\n", r->errstr);
                exit(1);
            }

            if (rep->type == REDIS_REPLY_ERROR) {
                if (errors++ == 0) {
                    fprintf(stderr, "ioa-ceiling: %s\n", rep->str);
                }

            } else {
                calls++;
            }

            freeReplyObject(rep);
        }
    }

    /* one write of both counts: the clients share the pipe, and a write
     * of at most PIPE_BUF bytes is never interleaved with another */
    counts[0] = calls;
    counts[1] = errors;

    if (write(out, counts, sizeof(counts)) != sizeof(counts)) {
        exit(1);
    }

    redisFree(r);
    exit(0);
}


/* the subscriber: counts messages on every room's channel until SIGTERM */

static volatile sig_atomic_t  ic_stop;

static void
ic_on_term(int sig)
{
    (void) sig;
    ic_stop = 1;
}


static void
ic_subscriber(const ic_conf_t *c, int out, int ready)
{
    int            i;
    char           ok;
    long long      n;
    redisReply    *rep;
    redisContext  *r;
    struct timeval tv = { 0, 200000 };

    signal(SIGTERM, ic_on_term);

    r = ic_connect(c);

    if (c->cluster) {
        for (i = 0; i < c->rooms; i++) {
            rep = redisCommand(r, "SSUBSCRIBE ceil:{%s}:ch", c->tags[i]);
            freeReplyObject(rep);
        }

    } else {
        rep = redisCommand(r, "PSUBSCRIBE ceil:{room:*}:ch");
        freeReplyObject(rep);
    }

    ok = 1;

    if (write(ready, &ok, 1) != 1) {
        exit(1);
    }

    redisSetTimeout(r, tv);
    n = 0;

    while (!ic_stop) {
        if (redisGetReply(r, (void **) &rep) != REDIS_OK) {
            if (r->err == REDIS_ERR_IO && (errno == EAGAIN
                                           || errno == EWOULDBLOCK))
            {
                r->err = 0;
                r->errstr[0] = '\0';
                continue;
            }

            break;
        }

        /* pmessage, pattern, channel, payload; smessage, channel, payload */
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 3
            && rep->element[0]->type == REDIS_REPLY_STRING
            && (strcmp(rep->element[0]->str, "pmessage") == 0
                || strcmp(rep->element[0]->str, "smessage") == 0))
        {
            n++;
        }

        freeReplyObject(rep);
    }

    if (write(out, &n, sizeof(n)) != sizeof(n)) {
        exit(1);
    }

    exit(0);
}


int
main(int argc, char **argv)
{
    int            i, p[2], sp[2], rp[2], status;
    char          *body, *path, *env, sha[64], ok;
    pid_t         *pids, spid;
    double         t0, t1, cpu0, cpu1;
    long long      calls, errors, n, counts[2], received;
    ic_conf_t      c;
    FILE          *jf;
    redisReply    *rep;
    redisContext  *r;

    memset(&c, 0, sizeof(c));
    c.host = "127.0.0.1";
    c.port = 6379;
    c.script = "bare";
    c.scripts_dir = "./redis-scripts";
    c.size = 200;
    c.rooms = 100;
    c.procs = 2;
    c.pipeline = 1;
    c.duration = 10;
    c.maxlen = 1000;

    for (i = 1; i < argc; i++) {
        const char  *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(o, "--help") == 0) {
            ic_usage(stdout);
            return 0;
        }

        if (v == NULL) {
            ic_usage(stderr);
            return 2;
        }

        i++;

        if (strcmp(o, "--redis") == 0) {
            char  *colon = strrchr(v, ':');

            c.host = v;
            if (colon) {
                *colon = '\0';
                c.port = atoi(colon + 1);
            }

        } else if (strcmp(o, "--script") == 0) {
            c.script = v;
        } else if (strcmp(o, "--scripts") == 0) {
            c.scripts_dir = v;
        } else if (strcmp(o, "--size") == 0) {
            c.size = (size_t) atol(v);
        } else if (strcmp(o, "--rooms") == 0) {
            c.rooms = atoi(v);
        } else if (strcmp(o, "--procs") == 0) {
            c.procs = atoi(v);
        } else if (strcmp(o, "--pipeline") == 0) {
            c.pipeline = atoi(v);
        } else if (strcmp(o, "--duration") == 0) {
            c.duration = atof(v);
        } else if (strcmp(o, "--maxlen") == 0) {
            c.maxlen = atol(v);
        } else if (strcmp(o, "--json") == 0) {
            c.json = v;
        } else {
            fprintf(stderr, "ioa-ceiling: unknown option %s\n", o);
            ic_usage(stderr);
            return 2;
        }
    }

    if ((strcmp(c.script, "bare") != 0 && strcmp(c.script, "post") != 0)
        || c.size < 16 || c.size > (64 << 20) || c.rooms < 1 || c.procs < 1
        || c.procs > 256 || c.pipeline < 1 || c.pipeline > 10000
        || c.duration <= 0 || c.maxlen < 0 || c.port < 1 || c.port > 65535)
    {
        fprintf(stderr, "ioa-ceiling: an option is out of range\n");
        ic_usage(stderr);
        return 2;
    }

    /* standalone, or a Cluster master: the rooms' tags say where */
    r = ic_connect(&c);

    if (ic_rooms(&c, r) != 0) {
        return 1;
    }

    /* the script, loaded once: EVALSHA from then on, as the hub does */
    if (strcmp(c.script, "post") == 0) {
        path = malloc(strlen(c.scripts_dir) + 16);
        sprintf(path, "%s/post.lua", c.scripts_dir);
        body = ic_read_file(path);

        if (body == NULL) {
            fprintf(stderr, "ioa-ceiling: %s: %s\n", path, strerror(errno));
            return 1;
        }

        free(path);

    } else {
        body = strdup(c.cluster ? ic_bare_cluster_lua : ic_bare_lua);
    }

    rep = redisCommand(r, "SCRIPT LOAD %s", body);
    if (rep == NULL || rep->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "ioa-ceiling: SCRIPT LOAD: %s\n",
                rep && rep->type == REDIS_REPLY_ERROR ? rep->str : r->errstr);
        return 1;
    }
    snprintf(sha, sizeof(sha), "%s", rep->str);
    freeReplyObject(rep);
    free(body);

    /* fresh rooms, each with the member the calls post as; one DEL per
     * key, since a script may not touch keys of several slots on a
     * Cluster */
    rep = redisCommand(r, "KEYS ceil:{room:*");

    if (rep && rep->type == REDIS_REPLY_ARRAY) {
        for (i = 0; i < (int) rep->elements; i++) {
            freeReplyObject(redisCommand(r, "DEL %b", rep->element[i]->str,
                                         rep->element[i]->len));
        }
    }

    freeReplyObject(rep);

    for (i = 0; i < c.rooms; i++) {
        rep = redisCommand(r, "SADD ceil:{%s}:members bench", c.tags[i]);
        freeReplyObject(rep);
    }

    /* the envelope: JSON of exactly --size bytes */
    env = malloc(c.size + 1);
    n = snprintf(env, c.size + 1, "{\"sender\":\"bench\",\"content\":\"");
    memset(env + n, 'x', c.size - n - 2);
    env[c.size - 2] = '"';
    env[c.size - 1] = '}';
    env[c.size] = '\0';

    if (pipe(p) != 0 || pipe(sp) != 0 || pipe(rp) != 0) {
        perror("pipe");
        return 1;
    }

    spid = fork();
    if (spid == 0) {
        ic_subscriber(&c, sp[1], rp[1]);
    }

    if (read(rp[0], &ok, 1) != 1) {
        fprintf(stderr, "ioa-ceiling: the subscriber did not start\n");
        return 1;
    }

    cpu0 = ic_redis_cpu(r);
    t0 = ic_now();
    pids = calloc(c.procs, sizeof(pid_t));

    for (i = 0; i < c.procs; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            ic_client(&c, sha, env, i, p[1]);
        }
    }

    calls = errors = 0;

    for (i = 0; i < c.procs; i++) {
        if (read(p[0], counts, sizeof(counts)) != sizeof(counts)) {
            fprintf(stderr, "ioa-ceiling: a client process died\n");
            return 1;
        }

        calls += counts[0];
        errors += counts[1];
    }

    t1 = ic_now();
    cpu1 = ic_redis_cpu(r);

    for (i = 0; i < c.procs; i++) {
        waitpid(pids[i], &status, 0);
    }

    nanosleep(&(struct timespec) { 0, 300000000 }, NULL);  /* the last publishes arrive */
    kill(spid, SIGTERM);

    if (read(sp[0], &received, sizeof(received)) != sizeof(received)) {
        received = -1;
    }

    waitpid(spid, &status, 0);

    printf("ioa-ceiling: %sscript %s, %zu B, %d rooms, %d procs, "
           "pipeline %d, %.1f s\n", c.cluster ? "one Cluster master, " : "",
           c.script, c.size, c.rooms, c.procs, c.pipeline, t1 - t0);
    printf("  calls/s      %12.0f\n", calls / (t1 - t0));
    printf("  published    %12lld (received by the subscriber)\n", received);
    printf("  errors       %12lld\n", errors);
    printf("  redis cpu    %11.0f%%\n", 100 * (cpu1 - cpu0) / (t1 - t0));

    if (c.json) {
        jf = strcmp(c.json, "-") == 0 ? stdout : fopen(c.json, "w");

        if (jf == NULL) {
            fprintf(stderr, "ioa-ceiling: %s: %s\n", c.json, strerror(errno));
            return 1;
        }

        fprintf(jf, "{\"tool\":\"ioa-ceiling\",\"redis\":\"%s\","
                "\"script\":\"%s\",\"size\":%zu,"
                "\"rooms\":%d,\"procs\":%d,\"pipeline\":%d,\"maxlen\":%ld,"
                "\"seconds\":%.3f,\"calls\":%lld,\"calls_per_s\":%.0f,"
                "\"received\":%lld,\"errors\":%lld,\"redis_cpu_pct\":%.1f}\n",
                c.cluster ? "cluster master" : "standalone",
                c.script, c.size, c.rooms, c.procs, c.pipeline, c.maxlen,
                t1 - t0, calls, calls / (t1 - t0), received, errors,
                100 * (cpu1 - cpu0) / (t1 - t0));

        if (jf != stdout) {
            fclose(jf);
        }
    }

    redisFree(r);
    free(env);
    free(pids);

    return errors ? 1 : 0;
}
