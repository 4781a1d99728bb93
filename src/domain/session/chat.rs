//! Transitions that chat clients which resend the whole conversation need
//! (the AI SDK's `useChat`): regenerating the last answer, and remembering
//! the tools the client runs that it shows in its messages but never
//! declared. Like every transition, each checks that the session may take
//! it; the sessions service commits the change with the command it comes
//! with.

use super::{Refused, Session, Status, TurnState, conflict, invalid};
use crate::domain::{conversation::Role, events::EventKind};

impl Session {
    /// The client asks for the last answer again (the AI SDK's
    /// `regenerate()`): the messages after the last user message — the last
    /// turn's assistant and tool messages — leave the conversation (a
    /// rewrite, as compaction's), and a new turn answers that user message
    /// again. A turn that failed or was cancelled before it answered has
    /// nothing to drop; it simply runs again.
    ///
    /// Refused while a turn runs or waits for the client (a conflict), and
    /// when no turn was ever started (nothing to regenerate).
    pub fn regenerate(&mut self, trace_parent: Option<String>) -> Result<Vec<EventKind>, Refused> {
        if self.status.is_active() || self.status == Status::AwaitingClient {
            return conflict(format!("the session is {}: its answer cannot be regenerated now", self.status.as_str()));
        }
        if self.turn == 0 {
            return invalid("there is no answer to regenerate: no turn has started");
        }
        if !self.conversation.full {
            return conflict("the history must be loaded to regenerate an answer");
        }
        let Some(user) = self.conversation.messages.iter().rposition(|m| m.role == Role::User) else {
            return invalid("there is no answer to regenerate: the conversation has no user message");
        };
        let dropped = self.conversation.messages.len() - (user + 1);
        let answered = self.turn;
        self.turn += 1;
        // The turn's start comes first, as every turn's stream begins.
        let mut events = vec![EventKind::TurnStarted { turn: self.turn, model: self.model.clone() }];
        if dropped > 0 {
            self.conversation.messages.truncate(user + 1);
            self.conversation.rewritten = true;
            events.push(EventKind::AnswerDropped { turn: answered, messages: dropped });
        }
        self.error = None;
        self.turn_state = TurnState::default();
        self.trace_parent = trace_parent.or(self.trace_parent.take());
        self.become_(Status::Running);
        Ok(events)
    }

    /// Remembers tools the client runs that its messages show (tool parts
    /// of tools that are no server tool), as
    /// [`crate::domain::SessionOptions::learn_client_tools`] says, so later model calls offer them. Returns how many were added.
    /// Only between turns or in a pause: it is committed with the command
    /// that starts or resumes the turn.
    pub fn learn_client_tools(&mut self, names: &[String]) -> Result<usize, Refused> {
        if self.status.is_active() {
            return conflict(format!("the session is {}: its tools cannot change now", self.status.as_str()));
        }
        Ok(self.options.learn_client_tools(names))
    }
}

#[cfg(test)]
mod tests;
