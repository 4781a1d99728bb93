//! `POST /chat`: a golden conversation, relays on another replica, request
//! permissions, the iteration limit, llm-gateway's own message shapes, and
//! bad input.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{answer_relay, approve, assert_gateway_error, chat, chat_body, kinds, user};
use crate::{
    orchestrator::world,
    sse::Frame,
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise, store_keys},
    },
};

#[tokio::test]
async fn a_chat_with_text_a_permitted_a_denied_and_a_relayed_tool_matches_the_golden_transcript() {
    let w = world(2, |_| {}).await;
    w.upstream.push(
        Reply::new()
            // Interleaved, so no two deltas are adjacent (the writer merges
            // adjacent ones of a kind): the blocks show as repeated ids.
            .reasoning(["Three asks."])
            .text(["Checking order 42 first; "])
            .reasoning(["The refund needs a decision."])
            .text(["then the rest."])
            .tool_call("call_lookup", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_wipe", "wipe", ["{}"])
            .tool_call("call_refund", "refund", [r#"{"order":"42"}"#])
            .usage(120, 30),
    );
    w.upstream.push(Reply::new().text(["Order 42 is refunded; I may not wipe the cache."]).usage(200, 12));
    let messages = json!([
        user("Hi"),
        {"role": "assistant", "content": "Hello! How can I help?"},
        user("Check order 42, wipe the cache, and refund order 42."),
    ]);
    let mut stream = chat(&w, 0, &chat_body("mock", messages, json!({}))).await;
    let relay = stream.until_event("relay").await;
    let session_id = stream.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    let relay_id = relay.data["id"].as_str().unwrap().to_string();
    assert_eq!(w.tools.calls("refund"), 0, "nothing runs before the decision");

    let decided = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(decided.status(), StatusCode::OK);
    assert_eq!(decided.json::<Value>().await.unwrap(), json!({"success": true}));
    let text = stream.rest().await;

    let normalised = normalise(&text, &[(&session_id, "<session>"), (&relay_id, "<relay>")]);
    assert_golden("llm_gateway_chat.sse", &normalised);
    // One id per model call's text and per its reasoning: three blocks.
    let frames = stream.frames();
    let blocks: Vec<(&str, String)> = (frames.iter())
        .filter(|f| f.event == "text" || f.event == "reasoning")
        .map(|f| (f.event.as_str(), f.data["id"].to_string()))
        .collect();
    let distinct: std::collections::BTreeSet<_> = blocks.iter().collect();
    assert_eq!((blocks.len(), distinct.len()), (5, 3), "{blocks:?}");
    assert_eq!((w.tools.calls("lookup"), w.tools.calls("wipe"), w.tools.calls("refund")), (1, 0, 1));
    // The earlier messages reached the model as history.
    let sent = &w.model_request(0)["messages"];
    assert!(sent.as_array().unwrap().iter().any(|m| m["content"] == "Hello! How can I help?"), "{sent}");
}

#[tokio::test]
async fn a_relay_of_a_stream_on_replica_a_is_answered_on_replica_b_once_and_only_by_its_tenant() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let mut on_a = chat(&w, 0, &chat_body("mock", json!([user("refund order 9")]), json!({}))).await;
    let relay = on_a.until_event("relay").await;
    let session_id = on_a.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    assert_eq!(relay.data["kind"], "permission");
    assert_eq!(relay.data["toolCallId"], "call_r");
    assert_eq!(relay.data["tool"], "refund");
    assert_eq!(relay.data["params"], json!({"order": "9"}));
    assert_eq!(relay.data["runId"], format!("{session_id}:1"));
    let relay_id = relay.data["id"].as_str().unwrap().to_string();

    // While it waits: another tenant sees neither the session nor the relay.
    let globex = w.apps[1].token("globex", "gary");
    let theirs = answer_relay(&w.apps[1], &globex, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(assert_gateway_error(theirs, StatusCode::NOT_FOUND).await, "Session not found");
    let own_session = w.apps[1].create_session(&globex, "demo").await;
    let theirs = answer_relay(&w.apps[1], &globex, &relay_id, &approve(&own_session, true)).await;
    assert_eq!(assert_gateway_error(theirs, StatusCode::NOT_FOUND).await, "Relay not found");
    // A wrong session id, an unknown relay.
    let wrong = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&uuid::Uuid::now_v7().to_string(), true)).await;
    assert_eq!(assert_gateway_error(wrong, StatusCode::NOT_FOUND).await, "Session not found");
    let unknown = answer_relay(&w.apps[1], &w.token, "relay_nope", &approve(&session_id, true)).await;
    assert_eq!(assert_gateway_error(unknown, StatusCode::NOT_FOUND).await, "Relay not found");
    assert_eq!(w.tools.calls("refund"), 0);

    let decided = answer_relay(&w.apps[1], &w.token, &relay_id, &approve(&session_id, true)).await;
    assert_eq!(decided.status(), StatusCode::OK);
    on_a.rest().await;
    let rest: Vec<Frame> = on_a.frames().into_iter().skip_while(|f| f.event != "relay").skip(1).collect();
    assert_eq!(&kinds(&rest)[..2], ["tool_call", "tool_result"]);
    assert_eq!(rest[0].data["id"], "call_r");
    assert_eq!(rest.last().unwrap().event, "harness_end");
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    assert_eq!(w.tools.calls("refund"), 1);

    // A second decision: llm-gateway's 404, where the native route says 409.
    let again = answer_relay(&w.apps[0], &w.token, &relay_id, &approve(&session_id, false)).await;
    assert_eq!(assert_gateway_error(again, StatusCode::NOT_FOUND).await, "Relay not found");
    let native = format!("/v1/sessions/{session_id}/relays/{relay_id}");
    let again = w.apps[1].post_json(&native, Some(&w.token), &json!({"approved": false})).await;
    crate::helpers::assert_error(again, StatusCode::CONFLICT, "conflict").await;
}

#[tokio::test]
async fn an_allowlist_glob_allows_matching_params_relays_the_rest_and_deny_names_a_tool_call() {
    let w = world(1, |_| {}).await;
    w.upstream.push(
        Reply::new()
            .tool_call("call_a", "lookup", [r#"{"id":"42"}"#])
            .tool_call("call_b", "lookup", [r#"{"id":"7"}"#])
            .tool_call("call_deny", "lookup", [r#"{"id":"43"}"#]),
    );
    w.upstream.push(Reply::new().text(["Done."]));
    let permissions = json!({"permissions": {
        "allowlist": [{"tool": "lookup", "params": {"id": "4*"}}],
        "deny": [{"toolCallId": "call_deny", "reason": "not that one"}],
    }});
    let mut stream = chat(&w, 0, &chat_body("mock", json!([user("look up 42, 7 and 43")]), permissions)).await;
    let relay = stream.until_event("relay").await;
    assert_eq!(relay.data["toolCallId"], "call_b", "7 does not match 4*");
    let session_id = stream.frames()[0].data["sessionId"].as_str().unwrap().to_string();
    let denial = json!({"sessionId": session_id, "response": {"approved": false, "reason": "no 7"}});
    let decided = answer_relay(&w.apps[0], &w.token, relay.data["id"].as_str().unwrap(), &denial).await;
    assert_eq!(decided.status(), StatusCode::OK);
    stream.rest().await;
    let frames = stream.frames();

    let calls: Vec<&Value> = frames.iter().filter(|f| f.event == "tool_call").map(|f| &f.data["id"]).collect();
    assert_eq!(calls, [&json!("call_a")]);
    let output =
        |id: &str| frames.iter().find(|f| f.event == "tool_result" && f.data["id"] == id).unwrap().data.clone();
    assert_eq!(output("call_a")["output"], json!({"tool": "lookup", "echo": {"id": "42"}}));
    assert_eq!(output("call_b")["output"], json!({"status": "denied", "reason": "no 7"}));
    assert_eq!(output("call_deny")["output"], json!({"status": "denied", "reason": "not that one"}));
    assert_eq!(w.tools.calls("lookup"), 1);
}

#[tokio::test]
async fn max_iterations_ends_the_run_with_harness_end_max_iterations() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("c1", "lookup", [r#"{"id":"1"}"#]));
    let body = chat_body("mock", json!([user("loop")]), json!({"maxIterations": 1}));
    let mut stream = chat(&w, 0, &body).await;
    stream.rest().await;
    let frames = stream.frames();
    assert_eq!(frames[1].event, "harness_start");
    assert_eq!(frames[1].data["maxIterations"], 1);
    let end = frames.last().unwrap();
    assert_eq!(end.event, "harness_end");
    assert_eq!(end.data["reason"], "max_iterations");
    assert_eq!(end.data["iterations"], 1);
    assert_eq!(w.upstream.calls(), 1);
}

#[tokio::test]
async fn a_history_in_llm_gateways_own_message_shapes_reaches_the_model_as_tool_calls_and_images() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["A cat."]));
    let messages = json!([
        user("look up 42 and 7"),
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "call_1", "name": "lookup", "arguments": {"id": "42"}},
            {"id": "call_2", "name": "lookup", "arguments": "{\"id\":\"7\"}"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "42 is fine"}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "7 is fine"},
        {"role": "user", "content": [{"type": "text", "text": "and this picture?"},
            {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo="}]},
    ]);
    let mut stream = chat(&w, 0, &chat_body("mock", messages, json!({}))).await;
    stream.rest().await;
    assert_eq!(stream.frames().last().unwrap().data["reason"], "final");

    let sent = w.model_request(0)["messages"].as_array().unwrap().clone();
    let assistant = sent.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        assistant["tool_calls"],
        json!([
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": r#"{"id":"42"}"#}},
            {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": r#"{"id":"7"}"#}},
        ])
    );
    let tools: Vec<&Value> = sent.iter().filter(|m| m["role"] == "tool").map(|m| &m["content"]).collect();
    assert_eq!(tools, [&json!("42 is fine"), &json!("7 is fine")]);
    assert_eq!(
        sent.last().unwrap()["content"],
        json!([{"type": "text", "text": "and this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}])
    );
}

#[tokio::test]
async fn bad_input_on_chat_and_relay_is_a_gateway_error_and_stores_and_calls_nothing() {
    let w = world(1, |_| {}).await;
    let app = &w.apps[0];
    let keys_before = store_keys(app).await;
    let raw = |path: &str, body: &'static str| {
        app.client.post(app.url(path)).bearer_auth(&w.token).header("content-type", "application/json").body(body)
    };
    let one = json!([user("hi")]);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"model": "mock"}), "`messages` is required"),
        (json!({"model": "mock", "messages": []}), "must not be empty"),
        (json!({"model": "mock", "messages": "hi"}), "`messages`: invalid type"),
        (json!({"model": "mock", "messages": [user("hi"), {"role": "assistant", "content": "x"}]}), "from the user"),
        (json!({"model": "nope", "messages": one}), "allowed: claude, demo, mock, resumable"),
        (json!({"model": "mock", "messages": one, "mode": "repl"}), "unknown mode"),
        (json!({"model": "mock", "messages": one, "mode": "rlm", "context": ["x"]}), "`context`"),
        (json!({"model": "mock", "messages": one, "permissions": {"deny": [{"reason": "x"}]}}), "toolCallId"),
        (json!({"model": "mock", "messages": one, "maxIterations": 0}), "at least 1"),
        (
            json!({"model": "mock", "messages": [{"role": "user", "content": [{"type": "text", "text": "read"},
                {"type": "document", "mediaType": "application/pdf", "data": "JVBERi0="}]}]}),
            "`messages[0]`: `content[1]`: document parts are not supported",
        ),
        (
            json!({"model": "mock", "messages": [{"role": "assistant", "tool_calls": [{"id": "c1"}]}, user("x")]}),
            "tool call \"c1\" needs",
        ),
    ];
    for (body, expected) in cases {
        let response = app.post_json("/chat", Some(&w.token), &body).await;
        let message = assert_gateway_error(response, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let malformed = raw("/chat", "{\"model\": ").send().await.unwrap();
    assert!(assert_gateway_error(malformed, StatusCode::BAD_REQUEST).await.contains("invalid request body"));
    let anonymous = app.post_json("/chat", None, &json!({"model": "mock", "messages": one})).await;
    assert_gateway_error(anonymous, StatusCode::UNAUTHORIZED).await;

    // Each message names the field.
    let relay_cases = [
        (json!({"response": {"approved": true}}), "missing field `sessionId`"),
        (json!({"sessionId": "s"}), "missing field `response`"),
        (json!({"sessionId": "s", "response": {}}), "`response`: missing field `approved`"),
        (json!({"sessionId": "s", "response": {"approved": "yes"}}), "`response.approved`: invalid type"),
        (json!({"sessionId": 5, "response": {"approved": true}}), "`sessionId`: invalid type"),
    ];
    for (body, expected) in relay_cases {
        let response = answer_relay(app, &w.token, "relay_x", &body).await;
        let message = assert_gateway_error(response, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let malformed = raw("/chat/relay/relay_x", "{").send().await.unwrap();
    assert_gateway_error(malformed, StatusCode::BAD_REQUEST).await;
    let unknown = answer_relay(app, &w.token, "relay_x", &approve("no-such-session", true)).await;
    assert_eq!(assert_gateway_error(unknown, StatusCode::NOT_FOUND).await, "Session not found");

    assert_eq!(w.upstream.calls(), 0);
    assert_eq!(store_keys(app).await, keys_before, "bad requests store nothing");
}
