//! A counting HTTP tool server: `POST /tools/{name}` records the call and
//! answers with the tool's scripted response (by default an echo of the
//! arguments). Tests assert how often each tool ran (0 proves a permission
//! stopped it). A tool can be held: its calls are counted on arrival and
//! answered only once the test releases them, so a turn stays in its tools
//! phase as long as a test needs.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub enum ToolReply {
    Text(String),
    Status(u16, String),
    /// Counts in the session's state: reads the number at this JSON
    /// Pointer of the `state` it is sent (0 if none) and answers
    /// `{"was": n, "state_delta": [add n + 1 there]}`.
    Counter(String),
}

#[derive(Default)]
struct Shared {
    /// (tool, body, traceparent header)
    calls: Mutex<Vec<(String, Value, Option<String>)>>,
    replies: Mutex<HashMap<String, ToolReply>>,
    /// Held tools: a call waits for a permit before it is answered.
    holds: Mutex<HashMap<String, Arc<Semaphore>>>,
}

pub struct ToolServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    count: watch::Receiver<usize>,
    stop: CancellationToken,
}

impl ToolServer {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let (tx, count) = watch::channel(0usize);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/tools/{name}", post(handle)).with_state((shared.clone(), Arc::new(tx)));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await }).await.ok();
        });
        Self { addr, shared, count, stop }
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

    /// How many times `tool` was called.
    pub fn calls(&self, tool: &str) -> usize {
        self.shared.calls.lock().unwrap().iter().filter(|(name, _, _)| name == tool).count()
    }

    /// The request bodies `tool` received.
    pub fn bodies(&self, tool: &str) -> Vec<Value> {
        self.shared
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _, _)| name == tool)
            .map(|(_, b, _)| b.clone())
            .collect()
    }

    /// The `traceparent` headers `tool` received.
    pub fn traceparents(&self, tool: &str) -> Vec<Option<String>> {
        let calls = self.shared.calls.lock().unwrap();
        calls.iter().filter(|(name, _, _)| name == tool).map(|(_, _, t)| t.clone()).collect()
    }

    /// Waits until the server has received `n` calls in all.
    pub async fn wait_for_calls(&self, n: usize, timeout: Duration) {
        let mut count = self.count.clone();
        tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await.expect("tool calls in time").unwrap();
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

type ServerState = (Arc<Shared>, Arc<watch::Sender<usize>>);

async fn handle(
    State((shared, count)): State<ServerState>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let reply = shared.replies.lock().unwrap().get(&name).cloned();
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_string);
    shared.calls.lock().unwrap().push((name.clone(), body.clone(), traceparent));
    count.send_modify(|c| *c += 1);
    let hold = shared.holds.lock().unwrap().get(&name).cloned();
    if let Some(hold) = hold {
        hold.acquire().await.expect("the hold stays open").forget();
    }
    match reply {
        Some(ToolReply::Text(text)) => text.into_response(),
        Some(ToolReply::Status(status, text)) => (StatusCode::from_u16(status).unwrap(), text).into_response(),
        Some(ToolReply::Counter(pointer)) => {
            let was = body["state"].pointer(&pointer).and_then(Value::as_u64).unwrap_or(0);
            let delta = json!([{"op": "add", "path": pointer, "value": was + 1}]);
            Json(json!({"was": was, "state_delta": delta})).into_response()
        }
        None => Json(json!({"tool": name, "echo": body["arguments"]})).into_response(),
    }
}
