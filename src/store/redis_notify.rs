//! The Redis store's one subscription: a task that owns this replica's
//! pub/sub connection, the reference counts of the channels it listens to,
//! and its reconnection.
//!
//! Why one dedicated connection: a subscribed connection can do nothing else,
//! and pooled connections time out a response after 500 ms, so the
//! subscription gets its own connection from `Client::get_async_pubsub`,
//! shared by every session this replica watches (never one per follower).
//!
//! Why a task: the channel counts, the connection and the reconnection state
//! have exactly one owner, so they need no lock; `watch`/`unwatch` are
//! messages to it and wait for its answer (which comes after the SUBSCRIBE is
//! confirmed when the connection is up).
//!
//! When the connection fails the task retries with backoff (100 ms doubling
//! to 5 s), subscribes every watched channel again and then sends
//! [`Notice::Resubscribed`], because anything published meanwhile was lost.
//! While it is down, `watch` still registers the channel and returns `Ok`:
//! the channel is subscribed at reconnection, announced by that notice.
//! What the messages *mean* (channel and payload formats) is the store's; this
//! module only forwards them to the session layer, never dropping one.
//!
//! The replica's liveness channel (see [`liveness`](super::redis::liveness))
//! is subscribed with its own channel and never published on: its
//! subscriber count is the death hint. After every moment every channel is
//! confirmed subscribed, the task bumps a generation ([`Subscriber::subscribed`])
//! for the store to record which node holds the subscription now.

use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::{
    sync::{mpsc, oneshot, watch},
    time::{Instant, MissedTickBehavior, interval_at, sleep, timeout},
};
use tokio_util::task::AbortOnDropHandle;

use super::{
    Notice, SessionKey, StoreError,
    redis_watches::{Command, Watches, bump},
};

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that lived this long was healthy: the next failure starts the
/// backoff again from its minimum. Shorter-lived ones keep doubling it, so a
/// server that accepts and then drops us is not hammered either.
const STABLE_AFTER: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// A PING on the idle subscription notices a half-open TCP connection (a
/// vanished host sends no RST), which would otherwise deafen us silently.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Watch/unwatch requests waiting for the task.
const COMMAND_QUEUE: usize = 256;

/// Handle to the subscription task. Dropping it stops the task.
pub(super) struct Subscriber {
    commands: mpsc::Sender<Command>,
    subscribed: watch::Receiver<u64>,
    _task: AbortOnDropHandle<()>,
}

impl Subscriber {
    /// Spawns the task; it connects in the background (must be called inside
    /// a tokio runtime).
    /// `orphans` is the channel of hand-off announcements, always listened to.
    pub(super) fn spawn(client: redis::Client, notices: mpsc::Sender<Notice>, orphans: String) -> Self {
        let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
        let (generation, subscribed) = watch::channel(0);
        let task = Task { client, notices, commands: receiver, watched: Watches::default(), orphans, generation };
        Self { commands, subscribed, _task: AbortOnDropHandle::new(tokio::spawn(task.run())) }
    }

    /// The same on a Redis Cluster ([`redis_notify_cluster`](super::redis_notify_cluster)):
    /// `builder` is the cluster client's, given RESP3 and the push sender here.
    pub(super) fn spawn_cluster(
        builder: redis::cluster::ClusterClientBuilder,
        notices: mpsc::Sender<Notice>,
        orphans: String,
    ) -> Result<Self, StoreError> {
        let (pushes_tx, pushes) = mpsc::unbounded_channel();
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes_tx)
            .build()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
        let (generation, subscribed) = watch::channel(0);
        let task =
            super::redis_notify_cluster::Task { client, pushes, notices, commands: receiver, orphans, generation };
        Ok(Self { commands, subscribed, _task: AbortOnDropHandle::new(tokio::spawn(task.run())) })
    }

    /// Counts one more watcher of `channel` (whose messages are about `key`).
    pub(super) async fn watch(&self, channel: String, key: SessionKey) -> Result<(), StoreError> {
        self.request(|done| Command::Watch { channel, key, done }).await
    }

    pub(super) async fn unwatch(&self, channel: String) -> Result<(), StoreError> {
        self.request(|done| Command::Unwatch { channel, done }).await
    }

    /// Listens to `channel`, this replica's own, and subscribes `live`,
    /// its liveness channel, from now on.
    pub(super) async fn listen(&self, channel: String, live: Option<String>) -> Result<(), StoreError> {
        self.request(|done| Command::Listen { channel, live, done }).await
    }

    /// Bumped each time every channel, the liveness channel among them, is
    /// confirmed subscribed (a connection's first subscriptions, a
    /// reconnection's, a `listen`'s); 0 before the first.
    pub(super) fn subscribed(&self) -> watch::Receiver<u64> {
        self.subscribed.clone()
    }

    async fn request(&self, command: impl FnOnce(oneshot::Sender<()>) -> Command) -> Result<(), StoreError> {
        let stopped = || StoreError::Unavailable("the subscription task has stopped".to_string());
        let (done, answer) = oneshot::channel();
        self.commands.send(command(done)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }
}

struct Task {
    client: redis::Client,
    notices: mpsc::Sender<Notice>,
    commands: mpsc::Receiver<Command>,
    /// Channel → the session it is about and how many watchers it has.
    watched: Watches,
    /// The hand-off channel ([`Notice::Orphaned`]).
    orphans: String,
    /// Bumped when every channel is confirmed subscribed.
    generation: watch::Sender<u64>,
}

/// Why a connected period ended.
enum Ended {
    /// The store was dropped: stop for good.
    Stopped,
    /// The connection failed: reconnect.
    Lost(String),
}

impl Task {
    async fn run(mut self) {
        let mut backoff = MIN_BACKOFF;
        // Whether anything may have been missed (a failed attempt or a lost
        // connection) and must be announced once subscribed again: true
        // after the first pass, whichever way it ended.
        let mut owe_resubscribed = false;
        let mut failures = 0u32;
        loop {
            match self.connect().await {
                Ok((sink, stream)) => {
                    if failures > 0 {
                        tracing::info!(after_failures = failures, "redis subscription re-established");
                    }
                    failures = 0;
                    if owe_resubscribed {
                        let _ = self.notices.send(Notice::Resubscribed).await;
                    }
                    if self.watched.live().is_some() {
                        bump(&self.generation);
                    }
                    let since = Instant::now();
                    match self.serve(sink, stream).await {
                        Ended::Stopped => return,
                        Ended::Lost(reason) => {
                            tracing::warn!(%reason, "redis subscription lost; reconnecting");
                            if since.elapsed() >= STABLE_AFTER {
                                backoff = MIN_BACKOFF;
                            }
                        }
                    }
                }
                Err(reason) => {
                    failures += 1;
                    // Once per outage at warn; the retries every few seconds at debug.
                    if failures == 1 {
                        tracing::warn!(%reason, "redis subscription cannot connect; retrying with backoff");
                    } else {
                        tracing::debug!(%reason, failures, "redis subscription still cannot connect");
                    }
                }
            }
            owe_resubscribed = true;
            if !self.wait_out(backoff).await {
                return;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Connects and subscribes every watched channel, one SUBSCRIBE each: the
    /// sink pairs each confirmation with one request, so a multi-channel
    /// SUBSCRIBE would confuse it.
    async fn connect(&mut self) -> Result<(PubSubSink, PubSubStream), String> {
        let pubsub = timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let (mut sink, stream) = pubsub.split();
        subscribe(&mut sink, &self.orphans).await?;
        if let Some(own) = self.watched.own() {
            subscribe(&mut sink, own).await?;
        }
        if let Some(live) = self.watched.live() {
            subscribe(&mut sink, live).await?;
        }
        for channel in self.watched.channels() {
            subscribe(&mut sink, channel).await?;
        }
        Ok((sink, stream))
    }

    /// The connected loop. What wakes it:
    /// - a message on the subscription → a notice to the session layer;
    /// - a watch/unwatch request → counts, and SUBSCRIBE/UNSUBSCRIBE on 0↔1;
    /// - the keep-alive tick → PING;
    /// - the command channel closing (store dropped) → stop.
    async fn serve(&mut self, mut sink: PubSubSink, mut stream: PubSubStream) -> Ended {
        let mut keepalive = interval_at(Instant::now() + KEEPALIVE, KEEPALIVE);
        keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = stream.next() => match message {
                    Some(message) => self.deliver(&message).await,
                    None => return Ended::Lost("connection closed".to_string()),
                },
                command = self.commands.recv() => match command {
                    Some(command) => {
                        if let Err(reason) = self.apply(command, Some(&mut sink)).await {
                            return Ended::Lost(reason);
                        }
                    }
                    None => return Ended::Stopped,
                },
                _ = keepalive.tick() => {
                    match timeout(COMMAND_TIMEOUT, sink.ping::<redis::Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Ended::Lost(e.to_string()),
                        Err(_) => return Ended::Lost("keep-alive PING timed out".to_string()),
                    }
                }
            }
        }
    }

    /// Sleeps `backoff` while still answering watch/unwatch (they only
    /// register). False when the store was dropped meanwhile.
    async fn wait_out(&mut self, backoff: Duration) -> bool {
        let until = sleep(backoff);
        tokio::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => return true,
                command = self.commands.recv() => match command {
                    Some(command) => {
                        // Without a connection nothing can fail.
                        let _ = self.apply(command, None).await;
                    }
                    None => return false,
                },
            }
        }
    }

    /// Updates the counts, and the subscription when connected. The caller
    /// is answered in every case (the registration stands); an error means
    /// the connection is broken and must be replaced.
    async fn apply(&mut self, command: Command, sink: Option<&mut PubSubSink>) -> Result<(), String> {
        match command {
            Command::Watch { channel, key, done } => {
                let first = self.watched.add(&channel, key);
                let result = match sink {
                    Some(sink) if first => subscribe(sink, &channel).await,
                    _ => Ok(()),
                };
                let _ = done.send(());
                result
            }
            Command::Unwatch { channel, done } => {
                let last = self.watched.remove(&channel);
                let result = match sink {
                    Some(sink) if last => unsubscribe(sink, &channel).await,
                    _ => Ok(()),
                };
                let _ = done.send(());
                result
            }
            Command::Listen { channel, live, done } => {
                let new = self.watched.listen(channel.clone(), live.clone());
                let result = match sink {
                    Some(sink) if new => {
                        let result = async {
                            subscribe(sink, &channel).await?;
                            match &live {
                                Some(live) => subscribe(sink, live).await,
                                None => Ok(()),
                            }
                        }
                        .await;
                        if result.is_ok() && live.is_some() {
                            bump(&self.generation);
                        }
                        result
                    }
                    _ => Ok(()),
                };
                let _ = done.send(());
                result
            }
        }
    }

    /// Forwards one message as a notice; waits while the session layer is
    /// behind rather than dropping it. Messages of channels no longer watched
    /// (published just before an UNSUBSCRIBE) are ignored.
    async fn deliver(&self, message: &redis::Msg) {
        if let Some(notice) =
            self.watched.notice(&self.orphans, message.get_channel_name(), message.get_payload_bytes())
        {
            // An error means the session layer is gone (shutting down): nothing to do.
            let _ = self.notices.send(notice).await;
        }
    }
}

async fn subscribe(sink: &mut PubSubSink, channel: &str) -> Result<(), String> {
    match timeout(COMMAND_TIMEOUT, sink.subscribe(channel)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("SUBSCRIBE timed out".to_string()),
    }
}

async fn unsubscribe(sink: &mut PubSubSink, channel: &str) -> Result<(), String> {
    match timeout(COMMAND_TIMEOUT, sink.unsubscribe(channel)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("UNSUBSCRIBE timed out".to_string()),
    }
}
