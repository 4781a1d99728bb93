//! What the request that started a session asked for, kept with it so any
//! replica runs its later turns (and takeovers) the same way: frontend
//! tools, permission rules, bounds, prompt additions, how approvals travel.
//! A client that declares each run (AG-UI) replaces the frontend tools and
//! the context at every run ([`super::Session::begin_run`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::run::ContextEntry;

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
    /// An investigation (Holmes' seed-001 `/api/investigate`): the sections
    /// its answer fills, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<Vec<Section>>,
    /// Context the client gave its current (or last) run, for the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
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
