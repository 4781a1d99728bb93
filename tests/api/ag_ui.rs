//! AG-UI threads as `@ag-ui/client` runs them (`clients/ag-ui-run.mjs`,
//! `clients/replay.mjs`): each run's own frontend tools, on any replica; a
//! client joining a running thread; state shared with the tools; context
//! for the model; and the raw stream of a run with all of them, against
//! golden transcripts.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    clients::run_client,
    helpers::assert_error,
    metrics::gauge_reaches,
    orchestrator::{World, tool_messages, world},
    support::{
        mock_upstream::Reply,
        raw_sse::{RawSse, assert_golden, normalise},
        tool_server::ToolReply,
    },
};

fn chart() -> Value {
    json!({"name": "render_chart", "description": "Draw a chart",
           "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}})
}

fn thread_id() -> String {
    format!("thread-{}", uuid::Uuid::new_v4().simple())
}

async fn ag_ui(w: &World, on: usize, script: &Value) -> (bool, Value) {
    run_client("ag-ui-run.mjs", &w.apps[on].url("/v1/ag-ui"), &w.token, script).await
}

fn types(events: &Value) -> Vec<&str> {
    events.as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn of_type<'a>(events: &'a Value, kind: &str) -> Vec<&'a Value> {
    events.as_array().unwrap().iter().filter(|e| e["type"] == kind).collect()
}

/// The names of the tools model request `body` offered.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_tool_first_declared_in_a_later_run_pauses_the_thread_and_is_answered_on_another_replica() {
    let w = world(2, |_| {}).await;
    let thread = thread_id();
    w.upstream.push(Reply::new().text(["Hello."]));
    w.upstream.push(Reply::new().tool_call("call_c", "render_chart", [r#"{"metric":"refunds"}"#]));
    w.upstream.push(Reply::new().text(["Here is the chart."]));
    // Run 1 declares no tool; run 2 declares the chart; run 3 answers it on replica B.
    let script = json!({"threadId": thread, "forwardedProps": {"model": "mock"}, "steps": [
        {"message": "hi"},
        {"message": "chart the refunds", "tools": [chart()]},
        {"toolResults": {"render_chart": "chart drawn"}, "tools": [chart()], "url": w.apps[1].url("/v1/ag-ui")},
    ]});
    let (ok, out) = ag_ui(&w, 0, &script).await;
    assert!(ok, "{out}");
    assert_eq!(out["warnings"], json!([]));
    let runs = out["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!((runs[1]["outcome"].as_str(), &runs[1]["pendingToolCallIds"]), (Some("success"), &json!(["call_c"])));
    assert_eq!(runs[2]["outcome"], "success");
    assert_eq!(types(&runs[2]["events"])[..2], ["RUN_STARTED", "MESSAGES_SNAPSHOT"], "a run on a known thread");

    assert!(!offered(&w.model_request(0)).contains(&"render_chart"), "run 1 declared no frontend tool");
    assert!(offered(&w.model_request(1)).contains(&"render_chart"));
    let last = w.model_request(2);
    assert!(tool_messages(&last).iter().any(|m| m["content"] == "chart drawn"), "{last}");
    let view: Value = w.apps[0].get(&format!("/v1/sessions/{thread}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!((view["status"].as_str(), view["replica"].as_str()), (Some("completed"), Some("b")));

    // The client ends with the stored thread, its answer once.
    let messages = out["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "tool", "assistant"], "{messages:?}");
    assert_eq!(messages[4]["content"], "chart drawn");
    assert_eq!(messages[5]["content"], "Here is the chart.");
}

#[tokio::test]
async fn a_run_that_declares_a_server_tools_name_is_refused_and_changes_nothing() {
    let w = world(1, |_| {}).await;
    let (app, thread) = (&w.apps[0], thread_id());
    let run = |tools: Value, messages: Value| {
        json!({"threadId": thread, "runId": "r", "tools": tools, "state": {"changed": true},
               "forwardedProps": {"model": "mock"}, "messages": messages})
    };
    let user = json!({"id": "u1", "role": "user", "content": "hi"});
    let lookup = json!([{"name": "lookup", "description": "mine"}]);
    let refused = app.post_json("/v1/ag-ui", Some(&w.token), &run(lookup.clone(), json!([user]))).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    let missing = app.get(&format!("/v1/sessions/{thread}"), Some(&w.token)).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND, "no session for a refused new thread");

    w.upstream.push(Reply::new().text(["Hello."]));
    let first = app.post_json("/v1/ag-ui", Some(&w.token), &run(json!([chart()]), json!([user]))).await;
    assert!(first.text().await.unwrap().contains("RUN_FINISHED"));
    let again = json!([user, {"id": "a1", "role": "assistant", "content": "Hello."},
                       {"id": "u2", "role": "user", "content": "again"}]);
    let refused = app.post_json("/v1/ag-ui", Some(&w.token), &run(lookup, again)).await;
    assert_error(refused, StatusCode::BAD_REQUEST, "invalid_request").await;
    let view: Value = app.get(&format!("/v1/sessions/{thread}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!((view["status"].as_str(), view["turn"].as_u64()), (Some("completed"), Some(1)));
    assert_eq!(w.upstream.calls(), 1);
}

#[tokio::test]
async fn a_client_joining_a_running_thread_gets_it_restated_and_the_rest_of_the_turn() {
    let w = world(2, |_| {}).await;
    let thread = thread_id();
    w.tools.hold("lookup");
    w.upstream.push(Reply::new().text(["Hello."]));
    w.upstream.push(Reply::new().text(["Looking."]).tool_call("call_l", "lookup", [r#"{"id":"7"}"#]));
    w.upstream.push(Reply::new().text(["Order 7 ships today."]));
    // The thread's second run waits in its tools phase (the lookup is held).
    let script = json!({"threadId": thread, "state": {"page": "orders"}, "forwardedProps": {"model": "mock"},
        "steps": [{"message": "hi"}, {"message": "where is order 7?"}]});
    let running = tokio::spawn({
        let (url, token) = (w.apps[0].url("/v1/ag-ui"), w.token.clone());
        async move { run_client("ag-ui-run.mjs", &url, &token, &script).await }
    });
    w.tools.wait_for_calls(1, Duration::from_secs(10)).await;

    // Another page joins it on replica B, holding nothing.
    let url = w.apps[1].url(&format!("/v1/sessions/{thread}/events?format=ag-ui"));
    let joining = tokio::spawn({
        let (token, input) = (w.token.clone(), json!({"dialect": "ag-ui", "threadId": thread, "messages": []}));
        async move { run_client("replay.mjs", &url, &token, &input).await }
    });
    gauge_reaches(&w.apps[1], "switchboard_open_streams", &[("dialect", "ag-ui")], 1.0).await;
    w.tools.release("lookup", 1);

    let (ok, joined) = joining.await.unwrap();
    assert!(ok, "verifyEvents accepted the join: {joined}");
    assert_eq!(joined["warnings"], json!([]));
    let events = &joined["events"];
    assert_eq!(
        types(events)[..6],
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STEP_STARTED", "TOOL_CALL_RESULT", "STEP_FINISHED"]
    );
    assert_eq!(events[0]["runId"], format!("{thread}-2"));
    assert_eq!(events[3]["stepName"], "lookup");
    assert_eq!(types(events).last(), Some(&"RUN_FINISHED"));
    assert_eq!(joined["state"], json!({"page": "orders"}));
    let messages = joined["messages"].as_array().unwrap();
    let shown: Vec<(&str, &str)> =
        messages.iter().map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        shown[..4],
        [("user", "hi"), ("assistant", "Hello."), ("user", "where is order 7?"), ("assistant", "Looking.")]
    );
    assert_eq!(shown[4].0, "tool");
    assert_eq!(shown[5], ("assistant", "Order 7 ships today."));
    assert_eq!(messages.len(), 6, "each message once: {messages:?}");

    let (ok, first) = running.await.unwrap();
    assert!(ok, "{first}");
    assert_eq!(first["messages"].as_array().unwrap().last().unwrap()["content"], "Order 7 ships today.");
    assert_eq!(w.tools.calls("lookup"), 1);
}

#[tokio::test]
async fn state_round_trips_through_a_tool_and_the_next_run_on_another_replica_sees_it() {
    let w = world(2, |_| {}).await;
    let thread = thread_id();
    w.tools.reply("bump", ToolReply::Counter("/count".into()));
    w.upstream.push(Reply::new().tool_call("call_1", "bump", ["{}"]));
    w.upstream.push(Reply::new().text(["Counted."]));
    w.upstream.push(Reply::new().tool_call("call_2", "bump", ["{}"]));
    w.upstream.push(Reply::new().text(["Counted again."]));
    let script = json!({"threadId": thread, "state": {"count": 1, "user": "alice"},
        "context": [{"description": "page", "value": "orders"}], "forwardedProps": {"model": "mock"}, "steps": [
        {"message": "count one"},
        {"message": "count another", "url": w.apps[1].url("/v1/ag-ui")},
    ]});
    let (ok, out) = ag_ui(&w, 0, &script).await;
    assert!(ok, "{out}");
    assert_eq!(out["warnings"], json!([]));
    let runs = out["runs"].as_array().unwrap();

    // Run 1: the state it brought, the tool's change inside the tool's step.
    let events = &runs[0]["events"];
    assert_eq!(of_type(events, "STATE_SNAPSHOT")[0]["snapshot"], json!({"count": 1, "user": "alice"}));
    assert_eq!(of_type(events, "STATE_DELTA")[0]["delta"], json!([{"op": "add", "path": "/count", "value": 2}]));
    let order = types(events);
    let delta_at = order.iter().position(|t| *t == "STATE_DELTA").unwrap();
    assert_eq!(
        order[delta_at - 1..=delta_at + 2],
        ["STEP_STARTED", "STATE_DELTA", "TOOL_CALL_RESULT", "STEP_FINISHED"]
    );
    assert_eq!(runs[0]["state"], json!({"count": 2, "user": "alice"}), "the client applied the delta");
    // Run 2, on the other replica: the tool read the state run 1 left.
    assert_eq!(runs[1]["state"], json!({"count": 3, "user": "alice"}));
    let bodies = w.tools.bodies("bump");
    assert_eq!(bodies[0]["state"], json!({"count": 1, "user": "alice"}));
    assert_eq!(bodies[1]["state"], json!({"count": 2, "user": "alice"}));
    assert_eq!(w.tools.calls("bump"), 2);
    // The model saw the run's context, not the patch.
    let system = w.model_request(0)["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system.ends_with("Context from the application:\n- page: orders"), "{system}");
    let sent = tool_messages(&w.model_request(1));
    assert_eq!(sent[0]["content"], r#"{"was":1}"#);

    // The state is the session's, on any replica: a native turn, which
    // brings none, gives the tool the stored one.
    w.upstream.push(Reply::new().tool_call("call_3", "bump", ["{}"]));
    w.upstream.push(Reply::new().text(["Three."]));
    let frames = w.send(0, &thread, "and once more").await.rest().await;
    assert!(frames.iter().any(|f| f.event == "state_updated"), "native shows the change");
    assert_eq!(w.tools.bodies("bump")[2]["state"], json!({"count": 3, "user": "alice"}));
}

/// A raw AG-UI stream with the run's ids and timestamps as placeholders.
async fn raw_run(w: &World, body: &Value) -> String {
    let response = w.apps[0].post_json("/v1/ag-ui", Some(&w.token), body).await;
    let text = RawSse::new(response).rest().await;
    normalise(&text, &[(body["threadId"].as_str().unwrap(), "<thread>")])
}

#[tokio::test]
async fn an_ag_ui_run_with_state_steps_and_a_frontend_tool_matches_the_golden_transcripts() {
    let w = world(1, |_| {}).await;
    let thread = thread_id();
    w.tools.reply("bump", ToolReply::Counter("/count".into()));
    w.upstream.push(Reply::new().text(["Counting."]).tool_call("call_b", "bump", ["{}"]));
    w.upstream.push(Reply::new().tool_call("call_c", "render_chart", [r#"{"metric":"count"}"#]));
    w.upstream.push(Reply::new().text(["Drawn."]));
    let user = json!({"id": "u1", "role": "user", "content": "count, then chart it"});
    let first = json!({"threadId": thread, "runId": "run-1", "state": {"count": 1}, "tools": [chart()],
        "context": [{"description": "page", "value": "orders"}], "forwardedProps": {"model": "mock"},
        "messages": [user]});
    assert_golden("ag_ui_pause.sse", &raw_run(&w, &first).await);

    // The client answers the chart with the state the delta left it.
    let call = json!({"id": "call_c", "type": "function",
                      "function": {"name": "render_chart", "arguments": r#"{"metric":"count"}"#}});
    let messages = json!([user, {"id": "a1", "role": "assistant", "toolCalls": [call]},
                          {"id": "t1", "role": "tool", "toolCallId": "call_c", "content": "drawn"}]);
    let second = json!({"threadId": thread, "runId": "run-2", "state": {"count": 2}, "tools": [chart()],
        "forwardedProps": {"model": "mock"}, "messages": messages});
    assert_golden("ag_ui_resume.sse", &raw_run(&w, &second).await);
    assert_eq!(w.tools.calls("bump"), 1);
}
