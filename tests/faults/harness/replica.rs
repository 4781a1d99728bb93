//! [`Replica`]: the real `switchboard` binary as a child process, so a test
//! can do to it what happens to a pod: SIGKILL, SIGTERM, a restart.
//!
//! The port is reserved here and written into the configuration's
//! `[server] listen` (logs are never scraped for it); a restart reuses the
//! port and the configuration. Standard output and error go to one log file
//! per replica in its temporary directory, appended across restarts;
//! [`Replica::dump_logs`] gives its tail for failure messages. The process
//! is killed when the `Replica` is dropped.

use std::{
    fs::OpenOptions,
    net::SocketAddr,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::{Duration, Instant},
};

use tempfile::TempDir;
use tokio::process::{Child, Command};

use super::{config::ReplicaConfig, ports::free_port, process};

/// How often readiness is polled while the replica starts.
const READY_POLL: Duration = Duration::from_millis(25);
/// Fresh ports tried when another process took the reserved one first.
const START_ATTEMPTS: usize = 3;
/// Environment variables that would override the file (docs/design.md, "Process": "Environment
/// variables override file values"); a developer's shell must not leak in.
const OVERRIDES: [&str; 7] = [
    "SWITCHBOARD_CONFIG",
    "SWITCHBOARD_LISTEN",
    "SWITCHBOARD_REDIS_URL",
    "SWITCHBOARD_REDIS_CLUSTER",
    "SWITCHBOARD_REPLICA_ID",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

pub struct Replica {
    pub name: String,
    addr: SocketAddr,
    config: ReplicaConfig,
    dir: TempDir,
    child: Option<Child>,
    http: reqwest::Client,
}

impl Replica {
    /// Starts the binary with `config` on a free port and waits until
    /// `/readyz` answers 200.
    pub async fn start(config: ReplicaConfig) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sbfault-{}-", config.replica_id))
            .tempdir()
            .expect("a temp dir for the replica");
        // The replica's TMPDIR (workspaces, the sandbox's /etc): what a
        // SIGKILLed replica leaves goes with the directory. Traversable, so
        // the sandbox's uid reaches the workspaces below it.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .expect("the replica's directory is traversable");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("an HTTP client");
        let name = config.replica_id.clone();
        let mut replica = Self { name, addr: ([127, 0, 0, 1], 0).into(), config, dir, child: None, http };
        for _ in 0..START_ATTEMPTS {
            replica.addr = ([127, 0, 0, 1], free_port()).into();
            let text = replica.config.render(replica.addr);
            std::fs::write(replica.config_path(), text).expect("write the replica's configuration");
            replica.spawn("start");
            match replica.try_wait_ready(Duration::from_secs(20)).await {
                Ok(()) => return replica,
                // Exited before it was ready: a taken port is retried, any
                // other reason (an invalid configuration) fails now.
                Err(status) if replica.log_mentions_bind_error() => {
                    eprintln!("replica {}: port {} was taken ({status}); retrying", replica.name, replica.addr);
                }
                Err(status) => {
                    panic!("replica {} exited at start-up ({status}):\n{}", replica.name, replica.dump_logs())
                }
            }
        }
        panic!("replica {} could not bind a port in {START_ATTEMPTS} attempts:\n{}", replica.name, replica.dump_logs());
    }

    /// `http://127.0.0.1:PORT{path}`
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        self.url("")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Whether the process is still running (not exited, not reaped).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("poll the replica").is_none(),
            None => false,
        }
    }

    /// Polls `GET /readyz` until it answers 200; panics after `timeout` or
    /// when the process exits, with the log's tail.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        if let Err(status) = self.try_wait_ready(timeout).await {
            panic!("replica {} exited before it was ready ({status}):\n{}", self.name, self.dump_logs());
        }
    }

    /// SIGKILL and reap: no drain, no lease handed off, streams cut.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("SIGKILL the replica");
            child.wait().await.expect("reap the replica");
        }
    }

    /// Stops the process (SIGSTOP): its connections stay open, it does
    /// nothing (a stuck process, as its peers see it).
    pub fn freeze(&self) {
        process::signal(self.pid().expect("a running replica"), "STOP");
    }

    /// Lets a frozen replica go on (SIGCONT).
    pub fn thaw(&self) {
        process::signal(self.pid().expect("a running replica"), "CONT");
    }

    /// Asks the replica to drain and exit (SIGTERM); see [`Replica::wait_exit`].
    pub fn sigterm(&self) {
        process::signal(self.pid().expect("a running replica"), "TERM");
    }

    /// Waits for the process to exit; panics after `timeout` (and kills it).
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match self.try_wait_exit(timeout).await {
            Ok(status) => status,
            Err(e) => panic!("{e}\n{}", self.dump_logs()),
        }
    }

    /// Waits for the process to exit; after `timeout` kills it (SIGKILL) and
    /// says so.
    pub async fn try_wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let child = self.child.as_mut().expect("a started replica");
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => {
                self.child = None;
                Ok(status.expect("wait for the replica"))
            }
            Err(_) => {
                self.kill9().await;
                Err(format!("replica {} did not exit within {timeout:?} (killed)", self.name))
            }
        }
    }

    /// The same configuration on the same port again, once the process is
    /// gone; waits until ready.
    pub async fn restart(&mut self) {
        assert!(!self.is_running(), "restart needs a stopped replica (kill9 or sigterm + wait_exit first)");
        self.child = None;
        self.spawn("restart");
        self.wait_ready(Duration::from_secs(20)).await;
    }

    /// The last lines of the replica's log (all its runs), headed by its name.
    pub fn dump_logs(&self) -> String {
        format!("---- replica {} ({}) log tail ----\n{}", self.name, self.addr, process::tail(&self.log_path(), 60))
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("switchboard.toml")
    }

    /// Whether the replica's log (all its runs) has a line containing `text`.
    pub fn log_contains(&self, text: &str) -> bool {
        std::fs::read_to_string(self.log_path()).is_ok_and(|log| log.contains(text))
    }

    /// Waits until the replica's log has a line containing `text`; false
    /// after `timeout`. (A log file gives no event to wait on: it is read
    /// every 100 ms.)
    pub async fn wait_for_log(&self, text: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.log_contains(text) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("switchboard.log")
    }

    fn log_mentions_bind_error(&self) -> bool {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        log.contains("cannot listen") || log.contains("Address already in use")
    }

    fn spawn(&mut self, why: &str) {
        let mut log = OpenOptions::new().create(true).append(true).open(self.log_path()).expect("open the replica log");
        use std::io::Write as _;
        let _ = writeln!(log, "==== harness: {why} replica {} on {} ====", self.name, self.addr);
        let stderr = log.try_clone().expect("clone the log file handle");
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        command.arg("serve").arg("--config").arg(self.config_path());
        for name in OVERRIDES {
            command.env_remove(name);
        }
        command
            .env("NO_COLOR", "1")
            .env("TMPDIR", self.dir.path())
            .env("RUST_LOG", std::env::var("FAULT_RUST_LOG").unwrap_or_else(|_| "info".to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        self.child = Some(command.spawn().expect("start the switchboard binary"));
    }

    /// `Ok` once `/readyz` is 200; `Err(status)` if the process exited first.
    async fn try_wait_ready(&mut self, timeout: Duration) -> Result<(), ExitStatus> {
        let deadline = Instant::now() + timeout;
        let url = self.url("/readyz");
        while Instant::now() < deadline {
            let child = self.child.as_mut().expect("a spawned replica");
            if let Some(status) = child.try_wait().expect("poll the replica") {
                self.child = None;
                return Err(status);
            }
            if let Ok(response) = self.http.get(&url).send().await
                && response.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(READY_POLL).await;
        }
        panic!("replica {} was not ready within {timeout:?}:\n{}", self.name, self.dump_logs());
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if keep_logs() {
            eprintln!("replica {} kept its log: {}", self.name, self.log_path().display());
            self.dir.disable_cleanup(true);
        }
    }
}

/// `FAULT_KEEP_LOGS=1` keeps each replica's directory (log and configuration)
/// after the test, for a look at what happened.
fn keep_logs() -> bool {
    std::env::var("FAULT_KEEP_LOGS").is_ok_and(|v| v == "1")
}
