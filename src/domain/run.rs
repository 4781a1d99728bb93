//! What a client declares for each run of a chat it drives (AG-UI's
//! `RunAgentInput`): the frontend tools of the run, context for the model,
//! and the state the client and the agent share. The session keeps all
//! three ([`super::Session::begin_run`]), so whichever replica runs the turn,
//! resumes it or takes it over runs it as declared. The state is any JSON
//! value (`{}` until a client sends one); tools change it with JSON Patches
//! (RFC 6902), applied by the transition that records their result.
//!
//! Not here: checking that a frontend tool's name does not clash with a
//! server tool's (configuration, so the API layer's).

use serde_json::Value;

use super::options::{ContextEntry, FrontendTool};

/// The declarations of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInput {
    /// The run's frontend tools: they replace the session's.
    pub frontend_tools: Vec<FrontendTool>,
    /// The run's context for the model: replaces the session's.
    pub context: Vec<ContextEntry>,
    /// The client's state: replaces the session's; `None` keeps it.
    pub state: Option<Value>,
}

/// The state of a session no client has given one: an empty object, as
/// AG-UI clients start with.
pub fn empty_state() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Whether `state` is the empty object (not worth storing or restating).
pub fn is_empty_state(state: &Value) -> bool {
    state.as_object().is_some_and(serde_json::Map::is_empty)
}
