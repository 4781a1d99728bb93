// Switchboard's browser client: the public API over fetch, and session
// event streams read with fetch (EventSource cannot send an Authorization
// header), parsed as SSE and rejoined with Last-Event-ID on their own.
//
// The session console (/console) runs on it, and so does the page of the
// real-browser test (tests/browser/); a frontend may copy it as it is: an
// ES module with no dependencies and no build step.
//
//   const client = new SwitchboardClient({ baseUrl: "https://gateway", credential: token });
//   const session = await client.createSession({ model: "demo" });
//   await client.follow(session.id, {
//     start: () => client.openStream("POST", `/v1/sessions/${session.id}/messages`, { body: { content: "hi" } }),
//     onFrame: (event) => console.log(event.seq, event.type),
//   });
//
// follow() resolves when the session pauses or its turn ends; a stream cut
// by a replica's death, a drain (`event: reconnect`) or a network error is
// rejoined on whichever replica the load balancer picks, from the last seq
// it delivered: every event once, in order.

/** An error answer of the API: `{"error": {"code", "message", "request_id"}}`. */
export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

/** Statuses worth asking again (another replica, a little later). */
const RETRYABLE = new Set([408, 425, 429, 500, 502, 503, 504]);
const BACKOFF_MS = [250, 500, 1000, 2000];
/** Failed reconnects in a row before follow() gives up. */
const MAX_ATTEMPTS = 40;

export class SwitchboardClient {
  /**
   * @param {{baseUrl?: string, credential: string}} options — a JWT or an
   * API key (both go as `Authorization: Bearer …`).
   */
  constructor({ baseUrl = "", credential }) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.credential = credential;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.credential}`, ...extra };
  }

  /** A JSON request; the parsed answer (null for 204), or an ApiError. */
  async request(method, path, body, { signal } = {}) {
    const init = { method, headers: this.headers(), signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.baseUrl + path, init);
    if (!response.ok) throw await apiError(response);
    if (response.status === 204) return null;
    return response.json();
  }

  listSessions({ all = false, cursor = null, limit = 20 } = {}) {
    const query = new URLSearchParams({ limit: String(limit) });
    if (all) query.set("all", "true");
    if (cursor) query.set("cursor", cursor);
    return this.request("GET", `/v1/sessions?${query}`);
  }

  getSession(id) {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  }

  createSession(body) {
    return this.request("POST", "/v1/sessions", body);
  }

  decideRelay(id, relayId, { approved, always = false, reason } = {}) {
    const path = `/v1/sessions/${encodeURIComponent(id)}/relays/${encodeURIComponent(relayId)}`;
    return this.request("POST", path, reason === undefined ? { approved, always } : { approved, always, reason });
  }

  cancel(id) {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(id)}/cancel`, {});
  }

  /** The opening of a turn's stream: `POST …/messages`; pass it as follow()'s `start`. */
  sendMessage(id, content, { signal } = {}) {
    return this.openStream("POST", `/v1/sessions/${encodeURIComponent(id)}/messages`, { body: { content }, signal });
  }

  /** The continuation of a paused turn: `POST …/tool-results`; pass it as follow()'s `start`. */
  answerPause(id, { results = [], decisions = [] }, { signal } = {}) {
    const path = `/v1/sessions/${encodeURIComponent(id)}/tool-results`;
    return this.openStream("POST", path, { body: { results, decisions }, signal });
  }

  /** A streaming request: the Response once its head is 200, or an ApiError. */
  async openStream(method, path, { body, lastEventId, signal } = {}) {
    const headers = this.headers({ Accept: "text/event-stream" });
    if (lastEventId) headers["Last-Event-ID"] = String(lastEventId);
    const init = { method, headers, signal, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.baseUrl + path, init);
    if (!response.ok) throw await apiError(response);
    return response;
  }

  /**
   * Follows a session's events until it pauses or its turn ends.
   *
   * `start` (optional) opens the first stream (a POST that starts or
   * resumes a turn); it is never sent twice: after it, and whenever a
   * stream breaks, the session's events are read again with
   * `GET /v1/sessions/{id}/events` and `Last-Event-ID: <last seq seen>`.
   * Each event reaches `onFrame(event)` once, in order. `onStatus` hears
   * `{state: "live" | "reconnecting" | "ended", attempt?, error?}`.
   * Resolves to `{reason, cursor}`: `paused`, `turn_ended`, `title_updated`,
   * `idle` (nothing was running) or `aborted`; rejects with an ApiError
   * the stream cannot get past (404, 410 recovery_failed, 401).
   */
  async follow(id, { after = 0, start = null, onFrame = () => {}, onStatus = () => {}, signal } = {}) {
    let cursor = after;
    let opening = start;
    // The stream just read was `start`'s: even empty, it is rejoined once.
    let opened = false;
    let failures = 0;
    for (;;) {
      if (signal?.aborted) return { reason: "aborted", cursor };
      let response;
      try {
        if (opening) {
          const open = opening;
          opening = null;
          opened = true;
          response = await open();
        } else {
          response = await this.openStream("GET", `/v1/sessions/${encodeURIComponent(id)}/events`, {
            lastEventId: cursor,
            signal,
          });
        }
      } catch (error) {
        if (signal?.aborted) return { reason: "aborted", cursor };
        if (error instanceof ApiError && !RETRYABLE.has(error.status)) throw error;
        opened = false;
        failures += 1;
        if (failures > MAX_ATTEMPTS) throw error;
        onStatus({ state: "reconnecting", attempt: failures, error });
        await pause(error.retryAfterMs ?? BACKOFF_MS[Math.min(failures - 1, BACKOFF_MS.length - 1)], signal);
        continue;
      }
      onStatus({ state: "live" });
      let delivered = 0;
      let ended = null;
      let rejoinAfter = null;
      let broken = null;
      try {
        for await (const frame of sseFrames(response)) {
          if (frame.event === "reconnect") {
            // The replica drains: rejoin elsewhere after `retry:`.
            rejoinAfter = frame.retry ?? BACKOFF_MS[0];
            continue;
          }
          if (frame.data === null) continue;
          const event = JSON.parse(frame.data);
          if (frame.event === "recovery_failed") {
            throw new ApiError(410, "recovery_failed", event.message ?? "events after the cursor are gone", null);
          }
          if (frame.id === null) {
            // A failure frame without an id (the stream broke on the
            // server's side): rejoin from the cursor.
            broken = new Error(event.message ?? "the event stream failed");
            continue;
          }
          const seq = Number(frame.id);
          if (seq <= cursor) continue;
          cursor = seq;
          delivered += 1;
          failures = 0;
          onFrame(event, frame);
          if (event.type === "paused" || event.type === "title_updated") ended = event.type;
          if (event.type === "turn_ended") ended = "turn_ended";
          if (event.type === "turn_started" || event.type === "resumed") ended = null;
        }
      } catch (error) {
        if (signal?.aborted) return { reason: "aborted", cursor };
        if (error instanceof ApiError) throw error;
        broken = error;
      }
      if (ended) {
        onStatus({ state: "ended" });
        return { reason: ended, cursor };
      }
      if (!broken && rejoinAfter === null && delivered === 0 && !opened) {
        // A clean, empty rejoin: nothing runs (an idle or finished session).
        onStatus({ state: "ended" });
        return { reason: "idle", cursor };
      }
      opened = false;
      failures += 1;
      if (failures > MAX_ATTEMPTS) throw broken ?? new Error("the stream kept ending without events");
      onStatus({ state: "reconnecting", attempt: failures, error: broken });
      await pause(rejoinAfter ?? BACKOFF_MS[Math.min(failures - 1, BACKOFF_MS.length - 1)], signal);
    }
  }
}

/**
 * The frames of an SSE response body: `{event, data, id, retry}` (`data`
 * is null for a frame without data lines; comments are skipped). A frame
 * cut off by the end of the body is dropped, as EventSource does.
 */
export async function* sseFrames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = blankFrame();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (frame.data !== null || frame.event !== null || frame.retry !== null) yield frame;
          frame = blankFrame();
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") frame.data = frame.data === null ? value : `${frame.data}\n${value}`;
        else if (field === "event") frame.event = value;
        else if (field === "id") frame.id = value;
        else if (field === "retry" && /^\d+$/.test(value)) frame.retry = Number(value);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function blankFrame() {
  return { event: null, data: null, id: null, retry: null };
}

/**
 * The main agent's answer in one turn, as the events build it: each model
 * step's text, a step cut by a takeover dropped at its `step_restarted`
 * (the step streams again), a new turn starting afresh.
 */
export class AnswerText {
  constructor() {
    this.steps = [];
    this.current = "";
  }

  apply(event) {
    if (event.agent_id && event.agent_id !== "main") return;
    switch (event.type) {
      case "turn_started":
        this.steps = [];
        this.current = "";
        break;
      case "text_delta":
        this.current += event.text;
        break;
      case "usage":
        if (this.current) this.steps.push(this.current);
        this.current = "";
        break;
      case "step_restarted":
        this.current = "";
        break;
      default:
    }
  }

  get text() {
    return [...this.steps, this.current].filter((t) => t !== "").join("\n\n");
  }

  toJSON() {
    return { steps: this.steps, current: this.current };
  }

  static from(saved) {
    const answer = new AnswerText();
    answer.steps = saved?.steps ?? [];
    answer.current = saved?.current ?? "";
    return answer;
  }
}

async function apiError(response) {
  const requestId = response.headers.get("x-request-id");
  let code = "http_" + response.status;
  let message = response.statusText || `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body?.error && typeof body.error === "object") {
      code = body.error.code ?? code;
      message = body.error.message ?? message;
    } else if (typeof body?.error === "string") {
      message = body.error;
    } else if (typeof body?.detail === "string") {
      message = body.detail;
    }
  } catch {
    // Not JSON (a proxy's page): the status says enough.
  }
  const error = new ApiError(response.status, code, message, requestId);
  const retryAfter = Number(response.headers.get("retry-after"));
  if (retryAfter > 0) error.retryAfterMs = Math.min(retryAfter, 30) * 1000;
  return error;
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
