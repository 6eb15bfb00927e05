/*
 * ioa-worker: a person in the conversation.  Someone holding a launch token
 * posts into a running goal (POST /goals/{id}/messages); the hub appends the
 * message to the goal's inbox, P{goal:<id>}:inbox (goal_message.lua), and
 * the coordinator reads it here, between two steps of the running phase.
 * The goal's person (meta launched_by: the launcher, see ngx_ioa_goal.c)
 * is also a member of the goal's room, so it can say the same over a
 * WebSocket or the HTTP transport like any member: its plain envelopes
 * (no IoA turn, no task answer) are kept by the room's reader (absorb.c,
 * fsm "said") and decided here in the same step, the room's first.
 *
 * Every message gets one decision, quoted in its record:
 *
 *   end          the goal concludes at once with what it has; ended
 *                "person", and the CONCLUDE_GROUP_DISCUSSION and the
 *                conclusion quote the message
 *   change_part  part N is to be done another way: the new text becomes a
 *                part of its own, handed out at the round's review in
 *                place of part N, whose result so far stays in the account
 *   add_work     the text becomes more parts at the review (decide.c)
 *
 * Who decides.  The command IW_PERSON_STOP, the whole message once trimmed
 * ("stop" or "/stop", any case), is an end by anyone's reading, so it is
 * never put to the model.  Any other message, with a model configured, is
 * the model's to read (iw_planner_t person, llm_planner.c), one structured
 * call like the review's, checked here: a decision out of the three, a
 * change naming a part that exists and a text that is not blank.  Without
 * a model, or with an answer that fails the check, the message is work
 * (add_work, its own words).  Words are not a command: "Conclude with a cost
 * table" or "Stop using source A, use B" said to the built-in planner are
 * work, and a person who means to end the goal says "stop".  A model that
 * cannot be read never ends a goal.
 *
 * Either is also the answer when the review has asked the person how to go
 * on (a goal launched with "input_timeout_s", decide.c): the review stops
 * waiting and decides with it.
 *
 * The record.  {"decision","by" (command, llm, rule),"sender","message"
 * (at most IW_PERSON_QUOTE_MAX bytes, cut on a character),"part","text",
 * "reason"} goes to the goal's feed as an event "person" (events.c), once
 * per message even when a successor decides it again (its key is the
 * message's id), and to the log.
 *
 * The read position (fsm "inbox_last", and "said" emptied) is saved
 * together with what was learnt from the messages, in one fsm write, so a
 * worker that takes over reads each message once.  A model's answer is
 * waited for like every model call (iw_llm_call): the step ends with
 * IW_GOAL_WAIT before anything is saved, and runs again from Redis to the
 * same question, whose answer is then in the goal's memo.  A message that
 * arrives after the last review has concluded the goal is not acted on:
 * goal_message.lua refuses it once the goal has ended, and the short
 * window before that is the one race left (the message stays in the
 * inbox).
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* messages read per step: more wait for the next one */
#define IW_PERSON_BATCH  16

/* the command that ends a goal: the whole message, trimmed, any case; a
 * word nobody writes alone by accident, unlike "conclude with ..." */
#define IW_PERSON_STOP      "stop"

/* the message as its decision's record quotes it: a feed event stays
 * small, and the whole message is in the inbox or the room anyway */
#define IW_PERSON_QUOTE_MAX  300


typedef struct {
    const char  *decision;           /* end, change_part, add_work */
    const char  *by;                 /* command, llm, rule */
    long long    part;               /* change_part: 1-based, else 0 */
    const char  *text;               /* the work, or the part's new text */
    const char  *reason;
} iw_person_decision_t;


static int iw_person_said(const iw_conf_t *conf, iw_goal_t *g,
    const char *id, const char *sender, const char *content, int *end);
static int iw_person_command(const char *content);
static int iw_person_checked(iw_goal_t *g, iw_person_reading_t *rd,
    iw_person_decision_t *d);
static int iw_person_record(const iw_conf_t *conf, iw_goal_t *g,
    const char *id, const char *sender, const char *content,
    const iw_person_decision_t *d);
static void iw_person_request(iw_goal_t *g, const char *sender,
    const char *content, const char *text, long long part);


/*
 * IW_OK (the messages, if any, are absorbed), IW_GOAL_WAIT (the model has
 * a message to read; nothing is saved, the step runs again), IW_ERROR,
 * IW_LOST.  The room's messages kept by absorb.c come first: they were
 * read before this step's inbox.
 */

int
iw_person_read(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, end, any;
    size_t       i, k;
    yajl_val     said, m;
    redisReply  *r, *entries, *e, *f;
    const char  *sender, *content, *id;
    char        *last, *stopped;

    end = 0;
    any = 0;
    rc = IW_OK;
    r = NULL;
    last = NULL;
    stopped = NULL;

    said = g->said && *g->said ? ioa_json_parse(g->said, strlen(g->said))
                               : NULL;

    for (i = 0; said && YAJL_IS_ARRAY(said) && i < said->u.array.len
                && !end && rc == IW_OK; i++)
    {
        m = said->u.array.values[i];
        id = ioa_json_get_str(m, "id");
        sender = ioa_json_get_str(m, "sender");
        content = ioa_json_get_str(m, "content");
        any = 1;

        if (id && sender && content) {
            rc = iw_person_said(conf, g, id, sender, content, &end);

            if (end && rc == IW_OK) {
                stopped = ioa_sprintf("%s: %s", sender, content);
            }
        }
    }

    if (rc == IW_OK && !end) {
        r = iw_redis_cmd("XREAD COUNT %d STREAMS %s{goal:%s}:inbox %s",
                         IW_PERSON_BATCH, conf->prefix, g->goal_id,
                         g->inbox_last ? g->inbox_last : "0-0");
        rc = r ? IW_OK : IW_ERROR;
    }

    entries = NULL;

    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0
        && r->element[0]->type == REDIS_REPLY_ARRAY
        && r->element[0]->elements == 2
        && r->element[0]->element[1]->type == REDIS_REPLY_ARRAY)
    {
        entries = r->element[0]->element[1];  /* else nil: nothing new */
    }

    for (i = 0; entries && i < entries->elements && !end && rc == IW_OK;
         i++)
    {
        e = entries->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        free(last);
        last = ioa_strdup(e->element[0]->str);
        any = 1;

        f = e->element[1];
        sender = NULL;
        content = NULL;

        for (k = 0; f->type == REDIS_REPLY_ARRAY && k + 1 < f->elements;
             k += 2)
        {
            if (iw_streq(iw_reply_str(f->element[k]), "sender")) {
                sender = iw_reply_str(f->element[k + 1]);

            } else if (iw_streq(iw_reply_str(f->element[k]), "content")) {
                content = iw_reply_str(f->element[k + 1]);
            }
        }

        if (sender == NULL || content == NULL) {
            continue;
        }

        rc = iw_person_said(conf, g, last, sender, content, &end);

        if (end && rc == IW_OK) {
            stopped = ioa_sprintf("%s: %s", sender, content);
        }

        /* the answer to the review's question to the person, if one is
         * open (decide.c); the room's is seen by absorb.c */
        if (rc == IW_OK) {
            (void) iw_decide_answered(g, sender);
        }
    }

    yajl_tree_free(said);

    if (r) {
        freeReplyObject(r);
    }

    if (rc != IW_OK || !any) {
        free(last);
        free(stopped);
        return rc;                      /* nothing learnt is saved */
    }

    if (last) {
        free(g->inbox_last);
        g->inbox_last = last;
    }

    free(g->said);
    g->said = NULL;

    /* "0-0" while no inbox message was read: XREAD takes no empty id */
    rc = iw_store_save(conf, g, "inbox_last",
                       g->inbox_last ? g->inbox_last : "0-0",
                       "said", "",
                       "requests", g->requests ? g->requests : "",
                       "stopped_by", stopped ? stopped : "",
                       "ask", g->ask ? g->ask : "", NULL);

    if (rc == IW_OK && end) {
        free(g->stopped_by);
        g->stopped_by = stopped;
        stopped = NULL;
        rc = iw_goal_to_concluding(conf, g, "person");
    }

    free(stopped);

    return rc;
}


/*
 * An envelope of the room: the person's plain ones are its messages, kept
 * in fsm "said" (saved with the progress: g->person_said) for
 * iw_person_read, which runs next in the same step.  1 when it was one, 0
 * otherwise.
 */

int
iw_person_in_room(iw_goal_t *g, const char *sid, yajl_val env,
    const char *sender, long long type)
{
    ioa_buf_t    b;
    const char  *content;

    if (!iw_streq(sender, g->person) || g->phase != IW_PHASE_RUNNING
        || (type >= IW_TYPE_DISCUSSION && type <= IW_TYPE_CONCLUSION))
    {
        return 0;
    }

    content = ioa_json_get_str(env, "content");

    if (content == NULL || *content == '\0') {
        return 0;
    }

    iw_info("goal %s: in the room (%s)", g->goal_id, sid);

    ioa_buf_init(&b);

    if (g->said && g->said[0] == '[' && strlen(g->said) > 2) {
        ioa_buf_add(&b, g->said, strlen(g->said) - 1);
        ioa_buf_addc(&b, ',');

    } else {
        ioa_buf_addc(&b, '[');
    }

    ioa_buf_adds(&b, "{\"id\":");
    ioa_json_str(&b, sid);
    ioa_buf_adds(&b, ",\"sender\":");
    ioa_json_str(&b, sender);
    ioa_buf_adds(&b, ",\"content\":");
    ioa_json_str(&b, content);
    ioa_buf_adds(&b, "}]");

    free(g->said);
    g->said = ioa_buf_take(&b);
    g->person_said = 1;

    return 1;
}


/*
 * One message's decision (the design comment above), applied and
 * recorded: *end set for an end, the work kept in g->requests otherwise.
 * IW_OK, IW_GOAL_WAIT (the model is reading it) or IW_ERROR.
 */

static int
iw_person_said(const iw_conf_t *conf, iw_goal_t *g, const char *id,
    const char *sender, const char *content, int *end)
{
    int                    rc;
    iw_person_reading_t    rd;
    iw_person_decision_t   d;

    memset(&rd, 0, sizeof(rd));
    memset(&d, 0, sizeof(d));

    if (iw_person_command(content)) {
        d.decision = "end";
        d.by = "command";
        d.reason = "the command " IW_PERSON_STOP;

    } else if (g->planner->person) {
        rc = g->planner->person(conf, g, sender, content, &rd);
        if (rc != IW_OK) {
            return rc;
        }

        if (rd.answer && !iw_person_checked(g, &rd, &d)) {
            iw_warn("goal %s: the model's reading of %s's message is "
                    "unusable; it is work", g->goal_id, sender);
        }
    }

    if (d.decision == NULL) {
        d.decision = "add_work";
        d.by = "rule";
        d.text = content;
        d.reason = "a message that is not the command " IW_PERSON_STOP
                   " is work";
    }

    iw_info("goal %s: %s says: %s (%s, by %s)", g->goal_id, sender, content,
            d.decision, d.by);

    if (iw_streq(d.decision, "end")) {
        *end = 1;

    } else {
        iw_person_request(g, sender, content, d.text, d.part);
    }

    rc = iw_person_record(conf, g, id, sender, content, &d);

    yajl_tree_free(rd.answer);

    return rc;
}


/* the whole message, trimmed, is the command: "stop" or "/stop" */

static int
iw_person_command(const char *content)
{
    size_t  n;

    while (isspace((unsigned char) *content)) {
        content++;
    }

    if (*content == '/') {
        content++;
    }

    n = strlen(IW_PERSON_STOP);

    if (strncasecmp(content, IW_PERSON_STOP, n) != 0) {
        return 0;
    }

    for (content += n; isspace((unsigned char) *content); content++) {
        /* void */
    }

    return *content == '\0';
}


/*
 * The model's reading, held to its schema: one of the three decisions, a
 * text that is not blank (the work or the part's new text; an end needs
 * none), a change to a part that exists.  1 and *d filled (borrowing the
 * answer's strings) when it holds, 0 when it does not.
 */

static int
iw_person_checked(iw_goal_t *g, iw_person_reading_t *rd,
    iw_person_decision_t *d)
{
    const char  *text;

    text = rd->text;

    while (text && isspace((unsigned char) *text)) {
        text++;
    }

    if (rd->decision == NULL || rd->reason == NULL) {
        return 0;
    }

    if (iw_streq(rd->decision, "end")) {
        d->part = 0;
        d->text = NULL;

    } else if (iw_streq(rd->decision, "change_part")) {
        if (rd->part < 1 || (size_t) rd->part > g->nparts
            || text == NULL || *text == '\0')
        {
            return 0;
        }

        d->part = rd->part;
        d->text = rd->text;

    } else if (iw_streq(rd->decision, "add_work")) {
        if (text == NULL || *text == '\0') {
            return 0;
        }

        d->part = 0;
        d->text = rd->text;

    } else {
        return 0;
    }

    d->decision = rd->decision;
    d->by = "llm";
    d->reason = rd->reason;

    return 1;
}


/* the decision to the goal's feed, once per message (key: its id) */

static int
iw_person_record(const iw_conf_t *conf, iw_goal_t *g, const char *id,
    const char *sender, const char *content, const iw_person_decision_t *d)
{
    int        rc;
    size_t     len, cut;
    char      *quote;
    ioa_buf_t  b;

    len = strlen(content);
    cut = ioa_utf8_cut(content, len, IW_PERSON_QUOTE_MAX);
    quote = cut < len ? ioa_sprintf("%.*s...", (int) cut, content)
                      : ioa_strdup(content);

    ioa_buf_init(&b);
    ioa_buf_adds(&b, "{\"decision\":");
    ioa_json_str(&b, d->decision);
    ioa_buf_adds(&b, ",\"by\":");
    ioa_json_str(&b, d->by);
    ioa_buf_adds(&b, ",\"sender\":");
    ioa_json_str(&b, sender);
    ioa_buf_adds(&b, ",\"message\":");
    ioa_json_str(&b, quote);

    if (d->part) {
        ioa_buf_addf(&b, ",\"part\":%lld", d->part);

    } else {
        ioa_buf_adds(&b, ",\"part\":null");
    }

    ioa_buf_adds(&b, ",\"text\":");
    ioa_json_str_or_null(&b, d->text);
    ioa_buf_adds(&b, ",\"reason\":");
    ioa_json_str_or_null(&b, d->reason);
    ioa_buf_addc(&b, '}');

    rc = iw_event_person(conf, g->goal_id, b.data, id);

    ioa_buf_free(&b);
    free(quote);

    return rc;
}


/* appended to the JSON list of requests for the next review: the work
 * ("text", cut into parts there), the message it came from, and for a
 * change the part it stands in for */

static void
iw_person_request(iw_goal_t *g, const char *sender, const char *content,
    const char *text, long long part)
{
    ioa_buf_t b;

    ioa_buf_init(&b);

    if (g->requests && g->requests[0] == '[' && strlen(g->requests) > 2) {
        ioa_buf_add(&b, g->requests, strlen(g->requests) - 1);
        ioa_buf_addc(&b, ',');

    } else {
        ioa_buf_addc(&b, '[');
    }

    ioa_buf_adds(&b, "{\"sender\":");
    ioa_json_str(&b, sender);
    ioa_buf_adds(&b, ",\"content\":");
    ioa_json_str(&b, content);

    if (text && strcmp(text, content) != 0) {
        ioa_buf_adds(&b, ",\"text\":");
        ioa_json_str(&b, text);
    }

    if (part) {
        ioa_buf_addf(&b, ",\"part\":%lld", part);
    }

    ioa_buf_adds(&b, "}]");

    free(g->requests);
    g->requests = ioa_buf_take(&b);
}
