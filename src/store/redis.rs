//! The Redis store, shared by every replica.
//!
//! Commands go through a deadpool-redis pool of multiplexed connections.
//! Their response timeout is redis-rs's default (500 ms), right for short
//! commands; anything that blocks (pub/sub, `XREAD BLOCK`) must use a
//! connection made for it, never one from this pool.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::{Config as PoolConfig, Pool, Runtime};

use super::{Health, StoreError};

/// How long a command waits for a free pooled connection or a new one.
const POOL_TIMEOUT: Duration = Duration::from_secs(2);

pub struct RedisStore {
    pool: Pool,
    prefix: String,
}

impl RedisStore {
    pub fn open(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let mut config = PoolConfig::from_url(url);
        let mut pool_config = config.get_pool_config();
        pool_config.timeouts.wait = Some(POOL_TIMEOUT);
        pool_config.timeouts.create = Some(POOL_TIMEOUT);
        pool_config.timeouts.recycle = Some(POOL_TIMEOUT);
        config.pool = Some(pool_config);
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self {
            pool,
            prefix: prefix.to_string(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    async fn connection(&self) -> Result<deadpool_redis::Connection, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))
    }
}

#[async_trait]
impl Health for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| StoreError::Unavailable(e.to_string()))
    }
}
