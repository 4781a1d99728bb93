//! Sessions that start from a conversation the client holds: dialects whose
//! every request carries the whole history (llm-gateway's `POST /chat`, new
//! AI SDK and AG-UI chats) get a fresh session seeded with the earlier
//! messages, and its first turn starts with the last one — one commit that
//! creates the session, takes it and logs `turn_started`.
//!
//! The seeded history is context for the model only: the session's pending
//! calls and relays still come from the store, never from the client.

use super::{NewSession, SessionError, Sessions, Started, commit::Basis};
use crate::{
    domain::{ChatMessage, RunInput, Session},
    principal::Principal,
    store::SessionKey,
};

impl Sessions {
    /// Creates a session owned by `principal` whose conversation is
    /// `history`, and starts its first turn with `message` on this replica.
    /// Returns the turn (with the new session's id).
    pub async fn start_conversation(
        &self,
        principal: &Principal,
        new: NewSession,
        history: Vec<ChatMessage>,
        message: ChatMessage,
    ) -> Result<Started, SessionError> {
        self.start_conversation_run(principal, new, history, message, None).await
    }

    /// [`Sessions::start_conversation`] for a client that declares its run
    /// (AG-UI): `run` begins on the new session (its tools, context and
    /// state) in the same commit, its events after the start's.
    pub async fn start_conversation_run(
        &self,
        principal: &Principal,
        new: NewSession,
        history: Vec<ChatMessage>,
        message: ChatMessage,
        run: Option<RunInput>,
    ) -> Result<Started, SessionError> {
        let (mut session, basis) = self.seeded(principal, new, history)?;
        let declared = match run {
            Some(run) => session.begin_run(run)?,
            None => Vec::new(),
        };
        let mut events = session.start_turn(message, self.request_trace())?;
        events.extend(declared);
        let key = SessionKey::new(principal.tenant.clone(), session.id());
        self.activate(&key, basis, session, events, None).await
    }

    /// A new session of `principal`'s whose conversation is `history`, and
    /// what its start is committed on (the session is new; its id made here
    /// unless the client chose it).
    fn seeded(
        &self,
        principal: &Principal,
        new: NewSession,
        history: Vec<ChatMessage>,
    ) -> Result<(Session, Basis<'static>), SessionError> {
        let basis = Basis::New { id_made_here: new.id.is_none() };
        let mut session = Session::new(self.spec(principal, new));
        tracing::Span::current().record(crate::telemetry::attributes::SESSION_ID, session.id());
        session.seed(history)?;
        Ok((session, basis))
    }

    /// Like [`Sessions::start_conversation`], without a new message: the
    /// model answers `history` as it stands (it ends with tool results or a
    /// user message).
    pub async fn start_conversation_on_history(
        &self,
        principal: &Principal,
        new: NewSession,
        history: Vec<ChatMessage>,
    ) -> Result<Started, SessionError> {
        let (mut session, basis) = self.seeded(principal, new, history)?;
        let events = session.start_turn_on_history(self.request_trace())?;
        let key = SessionKey::new(principal.tenant.clone(), session.id());
        self.activate(&key, basis, session, events, None).await
    }
}
