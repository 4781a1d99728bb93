//! Who runs which session: this instance's heartbeat, the takeover of
//! sessions whose instance died or handed them off, the restart of turns
//! the store stopped, wake-ups for running turns, and drain.
//!
//! An instance owns the sessions it runs; it is alive while its heartbeat
//! (one store write every `lease_ttl / 3`, however many sessions it runs)
//! is within `lease_ttl`. Every write of a running session is fenced by the
//! owner's tenure, so an instance presumed dead too early cannot write over
//! the one that took its sessions: its next commit is refused and its turn
//! stops.
//!
//! An instance killed outright is seen sooner than its lease lapses: its
//! connection to the store closes, and with it the liveness subscription
//! it holds there (`store/redis/liveness.rs`). Every
//! `store.liveness_check_ms` (100 ms) the hint checker reads the other
//! instances' subscriber counts; one found silent on two reads
//! [`HINT_CONFIRM`] apart, on the node it recorded and with the record it
//! had, is taken as dead: its sessions are taken over now, by the same
//! fenced commit as after a lapsed lease, and a request touching one of
//! them takes it over too. A request that finds a session of an instance
//! alive by its lease (a client rejoining after its stream broke) asks for
//! a check at once rather than at the next tick (at most one per
//! [`CHECK_GAP`]); when that instance is found dead, the sessions clients
//! here wait on are taken first, here, so their events reach them without
//! a hop through another replica. The lease stays the bound for what the count
//! cannot see (a stopped process, a host gone without a FIN, a store
//! restart, a proxy without subscriptions). An instance found dead that
//! records a new subscription afterwards lived: counted as a wrong hint
//! (`switchboard_death_hints_total{outcome="wrong"}`); what was taken from
//! it ran a step again, its own writes were refused by the fence.
//!
//! Four tasks, all on the app's tracker:
//! - the heartbeat; on shutdown (after the drain) it marks the instance
//!   gone, so whatever it still owns is taken over at the next sweep;
//! - the sweep, every `lease_ttl / 3` and at once when a hand-off is
//!   announced: it takes over the sessions of dead instances and the
//!   orphans (active sessions nobody owns: handed off by a draining
//!   replica), and restarts this instance's turns that the store stopped;
//! - the waker: passes wake-ups heard on the subscription to the turns
//!   running here (a decision, a cancel, a takeover elsewhere);
//! - the hint checker (unless `store.liveness_check_ms = 0`), above.
//!
//! A session needs an owner while a turn runs and while its title is due
//! (the title phase after a turn's end): either is taken over.
//!
//! A takeover is one commit, fenced by the session as it was read, that
//! takes the session and records what the takeover implies (a
//! `step_restarted` where a step was cut short; "outcome unknown" results
//! for tools that must not run twice): of several replicas looking at once,
//! exactly one wins, and the runner is started once. It reads the session
//! once: state, conversation and the cut step's events (those after the
//! checkpoint, when at most [`PARTIAL_PAGE`]) in one atomic read
//! (`SessionStore::load_with_tail`), then commits. A client rejoining a
//! session whose owner is gone waits for that takeover and its cursor's
//! check together, not in turn. A turn taken over starts its model call
//! once no other takeover runs on this replica (at most [`SETTLE_MAX`]
//! later): after a replica with many chats died, every client gets its
//! `step_restarted` before the cores go to the regenerated answers.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use dashmap::DashMap;
use futures::StreamExt;
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::{Sessions, Stop, fence_of, hub::Wake};
use crate::{
    domain::{EventKind, LogEvent, StepRestart},
    store::{OwnerChange, Record, SessionKey, StoredEvent},
};

/// Sessions examined per sweep pass and source.
const SWEEP_BATCH: usize = 64;
/// Dead instances examined per sweep pass.
const DEAD_BATCH: usize = 16;
/// Takeovers in flight at once during a sweep.
const TAKEOVERS_AT_ONCE: usize = 16;
/// The same for an instance found dead by its hint: its clients are
/// waiting now, and every replica takes part (sampling at random, so they
/// mostly take different sessions).
const HINTED_AT_ONCE: usize = 64;
/// Sweep passes over one hinted instance in one check, at most.
const HINTED_PASSES: usize = 64;
/// Events per store read when looking at a cut step.
const PARTIAL_PAGE: usize = 500;
/// How long a silent liveness subscription must stay silent before its
/// instance is taken as dead: a connection that was replaced (a
/// reconnection) has subscribed again by then.
const HINT_CONFIRM: Duration = Duration::from_millis(30);
/// How long no new death hint is believed after the store failed a read
/// of them or one of its nodes changed (a restart, a failover): every
/// replica's subscription moves then, and a count of zero may be one
/// still on its way.
const HINTS_QUIET: Duration = Duration::from_secs(5);

/// The shortest gap between two liveness checks asked for by requests
/// (rather than by the clock): a stream of rejoins costs one check per gap.
const CHECK_GAP: Duration = Duration::from_millis(20);
/// How long a session a client here waits on stays first in line for a
/// takeover by this replica (a follow of a live owner's session that
/// long is an ordinary cross-replica follow).
const AWAITED_FOR: Duration = Duration::from_secs(60);
/// How long a turn taken over waits for the other takeovers here to end
/// before its model call ([`Hints::settled`]).
pub(super) const SETTLE_MAX: Duration = Duration::from_millis(200);

/// What the hint checker knows, shared with the requests.
#[derive(Default)]
pub(super) struct Hints {
    /// Instances found dead.
    dead: DashMap<String, Hinted>,
    /// Sessions of other live-looking instances that a client here follows
    /// (a rejoin after its stream broke, most often): when their owner is
    /// found dead this replica takes them first, so their next events reach
    /// those clients here, without a hop through another replica.
    awaited: DashMap<SessionKey, (String, Instant)>,
    /// A request found a session of an instance it cannot tell is dead:
    /// check now rather than at the next tick.
    check_now: Notify,
    /// Takeovers running on this replica, and a wake-up when none is left
    /// ([`Hints::settled`]).
    in_flight: AtomicUsize,
    settled: Notify,
}

impl Hints {
    /// Waits, at most `max`, until no takeover runs here: a turn taken
    /// over starts its model call after a burst of takeovers (a replica
    /// that died with many chats), so that every client waiting on one
    /// gets its `step_restarted` before the CPU goes to the regenerated
    /// answers (load-tests/RESULTS.md, issue 28).
    pub(super) async fn settled(&self, max: Duration) {
        let deadline = Instant::now() + max;
        loop {
            // Registered before the check: a wake-up between the two is not lost.
            let settled = self.settled.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return;
            }
        }
    }
}

/// Counts one takeover in flight while it lives.
struct InFlight<'a>(&'a Hints);

impl<'a> InFlight<'a> {
    fn new(hints: &'a Hints) -> Self {
        hints.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(hints)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// An instance the hint checker found dead.
#[derive(Debug, Clone)]
pub(super) struct Hinted {
    /// Its liveness record when it was found dead: another one later means
    /// it lived.
    record: String,
    /// Nothing it owned is left to take over.
    cleared: bool,
}

/// Where a takeover's run comes from.
pub(super) struct Takeover {
    /// The replica (configured id) that ran it before, or `""` when it was
    /// handed off without a known owner.
    pub from: String,
    /// The text of the step cut short, when the run continues it.
    pub continuation: Option<String>,
    /// A cancel request waits: the run ends the turn at once.
    pub cancel: bool,
}

/// Whom a takeover expects to find owning the session.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// A dead instance.
    Dead(String),
    /// Nobody (a hand-off).
    Nobody,
    /// This instance, whose turn the store stopped.
    Myself,
}

/// What one pass over a dead instance's sessions found.
struct Swept {
    found: usize,
    /// Takeovers the store failed (tried again later).
    failed: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Taken,
    /// Nothing to take: it ended, or someone else runs it.
    Nothing,
    /// The store failed: try again later.
    Failed,
}

pub(super) fn start(sessions: Sessions, mut wakes: mpsc::Receiver<Wake>) {
    let period = sessions.config().store.lease_ttl / 3;
    let tasks = sessions.inner.tasks.clone();
    let shutdown = sessions.inner.shutdown.clone();
    let sweep_now = std::sync::Arc::new(Notify::new());
    // Cancelled at the first beat: nothing is taken over before this
    // instance is known to be alive.
    let beating = CancellationToken::new();

    let heart = sessions.clone();
    let stop = shutdown.clone();
    let first_beat = beating.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat_before = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => break,
            }
            if heart.heartbeat(beat_before).await {
                first_beat.cancel();
                beat_before = true;
            }
        }
        if !heart.inner.halted.load(Ordering::SeqCst)
            && let Err(e) = heart.store().replicas.leave(heart.instance()).await
        {
            tracing::warn!(error = %e, "cannot mark this instance gone; its heartbeat lapses by itself");
        }
    });

    if let Some(every) = sessions.config().store.liveness_check {
        let checker = sessions.clone();
        let ticks = Ticks { beating: beating.clone(), stop: shutdown.clone(), every, woken: None };
        tasks.spawn(async move {
            let mut ticks = ticks.start().await;
            let mut quiet_until = None;
            loop {
                let asked = checker.inner.hints.check_now.notified();
                tokio::select! {
                    more = ticks.next() => if !more { break },
                    () = asked => {}
                }
                checker.check_liveness(&mut quiet_until).await;
                // Requests ask at most once per gap (the clock's ticks go on).
                tokio::select! {
                    () = tokio::time::sleep(CHECK_GAP) => {}
                    () = checker.inner.shutdown.cancelled() => break,
                }
            }
        });
    }

    let sweeper = sessions.clone();
    let ticks = Ticks { beating, stop: shutdown.clone(), every: period, woken: Some(sweep_now.clone()) };
    tasks.spawn(async move {
        let mut ticks = ticks.start().await;
        while ticks.next().await {
            sweeper.sweep().await;
        }
    });

    let waker = sessions;
    tasks.spawn(async move {
        loop {
            let wake = tokio::select! {
                wake = wakes.recv() => wake,
                () = shutdown.cancelled() => None,
            };
            match wake {
                None => break,
                Some(Wake::Session(key)) => waker.wake_local(&key).await,
                Some(Wake::Followed(key)) => waker.inner.writer.followed(key).await,
                Some(Wake::Orphans) => sweep_now.notify_one(),
                Some(Wake::Everyone) => {
                    let keys: Vec<SessionKey> = waker.inner.running.iter().map(|r| r.key().clone()).collect();
                    for key in keys {
                        waker.wake_local(&key).await;
                    }
                    sweep_now.notify_one();
                }
            }
        }
    });
}

/// A periodic pass that begins once this instance is known to be alive
/// (its first heartbeat): nothing is taken over before.
struct Ticks {
    beating: CancellationToken,
    stop: CancellationToken,
    every: Duration,
    /// Also runs a pass at once when notified.
    woken: Option<std::sync::Arc<Notify>>,
}

struct Ticking {
    ticks: Ticks,
    /// `None` when stopped before the first beat.
    interval: Option<tokio::time::Interval>,
}

impl Ticks {
    async fn start(self) -> Ticking {
        let started = tokio::select! {
            () = self.beating.cancelled() => true,
            () = self.stop.cancelled() => false,
        };
        let interval = started.then(|| {
            let mut interval = tokio::time::interval(self.every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval
        });
        Ticking { ticks: self, interval }
    }
}

impl Ticking {
    /// Waits for the next pass; false once stopped.
    async fn next(&mut self) -> bool {
        let Some(interval) = self.interval.as_mut() else { return false };
        let woken = async {
            match &self.ticks.woken {
                Some(woken) => woken.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interval.tick() => true,
            () = woken => true,
            () = self.ticks.stop.cancelled() => false,
        }
    }
}

/// Takes `key` over, read as `record`, if it should be running but its
/// owner is gone (a request touching the session found it so).
pub(super) async fn take_over_if_orphaned(sessions: &Sessions, key: &SessionKey, record: &Record) {
    if sessions.inner.drain.is_cancelled() || sessions.inner.halted.load(Ordering::SeqCst) {
        return;
    }
    let expect = match &record.owner {
        None => Expect::Nobody,
        Some(owner) if owner == sessions.instance() => return,
        Some(owner) if sessions.inner.hints.dead.contains_key(owner) => Expect::Dead(owner.clone()),
        Some(owner) => match sessions.store().replicas.alive(owner).await {
            Ok(false) => Expect::Dead(owner.clone()),
            Ok(true) => {
                // Alive by its lease; its connection may have closed already.
                let hints = &sessions.inner.hints;
                if sessions.config().store.liveness_check.is_some() {
                    hints.awaited.insert(key.clone(), (owner.clone(), Instant::now()));
                    hints.check_now.notify_one();
                }
                return;
            }
            Err(_) => return,
        },
    };
    take_over(sessions, key, expect).await;
}

/// Takes `key` over if whoever `expect` names still owns it and it is
/// active, and starts its runner here.
async fn take_over(sessions: &Sessions, key: &SessionKey, expect: Expect) -> Outcome {
    let _in_flight = InFlight::new(&sessions.inner.hints);
    // One read: the session, its conversation and the cut step's events.
    let loaded = match sessions.load_with_tail(key, PARTIAL_PAGE).await {
        Ok(Some(loaded)) => loaded,
        Ok(None) => return Outcome::Nothing,
        Err(e) => {
            tracing::warn!(session = %key.id, error = %e, "cannot read a session to take it over");
            return Outcome::Failed;
        }
    };
    let (record, mut session, tail) = loaded;
    let owner_matches = match &expect {
        Expect::Dead(instance) => record.owner.as_deref() == Some(instance.as_str()),
        Expect::Nobody => record.owner.is_none(),
        Expect::Myself => record.owner.as_deref() == Some(sessions.instance()),
    };
    if !session.needs_owner() || !owner_matches {
        return Outcome::Nothing;
    }
    let (restart, continuation) = match cut_step(sessions, key, &record, tail, session.model()).await {
        Ok(cut) => cut,
        Err(e) => {
            tracing::warn!(session = %key.id, error = %e, "cannot read the log to take a session over");
            return Outcome::Failed;
        }
    };
    let config = sessions.config();
    // `bash` per `[sandbox] retry_on_takeover` (its workspace is as it was
    // before the call); `read`, `patch` and `agent` run again.
    let rerun = |call: &crate::domain::ToolCall| match call.name.as_str() {
        "bash" => config.sandbox.retry_on_takeover,
        name => match (config.tool(name), crate::config::mcp::server_of(name).and_then(|s| config.mcp_server(s))) {
            (Some(tool), _) => tool.retry_on_takeover,
            (None, Some(server)) => server.retry_on_takeover,
            (None, None) => true,
        },
    };
    let events = match session.take_over(sessions.replica(), restart, &rerun) {
        Ok(events) => events,
        Err(_) => return Outcome::Nothing,
    };
    let Ok((mut commit, stamped)) = sessions.stamped_commit(key, fence_of(&record), &session, &events) else {
        return Outcome::Failed;
    };
    commit.owner = OwnerChange::Acquire(sessions.instance().to_string());
    commit.open_relays =
        session.live_relays().into_iter().filter(|r| !record.relays.iter().any(|(id, _)| id == r)).collect();
    let committed = match sessions.commit_one(commit).await {
        Ok(committed) => committed,
        Err(super::SessionError::Store(e)) => {
            tracing::warn!(session = %key.id, error = %e, "takeover failed");
            return Outcome::Failed;
        }
        // Another replica won the race, or the owner came back.
        Err(_) => return Outcome::Nothing,
    };
    session.conversation_saved();
    // Still one of the tenant's running sessions: refresh, never refuse.
    let _ = sessions.hold_slot(key, false).await;
    let from = match &expect {
        Expect::Dead(instance) => replica_of(instance).to_string(),
        Expect::Myself => sessions.replica().to_string(),
        Expect::Nobody => String::new(),
    };
    tracing::info!(session = %key.id, from = %from, restart = ?restart, "took over session");
    let link = session.trace_parent().map(str::to_string);
    let takeover = Takeover { from, continuation, cancel: record.cancel_requested };
    sessions.spawn_runner(key.clone(), session, committed, stamped, Some(takeover), link);
    Outcome::Taken
}

/// What became of the model step the previous owner was streaming: its
/// main-agent output after the last commit that wrote the state (`tail`,
/// read with the session; paged from the log when it was longer). A step
/// with only text continues from that text where the model is configured
/// to (`continue_partial`); any other cut step is generated again.
async fn cut_step(
    sessions: &Sessions,
    key: &SessionKey,
    record: &Record,
    tail: Option<Vec<StoredEvent>>,
    model: &str,
) -> Result<(StepRestart, Option<String>), super::SessionError> {
    let (mut text, mut other) = (String::new(), false);
    let mut after = record.checkpoint_seq;
    let mut read = tail;
    while after < record.last_seq {
        let events = match read.take() {
            Some(events) => events,
            None => sessions.store().log.read_after(key, after, PARTIAL_PAGE).await?.events,
        };
        let Some(last) = events.last().map(|e| e.seq) else { break };
        for stored in &events {
            let Ok(event) = LogEvent::from_stored(key.id.clone(), stored.seq, &stored.payload) else { continue };
            if event.event.agent.agent_id != "main" {
                continue;
            }
            match &event.event.kind {
                EventKind::TextDelta { text: delta } => text.push_str(delta),
                EventKind::ReasoningDelta { .. }
                | EventKind::ToolCallStarted { .. }
                | EventKind::ToolCallArgs { .. } => other = true,
                _ => {}
            }
        }
        after = last;
    }
    let continues = sessions.config().model(model).is_some_and(|m| m.config.continue_partial);
    Ok(match (text.is_empty(), other) {
        (true, false) => (StepRestart::Nothing, None),
        (false, false) if continues => (StepRestart::Continue, Some(text)),
        _ => (StepRestart::Regenerate, None),
    })
}

/// The configured replica id of an instance id (`<replica>#<random>`).
fn replica_of(instance: &str) -> &str {
    instance.split('#').next().unwrap_or(instance)
}

impl Sessions {
    /// One heartbeat (and a refresh of the tenant slots this instance
    /// holds). True when it was written. A beat that finds the last one
    /// lapsed makes every turn here check it still owns its session.
    async fn heartbeat(&self, beat_before: bool) -> bool {
        let ttl = self.config().store.lease_ttl;
        match self.store().replicas.heartbeat(self.instance(), ttl).await {
            Ok(fresh) => {
                if !fresh && beat_before {
                    tracing::warn!("this instance's heartbeat had lapsed; checking its sessions");
                    let keys: Vec<SessionKey> = self.inner.running.iter().map(|r| r.key().clone()).collect();
                    for key in keys {
                        self.wake_local(&key).await;
                    }
                }
                let keys: Vec<SessionKey> = self.inner.running.iter().map(|r| r.key().clone()).collect();
                for key in keys {
                    let _ = self.hold_slot(&key, false).await;
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the heartbeat");
                false
            }
        }
    }

    /// One pass: this instance's stopped turns, dead instances' sessions,
    /// orphans.
    async fn sweep(&self) {
        if self.inner.drain.is_cancelled() || self.inner.halted.load(Ordering::SeqCst) {
            return;
        }
        let recovering: Vec<SessionKey> = self.inner.recovering.iter().map(|r| r.key().clone()).collect();
        for key in recovering {
            if take_over(self, &key, Expect::Myself).await != Outcome::Failed {
                self.inner.recovering.remove(&key);
            }
        }
        match self.store().replicas.dead(DEAD_BATCH).await {
            Ok(dead) => {
                for instance in dead.into_iter().filter(|i| i != self.instance()) {
                    self.sweep_dead(&instance, TAKEOVERS_AT_ONCE).await;
                }
            }
            Err(e) => return tracing::debug!(error = %e, "takeover sweep skipped"),
        }
        if let Ok(orphans) = self.store().replicas.orphans(SWEEP_BATCH).await {
            let outcomes = self.take_all(orphans, Expect::Nobody, TAKEOVERS_AT_ONCE).await;
            for (key, outcome) in outcomes {
                if outcome == Outcome::Nothing {
                    let _ = self.store().replicas.adopted(&key).await;
                }
            }
        }
    }

    /// One pass of the hint checker: instances found dead (see the module
    /// docs), those found alive again, and what the dead still own.
    /// `quiet_until`: no new hint is believed before then (the store
    /// failed a read of them or one of its nodes changed).
    async fn check_liveness(&self, quiet_until: &mut Option<Instant>) {
        if self.inner.drain.is_cancelled() || self.inner.halted.load(Ordering::SeqCst) {
            return;
        }
        let replicas = &self.store().replicas;
        if quiet_until.is_some_and(|until| Instant::now() < until) {
            // Nothing is read while quiet: the store is failing or moving.
            self.sweep_hinted().await;
            return;
        }
        let mut quiet = || *quiet_until = Some(Instant::now() + HINTS_QUIET);
        let Ok(rows) = replicas.liveness(None).await else { return quiet() };
        // A node of the store restarted or failed over: subscriptions are
        // moving, counts of zero mean nothing until they settle.
        let moved = rows.iter().any(|row| row.moved);
        if moved {
            quiet();
        }
        let hinted = &self.inner.hints.dead;
        hinted.retain(|instance, hint| match rows.iter().find(|row| &row.instance == instance) {
            Some(row) if row.record != hint.record => {
                tracing::warn!(instance = %instance, "a replica found dead subscribed again: it lived");
                self.inner.metrics.death_hint("wrong");
                false
            }
            Some(_) => true,
            // Forgotten: its lease lapsed and nothing it owned is left.
            None => false,
        });
        let silent: Vec<(String, String)> = rows
            .into_iter()
            .filter(|row| !moved && row.silent && !hinted.contains_key(&row.instance))
            .map(|row| (row.instance, row.record))
            .collect();
        if !silent.is_empty() {
            tokio::time::sleep(HINT_CONFIRM).await;
            let instances: Vec<String> = silent.iter().map(|(instance, _)| instance.clone()).collect();
            let again = match replicas.liveness(Some(&instances)).await {
                Ok(again) if !again.iter().any(|row| row.moved) => again,
                _ => return quiet(),
            };
            for row in again {
                if row.silent && silent.iter().any(|(i, record)| *i == row.instance && *record == row.record) {
                    tracing::info!(instance = %row.instance, "a replica's connection to the store closed: taking its sessions over");
                    self.inner.metrics.death_hint("dead");
                    hinted.insert(row.instance, Hinted { record: row.record, cleared: false });
                }
            }
        }
        self.sweep_hinted().await;
    }

    /// Takes over what the instances found dead still own: first the
    /// sessions clients here wait on, then the rest.
    async fn sweep_hinted(&self) {
        let hints = &self.inner.hints;
        let now = Instant::now();
        hints.awaited.retain(|_, (_, since)| now.duration_since(*since) < AWAITED_FOR);
        let hinted = &hints.dead;
        let uncleared: Vec<String> =
            hinted.iter().filter(|hint| !hint.cleared).map(|hint| hint.key().clone()).collect();
        for instance in uncleared {
            let awaited: Vec<SessionKey> =
                hints.awaited.iter().filter(|a| a.value().0 == instance).map(|a| a.key().clone()).collect();
            for key in &awaited {
                hints.awaited.remove(key);
            }
            if !awaited.is_empty() {
                self.take_all(awaited, Expect::Dead(instance.clone()), HINTED_AT_ONCE).await;
            }
            for _ in 0..HINTED_PASSES {
                match self.sweep_dead(&instance, HINTED_AT_ONCE).await {
                    Some(Swept { found: 0, .. }) => {
                        if let Some(mut hint) = hinted.get_mut(&instance) {
                            hint.cleared = true;
                        }
                        break;
                    }
                    // Progress: another pass at once.
                    Some(Swept { found, failed }) if failed < found => {}
                    // The store fails: the next check tries again.
                    _ => break,
                }
            }
        }
    }

    /// Takes over what `instance` (dead) owned, `at_once` at a time;
    /// forgets it when nothing is left. `None` when the store did not say
    /// what it owns.
    async fn sweep_dead(&self, instance: &str, at_once: usize) -> Option<Swept> {
        let owned = self.store().replicas.owned(instance, at_once.max(SWEEP_BATCH)).await.ok()?;
        let found = owned.len();
        let outcomes = self.take_all(owned, Expect::Dead(instance.to_string()), at_once).await;
        let done: Vec<SessionKey> =
            outcomes.into_iter().filter(|(_, outcome)| *outcome != Outcome::Failed).map(|(key, _)| key).collect();
        if let Err(e) = self.store().replicas.disown(instance, &done).await {
            tracing::debug!(error = %e, "cannot update a dead instance's sessions");
        }
        Some(Swept { found, failed: found - done.len() })
    }

    async fn take_all(&self, keys: Vec<SessionKey>, expect: Expect, at_once: usize) -> Vec<(SessionKey, Outcome)> {
        futures::stream::iter(keys)
            .map(|key| {
                let expect = expect.clone();
                async move {
                    let outcome = take_over(self, &key, expect).await;
                    (key, outcome)
                }
            })
            .buffer_unordered(at_once)
            .collect()
            .await
    }

    /// Passes a wake-up to the turn of `key` if it runs here: a takeover
    /// elsewhere stops it, a cancel request ends it, anything else (a
    /// decision) wakes its wait.
    async fn wake_local(&self, key: &SessionKey) {
        let Some(running) = self.inner.running.get(key).map(|r| r.clone()) else { return };
        match self.store().sessions.load(key, false).await {
            Ok(Some(record)) if record.owner.as_deref() != Some(self.instance()) || record.epoch != running.epoch => {
                running.stop(Stop::Lost);
            }
            Ok(Some(record)) if record.cancel_requested => running.stop(Stop::Cancel),
            Ok(None) => running.stop(Stop::Lost),
            _ => running.wake.notify_one(),
        }
    }

    /// Drains this replica: no new turns run here (they are committed for
    /// another replica to take at once), streams end with a frame telling
    /// their clients to rejoin, and each running turn is handed off at its
    /// next commit. Returns when every turn has been handed off, or when
    /// `grace` has passed.
    pub async fn drain(&self, grace: Duration) {
        self.inner.drain.cancel();
        let deadline = tokio::time::Instant::now() + grace;
        for running in self.inner.running.iter() {
            running.stop(Stop::Drain);
        }
        loop {
            let idle = self.inner.idle.notified();
            if self.inner.running.is_empty() {
                break;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(left = self.inner.running.len(), "drain grace expired with turns still running here");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_taken_over_turn_waits_for_the_takeovers_in_flight_and_no_longer_than_its_bound() {
        let hints = Arc::new(Hints::default());
        // None in flight: no wait at all (the paused clock does not move).
        let start = Instant::now();
        hints.settled(SETTLE_MAX).await;
        assert_eq!(Instant::now(), start);

        // Two in flight: the wait ends when the last one does.
        let (first, second) = (InFlight::new(&hints), InFlight::new(&hints));
        let waiter = tokio::spawn({
            let hints = hints.clone();
            async move { hints.settled(Duration::from_secs(3600)).await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one takeover is still in flight");
        drop(second);
        waiter.await.unwrap();
        assert_eq!(hints.in_flight.load(Ordering::SeqCst), 0);

        // One that never ends: the bound ends the wait.
        let _stuck = InFlight::new(&hints);
        let start = Instant::now();
        hints.settled(SETTLE_MAX).await;
        assert_eq!(Instant::now() - start, SETTLE_MAX);
    }
}
