//! Helpers for the encoders' unit tests: events as the log hands them out,
//! a stored session for `finish` (and AG-UI's restart), and the events of a
//! turn taken over mid-step.

use serde_json::{Value, json};

use super::{AgentRef, EventKind, Frame, LogEvent};
use crate::domain::{ChatMessage, Event, Session, TurnEndReason, Usage};

pub fn main_agent() -> AgentRef {
    AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
}

/// Event `seq` of session `s1`, by the main agent.
pub fn event(seq: u64, kind: EventKind) -> LogEvent {
    LogEvent { seq, session_id: "s1".into(), event: Event { kind, agent: main_agent(), ts: 1 } }
}

/// Event `seq` of session `s1`, by a subagent of the main agent's call `c9`.
pub fn subagent_event(seq: u64, kind: EventKind) -> LogEvent {
    let agent = AgentRef { agent_id: "sub1".into(), parent_id: Some("c9".into()), depth: 1 };
    LogEvent { seq, session_id: "s1".into(), event: Event { kind, agent, ts: 1 } }
}

pub fn usage(input_tokens: u64, output_tokens: u64) -> Usage {
    Usage { input_tokens, output_tokens, cache_read_tokens: 0, cache_write_tokens: 0 }
}

/// Session `s1` on `model`, as stored after a turn, with an empty
/// conversation.
pub fn doc(model: &str) -> Session {
    doc_at(model, 1, Vec::new())
}

/// Session `s1` on `model`, as stored after turn `turn`, with `history`.
pub fn doc_at(model: &str, turn: u32, history: Vec<ChatMessage>) -> Session {
    let session: Session = serde_json::from_value(json!({
        "id": "s1", "tenant": "acme", "subject": "alice", "status": "completed",
        "model": model, "dialect": "native", "created_ms": 1, "updated_ms": 2, "turn": turn,
        "usage": {"input_tokens": 0, "output_tokens": 0}, "options": {},
    }))
    .expect("a valid session document");
    session.restored(history.len(), Some(history))
}

/// What the turn of [`restarted_turn`] answers.
pub const RESTARTED_ANSWER: &str = "w1 w2 w3";

/// Turn `turn`, taken over mid-step: its first model call streamed
/// "w1 w2 " and was cut (event 4 is the `step_restarted`), then was
/// generated again whole.
pub fn restarted_turn(turn: u32) -> Vec<EventKind> {
    let delta = |text: &str| EventKind::TextDelta { text: text.into() };
    vec![
        EventKind::TurnStarted { turn, model: "m".into() },
        delta("w1 "),
        delta("w2 "),
        EventKind::StepRestarted { step: 1, replica: "b".into() },
        delta("w1 "),
        delta("w2 "),
        delta("w3"),
        EventKind::MessageCompleted { content: Some(RESTARTED_ANSWER.into()), reasoning: None },
        EventKind::Usage { usage: usage(10, 3), total: usage(10, 3) },
        EventKind::TurnEnded { reason: TurnEndReason::Final, iterations: 1, usage: usage(10, 3), title_pending: false },
    ]
}

pub fn data(frame: &Frame) -> Value {
    serde_json::from_str(&frame.data).expect("JSON data")
}

/// Every frame's data, in order.
pub fn all_data(frames: &[Frame]) -> Vec<Value> {
    frames.iter().map(data).collect()
}

/// The `type` of each frame's data, in order.
pub fn types(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| data(f)["type"].as_str().unwrap_or_default().to_string()).collect()
}
