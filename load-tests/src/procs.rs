//! The processes a scenario measures: the real `switchboard` binary (one or
//! more replicas) and the mock model (`mock_upstream`), each a child of the
//! generator, so their CPU time and resident memory are read from `/proc`
//! apart from the generator's own. Children are killed when dropped.

use std::{
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    process::Stdio,
    sync::LazyLock,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::Result;

/// The benchmarks' tenant and its HS256 secret (in-process replicas and
/// gateway processes alike).
pub const TENANT: &str = "bench";
pub const SECRET: &str = "switchboard-load-secret-0123456789";
/// The model alias the gateway serves from the mock.
pub const MODEL: &str = "bench";

/// A directory beside this binary (`target/release`), where the gateway and
/// the mock are built with it.
pub fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    exe.parent().expect("a directory").join(name)
}

/// A child process and what `/proc` says about it.
pub struct Proc {
    child: Child,
    pid: u32,
}

impl Proc {
    /// User plus system CPU time so far.
    pub fn cpu(&self) -> Duration {
        cpu_of(&self.pid.to_string())
    }

    /// Resident memory, KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        status_field(self.pid, "VmRSS:")
    }

    /// Peak resident memory, KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        status_field(self.pid, "VmHWM:")
    }

    /// Threads of the process.
    pub fn threads(&self) -> u64 {
        status_field(self.pid, "Threads:")
    }

    /// Open sockets of the process (its `/proc/<pid>/fd` links to
    /// `socket:`): client connections, upstream connections, Redis, the
    /// listener. Shows how many connections the chats took.
    pub fn sockets(&self) -> usize {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.pid)) else { return 0 };
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|link| link.to_string_lossy().starts_with("socket:"))
            .count()
    }

    /// Its process id (for `perf record -p`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends SIGKILL (a lost host: no drain, no goodbye).
    pub fn kill(&mut self) -> Result<()> {
        Ok(self.child.start_kill()?)
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

/// User plus system CPU time of `pid` (`self` for this process) so far.
pub fn cpu_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parens.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat(5); here 11 and 12.
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / *CLOCK_TICKS as f64)
}

fn status_field(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second of `/proc/<pid>/stat` times, asked once.
static CLOCK_TICKS: LazyLock<u64> = LazyLock::new(|| {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
});

/// The mock model as a process.
pub struct Mock {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Mock {
    pub async fn start() -> Result<Self> {
        let mut child = Command::new(sibling("mock_upstream"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start mock_upstream (build it with --bin mock_upstream): {e}"))?;
        let stdout = child.stdout.take().ok_or("the mock's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await??.unwrap_or_default();
        let addr = line.strip_prefix("listening on ").ok_or_else(|| format!("the mock said {line:?}"))?.parse()?;
        let pid = child.id().ok_or("the mock's pid")?;
        Ok(Self { proc: Proc { child, pid }, addr })
    }
}

/// What a gateway replica is configured with.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    pub replica_id: String,
    pub redis_url: String,
    pub key_prefix: String,
    pub mock: SocketAddr,
    /// The `lookup` tool's permission: `allow` (the default), or `ask`
    /// (relays or pauses).
    pub tool_permission: &'static str,
    /// `store.lease_ttl_secs` (default 10).
    pub lease_ttl_secs: u64,
    /// `store.liveness_check_ms` (default 100; 0: no death hints, the
    /// lease alone).
    pub liveness_check_ms: u64,
    /// A Redis Cluster's seeds instead of `redis_url`, and `[store]
    /// wait_replicas`.
    pub redis_cluster: Option<Vec<String>>,
    pub wait_replicas: u32,
    /// `[store] commit_linger_ms` (0: none).
    pub commit_linger_ms: u64,
    /// `[models.bench] http2`: the gateway calls the mock over one h2c
    /// connection (prior knowledge) instead of one HTTP/1.1 connection per
    /// call in flight.
    pub upstream_h2c: bool,
}

impl GatewayOptions {
    /// Replica `replica_id` of a run whose replicas share `redis_url`,
    /// `key_prefix` and the mock at `mock`.
    pub fn new(replica_id: &str, redis_url: &str, key_prefix: &str, mock: SocketAddr) -> Self {
        Self {
            replica_id: replica_id.into(),
            redis_url: redis_url.into(),
            key_prefix: key_prefix.into(),
            mock,
            tool_permission: "allow",
            lease_ttl_secs: 10,
            liveness_check_ms: 100,
            redis_cluster: None,
            wait_replicas: 0,
            commit_linger_ms: 0,
            upstream_h2c: false,
        }
    }
}

/// The real gateway binary as a process.
pub struct Gateway {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// Its configuration and log; kept after the run with `KEEP_LOGS`.
    dir: tempfile::TempDir,
}

impl Gateway {
    pub async fn start(options: &GatewayOptions) -> Result<Self> {
        let mut dir = tempfile::Builder::new().prefix(&format!("sbload-{}-", options.replica_id)).tempdir()?;
        dir.disable_cleanup(std::env::var_os("KEEP_LOGS").is_some());
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        drop(listener);
        let config = format!(
            r#"[server]
listen = "{addr}"
replica_id = "{replica}"
shutdown_grace_secs = 1

[store]
{store}
wait_replicas = {wait_replicas}
commit_linger_ms = {linger}
key_prefix = "{prefix}"
lease_ttl_secs = {lease}
liveness_check_ms = {liveness}

[agent]
relay_timeout_secs = 3600
# The chats are compared with the same chats sent straight to the mock: no
# title call after a session's first exchange.
titles = false

[[tenants]]
id = "{TENANT}"
jwt = {{ hs256_secret = "{SECRET}" }}

[models.{MODEL}]
provider = "openai"
base_url = "http://{mock}/v1"
model = "bench"
http2 = {upstream_h2c}

[[tools]]
name = "lookup"
description = "Look up an order"
parameters = {{ type = "object", properties = {{ id = {{ type = "string" }} }} }}
url = "http://{mock}/tool"
permission = "{permission}"
"#,
            replica = options.replica_id,
            store = match &options.redis_cluster {
                Some(seeds) => format!("redis_cluster = {seeds:?}"),
                None => format!("redis_url = \"{}\"", options.redis_url),
            },
            wait_replicas = options.wait_replicas,
            linger = options.commit_linger_ms,
            prefix = options.key_prefix,
            mock = options.mock,
            permission = options.tool_permission,
            lease = options.lease_ttl_secs,
            liveness = options.liveness_check_ms,
            upstream_h2c = options.upstream_h2c,
        );
        let path = dir.path().join("switchboard.toml");
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(dir.path().join("switchboard.log"))?;
        let mut command = Command::new(gateway_binary());
        command.arg("--config").arg(&path).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        for var in ["SWITCHBOARD_CONFIG", "SWITCHBOARD_LISTEN", "SWITCHBOARD_REDIS_URL", "SWITCHBOARD_REPLICA_ID"] {
            command.env_remove(var);
        }
        let child = command.spawn().map_err(|e| format!("start switchboard (build it with --release): {e}"))?;
        let pid = child.id().ok_or("the gateway's pid")?;
        let mut gateway = Self { proc: Proc { child, pid }, addr, dir };
        gateway.wait_ready().await?;
        Ok(gateway)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = format!("{}/readyz", self.base());
        while Instant::now() < deadline {
            if self.proc.exited() {
                return Err(format!("the gateway exited at start-up; see {}", self.log_path().display()).into());
            }
            if http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err("the gateway was not ready within 20 s".into())
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("switchboard.log")
    }

    /// The value of a metric line starting with `prefix` in `/metrics`, summed.
    pub async fn metric(&self, prefix: &str) -> Result<f64> {
        let text = reqwest::get(format!("{}/metrics", self.base())).await?.text().await?;
        Ok(text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum())
    }
}

/// The gateway binary: `$GATEWAY_BIN` (to measure another build, say an
/// earlier commit's, against the same load), else the release build beside
/// this benchmark.
pub fn gateway_binary() -> PathBuf {
    std::env::var_os("GATEWAY_BIN").map_or_else(|| sibling("switchboard"), PathBuf::from)
}

/// A token of the benchmark tenant.
pub fn token() -> Result<String> {
    let text = format!(
        "[[tenants]]\nid = \"{TENANT}\"\njwt = {{ hs256_secret = \"{SECRET}\" }}\n\n[models.demo]\nprovider = \"demo\"\n"
    );
    let config = switchboard::config::Config::from_toml(&text, &|_| None).map_err(|e| format!("{e}"))?;
    Ok(switchboard::auth::mint_token(&config.tenants[TENANT], "loadgen", Duration::from_secs(24 * 3600), &[])?)
}
