//! The sandbox on its own (`switchboard::sandbox`), as configured by
//! default (bubblewrap): each test shows one thing a command must not be
//! able to do, so each fails if the sandbox is taken away (the `none`
//! backend fails them: see the last test). Runs as root in CI, so the uid
//! drop is exercised too.

use std::{path::PathBuf, sync::Arc, time::Duration};

use switchboard::{
    config::{SandboxBackend, SandboxConfig},
    sandbox::{self, Ending, ExecOutput, ExecRequest, Mount, Sandbox},
};
use tokio_util::sync::CancellationToken;

/// A sandbox with `tweak` applied, and a workspace directory for it.
async fn sandbox_with(tweak: impl FnOnce(&mut SandboxConfig)) -> (Arc<dyn Sandbox>, Workspace) {
    let mut config = SandboxConfig::default();
    tweak(&mut config);
    let sandbox = sandbox::open(&config);
    let root = std::env::temp_dir().join(format!("sbtest-ws-{}", uuid::Uuid::new_v4().simple()));
    sandbox::make_private_dir(&root, config.uid).await.unwrap();
    (sandbox, Workspace { dir: root, uid: config.uid })
}

pub struct Workspace {
    pub dir: PathBuf,
    uid: u32,
}

impl Workspace {
    /// Another session's workspace beside this one.
    async fn sibling(&self) -> Workspace {
        let dir = self.dir.with_file_name(format!("sbtest-ws-{}", uuid::Uuid::new_v4().simple()));
        sandbox::make_private_dir(&dir, self.uid).await.unwrap();
        Workspace { dir, uid: self.uid }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn run(sandbox: &dyn Sandbox, workspace: &Workspace, command: &str, timeout: Duration) -> ExecOutput {
    let request = ExecRequest { command, workspace: &workspace.dir, timeout, network: false, mounts: &[] as &[Mount] };
    sandbox.exec(request, None, &CancellationToken::new()).await.expect("the sandbox starts the command")
}

const SECOND: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_command_runs_in_its_workspace_with_an_empty_environment() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    std::fs::write(ws.dir.join("hello.txt"), "hi\n").unwrap();
    let out = run(&*sandbox, &ws, "pwd; cat hello.txt; echo made > new.txt; env | sort", LONG).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("/workspace\nhi\n"), "{out:?}");
    assert!(!out.stdout.contains("REDIS") && !out.stdout.contains("CARGO"), "no gateway environment: {out:?}");
    assert_eq!(std::fs::read_to_string(ws.dir.join("new.txt")).unwrap(), "made\n");
}

#[tokio::test]
async fn a_command_cannot_read_the_hosts_files_outside_the_read_only_system_view() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    // A stand-in for the gateway's configuration file, beside the workspace.
    let secret = ws.dir.with_file_name(format!("sbtest-config-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&secret, "hs256_secret = \"do-not-leak\"").unwrap();
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let command = format!(
        "cat {0} 2>&1; ls /root 2>&1; cat /etc/shadow 2>&1; ls {1} 2>&1; cat /proc/1/environ 2>&1; \
         echo ---; cat /etc/passwd",
        secret.display(),
        ws.dir.parent().unwrap().display()
    );
    let out = run(&*sandbox, &ws, &command, LONG).await;
    let _ = std::fs::remove_file(&secret);
    assert!(!out.stdout.contains("do-not-leak"), "{out:?}");
    let passwd = out.stdout.split("---\n").nth(1).unwrap_or_default();
    assert_ne!(passwd, host_passwd, "the host's /etc/passwd is not shown");
    assert!(passwd.contains("sandbox:x:1000"), "{out:?}");
    assert!(!out.stdout.contains("sbtest-ws-"), "no other directory of the host is listed: {out:?}");
}

#[tokio::test]
async fn a_command_cannot_reach_the_network_not_even_redis_on_loopback() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    let probe = [
        "import socket",
        "try:",
        "    socket.create_connection(('127.0.0.1', 6379), timeout=3)",
        "    print('CONNECTED')",
        "except Exception as e:",
        "    print('refused', type(e).__name__)",
    ]
    .join("\n");
    std::fs::write(ws.dir.join("net.py"), probe).unwrap();
    let out = run(&*sandbox, &ws, "python3 net.py", LONG).await;
    assert!(out.stdout.starts_with("refused"), "{out:?}");
    // The same probe reaches Redis from the host (the test is meaningful).
    assert!(std::net::TcpStream::connect("127.0.0.1:6379").is_ok());
}

#[tokio::test]
async fn a_command_cannot_see_another_sessions_workspace() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    let other = ws.sibling().await;
    std::fs::write(other.dir.join("private.txt"), "other session's file").unwrap();
    let command = format!("cat {0}/private.txt 2>&1; ls -R / 2>/dev/null | grep -c private.txt", other.dir.display());
    let out = run(&*sandbox, &ws, &command, LONG).await;
    assert!(!out.stdout.contains("other session's file"), "{out:?}");
    assert!(out.stdout.trim_end().ends_with('0'), "{out:?}");
}

#[tokio::test]
async fn a_command_cannot_exceed_its_memory_limit() {
    let (sandbox, ws) = sandbox_with(|c| c.limits.memory_bytes = 256 << 20).await;
    let out = run(&*sandbox, &ws, "python3 -c 'x = bytearray(1024 * 1024 * 1024); print(\"ALLOCATED\")'", LONG).await;
    assert!(!out.stdout.contains("ALLOCATED"), "{out:?}");
    assert!(out.stderr.contains("MemoryError"), "{out:?}");
}

#[tokio::test]
async fn a_command_cannot_exceed_its_process_limit_and_the_limit_is_its_own() {
    let (sandbox, ws) = sandbox_with(|c| c.limits.processes = 16).await;
    let forks = [
        "import os, time",
        "n = 0",
        "for _ in range(100):",
        "    try:",
        "        pid = os.fork()",
        "    except OSError:",
        "        break",
        "    if pid == 0:",
        "        time.sleep(2)",
        "        os._exit(0)",
        "    n += 1",
        "print('forked', n)",
    ]
    .join("\n");
    std::fs::write(ws.dir.join("forks.py"), &forks).unwrap();
    let other = ws.sibling().await;
    std::fs::write(other.dir.join("forks.py"), forks).unwrap();
    // Two at once: each gets its own 16 (the count is per command).
    let (a, b) =
        tokio::join!(run(&*sandbox, &ws, "python3 forks.py", LONG), run(&*sandbox, &other, "python3 forks.py", LONG));
    for out in [a, b] {
        let forked: u32 = out.stdout.trim().strip_prefix("forked ").and_then(|n| n.parse().ok()).unwrap_or(999);
        assert!((5..16).contains(&forked), "{out:?}");
    }
}

/// Processes of the host whose command line holds `marker` (zombies aside).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let zombie = state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if cmdline.contains(marker) && !zombie {
            found.push(format!("{}: {cmdline}", path.display()));
        }
    }
    found
}

#[tokio::test]
async fn a_command_does_not_outlive_its_timeout_and_its_process_group_is_gone() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    let marker = format!("4321.{}", rand_digits());
    let command = format!("sleep {marker} & (sleep {marker} &) ; echo started; sleep {marker}");
    let out = run(&*sandbox, &ws, &command, SECOND).await;
    assert_eq!(out.ending, Ending::TimedOut, "{out:?}");
    assert_eq!(out.exit_code_or_signal(), -1);
    assert_eq!(out.stdout, "started\n", "what it printed before is kept");
    assert!(processes_with(&marker).is_empty(), "{:?}", processes_with(&marker));
}

#[tokio::test]
async fn a_cancelled_command_is_killed_with_its_background_processes() {
    let (sandbox, ws) = sandbox_with(|_| {}).await;
    let marker = format!("4322.{}", rand_digits());
    let command = format!("sleep {marker} & echo started; sleep {marker}");
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let request = ExecRequest { command: &command, workspace: &ws.dir, timeout: LONG, network: false, mounts: &[] };
    let running = sandbox.exec(request, Some(tx), &cancel);
    let canceller = async {
        let chunk = rx.recv().await.expect("a first chunk");
        assert_eq!(chunk.text, "started\n");
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(running, canceller);
    assert_eq!(out.unwrap().ending, Ending::Cancelled);
    assert!(processes_with(&marker).is_empty(), "{:?}", processes_with(&marker));
}

#[tokio::test]
async fn output_past_the_cap_is_cut_and_said_to_be() {
    let (sandbox, ws) = sandbox_with(|c| c.limits.output_bytes = 1000).await;
    let out = run(&*sandbox, &ws, "yes hello | head -c 100000; echo done >&2", LONG).await;
    assert_eq!((out.stdout.len(), out.stdout_cut, out.stderr.as_str(), out.stderr_cut), (1000, true, "done\n", false));
}

#[tokio::test]
async fn the_unsandboxed_backend_fails_the_isolation_checks_so_they_mean_something() {
    let (sandbox, ws) = sandbox_with(|c| c.backend = SandboxBackend::Unsandboxed).await;
    assert_eq!(sandbox.name(), "none");
    let out = run(&*sandbox, &ws, "cat /etc/passwd", LONG).await;
    assert_eq!(out.stdout, std::fs::read_to_string("/etc/passwd").unwrap());
}

fn rand_digits() -> String {
    uuid::Uuid::new_v4().as_u128().to_string()[..9].to_string()
}
