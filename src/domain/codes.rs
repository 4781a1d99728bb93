//! Typed outcomes and codes: how a tool call ended, why a turn failed. Code
//! that reacts to them matches on these enums, never on message text, so
//! renaming one fails to compile where it matters.

use serde::{Deserialize, Serialize};

/// How a tool call ended, as its `tool_result` event says (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Success,
    Error,
    Denied,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Denied => "denied",
        }
    }
}

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutcome {
    Success(String),
    /// The tool failed (or could not be reached); the text says how.
    Error(String),
    /// Nobody ran it: a rule, a person or a timeout refused it.
    Denied {
        reason: String,
    },
}

impl ToolOutcome {
    pub fn error(message: impl Into<String>) -> Self {
        Self::Error(message.into())
    }

    pub fn status(&self) -> ToolStatus {
        match self {
            Self::Success(_) => ToolStatus::Success,
            Self::Error(_) => ToolStatus::Error,
            Self::Denied { .. } => ToolStatus::Denied,
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success(_))
    }

    /// The text the model reads as the call's result.
    pub fn output(&self) -> String {
        match self {
            Self::Success(text) | Self::Error(text) => text.clone(),
            Self::Denied { reason } => format!("Permission denied: {reason}"),
        }
    }
}

/// Why a turn failed: the `code` of its `error` event and of the session's
/// last error. Dialects map these to their own codes (Holmes' 5204 for a rate
/// limit, an HTTP status for a non-stream answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The session's model alias is not configured (any more).
    UnknownModel,
    /// The tenant's token budget is spent, or the provider rate limits.
    RateLimited,
    /// The provider answered an error, or something unusable.
    UpstreamError,
    UpstreamTimeout,
    /// The provider's stream broke off mid-answer.
    UpstreamDisconnected,
    /// The conversation does not fit the model's window even compacted.
    ContextOverflow,
    /// A quota could not be checked because the store did not answer.
    StoreUnavailable,
    /// Something in the gateway broke (the REPL of an rlm turn).
    Internal,
}

impl FailureCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownModel => "unknown_model",
            Self::RateLimited => "rate_limited",
            Self::UpstreamError => "upstream_error",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::UpstreamDisconnected => "upstream_disconnected",
            Self::ContextOverflow => "context_overflow",
            Self::StoreUnavailable => "store_unavailable",
            Self::Internal => "internal",
        }
    }
}

impl std::fmt::Display for FailureCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_names() {
        for code in [
            FailureCode::UnknownModel,
            FailureCode::RateLimited,
            FailureCode::UpstreamError,
            FailureCode::UpstreamTimeout,
            FailureCode::UpstreamDisconnected,
            FailureCode::ContextOverflow,
            FailureCode::StoreUnavailable,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
        for status in [ToolStatus::Success, ToolStatus::Error, ToolStatus::Denied] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }

    #[test]
    fn a_denial_tells_the_model_why() {
        let denied = ToolOutcome::Denied { reason: "not today".into() };
        assert_eq!(denied.output(), "Permission denied: not today");
        assert_eq!(denied.status(), ToolStatus::Denied);
    }
}
