//! Conversations that clients hold and send back: finding the paused
//! session a history belongs to. (HolmesGPT clients resume a paused turn by
//! sending its `conversation_history` back, with no session id.)
//!
//! How a history finds its session: when a turn pauses, the dialect layer
//! calls [`Sessions::index_history`] with the conversation it is about to
//! send, and two digests of it are written to the store's relay index (an
//! id → session map with the session's TTL; a dedicated index would add a
//! store trait method for the same thing):
//!
//! - `hist:<sha256 of the whole history>`, which finds the exact pause;
//! - `hist:<sha256 of the history before its last assistant message>` (the
//!   message that holds the pending tool calls), which finds the session a
//!   history was *edited* from, so an edit is answered with a 409 that says
//!   so rather than a 404.
//!
//! Both digests are scoped to the tenant and subject. Two conversations of
//! one user may share a prefix (the same first question): the prefix entry
//! then names the later one, which only changes which session an edited
//! history is refused against. Whatever matched, the history is then
//! compared with the stored conversation: a history that is not exactly the
//! stored one (an argument changed, a message added) is a conflict and
//! nothing runs. Tool names, arguments and which calls are pending always
//! come from the store. This module owns no dialect: it works on canonical
//! [`ChatMessage`]s.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{SessionError, Sessions};
use crate::{
    auth::Principal,
    domain::{ChatMessage, ImagePart, Role, Session, Status},
    store::SessionKey,
};

/// Prefix of history ids in the relay index (relay ids start `relay_`).
const INDEX_PREFIX: &str = "hist:";
/// Versions the digest input, so a change of the canonical form cannot
/// match digests written by an older build.
const DIGEST_DOMAIN: &str = "switchboard/history/v1";

/// The two digests of a history (hex SHA-256), scoped to one tenant and
/// subject.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HistoryDigests {
    /// Everything before the last assistant message.
    prefix: String,
    full: String,
}

impl HistoryDigests {
    fn of(tenant: &str, subject: &str, messages: &[ChatMessage]) -> Self {
        let cut = messages.iter().rposition(|m| m.role == Role::Assistant).unwrap_or(messages.len());
        Self {
            prefix: digest("prefix", tenant, subject, &messages[..cut]),
            full: digest("full", tenant, subject, messages),
        }
    }
}

/// Why [`Sessions::find_paused`] found nothing to resume.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The session id names no session the caller may see.
    #[error("session not found")]
    UnknownSession,
    /// No paused conversation of the caller has this history.
    #[error("no paused conversation matches this conversation_history")]
    UnknownHistory,
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl Sessions {
    /// Indexes the conversation of the paused session `id`, as the client is
    /// about to receive it, so a resume that sends it back finds the session.
    pub async fn index_history(
        &self,
        principal: &Principal,
        id: &str,
        history: &[ChatMessage],
    ) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let digests = HistoryDigests::of(&principal.tenant, &principal.subject, history);
        let relays = &self.store().relays;
        relays.put_relay(&format!("{INDEX_PREFIX}{}", digests.full), &key).await?;
        relays.put_relay(&format!("{INDEX_PREFIX}{}", digests.prefix), &key).await?;
        Ok(())
    }

    /// The paused session a resume is meant for: by `session_id` when the
    /// client sends one, else by the digests of `history`. When a history is
    /// sent it must be exactly the stored conversation (conflict otherwise);
    /// the session must be paused for the client (conflict otherwise).
    pub async fn find_paused(
        &self,
        principal: &Principal,
        session_id: Option<&str>,
        history: Option<&[ChatMessage]>,
    ) -> Result<Session, FindError> {
        let session = match (session_id, history) {
            (Some(id), _) => self.visible(principal, id).await?,
            (None, Some(history)) => {
                let digests = HistoryDigests::of(&principal.tenant, &principal.subject, history);
                let key = match self.indexed(principal, &digests.full).await? {
                    Some(key) => key,
                    None => self.indexed(principal, &digests.prefix).await?.ok_or(FindError::UnknownHistory)?,
                };
                match self.load_visible(principal, &key, true).await {
                    Ok((_, session)) => session,
                    Err(SessionError::NotFound) => return Err(FindError::UnknownHistory),
                    Err(e) => return Err(e.into()),
                }
            }
            (None, None) => {
                return Err(SessionError::Invalid(
                    "a resume needs the session_id or the conversation_history of the paused conversation".into(),
                )
                .into());
            }
        };
        if session.status() != Status::AwaitingClient {
            return Err(SessionError::Conflict(format!(
                "the conversation is {}, not waiting for tool decisions or results",
                session.status().as_str()
            ))
            .into());
        }
        if let Some(history) = history {
            check_matches(principal, &session, history)?;
        }
        Ok(session)
    }

    /// The session `id` as the caller may see it, for a new turn on it; a
    /// sent `history` must be exactly its stored conversation.
    pub async fn find_for_turn(
        &self,
        principal: &Principal,
        id: &str,
        history: Option<&[ChatMessage]>,
    ) -> Result<Session, FindError> {
        let session = self.visible(principal, id).await?;
        if let Some(history) = history {
            check_matches(principal, &session, history)?;
        }
        Ok(session)
    }

    async fn visible(&self, principal: &Principal, id: &str) -> Result<Session, FindError> {
        match self.get_with_history(principal, id).await {
            Ok(view) => Ok(view.session),
            Err(SessionError::NotFound) => Err(FindError::UnknownSession),
            Err(e) => Err(e.into()),
        }
    }

    /// The session a digest was indexed for, if it is the caller's tenant's.
    async fn indexed(&self, principal: &Principal, digest: &str) -> Result<Option<SessionKey>, SessionError> {
        let key = self.store().relays.get_relay(&format!("{INDEX_PREFIX}{digest}")).await?;
        Ok(key.filter(|key| *key.tenant == *principal.tenant))
    }
}

fn check_matches(principal: &Principal, session: &Session, history: &[ChatMessage]) -> Result<(), SessionError> {
    let stored_messages = session.history().unwrap_or_default();
    let sent = HistoryDigests::of(&principal.tenant, &principal.subject, history);
    let stored = HistoryDigests::of(&principal.tenant, &principal.subject, stored_messages);
    if sent.full == stored.full {
        return Ok(());
    }
    Err(SessionError::Conflict(format!(
        "conversation_history does not match the stored conversation of session {} ({} messages sent, {} stored{}); \
         send it back unchanged, as the last event gave it",
        session.id(),
        history.len(),
        stored_messages.len(),
        if sent.prefix == stored.prefix { "; the last assistant message differs" } else { "" },
    )))
}

/// One message as digested: what the model sees, with tool-call arguments
/// re-serialized so insignificant whitespace does not count as an edit.
#[derive(Serialize)]
struct Canonical<'a> {
    role: Role,
    content: Option<&'a str>,
    images: &'a [ImagePart],
    tool_calls: Vec<(&'a str, &'a str, String)>,
    tool_call_id: Option<&'a str>,
}

fn digest(kind: &str, tenant: &str, subject: &str, messages: &[ChatMessage]) -> String {
    let canonical: Vec<Canonical<'_>> = messages
        .iter()
        .map(|m| Canonical {
            role: m.role,
            content: m.content.as_deref(),
            images: &m.images,
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str(), canonical_arguments(&c.arguments)))
                .collect(),
            tool_call_id: m.tool_call_id.as_deref(),
        })
        .collect();
    let mut hasher = Sha256::new();
    for part in [DIGEST_DOMAIN, kind, tenant, subject] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    // Serializing plain structs and strings cannot fail.
    hasher.update(serde_json::to_vec(&canonical).unwrap_or_default());
    hex::encode(hasher.finalize())
}

fn canonical_arguments(arguments: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value) => value.to_string(),
        Err(_) => arguments.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ToolCall;

    fn history(arguments: &str) -> Vec<ChatMessage> {
        let mut assistant = ChatMessage::text(Role::Assistant, "");
        assistant.content = None;
        assistant.tool_calls = vec![ToolCall { id: "c1".into(), name: "refund".into(), arguments: arguments.into() }];
        vec![ChatMessage::text(Role::System, "sys"), ChatMessage::text(Role::User, "refund 9"), assistant]
    }

    #[test]
    fn an_edited_argument_changes_the_full_digest_but_not_the_prefix() {
        let original = HistoryDigests::of("acme", "alice", &history(r#"{"order":"9"}"#));
        let spaced = HistoryDigests::of("acme", "alice", &history(r#"{ "order": "9" }"#));
        let edited = HistoryDigests::of("acme", "alice", &history(r#"{"order":"10"}"#));
        assert_eq!(original, spaced, "whitespace in arguments is not an edit");
        assert_eq!(original.prefix, edited.prefix);
        assert_ne!(original.full, edited.full);
    }

    #[test]
    fn digests_are_scoped_to_tenant_and_subject() {
        let messages = history("{}");
        let alice = HistoryDigests::of("acme", "alice", &messages);
        assert_ne!(alice, HistoryDigests::of("globex", "alice", &messages));
        assert_ne!(alice, HistoryDigests::of("acme", "bob", &messages));
    }
}
