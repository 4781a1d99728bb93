//! `POST /summarize`: one model call streamed as llm-gateway's provider
//! events (golden transcript), the tenant's default model, its token
//! budget, a provider error, and bad requests.

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::store::TokenWindow;

use super::assert_gateway_error;
use crate::{
    limits::charged,
    metrics::{sample, scrape},
    orchestrator::{World, kinds, world},
    support::{
        mock_upstream::Reply,
        raw_sse::{RawSse, assert_golden, normalise, store_keys},
    },
};

const SYSTEM_PROMPT: &str = "Summarize the following conversation concisely. Preserve key decisions, \
conclusions, and important details. Output only the summary, no preamble.";

/// Tenants with a token budget (`metered`: room for a call, `frugal`: none)
/// and one with neither a default model nor access to the server's.
const TENANTS: &str = r#"
[[tenants]]
id = "metered"
jwt = { hs256_secret = "metered-secret-0123456789" }
rate_limit = { tokens_per_minute = 6000 }

[[tenants]]
id = "frugal"
jwt = { hs256_secret = "frugal-secret-0123456789" }
rate_limit = { tokens_per_minute = 100 }

[[tenants]]
id = "plain"
jwt = { hs256_secret = "plain-secret-0123456789" }
models = ["mock"]
"#;

async fn tenants() -> World {
    world(1, |o| o.extra_toml.push_str(TENANTS)).await
}

fn conversation() -> Value {
    json!([
        {"role": "user", "content": "Plan a week in Italy"},
        {"role": "assistant", "content": [{"type": "text", "text": "Rome, then Florence."}]},
    ])
}

async fn summarize(w: &World, token: Option<&str>, body: &Value) -> reqwest::Response {
    w.apps[0].post_json("/summarize", token, body).await
}

#[tokio::test]
async fn a_summary_streams_connected_then_the_calls_blocks_and_usage_matching_the_golden_transcript() {
    let w = world(1, |_| {}).await;
    let keys_before = store_keys(&w.apps[0]).await;
    w.upstream.push(Reply::new().reasoning(["Two ", "turns."]).text(["Rome, ", "then Florence."]).usage(50, 7));
    let body = json!({"model": "mock", "messages": conversation(), "sourceIds": ["n1", "n2"]});
    let response = summarize(&w, Some(&w.token), &body).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = RawSse::new(response);
    let text = stream.rest().await;
    let frames = stream.frames();
    assert_eq!(kinds(&frames), ["connected", "reasoning", "reasoning", "text", "text", "usage"]);
    let session_id = frames[0].data["sessionId"].as_str().unwrap();
    let run_id = frames[1].data["runId"].as_str().unwrap();
    let (reasoning_id, text_id) = (frames[1].data["id"].as_str().unwrap(), frames[3].data["id"].as_str().unwrap());
    assert_eq!(frames[0].data, json!({"type": "connected", "sessionId": session_id, "sourceIds": ["n1", "n2"]}));
    for frame in &frames[1..] {
        assert_eq!(frame.data["type"], frame.event.as_str());
        assert_eq!((frame.data["runId"].as_str(), frame.data.get("agentId"), frame.id), (Some(run_id), None, None));
    }
    assert_eq!((frames[2].data["id"].as_str(), frames[4].data["id"].as_str()), (Some(reasoning_id), Some(text_id)));
    let replaced = [(session_id, "<session>"), (run_id, "<run>"), (reasoning_id, "<reasoning>"), (text_id, "<text>")];
    assert_golden("llm_gateway_summarize.sse", &normalise(&text, &replaced));

    // The model got llm-gateway's prompt, and no tools.
    let sent = w.model_request(0);
    let lines = "[user]: Plan a week in Italy\n[assistant]: [{\"text\":\"Rome, then Florence.\",\"type\":\"text\"}]";
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": lines}])
    );
    assert!(sent.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)), "{sent}");
    // Not a session: nothing stored. Measured like every model call.
    assert_eq!(store_keys(&w.apps[0]).await, keys_before);
    let metrics = scrape(&w.apps[0]).await;
    let ok = [("model", "mock"), ("provider", "openai"), ("outcome", "ok")];
    assert_eq!(sample(&metrics, "switchboard_model_call_duration_seconds_count", &ok), 1.0);
    let tokens = [("tenant", "acme"), ("model", "mock"), ("kind", "output")];
    assert_eq!(sample(&metrics, "switchboard_model_tokens_total", &tokens), 7.0);
}

#[tokio::test]
async fn a_summary_without_a_model_uses_the_default_and_is_charged_to_the_tenants_token_budget() {
    // Budgets are per calendar minute: should the minute turn during a run,
    // the run is repeated rather than misread.
    for _ in 0..3 {
        let window = TokenWindow::now();
        let w = tenants().await;
        let token = w.apps[0].token("metered", "m");
        w.upstream.push(Reply::new().text(["Italy: Rome, Florence."]).usage(120, 9));
        let response = summarize(&w, Some(&token), &json!({"messages": conversation()})).await;
        let mut stream = RawSse::new(response);
        stream.rest().await;
        let frames = stream.frames();
        assert_eq!(frames[0].data["sourceIds"], json!([]));
        assert_eq!(kinds(&frames), ["connected", "text", "usage"]);
        assert_eq!((&frames[2].data["inputTokens"], &frames[2].data["outputTokens"]), (&json!(120), &json!(9)));
        let request = &w.upstream.requests()[0];
        // The server's default model, `claude`: Anthropic's API.
        assert_eq!((request.path.as_str(), &request.body["model"]), ("/v1/messages", &json!("mock-claude")));
        let spent = charged(&w.apps[0], "metered", window).await;
        if TokenWindow::now() != window {
            continue;
        }
        assert_eq!(spent, 129, "charged what the call used");
        return;
    }
    panic!("the minute turned in three runs in a row");
}

#[tokio::test]
async fn a_spent_budget_and_a_provider_error_end_the_summary_with_an_error_event() {
    let w = tenants().await;
    let frugal = w.apps[0].token("frugal", "f");
    let body = json!({"model": "mock", "messages": conversation()});
    let mut stream = RawSse::new(summarize(&w, Some(&frugal), &body).await);
    stream.rest().await;
    let frames = stream.frames();
    assert_eq!(kinds(&frames), ["connected", "error"]);
    let error = &frames[1].data;
    assert_eq!((&error["code"], error["runId"].is_string()), (&json!("rate_limited"), true), "{error}");
    assert!((1..=60).contains(&error["retryAfter"].as_u64().unwrap()), "{error}");
    assert_eq!(w.upstream.calls(), 0, "refused before the model is called");

    w.upstream.push(Reply::http_error(400, r#"{"error":{"message":"context too long"}}"#));
    let mut stream = RawSse::new(summarize(&w, Some(&w.token), &body).await);
    stream.rest().await;
    let frames = stream.frames();
    assert_eq!(kinds(&frames), ["connected", "error"]);
    let error = &frames[1].data;
    assert_eq!(error["code"], "upstream_error");
    assert!(error["message"].as_str().unwrap().contains("HTTP 400"), "{error}");
    assert_eq!(error.get("agentId"), None);
}

#[tokio::test]
async fn bad_summarize_requests_get_llm_gateways_errors_and_call_nothing() {
    let w = tenants().await;
    let app = &w.apps[0];
    let malformed = (app.client.post(app.url("/summarize")))
        .bearer_auth(&w.token)
        .header("content-type", "application/json")
        .body("{\"messages\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(assert_gateway_error(malformed, StatusCode::BAD_REQUEST).await, "Invalid JSON body");
    let required = "model and messages are required";
    let plain = app.token("plain", "p");
    let cases = [
        (&w.token, json!({"model": "mock"}), required),
        (&plain, json!({"messages": conversation()}), required),
        (&w.token, json!({"model": "nope", "messages": conversation()}), "unknown model \"nope\""),
        (&plain, json!({"model": "claude", "messages": conversation()}), "allowed: mock"),
        (&w.token, json!({"messages": [{"content": "x"}]}), "`messages[0]` needs a `role`"),
    ];
    for (token, body, expected) in cases {
        let message = assert_gateway_error(summarize(&w, Some(token), &body).await, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let anonymous = summarize(&w, None, &json!({"model": "mock", "messages": conversation()})).await;
    assert_gateway_error(anonymous, StatusCode::UNAUTHORIZED).await;
    assert_eq!(w.upstream.calls(), 0);
}
