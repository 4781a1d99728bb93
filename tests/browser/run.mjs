// The browser half of the real-browser test (tests/browser/main.rs starts
// the replicas, nginx, the scripted model and the page's server, then runs
// this): one headless Debian chromium, driven by playwright-core, through
// every scenario in turn. Assertions read the page's DOM; the expected
// answers come from the Rust side (the scripted model's rule).
//
// Talks to the Rust test over stdio, one JSON object per line:
//   out: {"ask": {"op": "owner" | "kill-owner" | "restart", ...}}  -> in: {"replica": "b"}
//   out: {"ask": {"op": "cors-refused"}}  -> in: {"preflight": <count over the replicas>}
//   out: {"done": {<scenario>: {...facts}}}   or   {"failed": "...", "artifacts": [...]}
// On a failure the page is saved as a screenshot and its HTML under
// spec.artifacts.
//
// argv[2]: the spec (JSON): chromium, artifacts, gateway, page, refusedPage,
// token, adminToken, model, timeoutMs and one entry per scenario.

import { mkdirSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";
import { CHROMIUM_ARGS } from "./chromium.mjs";

const spec = JSON.parse(process.argv[2]);
const T = spec.timeoutMs;
mkdirSync(spec.artifacts, { recursive: true });

const send = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);
const replies = [];
createInterface({ input: process.stdin }).on("line", (line) => replies.shift()?.(JSON.parse(line)));
/** A question to the Rust side (which replica owns a session; kill it; restart one). */
const ask = (question) =>
  new Promise((resolve) => {
    replies.push(resolve);
    send({ ask: question });
  });

function expectEqual(actual, expected, what) {
  if (actual !== expected) throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

function expect(condition, what) {
  if (!condition) throw new Error(what);
}

/** What the page printed to its console, and its uncaught errors, for failure reports. */
const pageLogs = [];
function watchPage(page, name) {
  page.on("console", (m) => pageLogs.push(`[${name}] ${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => pageLogs.push(`[${name}] pageerror: ${e.message}`));
}

const results = {};
const artifacts = [];

/** Runs a scenario; on failure saves the page (screenshot and HTML) and rethrows. */
async function scenario(name, page, run) {
  const started = Date.now();
  try {
    results[name] = { ...(await run()), ms: Date.now() - started };
  } catch (error) {
    for (const p of Array.isArray(page) ? page : [page]) {
      const base = `${spec.artifacts}/${name}-${artifacts.length}`;
      await p.screenshot({ path: `${base}.png`, fullPage: true }).catch(() => {});
      writeFileSync(`${base}.html`, await p.content().catch(() => ""));
      artifacts.push(`${base}.png`, `${base}.html`);
    }
    throw new Error(`${name}: ${error.message}`);
  }
}

// ---- the chat page (another origin) ----

async function openChat(context, origin, name) {
  const page = await context.newPage();
  watchPage(page, name);
  const query = new URLSearchParams({ gateway: spec.gateway, token: spec.token, model: spec.model });
  await page.goto(`${origin}/?${query}`);
  return page;
}

const chatDom = (page) =>
  page.evaluate(() => {
    const text = (id) => document.getElementById(id).textContent;
    return {
      state: document.getElementById("turn-state").dataset.state,
      answer: text("answer"),
      session: text("session-id"),
      cursor: Number(text("cursor")),
      reconnects: Number(text("reconnects")),
      restarts: Number(text("restarts")),
      resumedFrom: text("resumed-from"),
      log: text("log"),
    };
  });

const waitState = (page, states) =>
  page.waitForFunction((s) => s.includes(document.getElementById("turn-state").dataset.state), states, { timeout: T });

/** Until the page shows at least `n` words of the answer while the turn still streams. */
const waitStreaming = (page, n) =>
  page.waitForFunction(
    (n) => {
      const words = document.getElementById("answer").textContent.trim().split(/\s+/).filter(Boolean).length;
      return document.getElementById("turn-state").dataset.state === "streaming" && words >= n;
    },
    n,
    { timeout: T },
  );

async function sendChat(page, message) {
  await page.fill("#message", message);
  await page.click("#send");
}

// ---- a client of the console's sessions: node's own fetch, through nginx ----

async function api(method, path, body, token = spec.token) {
  const response = await fetch(spec.gateway + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response;
}

/** Creates a session and starts a turn, reading its stream in the background (ignored). */
async function startTurn(options, message) {
  const session = await (await api("POST", "/v1/sessions", { model: spec.model, ...options })).json();
  const stream = await api("POST", `/v1/sessions/${session.id}/messages`, { content: message });
  stream
    .text()
    .catch(() => {})
    .then(() => {});
  return session.id;
}

const consoleDom = (page) =>
  page.evaluate(() => {
    const text = (id) => document.getElementById(id).textContent;
    const rows = [...document.querySelectorAll("#events tbody tr")];
    return {
      status: text("fact-status"),
      replica: document.getElementById("fact-replica").dataset.replica,
      answer: text("answer"),
      scope: text("scope"),
      listed: [...document.querySelectorAll("#session-list button")].map((b) => b.dataset.sessionId),
      rows: rows.length,
      liveReplicas: rows.filter((r) => !r.classList.contains("replayed")).map((r) => r.dataset.replica),
      types: rows.map((r) => r.classList[0]),
      turns: rows.map((r) => r.children[2].textContent),
      steps: rows.map((r) => r.children[3].textContent),
      message: text("message"),
    };
  });

const waitConsole = (page, predicate, arg) => page.waitForFunction(predicate, arg, { timeout: T });

/** Distinct values in order of first appearance, blanks left out. */
const distinct = (values) => values.filter((v, i) => v && values.indexOf(v) === i);

async function main() {
  const browser = await chromium.launch({
    executablePath: spec.chromium,
    headless: true,
    args: CHROMIUM_ARGS,
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    await run(context);
  } finally {
    await browser.close();
  }
}

async function run(context) {
  // CORS: an allowed origin reads the answer and its exposed headers; the
  // same page from another origin sees its fetch fail.
  const allowed = await openChat(context, spec.page, "allowed");
  const refused = await openChat(context, spec.refusedPage, "refused");
  await scenario("cors", [allowed, refused], async () => {
    const check = async (page) => {
      await page.click("#check");
      await page.waitForFunction(() => document.getElementById("cors-result").dataset.outcome !== "", null, {
        timeout: T,
      });
      return JSON.parse(await page.textContent("#cors-result"));
    };
    const ok = await check(allowed);
    expectEqual(ok.status, 200, "the allowed origin's status");
    for (const name of ["x-request-id", "ratelimit", "ratelimit-policy", "server-timing"]) {
      expect(ok.headers[name], `the page could not read ${name}: ${JSON.stringify(ok)}`);
    }
    const blocked = await check(refused);
    expect(blocked.blocked?.includes("Failed to fetch"), `the refused origin was not blocked: ${JSON.stringify(blocked)}`);
    const counted = await ask({ op: "cors-refused" });
    return { allowedHeaders: ok.headers, blocked: blocked.blocked, refusedPreflights: counted.preflight };
  });
  await refused.close();

  // A chat that streams: part of the answer is on the page while the turn runs.
  await scenario("chat", allowed, async () => {
    await sendChat(allowed, spec.chat.message);
    await waitStreaming(allowed, 2);
    const partial = await chatDom(allowed);
    await waitState(allowed, ["done"]);
    const done = await chatDom(allowed);
    expect(partial.answer.length < done.answer.length, "the answer arrived in one piece, not streamed");
    expectEqual(done.answer, spec.chat.answer, "the streamed answer");
    return { session: done.session, partialWords: partial.answer.split(/\s+/).length };
  });
  await allowed.close();

  // An approval answered from the page; the turn goes on where the
  // answer landed (another replica: nginx's rotation).
  const approval = await openChat(context, spec.page, "approval");
  await scenario("approval", approval, async () => {
    await sendChat(approval, spec.approval.message);
    await waitState(approval, ["paused"]);
    await approval.waitForSelector("#approvals button.approve", { timeout: T });
    const session = (await chatDom(approval)).session;
    const paused = await ask({ op: "owner", session });
    await approval.click("#approvals button.approve");
    await waitState(approval, ["done"]);
    const done = await chatDom(approval);
    expectEqual(done.answer, spec.approval.answer, "the answer after the approval");
    const resumed = await ask({ op: "owner", session });
    return { session, pausedOn: paused.replica, continuedOn: resumed.replica };
  });
  await approval.close();

  // The replica streaming to the page dies mid-answer: the page rejoins on
  // its own (Last-Event-ID) and ends with the model's answer, once.
  const kill = await openChat(context, spec.page, "kill");
  await scenario("kill", kill, async () => {
    await sendChat(kill, spec.kill.message);
    await waitStreaming(kill, spec.kill.killAfterWords);
    const session = (await chatDom(kill)).session;
    const killed = await ask({ op: "kill-owner", session });
    const killedAt = Date.now();
    // The takeover's first event on the page: the cut step, restarted.
    await kill.waitForFunction(() => Number(document.getElementById("restarts").textContent) >= 1, null, {
      timeout: T,
    });
    const killToTakeoverMs = Date.now() - killedAt;
    await waitState(kill, ["done"]);
    const done = await chatDom(kill);
    expectEqual(done.answer, spec.kill.answer, "the answer after the replica's death");
    expect(done.reconnects >= 1, `the page never reconnected: ${done.log}`);
    expect(done.restarts >= 1, "no step_restarted reached the page");
    await ask({ op: "restart", replica: killed.replica });
    return {
      session,
      killed: killed.replica,
      reconnects: done.reconnects,
      restarts: done.restarts,
      killToTakeoverMs,
    };
  });
  await kill.close();

  // A tab reloaded mid-answer resumes its stream from the seq it kept.
  const reload = await openChat(context, spec.page, "reload");
  await scenario("reload", reload, async () => {
    await sendChat(reload, spec.reload.message);
    await waitStreaming(reload, spec.reload.reloadAfterWords);
    await reload.reload();
    await waitState(reload, ["done"]);
    const done = await chatDom(reload);
    expectEqual(done.answer, spec.reload.answer, "the answer after the reload");
    expect(Number(done.resumedFrom) > 0, `the page did not resume from its cursor: ${JSON.stringify(done)}`);
    return { session: done.session, resumedFrom: Number(done.resumedFrom) };
  });
  await reload.close();

  // The console (the gateway's own origin): the tenant's sessions, one
  // watched live through a relay decided here and a takeover.
  const consolePage = await context.newPage();
  watchPage(consolePage, "console");
  await scenario("console", consolePage, async () => {
    const id = await startTurn({ approval: "relay" }, spec.console.message);
    await consolePage.goto(`${spec.gateway}/console`);
    await consolePage.fill("#credential", spec.adminToken);
    await consolePage.click("#connect-button");
    const item = `#session-list button[data-session-id="${id}"]`;
    await consolePage.waitForSelector(item, { timeout: T });
    await consolePage.click(item);
    await consolePage.waitForSelector(".relay button[data-action=approve]", { timeout: T });
    await consolePage.click(".relay button[data-action=approve]");
    await waitConsole(
      consolePage,
      (n) => document.getElementById("answer").textContent.trim().split(/\s+/).filter(Boolean).length >= n,
      spec.console.killAfterWords,
    );
    const before = await consoleDom(consolePage);
    const killed = await ask({ op: "kill-owner", session: id });
    expectEqual(before.replica, killed.replica, "the replica the console showed before the kill");
    await consolePage.waitForSelector("#events tr.step_restarted", { timeout: T });
    await waitConsole(consolePage, () => document.getElementById("fact-status").textContent === "completed");
    const after = await consoleDom(consolePage);
    expectEqual(after.answer, spec.console.answer, "the console's answer");
    expect(after.replica && after.replica !== killed.replica, `the replica shown did not change: ${after.replica}`);
    const replicas = distinct(after.liveReplicas);
    expect(replicas.includes(killed.replica) && replicas.at(-1) === after.replica, `live rows: ${replicas}`);
    expect(after.types.includes("relay_decided") && after.turns.every((t) => t === "1"), "turn 1, relay decided");
    await consolePage.screenshot({ path: `${spec.artifacts}/console.png` });
    artifacts.push(`${spec.artifacts}/console.png`);
    await ask({ op: "restart", replica: killed.replica });
    return {
      session: id,
      scope: after.scope,
      listed: after.listed,
      killed: killed.replica,
      replicas,
      steps: distinct(after.steps),
    };
  });

  // The console cancels a running turn…
  await scenario("console-cancel", consolePage, async () => {
    const id = await startTurn({ approval: "relay" }, spec.cancel.message);
    await consolePage.click("#refresh");
    const item = `#session-list button[data-session-id="${id}"]`;
    await consolePage.waitForSelector(item, { timeout: T });
    await consolePage.click(item);
    await consolePage.waitForSelector("#events tr.text_delta", { timeout: T });
    await consolePage.click("#cancel");
    await waitConsole(consolePage, () => document.getElementById("fact-status").textContent === "cancelled");
    await consolePage.waitForSelector("#events tr.turn_ended", { timeout: T });
    const row = await consolePage.textContent("#events tr.turn_ended td.detail");
    expectEqual(row, "cancelled", "the turn's end");
    return { session: id };
  });

  // …and answers a frontend tool call of a paused turn.
  await scenario("console-tool", consolePage, async () => {
    const tool = { name: spec.frontendTool.tool, description: "Ask the user for a color", parameters: { type: "object" } };
    const id = await startTurn({ approval: "pause", frontend_tools: [tool] }, spec.frontendTool.message);
    await consolePage.click("#refresh");
    const item = `#session-list button[data-session-id="${id}"]`;
    await consolePage.waitForSelector(item, { timeout: T });
    await consolePage.click(item);
    const input = `#pause:not([hidden]) .pause-item[data-kind=call] textarea`;
    await consolePage.waitForSelector(input, { timeout: T });
    await consolePage.fill(input, spec.frontendTool.output);
    await consolePage.click("#resume");
    await waitConsole(consolePage, () => document.getElementById("fact-status").textContent === "completed");
    const after = await consoleDom(consolePage);
    expectEqual(after.answer, spec.frontendTool.answer, "the answer after the tool's result");
    const result = await consolePage.textContent("#events tr.tool_result td.detail");
    expect(result.includes(spec.frontendTool.output), `the tool result row: ${result}`);
    return { session: id };
  });
}

main()
  .then(() => {
    send({ done: results });
    process.exit(0);
  })
  .catch((error) => {
    send({ failed: String(error?.stack ?? error), artifacts, pageLogs: pageLogs.slice(-40), results });
    process.exit(1);
  });
