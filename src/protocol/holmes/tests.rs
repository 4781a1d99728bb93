use super::*;
use crate::domain::{AgentRef, Event};

fn event(seq: u64, kind: EventKind) -> LogEvent {
    let agent = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
    LogEvent { seq, session_id: "s1".into(), event: Event { kind, agent, ts: 1 } }
}

fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().filter_map(|f| f.event.as_deref()).collect()
}

#[test]
fn a_step_is_sent_in_holmes_order_with_the_id_of_the_event_that_releases_it() {
    let mut encoder = HolmesEncoder::new(Some(Limits { max_tokens: 1000, max_output_tokens: 100, prices: None }));
    let started = EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "wipe".into() };
    assert!(encoder.encode(&event(2, started)).is_empty());
    encoder.encode(&event(3, EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"all":true}"#.into() }));
    let message = EventKind::MessageCompleted { content: Some("Wiping.".into()), reasoning: None };
    assert!(encoder.encode(&event(4, message)).is_empty());
    let usage = Usage { input_tokens: 10, output_tokens: 2, ..Usage::default() };
    let frames = encoder.encode(&event(5, EventKind::Usage { usage, total: usage }));
    assert_eq!(names(&frames), ["ai_message", "start_tool_calling"]);
    assert!(frames.iter().all(|f| f.id.as_deref() == Some("5")));
    let message: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert_eq!(message["metadata"]["usage"]["total_tokens"], 12);
    assert_eq!(message["metadata"]["max_tokens"], 1000);

    let denied = EventKind::ToolResult {
        tool_call_id: "c1".into(),
        name: "wipe".into(),
        status: crate::domain::ToolStatus::Denied,
        output: json!("Permission denied: no"),
    };
    let frames = encoder.encode(&event(6, denied));
    let result: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert_eq!(result["result"]["status"], "error");
    assert_eq!(result["result"]["error"], "Permission denied: no");
    assert_eq!(result["result"]["params"], json!({"all": true}));
    let end = EventKind::TurnEnded { reason: TurnEndReason::Final, iterations: 1, usage };
    assert_eq!(names(&encoder.encode(&event(7, end))), ["token_count"]);
}

#[test]
fn a_rate_limit_is_error_code_5204() {
    let mut encoder = HolmesEncoder::default();
    let error = EventKind::Error {
        code: crate::domain::FailureCode::RateLimited,
        message: "slow down".into(),
        retry_after_secs: Some(7),
    };
    let data: Value = serde_json::from_str(&encoder.encode(&event(1, error))[0].data).unwrap();
    assert_eq!(
        data,
        json!({"description": "slow down", "error_code": 5204, "msg": "slow down",
        "success": false, "code": "rate_limited", "retry_after": 7})
    );
}

#[test]
fn a_restarted_step_sends_one_ai_message_with_the_regenerated_text_only() {
    use crate::protocol::testing::{RESTARTED_ANSWER, doc, restarted_turn};
    let mut encoder = HolmesEncoder::default();
    let mut frames: Vec<Frame> = (restarted_turn(1).into_iter().enumerate())
        .flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind)))
        .collect();
    frames.extend(encoder.finish(&doc("m")));
    assert_eq!(names(&frames), ["ai_message", "token_count", "ai_answer_end"]);
    let message: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert_eq!(message["content"], RESTARTED_ANSWER);
    let end: Value = serde_json::from_str(&frames[2].data).unwrap();
    assert_eq!(end["analysis"], RESTARTED_ANSWER);
}

#[test]
fn calls_a_cut_step_started_are_never_announced() {
    let mut encoder = HolmesEncoder::default();
    let started = EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "wipe".into() };
    encoder.encode(&event(1, started.clone()));
    encoder.encode(&event(2, EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"al"#.into() }));
    assert!(encoder.encode(&event(3, EventKind::StepRestarted { step: 1, replica: "b".into() })).is_empty());
    encoder.encode(&event(4, started));
    encoder.encode(&event(5, EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: r#"{"all":true}"#.into() }));
    let usage = Usage { input_tokens: 10, output_tokens: 2, ..Usage::default() };
    let frames = encoder.encode(&event(6, EventKind::Usage { usage, total: usage }));
    assert_eq!(names(&frames), ["start_tool_calling"], "the regenerated call, once");
    let denied = EventKind::ToolResult {
        tool_call_id: "c1".into(),
        name: "wipe".into(),
        status: crate::domain::ToolStatus::Denied,
        output: json!("Permission denied: no"),
    };
    let result: Value = serde_json::from_str(&encoder.encode(&event(7, denied))[0].data).unwrap();
    assert_eq!(result["result"]["params"], json!({"all": true}), "not the cut call's fragment first");
}
