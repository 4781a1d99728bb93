//! Traces: the span tree of a tool-using turn with its GenAI attributes, the
//! trace context sent upstream, and links across replicas.

use std::sync::Arc;

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use reqwest::StatusCode;
use serde_json::json;

use crate::{
    collector::{collector, hex, int, named, new_trace, string, strings},
    helpers::{AppOptions, TestApp, spawn_replica, unique_prefix},
    sse::SseReader,
    support::{
        mock_upstream::{MockUpstream, Reply},
        test_config::Tool,
        tool_server::ToolServer,
    },
};

/// One replica per name sharing Redis, the upstream and the tool server,
/// with `lookup` (allowed) and `refund` (asks) as tools.
async fn replicas(names: &[&str], upstream: &Arc<MockUpstream>, tools: &ToolServer) -> Vec<TestApp> {
    let prefix = unique_prefix();
    let server_tools = vec![Tool::allowed("lookup", tools.url("lookup")), Tool::asking("refund", tools.url("refund"))];
    let mut apps = Vec::new();
    for name in names {
        let options = AppOptions {
            key_prefix: prefix.clone(),
            replica_id: name.to_string(),
            tools: server_tools.clone(),
            ..AppOptions::default()
        };
        apps.push(spawn_replica(options, upstream.clone()).await);
    }
    apps
}

async fn post_traced(app: &TestApp, path: &str, token: &str, traceparent: &str, body: serde_json::Value) -> SseReader {
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(token)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    SseReader::new(response)
}

#[tokio::test]
async fn a_tool_using_turn_is_one_trace_request_invoke_agent_chat_and_execute_tool() {
    let collector = collector();
    let upstream = Arc::new(MockUpstream::start().await);
    let tools = ToolServer::start().await;
    let app = replicas(&["a"], &upstream, &tools).await.remove(0);
    upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"#, r#""7"}"#]).usage(11, 2));
    upstream.push(Reply::new().text(["Found ", "it."]).usage(20, 3));
    let token = app.token("acme", "alice");
    let id = app.create_session(&token, "mock").await;
    let (trace, caller) = new_trace();
    let traceparent = format!("00-{trace}-{caller}-01");
    let path = format!("/v1/sessions/{id}/messages");
    let frames = post_traced(&app, &path, &token, &traceparent, json!({"content": "find 7"})).await.rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");

    let spans = collector
        .spans_of(&trace, |s| {
            named(s, "chat mock-model").len() == 2
                && !named(s, "execute_tool lookup").is_empty()
                && !named(s, "invoke_agent switchboard").is_empty()
                && !named(s, "POST /v1/sessions/{id}/messages").is_empty()
        })
        .await;
    let request = named(&spans, "POST /v1/sessions/{id}/messages")[0];
    assert_eq!(request.kind(), SpanKind::Server);
    assert_eq!(hex(&request.parent_span_id), caller, "continues the caller's trace");
    assert_eq!(string(request, "request_id").map(|r| r.len()), Some(36));
    assert_eq!(string(request, "tenant").as_deref(), Some("acme"));
    assert_eq!(string(request, "session_id").as_deref(), Some(id.as_str()));
    assert_eq!(int(request, "http.response.status_code"), Some(200));

    let agent = named(&spans, "invoke_agent switchboard")[0];
    assert_eq!(agent.parent_span_id, request.span_id, "the turn is a child of the request that started it");
    assert_eq!(string(agent, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    assert_eq!(string(agent, "gen_ai.agent.name").as_deref(), Some("switchboard"));
    assert_eq!(string(agent, "gen_ai.conversation.id").as_deref(), Some(id.as_str()));
    assert_eq!(string(agent, "replica").as_deref(), Some("a"));
    assert_eq!(string(agent, "dialect").as_deref(), Some("native"));

    let chats = named(&spans, "chat mock-model");
    for (chat, (input, output, finish)) in chats.iter().zip([(11, 2, "tool_calls"), (20, 3, "stop")]) {
        assert_eq!(chat.kind(), SpanKind::Client);
        assert_eq!(chat.parent_span_id, agent.span_id);
        assert_eq!(string(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(string(chat, "gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(string(chat, "gen_ai.request.model").as_deref(), Some("mock-model"));
        assert_eq!(string(chat, "gen_ai.response.model").as_deref(), Some("mock-model"));
        assert_eq!(string(chat, "gen_ai.conversation.id").as_deref(), Some(id.as_str()));
        assert_eq!(string(chat, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(int(chat, "gen_ai.usage.input_tokens"), Some(input));
        assert_eq!(int(chat, "gen_ai.usage.output_tokens"), Some(output));
        assert_eq!(strings(chat, "gen_ai.response.finish_reasons"), Some(vec![finish.to_string()]));
    }
    let tool = named(&spans, "execute_tool lookup")[0];
    assert_eq!(tool.parent_span_id, agent.span_id);
    assert_eq!(string(tool, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
    assert_eq!(string(tool, "gen_ai.tool.name").as_deref(), Some("lookup"));
    assert_eq!(string(tool, "gen_ai.tool.call.id").as_deref(), Some("call_1"));
    assert!(
        tool.start_time_unix_nano > chats[0].end_time_unix_nano
            && tool.end_time_unix_nano < chats[1].start_time_unix_nano
    );

    // The upstream and the tool server got the trace context of their spans.
    let sent: Vec<String> =
        upstream.requests().iter().map(|r| r.header("traceparent").expect("traceparent").to_string()).collect();
    for (sent, chat) in sent.iter().zip(&chats) {
        assert_eq!(sent, &format!("00-{trace}-{}-01", hex(&chat.span_id)));
    }
    assert_eq!(tools.traceparents("lookup"), vec![Some(format!("00-{trace}-{}-01", hex(&tool.span_id)))]);
}

#[tokio::test]
async fn a_turn_paused_on_a_and_resumed_on_b_links_b_to_the_trace_of_a() {
    let collector = collector();
    let upstream = Arc::new(MockUpstream::start().await);
    let tools = ToolServer::start().await;
    let apps = replicas(&["a", "b"], &upstream, &tools).await;
    upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    upstream.push(Reply::new().text(["Refunded."]));
    let token = apps[0].token("acme", "alice");
    let response =
        apps[0].post_json("/v1/sessions", Some(&token), &json!({"model": "mock", "approval": "pause"})).await;
    let id = response.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string();

    let (trace_a, caller_a) = new_trace();
    let on_a = format!("00-{trace_a}-{caller_a}-01");
    let paused =
        post_traced(&apps[0], &format!("/v1/sessions/{id}/messages"), &token, &on_a, json!({"content": "refund 9"}))
            .await
            .rest()
            .await;
    assert_eq!(paused.last().unwrap().event, "paused");
    let (trace_b, caller_b) = new_trace();
    let on_b = format!("00-{trace_b}-{caller_b}-01");
    let decisions = json!({"decisions": [{"tool_call_id": "call_r", "approved": true}]});
    let mut resumed = post_traced(&apps[1], &format!("/v1/sessions/{id}/tool-results"), &token, &on_b, decisions).await;
    assert_eq!(resumed.rest().await.last().unwrap().data["reason"], "final");

    let a_spans = collector.spans_of(&trace_a, |s| !named(s, "invoke_agent switchboard").is_empty()).await;
    let a_turn = named(&a_spans, "invoke_agent switchboard")[0];
    assert_eq!(string(a_turn, "replica").as_deref(), Some("a"));
    let b_spans = collector
        .spans_of(&trace_b, |s| {
            !named(s, "invoke_agent switchboard").is_empty() && !named(s, "execute_tool refund").is_empty()
        })
        .await;
    let b_turn = named(&b_spans, "invoke_agent switchboard")[0];
    assert_eq!(string(b_turn, "replica").as_deref(), Some("b"));
    let b_request = named(&b_spans, "POST /v1/sessions/{id}/tool-results")[0];
    assert_eq!(b_turn.parent_span_id, b_request.span_id);
    // B's request and B's turn both link to the request that paused the
    // session on A.
    let a_request = named(&a_spans, "POST /v1/sessions/{id}/messages")[0];
    for span in [b_turn, b_request] {
        let links: Vec<(String, String)> = span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect();
        assert!(links.contains(&(trace_a.clone(), hex(&a_request.span_id))), "{}: {links:?}", span.name);
    }
}
