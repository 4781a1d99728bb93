//! The benchmark's own view of Redis: server facts, counters (`INFO
//! commandstats`, `INFO stats`), connections by ACL user (`CLIENT LIST`),
//! the per-replica ACL users, and cleanup of the run's keys.
//!
//! On a Redis Cluster ([`Admin::connect_nodes`]) counters and CPU are summed
//! over every node given (primaries and replicas alike: what the deployment
//! pays), and the run's keys are deleted node by node; the rest asks the
//! first node.
//!
//! Counters are server-wide: another client using the same Redis during a
//! phase inflates them. Phases check this by comparing the `XADD` delta with
//! the events they know they appended.

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;

use crate::Result;

/// Password given for the benchmark's ACL users (created `nopass`: any works).
const USER_PASSWORD: &str = "bench";

/// Server-wide counters, read before and after a phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lua script calls (`cmdstat_evalsha`): commits, log reads, follower
    /// registrations, heartbeats, quota and rate-limit scripts.
    pub evalsha: u64,
    /// `XADD`s, including those run inside scripts: events appended.
    pub xadd: u64,
    /// `PUBLISH`es, including inside scripts: append notices (only while
    /// another instance follows the session) and wake-ups.
    pub publish: u64,
    /// `XREVRANGE`s: one per `read_after.lua` call on a non-empty log.
    pub xrevrange: u64,
    /// `HGET`s (run inside some scripts).
    pub hget: u64,
    /// `PING`s: health checks (`/readyz`); the store's connections are not
    /// pinged per call.
    pub ping: u64,
    /// Socket reads by the server (`total_reads_processed`): about one per
    /// client round trip (a large pipeline can take more than one read).
    pub socket_reads: u64,
    /// Every command executed (`total_commands_processed`), those run inside
    /// scripts included.
    pub commands: u64,
    /// Bytes the server read from clients (`total_net_input_bytes`).
    pub net_input: u64,
}

impl Counters {
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            evalsha: self.evalsha.saturating_sub(before.evalsha),
            xadd: self.xadd.saturating_sub(before.xadd),
            publish: self.publish.saturating_sub(before.publish),
            xrevrange: self.xrevrange.saturating_sub(before.xrevrange),
            hget: self.hget.saturating_sub(before.hget),
            ping: self.ping.saturating_sub(before.ping),
            socket_reads: self.socket_reads.saturating_sub(before.socket_reads),
            commands: self.commands.saturating_sub(before.commands),
            net_input: self.net_input.saturating_sub(before.net_input),
        }
    }
}

/// Connections of one ACL user, from `CLIENT LIST`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connections {
    pub total: usize,
    /// Of which subscribed to channels (the replica's one subscription).
    pub subscribed: usize,
}

pub struct Admin {
    conn: MultiplexedConnection,
    /// Every node of a cluster (the first is `conn`); one Redis: empty.
    nodes: Vec<MultiplexedConnection>,
}

/// A key prefix of its own for one run (`sbload:<uuid>:`), deleted after it
/// with [`Admin::delete_prefix`].
pub fn run_prefix() -> String {
    format!("sbload:{}:", uuid::Uuid::new_v4().simple())
}

impl Admin {
    pub async fn connect(url: &str) -> Result<Self> {
        let conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        Ok(Self { conn, nodes: Vec::new() })
    }

    /// Every node of a Redis Cluster, each by its own URL.
    pub async fn connect_nodes(urls: &[String]) -> Result<Self> {
        let mut nodes = Vec::new();
        for url in urls {
            nodes.push(redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?);
        }
        let conn = nodes.first().cloned().ok_or("no cluster node given")?;
        Ok(Self { conn, nodes })
    }

    /// The nodes whose counters add up: the cluster's, or the one Redis.
    fn all(&self) -> Vec<MultiplexedConnection> {
        if self.nodes.is_empty() { vec![self.conn.clone()] } else { self.nodes.clone() }
    }

    async fn info(&mut self, section: &str) -> Result<HashMap<String, String>> {
        let text: String = redis::cmd("INFO").arg(section).query_async(&mut self.conn).await?;
        Ok(parse_info(&text))
    }

    /// `INFO <section>` of every node, numbers summed field by field.
    async fn info_summed(&mut self, section: &str) -> Result<HashMap<String, f64>> {
        let mut sums = HashMap::new();
        for mut node in self.all() {
            let text: String = redis::cmd("INFO").arg(section).query_async(&mut node).await?;
            for (name, value) in parse_info(&text) {
                // `cmdstat_x` values are `calls=N,usec=…`: their calls count.
                let number = if value.starts_with("calls=") {
                    command_calls(&value) as f64
                } else {
                    value.parse().unwrap_or(0.0)
                };
                *sums.entry(name).or_insert(0.0) += number;
            }
        }
        Ok(sums)
    }

    pub async fn version(&mut self) -> Result<String> {
        Ok(self.info("server").await?.remove("redis_version").unwrap_or_else(|| "unknown".into()))
    }

    pub async fn counters(&mut self) -> Result<Counters> {
        let commands = self.info_summed("commandstats").await?;
        let stats = self.info_summed("stats").await?;
        let calls = |name: &str| commands.get(&format!("cmdstat_{name}")).map_or(0, |v| *v as u64);
        let stat = |name: &str| stats.get(name).map_or(0, |v| *v as u64);
        Ok(Counters {
            evalsha: calls("evalsha"),
            xadd: calls("xadd"),
            publish: calls("publish"),
            xrevrange: calls("xrevrange"),
            hget: calls("hget"),
            ping: calls("ping"),
            socket_reads: stat("total_reads_processed"),
            commands: stat("total_commands_processed"),
            net_input: stat("total_net_input_bytes"),
        })
    }

    /// Round-trip times of `n` sequential `PING`s, ms.
    pub async fn ping_times(&mut self, n: usize) -> Result<Vec<f64>> {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = std::time::Instant::now();
            let _: String = redis::cmd("PING").query_async(&mut self.conn).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(times)
    }

    /// CPU time the Redis server has used (`used_cpu_user` + `used_cpu_sys`).
    pub async fn cpu(&mut self) -> Result<std::time::Duration> {
        let cpu = self.info_summed("cpu").await?;
        let seconds = |name: &str| cpu.get(name).copied().unwrap_or(0.0);
        Ok(std::time::Duration::from_secs_f64(seconds("used_cpu_user") + seconds("used_cpu_sys")))
    }

    /// `connected_clients` from `INFO clients`: every client of the server.
    pub async fn connected_clients(&mut self) -> Result<u64> {
        let clients = self.info("clients").await?;
        Ok(clients.get("connected_clients").and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Connections authenticated as `user`.
    pub async fn connections_of(&mut self, user: &str) -> Result<Connections> {
        let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut self.conn).await?;
        Ok(count_connections(&list, user))
    }

    /// Creates an ACL user that may do everything (a replica connects as it).
    pub async fn create_user(&mut self, user: &str) -> Result<()> {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("reset")
            .arg("on")
            .arg("nopass")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }

    /// Deletes the user (which also closes its connections).
    pub async fn delete_user(&mut self, user: &str) -> Result<()> {
        redis::cmd("ACL").arg("DELUSER").arg(user).query_async::<i64>(&mut self.conn).await?;
        Ok(())
    }

    /// Deletes every key starting with `prefix` (SCAN + UNLINK on each
    /// node); their count.
    pub async fn delete_prefix(&mut self, prefix: &str) -> Result<u64> {
        let mut deleted = 0;
        for node in self.all() {
            deleted += delete_prefix_on(node, prefix, !self.nodes.is_empty()).await?;
        }
        Ok(deleted)
    }
}

/// [`Admin::delete_prefix`] on one node. On a cluster's node one key per
/// `UNLINK` (a page's keys are of many slots), and a replica's refusal
/// (READONLY) is no error: its keys go with its primary's.
async fn delete_prefix_on(mut conn: MultiplexedConnection, prefix: &str, cluster: bool) -> Result<u64> {
    let pattern = format!("{}*", escape_glob(prefix));
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if cluster {
            for key in keys {
                deleted += redis::cmd("UNLINK").arg(&key).query_async::<u64>(&mut conn).await.unwrap_or(0);
            }
        } else if !keys.is_empty() {
            deleted += redis::cmd("UNLINK").arg(&keys).query_async::<u64>(&mut conn).await?;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// `redis://host:port/…` with `user` as its credentials; `None` when the URL
/// already carries credentials or is not `redis://` (then no ACL users).
pub fn url_as_user(url: &str, user: &str) -> Option<String> {
    let rest = url.strip_prefix("redis://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    Some(format!("redis://{user}:{USER_PASSWORD}@{rest}"))
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `calls=12,usec=…` → 12.
fn command_calls(value: &str) -> u64 {
    value.split(',').find_map(|field| field.strip_prefix("calls=")).and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn count_connections(list: &str, user: &str) -> Connections {
    let mut connections = Connections::default();
    for line in list.lines() {
        let fields: HashMap<&str, &str> = line.split(' ').filter_map(|f| f.split_once('=')).collect();
        if fields.get("user") != Some(&user) {
            continue;
        }
        connections.total += 1;
        let count = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        if count("sub") + count("psub") + count("ssub") > 0 {
            connections.subscribed += 1;
        }
    }
    connections
}

fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_and_command_calls_are_read() {
        let info = parse_info("# Commandstats\r\ncmdstat_xadd:calls=42,usec=9,usec_per_call=0.2\r\n");
        assert_eq!(command_calls(&info["cmdstat_xadd"]), 42);
    }

    #[test]
    fn connections_are_counted_per_user() {
        let list = "id=1 addr=a fd=8 sub=0 psub=0 ssub=0 user=b1\n\
                    id=2 addr=b fd=9 sub=3 psub=0 ssub=0 user=b1\n\
                    id=3 addr=c fd=10 sub=0 psub=0 ssub=0 user=default\n";
        assert_eq!(count_connections(list, "b1"), Connections { total: 2, subscribed: 1 });
    }

    #[test]
    fn replica_urls_carry_the_user() {
        assert_eq!(url_as_user("redis://127.0.0.1:6379", "u").as_deref(), Some("redis://u:bench@127.0.0.1:6379"));
        assert_eq!(url_as_user("redis://x:y@h:1/0", "u"), None);
        assert_eq!(url_as_user("rediss://h:1", "u"), None);
        assert_eq!(escape_glob("sb:{t}*"), "sb:{t}\\*");
    }
}
