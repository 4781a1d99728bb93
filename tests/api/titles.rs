//! Session titles: after the first exchange, one short model call names the
//! session; `title-updated` (Cosmo) / `title_updated` (native) arrives once,
//! after the turn's `done` / `turn_ended`, on the stream of that turn and on
//! any stream rejoined after it, on any replica; the title is in the
//! session's view and in the list. Later turns do not re-title; a failed
//! call falls back to the first words of the first message; an owner that
//! dies between the turn's end and the title leaves it to the replica that
//! takes the session over; a new turn started meanwhile brings the title
//! at its own end.
//!
//! Golden file: `tests/api/golden/cosmo_title.sse` (regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test api titles`, and review it against
//! docs/protocols.md §3).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    orchestrator::{World, world},
    sse::{Frame, STEP_TIMEOUT, SseReader},
    support::{
        mock_upstream::Reply,
        raw_sse::{RawSse, assert_golden, normalise},
    },
};

/// Replicas with titles on.
async fn titled_world(replicas: usize, lease_ttl_secs: u64) -> World {
    world(replicas, |o| {
        o.titles = true;
        o.lease_ttl_secs = lease_ttl_secs;
    })
    .await
}

/// The data of each frame of a Cosmo stream, read to its end.
async fn cosmo(response: reqwest::Response) -> (String, Vec<Value>) {
    let text = RawSse::new(response).rest().await;
    let data =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    (text, data)
}

fn types(data: &[Value]) -> Vec<&str> {
    data.iter().map(|d| d["type"].as_str().unwrap()).collect()
}

fn events<'a>(frames: &'a [Frame], kind: &str) -> Vec<&'a Frame> {
    frames.iter().filter(|f| f.event == kind).collect()
}

async fn view(w: &World, on: usize, id: &str) -> Value {
    let response = w.apps[on].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

async fn listed_title(w: &World, id: &str) -> Value {
    let list: Value = w.apps[0].get("/v1/sessions", Some(&w.token)).await.json().await.unwrap();
    let entry = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id).cloned();
    entry.unwrap_or_else(|| panic!("{id} is not listed: {list}"))["title"].clone()
}

/// The whole log in the native format, from any replica.
async fn native_log(w: &World, on: usize, id: &str) -> Vec<Frame> {
    SseReader::new(w.apps[on].events(&w.token, id, Some(0)).await).rest().await
}

#[tokio::test]
async fn a_cosmo_first_exchange_ends_with_done_then_title_updated_once() {
    let w = titled_world(1, 10).await;
    w.upstream.push(Reply::new().text(["Order 42 ships tomorrow."]));
    w.upstream.push(Reply::new().text(["Order 42 delivery"]));
    let id = w.session(0, "mock", json!({})).await;
    let path = format!("/v1/sessions/{id}/messages?format=cosmo");
    let (text, data) =
        cosmo(w.apps[0].post_json(&path, Some(&w.token), &json!({"content": "where is order 42?"})).await).await;
    assert_golden("cosmo_title.sse", &normalise(&text, &[(&id, "<session>")]));
    assert_eq!(types(&data), ["thinking", "text", "done", "title-updated"]);
    assert_eq!(data[3], json!({"sessionId": id, "type": "title-updated", "title": "Order 42 delivery"}));

    // One short call through the model path: the instruction and the
    // quoted exchange, no tools, a small output.
    assert_eq!(w.upstream.calls(), 2);
    let request = w.model_request(1);
    assert_eq!(request["messages"][0]["role"], "system");
    assert!(request["messages"][0]["content"].as_str().unwrap().starts_with("You name conversations"));
    let quoted = request["messages"][1]["content"].as_str().unwrap();
    assert!(quoted.contains("where is order 42?") && quoted.contains("Order 42 ships tomorrow."), "{quoted}");
    assert!(request.get("tools").is_none(), "{request}");
    assert!(request["max_tokens"].as_u64().unwrap() <= 64, "{request}");

    assert_eq!(view(&w, 0, &id).await["title"], "Order 42 delivery");
    assert_eq!(listed_title(&w, &id).await, "Order 42 delivery");
}

#[tokio::test]
async fn a_native_first_exchange_announces_the_title_at_turn_ended_and_later_turns_do_not_retitle() {
    let w = titled_world(1, 10).await;
    w.upstream.push(Reply::new().text(["Hello."]));
    w.upstream.push(Reply::new().text(["\"Greeting\"."]));
    let id = w.session(0, "mock", json!({})).await;
    let first = w.send(0, &id, "hi").await.rest().await;
    let kinds: Vec<&str> = first.iter().map(|f| f.event.as_str()).collect();
    let n = kinds.len();
    assert_eq!(&kinds[n - 2..], ["turn_ended", "title_updated"], "{kinds:?}");
    assert_eq!(first[n - 2].data["title_pending"], true);
    assert_eq!(first[n - 1].data["title"], "Greeting", "the answer's quotes and period are dropped");
    assert_eq!(first[n - 1].id, Some(first[n - 2].id.unwrap() + 1));
    assert_eq!(events(&first, "title_updated").len(), 1);

    w.upstream.push(Reply::new().text(["Again."]));
    let second = w.send(0, &id, "and again").await.rest().await;
    let end = second.last().unwrap();
    assert_eq!((end.event.as_str(), end.data.get("title_pending")), ("turn_ended", None));
    assert!(events(&second, "title_updated").is_empty());
    assert_eq!(w.upstream.calls(), 3, "no second title call");
    assert_eq!(view(&w, 0, &id).await["title"], "Greeting");
    assert_eq!(events(&native_log(&w, 0, &id).await, "title_updated").len(), 1);
}

#[tokio::test]
async fn a_rejoin_on_another_replica_after_the_turns_end_shows_the_title_once() {
    let w = titled_world(2, 10).await;
    w.upstream.push(Reply::new().text(["Fine."]));
    // Slow enough that the rejoin below usually finds the title still due;
    // the assertions hold either way.
    w.upstream.push(Reply::new().text(["Status ", "check"]).chunk_delay(std::time::Duration::from_millis(300)));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "how are things").await;
    let ended = on_a.until_kind("turn_ended").await.pop().unwrap();
    drop(on_a);

    // Native, from the turn's end: only the title.
    let cursor = ended.id.unwrap();
    let rest = SseReader::new(w.apps[1].events(&w.token, &id, Some(cursor)).await).rest().await;
    assert_eq!(rest.iter().map(|f| f.event.as_str()).collect::<Vec<_>>(), ["title_updated"]);
    assert_eq!(rest[0].data["title"], "Status check");
    // From the title on: nothing.
    let after = SseReader::new(w.apps[1].events(&w.token, &id, rest[0].id).await).rest().await;
    assert!(after.is_empty(), "{after:?}");

    // Cosmo, the whole log on B: done, then the title, once.
    let path = format!("/v1/sessions/{id}/events?format=cosmo&after=0");
    let (_, data) = cosmo(w.apps[1].get(&path, Some(&w.token)).await).await;
    let kinds = types(&data);
    assert_eq!(kinds.iter().filter(|k| **k == "title-updated").count(), 1, "{kinds:?}");
    assert_eq!(&kinds[kinds.len() - 2..], ["done", "title-updated"], "{kinds:?}");
    assert_eq!(w.upstream.calls(), 2);
}

#[tokio::test]
async fn a_failed_title_call_falls_back_to_the_first_words_of_the_first_message() {
    let w = titled_world(1, 10).await;
    w.upstream.push(Reply::new().text(["Sure."]));
    w.upstream.push(Reply::http_error(400, r#"{"error":{"message":"no titles here"}}"#));
    let id = w.session(0, "mock", json!({})).await;
    let path = format!("/v1/sessions/{id}/messages?format=cosmo");
    let body = json!({"content": "please  refund my last order, it never arrived at all"});
    let (_, data) = cosmo(w.apps[0].post_json(&path, Some(&w.token), &body).await).await;
    assert_eq!(types(&data), ["thinking", "text", "done", "title-updated"]);
    assert_eq!(data[3]["title"], "please refund my last order, it never arrived");
    assert_eq!(view(&w, 0, &id).await["title"], "please refund my last order, it never arrived");
}

#[tokio::test]
async fn when_the_owner_dies_between_the_turns_end_and_the_title_the_replica_taking_over_makes_it_once() {
    let mut w = titled_world(2, 1).await;
    w.upstream.push(Reply::new().text(["Done."]));
    // A's title call hangs; B's gets an answer.
    w.upstream.push(Reply::new().text(["never"]).stall_after(0));
    w.upstream.push(Reply::new().text(["Made on B"]));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "go").await;
    let ended = on_a.until_kind("turn_ended").await.pop().unwrap();
    assert_eq!(ended.data["title_pending"], true);
    w.upstream.wait_for_calls(2, STEP_TIMEOUT).await;
    let a = w.apps.remove(0);
    a.kill();
    drop(on_a);

    // A client rejoining on B after the turn's end waits for the title;
    // B makes it once A's heartbeat has lapsed.
    let rest = SseReader::new(w.apps[0].events(&w.token, &id, ended.id).await).rest().await;
    assert_eq!(rest.iter().map(|f| f.event.as_str()).collect::<Vec<_>>(), ["title_updated"]);
    assert_eq!(rest[0].data["title"], "Made on B");
    let log = native_log(&w, 0, &id).await;
    assert_eq!(events(&log, "title_updated").len(), 1, "exactly once in the log");
    assert_eq!(view(&w, 0, &id).await["title"], "Made on B");
    assert_eq!(w.upstream.calls(), 3);
}

#[tokio::test]
async fn a_new_turn_during_the_title_call_takes_the_session_and_its_end_brings_the_title() {
    let w = titled_world(1, 10).await;
    w.upstream.push(Reply::new().text(["First."]));
    w.upstream.push(Reply::new().text(["never"]).stall_after(0));
    w.upstream.push(Reply::new().text(["Second."]));
    w.upstream.push(Reply::new().text(["Two questions"]));
    let id = w.session(0, "mock", json!({})).await;
    let mut first = w.send(0, &id, "one").await;
    first.until_kind("turn_ended").await;
    w.upstream.wait_for_calls(2, STEP_TIMEOUT).await;

    let second = w.send(0, &id, "two").await.rest().await;
    let n = second.len();
    assert_eq!((second[n - 2].event.as_str(), second[n - 1].event.as_str()), ("turn_ended", "title_updated"));
    assert_eq!(second[n - 2].data["title_pending"], true);
    assert_eq!(second[n - 1].data["title"], "Two questions");
    // The first turn's stream stopped waiting at the new turn.
    assert!(first.rest().await.is_empty());
    assert_eq!(events(&native_log(&w, 0, &id).await, "title_updated").len(), 1);
    assert_eq!(view(&w, 0, &id).await["title"], "Two questions");
}

#[tokio::test]
async fn a_demo_session_gets_a_deterministic_title() {
    let w = titled_world(1, 10).await;
    let id = w.session(0, "demo", json!({})).await;
    let frames = w.send(0, &id, "tell me about my order").await.rest().await;
    assert_eq!(frames.last().unwrap().data["title"], "Tell Me About My Order");
    assert_eq!(w.upstream.calls(), 0);
}

#[tokio::test]
async fn without_titles_a_turn_ends_the_stream_and_no_title_is_made() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["Hello."]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "hi").await.rest().await;
    let end = frames.last().unwrap();
    assert_eq!((end.event.as_str(), end.data.get("title_pending")), ("turn_ended", None));
    assert_eq!(w.upstream.calls(), 1);
    assert_eq!(view(&w, 0, &id).await["title"], Value::Null);
}
