//! Annexes: small documents kept beside a session for a while, each under
//! a name and with a retention of its own (the Responses API keeps each
//! response's request there: its input items and the parameters its
//! response object echoes). They live under the session's hash tag and go
//! with it when it is deleted; one that outlived its retention reads as
//! absent.
//!
//! They are not part of the session's state: written once by the request
//! that makes them, outside any commit (nothing is fenced by them), and
//! read by whoever serves the request that names them.

use std::time::Duration;

use async_trait::async_trait;

use super::{SessionKey, StoreError};

#[async_trait]
pub trait Annexes: Send + Sync {
    /// Keeps `value` under `name` beside the session `key`, readable for
    /// `keep` (a later value of the same name replaces it).
    async fn put_annex(&self, key: &SessionKey, name: &str, value: &str, keep: Duration) -> Result<(), StoreError>;

    /// The value kept under `name`, unless its retention ended or the
    /// session was deleted.
    async fn get_annex(&self, key: &SessionKey, name: &str) -> Result<Option<String>, StoreError>;
}

/// `keep` in milliseconds, at least one (an expiry Redis takes).
pub(super) fn keep_ms(keep: Duration) -> u64 {
    u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// `value` as stored to be kept for `keep` from now ([`with_deadline`]).
pub(super) fn kept_for(value: &str, keep: Duration) -> String {
    with_deadline(value, crate::domain::now_ms().saturating_add(keep_ms(keep)))
}

/// A stored value with its deadline (Unix ms): `<deadline>:<value>`, as
/// the Redis hash field holds it (fields of one hash cannot expire one by
/// one on the Redis versions supported).
fn with_deadline(value: &str, deadline_ms: u64) -> String {
    format!("{deadline_ms}:{value}")
}

/// The value of a stored field while it is kept ([`unexpired`] now).
pub(super) fn still_kept(field: &str) -> Option<String> {
    unexpired(field, crate::domain::now_ms()).map(str::to_string)
}

/// The value of a field made by [`with_deadline`], unless its deadline
/// passed at `now_ms`.
fn unexpired(field: &str, now_ms: u64) -> Option<&str> {
    let (deadline, value) = field.split_once(':')?;
    (deadline.parse::<u64>().ok()? > now_ms).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_reads_back_until_its_deadline() {
        let field = with_deadline("{\"a\":\"b:c\"}", 1_000);
        assert_eq!(unexpired(&field, 999), Some("{\"a\":\"b:c\"}"));
        assert_eq!(unexpired(&field, 1_000), None);
        assert_eq!(unexpired("garbage", 0), None);
    }
}
