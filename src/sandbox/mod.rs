//! The sandbox: runs one shell command (`sh -c <command>`) in a session's
//! workspace directory, with a timeout, an output cap, per-process limits,
//! no network unless asked, and live output chunks. It owns processes and
//! nothing else: which directory is a session's workspace, and what of it
//! is kept, is `crate::workspace`'s business; which tool calls run here is
//! the orchestrator's.
//!
//! Two backends behind [`Sandbox`]:
//! - `bubblewrap` (`bubblewrap.rs`, the default): `bwrap` with every
//!   namespace unshared (user, pid, ipc, uts, cgroup, and net unless the
//!   tenant has `sandbox_network = true`), capabilities dropped, a new
//!   session, an empty environment, a read-only view of the system (`/usr`,
//!   `/bin`, `/lib*`, `/sbin`, and of `/etc` only what programs need:
//!   TLS roots, the dynamic linker's cache, alternatives, a made-up
//!   `passwd`), a tmpfs `/tmp` of its own, the workspace read-write at
//!   `/workspace` (the working directory), skills read-only under
//!   `/skills`. Nothing else of the host: not the gateway's files, its
//!   environment, its sockets (every descriptor of the gateway is
//!   close-on-exec) or another session's workspace.
//! - `none` (`unsandboxed.rs`): a plain child process in the workspace with
//!   the same limits and an empty environment. Development only: the
//!   configuration refuses it unless `allow_unsandboxed = true`, and start-up
//!   and `check-config` warn about it.
//!
//! Limits (`limits.rs`, applied in the child before it runs anything):
//! RLIMIT_AS, RLIMIT_CPU and RLIMIT_FSIZE are set with `setrlimit` between
//! fork and exec, so they bind `bwrap` and everything below it, per
//! process. RLIMIT_NPROC is different: the kernel counts it per user (per
//! user namespace and uid since Linux 5.14), ignores it for root, and a
//! limit in force when `bwrap` creates its user namespace also caps every
//! other process of the same uid outside it. So the gateway, when it runs
//! as root, drops to `[sandbox] uid` before `bwrap`, and the process limit
//! is set inside the new user namespace, by the sandbox's shell
//! (`ulimit`) just before it runs the command: it then counts exactly
//! the processes of that one command, whatever else runs as that uid (see
//! the tests in `tests/api/sandbox.rs`).
//!
//! A timeout or a cancel kills the process group with SIGKILL. Under
//! bubblewrap the command is pid 1's child in a pid namespace of its own,
//! and `--die-with-parent` ties it to `bwrap`: when `bwrap` dies the
//! namespace dies, with every process in it, daemons included. Unsandboxed,
//! a process that leaves the group (`setsid`) escapes the kill. A command
//! whose future is dropped (its turn stopped) is killed the same way.

mod bubblewrap;
mod limits;
mod process;
mod unsandboxed;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{CommandLimits, SandboxBackend, SandboxConfig};

pub use self::process::utf8_prefix;

/// Where a workspace is seen inside the sandbox (and its working directory).
pub const WORKSPACE_MOUNT: &str = "/workspace";
/// Where skills are seen inside the sandbox: `/skills/<name>/SKILL.md`.
pub const SKILLS_MOUNT: &str = "/skills";

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest<'a> {
    /// Run as `sh -c <command>`.
    pub command: &'a str,
    /// The workspace directory on this host (the command's `/workspace`).
    pub workspace: &'a Path,
    pub timeout: Duration,
    /// May the command reach the network (the tenant's `sandbox_network`)?
    pub network: bool,
    /// Host directories shown read-only inside (skills).
    pub mounts: &'a [Mount],
}

/// A host directory shown read-only at `target` inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    /// Absolute path inside the sandbox.
    pub target: String,
}

pub use crate::domain::OutputStream;

/// A piece of a running command's output (whole UTF-8 characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub stream: OutputStream,
    pub text: String,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited (or a signal ended it: see [`ExecOutput::signal`]).
    Exited,
    /// Killed at its timeout.
    TimedOut,
    /// Killed because its turn stopped.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub ending: Ending,
    /// The exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended it (a limit: SIGXCPU, SIGXFSZ, SIGKILL …).
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The stream had more than the output cap; the rest was dropped.
    pub stdout_cut: bool,
    pub stderr_cut: bool,
    pub elapsed: Duration,
}

impl ExecOutput {
    /// llm-gateway's exit code: the code, `-1` for a timeout or a kill,
    /// `128 + signal` for a signal (as a shell reports it).
    pub fn exit_code_or_signal(&self) -> i32 {
        match (self.ending, self.exit_code, self.signal) {
            (Ending::Exited, Some(code), _) => code,
            (Ending::Exited, None, Some(signal)) => 128 + signal,
            _ => -1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The command could not be started (bwrap missing, a bad directory).
    #[error("the sandbox could not start the command: {0}")]
    Spawn(String),
    #[error("the sandbox failed: {0}")]
    Io(String),
}

/// Runs commands in a workspace. Implementations are cheap to share.
///
/// The rlm REPL's `exec(command, timeout)` and the `bash` tool both come
/// here (through [`crate::workspace::Workspace::exec`], which adds the
/// session's workspace, network setting and skills).
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// `bubblewrap` or `none`.
    fn name(&self) -> &'static str;

    /// Runs `request` to its end, its timeout, or `cancel`. Output chunks
    /// are sent to `progress` as they come (never past the output cap; a
    /// slow receiver slows the command's output down, nothing is lost).
    async fn exec(
        &self,
        request: ExecRequest<'_>,
        progress: Option<mpsc::Sender<Chunk>>,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, SandboxError>;
}

/// The configured backend.
pub fn open(config: &SandboxConfig) -> Arc<dyn Sandbox> {
    match config.backend {
        SandboxBackend::Bubblewrap => Arc::new(bubblewrap::Bubblewrap::new(config)),
        SandboxBackend::Unsandboxed => Arc::new(unsandboxed::Unsandboxed::new(config.limits)),
    }
}

/// What the start-up probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub backend: &'static str,
    pub works: bool,
    /// Why not, or what ran.
    pub detail: String,
}

/// Runs a small command in a scratch directory under `scratch`: proof that
/// the sandbox starts here, that the network is off and the process limit
/// holds inside it. Bounded by a few seconds.
pub async fn probe(sandbox: &dyn Sandbox, scratch: &Path, uid: u32) -> Probe {
    let backend = sandbox.name();
    let dir = scratch.join(format!(".probe-{}", uuid::Uuid::new_v4().simple()));
    if let Err(e) = make_private_dir(&dir, uid).await {
        return Probe { backend, works: false, detail: format!("cannot make a scratch directory: {e}") };
    }
    let request = ExecRequest {
        command: "echo ok",
        workspace: &dir,
        timeout: Duration::from_secs(10),
        network: false,
        mounts: &[],
    };
    let result = sandbox.exec(request, None, &CancellationToken::new()).await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    match result {
        Ok(out) if out.exit_code == Some(0) && out.stdout.trim() == "ok" => {
            Probe { backend, works: true, detail: format!("a command ran in {} ms", out.elapsed.as_millis()) }
        }
        Ok(out) => Probe {
            backend,
            works: false,
            detail: format!(
                "the probe command failed (exit {:?}, signal {:?}): {}",
                out.exit_code,
                out.signal,
                utf8_prefix(out.stderr.trim(), 300)
            ),
        },
        Err(e) => Probe { backend, works: false, detail: e.to_string() },
    }
}

/// Makes `dir` (0700) for commands of the sandbox's `uid`: owned by it when
/// the gateway is root (commands run as that uid then), else by the gateway.
pub async fn make_private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    tokio::fs::create_dir_all(dir).await?;
    tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).await?;
    if let Some(uid) = limits::ChildSetup::drop_to_if_root(uid) {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || std::os::unix::fs::chown(&dir, Some(uid), Some(uid)))
            .await
            .map_err(std::io::Error::other)??;
    }
    Ok(())
}

/// Makes the directory workspaces are materialised in (`[sandbox] dir`, or
/// a fresh one in the system's temporary directory) and returns it. It is
/// traversable by the sandbox's uid and readable by nobody else.
pub async fn prepare_root(config: &SandboxConfig) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let root = match &config.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("switchboard-workspaces-{}", uuid::Uuid::new_v4().simple())),
    };
    tokio::fs::create_dir_all(&root).await?;
    tokio::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711)).await?;
    Ok(root)
}

/// The limits a backend applies, for logs and docs.
pub fn describe(limits: &CommandLimits) -> String {
    format!(
        "memory {} MiB/process, cpu {} s/process, {} processes, files up to {} KiB, /tmp {} MiB, output {} KiB/stream",
        limits.memory_bytes >> 20,
        limits.cpu_secs,
        limits.processes,
        limits.file_bytes >> 10,
        limits.tmp_bytes >> 20,
        limits.output_bytes >> 10
    )
}
