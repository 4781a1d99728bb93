#!/usr/bin/env node
// Reads a stream Switchboard already has (GET /v1/sessions/{id}/events
// ?format=ag-ui|ai-sdk) through the real client's parser and reducer, and
// prints what the client ends with as JSON.
//
//   SWITCHBOARD_TOKEN=<jwt> node replay.mjs <events url> '<input json>'
//
// input: {"dialect": "ag-ui", "threadId", "messages": [...]}: `@ag-ui/client`'s
//        HttpAgent, holding `messages`, runs once on the stream (its fetch is
//        swapped for a GET of the url): its schema checks, `verifyEvents` and
//        `defaultApplyEvents` apply. Output {"events", "messages", "state",
//        "warnings", "failure"}. On a running session the stream is a join:
//        the session restated, then the rest of the turn.
//      | {"dialect": "ai-sdk", "ai": 6|7, "headers": {...}}: the `ai` package's
//        (ai@6 or ai@7: the aliases ai6 and ai7; default 6)
//        `parseJsonEventStream` with `uiMessageChunkSchema` and
//        `readUIMessageStream` (the reducer under `useChat`); `headers` go
//        with the GET besides the token (`X-AI-SDK-Version: 7`). Output
//        {"message", "failure"}.
// Exit 0 when the client accepted the whole stream, 1 otherwise.
import { HttpAgent } from '@ag-ui/client';

const [url, inputText] = process.argv.slice(2);
if (!url || !inputText) {
  console.error('usage: SWITCHBOARD_TOKEN=... node replay.mjs <events url> <input json>');
  process.exit(2);
}
const input = JSON.parse(inputText);
const authorization = `Bearer ${process.env.SWITCHBOARD_TOKEN ?? ''}`;
const warnings = [];
console.warn = (...parts) => warnings.push(parts.map(String).join(' '));

async function agUi() {
  const events = [];
  const agent = new HttpAgent({
    url,
    threadId: input.threadId,
    initialMessages: input.messages ?? [],
    headers: { Authorization: authorization },
    fetch: (target, init) => fetch(target, { method: 'GET', headers: init.headers, signal: init.signal }),
  });
  await agent.runAgent({}, { onEvent: ({ event }) => { events.push(event); } });
  return { events, messages: agent.messages, state: agent.state, warnings };
}

async function aiSdk() {
  const version = input.ai ?? 6;
  if (version !== 6 && version !== 7) throw new Error(`unknown ai version ${version}: 6 or 7`);
  const { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } = await import(`ai${version}`);
  const response = await fetch(url, { headers: { ...(input.headers ?? {}), Authorization: authorization } });
  const chunks = parseJsonEventStream({ stream: response.body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        if (!chunk.success) throw chunk.error;
        controller.enqueue(chunk.value);
      },
    }),
  );
  let message = null;
  for await (const snapshot of readUIMessageStream({ stream: chunks, terminateOnError: true })) message = snapshot;
  return { message };
}

let output = {};
let failure = null;
try {
  output = input.dialect === 'ag-ui' ? await agUi() : await aiSdk();
} catch (error) {
  failure = `${error.name ?? 'Error'}: ${error.message}`;
}
process.stdout.write(JSON.stringify({ ...output, failure }, null, 2) + '\n');
if (failure) console.error(`failed: ${failure}`);
process.exit(failure ? 1 : 0);
