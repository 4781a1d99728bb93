//! The domain: what a session is, independent of how it travels or where it
//! is kept. Conversations ([`conversation`]), canonical events ([`events`]),
//! typed outcomes and codes ([`codes`]), the options a session runs with
//! ([`options`]), what a client declares for each run of its chat ([`run`]),
//! what a session's title is ([`title`]) and the [`session::Session`]
//! itself, whose transitions are the only way to change it.
//!
//! It imports nothing from the rest of the crate: HTTP handlers (`api`),
//! dialect encoders (`protocol`), the sessions service, the store and the
//! providers all depend on it, never the other way round (`layering.rs`
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
    events::{
        AgentRef, Event, EventKind, LogEvent, OutputStream, PendingCall, PendingRelay, RelayDecision, TurnEndReason,
        now_ms,
    },
    held::Held,
    options::{
        ApprovalMode, ContextEntry, DenyRule, FrontendMode, FrontendTool, PermissionRules, Section, SessionOptions,
        ToolRule,
    },
    run::RunInput,
    session::{
        AnswerRules, Answers, CallDecision, CallPlan, ConversationChange, Decision, PlannedCall, Refused, RlmReply,
        Session, SessionSpec, Status, StepOutput, StepRestart, Truncation, TurnError,
    },
};
