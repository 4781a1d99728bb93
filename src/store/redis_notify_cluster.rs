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

use std::time::Duration;

use redis::{PushInfo, PushKind, Value, cluster::ClusterClient, cluster_async::ClusterConnection};
use tokio::{
    sync::{mpsc, watch},
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

struct State {
    connection: Option<ClusterConnection>,
    watched: Watches,
    /// When to subscribe everything again (None: all confirmed).
    repair_at: Option<Instant>,
    backoff: Duration,
    /// Whether notices may have been missed since the last confirmation.
    owe_resubscribed: bool,
}

impl Task {
    pub(super) async fn run(mut self) {
        let mut state = State {
            connection: None,
            watched: Watches::default(),
            repair_at: Some(Instant::now()),
            backoff: MIN_BACKOFF,
            owe_resubscribed: false,
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
                    Some(command) => state.apply(command, &self.generation).await,
                    None => return,
                },
                _ = sleep_until(repair_at.unwrap_or_else(Instant::now)), if repair_at.is_some() => {
                    self.repair(&mut state).await;
                }
                _ = keepalive.tick() => {
                    // A PING to every node notices a half-open connection.
                    if let Some(connection) = state.connection.as_mut() {
                        let ping = timeout(COMMAND_TIMEOUT, redis::cmd("PING").query_async::<Value>(connection)).await;
                        if !matches!(ping, Ok(Ok(_))) {
                            state.lost("keep-alive PING failed");
                        }
                    }
                }
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

    /// Connects if needed and subscribes the orphans channel and every
    /// watched channel; on success, announces what may have been missed.
    async fn repair(&self, state: &mut State) {
        let result = async {
            if state.connection.is_none() {
                let connection = timeout(COMMAND_TIMEOUT, self.client.get_async_connection())
                    .await
                    .map_err(|_| "connect timed out".to_string())?
                    .map_err(|e| e.to_string())?;
                state.connection = Some(connection);
            }
            let connection = state.connection.as_mut().expect("connected above");
            command_on(connection, "SUBSCRIBE", &self.orphans).await?;
            if let Some(own) = state.watched.own() {
                command_on(connection, "SUBSCRIBE", own).await?;
            }
            // A shard channel: subscribed on its slot's primary, where its
            // subscriber count is read.
            if let Some(live) = state.watched.live() {
                command_on(connection, "SSUBSCRIBE", live).await?;
            }
            let channels: Vec<String> = state.watched.channels().cloned().collect();
            for channel in channels {
                command_on(connection, "SSUBSCRIBE", &channel).await?;
            }
            Ok::<(), String>(())
        }
        .await;
        match result {
            Ok(()) => {
                if state.owe_resubscribed {
                    tracing::info!("redis cluster subscription re-established");
                    let _ = self.notices.send(Notice::Resubscribed).await;
                }
                state.repair_at = None;
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
                state.owe_resubscribed = true;
                state.repair_at = Some(Instant::now() + state.backoff);
                state.backoff = (state.backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

impl State {
    /// Something may have been missed: subscribe everything again soon.
    fn lost(&mut self, reason: &str) {
        tracing::debug!(reason, "redis cluster subscription interrupted");
        self.owe_resubscribed = true;
        if self.repair_at.is_none() {
            self.repair_at = Some(Instant::now() + MIN_BACKOFF);
        }
    }

    /// Counts, and `SSUBSCRIBE`/`SUNSUBSCRIBE` on 0↔1 when connected and
    /// not repairing (a repair subscribes every watched channel anyway).
    async fn apply(&mut self, command: Command, generation: &watch::Sender<u64>) {
        match command {
            Command::Watch { channel, key, done } => {
                if self.watched.add(&channel, key)
                    && self.repair_at.is_none()
                    && let Some(connection) = self.connection.as_mut()
                    && command_on(connection, "SSUBSCRIBE", &channel).await.is_err()
                {
                    self.lost("SSUBSCRIBE failed");
                }
                let _ = done.send(());
            }
            Command::Unwatch { channel, done } => {
                // A failure leaves a subscription nobody reads: its
                // messages are ignored.
                if self.watched.remove(&channel)
                    && let Some(connection) = self.connection.as_mut()
                {
                    let _ = command_on(connection, "SUNSUBSCRIBE", &channel).await;
                }
                let _ = done.send(());
            }
            // A plain channel: a cluster broadcasts it to every node.
            Command::Listen { channel, live, done } => {
                if self.watched.listen(channel.clone(), live.clone())
                    && self.repair_at.is_none()
                    && let Some(connection) = self.connection.as_mut()
                {
                    let subscribed = async {
                        command_on(connection, "SUBSCRIBE", &channel).await?;
                        match &live {
                            Some(live) => command_on(connection, "SSUBSCRIBE", live).await,
                            None => Ok(()),
                        }
                    }
                    .await;
                    match subscribed {
                        Ok(()) if live.is_some() => bump(generation),
                        Ok(()) => {}
                        Err(_) => self.lost("SUBSCRIBE failed"),
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

async fn command_on(connection: &mut ClusterConnection, name: &str, channel: &str) -> Result<(), String> {
    match timeout(COMMAND_TIMEOUT, redis::cmd(name).arg(channel).exec_async(connection)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("{name} timed out")),
    }
}
