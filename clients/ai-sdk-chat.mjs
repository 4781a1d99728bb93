#!/usr/bin/env node
// Drives the real AI SDK chat client (`AbstractChat` + `DefaultChatTransport`,
// what `useChat` runs) of ai@6 or ai@7 through a scripted conversation against
// Switchboard, and prints what it ended with as JSON.
//
//   SWITCHBOARD_TOKEN=<jwt> node ai-sdk-chat.mjs <api url> '<script json>'
//
// script: {"ai": 6|7, "chatId", "body": {...}, "headers": {...}, "messages":
// [...], "autoTools": {...}, "steps": [step, ...]}:
// `ai` picks the package (the aliases ai6 and ai7 of clients/package.json;
// default 6), `headers` are sent with every request besides the token (an
// ai@7 app sends `X-AI-SDK-Version: 7`), `messages` is the history the chat
// starts from (another run's output, say), `autoTools` maps client tool names
// to the output `onToolCall` gives them at once (with `sendAutomaticallyWhen:
// lastAssistantMessageIsCompleteWithToolCalls`, as the AI SDK documents for
// automatically executed client tools), and a step is
//   {"send": "text"}                       sendMessage({text})
//   {"approve": true|false, "reason": ".."} answer every approval request of the
//                                          last message, then resubmit
//   {"toolOutputs": {"<tool name>": out}}  addToolOutput for the last message's
//                                          calls of those tools, then resubmit
//   {"regenerate": true | "<message id>"}  regenerate() (the last answer) or
//                                          regenerate({messageId})
//   {"resume": true}                       resumeStream() (GET <api>/<id>/stream)
// Each step's requests are awaited before the next one starts; the script
// stops at the first step that leaves the chat in the "error" status.
//
// Output: {"ai", "status", "error", "messages", "toolCalls", "exchanges":
// [{method, url, status, contentType, streamHeader, request, body}]}, where
// `request` is the body a POST sent and `toolCalls` the names `onToolCall`
// saw. Exit 0 when the chat never failed, 1 otherwise (the reason on stderr).
// The chat's own parser and reducer apply every rule of the protocol: a chunk
// they refuse fails the chat.
const [api, scriptText] = process.argv.slice(2);
if (!api || !scriptText) {
  console.error('usage: SWITCHBOARD_TOKEN=... node ai-sdk-chat.mjs <api url> <script json>');
  process.exit(2);
}
const script = JSON.parse(scriptText);
const version = script.ai ?? 6;
if (version !== 6 && version !== 7) {
  console.error(`unknown ai version ${version}: 6 or 7`);
  process.exit(2);
}
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } = await import(`ai${version}`);

// Every response, with its raw body, for the test to check the framing.
const exchanges = [];
const bodies = [];
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  const entry = {
    method: init?.method ?? 'GET',
    url: String(url),
    status: response.status,
    contentType: response.headers.get('content-type'),
    streamHeader: response.headers.get('x-vercel-ai-ui-message-stream'),
    request: typeof init?.body === 'string' ? JSON.parse(init.body) : null,
    body: null,
  };
  exchanges.push(entry);
  if (!response.body) return response;
  const [forChat, forRecord] = response.body.tee();
  bodies.push(new Response(forRecord).text().then((text) => { entry.body = text; }));
  return new Response(forChat, { status: response.status, statusText: response.statusText, headers: response.headers });
}

// The chat keeps its messages in a state object (React's useChat keeps them
// in React state); this one keeps them in memory, starting from `messages`.
class MemoryState {
  status = 'ready';
  error = undefined;
  constructor(messages) {
    this.messages = messages;
  }

  pushMessage = (m) => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = this.messages.map((x, j) => (j === i ? m : x)); };
  snapshot = (value) => structuredClone(value);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryState(init.messages ?? []) });
  }
}

const toolCalls = [];
const autoTools = script.autoTools ?? {};
const chat = new Chat({
  id: script.chatId,
  messages: script.messages ?? [],
  transport: new DefaultChatTransport({
    api,
    headers: { ...(script.headers ?? {}), Authorization: `Bearer ${process.env.SWITCHBOARD_TOKEN ?? ''}` },
    body: script.body ?? {},
    fetch: recordingFetch,
  }),
  // A client tool the app runs at once: the UI declares it, nothing else.
  onToolCall: ({ toolCall }) => {
    toolCalls.push(toolCall.toolName);
    if (toolCall.toolName in autoTools) {
      // Not awaited, as the AI SDK's docs say (it would deadlock the chat).
      chat.addToolOutput({
        tool: toolCall.toolName,
        toolCallId: toolCall.toolCallId,
        output: autoTools[toolCall.toolName],
      });
    }
  },
  sendAutomaticallyWhen: script.autoTools ? lastAssistantMessageIsCompleteWithToolCalls : undefined,
  onError: () => {},
});

const lastAssistant = () => [...chat.messages].reverse().find((m) => m.role === 'assistant');
const toolParts = (message) => (message?.parts ?? []).filter((p) => p.type.startsWith('tool-') || p.type === 'dynamic-tool');

for (const step of script.steps ?? []) {
  if (step.send !== undefined) {
    await chat.sendMessage({ text: step.send });
  } else if (step.approve !== undefined) {
    for (const part of toolParts(lastAssistant()).filter((p) => p.state === 'approval-requested')) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: step.approve, reason: step.reason });
    }
    await chat.sendMessage();
  } else if (step.toolOutputs !== undefined) {
    for (const part of toolParts(lastAssistant()).filter((p) => p.state === 'input-available')) {
      const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
      if (name in step.toolOutputs) {
        await chat.addToolOutput({ tool: name, toolCallId: part.toolCallId, output: step.toolOutputs[name] });
      }
    }
    await chat.sendMessage();
  } else if (step.regenerate !== undefined) {
    await chat.regenerate(step.regenerate === true ? {} : { messageId: step.regenerate });
  } else if (step.resume) {
    await chat.resumeStream();
  }
  if (chat.status === 'error') break;
}
await Promise.all(bodies);

const error = chat.error ? `${chat.error.name}: ${chat.error.message}` : null;
const output = { ai: version, status: chat.status, error, messages: chat.messages, toolCalls, exchanges };
process.stdout.write(JSON.stringify(output, null, 2) + '\n');
if (error) console.error(`chat failed: ${error}`);
process.exit(chat.status === 'error' ? 1 : 0);
