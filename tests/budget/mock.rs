//! The model: OpenAI-compatible streamed chat completions, on a thread and
//! runtime of its own (nothing it allocates is counted). What an answer
//! streams is ordered in the last user message, as the load tests' mock
//! takes it: `tokens:N pace:MS` — N text tokens MS apart; `gate:1` holds
//! the first token until the gate opens.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};
use tokio::sync::watch;

pub struct Mock {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    /// Whether gated answers may start.
    gate: watch::Sender<bool>,
    /// Answers waiting at the gate.
    held: AtomicUsize,
}

impl Mock {
    pub fn start() -> Self {
        let shared = Arc::new(Shared { gate: watch::Sender::new(true), held: AtomicUsize::new(0) });
        let (tx, rx) = std::sync::mpsc::channel();
        let state = shared.clone();
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = Router::new().route("/v1/chat/completions", post(answer)).with_state(state);
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self { addr: rx.recv().unwrap(), shared }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn close_gate(&self) {
        self.shared.gate.send_replace(false);
    }

    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Waits (a bounded while) until `n` answers wait at the gate.
    pub fn wait_held(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.shared.held.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{} of {n} chats held", self.shared.held.load(Ordering::SeqCst));
            thread::sleep(Duration::from_millis(10));
        }
    }
}

async fn answer(State(shared): State<Arc<Shared>>, Json(request): Json<Value>) -> Response {
    let order = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    let word = |name: &str| {
        order.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix(':')?.parse::<u64>().ok())
    };
    let (tokens, pace, gated) = (word("tokens").unwrap_or(5), word("pace").unwrap_or(0), word("gate") == Some(1));
    let chunk = |delta: Value, finish: Value| {
        let data = json!({"id": "c", "object": "chat.completion.chunk", "model": "mock-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Bytes::from(format!("data: {data}\n\n"))
    };
    let stream = async_stream(move |tx| async move {
        if gated {
            let mut gate = shared.gate.subscribe();
            shared.held.fetch_add(1, Ordering::SeqCst);
            let _ = gate.wait_for(|open| *open).await;
            shared.held.fetch_sub(1, Ordering::SeqCst);
        }
        for i in 0..tokens {
            if i > 0 && pace > 0 {
                tokio::time::sleep(Duration::from_millis(pace)).await;
            }
            if tx.send(chunk(json!({"content": format!("t{i} ")}), Value::Null)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(chunk(json!({}), json!("stop"))).await;
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}});
        let _ = tx.send(Bytes::from(format!("data: {usage}\n\n"))).await;
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    ([(header::CONTENT_TYPE, "text/event-stream")], Body::from_stream(stream)).into_response()
}

/// The chunks `produce` sends, as a body stream.
fn async_stream<F, Fut>(produce: F) -> impl futures::Stream<Item = Result<Bytes, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(produce(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (Ok(chunk), rx)) })
}
