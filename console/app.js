// ioa console: the shell (header, sign-in, routing) and its views.
//
// Design:
// - One page, hash routes (#/agents, #/rooms/<comm_id>, #/goals/<id>,
//   #/launch): nginx serves the same index.html for every view and a
//   reload lands on the view it was on.  A view is a function that fills
//   <main> and returns what to stop when the route changes (its feeds), so
//   leaving a page never leaves a stream open.
// - Only the hub's own endpoints are used, each as its README entry says;
//   the console has no API of its own and no state the hub does not hold,
//   apart from the tab's token and feed positions (sessionStorage).
// - The token's scopes decide what is offered (a button the token cannot
//   use is disabled with a note saying which scope it needs), but every
//   action still goes to the hub, and its refusal is shown in words in the
//   place the action was.
// - Calm by default: live views do not jump the page; new transcript lines
//   are appended to a list marked aria-live=polite.

import { h, on, clear, fmtTime, notice, field, append } from './dom.js';
import { api, session, explain, detectOpenMode, decodeToken, HubError } from './api.js';
import { Feed } from './sse.js';
import { envelopeItem, TaskBoard } from './transcript.js';

const main = document.getElementById('main');
const GOAL_FINAL = ['concluded', 'failed', 'cancelled'];
const GOAL_STATES = ['queued', 'forming', 'running', 'cancelling', 'concluded',
                     'failed', 'cancelled'];
const PAGE = 50;

let cleanup = [];

// --------------------------------------------------------------- header

async function checkHealth() {
    const el = document.getElementById('health');
    let text = 'hub: unreachable';
    let cls = 'bad';
    try {
        const res = await fetch('/health_check', { cache: 'no-store', credentials: 'omit' });
        if (res.ok) {
            text = 'hub: ok';
            cls = 'good';
        } else {
            text = `hub: unavailable (${res.status})`;
        }
    } catch (e) {
        // unreachable: the default text
    }
    el.textContent = text;
    el.className = `health ${cls}`;
}

function showWho() {
    const who = document.getElementById('who');
    const out = document.getElementById('signout');
    clear(who);
    if (session.open) {
        append(who, [h('span', { class: 'pill', text: 'open mode' }),
                     ' no sign-in: the hub runs with ioa_auth off']);
        out.hidden = true;
    } else if (session.token) {
        const scopes = session.scopes.join(' ') || 'no scopes';
        append(who, ['signed in as ', h('strong', { text: session.subject || '(no subject)' }),
                     ' ', h('span', { class: 'scopes', text: `(${scopes})` })]);
        out.hidden = false;
    } else {
        who.textContent = 'not signed in';
        out.hidden = true;
    }
}

function markNav(name) {
    for (const a of document.querySelectorAll('[data-nav]')) {
        if (a.dataset.nav === name) {
            a.setAttribute('aria-current', 'page');
        } else {
            a.removeAttribute('aria-current');
        }
    }
}

// ---------------------------------------------------------------- views

function page(title, ...children) {
    clear(main);
    document.title = `${title} \u00b7 ioa console`;
    append(main, [h('h1', { text: title }), ...children]);
}

function failure(err, what, inSignIn) {
    const text = explain(err, what);
    const box = notice('error', text);
    if (err instanceof HubError && err.status === 401 && !session.open && !inSignIn) {
        box.appendChild(document.createTextNode(' '));
        box.appendChild(h('a', { href: '#/signin', text: 'Sign in' }));
    }
    return box;
}

// a button that needs a scope: disabled, with the reason, if the token
// lacks it
function needs(button, scope, note) {
    if (!session.can(scope)) {
        button.disabled = true;
        const n = h('span', { class: 'hint', text: note || `needs the ${scope} scope` });
        n.id = `${button.id || 'b'}-needs`;
        button.setAttribute('aria-describedby', n.id);
        return [button, ' ', n];
    }
    return [button];
}

function viewSignIn(params) {
    const input = h('textarea', { id: 'token', rows: 4, spellcheck: 'false',
                                   autocomplete: 'off', required: true,
                                   placeholder: 'eyJhbGciOi...' });
    const msg = h('div', { id: 'signin-message', 'aria-live': 'polite' });
    const form = h('form', { class: 'card narrow', id: 'signin' },
        field('Token (a JWT from your operator, or the console token make run prints)', input,
              'Kept in this tab only (sessionStorage) and sent only as an Authorization header.'),
        h('button', { type: 'submit', class: 'primary', text: 'Sign in' }),
        msg);
    if (params.get('why') === 'expired') {
        msg.appendChild(notice('info', 'Your token has expired. Paste a new one.'));
    }
    on(form, 'submit', async (ev) => {
        ev.preventDefault();
        clear(msg);
        const token = input.value.trim();
        if (!token) {
            return;
        }
        const claims = decodeToken(token);
        if (!claims) {
            msg.appendChild(notice('error', 'That is not a JWT: three base64url parts joined by dots.'));
            return;
        }
        // ask the hub: /query_assistant takes any scope
        session.signIn(token);
        try {
            await api('POST', '/query_assistant', { name: session.subject || 'console' });
        } catch (e) {
            if (!(e instanceof HubError) || (e.status !== 404 && e.status !== 400)) {
                session.signOut();
                showWho();
                msg.appendChild(failure(e, 'Sign in', true));
                return;
            }
        }
        showWho();
        location.hash = session.can('launch') ? '#/goals' : '#/agents';
    });
    page('Sign in', h('p', { class: 'lead',
        text: 'This hub asks every client for a token. Paste yours to see agents, rooms and goals.' }),
        form);
    input.focus();
}

// ------------------------------------------------------------------ agents

function recordText(r) {
    if (!r || typeof r !== 'object') {
        return 'no record';
    }
    const lat = typeof r.latency_ms === 'number' ? `, ${(r.latency_ms / 1000).toFixed(1)} s per task` : '';
    return `${r.completed || 0} done, ${r.partial || 0} partial, ${r.failed || 0} failed, `
         + `${r.timed_out || 0} timed out${lat}`;
}

function agentCard(a) {
    const online = a.online === true;
    return h('li', { class: 'card agent-card', 'data-agent': String(a.name) },
        h('div', { class: 'row' },
            h('h2', { class: 'agent-name', text: String(a.name) }),
            h('span', { class: `presence ${online ? 'on' : 'off'}`,
                        text: online ? 'online' : 'offline' })),
        h('div', { class: 'muted small', text: [a.type, a.speaks_protocol ? 'speaks the protocol' : null,
            typeof a.score === 'number' ? `score ${a.score}` : null].filter(Boolean).join(' \u00b7 ') }),
        h('p', { class: 'desc', text: String(a.desc || '') }),
        Array.isArray(a.tags) && a.tags.length
            ? h('ul', { class: 'tags', 'aria-label': 'tags' }, a.tags.map((t) => h('li', { text: String(t) })))
            : null,
        h('div', { class: 'record small', text: `record: ${recordText(a.record)}` }));
}

async function viewAgents(params) {
    const offset = Math.max(0, parseInt(params.get('offset') || '0', 10) || 0);
    const q = params.get('q') || '';
    const input = h('input', { type: 'search', id: 'agent-q', name: 'q', value: q,
                               placeholder: 'e.g. translate french' });
    const form = h('form', { class: 'search', role: 'search' },
        field('Find agents by capability', input), h('button', { type: 'submit', text: 'Search' }));
    on(form, 'submit', (ev) => {
        ev.preventDefault();
        const v = input.value.trim();
        location.hash = v ? `#/agents?q=${encodeURIComponent(v)}` : '#/agents';
    });
    const out = h('div', { 'aria-live': 'polite', id: 'agents-out' }, h('p', { class: 'muted', text: 'Loading\u2026' }));
    page('Agents', form, out);

    try {
        let list;
        let pager = null;
        if (q) {
            // ranked by the hub (BM25 over descriptions); it acts as the
            // token's subject, so it needs the agent scope
            list = await api('POST', '/retrieve_assistant', {
                sender: session.open ? 'console' : session.subject,
                capabilities: [q], limit: 20 });
        } else {
            list = await api('GET', `/list_all_agents?offset=${offset}&limit=${PAGE}`);
            if (list.length) {
                // records: /query_assistant, any scope
                const more = await api('POST', '/query_assistant', { name: list.map((a) => a.name) })
                    .catch(() => []);
                list = list.map((a, i) => Object.assign({}, a, more[i] || {}));
            }
            pager = h('nav', { class: 'pager', 'aria-label': 'Pages of agents' },
                offset > 0 ? h('a', { href: `#/agents?offset=${Math.max(0, offset - PAGE)}`, text: '\u2190 Previous' }) : null,
                list.length === PAGE ? h('a', { href: `#/agents?offset=${offset + PAGE}`, text: 'Next \u2192' }) : null);
        }
        clear(out);
        if (!list.length) {
            out.appendChild(h('p', { class: 'muted', text: q ? 'No agent matches.' : 'No agent is registered yet.' }));
            return;
        }
        const online = list.filter((a) => a.online).length;
        append(out, [h('p', { class: 'muted', text: q
                        ? `${list.length} matching, best first`
                        : `Agents ${offset + 1}\u2013${offset + list.length} (oldest first), ${online} online` }),
                     h('ul', { class: 'cards', id: 'agent-list' }, list.map(agentCard)), pager]);
    } catch (e) {
        clear(out);
        out.appendChild(failure(e, q ? 'Searching agents' : 'Listing every agent'));
    }
}

// ------------------------------------------------------------------ rooms

function roomOpener() {
    const input = h('input', { type: 'text', id: 'room-id', pattern: '[0-9A-Za-z_.:-]+',
                               placeholder: 'comm_id', required: true });
    const form = h('form', { class: 'inline' }, field('Open a room by its comm_id', input),
                   h('button', { type: 'submit', text: 'Open' }));
    on(form, 'submit', (ev) => {
        ev.preventDefault();
        location.hash = `#/rooms/${encodeURIComponent(input.value.trim())}`;
    });
    return form;
}

async function viewRooms() {
    const out = h('div', { id: 'rooms-out' }, h('p', { class: 'muted', text: 'Loading\u2026' }));
    page('Rooms', out, roomOpener());
    try {
        const rooms = await api('POST', '/fetch_chat_record', { comm_id: null, limit: 1 });
        const list = Object.values(rooms || {});
        clear(out);
        if (!list.length) {
            out.appendChild(h('p', { class: 'muted', text: 'No room yet.' }));
            return;
        }
        out.appendChild(h('p', { class: 'muted', text: `${list.length} room${list.length > 1 ? 's' : ''} (the hub shows the newest 100)` }));
        out.appendChild(h('ul', { class: 'cards', id: 'room-list' }, list.map((r) => {
            const first = (r.chat_record || [])[0];
            return h('li', { class: 'card' },
                h('h2', {}, h('a', { href: `#/rooms/${encodeURIComponent(r.comm_id)}`,
                                     text: r.team_name || '(unnamed team)' })),
                h('div', { class: 'small mono', text: r.comm_id }),
                h('div', { class: 'small', text: `members: ${(r.agent_names || []).join(', ')}` }),
                h('div', { class: 'small muted', text: first ? `since ${fmtTime(first.timestamp)}` : 'no envelope yet' }));
        })));
    } catch (e) {
        clear(out);
        out.appendChild(failure(e, 'Listing every room'));
        if (e instanceof HubError && e.status === 403) {
            out.appendChild(h('p', { class: 'muted',
                text: 'A room you may read (observer, or observer:<comm_id>) opens by its id below.' }));
        }
    }
}

// ended(): the goal has ended, so "live" only waits for late envelopes
function feedStatus(el, ended) {
    return (state, detail) => {
        el.className = `feed-status ${state}`;
        if (state === 'live' && ended && ended()) {
            el.textContent = 'ended; still listening for late envelopes';
        } else if (state === 'live') {
            el.textContent = 'live';
        } else if (state === 'polling') {
            el.textContent = 'live (polling every 2 s)';
        } else if (state === 'connecting') {
            el.textContent = 'connecting\u2026';
        } else if (state === 'reconnecting') {
            el.textContent = `connection lost; resuming in ${Math.ceil(detail / 1000)} s`;
        } else if (state === 'error') {
            el.textContent = '';
            el.appendChild(failure(detail, 'Following the stream'));
        }
    };
}

// the room's record as feed events, after an id; all pages
async function recordAfter(cid, after, emit) {
    for (;;) {
        const body = { comm_id: cid, limit: 1000 };
        if (after) {
            body.after = after;
        }
        const doc = await api('POST', '/fetch_chat_record', body);
        const r = doc && doc[cid];
        if (!r) {
            throw new HubError(404, { code: 'unknown_room', message: `no room ${cid}` });
        }
        for (const env of r.chat_record || []) {
            emit({ id: env.id, event: 'message', data: JSON.stringify(env) });
            after = env.id;
        }
        if (!r.more || !r.next_after) {
            return r;
        }
        after = r.next_after;
    }
}

async function viewRoom(cid) {
    const headBox = h('div', { class: 'room-head' }, h('p', { class: 'muted', text: 'Loading\u2026' }));
    const status = h('div', { class: 'feed-status', role: 'status' });
    const list = h('ol', { class: 'transcript', id: 'transcript', 'aria-live': 'polite',
                           'aria-relevant': 'additions', 'aria-label': 'Transcript' });
    const empty = h('p', { class: 'muted', id: 'transcript-empty', text: 'Nothing said yet.' });
    page('Room', headBox, h('h2', { class: 'section', text: 'Transcript' }), status, empty, list);

    try {
        const doc = await api('POST', '/fetch_chat_record', { comm_id: cid, limit: 1 });
        const r = doc && doc[cid];
        clear(headBox);
        append(headBox, [
            h('p', { class: 'lead' }, h('strong', { text: (r && r.team_name) || '(unnamed team)' })),
            h('dl', { class: 'facts' },
                h('dt', { text: 'comm_id' }), h('dd', { class: 'mono', text: cid }),
                h('dt', { text: 'members' }), h('dd', { id: 'members', text: ((r && r.agent_names) || []).join(', ') })),
        ]);
    } catch (e) {
        clear(headBox);
        headBox.appendChild(failure(e, 'Reading the room'));
        return;
    }

    const feed = new Feed({
        url: `/rooms/${encodeURIComponent(cid)}/events`,
        storeKey: `ioa.feed.room.${cid}`,
        onStatus: feedStatus(status),
        // the feed starts at the room's first envelope, or after the last
        // one shown; a hub without it is polled (POST /fetch_chat_record)
        poll: async (last) => {
            const got = [];
            await recordAfter(cid, last, (ev) => got.push(ev));
            return got;
        },
        onEvent: (ev) => {
            let env;
            try {
                env = JSON.parse(ev.data);
            } catch (e) {
                return;
            }
            if (!env || typeof env !== 'object' || ev.event !== 'message') {
                return;
            }
            if (env.id === undefined && ev.id) {
                env.id = ev.id;
            }
            empty.hidden = true;
            list.appendChild(envelopeItem(env));
        },
    }).start();
    cleanup.push(() => feed.stop());
}

// ------------------------------------------------------------------ goals

function stateBadge(state) {
    return h('span', { class: `state state-${state}`, text: String(state || 'unknown') });
}

function rememberGoal(gid) {
    const mine = JSON.parse(sessionStorage.getItem('ioa.console.goals') || '[]');
    if (!mine.includes(gid)) {
        mine.unshift(gid);
        sessionStorage.setItem('ioa.console.goals', JSON.stringify(mine.slice(0, 50)));
    }
}

function goalOpener() {
    const input = h('input', { type: 'text', id: 'goal-id', pattern: '[0-9a-f]{32}',
                               placeholder: '32 hex digits', required: true });
    const form = h('form', { class: 'inline' }, field('Open a goal by its id', input),
                   h('button', { type: 'submit', text: 'Open' }));
    on(form, 'submit', (ev) => {
        ev.preventDefault();
        location.hash = `#/goals/${input.value.trim()}`;
    });
    return form;
}

async function viewGoals(params) {
    const state = params.get('state') || '';
    const before = params.get('before') || '';
    const select = h('select', { id: 'goal-state' },
        h('option', { value: '', text: 'every state' }),
        GOAL_STATES.map((s) => h('option', { value: s, text: s })));
    select.value = state;
    on(select, 'change', () => {
        location.hash = select.value ? `#/goals?state=${select.value}` : '#/goals';
    });
    const launch = h('a', { href: '#/launch', class: 'button primary', text: 'Launch a goal' });
    const out = h('div', { id: 'goals-out' }, h('p', { class: 'muted', text: 'Loading\u2026' }));
    page('Goals', h('div', { class: 'toolbar' }, field('Show', select), launch), out, goalOpener());

    const q = new URLSearchParams({ limit: '20' });
    if (state) {
        q.set('state', state);
    }
    if (before) {
        q.set('before', before);
    }
    try {
        const doc = await api('GET', `/goals?${q}`);
        const goals = (doc && doc.goals) || [];
        clear(out);
        if (doc && doc.counts && typeof doc.counts === 'object') {
            out.appendChild(h('p', { class: 'muted small', text: Object.entries(doc.counts)
                .map(([k, v]) => `${k} ${v}`).join(' \u00b7 ') }));
        }
        if (!goals.length) {
            out.appendChild(h('p', { class: 'muted', text: 'No goal here yet.' }));
            return;
        }
        out.appendChild(h('ul', { class: 'cards', id: 'goal-list' }, goals.map((g) =>
            h('li', { class: 'card goal-card' },
                h('div', { class: 'row' }, stateBadge(g.state),
                  h('span', { class: 'small muted', text: fmtTime(g.created_at) })),
                h('a', { href: `#/goals/${g.goal_id}`, class: 'goal-text', text: String(g.goal || g.goal_id) }),
                g.launched_by ? h('div', { class: 'small muted', text: `launched by ${g.launched_by}` }) : null,
                g.parent ? h('div', { class: 'small muted', text: 'a sub-team\u2019s goal' }) : null))));
        if (doc.next) {
            const n = new URLSearchParams(q);
            n.set('before', doc.next);
            n.delete('limit');
            out.appendChild(h('nav', { class: 'pager', 'aria-label': 'Pages of goals' },
                h('a', { href: `#/goals?${n}`, text: 'Older \u2192' })));
        }
    } catch (e) {
        clear(out);
        if (e instanceof HubError && e.status === 404 && e.code === 'unknown_endpoint') {
            // a hub without GET /goals: the goals this tab launched
            const mine = JSON.parse(sessionStorage.getItem('ioa.console.goals') || '[]');
            out.appendChild(notice('info', 'This hub does not list goals (no GET /goals); here are the ones launched from this tab.'));
            out.appendChild(h('ul', { class: 'plain' }, mine.map((gid) =>
                h('li', {}, h('a', { href: `#/goals/${gid}`, class: 'mono', text: gid })))));
            return;
        }
        out.appendChild(failure(e, 'Listing goals'));
    }
}

async function viewGoal(gid) {
    const head = h('div', { class: 'goal-head' }, h('p', { class: 'muted', text: 'Loading\u2026' }));
    const actions = h('div', { class: 'actions' });
    const tasksBox = h('div', { id: 'tasks' });
    const status = h('div', { class: 'feed-status', role: 'status' });
    const timeline = h('ol', { class: 'transcript', id: 'timeline', 'aria-live': 'polite',
                               'aria-relevant': 'additions', 'aria-label': 'Timeline' });
    page('Goal', head, actions,
         h('section', { 'aria-labelledby': 'tasks-h' }, h('h2', { class: 'section', id: 'tasks-h', text: 'Tasks' }), tasksBox),
         h('section', { 'aria-labelledby': 'timeline-h' }, h('h2', { class: 'section', id: 'timeline-h', text: 'Timeline' }),
           status, timeline));

    let meta = null;
    let refreshing = null;
    const board = new TaskBoard();
    tasksBox.appendChild(board.render());

    const showMeta = () => {
        clear(head);
        const m = meta;
        const tokens = (m.tokens || m.prompt_tokens || m.completion_tokens)
            ? `${m.tokens || 0} (${m.prompt_tokens || 0} prompt, ${m.completion_tokens || 0} completion)`
            : '0';
        append(head, [
            h('p', { class: 'goal-text lead', id: 'goal-text', text: String(m.goal || '') }),
            h('dl', { class: 'facts' },
                h('dt', { text: 'state' }), h('dd', { id: 'goal-state-now' }, stateBadge(m.state),
                    m.ended ? ` (${m.ended})` : ''),
                h('dt', { text: 'room' }), h('dd', {}, m.comm_id
                    ? h('a', { href: `#/rooms/${encodeURIComponent(m.comm_id)}`, class: 'mono', text: m.comm_id })
                    : '\u2014'),
                h('dt', { text: 'planner' }), h('dd', { text: m.planner || '\u2014' }),
                h('dt', { text: 'tokens used' }), h('dd', { id: 'goal-tokens', text: tokens }),
                h('dt', { text: 'launched' }), h('dd', { text: `${fmtTime(m.created_at)}${m.launched_by ? ` by ${m.launched_by}` : ''}` }),
                h('dt', { text: 'goal id' }), h('dd', { class: 'mono', text: gid })),
            m.conclusion ? h('section', { class: 'conclusion', id: 'conclusion', 'aria-label': 'Conclusion' },
                h('h2', { class: 'section', text: 'Conclusion' }),
                h('div', { class: 'msg-body', text: String(m.conclusion) })) : null,
            m.error ? notice('error', `The goal failed: ${m.error}`) : null,
        ]);
        renderActions();
    };

    const refresh = () => {
        if (!refreshing) {
            refreshing = api('GET', `/goals/${gid}`).then((m) => {
                meta = m;
                showMeta();
            }).catch((e) => {
                if (!meta) {
                    clear(head);
                    head.appendChild(failure(e, 'Reading the goal'));
                }
            }).finally(() => { refreshing = null; });
        }
        return refreshing;
    };

    // built once: a refresh only changes what may be used, so a message
    // shown under a button stays where it is
    let actionsFor = null;
    function renderActions() {
        if (!actionsFor) {
            actionsFor = buildActions();
        }
        const ended = GOAL_FINAL.includes(meta.state) || meta.state === 'cancelling';
        const allowed = session.can('launch');
        actionsFor.text.disabled = ended;
        actionsFor.send.disabled = ended || !allowed;
        actionsFor.cancel.disabled = ended || !allowed;
        if (ended) {
            actionsFor.confirmBox.hidden = true;
        }
        // an ended goal takes nothing more: out of the way of its outcome
        actions.hidden = GOAL_FINAL.includes(meta.state);
    }

    function buildActions() {
        const text = h('textarea', { id: 'say-text', rows: 2, maxlength: 8192, required: true,
                                     placeholder: 'e.g. also translate it into German, or: stop' });
        const send = h('button', { type: 'submit', id: 'say-send', text: 'Send as a person' });
        const sayMsg = h('div', { id: 'say-message', 'aria-live': 'polite' });
        const say = h('form', { class: 'card say', id: 'say' },
            field('Message to the team', text,
                  'Goes to the coordinator\u2019s next review; a message starting with \u201cstop\u201d ends the goal.'),
            needs(send, 'launch'), sayMsg);
        on(say, 'submit', async (ev) => {
            ev.preventDefault();
            clear(sayMsg);
            send.disabled = true;
            try {
                const r = await api('POST', `/goals/${gid}/messages`, { content: text.value });
                text.value = '';
                sayMsg.appendChild(notice('ok', `Sent as ${r.sender} (message ${r.message_id}).`));
            } catch (e) {
                sayMsg.appendChild(failure(e, 'Sending the message'));
            }
            renderActions();
        });

        const cancel = h('button', { type: 'button', id: 'cancel', class: 'danger', text: 'Cancel goal\u2026' });
        const confirmBox = h('div', { class: 'confirm', id: 'cancel-confirm', hidden: true, role: 'group',
                                      'aria-label': 'Confirm cancelling' },
            h('span', { text: 'Cancel this goal? The team stops and it concludes with what it has.' }), ' ');
        const yes = h('button', { type: 'button', id: 'cancel-yes', class: 'danger', text: 'Yes, cancel it' });
        const no = h('button', { type: 'button', id: 'cancel-no', text: 'Keep it running' });
        append(confirmBox, [yes, ' ', no]);
        const cancelMsg = h('div', { id: 'cancel-message', 'aria-live': 'polite' });
        on(cancel, 'click', () => {
            confirmBox.hidden = false;
            no.focus();
        });
        on(no, 'click', () => {
            confirmBox.hidden = true;
            cancel.focus();
        });
        on(yes, 'click', async () => {
            yes.disabled = true;
            clear(cancelMsg);
            try {
                await api('POST', `/goals/${gid}/cancel`);
                confirmBox.hidden = true;
                cancelMsg.appendChild(notice('ok', 'Cancelling: the workers are stopping the goal.'));
                refresh();
            } catch (e) {
                cancelMsg.appendChild(failure(e, 'Cancelling the goal'));
            }
            yes.disabled = false;
        });
        append(actions, [say, h('div', { class: 'card cancel-box' }, needs(cancel, 'launch'), confirmBox, cancelMsg)]);
        return { text, send, cancel, confirmBox };
    }

    await refresh();
    if (!meta) {
        return;
    }
    rememberGoal(gid);

    let finalSeen = false;
    let feedState = 'connecting';
    const showStatus = feedStatus(status, () => finalSeen);
    const feed = new Feed({
        url: `/goals/${gid}/events`,
        storeKey: `ioa.feed.goal.${gid}`,
        onStatus: (state, detail) => {
            feedState = state;
            showStatus(state, detail);
        },
        onEvent: (ev, replayed) => {
            let e;
            try {
                e = JSON.parse(ev.data);
            } catch (x) {
                return;
            }
            if (!e || typeof e !== 'object') {
                return;
            }
            if (e.event === 'state') {
                timeline.appendChild(h('li', { class: `state-line state-${e.state}`, 'data-id': ev.id || '' },
                    h('span', { class: 'sr', text: 'goal state: ' }), stateBadge(e.state),
                    e.comm_id && e.state === 'running' ? ` the team meets in room ${e.comm_id}` : '',
                    e.error ? ` \u2014 ${e.error}` : '',
                    h('time', { class: 'when', text: fmtTime(e.timestamp) })));
                if (GOAL_FINAL.includes(e.state)) {
                    finalSeen = true;
                    if (feedState === 'live') {
                        showStatus('live');
                    }
                    if (board.close(e.state)) {
                        clear(tasksBox);
                        tasksBox.appendChild(board.render());
                    }
                }
                if (!replayed) {
                    refresh();
                }
            } else if (e.event === 'envelope' && e.envelope && typeof e.envelope === 'object') {
                timeline.appendChild(envelopeItem(e.envelope));
                if (board.add(e.envelope)) {
                    clear(tasksBox);
                    tasksBox.appendChild(board.render());
                }
            }
        },
    }).start();
    cleanup.push(() => feed.stop());
    // tokens move with every LLM call: read them again now and then
    const timer = setInterval(() => {
        if (meta && !GOAL_FINAL.includes(meta.state)) {
            refresh();
        }
    }, 5000);
    cleanup.push(() => clearInterval(timer));
}

// ------------------------------------------------------------------ launch

function viewLaunch() {
    const goal = h('textarea', { id: 'launch-goal', rows: 4, required: true, maxlength: 65536,
                                 placeholder: 'e.g. Count the words in "agents that cooperate". Shout it in upper case.' });
    const members = h('input', { type: 'text', id: 'launch-members', placeholder: 'Counter, Shouter' });
    const turns = h('input', { type: 'number', id: 'launch-turns', min: 1, step: 1, inputmode: 'numeric' });
    const deadline = h('input', { type: 'number', id: 'launch-deadline', min: 1, max: 86400, step: 1, inputmode: 'numeric' });
    const submit = h('button', { type: 'submit', class: 'primary', id: 'launch-submit', text: 'Launch' });
    const msg = h('div', { id: 'launch-message', 'aria-live': 'polite' });
    const form = h('form', { class: 'card narrow', id: 'launch' },
        field('Goal', goal, 'What the team should do; the planner cuts it into parts.'),
        field('Team members (optional)', members, 'Agent names, separated by commas; empty: the planner recruits.'),
        h('div', { class: 'two' },
            field('Max turns (optional)', turns),
            field('Deadline in seconds (optional)', deadline, 'The goal concludes with what it has by then.')),
        needs(submit, 'launch'), msg);
    on(form, 'submit', async (ev) => {
        ev.preventDefault();
        clear(msg);
        const body = { goal: goal.value.trim() };
        const names = members.value.split(',').map((s) => s.trim()).filter(Boolean);
        if (names.length) {
            body.team_member_names = names;
        }
        if (turns.value) {
            body.max_turns = Number(turns.value);
        }
        if (deadline.value) {
            body.deadline_s = Number(deadline.value);
        }
        submit.disabled = true;
        try {
            const r = await api('POST', '/launch_goal', body);
            rememberGoal(r.goal_id);
            location.hash = `#/goals/${r.goal_id}`;
        } catch (e) {
            msg.appendChild(failure(e, 'Launching the goal'));
            submit.disabled = false;
        }
    });
    page('Launch a goal', form);
}

// ------------------------------------------------------------------ router

async function route() {
    for (const stop of cleanup) {
        stop();
    }
    cleanup = [];
    const raw = location.hash.replace(/^#/, '') || '/agents';
    const [path, query] = raw.split('?');
    const params = new URLSearchParams(query || '');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const section = parts[0] || 'agents';
    markNav(section);
    showWho();

    if (!session.open && (!session.token || session.expired) && section !== 'signin') {
        if (session.expired) {
            session.signOut();
            location.hash = '#/signin?why=expired';
        } else {
            location.hash = '#/signin';
        }
        return;
    }
    try {
        if (section === 'signin') {
            viewSignIn(params);
        } else if (section === 'agents') {
            await viewAgents(params);
        } else if (section === 'rooms' && parts[1]) {
            await viewRoom(parts[1]);
        } else if (section === 'rooms') {
            await viewRooms();
        } else if (section === 'goals' && parts[1]) {
            await viewGoal(parts[1]);
        } else if (section === 'goals') {
            await viewGoals(params);
        } else if (section === 'launch') {
            viewLaunch();
        } else {
            page('Not found', notice('info', `No view "${path}".`));
        }
    } catch (e) {
        page('Something went wrong', failure(e, 'Showing this view'));
    }
    if (!main.contains(document.activeElement)) {
        main.focus({ preventScroll: true });
    }
}

async function boot() {
    session.load();
    session.open = await detectOpenMode();
    on(document.getElementById('signout'), 'click', () => {
        session.signOut();
        showWho();
        location.hash = '#/signin';
    });
    window.addEventListener('hashchange', route);
    checkHealth();
    setInterval(checkHealth, 10000);
    await route();
    document.body.dataset.ready = '1';
}

boot();
