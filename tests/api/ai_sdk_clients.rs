//! The npm `ai` package's chat client (`AbstractChat` +
//! `DefaultChatTransport`, what `useChat` runs), ai@6 and ai@7 alike,
//! against running replicas on `/v1/ai-sdk/chat`, driven by
//! `clients/ai-sdk-chat.mjs` (see `clients.rs`). Every scenario runs once
//! per version (`…::with_ai6`, `…::with_ai7`); an ai@7 client says so with
//! `X-AI-SDK-Version: 7`, as an app on ai@7 does. The client parses and
//! checks every frame with its own schema and ordering rules, so a stream
//! it accepts is one a real frontend accepts.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::sessions::TurnRunner;

use crate::{
    clients::run_client,
    helpers::{TestApp, spawn_replicas},
    metrics::gauge_reaches,
    orchestrator::{tool_messages, world},
    support::{mock_upstream::Reply, runner::ScriptedRunner},
};

/// The `ai` package a client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ai {
    V6,
    V7,
}

impl Ai {
    /// `script` (for `ai-sdk-chat.mjs` or `replay.mjs`) with the package to
    /// load and, for ai@7, the header an ai@7 app sends.
    pub fn script(self, mut script: Value) -> Value {
        match self {
            Self::V6 => script["ai"] = json!(6),
            Self::V7 => {
                script["ai"] = json!(7);
                script["headers"] = json!({"x-ai-sdk-version": "7"});
            }
        }
        script
    }
}

/// A test per `ai` version, `<scenario>::with_ai6` and `::with_ai7`, for
/// each async fn `<scenario>(Ai)` named.
macro_rules! with_each_ai {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test]
            async fn with_ai6() {
                super::$scenario(super::Ai::V6).await
            }

            #[tokio::test]
            async fn with_ai7() {
                super::$scenario(super::Ai::V7).await
            }
        }
    )*};
}

with_each_ai!(
    the_chat_client_holds_a_conversation_with_a_server_tool_an_approval_on_the_other_replica_and_a_frontend_tool,
    the_chat_client_resumes_a_running_turn_on_another_replica_from_its_start,
    a_client_tool_declared_only_in_the_ui_is_run_by_the_client_and_offered_to_the_model_from_then_on,
    regenerate_replaces_the_last_answer_on_another_replica_and_the_model_never_sees_it_again,
);

/// Runs `ai-sdk-chat.mjs` with `script` (made for `ai`) against `app`.
async fn chat(ai: Ai, app: &TestApp, token: &str, script: Value) -> Value {
    let (ok, output) = run_client("ai-sdk-chat.mjs", &app.url("/v1/ai-sdk/chat"), token, &ai.script(script)).await;
    assert!(ok, "{output}");
    assert_eq!(output["ai"], json!(if ai == Ai::V6 { 6 } else { 7 }));
    output
}

fn chat_id() -> String {
    format!("chat-{}", uuid::Uuid::new_v4().simple())
}

const CHART: &str = r#"{"name": "render_chart", "description": "Draw a chart", "mode": "pause"}"#;

/// The parts of `message` of the given type.
fn parts<'a>(message: &'a Value, kind: &str) -> Vec<&'a Value> {
    message["parts"].as_array().unwrap().iter().filter(|p| p["type"] == kind).collect()
}

fn text(message: &Value) -> String {
    parts(message, "text").iter().map(|p| p["text"].as_str().unwrap()).collect()
}

fn messages(output: &Value) -> &Vec<Value> {
    output["messages"].as_array().unwrap()
}

/// The names of the tools model request `body` offered.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect()
}

/// Every POST answered 200 with the stream header and ended with `[DONE]`,
/// and every text part was closed (`state: "done"`, not left streaming).
fn assert_framing(output: &Value) {
    for message in messages(output).iter().filter(|m| m["role"] == "assistant") {
        for part in parts(message, "text").into_iter().chain(parts(message, "reasoning")) {
            assert_eq!(part["state"], "done", "{message}");
        }
    }
    for exchange in output["exchanges"].as_array().unwrap() {
        if exchange["method"] == "POST" {
            assert_eq!(exchange["status"], 200, "{exchange}");
            assert_eq!(exchange["streamHeader"], "v1", "{exchange}");
            assert!(exchange["contentType"].as_str().unwrap().starts_with("text/event-stream"));
            assert!(exchange["body"].as_str().unwrap().ends_with("data: [DONE]\n\n"), "{exchange}");
        }
    }
}

async fn the_chat_client_holds_a_conversation_with_a_server_tool_an_approval_on_the_other_replica_and_a_frontend_tool(
    ai: Ai,
) {
    let w = world(2, |_| {}).await;
    let chat_id = chat_id();
    let body = json!({"model": "mock", "frontend_tools": [serde_json::from_str::<Value>(CHART).unwrap()]});
    // A server tool, then an approval that pauses the turn, on replica A.
    w.upstream.push(Reply::new().text(["Checking."]).tool_call("call_l", "lookup", [r#"{"id":"#, r#""42"}"#]));
    w.upstream.push(Reply::new().text(["Order 42 ships today."]));
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"42"}"#]));
    let script =
        json!({"chatId": chat_id, "body": body, "steps": [{"send": "where is order 42?"}, {"send": "refund it"}]});
    let first = chat(ai, &w.apps[0], &w.token, script).await;
    assert_framing(&first);
    let messages = messages(&first);
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[1]["id"], format!("{chat_id}-1"), "the assistant message is named by the turn");
    assert_eq!(text(&messages[1]), "Checking.Order 42 ships today.");
    let lookup = parts(&messages[1], "tool-lookup");
    assert_eq!((lookup[0]["state"].as_str(), &lookup[0]["input"]), (Some("output-available"), &json!({"id": "42"})));
    let refund = parts(&messages[3], "tool-refund");
    assert_eq!(refund[0]["state"], "approval-requested");
    assert_eq!(w.tools.calls("refund"), 0);

    // The same chat, answered from replica B: approve, then a frontend tool.
    w.upstream.push(Reply::new().text(["Refunded."]));
    w.upstream.push(Reply::new().tool_call("call_c", "render_chart", [r#"{"metric":"refunds"}"#]));
    w.upstream.push(Reply::new().text(["Here is the chart."]));
    let script = json!({"chatId": chat_id, "body": body, "messages": messages, "steps": [
        {"approve": true, "reason": "fine"},
        {"send": "chart the refunds"},
        {"toolOutputs": {"render_chart": {"drawn": true}}},
    ]});
    let second = chat(ai, &w.apps[1], &w.token, script).await;
    assert_framing(&second);
    let messages = self::messages(&second);
    assert_eq!(messages.len(), 6, "continuations answer in the same assistant message");
    let refund = parts(&messages[3], "tool-refund");
    assert_eq!(refund.len(), 1, "{}", messages[3]);
    assert_eq!(refund[0]["state"], "output-available");
    assert_eq!(refund[0]["approval"]["approved"], true);
    assert_eq!(text(&messages[3]), "Refunded.");
    let chart = parts(&messages[5], "tool-render_chart");
    assert_eq!((chart.len(), chart[0]["state"].as_str()), (1, Some("output-available")));
    assert_eq!(text(&messages[5]), "Here is the chart.");
    assert_eq!((w.tools.calls("lookup"), w.tools.calls("refund")), (1, 1));
    // The model saw the client's output as the tool result.
    let last = w.upstream.requests().last().unwrap().body.clone();
    assert!(tool_messages(&last).iter().any(|m| m["content"] == r#"{"drawn":true}"#), "{last}");
}

async fn the_chat_client_resumes_a_running_turn_on_another_replica_from_its_start(ai: Ai) {
    // The turn appends a delta per permit the test releases: it stays
    // running until the reconnecting client is there.
    let runner = ScriptedRunner::new();
    let apps = spawn_replicas(2, |o| o.runner = Some(runner.clone() as Arc<dyn TurnRunner>)).await;
    let token = apps[0].token("acme", "alice");
    let chat_id = chat_id();
    let user = json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "gated 3"}]});
    let body = json!({"id": chat_id, "messages": [user], "trigger": "submit-message", "model": "demo"});
    // The first client drops the stream after its first bytes (a reload).
    let mut dropped = apps[0].post_json("/v1/ai-sdk/chat", Some(&token), &body).await;
    assert_eq!(dropped.status(), StatusCode::OK);
    dropped.chunk().await.unwrap().expect("the stream started");
    drop(dropped);

    let script = json!({"chatId": chat_id, "body": {"model": "demo"}, "messages": [user], "steps": [{"resume": true}]});
    let client = tokio::spawn({
        let (app, token) = (apps[1].url("/v1/ai-sdk/chat"), token.clone());
        async move { run_client("ai-sdk-chat.mjs", &app, &token, &ai.script(script)).await }
    });
    gauge_reaches(&apps[1], "switchboard_open_streams", &[("dialect", "ai-sdk")], 1.0).await;
    runner.release(3);
    let (ok, resumed) = client.await.unwrap();
    assert!(ok, "{resumed}");
    let exchange = &resumed["exchanges"][0];
    assert_eq!((exchange["method"].as_str(), exchange["status"].as_u64()), (Some("GET"), Some(200)));
    let messages = messages(&resumed);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["id"], format!("{chat_id}-1"));
    assert_eq!(text(&messages[1]), "d1 d2 d3 ", "the whole answer, from its start");

    // Nothing runs any more: a reconnect is a 204.
    let again = apps[0].get(&format!("/v1/ai-sdk/chat/{chat_id}/stream"), Some(&token)).await;
    assert_eq!(again.status(), StatusCode::NO_CONTENT);
}

async fn a_client_tool_declared_only_in_the_ui_is_run_by_the_client_and_offered_to_the_model_from_then_on(ai: Ai) {
    let w = world(2, |_| {}).await;
    let chat_id = chat_id();
    // No `frontend_tools`: the app knows `render_chart` in its UI alone
    // (`onToolCall` runs it, `sendAutomaticallyWhen` sends its output).
    // The model calls it all the same (the app's prompt told it of it).
    w.upstream.push(Reply::new().text(["Drawing."]).tool_call(
        "call_c",
        "render_chart",
        [r#"{"metric":"#, r#""refunds"}"#],
    ));
    w.upstream.push(Reply::new().text(["Here is the chart."]));
    let script = json!({"chatId": chat_id, "body": {"model": "mock"}, "autoTools": {"render_chart": {"drawn": true}},
        "steps": [{"send": "chart the refunds"}]});
    let first = chat(ai, &w.apps[0], &w.token, script).await;
    assert_framing(&first);
    assert_eq!(first["toolCalls"], json!(["render_chart"]), "the client ran the call");
    let posts: Vec<&Value> = first["exchanges"].as_array().unwrap().iter().filter(|e| e["method"] == "POST").collect();
    assert_eq!(posts.len(), 2, "the message, then the output sent automatically");
    assert!(posts[0]["body"].as_str().unwrap().contains(r#""finishReason":"tool-calls""#), "the turn paused");
    let messages = messages(&first);
    assert_eq!(messages.len(), 2, "the continuation answers in the same message");
    let chart = parts(&messages[1], "tool-render_chart");
    assert_eq!(chart.len(), 1, "{}", messages[1]);
    assert_eq!(
        (chart[0]["state"].as_str(), &chart[0]["input"], &chart[0]["output"]),
        (Some("output-available"), &json!({"metric": "refunds"}), &json!({"drawn": true}))
    );
    assert_eq!(text(&messages[1]), "Drawing.Here is the chart.");
    // The model saw the output; the tool was unknown to it at first and
    // offered from the request that showed it on.
    assert!(tool_messages(&w.model_request(1)).iter().any(|m| m["content"] == r#"{"drawn":true}"#));
    assert!(!offered(&w.model_request(0)).contains(&"render_chart"));
    assert!(offered(&w.model_request(1)).contains(&"render_chart"));

    // The next turn, on replica B: the session remembers the tool.
    w.upstream.push(Reply::new().text(["You're welcome."]));
    let script = json!({"chatId": chat_id, "body": {"model": "mock"}, "messages": messages,
        "steps": [{"send": "thanks"}]});
    let second = chat(ai, &w.apps[1], &w.token, script).await;
    assert_eq!(text(self::messages(&second).last().unwrap()), "You're welcome.");
    let request = w.model_request(2);
    let tool = request["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "render_chart");
    let tool = tool.expect("the remembered tool is offered");
    assert_eq!(tool["function"]["parameters"]["type"], "object", "no schema: any object");
    assert_eq!(w.upstream.calls(), 3);
}

async fn regenerate_replaces_the_last_answer_on_another_replica_and_the_model_never_sees_it_again(ai: Ai) {
    let w = world(2, |_| {}).await;
    let chat_id = chat_id();
    let body = json!({"model": "mock"});
    // The answer to regenerate used a server tool: its call and result go too.
    w.upstream.push(Reply::new().tool_call("call_l", "lookup", [r#"{"id":"7"}"#]));
    w.upstream.push(Reply::new().text(["Order 7 is lost."]));
    let first = chat(
        ai,
        &w.apps[0],
        &w.token,
        json!({"chatId": chat_id, "body": body,
        "steps": [{"send": "where is order 7?"}]}),
    )
    .await;
    assert_eq!(text(&messages(&first)[1]), "Order 7 is lost.");

    // regenerate() from replica B, then the conversation goes on there.
    w.upstream.push(Reply::new().text(["Order 7 ships tomorrow."]));
    w.upstream.push(Reply::new().text(["You're welcome."]));
    let script = json!({"chatId": chat_id, "body": body, "messages": messages(&first),
        "steps": [{"regenerate": true}, {"send": "thanks"}]});
    let second = chat(ai, &w.apps[1], &w.token, script).await;
    assert_framing(&second);
    let request = &second["exchanges"][0]["request"];
    assert_eq!(
        (request["trigger"].as_str(), request["messages"].as_array().unwrap().len()),
        (Some("regenerate-message"), 1)
    );
    let messages = messages(&second);
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "the dropped answer is gone");
    let ids: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "assistant").map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [format!("{chat_id}-2"), format!("{chat_id}-3")], "a new message per turn");
    let answers: Vec<String> = messages.iter().filter(|m| m["role"] == "assistant").map(text).collect();
    assert_eq!(answers, ["Order 7 ships tomorrow.", "You're welcome."]);
    assert!(parts(&messages[1], "tool-lookup").is_empty(), "the regenerated answer called no tool");

    // The regenerated call answered the same question without the dropped
    // answer; the next turn's call has the new one only.
    let regenerated = w.model_request(2);
    let history = |body: &Value| -> Vec<(String, String)> {
        let messages = body["messages"].as_array().unwrap();
        let pair =
            |m: &Value| (m["role"].as_str().unwrap().to_string(), m["content"].as_str().unwrap_or("").to_string());
        messages.iter().filter(|m| m["role"] != "system").map(pair).collect()
    };
    assert_eq!(history(&regenerated), [("user".to_string(), "where is order 7?".to_string())]);
    let next = history(&w.model_request(3));
    assert!(next.iter().all(|(_, content)| content != "Order 7 is lost."), "{next:?}");
    assert!(next.iter().any(|(_, content)| content == "Order 7 ships tomorrow."), "{next:?}");
    assert!(tool_messages(&w.model_request(3)).is_empty(), "the dropped tool result is gone too");
    let view: Value = w.apps[0].get(&format!("/v1/sessions/{chat_id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!((view["status"].as_str(), view["turn"].as_u64()), (Some("completed"), Some(3)));
    assert_eq!(w.tools.calls("lookup"), 1);
}
