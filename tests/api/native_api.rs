//! The native v1 API as a client sees it: golden transcripts of a turn that
//! pauses for a frontend tool and its resume, a stream rejoined on another
//! replica, other dialects over the same session, and bad input on every
//! endpoint.
//!
//! Golden transcripts: `tests/api/golden/native_*.sse`, regenerated with
//! `UPDATE_GOLDEN=1 cargo test --test api golden` (see `support/raw_sse.rs`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, assert_error},
    orchestrator::{World, world},
    sse::{SseReader, seqs},
    support::{
        mock_upstream::Reply,
        raw_sse::{RawSse, assert_golden, normalise, store_keys},
    },
};

/// A session whose turn used `lookup` (allowed) and is complete.
async fn completed_session(w: &World) -> String {
    w.upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"42"}"#]).usage(50, 5));
    w.upstream.push(Reply::new().text(["Order 42 ships today."]).usage(80, 6));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "where is order 42?").await.rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    id
}

/// The user message of the golden conversation.
pub const GOLDEN_ASK: &str = "Check order 42, wipe, chart the CPU.";

/// The scripted golden conversation, ready on replica A: its model first
/// says something and calls `lookup` (allowed), `wipe` (denied) and
/// `render_chart` (a frontend tool in pause mode), then answers once the
/// chart's result is in. Returns the session id.
pub async fn golden_session(w: &World) -> String {
    w.upstream.push(
        Reply::new()
            .text(["On it."])
            .tool_call("call_lookup", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_wipe", "wipe", ["{}"])
            .tool_call("call_chart", "render_chart", [r#"{"metric":"cpu"}"#])
            .usage(120, 30),
    );
    w.upstream.push(Reply::new().text(["Order 42 is fine, the chart is up, and I may not wipe."]).usage(200, 14));
    let frontend =
        json!({"frontend_tools": [{"name": "render_chart", "description": "Draw a chart", "mode": "pause"}]});
    w.session(0, "mock", frontend).await
}

#[tokio::test]
async fn a_turn_that_pauses_for_a_frontend_tool_and_its_resume_match_the_golden_transcripts() {
    let w = world(2, |_| {}).await;
    let id = golden_session(&w).await;

    let mut turn = RawSse::new(w.apps[0].send_message(&w.token, &id, GOLDEN_ASK).await);
    let paused = turn.rest().await;
    assert_golden("native_pause.sse", &normalise(&paused, &[(&id, "<session>")]));
    assert_eq!(turn.frames().last().unwrap().event, "paused");

    // Resumed on the other replica with the client's result.
    let body = json!({"results": [{"tool_call_id": "call_chart", "output": "chart rendered"}]});
    let resumed = RawSse::new(w.apps[1].tool_results(&w.token, &id, &body).await).rest().await;
    assert_golden("native_resume.sse", &normalise(&resumed, &[(&id, "<session>")]));
    assert_eq!((w.tools.calls("lookup"), w.tools.calls("wipe")), (1, 0));
}

#[tokio::test]
async fn a_stream_cut_mid_turn_is_rejoined_on_another_replica_with_no_gap_and_no_repeat() {
    let w = world(2, |_| {}).await;
    let words: Vec<String> = (1..=30).map(|i| format!("w{i} ")).collect();
    w.upstream.push(Reply::new().text(words.clone()).chunk_delay(Duration::from_millis(20)));
    let id = w.session(0, "mock", json!({})).await;

    let mut on_a = w.send(0, &id, "count").await;
    let first = on_a.until_seq(4).await;
    drop(on_a);
    let view: Value = w.apps[1].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!(view["status"], "running", "the cut came mid-turn");

    let rest = SseReader::new(w.apps[1].events(&w.token, &id, Some(4)).await).rest().await;
    let all_seqs: Vec<u64> = seqs(&first).into_iter().chain(seqs(&rest)).collect();
    assert_eq!(all_seqs, (1..=all_seqs.len() as u64).collect::<Vec<_>>(), "no gap, no repeat");
    assert_eq!(rest.last().unwrap().event, "turn_ended");
    assert!(rest.iter().any(|f| f.event == "text_delta"), "text arrived after the cut");
    let text: String = first
        .iter()
        .chain(&rest)
        .filter(|f| f.event == "text_delta")
        .map(|f| f.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, words.concat());
}

async fn events_as(w: &World, id: &str, format: &str) -> reqwest::Response {
    w.apps[0].get(&format!("/v1/sessions/{id}/events?format={format}"), Some(&w.token)).await
}

#[tokio::test]
async fn other_dialects_render_the_same_session_and_an_unknown_format_is_refused() {
    let w = world(1, |_| {}).await;
    let id = completed_session(&w).await;

    let gateway = SseReader::new(events_as(&w, &id, "llm-gateway").await).rest().await;
    let names: Vec<&str> = gateway.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(names, ["harness_start", "usage", "tool_call", "tool_result", "text", "usage", "harness_end"]);
    assert!(gateway.iter().all(|f| f.data["runId"] == format!("{id}:1")));

    let holmes = SseReader::new(events_as(&w, &id, "holmes").await).rest().await;
    let names: Vec<&str> = holmes.iter().map(|f| f.event.as_str()).collect();
    for name in ["start_tool_calling", "tool_calling_result", "ai_message", "ai_answer_end"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert_eq!(names.last(), Some(&"ai_answer_end"));

    assert_error(events_as(&w, &id, "klingon").await, StatusCode::BAD_REQUEST, "invalid_request").await;
}

/// A raw request with a body that need not be JSON.
async fn send(app: &TestApp, method: reqwest::Method, path: &str, token: &str, body: &str) -> reqwest::Response {
    let request = app.client.request(method, app.url(path)).bearer_auth(token);
    let request = if body.is_empty() {
        request
    } else {
        request.header("content-type", "application/json").body(body.to_string())
    };
    request.send().await.unwrap()
}

#[tokio::test]
async fn bad_input_on_every_native_endpoint_is_refused_and_leaves_the_session_unchanged() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    let id = w.session(0, "mock", json!({})).await;
    let before: Value = app.get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    let keys_before = store_keys(app).await;
    let globex = app.token("globex", "gary");
    let (sessions, view) = ("/v1/sessions", format!("/v1/sessions/{id}"));
    let (messages, results) = (format!("{view}/messages"), format!("{view}/tool-results"));
    let (relay, cancel, events) =
        (format!("{view}/relays/relay_x"), format!("{view}/cancel"), format!("{view}/events"));
    let nobody = "/v1/sessions/0190a5e5-0000-7000-8000-000000000000";
    let (nobody_messages, nobody_results) = (format!("{nobody}/messages"), format!("{nobody}/tool-results"));
    let (nobody_cancel, nobody_events) = (format!("{nobody}/cancel"), format!("{nobody}/events"));
    let unknown_format = format!("{events}?format=klingon");
    let (mine, theirs) = (w.token.as_str(), globex.as_str());
    // (method, path, token, body, status, code)
    let cases: &[(&str, &str, &str, &str, u16, &str)] = &[
        // Malformed JSON → 400, wrong types and missing fields → 422, unknown model → 400.
        ("POST", sessions, mine, r#"{"model":"#, 400, "invalid_request"),
        ("POST", sessions, mine, r#"{"model": 5}"#, 422, "validation_failed"),
        ("POST", sessions, mine, "{}", 422, "validation_failed"),
        ("POST", sessions, mine, r#"{"model": "nope"}"#, 400, "unknown_model"),
        ("POST", sessions, theirs, r#"{"model": "mock"}"#, 400, "unknown_model"),
        ("POST", &messages, mine, "{", 400, "invalid_request"),
        ("POST", &messages, mine, r#"{"content": 5}"#, 422, "validation_failed"),
        ("POST", &messages, mine, "{}", 422, "validation_failed"),
        ("POST", &results, mine, "[", 400, "invalid_request"),
        ("POST", &results, mine, r#"{"results": "x"}"#, 422, "validation_failed"),
        ("POST", &results, mine, r#"{"results": [{"output": "x"}]}"#, 422, "validation_failed"),
        ("POST", &relay, mine, "{", 400, "invalid_request"),
        ("POST", &relay, mine, r#"{"approved": "yes"}"#, 422, "validation_failed"),
        ("POST", &relay, mine, "{}", 422, "validation_failed"),
        ("GET", &unknown_format, mine, "", 400, "invalid_request"),
        // Unknown session, unknown relay → 404.
        ("GET", nobody, mine, "", 404, "not_found"),
        ("GET", &nobody_events, mine, "", 404, "not_found"),
        ("POST", &nobody_messages, mine, r#"{"content": "hi"}"#, 404, "not_found"),
        ("POST", &nobody_results, mine, "{}", 404, "not_found"),
        ("POST", &nobody_cancel, mine, "", 404, "not_found"),
        ("POST", &relay, mine, r#"{"approved": true}"#, 404, "not_found"),
        // Another tenant: the same 404.
        ("GET", &view, theirs, "", 404, "not_found"),
        ("GET", &events, theirs, "", 404, "not_found"),
        ("POST", &messages, theirs, r#"{"content": "hi"}"#, 404, "not_found"),
        ("POST", &results, theirs, "{}", 404, "not_found"),
        ("POST", &cancel, theirs, "", 404, "not_found"),
        ("POST", &relay, theirs, r#"{"approved": true}"#, 404, "not_found"),
    ];
    for &(method, path, token, body, status, code) in cases {
        let response = send(app, method.parse().unwrap(), path, token, body).await;
        assert_eq!(response.status().as_u16(), status, "{method} {path} {body}");
        assert_error(response, StatusCode::from_u16(status).unwrap(), code).await;
    }
    // A validation error names the field it is about.
    let named = [
        (sessions, r#"{"model": 5}"#, "model"),
        (&messages, r#"{"content": 5}"#, "content"),
        (&results, r#"{"results": [{"output": "x"}]}"#, "results[0]"),
        (&results, r#"{"results": [{"tool_call_id": "c", "output": 1}]}"#, "results[0].output"),
        (&relay, r#"{"approved": "yes"}"#, "approved"),
    ];
    for (path, body, field) in named {
        let refused = assert_error(
            send(app, reqwest::Method::POST, path, mine, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        )
        .await;
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{path} {body}: {message}");
    }
    // A cursor that is not a sequence number.
    let response =
        app.client.get(app.url(&events)).bearer_auth(&w.token).header("last-event-id", "abc").send().await.unwrap();
    assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;

    let after: Value = app.get(&view, Some(&w.token)).await.json().await.unwrap();
    assert_eq!(after, before, "the stored session is unchanged");
    assert_eq!(store_keys(app).await, keys_before, "and nothing else was stored");
    assert_eq!(w.upstream.calls(), 0);
}
