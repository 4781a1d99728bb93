//! The catalog: which sessions each subject (and each tenant) has, newest
//! first, for `GET /v1/sessions`; and deleting a session with everything
//! the store keeps of it.
//!
//! The lists are a derivable hint beside the sessions, never a second
//! truth. A session's entries are written with the commit that creates it
//! ([`Commit::listing`](super::Commit)), in the same round trip but not
//! atomically with it (on Redis the lists live in the tenant's slot, a
//! session in its own), so an entry may name a session that does not exist
//! (its create was refused, it expired, it was deleted and the process
//! stopped before the entry went). Whoever lists checks each entry against
//! the session's state document and prunes ([`Catalog::unlist`]) what does
//! not hold; expired sessions leave the lists that way.
//!
//! An entry is the session's [`ListPosition`]: creation time, then id.
//! Positions never change and new sessions sort first, so a cursor that is
//! a position keeps its place while sessions are created.

use std::sync::Arc;

use async_trait::async_trait;

use super::{SessionKey, StoreError};

/// Whose sessions a list holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListScope {
    /// One subject's sessions in a tenant.
    Subject { tenant: Arc<str>, subject: String },
    /// Every session of a tenant (its admins' list).
    Tenant(Arc<str>),
}

impl ListScope {
    pub fn tenant(&self) -> &str {
        match self {
            Self::Subject { tenant, .. } | Self::Tenant(tenant) => tenant,
        }
    }
}

/// A session's place in its lists, ordered by creation time, then id (ids
/// are unique within a tenant, so the order is total).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListPosition {
    /// Unix milliseconds (the session's `created_ms`).
    pub created_ms: u64,
    pub id: String,
}

impl ListPosition {
    /// As the lists hold it: the time zero-padded to 16 digits, so the text
    /// sorts as the position does.
    pub fn to_member(&self) -> String {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(self.created_ms);
        let mut member = String::with_capacity(17 + self.id.len());
        for _ in digits.len()..16 {
            member.push('0');
        }
        member.push_str(digits);
        member.push(':');
        member.push_str(&self.id);
        member
    }

    pub fn from_member(member: &str) -> Option<Self> {
        let (created_ms, id) = member.split_once(':')?;
        let valid = created_ms.len() == 16 && !id.is_empty();
        valid.then_some(())?;
        Some(Self { created_ms: created_ms.parse().ok()?, id: id.to_string() })
    }
}

/// The entries a creating commit adds: to its subject's list and its tenant's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub subject: String,
    pub created_ms: u64,
}

impl Listing {
    /// The lists this session is in.
    pub fn scopes(&self, tenant: &Arc<str>) -> [ListScope; 2] {
        [
            ListScope::Subject { tenant: tenant.clone(), subject: self.subject.clone() },
            ListScope::Tenant(tenant.clone()),
        ]
    }
}

/// A list entry read back, with its session's state document (`None` when
/// the session is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub position: ListPosition,
    pub doc: Option<String>,
}

/// What a delete removes besides the session's own keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// The session's list entries.
    pub listing: Listing,
    /// Ids in the relay index that name it (its relays, its resume hints).
    pub relay_ids: Vec<String>,
    /// The instance recorded as its owner (one that was making its title):
    /// its owned set forgets the session.
    pub owner: Option<String>,
}

/// What became of a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// The session and its entries are gone.
    Deleted,
    Missing,
    /// A turn runs: nothing was deleted. The session's status.
    Running(String),
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// Entries of `scope` before `before` (from the newest when `None`),
    /// newest first, at most `limit`, with their sessions' state documents.
    async fn list(
        &self,
        scope: &ListScope,
        before: Option<&ListPosition>,
        limit: usize,
    ) -> Result<Vec<Listed>, StoreError>;

    /// Removes entries from `scope`'s list (they name no session of it).
    async fn unlist(&self, scope: &ListScope, positions: &[ListPosition]) -> Result<(), StoreError>;

    /// Deletes a session whose turn does not run, atomically (its state,
    /// conversation and event log), then its list entries and
    /// `deletion.relay_ids`. A session that runs is left as it is.
    async fn delete(&self, key: &SessionKey, deletion: &Deletion) -> Result<Deleted, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_as_positions_and_read_back() {
        let older = ListPosition { created_ms: 999, id: "zz".into() };
        let newer = ListPosition { created_ms: 1000, id: "aa".into() };
        let twin = ListPosition { created_ms: 1000, id: "ab".into() };
        assert!(older < newer && newer < twin);
        assert!(older.to_member() < newer.to_member() && newer.to_member() < twin.to_member());
        assert_eq!(ListPosition::from_member(&twin.to_member()), Some(twin));
        assert_eq!(ListPosition::from_member("12:x"), None);
        assert_eq!(ListPosition::from_member("000000000000001x:x"), None);
        assert_eq!(ListPosition::from_member("0000000000000012:"), None);
        let colon = ListPosition { created_ms: 5, id: "a:b".into() };
        assert_eq!(ListPosition::from_member(&colon.to_member()), Some(colon));
        // The text stored by earlier builds, which wrote it with `format!`.
        for created_ms in [0, 7, 1_796_676_198_220, 9_999_999_999_999_999, u64::MAX] {
            let position = ListPosition { created_ms, id: "s1".into() };
            assert_eq!(position.to_member(), format!("{created_ms:016}:s1"));
        }
    }
}
