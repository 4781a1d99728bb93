use serde_json::json;

use super::*;
use crate::protocol::{
    PendingCall,
    testing::{all_data, event, types, usage},
};

fn encode_all(encoder: &mut AiSdkEncoder, events: Vec<EventKind>) -> Vec<Frame> {
    events.into_iter().enumerate().flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind))).collect()
}

fn call_usage() -> EventKind {
    EventKind::Usage { usage: usage(10, 2), total: usage(10, 2) }
}

fn result(id: &str, status: &str, output: Value) -> EventKind {
    EventKind::ToolResult {
        tool_call_id: id.into(),
        name: "lookup".into(),
        status: serde_json::from_value(serde_json::json!(status)).expect("a tool status"),
        output,
    }
}

fn ended(reason: TurnEndReason) -> EventKind {
    EventKind::TurnEnded { reason, iterations: 1, usage: usage(10, 2) }
}

/// The client reducer's rules (`processUIMessageStream`): deltas inside
/// their part, parts closed before `finish-step`, outputs for known calls.
fn assert_valid(chunks: &[Value], known: &[&str]) {
    let (mut text, mut calls, mut inputs) = (HashSet::new(), HashSet::new(), HashSet::new());
    calls.extend(known.iter().map(|s| s.to_string()));
    for chunk in chunks {
        let id = chunk["id"].as_str().unwrap_or_default().to_string();
        let call = chunk["toolCallId"].as_str().unwrap_or_default().to_string();
        match chunk["type"].as_str().unwrap() {
            "text-start" | "reasoning-start" => assert!(text.insert(id), "{chunk} opened twice"),
            "text-delta" | "reasoning-delta" => assert!(text.contains(&id), "{chunk} outside its part"),
            "text-end" | "reasoning-end" => assert!(text.remove(&id), "{chunk} ends nothing"),
            "finish-step" => assert!(text.is_empty(), "parts {text:?} open at finish-step"),
            "tool-input-start" => {
                calls.insert(call.clone());
                inputs.insert(call);
            }
            "tool-input-delta" => assert!(inputs.contains(&call), "{chunk} without its start"),
            "tool-input-available" => {
                calls.insert(call);
            }
            "tool-output-available" | "tool-output-error" | "tool-output-denied" | "tool-approval-request" => {
                assert!(calls.contains(&call), "{chunk} names an unknown call")
            }
            _ => {}
        }
    }
}

#[test]
fn a_tool_round_then_an_answer_is_two_steps_in_the_clients_order() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 3, model: "m".into() },
            EventKind::TextDelta { text: "Let me look.".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"id":"42"}"#.into() },
            EventKind::MessageCompleted { content: Some("Let me look.".into()), reasoning: None },
            call_usage(),
            EventKind::ToolCall { tool_call_id: "c1".into(), name: "lookup".into(), arguments: json!({"id": "42"}) },
            result("c1", "success", json!(r#"{"found":true}"#)),
            EventKind::TextDelta { text: "Found.".into() },
            EventKind::Usage { usage: usage(20, 1), total: usage(30, 3) },
            ended(TurnEndReason::Final),
        ],
    );
    let chunks = all_data(&frames);
    assert_eq!(
        types(&frames),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-available",
            "tool-output-available",
            "finish-step",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(chunks[0], json!({"type": "start", "messageId": "s1-3"}));
    assert_eq!(chunks[7]["input"], json!({"id": "42"}));
    assert_eq!(chunks[8]["output"], json!({"found": true}), "JSON text is parsed");
    assert_eq!(
        chunks[15],
        json!({"type": "finish", "finishReason": "stop",
               "messageMetadata": {"usage": {"inputTokens": 30, "outputTokens": 3, "totalTokens": 33}}})
    );
    assert_valid(&chunks, &[]);
    assert!(!encoder.wants_finish(), "closing needs nothing stored");
    assert_eq!(encoder.close()[0].data, "[DONE]");
    assert!(frames.iter().all(|f| f.event.is_none()));
}

#[test]
fn a_pause_asks_for_approvals_and_frontend_outputs_and_finishes_with_tool_calls() {
    let mut encoder = AiSdkEncoder::default();
    let relay = PendingRelay {
        relay_id: "relay_1".into(),
        tool_call_id: "c1".into(),
        tool: "refund".into(),
        params: json!({"order": "9"}),
    };
    let chart = PendingCall { tool_call_id: "c2".into(), tool: "chart".into(), arguments: json!({"m": "cpu"}) };
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "refund".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"order":"9"}"#.into() },
            EventKind::ToolCallStarted { tool_call_id: "c2".into(), name: "chart".into() },
            call_usage(),
            EventKind::Paused { pending_relays: vec![relay], pending_calls: vec![chart] },
        ],
    );
    let chunks = all_data(&frames);
    assert_eq!(
        types(&frames),
        [
            "start",
            "start-step",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-start",
            "tool-input-available",
            "tool-input-available",
            "tool-approval-request",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(chunks[7], json!({"type": "tool-approval-request", "approvalId": "relay_1", "toolCallId": "c1"}));
    assert_eq!(chunks[9]["finishReason"], "tool-calls");
    assert_valid(&chunks, &[]);
}

#[test]
fn a_continuation_answers_in_the_clients_message_without_announcing_its_calls_again() {
    let known: HashSet<String> = ["c1".to_string(), "c2".to_string()].into();
    let mut encoder = AiSdkEncoder::continuing(Some("m-7".into()), known);
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::Resumed { turn: 1 },
            EventKind::RelayDecided {
                relay_id: "r1".into(),
                tool_call_id: "c1".into(),
                approved: false,
                always: false,
            },
            result("c1", "denied", json!("Permission denied: the user said no")),
            result("c2", "success", json!("chart rendered")),
            EventKind::TextDelta { text: "OK.".into() },
            call_usage(),
            ended(TurnEndReason::Final),
        ],
    );
    let chunks = all_data(&frames);
    assert_eq!(
        types(&frames),
        [
            "start",
            "tool-output-denied",
            "tool-output-available",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(chunks[0], json!({"type": "start", "messageId": "m-7"}));
    assert_eq!(chunks[2]["output"], "chart rendered");
    assert_valid(&chunks, &["c1", "c2"]);
}

#[test]
fn a_policy_denial_is_an_output_error_and_a_result_for_an_unseen_call_is_announced() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(&mut encoder, vec![result("c9", "denied", json!("Permission denied: no"))]);
    assert_eq!(types(&frames), ["start", "tool-input-available", "tool-output-error"]);
    assert_eq!(all_data(&frames)[2]["errorText"], "Permission denied: no");
    assert_valid(&all_data(&frames), &[]);
}

#[test]
fn an_error_mid_text_closes_the_part_and_a_cancel_aborts() {
    let mut failed = AiSdkEncoder::default();
    let frames = encode_all(
        &mut failed,
        vec![
            EventKind::TextDelta { text: "Hal".into() },
            EventKind::Error {
                code: crate::domain::FailureCode::UpstreamDisconnected,
                message: "lost".into(),
                retry_after_secs: None,
            },
            ended(TurnEndReason::Failed),
        ],
    );
    assert_eq!(
        types(&frames),
        ["start", "start-step", "text-start", "text-delta", "text-end", "error", "finish-step", "finish"]
    );
    assert_eq!(all_data(&frames)[7]["finishReason"], "error");
    assert_valid(&all_data(&frames), &[]);

    let mut cancelled = AiSdkEncoder::default();
    let frames =
        encode_all(&mut cancelled, vec![EventKind::TextDelta { text: "a".into() }, ended(TurnEndReason::Cancelled)]);
    assert_eq!(types(&frames).last().unwrap(), "abort");
    assert_valid(&all_data(&frames), &[]);
}

#[test]
fn a_restarted_step_ends_the_cut_step_and_says_so_in_a_transient_data_part() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TextDelta { text: "par".into() },
            EventKind::StepRestarted { step: 1, replica: "b".into() },
            EventKind::TextDelta { text: "full".into() },
        ],
    );
    let chunks = all_data(&frames);
    assert_eq!(
        types(&frames),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "data-step-restarted",
            "start-step",
            "text-start",
            "text-delta"
        ]
    );
    assert_eq!(chunks[6], json!({"type": "data-step-restarted", "data": {"step": 1}, "transient": true}));
    assert_valid(&chunks, &[]);
}
