//! The canonical session event model, and one encoder per wire protocol.
//!
//! An [`Encoder`] translates the canonical events of one HTTP stream into its
//! dialect's frames. It lives as long as that stream and keeps only what the
//! stream needs (say, the text of the answer so far, for a dialect whose
//! last frame repeats it); nothing it holds outlives the stream, so any
//! replica can encode any session.

pub mod events;
pub mod holmes;
pub mod llm_gateway;
pub mod native;

pub use events::{AgentRef, EventKind, LogEvent, PendingCall, PendingRelay, TurnEndReason};

use crate::sessions::SessionDoc;

/// One frame, independent of the HTTP framework: an SSE event (`id`,
/// `event`, `data`), or for line-based dialects just the `data` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl Frame {
    pub fn data(data: impl Into<String>) -> Self {
        Self { id: None, event: None, data: data.into() }
    }
}

pub trait Encoder: Send {
    /// The dialect's `?format=` name (a metric label).
    fn dialect(&self) -> &'static str;

    /// The frames for one event (none, for events the dialect does not show).
    fn encode(&mut self, event: &LogEvent) -> Vec<Frame>;

    /// The frames that report a broken stream: `code` is `recovery_failed`
    /// (the cursor is older than the retained log) or a store error code.
    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame>;

    /// Whether [`Encoder::finish`] needs the stored session after the last
    /// event (saves a store read for dialects that do not).
    fn wants_finish(&self) -> bool {
        false
    }

    /// Frames after the stream's last event, given the session as stored.
    fn finish(&mut self, _doc: &SessionDoc) -> Vec<Frame> {
        Vec::new()
    }
}

/// The encoder for `?format=<name>`, or `None` for an unknown name.
pub fn encoder_for(format: &str) -> Option<Box<dyn Encoder>> {
    match format {
        "native" => Some(Box::new(native::NativeEncoder)),
        "holmes" => Some(Box::new(holmes::HolmesEncoder::default())),
        "llm-gateway" => Some(Box::new(llm_gateway::LlmGatewayEncoder::default())),
        _ => None,
    }
}

/// The names `?format=` accepts, for error messages.
pub const FORMATS: &[&str] = &["native", "holmes", "llm-gateway"];
