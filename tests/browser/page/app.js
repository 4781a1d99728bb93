// The browser test's chat page: a frontend on its own origin that talks to
// the gateway with fetch through the reference client (client.js). A chat
// keeps its session id, last seq and answer so far in sessionStorage, so a
// reloaded tab resumes its stream with Last-Event-ID; a stream cut by a
// replica's death is rejoined by the client on its own. Approvals pause
// the turn (`approval: "pause"`) and are answered from the page.
//
// Query: ?gateway=<url>&token=<credential>&model=<alias>

import { AnswerText, SwitchboardClient } from "/client.js";

const params = new URLSearchParams(location.search);
const gateway = params.get("gateway");
const token = params.get("token");
const model = params.get("model") ?? "mock";
const client = new SwitchboardClient({ baseUrl: gateway, credential: token });
const STATE_KEY = "chat-state";

const $ = (id) => document.getElementById(id);

/** What survives a reload. */
let state = JSON.parse(sessionStorage.getItem(STATE_KEY) ?? "null") ?? {
  sessionId: null,
  cursor: 0,
  phase: "idle",
  answer: null,
  reconnects: 0,
  restarts: 0,
  pending: [],
};
let answer = AnswerText.from(state.answer);

function save() {
  state.answer = answer.toJSON();
  sessionStorage.setItem(STATE_KEY, JSON.stringify(state));
}

function render() {
  $("turn-state").textContent = state.phase;
  $("turn-state").dataset.state = state.phase;
  $("answer").textContent = answer.text;
  $("session-id").textContent = state.sessionId ?? "";
  $("cursor").textContent = String(state.cursor);
  $("reconnects").textContent = String(state.reconnects);
  $("restarts").textContent = String(state.restarts);
  $("approvals").replaceChildren(
    ...state.pending.map((relay) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "approve";
      button.dataset.toolCallId = relay.tool_call_id;
      button.textContent = `Approve ${relay.tool}`;
      button.addEventListener("click", () => approve(relay));
      return button;
    }),
  );
}

function log(text) {
  $("log").textContent += `${text}\n`;
}

function onFrame(event) {
  state.cursor = event.seq;
  answer.apply(event);
  switch (event.type) {
    case "turn_started":
    case "resumed":
      state.phase = "streaming";
      state.pending = [];
      break;
    case "step_restarted":
      state.restarts += 1;
      break;
    case "paused":
      state.phase = "paused";
      state.pending = event.pending_relays;
      break;
    case "turn_ended":
      state.phase = event.reason === "final" ? "done" : event.reason;
      break;
    default:
  }
  save();
  render();
}

function onStatus(status) {
  if (status.state === "reconnecting") {
    state.reconnects += 1;
    log(`reconnecting (${status.attempt}): ${status.error?.message ?? "the stream ended"}`);
    save();
    render();
  }
}

async function follow(start) {
  try {
    await client.follow(state.sessionId, { after: state.cursor, start, onFrame, onStatus });
  } catch (error) {
    state.phase = "failed";
    log(`failed: ${error.code ?? ""} ${error.message}`);
    save();
    render();
  }
}

async function send(content) {
  if (!state.sessionId) {
    const session = await client.createSession({ model, approval: "pause" });
    state.sessionId = session.id;
  }
  answer = new AnswerText();
  state.phase = "sending";
  save();
  render();
  await follow(() => client.sendMessage(state.sessionId, content));
}

async function approve(relay) {
  state.pending = [];
  state.phase = "sending";
  save();
  render();
  const decisions = [{ tool_call_id: relay.tool_call_id, approved: true }];
  await follow(() => client.answerPause(state.sessionId, { decisions }));
}

/** A cross-origin call whose answer headers the page reads (CORS's exposed headers). */
async function checkApi() {
  const result = $("cors-result");
  try {
    const response = await fetch(`${gateway}/v1/sessions?limit=1`, { headers: { Authorization: `Bearer ${token}` } });
    const headers = {};
    for (const name of ["x-request-id", "ratelimit", "ratelimit-policy", "server-timing"]) {
      headers[name] = response.headers.get(name);
    }
    result.textContent = JSON.stringify({ status: response.status, headers });
    result.dataset.outcome = "answered";
  } catch (error) {
    result.textContent = JSON.stringify({ blocked: String(error) });
    result.dataset.outcome = "blocked";
  }
}

$("check").addEventListener("click", checkApi);
$("chat").addEventListener("submit", (event) => {
  event.preventDefault();
  const content = $("message").value;
  $("message").value = "";
  send(content).catch((error) => log(`send failed: ${error.message}`));
});

render();
// A reload in the middle of an answer: pick the stream up where it was.
if (state.sessionId && (state.phase === "streaming" || state.phase === "sending")) {
  $("resumed-from").textContent = String(state.cursor);
  follow(null);
}
