//! The store's command connection to one Redis or to a Redis Cluster, and
//! the two things the cluster changes for its callers: a batch whose
//! commands live in several slots ([`Spread`]), and `WAIT` for replicas.
//!
//! One Redis: a `ConnectionManager` (one multiplexed connection, reconnected
//! in the background). A cluster: the `redis` crate's async cluster
//! connection, which keeps one multiplexed connection per node, routes each
//! command by its key's slot, follows MOVED/ASK, refreshes the topology
//! after a failover and retries; none of that is written here. It is made
//! on first use (connecting to a cluster needs a node to answer), so the app
//! starts while the cluster is down, as it does with one Redis.

use std::sync::Arc;

use futures::future::join_all;
use redis::{
    Cmd, Pipeline, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
    cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr},
};
use tokio::sync::OnceCell;

use crate::store::SessionKey;

/// A cluster connection, made by the first command that needs it; a failed
/// attempt leaves it unmade, so the next command tries again.
pub(super) struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl LazyCluster {
    pub(super) fn new(client: ClusterClient) -> Self {
        Self { client, connection: OnceCell::new() }
    }

    async fn get(&self) -> RedisResult<ClusterConnection> {
        self.connection.get_or_try_init(|| self.client.get_async_connection()).await.cloned()
    }
}

/// A handle on the command connection; cheap to clone (one per call).
#[derive(Clone)]
pub(super) enum Conn {
    Node(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(manager) => manager.req_packed_command(cmd),
            Conn::Cluster(cluster) => Box::pin(async move { cluster.get().await?.req_packed_command(cmd).await }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(manager) => manager.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(cluster) => {
                Box::pin(async move { cluster.get().await?.req_packed_commands(pipeline, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Conn {
    /// Sends a [`Spread`]: the answered commands' replies, in order (an
    /// error reply is that command's `Err`; the outer error is a failed
    /// exchange), and the hints that were not written and must be redone.
    ///
    /// One Redis: the batch as it was built, one pipeline, one write and
    /// one read, each hint after the commands before it. A cluster: first
    /// the answered commands, each routed to its slot's node and all in
    /// flight at once (the client pipelines those of one node on its
    /// connection; a group's commands go as one pipeline, in order), then
    /// the hints the same way, so a hint never goes
    /// before the write it follows (a replica that hears of an orphan finds
    /// it released). Hints' failures are logged, not returned as errors:
    /// they are hints, redone from the session's state where one was lost
    /// ([`repair`](super::repair)).
    pub(super) async fn send(&mut self, mut spread: Spread) -> RedisResult<Sent> {
        debug_assert_eq!(spread.pipe.len(), spread.roles.len(), "one command per answered()/hint()");
        if spread.pipe.is_empty() {
            return Ok(Sent::default());
        }
        let all: Vec<RedisResult<Value>> = match self {
            Conn::Node(manager) => {
                spread.pipe.ignore_errors();
                spread.pipe.query_async(manager).await?
            }
            Conn::Cluster(cluster) => {
                let connection = cluster.get().await?;
                // Answered commands: each alone, or a group (one session's
                // appends and commit, in one slot) as one pipeline, so its
                // commands run in their order.
                let mut units: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
                for (i, role) in spread.roles.iter().enumerate() {
                    match role {
                        Role::Answered(Some(group)) => match units.iter_mut().find(|(g, _)| *g == Some(*group)) {
                            Some((_, members)) => members.push(i),
                            None => units.push((Some(*group), vec![i])),
                        },
                        Role::Answered(None) => units.push((None, vec![i])),
                        Role::Hint(_) => {}
                    }
                }
                let commands: Vec<&Cmd> = spread.pipe.cmd_iter().collect();
                let answered = join_all(units.iter().map(|(_, members)| {
                    let mut connection = connection.clone();
                    let mut pipe = redis::pipe();
                    for &i in members {
                        pipe.add_command(commands[i].clone());
                    }
                    pipe.ignore_errors();
                    async move {
                        match pipe.query_async::<Vec<RedisResult<Value>>>(&mut connection).await {
                            Ok(replies) => replies,
                            Err(e) => pipe.cmd_iter().map(|_| Err(e.clone())).collect(),
                        }
                    }
                }))
                .await;
                let mut replies: Vec<Option<RedisResult<Value>>> = spread.roles.iter().map(|_| None).collect();
                for ((_, members), unit) in units.iter().zip(answered) {
                    for (&i, reply) in members.iter().zip(unit) {
                        replies[i] = Some(reply);
                    }
                }
                // Then the hints, so a hint never goes before the write it
                // follows.
                let hints = join_all(
                    spread.pipe.cmd_iter().zip(&spread.roles).enumerate().filter(|(_, (_, r))| !r.answered()).map(
                        |(i, (cmd, _))| {
                            let mut connection = connection.clone();
                            async move { (i, cmd.query_async::<Value>(&mut connection).await) }
                        },
                    ),
                )
                .await;
                for (i, reply) in hints {
                    replies[i] = Some(reply);
                }
                replies.into_iter().map(|reply| reply.expect("one reply per command")).collect()
            }
        };
        let mut sent = Sent::default();
        for (reply, role) in all.into_iter().zip(spread.roles) {
            match role {
                Role::Answered(_) => sent.replies.push(reply),
                Role::Hint(redo) => {
                    if let Err(error) = reply {
                        tracing::warn!(%error, "an index hint was not written");
                        sent.lost.extend(redo);
                    }
                }
            }
        }
        Ok(sent)
    }

    /// Whether this is a cluster's connection.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs `commands` in order on the node that holds `key`'s slot (its
    /// primary): one pipeline on one Redis; on a cluster each routed to
    /// that node in turn, so a later one sees the node the earlier one did
    /// or a newer one (after a failover), never an older one.
    pub(super) async fn on_node_of(&mut self, key: &str, commands: Vec<Cmd>) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Node(manager) => {
                let mut pipe = redis::pipe();
                for command in commands {
                    pipe.add_command(command);
                }
                pipe.query_async(manager).await
            }
            Conn::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                let route = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
                let mut replies = Vec::with_capacity(commands.len());
                for command in commands {
                    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    replies.push(connection.route_command(command, routing).await?);
                }
                Ok(replies)
            }
        }
    }

    /// Waits until `replicas` replicas have every write this connection
    /// made (`WAIT`), at most `timeout_ms`; answers how many did. On a
    /// cluster, the primaries of `keys` (those the writes went to) are
    /// asked, each on the connection that carried its writes, and the
    /// fewest count. A primary with no replica in sync (one just promoted,
    /// its old primary not yet back as its replica) answers 0.
    pub(super) async fn wait_replicas(&mut self, replicas: u32, timeout_ms: u64, keys: &[String]) -> RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        match self {
            Conn::Node(manager) => wait.query_async(manager).await,
            Conn::Cluster(cluster) => {
                let connection = cluster.get().await?;
                let slots: std::collections::HashSet<Slot> = keys.iter().map(Slot::for_key).collect();
                let answers = join_all(slots.into_iter().map(|slot| {
                    let mut connection = connection.clone();
                    let route = Route::with_slot(slot, SlotAddr::Master);
                    let wait = wait.clone();
                    async move {
                        let reply = connection
                            .route_command(wait, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)))
                            .await?;
                        // An error reply is the node's (a failover's
                        // replica, reached through a stale view, refuses
                        // `WAIT`): the write is not acknowledged yet, and
                        // sent again — not a reply the store cannot read.
                        Ok::<u32, redis::RedisError>(redis::from_redis_value(reply.extract_error()?)?)
                    }
                }))
                .await;
                let mut fewest = replicas;
                for answer in answers {
                    fewest = fewest.min(answer?);
                }
                Ok(fewest)
            }
        }
    }
}

/// Commands of several slots sent as one batch ([`Conn::send`]): each is
/// answered (its reply comes back: a session's commit script) or a hint (an
/// index entry in another slot, whose reply is not wanted; whoever finds it
/// re-checks it against the session). Each `answered()`/`hint()` takes
/// exactly one command.
#[derive(Default)]
pub(super) struct Spread {
    pipe: Pipeline,
    /// Per command of `pipe`.
    roles: Vec<Role>,
}

enum Role {
    /// Its reply comes back; commands of one group run in their order.
    Answered(Option<usize>),
    /// A hint, and how to redo it if it is lost (`None`: a removal or a
    /// wake-up, which nothing needs redone).
    Hint(Option<Redo>),
}

impl Role {
    fn answered(&self) -> bool {
        matches!(self, Role::Answered(_))
    }
}

impl Spread {
    /// Room for `commands` commands (a round's are counted before it is
    /// built: per token, growing the lists costs more than sizing them).
    pub(super) fn with_capacity(commands: usize) -> Self {
        Self { pipe: Pipeline::with_capacity(commands), roles: Vec::with_capacity(commands) }
    }

    /// Where the next command goes; its reply comes back from [`Conn::send`].
    pub(super) fn answered(&mut self) -> &mut Pipeline {
        self.roles.push(Role::Answered(None));
        &mut self.pipe
    }

    /// Like [`Spread::answered`], in `group`: the commands of one group
    /// (of one slot) run in the order they were added, on a cluster too.
    pub(super) fn answered_in(&mut self, group: usize) -> &mut Pipeline {
        self.roles.push(Role::Answered(Some(group)));
        &mut self.pipe
    }

    /// Where the next command goes; its reply is not wanted, and if it is
    /// lost nothing is redone (a removal: a stale entry is pruned by
    /// whoever finds it; a wake-up: the sweep also polls).
    pub(super) fn hint(&mut self) -> &mut Pipeline {
        self.roles.push(Role::Hint(None));
        &mut self.pipe
    }

    /// How many commands it holds.
    pub(super) fn len(&self) -> usize {
        self.roles.len()
    }

    /// Where the next command goes: an index entry that must exist; if it
    /// is lost, [`Conn::send`] returns `redo`.
    pub(super) fn hint_or_redo(&mut self, redo: Redo) -> &mut Pipeline {
        self.roles.push(Role::Hint(Some(redo)));
        &mut self.pipe
    }
}

/// A lost index entry: what it is derived from when written again (by
/// [`repair`](super::repair), which queues what [`Conn::send`] reports lost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Redo {
    /// The session's entry in its owner's `owned` set or in `orphans`.
    Ownership(SessionKey),
    /// A created session's entry `position` in the list `list`.
    Listed { key: SessionKey, list: String, position: String },
}

/// What [`Conn::send`] answers.
#[derive(Default)]
pub(super) struct Sent {
    /// The answered commands' replies, in order.
    pub(super) replies: Vec<RedisResult<Value>>,
    /// The lost hints' redos.
    pub(super) lost: Vec<Redo>,
}
