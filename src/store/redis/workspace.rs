//! Workspaces in Redis: written by `lua/commit.lua` with the rest of a
//! commit, read whole by `lua/workspace_files.lua`, deleted by
//! `lua/delete.lua` with the session.

use async_trait::async_trait;
use bytes::Bytes;
use redis::Value;

use super::{RedisStore, map_err};
use crate::store::{FileEntry, SessionKey, StoreError, StoredFile, WorkspaceStore};

#[async_trait]
impl WorkspaceStore for RedisStore {
    async fn files(&self, key: &SessionKey) -> Result<Vec<StoredFile>, StoreError> {
        let reply: Vec<Value> = self
            .scripts
            .workspace_files
            .key(self.keys.manifest(key))
            .key(self.keys.blobs(key))
            .invoke_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => Some(bytes.clone()),
            Value::SimpleString(text) => Some(text.clone().into_bytes()),
            _ => None,
        };
        let mut files = Vec::with_capacity(reply.len() / 4);
        for item in reply.chunks(4) {
            let [path, entry, content, found] = item else {
                return Err(StoreError::Corrupt("the workspace script answered a short row".into()));
            };
            let corrupt = || StoreError::Corrupt("the workspace script answered an unreadable row".into());
            let path = String::from_utf8(text(path).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
            let entry = String::from_utf8(text(entry).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
            let entry = FileEntry::decode(&entry).ok_or_else(corrupt)?;
            if text(found).as_deref() != Some(b"ok".as_slice()) {
                return Err(StoreError::Corrupt(format!("the workspace names a blob it does not hold ({path})")));
            }
            let content = Bytes::from(text(content).ok_or_else(corrupt)?);
            files.push(StoredFile { path, entry, content });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}
