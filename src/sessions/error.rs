//! What the sessions service answers when it refuses or fails; the API
//! layer maps each to a response once (`error.rs` of the crate).

use crate::{domain::Refused, store::StoreError};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session not found")]
    NotFound,
    #[error("relay not found")]
    RelayNotFound,
    /// The relay's decision was already taken (by another request, or the
    /// relay's turn has moved on): of racing decisions one wins.
    #[error("this relay was already decided")]
    RelayDecided,
    /// A tenant quota (concurrent sessions) is used up.
    #[error("{message}")]
    RateLimited { message: String, retry_after_secs: u64 },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// The credential lacks a scope the request needs.
    #[error("{0}")]
    Forbidden(String),
    /// The cursor is older than what the log retains.
    #[error("events after {after} are no longer retained (oldest kept: {first_seq})")]
    CursorExpired { after: u64, first_seq: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Refused> for SessionError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Conflict(message) => Self::Conflict(message),
            Refused::Invalid(message) => Self::Invalid(message),
        }
    }
}
