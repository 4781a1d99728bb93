//! The tool server of every test suite: `POST /tools/{name}` for the
//! gateway's HTTP tools. It records each call as it arrives — the tool, the
//! body (`tool_call_id`, `session_id`, `arguments`, `state`), the
//! `Idempotency-Key` and `traceparent` headers — and answers, by default,
//! `{"tool": name, "echo": arguments}`: a function of the tool and its
//! arguments only, so a call that a takeover runs again gets the same
//! answer on any replica ([`tool_output`]).
//!
//! A test can script a tool's answer ([`ToolServer::reply`]: a text, an
//! HTTP error, a counter in the session's state), hold its calls until it
//! releases them ([`ToolServer::hold`], so a turn stays in its tools phase
//! as long as the test needs), or give it a running time
//! ([`ToolServer::start_with_delays`], so a kill can land while a call
//! runs). Arrivals are counted on a watch channel: a test waits on the Nth
//! arrival, nothing polls.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// A scripted answer of one tool.
#[derive(Clone, Debug)]
pub enum ToolReply {
    Text(String),
    Status(u16, String),
    /// Counts in the session's state: reads the number at this JSON
    /// Pointer of the `state` it is sent (0 if none) and answers
    /// `{"was": n, "state_delta": [add n + 1 there]}`.
    Counter(String),
}

/// One call as it arrived.
#[derive(Clone, Debug)]
pub struct ToolCallRecord {
    pub tool: String,
    pub body: Value,
    pub tool_call_id: String,
    pub session_id: String,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    pub arrived: Instant,
}

struct Shared {
    /// Each tool's running time: from the first to the second, spread over
    /// the calls by their arrival number (deterministic, no RNG to share).
    delays: HashMap<String, (Duration, Duration)>,
    replies: Mutex<HashMap<String, ToolReply>>,
    /// Held tools: a call waits for a permit before it is answered.
    holds: Mutex<HashMap<String, Arc<Semaphore>>>,
    calls: Mutex<Vec<ToolCallRecord>>,
    arrivals: watch::Sender<usize>,
}

pub struct ToolServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl ToolServer {
    /// Serves on `127.0.0.1:0`; every tool answers at once.
    pub async fn start() -> Self {
        Self::start_with_delays(&[]).await
    }

    /// Like [`ToolServer::start`]; each tool of `delays` answers after a
    /// delay between its two bounds.
    pub async fn start_with_delays(delays: &[(&str, Duration, Duration)]) -> Self {
        let shared = Arc::new(Shared {
            delays: delays.iter().map(|(name, min, max)| (name.to_string(), (*min, *max))).collect(),
            replies: Mutex::default(),
            holds: Mutex::default(),
            calls: Mutex::default(),
            arrivals: watch::Sender::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the tool server");
        let addr = listener.local_addr().expect("the tool server's address");
        let app = Router::new().route("/tools/{name}", post(handle)).with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone().cancelled_owned();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(stopped).await.ok();
        });
        Self { addr, shared, stop }
    }

    pub fn url(&self, tool: &str) -> String {
        format!("http://{}/tools/{tool}", self.addr)
    }

    pub fn reply(&self, tool: &str, reply: ToolReply) {
        self.shared.replies.lock().unwrap().insert(tool.to_string(), reply);
    }

    /// Holds `tool`'s calls until [`ToolServer::release`] lets them answer.
    pub fn hold(&self, tool: &str) {
        self.shared.holds.lock().unwrap().insert(tool.to_string(), Arc::new(Semaphore::new(0)));
    }

    /// Lets `n` held calls of `tool` answer.
    pub fn release(&self, tool: &str, n: usize) {
        let hold = self.shared.holds.lock().unwrap().get(tool).cloned().expect("the tool is held");
        hold.add_permits(n);
    }

    /// Every call so far, in arrival order.
    pub fn records(&self) -> Vec<ToolCallRecord> {
        self.shared.calls.lock().unwrap().clone()
    }

    /// The calls of one session.
    pub fn calls_of(&self, session_id: &str) -> Vec<ToolCallRecord> {
        self.matching(|c| c.session_id == session_id)
    }

    /// The calls that pass `keep`, copied (only those) under the lock.
    fn matching(&self, keep: impl Fn(&ToolCallRecord) -> bool) -> Vec<ToolCallRecord> {
        self.shared.calls.lock().unwrap().iter().filter(|c| keep(c)).cloned().collect()
    }

    fn of_tool(&self, tool: &str) -> Vec<ToolCallRecord> {
        self.matching(|c| c.tool == tool)
    }

    /// How many times `tool` was called.
    pub fn calls(&self, tool: &str) -> usize {
        self.of_tool(tool).len()
    }

    /// The request bodies `tool` received.
    pub fn bodies(&self, tool: &str) -> Vec<Value> {
        self.of_tool(tool).into_iter().map(|c| c.body).collect()
    }

    /// The `traceparent` headers `tool` received.
    pub fn traceparents(&self, tool: &str) -> Vec<Option<String>> {
        self.of_tool(tool).into_iter().map(|c| c.traceparent).collect()
    }

    /// Calls arrived so far, all tools and sessions.
    pub fn arrivals(&self) -> usize {
        *self.shared.arrivals.borrow()
    }

    /// A receiver of the arrival count, for waiting on a future arrival.
    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.shared.arrivals.subscribe()
    }

    /// Waits until `n` calls in all have arrived; `false` after `timeout`.
    pub async fn wait_for_arrivals(&self, n: usize, timeout: Duration) -> bool {
        let mut arrivals = self.subscribe();
        tokio::time::timeout(timeout, arrivals.wait_for(|count| *count >= n)).await.is_ok()
    }

    /// Like [`ToolServer::wait_for_arrivals`], failing the test after `timeout`.
    pub async fn wait_for_calls(&self, n: usize, timeout: Duration) {
        assert!(self.wait_for_arrivals(n, timeout).await, "{n} tool calls in time (got {})", self.arrivals());
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The default answer of `tool` to `arguments`: the same on every run.
pub fn tool_output(tool: &str, arguments: &Value) -> String {
    json!({"tool": tool, "echo": arguments}).to_string()
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(tool): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_string();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let record = ToolCallRecord {
        tool: tool.clone(),
        body: body.clone(),
        tool_call_id: text("tool_call_id"),
        session_id: text("session_id"),
        idempotency_key: header("idempotency-key"),
        traceparent: header("traceparent"),
        arrived: Instant::now(),
    };
    let reply = shared.replies.lock().unwrap().get(&tool).cloned();
    let arrival = {
        let mut calls = shared.calls.lock().unwrap();
        calls.push(record);
        shared.arrivals.send_replace(calls.len());
        calls.len()
    };
    let hold = shared.holds.lock().unwrap().get(&tool).cloned();
    if let Some(hold) = hold {
        hold.acquire().await.expect("the hold stays open").forget();
    }
    if let Some((min, max)) = shared.delays.get(&tool) {
        let spread = max.saturating_sub(*min).as_millis() as u64;
        let delay = *min + Duration::from_millis((arrival as u64 * 37) % (spread + 1));
        // The call's running time, during which a kill may land.
        tokio::time::sleep(delay).await;
    }
    match reply {
        Some(ToolReply::Text(text)) => text.into_response(),
        Some(ToolReply::Status(status, text)) => (StatusCode::from_u16(status).unwrap(), text).into_response(),
        Some(ToolReply::Counter(pointer)) => {
            let was = body["state"].pointer(&pointer).and_then(Value::as_u64).unwrap_or(0);
            let delta = json!([{"op": "add", "path": pointer, "value": was + 1}]);
            Json(json!({"was": was, "state_delta": delta})).into_response()
        }
        None => ([(header::CONTENT_TYPE, "application/json")], tool_output(&tool, &body["arguments"])).into_response(),
    }
}
