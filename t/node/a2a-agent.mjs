// t/node/a2a-agent.mjs -- a third-party A2A agent for t/285-a2a-member.t,
// built on the real @a2a-js/sdk server (DefaultRequestHandler, the Express
// JSON-RPC transport and agent-card handler; the version pinned in
// package-lock.json), so ioa-agent --a2a is tested against an
// implementation it did not write.
//
//   node t/node/a2a-agent.mjs PORT [--v03] [--no-stream] [--bad-card]
//                                  [--name NAME]
//
//   (default)    A2A 1.0 and, through the SDK's compat layer, 0.3: the card
//                lists a JSONRPC interface for each version
//   --v03        0.3 only: the card is a 0.3 card (url, preferredTransport,
//                protocolVersion "0.3.0"), and the SDK's one interface says
//                "0.3", so a 1.0 request is refused (VersionNotSupported)
//   --no-stream  capabilities.streaming false: message/stream is refused
//   --bad-card   the card has no name and no interface
//
// What a task does depends on its text, as the hub hands it over:
//   "hang"       working, then waits until cancelled
//   "fail"       working, then failed with a reason
//   "question"   input-required, asking which ocean
//   anything     working ("reading the task"), an artifact with the text
//                upper-cased, working ("checking the result"), completed
//                with a closing message
// Every execute and cancel is printed on stdout as one JSON line
// ({"event":"execute"|"cancel","taskId",...}), with the A2A-Version header
// the request came with, for the test to read.

import express from 'express';
import { TaskState, Role } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore }
    from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler }
    from '@a2a-js/sdk/server/express';

const args = process.argv.slice(2);
const port = Number(args[0]);
const flag = (f) => args.includes(f);
const nameAt = args.indexOf('--name');
const name = nameAt >= 0 ? args[nameAt + 1] : 'Shouter';
const v03only = flag('--v03');
const base = `http://127.0.0.1:${port}`;

function record(event) {
    process.stdout.write(JSON.stringify(event) + '\n');
}

const interfaces = v03only
    ? [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', tenant: '',
         protocolVersion: '0.3' }]
    : [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', tenant: '',
         protocolVersion: '1.0' },
       { url: `${base}/rpc`, protocolBinding: 'JSONRPC', tenant: '',
         protocolVersion: '0.3' }];

const card = {
    name,
    description: 'shouts words and texts back in capital letters, an A2A agent',
    supportedInterfaces: interfaces,
    version: '1.0.0',
    capabilities: { streaming: !flag('--no-stream'), pushNotifications: false,
                    extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'shout', name: 'Shout',
               description: 'upper-cases a text',
               tags: ['shouting', 'uppercase'], examples: [],
               inputModes: [], outputModes: [], securityRequirements: [] },
             { id: 'echo', name: 'Echo', description: 'says it again',
               tags: ['uppercase', 'echo'], examples: [], inputModes: [],
               outputModes: [], securityRequirements: [] }],
    signatures: [],
};

const textPart = (s) => ({ content: { $case: 'text', value: s },
                           mediaType: 'text/plain', filename: '',
                           metadata: undefined });

let seq = 0;

function agentMessage(ctx, s) {
    return { messageId: `m-${++seq}`, contextId: ctx.contextId,
             taskId: ctx.taskId, role: Role.ROLE_AGENT, parts: [textPart(s)],
             metadata: undefined, extensions: [], referenceTaskIds: [] };
}

function status(ctx, state, s) {
    return AgentEvent.statusUpdate({
        taskId: ctx.taskId, contextId: ctx.contextId,
        status: { state, message: s === undefined ? undefined
                                                  : agentMessage(ctx, s),
                  timestamp: new Date().toISOString() },
        metadata: undefined });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const waiting = new Map();      // taskId -> resolve(), for "hang"

class ShoutExecutor {
    async execute(rc, bus) {
        const ctx = { taskId: rc.taskId, contextId: rc.contextId };
        const text = rc.userMessage.parts
            .filter((p) => p.content?.$case === 'text')
            .map((p) => p.content.value).join('\n');
        record({ event: 'execute', taskId: ctx.taskId,
                 version: rc.context.requestedVersion ?? null, text });

        bus.publish(AgentEvent.task({
            id: ctx.taskId, contextId: ctx.contextId,
            status: { state: TaskState.TASK_STATE_SUBMITTED,
                      timestamp: new Date().toISOString() },
            artifacts: [], history: [rc.userMessage], metadata: undefined }));
        bus.publish(status(ctx, TaskState.TASK_STATE_WORKING,
                           'reading the task'));
        await sleep(150);

        if (/hang/.test(text)) {
            await new Promise((resolve) => waiting.set(ctx.taskId, resolve));
            return;             // cancelTask published the end
        }

        if (/fail/.test(text)) {
            bus.publish(status(ctx, TaskState.TASK_STATE_FAILED,
                               'the shouting machine is broken'));
            bus.finished();
            return;
        }

        if (/question/.test(text)) {
            bus.publish(status(ctx, TaskState.TASK_STATE_INPUT_REQUIRED,
                               'Which ocean do you mean?'));
            bus.finished();
            return;
        }

        const body = text.replace(/^#.*\n## Task Description\n/, '').trim();
        bus.publish(AgentEvent.artifactUpdate({
            taskId: ctx.taskId, contextId: ctx.contextId,
            artifact: { artifactId: 'shout', name: 'shouted',
                        description: '', parts: [textPart(body.toUpperCase())],
                        metadata: undefined, extensions: [] },
            append: false, lastChunk: true, metadata: undefined }));
        bus.publish(status(ctx, TaskState.TASK_STATE_WORKING,
                           'checking the result'));
        await sleep(150);
        bus.publish(status(ctx, TaskState.TASK_STATE_COMPLETED,
                           'shouted as asked'));
        bus.finished();
    }

    async cancelTask(taskId, bus) {
        record({ event: 'cancel', taskId });
        const ctx = { taskId, contextId: '' };
        bus.publish(status(ctx, TaskState.TASK_STATE_CANCELED,
                           'cancelled on request'));
        bus.finished();
        const resolve = waiting.get(taskId);
        waiting.delete(taskId);
        if (resolve) {
            resolve();
        }
    }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(),
                                          new ShoutExecutor());
const app = express();

if (flag('--bad-card')) {
    app.get('/.well-known/agent-card.json', (req, res) => {
        res.json({ description: 'a card without a name or an interface' });
    });
} else if (v03only) {
    // the card as a 0.3 server writes it, not the SDK's translation (which
    // also embeds supportedInterfaces): url, preferredTransport and a
    // three-part protocolVersion, skills with their tags
    app.get('/.well-known/agent-card.json', (req, res) => {
        res.json({
            name, description: card.description, version: card.version,
            url: `${base}/rpc`, preferredTransport: 'JSONRPC',
            protocolVersion: '0.3.0',
            capabilities: { streaming: card.capabilities.streaming },
            defaultInputModes: card.defaultInputModes,
            defaultOutputModes: card.defaultOutputModes,
            skills: card.skills.map(({ id, name: n, description, tags }) =>
                ({ id, name: n, description, tags })),
        });
    });
} else {
    app.use('/.well-known/agent-card.json',
            agentCardHandler({ agentCardProvider: handler,
                               legacyCompat: { enabled: true } }));
}

app.use('/rpc', jsonRpcHandler({ requestHandler: handler,
                                 userBuilder: UserBuilder.noAuthentication,
                                 legacyCompat: { enabled: true } }));

const server = app.listen(port, '127.0.0.1', () => {
    record({ event: 'listening', port });
});

process.on('SIGTERM', () => {
    server.closeAllConnections?.();
    server.close(() => process.exit(0));
});
