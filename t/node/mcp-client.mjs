// t/node/mcp-client.mjs -- the MCP client of t/270-mcp.t: the real
// @modelcontextprotocol/sdk Client over its StreamableHTTPClientTransport
// (the version pinned in package-lock.json), driven by a list of steps.
//
//   node t/node/mcp-client.mjs URL [TOKEN|-] < steps.json > outcomes.json
//
// steps.json is an array; every step runs in one session, in order, and
// gives one outcome {ok: true, result} or {ok: false, error: {name,
// message, code}}; the outcomes are printed as one JSON array.  Steps:
//
//   {"op": "connect"}             initialize + notifications/initialized;
//                                 result: server info, negotiated version,
//                                 capabilities, instructions, session id
//   {"op": "ping"} {"op": "tools"} {"op": "resources"} {"op": "templates"}
//   {"op": "call", "name": ..., "arguments": {...}}
//   {"op": "read", "uri": ...}
//   {"op": "until", "name": ..., "arguments": {...}, "field": "state",
//    "values": [...], "seconds": 60}
//                                 calls the tool until structuredContent's
//                                 field is one of values (or the time is up,
//                                 then ok: false); result: the last call's
//   {"op": "close"}
//
// "save": "x" on a step keeps its result's structuredContent.x; "$x" in a
// later step's arguments or uri (a whole string, or "$x" inside one) is
// replaced by it.  A failed connect ends the list.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport }
    from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token] = process.argv.slice(2);
const steps = JSON.parse(await new Promise((resolve) => {
    let s = '';
    process.stdin.on('data', (d) => { s += d; });
    process.stdin.on('end', () => resolve(s));
}));

const headers = token && token !== '-' ? { Authorization: `Bearer ${token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url),
                                                    { requestInit: { headers } });
const client = new Client({ name: 'ioa-t270', version: '1.0.0' });
const saved = {};

function fill(v) {
    if (typeof v === 'string') {
        return v.replace(/\$(\w+)/g, (m, k) => (k in saved ? saved[k] : m));
    }
    if (Array.isArray(v)) return v.map(fill);
    if (v && typeof v === 'object') {
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]));
    }
    return v;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function run(step) {
    switch (step.op) {
    case 'connect':
        await client.connect(transport);
        return {
            server: client.getServerVersion(),
            protocolVersion: transport.protocolVersion,
            capabilities: client.getServerCapabilities(),
            instructions: client.getInstructions(),
            sessionId: transport.sessionId,
        };
    case 'ping':
        return await client.ping();
    case 'tools':
        return await client.listTools();
    case 'resources':
        return await client.listResources();
    case 'templates':
        return await client.listResourceTemplates();
    case 'call':
        return await client.callTool({ name: step.name, arguments: fill(step.arguments) });
    case 'read':
        return await client.readResource({ uri: fill(step.uri) });
    case 'until': {
        const end = Date.now() + (step.seconds ?? 60) * 1000;
        for (;;) {
            const res = await client.callTool({ name: step.name,
                                                arguments: fill(step.arguments) });
            const v = res.structuredContent?.[step.field];
            if (step.values.includes(v)) return res;
            if (Date.now() > end) {
                throw Object.assign(new Error(`still ${v}`), { last: res });
            }
            await sleep(200);
        }
    }
    case 'close':
        await client.close();
        return {};
    default:
        throw new Error(`unknown step ${step.op}`);
    }
}

const out = [];
for (const step of steps) {
    try {
        const result = await run(step);
        if (step.save) saved[step.save] = result?.structuredContent?.[step.save];
        out.push({ ok: true, result });
    } catch (e) {
        out.push({ ok: false, error: { name: e.name, message: String(e.message),
                                       code: e.code ?? null, last: e.last ?? null } });
        if (step.op === 'connect') break;
    }
}

// exit only once the answer is out (a pipe takes 64 KiB at a time)
await new Promise((done) => process.stdout.write(JSON.stringify(out) + '\n', done));
try { await client.close(); } catch (e) { /* already closed */ }
process.exit(0);
