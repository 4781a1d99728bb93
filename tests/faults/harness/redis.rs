//! [`OwnRedis`]: a `redis-server` process of the test's own, on a free port
//! and in a fresh temporary directory, that the test may freeze, thaw, kill
//! and start again. Never the shared Redis on 6379: a fault injected here
//! must not reach any other test.
//!
//! With persistence the server writes an append-only file and fsyncs every
//! write (`--appendfsync always`), so a SIGKILL loses nothing that was
//! acknowledged and [`OwnRedis::restart`] comes back with the same data.
//! Without it nothing is written to disk (`--save '' --appendonly no`).
//!
//! With TLS ([`OwnRedis::start_tls`]) it also listens on a TLS port, with a
//! certificate of a private CA, checking clients' certificates (Redis's
//! default); the plain port stays for the harness's readiness probe.

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use tempfile::TempDir;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
};

use super::{ports::free_port, process, tls::Certificates};

const REDIS_SERVER: &str = "/usr/bin/redis-server";
/// A fresh redis-server answers PING in a few milliseconds; loading a large
/// append-only file could take longer, which these tests never write.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is polled while the server starts.
const READY_POLL: Duration = Duration::from_millis(20);
/// Fresh ports tried when another process took the reserved one first.
const START_ATTEMPTS: usize = 5;

pub struct OwnRedis {
    port: u16,
    /// The TLS port and the certificates, with [`OwnRedis::start_tls`].
    tls: Option<(u16, Certificates)>,
    persistent: bool,
    dir: TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts a server without persistence and waits until it answers PING.
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// Starts a server that keeps every acknowledged write in its append-only
    /// file, so [`OwnRedis::restart`] keeps the data.
    pub async fn start_persistent() -> Self {
        Self::start_with(true).await
    }

    /// Starts a server without persistence that also speaks TLS (see the
    /// module docs).
    pub async fn start_tls() -> Self {
        let dir = tempfile::Builder::new().prefix("sbfault-redis-").tempdir().expect("a temp dir for redis");
        let certificates = Certificates::generate(dir.path());
        Self::start_in(Self { port: 0, tls: Some((0, certificates)), persistent: false, dir, child: None }).await
    }

    async fn start_with(persistent: bool) -> Self {
        let dir = tempfile::Builder::new().prefix("sbfault-redis-").tempdir().expect("a temp dir for redis");
        Self::start_in(Self { port: 0, tls: None, persistent, dir, child: None }).await
    }

    async fn start_in(mut redis: Self) -> Self {
        for _ in 0..START_ATTEMPTS {
            redis.port = free_port();
            if let Some((port, _)) = redis.tls.as_mut() {
                *port = free_port();
            }
            redis.spawn();
            if redis.wait_ready_or_exit(READY_TIMEOUT).await {
                return redis;
            }
            // It exited: most likely the port was taken in between.
            redis.child = None;
        }
        panic!("redis-server did not start in {START_ATTEMPTS} attempts:\n{}", redis.log_tail());
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT` (a server started with [`OwnRedis::start_tls`]).
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls.as_ref().expect("a TLS server").0)
    }

    /// The certificates of a server started with [`OwnRedis::start_tls`].
    pub fn certificates(&self) -> &Certificates {
        &self.tls.as_ref().expect("a TLS server").1
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().and_then(Child::id).expect("redis-server is running")
    }

    /// Stops the process (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self) {
        process::signal(self.pid(), "STOP");
    }

    /// Lets a frozen process go on (SIGCONT).
    pub fn thaw(&self) {
        process::signal(self.pid(), "CONT");
    }

    /// Kills the process (SIGKILL) and waits for it to be gone; connections
    /// are refused until [`OwnRedis::start_again`].
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("SIGKILL redis-server");
            child.wait().await.expect("reap redis-server");
        }
    }

    /// Starts the server again on the same port and directory (an
    /// append-only file there is loaded) and waits until it answers PING.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "start_again needs a stopped server");
        self.spawn();
        if !self.wait_ready_or_exit(READY_TIMEOUT).await {
            panic!("redis-server did not come back on port {}:\n{}", self.port, self.log_tail());
        }
    }

    /// SIGKILL, then the same server again on the same port and directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.start_again().await;
    }

    /// Waits until the server answers PING with PONG (not `-LOADING`).
    pub async fn wait_ready(&mut self) {
        if !self.wait_ready_or_exit(READY_TIMEOUT).await {
            panic!("redis-server on port {} is not ready:\n{}", self.port, self.log_tail());
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn log_tail(&self) -> String {
        process::tail(&self.log_path(), 30)
    }

    fn spawn(&mut self) {
        let port = self.port.to_string();
        let dir = self.dir.path().to_str().expect("a UTF-8 temp dir").to_string();
        let log = self.log_path().to_str().expect("a UTF-8 temp dir").to_string();
        let mut command = Command::new(REDIS_SERVER);
        command.args(["--port", &port, "--bind", "127.0.0.1", "--dir", &dir, "--logfile", &log, "--save", ""]);
        if self.persistent {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        if let Some((tls_port, certs)) = &self.tls {
            command.args(["--tls-port", &tls_port.to_string()]);
            command.args(["--tls-cert-file", &certs.path("server.pem"), "--tls-key-file", &certs.path("server.key")]);
            command.args(["--tls-ca-cert-file", &certs.path("ca.pem")]);
        }
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
        self.child = Some(command.spawn().unwrap_or_else(|e| panic!("cannot start {REDIS_SERVER}: {e}")));
    }

    /// `true` once PING answers PONG; `false` if the process exited first.
    async fn wait_ready_or_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let child = self.child.as_mut().expect("a spawned server");
            if child.try_wait().expect("poll redis-server").is_some() {
                return false;
            }
            if ping(self.port).await {
                return true;
            }
            tokio::time::sleep(READY_POLL).await;
        }
        panic!("redis-server on port {} did not answer PING within {timeout:?}:\n{}", self.port, self.log_tail());
    }
}

/// One PING over a fresh connection; `true` only for `+PONG`.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 64];
        let n = stream.read(&mut reply).await.ok()?;
        Some(reply[..n].starts_with(b"+PONG"))
    };
    tokio::time::timeout(Duration::from_millis(500), attempt).await.ok().flatten().unwrap_or(false)
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            // SIGKILL ends a stopped process too; kill_on_drop reaps it.
            let _ = child.start_kill();
        }
    }
}
