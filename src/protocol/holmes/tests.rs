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
    assert_eq!(result["result"]["error"], "no", "Holmes clients get the reason, as HolmesGPT sends it");
    assert_eq!(result["result"]["params"], json!({"all": true}));
    let end = EventKind::TurnEnded { reason: TurnEndReason::Final, iterations: 1, usage, title_pending: false };
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

#[test]
fn a_compaction_carries_the_compacted_messages_and_their_counts() {
    use crate::domain::{ChatMessage, Role};
    let mut encoder = HolmesEncoder::default();
    let messages = vec![ChatMessage::text(Role::System, "sys"), ChatMessage::text(Role::User, "summary")];
    let done = EventKind::CompactionDone {
        tokens_before: 1000,
        tokens_after: 400,
        summary: "<analysis>S</analysis>".into(),
        messages_before: 42,
        messages,
    };
    let frames = encoder.encode(&event(3, done));
    let data: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert_eq!(frames[0].event.as_deref(), Some("conversation_history_compacted"));
    assert_eq!(data["messages"], json!([{"role": "system", "content": "sys"}, {"role": "user", "content": "summary"}]));
    assert_eq!(data["metadata"]["num_messages_before"], 42);
    assert_eq!(data["metadata"]["num_messages_after"], 2);
    assert_eq!(data["metadata"]["compression_ratio_pct"], 60.0);
}

#[test]
fn metadata_has_costs_when_the_model_has_prices() {
    let prices = crate::config::Prices { input_per_million: 1.0, output_per_million: 4.0 };
    let mut priced =
        HolmesEncoder::new(Some(Limits { max_tokens: 1000, max_output_tokens: 100, prices: Some(prices) }));
    let usage = Usage { input_tokens: 1000, output_tokens: 500, cache_read_tokens: 200, ..Usage::default() };
    priced.encode(&event(1, EventKind::MessageCompleted { content: Some("hi".into()), reasoning: None }));
    let frames = priced.encode(&event(2, EventKind::Usage { usage, total: usage }));
    let data: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert_eq!(
        data["metadata"]["costs"],
        json!({"total_cost": 0.003, "total_tokens": 1500, "prompt_tokens": 1000, "completion_tokens": 500,
            "cached_tokens": 200})
    );
    let mut unpriced = HolmesEncoder::new(Some(Limits { max_tokens: 1000, max_output_tokens: 100, prices: None }));
    unpriced.encode(&event(1, EventKind::MessageCompleted { content: Some("hi".into()), reasoning: None }));
    let frames = unpriced.encode(&event(2, EventKind::Usage { usage, total: usage }));
    let data: Value = serde_json::from_str(&frames[0].data).unwrap();
    assert!(data["metadata"].get("costs").is_none());
}

#[test]
fn follow_up_actions_come_with_a_conversations_first_answer_only() {
    use crate::{
        domain::{ChatMessage, Role},
        protocol::testing::doc_at,
    };
    let answered = |resumed: bool, history: Vec<ChatMessage>| {
        let mut encoder = HolmesEncoder::default();
        if resumed {
            encoder.encode(&event(1, EventKind::Resumed { turn: 1 }));
        }
        let end = EventKind::TurnEnded {
            reason: TurnEndReason::Final,
            iterations: 1,
            usage: Usage::default(),
            title_pending: false,
        };
        encoder.encode(&event(1, end));
        let frames = encoder.finish(&doc_at("m", 1, history));
        let data: Value = serde_json::from_str(&frames[0].data).unwrap();
        data["follow_up_actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let first = vec![
        ChatMessage::text(Role::System, "s"),
        ChatMessage::text(Role::User, "q"),
        ChatMessage::text(Role::Assistant, "a"),
    ];
    assert_eq!(answered(false, first.clone()), ["logs", "graphs", "articles"]);
    assert!(answered(true, first.clone()).is_empty(), "not after a resume");
    let mut second = first;
    second.extend([ChatMessage::text(Role::User, "q2"), ChatMessage::text(Role::Assistant, "a2")]);
    assert!(answered(false, second).is_empty(), "not on a later question");
}
