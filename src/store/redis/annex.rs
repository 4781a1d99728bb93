//! Annexes in Redis: one hash per session, `{…}:annex`, under the session's
//! hash tag (deleted with it by `lua/delete.lua`), field = name, value =
//! `<deadline ms>:<value>`. The hash expires with the retention of its
//! latest write; a field past its own deadline reads as absent.

use std::time::Duration;

use async_trait::async_trait;

use super::{RedisStore, map_err};
use crate::store::{
    Annexes, SessionKey, StoreError,
    annex::{unexpired, with_deadline},
};

#[async_trait]
impl Annexes for RedisStore {
    async fn put_annex(&self, key: &SessionKey, name: &str, value: &str, keep: Duration) -> Result<(), StoreError> {
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let field = with_deadline(value, crate::domain::now_ms().saturating_add(keep_ms));
        let annex = self.keys.annex(key);
        redis::pipe()
            .cmd("HSET")
            .arg(&annex)
            .arg(name)
            .arg(field)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&annex)
            .arg(keep_ms)
            .ignore()
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(map_err)
    }

    async fn get_annex(&self, key: &SessionKey, name: &str) -> Result<Option<String>, StoreError> {
        let field: Option<String> = redis::cmd("HGET")
            .arg(self.keys.annex(key))
            .arg(name)
            .query_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(field.as_deref().and_then(|field| unexpired(field, crate::domain::now_ms())).map(str::to_string))
    }
}
