// ioa console: one envelope as a transcript line, and a goal's tasks.
//
// Design: a line shows what IoA's own frontend shows -- who spoke, when,
// what kind of turn it was, whom it hands the floor to (next_speaker) and
// what was said -- and, because ioa's coordinator writes them, the task
// map of an assignment, a result's status and a review's decision.  The
// kind is IoA's `type` enum by integer (README "Envelopes", the same table
// as ngx_ioa_envelope.c and scripts/ioactl), named in words, with the enum
// name as a tooltip.  Everything is text; content keeps its line breaks
// (CSS pre-wrap) and is never interpreted.

import { h, fmtTime } from './dom.js';

// IoA's AgentMessage "type", by integer: [enum name, what a person reads]
export const TYPES = [
    ['DEFAULT', 'message'],
    ['PROPOSAL', 'proposal'],
    ['VOTE', 'vote'],
    ['VOTING_RESULT', 'voting result'],
    ['DISCUSSION', 'discussion'],
    ['SYNC_TASK_ASSIGNMENT', 'task assignment (in turn)'],
    ['ASYNC_TASK_ASSIGNMENT', 'task assignment'],
    ['INFORM_TASK_RESULT', 'result'],
    ['INFORM_TASK_PROGRESS', 'progress'],
    ['PAUSE', 'pause'],
    ['CONCLUDE_GROUP_DISCUSSION', 'concluding'],
    ['CONCLUSION', 'conclusion'],
];

export function typeOf(env) {
    const t = env && env.type;
    if (Number.isInteger(t) && t >= 0 && t < TYPES.length) {
        return { n: t, name: TYPES[t][0], label: TYPES[t][1] };
    }
    return { n: null, name: 'no type', label: 'message' };
}

function names(v) {
    if (Array.isArray(v)) {
        return v.map(String).join(', ');
    }
    return v ? String(v) : '';
}

function str(v) {
    if (v === undefined || v === null) {
        return '';
    }
    return typeof v === 'string' ? v : JSON.stringify(v);
}

// the task map of an assignment: {"<agent>": {task_id, task_desc}}, or the
// envelope's own task_id/task_desc for its next_speaker
export function assignments(env) {
    const out = [];
    if (env.tasks && typeof env.tasks === 'object' && !Array.isArray(env.tasks)) {
        for (const [agent, t] of Object.entries(env.tasks)) {
            if (t && typeof t === 'object') {
                out.push({ agent, id: str(t.task_id), desc: str(t.task_desc) });
            }
        }
    } else if (env.task_id) {
        out.push({ agent: names(env.next_speaker), id: str(env.task_id),
                   desc: str(env.task_desc) });
    }
    return out;
}

export function envelopeItem(env) {
    const t = typeOf(env);
    const next = names(env.next_speaker);
    const li = h('li', { class: `msg t-${t.n === null ? 'none' : t.n}`, 'data-id': env.id || '' });

    li.appendChild(h('div', { class: 'msg-meta' },
        h('span', { class: 'sender', text: str(env.sender) || '(no sender)' }),
        ' ',
        h('span', { class: `kind kind-${t.n === null ? 'none' : t.n}`, title: t.name, text: t.label }),
        next ? h('span', { class: 'next' }, h('span', { class: 'sr', text: 'next speaker: ' }),
                 '\u2192 ', next) : null,
        h('time', { class: 'when', datetime: new Date(env.timestamp || 0).toISOString(),
                    text: fmtTime(env.timestamp) })));

    if (env.on_behalf_of) {
        li.appendChild(h('div', { class: 'aside', text: `on behalf of ${str(env.on_behalf_of)}` }));
    }

    const body = str(env.content) || (t.n === 7 ? '' : str(env.task_desc));
    if (body) {
        li.appendChild(h('div', { class: 'msg-body', text: body }));
    }

    const tasks = (t.n === 5 || t.n === 6) ? assignments(env) : [];
    if (tasks.length) {
        li.appendChild(h('ul', { class: 'task-map' }, tasks.map((x) =>
            h('li', {}, h('span', { class: 'agent', text: x.agent }), ': ', x.desc))));
    }

    if (t.n === 7 || env.task_conclusion) {
        li.appendChild(h('div', { class: 'msg-body result' },
            env.task_status ? h('span', { class: `status st-${str(env.task_status)}`,
                                          text: str(env.task_status) }) : null,
            env.task_status ? ' ' : null,
            str(env.task_conclusion)));
    }

    if (env.triggers && Array.isArray(env.triggers) && env.triggers.length) {
        li.appendChild(h('div', { class: 'aside',
            text: `waiting for ${env.triggers.length} task${env.triggers.length > 1 ? 's' : ''}` }));
    }

    const d = env.ioa_decision;
    if (d && typeof d === 'object') {
        li.appendChild(h('div', { class: 'decision' },
            h('strong', { text: `decision: ${str(d.decision)}` }),
            d.round !== undefined ? ` (round ${str(d.round)})` : '',
            d.reason ? ` \u2014 ${str(d.reason)}` : ''));
    }
    return li;
}

// A goal's tasks as its feed shows them: assigned, in progress, and each
// result with its status, keyed by task_id
export class TaskBoard {
    constructor() {
        this.tasks = new Map();
    }

    // true when the board changed
    add(env) {
        const t = typeOf(env).n;
        if (t === 5 || t === 6) {
            for (const a of assignments(env)) {
                if (a.id && !this.tasks.has(a.id)) {
                    this.tasks.set(a.id, { id: a.id, agent: a.agent, desc: a.desc,
                                           status: 'assigned', result: '' });
                }
            }
            return true;
        }
        if ((t === 7 || t === 8) && env.task_id && this.tasks.has(String(env.task_id))) {
            const task = this.tasks.get(String(env.task_id));
            if (t === 8 && task.status === 'assigned') {
                task.status = 'in progress';
            } else if (t === 7) {
                task.status = str(env.task_status) || 'done';
                task.result = str(env.task_conclusion) || str(env.content);
            }
            return true;
        }
        return false;
    }

    // the goal ended: a task that never reported stays unfinished
    close(state) {
        let changed = false;
        for (const task of this.tasks.values()) {
            if (task.status === 'assigned' || task.status === 'in progress') {
                task.status = state === 'cancelled' ? 'cancelled' : 'unfinished';
                changed = true;
            }
        }
        return changed;
    }

    render() {
        if (!this.tasks.size) {
            return h('p', { class: 'muted', text: 'No task has been handed out yet.' });
        }
        return h('ul', { class: 'tasks' }, [...this.tasks.values()].map((x) =>
            h('li', { class: 'task' },
                h('div', { class: 'task-head' },
                    h('span', { class: 'agent', text: x.agent }), ' ',
                    h('span', { class: `status st-${x.status.replace(/\s+/g, '-')}`, text: x.status })),
                h('div', { class: 'task-desc', text: x.desc }),
                x.result ? h('div', { class: 'task-result', text: x.result }) : null)));
    }
}
