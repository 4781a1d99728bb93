//! Durable sessions across replicas: replay and live follow on another
//! replica, concurrent resumes, takeover of a dead replica's session,
//! tenant isolation and retention. Turns are scripted by `ScriptedRunner`.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::sessions::TurnRunner;

use crate::{
    helpers::{AppOptions, SharedStore, TestApp, assert_error, on_both_stores, spawn_replicas},
    sse::{SseReader, seqs},
    support::runner::ScriptedRunner,
};

/// `n` replicas sharing one Redis prefix, one mock upstream and one runner.
async fn replicas(n: usize, runner: &Arc<ScriptedRunner>, tweak: impl Fn(&mut AppOptions)) -> Vec<TestApp> {
    replicas_on(SharedStore::Redis, n, runner, tweak).await
}

/// The same on `store`.
async fn replicas_on(
    store: SharedStore,
    n: usize,
    runner: &Arc<ScriptedRunner>,
    tweak: impl Fn(&mut AppOptions),
) -> Vec<TestApp> {
    spawn_replicas(n, |options| {
        store.apply(options);
        options.runner = Some(runner.clone() as Arc<dyn TurnRunner>);
        tweak(options);
    })
    .await
}

on_both_stores!(
    a_session_produced_on_a_is_replayed_on_b_from_any_cursor_then_followed_live,
    two_resumes_sent_at_once_to_a_and_b_produce_one_continuation_and_one_409,
    a_killed_replicas_session_is_taken_over_once_within_the_lease_time_plus_a_renewal,
);

async fn a_session_produced_on_a_is_replayed_on_b_from_any_cursor_then_followed_live(store: SharedStore) {
    let runner = ScriptedRunner::new();
    let apps = replicas_on(store, 2, &runner, |_| {}).await;
    let (a, b) = (&apps[0], &apps[1]);
    let token = a.token("acme", "alice");
    let id = a.create_session(&token, "demo").await;

    // Replica A runs a turn of 10 deltas; let 4 of them out.
    let mut on_a = SseReader::new(a.send_message(&token, &id, "gated 10").await);
    runner.release(4);
    let first = on_a.until_seq(5).await;
    assert_eq!(seqs(&first), vec![1, 2, 3, 4, 5]);
    assert_eq!(first[0].event, "turn_started");

    // From every cursor, B replays exactly what follows it.
    let mut followers = Vec::new();
    for cursor in 0..=5u64 {
        let mut reader = SseReader::new(b.events(&token, &id, Some(cursor)).await);
        if cursor < 5 {
            let replayed = reader.until_seq(5).await;
            assert_eq!(seqs(&replayed), ((cursor + 1)..=5).collect::<Vec<_>>(), "cursor {cursor}");
        }
        followers.push((cursor, reader));
    }

    // Then the live events A appends reach every follower on B, in order.
    runner.release(6);
    for (cursor, mut reader) in followers {
        let rest = reader.rest().await;
        assert_eq!(seqs(&rest), (6..=12).collect::<Vec<_>>(), "cursor {cursor}");
        assert_eq!(rest.last().unwrap().event, "turn_ended");
        for frame in &rest {
            assert_eq!(frame.data["session_id"], id.as_str());
            assert_eq!(frame.data["seq"], frame.id.unwrap());
        }
    }
    let on_a_rest = on_a.rest().await;
    assert_eq!(seqs(&on_a_rest), (6..=12).collect::<Vec<_>>());

    // The same cursor through `?after=` gives the same replay.
    let response = b.get(&format!("/v1/sessions/{id}/events?after=10"), Some(&token)).await;
    assert_eq!(seqs(&SseReader::new(response).rest().await), vec![11, 12]);
}

async fn two_resumes_sent_at_once_to_a_and_b_produce_one_continuation_and_one_409(store: SharedStore) {
    let runner = ScriptedRunner::new();
    let apps = replicas_on(store, 2, &runner, |_| {}).await;
    let (a, b) = (&apps[0], &apps[1]);
    let token = a.token("acme", "alice");
    let id = a.create_session(&token, "demo").await;
    let paused = SseReader::new(a.send_message(&token, &id, "pause").await).rest().await;
    let last = paused.last().unwrap();
    assert_eq!(last.event, "paused");
    assert_eq!(last.data["pending_calls"][0]["tool_call_id"], "call_1");

    let body = json!({"results": [{"tool_call_id": "call_1", "output": "chart drawn"}]});
    let (on_a, on_b) = tokio::join!(a.tool_results(&token, &id, &body), b.tool_results(&token, &id, &body));
    let mut statuses = [on_a.status(), on_b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let (winner, loser) = if on_a.status() == StatusCode::OK { (on_a, on_b) } else { (on_b, on_a) };
    assert_error(loser, StatusCode::CONFLICT, "conflict").await;
    let continuation = SseReader::new(winner).rest().await;
    let kinds: Vec<&str> = continuation.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(kinds, vec!["resumed", "tool_result", "text_delta", "turn_ended"]);
    assert_eq!(continuation[2].data["text"], "got chart drawn");

    // The log holds one continuation, whichever replica is asked.
    let log = SseReader::new(b.events(&token, &id, Some(0)).await).rest().await;
    assert_eq!(log.iter().filter(|f| f.event == "resumed").count(), 1);
    assert_eq!(seqs(&log), (1..=log.len() as u64).collect::<Vec<_>>(), "gapless");
    // A third resume finds nothing pending.
    assert_error(a.tool_results(&token, &id, &body).await, StatusCode::CONFLICT, "conflict").await;
}

#[tokio::test]
async fn a_resume_must_answer_exactly_the_pending_calls() {
    let runner = ScriptedRunner::new();
    let apps = replicas(1, &runner, |_| {}).await;
    let a = &apps[0];
    let token = a.token("acme", "alice");
    let id = a.create_session(&token, "demo").await;
    SseReader::new(a.send_message(&token, &id, "pause").await).rest().await;
    let unknown = json!({"results": [{"tool_call_id": "call_9", "output": "x"}]});
    assert_error(a.tool_results(&token, &id, &unknown).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    let missing = json!({"results": []});
    assert_error(a.tool_results(&token, &id, &missing).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    let view = a.sessions.get(&principal("acme", "alice"), &id).await.unwrap();
    assert_eq!(view.session.status().as_str(), "awaiting_client", "bad resumes leave the session paused");
}

async fn a_killed_replicas_session_is_taken_over_once_within_the_lease_time_plus_a_renewal(store: SharedStore) {
    let ttl = Duration::from_secs(2);
    let runner = ScriptedRunner::new();
    let mut apps = replicas_on(store, 3, &runner, |o| o.lease_ttl_secs = ttl.as_secs()).await;
    let token = apps[0].token("acme", "alice");
    let id = apps[0].create_session(&token, "demo").await;
    let mut on_a = SseReader::new(apps[0].send_message(&token, &id, "gated 5").await);
    runner.release(1);
    on_a.until_seq(2).await;

    // A keeps its lease past the TTL by renewing it: B does not take over.
    let mut watcher = SseReader::new(apps[1].events(&token, &id, Some(2)).await);
    let renewed = tokio::time::timeout(ttl + ttl / 2, runner.wait_for_takeover()).await;
    assert!(renewed.is_err(), "no takeover while A renews its lease");

    let a = apps.remove(0);
    a.kill();
    let killed_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), runner.wait_for_takeover()).await.expect("a takeover");
    let elapsed = killed_at.elapsed();
    // Lease TTL plus one renewal (= sweep) interval, plus scheduling slack.
    assert!(elapsed < ttl + ttl / 3 + Duration::from_secs(1), "took over after {elapsed:?}");

    // The rejoined stream on B sees the takeover's events, gapless, to the end.
    let rest = watcher.rest().await;
    let all: Vec<u64> = seqs(&rest);
    assert_eq!(all, (3..3 + all.len() as u64).collect::<Vec<_>>());
    assert!(rest.iter().any(|f| f.data["text"] == "taken over"));
    assert_eq!(rest.last().unwrap().event, "turn_ended");

    // B and C both sweep; a few more sweeps later, still exactly one takeover.
    tokio::time::sleep(ttl).await; // waiting for something NOT to happen
    assert_eq!(runner.takeovers.load(Ordering::SeqCst), 1);
    let view: Value = apps[1].get(&format!("/v1/sessions/{id}"), Some(&token)).await.json().await.unwrap();
    assert_eq!(view["status"], "completed");
    assert!(view["replica"] == "b" || view["replica"] == "c", "{view}");
}

#[tokio::test]
async fn another_tenant_or_subject_gets_404_on_every_session_endpoint() {
    let runner = ScriptedRunner::new();
    let apps = replicas(2, &runner, |_| {}).await;
    let (a, b) = (&apps[0], &apps[1]);
    let owner = a.token("acme", "alice");
    let id = a.create_session(&owner, "demo").await;
    SseReader::new(a.send_message(&owner, &id, "pause").await).rest().await;

    let strangers = [b.token("globex", "alice"), b.token("acme", "bob")];
    for token in &strangers {
        for response in [
            b.get(&format!("/v1/sessions/{id}"), Some(token)).await,
            b.events(token, &id, None).await,
            b.send_message(token, &id, "hi").await,
            b.tool_results(token, &id, &json!({"results": [{"tool_call_id": "call_1", "output": "x"}]})).await,
        ] {
            assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
        }
    }
    // An admin of the same tenant may look; an admin of another may not.
    let admin = b.token_with("acme", "ops", Duration::from_secs(60), &["sessions:admin"]);
    assert_eq!(b.get(&format!("/v1/sessions/{id}"), Some(&admin)).await.status(), StatusCode::OK);
    let foreign_admin = b.token_with("globex", "ops", Duration::from_secs(60), &["sessions:admin"]);
    assert_error(b.get(&format!("/v1/sessions/{id}"), Some(&foreign_admin)).await, StatusCode::NOT_FOUND, "not_found")
        .await;
    // Nothing a stranger did changed the session.
    let view: Value = a.get(&format!("/v1/sessions/{id}"), Some(&owner)).await.json().await.unwrap();
    assert_eq!(view["status"], "awaiting_client");
}

#[tokio::test]
async fn a_cursor_beyond_retention_gets_recovery_failed_and_a_future_cursor_is_refused() {
    let runner = ScriptedRunner::new();
    let apps = replicas(1, &runner, |o| o.event_log_max_len = 5).await;
    let a = &apps[0];
    let token = a.token("acme", "alice");
    let id = a.create_session(&token, "demo").await;
    runner.release(10);
    let turn = SseReader::new(a.send_message(&token, &id, "gated 10").await).rest().await;
    assert_eq!(turn.last().unwrap().id, Some(12));

    let body = assert_error(a.events(&token, &id, Some(1)).await, StatusCode::GONE, "recovery_failed").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("8"), "{body}");
    // The retained tail is still served.
    assert_eq!(seqs(&SseReader::new(a.events(&token, &id, Some(7)).await).rest().await), (8..=12).collect::<Vec<_>>());
    assert_error(a.events(&token, &id, Some(99)).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    let response = a
        .client
        .get(a.url(&format!("/v1/sessions/{id}/events")))
        .bearer_auth(&token)
        .header("last-event-id", "x")
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
}

#[tokio::test]
async fn the_session_view_shows_status_pending_calls_and_last_seq() {
    let runner = ScriptedRunner::new();
    let apps = replicas(2, &runner, |_| {}).await;
    let token = apps[0].token("acme", "alice");
    let id = apps[0].create_session(&token, "demo").await;
    SseReader::new(apps[0].send_message(&token, &id, "pause").await).rest().await;
    let view: Value = apps[1].get(&format!("/v1/sessions/{id}"), Some(&token)).await.json().await.unwrap();
    assert_eq!(view["status"], "awaiting_client");
    // turn_started, text_delta, usage, tool_call, paused.
    assert_eq!(view["last_seq"], 5);
    assert_eq!(view["pending_calls"][0]["tool"], "render_chart");
    assert_eq!(view["model"], "demo");
}

#[tokio::test]
async fn creating_a_session_with_an_unknown_model_lists_the_allowed_ones() {
    let runner = ScriptedRunner::new();
    let apps = replicas(1, &runner, |_| {}).await;
    let token = apps[0].token("globex", "bob");
    let response = apps[0].post_json("/v1/sessions", Some(&token), &json!({"model": "mock"})).await;
    let body = assert_error(response, StatusCode::BAD_REQUEST, "unknown_model").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("allowed: demo"), "{body}");
}

fn principal(tenant: &str, subject: &str) -> switchboard::principal::Principal {
    switchboard::principal::Principal { tenant: tenant.into(), subject: subject.into(), scopes: vec![] }
}

/// The newcomer's path on the embedded defaults' store: the demo model asks
/// for the demo tool, the relay is approved, the tool runs, the answer streams.
#[tokio::test]
async fn a_demo_turn_with_a_relay_runs_end_to_end_on_the_in_memory_store() {
    let extra = r#"
[[tools]]
name = "lookup_order"
builtin = "demo"
permission = "ask"
"#;
    let app = crate::helpers::spawn_app_with(AppOptions {
        redis_url: None,
        extra_toml: extra.to_string(),
        ..AppOptions::default()
    })
    .await;
    let token = app.token("acme", "alice");
    let id = app.create_session(&token, "demo").await;
    let mut stream = SseReader::new(app.send_message(&token, &id, r#"use lookup_order with {"id":"42"}"#).await);
    let relay = stream.until_kind("relay_requested").await.last().unwrap().data.clone();
    assert_eq!(relay["params"], json!({"id": "42"}));
    let path = format!("/v1/sessions/{id}/relays/{}", relay["relay_id"].as_str().unwrap());
    assert_eq!(app.post_json(&path, Some(&token), &json!({"approved": true})).await.status(), StatusCode::OK);
    let rest = stream.rest().await;
    let text: String =
        rest.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert!(text.starts_with("Done. lookup_order answered:"), "{text}");
    assert!(text.contains("shipped"), "{text}");
    assert_eq!(rest.last().unwrap().data["reason"], "final");
}
