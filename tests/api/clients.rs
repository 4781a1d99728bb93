//! The real clients against running replicas: `@ag-ui/client`'s
//! `HttpAgent` on `/v1/ag-ui` here, the npm `ai` package's chat client
//! (ai@6 and ai@7) in `ai_sdk_clients.rs`, both driven by the scripts in
//! `clients/` (`scripts/test` installs their pinned packages with
//! `npm ci`, through `scripts/ensure-clients.sh`). Each client parses and
//! checks every frame with its own schema and ordering rules, so a stream
//! it accepts is one a real frontend accepts. Bad chat requests of both
//! dialects are here too.

use std::{path::PathBuf, process::Stdio, time::Duration};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::assert_error,
    orchestrator::{World, world},
    support::mock_upstream::Reply,
};

/// How long one client script may take.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `clients/<script>` against `url` with `token` and `input`; returns
/// whether it exited 0, and its JSON output.
pub async fn run_client(script: &str, url: &str, token: &str, input: &Value) -> (bool, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    assert!(
        dir.join("node_modules").is_dir(),
        "the npm clients are not installed: run scripts/test, or scripts/ensure-clients.sh"
    );
    let child = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .arg(url)
        .arg(input.to_string())
        .env("SWITCHBOARD_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let output =
        tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output()).await.expect("the client finishes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{script} printed no JSON ({e}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    });
    if !output.status.success() {
        eprintln!("{script} stderr: {}", String::from_utf8_lossy(&output.stderr));
    }
    (output.status.success(), json)
}

async fn ag_ui(w: &World, on: usize, script: &Value) -> (bool, Value) {
    run_client("ag-ui-run.mjs", &w.apps[on].url("/v1/ag-ui"), &w.token, script).await
}

fn event_types(run: &Value) -> Vec<&str> {
    run["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn the_ag_ui_client_runs_a_thread_through_a_frontend_tool_and_an_approval_on_two_replicas() {
    let w = world(2, |_| {}).await;
    let thread = format!("thread-{}", uuid::Uuid::new_v4().simple());
    let tools = json!([{"name": "render_chart", "description": "Draw a chart",
        "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}}]);
    w.upstream.push(Reply::new().text(["Drawing."]).tool_call(
        "call_c",
        "render_chart",
        [r#"{"metric":"#, r#""refunds"}"#],
    ));
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded order 9."]).usage(40, 5));
    let script = json!({"threadId": thread, "tools": tools, "forwardedProps": {"model": "mock"}, "steps": [
        {"message": "chart refunds, then refund order 9"},
        {"toolResults": {"render_chart": "chart drawn"}},
        {"resume": {"approved": true}},
    ]});
    let (ok, out) = ag_ui(&w, 0, &script).await;
    assert!(ok, "{out}");
    assert_eq!(out["warnings"], json!([]), "the client dropped or stripped nothing");
    let runs = out["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(
        event_types(&runs[0]),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    assert_eq!((runs[0]["outcome"].as_str(), &runs[0]["pendingToolCallIds"]), (Some("success"), &json!(["call_c"])));
    assert_eq!(runs[1]["outcome"], "interrupt");
    assert_eq!(runs[1]["interrupts"][0]["toolCallId"], "call_r");
    assert_eq!(runs[2]["outcome"], "success");
    assert!(event_types(&runs[2]).contains(&"TOOL_CALL_RESULT"));
    assert_eq!(w.tools.calls("refund"), 1);
    // The client's history: its own tool message for the frontend call, the
    // server's result for the approved one, one assistant message per call.
    let messages = out["messages"].as_array().unwrap();
    let tool_results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").map(|m| m["toolCallId"].as_str().unwrap()).collect();
    assert_eq!(tool_results, ["call_c", "call_r"]);
    assert_eq!(messages.last().unwrap()["content"], "Refunded order 9.");

    // The thread goes on from replica B.
    w.upstream.push(Reply::new().text(["You're welcome."]));
    let script = json!({"threadId": thread, "tools": tools, "forwardedProps": {"model": "mock"},
        "messages": messages, "steps": [{"message": "thanks"}]});
    let (ok, out) = ag_ui(&w, 1, &script).await;
    assert!(ok, "{out}");
    assert_eq!(out["messages"].as_array().unwrap().last().unwrap()["content"], "You're welcome.");
    let sent = w.upstream.requests().last().unwrap().body.clone();
    let history = sent["messages"].as_array().unwrap();
    assert!(history.iter().any(|m| m["content"] == "Refunded order 9."), "the model has the thread's history");
}

#[tokio::test]
async fn a_native_session_replays_in_the_ai_sdk_and_ag_ui_framing() {
    // ?format=ai-sdk and ?format=ag-ui on GET events: the framing their clients read.
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["Looking."]).tool_call("call_l", "lookup", [r#"{"id":"1"}"#]));
    w.upstream.push(Reply::new().text(["Found."]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "look up 1").await.rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    let replay = w.apps[0].get(&format!("/v1/sessions/{id}/events?format=ai-sdk"), Some(&w.token)).await;
    assert_eq!(replay.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let body = replay.text().await.unwrap();
    assert!(body.starts_with("data: {"), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let replay = w.apps[0].get(&format!("/v1/sessions/{id}/events?format=ag-ui"), Some(&w.token)).await;
    let body = replay.text().await.unwrap();
    let events: Vec<Value> =
        body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(events.first().unwrap()["type"], "RUN_STARTED");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(events[0]["runId"], format!("{id}-1"));
}

#[tokio::test]
async fn bad_chat_requests_get_clear_errors_and_change_nothing() {
    let w = world(1, |_| {}).await;
    let (app, token) = (&w.apps[0], w.token.as_str());
    let user = |text: &str| json!({"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]});
    let chat = |body: Value| async move { app.post_json("/v1/ai-sdk/chat", Some(token), &body).await };
    let refused = chat(json!({"id": "no spaces", "messages": [user("hi")]})).await;
    assert_error(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed").await;
    let refused = chat(json!({"id": "c1", "messages": "hi"})).await;
    let body = assert_error(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("messages"), "{body}");
    // Nothing to regenerate in a chat that does not exist (as in one the
    // caller may not see).
    let refused = chat(json!({"id": "c1", "messages": [user("hi")], "trigger": "regenerate-message"})).await;
    assert_error(refused, StatusCode::NOT_FOUND, "not_found").await;
    let versioned = app.client.post(app.url("/v1/ai-sdk/chat")).bearer_auth(token).header("x-ai-sdk-version", "seven");
    let refused = versioned.json(&json!({"id": "c1", "messages": [user("hi")]})).send().await.unwrap();
    let body = assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("x-ai-sdk-version"), "{body}");
    let refused = chat(json!({"id": "c1", "messages": [user("hi")], "model": "gpt-9"})).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "unknown_model").await;
    let refused = chat(json!({"id": "c1", "messages": []})).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    let unknown = app.get("/v1/ai-sdk/chat/never-seen/stream", Some(&w.token)).await;
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found").await;

    let run = |body: Value| async move { app.post_json("/v1/ag-ui", Some(token), &body).await };
    let refused = run(json!({"threadId": "t/1", "runId": "r", "messages": []})).await;
    assert_error(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed").await;
    let refused = run(json!({"runId": "r", "messages": []})).await;
    let body = assert_error(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("threadId"), "{body}");
    let refused =
        run(json!({"threadId": "t1", "runId": "r", "messages": [{"role": "assistant", "content": "hi"}]})).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;

    let views = app.get("/v1/sessions/c1", Some(&w.token)).await;
    assert_eq!(views.status(), StatusCode::NOT_FOUND, "no refused request created a session");
    assert_eq!(w.upstream.calls(), 0);
}

#[tokio::test]
async fn a_paused_chat_waits_for_its_answers_and_is_nobody_elses() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    let user = |text: &str| json!({"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]});
    let body = json!({"id": "paused-chat", "messages": [user("refund 9")], "model": "mock"});
    let paused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &body).await.text().await.unwrap();
    assert!(paused.contains("tool-approval-request"), "{paused}");

    // A new message while the approval is open: 409, naming what it waits for.
    let body = json!({"id": "paused-chat", "messages": [user("refund 9"), user("hello?")], "model": "mock"});
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &body).await;
    let error = assert_error(refused, StatusCode::CONFLICT, "conflict").await;
    assert!(error["error"]["message"].as_str().unwrap().contains("call_r"), "{error}");

    // Another subject of the tenant cannot take the id; another tenant's id
    // space is its own.
    let bob = app.token("acme", "bob");
    let theirs = app.post_json("/v1/ai-sdk/chat", Some(&bob), &body).await;
    assert_error(theirs, StatusCode::NOT_FOUND, "not_found").await;
    let stream = app.get("/v1/ai-sdk/chat/paused-chat/stream", Some(&bob)).await;
    assert_error(stream, StatusCode::NOT_FOUND, "not_found").await;
    let ag = json!({"threadId": "paused-chat", "runId": "r", "messages": [{"role": "user", "content": "hi"}]});
    assert_error(app.post_json("/v1/ag-ui", Some(&bob), &ag).await, StatusCode::NOT_FOUND, "not_found").await;
    // Another tenant's same id is its own chat, apart from this one.
    let gary = app.token("globex", "gary");
    let body = json!({"id": "paused-chat", "messages": [user("hi")], "model": "demo"});
    let theirs = app.post_json("/v1/ai-sdk/chat", Some(&gary), &body).await;
    assert_eq!(theirs.status(), StatusCode::OK);
    assert!(theirs.text().await.unwrap().contains(r#""finishReason":"stop""#));
    let view: Value = app.get("/v1/sessions/paused-chat", Some(&gary)).await.json().await.unwrap();
    assert_eq!((view["status"].as_str(), view["model"].as_str()), (Some("completed"), Some("demo")));
    // Gary's finished chat gets nothing new to answer: a conflict with its state.
    let answer = json!({"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "Hello."}]});
    let body = json!({"id": "paused-chat", "messages": [user("hi"), answer], "model": "demo"});
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&gary), &body).await;
    assert_error(refused, StatusCode::CONFLICT, "conflict").await;

    let view: Value = app.get("/v1/sessions/paused-chat", Some(&w.token)).await.json().await.unwrap();
    assert_eq!(view["status"], "awaiting_client", "unchanged by all of that");
    assert_eq!(view["model"], "mock");
    assert_eq!(w.upstream.calls(), 1);
}
