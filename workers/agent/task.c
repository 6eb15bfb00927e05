
/*
 * IoA's task protocol, the assignee's side (ioa-protocol.md, section 3).
 *
 * An envelope of type SYNC_TASK_ASSIGNMENT (5) or ASYNC_TASK_ASSIGNMENT (6)
 * whose next_speaker (a string or a list) names this agent is a task:
 *
 *   assignment --> INFORM_TASK_PROGRESS (8), to the assigner, at once
 *              --> the adapter runs (exec.c, http.c), concurrently with
 *                  any other task and with the inbox
 *              --> INFORM_TASK_RESULT (7): next_speaker "" for an async
 *                  task (nobody is waiting for the floor), the assigner
 *                  for a sync one (it waits to speak again)
 *
 * Both carry state DISCUSSION (1), the comm_id, task_id, task_desc and
 * task_abstract.  The result adds task_conclusion and, beyond IoA,
 * "task_status": "completed" | "partial" | "failed" | "timed_out"
 * (partial: the result is what was done so far, and the coordinator may
 * hand the rest out in another round); IoA's TaskStatus
 * cannot say "failed" (FAILED aliases COMPLETED), so an assigner could not
 * tell a crash from an answer.
 *
 * Where the task comes from, first match wins:
 *   task_id   "tasks": {"<our name>": {"task_id": ..}} (an extension, so a
 *             server-side planner can give each assignee its own id), the
 *             envelope's own task_id when we are its only assignee, else a
 *             new uuid4 hex, as IoA's assignees create them;
 *   task_desc "tasks"[name].task_desc, then task_desc, then content;
 *   abstract  "tasks"[name].task_abstract, task_abstract, else the first
 *             line of the description.
 * The adapter receives the markdown IoA hands its tool agents:
 *   "# <abstract>\n## Task Description\n<desc>\n".
 *
 * The progress and result texts open with IoA's own marker sentences, so
 * IoA clients that filter "progress notices" out of their history (they
 * match these strings) treat ours the same way.
 *
 * With --speaks-protocol the agent also takes its DISCUSSION (4) turns:
 * the adapter gets the message (and the goal) and its output is the reply,
 * a DISCUSSION addressed back to the speaker, with "reply_to" naming the
 * envelope answered.  Without it, the hub's workers speak for the agent.
 *
 * A CONCLUSION (11) in a room ends its goal: whatever we still run for
 * that room is cancelled (a program is stopped, an http call dropped,
 * an A2A task gets tasks/cancel) and reported failed, since nobody will
 * read the result.
 * The coordinator posts one when a goal is cancelled (POST
 * /goals/<id>/cancel) or ends before its tasks did (deadline, a person).
 *
 * Our own envelopes come back through the inbox (the hub echoes to every
 * member) and are ignored, as is anything once shutdown has begun.
 */

#include <stdlib.h>
#include <string.h>

#include "ioa_agent.h"


#define IOA_TASK_ABSTRACT_MAX 80
#define IOA_TASK_NOTE_MAX     1000 /* bytes of an adapter's progress note */

#define IOA_TASK_PROGRESS_TEXT                                                 \
    "Team, the following task is being executed in the background by "         \
    "myself."
#define IOA_TASK_RESULT_TEXT                                                   \
    "Just a quick interruption to our current discussion."


static void        ioa_task_assigned(yajl_val env, int sync, size_t addressees);
static void        ioa_task_turn(yajl_val env);
static ioa_task_t *ioa_task_new(yajl_val env, ioa_task_kind_e kind);
static void        ioa_task_run(ioa_task_t *t);
static void        ioa_task_cancel_room(const char *comm_id);
static const ioa_adapter_t *ioa_task_adapter(void);
static void  ioa_task_head(ioa_buf_t *b, ioa_task_t *t, const char *content,
                           long long type, int to_assigner);
static void  ioa_task_free(ioa_event_t *ev);
static char *ioa_task_abstract(const char *desc);
static const char *ioa_nonempty(const char *s);


static ioa_task_t *ioa_tasks;
static size_t      ioa_ntasks;


static const char *
ioa_nonempty(const char *s)
{
    return (s && *s) ? s : NULL;
}


const char *
ioa_task_status_name(ioa_task_status_e status)
{
    switch (status) {
    case IOA_TASK_COMPLETED:
        return "completed";
    case IOA_TASK_FAILED:
        return "failed";
    case IOA_TASK_PARTIAL:
        return "partial";
    default:
        return "timed_out";
    }
}


size_t
ioa_task_running(void)
{
    return ioa_ntasks;
}


/* is this agent among next_speaker?  *count: how many names it holds */

static int
ioa_task_addressed(yajl_val ns, size_t *count)
{
    int         me;
    size_t      i;
    const char *s;

    *count = 0;

    if ((s = ioa_json_string(ns)) != NULL) {
        *count = (*s != '\0');
        return strcmp(s, ioa_conf.name) == 0;
    }

    if (ns == NULL || !YAJL_IS_ARRAY(ns)) {
        return 0;
    }

    me = 0;

    for (i = 0; i < ns->u.array.len; i++) {
        s = ioa_json_string(ns->u.array.values[i]);

        if (s == NULL) {
            continue;
        }

        (*count)++;

        if (strcmp(s, ioa_conf.name) == 0) {
            me = 1;
        }
    }

    return me;
}


void
ioa_task_envelope(yajl_val env)
{
    size_t      n;
    long long   type;
    const char *sender, *id, *comm_id;

    if (ioa_shutting_down()) {
        return;
    }

    id = ioa_json_get_str(env, "id");
    comm_id = ioa_json_get_str(env, "comm_id");
    sender = ioa_json_get_str(env, "sender");

    if (id == NULL || comm_id == NULL) {
        ioa_log_warn("inbox: an envelope without id or comm_id, ignored");
        return;
    }

    if (ioa_json_get_int(env, "type", &type) != 0) {
        type = 0; /* IoA's default, DEFAULT */
    }

    if (sender && strcmp(sender, ioa_conf.name) == 0) {
        return; /* the echo of our own post */
    }

    if (type == 11) { /* CONCLUSION: see the top */
        ioa_task_cancel_room(comm_id);
        return;
    }

    if (!ioa_task_addressed(ioa_json_get(env, "next_speaker"), &n)) {
        ioa_log_debug("envelope %s (type %lld) in %s is not for us", id, type,
                      comm_id);
        return;
    }

    switch (type) {

    case 5: /* SYNC_TASK_ASSIGNMENT */
    case 6: /* ASYNC_TASK_ASSIGNMENT */
        ioa_task_assigned(env, type == 5, n);
        break;

    case 4: /* DISCUSSION */
        if (ioa_conf.speaks_protocol) {
            ioa_task_turn(env);
            break;
        }

        /* fall through */

    default:
        ioa_log_info("envelope %s (type %lld) from %s in %s names us; "
                     "nothing to do",
                     id, type, sender ? sender : "?", comm_id);
    }
}


static ioa_task_t *
ioa_task_new(yajl_val env, ioa_task_kind_e kind)
{
    const char *s;
    ioa_task_t *t;

    t = ioa_calloc(sizeof(ioa_task_t));
    t->kind = kind;
    t->comm_id = ioa_strdup(ioa_json_get_str(env, "comm_id"));
    t->source_id = ioa_strdup(ioa_json_get_str(env, "id"));
    s = ioa_json_get_str(env, "sender");
    t->assigner = ioa_strdup(s ? s : "");
    t->free_ev.handler = ioa_task_free;
    t->free_ev.data = t;

    return t;
}


static void
ioa_task_assigned(yajl_val env, int sync, size_t addressees)
{
    char        uuid[33];
    yajl_val    mine;
    const char *task_id, *desc, *abstract;
    ioa_task_t *t;

    mine = ioa_json_get(ioa_json_get(env, "tasks"), ioa_conf.name);

    task_id = ioa_nonempty(ioa_json_get_str(mine, "task_id"));

    if (task_id == NULL && addressees == 1) {
        task_id = ioa_nonempty(ioa_json_get_str(env, "task_id"));
    }

    if (task_id == NULL) {
        ioa_uuid4_hex(uuid);
        task_id = uuid;
    }

    for (t = ioa_tasks; t; t = t->next) {
        if (strcmp(t->task_id, task_id) == 0
            && strcmp(t->comm_id, ioa_json_get_str(env, "comm_id")) == 0)
        {
            ioa_log_warn("task %s is already running; assignment %s "
                         "ignored",
                         task_id, ioa_json_get_str(env, "id"));
            return;
        }
    }

    desc = ioa_nonempty(ioa_json_get_str(mine, "task_desc"));

    if (desc == NULL) {
        desc = ioa_nonempty(ioa_json_get_str(env, "task_desc"));
    }

    if (desc == NULL) {
        desc = ioa_json_get_str(env, "content");
    }

    abstract = ioa_nonempty(ioa_json_get_str(mine, "task_abstract"));

    if (abstract == NULL) {
        abstract = ioa_nonempty(ioa_json_get_str(env, "task_abstract"));
    }

    t = ioa_task_new(env, IOA_TASK_ASSIGNED);
    t->sync = sync;
    t->task_id = ioa_strdup(task_id);
    t->task_desc = ioa_strdup(desc ? desc : "");
    t->task_abstract =
        abstract ? ioa_strdup(abstract) : ioa_task_abstract(t->task_desc);

    ioa_buf_addf(&t->input, "# %s\n## Task Description\n%s\n", t->task_abstract,
                 t->task_desc);

    ioa_log_info("task %s assigned by %s in %s (%s, envelope %s): %s",
                 t->task_id, t->assigner, t->comm_id, sync ? "sync" : "async",
                 t->source_id, t->task_abstract);

    ioa_task_note(t, NULL, 0);
    ioa_task_run(t);
}


static void
ioa_task_turn(yajl_val env)
{
    const char *goal, *content;
    ioa_task_t *t;

    t = ioa_task_new(env, IOA_TASK_TURN);
    t->task_id = ioa_strdup("");
    t->task_desc = ioa_strdup("");
    t->task_abstract = ioa_strdup("Discussion turn");

    goal = ioa_nonempty(ioa_json_get_str(env, "goal"));
    content = ioa_json_get_str(env, "content");

    ioa_buf_adds(&t->input, "# Discussion turn\n");

    if (goal) {
        ioa_buf_addf(&t->input, "## Goal\n%s\n", goal);
    }

    ioa_buf_addf(&t->input, "## Message from %s\n%s\n", t->assigner,
                 content ? content : "");

    ioa_log_info("our turn in %s (envelope %s from %s)", t->comm_id,
                 t->source_id, t->assigner);

    ioa_task_run(t);
}


static void
ioa_task_run(ioa_task_t *t)
{
    const ioa_adapter_t *a;

    t->next = ioa_tasks;
    ioa_tasks = t;
    ioa_ntasks++;
    t->started = ioa_mono_ms();

    a = ioa_task_adapter();

    /* may finish at once (a program that cannot be started) */
    a->start(t);
}


static const ioa_adapter_t *
ioa_task_adapter(void)
{
    if (ioa_conf.exec_argv) {
        return &ioa_exec_adapter;
    }

    return ioa_conf.a2a_url ? &ioa_a2a_adapter : &ioa_http_adapter;
}


/* how a task is named in the log: its task_id, or the envelope a turn
 * answers */

const char *
ioa_task_key(ioa_task_t *t)
{
    return t->kind == IOA_TASK_ASSIGNED ? t->task_id : t->source_id;
}


/* the first line of the description, cut at a character boundary */

static char *
ioa_task_abstract(const char *desc)
{
    size_t len;

    while (*desc == ' ' || *desc == '\t' || *desc == '\n' || *desc == '\r'
           || *desc == '#')
    {
        desc++;
    }

    len = ioa_utf8_cut(desc, strcspn(desc, "\r\n"), IOA_TASK_ABSTRACT_MAX);

    while (len && (desc[len - 1] == ' ' || desc[len - 1] == '\t')) {
        len--;
    }

    return len ? ioa_strndup(desc, len) : ioa_strdup("Task");
}


/* {"comm_id":..,"content":..,"next_speaker":..,"state":1,"type":..
 *  and, for tasks, "task_id","task_desc","task_abstract"; the caller
 *  closes the object */

static void
ioa_task_head(ioa_buf_t *b, ioa_task_t *t, const char *content, long long type,
              int to_assigner)
{
    ioa_buf_adds(b, "{\"comm_id\":");
    ioa_json_str(b, t->comm_id);
    ioa_buf_adds(b, ",\"content\":");
    ioa_json_str(b, content);
    ioa_buf_adds(b, ",\"next_speaker\":");

    if (to_assigner) {
        /* a list even for one name: IoA clients test "name in
         * next_speaker", a substring test on a plain string */
        ioa_buf_adds(b, "[");
        ioa_json_str(b, t->assigner);
        ioa_buf_adds(b, "]");

    } else {
        ioa_buf_adds(b, "\"\"");
    }

    ioa_buf_addf(b, ",\"state\":1,\"type\":%lld", type);

    if (t->kind == IOA_TASK_ASSIGNED) {
        ioa_buf_adds(b, ",\"task_id\":");
        ioa_json_str(b, t->task_id);
        ioa_buf_adds(b, ",\"task_desc\":");
        ioa_json_str(b, t->task_desc);
        ioa_buf_adds(b, ",\"task_abstract\":");
        ioa_json_str(b, t->task_abstract);
    }
}


static ioa_post_t *
ioa_task_post_new(ioa_task_t *t, long long type, const char *what)
{
    ioa_post_t *p;

    p = ioa_calloc(sizeof(ioa_post_t));
    p->comm_id = ioa_strdup(t->comm_id);
    p->type = type;
    p->what = what;

    if (t->kind == IOA_TASK_ASSIGNED) {
        p->key_field = "task_id";
        p->key = ioa_strdup(t->task_id);

    } else {
        p->key_field = "reply_to";
        p->key = ioa_strdup(t->source_id);
    }

    return p;
}


/*
 * INFORM_TASK_PROGRESS: at once when a task is assigned (no note), and
 * again whenever an adapter has news (the A2A agent's status messages):
 * the note follows the marker sentence and the abstract, cut to
 * IOA_TASK_NOTE_MAX bytes, a line of news rather than a second result.
 */

void
ioa_task_note(ioa_task_t *t, const char *note, size_t len)
{
    ioa_buf_t   content = { 0 };
    ioa_post_t *p;

    if (t->kind != IOA_TASK_ASSIGNED || t->finished) {
        return; /* a turn's only envelope is its reply */
    }

    p = ioa_task_post_new(t, 8, "progress");

    ioa_buf_addf(&content, "%s\n%s", IOA_TASK_PROGRESS_TEXT, t->task_abstract);

    if (len) {
        ioa_buf_addc(&content, '\n');
        ioa_buf_add(&content, note, ioa_utf8_cut(note, len, IOA_TASK_NOTE_MAX));
    }

    ioa_task_head(&p->body, t, ioa_buf_cstr(&content), 8, 1);
    ioa_buf_adds(&p->body, "}");

    ioa_buf_free(&content);

    ioa_hub_post(p);
}


/*
 * The adapter is done: post the result (or the reply of a turn).  text is
 * what the adapter kept of its output, total how much there was; the
 * conclusion is cut to --max-result bytes of JSON, which keeps the
 * envelope under the hub's ioa_max_message_size however the text escapes.
 */

void
ioa_task_finish(ioa_task_t *t, ioa_task_status_e status, const char *text,
                size_t len, size_t total)
{
    size_t       used;
    ioa_buf_t    content = { 0 }, note = { 0 };
    ioa_post_t  *p;
    ioa_task_t **pp;

    if (t->finished) {
        return;
    }

    t->finished = 1;

    for (pp = &ioa_tasks; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            ioa_ntasks--;
            break;
        }
    }

    if (total < len) {
        total = len;
    }

    ioa_log_info("task %s %s after %llu ms (%zu bytes of output)",
                 ioa_task_key(t), ioa_task_status_name(status),
                 (unsigned long long) (ioa_mono_ms() - t->started), total);

    if (status != IOA_TASK_COMPLETED && status != IOA_TASK_PARTIAL) {
        ioa_log_info("task %s: %.*s", ioa_task_key(t),
                     (int) (len > 1000 ? 1000 : len), text);
    }

    if (t->kind == IOA_TASK_TURN) {
        p = ioa_task_post_new(t, 4, "reply");

        ioa_buf_adds(&p->body, "{\"comm_id\":");
        ioa_json_str(&p->body, t->comm_id);
        ioa_buf_adds(&p->body, ",\"content\":\"");

        if (status != IOA_TASK_COMPLETED && status != IOA_TASK_PARTIAL) {
            ioa_buf_addf(&note, "(no reply: %s) ",
                         ioa_task_status_name(status));
            (void) ioa_json_escape(&p->body, note.data, note.len, 0);
            ioa_buf_reset(&note);
        }

        used = ioa_json_escape(&p->body, text, len, ioa_conf.max_result);

        if (used < total) {
            ioa_buf_addf(&note, "\n[truncated: %zu of %zu bytes]", used, total);
            (void) ioa_json_escape(&p->body, note.data, note.len, 0);
        }

        ioa_buf_adds(&p->body, "\",\"next_speaker\":[");
        ioa_json_str(&p->body, t->assigner);
        ioa_buf_adds(&p->body, "],\"state\":1,\"type\":4,\"reply_to\":");
        ioa_json_str(&p->body, t->source_id);
        ioa_buf_adds(&p->body, "}");

        ioa_buf_free(&note);
        ioa_hub_post(p);
        ioa_post_event(&t->free_ev);
        return;
    }

    p = ioa_task_post_new(t, 7, "result");

    ioa_buf_addf(&content, "%s The task \"%s\" %s.", IOA_TASK_RESULT_TEXT,
                 t->task_abstract,
                 status == IOA_TASK_COMPLETED ? "is completed"
                 : status == IOA_TASK_PARTIAL ? "is partly done"
                 : status == IOA_TASK_FAILED  ? "failed"
                                              : "timed out");

    ioa_task_head(&p->body, t, ioa_buf_cstr(&content), 7, t->sync);
    ioa_buf_adds(&p->body, ",\"task_conclusion\":\"");

    used = ioa_json_escape(&p->body, text, len, ioa_conf.max_result);

    if (used < total) {
        ioa_buf_addf(&note, "\n[truncated: %zu of %zu bytes]", used, total);
        (void) ioa_json_escape(&p->body, note.data, note.len, 0);
    }

    ioa_buf_addf(&p->body, "\",\"task_status\":\"%s\"}",
                 ioa_task_status_name(status));

    /* if the hub still finds it too large (a smaller
     * ioa_max_message_size), the assigner must learn that much */

    ioa_buf_reset(&content);
    ioa_buf_addf(&content, "%s The task \"%s\" failed.", IOA_TASK_RESULT_TEXT,
                 t->task_abstract);
    ioa_task_head(&p->fallback, t, ioa_buf_cstr(&content), 7, t->sync);
    ioa_buf_addf(&p->fallback,
                 ",\"task_conclusion\":\"the result (%zu "
                 "bytes) is larger than the hub accepts\","
                 "\"task_status\":\"failed\"}",
                 total);

    ioa_buf_free(&content);
    ioa_buf_free(&note);

    ioa_hub_post(p);

    /* the adapter may still be on the stack: free at the end of the turn */
    ioa_post_event(&t->free_ev);
}


void
ioa_task_cancel_all(void)
{
    ioa_task_t          *t, *next;
    const ioa_adapter_t *a;

    a = ioa_task_adapter();

    for (t = ioa_tasks; t; t = next) {
        next = t->next;
        t->cancelled = 1;
        t->cancel_why = "cancelled: the agent is shutting down";
        a->cancel(t);
    }
}


static void
ioa_task_cancel_room(const char *comm_id)
{
    ioa_task_t          *t, *next;
    const ioa_adapter_t *a;

    a = ioa_task_adapter();

    for (t = ioa_tasks; t; t = next) {
        next = t->next;

        if (t->cancelled || strcmp(t->comm_id, comm_id) != 0) {
            continue;
        }

        ioa_log_info("task %s: the goal of room %s ended; cancelling it",
                     ioa_task_key(t), comm_id);

        t->cancelled = 1;
        t->cancel_why = "cancelled: the goal ended before the task did";
        a->cancel(t);
    }
}


static void
ioa_task_free(ioa_event_t *ev)
{
    ioa_task_t *t = ev->data;

    free(t->comm_id);
    free(t->source_id);
    free(t->assigner);
    free(t->task_id);
    free(t->task_desc);
    free(t->task_abstract);
    ioa_buf_free(&t->input);
    free(t);
}
