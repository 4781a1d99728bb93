//! Logs: JSON lines with request id, tenant, session id and trace id, and
//! never a token, a provider key or message text.

use std::{io::Write as _, sync::Arc};

use serde_json::{Value, json};

use crate::{
    collector::{collector, new_trace},
    helpers::{AppOptions, spawn_replica},
    sse::SseReader,
    support::{
        mock_upstream::{MockUpstream, Reply},
        test_config::Tool,
        tool_server::{ToolReply, ToolServer},
    },
};

#[tokio::test]
async fn a_full_turn_logs_ids_but_no_token_key_or_message_text() {
    let collector = collector();
    let upstream = Arc::new(MockUpstream::start().await);
    let tools = ToolServer::start().await;
    tools.reply("lookup", ToolReply::Text("tool-output-9931".into()));
    let mut key_file = tempfile::NamedTempFile::new().unwrap();
    writeln!(key_file, "sk-log-test-key-5512").unwrap();
    let extra = format!(
        "[models.keyed]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"keyed-model\"\napi_key_file = \"{}\"\n",
        upstream.base_url(),
        key_file.path().display(),
    );
    let server_tools = vec![Tool::allowed("lookup", tools.url("lookup"))];
    let app =
        spawn_replica(AppOptions { tools: server_tools, extra_toml: extra, ..AppOptions::default() }, upstream.clone())
            .await;
    upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"arg-secret-2231"}"#]));
    upstream.push(Reply::new().reasoning(["reasoning-words-1187"]).text(["model-answer-4410"]));
    let token = app.token("acme", "alice");
    let id = app.create_session(&token, "keyed").await;
    let (trace, caller) = new_trace();
    let response = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/messages")))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&json!({"content": "zebra-umbrella-7781"}))
        .send()
        .await
        .unwrap();
    let frames = SseReader::new(response).rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    // A refused token is logged as refused, without the token.
    let refused = app.get("/api/model", Some("not-a-real-token-6650")).await;
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);

    let logs = collector.logs();
    for secret in [
        token.as_str(),
        "sk-log-test-key-5512",
        "zebra-umbrella-7781",
        "arg-secret-2231",
        "tool-output-9931",
        "model-answer-4410",
        "reasoning-words-1187",
        "not-a-real-token-6650",
    ] {
        assert!(!logs.contains(secret), "a log line contains {secret:?}");
    }

    // Every line is JSON; this session's lines carry its ids.
    let lines: Vec<Value> = logs.lines().map(|l| serde_json::from_str(l).expect("a JSON log line")).collect();
    let mine: Vec<&Value> = lines.iter().filter(|line| line.to_string().contains(&id)).collect();
    let span_field = |line: &Value, field: &str| -> Option<String> {
        line["spans"].as_array()?.iter().find_map(|span| span[field].as_str().map(str::to_string))
    };
    let turn_ended = mine.iter().find(|l| l["message"] == "turn ended").expect("a turn-ended line");
    assert_eq!(span_field(turn_ended, "session_id").as_deref(), Some(id.as_str()));
    assert_eq!(span_field(turn_ended, "tenant").as_deref(), Some("acme"));
    assert_eq!(span_field(turn_ended, "trace_id").as_deref(), Some(trace.as_str()));
    assert_eq!(turn_ended["level"], "INFO");
    let answered = mine
        .iter()
        .find(|l| l["message"] == "request answered" && span_field(l, "trace_id").as_deref() == Some(trace.as_str()))
        .expect("the access line of the traced request");
    assert!(span_field(answered, "request_id").is_some_and(|r| r.len() == 36));
    assert_eq!(answered["status"], 200);
}

/// An MCP call with a configured header and a forwarded one (a user's own
/// token): neither value is in a log line.
#[tokio::test]
async fn an_mcp_call_logs_neither_its_configured_nor_its_forwarded_header() {
    let collector = collector();
    let everything = crate::support::mcp_server::McpServer::everything().await;
    let upstream = Arc::new(MockUpstream::start().await);
    let extra = format!(
        "\n[[mcp_servers]]\nname = \"personal\"\nurl = \"{}\"\nforward_headers = [\"X-User-Token\"]\n\
         headers = {{ X-Static = {{ value = \"static-header-6613\" }} }}\npermission = \"allow\"\n",
        everything.url()
    );
    let options = AppOptions {
        extra_toml: extra,
        tenant_toml: vec![("acme".into(), "mcp_servers = [\"personal\"]".into())],
        ..AppOptions::default()
    };
    let app = spawn_replica(options, upstream.clone()).await;
    upstream.push(Reply::new().tool_call("call_1", "mcp__personal__echo", [r#"{"message":"hello"}"#]));
    upstream.push(Reply::new().text(["Done."]));
    let token = app.token("acme", "alice");
    let id = app.create_session(&token, "mock").await;
    let response = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/messages")))
        .bearer_auth(&token)
        .header("X-User-Token", "forwarded-token-4471")
        .json(&json!({"content": "echo hello"}))
        .send()
        .await
        .unwrap();
    let frames = SseReader::new(response).rest().await;
    let result = frames.iter().find(|f| f.event == "tool_result").expect("a tool result");
    assert_eq!(result.data["status"], "success", "{:?}", result.data);
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    let logs = collector.logs();
    for secret in ["static-header-6613", "forwarded-token-4471"] {
        assert!(!logs.contains(secret), "a log line contains {secret:?}");
    }
}
