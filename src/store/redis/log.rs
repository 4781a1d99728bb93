//! Reading the per-session event streams (`lua/read_after.lua`): a page and
//! the retained bounds in one snapshot. Events are written by commits and
//! the owner's plain appends (`sessions.rs`).

use async_trait::async_trait;

use super::{RedisStore, map_err};
use crate::store::{EventLog, LogRange, SessionKey, StoreError, StoredEvent};

#[async_trait]
impl EventLog for RedisStore {
    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        let mut conn = self.connection();
        type Reply = (String, String, Vec<(String, Vec<String>)>);
        let (first, last, entries): Reply = self
            .scripts
            .read_after
            .key(self.keys.events(key))
            .key(self.keys.state(key))
            .arg(after)
            .arg(limit.min(i64::MAX as usize))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        let events = entries
            .into_iter()
            .map(|(id, fields)| Ok(StoredEvent { seq: parse_seq(&id)?, payload: payload(&id, fields)? }))
            .collect::<Result<_, StoreError>>()?;
        Ok(LogRange { events, first_seq: parse_seq(&first)?, last_seq: parse_seq(&last)? })
    }
}

/// An entry's event: its field `e`.
pub(super) fn payload(id: &str, fields: Vec<String>) -> Result<String, StoreError> {
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if name == "e" {
            return Ok(value);
        }
    }
    Err(StoreError::Corrupt(format!("event {id} has no field e")))
}

/// Stream ids are `<epoch>-<seq>` (`0-<seq>` in logs of older builds).
pub(super) fn parse_seq(id: &str) -> Result<u64, StoreError> {
    id.split_once('-')
        .filter(|(epoch, _)| epoch.parse::<u64>().is_ok())
        .and_then(|(_, seq)| seq.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("event id {id:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_are_an_epoch_and_a_sequence_number() {
        assert_eq!(parse_seq("0-1"), Ok(1));
        assert_eq!(parse_seq("7-42"), Ok(42));
        assert_eq!(parse_seq("0-18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(parse_seq("x-1"), Err(StoreError::Corrupt(_))));
        assert!(matches!(parse_seq("0-x"), Err(StoreError::Corrupt(_))));
        assert!(matches!(parse_seq("17"), Err(StoreError::Corrupt(_))));
    }
}
