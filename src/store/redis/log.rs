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
        type Reply = (String, String, Vec<Entry>);
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
        let events = entries.into_iter().map(stored_event).collect::<Result<_, StoreError>>()?;
        Ok(LogRange { events, first_seq: parse_seq(&first)?, last_seq: parse_seq(&last)? })
    }
}

/// A stream entry as `XRANGE` answers it: its id and its fields.
pub(super) type Entry = (String, Vec<String>);

/// An entry's event: its seq (from the id) and its field `e`.
pub(super) fn stored_event((id, fields): Entry) -> Result<StoredEvent, StoreError> {
    let seq = parse_seq(&id)?;
    let mut fields = fields.into_iter();
    while let (Some(name), Some(payload)) = (fields.next(), fields.next()) {
        if name == "e" {
            return Ok(StoredEvent { seq, payload });
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
