use serde_json::json;

use super::*;
use crate::protocol::{
    PendingCall,
    testing::{RESTARTED_ANSWER, all_data, event, restarted_turn, types, usage},
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
    EventKind::TurnEnded { reason, iterations: 1, usage: usage(10, 2), title_pending: false }
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
            // ai@7: the step's parts, open ones included, are gone.
            "reset-step" => text.clear(),
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
    let mut encoder = AiSdkEncoder::continuing(AiSdkVersion::V6, Some("m-7".into()), known);
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

/// The parts `processUIMessageStream` builds from `chunks` (a subset: steps,
/// text, tool parts by call id in the current step, data parts), as
/// `useChat`'s message holds them.
fn reduce(chunks: &[Value]) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::new();
    let mut text: std::collections::HashMap<String, usize> = Default::default();
    for chunk in chunks {
        let id = chunk["id"].as_str().unwrap_or_default().to_string();
        let kind = chunk["type"].as_str().unwrap();
        match kind {
            "start-step" => parts.push(json!({"type": "step-start"})),
            "reset-step" => {
                let step = parts.iter().rposition(|p| p["type"] == "step-start").map_or(0, |i| i + 1);
                parts.truncate(step);
                text.clear();
            }
            "text-start" => {
                text.insert(id, parts.len());
                parts.push(json!({"type": "text", "text": ""}));
            }
            "text-delta" => {
                let part = &mut parts[text[&id]];
                part["text"] = json!(format!("{}{}", part["text"].as_str().unwrap(), chunk["delta"].as_str().unwrap()));
            }
            "tool-input-start" => parts.push(json!({"type": format!("tool-{}", chunk["toolName"].as_str().unwrap()),
                                                    "toolCallId": chunk["toolCallId"], "state": "input-streaming"})),
            "tool-input-available" | "tool-input-error" => {
                let step = parts.iter().rposition(|p| p["type"] == "step-start").unwrap_or(0);
                let state = if kind == "tool-input-error" { "output-error" } else { "input-available" };
                match parts[step..].iter_mut().find(|p| p["toolCallId"] == chunk["toolCallId"]) {
                    Some(part) => part["state"] = json!(state),
                    None => parts.push(json!({"type": format!("tool-{}", chunk["toolName"].as_str().unwrap()),
                                              "toolCallId": chunk["toolCallId"], "state": state})),
                }
            }
            _ if kind.starts_with("data-") && chunk["transient"] != true => {
                parts.push(json!({"type": kind, "id": chunk["id"], "data": chunk["data"]}));
            }
            _ => {}
        }
    }
    parts
}

fn text_of(parts: &[&Value]) -> String {
    parts.iter().filter(|p| p["type"] == "text").map(|p| p["text"].as_str().unwrap()).collect()
}

#[test]
fn a_restarted_step_ends_with_a_data_part_that_voids_its_parts() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(&mut encoder, restarted_turn(1));
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    let at = chunks.iter().position(|c| c["type"] == "data-step-restarted").unwrap();
    assert_eq!(
        chunks[at - 1..=at + 2],
        [
            json!({"type": "text-end", "id": "text-2"}),
            json!({"type": "data-step-restarted", "id": "step-restarted-4", "data": {"step": 1}}),
            json!({"type": "finish-step"}),
            json!({"type": "start-step"}),
        ]
    );
    let text_ids: Vec<&Value> = chunks.iter().filter(|c| c["type"] == "text-start").map(|c| &c["id"]).collect();
    assert_eq!(text_ids, [&json!("text-2"), &json!("text-5")], "the regenerated text is a part of its own");

    let parts = reduce(&chunks);
    assert_eq!(text_of(&parts.iter().collect::<Vec<_>>()), "w1 w2 w1 w2 w3", "what the reducer alone keeps");
    assert_eq!(text_of(&live_parts(&parts)), RESTARTED_ANSWER, "what a frontend shows");
}

#[test]
fn a_call_the_cut_step_started_ends_in_error_and_is_void() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::TextDelta { text: "Let me".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"id":"#.into() },
            EventKind::StepRestarted { step: 1, replica: "b".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"id":"7"}"#.into() },
            call_usage(),
        ],
    );
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    let error = chunks.iter().find(|c| c["type"] == "tool-input-error").unwrap();
    assert_eq!(
        error,
        &json!({"type": "tool-input-error", "toolCallId": "c1", "toolName": "lookup", "input": r#"{"id":"#,
                "errorText": VOID_CALL})
    );
    let available: Vec<&Value> = chunks.iter().filter(|c| c["type"] == "tool-input-available").collect();
    assert_eq!(available.len(), 1, "the regenerated call, same id, is announced in its step");
    assert_eq!(available[0]["input"], json!({"id": "7"}));
    let parts = reduce(&chunks);
    let live = live_parts(&parts);
    assert_eq!(live.len(), 2, "{live:?}");
    assert_eq!((live[0]["type"].as_str(), live[1]["state"].as_str()), (Some("step-start"), Some("input-available")));
}

#[test]
fn a_restart_this_stream_saw_nothing_of_closes_an_empty_step() {
    let mut encoder = AiSdkEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TextDelta { text: "Found.".into() },
            call_usage(),
            result("c1", "success", json!("ok")),
            EventKind::StepRestarted { step: 2, replica: "b".into() },
        ],
    );
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    let parts = reduce(&chunks);
    assert_eq!(text_of(&live_parts(&parts)), "Found.", "the step before stays");
    let types = types(&frames);
    assert_eq!(types[types.len() - 3..], ["start-step", "data-step-restarted", "finish-step"]);
}

#[test]
fn an_ai7_client_is_told_to_reset_the_cut_step_and_holds_the_answer_once() {
    let mut encoder = AiSdkEncoder::new(AiSdkVersion::V7);
    let frames = encode_all(&mut encoder, restarted_turn(1));
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    assert_eq!(
        types(&frames),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "reset-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ],
        "no marker, no end for the void text: the reset takes it"
    );
    let parts = reduce(&chunks);
    assert_eq!(text_of(&parts.iter().collect::<Vec<_>>()), RESTARTED_ANSWER, "what the reducer alone keeps");
    assert_eq!(parts.iter().filter(|p| p["type"] == "step-start").count(), 1, "the step goes on");
}

#[test]
fn an_ai7_reset_takes_the_calls_the_cut_step_started_and_the_regenerated_call_is_announced_again() {
    let mut encoder = AiSdkEncoder::new(AiSdkVersion::V7);
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"id":"#.into() },
            EventKind::StepRestarted { step: 1, replica: "b".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"id":"7"}"#.into() },
            call_usage(),
        ],
    );
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    assert!(chunks.iter().all(|c| c["type"] != "tool-input-error"), "nothing to void: the reset took it");
    let starts = chunks.iter().filter(|c| c["type"] == "tool-input-start").count();
    assert_eq!(starts, 2, "the regenerated call opens again, after the reset");
    let parts = reduce(&chunks);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[1]["state"], "input-available");
}

#[test]
fn a_restart_an_ai7_stream_saw_nothing_of_resets_a_step_of_its_own() {
    let mut encoder = AiSdkEncoder::new(AiSdkVersion::V7);
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TextDelta { text: "Found.".into() },
            call_usage(),
            result("c1", "success", json!("ok")),
            EventKind::StepRestarted { step: 2, replica: "b".into() },
            EventKind::TextDelta { text: "Done.".into() },
        ],
    );
    let chunks = all_data(&frames);
    assert_valid(&chunks, &[]);
    let types = types(&frames);
    let at = types.iter().position(|t| t == "reset-step").unwrap();
    assert_eq!(types[at - 2..at], ["finish-step", "start-step"], "the step before is closed, not reset");
    assert_eq!(text_of(&reduce(&chunks).iter().collect::<Vec<_>>()), "Found.Done.");
}

#[test]
fn a_regenerated_answer_is_a_new_message_named_by_its_turn_and_the_dropped_one_sends_nothing() {
    for version in [AiSdkVersion::V6, AiSdkVersion::V7] {
        let mut encoder = AiSdkEncoder::new(version);
        let frames = encode_all(
            &mut encoder,
            vec![
                EventKind::TurnStarted { turn: 2, model: "m".into() },
                EventKind::AnswerDropped { turn: 1, messages: 3 },
                EventKind::TextDelta { text: "Again.".into() },
                call_usage(),
                ended(TurnEndReason::Final),
            ],
        );
        let chunks = all_data(&frames);
        assert_eq!(chunks[0], json!({"type": "start", "messageId": "s1-2"}));
        assert_eq!(
            types(&frames),
            ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"]
        );
    }
}

#[test]
fn the_version_header_names_the_ai_packages_major_version() {
    for (value, version) in [
        ("7", Some(AiSdkVersion::V7)),
        (" v7 ", Some(AiSdkVersion::V7)),
        ("7.0.173", Some(AiSdkVersion::V7)),
        ("8", Some(AiSdkVersion::V7)),
        ("6.0.326", Some(AiSdkVersion::V6)),
        ("5", Some(AiSdkVersion::V6)),
        ("seven", None),
        ("", None),
        ("-7", None),
    ] {
        assert_eq!(AiSdkVersion::from_header(value), version, "{value:?}");
    }
    assert_eq!(AiSdkVersion::default(), AiSdkVersion::V6, "a request that does not say gets what ai@6 reads");
}
