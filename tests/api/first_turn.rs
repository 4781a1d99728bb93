//! A new chat's first turn starts while the commit that creates its
//! session is on its way, when this replica made the session's id
//! (`Sessions::create_running`; every llm-gateway, Holmes, zot and
//! Responses chat and every native one). A chat whose id the client chose
//! (the AI SDK's, AG-UI's) is created first and run after, as before: its
//! id may be taken, and a refused request must not call the model. These
//! tests hold the second kind to that: a taken id is refused with no model
//! call and nothing written, and a chat over an old log of its id is
//! numbered after it.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    ai_sdk_regenerate::{send, user},
    helpers::{assert_error, redis_url},
    orchestrator::world,
    support::mock_upstream::Reply,
};

fn chat(id: &str, text: &str) -> Value {
    json!({"id": id, "messages": [user("u1", text)], "model": "mock"})
}

#[tokio::test]
async fn a_new_chat_on_an_id_another_user_runs_is_refused_without_a_model_call_or_a_write() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    let bob = app.token("acme", "bob");
    // Bob's chat runs (its answer comes slowly) while Alice starts one with
    // the same id.
    w.upstream.push(Reply::new().text(["Hello", ", ", "Bob."]).chunk_delay(Duration::from_millis(300)));
    let bobs = tokio::spawn({
        let (url, bob) = (app.url("/v1/ai-sdk/chat"), bob.clone());
        async move {
            let response = reqwest::Client::new().post(url).bearer_auth(bob).json(&chat("shared-id", "hi")).send();
            response.await.unwrap().text().await.unwrap()
        }
    });
    w.upstream.wait_for_calls(1, Duration::from_secs(10)).await;
    let refused = app.post_json("/v1/ai-sdk/chat", Some(&w.token), &chat("shared-id", "hi")).await;
    // A session Alice may not see: a 404, and no model was called for it.
    assert_error(refused, StatusCode::NOT_FOUND, "not_found").await;
    assert_eq!(w.upstream.calls(), 1);

    let bobs = bobs.await.unwrap();
    assert!(bobs.contains("Bob."), "Bob's chat ends as it would have: {bobs}");
    assert!(!bobs.contains("Alice"), "{bobs}");
    // Bob's chat is his alone: its log and state hold nothing of Alice's
    // turn, and it goes on.
    let log = app.get("/v1/sessions/shared-id/events?after=0", Some(&bob)).await.text().await.unwrap();
    assert!(!log.contains("Alice"), "{log}");
    assert_eq!(log.matches("\"turn_started\"").count(), 1, "one turn only: {log}");
    w.upstream.push(Reply::new().text(["Again, Bob."]));
    let mut again = chat("shared-id", "again");
    again["messages"] = json!([
        user("u1", "hi"),
        {"id": "a1", "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello, Bob."}]},
        user("u2", "again"),
    ]);
    let next = send(app, &bob, &again).await;
    assert!(next.contains("Again, Bob."), "{next}");
}

#[tokio::test]
async fn a_new_chat_over_an_old_log_of_its_id_is_numbered_after_it() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    // An old log of the id with its session gone (the session's keys
    // expire one by one), last written in a third tenure: the creating
    // commit begins a tenure above it and numbers its events after it.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = &app.config.store.key_prefix;
    let stream = format!("{prefix}{{t:acme:s:old-chat}}:events");
    let _: String = redis::cmd("XADD").arg(&stream).arg("3-7").arg("e").arg("{}").query_async(&mut conn).await.unwrap();
    w.upstream.push(Reply::new().text(["Hello again."]));

    let body = send(app, &w.token, &chat("old-chat", "hi")).await;
    assert!(body.contains("Hello again."), "{body}");
    let log = app.get("/v1/sessions/old-chat/events?after=7", Some(&w.token)).await.text().await.unwrap();
    assert_eq!(log.matches("\"turn_started\"").count(), 1, "{log}");
    assert_eq!(log.matches("\"type\":\"text_delta\"").count(), 1, "{log}");
}
