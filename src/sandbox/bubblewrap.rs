//! The bubblewrap backend: the `bwrap` command line of one command (see
//! the module docs of `sandbox` for what it shows and hides), and the few
//! made-up `/etc` files it binds (`passwd`, `group`, `hosts`,
//! `nsswitch.conf`), written once per process into a private directory.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use async_trait::async_trait;
use tokio::sync::{OnceCell, mpsc};
use tokio_util::sync::CancellationToken;

use super::{
    Chunk, ExecOutput, ExecRequest, SKILLS_MOUNT, Sandbox, SandboxError, WORKSPACE_MOUNT,
    limits::{ChildSetup, process_limit_wrapper},
    process,
};
use crate::config::{CommandLimits, SandboxConfig};

/// The uid and gid a command has inside its user namespace.
const INNER_ID: &str = "1000";

/// Top-level system directories shown read-only (a symlink, as in
/// merged-/usr systems, is shown as the same symlink).
const SYSTEM: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"];

/// What of the host's `/etc` programs need, read-only: TLS roots, the
/// dynamic linker's cache and configuration, `alternatives` (Debian's
/// program links), the time zone, MIME types. Nothing with accounts,
/// secrets or host names.
const ETC: &[&str] = &[
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/mime.types",
];

/// The made-up files bound into `/etc`.
const MADE_UP: &[(&str, &str)] = &[
    (
        "passwd",
        "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    ),
    ("group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"),
    ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
    ("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
];

pub(super) struct Bubblewrap {
    bwrap: PathBuf,
    limits: CommandLimits,
    uid: u32,
    /// `bwrap` arguments showing the system directories (read at start).
    system: Vec<String>,
    /// The directory of the made-up `/etc` files, written at first use.
    etc: Arc<OnceCell<PathBuf>>,
}

/// The made-up `/etc` goes with the sandbox (at shutdown).
impl Drop for Bubblewrap {
    fn drop(&mut self) {
        if let Some(dir) = self.etc.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Bubblewrap {
    pub fn new(config: &SandboxConfig) -> Self {
        let mut system = Vec::new();
        for path in SYSTEM {
            let items = match std::fs::read_link(path) {
                Ok(target) => ["--symlink".to_string(), target.to_string_lossy().into_owned(), path.to_string()],
                Err(_) => ["--ro-bind-try".to_string(), path.to_string(), path.to_string()],
            };
            system.extend(items);
        }
        Self { bwrap: config.bwrap_path.clone(), limits: config.limits, uid: config.uid, system, etc: Arc::default() }
    }

    async fn made_up_etc(&self) -> Result<&Path, SandboxError> {
        let dir = self
            .etc
            .get_or_try_init(|| async {
                // A fresh directory (create_dir fails if it exists), so
                // nobody else's files end up in a sandbox's /etc.
                let dir = std::env::temp_dir().join(format!("switchboard-etc-{}", uuid::Uuid::new_v4().simple()));
                tokio::fs::create_dir(&dir).await?;
                for (name, text) in MADE_UP {
                    tokio::fs::write(dir.join(name), text).await?;
                }
                use std::os::unix::fs::PermissionsExt as _;
                tokio::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).await?;
                Ok::<_, std::io::Error>(dir)
            })
            .await
            .map_err(|e| SandboxError::Io(format!("cannot write the sandbox's /etc files: {e}")))?;
        Ok(dir)
    }

    /// The arguments of `bwrap` for `request`, up to and including `--`.
    fn arguments(&self, request: &ExecRequest<'_>, etc: &Path) -> Vec<String> {
        let mut args: Vec<String> = Vec::with_capacity(96);
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
        push(&["--unshare-all", "--unshare-user", "--uid", INNER_ID, "--gid", INNER_ID]);
        if request.network {
            push(&["--share-net"]);
        }
        push(&["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]);
        push(&["--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORKSPACE_MOUNT]);
        push(&["--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp", "--setenv", "USER", "sandbox"]);
        args.extend(self.system.iter().cloned());
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
        push(&["--proc", "/proc", "--dev", "/dev"]);
        let tmp = self.limits.tmp_bytes.to_string();
        push(&["--size", &tmp, "--perms", "1777", "--tmpfs", "/tmp", "--dir", "/etc"]);
        for path in ETC {
            push(&["--ro-bind-try", path, path]);
        }
        for (name, _) in MADE_UP {
            let source = etc.join(name);
            push(&["--ro-bind", &source.to_string_lossy(), &format!("/etc/{name}")]);
        }
        if request.network {
            push(&["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]);
        }
        let workspace = request.workspace.to_string_lossy();
        push(&["--bind", &workspace, WORKSPACE_MOUNT, "--chdir", WORKSPACE_MOUNT]);
        if !request.mounts.is_empty() {
            push(&["--dir", SKILLS_MOUNT]);
        }
        for mount in request.mounts {
            push(&["--ro-bind", &mount.source.to_string_lossy(), &mount.target]);
        }
        push(&["--"]);
        args
    }
}

#[async_trait]
impl Sandbox for Bubblewrap {
    fn name(&self) -> &'static str {
        "bubblewrap"
    }

    async fn exec(
        &self,
        request: ExecRequest<'_>,
        progress: Option<mpsc::Sender<Chunk>>,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, SandboxError> {
        let etc = self.made_up_etc().await?;
        let mut command = tokio::process::Command::new(&self.bwrap);
        command.env_clear().current_dir("/").args(self.arguments(&request, etc));
        command.args(["/bin/sh", "-c", &process_limit_wrapper(self.limits.processes), "sh", request.command]);
        ChildSetup { limits: self.limits, drop_to: ChildSetup::drop_to_if_root(self.uid) }.install(&mut command);
        process::run(command, request.timeout, self.limits.output_bytes, progress, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_is_shared_only_when_asked_and_the_workspace_is_the_only_writable_bind() {
        let sandbox = Bubblewrap::new(&SandboxConfig::default());
        let dir = PathBuf::from("/srv/ws/abc");
        let mut request = ExecRequest {
            command: "true",
            workspace: &dir,
            timeout: std::time::Duration::from_secs(1),
            network: false,
            mounts: &[],
        };
        let args = sandbox.arguments(&request, Path::new("/tmp/etc"));
        assert!(args.contains(&"--unshare-all".to_string()) && !args.contains(&"--share-net".to_string()));
        let writable: Vec<_> = args.windows(3).filter(|w| w[0] == "--bind").map(|w| w[1].clone()).collect();
        assert_eq!(writable, vec!["/srv/ws/abc".to_string()]);
        request.network = true;
        assert!(sandbox.arguments(&request, Path::new("/tmp/etc")).contains(&"--share-net".to_string()));
    }
}
