//! The Cosmo (SSE) and zot (NDJSON) dialects over native sessions, with
//! `?format=`: golden transcripts of the scripted conversation of
//! `native_api.rs` (a text answer, a permitted, a denied and a frontend
//! tool, a pause and a resume on another replica), NDJSON framing and its
//! rejoin, and Cosmo's context usage.
//!
//! Golden files: `tests/api/golden/cosmo_*.sse`, `zot_*.ndjson`. After a
//! deliberate change of an encoder, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test --test api dialects` and review the diff
//! against docs/protocols.md (§3 for Cosmo, §4 for zot).

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    native_api::{GOLDEN_ASK, golden_session},
    orchestrator::{World, world},
    sse::STEP_TIMEOUT,
    support::mock_upstream::Reply,
    support::raw_sse::{assert_golden, normalise},
};

/// The conversation of the native golden test, paused for `render_chart`,
/// streamed in `format`.
async fn paused_session(w: &World, format: &str) -> (String, String) {
    let id = golden_session(w).await;
    let path = format!("/v1/sessions/{id}/messages?format={format}");
    let response = w.apps[0].post_json(&path, Some(&w.token), &json!({"content": GOLDEN_ASK})).await;
    (id, read_all(response).await)
}

async fn resume(w: &World, id: &str, format: &str) -> String {
    let body = json!({"results": [{"tool_call_id": "call_chart", "output": "chart rendered"}]});
    let path = format!("/v1/sessions/{id}/tool-results?format={format}");
    read_all(w.apps[1].post_json(&path, Some(&w.token), &body).await).await
}

async fn read_all(response: Response) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    tokio::time::timeout(STEP_TIMEOUT * 4, response.text()).await.expect("the stream ends").unwrap()
}

/// The NDJSON lines of `text`, each parsed.
fn lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}"))).collect()
}

#[tokio::test]
async fn the_scripted_conversation_in_cosmo_matches_the_golden_transcripts() {
    let w = world(2, |_| {}).await;
    let (id, paused) = paused_session(&w, "cosmo").await;
    assert_golden("cosmo_pause.sse", &normalise(&paused, &[(&id, "<session>")]));
    let resumed = resume(&w, &id, "cosmo").await;
    assert_golden("cosmo_resume.sse", &normalise(&resumed, &[(&id, "<session>")]));

    // Every frame is data only (EventSource's onmessage sees them all), a
    // ChatEvent of this session.
    let mut raw = String::new();
    raw.push_str(&paused);
    raw.push_str(&resumed);
    assert!(!raw.lines().any(|l| l.starts_with("event:")), "{raw}");
    let events: Vec<Value> =
        raw.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(events.iter().all(|e| e["sessionId"] == id.as_str()));
    let done = events.iter().filter(|e| e["type"] == "done").collect::<Vec<_>>();
    assert_eq!(done.len(), 2, "one at the pause, one at the end");
    assert_eq!(done[0]["stopReason"], "paused");
    assert_eq!(done[1]["contextUsage"]["usedTokens"], 214);
}

#[tokio::test]
async fn the_scripted_conversation_in_zot_is_ndjson_matching_the_golden_transcripts() {
    let w = world(2, |_| {}).await;
    let (id, paused) = paused_session(&w, "zot").await;
    assert_golden("zot_pause.ndjson", &normalise(&paused, &[(&id, "<session>")]));
    let resumed = resume(&w, &id, "zot").await;
    assert_golden("zot_resume.ndjson", &normalise(&resumed, &[(&id, "<session>")]));

    // The whole session replayed in one stream, from any replica, with its
    // content type, every line a JSON object with a type and a seq.
    let response = w.apps[1].get(&format!("/v1/sessions/{id}/events?format=zot"), Some(&w.token)).await;
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let replay = lines(&read_all(response).await);
    assert!(replay.iter().all(|l| l["type"].is_string() && l["seq"].is_u64()), "{replay:?}");
    let done = replay.iter().filter(|l| l["type"] == "done").count();
    assert_eq!(done, 2, "the pause and the end");

    // A rejoin after any seq carries on from there.
    let cut = replay[replay.len() / 2]["seq"].as_u64().unwrap();
    let path = format!("/v1/sessions/{id}/events?format=zot&after={cut}");
    let rest = lines(&read_all(w.apps[0].get(&path, Some(&w.token)).await).await);
    assert!(!rest.is_empty() && rest.iter().all(|l| l["seq"].as_u64().unwrap() > cut), "{rest:?}");
    assert_eq!(rest.last(), replay.last());
}

#[tokio::test]
async fn a_zot_stream_waiting_on_a_relay_sends_heartbeat_lines() {
    let w = world(2, |o| o.server_toml.push_str("heartbeat_secs = 1\n")).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let id = w.session(0, "mock", json!({})).await;
    let path = format!("/v1/sessions/{id}/messages?format=zot");
    let mut stream = w.apps[0].post_json(&path, Some(&w.token), &json!({"content": "refund 9"})).await;
    let mut text = String::new();
    while !text.contains("\"heartbeat\"") {
        let chunk = tokio::time::timeout(STEP_TIMEOUT, stream.chunk()).await.expect("a line in time").unwrap();
        text.push_str(std::str::from_utf8(&chunk.expect("more lines")).unwrap());
    }
    assert!(lines(&text).iter().any(|l| l["type"] == "turn_end" && l["stop"] == "tool_use"), "{text}");
    let relay: Value = w.apps[0].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    let relay_id = relay["pending_relays"][0]["relay_id"].as_str().unwrap();
    let decided = w.apps[1]
        .post_json(&format!("/v1/sessions/{id}/relays/{relay_id}"), Some(&w.token), &json!({"approved": true}))
        .await;
    assert_eq!(decided.status(), StatusCode::OK);
    let rest = tokio::time::timeout(STEP_TIMEOUT * 4, stream.text()).await.unwrap().unwrap();
    let all = lines(&format!("{text}{rest}"));
    assert_eq!(all.last().unwrap()["type"], "done");
    assert!(all.iter().any(|l| l["type"] == "tool_result" && l["is_error"] == false));
}

/// A failure before any frame is a real status, in the standard error body.
#[tokio::test]
async fn an_unknown_session_in_a_new_format_is_a_404() {
    let w = world(1, |_| {}).await;
    for format in ["cosmo", "zot"] {
        let response = w.apps[0].get(&format!("/v1/sessions/nope/events?format={format}"), Some(&w.token)).await;
        crate::helpers::assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
    }
}
