//! Steps, state and restatements: what the encoder adds around a run's
//! events, checked against `verifyEvents`' rules and the client's reducer
//! (the helpers of `tests.rs`).

use serde_json::json;

use super::{
    tests::{apply, assert_verifies, call_usage, encode_all, ended, names},
    *,
};
use crate::{
    domain::{
        ApprovalMode, CallDecision, ChatMessage, PermissionRules, Role, RunInput, SessionOptions, SessionSpec,
        StepOutput, ToolCall, ToolStatus,
    },
    protocol::testing::all_data,
};

fn result(id: &str, name: &str, output: &str) -> EventKind {
    EventKind::ToolResult {
        tool_call_id: id.into(),
        name: name.into(),
        status: ToolStatus::Success,
        output: json!(output),
    }
}

fn announced(id: &str, name: &str) -> EventKind {
    EventKind::ToolCall { tool_call_id: id.into(), name: name.into(), arguments: json!({}) }
}

fn started(id: &str, name: &str) -> EventKind {
    EventKind::ToolCallStarted { tool_call_id: id.into(), name: name.into() }
}

/// (type, stepName) of the step events, in order.
fn steps(events: &[Value]) -> Vec<(String, String)> {
    (events.iter().filter(|e| e["stepName"].is_string()))
        .map(|e| (e["type"].as_str().unwrap().to_string(), e["stepName"].as_str().unwrap().to_string()))
        .collect()
}

fn step(kind: &str, name: &str) -> (String, String) {
    (format!("STEP_{kind}"), name.to_string())
}

#[test]
fn state_comes_as_a_snapshot_at_the_run_start_and_its_changes_inside_the_tool_step() {
    let mut encoder = AgUiEncoder::for_run("t1".into(), "r1".into(), HashSet::new(), HashSet::new());
    let delta = json!([{"op": "replace", "path": "/count", "value": 2}]);
    let events = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::StateReplaced { state: json!({"count": 1}) },
            started("c1", "bump"),
            call_usage(),
            announced("c1", "bump"),
            EventKind::StateUpdated { delta: delta.clone() },
            result("c1", "bump", "bumped"),
            EventKind::TextDelta { text: "Done.".into() },
            call_usage(),
            ended(TurnEndReason::Final),
        ],
    );
    assert_verifies(&events);
    assert_eq!(
        names(&events)[..12],
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_END",
            "STEP_FINISHED",
            "STEP_STARTED",
            "STATE_DELTA",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START"
        ]
    );
    assert_eq!(events[1]["snapshot"], json!({"count": 1}));
    assert_eq!(events[7]["delta"], delta);
    assert_eq!((events[6]["stepName"].as_str(), events[9]["stepName"].as_str()), (Some("bump"), Some("bump")));
    // The client's state after both, as its reducer applies them.
    let mut state = events[1]["snapshot"].clone();
    let patch: json_patch::Patch = serde_json::from_value(events[7]["delta"].clone()).unwrap();
    json_patch::patch(&mut state, &patch).unwrap();
    assert_eq!(state, json!({"count": 2}));
}

#[test]
fn frontend_calls_get_no_step_and_a_pause_finishes_what_is_open() {
    let turn = || {
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            started("c1", "lookup"),
            started("c2", "render_chart"),
            call_usage(),
            announced("c1", "lookup"),
            announced("c2", "render_chart"),
            result("c1", "lookup", "found"),
            EventKind::Paused {
                pending_relays: vec![],
                pending_calls: vec![PendingCall {
                    tool_call_id: "c2".into(),
                    tool: "render_chart".into(),
                    arguments: json!({}),
                }],
            },
        ]
    };
    let mut run = AgUiEncoder::for_run("t1".into(), "r1".into(), HashSet::new(), HashSet::new())
        .frontend_tools(["render_chart".to_string()]);
    let events = encode_all(&mut run, turn());
    assert_verifies(&events);
    assert_eq!(
        steps(&events),
        [step("STARTED", "model"), step("FINISHED", "model"), step("STARTED", "lookup"), step("FINISHED", "lookup")]
    );
    // A native stream does not know the frontend tools: the call's step is
    // finished by the pause, before RUN_FINISHED.
    let events = encode_all(&mut AgUiEncoder::default(), turn());
    assert_verifies(&events);
    assert_eq!(steps(&events)[3], step("STARTED", "render_chart"));
    assert_eq!(steps(&events).last(), Some(&step("FINISHED", "render_chart")));
    assert_eq!(events.last().unwrap()["outcome"]["pendingToolCallIds"], json!(["c2"]));
}

#[test]
fn calls_of_one_tool_running_at_once_get_steps_of_their_own() {
    let events = encode_all(
        &mut AgUiEncoder::default(),
        vec![
            started("c1", "lookup"),
            started("c2", "lookup"),
            call_usage(),
            announced("c1", "lookup"),
            announced("c2", "lookup"),
            result("c2", "lookup", "two"),
            result("c1", "lookup", "one"),
            ended(TurnEndReason::MaxIterations),
        ],
    );
    assert_verifies(&events);
    assert_eq!(
        steps(&events)[2..],
        [
            step("STARTED", "lookup"),
            step("STARTED", "lookup #2"),
            step("FINISHED", "lookup #2"),
            step("FINISHED", "lookup")
        ]
    );
}

/// Session `s1` in its first turn (after a seeded exchange), with `state`, whose model called `lookup` (`c1`,
/// running) after the user's "find 7".
fn running_a_lookup(state: Value) -> Session {
    let mut session = Session::new(SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "m".into(),
        dialect: "ag-ui".into(),
        options: SessionOptions { approval: ApprovalMode::Pause, ..SessionOptions::default() },
    });
    session.seed(vec![ChatMessage::text(Role::User, "hi"), ChatMessage::text(Role::Assistant, "Hello.")]).unwrap();
    session.begin_run(RunInput { state: Some(state), ..RunInput::default() }).unwrap();
    session.start_turn(ChatMessage::text(Role::User, "find 7"), None).unwrap();
    let call = ToolCall { id: "c1".into(), name: "lookup".into(), arguments: r#"{"id":"7"}"#.into() };
    let output = StepOutput { calls: vec![call], ..StepOutput::default() };
    session.complete_step(output, vec![CallDecision::Run], PermissionRules::default()).unwrap();
    session
}

#[test]
fn a_join_restates_the_session_as_of_its_last_commit_and_follows_the_step_in_progress() {
    let session = running_a_lookup(json!({"page": "orders"}));
    let mut encoder = AgUiEncoder::default();
    encoder.joined(&session);
    let mut frames = encoder.opening();
    assert!(frames.iter().all(|f| f.id.is_none()), "the restatement is no event of the log");
    frames.extend(
        [
            result("c1", "lookup", "found"),
            EventKind::TextDelta { text: "Order 7 ships.".into() },
            call_usage(),
            ended(TurnEndReason::Final),
        ]
        .into_iter()
        .enumerate()
        .flat_map(|(i, kind)| encoder.encode(&crate::protocol::testing::event(10 + i as u64, kind))),
    );
    let events = all_data(&frames);
    assert_verifies(&events);
    assert_eq!(
        names(&events)[..6],
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STEP_STARTED", "TOOL_CALL_RESULT", "STEP_FINISHED"],
        "the running call's step is open, and the call is the client's already (not opened again)"
    );
    assert_eq!((events[0]["threadId"].as_str(), events[0]["runId"].as_str()), (Some("s1"), Some("s1-1")));
    assert_eq!(events[2]["snapshot"], json!({"page": "orders"}));
    assert_eq!(events[1]["messages"][3]["toolCalls"][0]["id"], "c1");

    // A client that held a stale copy ends with the stored conversation and
    // the rest of the turn, once.
    let stale = vec![json!({"id": "u1", "role": "user", "content": "hi"})];
    let messages = apply(stale, &events);
    let texts: Vec<&str> = messages.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(texts, ["hi", "Hello.", "find 7", "Order 7 ships."]);
}

#[test]
fn a_join_while_a_relay_waits_restates_it() {
    let mut session = Session::new(SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "m".into(),
        dialect: "native".into(),
        options: SessionOptions::default(),
    });
    session.start_turn(ChatMessage::text(Role::User, "refund 9"), None).unwrap();
    let call = ToolCall { id: "c1".into(), name: "refund".into(), arguments: r#"{"order":"9"}"#.into() };
    let output = StepOutput { calls: vec![call], ..StepOutput::default() };
    session
        .complete_step(output, vec![CallDecision::Ask { relay_id: "r1".into() }], PermissionRules::default())
        .unwrap();
    let mut encoder = AgUiEncoder::default();
    encoder.joined(&session);
    let events = all_data(&encoder.opening());
    assert_eq!(names(&events), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "CUSTOM"]);
    assert_eq!(
        events[3]["value"],
        json!({"relayId": "r1", "toolCallId": "c1", "tool": "refund", "params": {"order": "9"}})
    );
}

#[test]
fn a_run_that_continues_its_thread_restates_the_conversation_first() {
    let history = vec![
        ChatMessage::text(Role::User, "chart it"),
        ChatMessage {
            content: None,
            tool_calls: vec![ToolCall { id: "c1".into(), name: "render_chart".into(), arguments: "{}".into() }],
            ..ChatMessage::text(Role::Assistant, "")
        },
        ChatMessage::tool_result("c1", "drawn"),
    ];
    let answered: HashSet<String> = ["c1".to_string()].into();
    let mut encoder = AgUiEncoder::for_run("t1".into(), "r2".into(), HashSet::new(), answered).restating(&history);
    let mut events = all_data(&encoder.opening());
    events.extend(encode_all(
        &mut encoder,
        vec![
            EventKind::Resumed { turn: 1 },
            result("c1", "render_chart", "drawn"),
            EventKind::TextDelta { text: "Drawn.".into() },
            call_usage(),
            ended(TurnEndReason::Final),
        ],
    ));
    assert_verifies(&events);
    assert_eq!(names(&events)[..3], ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STEP_STARTED"]);
    assert_eq!(events.iter().filter(|e| e["type"] == "RUN_STARTED").count(), 1);
    assert_eq!(events[1]["messages"].as_array().unwrap().len(), 3);
    // The client's own copies (its ids) give way to the stored ones.
    let held = vec![
        json!({"id": "user-1", "role": "user", "content": "chart it"}),
        json!({"id": "msg-3", "role": "assistant", "toolCalls": []}),
        json!({"id": "tool-c1", "role": "tool", "content": "drawn", "toolCallId": "c1"}),
    ];
    let messages = apply(held, &events);
    let ids: Vec<&str> = messages.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids[..3], ["history-0", "history-1", "history-2"]);
    assert_eq!(messages.len(), 4, "{messages:?}");
}
