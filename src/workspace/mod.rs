//! Session workspaces: the files a session's tools work on, kept in the
//! store (content-addressed blobs and a manifest, `store::workspace`) and
//! materialised, on the replica that runs the session's turn, in a
//! directory of its own under `[sandbox] dir`.
//!
//! [`Workspaces`] (one per replica) opens a session's workspace for a
//! tenure: it writes the committed files into a fresh directory (after a
//! takeover, a restart or a new turn: always from the store, never from
//! what another tenure left on disk), and removes the directory when the
//! turn lets it go ([`Workspaces::release`]) or at shutdown.
//!
//! [`Workspace`] is the handle the tools (and the rlm REPL's `exec`) use:
//! - [`Workspace::exec`] runs a command in the sandbox on it;
//! - [`Workspace::changes`] compares the directory with the committed
//!   files and returns the [`WorkspaceWrite`] to commit with the tool's
//!   result (`RunHandle::transition_with_files`), caps enforced: a file
//!   over `workspace_max_file_bytes`, or a change that would take the
//!   workspace over `workspace_max_bytes`, is put back as it was and the
//!   result says so; [`Workspace::accept`] records it once committed;
//! - [`Workspace::lock`] serialises the calls that may change files, from
//!   their start to their commit, so each commit holds exactly its own
//!   call's changes.
//!
//! It owns no session state: what a tool's result is, and committing it,
//! is the orchestrator's.

mod paths;
mod scan;
mod seed;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::SystemTime,
};

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{OwnedMutexGuard, mpsc};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use self::{
    paths::{PathError, Resolved, resolve},
    scan::{Known, MAX_FILES, digest, mode_of},
    seed::{SeedError, SeedFile, Seeds},
};
use crate::{
    config::SandboxConfig,
    sandbox::{Chunk, ExecOutput, ExecRequest, Mount, Sandbox, SandboxError},
    store::{FileEntry, SessionKey, StoreError, WorkspaceStore, WorkspaceWrite},
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the workspace directory failed: {0}")]
    Io(String),
}

fn io(error: impl std::fmt::Display) -> WorkspaceError {
    WorkspaceError::Io(error.to_string())
}

/// The workspaces of the sessions this replica runs.
pub struct Workspaces {
    root: PathBuf,
    config: SandboxConfig,
    sandbox: Arc<dyn Sandbox>,
    store: Arc<dyn WorkspaceStore>,
    /// Skills, read-only inside every sandbox.
    mounts: Vec<Mount>,
    open: DashMap<SessionKey, Arc<Workspace>>,
    /// One lock per session being opened: a turn's tools run concurrently,
    /// and the first of them materialises the directory the others use.
    opening: DashMap<SessionKey, Arc<tokio::sync::Mutex<()>>>,
    tasks: TaskTracker,
}

impl Workspaces {
    pub fn new(
        root: PathBuf,
        config: SandboxConfig,
        sandbox: Arc<dyn Sandbox>,
        store: Arc<dyn WorkspaceStore>,
        mounts: Vec<Mount>,
        tasks: TaskTracker,
    ) -> Arc<Self> {
        Arc::new(Self { root, config, sandbox, store, mounts, open: DashMap::new(), opening: DashMap::new(), tasks })
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// `key`'s workspace for tenure `epoch`, materialised from the store at
    /// the first call of the tenure. `network`: the tenant's setting.
    pub async fn open(&self, key: &SessionKey, epoch: u64, network: bool) -> Result<Arc<Workspace>, WorkspaceError> {
        if let Some(open) = self.open_for(key, epoch) {
            return Ok(open);
        }
        let lock = self.opening.entry(key.clone()).or_default().clone();
        let _opening = lock.lock().await;
        if let Some(open) = self.open_for(key, epoch) {
            return Ok(open);
        }
        let opened = self.create(key, epoch, network).await;
        self.opening.remove_if(key, |_, l| Arc::ptr_eq(l, &lock));
        opened
    }

    fn open_for(&self, key: &SessionKey, epoch: u64) -> Option<Arc<Workspace>> {
        self.open.get(key).filter(|w| w.epoch == epoch).map(|w| w.clone())
    }

    /// Writes `key`'s committed files into a fresh directory for tenure
    /// `epoch` (called by one opener at a time per session).
    async fn create(&self, key: &SessionKey, epoch: u64, network: bool) -> Result<Arc<Workspace>, WorkspaceError> {
        let files = self.store.files(key).await?;
        let name = format!("{}-{epoch}", &digest(key.to_member().as_bytes())[..24]);
        let dir = self.root.join(name);
        let _ = tokio::fs::remove_dir_all(&dir).await;
        crate::sandbox::make_private_dir(&dir, self.config.uid).await.map_err(io)?;
        let uid = self.owner_uid();
        let write_dir = dir.clone();
        let known =
            tokio::task::spawn_blocking(move || materialise(&write_dir, &files, uid)).await.map_err(io)?.map_err(io)?;
        let workspace = Arc::new(Workspace {
            key: key.clone(),
            epoch,
            dir,
            network,
            known: Mutex::new(known),
            reads: Mutex::new(HashMap::new()),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            sandbox: self.sandbox.clone(),
            store: self.store.clone(),
            mounts: self.mounts.clone(),
            config: self.config.clone(),
            uid,
        });
        if let Some(earlier) = self.open.insert(key.clone(), workspace.clone()).filter(|e| e.dir != workspace.dir) {
            self.remove_dir(earlier.dir.clone());
        }
        Ok(workspace)
    }

    /// The turn of tenure `epoch` let `key` go: its directory is removed.
    pub fn release(&self, key: &SessionKey, epoch: u64) {
        if let Some((_, workspace)) = self.open.remove_if(key, |_, w| w.epoch == epoch) {
            self.remove_dir(workspace.dir.clone());
        }
    }

    fn remove_dir(&self, dir: PathBuf) {
        self.tasks.spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(dir);
        });
    }

    /// The uid files are handed to when the gateway is root (commands run
    /// as it then).
    fn owner_uid(&self) -> Option<u32> {
        nix::unistd::geteuid().is_root().then_some(self.config.uid)
    }
}

/// A root this replica made for itself (no `[sandbox] dir`) goes with it,
/// with whatever a session left there; a configured one stays.
impl Drop for Workspaces {
    fn drop(&mut self) {
        if self.config.dir.is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// One session's materialised workspace, for one tenure.
pub struct Workspace {
    key: SessionKey,
    epoch: u64,
    dir: PathBuf,
    network: bool,
    /// The committed files as this replica knows them.
    known: Mutex<BTreeMap<String, Known>>,
    /// `read`'s records for the read-before-patch rule: path → the file's
    /// modification time and digest when it was read.
    reads: Mutex<HashMap<String, (Option<SystemTime>, String)>>,
    turn: Arc<tokio::sync::Mutex<()>>,
    sandbox: Arc<dyn Sandbox>,
    store: Arc<dyn WorkspaceStore>,
    mounts: Vec<Mount>,
    config: SandboxConfig,
    uid: Option<u32>,
}

/// What a scan found, to commit and then [`Workspace::accept`].
#[derive(Debug, Default)]
pub struct Changes {
    pub write: WorkspaceWrite,
    /// Paths written and removed, for the tool's result.
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// Why some changes were not kept (caps, symlinks), for the model.
    pub notes: Vec<String>,
    next: BTreeMap<String, Known>,
}

impl Workspace {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Held from the start of a call that may change files to its commit.
    pub async fn lock(&self) -> OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }

    /// Runs `command` in the sandbox, in this workspace (`/workspace`),
    /// with the tenant's network setting and the skills mounted.
    pub async fn exec(
        &self,
        command: &str,
        timeout: std::time::Duration,
        progress: Option<mpsc::Sender<Chunk>>,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, SandboxError> {
        let timeout = timeout.min(self.config.max_timeout);
        let request =
            ExecRequest { command, workspace: &self.dir, timeout, network: self.network, mounts: &self.mounts };
        self.sandbox.exec(request, progress, cancel).await
    }

    /// Hands a file the gateway wrote (`patch`) to the sandbox's uid.
    pub fn own(&self, path: &Path) {
        if let Some(uid) = self.uid {
            let _ = std::os::unix::fs::chown(path, Some(uid), Some(uid));
        }
    }

    /// Records that `relative` was read as it is now (blocking).
    pub fn record_read(&self, relative: &str, content: &[u8], mtime: Option<SystemTime>) {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        reads.insert(relative.to_string(), (mtime, digest(content)));
    }

    /// The read record of `relative`, if any.
    pub fn read_record(&self, relative: &str) -> Option<(Option<SystemTime>, String)> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner()).get(relative).cloned()
    }

    /// Compares the directory with the committed files, puts back what
    /// breaks a cap, and returns the rest to commit.
    pub async fn changes(&self) -> Result<Changes, WorkspaceError> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let dir = self.dir.clone();
        let scanned = tokio::task::spawn_blocking(move || scan::scan(&dir, &known).map(|s| (s, known)))
            .await
            .map_err(io)?
            .map_err(io)?;
        let (found, known) = scanned;
        let mut changes = Changes { next: known.clone(), ..Changes::default() };
        let mut put_back = Vec::new();
        for (path, changed) in &found.changed {
            if changed.entry.size > self.config.workspace_max_file_bytes {
                changes.notes.push(format!(
                    "{path} was not kept: it is larger than the {} byte limit of a file",
                    self.config.workspace_max_file_bytes
                ));
                put_back.push(path.clone());
            }
        }
        for path in &found.ignored {
            changes.notes.push(format!("{path} was not kept: only regular files are kept"));
        }
        let mut total: u64 = known.values().map(|k| k.entry.size).sum();
        for path in &found.removed {
            total -= known.get(path).map_or(0, |k| k.entry.size);
        }
        for (path, changed) in found.changed.iter().filter(|(p, _)| !put_back.contains(p)) {
            total = total - known.get(path).map_or(0, |k| k.entry.size) + changed.entry.size;
        }
        if total > self.config.workspace_max_bytes {
            changes.notes.push(format!(
                "no change was kept: the workspace would hold {total} bytes, more than its limit of {}",
                self.config.workspace_max_bytes
            ));
            put_back.extend(found.changed.keys().cloned());
            put_back.extend(found.removed.iter().cloned());
        }
        if !put_back.is_empty() {
            self.put_back(&put_back, &known).await?;
        }
        for (path, mtime) in found.touched {
            if let Some(k) = changes.next.get_mut(&path) {
                k.mtime = mtime;
            }
        }
        let mut referenced: HashMap<String, usize> = HashMap::new();
        for k in known.values() {
            *referenced.entry(k.entry.digest.clone()).or_default() += 1;
        }
        for path in found.removed.iter().filter(|p| !put_back.contains(p)) {
            if let Some(old) = changes.next.remove(path) {
                *referenced.entry(old.entry.digest).or_default() -= 1;
            }
            changes.write.remove.push(path.clone());
            changes.removed.push(path.clone());
        }
        for (path, changed) in found.changed.into_iter().filter(|(p, _)| !put_back.contains(p)) {
            let mtime = self.dir.join(&path).symlink_metadata().ok().and_then(|m| m.modified().ok());
            if let Some(old) = changes.next.insert(path.clone(), Known { entry: changed.entry.clone(), mtime }) {
                *referenced.entry(old.entry.digest).or_default() -= 1;
            }
            let fresh = referenced.get(&changed.entry.digest).copied().unwrap_or(0) == 0
                && !changes.write.blobs.iter().any(|(d, _)| *d == changed.entry.digest);
            if fresh {
                changes.write.blobs.push((changed.entry.digest.clone(), Bytes::from(changed.content)));
            }
            *referenced.entry(changed.entry.digest.clone()).or_default() += 1;
            changes.write.set.push((path.clone(), changed.entry));
            changes.changed.push(path);
        }
        changes.write.drop_blobs = referenced.into_iter().filter(|(_, n)| *n == 0).map(|(d, _)| d).collect();
        changes.write.drop_blobs.sort();
        changes.write.blobs.retain(|(d, _)| !changes.write.drop_blobs.contains(d));
        Ok(changes)
    }

    /// The changes were committed: they are what is known now.
    pub fn accept(&self, changes: Changes) {
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = changes.next;
    }

    /// Writes `paths` back as committed (removing those that were not).
    async fn put_back(&self, paths: &[String], known: &BTreeMap<String, Known>) -> Result<(), WorkspaceError> {
        let wanted: Vec<&String> = paths.iter().filter(|p| known.contains_key(*p)).collect();
        let stored = if wanted.is_empty() { Vec::new() } else { self.store.files(&self.key).await? };
        let restore: Vec<_> = stored.into_iter().filter(|f| paths.contains(&f.path)).collect();
        let (dir, paths, uid) = (self.dir.clone(), paths.to_vec(), self.uid);
        tokio::task::spawn_blocking(move || {
            for path in &paths {
                let _ = std::fs::remove_file(dir.join(path));
            }
            materialise(&dir, &restore, uid)
        })
        .await
        .map_err(io)?
        .map_err(io)?;
        Ok(())
    }
}

/// Writes `files` under `dir` (blocking); what is known of them after.
fn materialise(
    dir: &Path,
    files: &[crate::store::StoredFile],
    uid: Option<u32>,
) -> std::io::Result<BTreeMap<String, Known>> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut known = BTreeMap::new();
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
            let mut at = parent;
            while at.starts_with(dir) && at != dir {
                if let Some(uid) = uid {
                    std::os::unix::fs::chown(at, Some(uid), Some(uid))?;
                }
                at = at.parent().unwrap_or(dir);
            }
        }
        std::fs::write(&path, &file.content)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.entry.mode))?;
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid))?;
        }
        let mtime = path.metadata()?.modified().ok();
        known.insert(file.path.clone(), Known { entry: file.entry.clone(), mtime });
    }
    Ok(known)
}

/// A file entry for `content` with `mode`.
pub fn entry_of(content: &[u8], mode: u32) -> FileEntry {
    FileEntry { digest: digest(content), size: content.len() as u64, mode: mode_of(mode) }
}

#[cfg(test)]
mod tests;
