//! Per-tenant quotas in Redis (`lua/rate_gcra.lua`, `lua/slot_acquire.lua`,
//! `lua/tokens_take.lua`): each check-and-count is one script, so replicas
//! racing for the last unit of a quota cannot both get it.

use std::time::Duration;

use async_trait::async_trait;

use super::{RedisStore, map_err};
use crate::store::{Quotas, RateDecision, StoreError, TokenWindow};

#[async_trait]
impl Quotas for RedisStore {
    async fn take_request(&self, tenant: &str, rate: u32, burst: u32) -> Result<RateDecision, StoreError> {
        let interval_us = 1_000_000 / u64::from(rate.max(1));
        let mut conn = self.connection();
        let (allowed, value): (i64, i64) = self
            .scripts
            .rate_gcra
            .key(self.keys.rate(tenant))
            .arg(interval_us.max(1))
            .arg(burst.max(1))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(if allowed == 1 {
            RateDecision::Allowed { remaining: value.max(0) as u32 }
        } else {
            RateDecision::Limited { retry_after: Duration::from_millis(value.max(1) as u64) }
        })
    }

    async fn acquire_slot(
        &self,
        tenant: &str,
        session_id: &str,
        max: Option<u32>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut conn = self.connection();
        let counted: i64 = self
            .scripts
            .slot_acquire
            .key(self.keys.slots(tenant))
            .arg(session_id)
            .arg(max.unwrap_or(0))
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(counted == 1)
    }

    async fn release_slot(&self, tenant: &str, session_id: &str) -> Result<(), StoreError> {
        let mut conn = self.connection();
        redis::cmd("ZREM")
            .arg(self.keys.slots(tenant))
            .arg(session_id)
            .query_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    async fn reserve_tokens(&self, tenant: &str, tokens: u64, limit: u64) -> Result<Option<TokenWindow>, StoreError> {
        let window = TokenWindow::now();
        // The script skips the check for a limit of 0; validation keeps
        // configured limits positive.
        let taken = self.add_tokens(tenant, window, tokens as i64, limit.max(1)).await?;
        Ok(taken.then_some(window))
    }

    async fn correct_tokens(&self, tenant: &str, window: TokenWindow, delta: i64) -> Result<(), StoreError> {
        self.add_tokens(tenant, window, delta, 0).await.map(drop)
    }
}

impl RedisStore {
    /// One run of `tokens_take.lua`: adds `tokens` to `window`'s count,
    /// checked against `limit` unless it is 0. True when added.
    async fn add_tokens(&self, tenant: &str, window: TokenWindow, tokens: i64, limit: u64) -> Result<bool, StoreError> {
        let mut conn = self.connection();
        let (taken, _used): (i64, i64) = self
            .scripts
            .tokens_take
            .key(self.keys.tokens(tenant, window.0))
            .arg(tokens)
            .arg(limit)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(taken == 1)
    }
}
