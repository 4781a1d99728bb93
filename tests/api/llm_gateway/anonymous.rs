//! A deployment open to llm-gateway clients without credentials
//! (`[anonymous] routes = ["llm-gateway"]`): an existing client, sending no
//! key and no model, runs a whole tool-using turn whose relay is answered
//! on another replica, while credentials that are sent must still be good
//! and other dialects' routes stay closed.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{assert_gateway_error, kinds, session_of, user};
use crate::{
    helpers::assert_error,
    orchestrator::world,
    support::{mock_upstream::Reply, raw_sse::RawSse},
};

const ANONYMOUS: &str = r#"
[anonymous]
tenant = "acme"
subject = "anonymous"
routes = ["llm-gateway"]
"#;

#[tokio::test]
async fn an_anonymous_chat_without_a_model_relays_on_replica_a_and_is_decided_on_replica_b() {
    let w = world(2, |o| o.extra_toml.push_str(ANONYMOUS)).await;
    w.upstream.push(Reply::new().text(["Refunding."]).tool_call("call_r", "refund", [r#"{"order":"9"}"#]));
    w.upstream.push(Reply::new().text(["Order 9 is refunded."]));
    let (a, b) = (&w.apps[0], &w.apps[1]);

    let body = json!({"messages": [user("refund order 9")]});
    let mut on_a = RawSse::new(a.post_json("/chat", None, &body).await);
    let relay = on_a.until_event("relay").await;
    let session_id = session_of(&on_a);
    assert_eq!((&relay.data["tool"], &relay.data["toolCallId"]), (&json!("refund"), &json!("call_r")));
    assert_eq!(w.tools.calls("refund"), 0, "nothing runs before the decision");

    let relay_id = relay.data["id"].as_str().unwrap();
    let decision = json!({"sessionId": session_id, "response": {"approved": true}});
    let decided = b.post_json(&format!("/chat/relay/{relay_id}"), None, &decision).await;
    assert_eq!(decided.status(), StatusCode::OK);
    assert_eq!(decided.json::<Value>().await.unwrap(), json!({"success": true}));
    on_a.rest().await;
    let frames = on_a.frames();
    let after: Vec<_> = frames.iter().skip_while(|f| f.event != "relay").skip(1).cloned().collect();
    assert_eq!(kinds(&after), ["tool_call", "tool_result", "text", "usage", "harness_end"]);
    assert_eq!(after[2].data["content"], "Order 9 is refunded.");
    assert_eq!(after.last().unwrap().data["reason"], "final");
    assert_eq!(w.tools.calls("refund"), 1);
    // No model named: the server's default (`claude`, Anthropic's API).
    let models: Vec<Value> = w.upstream.requests().iter().map(|r| r.body["model"].clone()).collect();
    assert_eq!(models, [json!("mock-claude"), json!("mock-claude")]);
    assert!(w.upstream.requests().iter().all(|r| r.path == "/v1/messages"));
}

#[tokio::test]
async fn with_anonymous_llm_gateway_routes_bad_credentials_and_native_routes_are_still_401() {
    let w = world(1, |o| o.extra_toml.push_str(ANONYMOUS)).await;
    let app = &w.apps[0];
    let body = json!({"messages": [user("hi")]});
    // An unknown key, a token with a bad signature, another scheme: none
    // falls through to the anonymous principal.
    let forged_jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4IiwidGVuYW50IjoiYWNtZSJ9.c2lnbmF0dXJl";
    for authorization in ["Bearer not-a-key", &format!("Bearer {forged_jwt}"), "Basic YTpi"] {
        let request = app.client.post(app.url("/chat")).header("authorization", authorization).json(&body);
        assert_gateway_error(request.send().await.unwrap(), StatusCode::UNAUTHORIZED).await;
    }
    let native = app.post_json("/v1/sessions", None, &json!({"model": "mock"})).await;
    assert_error(native, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(app.get("/v1/sessions/x/events", None).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(w.upstream.calls(), 0);
}
