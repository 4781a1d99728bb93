//! The chat transitions, allowed and refused.

use super::super::{ConversationChange, Refused, Session, SessionSpec, Status};
use crate::domain::{
    ApprovalMode, CallDecision, ChatMessage, EventKind, FailureCode, FrontendTool, PermissionRules, Role,
    SessionOptions, StepOutput, ToolCall, ToolOutcome, TurnEndReason, Usage, options::MAX_LEARNED_TOOLS,
};

fn new_session() -> Session {
    Session::new(SessionSpec {
        id: "s1".into(),
        tenant: "acme".into(),
        subject: "alice".into(),
        model: "mock".into(),
        dialect: "ai-sdk".into(),
        options: SessionOptions { approval: ApprovalMode::Pause, ..SessionOptions::default() },
    })
}

fn step(text: &str, calls: Vec<ToolCall>) -> StepOutput {
    StepOutput {
        text: text.into(),
        calls,
        usage: Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() },
        ..StepOutput::default()
    }
}

fn lookup(id: &str) -> ToolCall {
    ToolCall { id: id.into(), name: "lookup".into(), arguments: "{}".into() }
}

/// A session whose one turn ("first?") called a tool and answered, saved
/// as a commit leaves it.
fn answered() -> Session {
    let mut session = new_session();
    session.start_turn(ChatMessage::text(Role::User, "first?"), None).unwrap();
    session.complete_step(step("", vec![lookup("c1")]), vec![CallDecision::Run], PermissionRules::default()).unwrap();
    session.finish_tool("c1", ToolOutcome::Success("found".into()), None, None).unwrap();
    session.complete_step(step("First.", vec![]), vec![], PermissionRules::default()).unwrap();
    session.end(TurnEndReason::Final, false).unwrap();
    session.conversation_saved();
    session
}

fn contents(session: &Session) -> Vec<(Role, Option<&str>)> {
    session.history().unwrap().iter().map(|m| (m.role, m.content.as_deref())).collect()
}

#[test]
fn regenerate_drops_the_last_answer_and_answers_its_user_message_again() {
    let mut session = answered();
    assert_eq!(session.message_count(), 4, "user, call, tool result, answer");
    let events = session.regenerate(Some("tp".into())).unwrap();
    assert_eq!(
        events,
        vec![
            EventKind::TurnStarted { turn: 2, model: "mock".into() },
            EventKind::AnswerDropped { turn: 1, messages: 3 },
        ]
    );
    assert_eq!((session.status(), session.turn(), session.iterations()), (Status::Running, 2, 0));
    assert_eq!(session.trace_parent(), Some("tp"));
    assert_eq!(contents(&session), [(Role::User, Some("first?"))]);
    assert!(
        matches!(session.conversation_change(), ConversationChange::Replace(m) if m.len() == 1),
        "the conversation is rewritten, as compaction rewrites it"
    );
    session.conversation_saved();
    assert_eq!((session.message_count(), session.conversation_change()), (1, ConversationChange::Unchanged));
}

#[test]
fn regenerate_drops_only_the_last_turns_answer() {
    let mut session = answered();
    session.start_turn(ChatMessage::text(Role::User, "second?"), None).unwrap();
    session.complete_step(step("Second.", vec![]), vec![], PermissionRules::default()).unwrap();
    session.end(TurnEndReason::Final, false).unwrap();
    session.conversation_saved();
    let events = session.regenerate(None).unwrap();
    assert_eq!(events[1], EventKind::AnswerDropped { turn: 2, messages: 1 });
    assert_eq!(session.turn(), 3);
    let history = contents(&session);
    assert_eq!(history.len(), 5);
    assert_eq!(history[3..], [(Role::Assistant, Some("First.")), (Role::User, Some("second?"))]);
}

#[test]
fn a_turn_that_failed_before_answering_runs_again_with_nothing_dropped() {
    let mut session = new_session();
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    session.fail(FailureCode::UpstreamError, "boom", None).unwrap();
    session.conversation_saved();
    let events = session.regenerate(None).unwrap();
    assert_eq!(events, vec![EventKind::TurnStarted { turn: 2, model: "mock".into() }]);
    assert_eq!((session.status(), session.error()), (Status::Running, None));
    assert_eq!(session.conversation_change(), ConversationChange::Unchanged);
}

#[test]
fn regenerate_is_refused_while_a_turn_runs_or_waits_and_changes_nothing() {
    let mut running = new_session();
    running.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    let before = running.clone();
    assert!(matches!(running.regenerate(None), Err(Refused::Conflict(_))));
    assert_eq!(running, before);

    let mut paused = new_session();
    paused.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    paused.complete_step(step("", vec![lookup("c1")]), vec![CallDecision::Client], PermissionRules::default()).unwrap();
    paused.pause().unwrap();
    let before = paused.clone();
    assert!(matches!(paused.regenerate(None), Err(Refused::Conflict(_))));
    assert_eq!(paused, before);
}

#[test]
fn regenerate_is_refused_with_nothing_to_regenerate_or_without_the_history() {
    let mut idle = new_session();
    assert!(matches!(idle.regenerate(None), Err(Refused::Invalid(_))), "no turn yet");
    assert_eq!((idle.status(), idle.turn()), (Status::Idle, 0));

    let stored: Session = serde_json::from_str(&serde_json::to_string(&answered()).unwrap()).unwrap();
    let mut partial = stored.restored(4, None);
    assert!(matches!(partial.regenerate(None), Err(Refused::Conflict(_))), "a rewrite needs the history");
    assert_eq!(partial.status(), Status::Completed);
}

#[test]
fn the_clients_tools_are_learned_between_turns_once_each_and_within_the_bound() {
    let mut session = answered();
    let names = ["render_chart".to_string(), "pick_date".to_string(), "render_chart".to_string()];
    assert_eq!(session.learn_client_tools(&names), Ok(2));
    assert_eq!(session.learn_client_tools(&names), Ok(0), "known names are skipped");
    let tools = &session.options().frontend_tools;
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["render_chart", "pick_date"]);
    assert_eq!(tools[0], FrontendTool::learned("render_chart"));
    assert_eq!(tools[0].parameters, None, "any object: the client sent no schema");

    let many: Vec<String> = (0..MAX_LEARNED_TOOLS + 5).map(|i| format!("tool_{i}")).collect();
    assert_eq!(session.learn_client_tools(&many), Ok(MAX_LEARNED_TOOLS - 2));
    assert_eq!(session.options().frontend_tools.len(), MAX_LEARNED_TOOLS);
}

#[test]
fn the_clients_tools_are_not_learned_while_a_turn_runs() {
    let mut session = new_session();
    session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
    assert!(matches!(session.learn_client_tools(&["chart".to_string()]), Err(Refused::Conflict(_))));
    assert!(session.options().frontend_tools.is_empty());
}
