//! The mock model of every test suite: upstream model APIs served over real
//! HTTP with real SSE.
//!
//! [`MockUpstream::start`] binds `127.0.0.1:0` and answers
//! `POST /v1/chat/completions` (OpenAI Chat Completions) and `POST /v1/messages`
//! (Anthropic Messages), over HTTP/1.1 or h2c (HTTP/2 with prior
//! knowledge). Tests queue format-neutral [`Reply`] scripts; every
//! request, on either route, pops the next one and renders it in that route's
//! wire format, streamed frame by frame (or as one JSON body when the request
//! has no `"stream": true`). An empty queue answers 500 so a test that sends
//! more requests than it scripted fails loudly.
//!
//! Scripts can also misbehave: answer an HTTP error ([`Reply::http_error`]),
//! stall with the connection open ([`Reply::stall_after`]), cut the connection
//! mid-stream ([`Reply::disconnect_after`]) or emit an in-stream error event
//! ([`Reply::error_event`]). Every request is recorded before it is answered
//! ([`MockUpstream::requests`], [`MockUpstream::wait_for_calls`]).
//!
//! Instead of a queue, [`MockUpstream::answering`] computes each request's
//! reply with a function of the request: a model whose answer is the same
//! however often, and on whichever replica, a step is run (the fault
//! suite's `DetUpstream`).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Fixed `created` timestamp, so chunks are deterministic.
const CREATED: u64 = 1_700_000_000;
/// Prompt tokens reported when the script sets no usage.
const DEFAULT_PROMPT_TOKENS: u64 = 10;
/// Signature attached to Anthropic thinking blocks.
const THINKING_SIGNATURE: &str = "mock-signature";
/// The same finish reasons as named by OpenAI and by Anthropic.
const FINISH_NAMES: [(&str, &str); 3] = [("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use")];

/// One scripted piece of the assistant's answer, in order.
#[derive(Clone, Debug)]
enum Part {
    Text(Vec<String>),
    Reasoning(Vec<String>),
    ToolCall { id: String, name: String, args: Vec<String> },
}

/// How the response body ends.
#[derive(Clone, Copy, Debug, Default)]
enum Ending {
    #[default]
    Clean,
    StallAfter(usize),
    DisconnectAfter(usize),
}

/// A format-neutral script for one upstream response. Build with
/// [`Reply::new`] (a successful answer) or [`Reply::http_error`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Reply {
    parts: Vec<Part>,
    usage: Option<(u64, u64)>,
    finish: Option<String>,
    error_event: Option<(String, String)>,
    /// Status and body of a plain HTTP error answer.
    http_error: Option<(StatusCode, String)>,
    retry_after: Option<u64>,
    ending: Ending,
    chunk_delay: Duration,
    /// The wait before the first frame, when it differs from `chunk_delay`.
    first_delay: Option<Duration>,
}

fn strings<S: Into<String>>(chunks: impl IntoIterator<Item = S>) -> Vec<String> {
    chunks.into_iter().map(Into::into).collect()
}

impl Reply {
    /// An empty successful answer; add parts with the builder methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answer with a plain HTTP error: `status`, JSON `body`, no stream.
    pub fn http_error(status: u16, body: impl Into<String>) -> Self {
        let status = StatusCode::from_u16(status).expect("mock upstream: invalid status code");
        let http_error = Some((status, body.into()));
        Self { http_error, ..Self::default() }
    }

    /// Add a `Retry-After: secs` header. Only valid on [`Reply::http_error`].
    pub fn retry_after(mut self, secs: u64) -> Self {
        assert!(self.http_error.is_some(), "mock upstream: retry_after needs Reply::http_error");
        self.retry_after = Some(secs);
        self
    }

    /// Assistant text, one stream chunk per item.
    pub fn text<I: IntoIterator<Item = S>, S: Into<String>>(mut self, chunks: I) -> Self {
        self.parts.push(Part::Text(strings(chunks)));
        self
    }

    /// Reasoning ("thinking") text, one stream chunk per item.
    pub fn reasoning<I: IntoIterator<Item = S>, S: Into<String>>(mut self, chunks: I) -> Self {
        self.parts.push(Part::Reasoning(strings(chunks)));
        self
    }

    /// A tool call whose JSON arguments arrive as the given fragments.
    pub fn tool_call<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        args: I,
    ) -> Self {
        self.parts.push(Part::ToolCall { id: id.into(), name: name.into(), args: strings(args) });
        self
    }

    /// Report this usage (prompt and completion tokens).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Explicit finish reason, in either vocabulary (`"length"` and
    /// `"max_tokens"` are equivalent); translated per route.
    pub fn finish(mut self, reason: impl Into<String>) -> Self {
        self.finish = Some(reason.into());
        self
    }

    /// After the content, emit an in-stream error event (`kind`, e.g.
    /// `"overloaded_error"`) and end the body without finishing the answer.
    pub fn error_event(mut self, kind: impl Into<String>, message: impl Into<String>) -> Self {
        self.error_event = Some((kind.into(), message.into()));
        self
    }

    /// Send `frames` SSE frames, then keep the connection open and silent
    /// until the client goes away or the mock is dropped.
    pub fn stall_after(mut self, frames: usize) -> Self {
        self.ending = Ending::StallAfter(frames);
        self
    }

    /// Send `frames` SSE frames, then abort the connection (no clean end).
    pub fn disconnect_after(mut self, frames: usize) -> Self {
        self.ending = Ending::DisconnectAfter(frames);
        self
    }

    /// Wait this long before each frame (default: no delay).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Wait this long before the first frame instead (a slow first token).
    pub fn first_delay(mut self, delay: Duration) -> Self {
        self.first_delay = Some(delay);
        self
    }

    fn has_tool_calls(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }))
    }

    /// Scripted usage, or (10, number of content fragments).
    fn usage_or_default(&self) -> (u64, u64) {
        self.usage.unwrap_or_else(|| {
            let fragments = self.parts.iter().map(|p| match p {
                Part::Text(c) | Part::Reasoning(c) => c.len(),
                Part::ToolCall { args, .. } => args.len(),
            });
            (DEFAULT_PROMPT_TOKENS, fragments.sum::<usize>() as u64)
        })
    }

    /// The finish reason in `format`'s vocabulary (scripted, or the default).
    fn finish_reason(&self, format: Format) -> String {
        let default = if self.has_tool_calls() { "tool_calls" } else { "stop" };
        let reason = self.finish.as_deref().unwrap_or(default);
        let names = FINISH_NAMES.iter().find(|(o, a)| reason == *o || reason == *a);
        match (names, format) {
            (Some((openai, _)), Format::OpenAi) => openai,
            (Some((_, anthropic)), Format::Anthropic) => anthropic,
            (None, _) => reason,
        }
        .to_owned()
    }
}

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: Method,
    /// HTTP/1.1, or HTTP/2 from a client with prior knowledge (h2c).
    pub version: axum::http::Version,
    pub path: String,
    pub headers: HeaderMap,
    /// Parsed JSON body; `Value::Null` if the body was empty or not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value as text, if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Computes a request's reply from its JSON body.
pub type Answerer = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

struct Shared {
    queue: Mutex<VecDeque<Reply>>,
    /// Answers every request instead of the queue.
    answerer: Option<Answerer>,
    requests: Mutex<Vec<RecordedRequest>>,
    calls: watch::Sender<usize>,
    shutdown: CancellationToken,
}

impl Shared {
    /// Record a request; returns its 1-based call number.
    fn record(&self, request: RecordedRequest) -> usize {
        let mut requests = self.requests.lock().unwrap();
        requests.push(request);
        let n = requests.len();
        self.calls.send_replace(n);
        n
    }
}

/// The running mock server. Dropping it shuts the server down.
pub struct MockUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl MockUpstream {
    /// Bind `127.0.0.1:0` and start serving the queued replies.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// Bind `127.0.0.1:0` and answer every request with `answerer`.
    pub async fn answering(answerer: Answerer) -> Self {
        Self::serve(Some(answerer)).await
    }

    async fn serve(answerer: Option<Answerer>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("mock upstream: bind");
        let addr = listener.local_addr().expect("mock upstream: local addr");
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            answerer,
            requests: Mutex::new(Vec::new()),
            calls: watch::Sender::new(0),
            shutdown: CancellationToken::new(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let stop = shared.shutdown.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(stop).await.expect("mock upstream: serve");
        });
        Self { addr, shared, task }
    }

    /// Queue a reply; requests consume replies in FIFO order.
    pub fn push(&self, reply: Reply) {
        self.shared.queue.lock().unwrap().push_back(reply);
    }

    /// `http://127.0.0.1:PORT/v1`; clients append `/chat/completions` or `/messages`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Number of requests received so far (all paths).
    pub fn calls(&self) -> usize {
        *self.shared.calls.borrow()
    }

    /// Scripted replies not yet consumed.
    pub fn remaining(&self) -> usize {
        self.shared.queue.lock().unwrap().len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Resolve once at least `n` requests arrived; panic after `timeout`.
    pub async fn wait_for_calls(&self, n: usize, timeout: Duration) {
        if !self.reached_calls(n, timeout).await {
            panic!("mock upstream: expected at least {n} calls within {timeout:?}, got {}", self.calls());
        }
    }

    /// Whether at least `n` requests arrived within `timeout`.
    pub async fn reached_calls(&self, n: usize, timeout: Duration) -> bool {
        let mut rx = self.shared.calls.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|calls| *calls >= n)).await.is_ok()
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        // Cancelling also ends stalled streams, which would otherwise keep
        // their connection tasks alive.
        self.shared.shutdown.cancel();
        self.task.abort();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    OpenAi,
    Anthropic,
}

/// Per-request facts the renderers need.
struct Ctx {
    id: String,
    model: String,
    include_usage: bool,
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    version: axum::http::Version,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let call = shared.record(RecordedRequest {
        method: method.clone(),
        version,
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    let format = match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions") => Format::OpenAi,
        (Method::POST, "/v1/messages") => Format::Anthropic,
        (method, _) => {
            let message = format!("mock upstream: no route for {method} {path}");
            let error = json!({"error": {"message": message}});
            return json_response(StatusCode::NOT_FOUND, error.to_string(), None);
        }
    };
    let next = match &shared.answerer {
        Some(answer) => Some(answer(&body)),
        None => shared.queue.lock().unwrap().pop_front(),
    };
    let Some(reply) = next else {
        let error = json!({"error": {"type": "mock_exhausted",
            "message": "mock upstream: no scripted reply left"}});
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, error.to_string(), None);
    };
    if let Some((status, body)) = &reply.http_error {
        return json_response(*status, body.clone(), reply.retry_after);
    }
    let cx = Ctx {
        id: match format {
            Format::OpenAi => format!("chatcmpl-mock-{call}"),
            Format::Anthropic => format!("msg_mock_{call}"),
        },
        model: body["model"].as_str().unwrap_or("mock-model").to_owned(),
        include_usage: body["stream_options"]["include_usage"] == json!(true),
    };
    let (frames, content_type) = match (body["stream"] == json!(true), format) {
        (true, Format::OpenAi) => (openai_stream(&reply, &cx), "text/event-stream"),
        (true, Format::Anthropic) => (anthropic_stream(&reply, &cx), "text/event-stream"),
        (false, Format::OpenAi) => (vec![whole(openai_whole(&reply, &cx))], "application/json"),
        (false, Format::Anthropic) => (vec![whole(anthropic_whole(&reply, &cx))], "application/json"),
    };
    stream_response(frames, content_type, &reply, shared.shutdown.clone())
}

/// A non-stream answer is one frame, so the scripted ending still applies.
fn whole(answer: Value) -> Bytes {
    Bytes::from(answer.to_string())
}

fn json_response(status: StatusCode, body: String, retry_after: Option<u64>) -> Response {
    let mut response = Response::builder().status(status).header(header::CONTENT_TYPE, "application/json");
    if let Some(secs) = retry_after {
        response = response.header(header::RETRY_AFTER, secs);
    }
    response.body(Body::from(body)).unwrap()
}

/// Send `frames` as separate body chunks, then end as the script says.
fn stream_response(
    frames: Vec<Bytes>,
    content_type: &'static str,
    reply: &Reply,
    shutdown: CancellationToken,
) -> Response {
    let (first, delay) = (reply.first_delay.unwrap_or(reply.chunk_delay), reply.chunk_delay);
    let (keep, tail): (usize, BoxStream<'static, io::Result<Bytes>>) = match reply.ending {
        Ending::Clean => (frames.len(), stream::empty().boxed()),
        Ending::StallAfter(n) => {
            let stall = async move {
                shutdown.cancelled_owned().await;
                Err(io::Error::other("mock upstream: shut down while stalled"))
            };
            (n, stream::once(stall).boxed())
        }
        Ending::DisconnectAfter(n) => {
            let cut = async {
                // Yield once so hyper flushes what was sent before the error
                // makes it drop the connection.
                tokio::task::yield_now().await;
                Err(io::Error::new(io::ErrorKind::ConnectionReset, "mock upstream: scripted disconnect"))
            };
            (n, stream::once(cut).boxed())
        }
    };
    let head = stream::iter(frames.into_iter().take(keep).enumerate()).then(move |(i, frame)| async move {
        let pause = if i == 0 { first } else { delay };
        if !pause.is_zero() {
            // The pacing of the stream is what a test is about, not a wait
            // for something to happen.
            tokio::time::sleep(pause).await;
        }
        Ok::<_, io::Error>(frame)
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(head.chain(tail)))
        .unwrap()
}

fn sse_data(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// An Anthropic SSE frame; the event name is the data's `type`.
fn sse_event(data: Value) -> Bytes {
    let name = data["type"].as_str().expect("anthropic events have a type");
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn usage_openai(reply: &Reply) -> Value {
    let (p, c) = reply.usage_or_default();
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
}

fn openai_stream(reply: &Reply, cx: &Ctx) -> Vec<Bytes> {
    let chunk = |choices: Value| {
        json!({"id": cx.id, "object": "chat.completion.chunk", "created": CREATED,
            "model": cx.model, "choices": choices})
    };
    let mut deltas = Vec::new();
    let mut tool_index = 0;
    for part in &reply.parts {
        match part {
            Part::Text(c) => deltas.extend(c.iter().map(|t| json!({"content": t}))),
            Part::Reasoning(c) => deltas.extend(c.iter().map(|t| json!({"reasoning_content": t}))),
            Part::ToolCall { id, name, args } => {
                deltas.push(json!({"tool_calls": [{"index": tool_index, "id": id,
                    "type": "function", "function": {"name": name, "arguments": ""}}]}));
                deltas.extend(
                    args.iter().map(|a| json!({"tool_calls": [{"index": tool_index, "function": {"arguments": a}}]})),
                );
                tool_index += 1;
            }
        }
    }
    if deltas.is_empty() {
        deltas.push(json!({"content": ""}));
    }
    deltas[0]["role"] = json!("assistant");
    let last = deltas.len() - 1;
    let finish = reply.error_event.is_none().then(|| reply.finish_reason(Format::OpenAi));
    let mut frames: Vec<Bytes> = deltas
        .into_iter()
        .enumerate()
        .map(|(i, delta)| {
            let finish_reason = if i == last { finish.clone() } else { None };
            let choice = json!({"index": 0, "delta": delta, "finish_reason": finish_reason});
            sse_data(&chunk(json!([choice])))
        })
        .collect();
    if let Some((kind, message)) = &reply.error_event {
        let error = json!({"error": {"type": kind, "message": message}});
        frames.push(sse_data(&error));
        return frames;
    }
    if cx.include_usage || reply.usage.is_some() {
        let mut usage = chunk(json!([]));
        usage["usage"] = usage_openai(reply);
        frames.push(sse_data(&usage));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

fn openai_whole(reply: &Reply, cx: &Ctx) -> Value {
    let (mut text, mut reasoning, mut tool_calls) = (String::new(), String::new(), Vec::new());
    for part in &reply.parts {
        match part {
            Part::Text(c) => text.push_str(&c.concat()),
            Part::Reasoning(c) => reasoning.push_str(&c.concat()),
            Part::ToolCall { id, name, args } => tool_calls.push(json!({"id": id,
                "type": "function", "function": {"name": name, "arguments": args.concat()}})),
        }
    }
    let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(text) };
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    let finish_reason = reply.finish_reason(Format::OpenAi);
    json!({"id": cx.id, "object": "chat.completion", "created": CREATED, "model": cx.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage_openai(reply)})
}

/// Anthropic content block for `part`: (start block, deltas).
fn anthropic_block(part: &Part) -> (Value, Vec<Value>) {
    match part {
        Part::Text(c) => {
            (json!({"type": "text", "text": ""}), c.iter().map(|t| json!({"type": "text_delta", "text": t})).collect())
        }
        Part::Reasoning(c) => {
            let mut deltas: Vec<Value> = c.iter().map(|t| json!({"type": "thinking_delta", "thinking": t})).collect();
            deltas.push(json!({"type": "signature_delta", "signature": THINKING_SIGNATURE}));
            (json!({"type": "thinking", "thinking": ""}), deltas)
        }
        Part::ToolCall { id, name, args } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            args.iter().map(|a| json!({"type": "input_json_delta", "partial_json": a})).collect(),
        ),
    }
}

fn anthropic_stream(reply: &Reply, cx: &Ctx) -> Vec<Bytes> {
    let (prompt, completion) = reply.usage_or_default();
    let message = json!({"id": cx.id, "type": "message", "role": "assistant",
        "model": cx.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": prompt, "output_tokens": 0}});
    let mut frames = vec![sse_event(json!({"type": "message_start", "message": message}))];
    for (index, part) in reply.parts.iter().enumerate() {
        let (block, deltas) = anthropic_block(part);
        let start = json!({"type": "content_block_start", "index": index, "content_block": block});
        frames.push(sse_event(start));
        frames.extend(
            deltas
                .into_iter()
                .map(|delta| sse_event(json!({"type": "content_block_delta", "index": index, "delta": delta}))),
        );
        frames.push(sse_event(json!({"type": "content_block_stop", "index": index})));
    }
    if let Some((kind, message)) = &reply.error_event {
        let error = json!({"type": "error", "error": {"type": kind, "message": message}});
        frames.push(sse_event(error));
        return frames;
    }
    let stop_reason = reply.finish_reason(Format::Anthropic);
    frames.push(sse_event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": completion}})));
    frames.push(sse_event(json!({"type": "message_stop"})));
    frames
}

fn anthropic_whole(reply: &Reply, cx: &Ctx) -> Value {
    let content: Vec<Value> = reply
        .parts
        .iter()
        .map(|part| match part {
            Part::Text(c) => json!({"type": "text", "text": c.concat()}),
            Part::Reasoning(c) => json!({"type": "thinking", "thinking": c.concat(),
                "signature": THINKING_SIGNATURE}),
            Part::ToolCall { id, name, args } => {
                let joined = args.concat();
                let input = serde_json::from_str(&joined).unwrap_or(Value::String(joined));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        })
        .collect();
    let (prompt, completion) = reply.usage_or_default();
    let stop_reason = reply.finish_reason(Format::Anthropic);
    json!({"id": cx.id, "type": "message", "role": "assistant", "model": cx.model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": prompt, "output_tokens": completion}})
}
