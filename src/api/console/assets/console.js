// The session console: lists the caller's sessions (the tenant's, with
// the sessions:admin scope), opens one, and watches its events live with
// their seq, type, turn, step and replica; decides live relays, answers a
// paused turn (approvals and frontend tool calls), and cancels a turn.
// Public API only (client.js). Everything shown is set as text, never as
// markup.

import { AnswerText, ApiError, SwitchboardClient } from "/console/client.js";

/** The credential stays in this tab only (sessionStorage), until Forget. */
const CREDENTIAL_KEY = "switchboard.console.credential";
/** How often an open session's view is read again (owner, status, pending). */
const POLL_MS = 2000;
/** Rows kept in the events table; older ones are dropped from the page. */
const MAX_ROWS = 2000;
/** Events whose arrival changes what the session waits for. */
const REFRESHING = new Set(["relay_requested", "relay_decided", "paused", "resumed", "turn_started", "turn_ended"]);

const $ = (id) => document.getElementById(id);

let client = null;
let list = { all: false, cursor: null };
/** The open session; replaced (and its work aborted) when another opens. */
let watch = null;

/** An element with properties and text or element children (text is never parsed). */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined).map((c) => (c instanceof Node ? c : String(c))));
  return node;
}

function say(text, kind = "error") {
  $("message").textContent = text;
  $("message").className = kind;
}

function sayError(error) {
  if (error instanceof ApiError) {
    const id = error.requestId ? ` (request ${error.requestId})` : "";
    say(`${error.status} ${error.code}: ${error.message}${id}`);
  } else {
    say(String(error?.message ?? error));
  }
}

// ---- credential and the session list ----

$("connect").addEventListener("submit", (event) => {
  event.preventDefault();
  connect($("credential").value.trim());
});

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(CREDENTIAL_KEY);
  client = null;
  $("credential").value = "";
  closeSession();
  $("session-list").replaceChildren();
  $("scope").textContent = "";
  $("refresh").disabled = true;
  $("more").hidden = true;
  say("Forgotten.", "info");
});

$("refresh").addEventListener("click", () => loadSessions(true).catch(sayError));
$("more").addEventListener("click", () => loadSessions(false).catch(sayError));

async function connect(credential) {
  if (!credential) {
    say("Paste a token or an API key first.");
    return;
  }
  client = new SwitchboardClient({ credential });
  try {
    await loadSessions(true);
  } catch (error) {
    client = null;
    sayError(error);
    return;
  }
  sessionStorage.setItem(CREDENTIAL_KEY, credential);
  $("refresh").disabled = false;
  say("Connected.", "info");
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  if (wanted) openSession(wanted);
}

/** The first page (the tenant's when the credential may list it), or the next. */
async function loadSessions(reset) {
  let page;
  if (reset) {
    try {
      page = await client.listSessions({ all: true });
      list = { all: true, cursor: null };
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 403)) throw error;
      page = await client.listSessions();
      list = { all: false, cursor: null };
    }
    $("session-list").replaceChildren();
    $("scope").textContent = list.all ? "(the tenant's: sessions:admin)" : "(yours)";
  } else {
    page = await client.listSessions({ all: list.all, cursor: list.cursor });
  }
  list.cursor = page.next_cursor;
  $("more").hidden = !page.next_cursor;
  for (const session of page.sessions) {
    const button = el(
      "button",
      { type: "button", "data-session-id": session.id, title: session.id },
      el("span", { class: "title" }),
      el("span", { class: "meta" }),
    );
    describe(button, session);
    button.addEventListener("click", () => openSession(session.id));
    $("session-list").append(el("li", {}, button));
  }
  markCurrent();
}

/** A list entry's text: title (or id), status, model, last change. */
function describe(button, session) {
  const updated = new Date(session.updated_ms).toLocaleString();
  button.querySelector(".title").textContent = session.title || session.id;
  button.querySelector(".meta").textContent = `${session.status} · ${session.model} · ${updated}`;
}

function markCurrent() {
  for (const button of $("session-list").querySelectorAll("button")) {
    button.setAttribute("aria-current", String(watch?.id === button.dataset.sessionId));
  }
}

// ---- one session ----

function closeSession() {
  if (watch) {
    watch.closed = true;
    clearInterval(watch.poll);
    watch.followController?.abort();
  }
  watch = null;
  $("session").hidden = true;
}

async function openSession(id) {
  closeSession();
  const w = {
    id,
    closed: false,
    cursor: 0, // the last seq shown
    historyEnd: 0, // events up to here happened before the session was opened
    replica: null, // the replica live events are attributed to
    historyReplica: null, // the same, within the history (a step_restarted names one)
    turn: null,
    step: null,
    stepDone: false, // a main-agent `usage` closed the step; the next output opens the next
    answer: new AnswerText(),
    pendingKey: null,
    following: false,
    followController: null,
    poll: null,
  };
  watch = w;
  history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  markCurrent();
  $("session").hidden = false;
  $("session-heading").textContent = id;
  $("events").tBodies[0].replaceChildren();
  $("answer").textContent = "";
  $("relays").replaceChildren();
  $("pause").hidden = true;
  $("fact-stream").textContent = "";
  let view;
  try {
    view = await client.getSession(id);
  } catch (error) {
    sayError(error);
    return;
  }
  if (w.closed) return;
  w.historyEnd = view.last_seq;
  showView(w, view);
  w.poll = setInterval(() => poll(w), POLL_MS);
  follow(w);
}

/**
 * Follows the session's events from the last one shown; `start` opens the
 * first stream instead (the continuation of a paused turn). One follow at a
 * time: a new one with a start replaces the running one.
 */
function follow(w, start = null) {
  if (w.closed || (w.following && !start)) return;
  w.followController?.abort();
  const controller = new AbortController();
  w.followController = controller;
  w.following = true;
  const current = () => w.followController === controller && !w.closed;
  client
    .follow(w.id, {
      after: w.cursor,
      start: start && (() => start(controller.signal)),
      signal: controller.signal,
      onFrame: (event) => current() && onEvent(w, event),
      onStatus: (status) => current() && showStream(status),
    })
    .then(async (result) => {
      if (!current()) return;
      w.following = false;
      if (result.reason !== "aborted") await refresh(w);
    })
    .catch((error) => {
      if (!current()) return;
      w.following = false;
      $("fact-stream").textContent = "failed";
      sayError(error);
    });
}

function showStream(status) {
  const text = status.state === "reconnecting" ? `reconnecting (attempt ${status.attempt})` : status.state;
  $("fact-stream").textContent = text;
  $("fact-stream").dataset.state = status.state;
}

async function refresh(w) {
  try {
    const view = await client.getSession(w.id);
    if (!w.closed) showView(w, view);
  } catch (error) {
    if (!w.closed) sayError(error);
  }
}

/** Reads the view again; follows on when events were added meanwhile (a turn started elsewhere). */
async function poll(w) {
  let view;
  try {
    view = await client.getSession(w.id);
  } catch {
    return; // the next poll asks again
  }
  if (w.closed) return;
  showView(w, view);
  if (!w.following && view.last_seq > w.cursor) follow(w);
}

function showView(w, view) {
  $("session-heading").textContent = view.title || view.id;
  $("fact-id").textContent = view.id;
  $("fact-status").textContent = view.status;
  $("fact-model").textContent = view.model;
  $("fact-turn").textContent = String(view.turn);
  $("fact-seq").textContent = String(Math.max(view.last_seq, w.cursor));
  // A view read before the last event shown may name an owner the stream
  // has already seen replaced.
  if (view.replica && view.last_seq >= w.cursor) w.replica = view.replica;
  $("fact-replica").textContent = w.replica ?? "";
  $("fact-replica").dataset.replica = w.replica ?? "";
  const entry = $("session-list").querySelector(`button[data-session-id="${CSS.escape(view.id)}"]`);
  if (entry) describe(entry, view);
  showPending(w, view);
}

// ---- what the session waits for ----

function showPending(w, view) {
  const paused = view.status === "awaiting_client";
  const relays = view.pending_relays ?? [];
  const calls = view.pending_calls ?? [];
  const key = JSON.stringify([view.status, relays.map((r) => r.relay_id), calls.map((c) => c.tool_call_id)]);
  if (key === w.pendingKey) return; // keep what the user is typing
  w.pendingKey = key;
  $("relays").replaceChildren();
  $("pause-items").replaceChildren();
  $("pause").hidden = !paused || (relays.length === 0 && calls.length === 0);
  $("cancel").disabled = !["running", "awaiting_relay", "awaiting_client"].includes(view.status);
  if (paused) {
    relays.forEach((relay, i) => $("pause-items").append(pausedApproval(relay, i)));
    calls.forEach((call) => $("pause-items").append(pausedCall(call)));
    return;
  }
  for (const relay of relays) $("relays").append(liveRelay(w, relay));
}

function liveRelay(w, relay) {
  const approve = el("button", { type: "button", "data-action": "approve" }, "Approve");
  const deny = el("button", { type: "button", "data-action": "deny" }, "Deny");
  const box = el(
    "div",
    { class: "relay", "data-relay-id": relay.relay_id },
    el("strong", {}, relay.tool),
    " wants to run with ",
    el("code", {}, JSON.stringify(relay.params)),
    el("div", { class: "toolbar" }, approve, deny),
  );
  const decide = async (approved) => {
    approve.disabled = deny.disabled = true;
    try {
      await client.decideRelay(w.id, relay.relay_id, { approved });
      box.dataset.decided = approved ? "approved" : "denied";
      say(`Relay ${approved ? "approved" : "denied"}.`, "info");
    } catch (error) {
      sayError(error);
    }
  };
  approve.addEventListener("click", () => decide(true));
  deny.addEventListener("click", () => decide(false));
  return box;
}

function pausedApproval(relay, i) {
  const name = `decision-${i}`;
  const yes = el("input", { type: "radio", name, value: "approve", checked: true });
  const no = el("input", { type: "radio", name, value: "deny" });
  return el(
    "div",
    { class: "pause-item", "data-kind": "approval", "data-tool-call-id": relay.tool_call_id },
    el("strong", {}, relay.tool),
    " wants to run with ",
    el("code", {}, JSON.stringify(relay.params)),
    el("div", {}, el("label", {}, yes, " approve"), " ", el("label", {}, no, " deny")),
  );
}

function pausedCall(call) {
  return el(
    "div",
    { class: "pause-item", "data-kind": "call", "data-tool-call-id": call.tool_call_id },
    el("strong", {}, call.tool),
    " (your tool) called with ",
    el("code", {}, JSON.stringify(call.arguments)),
    el("textarea", { placeholder: "the tool's result", "aria-label": `result of ${call.tool}` }),
  );
}

$("pause").addEventListener("submit", (event) => {
  event.preventDefault();
  const w = watch;
  if (!w) return;
  const decisions = [];
  const results = [];
  for (const item of $("pause-items").children) {
    const id = item.dataset.toolCallId;
    if (item.dataset.kind === "approval") {
      decisions.push({ tool_call_id: id, approved: item.querySelector("input[value=approve]").checked });
    } else {
      results.push({ tool_call_id: id, output: item.querySelector("textarea").value });
    }
  }
  $("pause").hidden = true;
  w.pendingKey = null;
  follow(w, (signal) => client.answerPause(w.id, { results, decisions }, { signal }));
});

$("cancel").addEventListener("click", async () => {
  const w = watch;
  if (!w) return;
  try {
    await client.cancel(w.id);
    say("Cancel requested.", "info");
    // A paused turn's stream had ended: read its end.
    follow(w);
  } catch (error) {
    sayError(error);
  }
});

// ---- events ----

function onEvent(w, event) {
  if (event.seq <= w.cursor) return;
  w.cursor = event.seq;
  const replayed = event.seq <= w.historyEnd;
  const main = !event.agent_id || event.agent_id === "main";
  if (event.type === "step_restarted" && main) {
    if (replayed) w.historyReplica = event.replica;
    else w.replica = event.replica;
    $("fact-replica").textContent = w.replica ?? "";
    $("fact-replica").dataset.replica = w.replica ?? "";
  }
  if (event.type === "turn_started" || event.type === "resumed") w.turn = event.turn;
  if (event.type === "turn_started") {
    w.step = 1;
    w.stepDone = false;
  } else if (main && event.type === "step_restarted") {
    w.step = event.step;
    w.stepDone = false;
  } else if (main && w.stepDone && ["text_delta", "reasoning_delta", "tool_call_started"].includes(event.type)) {
    w.step += 1;
    w.stepDone = false;
  }
  const step = w.step;
  if (main && event.type === "usage") w.stepDone = true;

  w.answer.apply(event);
  $("answer").textContent = w.answer.text;
  $("fact-seq").textContent = String(event.seq);

  const replica = replayed ? (w.historyReplica ?? "") : (w.replica ?? "");
  const row = el(
    "tr",
    { class: `${event.type}${replayed ? " replayed" : ""}`, "data-seq": String(event.seq), "data-replica": replica },
    el("td", {}, event.seq),
    el("td", {}, event.type),
    el("td", {}, w.turn ?? ""),
    el("td", {}, step ?? ""),
    el("td", {}, event.agent_id ?? ""),
    el("td", {}, replica),
    el("td", { class: "detail" }, detail(event)),
  );
  row.lastChild.title = row.lastChild.textContent;
  const box = $("events-box");
  // Follow the newest event, unless the user scrolled up to read.
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
  const body = $("events").tBodies[0];
  body.append(row);
  while (body.rows.length > MAX_ROWS) body.deleteRow(0);
  if (atBottom) box.scrollTop = box.scrollHeight;
  if (!replayed && REFRESHING.has(event.type)) refresh(w);
}

/** One line about an event, as text. */
function detail(event) {
  const short = (value, n = 120) => {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    return text.length > n ? `${text.slice(0, n)}…` : text;
  };
  switch (event.type) {
    case "turn_started":
      return `model ${event.model}`;
    case "text_delta":
    case "reasoning_delta":
      return JSON.stringify(event.text);
    case "tool_call_started":
      return event.name;
    case "tool_call_args":
      return event.delta;
    case "tool_call":
      return `${event.name} ${short(event.arguments)}`;
    case "tool_result":
      return `${event.name}: ${event.status} ${short(event.output)}`;
    case "relay_requested":
      return `${event.tool} ${short(event.params)} (relay ${event.relay_id})`;
    case "relay_decided":
      return event.approved ? "approved" : "denied";
    case "paused":
      return `waits for ${event.pending_relays.length} approval(s), ${event.pending_calls.length} tool result(s)`;
    case "usage":
      return `in ${event.usage?.input_tokens ?? "?"}, out ${event.usage?.output_tokens ?? "?"}`;
    case "step_restarted":
      return `step ${event.step} restarted on ${event.replica}`;
    case "turn_ended":
      return `${event.reason}${event.title_pending ? " (title follows)" : ""}`;
    case "title_updated":
      return event.title;
    case "error":
      return `${event.code}: ${event.message}`;
    case "message_completed":
      return short(event.content ?? "");
    default:
      return short(Object.fromEntries(Object.entries(event).filter(([k]) => !COMMON.has(k))));
  }
}

const COMMON = new Set(["seq", "session_id", "type", "agent_id", "parent_id", "depth", "ts"]);

// ---- start ----

const saved = sessionStorage.getItem(CREDENTIAL_KEY);
if (saved) {
  $("credential").value = saved;
  connect(saved);
}
