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
    /// Sends a [`Spread`]: the answered units' replies, in order (an error
    /// reply is that unit's `Err`; the outer error is a failed exchange).
    ///
    /// One Redis: every unit in one pipeline, one write and one read, the
    /// hints after the units before them as written. A cluster: first the
    /// answered units, each routed to its slot's node and all in flight at
    /// once (the client pipelines those of one node on its connection),
    /// then the hints the same way. A hint never goes before the write it
    /// follows, so a replica that hears of an orphan finds it released.
    /// Hints' failures are logged, not returned: they are hints (see the
    /// callers for what a lost one costs).
    pub(super) async fn send(&mut self, spread: Spread) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            Conn::Node(manager) => {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for (unit, answered) in &spread.units {
                    for cmd in unit.cmd_iter() {
                        pipe.add_command(cmd.clone());
                        if !answered {
                            pipe.ignore();
                        }
                    }
                }
                if pipe.is_empty() {
                    return Ok(Vec::new());
                }
                pipe.query_async(manager).await
            }
            Conn::Cluster(cluster) => {
                let connection = cluster.get().await?;
                let run = |units: Vec<Pipeline>| {
                    join_all(units.into_iter().map(|mut unit| {
                        let mut connection = connection.clone();
                        async move {
                            unit.ignore_errors();
                            let replies: RedisResult<Vec<RedisResult<Value>>> = unit.query_async(&mut connection).await;
                            replies
                        }
                    }))
                };
                let (answered, hints): (Vec<_>, Vec<_>) = spread.units.into_iter().partition(|(_, answered)| *answered);
                let replies = run(answered.into_iter().map(|(unit, _)| unit).collect()).await;
                let mut out = Vec::with_capacity(replies.len());
                for reply in replies {
                    match reply {
                        Ok(values) => out.extend(values),
                        // The exchange failed for this unit alone: its
                        // commands' outcome is unknown, like a lost answer.
                        Err(error) => out.push(Err(error)),
                    }
                }
                for reply in run(hints.into_iter().map(|(unit, _)| unit).collect()).await {
                    let failed = match reply {
                        Ok(values) => values.into_iter().find_map(Result::err),
                        Err(error) => Some(error),
                    };
                    if let Some(error) = failed {
                        tracing::warn!(%error, "an index hint was not written");
                    }
                }
                Ok(out)
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
                        Ok::<u32, redis::RedisError>(redis::from_redis_value(reply)?)
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

/// Commands of several slots sent as one batch ([`Conn::send`]). A unit
/// is a pipeline whose commands share one slot; its replies are wanted
/// (a session's commit script) or not (a hint: an index entry in another
/// slot that the sweep or a reader re-checks and repairs).
#[derive(Default)]
pub(super) struct Spread {
    units: Vec<(Pipeline, bool)>,
}

impl Spread {
    /// A unit whose replies come back from [`Conn::send`].
    pub(super) fn answered(&mut self) -> &mut Pipeline {
        self.units.push((redis::pipe(), true));
        &mut self.units.last_mut().expect("just pushed").0
    }

    /// A unit whose replies are not wanted.
    pub(super) fn hint(&mut self) -> &mut Pipeline {
        self.units.push((redis::pipe(), false));
        &mut self.units.last_mut().expect("just pushed").0
    }
}
