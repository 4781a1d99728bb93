use serde_json::json;

use super::*;
use crate::protocol::testing::{all_data, doc, event, subagent_event, types, usage};

fn encoder() -> CosmoEncoder {
    CosmoEncoder::new(ModelLimits::default())
}

fn encode_all(encoder: &mut CosmoEncoder, events: Vec<EventKind>) -> Vec<Frame> {
    events.into_iter().enumerate().flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind))).collect()
}

fn started(id: &str, name: &str) -> EventKind {
    EventKind::ToolCallStarted { tool_call_id: id.into(), name: name.into() }
}

fn args(id: &str, delta: &str) -> EventKind {
    EventKind::ToolCallArgs { tool_call_id: id.into(), delta: delta.into() }
}

fn result(id: &str, name: &str, status: &str, output: serde_json::Value) -> EventKind {
    EventKind::ToolResult {
        tool_call_id: id.into(),
        name: name.into(),
        status: serde_json::from_value(serde_json::json!(status)).expect("a tool status"),
        output,
    }
}

fn completed() -> EventKind {
    EventKind::MessageCompleted { content: None, reasoning: None }
}

fn ended(reason: TurnEndReason) -> EventKind {
    EventKind::TurnEnded { reason, iterations: 2, usage: usage(0, 0), title_pending: false }
}

#[test]
fn a_tool_round_reads_as_the_documented_sequence() {
    let mut encoder = encoder();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::TextDelta { text: "Let me look.".into() },
            started("c1", "lookup"),
            args("c1", r#"{"id":"#),
            args("c1", r#""42"}"#),
            started("c2", "wipe"),
            args("c2", "{}"),
            completed(),
            EventKind::Usage { usage: usage(100, 20), total: usage(100, 20) },
            EventKind::ToolCall { tool_call_id: "c1".into(), name: "lookup".into(), arguments: json!({"id": "42"}) },
            result("c2", "wipe", "denied", json!("Permission denied: no")),
            result("c1", "lookup", "success", json!({"found": true})),
            EventKind::TextDelta { text: "Found it.".into() },
            completed(),
            ended(TurnEndReason::Final),
        ],
    );
    assert_eq!(
        types(&frames),
        ["thinking", "text", "tool_call", "tool_call", "tool_result", "tool_result", "thinking", "text"]
    );
    let data = all_data(&frames);
    assert_eq!(
        data[2],
        json!({"sessionId": "s1", "type": "tool_call", "toolName": "lookup", "toolCallId": "c1", "toolArgs": {"id": "42"}})
    );
    assert_eq!(data[3]["toolArgs"], json!({}), "the denied call is shown too");
    assert_eq!(data[4]["toolResult"], "Permission denied: no");
    assert_eq!(data[5]["toolResult"], r#"{"found":true}"#);
    assert!(frames.iter().all(|f| f.event.is_none() && f.id.is_some()), "data-only frames with ids");
}

#[test]
fn the_end_of_the_stream_is_done_with_context_usage_against_the_models_window() {
    let limits = Limits { max_tokens: 1000, max_output_tokens: 100, prices: None };
    let mut encoder = CosmoEncoder::new([("m".to_string(), limits)].into_iter().collect());
    encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::Usage { usage: usage(200, 50), total: usage(200, 50) },
            ended(TurnEndReason::Final),
        ],
    );
    assert!(encoder.wants_finish());
    let done = all_data(&encoder.finish(&doc("m")));
    assert_eq!(
        done,
        [json!({"sessionId": "s1", "type": "done",
                "contextUsage": {"usedTokens": 250, "maxTokens": 1000, "percentage": 25.0}})]
    );
}

#[test]
fn a_pause_and_max_iterations_are_done_with_a_stop_reason_and_errors_are_not_done() {
    let mut paused = encoder();
    encode_all(&mut paused, vec![EventKind::Paused { pending_relays: vec![], pending_calls: vec![] }]);
    assert_eq!(all_data(&paused.finish(&doc("unknown")))[0]["stopReason"], "paused");

    let mut limited = encoder();
    encode_all(&mut limited, vec![ended(TurnEndReason::MaxIterations)]);
    let done = all_data(&limited.finish(&doc("unknown")));
    assert_eq!(done, [json!({"sessionId": "s1", "type": "done", "stopReason": "max_iterations"})]);

    let mut failed = encoder();
    let frames = encode_all(
        &mut failed,
        vec![
            EventKind::Error {
                code: crate::domain::FailureCode::UpstreamError,
                message: "boom".into(),
                retry_after_secs: None,
            },
            ended(TurnEndReason::Failed),
        ],
    );
    assert_eq!(all_data(&frames), [json!({"sessionId": "s1", "type": "error", "error": "boom"})]);
    assert!(!failed.wants_finish());

    let mut cancelled = encoder();
    let frames = encode_all(&mut cancelled, vec![ended(TurnEndReason::Cancelled)]);
    assert_eq!(types(&frames), ["error"]);
    assert!(!cancelled.wants_finish());
}

#[test]
fn a_result_for_a_call_this_stream_never_saw_is_announced_first() {
    // A stream resumed after a pause: the call was shown on the stream before.
    let mut encoder = encoder();
    let frames = encode_all(
        &mut encoder,
        vec![EventKind::Resumed { turn: 1 }, result("c7", "render_chart", "success", json!("done"))],
    );
    assert_eq!(types(&frames), ["tool_call", "tool_result", "thinking"]);
}

#[test]
fn previews_are_cut_at_200_characters_not_bytes() {
    let long = "é".repeat(300);
    assert_eq!(preview(&json!(long)).chars().count(), 200);
    assert_eq!(preview(&json!("short")), "short");
}

#[test]
fn subagent_events_and_a_restart_are_handled() {
    let mut encoder = encoder();
    assert!(encoder.encode(&subagent_event(1, EventKind::TextDelta { text: "inner".into() })).is_empty());
    let frames = encoder.encode(&event(2, EventKind::StepRestarted { step: 2, replica: "b".into() }));
    assert_eq!(all_data(&frames), [json!({"sessionId": "s1", "type": "thinking", "restartedStep": 2})]);
}

/// A Cosmo client that knows `restartedStep`: text segments split at
/// `thinking`, the segment before a restart dropped, all joined at `done`.
fn answer(events: &[Value]) -> String {
    let mut segments: Vec<String> = vec![String::new()];
    for e in events {
        match e["type"].as_str().unwrap() {
            "thinking" => {
                if e.get("restartedStep").is_some() {
                    segments.pop();
                }
                segments.push(String::new());
            }
            "text" => segments.last_mut().unwrap().push_str(e["text"].as_str().unwrap()),
            _ => {}
        }
    }
    segments.concat()
}

#[test]
fn a_restart_is_a_thinking_that_voids_the_text_since_the_last_one() {
    let mut encoder = encoder();
    let mut frames = encode_all(&mut encoder, crate::protocol::testing::restarted_turn(1));
    frames.extend(encoder.finish(&doc("m")));
    let events = all_data(&frames);
    assert_eq!(types(&frames), ["thinking", "text", "text", "thinking", "text", "text", "text", "done"]);
    assert_eq!(events[3], json!({"sessionId": "s1", "type": "thinking", "restartedStep": 1}));
    assert_eq!(answer(&events), crate::protocol::testing::RESTARTED_ANSWER);
}

#[test]
fn a_title_is_a_title_updated_event_with_its_seq_and_wanted_after_the_turns_end() {
    let mut encoder = encoder();
    assert!(encoder.wants_title());
    let ended =
        EventKind::TurnEnded { reason: TurnEndReason::Final, iterations: 1, usage: usage(0, 0), title_pending: true };
    assert!(encoder.encode(&event(5, ended)).is_empty(), "done comes with the stream's finish, first");
    let frames = encoder.encode(&event(6, EventKind::TitleUpdated { title: "Order 42".into() }));
    assert_eq!(all_data(&frames), [json!({"sessionId": "s1", "type": "title-updated", "title": "Order 42"})]);
    assert_eq!(frames[0].id.as_deref(), Some("6"));
}
