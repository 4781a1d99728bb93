//! A session's files as the store keeps them: content-addressed blobs
//! (SHA-256, hex) and a manifest (path → digest, size, mode), both under the
//! session's hash tag. They are written only by a [`super::Commit`]'s
//! [`WorkspaceWrite`], in the same atomic, fenced operation as the rest of
//! the commit (a tool's result and the files it changed go together), and
//! removed with the session. A blob write is idempotent: the digest names
//! the content.
//!
//! What a file means (which paths are allowed, the caps) is
//! `crate::workspace`'s business; the store keeps bytes.

use async_trait::async_trait;
use bytes::Bytes;

use super::{SessionKey, StoreError};

/// One manifest entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// SHA-256 of the content, lowercase hex.
    pub digest: String,
    pub size: u64,
    /// Unix permission bits (0o644 or 0o755).
    pub mode: u32,
}

impl FileEntry {
    /// `digest:size:mode` (octal): the manifest field's value.
    pub fn encode(&self) -> String {
        format!("{}:{}:{:o}", self.digest, self.size, self.mode)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let digest = parts.next()?.to_string();
        let size = parts.next()?.parse().ok()?;
        let mode = u32::from_str_radix(parts.next()?, 8).ok()?;
        (digest.len() == 64 && parts.next().is_none()).then_some(Self { digest, size, mode })
    }
}

/// The change of a workspace a commit carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkspaceWrite {
    /// New contents: digest → bytes.
    pub blobs: Vec<(String, Bytes)>,
    /// Manifest entries written (added or changed files).
    pub set: Vec<(String, FileEntry)>,
    /// Paths removed from the manifest.
    pub remove: Vec<String>,
    /// Blobs no longer named by any entry.
    pub drop_blobs: Vec<String>,
}

impl WorkspaceWrite {
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty() && self.set.is_empty() && self.remove.is_empty() && self.drop_blobs.is_empty()
    }
}

/// A file read back: its path, entry and content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub path: String,
    pub entry: FileEntry,
    pub content: Bytes,
}

/// Reading workspaces (writes go through commits).
#[async_trait]
pub trait WorkspaceStore: Send + Sync {
    /// Every file of the session's workspace with its content, read in
    /// one atomic step (never a manifest with a blob a later commit
    /// dropped), sorted by path. Empty for a session without files.
    async fn files(&self, key: &SessionKey) -> Result<Vec<StoredFile>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written() {
        let entry = FileEntry { digest: "a".repeat(64), size: 12, mode: 0o755 };
        assert_eq!(FileEntry::decode(&entry.encode()), Some(entry));
        assert_eq!(FileEntry::decode("short:1:644"), None);
    }
}
