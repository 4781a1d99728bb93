//! How a turn stops ([`End`]): what the turn loop (`turn.rs`), its tools
//! phase and rlm mode's loop each return, and the turn records. Its own
//! module, below all three, so none of them imports another for it.

use super::model_call::{Failure, StepError};
use crate::{
    domain::{FailureCode, TurnEndReason},
    sessions::SessionError,
};

/// How a turn stops.
pub(super) enum End {
    Finished(TurnEndReason),
    Paused,
    Failed {
        code: FailureCode,
        message: String,
        /// For a rate limit: when a retry may pass.
        retry_after_secs: Option<u64>,
    },
    /// The turn's token was cancelled: [`RunHandle::stop_reason`] says why
    /// (cancel it, hand it off, or leave it to whoever runs it next).
    Stopped,
}

impl End {
    pub(super) fn failed(code: FailureCode, message: impl Into<String>) -> Self {
        Self::Failed { code, message: message.into(), retry_after_secs: None }
    }
}

/// The end of a turn whose model call failed.
pub(super) fn step_failure(error: StepError) -> Result<End, SessionError> {
    match error.into_failure() {
        Ok(Failure { code, message, retry_after_secs }) => Ok(End::Failed { code, message, retry_after_secs }),
        Err(StepError::Session(e)) => Err(e),
        Err(_) => Ok(End::Stopped),
    }
}
