//! A fast OpenAI-compatible model for benchmarks: `POST /v1/chat/completions`
//! streams real SSE chunks (`choices[].delta`, a finish chunk, a usage chunk,
//! `[DONE]`), and `POST /tool` answers a tool call at once.
//!
//! What an answer looks like is ordered in the last user message, so one
//! mock serves every workload of a run and a client sends the same order
//! straight to the mock (the baseline) or through the gateway:
//! `tokens:20 pace:50 first:0 tools:1` — 20 text tokens 50 ms apart, the
//! first after 0 ms, after one tool call (answered by `role: tool` messages
//! after the user message). Each token is `t` plus its number, so a client
//! can check that it received every one, in order. `gate:1` holds the first
//! token until `POST /release` (and `POST /hold` closes the gate again), so
//! a scenario can hold thousands of streams open for as long as it measures.
//!
//! [`serve`] speaks HTTP/1.1 and HTTP/2 over cleartext (h2c, prior
//! knowledge) on one port, as a model server behind an h2c-speaking proxy
//! does: a gateway configured with `[models.X] http2 = true` sends all its
//! calls over one connection.

use std::{
    convert::Infallible,
    sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto::Builder,
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::watch};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

/// What one answer streams.
#[derive(Clone, Debug, PartialEq)]
pub struct Order {
    pub tokens: u32,
    pub pace: Duration,
    pub first: Duration,
    /// Tool rounds before the text.
    pub tools: u32,
    /// Whether the first token waits for `POST /release`.
    pub gate: bool,
}

impl Order {
    pub fn parse(message: &str) -> Self {
        let mut order = Self { tokens: 20, pace: Duration::ZERO, first: Duration::ZERO, tools: 0, gate: false };
        for word in message.split_whitespace() {
            let Some((key, value)) = word.split_once(':') else { continue };
            let number: u64 = value.parse().unwrap_or(0);
            match key {
                "tokens" => order.tokens = number as u32,
                "pace" => order.pace = Duration::from_millis(number),
                "first" => order.first = Duration::from_millis(number),
                "tools" => order.tools = number as u32,
                "gate" => order.gate = number == 1,
                _ => {}
            }
        }
        order
    }

    /// The message that orders this answer.
    pub fn message(&self) -> String {
        format!(
            "tokens:{} pace:{} first:{} tools:{} gate:{}",
            self.tokens,
            self.pace.as_millis(),
            self.first.as_millis(),
            self.tools,
            u8::from(self.gate)
        )
    }

    /// The text every token of the answer makes, in order.
    pub fn token(i: u32) -> String {
        if i == 1 { "t1".into() } else { format!(" t{i}") }
    }
}

/// The mock's routes.
pub fn router() -> Router {
    Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/tool", post(tool))
        .route(
            "/release",
            post(|| async {
                GATE.send_replace(true);
            }),
        )
        .route(
            "/hold",
            post(|| async {
                GATE.send_replace(false);
            }),
        )
}

/// Streams one HTTP/2 connection may carry: every held chat of a capacity
/// run (9,900) on the gateway's one h2c connection, where hyper's default
/// (200) would queue the rest behind them.
const MAX_H2_STREAMS: u32 = 100_000;

/// Serves [`router`] on `listener`, HTTP/1.1 and h2c alike, until the
/// process ends. `TCP_NODELAY` on every connection, as model servers set it
/// (uvicorn does): with Nagle on, the frames of many streams on one h2c
/// connection waited for the client's delayed ACK (time to first token
/// p50 42 ms straight to the mock at 300 streams), and over HTTP/1.1 the
/// closing chunks after an answer's last token could. (`axum::serve`, used
/// before, left Nagle on.)
pub async fn serve(listener: TcpListener) -> crate::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(MAX_H2_STREAMS);
    let router = router();
    loop {
        let (tcp, _peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors: the run is over its limit; say so and go on.
            Err(e) => {
                eprintln!("mock_upstream: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            eprintln!("mock_upstream: cannot set TCP_NODELAY: {e}");
        }
        let connection =
            builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router.clone())).into_owned();
        tokio::spawn(async move {
            // A client that resets or goes away is not the mock's business.
            let _ = connection.await;
        });
    }
}

/// Open (`true`) lets gated answers start.
static GATE: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::Sender::new(false));

async fn tool() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// The last user message and how many tool results follow it.
fn progress(body: &Value) -> (String, u32) {
    let messages = body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some(index) = messages.iter().rposition(|m| m["role"] == "user") else { return (String::new(), 0) };
    let text = match &messages[index]["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    };
    let results = messages[index + 1..].iter().filter(|m| m["role"] == "tool").count();
    (text, results as u32)
}

static CALLS: AtomicU64 = AtomicU64::new(0);

async fn complete(Json(body): Json<Value>) -> Response {
    if body["stream"] != json!(true) {
        let error = json!({"error": {"message": "the benchmark mock only streams"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let (message, results) = progress(&body);
    let order = Order::parse(&message);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let frames = if results < order.tools { tool_call(call) } else { text(order.tokens) };
    let (first, pace, gate) = (order.first, order.pace, order.gate && results >= order.tools);
    let paced = futures::stream::unfold((frames.into_iter(), 0usize), move |(mut frames, i)| async move {
        let frame = frames.next()?;
        if i == 0 && gate {
            let _ = GATE.subscribe().wait_for(|open| *open).await;
        }
        // Only text tokens are paced; the closing chunks follow the last token.
        let pause = if i == 0 {
            first
        } else if i < order.tokens as usize {
            pace
        } else {
            Duration::ZERO
        };
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        Some((Ok::<_, Infallible>(frame), (frames, i + 1)))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(paced))
        .expect("a static response")
}

fn chunk(delta: Value, finish: Option<&str>) -> Bytes {
    sse(&json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000u64,
        "model": "bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn closing(finish: &str, completion_tokens: u32) -> [Bytes; 3] {
    let usage = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000u64,
        "model": "bench", "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens, "total_tokens": 10 + completion_tokens}});
    [chunk(json!({}), Some(finish)), sse(&usage), Bytes::from_static(b"data: [DONE]\n\n")]
}

fn text(tokens: u32) -> Vec<Bytes> {
    let mut frames: Vec<Bytes> = (1..=tokens)
        .map(|i| {
            let mut delta = json!({"content": Order::token(i)});
            if i == 1 {
                delta["role"] = json!("assistant");
            }
            chunk(delta, None)
        })
        .collect();
    frames.extend(closing("stop", tokens));
    frames
}

fn tool_call(call: u64) -> Vec<Bytes> {
    let open = json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_{call}"), "type": "function",
        "function": {"name": "lookup", "arguments": ""}}]});
    let args = json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"id\":\"1\"}"}}]});
    let mut frames = vec![chunk(open, None), chunk(args, None)];
    frames.extend(closing("tool_calls", 3));
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_round_trips_through_its_message() {
        let order =
            Order { tokens: 7, pace: Duration::from_millis(50), first: Duration::from_millis(3), tools: 1, gate: true };
        assert_eq!(Order::parse(&order.message()), order);
        assert_eq!(Order::parse("hello").tokens, 20);
    }
}
