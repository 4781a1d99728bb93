//! The in-memory store: the embedded default, for one replica. Nothing
//! survives a restart and nothing is shared between processes.

use async_trait::async_trait;

use super::{Health, StoreError};

#[derive(Debug, Default)]
pub struct MemoryStore {}

#[async_trait]
impl Health for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
