/*
 * ioa-llm-check: is the worker's LLM endpoint usable?  One small,
 * schema-constrained request made exactly as the worker makes its calls
 * (same environment, same client: llm.c), and what came of it.
 *
 *   ioa-llm-check [--prompt TEXT] [--messages FILE] [--schema FILE]
 *                 [--schema-name NAME] [--no-schema] [--abort-after MS]
 *
 * The operator runs it after setting IOA_LLM_* to see the endpoint, model
 * and format in use and the model's answer; t/105-llm-client.t runs it
 * against scripted servers, which is what --messages, --schema and
 * --abort-after (the tick says stop) are for.  Everything but the log goes
 * to stdout as "key: value" lines, the log to stderr.
 *
 * Exit: 0 an answer, 1 no answer (the error line says why), 2 bad usage
 * or environment, 3 no LLM configured, 4 stopped (a signal or
 * --abort-after).
 */

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iw.h"
#include "llm.h"


#define IW_CHECK_PROMPT                                                      \
    "This is a connectivity check. Answer with a short greeting in "        \
    "\"greeting\" and true in \"ok\"."

#define IW_CHECK_SCHEMA                                                      \
    "{\"type\":\"object\",\"properties\":{"                                 \
    "\"greeting\":{\"type\":\"string\"},\"ok\":{\"type\":\"boolean\"}},"    \
    "\"required\":[\"greeting\",\"ok\"],\"additionalProperties\":false}"


typedef struct {
    long long    start;
    long long    last;
    long long    longest;             /* the longest time without a tick */
    long long    ticks;
    long long    abort_after;         /* ms, 0: never */
} iw_check_tick_t;


/* llm.c does not look at it, but iw.h declares it for the worker */
volatile sig_atomic_t  iw_stop;


static void iw_check_on_signal(int signo);
static int iw_check_tick(void *data);
static char *iw_check_read(const char *path);
static void iw_check_usage(FILE *f);


static void
iw_check_on_signal(int signo)
{
    (void) signo;

    iw_stop = 1;
}


static int
iw_check_tick(void *data)
{
    long long         now;
    iw_check_tick_t  *t;

    t = data;
    now = ioa_mono_ms();

    if (now - t->last > t->longest) {
        t->longest = now - t->last;
    }

    t->last = now;
    t->ticks++;

    if (iw_stop || (t->abort_after && now - t->start >= t->abort_after)) {
        return IW_STOPPED;
    }

    return 0;
}


static char *
iw_check_read(const char *path)
{
    FILE      *f;
    char       chunk[4096];
    size_t     n;
    ioa_buf_t  b;

    f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return NULL;
    }

    ioa_buf_init(&b);

    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        ioa_buf_add(&b, chunk, n);
    }

    if (ferror(f)) {
        perror(path);
        fclose(f);
        ioa_buf_free(&b);
        return NULL;
    }

    fclose(f);

    return ioa_buf_take(&b);
}


static void
iw_check_usage(FILE *f)
{
    fprintf(f,
        "usage: ioa-llm-check [--prompt TEXT] [--messages FILE]\n"
        "                     [--schema FILE] [--schema-name NAME]\n"
        "                     [--no-schema] [--abort-after MS]\n"
        "\n"
        "Sends one chat completion to the endpoint the worker would use\n"
        "(IOA_LLM_BASE_URL or OPENAI_BASE_URL, IOA_LLM_API_KEY or\n"
        "OPENAI_API_KEY, IOA_LLM_MODEL or OPENAI_MODEL, IOA_LLM_TIMEOUT,\n"
        "IOA_LLM_MAX_ATTEMPTS, IOA_LLM_RESPONSE_FORMAT, IOA_LLM_MAX_TOKENS,\n"
        "IOA_LLM_TEMPERATURE) and prints the JSON answer.\n"
        "\n"
        "  --prompt TEXT       the user message (default: a greeting)\n"
        "  --messages FILE     a JSON array of {\"role\",\"content\"} instead\n"
        "  --schema FILE       the JSON Schema of the answer (default: a\n"
        "                      {\"greeting\", \"ok\"} object)\n"
        "  --schema-name NAME  its name (default: check)\n"
        "  --no-schema         any JSON object will do\n"
        "  --abort-after MS    the tick stops the call after MS\n"
        "\n"
        "Exit: 0 answered, 1 failed, 2 bad usage, 3 no LLM configured,\n"
        "4 stopped.\n");
}


int
main(int argc, char **argv)
{
    int                c, rc, no_schema;
    char              *prompt, *messages, *schema, *name, *end;
    ioa_buf_t          b;
    long long          start;
    iw_llm_conf_t      conf;
    iw_check_tick_t    tick;
    iw_llm_result_t    res;
    struct sigaction   sa;
    const char        *messages_file, *schema_file;

    static const struct option  opts[] = {
        { "prompt",      required_argument, NULL, 'p' },
        { "messages",    required_argument, NULL, 'm' },
        { "schema",      required_argument, NULL, 's' },
        { "schema-name", required_argument, NULL, 'n' },
        { "no-schema",   no_argument,       NULL, 'N' },
        { "abort-after", required_argument, NULL, 'a' },
        { "help",        no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };

    ioa_fatal_log = iw_log_fatal;

    prompt = IW_CHECK_PROMPT;
    name = "check";
    messages_file = NULL;
    schema_file = NULL;
    no_schema = 0;
    memset(&tick, 0, sizeof(tick));

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            prompt = optarg;
            break;
        case 'm':
            messages_file = optarg;
            break;
        case 's':
            schema_file = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'N':
            no_schema = 1;
            break;
        case 'a':
            tick.abort_after = strtoll(optarg, &end, 10);
            if (end == optarg || *end != '\0' || tick.abort_after <= 0) {
                fprintf(stderr, "ioa-llm-check: --abort-after wants "
                        "milliseconds > 0, not \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h':
            iw_check_usage(stdout);
            return 0;
        default:
            iw_check_usage(stderr);
            return 2;
        }
    }

    if (optind < argc) {
        fprintf(stderr, "ioa-llm-check: unexpected argument \"%s\"\n",
                argv[optind]);
        iw_check_usage(stderr);
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = iw_check_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    srand((unsigned) (getpid() ^ ioa_wall_ms()));

    rc = iw_llm_conf_from_env(&conf);

    if (rc < 0) {
        return 2;
    }

    if (rc == 0) {
        printf("no LLM configured: the built-in planner is used (set "
               "IOA_LLM_BASE_URL, e.g. http://127.0.0.1:8080/v1)\n");
        return 3;
    }

    if (messages_file) {
        messages = iw_check_read(messages_file);
        if (messages == NULL) {
            iw_llm_conf_free(&conf);
            return 2;
        }

    } else {
        ioa_buf_init(&b);
        ioa_buf_adds(&b, "[{\"role\":\"user\",\"content\":");
        ioa_json_str(&b, prompt);
        ioa_buf_adds(&b, "}]");
        messages = ioa_buf_take(&b);
    }

    schema = NULL;

    if (schema_file) {
        schema = iw_check_read(schema_file);
        if (schema == NULL) {
            iw_llm_conf_free(&conf);
            free(messages);
            return 2;
        }

    } else if (!no_schema) {
        schema = ioa_strdup(IW_CHECK_SCHEMA);
    }

    printf("endpoint: %s\n", conf.url);
    printf("model: %s\n", conf.model);
    printf("format: %s\n",
           conf.format == IW_LLM_FORMAT_SCHEMA ? "json_schema"
           : conf.format == IW_LLM_FORMAT_OBJECT ? "json_object" : "none");
    printf("api key: %s\n", conf.api_key ? "set" : "none");
    printf("timeout: %lld ms per attempt, %d attempts\n", conf.timeout_ms,
           conf.max_attempts);
    fflush(stdout);

    start = ioa_mono_ms();
    tick.start = start;
    tick.last = start;

    rc = iw_llm_chat(&conf, messages, name, schema, iw_check_tick, &tick,
                     &res);

    ioa_buf_init(&b);

    if (rc == IW_LLM_OK) {
        ioa_json_emit(&b, res.json);
        printf("answer: %s\n", b.data);

    } else {
        printf("error: %s\n", res.error ? res.error : "(none)");
    }

    if (res.content) {
        ioa_buf_free(&b);
        ioa_json_str(&b, res.content);
        printf("content: %s\n", b.data);
    }

    printf("tokens: %lld prompt + %lld completion\n", res.prompt_tokens,
           res.completion_tokens);
    printf("attempts: %d\n", res.attempts);
    printf("time: %lld ms\n", ioa_mono_ms() - start);
    printf("final format: %s\n",
           conf.format == IW_LLM_FORMAT_SCHEMA ? "json_schema"
           : conf.format == IW_LLM_FORMAT_OBJECT ? "json_object" : "none");
    printf("ticks: %lld, longest gap %lld ms\n", tick.ticks, tick.longest);

    ioa_buf_free(&b);
    iw_llm_result_free(&res);
    iw_llm_conf_free(&conf);
    free(messages);
    free(schema);

    return rc == IW_LLM_OK ? 0 : rc == IW_LLM_FAILED ? 1 : 4;
}
