//! The llm-gateway dialect end to end: `POST /chat` streams, relays answered
//! on another replica, request permissions, subagents, and bad input.
//!
//! Golden transcripts: `tests/api/golden/llm_gateway_*.sse` hold the raw SSE
//! bytes of a scripted conversation, with session ids, relay ids and
//! timestamps replaced by placeholders. After a deliberate change of the
//! wire format, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test --test api golden`, and review the diff by
//! hand against the seed (../shared/seeds/002_*.txt) before checking it in.
//! The helpers for raw streams and golden files are shared with
//! `native_api.rs`.

use std::{collections::BTreeSet, path::PathBuf};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::TestApp,
    orchestrator::{World, world},
    sse::{Frame, STEP_TIMEOUT},
    support::mock_upstream::Reply,
};

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

#[tokio::test]
async fn a_chat_with_text_a_permitted_a_denied_and_a_relayed_tool_matches_the_golden_transcript() {
    let w = world(2, |_| {}).await;
    w.upstream.push(
        Reply::new()
            .text(["Checking order 42 first."])
            .tool_call("call_lookup", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_wipe", "wipe", ["{}"])
            .tool_call("call_refund", "refund", [r#"{"order":"42"}"#])
            .usage(120, 30),
    );
    w.upstream.push(Reply::new().text(["Order 42 is refunded; I may not wipe the cache."]).usage(200, 12));
    let messages = json!([
        user("Hi"),
        {"role": "assistant", "content": "Hello! How can I help?"},
        user("Check order 42, wipe the cache, and refund order 42."),
    ]);
    let mut stream = chat(&w, 0, &chat_body("mock", messages, json!({}))).await;
    let relay = stream.until_event("relay").await;
    let session_id = stream.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    let relay_id = relay.data["id"].as_str().unwrap().to_string();
    assert_eq!(w.tools.calls("refund"), 0, "nothing runs before the decision");

    let decided = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(decided.status(), StatusCode::OK);
    assert_eq!(decided.json::<Value>().await.unwrap(), json!({"success": true}));
    let text = stream.rest().await;

    let normalised = normalise(&text, &[(&session_id, "<session>"), (&relay_id, "<relay>")]);
    assert_golden("llm_gateway_chat.sse", &normalised);
    assert_eq!((w.tools.calls("lookup"), w.tools.calls("wipe"), w.tools.calls("refund")), (1, 0, 1));
    // The earlier messages reached the model as history.
    let sent = &w.model_request(0)["messages"];
    assert!(sent.as_array().unwrap().iter().any(|m| m["content"] == "Hello! How can I help?"), "{sent}");
}

#[tokio::test]
async fn a_relay_of_a_stream_on_replica_a_is_answered_on_replica_b_once_and_only_by_its_tenant() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let mut on_a = chat(&w, 0, &chat_body("mock", json!([user("refund order 9")]), json!({}))).await;
    let relay = on_a.until_event("relay").await;
    let session_id = on_a.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    assert_eq!(relay.data["kind"], "permission");
    assert_eq!(relay.data["toolCallId"], "call_r");
    assert_eq!(relay.data["tool"], "refund");
    assert_eq!(relay.data["params"], json!({"order": "9"}));
    assert_eq!(relay.data["runId"], format!("{session_id}:1"));
    let relay_id = relay.data["id"].as_str().unwrap().to_string();

    // While it waits: another tenant sees neither the session nor the relay.
    let globex = w.apps[1].token("globex", "gary");
    let theirs = answer_relay(&w.apps[1], &globex, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(assert_gateway_error(theirs, StatusCode::NOT_FOUND).await, "Session not found");
    let own_session = w.apps[1].create_session(&globex, "demo").await;
    let theirs = answer_relay(&w.apps[1], &globex, &relay_id, &approve(&own_session, true)).await;
    assert_eq!(assert_gateway_error(theirs, StatusCode::NOT_FOUND).await, "Relay not found");
    // A wrong session id, an unknown relay.
    let wrong = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&uuid::Uuid::now_v7().to_string(), true)).await;
    assert_eq!(assert_gateway_error(wrong, StatusCode::NOT_FOUND).await, "Session not found");
    let unknown = answer_relay(&w.apps[1], &w.token, "relay_nope", &approve(&session_id, true)).await;
    assert_eq!(assert_gateway_error(unknown, StatusCode::NOT_FOUND).await, "Relay not found");
    assert_eq!(w.tools.calls("refund"), 0);

    let decided = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(decided.status(), StatusCode::OK);
    on_a.rest().await;
    let rest: Vec<Frame> = on_a.frames().into_iter().skip_while(|f| f.event != "relay").skip(1).collect();
    assert_eq!(&kinds(&rest)[..2], ["tool_call", "tool_result"]);
    assert_eq!(rest[0].data["id"], "call_r");
    assert_eq!(rest.last().unwrap().event, "harness_end");
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    assert_eq!(w.tools.calls("refund"), 1);

    let again = answer_relay(&w.apps[0], &w.token, &relay_id, &approve(&session_id, false)).await;
    assert_gateway_error(again, StatusCode::CONFLICT).await;
}

#[tokio::test]
async fn an_allowlist_glob_allows_matching_params_relays_the_rest_and_deny_names_a_tool_call() {
    let w = world(1, |_| {}).await;
    w.upstream.push(
        Reply::new()
            .tool_call("call_a", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_b", "lookup", [r#"{"id":"7"}"#])
            .tool_call("call_deny", "lookup", [r#"{"id":"43"}"#]),
    );
    w.upstream.push(Reply::new().text(["Done."]));
    let permissions = json!({"permissions": {
        "allowlist": [{"tool": "lookup", "params": {"id": "4*"}}],
        "deny": [{"toolCallId": "call_deny", "reason": "not that one"}],
    }});
    let mut stream = chat(&w, 0, &chat_body("mock", json!([user("look up 42, 7 and 43")]), permissions)).await;
    let relay = stream.until_event("relay").await;
    assert_eq!(relay.data["toolCallId"], "call_b", "7 does not match 4*");
    let session_id = stream.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    let denial = json!({"sessionId": session_id, "response": {"approved": false, "reason": "no 7"}});
    let decided = answer_relay(&w.apps[0], &w.token, relay.data["id"].as_str().unwrap(), &denial).await;
    assert_eq!(decided.status(), StatusCode::OK);
    stream.rest().await;
    let frames = stream.frames();

    let calls: Vec<&Value> = frames.iter().filter(|f| f.event == "tool_call").map(|f| &f.data["id"]).collect();
    assert_eq!(calls, [&json!("call_a")]);
    let output =
        |id: &str| frames.iter().find(|f| f.event == "tool_result" && f.data["id"] == id).unwrap().data.clone();
    assert_eq!(output("call_a")["output"], json!({"tool": "lookup", "echo": {"id": "42"}}));
    assert_eq!(output("call_b")["output"], json!({"status": "denied", "reason": "no 7"}));
    assert_eq!(output("call_deny")["output"], json!({"status": "denied", "reason": "not that one"}));
    assert_eq!(w.tools.calls("lookup"), 1);
}

#[tokio::test]
async fn max_iterations_ends_the_run_with_harness_end_max_iterations() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("c1", "lookup", [r#"{"id":"1"}"#]));
    let body = chat_body("mock", json!([user("loop")]), json!({"maxIterations": 1}));
    let mut stream = chat(&w, 0, &body).await;
    stream.rest().await;
    let frames = stream.frames();
    assert_eq!(frames[1].event, "harness_start");
    assert_eq!(frames[1].data["maxIterations"], 1);
    let end = frames.last().unwrap();
    assert_eq!(end.event, "harness_end");
    assert_eq!(end.data["reason"], "max_iterations");
    assert_eq!(end.data["iterations"], 1);
    assert_eq!(w.upstream.calls(), 1);
}

#[tokio::test]
async fn subagent_events_carry_the_parent_tool_call_as_parent_id() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_main", "agent", [r#"{"task":"look up 42"}"#]));
    w.upstream.push(Reply::new().text(["sub: 42 is fine"]));
    w.upstream.push(Reply::new().text(["All good."]));
    let mut stream = chat(&w, 0, &chat_body("mock", json!([user("use a helper")]), json!({}))).await;
    stream.rest().await;
    let frames = stream.frames();
    let session_id = frames[0].data["sessionId"].as_str().unwrap();

    let sub: Vec<&Frame> = frames.iter().filter(|f| f.data.get("parentId").is_some()).collect();
    assert_eq!(kinds_of(&sub), ["harness_start", "text"]);
    assert!(sub.iter().all(|f| f.data["parentId"] == "call_main"));
    assert_eq!(sub[0].data["depth"], 1);
    assert_eq!(sub[1].data["content"], "sub: 42 is fine");
    let sub_agent = &sub[0].data["agentId"];
    assert!(sub_agent.as_str().is_some_and(|a| a != "main") && sub[1].data["agentId"] == *sub_agent);
    let result = frames.iter().find(|f| f.event == "tool_result").unwrap();
    assert_eq!((&result.data["agentId"], &result.data["output"]), (&json!("main"), &json!("sub: 42 is fine")));
    // Every event after `connected` carries the run and an agent.
    for frame in &frames[1..] {
        assert_eq!(frame.data["runId"], format!("{session_id}:1"), "{frame:?}");
        assert_eq!(frame.data["type"], frame.event.as_str());
        assert!(frame.data["agentId"].is_string(), "{frame:?}");
    }
    assert_eq!(frames.last().unwrap().data["reason"], "final");
}

#[tokio::test]
async fn bad_input_on_chat_and_relay_is_a_gateway_error_and_stores_and_calls_nothing() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    let keys_before = store_keys(app).await;
    let raw = |path: &str, body: &'static str| {
        app.client.post(app.url(path)).bearer_auth(&w.token).header("content-type", "application/json").body(body)
    };
    let one = json!([user("hi")]);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"model": "mock"}), "`messages` is required"),
        (json!({"model": "mock", "messages": []}), "must not be empty"),
        (json!({"model": "mock", "messages": "hi"}), "`messages`: invalid type"),
        (json!({"model": "mock", "messages": [user("hi"), {"role": "assistant", "content": "x"}]}), "from the user"),
        (json!({"model": "nope", "messages": one}), "allowed: claude, demo, mock, resumable"),
        (json!({"model": "mock", "messages": one, "mode": "rlm"}), "not supported"),
        (json!({"model": "mock", "messages": one, "permissions": {"deny": [{"reason": "x"}]}}), "toolCallId"),
        (json!({"model": "mock", "messages": one, "maxIterations": 0}), "at least 1"),
    ];
    for (body, expected) in cases {
        let response = app.post_json("/chat", Some(&w.token), &body).await;
        let message = assert_gateway_error(response, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let malformed = raw("/chat", "{\"model\": ").send().await.unwrap();
    assert!(assert_gateway_error(malformed, StatusCode::BAD_REQUEST).await.contains("invalid request body"));
    let anonymous = app.post_json("/chat", None, &json!({"model": "mock", "messages": one})).await;
    assert_gateway_error(anonymous, StatusCode::UNAUTHORIZED).await;

    // Each message names the field.
    let relay_cases = [
        (json!({"response": {"approved": true}}), "missing field `sessionId`"),
        (json!({"sessionId": "s"}), "missing field `response`"),
        (json!({"sessionId": "s", "response": {}}), "`response`: missing field `approved`"),
        (json!({"sessionId": "s", "response": {"approved": "yes"}}), "`response.approved`: invalid type"),
        (json!({"sessionId": 5, "response": {"approved": true}}), "`sessionId`: invalid type"),
    ];
    for (body, expected) in relay_cases {
        let response = answer_relay(app, &w.token, "relay_x", &body).await;
        let message = assert_gateway_error(response, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let malformed = raw("/chat/relay/relay_x", "{").send().await.unwrap();
    assert_gateway_error(malformed, StatusCode::BAD_REQUEST).await;
    let unknown = answer_relay(app, &w.token, "relay_x", &approve("no-such-session", true)).await;
    assert_eq!(assert_gateway_error(unknown, StatusCode::NOT_FOUND).await, "Session not found");

    assert_eq!(w.upstream.calls(), 0);
    assert_eq!(store_keys(app).await, keys_before, "bad requests store nothing");
}

fn kinds(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}

fn kinds_of<'a>(frames: &[&'a Frame]) -> Vec<&'a str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}

// Shared with `native_api.rs`: raw streams, golden files, the store's keys.

/// A response's SSE read as raw text, for golden transcripts; frames are
/// parsed from it for assertions.
pub struct RawSse {
    response: reqwest::Response,
    bytes: Vec<u8>,
}

impl RawSse {
    pub fn new(response: reqwest::Response) -> Self {
        assert!(response.status().is_success(), "expected a stream, got {}", response.status());
        Self { response, bytes: Vec::new() }
    }

    /// Reads one more chunk; `false` when the stream ended.
    async fn read(&mut self) -> bool {
        let chunk = tokio::time::timeout(STEP_TIMEOUT, self.response.chunk()).await.expect("a chunk in time");
        match chunk.expect("the stream reads cleanly") {
            Some(bytes) => {
                self.bytes.extend_from_slice(&bytes);
                true
            }
            None => false,
        }
    }

    /// Reads until a whole frame of type `event` has arrived, and returns it.
    pub async fn until_event(&mut self, event: &str) -> Frame {
        loop {
            if let Some(frame) = self.frames().into_iter().find(|f| f.event == event) {
                return frame;
            }
            assert!(self.read().await, "the stream ended before a {event} frame: {}", self.text());
        }
    }

    /// Reads to the end of the stream; returns all the text read.
    pub async fn rest(&mut self) -> String {
        while self.read().await {}
        self.text()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.bytes.clone()).expect("UTF-8 SSE")
    }

    /// The complete frames read so far (comments skipped).
    pub fn frames(&self) -> Vec<Frame> {
        let text = self.text();
        let mut frames = Vec::new();
        let mut blocks: Vec<&str> = text.split("\n\n").collect();
        blocks.pop(); // incomplete (or empty) tail
        for block in blocks {
            let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ").or_else(|| line.strip_prefix("id:")) {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("event: ").or_else(|| line.strip_prefix("event:")) {
                    event = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ").or_else(|| line.strip_prefix("data:")) {
                    data.push_str(v);
                }
            }
            if !data.is_empty() {
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                frames.push(Frame { id, event, data });
            }
        }
        frames
    }
}

/// Replaces run-specific values with placeholders: the given strings, every
/// `"ts":<digits>` and every `"time":"<string>"`. Heartbeat comments are
/// dropped.
pub fn normalise(text: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = text.replace("\r\n", "\n");
    for (from, to) in replacements {
        out = out.replace(from, to);
    }
    let mut timeless = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("\"time\":\"") {
        let (head, tail) = rest.split_at(at + "\"time\":\"".len());
        timeless.push_str(head);
        timeless.push_str("<time>");
        rest = &tail[tail.find('"').unwrap_or(tail.len())..];
    }
    timeless.push_str(rest);
    let out = timeless;
    let mut masked = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("\"ts\":") {
        let (head, tail) = rest.split_at(at + "\"ts\":".len());
        masked.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        masked.push_str(if digits > 0 { "\"<ts>\"" } else { "" });
        rest = &tail[digits..];
    }
    masked.push_str(rest);
    masked.lines().filter(|l| !l.starts_with(':')).map(|l| format!("{l}\n")).collect()
}

/// Compares `actual` with `tests/api/golden/<name>`, or writes it there
/// when `UPDATE_GOLDEN` is set.
pub fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/api/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1 to create it", path.display()));
    if let Some((n, (want, got))) =
        expected.lines().zip(actual.lines()).enumerate().find(|(_, (want, got))| want != got)
    {
        panic!("{name} differs at line {}:\n  expected: {want}\n  actual:   {got}\nwhole actual:\n{actual}", n + 1);
    }
    assert_eq!(expected, actual, "{name} differs in length; whole actual:\n{actual}");
}

/// Every store key of `app`'s prefix (heartbeats aside).
pub async fn store_keys(app: &TestApp) -> BTreeSet<String> {
    crate::helpers::store_snapshot(app).await.into_keys().collect()
}
