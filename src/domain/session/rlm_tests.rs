//! The rlm transitions: replies, cells, host-call progress, exec relays,
//! divergent replays.

use super::*;
use crate::domain::{
    ApprovalMode, ChatMessage, EventKind, Role, SessionOptions, Usage,
    rlm::{CellOutput, HostResult, RlmOptions},
};

fn running() -> Session {
    let mut session = Session::new(SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "mock".into(),
        dialect: "llm-gateway".into(),
        options: SessionOptions {
            approval: ApprovalMode::Relay,
            rlm: Some(RlmOptions { max_depth: 1, context: "ctx".into() }),
            ..SessionOptions::default()
        },
    });
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    session
}

fn reply(text: &str) -> StepOutput {
    StepOutput {
        text: text.into(),
        usage: Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() },
        ..StepOutput::default()
    }
}

fn with_cell(session: &mut Session, id: &str) {
    let cell = RlmReply::Cell { id: id.into(), code: "x()".into() };
    session.rlm_reply(reply("```js\nx()\n```"), cell).unwrap();
}

fn types(events: &[EventKind]) -> Vec<&'static str> {
    events.iter().map(EventKind::type_name).collect()
}

fn output(stdout: &str, answer: Option<&str>) -> CellOutput {
    CellOutput {
        stdout: stdout.into(),
        done: answer.is_some(),
        answer: answer.map(Into::into),
        ..CellOutput::default()
    }
}

#[test]
fn a_reply_with_a_cell_starts_it_and_one_without_tells_the_model_why() {
    let mut session = running();
    let events = session.rlm_reply(reply("no code"), RlmReply::NoCell("no code block".into())).unwrap();
    assert_eq!(types(&events), ["message_completed", "usage", "repl_error"]);
    let rlm = session.rlm().unwrap();
    assert_eq!(rlm.messages.last().unwrap().content.as_deref(), Some("error: no code block"));
    assert!(rlm.open_cell().is_none());

    let cell = RlmReply::Cell { id: "c1".into(), code: "x()".into() };
    let events = session.rlm_reply(reply("```js\nx()\n```"), cell).unwrap();
    assert_eq!(types(&events), ["message_completed", "usage", "repl_input"]);
    assert!(matches!(&events[2], EventKind::ReplInput { iteration: 1, .. }), "failures use up an iteration");
    assert_eq!(session.iterations(), 2);
    assert_eq!(session.turn_usage().input_tokens, 6);
    let refused = session.rlm_reply(reply("more"), RlmReply::NoCell("x".into()));
    assert!(matches!(refused, Err(Refused::Conflict(_))), "a cell is running");
}

#[test]
fn a_cells_tape_only_grows_and_its_end_feeds_the_model() {
    let mut session = running();
    with_cell(&mut session, "c1");
    let first = vec![HostResult::Random { value: 0.5 }, HostResult::Query { result: Ok("a".into()) }];
    let child = Usage { input_tokens: 10, ..Usage::default() };
    assert!(session.rlm_progress(first.clone(), child).unwrap().is_empty());
    assert_eq!(session.turn_usage().input_tokens, 13, "the child's usage counts");
    let shorter = vec![HostResult::Random { value: 0.5 }];
    assert!(matches!(session.rlm_progress(shorter, Usage::default()), Err(Refused::Invalid(_))));
    let other = vec![HostResult::Random { value: 0.7 }, HostResult::Query { result: Ok("a".into()) }];
    assert!(matches!(session.rlm_progress(other, Usage::default()), Err(Refused::Invalid(_))));

    let events = session.rlm_cell_done(first.clone(), output("hello", None)).unwrap();
    assert_eq!(types(&events), ["repl_output"]);
    let rlm = session.rlm().unwrap();
    assert_eq!(rlm.cells[0].tape, first);
    assert_eq!(rlm.messages.last().unwrap().content.as_deref(), Some("stdout:\nhello"));
    assert!(!session.rlm_answered());
}

#[test]
fn final_answers_the_turn_in_the_conversation() {
    let mut session = running();
    with_cell(&mut session, "c1");
    let events = session.rlm_cell_done(vec![], output("", Some("42"))).unwrap();
    assert_eq!(types(&events), ["repl_output", "text_delta", "message_completed"]);
    assert!(session.rlm_answered());
    let history = session.history().unwrap();
    assert_eq!((history.len(), history[1].content.as_deref()), (2, Some("42")), "the REPL loop stays out of it");
    assert_eq!(session.rlm().unwrap().messages.last().unwrap().content.as_deref(), Some("(no output)"));
}

#[test]
fn an_exec_waits_for_a_relay_and_always_allows_its_command_for_the_session() {
    let mut session = running();
    with_cell(&mut session, "c1");
    let events = session.rlm_ask_exec("r1", "e1", "ls -la").unwrap();
    assert_eq!(types(&events), ["relay_requested"]);
    assert_eq!(session.status(), Status::AwaitingRelay);
    assert_eq!(session.live_relays(), ["r1"]);
    assert_eq!(session.pending_relays()[0].tool, "exec");
    assert!(session.rlm_take_decision().is_err(), "nothing decided yet");
    let decision = RelayDecision { approved: true, always: true, reason: None };
    let events = session.decide_relay("r1", &decision).unwrap();
    assert_eq!(types(&events), ["relay_decided"]);
    assert_eq!(session.status(), Status::Running);
    assert!(session.live_relays().is_empty());
    assert_eq!(session.options().session_allow[0].tool, "exec");
    assert_eq!(session.rlm_take_decision().unwrap(), decision);
    assert!(session.rlm().unwrap().ask.is_none());
}

#[test]
fn an_exec_no_one_decides_is_denied_at_the_timeout() {
    let mut session = running();
    with_cell(&mut session, "c1");
    session.rlm_ask_exec("r1", "e1", "rm -rf /").unwrap();
    let events = session.time_out_relays("too slow").unwrap();
    assert_eq!(types(&events), ["relay_decided"]);
    let decision = session.rlm_take_decision().unwrap();
    assert_eq!((decision.approved, decision.reason.as_deref()), (false, Some("too slow")));
}

#[test]
fn a_divergent_replay_goes_back_to_before_its_cell() {
    let mut session = running();
    with_cell(&mut session, "c1");
    session.rlm_cell_done(vec![], output("one", None)).unwrap();
    with_cell(&mut session, "c2");
    session.rlm_cell_done(vec![], output("two", None)).unwrap();
    let events = session.rlm_restart(1, "replica-b").unwrap();
    assert!(matches!(&events[..], [EventKind::StepRestarted { step: 2, .. }]), "{events:?}");
    let rlm = session.rlm().unwrap();
    assert_eq!((rlm.cells.len(), rlm.messages.len()), (1, 2));
    assert_eq!(session.iterations(), 1);
    assert!(matches!(session.rlm_restart(5, "b"), Err(Refused::Invalid(_))));
}

#[test]
fn a_session_not_in_rlm_mode_has_no_rlm_transitions() {
    let mut session = Session::new(SessionSpec {
        id: "s2".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "mock".into(),
        dialect: "native".into(),
        options: SessionOptions::default(),
    });
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    assert!(matches!(session.rlm_reply(reply("x"), RlmReply::NoCell("x".into())), Err(Refused::Invalid(_))));
}
