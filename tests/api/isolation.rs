//! The isolation matrix: tenants `acme` and `globex`, subjects `alice` and
//! `bob`, by token and by API key. For sessions of acme/alice — one waiting
//! on a live relay, one paused for the client — every session endpoint of
//! every dialect answers 404 to anyone but the owner and acme's admins
//! (`sessions:admin`), and nothing a stranger sends changes the session,
//! calls a tool or calls the model — a `DELETE` included; the strangers'
//! session lists (`GET /v1/sessions`, and `?all=true` for admins) hold none
//! of them. A stranger who sends the owner's
//! conversation history with answers gets a conversation of their own from
//! it, in which nothing they approve runs.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, store_snapshot},
    orchestrator::{World, world},
    sse::SseReader,
    support::mock_upstream::Reply,
};

/// API keys the matrix's world accepts (configured by [`with_keys`]).
const BOB_KEY: &str = "acme-bob-key";
const GLOBEX_ALICE_KEY: &str = "globex-alice-key";
const GLOBEX_ADMIN_KEY: &str = "globex-admin-key";

/// API keys for acme/bob and globex's alice and admin, beside their tokens.
fn with_keys(options: &mut crate::helpers::AppOptions) {
    let entry = crate::helpers::api_key_entry;
    let admin = entry(GLOBEX_ADMIN_KEY, "ops").replace(" }", ", scopes = [\"sessions:admin\"] }");
    options.tenant_toml.push(("acme".into(), format!("api_keys = [{}]", entry(BOB_KEY, "bob"))));
    let globex = format!("api_keys = [{}, {admin}]", entry(GLOBEX_ALICE_KEY, "alice"));
    options.tenant_toml.push(("globex".into(), globex));
}

/// How a stranger authenticates.
#[derive(Clone)]
enum Credential {
    Token(String),
    ApiKey(&'static str),
}

/// Everyone who must not see acme/alice's sessions.
fn strangers(app: &TestApp) -> Vec<(&'static str, Credential)> {
    let hour = Duration::from_secs(3600);
    vec![
        ("same tenant, other subject", Credential::Token(app.token("acme", "bob"))),
        ("other tenant, same subject", Credential::Token(app.token("globex", "alice"))),
        ("other tenant's admin", Credential::Token(app.token_with("globex", "ops", hour, &["sessions:admin"]))),
        ("same tenant, other scope", Credential::Token(app.token_with("acme", "bob", hour, &["sessions:read"]))),
        ("same tenant, other subject, by API key", Credential::ApiKey(BOB_KEY)),
        ("other tenant, same subject, by API key", Credential::ApiKey(GLOBEX_ALICE_KEY)),
        ("other tenant's admin, by API key", Credential::ApiKey(GLOBEX_ADMIN_KEY)),
    ]
}

/// One request to a session endpoint, as a stranger sends it.
struct Probe {
    what: String,
    method: &'static str,
    path: String,
    body: Option<Value>,
}

impl Probe {
    fn get(what: impl Into<String>, path: String) -> Self {
        Self { what: what.into(), method: "GET", path, body: None }
    }

    fn post(what: impl Into<String>, path: String, body: Value) -> Self {
        Self { what: what.into(), method: "POST", path, body: Some(body) }
    }

    fn delete(what: impl Into<String>, path: String) -> Self {
        Self { what: what.into(), method: "DELETE", path, body: None }
    }

    async fn send(&self, app: &TestApp, credential: &Credential) -> Response {
        let request = match self.method {
            "GET" => app.client.get(app.url(&self.path)),
            "DELETE" => app.client.delete(app.url(&self.path)),
            _ => app.client.post(app.url(&self.path)).json(self.body.as_ref().unwrap_or(&json!({}))),
        };
        let request = match credential {
            Credential::Token(token) => request.bearer_auth(token),
            Credential::ApiKey(key) => request.header("x-api-key", *key),
        };
        request.header("last-event-id", "0").send().await.unwrap()
    }
}

/// Every session endpoint of every dialect, aimed at session `id` (with a
/// pending relay `relay_id` and a pending tool call `call_id`).
fn probes(id: &str, relay_id: &str, call_id: &str) -> Vec<Probe> {
    let mut probes = vec![
        Probe::get("native view", format!("/v1/sessions/{id}")),
        Probe::get("AI SDK reconnect", format!("/v1/ai-sdk/chat/{id}/stream")),
        Probe::post("native message", format!("/v1/sessions/{id}/messages"), json!({"content": "hi"})),
        Probe::post(
            "native tool results",
            format!("/v1/sessions/{id}/tool-results"),
            json!({"results": [{"tool_call_id": call_id, "output": "x"}],
                   "decisions": [{"tool_call_id": call_id, "approved": true}]}),
        ),
        Probe::post("native relay decision", format!("/v1/sessions/{id}/relays/{relay_id}"), json!({"approved": true})),
        Probe::post("native cancel", format!("/v1/sessions/{id}/cancel"), json!({})),
        Probe::delete("native delete", format!("/v1/sessions/{id}")),
        Probe::post(
            "llm-gateway relay",
            format!("/chat/relay/{relay_id}"),
            json!({"sessionId": id, "response": {"approved": true, "always": true}}),
        ),
        Probe::post(
            "holmes resume by session_id",
            "/api/chat".into(),
            json!({"ask": "", "model": "mock", "stream": true, "session_id": id,
                   "tool_decisions": [{"tool_call_id": call_id, "approved": true}]}),
        ),
        Probe::post(
            "holmes resume by the pending call alone",
            "/api/chat".into(),
            json!({"ask": "", "model": "mock", "stream": true,
                   "tool_decisions": [{"tool_call_id": call_id, "approved": true}]}),
        ),
        Probe::post(
            "holmes new turn on the session",
            "/api/chat".into(),
            json!({"ask": "and now?", "model": "mock", "session_id": id}),
        ),
        Probe::post("zot state", format!("/v1/zot?session={id}"), json!({"id": "1", "type": "get_state"})),
        Probe::post(
            "zot prompt",
            format!("/v1/zot?session={id}"),
            json!({"id": "2", "type": "prompt", "message": "hi"}),
        ),
        Probe::post("zot abort", format!("/v1/zot?session={id}"), json!({"id": "3", "type": "abort"})),
    ];
    for format in switchboard::protocol::FORMATS {
        probes.push(Probe::get(format!("events as {format}"), format!("/v1/sessions/{id}/events?format={format}")));
        probes.push(Probe::post(
            format!("message as {format}"),
            format!("/v1/sessions/{id}/messages?format={format}"),
            json!({"content": "hi"}),
        ));
    }
    probes
}

/// A 404 in the body shape of the endpoint's dialect, saying nothing of
/// the session.
async fn assert_not_found(probe: &Probe, who: &str, response: Response) {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::NOT_FOUND, "{} as {who}: {body}", probe.what);
    let ok = if probe.path.starts_with("/chat/") {
        body["error"].is_string()
    } else if probe.path.starts_with("/api/") {
        body["detail"].is_string()
    } else {
        body["error"]["code"] == "not_found"
    };
    assert!(ok, "{} as {who}: {body}", probe.what);
}

/// Every probe as every stranger, on replica B; the session's keys in the
/// store (but its lease's expiry) are the same afterwards.
async fn strangers_see_nothing(w: &World, probes: &[Probe]) {
    let b = &w.apps[1];
    let before = (session_keys(b).await, session_lists(b).await);
    let (model_calls, tool_calls) = (w.upstream.calls(), w.tools.calls("refund"));
    for (who, credential) in strangers(b) {
        for probe in probes {
            assert_not_found(probe, who, probe.send(b, &credential).await).await;
        }
    }
    assert_eq!((session_keys(b).await, session_lists(b).await), before, "a stranger changed the store");
    assert_eq!((w.upstream.calls(), w.tools.calls("refund")), (model_calls, tool_calls));
}

/// No stranger's list holds session `id`: their own lists, and with
/// `all=true` their tenant's (for admins; 403 for anyone else).
async fn strangers_list_nothing(w: &World, id: &str) {
    let b = &w.apps[1];
    for (who, credential) in strangers(b) {
        for query in ["", "?all=true", "?limit=100"] {
            let response = Probe::get("list", format!("/v1/sessions{query}")).send(b, &credential).await;
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            if status == StatusCode::FORBIDDEN && query == "?all=true" {
                assert_eq!(body["error"]["code"], "forbidden", "{who}: {body}");
                continue;
            }
            assert_eq!(status, StatusCode::OK, "{who} {query}: {body}");
            let listed = body["sessions"].as_array().unwrap();
            assert!(!listed.iter().any(|s| s["id"] == id), "{who} {query} sees {id}: {body}");
        }
    }
    let admin = b.token_with("acme", "ops", Duration::from_secs(60), &["sessions:admin"]);
    for (token, query) in [(w.token.clone(), ""), (admin, "?all=true")] {
        let body: Value = b.get(&format!("/v1/sessions{query}"), Some(&token)).await.json().await.unwrap();
        assert!(body["sessions"].as_array().unwrap().iter().any(|s| s["id"] == id), "{query}: {body}");
    }
}

/// The session lists (`GET /v1/sessions`) of every subject and tenant.
async fn session_lists(app: &TestApp) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut snapshot = store_snapshot(app).await;
    snapshot.retain(|key, _| key.ends_with(":sessions"));
    snapshot
}

/// The store's session state documents and event logs (leases are left out:
/// their owner renews them while a turn waits).
async fn session_keys(app: &TestApp) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut snapshot = store_snapshot(app).await;
    snapshot.retain(|key, _| key.ends_with(":state") || key.ends_with(":events"));
    snapshot
}

#[tokio::test]
async fn a_session_waiting_on_a_live_relay_is_invisible_to_strangers_and_decided_by_an_admin() {
    let w = world(2, with_keys).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "refund order 9").await;
    let relay = stream.until_kind("relay_requested").await.pop().unwrap();
    let relay_id = relay.data["relay_id"].as_str().unwrap().to_string();

    strangers_see_nothing(&w, &probes(&id, &relay_id, "call_r")).await;
    strangers_list_nothing(&w, &id).await;

    // acme's admin may look and decide, on either replica; the owner's
    // stream on A goes on.
    let admin = w.apps[1].token_with("acme", "ops", Duration::from_secs(60), &["sessions:admin"]);
    let view = w.apps[1].get(&format!("/v1/sessions/{id}"), Some(&admin)).await;
    assert_eq!(view.status(), StatusCode::OK);
    assert_eq!(view.json::<Value>().await.unwrap()["status"], "awaiting_relay");
    let decided = w.apps[1]
        .post_json(&format!("/v1/sessions/{id}/relays/{relay_id}"), Some(&admin), &json!({"approved": true}))
        .await;
    assert_eq!(decided.status(), StatusCode::OK);
    let rest = stream.rest().await;
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    assert_eq!(w.tools.calls("refund"), 1);
    let replay = SseReader::new(w.apps[1].events(&admin, &id, Some(0)).await).rest().await;
    assert_eq!(replay.last().unwrap().data["reason"], "final", "the admin may follow the log");
}

#[tokio::test]
async fn a_holmes_session_paused_for_approval_is_invisible_to_strangers_and_resumed_by_an_admin() {
    let w = world(2, with_keys).await;
    w.upstream.push(Reply::new().tool_call("call_refund", "refund", [r#"{"order":"9"}"#]));
    let body = json!({"ask": "refund order 9", "model": "mock", "stream": true, "enable_tool_approval": true});
    let paused = SseReader::new(w.apps[0].post_json("/api/chat", Some(&w.token), &body).await).rest().await;
    let pause = paused.last().unwrap();
    assert_eq!(pause.event, "approval_required");
    let id = pause.data["session_id"].as_str().unwrap().to_string();
    let history = pause.data["conversation_history"].clone();

    strangers_see_nothing(&w, &probes(&id, "relay_none", "call_refund")).await;
    strangers_list_nothing(&w, &id).await;

    // A stranger holding the owner's history (and answers for its pending
    // call) gets a conversation of their own from it: the owner's session
    // is untouched and nothing the stranger approved runs.
    let before = session_keys(&w.apps[1]).await;
    w.upstream.push(Reply::new().text(["Nothing was refunded."]));
    let stolen = json!({"ask": "", "model": "mock", "stream": true, "conversation_history": history,
        "tool_decisions": [{"tool_call_id": "call_refund", "approved": true}]});
    let theirs = SseReader::new(
        w.apps[1]
            .client
            .post(w.apps[1].url("/api/chat"))
            .header("x-api-key", BOB_KEY)
            .json(&stolen)
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    let end = theirs.last().unwrap();
    assert_eq!(end.event, "ai_answer_end");
    assert_ne!(end.data["session_id"], id.as_str(), "a conversation of the stranger's own");
    let seen = crate::orchestrator::tool_messages(&w.model_request(w.upstream.calls() - 1));
    assert!(seen[0]["content"].as_str().unwrap().contains("not run"), "{seen:?}");
    assert_eq!(w.tools.calls("refund"), 0);
    let mut after = session_keys(&w.apps[1]).await;
    after.retain(|key, _| before.contains_key(key));
    assert_eq!(after, before, "the owner's session is untouched");

    w.upstream.push(Reply::new().text(["Refunded."]));

    let admin = w.apps[1].token_with("acme", "ops", Duration::from_secs(60), &["sessions:admin"]);
    let resume = json!({"ask": "", "model": "mock", "stream": true, "session_id": id,
        "tool_decisions": [{"tool_call_id": "call_refund", "approved": true}]});
    let resumed = SseReader::new(w.apps[1].post_json("/api/chat", Some(&admin), &resume).await).rest().await;
    assert_eq!(resumed.last().unwrap().event, "ai_answer_end");
    assert_eq!(w.tools.calls("refund"), 1);
}
