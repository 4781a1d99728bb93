//! The domain: what a session is, independent of how it travels or where it
//! is kept. Conversations ([`conversation`]), canonical events ([`events`]),
//! typed outcomes and codes ([`codes`]), the options a session runs with
//! ([`options`]), what a client declares for each run of its chat ([`run`]),
//! what a session's title is ([`title`]) and the [`session::Session`]
//! itself, whose transitions are the only way to change it.
//!
//! It imports nothing from the rest of the crate: HTTP handlers (`api`),
//! dialect encoders (`protocol`), the sessions service, the store and the
//! providers all depend on it, never the other way round (a unit test below
//! keeps it so). Dialects convert their wire shapes into these types
//! explicitly; nothing stored is a dialect's wire type.

pub mod codes;
pub mod conversation;
pub mod events;
mod held;
pub mod options;
pub mod rlm;
pub mod run;
pub mod session;
pub mod title;

pub use self::{
    codes::{FailureCode, ToolOutcome, ToolStatus},
    conversation::{ChatMessage, ImagePart, Role, ToolCall, Usage},
    events::{AgentRef, Event, EventKind, LogEvent, OutputStream, PendingCall, PendingRelay, TurnEndReason, now_ms},
    held::Held,
    options::{ApprovalMode, DenyRule, FrontendMode, FrontendTool, PermissionRules, Section, SessionOptions, ToolRule},
    run::{ContextEntry, RunInput},
    session::{
        AnswerRules, Answers, CallDecision, CallPlan, ConversationChange, Decision, PlannedCall, Refused,
        RelayDecision, RlmReply, Session, SessionSpec, Status, StepOutput, StepRestart, Truncation, TurnError,
    },
};

#[cfg(test)]
mod tests {
    /// The modules the domain must never reach into.
    const FORBIDDEN: &[&str] = &[
        "api",
        "app",
        "auth",
        "cli",
        "config",
        "error",
        "limits",
        "orchestrator",
        "protocol",
        "providers",
        "server",
        "sessions",
        "store",
        "telemetry",
        "tools",
    ];

    #[test]
    fn the_domain_imports_nothing_from_the_rest_of_the_crate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/domain");
        let mut files = vec![dir.clone()];
        let mut checked = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            checked += 1;
            for module in FORBIDDEN {
                for pattern in [format!("crate::{module}"), format!("super::super::{module}")] {
                    assert!(!source.contains(&pattern), "{} uses {pattern}", path.display());
                }
            }
        }
        assert!(checked >= 6, "found the domain's files ({checked})");
    }
}
