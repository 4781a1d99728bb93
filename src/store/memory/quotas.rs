//! Per-tenant quotas in memory: the same GCRA, slot and token counting as
//! the Redis scripts, for the single replica the in-memory store serves.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use tokio::time::Instant;

use super::MemoryStore;
use crate::store::{Quotas, RateDecision, StoreError, TokenWindow};

#[derive(Default)]
pub(super) struct QuotaState {
    /// tenant → theoretical arrival time.
    arrivals: HashMap<String, Instant>,
    /// tenant → session → deadline.
    slots: HashMap<String, HashMap<String, Instant>>,
    /// (tenant, minute) → tokens.
    tokens: HashMap<(String, TokenWindow), i64>,
}

impl MemoryStore {
    fn quota_state(&self) -> std::sync::MutexGuard<'_, QuotaState> {
        self.quotas.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl Quotas for MemoryStore {
    async fn take_request(&self, tenant: &str, rate: u32, burst: u32) -> Result<RateDecision, StoreError> {
        let now = Instant::now();
        let interval = Duration::from_micros(1_000_000 / u64::from(rate.max(1)));
        let tolerance = interval * burst.max(1).saturating_sub(1);
        let mut state = self.quota_state();
        let tat = state.arrivals.get(tenant).copied().unwrap_or(now).max(now);
        if now + tolerance < tat {
            return Ok(RateDecision::Limited { retry_after: tat - tolerance - now });
        }
        let new_tat = tat + interval;
        state.arrivals.insert(tenant.to_string(), new_tat);
        // As the script: floor((now + tolerance - new_tat) / interval) + 1,
        // which is 0 when this request took the last of the burst.
        let remaining = match (now + tolerance).checked_duration_since(new_tat) {
            Some(spare) => spare.as_micros() / interval.as_micros() + 1,
            None => 0,
        };
        Ok(RateDecision::Allowed { remaining: remaining as u32 })
    }

    async fn acquire_slot(
        &self,
        tenant: &str,
        session_id: &str,
        max: Option<u32>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.quota_state();
        let slots = state.slots.entry(tenant.to_string()).or_default();
        slots.retain(|_, deadline| *deadline > now);
        if let Some(max) = max
            && !slots.contains_key(session_id)
            && slots.len() >= max as usize
        {
            return Ok(false);
        }
        slots.insert(session_id.to_string(), now + ttl);
        Ok(true)
    }

    async fn release_slot(&self, tenant: &str, session_id: &str) -> Result<(), StoreError> {
        if let Some(slots) = self.quota_state().slots.get_mut(tenant) {
            slots.remove(session_id);
        }
        Ok(())
    }

    async fn reserve_tokens(&self, tenant: &str, tokens: u64, limit: u64) -> Result<Option<TokenWindow>, StoreError> {
        let window = TokenWindow::now();
        let mut state = self.quota_state();
        // Windows older than the last two are of no use to anyone (Redis
        // lets them expire after two minutes).
        state.tokens.retain(|(_, w), _| w.0 + 1 >= window.0);
        let used = state.tokens.entry((tenant.to_string(), window)).or_default();
        if *used + tokens as i64 > limit as i64 {
            return Ok(None);
        }
        *used += tokens as i64;
        Ok(Some(window))
    }

    async fn correct_tokens(&self, tenant: &str, window: TokenWindow, delta: i64) -> Result<(), StoreError> {
        *self.quota_state().tokens.entry((tenant.to_string(), window)).or_default() += delta;
        Ok(())
    }
}
