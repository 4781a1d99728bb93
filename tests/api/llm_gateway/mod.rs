//! The llm-gateway dialect end to end: `POST /chat` streams, relays
//! answered on another replica, request permissions, subagents and their
//! runs, block ids across a rejoin, `POST /summarize`, a deployment open to
//! anonymous clients, and bad input.
//!
//! Golden transcripts: `tests/api/golden/llm_gateway_*.sse` (see
//! `support/raw_sse.rs` for how they are regenerated); review a diff
//! against docs/protocols.md §2 and docs/llm-gateway-tools.md.

mod anonymous;
mod chat;
mod rlm;
mod runs;
mod summarize;
mod tools;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{helpers::TestApp, orchestrator::World, sse::Frame, support::raw_sse::RawSse};

fn user(content: &str) -> Value {
    json!({"role": "user", "content": content})
}

fn chat_body(model: &str, messages: Value, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": messages});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    body
}

async fn chat(w: &World, on: usize, body: &Value) -> RawSse {
    RawSse::new(w.apps[on].post_json("/chat", Some(&w.token), body).await)
}

async fn answer_relay(app: &TestApp, token: &str, relay_id: &str, body: &Value) -> reqwest::Response {
    app.post_json(&format!("/chat/relay/{relay_id}"), Some(token), body).await
}

fn approve(session_id: &str, approved: bool) -> Value {
    json!({"sessionId": session_id, "response": {"approved": approved}})
}

/// Asserts llm-gateway's error body, `{"error": "<message>"}`, and returns the message.
async fn assert_gateway_error(response: reqwest::Response, status: StatusCode) -> String {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.expect("a JSON error body");
    let message = body["error"].as_str().unwrap_or_else(|| panic!("{{\"error\": string}} expected: {body}"));
    assert!(!message.is_empty());
    message.to_string()
}

/// `GET /v1/sessions/{id}/events?format=llm-gateway` on `app`, after `Last-Event-ID`.
async fn rejoin(app: &TestApp, token: &str, session_id: &str, last_event_id: u64) -> RawSse {
    let url = app.url(&format!("/v1/sessions/{session_id}/events?format=llm-gateway"));
    let request = app.client.get(url).bearer_auth(token).header("last-event-id", last_event_id.to_string());
    RawSse::new(request.send().await.expect("request sent"))
}

/// The session id a stream's `connected` frame names.
fn session_of(stream: &RawSse) -> String {
    stream.frames()[0].data["sessionId"].as_str().expect("a connected frame first").to_string()
}

fn kinds(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}
