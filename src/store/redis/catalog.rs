//! The catalog in Redis: one sorted set per subject,
//! `{prefix}{t:<tenant>}:subj:<subject>:sessions`, and one per tenant,
//! `{prefix}{t:<tenant>}:sessions`, whose members are list positions
//! (`<created ms, 16 digits>:<id>`, all with score 0, so `ZRANGE … BYLEX
//! REV` pages them newest first from a cursor). Both are in the tenant's
//! slot, not the session's: a create's entries are `ZADD`ed in the pipeline
//! of its commit (`sessions.rs`), a hint the listing checks and prunes (see
//! `store::Catalog`). No `SCAN` or `KEYS`: a page is one `ZRANGE` and one
//! pipeline of `HGET <state> doc`.
//!
//! A delete is `lua/delete.lua` over the session's keys, then, once it
//! deleted, one pipeline removing the list entries, relay index ids and the
//! owner's owned-set entry (hints all, as the sweep re-checks what it finds).

use async_trait::async_trait;

use super::{RedisStore, map_err};
use crate::store::{Catalog, Deleted, Deletion, ListPosition, ListScope, Listed, SessionKey, StoreError};

impl RedisStore {
    /// The sorted set of `scope`.
    pub(super) fn list_key(&self, scope: &ListScope) -> String {
        let prefix = &self.keys.prefix;
        match scope {
            ListScope::Subject { tenant, subject } => format!("{prefix}{{t:{tenant}}}:subj:{subject}:sessions"),
            ListScope::Tenant(tenant) => format!("{prefix}{{t:{tenant}}}:sessions"),
        }
    }
}

#[async_trait]
impl Catalog for RedisStore {
    async fn list(
        &self,
        scope: &ListScope,
        before: Option<&ListPosition>,
        limit: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        let mut conn = self.connection();
        let max = before.map_or_else(|| "+".to_string(), |p| format!("({}", p.to_member()));
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.list_key(scope))
            .arg(max)
            .arg("-")
            .arg("BYLEX")
            .arg("REV")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.min(i64::MAX as usize))
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        // A member this code did not write is no position: skipped here,
        // like an entry whose session is gone.
        let positions: Vec<ListPosition> = members.iter().filter_map(|m| ListPosition::from_member(m)).collect();
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for position in &positions {
            let key = SessionKey::new(scope.tenant(), position.id.as_str());
            pipe.cmd("HGET").arg(self.keys.state(&key)).arg("doc");
        }
        let docs: Vec<Option<String>> = pipe.query_async(&mut conn).await.map_err(map_err)?;
        Ok(positions.into_iter().zip(docs).map(|(position, doc)| Listed { position, doc }).collect())
    }

    async fn unlist(&self, scope: &ListScope, positions: &[ListPosition]) -> Result<(), StoreError> {
        if positions.is_empty() {
            return Ok(());
        }
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(self.list_key(scope));
        for position in positions {
            zrem.arg(position.to_member());
        }
        zrem.query_async::<i64>(&mut self.connection()).await.map(drop).map_err(map_err)
    }

    async fn delete(&self, key: &SessionKey, deletion: &Deletion) -> Result<Deleted, StoreError> {
        let mut conn = self.connection();
        let answer: String = self
            .scripts
            .delete
            .key(self.keys.state(key))
            .key(self.keys.messages(key))
            .key(self.keys.events(key))
            .key(self.keys.manifest(key))
            .key(self.keys.blobs(key))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        match answer.as_str() {
            "deleted" => {}
            "missing" => return Ok(Deleted::Missing),
            status => return Ok(Deleted::Running(status.to_string())),
        }
        // The session is gone: what is left are hints, removed now (or
        // pruned by the next listing, should this fail).
        let member = ListPosition { created_ms: deletion.listing.created_ms, id: key.id.to_string() }.to_member();
        let mut pipe = redis::pipe();
        for scope in deletion.listing.scopes(&key.tenant) {
            pipe.cmd("ZREM").arg(self.list_key(&scope)).arg(&member).ignore();
        }
        for relay_id in &deletion.relay_ids {
            pipe.cmd("DEL").arg(self.keys.relay(relay_id)).ignore();
        }
        if let Some(owner) = &deletion.owner {
            pipe.cmd("SREM").arg(self.keys.owned(owner)).arg(key.to_member()).ignore();
        }
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            tracing::warn!(session = %key.id, error = %map_err(e), "session deleted; its list entries are pruned later");
        }
        Ok(Deleted::Deleted)
    }
}
