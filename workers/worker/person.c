/*
 * ioa-worker: a person in the conversation.  Someone holding a launch token
 * posts into a running goal (POST /goals/{id}/messages); the hub appends the
 * message to the goal's inbox, P{goal:<id>}:inbox (goal_message.lua), and
 * the coordinator reads it here, between two steps of the running phase.
 * The goal's person (meta launched_by: the launcher, see ngx_ioa_goal.c)
 * is also a member of the goal's room, so it can say the same over a
 * WebSocket or the HTTP transport like any member: its plain envelopes
 * (no IoA turn, no task answer) are read with the room (conversation.c)
 * and handled the same way:
 *
 *   "stop", "conclude now", "that's enough", ... (IW_PERSON_STOP, at the
 *            start of the message)   the goal concludes at once with what
 *            it has; ended "person", and the CONCLUDE_GROUP_DISCUSSION and
 *            the conclusion quote the message
 *   anything else   a request: kept (fsm "requests") until the round's
 *            review, which cuts it into parts and hands them out like the
 *            goal's own (decide.c), quoting it in its decision
 *
 * Either is also the answer when the review has asked the person how to go
 * on (a goal launched with "input_timeout_s", decide.c): the review stops
 * waiting and decides with it.
 *
 * The read position (fsm "inbox_last", or for the room "last_id") is saved
 * together with what was learnt from the messages, in one fsm write, so a
 * worker that takes over reads each message once.  A message that arrives after the last review
 * has concluded the goal is not acted on: goal_message.lua refuses it once
 * the goal has ended, and the short window before that is the one race left
 * (the message stays in the inbox).
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


/* messages read per step: more wait for the next one */
#define IW_PERSON_BATCH  16


/* how a message that ends the goal begins (lower case, after spaces) */
static const char  *iw_person_stop[] = {
    "stop", "conclude", "that's enough", "that is enough", "enough",
    "finish now", "wrap up", "end the goal", NULL
};


static int iw_person_stops(const char *content);
static char *iw_person_says(iw_goal_t *g, const char *sender,
    const char *content);
static void iw_person_request(iw_goal_t *g, const char *sender,
    const char *content);


/* IW_OK (the messages, if any, are absorbed), or IW_ERROR, IW_LOST */

int
iw_person_read(const iw_conf_t *conf, iw_goal_t *g)
{
    int          rc, stop;
    char        *stopped;
    size_t       i, k;
    redisReply  *r, *entries, *e, *f;
    const char  *sender, *content;

    r = iw_redis_cmd("XREAD COUNT %d STREAMS %s{goal:%s}:inbox %s",
                     IW_PERSON_BATCH, conf->prefix, g->goal_id,
                     g->inbox_last ? g->inbox_last : "0-0");
    if (r == NULL) {
        return IW_ERROR;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0
        || r->element[0]->type != REDIS_REPLY_ARRAY
        || r->element[0]->elements != 2
        || r->element[0]->element[1]->type != REDIS_REPLY_ARRAY)
    {
        freeReplyObject(r);
        return IW_OK;                   /* nil: nothing new */
    }

    entries = r->element[0]->element[1];
    stop = 0;
    stopped = NULL;

    for (i = 0; i < entries->elements && !stop; i++) {
        e = entries->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        free(g->inbox_last);
        g->inbox_last = ioa_strdup(e->element[0]->str);

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

        stopped = iw_person_says(g, sender, content);
        stop = stopped != NULL;

        /* the answer to the review's question to the person, if one is
         * open (decide.c) */
        (void) iw_decide_answered(g, sender);
    }

    freeReplyObject(r);

    rc = iw_store_save(conf, g, "inbox_last", g->inbox_last,
                       "requests", g->requests ? g->requests : "",
                       "stopped_by", stopped ? stopped : "",
                       "ask", g->ask ? g->ask : "", NULL);

    if (rc == IW_OK && stop) {
        free(g->stopped_by);
        g->stopped_by = stopped;
        stopped = NULL;
        rc = iw_goal_to_concluding(conf, g, "person");
    }

    free(stopped);

    return rc;
}


/*
 * An envelope of the room: the person's plain ones are its messages.  1
 * when it was one (then g->person_said asks the progress write to save the
 * requests, and with a stop the phase "concluding" too), 0 otherwise.
 */

int
iw_person_in_room(iw_goal_t *g, const char *sid, yajl_val env,
    const char *sender, long long type)
{
    char        *stopped;
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

    stopped = iw_person_says(g, sender, content);
    g->person_said = 1;

    if (stopped) {
        free(g->stopped_by);
        g->stopped_by = stopped;
        free(g->ended);
        g->phase = IW_PHASE_CONCLUDING;
        g->ended = ioa_strdup("person");
        iw_info("goal %s: concluding (person)", g->goal_id);
    }

    return 1;
}


/* a stop: "sender: content" to keep in stopped_by; else NULL and the
 * request is kept */

static char *
iw_person_says(iw_goal_t *g, const char *sender, const char *content)
{
    iw_info("goal %s: %s says: %s", g->goal_id, sender, content);

    if (iw_person_stops(content)) {
        return ioa_sprintf("%s: %s", sender, content);
    }

    iw_person_request(g, sender, content);

    return NULL;
}


static int
iw_person_stops(const char *content)
{
    size_t  k, n;

    while (isspace((unsigned char) *content)) {
        content++;
    }

    for (k = 0; iw_person_stop[k]; k++) {
        n = strlen(iw_person_stop[k]);

        if (strncasecmp(content, iw_person_stop[k], n) == 0
            && !isalnum((unsigned char) content[n]))
        {
            return 1;
        }
    }

    return 0;
}


/* appended to the JSON list of requests for the next review */

static void
iw_person_request(iw_goal_t *g, const char *sender, const char *content)
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
    ioa_buf_adds(&b, "}]");

    free(g->requests);
    g->requests = ioa_buf_take(&b);
}
