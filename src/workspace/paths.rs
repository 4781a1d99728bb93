//! Paths the model names, confined to where they may lead: `/workspace/…`
//! (or a relative path) in the session's workspace, `/skills/…` (read only)
//! in a skill's directory. A path that leaves its root — by `..`, or by a
//! symlink anywhere along it — is refused. Blocking (it asks the file
//! system): callers run it on the blocking pool, while no command runs in
//! the workspace (the workspace's lock), so nothing swaps a directory for
//! a symlink between the check and the use.

use std::path::{Component, Path, PathBuf};

use crate::sandbox::{Mount, SKILLS_MOUNT, WORKSPACE_MOUNT};

/// Where a confined path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The file on this host.
    pub host: PathBuf,
    /// Its path relative to the workspace, when it is in the workspace.
    pub relative: Option<String>,
}

/// Why a path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("{0} is outside the workspace (/workspace) and the skills (/skills)")]
    Outside(String),
}

/// Resolves `path` as the model wrote it. `mounts` are the skills.
pub fn resolve(workspace: &Path, mounts: &[Mount], path: &str) -> Result<Resolved, PathError> {
    let outside = || PathError::Outside(path.to_string());
    let (root, rest, in_workspace) = if let Some(rest) = strip_root(path, WORKSPACE_MOUNT) {
        (workspace.to_path_buf(), rest, true)
    } else if path.starts_with('/') {
        let skill = mounts.iter().find_map(|m| strip_root(path, &m.target).map(|rest| (m.source.clone(), rest)));
        match skill {
            Some((source, rest)) if path.starts_with(SKILLS_MOUNT) => (source, rest, false),
            _ => return Err(outside()),
        }
    } else {
        (workspace.to_path_buf(), path, true)
    };
    let mut parts = Vec::new();
    for component in Path::new(rest).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                parts.pop().ok_or_else(outside)?;
            }
            Component::Prefix(_) => return Err(outside()),
        }
    }
    // No symlink along the way: every existing prefix must be a directory
    // (the file itself a file or absent).
    let mut host = root.clone();
    for (i, part) in parts.iter().enumerate() {
        host.push(part);
        match host.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => return Err(outside()),
            Ok(meta) if i + 1 < parts.len() && !meta.is_dir() => return Err(outside()),
            Ok(_) => {}
            Err(_) => {
                host.extend(&parts[i + 1..]);
                break;
            }
        }
    }
    let relative = in_workspace.then(|| parts.join("/"));
    Ok(Resolved { host, relative })
}

fn strip_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(root)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_their_root_and_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir(ws.join("src")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        let ok = resolve(ws, &[], "/workspace/src/../a.txt").unwrap();
        assert_eq!((ok.host, ok.relative.as_deref()), (ws.join("a.txt"), Some("a.txt")));
        assert_eq!(resolve(ws, &[], "src/new/b.rs").unwrap().relative.as_deref(), Some("src/new/b.rs"));
        for bad in ["/etc/passwd", "../x", "/workspace/../../etc/passwd", "etc/passwd", "/workspacex/a", "/skills/x"] {
            assert!(resolve(ws, &[], bad).is_err(), "{bad}");
        }
        let skill = Mount { source: ws.join("src"), target: "/skills/demo".into() };
        std::fs::write(ws.join("src/SKILL.md"), "x").unwrap();
        let found = resolve(ws, std::slice::from_ref(&skill), "/skills/demo/SKILL.md").unwrap();
        assert_eq!((found.host, found.relative), (ws.join("src/SKILL.md"), None));
    }
}
