//! What changed in a materialised workspace since its last commit: a walk
//! of the directory compared with what is known of the committed files —
//! size and modification time first, then the digest of the files whose
//! size or time moved. Blocking file I/O: callers run it on the blocking
//! pool. Symlinks, special files and names that are not UTF-8 are not
//! kept (and are said to be ignored); at most [`MAX_FILES`] files.

use std::{
    collections::BTreeMap,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::Path,
    time::SystemTime,
};

use sha2::{Digest as _, Sha256};

use crate::store::FileEntry;

/// Files a workspace may hold.
pub const MAX_FILES: usize = 10_000;

/// A committed file as this replica knows it: its entry and the size and
/// time it had on disk when it was written or last seen unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub entry: FileEntry,
    pub mtime: Option<SystemTime>,
}

/// A file found changed (added or modified): its new entry and content.
#[derive(Debug, Clone)]
pub struct Changed {
    pub entry: FileEntry,
    pub content: Vec<u8>,
}

/// The walk's findings.
#[derive(Debug, Default)]
pub struct Scan {
    pub changed: BTreeMap<String, Changed>,
    pub removed: Vec<String>,
    /// Unchanged files whose time moved (the new time to remember).
    pub touched: BTreeMap<String, Option<SystemTime>>,
    /// Paths that cannot be kept (symlinks, special files, odd names, too many).
    pub ignored: Vec<String>,
}

pub fn digest(content: &[u8]) -> String {
    hex::encode(Sha256::digest(content))
}

/// The mode kept for a file: executable or not.
pub fn mode_of(permissions: u32) -> u32 {
    if permissions & 0o111 != 0 { 0o755 } else { 0o644 }
}

/// Compares `root` with `known`.
pub fn scan(root: &Path, known: &BTreeMap<String, Known>) -> std::io::Result<Scan> {
    let mut scan = Scan::default();
    let mut seen = 0usize;
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                scan.ignored.push(format!("{prefix}{}", entry.file_name().to_string_lossy()));
                continue;
            };
            let path = format!("{prefix}{name}");
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push((entry.path(), format!("{path}/")));
                continue;
            }
            if !meta.is_file() {
                scan.ignored.push(path);
                continue;
            }
            seen += 1;
            if seen > MAX_FILES {
                scan.ignored.push(path);
                continue;
            }
            let mtime = meta.modified().ok();
            let mode = mode_of(meta.permissions().mode());
            if let Some(k) = known.get(&path)
                && k.entry.size == meta.size()
                && k.mtime.is_some()
                && k.mtime == mtime
                && k.entry.mode == mode
            {
                continue;
            }
            let content = std::fs::read(entry.path())?;
            let entry = FileEntry { digest: digest(&content), size: content.len() as u64, mode };
            match known.get(&path) {
                Some(k) if k.entry == entry => {
                    scan.touched.insert(path, mtime);
                }
                _ => {
                    scan.changed.insert(path, Changed { entry, content });
                }
            }
        }
    }
    for path in known.keys() {
        let on_disk = root.join(path).symlink_metadata().is_ok_and(|m| m.is_file());
        if !on_disk {
            scan.removed.push(path.clone());
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_finds_added_changed_and_removed_files_and_ignores_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let first = scan(dir.path(), &BTreeMap::new()).unwrap();
        assert_eq!(first.changed.keys().collect::<Vec<_>>(), ["b.txt", "src/a.txt"]);
        assert_eq!(first.ignored, ["link"]);
        let known: BTreeMap<String, Known> = first
            .changed
            .into_iter()
            .map(|(path, c)| {
                let mtime = dir.path().join(&path).metadata().unwrap().modified().ok();
                (path, Known { entry: c.entry, mtime })
            })
            .collect();
        assert!(scan(dir.path(), &known).unwrap().changed.is_empty());
        std::fs::write(dir.path().join("b.txt"), "bb").unwrap();
        std::fs::remove_file(dir.path().join("src/a.txt")).unwrap();
        let second = scan(dir.path(), &known).unwrap();
        assert_eq!(second.changed["b.txt"].entry.digest, digest(b"bb"));
        assert_eq!(second.removed, ["src/a.txt"]);
    }
}
