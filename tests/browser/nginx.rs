//! [`Nginx`]: the load balancer of `deploy/nginx.conf` in front of the
//! test's replicas, as a child process on a port of its own.
//!
//! The configuration is generated *from* `deploy/nginx.conf`, so the proxy
//! settings under test are the deployed ones (SSE: `proxy_buffering off`,
//! long read and send timeouts, HTTP/1.1 upstream keep-alive, retries on
//! connection errors only). What changes, and why:
//!
//! - the upstream servers are the replicas' loopback ports instead of the
//!   compose service names, without `resolve` and the Docker resolver;
//! - `listen` is a free loopback port; logs, pid and temporary files go to
//!   the test's directory;
//! - `worker_processes 1`: one worker's round robin is a fixed rotation, so
//!   a request that follows another goes to another replica (the approval
//!   scenario relies on it; several workers would each keep their own).
//!
//! Dropping it stops nginx with SIGTERM (a SIGKILLed master would leave its
//! worker behind).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::harness::{ports::free_port, process};

/// The settings of `deploy/nginx.conf` that streams depend on; the
/// generated configuration must keep every one.
const SSE_SETTINGS: [&str; 5] = [
    "proxy_buffering off;",
    "proxy_read_timeout 3600s;",
    "proxy_send_timeout 3600s;",
    "proxy_http_version 1.1;",
    "proxy_next_upstream error timeout;",
];

pub struct Nginx {
    pub port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl Nginx {
    /// Starts nginx with `deploy/nginx.conf`'s settings in front of
    /// `upstreams` (`host:port` each) and waits until it proxies
    /// `/healthz`.
    pub async fn start(upstreams: &[String]) -> Self {
        let binary = binary().expect("nginx is installed (scripts/ensure-browser.sh installs it)");
        let dir = tempfile::Builder::new().prefix("sbbrowser-nginx-").tempdir().expect("a temp dir for nginx");
        // Workers run as `nobody` when the master is root: they must reach
        // the temporary directories.
        for sub in ["", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            let path = dir.path().join(sub);
            std::fs::create_dir_all(&path).expect("nginx directories");
            set_mode(&path, if sub.is_empty() { 0o755 } else { 0o777 });
        }
        let mut nginx = Self { port: 0, dir, child: None };
        let mut last_error = String::new();
        // A port taken between its reservation and nginx's bind: another one.
        for _ in 0..3 {
            nginx.port = free_port();
            let text = generate(&deployed(), upstreams, nginx.port, nginx.dir.path());
            std::fs::write(nginx.dir.path().join("nginx.conf"), &text).expect("write nginx.conf");
            nginx.spawn(&binary);
            match nginx.wait_ready(Duration::from_secs(10)).await {
                Ok(()) => return nginx,
                Err(error) => {
                    last_error = error;
                    nginx.stop().await;
                }
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The error log's tail, for failure messages.
    pub fn logs(&self) -> String {
        format!("---- nginx error log ----\n{}", process::tail(&self.dir.path().join("error.log"), 30))
    }

    fn spawn(&mut self, binary: &Path) {
        let dir = self.dir.path();
        let mut command = Command::new(binary);
        command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-g")
            .arg(format!("daemon off; pid {};", dir.join("nginx.pid").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.child = Some(command.spawn().expect("start nginx"));
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("an HTTP client");
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("nginx exited ({status}):\n{}", self.logs()));
            }
            if let Ok(response) = http.get(format!("{}/healthz", self.url())).send().await
                && response.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("nginx did not proxy /healthz within {timeout:?}:\n{}", self.logs()))
    }

    async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                process::signal(pid, "TERM");
            }
            if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                let _ = child.start_kill();
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            match child.id() {
                // TERM lets the master stop its worker; the reaping is the
                // runtime's (kill_on_drop).
                Some(pid) => {
                    let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
                }
                None => {
                    let _ = child.start_kill();
                }
            }
        }
    }
}

/// `deploy/nginx.conf` as committed.
fn deployed() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx.conf");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The deployed configuration with the changes the module doc lists.
pub fn generate(deployed: &str, upstreams: &[String], port: u16, dir: &Path) -> String {
    let dir = dir.display();
    let servers: String =
        upstreams.iter().map(|u| format!("        server {u} max_fails=3 fail_timeout=10s;\n")).collect();
    let mut out = String::new();
    let mut servers_written = false;
    for line in deployed.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("worker_processes ") {
            out.push_str("worker_processes 1;\n");
        } else if trimmed.starts_with("resolver ") {
            continue;
        } else if trimmed.starts_with("server ") && trimmed.contains(" resolve") {
            if !servers_written {
                out.push_str(&servers);
                servers_written = true;
            }
        } else if trimmed.starts_with("access_log ") {
            out.push_str(&format!("    access_log {dir}/access.log;\n"));
        } else if trimmed.starts_with("error_log ") {
            out.push_str(&format!("    error_log {dir}/error.log warn;\n"));
        } else if trimmed.starts_with("listen ") {
            out.push_str(&format!("        listen 127.0.0.1:{port};\n"));
        } else if trimmed == "http {" {
            out.push_str(line);
            out.push('\n');
            for (directive, sub) in [
                ("client_body_temp_path", "client_body"),
                ("proxy_temp_path", "proxy"),
                ("fastcgi_temp_path", "fastcgi"),
                ("uwsgi_temp_path", "uwsgi"),
                ("scgi_temp_path", "scgi"),
            ] {
                out.push_str(&format!("    {directive} {dir}/{sub};\n"));
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(servers_written, "deploy/nginx.conf has no `server … resolve` upstream lines to replace");
    for setting in SSE_SETTINGS {
        assert!(out.contains(setting), "deploy/nginx.conf lost `{setting}`, which SSE through it depends on");
    }
    out
}

fn binary() -> Option<PathBuf> {
    let candidates = [PathBuf::from("/usr/sbin/nginx"), PathBuf::from("/usr/bin/nginx")];
    candidates.into_iter().find(|p| p.is_file()).or_else(|| which("nginx"))
}

/// `name` on the `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(name)).find(|p| p.is_file())
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod an nginx directory");
}
