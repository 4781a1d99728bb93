//! Instances and what they own, in Redis: heartbeats in one zset scored by
//! deadline (`lua/heartbeat.lua`, by the server's clock), the sessions each
//! instance owns and the orphans, each index in buckets (see `Keys::bucket`)
//! read together in one batch.

use std::time::Duration;

use async_trait::async_trait;

use super::{INDEX_BUCKETS, RedisStore, conn::Spread, liveness, map_err, millis};
use crate::store::{Liveness, Replicas, SessionKey, StoreError};

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
        // Deadline 0: dead at once, so the sweep looks at what it still
        // owns; and no liveness record to read.
        let mut spread = Spread::default();
        spread.answered().cmd("ZADD").arg(self.keys.replicas()).arg(0).arg(instance);
        spread.answered().cmd("HDEL").arg(self.keys.live()).arg(instance);
        for reply in self.send(&mut self.connection(), spread).await.map_err(map_err)? {
            reply.map_err(map_err)?;
        }
        Ok(())
    }

    async fn liveness(&self, only: Option<&[String]>) -> Result<Vec<Liveness>, StoreError> {
        liveness::read(&self.probes, &self.keys, &self.hints, only).await
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
        let sets: Vec<String> = (0..INDEX_BUCKETS)
            .map(|b| self.keys.owned(instance, b))
            .chain([self.keys.owned_legacy(instance)])
            .collect();
        self.sample(&sets, limit).await
    }

    async fn disown(&self, instance: &str, keys: &[SessionKey]) -> Result<(), StoreError> {
        let mut conn = self.connection();
        if !keys.is_empty() {
            let mut spread = Spread::default();
            for key in keys {
                let member = key.to_member();
                spread.answered().cmd("SREM").arg(self.keys.owned_of(instance, key)).arg(&member);
                spread.answered().cmd("SREM").arg(self.keys.owned_legacy(instance)).arg(&member);
            }
            for reply in self.send(&mut conn, spread).await.map_err(map_err)? {
                reply.map_err(map_err)?;
            }
        }
        let mut spread = Spread::default();
        for bucket in 0..INDEX_BUCKETS {
            spread.answered().cmd("SCARD").arg(self.keys.owned(instance, bucket));
        }
        spread.answered().cmd("SCARD").arg(self.keys.owned_legacy(instance));
        let mut left = 0;
        for reply in self.send(&mut conn, spread).await.map_err(map_err)? {
            left += redis::from_redis_value::<u64>(reply.map_err(map_err)?).map_err(|e| map_err(e.into()))?;
        }
        if left == 0 {
            let forgotten: i64 = self
                .scripts
                .forget_replica
                .key(self.keys.replicas())
                .arg(instance)
                .invoke_async(&mut conn)
                .await
                .map_err(map_err)?;
            if forgotten == 1 {
                redis::cmd("HDEL")
                    .arg(self.keys.live())
                    .arg(instance)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(map_err)?;
            }
        }
        Ok(())
    }

    async fn orphans(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let sets: Vec<String> =
            (0..INDEX_BUCKETS).map(|b| self.keys.orphans(b)).chain([self.keys.orphans_legacy()]).collect();
        self.sample(&sets, limit).await
    }

    async fn adopted(&self, key: &SessionKey) -> Result<(), StoreError> {
        let member = key.to_member();
        let mut spread = Spread::default();
        spread.answered().cmd("SREM").arg(self.keys.orphans_of(key)).arg(&member);
        spread.answered().cmd("SREM").arg(self.keys.orphans_legacy()).arg(&member);
        for reply in self.send(&mut self.connection(), spread).await.map_err(map_err)? {
            reply.map_err(map_err)?;
        }
        Ok(())
    }
}

impl RedisStore {
    /// Up to `limit` members of the sets `sets` (buckets of one index),
    /// drawn at random from each (`SRANDMEMBER`), in one batch.
    async fn sample(&self, sets: &[String], limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let mut spread = Spread::default();
        for set in sets {
            spread.answered().cmd("SRANDMEMBER").arg(set).arg(limit.min(i64::MAX as usize));
        }
        let mut keys = Vec::new();
        for reply in self.send(&mut self.connection(), spread).await.map_err(map_err)? {
            let members: Vec<String> =
                redis::from_redis_value(reply.map_err(map_err)?).map_err(|e| map_err(e.into()))?;
            keys.extend(members.iter().filter_map(|m| SessionKey::from_member(m)));
        }
        keys.truncate(limit);
        Ok(keys)
    }
}
