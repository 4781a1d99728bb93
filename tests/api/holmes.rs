//! The HolmesGPT dialect (`POST /api/chat`) end to end: a scripted model,
//! the counting tool server (`lookup` allow, `refund` ask, `wipe` deny),
//! real Redis, and replicas sharing them (`crate::orchestrator::world`).
//!
//! Golden transcripts: `tests/api/golden/holmes_pause.sse` and
//! `holmes_resume.sse` are the raw SSE bytes of a scripted conversation,
//! normalised (session id → `<session_id>`, event ids → their order of
//! appearance, heartbeat comments dropped). After a deliberate change of the
//! encoder, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test --test api holmes` and review the diff
//! against docs/protocols.md §1 (seeds 000 and 001) before keeping it.

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    helpers::{assert_detail, assert_invalid},
    orchestrator::{World, kinds, of_kind, tool_messages, world},
    sse::{Frame, SseReader},
    support::{mock_upstream::Reply, raw_sse::assert_golden},
};

const SYSTEM: &str = "You are a test assistant.";

fn chart_tool(mode: &str) -> Value {
    json!({"name": "render_chart", "description": "Draw a chart", "mode": mode,
        "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}})
}

async fn chat(w: &World, on: usize, body: &Value) -> Response {
    w.apps[on].post_json("/api/chat", Some(&w.token), body).await
}

async fn stream(w: &World, on: usize, body: &Value) -> Vec<Frame> {
    let response = chat(w, on, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    SseReader::new(response).rest().await
}

async fn answer(w: &World, on: usize, body: &Value) -> Value {
    let response = chat(w, on, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// The session as the native API shows it (status, last seq, update time).
async fn view(w: &World, id: &str) -> Value {
    w.apps[0].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap()
}

/// A turn paused by `refund` (needs approval) and `render_chart` (a pause-mode
/// frontend tool) in one model response, streamed on replica `on`.
async fn pause_on_refund_and_chart(w: &World, on: usize) -> Frame {
    w.upstream.push(Reply::new().tool_call("call_refund", "refund", [r#"{"order":"9"}"#]).tool_call(
        "call_chart",
        "render_chart",
        [r#"{"metric":"refunds"}"#],
    ));
    let body = json!({"ask": "refund order 9 and chart refunds", "model": "mock", "stream": true,
        "enable_tool_approval": true, "frontend_tools": [chart_tool("pause")]});
    let frames = stream(w, on, &body).await;
    let results = of_kind(&frames, "tool_calling_result");
    assert_eq!(results.len(), 1, "{:?}", kinds(&frames));
    assert_eq!(results[0].data["result"]["status"], "approval_required");
    assert_eq!(results[0].data["result"]["params"], json!({"order": "9"}));
    let paused = frames.last().unwrap().clone();
    assert_eq!(paused.event, "approval_required");
    assert_eq!(paused.data["requires_approval"], true);
    assert_eq!(paused.data["pending_approvals"][0]["tool_name"], "refund");
    assert_eq!(paused.data["pending_approvals"][0]["params"], json!({"order": "9"}));
    let frontend = &paused.data["pending_frontend_tool_calls"][0];
    assert_eq!(frontend["tool_call_id"], "call_chart");
    assert_eq!(frontend["arguments"], json!({"metric": "refunds"}));
    let history = paused.data["conversation_history"].as_array().unwrap();
    assert_eq!(history[0]["role"], "system");
    assert_eq!(history.last().unwrap()["tool_calls"][0]["function"]["arguments"], r#"{"order":"9"}"#);
    assert_eq!(w.tools.calls("refund"), 0, "nothing runs before the decision");
    paused
}

fn answers_to_the_pause() -> Value {
    json!({"ask": "", "stream": true, "frontend_tools": [chart_tool("pause")],
        "tool_decisions": [{"tool_call_id": "call_refund", "approved": true}],
        "frontend_tool_results": [{"tool_call_id": "call_chart", "tool_name": "render_chart", "result": "drawn"}]})
}

/// Resumes the pause on replica `on` with `extra` merged into the answers,
/// and checks the approved call ran once, with the stored arguments.
async fn resume_and_finish(w: &World, on: usize, extra: Value) {
    w.upstream.push(Reply::new().text(["Refunded and charted."]));
    let mut body = answers_to_the_pause();
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let frames = stream(w, on, &body).await;
    assert_eq!(
        kinds(&frames),
        ["tool_calling_result", "tool_calling_result", "ai_message", "token_count", "ai_answer_end"]
    );
    assert_eq!(w.tools.calls("refund"), 1);
    assert_eq!(w.tools.bodies("refund")[0]["arguments"], json!({"order": "9"}));
    let end = &frames.last().unwrap().data;
    assert_eq!(end["analysis"], "Refunded and charted.");
    let seen = tool_messages(&w.model_request(1));
    assert!(seen.iter().any(|m| m["content"] == "drawn"), "{seen:?}");
}

#[tokio::test]
async fn a_turn_paused_on_replica_a_resumes_on_replica_b_with_its_session_id() {
    let w = world(2, |_| {}).await;
    let paused = pause_on_refund_and_chart(&w, 0).await;
    let id = paused.data["session_id"].as_str().unwrap().to_string();
    resume_and_finish(&w, 1, json!({"session_id": id})).await;

    let again = chat(
        &w,
        1,
        &json!({"session_id": id, "ask": "", "stream": true,
        "tool_decisions": [{"tool_call_id": "call_refund", "approved": true}]}),
    )
    .await;
    assert_detail(again, StatusCode::CONFLICT).await;
    assert_eq!(w.tools.calls("refund"), 1, "a second resume of the same pause runs nothing");
}

#[tokio::test]
async fn a_turn_paused_on_replica_a_resumes_on_replica_b_with_only_its_conversation_history() {
    let w = world(2, |_| {}).await;
    let paused = pause_on_refund_and_chart(&w, 0).await;
    resume_and_finish(&w, 1, json!({"conversation_history": paused.data["conversation_history"]})).await;
}

#[tokio::test]
async fn a_resume_with_edited_tool_arguments_is_a_conflict_and_runs_nothing() {
    let w = world(1, |_| {}).await;
    let paused = pause_on_refund_and_chart(&w, 0).await;
    let id = paused.data["session_id"].as_str().unwrap().to_string();
    let mut edited = paused.data["conversation_history"].clone();
    let last = edited.as_array_mut().unwrap().last_mut().unwrap();
    last["tool_calls"][0]["function"]["arguments"] = json!(r#"{"order":"999"}"#);
    let before = view(&w, &id).await;

    let mut body = answers_to_the_pause();
    body["conversation_history"] = edited.clone();
    let refused = assert_detail(chat(&w, 0, &body).await, StatusCode::CONFLICT).await;
    assert!(refused.contains("does not match") && refused.contains("call_refund"), "{refused}");
    body["session_id"] = json!(id);
    assert_detail(chat(&w, 0, &body).await, StatusCode::CONFLICT).await;
    let mut renamed = paused.data["conversation_history"].clone();
    let last = renamed.as_array_mut().unwrap().last_mut().unwrap();
    last["tool_calls"][0]["function"]["name"] = json!("lookup");
    body["conversation_history"] = renamed;
    assert_detail(chat(&w, 0, &body).await, StatusCode::CONFLICT).await;

    assert_eq!(w.tools.calls("refund"), 0);
    assert_eq!(w.upstream.calls(), 1);
    assert_eq!(view(&w, &id).await, before, "the paused session is untouched");
    resume_and_finish(&w, 0, json!({"conversation_history": paused.data["conversation_history"]})).await;
}

/// Raw Holmes SSE, normalised for the golden files: the session id, and
/// event ids renumbered in order of appearance (how many text deltas a
/// model call's text was committed as depends on timing).
pub fn normalise(raw: &str, session_id: &str) -> String {
    let mut ids: Vec<String> = Vec::new();
    let mut out = String::new();
    for line in raw.replace(session_id, "<session_id>").lines() {
        if line.starts_with(':') {
            continue;
        }
        match line.strip_prefix("id: ") {
            Some(id) => {
                if !ids.iter().any(|seen| seen == id) {
                    ids.push(id.to_string());
                }
                let n = ids.iter().position(|seen| seen == id).unwrap() + 1;
                out.push_str(&format!("id: <{n}>\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The `data` of the first frame named `event` in raw SSE.
fn data_of(raw: &str, event: &str) -> Value {
    let block = raw.split("\n\n").find(|b| b.lines().any(|l| l == format!("event: {event}"))).unwrap();
    let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str(data).unwrap()
}

#[tokio::test]
async fn a_conversation_with_allowed_denied_and_frontend_tools_streams_as_the_golden_transcripts() {
    let w = world(1, |_| {}).await;
    w.upstream.push(
        Reply::new()
            .text(["Let me ", "check."])
            .tool_call("call_lookup", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_wipe", "wipe", [r#"{"all":true}"#])
            .tool_call("call_chart", "render_chart", [r#"{"metric":"cpu"}"#]),
    );
    w.upstream.push(Reply::new().text(["Order 42 is fine; ", "the chart is on screen."]));
    let body = json!({"ask": "check order 42, wipe it all, chart cpu", "model": "mock", "stream": true,
        "conversation_history": [{"role": "system", "content": SYSTEM}], "frontend_tools": [chart_tool("pause")]});
    let response = chat(&w, 0, &body).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let id = response.headers()["x-session-id"].to_str().unwrap().to_string();
    let pause = response.text().await.unwrap();
    assert_golden("holmes_pause.sse", &normalise(&pause, &id));

    let mut resume = answers_to_the_pause();
    resume["tool_decisions"] = json!(null);
    resume["frontend_tool_results"][0]["result"] = json!(r#"{"rendered":true}"#);
    resume["conversation_history"] = data_of(&pause, "approval_required")["conversation_history"].clone();
    let response = chat(&w, 0, &resume).await;
    assert_eq!(response.status(), StatusCode::OK);
    let resumed = response.text().await.unwrap();
    assert_golden("holmes_resume.sse", &normalise(&resumed, &id));
    assert_eq!(w.tools.calls("lookup"), 1);
    assert_eq!(w.tools.calls("wipe"), 0);
}

#[tokio::test]
async fn a_request_shaped_like_the_older_seed_revision_works_streamed_and_not() {
    let w = world(1, |_| {}).await;
    // Seed 001: no model (the default model, `claude`), no frontend tools,
    // no behaviour controls.
    w.upstream.push(Reply::new().text(["Your cluster is healthy."]));
    let body = json!({"ask": "What is the status of my cluster?",
        "conversation_history": [{"role": "system", "content": "You are a helpful assistant."}]});
    let body_out = answer(&w, 0, &body).await;
    assert_eq!(body_out["analysis"], "Your cluster is healthy.");
    let history = body_out["conversation_history"].as_array().unwrap();
    assert_eq!(kinds_of_roles(history), ["system", "user", "assistant"]);
    assert_eq!(history[0]["content"], "You are a helpful assistant.");
    assert_eq!(w.upstream.requests()[0].path, "/v1/messages");

    w.upstream.push(Reply::new().text(["Still healthy."]));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["conversation_history"] = body_out["conversation_history"].clone();
    let frames = stream(&w, 0, &streamed).await;
    assert_eq!(kinds(&frames), ["ai_message", "token_count", "ai_answer_end"]);
    let history = frames.last().unwrap().data["conversation_history"].as_array().unwrap().clone();
    assert_eq!(kinds_of_roles(&history), ["system", "user", "assistant", "user", "assistant"]);
}

fn kinds_of_roles(history: &[Value]) -> Vec<&str> {
    history.iter().map(|m| m["role"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_non_stream_answer_has_the_holmes_shape_and_pauses_and_resumes_by_history() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_lookup", "lookup", [r#"{"id":"42"}"#]));
    w.upstream.push(Reply::new().text(["Order 42 shipped."]).usage(40, 5));
    let request = json!({"ask": "where is order 42?", "model": "mock", "additional_system_prompt": "Be terse.",
        "behavior_controls": {"style_guide": false}, "investigation_result": {"ignored": true},
        "images": ["https://x/label.png", {"url": "https://x/box.png", "detail": "low"}]});
    let body = answer(&w, 0, &request).await;
    assert_eq!(body["analysis"], "Order 42 shipped.");
    let sent = &w.model_request(0)["messages"];
    let system = sent[0]["content"].as_str().unwrap();
    assert!(system.ends_with("Be terse.") && !system.contains("Markdown"), "{system}");
    assert_eq!(sent[1]["content"][1]["image_url"]["url"], "https://x/label.png");
    assert_eq!(sent[1]["content"][2]["image_url"]["detail"], "low");
    assert_eq!(body["conversation_history"][0]["content"], system, "the history shows the prompt the model saw");
    let actions: Vec<&str> =
        body["follow_up_actions"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(actions, ["logs", "graphs", "articles"], "HolmesGPT's actions on a first answer");
    assert_eq!(body["follow_up_actions"][0]["pre_action_notification_text"], "Fetching relevant logs...");
    assert!(body["session_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(body["tool_calls"][0]["tool_name"], "lookup");
    assert_eq!(body["tool_calls"][0]["result"]["status"], "success");
    assert_eq!(body["tool_calls"][0]["result"]["params"], json!({"id": "42"}));
    let metadata = &body["metadata"];
    assert_eq!(metadata["usage"]["completion_tokens"].as_u64().unwrap(), 6);
    assert!(metadata["tokens"]["system_tokens"].as_u64().unwrap() > 0, "{metadata}");
    assert!(metadata["max_tokens"].as_u64().is_some() && metadata["max_output_tokens"].as_u64().is_some());
    assert!(body.get("pending_approvals").is_none());

    // A follow-up on the same session: the model sees the stored
    // conversation, whatever history the client sends (clients may rebuild it).
    let id = body["session_id"].as_str().unwrap().to_string();
    w.upstream.push(Reply::new().text(["Order 43 too."]));
    let follow_up = json!({"ask": "and order 43?", "session_id": id, "conversation_history": [
        {"role": "system", "content": "You are someone else."}]});
    let next = answer(&w, 0, &follow_up).await;
    assert_eq!(next["session_id"], id.as_str());
    assert_eq!(next["conversation_history"].as_array().unwrap().len(), 7);
    assert_eq!(w.model_request(2)["messages"][0]["content"], system);
    assert_eq!(next["follow_up_actions"], json!([]), "offered on a conversation's first answer only");

    w.upstream.push(Reply::new().tool_call("call_refund", "refund", [r#"{"order":"42"}"#]));
    let paused = answer(&w, 0, &json!({"ask": "refund it", "model": "mock", "enable_tool_approval": true})).await;
    assert_eq!(paused["pending_approvals"][0]["tool_call_id"], "call_refund");
    assert_eq!(paused["analysis"], Value::Null);
    w.upstream.push(Reply::new().text(["Refund declined."]));
    let resumed = answer(
        &w,
        0,
        &json!({"ask": "", "conversation_history": paused["conversation_history"],
        "tool_decisions": [{"tool_call_id": "call_refund", "approved": false, "feedback": "not today"}]}),
    )
    .await;
    assert_eq!(resumed["analysis"], "Refund declined.");
    assert_eq!(resumed["tool_calls"][0]["result"]["status"], "error");
    assert!(resumed["tool_calls"][0]["result"]["error"].as_str().unwrap().contains("not today"));
    assert_eq!(w.tools.calls("refund"), 0);
}

#[tokio::test]
async fn a_non_stream_turn_rate_limited_on_every_try_is_a_429_with_retry_after() {
    let w = world(1, |_| {}).await;
    for _ in 0..3 {
        w.upstream.push(Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#));
    }
    let response = chat(&w, 0, &json!({"ask": "hello", "model": "mock"})).await;
    assert!(response.headers().get("retry-after").is_some());
    assert_detail(response, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(w.upstream.calls(), 3);
}

#[tokio::test]
async fn without_tool_approval_a_call_needing_approval_is_an_error_the_model_sees() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_refund", "refund", [r#"{"order":"1"}"#]));
    w.upstream.push(Reply::new().text(["I cannot refund without approval."]));
    let body = answer(&w, 0, &json!({"ask": "refund 1", "model": "mock", "enable_tool_approval": false})).await;
    assert_eq!(body["tool_calls"][0]["result"]["status"], "error");
    let seen = tool_messages(&w.model_request(1));
    assert!(seen[0]["content"].as_str().unwrap().contains("needs approval"), "{seen:?}");
    assert_eq!(w.tools.calls("refund"), 0);
}

#[tokio::test]
async fn bad_requests_are_refused_and_leave_the_stored_session_unchanged() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_refund", "refund", [r#"{"order":"9"}"#]));
    let paused = answer(&w, 0, &json!({"ask": "refund 9", "model": "mock", "enable_tool_approval": true})).await;
    let id = paused["session_id"].as_str().unwrap().to_string();
    let before = view(&w, &id).await;
    let decide = json!([{"tool_call_id": "call_refund", "approved": true}]);

    let raw = w.apps[0].client.post(w.apps[0].url("/api/chat")).bearer_auth(&w.token);
    let malformed = raw.header("content-type", "application/json").body(r#"{"ask": "#).send().await.unwrap();
    assert_eq!(assert_invalid(malformed).await["type"], "json_invalid");
    // FastAPI's 422 list: where, what, which pydantic error.
    let invalid = [
        (
            json!({"ask": "x", "session_id": id, "tool_decisions": [{"tool_call_id": "call_refund", "approved": "yes"}]}),
            json!(["body", "tool_decisions", 0, "approved"]),
            "bool_type",
        ),
        (json!({"ask": "x", "stream": "yes"}), json!(["body", "stream"]), "bool_type"),
        (json!({"session_id": id, "tool_decisions": decide}), json!(["body", "ask"]), "missing"),
        (
            json!({"ask": "", "session_id": id, "tool_decisions": decide,
            "conversation_history": [{"role": "user", "content": "hi"}]}),
            json!(["body", "conversation_history"]),
            "value_error",
        ),
    ];
    for (body, loc, kind) in invalid {
        let entry = assert_invalid(chat(&w, 0, &body).await).await;
        assert_eq!((&entry["loc"], entry["type"].as_str().unwrap()), (&loc, kind), "{body}: {entry}");
        assert_eq!(view(&w, &id).await, before, "{body} changed the session");
    }
    // FastAPI's `{"detail": "…"}` for the rest.
    let unknown = json!([{"tool_call_id": "call_unknown", "approved": true}]);
    let refused = [
        (json!({"ask": "x", "frontend_tools": [chart_tool("pause")]}), StatusCode::BAD_REQUEST, "stream=true"),
        (
            json!({"ask": "x", "stream": true, "frontend_tools": [{"name": "lookup", "description": "d"}]}),
            StatusCode::BAD_REQUEST,
            "lookup",
        ),
        (json!({"ask": "x", "model": "gpt-9"}), StatusCode::BAD_REQUEST, "allowed"),
        (json!({"ask": "", "session_id": "0190-nope", "tool_decisions": decide}), StatusCode::NOT_FOUND, "not found"),
        (
            json!({"ask": "", "conversation_history": [{"role": "system", "content": "never paused"}],
            "tool_decisions": unknown}),
            StatusCode::NOT_FOUND,
            "conversation_history",
        ),
        (json!({"ask": "", "tool_decisions": unknown}), StatusCode::NOT_FOUND, "session_id"),
    ];
    for (body, status, mentions) in refused {
        let detail = assert_detail(chat(&w, 0, &body).await, status).await;
        assert!(detail.contains(mentions), "{body}: {detail}");
        assert_eq!(view(&w, &id).await, before, "{body} changed the session");
    }
    let globex = w.apps[0].token("globex", "alice");
    let foreign = w.apps[0]
        .post_json("/api/chat", Some(&globex), &json!({"ask": "", "session_id": id, "tool_decisions": decide}))
        .await;
    assert_detail(foreign, StatusCode::NOT_FOUND).await;
    let foreign = w.apps[0].post_json("/api/chat", Some(&globex), &json!({"ask": "", "tool_decisions": decide})).await;
    assert_detail(foreign, StatusCode::NOT_FOUND).await;
    assert_eq!(view(&w, &id).await, before);
    assert_eq!(w.tools.calls("refund"), 0);
    assert_eq!(w.upstream.calls(), 1);
}

/// `Server-Timing` entry `name`'s duration in milliseconds.
fn server_timing(response: &Response, name: &str) -> Option<f64> {
    let header = response.headers().get("server-timing")?.to_str().ok()?;
    header.split(',').find_map(|entry| {
        let mut parts = entry.trim().split(';');
        (parts.next()? == name).then_some(())?;
        parts.find_map(|p| p.strip_prefix("dur="))?.parse().ok()
    })
}

#[tokio::test]
async fn a_non_stream_answer_has_server_timing_with_the_upstream_time_apart() {
    let w = world(1, |_| {}).await;
    // Two model calls of at least 3 × 40 ms each: the upstream share is at
    // least 240 ms, whatever the machine.
    let slow = std::time::Duration::from_millis(40);
    w.upstream.push(Reply::new().tool_call("call_lookup", "lookup", [r#"{"id":"#, r#""42"}"#]).chunk_delay(slow));
    w.upstream.push(Reply::new().text(["Order ", "42 ", "shipped."]).chunk_delay(slow));
    let response = chat(&w, 0, &json!({"ask": "where is order 42?", "model": "mock"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let upstream = server_timing(&response, "upstream").expect("an upstream entry");
    let gateway = server_timing(&response, "gateway").expect("a gateway entry");
    assert!(upstream >= 240.0, "upstream {upstream} ms");
    assert!(gateway >= 0.0);

    // A stream has none (its head leaves before the upstream answers); an
    // answer without upstream calls has an upstream share of 0.
    w.upstream.push(Reply::new().text(["Hi."]));
    let streamed = chat(&w, 0, &json!({"ask": "hi", "model": "mock", "stream": true})).await;
    assert!(streamed.headers().get("server-timing").is_none());
    SseReader::new(streamed).rest().await;
    let models = w.apps[0].get_holmes_models(Some(&w.token)).await;
    assert_eq!(server_timing(&models, "upstream"), Some(0.0));
    assert!(server_timing(&models, "gateway").is_some());
}
