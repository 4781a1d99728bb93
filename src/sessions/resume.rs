//! Finding the paused conversation a resume answers, for dialects whose
//! clients hold the conversation and may not send a session id (HolmesGPT
//! clients resume by sending back `conversation_history`, or a history
//! they rebuilt themselves, with `tool_decisions` / `frontend_tool_results`).
//!
//! When a turn pauses, the dialect layer calls [`Sessions::index_pause`]
//! with the conversation it is about to hand out and the pending calls, and
//! hints are written to the store's relay index (an id → session map with
//! the session's TTL), each scoped to the tenant and subject by a digest:
//!
//! - `call:<sha256 of a pending tool call id>` — finds the pause by the
//!   calls a resume answers, whatever history the client sends;
//! - `hist:<sha256 of the whole history>` — finds the exact pause;
//! - `hist:<sha256 of the history before its last assistant message>` (the
//!   message that holds the pending calls) — finds the session a history
//!   was *edited* from, so an edit of the pending calls is a 409 that says
//!   so rather than a 404.
//!
//! A resume is matched by `session_id` when it has one, else by the calls
//! it answers, else by its history ([`Sessions::find_paused`]). The hints
//! are derived, repairable data, never a second source of truth: whatever
//! matched is loaded and checked (paused, visible to the caller, holding
//! the calls). Tool names, arguments and which calls are pending always
//! come from the store; a history sent with a resume only has to agree with
//! the stored pending calls (a changed name or argument is a conflict and
//! nothing runs), and is otherwise not used. This module owns no dialect:
//! it works on canonical [`ChatMessage`]s.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{SessionError, Sessions};
use crate::{
    domain::{ChatMessage, ImagePart, Role, Session, Status},
    principal::Principal,
    store::SessionKey,
};

/// Prefix of history hints in the relay index (relay ids start `relay_`).
const HISTORY_PREFIX: &str = "hist:";
/// Prefix of pending-call hints in the relay index.
const CALL_PREFIX: &str = "call:";
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

/// What a resume names its paused conversation by; any may be absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeLookup<'a> {
    pub session_id: Option<&'a str>,
    /// The ids of the tool calls the resume answers.
    pub call_ids: &'a [&'a str],
    pub history: Option<&'a [ChatMessage]>,
}

/// Why [`Sessions::find_paused`] found nothing to resume.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The session id names no session the caller may see.
    #[error("session not found")]
    UnknownSession,
    /// No paused conversation of the caller holds these calls or this history.
    #[error("no paused conversation matches the answered tool calls or the conversation_history")]
    UnknownHistory,
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl Sessions {
    /// Indexes the pause of session `id`: the conversation as the client is
    /// about to receive it, and the ids of its pending calls, so a resume
    /// that sends either back finds the session.
    pub async fn index_pause(
        &self,
        principal: &Principal,
        id: &str,
        history: &[ChatMessage],
        pending: &[&str],
    ) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let digests = HistoryDigests::of(&principal.tenant, &principal.subject, history);
        let relays = &self.store().relays;
        relays.put_relay(&format!("{HISTORY_PREFIX}{}", digests.full), &key).await?;
        relays.put_relay(&format!("{HISTORY_PREFIX}{}", digests.prefix), &key).await?;
        for call in pending {
            relays.put_relay(&call_hint(&principal.tenant, &principal.subject, call), &key).await?;
        }
        Ok(())
    }

    /// The paused session a resume is meant for (see the module docs). The
    /// session must be paused for the client (conflict otherwise), and a
    /// sent history must agree with its pending calls (conflict otherwise).
    pub async fn find_paused(&self, principal: &Principal, lookup: ResumeLookup<'_>) -> Result<Session, FindError> {
        let session = match lookup.session_id {
            Some(id) => self.visible(principal, id).await?,
            None => match self.by_calls(principal, lookup.call_ids).await? {
                Some(session) => session,
                None => match lookup.history {
                    Some(history) => self.by_history(principal, history).await?.ok_or(FindError::UnknownHistory)?,
                    None => return Err(FindError::UnknownHistory),
                },
            },
        };
        if session.status() != Status::AwaitingClient {
            return Err(SessionError::Conflict(format!(
                "the conversation is {}, not waiting for tool decisions or results",
                session.status().as_str()
            ))
            .into());
        }
        if let Some(history) = lookup.history {
            check_pending_calls(&session, history)?;
        }
        Ok(session)
    }

    /// The session `id` as the caller may see it, for a new turn on it.
    pub async fn find_for_turn(&self, principal: &Principal, id: &str) -> Result<Session, FindError> {
        self.visible(principal, id).await
    }

    async fn visible(&self, principal: &Principal, id: &str) -> Result<Session, FindError> {
        match self.get_with_history(principal, id).await {
            Ok(view) => Ok(view.session),
            Err(SessionError::NotFound) => Err(FindError::UnknownSession),
            Err(e) => Err(e.into()),
        }
    }

    /// The paused session of the caller that holds one of `calls` pending.
    async fn by_calls(&self, principal: &Principal, calls: &[&str]) -> Result<Option<Session>, SessionError> {
        for call in calls {
            let hint = call_hint(&principal.tenant, &principal.subject, call);
            let Some(key) = self.indexed(principal, &hint).await? else { continue };
            match self.load_visible(principal, &key, true).await {
                // A hint outlives its pause (the session went on): checked.
                Ok((_, session)) if session.status() == Status::AwaitingClient && is_pending(&session, call) => {
                    return Ok(Some(session));
                }
                Ok(_) | Err(SessionError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// The session whose pause handed out `history` (or the one it was
    /// edited from).
    async fn by_history(
        &self,
        principal: &Principal,
        history: &[ChatMessage],
    ) -> Result<Option<Session>, SessionError> {
        let digests = HistoryDigests::of(&principal.tenant, &principal.subject, history);
        let hint = |digest: &str| format!("{HISTORY_PREFIX}{digest}");
        let key = match self.indexed(principal, &hint(&digests.full)).await? {
            Some(key) => key,
            None => match self.indexed(principal, &hint(&digests.prefix)).await? {
                Some(key) => key,
                None => return Ok(None),
            },
        };
        match self.load_visible(principal, &key, true).await {
            Ok((_, session)) => Ok(Some(session)),
            Err(SessionError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The session a hint names, if it is the caller's tenant's.
    async fn indexed(&self, principal: &Principal, hint: &str) -> Result<Option<SessionKey>, SessionError> {
        Ok(self.store().relays.get_relay(&principal.tenant, hint).await?)
    }
}

fn is_pending(session: &Session, call: &str) -> bool {
    session.call(call).is_some_and(|c| c.result().is_none())
}

/// The relay index ids that name `session` for its current turn's calls:
/// their relay ids and the resume hints of its pending calls (what a delete
/// removes; its history hints cannot be derived and expire with the TTL).
pub(super) fn index_ids(session: &Session) -> Vec<String> {
    let mut ids = Vec::new();
    for planned in session.calls() {
        if let crate::domain::CallPlan::Ask { relay_id } = planned.plan() {
            ids.push(relay_id.clone());
        }
        ids.push(call_hint(session.tenant(), session.subject(), &planned.call().id));
    }
    ids
}

/// The index id of a pending call, scoped to its tenant and subject.
fn call_hint(tenant: &str, subject: &str, call: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [DIGEST_DOMAIN, "call", tenant, subject, call] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    format!("{CALL_PREFIX}{}", hex::encode(hasher.finalize()))
}

/// A history sent with a resume may be the client's own rebuild; what it
/// must not do is change a pending call (its name or arguments), since the
/// stored call is what runs.
fn check_pending_calls(session: &Session, history: &[ChatMessage]) -> Result<(), SessionError> {
    let sent = history.iter().flat_map(|m| m.tool_calls.iter());
    for call in sent {
        let Some(stored) = session.call(&call.id).filter(|c| c.result().is_none()).map(|c| c.call()) else {
            continue;
        };
        let what = if stored.name != call.name {
            "its tool name differs"
        } else if canonical_arguments(&stored.arguments) != canonical_arguments(&call.arguments) {
            "its arguments differ"
        } else {
            continue;
        };
        return Err(SessionError::Conflict(format!(
            "conversation_history does not match the stored pending call {:?} of session {} ({what}); calls run as \
             stored: send them back unchanged, as the last event gave them",
            call.id,
            session.id(),
        )));
    }
    Ok(())
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
