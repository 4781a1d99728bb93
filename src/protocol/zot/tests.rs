use serde_json::json;

use super::*;
use crate::protocol::testing::{all_data, event, subagent_event, types, usage};

fn encode_all(encoder: &mut ZotEncoder, events: Vec<EventKind>) -> Vec<Frame> {
    events.into_iter().enumerate().flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind))).collect()
}

fn completed(content: Option<&str>) -> EventKind {
    EventKind::MessageCompleted { content: content.map(str::to_string), reasoning: None }
}

fn ended(reason: TurnEndReason) -> EventKind {
    EventKind::TurnEnded { reason, iterations: 2, usage: usage(0, 0), title_pending: false }
}

/// The real zot transcript of seed 004 (one `bash` call, then an answer),
/// as canonical events: the encoder gives back zot's own sequence.
#[test]
fn a_tool_round_gives_the_seed_transcripts_sequence() {
    let mut encoder = ZotEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::ToolCallStarted { tool_call_id: "call_00".into(), name: "bash".into() },
            EventKind::ToolCallArgs { tool_call_id: "call_00".into(), delta: "{".into() },
            EventKind::ToolCallArgs { tool_call_id: "call_00".into(), delta: r#""command": "uname -a""#.into() },
            EventKind::ToolCallArgs { tool_call_id: "call_00".into(), delta: "}".into() },
            completed(None),
            EventKind::Usage { usage: usage(896, 20), total: usage(896, 20) },
            EventKind::ToolCall {
                tool_call_id: "call_00".into(),
                name: "bash".into(),
                arguments: json!({"command": "uname -a"}),
            },
            // The command's live output (zot's real progress chunk).
            EventKind::ToolProgress {
                tool_call_id: "call_00".into(),
                name: "bash".into(),
                stream: crate::domain::OutputStream::Stdout,
                text: "FreeBSD 15.0".into(),
            },
            EventKind::ToolResult {
                tool_call_id: "call_00".into(),
                name: "bash".into(),
                status: crate::domain::ToolStatus::Success,
                output: json!("FreeBSD 15.0"),
            },
            EventKind::TextDelta { text: "This".into() },
            EventKind::TextDelta { text: " system".into() },
            completed(Some("This system")),
            EventKind::Usage { usage: usage(950, 5), total: usage(1846, 25) },
            ended(TurnEndReason::Final),
        ],
    );
    assert_eq!(
        types(&frames),
        [
            "turn_start",
            "assistant_start",
            "tool_use_start",
            "tool_use_args",
            "tool_use_args",
            "tool_use_args",
            "tool_use_end",
            "usage",
            "assistant_message",
            "tool_call",
            "turn_end",
            "tool_progress",
            "tool_result",
            "turn_start",
            "assistant_start",
            "text_delta",
            "text_delta",
            "usage",
            "assistant_message",
            "turn_end",
            "done",
        ]
    );
    let data = all_data(&frames);
    assert_eq!(data[0], json!({"type": "turn_start", "step": 1, "seq": 2}));
    assert_eq!(
        data[8]["content"],
        json!([{"type": "tool_call", "id": "call_00", "name": "bash", "args": {"command": "uname -a"}}])
    );
    assert_eq!(data[8]["time"], "1970-01-01T00:00:00.001Z");
    assert_eq!(
        data[7],
        json!({"type": "usage", "input": 896, "output": 20, "reasoning": null, "cache_read": 0, "cache_write": 0,
        "cost_usd": 0.0, "cumulative": {"input": 896, "output": 20, "reasoning": null, "cache_read": 0,
        "cache_write": 0, "cost_usd": 0.0}, "seq": 7})
    );
    // As zot: the call announced before the step ends, its output, its result.
    assert_eq!(
        data[9],
        json!({"type": "tool_call", "id": "call_00", "name": "bash",
        "args": {"command": "uname -a"}, "seq": 7})
    );
    assert_eq!(data[10], json!({"type": "turn_end", "stop": "tool_use", "seq": 7}));
    assert_eq!(data[11], json!({"type": "tool_progress", "id": "call_00", "text": "FreeBSD 15.0", "seq": 9}));
    assert_eq!(
        data[12],
        json!({"type": "tool_result", "id": "call_00", "is_error": false,
        "content": [{"type": "text", "text": "FreeBSD 15.0"}], "seq": 10})
    );
    assert_eq!(data[13]["step"], 2);
    assert_eq!(data[18]["content"], json!([{"type": "text", "text": "This system"}]));
    assert_eq!(data[19], json!({"type": "turn_end", "stop": "end", "seq": 15}));
    assert_eq!(data[20], json!({"type": "done", "seq": 15}));
    assert!(frames.iter().all(|f| f.event.is_none()));
    assert_eq!(encoder.transport(), Transport::Ndjson);
}

#[test]
fn an_upstream_error_ends_the_step_then_reports_then_is_done() {
    let mut encoder = ZotEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TextDelta { text: "Hel".into() },
            EventKind::Error {
                code: crate::domain::FailureCode::UpstreamDisconnected,
                message: "lost".into(),
                retry_after_secs: None,
            },
            ended(TurnEndReason::Failed),
        ],
    );
    let data = all_data(&frames);
    assert_eq!(types(&frames), ["turn_start", "assistant_start", "text_delta", "turn_end", "error", "done"]);
    assert_eq!(data[3], json!({"type": "turn_end", "stop": "error", "error": "lost", "seq": 2}));
    assert_eq!(data[4], json!({"type": "error", "message": "lost", "seq": 2}));
}

#[test]
fn a_denied_call_is_an_error_result_and_a_pause_owes_its_turn_end_then_is_done() {
    let mut encoder = ZotEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "wipe".into() },
            EventKind::ToolCallStarted { tool_call_id: "c2".into(), name: "render_chart".into() },
            EventKind::Usage { usage: usage(10, 2), total: usage(10, 2) },
            EventKind::ToolResult {
                tool_call_id: "c1".into(),
                name: "wipe".into(),
                status: crate::domain::ToolStatus::Denied,
                output: json!("Permission denied"),
            },
            EventKind::Paused { pending_relays: vec![], pending_calls: vec![] },
        ],
    );
    assert_eq!(
        types(&frames),
        [
            "turn_start",
            "assistant_start",
            "tool_use_start",
            "tool_use_start",
            "tool_use_end",
            "tool_use_end",
            "usage",
            "assistant_message",
            "tool_call",
            "tool_call",
            "turn_end",
            "tool_result",
            "done"
        ]
    );
    assert_eq!(all_data(&frames)[11]["is_error"], true, "a denied call never ran: no progress");
    assert_eq!(all_data(&frames)[12], json!({"type": "done", "paused": true, "seq": 5}));
}

#[test]
fn a_restarted_step_is_aborted_and_starts_again_with_its_number() {
    let mut encoder = ZotEncoder::default();
    let mut frames = encode_all(&mut encoder, vec![EventKind::TextDelta { text: "par".into() }]);
    frames.extend(encoder.encode(&event(5, EventKind::StepRestarted { step: 1, replica: "b".into() })));
    frames.extend(encoder.encode(&event(6, EventKind::TextDelta { text: "full".into() })));
    let data = all_data(&frames);
    assert_eq!(
        types(&frames),
        [
            "turn_start",
            "assistant_start",
            "text_delta",
            "assistant_message",
            "turn_end",
            "turn_start",
            "assistant_start",
            "text_delta"
        ]
    );
    assert_eq!(data[4]["stop"], "aborted");
    assert_eq!(data[5]["step"], 1, "the same step again");
}

#[test]
fn a_cancel_is_an_aborted_turn_end_and_subagents_are_not_shown() {
    let mut encoder = ZotEncoder::default();
    assert!(encoder.encode(&subagent_event(1, EventKind::TextDelta { text: "inner".into() })).is_empty());
    let frames =
        encode_all(&mut encoder, vec![EventKind::TextDelta { text: "a".into() }, ended(TurnEndReason::Cancelled)]);
    assert_eq!(all_data(&frames)[3], json!({"type": "turn_end", "stop": "aborted", "seq": 2}));
    assert_eq!(types(&frames).last().unwrap(), "done");
}

/// A Glasspane-like consumer: `assistant_start` opens a message, `text_delta`
/// streams into it, `assistant_message` ends it with its content's text.
fn messages(lines: &[Value]) -> Vec<String> {
    let mut messages: Vec<String> = Vec::new();
    for line in lines {
        match line["type"].as_str().unwrap() {
            "assistant_start" => messages.push(String::new()),
            "text_delta" => messages.last_mut().unwrap().push_str(line["delta"].as_str().unwrap()),
            "assistant_message" => {
                let blocks = line["content"].as_array().unwrap();
                *messages.last_mut().unwrap() =
                    blocks.iter().filter(|b| b["type"] == "text").map(|b| b["text"].as_str().unwrap()).collect();
            }
            _ => {}
        }
    }
    messages
}

#[test]
fn a_restarted_step_ends_its_message_empty_and_the_final_message_is_the_regenerated_one() {
    let mut encoder = ZotEncoder::default();
    let frames = encode_all(&mut encoder, crate::protocol::testing::restarted_turn(1));
    let lines = all_data(&frames);
    let at = lines.iter().position(|l| l["type"] == "turn_end").unwrap();
    assert_eq!(
        lines[at - 1..=at + 1],
        [
            json!({"type": "assistant_message", "content": [], "time": "1970-01-01T00:00:00.001Z", "seq": 4}),
            json!({"type": "turn_end", "stop": "aborted", "restarted": true, "seq": 4}),
            json!({"type": "turn_start", "step": 1, "seq": 5}),
        ]
    );
    let finals: Vec<&Value> = lines.iter().filter(|l| l["type"] == "assistant_message").collect();
    assert_eq!(finals.last().unwrap()["content"], json!([{"type": "text", "text": "w1 w2 w3"}]));
    assert_eq!(messages(&lines), ["", crate::protocol::testing::RESTARTED_ANSWER]);
}

#[test]
fn a_turn_that_fails_before_any_output_still_has_its_step() {
    let mut encoder = ZotEncoder::default();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::Error {
                code: crate::domain::FailureCode::UpstreamError,
                message: "deepseek: http 401".into(),
                retry_after_secs: None,
            },
            ended(TurnEndReason::Failed),
        ],
    );
    // Seed 004's first transcript, after its `user_message`.
    assert_eq!(
        all_data(&frames),
        [
            json!({"type": "turn_start", "step": 1, "seq": 2}),
            json!({"type": "turn_end", "stop": "error", "error": "deepseek: http 401", "seq": 2}),
            json!({"type": "error", "message": "deepseek: http 401", "seq": 2}),
            json!({"type": "done", "seq": 3}),
        ]
    );
}

#[test]
fn a_compaction_ends_with_its_summary_and_costs_come_from_the_models_prices() {
    let prices = crate::config::Prices { input_per_million: 1.0, output_per_million: 2.0 };
    let models: ModelLimits = [(
        "priced".to_string(),
        crate::protocol::Limits { max_tokens: 1000, max_output_tokens: 100, prices: Some(prices) },
    )]
    .into_iter()
    .collect();
    let mut encoder = ZotEncoder::for_models(models);
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 2, model: "priced".into() },
            EventKind::CompactionStarted { tokens: 900, messages: 12 },
            EventKind::CompactionDone {
                tokens_before: 900,
                tokens_after: 100,
                summary: "<analysis>S</analysis>".into(),
                messages_before: 12,
                messages: Vec::new(),
            },
            completed(Some("ok")),
            EventKind::Usage { usage: usage(1_000_000, 500_000), total: usage(2_000_000, 500_000) },
            ended(TurnEndReason::Final),
        ],
    );
    let data = all_data(&frames);
    assert_eq!(data[0], json!({"type": "compact_done", "summary": "<analysis>S</analysis>", "seq": 3}));
    let usage = data.iter().find(|l| l["type"] == "usage").unwrap();
    assert_eq!(usage["cost_usd"], 2.0);
    assert_eq!(usage["cumulative"]["cost_usd"], 3.0);
    assert!(encoder.wants_turn_context(), "a rejoin needs the turn's steps and open calls");
}

#[test]
fn steps_are_counted_per_turn() {
    let mut encoder = ZotEncoder::default();
    let turn = |n| {
        vec![
            EventKind::TurnStarted { turn: n, model: "m".into() },
            EventKind::TextDelta { text: "a".into() },
            completed(Some("a")),
            EventKind::Usage { usage: usage(1, 1), total: usage(1, 1) },
            ended(TurnEndReason::Final),
        ]
    };
    let frames = encode_all(&mut encoder, [turn(1), turn(2)].concat());
    let steps: Vec<u64> = all_data(&frames).iter().filter_map(|l| l.get("step").and_then(Value::as_u64)).collect();
    assert_eq!(steps, [1, 1]);
}
