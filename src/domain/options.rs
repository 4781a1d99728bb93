//! What the request that started a session asked for, kept with it so any
//! replica runs its later turns (and takeovers) the same way: frontend
//! tools, permission rules, bounds, prompt additions, how approvals travel.
//! A client that declares each run (AG-UI) replaces the frontend tools and
//! the context at every run ([`super::Session::begin_run`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionOptions {
    #[serde(default)]
    pub frontend_tools: Vec<FrontendTool>,
    #[serde(default)]
    pub rules: PermissionRules,
    /// Allow rules added by `always: true` decisions, for the rest of the session.
    #[serde(default)]
    pub session_allow: Vec<ToolRule>,
    pub max_iterations: Option<u32>,
    pub max_depth: Option<u32>,
    pub additional_system_prompt: Option<String>,
    pub response_format: Option<Value>,
    /// Prompt sections switched on or off (Holmes `behavior_controls`).
    #[serde(default)]
    pub behavior_controls: BTreeMap<String, bool>,
    #[serde(default)]
    pub approval: ApprovalMode,
    /// How hard the model should think (zot's `set_reasoning`: `low`,
    /// `medium`, `high`, …); `None` leaves it to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// A call to a tool that is neither a server tool nor a frontend tool
    /// is the client's to run (the turn pauses on it), not an error the
    /// model sees: for clients that may declare their tools only in their
    /// UI (the AI SDK's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undeclared_tools_are_client: bool,
    /// An investigation (Holmes' seed-001 `/api/investigate`): the sections
    /// its answer fills, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<Vec<Section>>,
    /// Context the client gave its current (or last) run, for the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    /// rlm mode (llm-gateway's `mode: "rlm"`): turns run a REPL loop
    /// instead of the tool loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlm: Option<super::rlm::RlmOptions>,
}

/// Most frontend tools (declared ones included) a session's list grows to
/// by remembering tools from the client's messages: they are offered to the
/// model on every call, so a client must not grow the list without bound.
pub const MAX_LEARNED_TOOLS: usize = 32;

/// What the model is told of a tool learned from the client's messages.
const LEARNED_DESCRIPTION: &str = "A tool the user's application runs. Its description is not known here; \
     use it as the conversation has used it.";

impl SessionOptions {
    /// Adds the tools `names` as pause-mode frontend tools known only by
    /// their names (for a client that runs tools it never declared: the AI
    /// SDK's, whose apps may declare client tools only in their UI). Names
    /// already known are skipped; the list stops growing at
    /// [`MAX_LEARNED_TOOLS`]. Returns how many were added. Which names are
    /// the client's (no server tool, a name a model accepts) is the
    /// caller's to decide.
    pub fn learn_client_tools(&mut self, names: &[String]) -> usize {
        let before = self.frontend_tools.len();
        for name in names {
            if self.frontend_tools.len() >= MAX_LEARNED_TOOLS {
                break;
            }
            if !self.frontend_tools.iter().any(|t| t.name == *name) {
                self.frontend_tools.push(FrontendTool::learned(name));
            }
        }
        self.frontend_tools.len() - before
    }
}

/// One section an investigation's answer fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    pub title: String,
    pub description: String,
}

/// What happens to a tool call that needs a permission decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// A relay: the stream stays open while any replica takes the decision.
    #[default]
    Relay,
    /// The turn pauses with the call pending (Holmes `enable_tool_approval`).
    Pause,
    /// No one will decide: the call fails and the model is told why
    /// (Holmes without `enable_tool_approval`).
    Refuse,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontendTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub mode: FrontendMode,
    #[serde(default)]
    pub noop_response: Option<String>,
}

impl FrontendTool {
    /// A tool known only by its name, from the client's messages: the model
    /// gets no description of its own and may pass any object as arguments.
    pub fn learned(name: &str) -> Self {
        Self {
            name: name.to_string(),
            description: LEARNED_DESCRIPTION.to_string(),
            parameters: None,
            mode: FrontendMode::Pause,
            noop_response: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrontendMode {
    #[default]
    Pause,
    Noop,
}

/// llm-gateway's permission shape: `{allowlist, allowOnce, deny}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRules {
    /// Present (even empty) means "ask for anything not allowed here".
    #[serde(default)]
    pub allowlist: Option<Vec<ToolRule>>,
    #[serde(default)]
    pub allow_once: Vec<ToolRule>,
    #[serde(default)]
    pub deny: Vec<DenyRule>,
}

/// A tool, optionally with glob patterns its arguments must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRule {
    pub tool: String,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

impl ToolRule {
    /// The rule an `always: true` decision adds: this tool, with each
    /// argument's first word as a prefix pattern (as llm-gateway does), so
    /// `ls -la /tmp` allows later `ls …` but not `rm …`.
    pub fn always(tool: &str, arguments: &Value) -> Self {
        let mut params = BTreeMap::new();
        if let Value::Object(map) = arguments {
            for (name, value) in map {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let first = text.split_whitespace().next().unwrap_or("");
                params.insert(name.clone(), format!("{}*", glob::Pattern::escape(first)));
            }
        }
        Self { tool: tool.to_string(), params }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DenyRule {
    pub tool_call_id: String,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A piece of context the application gives the model (AG-UI's
/// `{description, value}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextEntry {
    pub description: String,
    pub value: String,
}
