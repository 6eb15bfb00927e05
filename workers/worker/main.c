/*
 * ioa-worker: command line, signals, the start.
 *
 *   ioa-worker --redis HOST:PORT[,HOST:PORT...] [--prefix ioa:]
 *              [--scripts DIR]
 *              [--name ioa-coordinator] [--consumer NAME]
 *              [--task-timeout SEC] [--turn-timeout SEC]
 *              [--claim-idle SEC] [--token-budget N] [--max-goals N]
 *
 * The planner: an LLM when IOA_LLM_BASE_URL (or OPENAI_BASE_URL) is set
 * (llm.c reads the environment), else the built-in deterministic one.  The
 * start line in the log says which.
 *
 * The goals themselves run in engine.c: many at once on one event loop,
 * up to --max-goals, each a state machine that waits without holding
 * anything but its memory.  Here: the options, their defaults and checks,
 * and the start (signals, the Redis client, the LLM configuration, the
 * first log line).
 *
 * SIGTERM and SIGINT set iw_stop: the step in flight finishes, every job
 * the process holds is released (idle time set far in the past) so that
 * other workers take them over at once, and the process exits 0.
 */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iw.h"
#include "llm.h"


/* --max-goals: a waiting goal costs a few KiB, so the default is set by
 * what one process' Redis round trips can serve, not by memory */
#define IW_MAX_GOALS_DEFAULT  2000
#define IW_MAX_GOALS_LIMIT    100000


volatile sig_atomic_t  iw_stop;


static void iw_on_signal(int signo);
static int iw_parse_seconds(const char *opt, const char *v, long long *ms);
static void iw_usage(FILE *f);
static int iw_conf_defaults(iw_conf_t *conf);
static int iw_parse_args(iw_conf_t *conf, int argc, char **argv);
static int iw_option(iw_conf_t *conf, int c, const char *arg);
static int iw_start(iw_conf_t *conf);
static void iw_conf_free(iw_conf_t *conf);


static void
iw_on_signal(int signo)
{
    (void) signo;
    iw_stop = 1;
}


static void
iw_usage(FILE *f)
{
    fprintf(f,
        "usage: ioa-worker --redis HOST:PORT[,HOST:PORT...] [options]\n"
        "       ioa-worker verify-room [options] COMM_ID   (--help: its own)\n"
        "\n"
        "Takes goals from the ioa hub's job stream and runs them: team\n"
        "formation, the conversation as the coordinator agent, the\n"
        "conclusion.  Run as many as you like; they share the work.\n"
        "\n"
        "  --redis HOST:PORT    Redis of the agent network (127.0.0.1:6379);\n"
        "                       for a Redis Cluster, one or more nodes,\n"
        "                       comma-separated (found out at connect)\n"
        "  --redis-user NAME    Redis AUTH user (an ACL user; default: the\n"
        "                       default user), as ioa_redis_user\n"
        "  --redis-password-file FILE\n"
        "                       Redis AUTH password, as\n"
        "                       ioa_redis_password_file (else the\n"
        "                       IOA_REDIS_PASSWORD variable; none: no AUTH)\n"
        "  --prefix P           key prefix, as ioa_redis_prefix (ioa:)\n"
        "  --scripts DIR        the hub's redis-scripts directory\n"
        "                       (./redis-scripts)\n"
        "  --name NAME          the coordinator agent (ioa-coordinator)\n"
        "  --consumer NAME      name in the consumer group (host-pid)\n"
        "  --task-timeout SEC   a task that does not report back in time is\n"
        "                       timed out and the goal goes on (60)\n"
        "  --turn-timeout SEC   an agent that speaks the protocol has this\n"
        "                       long for its discussion turn (30)\n"
        "  --claim-idle SEC     a goal whose worker was silent this long is\n"
        "                       taken over (15)\n"
        "  --goal-retention SEC an ended goal's record and event feed are\n"
        "                       removed this long after it ended, its job\n"
        "                       at once (172800: 2 days; off keeps them)\n"
        "  --health-file FILE   touched after every heartbeat Redis took\n"
        "                       (each second while connected): its age\n"
        "                       says whether the worker works (none)\n"
        "  --token-budget N     LLM tokens per goal; reaching it concludes\n"
        "                       the goal (IOA_LLM_TOKEN_BUDGET, 0: none;\n"
        "                       default 100000)\n"
        "  --max-rounds N       rounds of tasks per goal: after each, the\n"
        "                       coordinator re-routes failed parts, iterates\n"
        "                       partial ones or concludes (3, at most 9)\n"
        "  --max-attempts N     agents tried per part before it is reported\n"
        "                       as not done (2)\n"
        "  --goal-timeout SEC   the longest a goal may run from its launch;\n"
        "                       a goal's own deadline_s may be shorter (0:\n"
        "                       no limit but deadline_s; default 0)\n"
        "  --offline-grace SEC  an assignee offline this long gives its task\n"
        "                       up, and the part is re-routed (10; 0: wait\n"
        "                       for --task-timeout)\n"
        "  --min-score S        the weakest BM25 match the built-in planner\n"
        "                       hands a part to (0.8)\n"
        "  --max-goals N        goals this process runs at once; at the cap\n"
        "                       it takes no more from the queue (2000)\n"
        "  --help\n"
        "\n"
        "LLM (any OpenAI-compatible chat completions endpoint):\n"
        "  IOA_LLM_BASE_URL (or OPENAI_BASE_URL), IOA_LLM_API_KEY (or\n"
        "  OPENAI_API_KEY), IOA_LLM_MODEL, IOA_LLM_TIMEOUT,\n"
        "  IOA_LLM_MAX_ATTEMPTS, IOA_LLM_RESPONSE_FORMAT.  Unset: the\n"
        "  built-in planner.\n");
}


/* seconds, fractions allowed ("0.5"), > 0 */

static int
iw_parse_seconds(const char *opt, const char *v, long long *ms)
{
    char    *end;
    double   d;

    errno = 0;
    d = strtod(v, &end);

    if (errno || end == v || *end != '\0' || !(d > 0) || d > 86400 * 365) {
        fprintf(stderr, "ioa-worker: %s: \"%s\" is not a number of seconds "
                "above 0\n", opt, v);
        return -1;
    }

    *ms = (long long) (d * 1000 + 0.5);

    if (*ms == 0) {
        *ms = 1;
    }

    return 0;
}


/* a count >= 0 */

static int
iw_parse_count(const char *opt, const char *v, long long *n)
{
    char  *end;

    errno = 0;
    *n = strtoll(v, &end, 10);

    if (errno || end == v || *end != '\0' || *n < 0) {
        fprintf(stderr, "ioa-worker: %s: \"%s\" is not a count (0 or "
                "more)\n", opt, v);
        return -1;
    }

    return 0;
}


/* a BM25 score, >= 0 */

static int
iw_parse_score(const char *v, double *score)
{
    char  *end;

    errno = 0;
    *score = strtod(v, &end);

    if (errno || end == v || *end != '\0' || !(*score >= 0)
        || *score > 1000)
    {
        fprintf(stderr, "ioa-worker: --min-score: \"%s\" is not a score "
                "between 0 and 1000\n", v);
        return -1;
    }

    return 0;
}


/* HOST:PORT[,HOST:PORT...]: one standalone Redis, or seeds of a Redis
 * Cluster (which of the two is found out when connecting) */

int
iw_parse_redis(iw_conf_t *conf, const char *v)
{
    int          i;
    long         port;
    char        *end, *item, *colon, *all, *next;
    iw_addr_t   *a;

    for (i = 0; i < conf->nseeds; i++) {
        free(conf->seeds[i].host);
    }

    free(conf->seeds);
    free(conf->redis);

    conf->redis = ioa_strdup(v);
    conf->seeds = NULL;
    conf->nseeds = 0;

    all = ioa_strdup(v);

    for (item = all; item; item = next) {
        next = strchr(item, ',');

        if (next) {
            *next++ = '\0';
        }

        conf->seeds = ioa_realloc(conf->seeds, (size_t) (conf->nseeds + 1)
                                              * sizeof(iw_addr_t));
        a = &conf->seeds[conf->nseeds];
        colon = strrchr(item, ':');

        if (colon == NULL) {
            port = 6379;

        } else {
            errno = 0;
            port = strtol(colon + 1, &end, 10);

            if (colon == item || errno || *end != '\0' || port < 1
                || port > 65535)
            {
                fprintf(stderr, "ioa-worker: --redis: \"%s\" is not "
                        "HOST:PORT\n", item);
                free(all);
                return -1;
            }

            *colon = '\0';
        }

        if (*item == '\0') {
            fprintf(stderr, "ioa-worker: --redis: an empty address in "
                    "\"%s\"\n", v);
            free(all);
            return -1;
        }

        a->host = ioa_strdup(item);
        a->port = (int) port;
        conf->nseeds++;
    }

    free(all);

    return 0;
}


int
main(int argc, char **argv)
{
    int        rc;
    iw_conf_t  conf;

    ioa_fatal_log = iw_log_fatal;

    if (iw_conf_defaults(&conf) != 0 || iw_loop_init() != IW_OK) {
        return 2;
    }

    /* an operator's command rather than a worker: ioa-worker verify-room */
    if (argc > 1 && strcmp(argv[1], "verify-room") == 0) {
        return iw_verify_room_main(&conf, argc - 1, argv + 1);
    }

    rc = iw_parse_args(&conf, argc, argv);
    if (rc >= 0) {
        return rc;                      /* --help, or a bad option */
    }

    rc = iw_start(&conf);
    if (rc != 0) {
        return rc;
    }

    iw_engine_run(&conf);

    iw_info("stopped");
    iw_conf_free(&conf);
    iw_loop_free();

    return 0;
}


/* the defaults, in one visible place */

static int
iw_conf_defaults(iw_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf));

    if (iw_parse_redis(conf, "127.0.0.1:6379") != 0) {
        return -1;
    }

    conf->prefix = ioa_strdup("ioa:");
    conf->scripts_dir = ioa_strdup("./redis-scripts");
    conf->name = ioa_strdup("ioa-coordinator");
    conf->task_timeout_ms = 60000;
    conf->turn_timeout_ms = 30000;
    conf->claim_idle_ms = 15000;
    conf->goal_retention_ms = 2LL * 86400 * 1000;
    conf->token_budget = 100000;
    conf->max_rounds = 3;
    conf->max_attempts = 2;
    conf->min_score = 0.8;
    conf->offline_grace_ms = 10000;
    conf->max_goals = IW_MAX_GOALS_DEFAULT;


    return 0;
}


/* the command line (and IOA_LLM_TOKEN_BUDGET): -1 to go on, else the
 * exit status (0 after --help, 2 for a bad option) */

static int
iw_parse_args(iw_conf_t *conf, int argc, char **argv)
{
    int          c, rc;
    char        *env, host[HOST_NAME_MAX + 1];

    static const struct option  opts[] = {
        { "redis", required_argument, NULL, 'r' },
        { "prefix", required_argument, NULL, 'p' },
        { "redis-user", required_argument, NULL, 'U' },
        { "redis-password-file", required_argument, NULL, 'P' },
        { "scripts", required_argument, NULL, 's' },
        { "name", required_argument, NULL, 'n' },
        { "consumer", required_argument, NULL, 'c' },
        { "task-timeout", required_argument, NULL, 't' },
        { "claim-idle", required_argument, NULL, 'i' },
        { "goal-retention", required_argument, NULL, 'K' },
        { "turn-timeout", required_argument, NULL, 'u' },
        { "token-budget", required_argument, NULL, 'b' },
        { "max-rounds", required_argument, NULL, 'R' },
        { "max-attempts", required_argument, NULL, 'A' },
        { "min-score", required_argument, NULL, 'S' },
        { "offline-grace", required_argument, NULL, 'O' },
        { "goal-timeout", required_argument, NULL, 'G' },
        { "max-goals", required_argument, NULL, 'M' },
        { "health-file", required_argument, NULL, 'H' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };

    env = getenv("IOA_LLM_TOKEN_BUDGET");

    if (env && *env && iw_parse_count("IOA_LLM_TOKEN_BUDGET", env,
                                      &conf->token_budget) != 0)
    {
        return 2;
    }

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        rc = iw_option(conf, c, optarg);
        if (rc >= 0) {
            return rc;
        }
    }

    if (optind < argc) {
        fprintf(stderr, "ioa-worker: unexpected argument \"%s\"\n",
                argv[optind]);
        iw_usage(stderr);
        return 2;
    }

    if (conf->name[0] == '\0'
        || (conf->consumer && conf->consumer[0] == '\0'))
    {
        fprintf(stderr, "ioa-worker: --name and --consumer must not be "
                "empty\n");
        return 2;
    }

    if (conf->consumer == NULL) {
        if (gethostname(host, sizeof(host)) != 0) {
            strcpy(host, "localhost");
        }

        host[sizeof(host) - 1] = '\0';
        conf->consumer = ioa_sprintf("%s-%d", host, (int) getpid());
    }

    conf->reg_base = ioa_sprintf("%s{reg}:", conf->prefix);
    conf->jobs_key = ioa_sprintf("%s{jobs}:goals", conf->prefix);
    conf->goals_base = ioa_sprintf("%s{goals}:", conf->prefix);
    conf->workers_base = ioa_sprintf("%s{workers}:", conf->prefix);

    return -1;
}


/* one option: -1 taken, else the exit status */

static int
iw_option(iw_conf_t *conf, int c, const char *arg)
{
    switch (c) {
    case 'r':
        if (iw_parse_redis(conf, arg) != 0) {
            return 2;
        }
        break;
    case 'H':
        ioa_health_set(arg);
        break;
    case 'U':
        free(conf->redis_user);
        conf->redis_user = ioa_strdup(arg);
        break;
    case 'P':
        free(conf->redis_password_file);
        conf->redis_password_file = ioa_strdup(arg);
        break;
    case 'p':
        free(conf->prefix);
        conf->prefix = ioa_strdup(arg);
        break;
    case 's':
        free(conf->scripts_dir);
        conf->scripts_dir = ioa_strdup(arg);
        break;
    case 'n':
        free(conf->name);
        conf->name = ioa_strdup(arg);
        break;
    case 'c':
        free(conf->consumer);
        conf->consumer = ioa_strdup(arg);
        break;
    case 't':
        if (iw_parse_seconds("--task-timeout", arg,
                             &conf->task_timeout_ms) != 0)
        {
            return 2;
        }
        break;
    case 'i':
        if (iw_parse_seconds("--claim-idle", arg, &conf->claim_idle_ms)
            != 0)
        {
            return 2;
        }
        break;
    case 'K':
        if (strcmp(arg, "off") == 0) {
            conf->goal_retention_ms = 0;

        } else if (iw_parse_seconds("--goal-retention", arg,
                                    &conf->goal_retention_ms)
                   != 0)
        {
            return 2;
        }
        break;
    case 'u':
        if (iw_parse_seconds("--turn-timeout", arg,
                             &conf->turn_timeout_ms) != 0)
        {
            return 2;
        }
        break;
    case 'b':
        if (iw_parse_count("--token-budget", arg, &conf->token_budget)
            != 0)
        {
            return 2;
        }
        break;
    case 'R':
        if (iw_parse_count("--max-rounds", arg, &conf->max_rounds)
            != 0)
        {
            return 2;
        }

        if (conf->max_rounds < 1 || conf->max_rounds > IW_MAX_ROUNDS) {
            fprintf(stderr, "ioa-worker: --max-rounds: %lld is not "
                    "between 1 and %d\n", conf->max_rounds,
                    IW_MAX_ROUNDS);
            return 2;
        }
        break;
    case 'A':
        if (iw_parse_count("--max-attempts", arg, &conf->max_attempts)
            != 0)
        {
            return 2;
        }

        if (conf->max_attempts < 1 || conf->max_attempts > 100) {
            fprintf(stderr, "ioa-worker: --max-attempts: %lld is not "
                    "between 1 and 100\n", conf->max_attempts);
            return 2;
        }
        break;
    case 'M':
        if (iw_parse_count("--max-goals", arg, &conf->max_goals) != 0) {
            return 2;
        }

        if (conf->max_goals < 1 || conf->max_goals > IW_MAX_GOALS_LIMIT) {
            fprintf(stderr, "ioa-worker: --max-goals: %lld is not between "
                    "1 and %d\n", conf->max_goals, IW_MAX_GOALS_LIMIT);
            return 2;
        }
        break;
    case 'O':
        if (strcmp(arg, "0") == 0) {
            conf->offline_grace_ms = 0;

        } else if (iw_parse_seconds("--offline-grace", arg,
                                    &conf->offline_grace_ms)
                   != 0)
        {
            return 2;
        }
        break;
    case 'G':
        if (strcmp(arg, "0") == 0) {
            conf->goal_timeout_ms = 0;

        } else if (iw_parse_seconds("--goal-timeout", arg,
                                    &conf->goal_timeout_ms) != 0)
        {
            return 2;
        }
        break;
    case 'S':
        if (iw_parse_score(arg, &conf->min_score) != 0) {
            return 2;
        }
        break;
    case 'h':
        iw_usage(stdout);
        return 0;
    default:
        iw_usage(stderr);
        return 2;
    }

    return -1;
}


/* signals, the Redis client, the LLM configuration, the first log line */

static int
iw_start(iw_conf_t *conf)
{
    int                rc;
    char              *planner;
    struct sigaction   sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = iw_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (iw_redis_init(conf) != IW_OK) {
        return 1;
    }

    conf->llm = ioa_alloc(sizeof(iw_llm_conf_t));
    rc = iw_llm_conf_from_env(conf->llm);

    if (rc < 0) {
        return 2;
    }

    if (rc == 0) {
        free(conf->llm);
        conf->llm = NULL;
        planner = ioa_strdup("built-in planner (no IOA_LLM_BASE_URL)");

    } else {
        planner = ioa_sprintf("LLM planner: %s at %s, token budget %lld",
                             conf->llm->model, conf->llm->base_url,
                             conf->token_budget);
    }

    srand((unsigned) (getpid() ^ ioa_wall_ms()));

    iw_stats_init(conf);

    iw_info("started as %s (coordinator %s, redis %s, prefix \"%s\", "
            "task timeout %lld ms, claim idle %lld ms, %s)",
            conf->consumer, conf->name, conf->redis,
            conf->prefix, conf->task_timeout_ms, conf->claim_idle_ms,
            planner);
    free(planner);

    return 0;
}


static void
iw_conf_free(iw_conf_t *conf)
{
    int  c;

    for (c = 0; c < conf->nseeds; c++) {
        free(conf->seeds[c].host);
    }

    free(conf->seeds);
    free(conf->redis);
    free(conf->prefix);
    free(conf->scripts_dir);
    free(conf->name);
    free(conf->consumer);
    free(conf->reg_base);
    free(conf->jobs_key);
    free(conf->goals_base);
    free(conf->workers_base);

    if (conf->llm) {
        iw_llm_conf_free(conf->llm);
        free(conf->llm);
    }

}
