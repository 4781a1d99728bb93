//! The agent loop at its limits: context-window truncation and compaction,
//! upstream failures, and a replica dying mid-turn.

use std::time::Duration;

use serde_json::json;

use crate::{
    orchestrator::{kinds, of_kind, tool_messages, world},
    sse::{SseReader, seqs},
    support::{mock_upstream::Reply, tool_server::ToolReply},
};

#[tokio::test]
async fn a_tool_result_over_the_limit_is_truncated_with_a_marker_and_reported() {
    // The `small` model has a 2000-token window: results keep at most 300 tokens.
    let w = world(1, |_| {}).await;
    w.tools.reply("big", ToolReply::Text("x".repeat(5_000)));
    w.upstream.push(Reply::new().tool_call("call_big", "big", ["{}"]));
    w.upstream.push(Reply::new().text(["Summarised."]));
    let id = w.session(0, "small", json!({})).await;
    let frames = w.send(0, &id, "fetch it").await.rest().await;
    let output = of_kind(&frames, "tool_result")[0].data["output"].as_str().unwrap().to_string();
    assert!(output.ends_with("[TRUNCATED]"), "{}", &output[output.len() - 40..]);
    assert!(output.len() <= 1_200, "{} chars kept", output.len());
    let seen = tool_messages(&w.model_request(1))[0]["content"].as_str().unwrap().to_string();
    assert_eq!(seen, output, "the model sees the truncated result");
    let view = w.apps[0].sessions.get(&principal(), &id).await.unwrap();
    let truncation = &view.session.truncations()[0];
    assert_eq!(truncation.tool_call_id, "call_big");
    assert_eq!(truncation.original_token_count, 1_250);
}

#[tokio::test]
async fn a_long_history_is_compacted_before_the_model_call_that_would_overflow() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["First answer."]));
    let id = w.session(0, "small", json!({})).await;
    let first = w.send(0, &id, &"a".repeat(4_000)).await.rest().await;
    assert!(of_kind(&first, "compaction_started").is_empty(), "the first turn fits");

    // ~1000 + ~750 tokens plus 200 reserved passes 95% of 2000.
    w.upstream.push(Reply::new().text(["<analysis>the user sent a long text</analysis>"]));
    w.upstream.push(Reply::new().text(["Second answer."]));
    let second = w.send(0, &id, &"b".repeat(3_000)).await.rest().await;
    assert_eq!(&kinds(&second)[..3], ["turn_started", "compaction_started", "compaction_done"]);
    let done = of_kind(&second, "compaction_done")[0];
    assert!(done.data["tokens_after"].as_u64() < done.data["tokens_before"].as_u64());
    assert_eq!(second.last().unwrap().data["reason"], "final");
    // The answering call got the summary instead of the first long message.
    let request = w.model_request(2).to_string();
    assert!(request.contains("the user sent a long text") && !request.contains(&"a".repeat(100)));
}

#[tokio::test]
async fn a_message_that_cannot_fit_even_after_compaction_fails_the_turn_clearly() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["<analysis>nothing to keep</analysis>"]));
    let id = w.session(0, "small", json!({})).await;
    let frames = w.send(0, &id, &"z".repeat(9_000)).await.rest().await;
    let error = of_kind(&frames, "error")[0];
    assert_eq!(error.data["code"], "context_overflow");
    assert_eq!(frames.last().unwrap().data["reason"], "failed");
}

#[tokio::test]
async fn an_upstream_429_is_retried_and_the_turn_succeeds() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#));
    w.upstream.push(Reply::new().text(["Fine ", "now."]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "hello").await.rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    assert_eq!(w.upstream.calls(), 2);
}

#[tokio::test]
async fn an_upstream_disconnect_after_the_first_token_fails_the_turn_with_a_clear_error() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["Part", "ial", " answer"]).disconnect_after(1));
    let id = w.session(0, "mock", json!({})).await;
    let frames = tokio::time::timeout(Duration::from_secs(20), w.send(0, &id, "hello").await.rest()).await.unwrap();
    assert_eq!(of_kind(&frames, "error")[0].data["code"], "upstream_disconnected");
    assert_eq!(frames.last().unwrap().data["reason"], "failed");
    let view: serde_json::Value =
        w.apps[0].get(&format!("/v1/sessions/{id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!(view["status"], "failed");
}

#[tokio::test]
async fn a_replica_killed_mid_turn_is_taken_over_without_running_a_finished_tool_again() {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    w.upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"1"}"#]));
    // A's second model call streams a word and hangs: A dies mid-step.
    w.upstream.push(Reply::new().text(["Partial ", "never"]).stall_after(1));
    w.upstream.push(Reply::new().text(["Recovered ", "answer."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "look up 1").await;
    let seen = on_a.until_kind("tool_result").await;
    let cursor = seen.last().unwrap().id.unwrap();
    on_a.until_kind("text_delta").await;

    let a = w.apps.remove(0);
    a.kill();
    drop(on_a);
    // A client rejoins on B where it left off.
    let rest = SseReader::new(w.apps[0].events(&w.token, &id, Some(cursor)).await).rest().await;
    let rest_kinds = kinds(&rest);
    assert_eq!(rest_kinds[..2], ["text_delta", "step_restarted"], "the cut step's word, then its restart");
    assert_eq!(rest.last().unwrap().data["reason"], "final");
    let text: String = of_kind(&rest, "text_delta").iter().map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "Partial Recovered answer.", "what a client drops on step_restarted comes first");
    assert_eq!(w.tools.calls("lookup"), 1, "the finished tool did not run again");
    let metrics = crate::metrics::scrape(&w.apps[0]).await;
    assert_eq!(crate::metrics::sample(&metrics, "switchboard_takeovers_total", &[]), 1.0, "counted on B");
    let tool_calls = crate::metrics::sample(&metrics, "switchboard_tool_calls_total", &[]);
    assert_eq!(tool_calls, 0.0, "the lookup result was counted on A, where it ran");
    assert_eq!(seqs(&rest), ((cursor + 1)..=(cursor + rest.len() as u64)).collect::<Vec<_>>());
    let whole = SseReader::new(w.apps[0].events(&w.token, &id, Some(0)).await).rest().await;
    assert_eq!(seqs(&whole), (1..=whole.len() as u64).collect::<Vec<_>>(), "gapless from the start");
}

/// A step cut short on A by A's death, for a model that continues answers:
/// B continues it from the durable text rather than generating it again.
/// `frames`: the wire frames up to the first word (Anthropic opens with two).
async fn a_cut_step_is_continued_from_its_durable_text(model: &str, frames: usize) {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    w.upstream.push(Reply::new().text(["The answer ", "never"]).stall_after(frames));
    w.upstream.push(Reply::new().text(["is 42."]));
    let id = w.session(0, model, json!({})).await;
    let mut on_a = w.send(0, &id, "what is it?").await;
    let seen = on_a.until_kind("text_delta").await;
    let cursor = seen.last().unwrap().id.unwrap();
    w.apps.remove(0).kill();
    drop(on_a);
    let rest = SseReader::new(w.apps[0].events(&w.token, &id, Some(cursor)).await).rest().await;
    assert!(!kinds(&rest).contains(&"step_restarted"), "{:?}", kinds(&rest));
    let text: String = of_kind(&rest, "text_delta").iter().map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "is 42.", "only the continuation follows the durable text");
    assert_eq!(of_kind(&rest, "message_completed")[0].data["content"], "The answer is 42.");
    // B asked the model to continue the answer, not to start one.
    let request = w.model_request(1);
    let last = request["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "assistant", "{request}");
    let prefill = match &last["content"] {
        serde_json::Value::String(text) => text.clone(),
        blocks => blocks[0]["text"].as_str().unwrap_or_default().to_string(),
    };
    assert!(prefill.starts_with("The answer"), "{request}");
}

#[tokio::test]
async fn an_openai_compatible_model_continues_a_cut_step_with_continue_final_message() {
    a_cut_step_is_continued_from_its_durable_text("resumable", 1).await;
}

#[tokio::test]
async fn an_anthropic_model_continues_a_cut_step_with_a_prefill() {
    a_cut_step_is_continued_from_its_durable_text("resumable-claude", 3).await;
}

fn principal() -> switchboard::principal::Principal {
    switchboard::principal::Principal { tenant: "acme".into(), subject: "alice".into(), scopes: vec![] }
}
