//! [`ToolServer`]: `POST /tools/{name}` for the gateway's HTTP tools, which
//! records every call as it arrives — tool, `tool_call_id` and `session_id`
//! from the body, the `Idempotency-Key` header — and answers a text that
//! depends only on the tool and its arguments, after the tool's delay (so a
//! kill can land while a call is running).
//!
//! [`ToolServer::wait_for_arrivals`] waits on a watch channel for the Nth
//! arrival; nothing polls.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::HeaderMap,
    routing::post,
};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One call as it arrived.
#[derive(Clone, Debug)]
pub struct ToolCallRecord {
    pub tool: String,
    pub tool_call_id: String,
    pub session_id: String,
    pub idempotency_key: Option<String>,
    pub arrived: Instant,
}

struct Shared {
    /// Each tool's running time: from the first to the second, spread over
    /// the calls by their arrival number (deterministic, no RNG to share).
    delays: HashMap<String, (Duration, Duration)>,
    calls: Mutex<Vec<ToolCallRecord>>,
    arrivals: watch::Sender<usize>,
}

pub struct ToolServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl ToolServer {
    /// Serves on `127.0.0.1:0`; each tool of `delays` answers after a delay
    /// between its two bounds, any other at once.
    pub async fn start(delays: &[(&str, Duration, Duration)]) -> Self {
        let shared = Arc::new(Shared {
            delays: delays.iter().map(|(name, min, max)| (name.to_string(), (*min, *max))).collect(),
            calls: Mutex::new(Vec::new()),
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

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<ToolCallRecord> {
        self.shared.calls.lock().unwrap().clone()
    }

    /// The calls of one session.
    pub fn calls_of(&self, session_id: &str) -> Vec<ToolCallRecord> {
        self.calls().into_iter().filter(|c| c.session_id == session_id).collect()
    }

    /// Calls arrived so far, all sessions.
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
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The answer of `tool` to `arguments`: the same on every run.
pub fn tool_output(tool: &str, arguments: &Value) -> String {
    format!("{tool} result for {arguments}")
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(tool): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> String {
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_string();
    let record = ToolCallRecord {
        tool: tool.clone(),
        tool_call_id: text("tool_call_id"),
        session_id: text("session_id"),
        idempotency_key: headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string),
        arrived: Instant::now(),
    };
    let arrival = {
        let mut calls = shared.calls.lock().unwrap();
        calls.push(record);
        shared.arrivals.send_replace(calls.len());
        calls.len()
    };
    if let Some((min, max)) = shared.delays.get(&tool) {
        let spread = max.saturating_sub(*min).as_millis() as u64;
        let delay = *min + Duration::from_millis((arrival as u64 * 37) % (spread + 1));
        // The call's running time, during which a kill may land.
        tokio::time::sleep(delay).await;
    }
    tool_output(&tool, &body["arguments"])
}
