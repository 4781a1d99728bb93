//! zot's command protocol over HTTP (`POST /v1/zot`), as a zot harness
//! reads it: `response` lines and seed 004's event lines in zot's order,
//! against a scripted model, the counting tool server and real Redis.
//!
//! Golden transcripts (`tests/api/golden/zot_*.ndjson`) hold the answers'
//! lines with the session id and times replaced (`support/raw_sse.rs`).
//! Their scripted texts and arguments come in one chunk each: the writer
//! may merge adjacent deltas when commits queue, which would change the
//! lines but not what they say;
//! regenerate them with `UPDATE_GOLDEN=1 cargo test --test api zot` and
//! review the diff against seed 004 and zot's docs/rpc.md.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, assert_error, store_snapshot},
    orchestrator::{World, world},
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise},
    },
};

/// `POST /v1/zot` on replica `on` with `commands`, for `session` (or a new one).
pub async fn post(w: &World, on: usize, session: Option<&str>, commands: &[Value]) -> Response {
    let app = &w.apps[on];
    let body: String = commands.iter().map(|c| format!("{c}\n")).collect();
    let url = match session {
        Some(id) => app.url(&format!("/v1/zot?session={id}&model=mock")),
        None => app.url("/v1/zot?model=mock"),
    };
    app.client.post(url).bearer_auth(&w.token).body(body).send().await.unwrap()
}

/// The answer's session (none when no command needed one) and its lines,
/// read to the end, checked against the golden transcript `golden` when given.
async fn read(response: Response, golden: Option<&str>) -> (String, Vec<Value>) {
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let session = response.headers().get("x-session-id").map_or_else(String::new, |v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    if let Some(golden) = golden {
        assert_golden(golden, &normalise(&text, &[(session.as_str(), "<session_id>")]));
    }
    (session, lines(&text))
}

fn lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).filter(|l: &Value| l["type"] != "heartbeat").collect()
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines.iter().map(|l| l["type"].as_str().unwrap()).collect()
}

fn prompt(id: &str, message: &str) -> Value {
    json!({"id": id, "type": "prompt", "message": message})
}

#[tokio::test]
async fn a_text_prompt_answers_as_zot_rpc_does() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["Hello there."]).usage(12, 2));
    let commands =
        [json!({"id": "1", "type": "ping"}), prompt("2", "say hello"), json!({"id": "3", "type": "get_state"})];
    let (session, lines) = read(post(&w, 0, None, &commands).await, Some("zot_text.ndjson")).await;
    assert_eq!(
        types(&lines),
        [
            "response",
            "response",
            "user_message",
            "turn_start",
            "assistant_start",
            "text_delta",
            "usage",
            "assistant_message",
            "turn_end",
            "done",
            "response"
        ]
    );
    assert_eq!(
        lines[0],
        json!({"type": "response", "id": "1", "command": "ping", "success": true, "data": {"pong": true}})
    );
    assert_eq!(lines[1]["data"]["started"], true);
    assert_eq!(lines[2]["content"], json!([{"type": "text", "text": "say hello"}]));
    assert_eq!(lines[8]["stop"], "end");
    let state = &lines[10]["data"];
    assert_eq!(
        (state["session_id"].as_str(), state["message_count"].as_u64(), state["busy"].as_bool()),
        (Some(session.as_str()), Some(2), Some(false))
    );
    assert_eq!(state["usage"]["input"], 12);
}

#[tokio::test]
async fn a_tool_prompt_announces_the_call_then_its_result() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"42"}"#]));
    w.upstream.push(Reply::new().text(["Order 42 shipped."]));
    let (_, lines) = read(post(&w, 0, None, &[prompt("1", "where is order 42?")]).await, Some("zot_tool.ndjson")).await;
    // An HTTP tool has no live output, so no `tool_progress` (bash streams
    // its chunks as `tool_progress`: tests/api/workspace_tools.rs).
    assert_eq!(
        types(&lines)[..15],
        [
            "response",
            "user_message",
            "turn_start",
            "assistant_start",
            "tool_use_start",
            "tool_use_args",
            "tool_use_end",
            "usage",
            "assistant_message",
            "tool_call",
            "turn_end",
            "tool_result",
            "turn_start",
            "assistant_start",
            "text_delta"
        ]
    );
    assert_eq!(lines[9]["args"], json!({"id": "42"}));
    assert_eq!(lines[10]["stop"], "tool_use");
    assert_eq!(lines[11]["is_error"], false);
    assert_eq!(lines[11]["content"][0]["text"], json!({"echo": {"id": "42"}, "tool": "lookup"}).to_string());
    assert_eq!(lines[12]["step"], 2);
    assert_eq!(types(&lines).last(), Some(&"done"));
    assert_eq!(w.tools.calls("lookup"), 1);
}

#[tokio::test]
async fn an_abort_sent_to_another_replica_ends_the_turn_aborted_then_done() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().text(["Thinking ", "about it"]).stall_after(1));
    let response = post(&w, 0, None, &[prompt("1", "think forever")]).await;
    let session = response.headers()["x-session-id"].to_str().unwrap().to_string();
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while !text.contains("text_delta") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut body)).await;
        text.push_str(std::str::from_utf8(&chunk.unwrap().unwrap().unwrap()).unwrap());
    }
    let (_, aborted) = read(post(&w, 1, Some(&session), &[json!({"id": "2", "type": "abort"})]).await, None).await;
    assert_eq!(aborted, [json!({"type": "response", "id": "2", "command": "abort", "success": true})]);
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut body)).await
    {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    assert_golden("zot_abort.ndjson", &normalise(&text, &[(session.as_str(), "<session_id>")]));
    let lines = lines(&text);
    let tail: Vec<&Value> = lines.iter().rev().take(2).collect();
    assert_eq!((tail[1]["type"].as_str(), tail[1]["stop"].as_str()), (Some("turn_end"), Some("aborted")));
    assert_eq!(tail[0]["type"], "done");
}

#[tokio::test]
async fn a_turn_that_fails_before_any_output_has_its_step_then_the_error_then_done() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::http_error(401, r#"{"error":{"message":"invalid key"}}"#));
    let (_, lines) = read(post(&w, 0, None, &[prompt("1", "hi")]).await, Some("zot_error.ndjson")).await;
    assert_eq!(types(&lines), ["response", "user_message", "turn_start", "turn_end", "error", "done"]);
    assert_eq!(lines[2]["step"], 1);
    assert_eq!(lines[3]["stop"], "error");
    assert_eq!(lines[3]["error"], lines[4]["message"]);
}

#[tokio::test]
async fn compact_summarises_the_conversation_and_ends_with_compact_done() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["Paris is the capital."]));
    let (session, _) = read(post(&w, 0, None, &[prompt("1", "capital of France?")]).await, None).await;
    w.upstream.push(Reply::new().text(["<analysis>France: Paris.</analysis>"]));
    let compact = [json!({"id": "2", "type": "compact"}), json!({"id": "3", "type": "get_messages"})];
    let (_, lines) = read(post(&w, 0, Some(&session), &compact).await, Some("zot_compact.ndjson")).await;
    assert_eq!(types(&lines), ["response", "compact_done", "done", "response"]);
    assert_eq!(lines[1]["summary"], "<analysis>France: Paris.</analysis>");
    let messages = lines[3]["data"]["messages"].as_array().unwrap();
    let text: String = messages
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().iter())
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert!(text.contains("France: Paris."), "{messages:?}");
    let sent = w.model_request(1)["messages"].to_string();
    assert!(sent.contains("capital of France?"), "the summary call saw the conversation");
}

#[tokio::test]
async fn commands_read_and_change_the_session_between_turns_only() {
    let w = world(1, |_| {}).await;
    let commands = [
        json!({"id": "1", "type": "hello", "token": "ignored"}),
        json!({"id": "2", "type": "get_models"}),
        json!({"id": "3", "type": "set_model", "model": "claude"}),
        json!({"id": "4", "type": "set_model", "model": "gpt-9"}),
        json!({"id": "5", "type": "set_reasoning", "reasoning": "high"}),
        json!({"id": "6", "type": "set_reasoning", "reasoning": "extreme"}),
        json!({"id": "7", "type": "get_state"}),
        json!({"id": "8", "type": "levitate"}),
    ];
    let (session, lines) = read(post(&w, 0, None, &commands).await, None).await;
    assert_eq!(lines[0]["data"]["protocol_version"], 1);
    assert_eq!(lines[0]["data"]["model"], "mock");
    assert_eq!(lines[0]["data"]["provider"], "openai");
    let models: Vec<&str> =
        lines[1]["data"]["models"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(models.contains(&"mock") && models.contains(&"claude"), "{models:?}");
    assert_eq!(lines[2]["success"], true);
    assert_eq!((lines[3]["success"].as_bool(), lines[3]["error"].as_str().is_some()), (Some(false), true));
    assert_eq!(lines[4]["success"], true);
    assert_eq!(lines[5]["success"], false);
    assert_eq!(lines[6]["data"]["model"], "claude");
    assert_eq!(
        lines[7],
        json!({"type": "response", "id": "8", "command": "levitate", "success": false,
        "error": "unknown command type \"levitate\""})
    );

    // The level reaches an OpenAI-compatible model as reasoning_effort.
    let back = [json!({"id": "9", "type": "set_model", "model": "mock"})];
    read(post(&w, 0, Some(&session), &back).await, None).await;
    w.upstream.push(Reply::new().text(["ok"]));
    read(post(&w, 0, Some(&session), &[prompt("10", "think hard")]).await, None).await;
    assert_eq!(w.model_request(0)["reasoning_effort"], "high");

    // Busy while a turn runs; clear between turns.
    w.upstream.push(Reply::new().text(["slow"]).stall_after(1));
    let running = post(&w, 0, Some(&session), &[prompt("11", "take your time")]).await;
    w.upstream.wait_for_calls(2, Duration::from_secs(10)).await;
    let busy = [json!({"id": "12", "type": "clear"}), prompt("13", "again")];
    let (_, refused) = read(post(&w, 0, Some(&session), &busy).await, None).await;
    for line in &refused {
        assert_eq!(line["success"], false, "{line}");
        assert!(line["error"].as_str().unwrap().starts_with("agent is busy"), "{line}");
    }
    read(post(&w, 0, Some(&session), &[json!({"id": "14", "type": "abort"})]).await, None).await;
    let _ = running.text().await;
    let (_, cleared) = read(
        post(&w, 0, Some(&session), &[json!({"id": "15", "type": "clear"}), json!({"id": "16", "type": "get_state"})])
            .await,
        None,
    )
    .await;
    assert_eq!(cleared[0]["success"], true);
    assert_eq!(cleared[1]["data"]["message_count"], 0);
}

#[tokio::test]
async fn a_dropped_answer_is_rejoined_by_seq_on_the_other_replica_each_line_once() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().text(["one ", "two ", "three ", "four"]).chunk_delay(Duration::from_millis(30)));
    let response = post(&w, 0, None, &[prompt("1", "count")]).await;
    let session = response.headers()["x-session-id"].to_str().unwrap().to_string();
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while text.matches("text_delta").count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut body)).await;
        text.push_str(std::str::from_utf8(&chunk.unwrap().unwrap().unwrap()).unwrap());
    }
    drop(body);
    let seen: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let last = seen.iter().filter_map(|l| l["seq"].as_u64()).max().unwrap();
    let url = w.apps[1].url(&format!("/v1/sessions/{session}/events?format=zot&after={last}"));
    let rest = w.apps[1].client.get(url).bearer_auth(&w.token).send().await.unwrap().text().await.unwrap();
    let rest = lines(&rest);
    assert!(rest.iter().all(|l| l["seq"].as_u64().unwrap() > last), "nothing repeated");
    let deltas: String =
        seen.iter().chain(&rest).filter(|l| l["type"] == "text_delta").map(|l| l["delta"].as_str().unwrap()).collect();
    assert_eq!(deltas, "one two three four");
    assert_eq!(types(&rest).last(), Some(&"done"));
}

#[tokio::test]
async fn bad_input_gets_a_clear_answer_and_changes_nothing() {
    let w = world(1, |_| {}).await;
    let app: &TestApp = &w.apps[0];
    let before = store_snapshot(app).await;
    let raw = |body: &'static [u8], path: &str| app.client.post(app.url(path)).bearer_auth(&w.token).body(body);
    assert_error(raw(b"", "/v1/zot").send().await.unwrap(), StatusCode::BAD_REQUEST, "invalid_request").await;
    assert_error(raw(b"\xff\xfe", "/v1/zot").send().await.unwrap(), StatusCode::BAD_REQUEST, "invalid_request").await;
    let many: &'static [u8] = Box::leak("{\"type\":\"ping\"}\n".repeat(65).into_bytes().into_boxed_slice());
    assert_error(raw(many, "/v1/zot").send().await.unwrap(), StatusCode::BAD_REQUEST, "invalid_request").await;
    let mixed = raw(b"{not json\n{\"id\":\"2\"}\n{\"id\":\"3\",\"type\":\"ping\"}", "/v1/zot");
    let (session, answered) = read(mixed.send().await.unwrap(), None).await;
    assert_eq!(session, "", "no command needed a session: none was made");
    assert_eq!(answered[0]["success"], false);
    assert_eq!((answered[1]["id"].as_str(), answered[1]["success"].as_bool()), (Some("2"), Some(false)));
    assert_eq!(answered[2]["data"]["pong"], true);
    assert_error(
        raw(b"{\"type\":\"get_state\"}", "/v1/zot?session=nope").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let anonymous = app.client.post(app.url("/v1/zot")).body("{\"type\":\"ping\"}").send().await.unwrap();
    assert_error(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(store_snapshot(app).await, before, "nothing was stored");

    // Another tenant's session is not there.
    let (session, _) = read(post(&w, 0, None, &[json!({"type": "get_state"})]).await, None).await;
    let globex = app.token("globex", "alice");
    let url = app.url(&format!("/v1/zot?session={session}"));
    let foreign = app.client.post(url).bearer_auth(globex).body("{\"type\":\"clear\"}").send().await.unwrap();
    assert_error(foreign, StatusCode::NOT_FOUND, "not_found").await;
    assert_eq!(w.upstream.calls(), 0);
}
