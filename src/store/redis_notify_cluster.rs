//! The subscription on a Redis Cluster: the same task contract as
//! [`redis_notify`](super::redis_notify) (watch/unwatch counted per channel,
//! every message forwarded, [`Notice::Resubscribed`] whenever one may have
//! been missed), over the cluster client's push messages.
//!
//! A session's notice channel is a shard channel (`SSUBSCRIBE`), tagged like
//! the session's keys, so its notices are published by the node that holds
//! the session (from inside the commit script) and go to that node's
//! subscribers only; so is the replica's liveness channel (its subscriber
//! count is read on its slot's primary); the orphans channel and the
//! replica's own channel are plain channels, which a cluster broadcasts to
//! every node. The cluster client (RESP3, a push sender) keeps
//! one connection per node, routes each `SSUBSCRIBE` to its slot's primary,
//! and subscribes again by itself after it reconnects or learns a new
//! topology. What it cannot tell us is what was published in between: a
//! node connection that drops says so (a `Disconnection` push), and a
//! server that gives up a slot unsubscribes its channels (an unasked
//! `SUNSUBSCRIBE`). After either, this task subscribes every watched channel
//! again itself (which also makes the client refresh its view of the
//! topology), with backoff until all of them are confirmed, and then sends
//! [`Notice::Resubscribed`] so followers re-read their logs.
//!
//! The task itself never waits on a node. Each `SSUBSCRIBE` or
//! `SUNSUBSCRIBE`, the keep-alive `PING` and a repair run as futures beside
//! its loop, so a node that does not answer (a primary just killed, a
//! client's stale view of the topology) delays the watchers of that node's
//! channels, each by at most [`COMMAND_TIMEOUT`], and nobody else's: a
//! watch that comes while a repair runs is subscribed beside it and
//! answered once confirmed (at start-up, before the first connection is
//! made, once the repair making it ends); while a failed repair waits to be
//! tried again, it is counted and answered at once, and that repair's
//! [`Notice::Resubscribed`] tells its follower to read again.
//! Commands on one channel stay in order: one in flight per channel, the
//! rest queued behind it. (Waiting on the node in the loop itself made a
//! replica's new followers wait tens of seconds behind a failover's timed-out
//! unsubscriptions.)

use std::{
    collections::{HashMap, VecDeque},
    time::Duration,
};

use futures::{
    StreamExt,
    future::{BoxFuture, OptionFuture},
    stream::FuturesUnordered,
};
use redis::{PushInfo, PushKind, Value, cluster::ClusterClient, cluster_async::ClusterConnection};
use tokio::{
    sync::{mpsc, oneshot, watch},
    time::{Instant, MissedTickBehavior, interval_at, sleep_until, timeout},
};

use super::{
    Notice,
    redis_watches::{Command, Watches, bump},
};

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
const KEEPALIVE: Duration = Duration::from_secs(15);

pub(super) struct Task {
    pub(super) client: ClusterClient,
    pub(super) pushes: mpsc::UnboundedReceiver<PushInfo>,
    pub(super) notices: mpsc::Sender<Notice>,
    pub(super) commands: mpsc::Receiver<Command>,
    pub(super) orphans: String,
    pub(super) generation: watch::Sender<u64>,
}

/// What a command on the node was for, told with its result.
enum Target {
    /// A channel's `SSUBSCRIBE` or `SUNSUBSCRIBE`.
    Channel(String),
    /// This replica's own channel and, if `live`, its liveness channel.
    Listen {
        channel: String,
        live: bool,
    },
    Ping,
}

type Op = BoxFuture<'static, (Target, Result<(), String>)>;

/// A repair's end: the connection (kept even when a subscription failed),
/// the channels it subscribed, and whether all of them were confirmed.
struct Repaired {
    connection: Option<ClusterConnection>,
    channels: Vec<String>,
    result: Result<(), String>,
}

/// A channel with a command on the node: who waits for its answer, and the
/// commands on the same channel that came meanwhile (run after it, in order).
struct Busy {
    done: Option<oneshot::Sender<()>>,
    queued: VecDeque<Command>,
}

struct State {
    connection: Option<ClusterConnection>,
    watched: Watches,
    /// When to subscribe everything again (None: all confirmed, or a
    /// repair runs).
    repair_at: Option<Instant>,
    /// The repair that runs now.
    repair: Option<BoxFuture<'static, Repaired>>,
    /// Something the running repair did not include needs subscribing:
    /// another repair follows it.
    again: bool,
    backoff: Duration,
    /// Whether notices may have been missed since the last confirmation.
    owe_resubscribed: bool,
    /// Commands on the node in flight.
    ops: FuturesUnordered<Op>,
    busy: HashMap<String, Busy>,
    /// Commands that came while the first connection was being made: run
    /// (in order) once the repair making it ends, so a watch asked at
    /// start-up is answered once its channel is subscribed.
    deferred: VecDeque<Command>,
    pinging: bool,
}

impl Task {
    pub(super) async fn run(mut self) {
        let mut state = State {
            connection: None,
            watched: Watches::default(),
            repair_at: Some(Instant::now()),
            repair: None,
            again: false,
            backoff: MIN_BACKOFF,
            owe_resubscribed: false,
            ops: FuturesUnordered::new(),
            busy: HashMap::new(),
            deferred: VecDeque::new(),
            pinging: false,
        };
        let mut keepalive = interval_at(Instant::now() + KEEPALIVE, KEEPALIVE);
        keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let repair_at = state.repair_at;
            tokio::select! {
                push = self.pushes.recv() => match push {
                    Some(push) => self.on_push(&mut state, push).await,
                    // Only the client (ours) holds the sender.
                    None => return,
                },
                command = self.commands.recv() => match command {
                    Some(command) => state.apply(command),
                    None => return,
                },
                Some((target, result)) = state.ops.next(), if !state.ops.is_empty() => {
                    state.finished(target, result, &self.generation);
                }
                Some(repaired) = OptionFuture::from(state.repair.as_mut()), if state.repair.is_some() => {
                    state.repair = None;
                    self.repaired(&mut state, repaired).await;
                }
                _ = sleep_until(repair_at.unwrap_or_else(Instant::now)), if repair_at.is_some() => {
                    state.start_repair(&self.client, &self.orphans);
                }
                _ = keepalive.tick() => state.ping(),
            }
        }
    }

    async fn on_push(&self, state: &mut State, push: PushInfo) {
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                let [Value::BulkString(channel), Value::BulkString(payload), ..] = push.data.as_slice() else {
                    return;
                };
                if let Some(notice) = state.watched.notice(&self.orphans, &String::from_utf8_lossy(channel), payload) {
                    let _ = self.notices.send(notice).await;
                }
            }
            PushKind::Disconnection => state.lost("a node's connection dropped"),
            // A server unsubscribes a shard channel itself when its slot
            // moves (or the node became a replica); ours are of channels no
            // longer watched.
            PushKind::SUnsubscribe => {
                if let [Value::BulkString(channel), ..] = push.data.as_slice()
                    && state.watched.contains(&String::from_utf8_lossy(channel))
                {
                    state.lost("the cluster moved a watched channel");
                }
            }
            _ => {}
        }
    }

    /// A repair ended: on success, what may have been missed is announced
    /// (unless a second repair must subscribe what came meanwhile), and
    /// channels unwatched while it ran are unsubscribed.
    async fn repaired(&self, state: &mut State, repaired: Repaired) {
        state.connection = repaired.connection.or(state.connection.take());
        match repaired.result {
            Ok(()) if state.again => {
                state.again = false;
                state.owe_resubscribed = true;
                state.repair_at = Some(Instant::now());
            }
            Ok(()) => {
                if state.owe_resubscribed {
                    tracing::info!("redis cluster subscription re-established");
                    let _ = self.notices.send(Notice::Resubscribed).await;
                }
                state.backoff = MIN_BACKOFF;
                state.owe_resubscribed = false;
                if state.watched.live().is_some() {
                    bump(&self.generation);
                }
            }
            Err(reason) => {
                if state.backoff == MIN_BACKOFF {
                    tracing::warn!(%reason, "redis cluster subscription failed; retrying with backoff");
                } else {
                    tracing::debug!(%reason, "redis cluster subscription still failing");
                }
                state.again = false;
                state.owe_resubscribed = true;
                state.repair_at = Some(Instant::now() + state.backoff);
                state.backoff = (state.backoff * 2).min(MAX_BACKOFF);
            }
        }
        for channel in repaired.channels {
            if !state.watched.contains(&channel) && !state.busy.contains_key(&channel) {
                let commands = vec![("SUNSUBSCRIBE", channel.clone())];
                state.start(Target::Channel(channel.clone()), channel, commands, None);
            }
        }
        for command in std::mem::take(&mut state.deferred) {
            state.apply(command);
        }
    }
}

impl State {
    /// Something may have been missed: subscribe everything again soon.
    fn lost(&mut self, reason: &str) {
        tracing::debug!(reason, "redis cluster subscription interrupted");
        self.owe_resubscribed = true;
        if self.repair.is_some() {
            self.again = true;
        } else if self.repair_at.is_none() {
            self.repair_at = Some(Instant::now() + MIN_BACKOFF);
        }
    }

    /// Whether a channel's subscription is sent now (connected, and no
    /// failed re-subscription waiting to be tried again; beside a repair
    /// that runs, whose list was read before); otherwise the next repair
    /// subscribes it.
    fn subscribing(&self) -> bool {
        self.connection.is_some() && self.repair_at.is_none()
    }

    /// Connects if needed and subscribes the orphans channel and every
    /// watched channel, in a future of its own.
    fn start_repair(&mut self, client: &ClusterClient, orphans: &str) {
        self.repair_at = None;
        self.again = false;
        let (client, connection) = (client.clone(), self.connection.clone());
        // Shard channels: each subscribed on its slot's primary (where the
        // liveness channel's subscriber count is read).
        let sharded: Vec<String> = self.watched.live().into_iter().chain(self.watched.channels()).cloned().collect();
        let mut commands = vec![("SUBSCRIBE", orphans.to_string())];
        commands.extend(self.watched.own().map(|own| ("SUBSCRIBE", own.clone())));
        commands.extend(sharded.iter().map(|channel| ("SSUBSCRIBE", channel.clone())));
        self.repair = Some(Box::pin(async move {
            let mut connection = connection;
            let result = async {
                if connection.is_none() {
                    let made = timeout(COMMAND_TIMEOUT, client.get_async_connection())
                        .await
                        .map_err(|_| "connect timed out".to_string())?
                        .map_err(|e| e.to_string())?;
                    connection = Some(made);
                }
                commands_on(connection.as_mut().expect("connected above"), &commands).await
            }
            .await;
            Repaired { connection, channels: sharded, result }
        }));
    }

    /// A command from the handle: queued behind the one in flight on its
    /// channel, or applied now.
    fn apply(&mut self, command: Command) {
        let channel = match &command {
            Command::Watch { channel, .. } | Command::Unwatch { channel, .. } | Command::Listen { channel, .. } => {
                channel
            }
        };
        if let Some(busy) = self.busy.get_mut(channel) {
            busy.queued.push_back(command);
            return;
        }
        if self.repair.is_some() && self.connection.is_none() {
            self.deferred.push_back(command);
            return;
        }
        match command {
            Command::Watch { channel, key, done } => {
                let first = self.watched.add(&channel, key);
                if first && self.subscribing() {
                    let commands = vec![("SSUBSCRIBE", channel.clone())];
                    self.start(Target::Channel(channel.clone()), channel, commands, Some(done));
                    return;
                }
                let _ = done.send(());
            }
            Command::Unwatch { channel, done } => {
                // A failure leaves a subscription nobody reads: its messages
                // are ignored. A repair that subscribed it meanwhile
                // unsubscribes it at its end.
                if self.watched.remove(&channel) && self.connection.is_some() {
                    let commands = vec![("SUNSUBSCRIBE", channel.clone())];
                    self.start(Target::Channel(channel.clone()), channel, commands, None);
                }
                let _ = done.send(());
            }
            // A plain channel: a cluster broadcasts it to every node.
            Command::Listen { channel, live, done } => {
                let new = self.watched.listen(channel.clone(), live.clone());
                if new && self.subscribing() {
                    let target = Target::Listen { channel: channel.clone(), live: live.is_some() };
                    let mut commands = vec![("SUBSCRIBE", channel.clone())];
                    commands.extend(live.map(|live| ("SSUBSCRIBE", live)));
                    self.start(target, channel, commands, Some(done));
                    return;
                }
                let _ = done.send(());
            }
        }
    }

    /// Sends `commands` (each a command and its channel), in order, beside
    /// the loop, `channel` busy meanwhile; `done` is answered when the node
    /// has.
    fn start(
        &mut self,
        target: Target,
        channel: String,
        commands: Vec<(&'static str, String)>,
        done: Option<oneshot::Sender<()>>,
    ) {
        let Some(mut connection) = self.connection.clone() else {
            if let Some(done) = done {
                let _ = done.send(());
            }
            return;
        };
        self.busy.insert(channel, Busy { done, queued: VecDeque::new() });
        self.ops.push(Box::pin(async move { (target, commands_on(&mut connection, &commands).await) }));
    }

    /// A command on the node answered (or timed out): its caller is
    /// answered either way (a failure schedules a repair, whose end tells
    /// followers to read again), and its channel's queued commands run.
    fn finished(&mut self, target: Target, result: Result<(), String>, generation: &watch::Sender<u64>) {
        let channel = match target {
            Target::Ping => {
                self.pinging = false;
                if result.is_err() {
                    self.lost("keep-alive PING failed");
                }
                return;
            }
            Target::Listen { channel, live } => {
                if result.is_ok() && live {
                    bump(generation);
                }
                channel
            }
            Target::Channel(channel) => channel,
        };
        if let Err(reason) = &result {
            self.lost(reason);
        }
        let Some(mut busy) = self.busy.remove(&channel) else { return };
        if let Some(done) = busy.done.take() {
            let _ = done.send(());
        }
        while let Some(command) = busy.queued.pop_front() {
            self.apply(command);
            if let Some(next) = self.busy.get_mut(&channel) {
                next.queued.extend(busy.queued.drain(..));
                break;
            }
        }
    }

    /// A PING to every node notices a half-open connection.
    fn ping(&mut self) {
        let Some(mut connection) = self.connection.clone() else { return };
        if self.pinging {
            return;
        }
        self.pinging = true;
        self.ops.push(Box::pin(async move {
            let ping = timeout(COMMAND_TIMEOUT, redis::cmd("PING").query_async::<Value>(&mut connection)).await;
            (Target::Ping, if matches!(ping, Ok(Ok(_))) { Ok(()) } else { Err("keep-alive PING failed".to_string()) })
        }));
    }
}

/// Each `(command, channel)` in turn, stopping at the first failure.
async fn commands_on(connection: &mut ClusterConnection, commands: &[(&'static str, String)]) -> Result<(), String> {
    for (name, channel) in commands {
        command_on(connection, name, channel).await?;
    }
    Ok(())
}

async fn command_on(connection: &mut ClusterConnection, name: &str, channel: &str) -> Result<(), String> {
    match timeout(COMMAND_TIMEOUT, redis::cmd(name).arg(channel).exec_async(connection)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("{name} timed out")),
    }
}
