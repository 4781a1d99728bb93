// Makes docs/console.png: the console on the embedded defaults (the demo
// model and its lookup_order tool, which asks for permission), with one
// finished turn (replayed when the session was opened) and one watched live,
// waiting for a relay decision. Not a test; run it by
// hand after `scripts/ensure-browser.sh`:
//
//   cargo run --release &
//   node tests/browser/console-screenshot.mjs http://127.0.0.1:8080 \
//     "$(cargo run -q --release -- token --tenant dev --subject me)" docs/console.png

import { chromium } from "playwright-core";
import { CHROMIUM_ARGS } from "./chromium.mjs";

const [gateway, token, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: console-screenshot.mjs <gateway url> <token> <png path>");
  process.exit(2);
}

async function api(method, path, body) {
  const response = await fetch(gateway + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response;
}

const session = await (await api("POST", "/v1/sessions", { model: "demo" })).json();
await (await api("POST", `/v1/sessions/${session.id}/messages`, { content: "hello" })).text();

const browser = await chromium.launch({
  executablePath: process.env.SWITCHBOARD_CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: CHROMIUM_ARGS,
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  await page.goto(`${gateway}/console`);
  await page.fill("#credential", token);
  await page.click("#connect-button");
  const item = `#session-list button[data-session-id="${session.id}"]`;
  await page.waitForSelector(item);
  await page.click(item);
  await page.waitForSelector("#events tr.title_updated");
  // A turn watched live, waiting for a relay decision; its stream is left open.
  const waiting = await api("POST", `/v1/sessions/${session.id}/messages`, {
    content: 'use lookup_order with {"id":"42"}',
  });
  waiting.text().catch(() => {});
  await page.waitForSelector(".relay button[data-action=approve]");
  await page.waitForFunction(() => document.getElementById("fact-stream").dataset.state === "live");
  await page.screenshot({ path: out });
  console.log(`saved ${out} (session ${session.id})`);
} finally {
  await browser.close();
}
process.exit(0);
