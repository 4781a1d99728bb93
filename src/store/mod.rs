//! Where sessions live: the traits every backend implements, and the choice of
//! backend from the configuration (Redis when `store.redis_url` is set, the
//! in-memory store otherwise).
//!
//! This module owns persistence only; what a session *means* (its state
//! machine, leases, takeover) belongs to `sessions`.

mod memory;
mod redis;

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::StoreConfig;

pub use self::{memory::MemoryStore, redis::RedisStore};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend did not answer (connection refused, timeout, pool exhausted).
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "store_unavailable",
        }
    }
}

/// Liveness of the backend, for `/readyz`.
#[async_trait]
pub trait Health: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The store handles the rest of the app uses.
#[derive(Clone)]
pub struct Store {
    pub health: Arc<dyn Health>,
    /// `"redis"` or `"memory"`, for logs.
    pub kind: &'static str,
}

impl Store {
    /// Builds the configured backend. Connecting to Redis is lazy: the app
    /// starts while Redis is down and `/readyz` says so.
    pub fn open(config: &StoreConfig) -> Result<Self, StoreError> {
        match &config.redis_url {
            Some(url) => {
                let redis = Arc::new(RedisStore::open(url, &config.key_prefix)?);
                Ok(Self {
                    health: redis,
                    kind: "redis",
                })
            }
            None => Ok(Self {
                health: Arc::new(MemoryStore::default()),
                kind: "memory",
            }),
        }
    }
}
