//! The event log half of the Redis store: fenced, pipelined appends and
//! paged reads of the per-session streams (`lua/append.lua`,
//! `lua/read_after.lua`). Split from `redis.rs` only for size.

use async_trait::async_trait;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::{RedisStore, map_err};
use crate::store::{AppendBatch, EventLog, LogRange, SessionKey, StoreError, StoredEvent};

impl RedisStore {
    /// One pipeline of `append.lua` calls, one per batch in `which`. Errors
    /// are per batch (`ignore_errors`); the outer error is the connection's.
    async fn append_round(
        &self,
        conn: &mut deadpool_redis::Connection,
        batches: &[AppendBatch],
        which: &[usize],
    ) -> Result<Vec<redis::RedisResult<(String, String)>>, RedisError> {
        let invocations: Vec<_> = which
            .iter()
            .map(|&i| {
                let batch = &batches[i];
                let mut script = self.scripts.append.prepare_invoke();
                script
                    .key(self.keys.lease(&batch.key))
                    .key(self.keys.events(&batch.key))
                    .arg(&batch.replica)
                    .arg(self.max_len)
                    .arg(self.session_ttl_ms)
                    .arg(self.keys.channel(&batch.key));
                for payload in &batch.payloads {
                    script.arg(payload);
                }
                script
            })
            .collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for script in &invocations {
            pipe.invoke_script(script);
        }
        pipe.query_async(conn).await
    }
}

#[async_trait]
impl EventLog for RedisStore {
    /// All non-empty batches go in one pipelined round trip (plus one more
    /// only if Redis had to be given the script). An empty batch is answered
    /// `Ok((0, 0))` without touching Redis: no fencing check, no notice.
    async fn append(&self, batches: &[AppendBatch]) -> Vec<Result<(u64, u64), StoreError>> {
        let mut results: Vec<Result<(u64, u64), StoreError>> = vec![Ok((0, 0)); batches.len()];
        let pending: Vec<usize> = (0..batches.len()).filter(|&i| !batches[i].payloads.is_empty()).collect();
        if pending.is_empty() {
            return results;
        }
        let fail_all = |results: &mut Vec<_>, error: StoreError| {
            for &i in &pending {
                results[i] = Err(error.clone());
            }
        };
        let mut conn = match self.connection().await {
            Ok(conn) => conn,
            Err(error) => {
                fail_all(&mut results, error);
                return results;
            }
        };
        let mut replies = match self.append_round(&mut conn, batches, &pending).await {
            Ok(replies) => replies,
            Err(error) => {
                fail_all(&mut results, map_err(error));
                return results;
            }
        };
        // After a Redis restart (or SCRIPT FLUSH) the script is unknown: load
        // it and rerun only the batches refused for that, which appended nothing.
        let unknown: Vec<usize> = (0..pending.len())
            .filter(|&n| matches!(&replies[n], Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)))
            .collect();
        if !unknown.is_empty() {
            let retry: Vec<usize> = unknown.iter().map(|&n| pending[n]).collect();
            let rerun = match self.scripts.append.prepare_invoke().load_async(&mut conn).await {
                Ok(_) => self.append_round(&mut conn, batches, &retry).await,
                Err(error) => Err(error),
            };
            match rerun {
                Ok(again) => {
                    for (n, reply) in unknown.into_iter().zip(again) {
                        replies[n] = reply;
                    }
                }
                Err(error) => {
                    let error = map_err(error);
                    for n in unknown {
                        replies[n] = Ok(Default::default());
                        results[pending[n]] = Err(error.clone());
                    }
                }
            }
        }
        for (n, reply) in replies.into_iter().enumerate() {
            let i = pending[n];
            if results[i].is_err() {
                continue;
            }
            results[i] = match reply {
                Ok((first, last)) => parse_seq(&first).and_then(|first| Ok((first, parse_seq(&last)?))),
                Err(e) if e.code() == Some("NOTLEASEHOLDER") => Err(StoreError::NotLeaseholder),
                Err(e) => Err(map_err(e)),
            };
        }
        results
    }

    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        let start = if after == 0 { "-".to_string() } else { format!("(0-{after}") };
        let mut conn = self.connection().await?;
        type Reply = (String, String, Vec<(String, Vec<String>)>);
        let (first, last, entries): Reply = self
            .scripts
            .read_after
            .key(self.keys.events(key))
            .arg(start)
            .arg(limit.min(i64::MAX as usize))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        let events = entries
            .into_iter()
            .map(|(id, fields)| {
                let payload = fields
                    .chunks_exact(2)
                    .find(|pair| pair[0] == "e")
                    .map(|pair| pair[1].clone())
                    .ok_or_else(|| StoreError::Corrupt(format!("event {id} has no field e")))?;
                Ok(StoredEvent { seq: parse_seq(&id)?, payload })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(LogRange { events, first_seq: parse_seq(&first)?, last_seq: parse_seq(&last)? })
    }
}

/// Stream ids are `0-<seq>`.
fn parse_seq(id: &str) -> Result<u64, StoreError> {
    id.strip_prefix("0-")
        .and_then(|seq| seq.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("event id {id:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_are_sequence_numbers() {
        assert_eq!(parse_seq("0-1"), Ok(1));
        assert_eq!(parse_seq("0-18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(parse_seq("1-1"), Err(StoreError::Corrupt(_))));
        assert!(matches!(parse_seq("0-x"), Err(StoreError::Corrupt(_))));
    }
}
