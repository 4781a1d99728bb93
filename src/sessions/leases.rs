//! Leases of the sessions this replica runs, and takeover of the sessions
//! whose replica died.
//!
//! Three tasks, all on the app's tracker:
//! - the keeper renews every held lease each `lease_ttl / 3`; a renewal that
//!   fails means another replica took the session, so its turn is cancelled;
//!   at shutdown it hands every lease off (expires it now) so another
//!   replica takes the sessions over at once;
//! - the sweep looks for expired leases each `lease_ttl / 3` and takes those
//!   sessions over;
//! - the waker passes wake-ups heard on the subscription (relay decisions,
//!   cancels) to the turn running here.
//!
//! A takeover is a compare-and-set of the state document that also acquires
//! the lease: of several replicas looking at once, exactly one wins, and the
//! runner is started once.

use std::time::Duration;

use tokio::sync::mpsc;

use super::Sessions;
use crate::store::{LeaseOp, SessionKey, WriteOutcome};

/// Sessions examined per sweep.
const SWEEP_BATCH: usize = 64;
/// A handed-off lease expires this soon, so the sweep of another replica
/// finds it at its next pass.
const HANDOFF_TTL: Duration = Duration::from_millis(1);

pub(super) fn start(sessions: Sessions, mut wakes: mpsc::Receiver<SessionKey>) {
    let ttl = sessions.config().store.lease_ttl;
    let tasks = sessions.inner.tasks.clone();
    let shutdown = sessions.inner.shutdown.clone();

    let keeper = sessions.clone();
    let stop = shutdown.clone();
    tasks.spawn(async move {
        every(ttl / 3, &stop, || keeper.renew_all()).await;
        if !keeper.inner.halted.load(std::sync::atomic::Ordering::SeqCst) {
            keeper.hand_off_all().await;
        }
    });

    let sweeper = sessions.clone();
    let stop = shutdown.clone();
    tasks.spawn(async move { every(ttl / 3, &stop, || sweeper.sweep()).await });

    let waker = sessions;
    tasks.spawn(async move {
        loop {
            let key = tokio::select! {
                key = wakes.recv() => key,
                () = shutdown.cancelled() => None,
            };
            let Some(key) = key else { break };
            waker.wake_local(&key).await;
        }
    });
}

/// Runs `work` every `period` until `stop` is cancelled. A slow pass delays
/// the next one rather than letting passes pile up.
async fn every<F, Fut>(period: Duration, stop: &tokio_util::sync::CancellationToken, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => work().await,
            () = stop.cancelled() => break,
        }
    }
}

/// Takes `key` over if it should be running but nobody holds its lease.
pub(super) async fn take_over_if_orphaned(sessions: &Sessions, key: &SessionKey) -> bool {
    let store = sessions.store();
    match store.leases.owner(key).await {
        Ok(None) => {}
        Ok(Some(_)) | Err(_) => return false,
    }
    let Ok((version, mut doc)) = sessions.load_raw(key).await else { return false };
    if !doc.status.is_active() {
        let _ = store.leases.forget(key).await;
        return false;
    }
    let me = sessions.replica().to_string();
    let previous = doc.owner.replace(me.clone());
    let Ok(encoded) = super::encode(&doc) else { return false };
    let lease = LeaseOp::Acquire { replica: me, ttl: sessions.config().store.lease_ttl };
    match store.state.compare_and_set(key, version, &encoded, lease).await {
        Ok(WriteOutcome::Written(version)) => {
            // Still one of the tenant's running sessions: refresh, never refuse.
            let _ = sessions.hold_slot(key, false).await;
            tracing::info!(session = %key.id, from = previous.as_deref().unwrap_or("?"), "took over session");
            let link = doc.trace_parent.clone();
            sessions.spawn_runner(key.clone(), version, doc, Some(previous.unwrap_or_default()), link);
            true
        }
        // Another replica won the race, or the owner came back.
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(session = %key.id, error = %e, "takeover failed");
            false
        }
    }
}

impl Sessions {
    async fn renew_all(&self) {
        let ttl = self.config().store.lease_ttl;
        let keys: Vec<SessionKey> = self.inner.running.iter().map(|r| r.key().clone()).collect();
        for key in keys {
            match self.store().leases.renew(&key, self.replica(), ttl).await {
                Ok(true) => {
                    let _ = self.hold_slot(&key, false).await;
                }
                Ok(false) => {
                    tracing::warn!(session = %key.id, "lease lost; stopping the turn here");
                    if let Some((_, running)) = self.inner.running.remove(&key) {
                        running.cancel.cancel();
                    }
                }
                // Redis is down: keep trying; the lease may still be ours.
                Err(e) => tracing::warn!(session = %key.id, error = %e, "cannot renew lease"),
            }
        }
    }

    async fn sweep(&self) {
        let candidates = match self.store().leases.expired(SWEEP_BATCH).await {
            Ok(candidates) => candidates,
            Err(e) => return tracing::debug!(error = %e, "takeover sweep skipped"),
        };
        for key in candidates {
            take_over_if_orphaned(self, &key).await;
        }
    }

    /// At shutdown: let each lease expire now so another replica takes the
    /// session over without waiting for the TTL.
    async fn hand_off_all(&self) {
        let keys: Vec<SessionKey> = self.inner.running.iter().map(|r| r.key().clone()).collect();
        for key in keys {
            let _ = self.store().leases.renew(&key, self.replica(), HANDOFF_TTL).await;
        }
    }
}
