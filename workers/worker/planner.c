/*
 * ioa-worker: the built-in planner, what takes the LLM's place when no
 * model is configured.  Deterministic: the same goal and the same registry
 * give the same team, the same tasks and the same texts, which is what
 * makes a conversation without a model testable.
 *
 * Decomposition.  The goal is cut into clauses, the parts a person would
 * hand to different people.  Boundaries come from the text's structure,
 * and, where the structure leaves it open, from what the agents online can
 * do; never from a list of verbs, which would know only some agents' work.
 *
 *   always    sentences (". ", "!", "?"), ";", new lines (numbered or
 *             bulleted items: "1.", "2)", "a)", "-", "*", "•" are dropped),
 *             "then"-chained steps (", then", " and then "), and a comma or
 *             "and" followed by "also", "finally", "next", "afterwards",
 *             "lastly".
 *   maybe     a comma or an "and": it cuts when the text since the last cut
 *             has two words or more and what follows, up to the next
 *             boundary, reads as a task of its own: two words or more, not
 *             opening with an article or a pronoun, and either its second
 *             word opens an object (an article, a pronoun, a quote, a
 *             number: 'reverse the words', 'shout "hi"', 'bake a cake'), or
 *             an agent online matches it on its own (iw_plan_task_pt, the
 *             registry; 'summarise findings' where a summariser is online).
 *   never     inside quotes ("..." or curly ones: the task's data).
 *
 * So 'Shout "hi", reverse the words of "a b" and count the words in "c"'
 * is three clauses; "poems about cats, dogs and birds", "translate it to
 * French and German" and "the memo and the letter" stay one.  A line that
 * ends with ":" before more lines ("Please do the following:") is a
 * lead-in, not a part.  Leading connectives ("and", "then", "finally",
 * ...) are dropped, and so are fragments without a word of two letters
 * ("e.g.", a list's "10.").  At most IW_PLAN_MAX_CLAUSES clauses; the rest
 * are merged into the last.
 *
 * Matching.  Each clause is one capability query to the registry (BM25 over
 * the agents' descriptions, retrieve.lua), as IoA's LLM sends one query per
 * capability it needs; the query leaves the quoted data out, since "alpha
 * beta" says nothing about who can do the task.  An agent is eligible for
 * a clause only with a score of at least --min-score and at least
 * IW_PLAN_MIN_SHARE of the clause's best score (iw_plan_eligible): a
 * description that shares one incidental word with the clause ("text") is
 * not a match, and a clause nobody matches well enough is not handed to
 * anyone; the conclusion says so (plan->why).  Going through the clauses
 * in order, a clause goes to its best eligible agent, who joins the team
 * while there is room (at most IW_PLAN_MAX_TEAM members, IoA's "no more
 * than 4"); once the team is full a clause goes to its best eligible agent
 * already in the team.  With team_member_names the team is given: a
 * clause goes to the member that matches it best, a clause none matches to
 * the member with the least work, and a member that matched nothing stands
 * by.  Each task carries only its own clauses (a bit each in parts).
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "iw.h"


static void iw_plan_add_clause(iw_plan_t *plan, const char *s, size_t n);
static int iw_plan_maybe_cuts(const char *s, size_t n, size_t at, size_t x,
    size_t from, iw_plan_task_pt is_task, void *data);
static size_t iw_plan_piece_end(const char *s, size_t n, size_t i);
static size_t iw_plan_words(const char *s, size_t from, size_t to);
static size_t iw_plan_marker(const char *s, size_t n, size_t i);
static int iw_word_in(const char *s, size_t n, size_t i, const char **list);
static size_t iw_word_end(const char *s, size_t n, size_t i);
static size_t iw_quote_len(const char *s, size_t n, size_t i, int *open);
static int iw_plan_member(iw_plan_t *plan, const char *name);
static void iw_plan_join(iw_plan_t *plan, iw_agent_t *a);
static void iw_plan_assign(iw_plan_t *plan, int *owner,
    const char *coordinator);
static int iw_word_at(const char *s, size_t n, size_t i, const char *w);


/* leading words that only chain clauses */
static const char  *iw_connectives[] = {
    "and", "then", "also", "finally", "next", "afterwards", "lastly",
    "first", "second", "third", NULL
};


/* connectives that start a step of their own after a comma or "and" */
static const char  *iw_plan_steps[] = {
    "also", "finally", "next", "afterwards", "lastly", NULL
};


/* words that open an object: "... and <word> the text"; a piece that
 * starts with one ("the memo") is a noun phrase, not a task */
static const char  *iw_plan_objects[] = {
    "the", "a", "an", "this", "that", "these", "those", "it", "them", "its",
    "their", "his", "her", "my", "our", "your", "all", "each", "every",
    "some", "any", NULL
};


static int
iw_word_at(const char *s, size_t n, size_t i, const char *w)
{
    size_t  k, len;

    len = strlen(w);

    if (i + len > n) {
        return 0;
    }

    for (k = 0; k < len; k++) {
        if (tolower((unsigned char) s[i + k]) != w[k]) {
            return 0;
        }
    }

    return 1;
}


/* the end of the word (letters, digits, UTF-8) that starts at i */

static size_t
iw_word_end(const char *s, size_t n, size_t i)
{
    while (i < n && (isalnum((unsigned char) s[i])
                     || (unsigned char) s[i] >= 0x80))
    {
        i++;
    }

    return i;
}


/* the word at i, whole, is one of list */

static int
iw_word_in(const char *s, size_t n, size_t i, const char **list)
{
    size_t  k, end;

    end = iw_word_end(s, n, i);

    for (k = 0; list[k]; k++) {
        if (strlen(list[k]) == end - i && iw_word_at(s, n, i, list[k])) {
            return 1;
        }
    }

    return 0;
}


/* A quote mark at i: its length (1 for ", 3 for the UTF-8 curly ones),
 * with *open flipped; 0 when there is none.  A curly quote opens or closes
 * by its shape, a straight one by turns. */

static size_t
iw_quote_len(const char *s, size_t n, size_t i, int *open)
{
    if (s[i] == '"') {
        *open = !*open;
        return 1;
    }

    if (i + 2 < n && (unsigned char) s[i] == 0xe2
        && (unsigned char) s[i + 1] == 0x80
        && ((unsigned char) s[i + 2] == 0x9c
            || (unsigned char) s[i + 2] == 0x9d))
    {
        *open = (unsigned char) s[i + 2] == 0x9c;
        return 3;
    }

    return 0;
}


/* the words (letters, digits, UTF-8) in s[from, to) */

static size_t
iw_plan_words(const char *s, size_t from, size_t to)
{
    size_t  k, words;

    for (k = from, words = 0; k < to; k = iw_word_end(s, to, k) + 1) {
        while (k < to && !isalnum((unsigned char) s[k])
               && (unsigned char) s[k] < 0x80)
        {
            k++;
        }

        if (k < to) {
            words++;
        }
    }

    return words;
}


/* where the piece that starts at i ends: the next boundary of any kind
 * outside quotes (see the top), or n */

static size_t
iw_plan_piece_end(const char *s, size_t n, size_t i)
{
    int     quoted;
    size_t  q;

    for (quoted = 0; i < n; i++) {
        if ((q = iw_quote_len(s, n, i, &quoted))) {
            i += q - 1;
            continue;
        }

        if (quoted) {
            continue;
        }

        if (s[i] == ',' || s[i] == ';' || s[i] == '\n' || s[i] == '!'
            || s[i] == '?' || iw_word_at(s, n, i, " and ")
            || (s[i] == '.' && (i + 1 == n || isspace((unsigned char) s[i + 1]))))
        {
            return i;
        }
    }

    return n;
}


/*
 * A comma or an "and" (at: where it starts; x: the first byte after it)
 * that may end a clause: see "maybe" at the top.  from: where the clause
 * began.
 */

static int
iw_plan_maybe_cuts(const char *s, size_t n, size_t at, size_t x, size_t from,
    iw_plan_task_pt is_task, void *data)
{
    size_t  end, y;

    if (iw_plan_words(s, from, at) < 2) {
        return 0;
    }

    while (x < n && s[x] == ' ') {
        x++;
    }

    /* ", and ...": the "and" is the comma's; what follows it decides */
    if (iw_word_at(s, n, x, "and ") ) {
        x += 4;
    }

    if (x >= n) {
        return 0;
    }

    if (iw_word_in(s, n, x, iw_plan_steps)) {
        return 1;
    }

    end = iw_plan_piece_end(s, n, x);

    if (iw_plan_words(s, x, end) < 2 || iw_word_in(s, n, x, iw_plan_objects)
        || !isalpha((unsigned char) s[x]))
    {
        return 0;
    }

    /* the word after the first: an object opens ("reverse the words") */

    y = iw_word_end(s, n, x);

    if (y < end && s[y] == ' ') {
        y++;

        if (s[y] == '"' || (unsigned char) s[y] == 0xe2
            || isdigit((unsigned char) s[y])
            || iw_word_in(s, n, y, iw_plan_objects))
        {
            return 1;
        }
    }

    /* or an agent online does what it says */
    return is_task != NULL && is_task(data, s + x, end - x);
}


/* a list item's marker at i ("1.", "12)", "a)", "-", "*", "•", each with
 * a space after it): its length, or 0 */

static size_t
iw_plan_marker(const char *s, size_t n, size_t i)
{
    size_t  k;

    k = i;

    while (k < n && isdigit((unsigned char) s[k]) && k - i < 3) {
        k++;
    }

    if (k > i && k < n && (s[k] == '.' || s[k] == ')')) {
        k++;

    } else if (k == i && k + 1 < n && isalpha((unsigned char) s[k])
               && s[k + 1] == ')')
    {
        k += 2;

    } else if (k == i && k < n && (s[k] == '-' || s[k] == '*' || s[k] == '+'))
    {
        k++;

    } else if (k == i && k + 2 < n && (unsigned char) s[k] == 0xe2
               && (unsigned char) s[k + 1] == 0x80
               && (unsigned char) s[k + 2] == 0xa2)
    {
        k += 3;

    } else {
        return 0;
    }

    if (k < n && s[k] != ' ' && s[k] != '\t') {
        return 0;
    }

    return k - i;
}


static void
iw_plan_add_clause(iw_plan_t *plan, const char *s, size_t n)
{
    int      letters, word;
    char    *c, *merged;
    size_t   i, k, len;

    /* trim spaces and stray separators around the clause */
    while (n && (isspace((unsigned char) *s) || *s == ',' || *s == ':'
                 || *s == '-'))
    {
        s++;
        n--;
    }

    while (n && (isspace((unsigned char) s[n - 1]) || s[n - 1] == ','
                 || s[n - 1] == ':'))
    {
        n--;
    }

    /* drop leading connectives, repeatedly ("and then ...") */
    for (k = 0; iw_connectives[k]; k++) {
        len = strlen(iw_connectives[k]);

        if (iw_word_at(s, n, 0, iw_connectives[k])
            && len < n && (isspace((unsigned char) s[len]) || s[len] == ','))
        {
            s += len;
            n -= len;

            while (n && (isspace((unsigned char) *s) || *s == ',')) {
                s++;
                n--;
            }

            k = (size_t) -1;            /* start over */
        }
    }

    /* a clause needs one word of two letters or more (UTF-8 counts;
     * digits do not: a list's "10." is no clause) */
    for (i = 0, letters = 0, word = 0; i < n && word < 2; i++) {
        if (isalpha((unsigned char) s[i]) || (unsigned char) s[i] >= 0x80) {
            word++;
            letters = 1;

        } else {
            word = 0;
        }
    }

    if (!letters || word < 2) {
        return;
    }

    c = ioa_strndup(s, n);

    if (plan->nclauses == IW_PLAN_MAX_CLAUSES) {
        merged = ioa_sprintf("%s; %s", plan->clauses[plan->nclauses - 1], c);
        free(plan->clauses[plan->nclauses - 1]);
        free(c);
        plan->clauses[plan->nclauses - 1] = merged;
        return;
    }

    plan->clauses[plan->nclauses++] = c;
}


void
iw_plan_clauses(const char *goal, iw_plan_t *plan, iw_plan_task_pt is_task,
    void *data)
{
    int     quoted;
    char    c;
    size_t  i, from, n, skip, q, m, end;

    memset(plan, 0, sizeof(*plan));
    plan->clauses = ioa_alloc(IW_PLAN_MAX_CLAUSES * sizeof(char *));
    plan->why = ioa_alloc(IW_PLAN_MAX_CLAUSES * sizeof(char *));
    memset(plan->why, 0, IW_PLAN_MAX_CLAUSES * sizeof(char *));

    n = strlen(goal);
    quoted = 0;

    for (i = 0, from = 0; i <= n; i++) {
        c = goal[i];
        skip = 0;

        /* a list item's marker at the start of a line is no text */
        if (i == from) {
            while (i < n && (goal[i] == ' ' || goal[i] == '\t')) {
                i++;
            }

            m = iw_plan_marker(goal, n, i);
            from = i + m;
            i = from;
            c = goal[i];
        }

        if (i < n && (q = iw_quote_len(goal, n, i, &quoted))) {
            i += q - 1;
            continue;
        }

        if (c == '\0') {
            skip = 1;

        } else if (quoted && c != '\n') {
            continue;                   /* the task's data, not a cut */

        } else if (c == '\n' || c == ';' || c == '!' || c == '?') {
            quoted = 0;
            skip = 1;

            /* "Please do the following:" before more lines: a lead-in */
            for (end = i; end > from && isspace((unsigned char) goal[end - 1]);
                 end--)
            { /* void */ }

            if (c == '\n' && end > from && goal[end - 1] == ':'
                && goal[i + 1 + strspn(goal + i + 1, " \t\n")] != '\0')
            {
                from = i + 1;
                continue;
            }

        } else if (c == '.'
                   && (i + 1 == n || isspace((unsigned char) goal[i + 1])))
        {
            skip = 1;

        } else if (c == ',' && iw_word_at(goal, n, i, ", then ")) {
            skip = 7;
            plan->then = 1;

        } else if (c == ' ' && iw_word_at(goal, n, i, " and then ")) {
            skip = 10;
            plan->then = 1;

        } else if (c == ',' && iw_plan_maybe_cuts(goal, n, i, i + 1, from,
                                                  is_task, data))
        {
            skip = 1;

        } else if (c == ' ' && iw_word_at(goal, n, i, " and ")
                   && iw_plan_maybe_cuts(goal, n, i, i + 5, from,
                                         is_task, data))
        {
            skip = 5;
        }

        if (skip) {
            iw_plan_add_clause(plan, goal + from, i - from);
            from = i + skip;
            i = from - 1;
        }
    }

    if (plan->nclauses == 0) {
        plan->clauses[plan->nclauses++] = ioa_strdup(goal);
    }
}


/* the capability query of a clause: the clause without its quoted data */

char *
iw_plan_query(const char *clause)
{
    int       quoted, was;
    size_t    i, n, q;
    ioa_buf_t b;

    ioa_buf_init(&b);
    n = strlen(clause);
    quoted = 0;

    for (i = 0; i < n; i++) {
        was = quoted;

        if ((q = iw_quote_len(clause, n, i, &quoted))) {
            i += q - 1;
            ioa_buf_addc(&b, ' ');
            continue;
        }

        if (!was) {
            ioa_buf_addc(&b, clause[i]);
        }
    }

    /* all of it was quoted: the clause is its own query */
    if (b.len == 0 || strspn(b.data, " ") == b.len) {
        ioa_buf_free(&b);
        return ioa_strdup(clause);
    }

    return ioa_buf_take(&b);
}


static int
iw_plan_member(iw_plan_t *plan, const char *name)
{
    size_t  j;

    for (j = 0; j < plan->nteam; j++) {
        if (strcmp(plan->team[j].name, name) == 0) {
            return (int) j;
        }
    }

    return -1;
}


static void
iw_plan_join(iw_plan_t *plan, iw_agent_t *a)
{
    iw_agent_t  *m;

    plan->team = ioa_realloc(plan->team,
                             (plan->nteam + 1) * sizeof(iw_agent_t));
    m = &plan->team[plan->nteam++];
    m->name = ioa_strdup(a->name);
    m->type = ioa_strdup(a->type);
    m->desc = ioa_strdup(a->desc);
    m->found = a->found;
    m->online = a->online;
    m->protocol = a->protocol;
    m->score = a->score;
    m->completed = a->completed;
    m->partial = a->partial;
    m->unfinished = a->unfinished;
    m->latency_ms = a->latency_ms;
    m->rank = a->rank;
}


/*
 * An agent matches a clause well enough: ranked->v[k] scores at least
 * min_score and at least IW_PLAN_MIN_SHARE of the best score.  The share
 * keeps a weak second from taking a clause whose best agent is busy or
 * failed: "count the words" is not for the agent that reverses words
 * because both descriptions say "words".  Both look at the match alone:
 * the order is by match and record (iw_reg_rank), so the best match need
 * not be first.
 */

int
iw_plan_eligible(iw_agents_t *ranked, size_t k, double min_score)
{
    size_t  i;
    double  best;

    if (k >= ranked->n) {
        return 0;
    }

    for (i = 0, best = 0; i < ranked->n; i++) {
        best = ranked->v[i].score > best ? ranked->v[i].score : best;
    }

    return ranked->v[k].score >= min_score
           && ranked->v[k].score >= IW_PLAN_MIN_SHARE * best;
}


/*
 * ranked[i]: the registry's agents for clause i, best first.  fixed: the
 * given team (team_member_names), or NULL to recruit.  allow_sub: the goal
 * may nest a team (team_up_depth >= 1): a clause whose best agent cannot
 * join a full team goes to a sub-team instead of to a member who is only
 * second best.  A recruited clause without an eligible agent is nobody's:
 * plan->why[i] says why.  Leaves plan->nteam 0 when nobody matched
 * anything (the caller fails the goal).
 */

#define IW_PLAN_SUB  -2

void
iw_plan_pick(iw_plan_t *plan, iw_agents_t *ranked, iw_agents_t *fixed,
    const char *coordinator, int allow_sub, double min_score)
{
    int        *owner, m;
    size_t      i, j, k, *load, least;

    if (fixed) {
        for (j = 0; j < fixed->n; j++) {
            if (iw_plan_member(plan, fixed->v[j].name) < 0) {
                iw_plan_join(plan, &fixed->v[j]);
            }
        }
    }

    owner = ioa_alloc(plan->nclauses * sizeof(int));

    for (i = 0; i < plan->nclauses; i++) {
        owner[i] = -1;

        for (k = 0; k < ranked[i].n; k++) {
            if (fixed == NULL && !iw_plan_eligible(&ranked[i], k, min_score))
            {
                break;                  /* ranked: the rest are weaker */
            }

            m = iw_plan_member(plan, ranked[i].v[k].name);

            if (m < 0 && fixed == NULL && plan->nteam < IW_PLAN_MAX_TEAM) {
                iw_plan_join(plan, &ranked[i].v[k]);
                m = (int) plan->nteam - 1;
            }

            if (m < 0 && k == 0 && fixed == NULL && allow_sub) {
                owner[i] = IW_PLAN_SUB;
                break;
            }

            if (m >= 0) {
                owner[i] = m;
                break;
            }
        }

        if (owner[i] == -1 && fixed == NULL) {
            if (ranked[i].n == 0) {
                plan->why[i] = ioa_strdup("no online agent's description "
                                         "matches it");

            } else if (!iw_plan_eligible(&ranked[i], 0, min_score)) {
                plan->why[i] = ioa_sprintf("no agent matches it well enough "
                                          "(the best, %s, scores %.2f; at "
                                          "least %.2f is needed)",
                                          ranked[i].v[0].name,
                                          ranked[i].v[0].score, min_score);

            } else {
                plan->why[i] = ioa_sprintf("the agents that match it (%s "
                                          "first) could not join a full "
                                          "team of %d",
                                          ranked[i].v[0].name,
                                          IW_PLAN_MAX_TEAM);
            }
        }
    }

    if (plan->nteam == 0) {
        free(owner);
        return;
    }

    /* a given team: what no member matches goes to the least busy one */
    load = ioa_alloc(plan->nteam * sizeof(size_t));
    memset(load, 0, plan->nteam * sizeof(size_t));

    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] >= 0) {
            load[owner[i]]++;
        }
    }

    for (i = 0; fixed && i < plan->nclauses; i++) {
        if (owner[i] != -1) {
            continue;
        }

        for (j = 1, least = 0; j < plan->nteam; j++) {
            if (load[j] < load[least]) {
                least = j;
            }
        }

        owner[i] = (int) least;
        load[least]++;
    }

    iw_plan_assign(plan, owner, coordinator);

    free(load);
    free(owner);
}


/*
 * The tasks from the clauses' owners: one task per clause, in order, so a
 * part is done only when its own task is (never because a task that also
 * held another part came back).  In sequence ("..., then ...") each is
 * handed the results before it; in parallel a member with two clauses
 * takes them one after the other (conversation.c, iw_goal_one_at_a_time:
 * IoA's assignment maps each agent to one task).  The clauses for nested
 * teams go as one sub-goal, whose own review counts its parts.  A member
 * who owns no clause has no task and stands by.
 */

static void
iw_plan_assign(iw_plan_t *plan, int *owner, const char *coordinator)
{
    size_t     i;
    unsigned   parts;
    ioa_buf_t  b;

    plan->work = ioa_alloc((plan->nteam + plan->nclauses + 1)
                          * sizeof(iw_assignment_t));
    plan->nwork = 0;
    plan->sync = plan->then;

    /* a clause of a member is a task of its own, in order; the clauses
     * for a sub-team are one sub-goal, after them (below) */
    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] == -1 || (!plan->sync && owner[i] == IW_PLAN_SUB)) {
            continue;
        }

        plan->work[plan->nwork].agent = ioa_strdup(owner[i] >= 0
                                        ? plan->team[owner[i]].name
                                        : coordinator);
        plan->work[plan->nwork].desc = ioa_strdup(plan->clauses[i]);
        plan->work[plan->nwork].sub = (owner[i] == IW_PLAN_SUB);
        plan->work[plan->nwork].parts = 1u << i;
        plan->nwork++;
    }

    if (plan->sync) {
        return;
    }

    ioa_buf_init(&b);
    parts = 0;

    for (i = 0; i < plan->nclauses; i++) {
        if (owner[i] == IW_PLAN_SUB) {
            ioa_buf_adds(&b, b.len ? " " : "");
            ioa_buf_adds(&b, plan->clauses[i]);
            ioa_buf_adds(&b, ".");
            parts |= 1u << i;
        }
    }

    if (parts == 0) {
        ioa_buf_free(&b);
        return;
    }

    plan->work[plan->nwork].agent = ioa_strdup(coordinator);
    plan->work[plan->nwork].desc = ioa_buf_take(&b);
    plan->work[plan->nwork].sub = 1;
    plan->work[plan->nwork].parts = parts;
    plan->nwork++;
}


/* the LLM's assignment replaces the built-in one, and its tasks become the
 * goal's parts (work and parts are taken over) */

void
iw_plan_set_work(iw_plan_t *plan, iw_assignment_t *work, size_t n, int sync,
    char **parts, size_t nparts)
{
    size_t  i;

    for (i = 0; i < plan->nwork; i++) {
        free(plan->work[i].agent);
        free(plan->work[i].desc);
    }

    for (i = 0; i < plan->nclauses; i++) {
        free(plan->clauses[i]);
        free(plan->why[i]);
        plan->why[i] = NULL;
    }

    free(plan->clauses);
    plan->clauses = parts;
    plan->nclauses = nparts;

    free(plan->work);
    plan->work = work;
    plan->nwork = n;
    plan->sync = sync;
}


void
iw_plan_free(iw_plan_t *plan)
{
    size_t       i;
    iw_agents_t  team;

    for (i = 0; i < plan->nclauses; i++) {
        free(plan->clauses[i]);
        free(plan->why ? plan->why[i] : NULL);
    }

    if (plan->work) {
        for (i = 0; i < plan->nwork; i++) {
            free(plan->work[i].agent);
            free(plan->work[i].desc);
        }
    }

    team.v = plan->team;
    team.n = plan->nteam;
    iw_agents_free(&team);

    free(plan->clauses);
    free(plan->why);
    free(plan->work);
    memset(plan, 0, sizeof(*plan));
}


/* IoA names a team with its LLM (at most 40 characters) unless skip_naming;
 * here: the goal's first 40 bytes, cut on a UTF-8 character boundary */

char *
iw_plan_team_name(const char *goal)
{
    size_t  n;

    n = strlen(goal);

    if (n > 40) {
        n = 40;

        while (n && ((unsigned char) goal[n] & 0xc0) == 0x80) {
            n--;
        }
    }

    while (n && isspace((unsigned char) goal[n - 1])) {
        n--;
    }

    return ioa_strndup(goal, n);
}


/* ---- the texts of the coordinator's envelopes ---- */

char *
iw_plan_discussion(const char *goal, int sync, iw_task_t *t, size_t n)
{
    size_t    i;
    ioa_buf_t b;

    ioa_buf_init(&b);

    if (sync) {
        ioa_buf_addf(&b, "Team, our goal: %s\nI split it into %zu step%s, "
                    "one after the other, each building on the one before:",
                    goal, n, n == 1 ? "" : "s");

    } else {
        ioa_buf_addf(&b, "Team, our goal: %s\nI split it into %zu task%s, "
                    "to run in parallel:", goal, n, n == 1 ? "" : "s");
    }

    for (i = 0; i < n; i++) {
        ioa_buf_addf(&b, "\n- %s%s: %s", t[i].agent,
                    t[i].sub ? " (with a sub-team)" : "", t[i].desc);
    }

    ioa_buf_adds(&b, "\nI will collect the results and conclude.");

    return ioa_buf_take(&b);
}


/* what the coordinator says in the discussion for a member that only runs
 * tasks, from its registered description */

char *
iw_plan_behalf(const iw_agent_t *a, iw_task_t *t, size_t n)
{
    size_t    i, mine;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_addf(&b, "On behalf of %s (%s%s%s): ", a->name,
                a->type && *a->type ? a->type : "agent",
                a->desc && *a->desc ? ", " : "",
                a->desc && *a->desc ? a->desc : "");

    for (i = 0, mine = 0; i < n; i++) {
        if (strcmp(t[i].agent, a->name) == 0) {
            ioa_buf_addf(&b, "%s%s", mine++ ? "; " : "I can take on: ",
                        t[i].desc);
        }
    }

    if (mine == 0) {
        ioa_buf_adds(&b, "I have no task in this plan and stand by.");

    } else {
        ioa_buf_adds(&b, ". I will report the result when it is done.");
    }

    return ioa_buf_take(&b);
}


char *
iw_plan_assignment(iw_task_t *t, size_t n)
{
    size_t    i;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_adds(&b, "Tasks, to run in the background; report progress, then "
                "the result with the task_id:");

    for (i = 0; i < n; i++) {
        ioa_buf_addf(&b, "\n- %s (task %s): %s", t[i].agent, t[i].task_id,
                    t[i].desc);
    }

    return ioa_buf_take(&b);
}


/* step i of a sequence: its task, with what the steps before produced when
 * they are chained (the goal is a sequence, not a round whose agent has two
 * parts) */

char *
iw_plan_sync_task(iw_task_t *t, size_t i, int chained)
{
    size_t    k;
    ioa_buf_t b;

    ioa_buf_init(&b);
    ioa_buf_adds(&b, t[i].desc);

    for (k = 0; chained && k < i; k++) {
        if (iw_streq(t[k].status, "completed") && t[k].result
            && *t[k].result)
        {
            ioa_buf_addf(&b, "%sStep %zu (%s): %s",
                        k == 0 ? "\n\nResults so far:\n" : "\n", k + 1,
                        t[k].agent, t[k].result);
        }
    }

    return ioa_buf_take(&b);
}


char *
iw_plan_pause(iw_task_t *t, size_t n, long long timeout_ms)
{
    (void) t;

    return ioa_sprintf("Pausing the discussion until the %zu task%s report%s "
                      "back (each has %lld s).", n, n == 1 ? "" : "s",
                      n == 1 ? "s" : "", timeout_ms / 1000);
}


char *
iw_plan_conclude(const char *ended, long long max_turns)
{
    if (iw_streq(ended, "max_turns")) {
        return ioa_sprintf("The room reached max_turns (%lld); concluding "
                          "with what we have.", max_turns);
    }

    if (iw_streq(ended, "token_budget")) {
        return ioa_strdup("The goal used up its token budget; concluding "
                         "with what we have.");
    }

    if (iw_streq(ended, "deadline")) {
        return ioa_strdup("The goal reached its deadline; concluding with "
                         "what we have.");
    }

    return ioa_strdup("Every task has settled; concluding the discussion.");
}


/*
 * The built-in planner as a goal's planner (iw_planner_t): its team is
 * the ranking's (forming.c), its assignment iw_plan_pick()'s, its review
 * the rule's (decide.c: no review of its own), its conclusion the account
 * of every part (decide.c).  So each of these says "nothing to add".
 */

static int
iw_builtin_team(const iw_conf_t *conf, iw_goal_t *g, const char *text,
    int online_only, char ***names, size_t *n)
{
    (void) conf;
    (void) g;
    (void) text;
    (void) online_only;

    *names = NULL;
    *n = 0;

    return IW_OK;
}


static int
iw_builtin_plan(const iw_conf_t *conf, iw_goal_t *g, const char *text,
    int allow_sub, iw_plan_t *plan, char **discussion)
{
    (void) conf;
    (void) g;
    (void) text;
    (void) allow_sub;
    (void) plan;

    *discussion = NULL;

    return IW_OK;
}


static int
iw_builtin_conclusion(const iw_conf_t *conf, iw_goal_t *g, char **text)
{
    (void) conf;
    (void) g;

    *text = NULL;

    return IW_OK;
}


const iw_planner_t  iw_planner_builtin = {
    "builtin",
    iw_builtin_team,
    iw_builtin_plan,
    NULL,
    NULL,
    iw_builtin_conclusion
};
