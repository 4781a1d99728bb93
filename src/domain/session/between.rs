//! Transitions between turns, for clients that change a session's settings
//! as they go (zot's commands): another model, another reasoning level, a
//! cleared conversation, a turn that only compacts it.

use super::{Refused, Session, Status, TurnState, conflict, invalid};
use crate::domain::{
    conversation::Role,
    events::{EventKind, now_ms},
};

impl Session {
    /// A turn that only compacts the conversation into a summary (zot's
    /// `compact`), on a session that takes messages and has something to
    /// compact.
    pub fn start_compaction(&mut self, trace_parent: Option<String>) -> Result<Vec<EventKind>, Refused> {
        if !self.status.takes_messages() {
            return conflict(format!("the session is {}: it cannot compact now", self.status.as_str()));
        }
        if !self.conversation.full {
            return conflict("the history must be loaded to compact it");
        }
        if !self.conversation.messages.iter().any(|m| m.role == Role::User) {
            return invalid("there is no conversation to compact");
        }
        self.turn += 1;
        self.error = None;
        self.turn_state = TurnState { compact_only: true, ..TurnState::default() };
        self.trace_parent = trace_parent.or(self.trace_parent.take());
        self.become_(Status::Running);
        Ok(vec![EventKind::TurnStarted { turn: self.turn, model: self.model.clone() }])
    }

    /// Later turns use `model` (zot's `set_model`); only between turns.
    pub fn set_model(&mut self, model: &str) -> Result<Vec<EventKind>, Refused> {
        self.require_between_turns("change its model")?;
        self.model = model.to_string();
        self.updated_ms = now_ms();
        Ok(Vec::new())
    }

    /// Later turns think this hard (zot's `set_reasoning`); only between
    /// turns.
    pub fn set_reasoning(&mut self, level: Option<String>) -> Result<Vec<EventKind>, Refused> {
        self.require_between_turns("change its reasoning")?;
        self.options.reasoning = level;
        self.updated_ms = now_ms();
        Ok(Vec::new())
    }

    /// Drops the whole conversation (zot's `clear`); only between turns.
    /// The event log stays: it is what clients saw.
    pub fn clear(&mut self) -> Result<Vec<EventKind>, Refused> {
        self.require_between_turns("be cleared")?;
        if !self.conversation.full {
            return conflict("the history must be loaded to clear it");
        }
        self.conversation.messages.clear();
        self.conversation.rewritten = true;
        self.updated_ms = now_ms();
        Ok(Vec::new())
    }

    /// Zot's rule for runtime mutations: an idle agent only.
    fn require_between_turns(&self, what: &str) -> Result<(), Refused> {
        if self.status.takes_messages() {
            Ok(())
        } else {
            conflict(format!("agent is busy: the session is {}: it cannot {what} now", self.status.as_str()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ChatMessage, SessionOptions, SessionSpec};

    fn idle() -> Session {
        Session::new(SessionSpec {
            id: "s1".into(),
            tenant: "acme".into(),
            subject: "alice".into(),
            model: "mock".into(),
            dialect: "zot".into(),
            options: SessionOptions::default(),
        })
    }

    #[test]
    fn settings_change_between_turns_only() {
        let mut session = idle();
        assert!(session.set_model("claude").unwrap().is_empty());
        assert_eq!(session.model(), "claude");
        session.set_reasoning(Some("high".into())).unwrap();
        assert_eq!(session.options().reasoning.as_deref(), Some("high"));
        session.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
        assert!(matches!(session.set_model("mock"), Err(Refused::Conflict(_))), "not while a turn runs");
        assert!(matches!(session.clear(), Err(Refused::Conflict(_))));
        assert!(matches!(session.start_compaction(None), Err(Refused::Conflict(_))));
    }

    #[test]
    fn a_compaction_turn_needs_a_conversation_and_clear_empties_it() {
        let mut session = idle();
        assert!(matches!(session.start_compaction(None), Err(Refused::Invalid(_))), "nothing to compact");
        session.seed(vec![ChatMessage::text(Role::User, "q"), ChatMessage::text(Role::Assistant, "a")]).unwrap();
        let events = session.start_compaction(None).unwrap();
        assert!(matches!(events[..], [EventKind::TurnStarted { turn: 1, .. }]));
        assert!(session.compacting_only());
        assert_eq!(session.status(), Status::Running);
        let mut cleared = idle();
        cleared.seed(vec![ChatMessage::text(Role::User, "q")]).unwrap();
        cleared.clear().unwrap();
        assert_eq!(cleared.history().map(<[ChatMessage]>::len), Some(0));
    }
}
