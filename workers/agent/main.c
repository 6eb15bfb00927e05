
/*
 * ioa-agent: options, start-up and shutdown.
 *
 *   ioa-agent --name Worker --desc "uppercases text" --exec tr a-z A-Z
 *
 * Start-up: parse options (everything after --exec is the program's argv,
 * untouched), make sure descriptors 0-2 exist (a pipe must never land on
 * them, or a child's dup2 would clobber it), set up the loop and the hub
 * connection, and run.  With --a2a the A2A agent's card comes first
 * (a2a.c): it may give the name, description and tags, and a card that
 * cannot be had ends the start with exit 2, as a bad option does.
 *
 * Shutdown, on SIGTERM or SIGINT (or a fatal answer from the hub):
 *   1. the inbox closes: no new work;
 *   2. running tasks are cancelled: programs get SIGTERM (SIGKILL 2 s
 *      later), http calls are dropped, A2A tasks get tasks/cancel (its
 *      answer awaited up to 3 s); each still reports a "failed" result,
 *      so its assigner is not left waiting;
 *   3. the loop runs until every task has reported and the outbox is
 *      empty, or IOA_DRAIN_TIME has passed (the hub may be down);
 *   4. exit 0 (1 after a fatal hub answer).
 * A second signal exits at once, SIGKILLing the programs still running.
 * SIGHUP is ignored: the agent has nothing to reload, and a closed terminal
 * should not cost running tasks.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ioa_agent.h"


#define IOA_DRAIN_TIME 5000 /* ms */

#define IOA_DEFAULT_HUB        "http://127.0.0.1:7788"
#define IOA_DEFAULT_TYPE       "Thing Assistant"
#define IOA_DEFAULT_TIMEOUT    600   /* s */
#define IOA_DEFAULT_MAX_RESULT 32768 /* half the hub's 64k default */
#define IOA_DEFAULT_BACKOFF    10000 /* ms */


ioa_conf_t ioa_conf;

static int       ioa_stopping;
static int       ioa_exit_code;
static long long ioa_stop_deadline; /* ioa_mono_ms() */


/* clang-format off: the help text is laid out as it prints */

static void
ioa_usage(FILE *f)
{
    fprintf(
        f,
        "usage: ioa-agent [options] --name NAME --desc TEXT --exec PROGRAM "
        "[ARG...]\n"
        "       ioa-agent [options] --name NAME --desc TEXT --http URL\n"
        "       ioa-agent [options] [--name NAME] [--desc TEXT] --a2a URL\n"
        "\n"
        "Connects a program that turns a task into a result to an ioa hub: it\n"
        "registers NAME, follows the agent's inbox (SSE, resuming after "
        "outages\n"
        "with Last-Event-ID), and answers every task assigned to NAME (IoA's\n"
        "SYNC/ASYNC_TASK_ASSIGNMENT) with INFORM_TASK_PROGRESS, then\n"
        "INFORM_TASK_RESULT carrying \"task_status\": completed, failed or\n"
        "timed_out.  Tasks run concurrently.\n"
        "\n"
        "Agent:\n"
        "  --hub URL            the hub's base URL (default " IOA_DEFAULT_HUB
        ")\n"
        "  --token JWT          the hub's token for NAME (\"agent\" scope), sent "
        "as\n"
        "                       \"Authorization: Bearer\"; default: the "
        "IOA_TOKEN\n"
        "                       environment variable\n"
        "  --name NAME          the agent's name (required but with --a2a)\n"
        "  --desc TEXT          what it can do; the registry searches this "
        "(required\n"
        "                       but with --a2a)\n"
        "  --type TYPE          \"Thing Assistant\" (default) or \"Human "
        "Assistant\"\n"
        "  --tag TAG            a capability tag, indexed with the "
        "description;\n"
        "                       repeat for several\n"
        "  --speaks-protocol    register as an agent that takes its own "
        "discussion\n"
        "                       turns: a DISCUSSION addressed to it is given "
        "to the\n"
        "                       adapter and the output is posted as the reply\n"
        "\n"
        "Adapter (exactly one; --exec must come last):\n"
        "  --exec PROGRAM [ARG...]\n"
        "                       run PROGRAM with these arguments for each task "
        "(no\n"
        "                       shell, nothing is interpolated); the task is "
        "written\n"
        "                       to its stdin as markdown (\"# <abstract>\\n## "
        "Task\n"
        "                       Description\\n<description>\\n\"), its stdout "
        "is the\n"
        "                       result; exit 0 = completed, anything else = "
        "failed\n"
        "                       with the end of its stderr; PROGRAM is looked "
        "up in\n"
        "                       PATH\n"
        "  --http URL           IoA's tool-agent API: POST URL/run with\n"
        "                       {\"task_desc\",\"uid\",\"model\"}; the "
        "answer's body is\n"
        "                       the result (plain text, a JSON string, or a "
        "JSON\n"
        "                       object's \"conclusion\"); non-2xx = failed\n"
        "  --a2a URL            an A2A agent (JSON-RPC, A2A 1.0 or 0.3): URL is "
        "its\n"
        "                       base URL (the card is "
        "URL/.well-known/agent-card.json)\n"
        "                       or its card's URL (ending in .json).  The "
        "card is\n"
        "                       fetched and checked at start (exit 2 if it "
        "cannot\n"
        "                       be); its name, description and skills' tags "
        "are\n"
        "                       the defaults of --name, --desc and --tag.  "
        "Each task\n"
        "                       is a message to the agent (streamed when the "
        "card\n"
        "                       says so, else sent and polled); its status "
        "messages\n"
        "                       become progress, its artifacts the result; "
        "failed,\n"
        "                       rejected, canceled, input-required and "
        "auth-required\n"
        "                       are failed; a timeout or a cancel sends "
        "tasks/cancel\n"
        "\n"
        "Limits:\n"
        "  --timeout SECONDS    per task; the program gets SIGTERM, then "
        "SIGKILL 2 s\n"
        "                       later (an A2A agent gets tasks/cancel), and "
        "the task\n"
        "                       is timed_out (default %d, 0 = none)\n"
        "  --partial-exit CODE  with --exec: this exit status means the task\n"
        "                       is partly done (task_status \"partial\", "
        "stdout\n"
        "                       the result so far); default: none, any "
        "status\n"
        "                       but 0 is failed\n"
        "  --max-result BYTES   longest task_conclusion, as JSON (default %d; "
        "the\n"
        "                       hub refuses envelopes over "
        "ioa_max_message_size)\n"
        "  --backoff-max SECONDS\n"
        "                       longest wait between reconnects (default %d)\n"
        "\n"
        "Other:\n"
        "  --health-file FILE   touched whenever the inbox delivers "
        "something, the\n"
        "                       hub's keepalives too (every 15 s while "
        "connected):\n"
        "                       its age says whether the agent is "
        "connected (none)\n"
        "  -v, --verbose        log debug records too\n"
        "  -q, --quiet          log warnings and errors only\n"
        "  -h, --help           this text\n"
        "  --version            the version\n"
        "\n"
        "Logs go to stderr, one record per line.  SIGTERM or SIGINT stops the\n"
        "agent: running tasks are cancelled and reported as failed first.\n",
        IOA_DEFAULT_TIMEOUT, IOA_DEFAULT_MAX_RESULT,
        IOA_DEFAULT_BACKOFF / 1000);
}

/* clang-format on */


static void ioa_check_name(void);


static void
ioa_die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "ioa-agent: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'ioa-agent --help'.\n");
    exit(2);
}


/* a base URL: http(s)://..., without the trailing slash */

static const char *
ioa_base_url(const char *opt, const char *url)
{
    char  *u;
    size_t len;

    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        fprintf(stderr,
                "ioa-agent: %s must be an http:// or https:// URL, "
                "not \"%s\"\n",
                opt, url);
        exit(2);
    }

    u = ioa_strdup(url);
    len = strlen(u);

    while (len && u[len - 1] == '/') {
        u[--len] = '\0';
    }

    return u;
}


static unsigned long
ioa_number(const char *opt, const char *s, unsigned long min, unsigned long max)
{
    char         *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);

    if (errno || end == s || *end || *s == '-' || v < min || v > max) {
        fprintf(stderr,
                "ioa-agent: %s must be a whole number from %lu to "
                "%lu, not \"%s\"\n",
                opt, min, max, s);
        exit(2);
    }

    return v;
}


static void
ioa_parse(int argc, char **argv)
{
    int         i;
    char       *arg, *eq;
    size_t      len;
    const char *val;

    ioa_conf.hub = IOA_DEFAULT_HUB;
    /* the environment keeps the token out of `ps` */
    ioa_conf.token = getenv("IOA_TOKEN");
    ioa_conf.type = IOA_DEFAULT_TYPE;
    ioa_conf.timeout = IOA_DEFAULT_TIMEOUT;
    ioa_conf.partial_exit = -1;
    ioa_conf.max_result = IOA_DEFAULT_MAX_RESULT;
    ioa_conf.backoff_max = IOA_DEFAULT_BACKOFF;
    ioa_conf.tags = ioa_calloc(sizeof(char *) * (size_t) argc);

    for (i = 1; i < argc; i++) {
        arg = argv[i];

        if (strcmp(arg, "--exec") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                ioa_die_usage("%s needs a program", arg);
            }

            /* argv[argc] is NULL: the program's argv is terminated */
            ioa_conf.exec_argv = &argv[i + 1];
            break;
        }

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            ioa_usage(stdout);
            exit(0);
        }

        if (strcmp(arg, "--version") == 0) {
            printf("ioa-agent %s\n", IOA_AGENT_VERSION);
            exit(0);
        }

        if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
            ioa_log_level = IOA_LOG_DEBUG;
            continue;
        }

        if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0) {
            ioa_log_level = IOA_LOG_WARN;
            continue;
        }

        if (strcmp(arg, "--speaks-protocol") == 0) {
            ioa_conf.speaks_protocol = 1;
            continue;
        }

        /* options with a value: "--opt value" or "--opt=value" */

        if (strncmp(arg, "--", 2) != 0) {
            ioa_die_usage("unexpected argument \"%s\"", arg);
        }

        eq = strchr(arg, '=');

        if (eq) {
            len = (size_t) (eq - arg);
            val = eq + 1;

        } else {
            len = strlen(arg);

            if (i + 1 >= argc) {
                ioa_die_usage("%s needs a value", arg);
            }

            val = argv[++i];
        }

#define ioa_opt(name) (len == sizeof(name) - 1 && strncmp(arg, name, len) == 0)

        if (ioa_opt("--hub")) {
            ioa_conf.hub = ioa_base_url("--hub", val);

        } else if (ioa_opt("--token")) {
            ioa_conf.token = val;

        } else if (ioa_opt("--name")) {
            ioa_conf.name = val;

        } else if (ioa_opt("--desc")) {
            ioa_conf.desc = val;

        } else if (ioa_opt("--type")) {
            ioa_conf.type = val;

        } else if (ioa_opt("--tag")) {
            ioa_conf.tags[ioa_conf.ntags++] = val;

        } else if (ioa_opt("--http")) {
            ioa_conf.http_url = ioa_base_url("--http", val);

        } else if (ioa_opt("--a2a")) {
            ioa_conf.a2a_url = ioa_base_url("--a2a", val);

        } else if (ioa_opt("--timeout")) {
            ioa_conf.timeout =
                (unsigned) ioa_number("--timeout", val, 0, 7 * 86400);

        } else if (ioa_opt("--partial-exit")) {
            ioa_conf.partial_exit =
                (int) ioa_number("--partial-exit", val, 1, 255);

        } else if (ioa_opt("--health-file")) {
            ioa_health_set(val);

        } else if (ioa_opt("--max-result")) {
            ioa_conf.max_result =
                ioa_number("--max-result", val, 256, 16 * 1024 * 1024);

        } else if (ioa_opt("--backoff-max")) {
            ioa_conf.backoff_max =
                (unsigned) ioa_number("--backoff-max", val, 1, 3600) * 1000;

        } else {
            ioa_die_usage("unknown option \"%s\"", arg);
        }

#undef ioa_opt
    }

    /* with --a2a, the card fills in what is missing: see main() */

    if (ioa_conf.a2a_url == NULL || ioa_conf.name) {
        ioa_check_name();
    }

    if (ioa_conf.desc == NULL && ioa_conf.a2a_url == NULL) {
        ioa_die_usage("%s is required", "--desc");
    }

    if (strcmp(ioa_conf.type, "Thing Assistant") != 0
        && strcmp(ioa_conf.type, "Human Assistant") != 0)
    {
        ioa_die_usage("--type is \"Thing Assistant\" or \"Human Assistant\", "
                      "not \"%s\"",
                      ioa_conf.type);
    }

    if ((ioa_conf.exec_argv != NULL) + (ioa_conf.http_url != NULL)
            + (ioa_conf.a2a_url != NULL)
        != 1)
    {
        ioa_die_usage("%s", "give exactly one of --exec, --http and --a2a");
    }
}


static void
ioa_check_name(void)
{
    if (ioa_conf.name == NULL || ioa_conf.name[0] == '\0') {
        ioa_die_usage("%s is required", "--name");
    }

    if (!ioa_valid_name(ioa_conf.name)) {
        ioa_die_usage("--name \"%s\" is not a name the hub accepts: "
                      IOA_NAME_RULE, ioa_conf.name);
    }
}


/* descriptors 0, 1 and 2 must be open: see the top */

static void
ioa_std_fds(void)
{
    int fd;

    for (;;) {
        fd = open("/dev/null", O_RDWR);

        if (fd < 0 || fd > STDERR_FILENO) {
            if (fd >= 0) {
                close(fd);
            }

            return;
        }
    }
}


static void
ioa_signal(int signo)
{
    switch (signo) {

    case SIGCHLD:
        ioa_exec_sigchld();
        break;

    case SIGTERM:
    case SIGINT:
        if (ioa_stopping) {
            ioa_log_warn("second signal, exiting now");
            ioa_exec_kill_all();
            exit(1);
        }

        ioa_shutdown(0, signo == SIGTERM ? "SIGTERM" : "SIGINT");
        break;

    case SIGHUP:
        ioa_log_info("SIGHUP ignored");
        break;
    }
}


void
ioa_shutdown(int exit_code, const char *why)
{
    if (ioa_stopping) {
        return;
    }

    ioa_stopping = 1;
    ioa_exit_code = exit_code;
    ioa_stop_deadline = ioa_mono_ms() + IOA_DRAIN_TIME;

    if (ioa_task_running()) {
        ioa_log_info("shutting down (%s): cancelling %zu running task(s)", why,
                     ioa_task_running());

    } else {
        ioa_log_info("shutting down (%s)", why);
    }

    ioa_hub_stop();
    ioa_task_cancel_all();
}


int
ioa_shutting_down(void)
{
    return ioa_stopping;
}


int
main(int argc, char **argv)
{
    ioa_fatal_log = ioa_log_fatal;

    ioa_parse(argc, argv);

    if (ioa_conf.name) {
        ioa_log_agent = ioa_conf.name;
    }

    ioa_std_fds();
    ioa_random_init();

    if (ioa_loop_init(ioa_signal) != 0) {
        return 1;
    }

    if (ioa_conf.a2a_url) {
        /* the card, before the hub: it may name the agent */
        if (ioa_a2a_discover() != 0) {
            return ioa_stopping ? ioa_exit_code : 2;
        }

        ioa_check_name();
        ioa_log_agent = ioa_conf.name;
    }

    if (ioa_hub_init() != 0) {
        return 1;
    }

    if (ioa_conf.exec_argv) {
        ioa_log_info("ioa-agent %s: exec adapter \"%s\", timeout %u s",
                     IOA_AGENT_VERSION, ioa_conf.exec_argv[0],
                     ioa_conf.timeout);

    } else if (ioa_conf.a2a_url) {
        ioa_log_info("ioa-agent %s: a2a adapter, agent card %s, timeout %u s",
                     IOA_AGENT_VERSION, ioa_conf.a2a_card, ioa_conf.timeout);

    } else {
        ioa_log_info("ioa-agent %s: http adapter %s/run, timeout %u s",
                     IOA_AGENT_VERSION, ioa_conf.http_url, ioa_conf.timeout);
    }

    ioa_hub_start();

    for (;;) {
        ioa_loop_once();

        if (!ioa_stopping) {
            continue;
        }

        if (ioa_task_running() == 0 && ioa_hub_outbox_len() == 0) {
            break;
        }

        if (ioa_mono_ms() >= ioa_stop_deadline) {
            ioa_log_warn("giving up after %d ms: %zu task(s) still running, "
                         "%zu envelope(s) not posted",
                         IOA_DRAIN_TIME, ioa_task_running(),
                         ioa_hub_outbox_len());
            ioa_exec_kill_all();
            break;
        }
    }

    ioa_hub_cleanup();
    ioa_loop_done();

    ioa_log_info("exiting (%d)", ioa_exit_code);

    return ioa_exit_code;
}
