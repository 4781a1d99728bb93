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
//! `bash` and `read`); after its last call comes the final answer. It is
//! the suites' one mock model (`tests/common/mock_model.rs`) answering with
//! a function of the request instead of a queue: the same SSE shapes the
//! API suite's scripts stream, every request recorded before it is
//! answered.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::mock_model::{MockUpstream, RecordedRequest, Reply};

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

/// Scripts by name, for `script:NAME`.
type Scripts = Arc<Mutex<HashMap<String, Vec<ScriptedCall>>>>;

pub struct DetUpstream {
    model: MockUpstream,
    scripts: Scripts,
}

impl DetUpstream {
    /// Serves on `127.0.0.1:0`; `delay` is the default pause between chunks
    /// (a kill lands mid-stream), `first_delay` before the first one.
    pub async fn start(delay: Duration, first_delay: Duration) -> Self {
        let scripts = Scripts::default();
        let known = scripts.clone();
        let answer = move |body: &Value| answer(body, &known, delay, first_delay);
        Self { model: MockUpstream::answering(Box::new(answer)).await, scripts }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        self.model.base_url()
    }

    /// Requests received so far.
    pub fn calls(&self) -> usize {
        self.model.calls()
    }

    /// Waits until `n` requests in all have arrived; `false` after `timeout`.
    pub async fn wait_for_calls(&self, n: usize, timeout: Duration) -> bool {
        self.model.reached_calls(n, timeout).await
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.model.requests()
    }

    /// Registers `calls` as the script `name`: a turn whose message says
    /// `script:NAME` asks for them one round at a time, then answers.
    pub fn add_script(&self, name: &str, calls: Vec<ScriptedCall>) {
        self.scripts.lock().unwrap().insert(name.to_string(), calls);
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

/// The reply to `body`: the next tool round its orders ask for, or the
/// final answer, paced as they say.
fn answer(body: &Value, scripts: &Scripts, delay: Duration, first_delay: Duration) -> Reply {
    let (message, results) = progress(body);
    let orders = Orders::parse(&message, delay, first_delay);
    let round = results + 1;
    let call = match &orders.script {
        Some(script) => match scripts.lock().unwrap().get(script) {
            Some(calls) => calls.get(results as usize).cloned(),
            None => {
                let error = json!({"error": {"message": format!("no script named {script:?}")}});
                return Reply::http_error(400, error.to_string());
            }
        },
        None if results < orders.tools => {
            let name = &orders.tool_names[(round as usize - 1) % orders.tool_names.len()];
            Some(ScriptedCall::new(&tool_call_id(&message, round), name, json!({"id": format!("r{round}")})))
        }
        None => None,
    };
    let reply = match call {
        Some(call) => {
            // The arguments in two fragments, split in the middle: the
            // gateway must join them.
            let arguments = call.arguments.to_string();
            let middle = (0..=arguments.len() / 2).rev().find(|i| arguments.is_char_boundary(*i)).unwrap_or(0);
            let fragments = [&arguments[..middle], &arguments[middle..]];
            Reply::new().tool_call(call.id, call.name, fragments).usage(10, 3)
        }
        None => {
            let words = (1..=orders.words).map(|i| if i == 1 { "w1".to_string() } else { format!(" w{i}") });
            Reply::new().text(words).usage(10, u64::from(orders.words))
        }
    };
    reply.chunk_delay(orders.delay).first_delay(orders.first_delay)
}
