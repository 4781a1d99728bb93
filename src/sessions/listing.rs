//! Listing a caller's sessions and deleting one.
//!
//! A list is read from the store's catalog (any replica), newest first,
//! and each entry is checked against the session it names — it must exist,
//! be of the list's tenant (and subject), and have the entry's creation
//! time — because the catalog is a hint written beside the commits; what
//! fails the check is pruned. A page's cursor is the position of its last
//! session (creation time, then id), opaque to clients: sessions created
//! later sort before every cursor, so pages never shift.
//!
//! A delete removes a session that is not running (a running one is a
//! conflict: cancel it first), with its list entries and the relay index
//! ids of its current turn. Afterwards every route answers 404 for it.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};

use super::{ADMIN_SCOPE, SessionError, Sessions, commit::decode, resume};
use crate::{
    domain::Session,
    principal::Principal,
    store::{Deleted, Deletion, ListPosition, ListScope, Listed, Record, SessionKey},
};

/// Sessions per page when the client names no limit, and the most it may.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;
/// Catalog reads per page at most: a list full of stale entries (sessions
/// expired long ago) returns a short page with a cursor rather than
/// reading on and on; the next pages go on pruning.
const READS_PER_PAGE: usize = 5;

/// What `GET /v1/sessions` asks for.
#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    pub limit: Option<usize>,
    /// A cursor from an earlier page.
    pub cursor: Option<String>,
    /// Every session of the tenant (needs the `sessions:admin` scope).
    pub all: bool,
}

/// One page, newest first, and the cursor of the next (none at the end).
#[derive(Debug)]
pub struct Page {
    pub sessions: Vec<Session>,
    pub next: Option<String>,
}

impl Sessions {
    /// A page of the sessions `principal` created (or, with `all`, of its
    /// tenant's sessions, for its admins).
    pub async fn list(&self, principal: &Principal, request: ListRequest) -> Result<Page, SessionError> {
        let limit = request.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(SessionError::Invalid(format!("limit must be between 1 and {MAX_LIMIT}")));
        }
        let scope = if request.all {
            if !principal.has_scope(ADMIN_SCOPE) {
                return Err(SessionError::Forbidden(format!("all=true needs the {ADMIN_SCOPE} scope")));
            }
            ListScope::Tenant(principal.tenant.clone())
        } else {
            ListScope::Subject { tenant: principal.tenant.clone(), subject: principal.subject.clone() }
        };
        let mut before = request.cursor.as_deref().map(decode_cursor).transpose()?;
        let (mut sessions, mut stale) = (Vec::new(), Vec::new());
        let mut next = None;
        'reads: for read in 1..=READS_PER_PAGE {
            // One more than fits: whether a next page exists.
            let batch = self.store().catalog.list(&scope, before.as_ref(), limit + 1).await?;
            let exhausted = batch.len() <= limit;
            for listed in batch {
                if sessions.len() == limit {
                    next = before.as_ref().map(encode_cursor);
                    break 'reads;
                }
                before = Some(listed.position.clone());
                match check(&scope, listed) {
                    Ok(session) => sessions.push(session),
                    Err(position) => stale.push(position),
                }
            }
            if exhausted {
                break;
            }
            if read == READS_PER_PAGE {
                next = before.as_ref().map(encode_cursor);
            }
        }
        if !stale.is_empty()
            && let Err(e) = self.store().catalog.unlist(&scope, &stale).await
        {
            tracing::warn!(error = %e, "cannot prune stale list entries; the next listing tries again");
        }
        Ok(Page { sessions, next })
    }

    /// Deletes a session that is not running, with everything the store
    /// keeps of it. A running one is a conflict (cancel it first).
    pub async fn delete(&self, principal: &Principal, id: &str) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, false).await?;
        if session.status().is_active() {
            return Err(running(session.status().as_str()));
        }
        let deletion = Deletion {
            listing: super::commit::listing(&session),
            relay_ids: relay_ids(&record, &session),
            owner: record.owner.clone(),
        };
        match self.store().catalog.delete(&key, &deletion).await? {
            Deleted::Deleted => Ok(()),
            Deleted::Missing => Err(SessionError::NotFound),
            Deleted::Running(status) => Err(running(&status)),
        }
    }
}

fn running(status: &str) -> SessionError {
    SessionError::Conflict(format!(
        "the session is {status}: cancel it first (POST /v1/sessions/{{id}}/cancel), then delete it"
    ))
}

/// The relay index ids that name the session: live relays, and its current
/// turn's relays and pending-call hints.
fn relay_ids(record: &Record, session: &Session) -> Vec<String> {
    let mut ids: Vec<String> = record.relays.iter().map(|(id, _)| id.clone()).collect();
    ids.extend(resume::index_ids(session));
    ids.sort();
    ids.dedup();
    ids
}

/// The session an entry names, if it belongs in `scope`'s list; else the
/// entry's position, to prune.
fn check(scope: &ListScope, listed: Listed) -> Result<Session, ListPosition> {
    let Some(doc) = listed.doc else { return Err(listed.position) };
    let record = Record { doc, ..Record::default() };
    let Ok(session) = decode(&record) else { return Err(listed.position) };
    let owner = match scope {
        ListScope::Subject { subject, .. } => session.subject() == subject,
        ListScope::Tenant(_) => true,
    };
    let same = session.tenant() == scope.tenant()
        && owner
        && session.id() == listed.position.id
        && session.created_ms() == listed.position.created_ms;
    if same { Ok(session) } else { Err(listed.position) }
}

fn encode_cursor(position: &ListPosition) -> String {
    URL_SAFE_NO_PAD.encode(position.to_member())
}

fn decode_cursor(cursor: &str) -> Result<ListPosition, SessionError> {
    let invalid = || SessionError::Invalid("cursor is not one this server gave out".into());
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let member = String::from_utf8(bytes).map_err(|_| invalid())?;
    ListPosition::from_member(&member).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_an_opaque_position_and_anything_else_is_refused() {
        let position = ListPosition { created_ms: 1_700_000_000_000, id: "0190-a".into() };
        let cursor = encode_cursor(&position);
        assert!(!cursor.contains("0190-a"), "opaque: {cursor}");
        assert_eq!(decode_cursor(&cursor).unwrap(), position);
        for bad in ["", "!!", "bm9wZQ", &URL_SAFE_NO_PAD.encode("12:x")] {
            assert!(matches!(decode_cursor(bad), Err(SessionError::Invalid(_))), "{bad:?}");
        }
    }
}
