//! A new session's first files: given in the create request
//! (`workspace: {files: [{path, content | content_base64}], template}`) or
//! copied from a configured template (`[sandbox.templates.<name>] dir`,
//! read once at start-up). Checked like any change: relative paths without
//! `..`, the per-file and per-workspace caps, at most [`MAX_FILES`] files.

use std::{collections::BTreeMap, path::Path};

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;

use super::{MAX_FILES, digest, mode_of};
use crate::{
    config::SandboxConfig,
    store::{FileEntry, WorkspaceWrite},
};

/// One file of a create request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFile {
    pub path: String,
    /// UTF-8 text.
    pub content: Option<String>,
    pub content_base64: Option<String>,
    /// `true` for an executable file.
    #[serde(default)]
    pub executable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    TooLarge(String),
}

/// The templates, read at start-up: name → files.
#[derive(Debug, Default)]
pub struct Seeds {
    templates: BTreeMap<String, Vec<(String, Bytes, u32)>>,
}

impl Seeds {
    /// Reads every configured template (blocking: at start-up). A template
    /// that breaks a cap is an error.
    pub fn load(config: &SandboxConfig) -> Result<Self, String> {
        let mut templates = BTreeMap::new();
        for (name, dir) in &config.templates {
            let mut files = Vec::new();
            read_dir(dir, "", &mut files).map_err(|e| format!("template {name}: {e}"))?;
            let write = check(config, files.iter().map(|(p, c, m)| (p.clone(), c.clone(), *m)).collect())
                .map_err(|e| format!("template {name}: {e}"))?;
            drop(write);
            templates.insert(name.clone(), files);
        }
        Ok(Self { templates })
    }

    /// The write that seeds a workspace with `template` and then `files`
    /// (a file of the request replaces the template's of the same path).
    pub fn seed(
        &self,
        config: &SandboxConfig,
        template: Option<&str>,
        files: &[SeedFile],
    ) -> Result<WorkspaceWrite, SeedError> {
        let mut all: BTreeMap<String, (Bytes, u32)> = BTreeMap::new();
        if let Some(name) = template {
            let template = self
                .templates
                .get(name)
                .ok_or_else(|| SeedError::Invalid(format!("no workspace template named {name:?}")))?;
            for (path, content, mode) in template {
                all.insert(path.clone(), (content.clone(), *mode));
            }
        }
        for (i, file) in files.iter().enumerate() {
            let content = match (&file.content, &file.content_base64) {
                (Some(text), None) => Bytes::from(text.clone().into_bytes()),
                (None, Some(encoded)) => {
                    Bytes::from(base64::engine::general_purpose::STANDARD.decode(encoded).map_err(|_| {
                        SeedError::Invalid(format!("workspace.files[{i}].content_base64 is not base64"))
                    })?)
                }
                _ => {
                    return Err(SeedError::Invalid(format!(
                        "workspace.files[{i}] needs exactly one of content and content_base64"
                    )));
                }
            };
            let path = normalise(&file.path).ok_or_else(|| {
                SeedError::Invalid(format!("workspace.files[{i}].path {:?} is not allowed", file.path))
            })?;
            all.insert(path, (content, if file.executable { 0o755 } else { 0o644 }));
        }
        check(config, all.into_iter().map(|(p, (c, m))| (p, c, m)).collect())
    }
}

/// A relative path without `.`, `..` or empty parts, `/`-separated; a
/// leading `/workspace/` is dropped.
fn normalise(path: &str) -> Option<String> {
    let path = path.strip_prefix("/workspace/").unwrap_or(path);
    let parts: Vec<&str> = path.split('/').collect();
    let ok = !path.is_empty()
        && path.len() <= 1024
        && parts.iter().all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\0'));
    ok.then(|| parts.join("/"))
}

fn check(config: &SandboxConfig, files: Vec<(String, Bytes, u32)>) -> Result<WorkspaceWrite, SeedError> {
    if files.len() > MAX_FILES {
        return Err(SeedError::TooLarge(format!("a workspace holds at most {MAX_FILES} files")));
    }
    let mut write = WorkspaceWrite::default();
    let mut total = 0u64;
    for (path, content, mode) in files {
        let size = content.len() as u64;
        if size > config.workspace_max_file_bytes {
            return Err(SeedError::TooLarge(format!(
                "{path} is larger than the {} byte limit of a file",
                config.workspace_max_file_bytes
            )));
        }
        total += size;
        let entry = FileEntry { digest: digest(&content), size, mode: mode_of(mode) };
        if !write.blobs.iter().any(|(d, _)| *d == entry.digest) {
            write.blobs.push((entry.digest.clone(), content));
        }
        write.set.push((path, entry));
    }
    if total > config.workspace_max_bytes {
        return Err(SeedError::TooLarge(format!(
            "the files hold {total} bytes, more than the workspace's limit of {}",
            config.workspace_max_bytes
        )));
    }
    Ok(write)
}

fn read_dir(dir: &Path, prefix: &str, out: &mut Vec<(String, Bytes, u32)>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        let meta = entry.path().symlink_metadata()?;
        let path = format!("{prefix}{name}");
        if meta.is_dir() {
            read_dir(&entry.path(), &format!("{path}/"), out)?;
        } else if meta.is_file() {
            out.push((path, Bytes::from(std::fs::read(entry.path())?), meta.permissions().mode()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_checked_against_paths_and_caps() {
        let config = SandboxConfig { workspace_max_file_bytes: 8, workspace_max_bytes: 12, ..SandboxConfig::default() };
        let file = |path: &str, content: &str| SeedFile {
            path: path.into(),
            content: Some(content.into()),
            content_base64: None,
            executable: false,
        };
        let seeds = Seeds::default();
        let write = seeds.seed(&config, None, &[file("/workspace/a/b.txt", "hi"), file("c", "hi")]).unwrap();
        assert_eq!(write.set.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["a/b.txt", "c"]);
        assert_eq!(write.blobs.len(), 1, "one blob per content");
        for bad in ["../x", "a//b", "", "a/./b"] {
            assert!(matches!(seeds.seed(&config, None, &[file(bad, "x")]), Err(SeedError::Invalid(_))), "{bad}");
        }
        assert!(matches!(seeds.seed(&config, None, &[file("big", "123456789")]), Err(SeedError::TooLarge(_))));
        let many = [file("a", "1234567"), file("b", "1234567")];
        assert!(matches!(seeds.seed(&config, None, &many), Err(SeedError::TooLarge(_))));
        assert!(matches!(seeds.seed(&config, Some("none"), &[]), Err(SeedError::Invalid(_))));
    }
}
