//! The agent loop end to end: a scripted model upstream (OpenAI- and
//! Anthropic-compatible), a counting tool server, real Redis, and several
//! replicas sharing them.

use std::{sync::Arc, time::Duration};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::{AppOptions, SharedStore, TestApp, assert_error, on_both_stores, spawn_replica, unique_prefix},
    sse::{Frame, SseReader, seqs},
    support::{
        mock_upstream::{MockUpstream, Reply},
        test_config::Tool,
        tool_server::{ToolReply, ToolServer},
    },
};

/// Replicas sharing Redis, one scripted upstream and one tool server.
pub struct World {
    pub apps: Vec<TestApp>,
    pub upstream: Arc<MockUpstream>,
    pub tools: ToolServer,
    pub token: String,
}

pub async fn world(replicas: usize, tweak: impl Fn(&mut AppOptions)) -> World {
    let prefix = unique_prefix();
    let upstream = Arc::new(MockUpstream::start().await);
    let tools = ToolServer::start().await;
    let server_tools = vec![
        Tool::allowed("lookup", tools.url("lookup")).described("Look up an order").taking_id(),
        Tool::asking("refund", tools.url("refund")),
        Tool::denied("wipe", tools.url("wipe")),
        Tool::allowed("big", tools.url("big")),
        Tool::allowed("bump", tools.url("bump")).described("Count one more in the shared state"),
    ];
    let models = format!(
        r#"
[models.small]
provider = "openai"
base_url = "{base}"
model = "small-model"
context_window = 2000
max_output_tokens = 200

[models.resumable]
provider = "openai"
base_url = "{base}"
model = "resumable-model"
retry_base_ms = 10
continue_partial = true

[models.resumable-claude]
provider = "anthropic"
base_url = "{base}"
model = "resumable-claude"
retry_base_ms = 10
continue_partial = true
"#,
        base = upstream.base_url(),
    );
    let mut apps = Vec::new();
    for name in ["a", "b", "c"].into_iter().take(replicas) {
        let mut options = AppOptions {
            key_prefix: prefix.clone(),
            replica_id: name.to_string(),
            tools: server_tools.clone(),
            extra_toml: models.clone(),
            ..AppOptions::default()
        };
        tweak(&mut options);
        apps.push(spawn_replica(options, upstream.clone()).await);
    }
    let token = apps[0].token("acme", "alice");
    World { apps, upstream, tools, token }
}

impl World {
    /// Creates a session on replica `on` with `options` merged into the body.
    pub async fn session(&self, on: usize, model: &str, options: Value) -> String {
        let mut body = json!({"model": model});
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, options) {
            body.extend(extra);
        }
        let response = self.apps[on].post_json("/v1/sessions", Some(&self.token), &body).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{}", response.text().await.unwrap());
        let view: Value = response.json().await.unwrap();
        view["id"].as_str().unwrap().to_string()
    }

    pub async fn send(&self, on: usize, id: &str, content: &str) -> SseReader {
        SseReader::new(self.apps[on].send_message(&self.token, id, content).await)
    }

    /// The JSON body of the `n`-th model request the upstream received.
    pub fn model_request(&self, n: usize) -> Value {
        self.upstream.requests()[n].body.clone()
    }
}

pub fn kinds(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}

pub fn of_kind<'a>(frames: &'a [Frame], kind: &str) -> Vec<&'a Frame> {
    frames.iter().filter(|f| f.event == kind).collect()
}

/// The tool results the model was sent in request `body`, as
/// `{"content": …}` objects: OpenAI `tool` messages, or the `tool_result`
/// blocks of Anthropic user messages.
pub fn tool_messages(body: &Value) -> Vec<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut results = Vec::new();
    for message in messages {
        if message["role"] == "tool" {
            results.push(message);
        } else if let Some(blocks) = message["content"].as_array() {
            results.extend(blocks.iter().filter(|b| b["type"] == "tool_result").cloned());
        }
    }
    results
}

async fn fragments_and_parallel_calls_are_assembled_and_run(model: &str) {
    let w = world(1, |_| {}).await;
    w.upstream.push(
        Reply::new().tool_call("call_a", "lookup", [r#"{"i"#, r#"d":"#, r#" "4"#, r#"2""#, "}"]).tool_call(
            "call_b",
            "lookup",
            [r#"{"id":"7"}"#],
        ),
    );
    w.upstream.push(Reply::new().text(["Both ", "found."]).usage(30, 3));
    let id = w.session(0, model, json!({})).await;
    let frames = w.send(0, &id, "look up 42 and 7").await.rest().await;

    let mut arguments: Vec<Value> = w.tools.bodies("lookup").iter().map(|b| b["arguments"].clone()).collect();
    arguments.sort_by_key(|a| a["id"].as_str().unwrap().to_string());
    assert_eq!(arguments, vec![json!({"id": "42"}), json!({"id": "7"})]);
    assert_eq!(w.tools.bodies("lookup")[0]["session_id"], id.as_str());
    // Tracing is off in this test binary: no trace context is made up.
    assert!(w.tools.traceparents("lookup").iter().all(Option::is_none));
    assert_eq!(of_kind(&frames, "tool_result").len(), 2);
    assert!(of_kind(&frames, "tool_result").iter().all(|f| f.data["status"] == "success"));
    let ended = frames.last().unwrap();
    assert_eq!(ended.event, "turn_ended");
    assert_eq!(ended.data["reason"], "final");
    // The second model call saw both results.
    assert_eq!(tool_messages(&w.model_request(1)).len(), 2, "{}", w.model_request(1));
    assert_eq!(seqs(&frames), (1..=frames.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn openai_fragments_and_parallel_calls_are_assembled_and_run() {
    fragments_and_parallel_calls_are_assembled_and_run("mock").await;
}

#[tokio::test]
async fn anthropic_fragments_and_parallel_calls_are_assembled_and_run() {
    fragments_and_parallel_calls_are_assembled_and_run("claude").await;
}

on_both_stores!(
    a_relay_decided_on_replica_b_resumes_the_turn_waiting_on_replica_a,
    cancel_stops_a_running_turn_from_another_replica,
);

async fn a_relay_decided_on_replica_b_resumes_the_turn_waiting_on_replica_a(store: SharedStore) {
    let w = world(2, |o| store.apply(o)).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "refund order 9").await;
    let before = on_a.until_kind("relay_requested").await;
    let relay = before.last().unwrap().data.clone();
    assert_eq!(relay["tool"], "refund");
    assert_eq!(relay["params"], json!({"order": "9"}));
    let relay_id = relay["relay_id"].as_str().unwrap().to_string();
    assert_eq!(w.tools.calls("refund"), 0, "nothing runs before the decision");
    let view: Value = w.apps[1].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!(view["status"], "awaiting_relay");
    assert_eq!(view["pending_relays"][0]["relay_id"], relay_id.as_str());

    let path = format!("/v1/sessions/{id}/relays/{relay_id}");
    // Another tenant, and another subject of the same tenant, cannot decide it.
    for stranger in [w.apps[1].token("globex", "alice"), w.apps[1].token("acme", "bob")] {
        let response = w.apps[1].post_json(&path, Some(&stranger), &json!({"approved": true})).await;
        assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
    }
    let decided = w.apps[1].post_json(&path, Some(&w.token), &json!({"approved": true})).await;
    assert_eq!(decided.status(), StatusCode::OK);
    let rest = on_a.rest().await;
    assert_eq!(&kinds(&rest)[..3], ["relay_decided", "tool_call", "tool_result"]);
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    assert_eq!(w.tools.calls("refund"), 1);

    let again = w.apps[1].post_json(&path, Some(&w.token), &json!({"approved": false})).await;
    assert_error(again, StatusCode::CONFLICT, "conflict").await;
    let unknown = w.apps[1]
        .post_json(&format!("/v1/sessions/{id}/relays/relay_nope"), Some(&w.token), &json!({"approved": true}))
        .await;
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found").await;
}

#[tokio::test]
async fn a_denied_relay_and_a_timed_out_relay_are_denials_the_model_sees() {
    let w = world(1, |o| o.relay_timeout_secs = 1).await;
    // Denied by the user.
    w.upstream.push(Reply::new().tool_call("call_1", "refund", [r#"{"order":"1"}"#]));
    w.upstream.push(Reply::new().text(["Understood."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "refund 1").await;
    let relay = stream.until_kind("relay_requested").await.last().unwrap().data.clone();
    let path = format!("/v1/sessions/{id}/relays/{}", relay["relay_id"].as_str().unwrap());
    w.apps[0].post_json(&path, Some(&w.token), &json!({"approved": false, "reason": "not today"})).await;
    let rest = stream.rest().await;
    let result = of_kind(&rest, "tool_result")[0];
    assert_eq!(result.data["status"], "denied");
    assert_eq!(tool_messages(&w.model_request(1))[0]["content"], "Permission denied: not today");

    // Nobody answers: after the relay timeout it is a denial too.
    w.upstream.push(Reply::new().tool_call("call_2", "refund", [r#"{"order":"2"}"#]));
    w.upstream.push(Reply::new().text(["Nobody answered."]));
    let frames = w.send(0, &id, "refund 2").await.rest().await;
    assert_eq!(of_kind(&frames, "tool_result")[0].data["status"], "denied");
    let seen = tool_messages(&w.model_request(3)).last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(seen.contains("no permission decision"), "{seen}");
    assert_eq!(w.tools.calls("refund"), 0);

    let metrics = crate::metrics::scrape(&w.apps[0]).await;
    let relays = |event| crate::metrics::sample(&metrics, "switchboard_relays_total", &[("event", event)]);
    assert_eq!((relays("requested"), relays("denied"), relays("timed_out")), (2.0, 1.0, 1.0));
    let denied = [("kind", "server"), ("outcome", "denied")];
    assert_eq!(crate::metrics::sample(&metrics, "switchboard_tool_calls_total", &denied), 2.0);
}

#[tokio::test]
async fn always_stops_later_relays_for_that_tool_and_its_first_words() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_1", "refund", [r#"{"order":"9 full"}"#]));
    w.upstream.push(Reply::new().tool_call("call_2", "refund", [r#"{"order":"9 partial"}"#]));
    w.upstream.push(Reply::new().text(["Done."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "refund twice").await;
    let relay = stream.until_kind("relay_requested").await.last().unwrap().data.clone();
    let path = format!("/v1/sessions/{id}/relays/{}", relay["relay_id"].as_str().unwrap());
    w.apps[0].post_json(&path, Some(&w.token), &json!({"approved": true, "always": true})).await;
    let rest = stream.rest().await;
    assert!(of_kind(&rest, "relay_requested").is_empty(), "the second refund needed no relay: {:?}", kinds(&rest));
    assert_eq!(w.tools.calls("refund"), 2);
}

#[tokio::test]
async fn a_request_rule_cannot_allow_a_tool_the_tenant_denies() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_1", "wipe", [r#"{}"#]));
    w.upstream.push(Reply::new().text(["I may not."]));
    let id = w.session(0, "mock", json!({"permissions": {"allowlist": [{"tool": "wipe"}]}})).await;
    let frames = w.send(0, &id, "wipe everything").await.rest().await;
    let result = of_kind(&frames, "tool_result")[0];
    assert_eq!(result.data["status"], "denied");
    assert!(result.data["output"].as_str().unwrap().contains("not permitted"));
    assert_eq!(w.tools.calls("wipe"), 0);
}

#[tokio::test]
async fn an_allowlist_from_the_request_turns_an_allowed_tool_into_a_relay() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"1"}"#]));
    let id = w.session(0, "mock", json!({"permissions": {"allowlist": [{"tool": "refund"}]}})).await;
    let mut stream = w.send(0, &id, "look").await;
    let frames = stream.until_kind("relay_requested").await;
    assert_eq!(frames.last().unwrap().data["tool"], "lookup");
    assert_eq!(w.tools.calls("lookup"), 0);
}

#[tokio::test]
async fn a_pause_mode_frontend_tool_pauses_and_a_noop_one_answers_at_once() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_chart", "render_chart", [r#"{"metric":"cpu"}"#]).tool_call(
        "call_nav",
        "navigate",
        [r#"{"page":"/dash"}"#],
    ));
    w.upstream.push(Reply::new().text(["Chart shown."]));
    let frontend = json!({"frontend_tools": [
        {"name": "render_chart", "description": "Draw a chart", "mode": "pause"},
        {"name": "navigate", "description": "Go to a page", "mode": "noop", "noop_response": "navigated"},
    ]});
    let id = w.session(0, "mock", frontend).await;
    let frames = w.send(0, &id, "show cpu").await.rest().await;
    let noop = of_kind(&frames, "tool_result");
    assert_eq!(noop.len(), 1);
    assert_eq!(noop[0].data["output"], "navigated");
    let paused = frames.last().unwrap();
    assert_eq!(paused.event, "paused");
    assert_eq!(paused.data["pending_calls"][0]["tool_call_id"], "call_chart");
    assert_eq!(paused.data["pending_calls"][0]["arguments"], json!({"metric": "cpu"}));

    // Resumed on the other replica with the client's result.
    let body = json!({"results": [{"tool_call_id": "call_chart", "output": "rendered"}]});
    let rest = SseReader::new(w.apps[1].tool_results(&w.token, &id, &body).await).rest().await;
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    let seen = tool_messages(&w.model_request(1));
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().any(|m| m["content"] == "rendered") && seen.iter().any(|m| m["content"] == "navigated"));
}

#[tokio::test]
async fn frontend_tools_may_not_shadow_server_tools() {
    let w = world(1, |_| {}).await;
    let body = json!({"model": "mock", "frontend_tools": [{"name": "lookup", "description": "x"}]});
    let response = w.apps[0].post_json("/v1/sessions", Some(&w.token), &body).await;
    assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
}

#[tokio::test]
async fn a_subagent_runs_with_its_own_ids_and_nesting_past_max_depth_is_refused_to_the_model() {
    let w = world(1, |o| o.max_depth = 1).await;
    w.upstream.push(Reply::new().tool_call("call_main", "agent", [r#"{"task":"investigate"}"#]));
    w.upstream.push(Reply::new().tool_call("call_sub", "agent", [r#"{"task":"go deeper"}"#]));
    w.upstream.push(Reply::new().text(["sub done"]));
    w.upstream.push(Reply::new().text(["all done"]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "use a helper").await.rest().await;
    let sub: Vec<&Frame> = frames.iter().filter(|f| f.data["depth"] == 1).collect();
    assert!(!sub.is_empty(), "{:?}", kinds(&frames));
    let sub_agent = sub[0].data["agent_id"].as_str().unwrap();
    assert_ne!(sub_agent, "main");
    assert!(sub.iter().all(|f| f.data["parent_id"] == "call_main" && f.data["agent_id"] == sub_agent));
    let refused = sub.iter().find(|f| f.event == "tool_result").expect("the nested call's result");
    assert_eq!(refused.data["status"], "error");
    assert!(refused.data["output"].as_str().unwrap().contains("at most 1 deep"));
    let main_result = frames.iter().find(|f| f.event == "tool_result" && f.data["agent_id"] == "main").unwrap();
    assert_eq!(main_result.data["output"], "sub done");
    assert_eq!(frames.last().unwrap().data["reason"], "final");
}

#[tokio::test]
async fn the_iteration_limit_ends_the_turn_with_max_iterations() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("c1", "lookup", [r#"{"id":"1"}"#]));
    w.upstream.push(Reply::new().tool_call("c2", "lookup", [r#"{"id":"2"}"#]));
    let id = w.session(0, "mock", json!({"max_iterations": 2})).await;
    let frames = w.send(0, &id, "loop").await.rest().await;
    let ended = frames.last().unwrap();
    assert_eq!(ended.data["reason"], "max_iterations");
    assert_eq!(ended.data["iterations"], 2);
    assert_eq!(w.upstream.calls(), 2);
}

async fn cancel_stops_a_running_turn_from_another_replica(store: SharedStore) {
    let w = world(2, |o| store.apply(o)).await;
    w.upstream.push(Reply::new().text(["thinking", " hard"]).stall_after(1));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "think").await;
    stream.until_kind("text_delta").await;
    let response = w.apps[1].post_json(&format!("/v1/sessions/{id}/cancel"), Some(&w.token), &json!({})).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let rest = stream.rest().await;
    assert_eq!(rest.last().unwrap().data["reason"], "cancelled");
    let view: Value = w.apps[1].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!(view["status"], "cancelled");
    tokio::time::timeout(Duration::from_secs(5), async {
        // The session can take a new message once cancelled.
        w.upstream.push(Reply::new().text(["again"]));
        let frames = w.send(1, &id, "again").await.rest().await;
        assert_eq!(frames.last().unwrap().data["reason"], "final");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_paused_session_can_be_cancelled_and_then_continued() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_chart", "render_chart", ["{}"]));
    let id = w.session(0, "mock", json!({"frontend_tools": [{"name": "render_chart", "description": "d"}]})).await;
    let frames = w.send(0, &id, "draw").await.rest().await;
    assert_eq!(frames.last().unwrap().event, "paused");
    let response = w.apps[0].post_json(&format!("/v1/sessions/{id}/cancel"), Some(&w.token), &json!({})).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let tail = SseReader::new(w.apps[0].events(&w.token, &id, Some(frames.len() as u64)).await).rest().await;
    assert_eq!(tail.last().unwrap().data["reason"], "cancelled");
    let body = json!({"results": [{"tool_call_id": "call_chart", "output": "late"}]});
    assert_error(w.apps[0].tool_results(&w.token, &id, &body).await, StatusCode::CONFLICT, "conflict").await;
}

#[tokio::test]
async fn a_failing_tool_server_is_an_error_result_the_model_sees() {
    let w = world(1, |_| {}).await;
    w.tools.reply("lookup", ToolReply::Status(500, "database down".into()));
    w.upstream.push(Reply::new().tool_call("c1", "lookup", [r#"{"id":"1"}"#]));
    w.upstream.push(Reply::new().text(["The lookup failed."]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "look").await.rest().await;
    let result = of_kind(&frames, "tool_result")[0];
    assert_eq!(result.data["status"], "error");
    assert!(result.data["output"].as_str().unwrap().contains("HTTP 500: database down"));
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    w.tools.wait_for_calls(1, Duration::from_secs(1)).await;
}
