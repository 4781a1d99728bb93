#!/usr/bin/env node
// Drives the real AG-UI client (`@ag-ui/client`'s `HttpAgent`) through a
// scripted thread against Switchboard, and prints every run's events (those
// that passed the client's own schema checks and `verifyEvents`) as JSON.
//
//   SWITCHBOARD_TOKEN=<jwt> node ag-ui-run.mjs <url> '<script json>'
//
// script: {"threadId", "tools": [...], "context": [...], "state": {...},
//          "forwardedProps": {...}, "messages": [...], "steps": [step, ...]}:
//          `messages` is the history the thread starts from (another run's
//          output, say), `state` the agent's initial state, and a step is
//   {"message": "text"}                    add a user message, run
//   {"toolResults": {"<tool name>": "content"}}
//                                          answer the pending frontend tool
//                                          calls (the last run's, or, in a
//                                          script's first step, the calls in
//                                          `messages` without a result) with
//                                          tool messages, run again
//   {"resume": {"approved": bool, "reason"?: ".."}}
//                                          answer every pending interrupt, run again
// Any step may also carry "tools" and "context" (that run's, instead of the
// script's) and "url" (this run and the next ones go there: another replica).
// The script stops at the first run that fails.
//
// Output: {"runs": [{"events", "outcome", "pendingToolCallIds", "interrupts",
// "runError", "state"}], "messages", "state", "warnings", "failure"}: a run's
// `state` is the agent's state after it. Exit 0 when every run finished
// with RUN_FINISHED, 1 otherwise (the reason on stderr).
import { HttpAgent } from '@ag-ui/client';

const [url, scriptText] = process.argv.slice(2);
if (!url || !scriptText) {
  console.error('usage: SWITCHBOARD_TOKEN=... node ag-ui-run.mjs <url> <script json>');
  process.exit(2);
}
const script = JSON.parse(scriptText);
// The client reports what it dropped or stripped on console.warn: keep them.
const warnings = [];
console.warn = (...parts) => warnings.push(parts.map(String).join(' '));

const agent = new HttpAgent({
  url,
  threadId: script.threadId,
  initialMessages: script.messages ?? [],
  initialState: script.state ?? {},
  headers: { Authorization: `Bearer ${process.env.SWITCHBOARD_TOKEN ?? ''}` },
});

const runs = [];
let failure = null;
let ids = 0;

async function run(step, params = {}) {
  const record = { events: [], outcome: null, pendingToolCallIds: [], interrupts: [], runError: null, state: null };
  runs.push(record);
  await agent.runAgent(
    {
      tools: step.tools ?? script.tools ?? [],
      context: step.context ?? script.context ?? [],
      forwardedProps: script.forwardedProps ?? {},
      ...params,
    },
    {
      onEvent: ({ event }) => { record.events.push(event); },
      onRunFinishedEvent: (finished) => {
        record.outcome = finished.outcome;
        record.pendingToolCallIds = finished.pendingToolCallIds ?? [];
        record.interrupts = finished.interrupts ?? [];
      },
      onRunErrorEvent: ({ event }) => { record.runError = event; },
    },
  );
  record.state = agent.state;
  return record;
}

/// The calls of the thread's messages that no tool message answers.
function unanswered() {
  const answered = new Set(agent.messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
  return agent.messages.flatMap((m) => m.toolCalls ?? []).map((c) => c.id).filter((id) => !answered.has(id));
}

try {
  for (const step of script.steps ?? []) {
    const last = runs[runs.length - 1];
    if (step.url !== undefined) agent.url = step.url;
    if (step.message !== undefined) {
      agent.addMessage({ id: `user-${++ids}`, role: 'user', content: step.message });
      await run(step);
    } else if (step.toolResults !== undefined) {
      const calls = agent.messages.flatMap((m) => m.toolCalls ?? []);
      for (const id of last ? last.pendingToolCallIds : unanswered()) {
        const name = calls.find((c) => c.id === id)?.function?.name;
        agent.addMessage({ id: `tool-${id}`, role: 'tool', toolCallId: id, content: String(step.toolResults[name] ?? '') });
      }
      await run(step);
    } else if (step.resume !== undefined) {
      const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: 'resolved', payload: step.resume }));
      await run(step, { resume });
    }
    const current = runs[runs.length - 1];
    if (current.runError || current.outcome === null) break;
  }
} catch (error) {
  failure = `${error.name ?? 'Error'}: ${error.message}`;
}

process.stdout.write(JSON.stringify({ runs, messages: agent.messages, state: agent.state, warnings, failure }, null, 2) + '\n');
const failed = failure ?? runs.map((r, i) => (r.runError ? `run ${i}: RUN_ERROR ${JSON.stringify(r.runError)}`
  : r.outcome === null ? `run ${i} ended without RUN_FINISHED` : null)).find(Boolean);
if (failed) console.error(`failed: ${failed}`);
process.exit(failed ? 1 : 0);
