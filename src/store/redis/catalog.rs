//! The catalog in Redis: one sorted set per subject,
//! `{prefix}{t:<tenant>}:subj:<subject>:sessions`, and one per tenant,
//! `{prefix}{t:<tenant>}:sessions`, whose members are list positions
//! (`<created ms, 16 digits>:<id>`, all with score 0, so `ZRANGE … BYLEX
//! REV` pages them newest first from a cursor). Both are in the tenant's
//! slot, not the session's: a create's entries are `ZADD`ed in the pipeline
//! of its commit (`sessions.rs`), a hint the listing checks and prunes (see
//! `store::Catalog`). No `SCAN` or `KEYS`: a page is one `ZRANGE` and one
//! batch of `HGET <state> doc` (one pipeline on one Redis; on a cluster,
//! each to its session's node).
//!
//! A delete is `lua/delete.lua` over the session's keys, then, once it
//! deleted, one batch removing the list entries, relay index ids and the
//! owner's owned-set entry (hints all, as the sweep re-checks what it finds).

use async_trait::async_trait;

use super::{RedisStore, conn::Spread, map_err};
use crate::store::{Catalog, Deleted, Deletion, ListPosition, ListScope, Listed, SessionKey, StoreError};

impl RedisStore {
    /// The sorted set of `scope`.
    pub(super) fn list_key(&self, scope: &ListScope) -> String {
        let prefix = &self.keys.prefix;
        match scope {
            // Plain copies: a new chat's listing makes both.
            ListScope::Subject { tenant, subject } => {
                [&**prefix, "{t:", tenant, "}:subj:", subject, ":sessions"].concat()
            }
            ListScope::Tenant(tenant) => [&**prefix, "{t:", tenant, "}:sessions"].concat(),
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
        // Each session's state is in its own slot: one unit each.
        let mut spread = Spread::default();
        for position in &positions {
            let key = SessionKey::new(scope.tenant(), position.id.as_str());
            spread.answered().cmd("HGET").arg(self.keys.state(&key)).arg("doc");
        }
        let mut listed = Vec::with_capacity(positions.len());
        for (position, reply) in positions.into_iter().zip(self.send(&mut conn, spread).await.map_err(map_err)?) {
            let doc = reply.and_then(|value| Ok(redis::from_redis_value(value)?)).map_err(map_err)?;
            listed.push(Listed { position, doc });
        }
        Ok(listed)
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
            .key(self.keys.annex(key))
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
        let mut spread = Spread::default();
        for scope in deletion.listing.scopes(&key.tenant) {
            spread.hint().cmd("ZREM").arg(self.list_key(&scope)).arg(&member);
        }
        for relay_id in &deletion.relay_ids {
            spread.hint().cmd("DEL").arg(self.keys.relay(&key.tenant, relay_id));
            spread.hint().cmd("DEL").arg(self.keys.relay_legacy(relay_id));
        }
        if let Some(owner) = &deletion.owner {
            spread.hint().cmd("SREM").arg(self.keys.owned_of(owner, key)).arg(key.to_member());
        }
        if let Err(e) = self.send(&mut conn, spread).await {
            tracing::warn!(session = %key.id, error = %map_err(e), "session deleted; its list entries are pruned later");
        }
        Ok(Deleted::Deleted)
    }
}
