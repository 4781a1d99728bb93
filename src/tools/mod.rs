//! Server-side tools: the `[[tools]]` of the configuration, reached over HTTP
//! (or the built-in offline demo tool). Frontend tools and the `agent` tool
//! are the orchestrator's business: the first run on the client, the second
//! is a nested agent loop.
//!
//! A failing tool never fails the turn: its error becomes an error result the
//! model sees and can react to.
//!
//! Calls are at least once across a takeover: a call cut short by a
//! replica's death runs again on the replica that takes the session over,
//! with the same `Idempotency-Key` (`<session id>:<tool call id>`), so a tool
//! server can recognise the repeat. A tool configured with
//! `retry_on_takeover = false` is never run twice; the model is told its
//! outcome is unknown.
//!
//! An HTTP tool gets the session's state (the state an AG-UI client shares
//! with the agent) and may change it by answering a JSON Patch: see
//! [`ToolReply`] and `http.rs`.

mod http;
pub mod mcp;
mod patch;
pub mod skills;
pub mod workspace_tools;

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};

use crate::{
    config::{Config, ToolConfig, ToolTarget},
    domain::{ToolCall, ToolOutcome},
    providers::ToolSpec,
};

/// Largest tool response read; the rest is cut (and the model told so).
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Who is calling, sent along to the tool server.
#[derive(Debug, Clone)]
pub struct CallContext<'a> {
    pub session_id: &'a str,
    pub tenant: &'a str,
    /// The session's state as the tools phase began.
    pub state: &'a Value,
}

/// What a server tool answered: its outcome, and the change of the
/// session's state it asks for (a JSON Patch, RFC 6902), which the turn
/// applies with the result ([`crate::domain::Session::finish_tool`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    pub outcome: ToolOutcome,
    pub state_delta: Option<json_patch::Patch>,
    /// A workspace tool's answer in llm-gateway's shape: `Some(result)`
    /// (the inner `None` when it has no `result`); see
    /// [`crate::domain::Session::finish_tool_with_result`].
    pub shaped: Option<Option<serde_json::Value>>,
}

impl From<ToolOutcome> for ToolReply {
    fn from(outcome: ToolOutcome) -> Self {
        Self { outcome, state_delta: None, shaped: None }
    }
}

pub struct ServerTools {
    tools: Vec<ToolConfig>,
    http: reqwest::Client,
}

impl ServerTools {
    pub fn from_config(config: &Config) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Arc::new(Self { tools: config.tools.clone(), http })
    }

    pub fn get(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tools as offered to the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect()
    }

    pub async fn call(&self, tool: &ToolConfig, call: &ToolCall, context: &CallContext<'_>) -> ToolReply {
        let arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(arguments) => arguments,
            Err(e) => return ToolOutcome::error(format!("the arguments are not valid JSON: {e}")).into(),
        };
        match &tool.target {
            ToolTarget::BuiltinDemo => demo(&tool.name, &arguments).into(),
            ToolTarget::Http { url } => http::call(&self.http, url, tool, call, arguments, context).await,
        }
    }
}

/// The offline demo tool: a deterministic answer built from the arguments.
fn demo(name: &str, arguments: &Value) -> ToolOutcome {
    let id = arguments.get("id").and_then(Value::as_str).unwrap_or("unknown");
    let output = json!({"tool": name, "id": id, "status": "shipped", "eta_days": 2, "note": "demo data"});
    ToolOutcome::Success(output.to_string())
}
