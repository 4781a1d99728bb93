//! `GET /v1/sessions` and `DELETE /v1/sessions/{id}` over real Redis: the
//! caller's sessions newest first with their titles, scoped to the subject
//! (a tenant's admin may ask for all of the tenant's), paged by a cursor that
//! keeps its place while sessions are created; a deleted session gone from
//! the list, the store and every route; a running one not deleted; an
//! expired one pruned from the list.

use std::{collections::BTreeSet, time::Duration};

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, assert_error, redis_url, spawn_app, spawn_app_with},
    orchestrator::world,
    support::mock_upstream::Reply,
};

async fn list(app: &TestApp, token: &str, query: &str) -> Value {
    let response = app.get(&format!("/v1/sessions{query}"), Some(token)).await;
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    response.json().await.unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["sessions"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

async fn delete(app: &TestApp, token: &str, id: &str) -> Response {
    app.client.delete(app.url(&format!("/v1/sessions/{id}"))).bearer_auth(token).send().await.unwrap()
}

/// Every page of the caller's list, `limit` at a time; `between` runs
/// after the first page (sessions created while a client pages).
async fn all_pages(app: &TestApp, token: &str, limit: usize, between: impl AsyncFnOnce()) -> Vec<String> {
    let mut page = list(app, token, &format!("?limit={limit}")).await;
    let mut seen = ids(&page);
    between().await;
    while let Some(cursor) = page["next_cursor"].as_str() {
        page = list(app, token, &format!("?limit={limit}&cursor={cursor}")).await;
        seen.extend(ids(&page));
    }
    seen
}

#[tokio::test]
async fn the_list_is_the_callers_sessions_newest_first_with_their_fields() {
    let app = spawn_app().await;
    let alice = app.token("acme", "alice");
    let first = app.create_session(&alice, "demo").await;
    let second = app.create_session(&alice, "mock").await;
    let page = list(&app, &alice, "").await;
    assert_eq!(ids(&page), [second.clone(), first.clone()]);
    assert_eq!(page["next_cursor"], Value::Null);
    let entry = &page["sessions"][0];
    assert_eq!(
        (entry["status"].as_str(), entry["model"].as_str(), &entry["title"]),
        (Some("idle"), Some("mock"), &Value::Null)
    );
    let view: Value = app.get(&format!("/v1/sessions/{second}"), Some(&alice)).await.json().await.unwrap();
    for field in ["id", "title", "status", "model", "created_ms", "updated_ms"] {
        assert_eq!(entry[field], view[field], "{field} as in the session's view");
    }
    assert!(entry["created_ms"].as_u64().unwrap() > 1_600_000_000_000);
}

#[tokio::test]
async fn the_list_is_scoped_to_the_subject_and_the_tenant_and_all_needs_the_admin_scope() {
    let app = spawn_app().await;
    let alice = app.token("acme", "alice");
    let id = app.create_session(&alice, "demo").await;
    let hour = Duration::from_secs(3600);
    let strangers = [
        app.token("acme", "bob"),
        app.token("globex", "alice"),
        app.token_with("globex", "ops", hour, &["sessions:admin"]),
    ];
    for token in strangers {
        assert!(ids(&list(&app, &token, "").await).is_empty());
    }
    let globex_admin = app.token_with("globex", "ops", hour, &["sessions:admin"]);
    assert!(ids(&list(&app, &globex_admin, "?all=true").await).is_empty(), "another tenant's admin sees none");
    let bob = app.token("acme", "bob");
    let bob_id = app.create_session(&bob, "demo").await;
    assert_eq!(ids(&list(&app, &bob, "").await), std::slice::from_ref(&bob_id));
    assert_error(app.get("/v1/sessions?all=true", Some(&bob)).await, StatusCode::FORBIDDEN, "forbidden").await;
    let admin = app.token_with("acme", "ops", hour, &["sessions:admin"]);
    assert_eq!(ids(&list(&app, &admin, "?all=true").await), [bob_id, id]);
    assert!(ids(&list(&app, &admin, "").await).is_empty(), "without all=true: the admin's own");
}

#[tokio::test]
async fn pages_stay_stable_while_sessions_are_created_and_bad_queries_are_refused() {
    let app = spawn_app().await;
    let alice = app.token("acme", "alice");
    let mut created = Vec::new();
    for _ in 0..7 {
        created.push(app.create_session(&alice, "demo").await);
    }
    let mut later = Vec::new();
    let paged = all_pages(&app, &alice, 3, async || {
        for _ in 0..4 {
            later.push(app.create_session(&alice, "demo").await);
        }
    })
    .await;
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    assert_eq!(paged, newest_first, "every session of the first listing once, in order; none created since");
    let fresh = list(&app, &alice, "?limit=4").await;
    assert_eq!(ids(&fresh), later.iter().rev().cloned().collect::<Vec<_>>(), "new sessions head a fresh listing");
    assert_eq!(BTreeSet::from_iter(all_pages(&app, &alice, 100, async || {}).await).len(), 11);

    for query in ["?limit=0", "?limit=101", "?limit=x", "?cursor=nope", "?cursor=", "?all=maybe"] {
        let response = app.get(&format!("/v1/sessions{query}"), Some(&alice)).await;
        assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    }
}

#[tokio::test]
async fn a_deleted_session_is_gone_from_the_list_the_store_and_every_route() {
    let w = world(2, |o| o.titles = true).await;
    w.upstream.push(Reply::new().text(["Hi."]));
    w.upstream.push(Reply::new().text(["Greeting"]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "hello").await.rest().await;
    assert_eq!(frames.last().unwrap().event, "title_updated");
    let keep = w.session(0, "mock", json!({})).await;
    let before = crate::support::raw_sse::store_keys(&w.apps[0]).await;
    assert!(before.iter().any(|k| k.contains(&format!(":s:{id}}}:events"))), "{before:?}");

    assert_eq!(delete(&w.apps[1], &w.token, &id).await.status(), StatusCode::NO_CONTENT);
    let after = crate::support::raw_sse::store_keys(&w.apps[0]).await;
    assert!(!after.iter().any(|k| k.contains(&format!(":s:{id}}}"))), "{after:?}");
    assert_eq!(ids(&list(&w.apps[0], &w.token, "").await), [keep]);
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = &w.apps[0].config.store.key_prefix;
    for index in [format!("{prefix}{{t:acme}}:subj:alice:sessions"), format!("{prefix}{{t:acme}}:sessions")] {
        let members: Vec<String> =
            redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
        assert!(!members.iter().any(|m| m.ends_with(&id)), "{index}: {members:?}");
    }

    let token = Some(w.token.as_str());
    for app in &w.apps {
        let mut gets = vec![format!("/v1/sessions/{id}"), format!("/v1/ai-sdk/chat/{id}/stream")];
        gets.extend(switchboard::protocol::FORMATS.iter().map(|f| format!("/v1/sessions/{id}/events?format={f}")));
        for path in gets {
            assert_error(app.get(&path, token).await, StatusCode::NOT_FOUND, "not_found").await;
        }
        let posts = [
            (format!("/v1/sessions/{id}/messages"), json!({"content": "again"})),
            (format!("/v1/sessions/{id}/tool-results"), json!({"results": []})),
            (format!("/v1/sessions/{id}/relays/relay_x"), json!({"approved": true})),
            (format!("/v1/sessions/{id}/cancel"), json!({})),
        ];
        for (path, body) in posts {
            assert_error(app.post_json(&path, token, &body).await, StatusCode::NOT_FOUND, "not_found").await;
        }
        let holmes = json!({"ask": "more", "model": "mock", "session_id": id});
        crate::helpers::assert_detail(app.post_json("/api/chat", token, &holmes).await, StatusCode::NOT_FOUND).await;
        assert_error(delete(app, &w.token, &id).await, StatusCode::NOT_FOUND, "not_found").await;
    }
    assert_eq!(w.upstream.calls(), 2, "nothing reached the model after the delete");
}

#[tokio::test]
async fn a_running_session_is_not_deleted_until_it_is_cancelled() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "refund order 9").await;
    let relay = stream.until_kind("relay_requested").await.pop().unwrap();
    let refused = delete(&w.apps[1], &w.token, &id).await;
    let body = assert_error(refused, StatusCode::CONFLICT, "conflict").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("cancel it first"), "{body}");
    let cancel = w.apps[1].post_json(&format!("/v1/sessions/{id}/cancel"), Some(&w.token), &json!({})).await;
    assert_eq!(cancel.status(), StatusCode::ACCEPTED);
    assert_eq!(stream.rest().await.last().unwrap().data["reason"], "cancelled");
    assert_eq!(delete(&w.apps[1], &w.token, &id).await.status(), StatusCode::NO_CONTENT);
    // The relay it waited on is gone with it.
    let relay_id = relay.data["relay_id"].as_str().unwrap();
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let relay_key = format!("{}relay:{relay_id}", w.apps[0].config.store.key_prefix);
    let exists: i64 = redis::cmd("EXISTS").arg(&relay_key).query_async(&mut conn).await.unwrap();
    assert_eq!(exists, 0, "{relay_key}");
    let decided = w.apps[0]
        .post_json(
            &format!("/chat/relay/{relay_id}"),
            Some(&w.token),
            &json!({"sessionId": id, "response": {"approved": true}}),
        )
        .await;
    assert_eq!(decided.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_expired_session_is_pruned_from_the_list() {
    let app = spawn_app().await;
    let alice = app.token("acme", "alice");
    let old = app.create_session(&alice, "demo").await;
    let live = app.create_session(&alice, "demo").await;
    // What the TTL does: the session's keys vanish.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = &app.config.store.key_prefix;
    let _: i64 =
        redis::cmd("DEL").arg(format!("{prefix}{{t:acme:s:{old}}}:state")).query_async(&mut conn).await.unwrap();
    assert_eq!(ids(&list(&app, &alice, "").await), std::slice::from_ref(&live));
    let index = format!("{prefix}{{t:acme}}:subj:alice:sessions");
    let members: Vec<String> = redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(members.len(), 1, "the stale entry was pruned: {members:?}");
    assert!(members[0].ends_with(&live));
}

#[tokio::test]
async fn the_in_memory_store_lists_and_deletes_alike() {
    let app = spawn_app_with(crate::helpers::AppOptions { redis_url: None, ..Default::default() }).await;
    let alice = app.token("acme", "alice");
    let a = app.create_session(&alice, "demo").await;
    let b = app.create_session(&alice, "demo").await;
    assert_eq!(ids(&list(&app, &alice, "?limit=1").await), std::slice::from_ref(&b));
    assert_eq!(delete(&app, &alice, &b).await.status(), StatusCode::NO_CONTENT);
    assert_eq!(ids(&list(&app, &alice, "").await), [a]);
    let events = app.get(&format!("/v1/sessions/{b}/events"), Some(&alice)).await;
    assert_error(events, StatusCode::NOT_FOUND, "not_found").await;
}
