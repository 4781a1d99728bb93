//! [`DetUpstream`]: an OpenAI-compatible model whose answer is a pure
//! function of the request, so a step that a takeover runs again gets the
//! same answer, however many times and on whichever replica.
//!
//! `POST /v1/chat/completions` reads its orders from the last user message,
//! whitespace-separated `key:value` words (unknown words are ignored, so a
//! test can add a nonce):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `tools:N` | ask for N tool rounds, one call each, before answering | 0 |
//! | `tool:a,b` | the tools, round `r` (1-based) uses the `(r-1) % len`-th | `lookup` |
//! | `script:NAME` | the rounds are the calls of the script NAME ([`DetUpstream::add_script`]) | none |
//! | `words:N` | the final answer is `w1 w2 … wN`, one chunk per word | 10 |
//! | `delay:MS` | pause before every chunk after the first | the upstream's |
//! | `first:MS` | pause before the first chunk | the upstream's |
//!
//! The round is the number of `tool` messages after that user message plus
//! one; while it is at most N the answer is a tool call with the id
//! `call_<round>_<hash of the user message>` (stable across re-runs, unique
//! per turn when the message carries a nonce) and the arguments
//! `{"id":"r<round>"}` in two fragments. A script's round `r` is its `r`-th
//! call, with the script's own id and arguments (a coding chat's `patch`,
//! `bash` and `read`); after its last call comes the final answer. The
//! stream has the shapes the
//! gateway parses (`tests/api/support/mock_upstream.rs`): `data: {chunk}`
//! frames with `choices[0].delta`, a `finish_reason`, a usage chunk, and
//! `data: [DONE]`. Every request is recorded before it is answered.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use futures::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Fixed `created` timestamp, so chunks are deterministic.
const CREATED: u64 = 1_700_000_000;
const PROMPT_TOKENS: u64 = 10;

/// What one request asks for, parsed from the last user message.
#[derive(Clone, Debug, PartialEq)]
pub struct Orders {
    pub tools: u32,
    pub tool_names: Vec<String>,
    pub words: u32,
    pub delay: Duration,
    pub first_delay: Duration,
    /// The script the rounds come from, by name.
    pub script: Option<String>,
}

impl Orders {
    /// Reads `message` with the upstream's default delays.
    pub fn parse(message: &str, delay: Duration, first_delay: Duration) -> Self {
        let mut orders =
            Self { tools: 0, tool_names: vec!["lookup".into()], words: 10, delay, first_delay, script: None };
        for word in message.split_whitespace() {
            let Some((key, value)) = word.split_once(':') else { continue };
            let millis = || value.parse().map(Duration::from_millis).ok();
            match key {
                "tools" => orders.tools = value.parse().unwrap_or(0),
                "tool" => orders.tool_names = value.split(',').map(str::to_string).collect(),
                "words" => orders.words = value.parse().unwrap_or(10),
                "delay" => orders.delay = millis().unwrap_or(orders.delay),
                "first" => orders.first_delay = millis().unwrap_or(orders.first_delay),
                "script" => orders.script = Some(value.to_string()),
                _ => {}
            }
        }
        orders
    }
}

/// The final answer of `words:N`: `w1 w2 … wN`.
pub fn expected_answer(words: u32) -> String {
    (1..=words).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// The id of the tool call of `round` for the turn started by `message`.
pub fn tool_call_id(message: &str, round: u32) -> String {
    let digest = Sha256::digest(message.as_bytes());
    format!("call_{round}_{}", &hex::encode(digest)[..12])
}

/// One tool call of a script: the round that asks for it answers with
/// exactly this id, tool and arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

impl ScriptedCall {
    pub fn new(id: &str, name: &str, arguments: Value) -> Self {
        Self { id: id.to_string(), name: name.to_string(), arguments }
    }
}

/// What the upstream answered a request with.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// `arguments` is the JSON text streamed, in two fragments.
    ToolCall {
        round: u32,
        id: String,
        name: String,
        arguments: String,
    },
    Final {
        words: u32,
    },
}

/// A request as received, and what it got.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub body: Value,
    pub answer: Answer,
}

struct Shared {
    delay: Duration,
    first_delay: Duration,
    requests: Mutex<Vec<Recorded>>,
    count: watch::Sender<usize>,
    /// Scripts by name, for `script:NAME`.
    scripts: Mutex<HashMap<String, Vec<ScriptedCall>>>,
}

pub struct DetUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl DetUpstream {
    /// Serves on `127.0.0.1:0`; `delay` is the default pause between chunks
    /// (a kill lands mid-stream), `first_delay` before the first one.
    pub async fn start(delay: Duration, first_delay: Duration) -> Self {
        let shared = Arc::new(Shared {
            delay,
            first_delay,
            requests: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            scripts: Mutex::new(HashMap::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the upstream");
        let addr = listener.local_addr().expect("the upstream's address");
        let app = Router::new().route("/v1/chat/completions", post(complete)).with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone().cancelled_owned();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(stopped).await.ok();
        });
        Self { addr, shared, stop }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests received so far.
    pub fn calls(&self) -> usize {
        *self.shared.count.borrow()
    }

    /// Waits until `n` requests in all have arrived; `false` after `timeout`.
    pub async fn wait_for_calls(&self, n: usize, timeout: Duration) -> bool {
        let mut count = self.shared.count.subscribe();
        tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await.is_ok()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Registers `calls` as the script `name`: a turn whose message says
    /// `script:NAME` asks for them one round at a time, then answers.
    pub fn add_script(&self, name: &str, calls: Vec<ScriptedCall>) {
        self.shared.scripts.lock().unwrap().insert(name.to_string(), calls);
    }
}

impl Drop for DetUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The last user message's text, and how many tool results follow it.
fn progress(body: &Value) -> (String, u32) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages.iter().rposition(|m| m["role"] == "user");
    let Some(index) = last_user else { return (String::new(), 0) };
    let text = match &messages[index]["content"] {
        Value::String(text) => text.clone(),
        // Content parts: the text ones, joined.
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    };
    let results = messages[index + 1..].iter().filter(|m| m["role"] == "tool").count();
    (text, results as u32)
}

async fn complete(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    let (message, results) = progress(&body);
    let orders = Orders::parse(&message, shared.delay, shared.first_delay);
    let round = results + 1;
    let answer = match &orders.script {
        Some(script) => {
            let call = match shared.scripts.lock().unwrap().get(script) {
                Some(calls) => calls.get(results as usize).cloned(),
                None => {
                    let error = json!({"error": {"message": format!("no script named {script:?}")}});
                    return (StatusCode::BAD_REQUEST, Json(error)).into_response();
                }
            };
            match call {
                Some(call) => {
                    Answer::ToolCall { round, id: call.id, name: call.name, arguments: call.arguments.to_string() }
                }
                None => Answer::Final { words: orders.words },
            }
        }
        None if results < orders.tools => {
            let name = orders.tool_names[(round as usize - 1) % orders.tool_names.len()].clone();
            let arguments = json!({"id": format!("r{round}")}).to_string();
            Answer::ToolCall { round, id: tool_call_id(&message, round), name, arguments }
        }
        None => Answer::Final { words: orders.words },
    };
    {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(Recorded { body: body.clone(), answer: answer.clone() });
        shared.count.send_replace(requests.len());
    }
    if body["stream"] != json!(true) {
        let error = json!({"error": {"message": "the deterministic upstream only streams"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let model = body["model"].as_str().unwrap_or("mock-model").to_string();
    let frames = frames(&answer, &model);
    let (first, delay) = (orders.first_delay, orders.delay);
    let paced = futures::stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
        let pause = if i == 0 { first } else { delay };
        if !pause.is_zero() {
            // The pacing of the stream is what the test is about, not a wait
            // for something to happen.
            tokio::time::sleep(pause).await;
        }
        Ok::<_, std::io::Error>(frame)
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(paced))
        .unwrap()
}

/// Every SSE frame of `answer`, `[DONE]` included.
fn frames(answer: &Answer, model: &str) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-det", "object": "chat.completion.chunk", "created": CREATED, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let (mut deltas, finish, completion_tokens) = match answer {
        Answer::ToolCall { id, name, arguments, .. } => {
            let open = json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]});
            // Two fragments, split in the middle: the gateway must join them.
            let middle = (0..=arguments.len() / 2).rev().find(|i| arguments.is_char_boundary(*i)).unwrap_or(0);
            let args = [&arguments[..middle], &arguments[middle..]];
            let fragments =
                args.into_iter().map(|a| json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}));
            (std::iter::once(open).chain(fragments).collect::<Vec<_>>(), "tool_calls", 3)
        }
        Answer::Final { words } => {
            let texts = (1..=*words).map(|i| if i == 1 { "w1".to_string() } else { format!(" w{i}") });
            (texts.map(|t| json!({"content": t})).collect(), "stop", u64::from(*words))
        }
    };
    if let Some(first) = deltas.first_mut() {
        first["role"] = json!("assistant");
    }
    let mut out: Vec<Bytes> = deltas.into_iter().map(|d| sse(&chunk(d, None))).collect();
    out.push(sse(&chunk(json!({}), Some(finish))));
    let mut usage = json!({"id": "chatcmpl-det", "object": "chat.completion.chunk", "created": CREATED,
        "model": model, "choices": []});
    usage["usage"] = json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion_tokens,
        "total_tokens": PROMPT_TOKENS + completion_tokens});
    out.push(sse(&usage));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

fn sse(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}
