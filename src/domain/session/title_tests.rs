//! The title's transitions: due at the first normal end, set once, taken
//! over like a running turn while due.

use super::*;
use crate::domain::{
    ApprovalMode, ChatMessage, EventKind, PermissionRules, Role, SessionOptions, TurnEndReason, Usage,
};

fn finished_turn(session: &mut Session, titles: bool) -> Vec<EventKind> {
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    let step = StepOutput { text: "hello".into(), usage: Usage::default(), ..StepOutput::default() };
    session.complete_step(step, vec![], PermissionRules::default()).unwrap();
    session.end(TurnEndReason::Final, titles).unwrap()
}

fn new_session() -> Session {
    Session::new(SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "mock".into(),
        dialect: "native".into(),
        options: SessionOptions { approval: ApprovalMode::Relay, ..SessionOptions::default() },
    })
}

fn title_pending(events: &[EventKind]) -> bool {
    matches!(events.last(), Some(EventKind::TurnEnded { title_pending: true, .. }))
}

#[test]
fn the_first_normal_end_makes_a_title_due_and_says_so() {
    let mut session = new_session();
    let events = finished_turn(&mut session, true);
    assert!(title_pending(&events));
    assert!(session.title_pending() && session.needs_owner());
    assert_eq!(session.status(), Status::Completed);
    assert_eq!(session.title(), None);
}

#[test]
fn without_titles_nothing_is_due() {
    let mut session = new_session();
    assert!(!title_pending(&finished_turn(&mut session, false)));
    assert!(!session.title_pending() && !session.needs_owner());
    assert!(matches!(session.set_title("x".into()), Err(Refused::Conflict(_))));
}

#[test]
fn a_due_title_is_set_once_and_later_turns_do_not_retitle() {
    let mut session = new_session();
    finished_turn(&mut session, true);
    let events = session.set_title("Greeting".into()).unwrap();
    assert_eq!(events, [EventKind::TitleUpdated { title: "Greeting".into() }]);
    assert_eq!(session.title(), Some("Greeting"));
    assert!(!session.title_pending() && !session.needs_owner());
    assert!(matches!(session.set_title("Again".into()), Err(Refused::Conflict(_))));
    assert!(!title_pending(&finished_turn(&mut session, true)), "a titled session is never retitled");
    assert_eq!(session.title(), Some("Greeting"));
}

#[test]
fn a_title_must_have_a_titles_shape() {
    let mut session = new_session();
    finished_turn(&mut session, true);
    for bad in ["", " padded", "two\nlines", &"x".repeat(61)] {
        assert!(matches!(session.set_title(bad.to_string()), Err(Refused::Invalid(_))), "{bad:?}");
    }
    assert!(session.title_pending());
}

#[test]
fn a_due_title_survives_a_turn_that_interrupts_it_and_is_announced_at_its_end() {
    let mut session = new_session();
    finished_turn(&mut session, true);
    session.start_turn(ChatMessage::text(Role::User, "more"), None).unwrap();
    let events = session.fail(crate::domain::FailureCode::UpstreamError, "boom", None).unwrap();
    assert!(title_pending(&events), "the failed turn's end says the due title comes");
    assert!(session.title_pending());
}

#[test]
fn a_session_whose_title_is_due_is_taken_over_and_one_without_is_not() {
    let mut session = new_session();
    finished_turn(&mut session, true);
    let events = session.take_over("b", StepRestart::Nothing, &|_| true).unwrap();
    assert!(events.is_empty());
    session.set_title("Greeting".into()).unwrap();
    assert!(matches!(session.take_over("b", StepRestart::Nothing, &|_| true), Err(Refused::Conflict(_))));
}

#[test]
fn the_title_is_kept_in_the_state_document() {
    let mut session = new_session();
    finished_turn(&mut session, true);
    let due: Session = serde_json::from_str(&serde_json::to_string(&session).unwrap()).unwrap();
    assert!(due.title_pending());
    session.set_title("Greeting".into()).unwrap();
    let titled: Session = serde_json::from_str(&serde_json::to_string(&session).unwrap()).unwrap();
    assert_eq!((titled.title(), titled.title_pending()), (Some("Greeting"), false));
}
