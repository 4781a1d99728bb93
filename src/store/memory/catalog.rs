//! The catalog in memory: the lists as ordered sets of positions, entries
//! added by the creating commit under the store's one lock (so here they
//! never name a session that was not created), and deletes.

use async_trait::async_trait;

use super::{Inner, MemoryStore};
use crate::store::{Catalog, Deleted, Deletion, ListPosition, ListScope, Listed, Listing, SessionKey, StoreError};

impl MemoryStore {
    /// Adds `key`'s entries (under the lock, with its creating commit).
    pub(super) fn list_entry(&self, inner: &mut Inner, key: &SessionKey, listing: &Listing) {
        let position = ListPosition { created_ms: listing.created_ms, id: key.id.to_string() };
        for scope in listing.scopes(&key.tenant) {
            inner.lists.entry(scope).or_default().insert(position.clone());
        }
    }
}

#[async_trait]
impl Catalog for MemoryStore {
    async fn list(
        &self,
        scope: &ListScope,
        before: Option<&ListPosition>,
        limit: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        let inner = self.lock();
        let Some(list) = inner.lists.get(scope) else { return Ok(Vec::new()) };
        let newest_first: Box<dyn Iterator<Item = &ListPosition>> = match before {
            Some(before) => Box::new(list.range(..before).rev()),
            None => Box::new(list.iter().rev()),
        };
        Ok(newest_first
            .take(limit)
            .map(|position| {
                let key = SessionKey::new(scope.tenant(), position.id.as_str());
                let doc = inner.sessions.get(&key).map(|s| s.doc.clone());
                Listed { position: position.clone(), doc }
            })
            .collect())
    }

    async fn unlist(&self, scope: &ListScope, positions: &[ListPosition]) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(list) = inner.lists.get_mut(scope) {
            for position in positions {
                list.remove(position);
            }
            if list.is_empty() {
                inner.lists.remove(scope);
            }
        }
        Ok(())
    }

    async fn delete(&self, key: &SessionKey, deletion: &Deletion) -> Result<Deleted, StoreError> {
        let mut inner = self.lock();
        match inner.sessions.get(key).map(|s| s.status.clone()) {
            None => return Ok(Deleted::Missing),
            Some(status) if crate::store::is_active(&status) => {
                return Ok(Deleted::Running(status));
            }
            Some(_) => {}
        }
        inner.sessions.remove(key);
        inner.followers.remove(key);
        let position = ListPosition { created_ms: deletion.listing.created_ms, id: key.id.to_string() };
        for scope in deletion.listing.scopes(&key.tenant) {
            if let Some(list) = inner.lists.get_mut(&scope) {
                list.remove(&position);
                if list.is_empty() {
                    inner.lists.remove(&scope);
                }
            }
        }
        for relay_id in &deletion.relay_ids {
            let entry = (key.tenant.clone(), relay_id.clone());
            if inner.relays.get(&entry) == Some(key) {
                inner.relays.remove(&entry);
            }
        }
        if let Some(owned) = deletion.owner.as_ref().and_then(|owner| inner.owned.get_mut(owner)) {
            owned.remove(key);
        }
        Ok(Deleted::Deleted)
    }
}
