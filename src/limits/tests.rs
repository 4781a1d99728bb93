//! The refusal regime, on tokio's paused clock (the in-memory store's GCRA
//! runs on it too): refusals answered here without asking the store, one
//! probe at a time after a window, and a probe whose request goes away.

use async_trait::async_trait;
use tokio::sync::{Semaphore, watch};

use super::*;
use crate::{
    config::StoreConfig,
    store::{MemoryStore, StoreError, TokenWindow},
};

/// The in-memory quotas, counting the requests asked about (a count tests
/// can wait on); with a gate, each answer waits for a permit.
struct Counted {
    inner: MemoryStore,
    asked: watch::Sender<usize>,
    gate: Option<Semaphore>,
}

impl Counted {
    fn asked(&self) -> usize {
        *self.asked.borrow()
    }
}

#[async_trait]
impl Quotas for Counted {
    async fn take_request(&self, tenant: &str, rate: u32, burst: u32) -> Result<RateDecision, StoreError> {
        self.asked.send_modify(|n| *n += 1);
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("the gate stays open").forget();
        }
        self.inner.take_request(tenant, rate, burst).await
    }

    async fn acquire_slot(&self, t: &str, s: &str, max: Option<u32>, ttl: Duration) -> Result<bool, StoreError> {
        self.inner.acquire_slot(t, s, max, ttl).await
    }

    async fn release_slot(&self, tenant: &str, session_id: &str) -> Result<(), StoreError> {
        self.inner.release_slot(tenant, session_id).await
    }

    async fn reserve_tokens(&self, t: &str, tokens: u64, limit: u64) -> Result<Option<TokenWindow>, StoreError> {
        self.inner.reserve_tokens(t, tokens, limit).await
    }

    async fn correct_tokens(&self, t: &str, window: TokenWindow, delta: i64) -> Result<(), StoreError> {
        self.inner.correct_tokens(t, window, delta).await
    }
}

/// A tenant `t` limited to 10 requests per second, burst 1.
fn limits(gated: bool) -> (Arc<RateLimits>, Arc<Counted>) {
    let text = "[[tenants]]\nid = \"t\"\njwt = { hs256_secret = \"0123456789abcdef0123\" }\n\
                rate_limit = { requests_per_second = 10, burst = 1 }\n[models.m]\nprovider = \"demo\"\n";
    let config = Arc::new(Config::from_toml(text, &|_| None).expect("a valid configuration"));
    let store_config = StoreConfig::for_unit_tests();
    let (notices, _) = tokio::sync::mpsc::channel(1);
    let quotas = Arc::new(Counted {
        inner: MemoryStore::new(&store_config, notices),
        asked: watch::Sender::new(0),
        gate: gated.then(|| Semaphore::new(0)),
    });
    let limits = RateLimits::new(config, quotas.clone(), Arc::new(Metrics::new()));
    (limits, quotas)
}

fn alice() -> Principal {
    Principal { tenant: "t".into(), subject: "alice".into(), scopes: vec![] }
}

#[tokio::test(start_paused = true)]
async fn after_a_refusal_the_window_is_refused_here_and_then_one_request_asks_again() {
    let (limits, quotas) = limits(false);
    assert!(limits.check(&alice()).await.is_ok());
    assert!(limits.check(&alice()).await.is_err(), "the store refuses the second");
    assert_eq!(quotas.asked(), 2);
    for _ in 0..5 {
        let refused = limits.check(&alice()).await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::RateLimited);
    }
    assert_eq!(quotas.asked(), 2, "refused within the window without asking");

    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(limits.check(&alice()).await.is_ok(), "the window is over: the store allows the next");
    assert_eq!(quotas.asked(), 3);
}

#[tokio::test(start_paused = true)]
async fn while_a_probe_is_out_the_others_are_refused_and_a_dropped_probe_lets_the_next_one_ask() {
    let (limits, quotas) = limits(true);
    quotas.gate.as_ref().unwrap().add_permits(2);
    assert!(limits.check(&alice()).await.is_ok());
    assert!(limits.check(&alice()).await.is_err());
    tokio::time::advance(Duration::from_millis(100)).await;

    // The probe waits for the store; meanwhile another request is refused here.
    let probing = tokio::spawn({
        let limits = limits.clone();
        async move { limits.check(&alice()).await.is_ok() }
    });
    quotas.asked.subscribe().wait_for(|n| *n == 3).await.expect("the probe asks");
    assert!(limits.check(&alice()).await.is_err());
    assert_eq!(quotas.asked(), 3, "only the probe asked");

    // Its client goes away: the probe ends, and the next request asks.
    probing.abort();
    assert!(probing.await.unwrap_err().is_cancelled());
    quotas.gate.as_ref().unwrap().add_permits(1);
    assert!(limits.check(&alice()).await.is_ok());
    assert_eq!(quotas.asked(), 4);
}
