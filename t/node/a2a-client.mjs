// t/node/a2a-client.mjs -- the A2A client of t/280-a2a-server.t: the real
// @a2a-js/sdk Client (the version pinned in package-lock.json) over its
// JSON-RPC transport, driven by a list of steps.
//
//   node t/node/a2a-client.mjs BASE_URL [TOKEN|-] < steps.json > outcomes.json
//
// The card is read from BASE_URL/.well-known/agent-card.json by the SDK's
// resolver.  Every step gives one outcome {ok: true, result} or {ok: false,
// error: {name, message, code}}, printed as one JSON array.  Results are
// the SDK's objects written back as A2A 1.0 JSON (Task.toJSON, ...), so a
// 0.3 connection (the SDK translates) is checked with the same words.
//
//   {"op": "connect", "version": "1.0"|"0.3"}
//                    the client for the card's interface of that version
//                    (0.3: the card's legacy fields only); result: the
//                    card's name and interfaces as the SDK read them, and
//                    the version the client speaks
//   {"op": "card"}   the card's JSON as the hub serves it
//   {"op": "extended"}   GetExtendedAgentCard
//   {"op": "send", "text": ..., "returnImmediately": bool, "metadata": {..},
//    "taskId": ...}
//   {"op": "stream", "text": ..., "taskId": ..., "drop": N}
//                    the events until the stream ends (drop: after N
//                    events the client goes away); result: the events
//   {"op": "get", "id": ...} {"op": "cancel", "id": ...}
//   {"op": "resubscribe", "id": ...}    the events, as stream
//   {"op": "until", "id": ..., "states": [...], "seconds": 60}
//                    GetTask until the task's state is one of states
//   {"op": "sleep", "ms": N}
//
// "save": "x" on a send or stream step keeps the task's id; "$x" in a
// later step's id or taskId is replaced by it.

import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory,
         DefaultAgentCardResolver } from '@a2a-js/sdk/client';
import { SendMessageRequest, StreamResponse, Task, Message }
    from '@a2a-js/sdk';

const [base, token] = process.argv.slice(2);
const steps = JSON.parse(await new Promise((resolve) => {
    let s = '';
    process.stdin.on('data', (d) => { s += d; });
    process.stdin.on('end', () => resolve(s));
}));

// the hub's token on every request the SDK makes
const authFetch = (url, init = {}) => {
    const headers = new Headers(init.headers || {});
    if (token && token !== '-') headers.set('Authorization', `Bearer ${token}`);
    return fetch(url, { ...init, headers });
};

// the SDK's v0.3 compat layer on: a card's 0.3 interface is spoken when
// it is the one chosen (1.0 is preferred when both are offered)
const legacyCompat = { enabled: true };
const resolver = new DefaultAgentCardResolver({ fetchImpl: authFetch, legacyCompat });
const factory = new ClientFactory(ClientFactoryOptions.createFrom(
    ClientFactoryOptions.default,
    { transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch, legacyCompat })],
      cardResolver: resolver }));

const saved = {};
let client = null;
let n = 0;

const fill = (v) => (typeof v === 'string'
    ? v.replace(/\$(\w+)/g, (m, k) => (k in saved ? saved[k] : m)) : v);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function request(step) {
    const message = { messageId: `m-${process.pid}-${++n}`, role: 'ROLE_USER',
                      parts: [{ text: step.text }] };
    if (step.taskId) message.taskId = fill(step.taskId);
    return SendMessageRequest.fromJSON({
        message,
        configuration: { returnImmediately: !!step.returnImmediately },
        metadata: step.metadata,
    });
}

function written(x) {
    if (x && 'status' in x && 'artifacts' in x) return Task.toJSON(x);
    if (x && 'messageId' in x) return Message.toJSON(x);
    return x;
}

async function events(gen, drop, ctl) {
    const out = [];
    for await (const ev of gen) {
        out.push(StreamResponse.toJSON(ev));
        if (drop && out.length >= drop) {
            ctl.abort();
            break;
        }
    }
    return out;
}

async function rawCard() {
    const res = await authFetch(`${base}/.well-known/agent-card.json`);
    if (!res.ok) throw new Error(`card: HTTP ${res.status}`);
    return await res.json();
}

async function connect(version) {
    let card;
    if (version === '0.3') {
        // the card as a 0.3 reader sees it: its legacy fields only, read
        // by the SDK's v0.3 compat layer
        const raw = await rawCard();
        delete raw.supportedInterfaces;
        delete raw.securityRequirements;
        for (const s of Object.values(raw.securitySchemes || {})) {
            delete s.httpAuthSecurityScheme;
        }
        card = resolver.normalizeAgentCard(raw);
    } else {
        card = await resolver.resolve(base);
    }
    client = await factory.createFromAgentCard(card);
    return { name: card.name, version: client.transport.protocolVersion,
             interfaces: card.supportedInterfaces };
}

async function run(step) {
    switch (step.op) {
    case 'connect':
        return await connect(step.version || '1.0');
    case 'card':
        return await rawCard();
    case 'extended': {
        const c = await client.transport.getExtendedAgentCard({});
        return { name: c.name, skills: c.skills };
    }
    case 'send': {
        const r = await client.sendMessage(request(step));
        if (step.save && r && r.id) saved[step.save] = r.id;
        return written(r);
    }
    case 'stream': {
        const ctl = new AbortController();
        const out = await events(client.sendMessageStream(request(step),
                                                          { signal: ctl.signal }),
                                 step.drop, ctl);
        const t = out.find((e) => e.task);
        if (step.save && t) saved[step.save] = t.task.id;
        return out;
    }
    case 'resubscribe': {
        const ctl = new AbortController();
        return await events(client.resubscribeTask({ id: fill(step.id) },
                                                   { signal: ctl.signal }),
                            step.drop, ctl);
    }
    case 'get':
        return Task.toJSON(await client.getTask({ id: fill(step.id),
                                                  historyLength: step.historyLength }));
    case 'cancel':
        return Task.toJSON(await client.cancelTask({ id: fill(step.id) }));
    case 'until': {
        const end = Date.now() + (step.seconds || 60) * 1000;
        for (;;) {
            const t = Task.toJSON(await client.getTask({ id: fill(step.id) }));
            if (step.states.includes(t.status.state)) return t;
            if (Date.now() > end) throw new Error(`still ${t.status.state}`);
            await sleep(200);
        }
    }
    case 'sleep':
        await sleep(step.ms);
        return null;
    default:
        throw new Error(`unknown step ${step.op}`);
    }
}

const outcomes = [];
for (const step of steps) {
    try {
        outcomes.push({ ok: true, result: await run(step) });
    } catch (e) {
        outcomes.push({ ok: false, error: { name: e.name, message: String(e.message),
                                            code: e.code } });
        if (step.op === 'connect') break;
    }
}
// exit only once the answer is out: a pipe takes 64 KiB at a time, and
// process.exit() would cut a longer answer there
process.stdout.write(JSON.stringify(outcomes), () => process.exit(0));
