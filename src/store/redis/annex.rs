//! Annexes in Redis: one hash per session, `{…}:annex`, under the session's
//! hash tag (deleted with it by `lua/delete.lua`), field = name, value =
//! `<deadline ms>:<value>`. The hash expires with the retention of its
//! latest write; a field past its own deadline reads as absent.

use std::time::Duration;

use async_trait::async_trait;

use super::{RedisStore, map_err};
use crate::store::{
    Annexes, SessionKey, StoreError,
    annex::{keep_ms, kept_for, still_kept},
};

#[async_trait]
impl Annexes for RedisStore {
    async fn put_annex(&self, key: &SessionKey, name: &str, value: &str, keep: Duration) -> Result<(), StoreError> {
        let annex = self.keys.annex(key);
        redis::pipe()
            .cmd("HSET")
            .arg(&annex)
            .arg(name)
            .arg(kept_for(value, keep))
            .ignore()
            .cmd("PEXPIRE")
            .arg(&annex)
            .arg(keep_ms(keep))
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
        Ok(field.as_deref().and_then(still_kept))
    }
}
