use serde_json::json;

use super::*;
use crate::protocol::testing::{
    RESTARTED_ANSWER, all_data, doc_at, event, restarted_turn, subagent_event, types, usage,
};

pub(super) fn encode_all(encoder: &mut AgUiEncoder, events: Vec<EventKind>) -> Vec<Value> {
    let frames: Vec<Frame> =
        events.into_iter().enumerate().flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind))).collect();
    all_data(&frames)
}

pub(super) fn names(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

pub(super) fn call_usage() -> EventKind {
    EventKind::Usage { usage: usage(10, 2), total: usage(10, 2) }
}

pub(super) fn ended(reason: TurnEndReason) -> EventKind {
    EventKind::TurnEnded { reason, iterations: 1, usage: usage(10, 2), title_pending: false }
}

/// `verifyEvents`' rules: `RUN_STARTED` first, nothing after the run ends,
/// content only inside its message or call, a step finished only once
/// started (and never started twice at once), nothing open at
/// `RUN_FINISHED`.
pub(super) fn assert_verifies(events: &[Value]) {
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let (mut messages, mut calls, mut steps, mut over) = (HashSet::new(), HashSet::new(), HashSet::new(), false);
    for e in events {
        assert!(!over, "{e} after the run ended");
        let message = e["messageId"].as_str().unwrap_or_default().to_string();
        let call = e["toolCallId"].as_str().unwrap_or_default().to_string();
        let step = e["stepName"].as_str().unwrap_or_default().to_string();
        assert!(e["timestamp"].is_u64(), "{e}");
        match e["type"].as_str().unwrap() {
            "TEXT_MESSAGE_START" | "REASONING_MESSAGE_START" => assert!(messages.insert(message), "{e} twice"),
            "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => assert!(messages.contains(&message), "{e}"),
            "TEXT_MESSAGE_END" | "REASONING_MESSAGE_END" => assert!(messages.remove(&message), "{e}"),
            "TOOL_CALL_START" => assert!(calls.insert(call), "{e} twice"),
            "TOOL_CALL_ARGS" => assert!(calls.contains(&call), "{e}"),
            "TOOL_CALL_END" => assert!(calls.remove(&call), "{e}"),
            "STEP_STARTED" => assert!(steps.insert(step), "{e} while open"),
            "STEP_FINISHED" => assert!(steps.remove(&step), "{e} not started"),
            "RUN_FINISHED" => {
                assert!(
                    messages.is_empty() && calls.is_empty() && steps.is_empty(),
                    "open at the end: {messages:?} {calls:?} {steps:?}"
                );
                over = true;
            }
            "RUN_ERROR" => over = true,
            _ => {}
        }
    }
}

#[test]
fn text_and_a_tool_call_share_one_assistant_message_and_everything_closes() {
    let mut encoder = AgUiEncoder::for_run("t1".into(), "r1".into(), HashSet::new(), HashSet::new());
    let events = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "fast".into() },
            EventKind::TextDelta { text: "Looking.".into() },
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "lookup".into() },
            EventKind::ToolCallArgs { tool_call_id: "c1".into(), delta: "{}".into() },
            call_usage(),
            EventKind::ToolCall { tool_call_id: "c1".into(), name: "lookup".into(), arguments: json!({}) },
            EventKind::ToolResult {
                tool_call_id: "c1".into(),
                name: "lookup".into(),
                status: crate::domain::ToolStatus::Success,
                output: json!("found"),
            },
            EventKind::TextDelta { text: "Found.".into() },
            call_usage(),
            ended(TurnEndReason::Final),
        ],
    );
    assert_eq!(
        names(&events),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "STEP_FINISHED",
            "STEP_STARTED",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[0]["threadId"], "t1");
    assert_eq!(events[4]["parentMessageId"], events[2]["messageId"]);
    let steps: Vec<(&str, &str)> = (events.iter())
        .filter(|e| e["stepName"].is_string())
        .map(|e| (e["type"].as_str().unwrap(), e["stepName"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("STEP_STARTED", "model"),
            ("STEP_FINISHED", "model"),
            ("STEP_STARTED", "lookup"),
            ("STEP_FINISHED", "lookup"),
            ("STEP_STARTED", "model"),
            ("STEP_FINISHED", "model")
        ]
    );
    assert_eq!(
        events[10],
        json!({"type": "TOOL_CALL_RESULT", "messageId": "result-c1", "toolCallId": "c1", "content": "found",
               "role": "tool", "timestamp": 1})
    );
    assert_eq!(events[17]["outcome"], json!({"type": "success"}));
    assert_eq!(
        events[17]["usage"],
        json!([{"model": "fast", "inputTokens": 10, "outputTokens": 2, "totalTokens": 12}])
    );
    assert_verifies(&events);
}

#[test]
fn approvals_end_the_run_with_interrupts_and_frontend_tools_with_pending_ids() {
    let relay = PendingRelay {
        relay_id: "relay_1".into(),
        tool_call_id: "c1".into(),
        tool: "refund".into(),
        params: json!({"order": "9"}),
    };
    let mut asking = AgUiEncoder::default();
    let events = encode_all(
        &mut asking,
        vec![
            EventKind::ToolCallStarted { tool_call_id: "c1".into(), name: "refund".into() },
            call_usage(),
            EventKind::Paused { pending_relays: vec![relay], pending_calls: vec![] },
        ],
    );
    let outcome = &events.last().unwrap()["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    assert_eq!(outcome["interrupts"][0]["id"], "relay_1");
    assert_eq!(outcome["interrupts"][0]["toolCallId"], "c1");
    assert_eq!(events[0]["runId"], "s1", "a native stream joined mid-turn runs as the session");
    assert_verifies(&events);

    let chart = PendingCall { tool_call_id: "c2".into(), tool: "chart".into(), arguments: json!({"m": "cpu"}) };
    let mut frontend = AgUiEncoder::default();
    let events = encode_all(
        &mut frontend,
        vec![
            EventKind::TurnStarted { turn: 2, model: "m".into() },
            EventKind::Paused { pending_relays: vec![], pending_calls: vec![chart] },
        ],
    );
    assert_eq!(
        names(&events),
        ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"],
        "a call this stream never opened is opened whole"
    );
    assert_eq!(events[0]["runId"], "s1-2");
    assert_eq!(events[4]["outcome"], json!({"type": "success", "pendingToolCallIds": ["c2"]}));
    assert_verifies(&events);
}

#[test]
fn results_the_client_sent_are_not_echoed_and_its_calls_are_not_reopened() {
    let known: HashSet<String> = ["c1".to_string(), "c2".to_string()].into();
    let answered: HashSet<String> = ["c2".to_string()].into();
    let mut encoder = AgUiEncoder::for_run("t1".into(), "r2".into(), known, answered);
    let events = encode_all(
        &mut encoder,
        vec![
            EventKind::Resumed { turn: 1 },
            EventKind::ToolCall { tool_call_id: "c1".into(), name: "refund".into(), arguments: json!({}) },
            EventKind::ToolResult {
                tool_call_id: "c1".into(),
                name: "refund".into(),
                status: crate::domain::ToolStatus::Success,
                output: json!({"refunded": true}),
            },
            EventKind::ToolResult {
                tool_call_id: "c2".into(),
                name: "chart".into(),
                status: crate::domain::ToolStatus::Success,
                output: json!("drawn"),
            },
            ended(TurnEndReason::Final),
        ],
    );
    assert_eq!(names(&events), ["RUN_STARTED", "STEP_STARTED", "TOOL_CALL_RESULT", "STEP_FINISHED", "RUN_FINISHED"]);
    assert_eq!(events[2]["content"], r#"{"refunded":true}"#, "content is a string");
    assert_verifies(&events);
}

#[test]
fn an_error_is_the_last_event_and_a_cancel_is_a_cancelled_outcome() {
    let mut failed = AgUiEncoder::default();
    let events = encode_all(
        &mut failed,
        vec![
            EventKind::TextDelta { text: "Hal".into() },
            EventKind::Error {
                code: crate::domain::FailureCode::UpstreamError,
                message: "boom".into(),
                retry_after_secs: None,
            },
            ended(TurnEndReason::Failed),
        ],
    );
    assert_eq!(
        names(&events),
        ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "RUN_ERROR"],
        "an open step needs no finish before RUN_ERROR"
    );
    assert_eq!(events[4]["code"], "upstream_error");
    assert_verifies(&events);
    assert!(failed.failure("recovery_failed", "gone").is_empty(), "nothing after RUN_ERROR");

    let mut cancelled = AgUiEncoder::default();
    let events =
        encode_all(&mut cancelled, vec![EventKind::TextDelta { text: "a".into() }, ended(TurnEndReason::Cancelled)]);
    assert_eq!(events.last().unwrap()["outcome"], json!({"type": "cancelled"}));
    assert_verifies(&events);
}

#[test]
fn subagent_events_are_not_shown() {
    let mut encoder = AgUiEncoder::default();
    let frames = encoder.encode(&subagent_event(1, EventKind::TextDelta { text: "inner".into() }));
    assert_eq!(types(&frames), ["RUN_STARTED"]);
}

/// `@ag-ui/client`'s reducer (`defaultApplyEvents`), for what these tests
/// send: text messages, and `MESSAGES_SNAPSHOT`, which keeps (updated) the
/// messages it lists, drops the others but reasoning ones when it lists
/// none, and appends the listed ones the client lacks.
pub(super) fn apply(mut messages: Vec<Value>, events: &[Value]) -> Vec<Value> {
    for e in events {
        match e["type"].as_str().unwrap() {
            "TEXT_MESSAGE_START" | "REASONING_MESSAGE_START" => {
                let role = if e["type"] == "TEXT_MESSAGE_START" { "assistant" } else { "reasoning" };
                messages.push(json!({"id": e["messageId"], "role": role, "content": ""}));
            }
            "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => {
                let message = messages.iter_mut().find(|m| m["id"] == e["messageId"]).expect("a started message");
                message["content"] =
                    json!(format!("{}{}", message["content"].as_str().unwrap(), e["delta"].as_str().unwrap()));
            }
            "MESSAGES_SNAPSHOT" => {
                let listed = e["messages"].as_array().unwrap();
                let keeps_reasoning = !listed.iter().any(|m| m["role"] == "reasoning");
                messages.retain(|m| {
                    listed.iter().any(|l| l["id"] == m["id"]) || (keeps_reasoning && m["role"] == "reasoning")
                });
                for message in &mut messages {
                    if let Some(l) = listed.iter().find(|l| l["id"] == message["id"]) {
                        *message = l.clone();
                    }
                }
                for l in listed {
                    if !messages.iter().any(|m| m["id"] == l["id"]) {
                        messages.push(l.clone());
                    }
                }
            }
            _ => {}
        }
    }
    messages
}

/// The turn of `restarted_turn(2)`, with the `step_restarted` given the
/// stored session (`None`: the store could not be read).
fn restarted_run(session: Option<&crate::domain::Session>) -> Vec<Value> {
    let mut encoder = AgUiEncoder::default();
    let frames: Vec<Frame> = (restarted_turn(2).into_iter().enumerate())
        .flat_map(|(i, kind)| {
            let e = event(i as u64 + 1, kind);
            match (&e.event.kind, session) {
                (EventKind::StepRestarted { .. }, Some(session)) => encoder.restarted(&e, session),
                _ => encoder.encode(&e),
            }
        })
        .collect();
    all_data(&frames)
}

#[test]
fn a_restarted_step_is_a_snapshot_of_the_conversation_before_it_and_a_new_message() {
    use crate::domain::{ChatMessage, Role};
    // Read when the turn was over (a replay): the store holds the
    // regenerated answer already; the snapshot stops before it.
    let history = vec![
        ChatMessage::text(Role::User, "earlier"),
        ChatMessage::text(Role::Assistant, "before"),
        ChatMessage::text(Role::User, "go"),
        ChatMessage::text(Role::Assistant, RESTARTED_ANSWER),
    ];
    let events = restarted_run(Some(&doc_at("m", 2, history)));
    assert_verifies(&events);
    let at = events.iter().position(|e| e["type"] == "CUSTOM").unwrap();
    let restart = &events[at - 2..=at + 1];
    assert_eq!(
        restart.iter().map(|e| e["type"].as_str().unwrap()).collect::<Vec<_>>(),
        ["TEXT_MESSAGE_END", "STEP_FINISHED", "CUSTOM", "MESSAGES_SNAPSHOT"],
        "the cut step is over; the regenerated one is a step of its own"
    );
    assert_eq!(restart[2]["value"], json!({"step": 1}));
    assert_eq!(
        restart[3]["messages"],
        json!([{"id": "history-0", "role": "user", "content": "earlier"},
               {"id": "history-1", "role": "assistant", "content": "before"},
               {"id": "history-2", "role": "user", "content": "go"}])
    );
    let starts: Vec<&Value> = events.iter().filter(|e| e["type"] == "TEXT_MESSAGE_START").collect();
    assert_eq!(starts.len(), 2);
    assert_ne!(starts[0]["messageId"], starts[1]["messageId"], "the regenerated text is a new message");

    // The client that had the thread's messages ends with them and the answer once.
    let client = vec![
        json!({"id": "u1", "role": "user", "content": "earlier"}),
        json!({"id": "a1", "role": "assistant", "content": "before"}),
        json!({"id": "u2", "role": "user", "content": "go"}),
    ];
    let messages = apply(client, &events);
    let contents: Vec<&str> = messages.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["earlier", "before", "go", RESTARTED_ANSWER]);
}

#[test]
fn without_the_stored_session_a_restart_is_only_said() {
    let events = restarted_run(None);
    assert_verifies(&events);
    assert!(!events.iter().any(|e| e["type"] == "MESSAGES_SNAPSHOT"));
    assert!(events.iter().any(|e| e["type"] == "CUSTOM" && e["name"] == "step_restarted"));
    let messages = apply(Vec::new(), &events);
    let contents: Vec<&str> = messages.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["w1 w2 ", RESTARTED_ANSWER], "the void text stays a message of its own");
}
