//! `regenerate()` requests the server must refuse (`trigger:
//! "regenerate-message"` on `/v1/ai-sdk/chat`): nothing to regenerate, a
//! turn that runs or waits, a chat the caller may not see, an answer that
//! is not the last. Each is answered with its status and changes nothing in
//! the store (`store_snapshot`), and no model is called.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::sessions::TurnRunner;

use crate::{
    helpers::{TestApp, assert_error, spawn_replicas, store_snapshot},
    orchestrator::world,
    support::{mock_upstream::Reply, runner::ScriptedRunner},
};

pub(crate) fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn assistant(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": text}]})
}

/// A regenerate request for chat `id` with `messages` (and `messageId`).
fn regenerate(id: &str, messages: Value, message_id: Option<&str>) -> Value {
    let mut body = json!({"id": id, "messages": messages, "trigger": "regenerate-message", "model": "mock"});
    if let Some(message_id) = message_id {
        body["messageId"] = json!(message_id);
    }
    body
}

/// POSTs `body` to the AI SDK chat and reads the stream whole.
pub(crate) async fn send(app: &TestApp, token: &str, body: &Value) -> String {
    let response = app.post_json("/v1/ai-sdk/chat", Some(token), body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.text().await.unwrap()
}

#[tokio::test]
async fn regenerating_with_nothing_to_regenerate_is_refused_and_changes_nothing() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    // A session with no turn yet (made natively, answered as a chat), and a
    // chat with one answer.
    let idle = w.session(0, "mock", json!({})).await;
    let chat = "done-chat";
    w.upstream.push(Reply::new().text(["Hello."]));
    send(app, &w.token, &json!({"id": chat, "messages": [user("u1", "hi")], "model": "mock"})).await;
    let before = store_snapshot(app).await;

    let nothing = regenerate(&idle, json!([user("u1", "hi")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &nothing).await;
    let body = assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("no answer to regenerate"), "{body}");
    // A chat that does not exist has nothing either: a 404, as one the
    // caller may not see.
    let unknown = regenerate("never-seen", json!([user("u1", "hi")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &unknown).await;
    assert_error(refused, StatusCode::NOT_FOUND, "not_found").await;
    // Messages that do not end with the user message the answer answered.
    let ends_with_answer = regenerate(chat, json!([user("u1", "hi"), assistant(&format!("{chat}-1"), "Hello.")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &ends_with_answer).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    let no_messages = regenerate(chat, json!([]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &no_messages).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;

    assert_eq!(store_snapshot(app).await, before, "the refused requests changed nothing");
    assert_eq!(w.upstream.calls(), 1, "only the chat's own turn called the model");
}

#[tokio::test]
async fn regenerating_while_the_turn_waits_for_an_approval_is_a_conflict_and_changes_nothing() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    let start = json!({"id": "paused-chat", "messages": [user("u1", "refund 9")], "model": "mock"});
    assert!(send(app, &w.token, &start).await.contains("tool-approval-request"));
    let before = store_snapshot(app).await;
    let body = regenerate("paused-chat", json!([user("u1", "refund 9")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &body);
    let body = assert_error(refused.await, StatusCode::CONFLICT, "conflict").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("awaiting_client"), "{body}");
    assert_eq!(store_snapshot(app).await, before);
    assert_eq!(w.upstream.calls(), 1);
}

#[tokio::test]
async fn regenerating_while_the_turn_runs_is_a_conflict_and_changes_nothing() {
    let runner = ScriptedRunner::new();
    let apps = spawn_replicas(1, |o| o.runner = Some(runner.clone() as Arc<dyn TurnRunner>)).await;
    let (app, token) = (&apps[0], apps[0].token("acme", "alice"));
    let start = json!({"id": "running-chat", "messages": [user("u1", "gated 1")], "model": "demo"});
    let running = app.post_json("/v1/ai-sdk/chat", Some(&token), &start).await;
    assert_eq!(running.status(), StatusCode::OK);
    let before = store_snapshot(app).await;
    let body = regenerate("running-chat", json!([user("u1", "gated 1")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&token), &body).await;
    let error = assert_error(refused, StatusCode::CONFLICT, "conflict").await;
    assert!(error["error"]["message"].as_str().unwrap().contains("running"), "{error}");
    assert_eq!(store_snapshot(app).await, before);
    // The turn goes on and ends as it would have.
    runner.release(1);
    let stream = running.text().await.unwrap();
    assert!(stream.contains(r#""delta":"d1 ""#) && stream.contains(r#""finishReason":"stop""#), "{stream}");
}

#[tokio::test]
async fn regenerating_a_chat_of_another_subject_or_tenant_is_a_404_and_changes_nothing() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    w.upstream.push(Reply::new().text(["Hello, Alice."]));
    send(app, &w.token, &json!({"id": "alices-chat", "messages": [user("u1", "hi")], "model": "mock"})).await;
    let before = store_snapshot(app).await;
    let body = regenerate("alices-chat", json!([user("u1", "hi")]), None);
    for token in [app.token("acme", "bob"), app.token("globex", "gary")] {
        let refused = app.post_json("/v1/ai-sdk/chat", Some(&token), &body).await;
        assert_error(refused, StatusCode::NOT_FOUND, "not_found").await;
    }
    assert_eq!(store_snapshot(app).await, before, "nothing changed, nothing was created");
    assert_eq!(w.upstream.calls(), 1);
}

#[tokio::test]
async fn only_the_last_answer_can_be_regenerated() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    let chat = "two-turns";
    w.upstream.push(Reply::new().text(["One."]));
    w.upstream.push(Reply::new().text(["Two."]));
    send(app, &w.token, &json!({"id": chat, "messages": [user("u1", "first")], "model": "mock"})).await;
    let history = json!([user("u1", "first"), assistant(&format!("{chat}-1"), "One."), user("u2", "second")]);
    send(app, &w.token, &json!({"id": chat, "messages": history, "model": "mock"})).await;
    let before = store_snapshot(app).await;

    // regenerate({messageId}) of the first answer: the client would send
    // the messages up to the first user message.
    let earlier = regenerate(chat, json!([user("u1", "first")]), Some(&format!("{chat}-1")));
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &earlier).await;
    let body = assert_error(refused, StatusCode::CONFLICT, "conflict").await;
    assert!(body["error"]["message"].as_str().unwrap().contains(&format!("{chat}-2")), "{body}");
    // The same without a messageId: the messages do not end where the chat does.
    let earlier = regenerate(chat, json!([user("u1", "first")]), None);
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &earlier).await;
    assert_error(refused, StatusCode::CONFLICT, "conflict").await;
    assert_eq!(store_snapshot(app).await, before);

    // The last one can, named by its id or by the user message it answered.
    w.upstream.push(Reply::new().text(["Two, again."]));
    let last = json!([user("u1", "first"), assistant(&format!("{chat}-1"), "One."), user("u2", "second")]);
    let stream = send(app, &w.token, &regenerate(chat, last.clone(), Some(&format!("{chat}-2")))).await;
    assert!(stream.contains(&format!(r#""messageId":"{chat}-3""#)), "{stream}");
    w.upstream.push(Reply::new().text(["Two, once more."]));
    let stream = send(app, &w.token, &regenerate(chat, last, Some("u2"))).await;
    assert!(stream.contains(r#""delta":"Two, once more.""#), "{stream}");
    assert_eq!(w.upstream.calls(), 4);
}
