//! One test per transition and per refused transition.

use super::*;
use crate::domain::{
    ApprovalMode, ChatMessage, EventKind, FailureCode, PermissionRules, Role, SessionOptions, ToolCall, ToolOutcome,
    ToolStatus, TurnEndReason, Usage,
};

fn spec(approval: ApprovalMode) -> SessionSpec {
    SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "mock".into(),
        dialect: "native".into(),
        options: SessionOptions { approval, ..SessionOptions::default() },
    }
}

fn running(approval: ApprovalMode) -> Session {
    let mut session = Session::new(spec(approval));
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    session
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), arguments: r#"{"id":"7"}"#.into() }
}

fn step(calls: Vec<ToolCall>) -> StepOutput {
    StepOutput {
        text: "ok".into(),
        reasoning: String::new(),
        calls,
        usage: Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() },
    }
}

fn types(events: &[EventKind]) -> Vec<&'static str> {
    events.iter().map(EventKind::type_name).collect()
}

fn refused_conflict<T: std::fmt::Debug>(result: Result<T, Refused>) {
    assert!(matches!(result, Err(Refused::Conflict(_))), "{result:?}");
}

fn refused_invalid<T: std::fmt::Debug>(result: Result<T, Refused>) {
    assert!(matches!(result, Err(Refused::Invalid(_))), "{result:?}");
}

/// A session waiting for one relay decision on `c1` (relay `r1`).
fn awaiting_relay() -> Session {
    let mut session = running(ApprovalMode::Relay);
    let decisions = vec![CallDecision::Ask { relay_id: "r1".into() }];
    session.complete_step(step(vec![call("c1", "refund")]), decisions, PermissionRules::default()).unwrap();
    session
}

/// A session paused for the client's result of `c1`.
fn paused() -> Session {
    let mut session = running(ApprovalMode::Relay);
    session
        .complete_step(step(vec![call("c1", "chart")]), vec![CallDecision::Client], PermissionRules::default())
        .unwrap();
    session.pause().unwrap();
    session
}

#[test]
fn a_new_session_is_idle_with_an_empty_conversation() {
    let session = Session::new(spec(ApprovalMode::Relay));
    assert_eq!(session.status(), Status::Idle);
    assert_eq!(session.turn(), 0);
    assert_eq!(session.history(), Some(&[][..]));
    assert_eq!(session.conversation_change(), ConversationChange::Unchanged);
}

#[test]
fn a_new_session_takes_a_seed_and_a_used_one_does_not() {
    let mut session = Session::new(spec(ApprovalMode::Relay));
    session.seed(vec![ChatMessage::text(Role::System, "sys")]).unwrap();
    assert_eq!(session.message_count(), 1);
    let mut used = running(ApprovalMode::Relay);
    refused_conflict(used.seed(vec![ChatMessage::text(Role::User, "x")]));
}

#[test]
fn start_turn_runs_an_idle_session_and_says_so() {
    let mut session = Session::new(spec(ApprovalMode::Relay));
    let events = session.start_turn(ChatMessage::text(Role::User, "hi"), Some("tp".into())).unwrap();
    assert_eq!(events, vec![EventKind::TurnStarted { turn: 1, model: "mock".into() }]);
    assert_eq!(session.status(), Status::Running);
    assert_eq!(session.trace_parent(), Some("tp"));
    assert!(matches!(session.conversation_change(), ConversationChange::Append(m) if m.len() == 1));
}

#[test]
fn start_turn_is_refused_while_a_turn_runs_or_waits() {
    refused_conflict(running(ApprovalMode::Relay).start_turn(ChatMessage::text(Role::User, "again"), None));
    refused_conflict(awaiting_relay().start_turn(ChatMessage::text(Role::User, "again"), None));
    refused_conflict(paused().start_turn(ChatMessage::text(Role::User, "again"), None));
}

#[test]
fn a_finished_session_takes_the_next_message_and_clears_the_last_error() {
    let mut session = running(ApprovalMode::Relay);
    session.fail(FailureCode::UpstreamError, "boom", None).unwrap();
    assert_eq!(session.error().map(|e| e.code), Some(FailureCode::UpstreamError));
    session.start_turn(ChatMessage::text(Role::User, "again"), None).unwrap();
    assert_eq!(session.turn(), 2);
    assert_eq!(session.error(), None);
    assert_eq!(session.iterations(), 0);
}

#[test]
fn complete_step_records_the_answer_and_announces_permitted_calls() {
    let mut session = running(ApprovalMode::Relay);
    let events = session
        .complete_step(step(vec![call("c1", "lookup")]), vec![CallDecision::Run], PermissionRules::default())
        .unwrap();
    assert_eq!(types(&events), ["message_completed", "usage", "tool_call"]);
    assert_eq!(session.iterations(), 1);
    assert_eq!(session.usage().input_tokens, 3);
    assert_eq!(session.runnable(), vec![call("c1", "lookup")]);
    assert_eq!(session.status(), Status::Running);
}

#[test]
fn complete_step_answers_denied_and_noop_calls_at_once() {
    let mut session = running(ApprovalMode::Relay);
    let decisions = vec![
        CallDecision::Answer { outcome: ToolOutcome::Denied { reason: "no".into() }, announce: false },
        CallDecision::Answer { outcome: ToolOutcome::Success("done".into()), announce: true },
    ];
    let events = session
        .complete_step(step(vec![call("c1", "rm"), call("c2", "noop")]), decisions, PermissionRules::default())
        .unwrap();
    assert_eq!(
        types(&events),
        ["message_completed", "usage", "tool_result", "tool_call", "tool_result"],
        "in call order"
    );
    assert!(session.calls_done());
    let history = session.history().unwrap();
    assert_eq!(history.last().unwrap().content.as_deref(), Some("done"));
    assert_eq!(history[history.len() - 2].content.as_deref(), Some("Permission denied: no"));
}

#[test]
fn an_ask_in_relay_mode_waits_for_a_relay() {
    let session = awaiting_relay();
    assert_eq!(session.status(), Status::AwaitingRelay);
    assert_eq!(session.live_relays(), vec!["r1".to_string()]);
    assert_eq!(session.pending_relays()[0].tool_call_id, "c1");
}

#[test]
fn complete_step_is_refused_with_open_calls_or_a_wrong_count_or_an_ask_nobody_answers() {
    let mut session = running(ApprovalMode::Relay);
    session
        .complete_step(step(vec![call("c1", "lookup")]), vec![CallDecision::Run], PermissionRules::default())
        .unwrap();
    refused_conflict(session.complete_step(step(vec![]), vec![], PermissionRules::default()));
    let mut fresh = running(ApprovalMode::Relay);
    refused_invalid(fresh.complete_step(step(vec![call("c1", "x")]), vec![], PermissionRules::default()));
    let mut refusing = running(ApprovalMode::Refuse);
    let ask = vec![CallDecision::Ask { relay_id: "r".into() }];
    refused_invalid(refusing.complete_step(step(vec![call("c1", "x")]), ask, PermissionRules::default()));
    refused_conflict(Session::new(spec(ApprovalMode::Relay)).complete_step(
        step(vec![]),
        vec![],
        PermissionRules::default(),
    ));
}

#[test]
fn finish_tool_gives_a_running_call_its_result_once() {
    let mut session = running(ApprovalMode::Relay);
    session
        .complete_step(step(vec![call("c1", "lookup")]), vec![CallDecision::Run], PermissionRules::default())
        .unwrap();
    let events = session.finish_tool("c1", ToolOutcome::Success("found".into()), None, None).unwrap();
    assert_eq!(types(&events), ["tool_result"]);
    assert!(session.calls_done());
    assert_eq!(session.call("c1").unwrap().result(), Some(ToolStatus::Success));
    refused_invalid(session.finish_tool("c1", ToolOutcome::Success("again".into()), None, None));
    refused_invalid(session.finish_tool("nope", ToolOutcome::Success("x".into()), None, None));
}

#[test]
fn finish_tool_is_refused_when_no_turn_runs() {
    let mut session = paused();
    refused_conflict(session.finish_tool("c1", ToolOutcome::Success("x".into()), None, None));
}

#[test]
fn an_approved_relay_makes_its_call_runnable_and_always_adds_a_rule() {
    let mut session = awaiting_relay();
    let decision = RelayDecision { approved: true, always: true, reason: None };
    let events = session.decide_relay("r1", &decision).unwrap();
    assert_eq!(types(&events), ["relay_decided", "tool_call"]);
    assert_eq!(session.status(), Status::Running);
    assert_eq!(session.runnable().len(), 1);
    assert_eq!(session.options().session_allow[0].tool, "refund");
}

#[test]
fn a_denied_relay_answers_its_call() {
    let mut session = awaiting_relay();
    let decision = RelayDecision { approved: false, always: false, reason: Some("nope".into()) };
    let events = session.decide_relay("r1", &decision).unwrap();
    assert_eq!(types(&events), ["relay_decided", "tool_result"]);
    assert!(session.calls_done());
}

#[test]
fn a_relay_is_decided_once_and_only_while_the_session_waits() {
    let mut session = awaiting_relay();
    let decision = RelayDecision { approved: true, always: false, reason: None };
    refused_conflict(session.decide_relay("unknown", &decision));
    session.decide_relay("r1", &decision).unwrap();
    refused_conflict(session.decide_relay("r1", &decision));
    refused_conflict(paused().decide_relay("r1", &decision));
}

#[test]
fn timed_out_relays_are_denied() {
    let mut session = awaiting_relay();
    let events = session.time_out_relays("no decision in time").unwrap();
    assert_eq!(types(&events), ["tool_result"]);
    assert_eq!(session.status(), Status::Running);
    assert_eq!(session.call("c1").unwrap().result(), Some(ToolStatus::Denied));
    refused_conflict(session.time_out_relays("again"));
}

#[test]
fn pause_waits_for_frontend_calls_and_derives_what_is_pending() {
    let session = paused();
    assert_eq!(session.status(), Status::AwaitingClient);
    assert_eq!(session.pending_calls()[0].tool_call_id, "c1");
    assert!(session.live_relays().is_empty());
}

#[test]
fn an_ask_in_pause_mode_pauses_without_a_live_relay() {
    let mut session = running(ApprovalMode::Pause);
    let decisions = vec![CallDecision::Ask { relay_id: "r1".into() }];
    let events =
        session.complete_step(step(vec![call("c1", "refund")]), decisions, PermissionRules::default()).unwrap();
    assert!(!types(&events).contains(&"relay_requested"));
    assert_eq!(session.status(), Status::Running);
    let events = session.pause().unwrap();
    assert!(matches!(&events[0], EventKind::Paused { pending_relays, .. } if pending_relays.len() == 1));
}

#[test]
fn pause_is_refused_when_nothing_waits_for_the_client() {
    refused_conflict(running(ApprovalMode::Relay).pause());
    refused_conflict(awaiting_relay().pause());
    let mut both = running(ApprovalMode::Relay);
    both.complete_step(
        step(vec![call("c1", "chart"), call("c2", "lookup")]),
        vec![CallDecision::Client, CallDecision::Run],
        PermissionRules::default(),
    )
    .unwrap();
    refused_conflict(both.pause());
}

#[test]
fn resume_answers_every_pending_call_and_runs_again() {
    let mut session = paused();
    let answers = Answers { outputs: vec![("c1".into(), "a chart".into())], decisions: vec![], ..Answers::default() };
    let events = session.resume(&answers, None).unwrap();
    assert_eq!(types(&events), ["resumed", "tool_result"]);
    assert_eq!(session.status(), Status::Running);
    assert!(session.calls_done());
}

#[test]
fn resume_applies_approvals_given_in_a_pause() {
    let mut session = running(ApprovalMode::Pause);
    session
        .complete_step(
            step(vec![call("c1", "refund")]),
            vec![CallDecision::Ask { relay_id: "r1".into() }],
            PermissionRules::default(),
        )
        .unwrap();
    session.pause().unwrap();
    let approve = Decision { tool_call_id: "c1".into(), approved: true, reason: None };
    let events =
        session.resume(&Answers { outputs: vec![], decisions: vec![approve], ..Answers::default() }, None).unwrap();
    assert_eq!(types(&events), ["resumed", "relay_decided", "tool_call"]);
    assert_eq!(session.runnable().len(), 1);
}

#[test]
fn resume_is_refused_for_missing_unknown_or_doubled_answers_and_when_not_paused() {
    let two = Answers {
        outputs: vec![("c1".into(), "a".into()), ("c1".into(), "b".into())],
        decisions: vec![],
        ..Answers::default()
    };
    refused_invalid(paused().resume(&two, None));
    refused_invalid(paused().resume(&Answers::default(), None));
    let unknown = Answers { outputs: vec![("zz".into(), "a".into())], decisions: vec![], ..Answers::default() };
    refused_invalid(paused().resume(&unknown, None));
    let decision = Decision { tool_call_id: "c1".into(), approved: true, reason: None };
    let wrong_kind = Answers { outputs: vec![], decisions: vec![decision], ..Answers::default() };
    refused_invalid(paused().resume(&wrong_kind, None));
    refused_conflict(running(ApprovalMode::Relay).resume(&Answers::default(), None));
    let mut resumed = paused();
    let answers = Answers { outputs: vec![("c1".into(), "a".into())], decisions: vec![], ..Answers::default() };
    resumed.resume(&answers, None).unwrap();
    refused_conflict(resumed.resume(&answers, None));
}

fn lenient() -> AnswerRules {
    AnswerRules::Lenient { unanswered: "denied by default".into(), missing_result: "no result".into() }
}

/// Paused with two approvals (`a1`, `a2`) and a frontend call (`f1`).
fn paused_with_two_approvals_and_a_client_call() -> Session {
    let mut session = running(ApprovalMode::Pause);
    let calls = vec![call("a1", "refund"), call("a2", "refund"), call("f1", "chart")];
    let decisions = vec![
        CallDecision::Ask { relay_id: "r1".into() },
        CallDecision::Ask { relay_id: "r2".into() },
        CallDecision::Client,
    ];
    session.complete_step(step(calls), decisions, PermissionRules::default()).unwrap();
    session.pause().unwrap();
    session
}

#[test]
fn a_lenient_resume_denies_unanswered_approvals_fails_missing_results_and_ignores_the_rest() {
    let mut session = paused_with_two_approvals_and_a_client_call();
    let approve = |id: &str| Decision { tool_call_id: id.into(), approved: true, reason: None };
    let answers = Answers {
        outputs: vec![("zz".into(), "not pending".into())],
        decisions: vec![approve("a1"), approve("a1"), approve("f1"), approve("nope")],
        rules: lenient(),
    };
    let events = session.resume(&answers, None).unwrap();
    assert_eq!(
        types(&events),
        ["resumed", "relay_decided", "tool_call", "relay_decided", "tool_result", "tool_result"]
    );
    assert_eq!(session.runnable().iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a1"]);
    let outcome = |id: &str| {
        events.iter().find_map(|e| match e {
            EventKind::ToolResult { tool_call_id, status, output, .. } if tool_call_id == id => {
                Some((*status, output.clone()))
            }
            _ => None,
        })
    };
    assert_eq!(outcome("a2"), Some((ToolStatus::Denied, serde_json::json!("Permission denied: denied by default"))));
    assert_eq!(outcome("f1"), Some((ToolStatus::Error, serde_json::json!("no result"))));
    assert_eq!(session.status(), Status::Running);
    refused_conflict(session.resume(&answers, None));
}

#[test]
fn a_seeded_session_may_start_its_first_turn_on_its_history() {
    let mut session = Session::new(spec(ApprovalMode::Pause));
    let mut assistant = ChatMessage::text(Role::Assistant, "");
    assistant.tool_calls = vec![call("c1", "chart")];
    session.seed(vec![ChatMessage::text(Role::System, "s"), ChatMessage::text(Role::User, "q"), assistant]).unwrap();
    refused_invalid(session.clone().start_turn_on_history(None));
    let mut answered = Session::new(spec(ApprovalMode::Pause));
    answered.seed(vec![ChatMessage::text(Role::User, "q"), ChatMessage::tool_result("c1", "drawn")]).unwrap();
    let events = answered.start_turn_on_history(None).unwrap();
    assert_eq!(types(&events), ["turn_started"]);
    assert_eq!(answered.status(), Status::Running);
    refused_conflict(answered.start_turn_on_history(None));
    refused_conflict(running(ApprovalMode::Pause).start_turn_on_history(None));
}

#[test]
fn end_completes_a_turn_whose_calls_are_done() {
    let mut session = running(ApprovalMode::Relay);
    session.complete_step(step(vec![]), vec![], PermissionRules::default()).unwrap();
    let events = session.end(TurnEndReason::Final, false).unwrap();
    assert!(matches!(events[..], [EventKind::TurnEnded { reason: TurnEndReason::Final, iterations: 1, .. }]));
    assert_eq!(session.status(), Status::Completed);
}

#[test]
fn end_is_refused_with_open_calls_for_fail_or_cancel_reasons_and_when_idle() {
    refused_conflict(awaiting_relay().end(TurnEndReason::Final, false));
    refused_invalid(running(ApprovalMode::Relay).end(TurnEndReason::Cancelled, false));
    refused_conflict(Session::new(spec(ApprovalMode::Relay)).end(TurnEndReason::Final, false));
    refused_conflict(paused().end(TurnEndReason::Final, false));
}

#[test]
fn cancel_ends_a_running_or_paused_turn_and_closes_its_open_calls() {
    let mut session = paused();
    let events = session.cancel().unwrap();
    assert!(matches!(events[..], [EventKind::TurnEnded { reason: TurnEndReason::Cancelled, .. }]));
    assert_eq!(session.status(), Status::Cancelled);
    let history = session.history().unwrap();
    assert_eq!(history.last().unwrap().tool_call_id.as_deref(), Some("c1"), "the open call got a tool message");
    let mut relaying = awaiting_relay();
    relaying.cancel().unwrap();
    assert_eq!(relaying.status(), Status::Cancelled);
}

#[test]
fn cancel_is_refused_when_no_turn_runs() {
    refused_conflict(Session::new(spec(ApprovalMode::Relay)).cancel());
    let mut done = running(ApprovalMode::Relay);
    done.cancel().unwrap();
    refused_conflict(done.cancel());
}

#[test]
fn fail_reports_the_error_and_ends_the_turn() {
    let mut session = awaiting_relay();
    let events = session.fail(FailureCode::RateLimited, "slow down", Some(7)).unwrap();
    assert_eq!(types(&events), ["error", "turn_ended"]);
    assert!(matches!(events[0], EventKind::Error { code: FailureCode::RateLimited, retry_after_secs: Some(7), .. }));
    assert_eq!(session.status(), Status::Failed);
}

#[test]
fn fail_is_refused_when_no_turn_runs() {
    refused_conflict(paused().fail(FailureCode::UpstreamError, "x", None));
    refused_conflict(Session::new(spec(ApprovalMode::Relay)).fail(FailureCode::UpstreamError, "x", None));
}

#[test]
fn a_takeover_reruns_retryable_calls_and_closes_the_others_as_unknown() {
    let mut session = running(ApprovalMode::Relay);
    let calls = vec![call("c1", "lookup"), call("c2", "charge")];
    session.complete_step(step(calls), vec![CallDecision::Run, CallDecision::Run], PermissionRules::default()).unwrap();
    let events = session.take_over("b", StepRestart::Nothing, &|c| c.name != "charge").unwrap();
    assert_eq!(types(&events), ["tool_result"]);
    assert!(
        matches!(&events[0], EventKind::ToolResult { tool_call_id, status: ToolStatus::Error, .. } if tool_call_id == "c2")
    );
    assert_eq!(session.runnable(), vec![call("c1", "lookup")]);
}

#[test]
fn a_takeover_mid_step_says_the_step_restarts_unless_it_continues() {
    let mut session = running(ApprovalMode::Relay);
    let events = session.take_over("b", StepRestart::Regenerate, &|_| true).unwrap();
    assert_eq!(events, vec![EventKind::StepRestarted { step: 1, replica: "b".into() }]);
    assert!(session.take_over("c", StepRestart::Continue, &|_| true).unwrap().is_empty());
    assert!(session.take_over("c", StepRestart::Nothing, &|_| true).unwrap().is_empty());
}

#[test]
fn a_takeover_is_refused_when_nothing_runs() {
    refused_conflict(paused().take_over("b", StepRestart::Nothing, &|_| true));
    refused_conflict(Session::new(spec(ApprovalMode::Relay)).take_over("b", StepRestart::Nothing, &|_| true));
}

#[test]
fn compaction_rewrites_the_conversation_once() {
    let mut session = running(ApprovalMode::Relay);
    session.conversation_saved();
    assert_eq!(types(&session.begin_compaction(100).unwrap()), ["compaction_started"]);
    let events = session.compacted(vec![ChatMessage::text(Role::User, "summary")], "S".into(), 100, 10).unwrap();
    assert_eq!(types(&events), ["compaction_done"]);
    assert!(matches!(session.conversation_change(), ConversationChange::Replace(m) if m.len() == 1));
    session.conversation_saved();
    assert_eq!(session.conversation_change(), ConversationChange::Unchanged);
}

#[test]
fn compaction_is_refused_without_a_running_turn_or_the_history() {
    refused_conflict(paused().begin_compaction(1));
    let stored: Session = serde_json::from_str(&serde_json::to_string(&running(ApprovalMode::Relay)).unwrap()).unwrap();
    let mut partial = stored.restored(5, None);
    refused_conflict(partial.compacted(vec![], "S".into(), 1, 1));
}

#[test]
fn a_session_read_without_its_history_appends_after_the_stored_messages() {
    let mut original = Session::new(spec(ApprovalMode::Relay));
    original.seed(vec![ChatMessage::text(Role::System, "sys"), ChatMessage::text(Role::User, "q")]).unwrap();
    original.conversation_saved();
    let stored: Session = serde_json::from_str(&serde_json::to_string(&original).unwrap()).unwrap();
    let mut session = stored.restored(2, None);
    assert_eq!(session.history(), None);
    session.start_turn(ChatMessage::text(Role::User, "next"), None).unwrap();
    assert_eq!(session.message_count(), 3);
    assert!(matches!(session.conversation_change(), ConversationChange::Append(m) if m.len() == 1));
}

#[test]
fn the_state_document_round_trips_without_the_conversation() {
    let session = awaiting_relay();
    let json = serde_json::to_string(&session).unwrap();
    assert!(!json.contains("\"messages\""), "{json}");
    let back: Session = serde_json::from_str(&json).unwrap();
    let back = back.restored(session.message_count(), session.history().map(<[_]>::to_vec));
    assert_eq!(back.status(), Status::AwaitingRelay);
    assert_eq!(back.pending_relays(), session.pending_relays());
}
