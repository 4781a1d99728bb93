//! The canonical session event model, and (with later dialects) one encoder
//! per wire protocol. Encoders are pure translations: they own no state.

pub mod events;
pub mod native;

pub use events::{AgentRef, EventKind, LogEvent, PendingCall, PendingRelay, TurnEndReason};
