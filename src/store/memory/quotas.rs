//! Per-tenant quotas in memory: the same GCRA, slot and token counting as
//! the Redis scripts, for the single replica the in-memory store serves.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use tokio::time::Instant;

use super::MemoryStore;
use crate::store::{Quotas, RateDecision, StoreError};

#[derive(Default)]
pub(super) struct QuotaState {
    /// tenant → theoretical arrival time.
    arrivals: HashMap<String, Instant>,
    /// tenant → session → deadline.
    slots: HashMap<String, HashMap<String, Instant>>,
    /// (tenant, minute) → tokens.
    tokens: HashMap<(String, u64), i64>,
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
        let remaining = ((now + tolerance).saturating_duration_since(new_tat).as_micros() / interval.as_micros()) + 1;
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

    async fn take_tokens(&self, tenant: &str, tokens: i64, limit: Option<u64>) -> Result<bool, StoreError> {
        let minute = crate::protocol::events::now_ms() / 60_000;
        let mut state = self.quota_state();
        state.tokens.retain(|(_, m), _| *m + 1 >= minute);
        let used = state.tokens.entry((tenant.to_string(), minute)).or_default();
        if let Some(limit) = limit
            && tokens > 0
            && *used + tokens > limit as i64
        {
            return Ok(false);
        }
        *used += tokens;
        Ok(true)
    }
}
