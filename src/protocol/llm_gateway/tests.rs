use serde_json::{Value, json};

use super::*;
use crate::domain::Event;
use crate::protocol::testing::{RESTARTED_ANSWER, restarted_turn, usage};

fn event(seq: u64, kind: EventKind, agent: AgentRef) -> LogEvent {
    LogEvent { seq, session_id: "s1".into(), event: Event { kind, agent, ts: 1 } }
}

fn main_agent() -> AgentRef {
    AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
}

fn sub_agent() -> AgentRef {
    AgentRef { agent_id: "agent_1".into(), parent_id: Some("call_1".into()), depth: 1 }
}

fn text(text: &str) -> EventKind {
    EventKind::TextDelta { text: text.into() }
}

fn data(frame: &Frame) -> Value {
    serde_json::from_str(&frame.data).unwrap()
}

#[test]
fn a_chat_stream_opens_with_connected_then_harness_start_with_the_run() {
    let mut encoder = LlmGatewayEncoder::for_chat("s1", 1, 7);
    let frames = encoder.encode(&event(1, EventKind::TurnStarted { turn: 1, model: "m".into() }, main_agent()));
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].event.as_deref(), Some("connected"));
    assert_eq!(frames[0].id, None);
    assert_eq!(data(&frames[0]), json!({"type": "connected", "sessionId": "s1"}));
    assert_eq!(frames[1].id.as_deref(), Some("1"));
    assert_eq!(
        data(&frames[1]),
        json!({"type": "harness_start", "runId": "s1:1", "agentId": "main", "depth": 0, "maxIterations": 7})
    );
}

#[test]
fn tool_results_are_parsed_json_a_denial_or_an_error() {
    let parsed = result_output(ToolStatus::Success, &json!(r#"{"a":1}"#));
    assert_eq!(parsed, json!({"a": 1}));
    assert_eq!(result_output(ToolStatus::Success, &json!("42")), json!("42"));
    assert_eq!(result_output(ToolStatus::Success, &json!("plain")), json!("plain"));
    let denied = result_output(ToolStatus::Denied, &json!("Permission denied: not today"));
    assert_eq!(denied, json!({"status": "denied", "reason": "not today"}));
    assert_eq!(result_output(ToolStatus::Error, &json!("HTTP 500")), json!({"error": "HTTP 500"}));
}

#[test]
fn a_model_calls_text_and_reasoning_are_one_block_each_until_its_usage() {
    let mut encoder = LlmGatewayEncoder::default();
    let reasoning = |t: &str| EventKind::ReasoningDelta { text: t.into() };
    let usage = EventKind::Usage { usage: usage(1, 1), total: usage(1, 1) };
    let kinds = [
        EventKind::TurnStarted { turn: 1, model: "m".into() },
        reasoning("hm"),
        text("Hel"),
        reasoning("m."),
        text("lo"),
        EventKind::MessageCompleted { content: Some("Hello".into()), reasoning: Some("hmm.".into()) },
        usage.clone(),
        text("Again"),
        usage,
    ];
    let ids: Vec<(String, Value)> = (kinds.into_iter().enumerate())
        .flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind, main_agent())))
        .map(|frame| data(&frame))
        .filter(|d| d["type"] == "text" || d["type"] == "reasoning")
        .map(|d| (d["type"].as_str().unwrap().to_string(), d["id"].clone()))
        .collect();
    let expected =
        [("reasoning", "evt_2"), ("text", "evt_3"), ("reasoning", "evt_2"), ("text", "evt_3"), ("text", "evt_8")];
    let expected: Vec<(String, Value)> = expected.iter().map(|(t, id)| (t.to_string(), json!(id))).collect();
    assert_eq!(ids, expected);
}

#[test]
fn a_subagent_has_a_run_of_its_own_started_once_and_ended_by_its_parents_result() {
    let mut encoder = LlmGatewayEncoder::default();
    encoder.encode(&event(1, EventKind::TurnStarted { turn: 3, model: "m".into() }, main_agent()));
    let frames = encoder.encode(&event(5, text("hi"), sub_agent()));
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].id, None);
    assert_eq!(
        data(&frames[0]),
        json!({"type": "harness_start", "runId": "s1:3:agent_1", "agentId": "agent_1", "parentId": "call_1",
            "depth": 1})
    );
    assert_eq!(
        data(&frames[1]),
        json!({"type": "text", "runId": "s1:3:agent_1", "id": "evt_5", "agentId": "agent_1",
            "parentId": "call_1", "content": "hi"})
    );
    let again = encoder.encode(&event(6, text("!"), sub_agent()));
    assert_eq!((again.len(), data(&again[0])["id"].clone()), (1, json!("evt_5")));

    let result = EventKind::ToolResult {
        tool_call_id: "call_1".into(),
        name: "agent".into(),
        status: ToolStatus::Success,
        output: json!("hi!"),
    };
    let frames = encoder.encode(&event(8, result, main_agent()));
    assert_eq!(frames.len(), 2);
    assert_eq!((frames[0].id.as_deref(), frames[1].id.as_deref()), (None, Some("8")));
    assert_eq!(
        data(&frames[0]),
        json!({"type": "harness_end", "runId": "s1:3:agent_1", "agentId": "agent_1", "parentId": "call_1",
            "reason": "final"})
    );
    assert_eq!(data(&frames[1])["runId"], "s1:3");
}

#[test]
fn a_restart_names_the_blocks_it_voids_and_the_regenerated_text_has_new_ids() {
    let mut encoder = LlmGatewayEncoder::default();
    let frames: Vec<Frame> = (restarted_turn(1).into_iter().enumerate())
        .flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind, main_agent())))
        .collect();
    let restart = frames.iter().find(|f| f.event.as_deref() == Some("step_restarted")).unwrap();
    assert_eq!(restart.id.as_deref(), Some("4"));
    assert_eq!(
        data(restart),
        json!({"type": "step_restarted", "runId": "s1:1", "agentId": "main", "step": 1, "discard": ["evt_2"]})
    );
    // What a client that honours `discard` ends with.
    let mut text: Vec<(Value, String)> = Vec::new();
    for frame in frames.iter().map(data) {
        match frame["type"].as_str().unwrap() {
            "text" => text.push((frame["id"].clone(), frame["content"].as_str().unwrap().to_string())),
            "step_restarted" => {
                let discard = frame["discard"].as_array().unwrap();
                text.retain(|(id, _)| !discard.contains(id));
            }
            _ => {}
        }
    }
    assert!(text.iter().all(|(id, _)| *id == "evt_5"), "{text:?}");
    let answer: String = text.into_iter().map(|(_, content)| content).collect();
    assert_eq!(answer, RESTARTED_ANSWER);
}

#[test]
fn a_restart_voids_only_the_cut_calls_blocks() {
    let mut encoder = LlmGatewayEncoder::default();
    let used = usage(1, 1);
    encoder.encode(&event(1, text("done"), main_agent()));
    encoder.encode(&event(2, EventKind::Usage { usage: used, total: used }, main_agent()));
    encoder.encode(&event(3, text("inner"), sub_agent()));
    encoder.encode(&event(4, EventKind::ReasoningDelta { text: "hm".into() }, main_agent()));
    encoder.encode(&event(5, text("so"), main_agent()));
    let frames = encoder.encode(&event(6, EventKind::StepRestarted { step: 2, replica: "b".into() }, main_agent()));
    assert_eq!(data(&frames[0])["discard"], json!(["evt_4", "evt_5"]));
}

#[test]
fn a_stream_given_the_turns_context_names_runs_and_blocks_as_the_stream_it_rejoins() {
    let agent_call = EventKind::ToolCall { tool_call_id: "call_1".into(), name: "agent".into(), arguments: json!({}) };
    let turn: Vec<(EventKind, AgentRef)> = vec![
        (EventKind::TurnStarted { turn: 2, model: "m".into() }, main_agent()),
        (agent_call, main_agent()),
        (text("sub "), sub_agent()),
        (text("more"), sub_agent()),
        (text("Ans"), main_agent()),
        (text("wer"), main_agent()),
        (EventKind::StepRestarted { step: 2, replica: "b".into() }, main_agent()),
    ];
    let events: Vec<LogEvent> =
        (turn.into_iter().enumerate()).map(|(i, (kind, agent))| event(i as u64 + 1, kind, agent)).collect();
    let mut whole = LlmGatewayEncoder::default();
    let all: Vec<Frame> = events.iter().flat_map(|e| whole.encode(e)).collect();
    for cursor in [3, 5] {
        let mut rejoined = LlmGatewayEncoder::default();
        assert!(rejoined.wants_turn_context());
        let (before, after) = events.split_at(cursor);
        before.iter().for_each(|e| rejoined.context(e));
        let frames: Vec<Frame> = after.iter().flat_map(|e| rejoined.encode(e)).collect();
        let sent_after: Vec<&Frame> =
            all.iter().skip_while(|f| f.id.as_deref() != Some(&cursor.to_string())).skip(1).collect();
        assert_eq!(frames.iter().collect::<Vec<_>>(), sent_after, "rejoined after {cursor}");
    }
    let discard = all.iter().find(|f| f.event.as_deref() == Some("step_restarted")).unwrap();
    assert_eq!(data(discard)["discard"], json!(["evt_5"]));
}

#[test]
fn events_without_an_equivalent_are_skipped_and_cache_usage_is_named() {
    let mut encoder = LlmGatewayEncoder::default();
    let skipped = EventKind::ToolCallArgs { tool_call_id: "c".into(), delta: "{".into() };
    assert!(encoder.encode(&event(2, skipped, main_agent())).is_empty());
    let usage = Usage { input_tokens: 5, output_tokens: 2, cache_read_tokens: 3, cache_write_tokens: 0 };
    let ended = EventKind::TurnEnded { reason: TurnEndReason::Failed, iterations: 1, usage, title_pending: false };
    let frame = &encoder.encode(&event(3, ended, main_agent()))[0];
    assert_eq!(
        data(frame),
        json!({"type": "harness_end", "runId": "s1", "agentId": "main", "reason": "error", "iterations": 1,
            "totalUsage": {"inputTokens": 5, "outputTokens": 2, "cacheReadTokens": 3}})
    );
}

#[test]
fn a_delta_is_written_as_the_general_path_writes_it() {
    let reasoning = |t: &str| EventKind::ReasoningDelta { text: t.into() };
    let events = [
        event(2, EventKind::TurnStarted { turn: 3, model: "m".into() }, main_agent()),
        event(3, text("He said \"hi\"\n"), main_agent()),
        event(4, text("é🙂"), main_agent()),
        event(5, reasoning("think"), main_agent()),
        event(6, text("sub"), sub_agent()),
        event(7, reasoning("sub thinks"), sub_agent()),
    ];
    let (mut fast, mut general) = (LlmGatewayEncoder::for_chat("s1", 3, 7), LlmGatewayEncoder::for_chat("s1", 3, 7));
    for event in &events {
        let frames = fast.encode(event);
        let Translated { before, shown } = general.translate(event);
        let mut expected: Vec<(String, String)> = before
            .into_iter()
            .map(|(name, agent, fields)| (name.to_string(), general.data(name, &agent, fields)))
            .collect();
        if let Some((name, fields)) = shown {
            expected.push((name.to_string(), general.data(name, &event.event.agent, fields)));
        }
        let shown: Vec<(String, String)> = frames
            .iter()
            .filter(|f| f.event.as_deref() != Some("connected"))
            .map(|f| (f.event.clone().unwrap().into_owned(), f.data.clone()))
            .collect();
        assert_eq!(shown, expected, "seq {}", event.seq);
    }
}
