//! Sessions that start from a conversation the client holds: dialects whose
//! every request carries the whole history (llm-gateway's `POST /chat`)
//! get a fresh session seeded with the earlier messages, and its first turn
//! starts with the last one.
//!
//! The seeded history is context for the model only: the session's pending
//! calls and relays still come from the store, never from the client.

use super::{NewSession, SessionError, Sessions};
use crate::{auth::Principal, protocol::EventKind, providers::ChatMessage, store::SessionKey};

impl Sessions {
    /// Creates a session owned by `principal` whose conversation is
    /// `history`, and starts its first turn with `message` on this replica.
    /// Returns the session id and the cursor before the turn's events.
    pub async fn start_conversation(
        &self,
        principal: &Principal,
        new: NewSession,
        history: Vec<ChatMessage>,
        message: ChatMessage,
    ) -> Result<(String, u64), SessionError> {
        let created = self.create(principal, new).await?;
        let key = SessionKey::new(principal.tenant.clone(), created.id.as_str());
        let (version, mut doc) = self.load_visible(principal, &key).await?;
        // What `start_turn` does to an idle session, in the same write as the history.
        doc.messages = history;
        doc.messages.push(message);
        doc.turn += 1;
        let event = EventKind::TurnStarted { turn: doc.turn, model: doc.model.clone() };
        let cursor = self.activate(&key, version, doc, vec![event]).await?;
        Ok((created.id, cursor))
    }
}
