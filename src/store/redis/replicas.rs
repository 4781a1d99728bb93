//! Instances and what they own, in Redis: heartbeats in one zset scored by
//! deadline (`lua/heartbeat.lua`, by the server's clock), a set of owned
//! sessions per instance, and the set of orphans.

use std::time::Duration;

use async_trait::async_trait;

use super::{RedisStore, map_err, millis};
use crate::store::{Replicas, SessionKey, StoreError};

#[async_trait]
impl Replicas for RedisStore {
    async fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<bool, StoreError> {
        let fresh: i64 = self
            .scripts
            .heartbeat
            .key(self.keys.replicas())
            .arg(instance)
            .arg(millis(ttl))
            .invoke_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(fresh == 1)
    }

    async fn alive(&self, instance: &str) -> Result<bool, StoreError> {
        let alive: i64 = self
            .scripts
            .replicas_dead
            .key(self.keys.replicas())
            .arg(0)
            .arg(instance)
            .invoke_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(alive == 1)
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        // Deadline 0: dead at once, so the sweep looks at what it still owns.
        redis::cmd("ZADD")
            .arg(self.keys.replicas())
            .arg(0)
            .arg(instance)
            .query_async::<i64>(&mut self.connection())
            .await
            .map(drop)
            .map_err(map_err)
    }

    async fn dead(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.scripts
            .replicas_dead
            .key(self.keys.replicas())
            .arg(limit.min(i64::MAX as usize))
            .arg("")
            .invoke_async(&mut self.connection())
            .await
            .map_err(map_err)
    }

    async fn owned(&self, instance: &str, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let members: Vec<String> = redis::cmd("SRANDMEMBER")
            .arg(self.keys.owned(instance))
            .arg(limit.min(i64::MAX as usize))
            .query_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(members.iter().filter_map(|m| SessionKey::from_member(m)).collect())
    }

    async fn disown(&self, instance: &str, keys: &[SessionKey]) -> Result<(), StoreError> {
        let mut conn = self.connection();
        if !keys.is_empty() {
            let mut srem = redis::cmd("SREM");
            srem.arg(self.keys.owned(instance));
            for key in keys {
                srem.arg(key.to_member());
            }
            srem.query_async::<i64>(&mut conn).await.map_err(map_err)?;
        }
        let left: i64 =
            redis::cmd("SCARD").arg(self.keys.owned(instance)).query_async(&mut conn).await.map_err(map_err)?;
        if left == 0 {
            let _: i64 = self
                .scripts
                .forget_replica
                .key(self.keys.replicas())
                .arg(instance)
                .invoke_async(&mut conn)
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    async fn orphans(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let members: Vec<String> = redis::cmd("SRANDMEMBER")
            .arg(self.keys.orphans())
            .arg(limit.min(i64::MAX as usize))
            .query_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(members.iter().filter_map(|m| SessionKey::from_member(m)).collect())
    }

    async fn adopted(&self, key: &SessionKey) -> Result<(), StoreError> {
        redis::cmd("SREM")
            .arg(self.keys.orphans())
            .arg(key.to_member())
            .query_async::<i64>(&mut self.connection())
            .await
            .map(drop)
            .map_err(map_err)
    }
}
