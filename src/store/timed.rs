//! A decorator that times every store operation into
//! `switchboard_store_operation_duration_seconds{op, outcome}`, whichever
//! backend is behind it. [`super::Store::open`] wraps the backend in it, so
//! the backends themselves stay free of metrics.

use std::{future::Future, sync::Arc, time::Duration};

use async_trait::async_trait;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{
    CancelRequest, Catalog, Commit, CommitError, Committed, Decided, Deleted, Deletion, EventLog, Health, ListPosition,
    ListScope, Listed, Liveness, LogRange, Notifications, Quotas, RateDecision, Record, RelayIndex, Replicas,
    SessionKey, SessionStore, SessionWrite, StoreError, TokenWindow, Wrote,
};
use crate::telemetry::{attributes as attr, metrics::Metrics};

pub struct Timed<B> {
    inner: Arc<B>,
    metrics: Arc<Metrics>,
    /// `redis` or `memory` (`db.system.name` of the spans).
    kind: &'static str,
    /// `sessions.write` that went well: the writer's every round.
    write_ok: Histogram,
}

/// Operations a request waits on get a span of their own; the hot path
/// (commits, heartbeats, notifications) only the histogram.
const TRACED: &[&str] = &[
    "sessions.load",
    "sessions.decide",
    "sessions.request_cancel",
    "relays.",
    "log.read_after",
    "quotas.acquire_slot",
    "catalog.",
    "workspaces.",
];

impl<B> Timed<B> {
    pub fn new(inner: Arc<B>, metrics: Arc<Metrics>, kind: &'static str) -> Self {
        let write_ok = metrics.store_op_histogram("sessions.write", "ok");
        Self { inner, metrics, kind, write_ok }
    }

    async fn time<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = if TRACED.iter().any(|prefix| op.starts_with(prefix)) {
            let span = tracing::info_span!(
                "store",
                { attr::OTEL_NAME } = op,
                { attr::OTEL_KIND } = "client",
                { attr::DB_SYSTEM_NAME } = self.kind,
                { attr::DB_OPERATION_NAME } = op,
            );
            call.instrument(span).await
        } else {
            call.await
        };
        self.metrics.store_op(op, outcome(result.as_ref().err()), started.elapsed());
        result
    }
}

fn outcome(error: Option<&StoreError>) -> &'static str {
    match error {
        None => "ok",
        Some(StoreError::Unavailable(_)) => "unavailable",
        Some(StoreError::Corrupt(_)) => "corrupt",
    }
}

#[async_trait]
impl<B: SessionStore> SessionStore for Timed<B> {
    async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<Record>, StoreError> {
        self.time("sessions.load", self.inner.load(key, history)).await
    }

    async fn load_with_tail(&self, key: &SessionKey, limit: usize) -> Result<Option<super::Loaded>, StoreError> {
        self.time("sessions.load_with_tail", self.inner.load_with_tail(key, limit)).await
    }

    async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>> {
        let started = Instant::now();
        let results = self.inner.commit(commits).await;
        let failed = results.iter().find_map(|r| match r {
            Err(CommitError::Store(e)) => Some(e),
            _ => None,
        });
        self.metrics.store_op("sessions.commit", outcome(failed), started.elapsed());
        results
    }

    async fn write(&self, writes: &[SessionWrite]) -> Vec<Result<Wrote, CommitError>> {
        let started = Instant::now();
        let results = self.inner.write(writes).await;
        let failed = results.iter().find_map(|r| match r {
            Err(CommitError::Store(e)) => Some(e),
            _ => None,
        });
        match failed {
            None => self.write_ok.observe(started.elapsed().as_secs_f64()),
            Some(error) => self.metrics.store_op("sessions.write", outcome(Some(error)), started.elapsed()),
        }
        results
    }

    async fn decide(&self, key: &SessionKey, relay_id: &str, decision: &str) -> Result<Decided, StoreError> {
        self.time("sessions.decide", self.inner.decide(key, relay_id, decision)).await
    }

    async fn request_cancel(&self, key: &SessionKey) -> Result<CancelRequest, StoreError> {
        self.time("sessions.request_cancel", self.inner.request_cancel(key)).await
    }
}

#[async_trait]
impl<B: EventLog> EventLog for Timed<B> {
    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        self.time("log.read_after", self.inner.read_after(key, after, limit)).await
    }
}

#[async_trait]
impl<B: Replicas> Replicas for Timed<B> {
    async fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.time("replicas.heartbeat", self.inner.heartbeat(instance, ttl)).await
    }

    async fn alive(&self, instance: &str) -> Result<bool, StoreError> {
        self.time("replicas.alive", self.inner.alive(instance)).await
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        self.time("replicas.leave", self.inner.leave(instance)).await
    }

    async fn dead(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.time("replicas.dead", self.inner.dead(limit)).await
    }

    async fn owned(&self, instance: &str, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        self.time("replicas.owned", self.inner.owned(instance, limit)).await
    }

    async fn disown(&self, instance: &str, keys: &[SessionKey]) -> Result<(), StoreError> {
        self.time("replicas.disown", self.inner.disown(instance, keys)).await
    }

    async fn orphans(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        self.time("replicas.orphans", self.inner.orphans(limit)).await
    }

    async fn liveness(&self, only: Option<&[String]>) -> Result<Vec<Liveness>, StoreError> {
        self.time("replicas.liveness", self.inner.liveness(only)).await
    }

    async fn adopted(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.time("replicas.adopted", self.inner.adopted(key)).await
    }
}

#[async_trait]
impl<B: RelayIndex> RelayIndex for Timed<B> {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError> {
        self.time("relays.put", self.inner.put_relay(relay_id, key)).await
    }

    async fn get_relay(&self, tenant: &str, relay_id: &str) -> Result<Option<SessionKey>, StoreError> {
        self.time("relays.get", self.inner.get_relay(tenant, relay_id)).await
    }
}

#[async_trait]
impl<B: Notifications> Notifications for Timed<B> {
    async fn watch(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.time("notifications.watch", self.inner.watch(key)).await
    }

    async fn unwatch(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.time("notifications.unwatch", self.inner.unwatch(key)).await
    }

    async fn listen(&self, instance: &str) -> Result<(), StoreError> {
        self.time("notifications.listen", self.inner.listen(instance)).await
    }

    async fn follow(&self, key: &SessionKey, instance: &str, following: bool) -> Result<(), StoreError> {
        self.time("notifications.follow", self.inner.follow(key, instance, following)).await
    }
}

#[async_trait]
impl<B: Quotas> Quotas for Timed<B> {
    async fn take_request(&self, tenant: &str, rate: u32, burst: u32) -> Result<RateDecision, StoreError> {
        self.time("quotas.take_request", self.inner.take_request(tenant, rate, burst)).await
    }

    async fn acquire_slot(
        &self,
        tenant: &str,
        session_id: &str,
        max: Option<u32>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.time("quotas.acquire_slot", self.inner.acquire_slot(tenant, session_id, max, ttl)).await
    }

    async fn release_slot(&self, tenant: &str, session_id: &str) -> Result<(), StoreError> {
        self.time("quotas.release_slot", self.inner.release_slot(tenant, session_id)).await
    }

    async fn reserve_tokens(&self, tenant: &str, tokens: u64, limit: u64) -> Result<Option<TokenWindow>, StoreError> {
        self.time("quotas.reserve_tokens", self.inner.reserve_tokens(tenant, tokens, limit)).await
    }

    async fn correct_tokens(&self, tenant: &str, window: TokenWindow, delta: i64) -> Result<(), StoreError> {
        self.time("quotas.correct_tokens", self.inner.correct_tokens(tenant, window, delta)).await
    }
}

#[async_trait]
impl<B: Catalog> Catalog for Timed<B> {
    async fn list(
        &self,
        scope: &ListScope,
        before: Option<&ListPosition>,
        limit: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        self.time("catalog.list", self.inner.list(scope, before, limit)).await
    }

    async fn unlist(&self, scope: &ListScope, positions: &[ListPosition]) -> Result<(), StoreError> {
        self.time("catalog.unlist", self.inner.unlist(scope, positions)).await
    }

    async fn delete(&self, key: &SessionKey, deletion: &Deletion) -> Result<Deleted, StoreError> {
        self.time("catalog.delete", self.inner.delete(key, deletion)).await
    }
}

#[async_trait]
impl<B: Health> Health for Timed<B> {
    async fn ping(&self) -> Result<(), StoreError> {
        self.time("health.ping", self.inner.ping()).await
    }
}

#[async_trait]
impl<B: super::Annexes> super::Annexes for Timed<B> {
    async fn put_annex(&self, key: &SessionKey, name: &str, value: &str, keep: Duration) -> Result<(), StoreError> {
        self.time("annexes.put", self.inner.put_annex(key, name, value, keep)).await
    }

    async fn get_annex(&self, key: &SessionKey, name: &str) -> Result<Option<String>, StoreError> {
        self.time("annexes.get", self.inner.get_annex(key, name)).await
    }
}

#[async_trait]
impl<B: super::WorkspaceStore> super::WorkspaceStore for Timed<B> {
    async fn files(&self, key: &SessionKey) -> Result<Vec<super::StoredFile>, StoreError> {
        self.time("workspaces.files", self.inner.files(key)).await
    }
}
