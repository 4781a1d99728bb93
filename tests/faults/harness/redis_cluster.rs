//! [`OwnRedisCluster`]: a Redis Cluster of the test's own, started by
//! `scripts/redis-cluster.sh` on free ports in a fresh temporary directory
//! and SIGKILLed when dropped. Never the shared cluster on 7000-7002: a node
//! killed here must not reach any other test.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tempfile::TempDir;
use tokio::process::Command;

use super::{process, tls::Certificates};

/// The script's wait for a healthy cluster is bounded (≈ 20 s); this is the
/// test's bound on the whole start.
const START_TIMEOUT: Duration = Duration::from_secs(40);
/// Fresh port ranges tried when another process took one first.
const START_ATTEMPTS: usize = 3;

pub struct OwnRedisCluster {
    dir: TempDir,
    ports: Vec<u16>,
    primaries: usize,
    /// Its certificates, when it speaks TLS only ([`OwnRedisCluster::start_tls`]).
    tls: Option<Certificates>,
}

impl OwnRedisCluster {
    /// `primaries` primaries with `replicas` replicas each; waits until the
    /// cluster is healthy (every slot served, every replica in sync).
    pub async fn start(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, false).await
    }

    /// The same, speaking TLS only, with a private CA and client checks
    /// (`redis-cluster.sh --tls`; see [`Certificates`]).
    pub async fn start_tls(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, true).await
    }

    async fn start_with(primaries: usize, replicas: usize, tls: bool) -> Self {
        let nodes = primaries * (1 + replicas);
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::Builder::new().prefix("sbfault-cluster-").tempdir().expect("a temp dir");
            let base = free_range(nodes);
            let certificates = tls.then(|| {
                let certs = dir.path().join("certs");
                std::fs::create_dir(&certs).expect("a directory for the certificates");
                Certificates::generate(&certs)
            });
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/redis-cluster.sh");
            let mut command = Command::new(&script);
            command.args(["start", "--dir"]).arg(dir.path().join("nodes")).args(["--port", &base.to_string()]).args([
                "--primaries",
                &primaries.to_string(),
                "--replicas",
                &replicas.to_string(),
            ]);
            if tls {
                command.arg("--tls").arg(dir.path().join("certs"));
            }
            let run = command.stdin(Stdio::null()).kill_on_drop(true).output();
            let output = tokio::time::timeout(START_TIMEOUT, run)
                .await
                .expect("redis-cluster.sh start took too long")
                .expect("run scripts/redis-cluster.sh");
            let cluster = Self { dir, ports: (base..base + nodes as u16).collect(), primaries, tls: certificates };
            if output.status.success() {
                return cluster;
            }
            failures.push(String::from_utf8_lossy(&output.stderr).into_owned());
            // Dropping `cluster` kills whatever did start.
        }
        panic!("no Redis Cluster could be started:\n{}", failures.join("\n----\n"));
    }

    /// Every node's URL (the client needs one; all make it start faster).
    pub fn seeds(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        self.ports.iter().map(|port| format!("{scheme}://127.0.0.1:{port}")).collect()
    }

    /// The certificates of a cluster started with [`OwnRedisCluster::start_tls`].
    pub fn certificates(&self) -> &Certificates {
        self.tls.as_ref().expect("a TLS cluster")
    }

    /// The ports of the nodes that started as primaries.
    pub fn first_primaries(&self) -> &[u16] {
        &self.ports[..self.primaries]
    }

    /// The pid of the node on `port`.
    pub fn pid(&self, port: u16) -> u32 {
        let text = std::fs::read_to_string(self.node_dir(port).join("redis.pid")).expect("the node's pidfile");
        text.trim().parse().expect("a pid")
    }

    /// SIGKILL of the node on `port`.
    pub fn kill_node(&self, port: u16) {
        process::signal(self.pid(port), "KILL");
    }

    /// Waits until a surviving node sees the cluster whole again after the
    /// node on `victim` died: the victim marked failed with no slots left
    /// (its replica promoted), `cluster_state:ok`, every slot served. False
    /// after `timeout`. (Restarting a node without persistence before that
    /// would bring it back as an empty primary that its replica syncs from.)
    pub async fn wait_failed_over(&self, victim: u16, timeout: Duration) -> bool {
        let survivor = *self.ports.iter().find(|p| **p != victim).expect("another node");
        until(timeout, || async move {
            let info = cli(survivor, &["cluster", "info"]).await;
            let nodes = cli(survivor, &["cluster", "nodes"]).await;
            // `fail` (agreed, not a suspicion: `fail?`) and no slots left:
            // its replica was promoted and serves them.
            let victim_replaced = nodes.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() == 8
                    && fields[1].starts_with(&format!("127.0.0.1:{victim}@"))
                    && fields[2].split(',').any(|flag| flag == "fail")
            });
            victim_replaced && info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
        })
        .await
    }

    /// Starts the node on `port` again from its own `redis.conf` (written
    /// by `scripts/redis-cluster.sh`; its `nodes.conf`, no data): it rejoins
    /// the cluster as a replica of the node that took its slots and syncs
    /// from it. Returns once it answers.
    pub async fn restart_node(&self, port: u16) {
        let status = Command::new("redis-server")
            .arg(self.node_dir(port).join("redis.conf"))
            .status()
            .await
            .expect("run redis-server");
        assert!(status.success(), "redis-server on {port} did not start again");
        let answers = until(Duration::from_secs(10), || async move { cli(port, &["ping"]).await.trim() == "PONG" });
        assert!(answers.await, "the restarted node on {port} answers");
    }

    /// Waits until the node on `port` is a replica whose link to its
    /// primary is up (synced). False after `timeout`.
    pub async fn wait_replica_synced(&self, port: u16, timeout: Duration) -> bool {
        until(timeout, || async move {
            let info = cli(port, &["info", "replication"]).await;
            info.contains("role:slave") && info.contains("master_link_status:up")
        })
        .await
    }

    /// The last lines of every node's log.
    pub fn log_tail(&self) -> String {
        self.ports
            .iter()
            .map(|port| format!("-- node {port} --\n{}", process::tail(&self.node_dir(*port).join("redis.log"), 15)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn node_dir(&self, port: u16) -> PathBuf {
        self.dir.path().join("nodes").join(port.to_string())
    }
}

impl Drop for OwnRedisCluster {
    fn drop(&mut self) {
        for port in &self.ports {
            if let Ok(text) = std::fs::read_to_string(self.node_dir(*port).join("redis.pid")) {
                // Some may be gone already (a test killed them): no check.
                let _ = std::process::Command::new("kill").args(["-KILL", text.trim()]).status();
            }
        }
    }
}

/// Polls `check` every 50 ms until it holds (true) or `timeout` passes
/// (false).
async fn until<F: std::future::Future<Output = bool>>(timeout: Duration, mut check: impl FnMut() -> F) -> bool {
    let holds = async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(timeout, holds).await.is_ok()
}

/// `redis-cli -p <port> <args…>`'s output ("" when it cannot run).
async fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().await;
    output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}

/// A base port with `n` consecutive ports free, and their cluster bus ports
/// (+10000) too, a moment ago.
fn free_range(n: usize) -> u16 {
    use rand::Rng;
    let mut rng = rand::rng();
    loop {
        let base: u16 = rng.random_range(20_000..(30_000 - n as u16));
        let free = (base..base + n as u16)
            .flat_map(|port| [port, port + 10_000])
            .all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
}
