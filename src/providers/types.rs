//! What a model call takes and yields: the request (conversation, tools,
//! limits) and the streamed events of its answer. The conversation types
//! themselves are the domain's ([`crate::domain::conversation`]).

use serde::{Deserialize, Serialize};

pub use crate::domain::conversation::{ChatMessage, ImagePart, Role, ToolCall, Usage};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The provider's model id.
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub max_output_tokens: u32,
    /// Passed through to providers that support structured output.
    pub response_format: Option<serde_json::Value>,
    /// The start of the assistant's answer, for the model to continue (a
    /// step cut short by a takeover): Anthropic's prefill, or an
    /// OpenAI-compatible server's `continue_final_message`.
    pub prefill: Option<String>,
    /// How hard to think (zot's levels: `off`, `minimum`, `low`, `medium`,
    /// `high`, `xhigh`, `max`): OpenAI-compatible servers get it as
    /// `reasoning_effort`; Anthropic's extended thinking is not asked for.
    pub reasoning: Option<String>,
}

impl ModelRequest {
    /// A request of `messages` alone to `model` (no tools, no structured
    /// output, no prefill): what titles, compaction, one-shot calls and the
    /// rlm REPL send.
    pub fn plain(model: &crate::config::ModelConfig, messages: Vec<ChatMessage>) -> Self {
        Self {
            model: model.model.clone(),
            messages,
            tools: Vec::new(),
            max_output_tokens: model.max_output_tokens,
            response_format: None,
            prefill: None,
            reasoning: None,
        }
    }
}

/// One step of a streamed model response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// A tool call opens; `index` tells parallel calls apart.
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    /// A fragment of a call's JSON arguments.
    ToolCallDelta {
        index: u32,
        fragment: String,
    },
    Usage(Usage),
    Finish(FinishReason),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
    Other(String),
}

impl FinishReason {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
            Self::Other(other) => other,
        }
    }
}
