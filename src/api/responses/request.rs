//! A `POST /v1/responses` request read: its fields checked as OpenAI
//! checks them, its input turned into what the session layer takes (a
//! turn's messages, or the answers that continue a paused turn), and the
//! [`Record`] kept beside the session for the response it makes: its input
//! items (`GET /v1/responses/{id}/input_items`) and the parameters its
//! response object echoes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::client_chat::{self, Conversation};
use crate::{
    domain::{Answers, ChatMessage, Decision, FrontendMode, FrontendTool, Role, RunInput, Session},
    error::ApiError,
    principal::Principal,
    sessions::SessionError,
    state::AppState,
};

/// The request fields OpenAI's API takes besides the [`ECHOED`] ones;
/// those not used are accepted and have no effect (docs/protocols.md §9
/// lists them). An unknown field is a 400, as OpenAI answers it.
const NOT_ECHOED: &[&str] = &[
    "model",
    "input",
    "stream",
    "include",
    "stream_options",
    "prompt",
    "conversation",
    "context_management",
    "prompt_cache_retention",
];

#[derive(Debug, Deserialize)]
pub(super) struct CreateBody {
    #[serde(default)]
    pub model: Option<String>,
    pub input: Input,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub store: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// The request parameters a response object echoes (as sent; the others
/// it shows with their defaults). Which of them take effect:
/// docs/protocols.md §9.
const ECHOED: &[&str] = &[
    "instructions",
    "tools",
    "tool_choice",
    "previous_response_id",
    "background",
    "store",
    "metadata",
    "max_output_tokens",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "reasoning",
    "text",
    "truncation",
    "service_tier",
    "max_tool_calls",
    "top_logprobs",
    "prompt_cache_key",
    "safety_identifier",
];

/// What is kept of a request beside its session, for as long as its
/// response is ([`crate::config::ResponsesConfig`]).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Record {
    /// The parameters its response object echoes.
    pub echo: Map<String, Value>,
    /// Its input items, in the order sent, without ids (they are given by
    /// place: [`Record::listed`]).
    pub input: Vec<Value>,
}

impl Record {
    /// The annex name of the response whose events start after `cursor`.
    fn name(cursor: u64) -> String {
        format!("resp:{cursor}")
    }

    /// Keeps it beside `session` for the response after `cursor`, for
    /// `responses.retention_secs`; answers the parameters the response
    /// echoes: its own, or none (the defaults) should the store refuse —
    /// then every replica shows the defaults, so replays stay identical.
    pub async fn keep(
        self,
        state: &AppState,
        principal: &Principal,
        session: &str,
        cursor: u64,
    ) -> Result<Map<String, Value>, ApiError> {
        let kept = serde_json::to_string(&self).map_err(|e| ApiError::internal(e.to_string()))?;
        let retention = state.config.responses.retention;
        match state.sessions.keep_annex(principal, session, &Self::name(cursor), &kept, retention).await {
            Ok(()) => Ok(self.echo),
            Err(error) => {
                tracing::warn!(session, %error, "the response's request was not kept: it echoes defaults");
                Ok(Map::new())
            }
        }
    }

    /// What [`Record::keep`] kept for the response after `cursor`; the
    /// defaults when nothing was (the store refused it then).
    pub async fn read(
        state: &AppState,
        principal: &Principal,
        session: &str,
        cursor: u64,
    ) -> Result<Self, SessionError> {
        let kept = state.sessions.annex(principal, session, &Self::name(cursor)).await?;
        Ok(kept.and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default())
    }

    /// Its input items as `input_items` lists them, oldest first: each with
    /// an id of its place in the response `response_id`'s input (an item
    /// the client sent back with an id keeps it).
    pub fn listed(&self, response_id: &str) -> Vec<Value> {
        let suffix = response_id.strip_prefix("resp_").unwrap_or(response_id);
        (self.input.iter().enumerate())
            .map(|(i, item)| {
                let mut item = item.clone();
                if let Some(fields) = item.as_object_mut()
                    && !fields.get("id").is_some_and(Value::is_string)
                {
                    let prefix = match fields.get("type").and_then(Value::as_str) {
                        Some("function_call_output") => "fco",
                        Some("mcp_approval_response") => "mcpr",
                        _ => "msg",
                    };
                    fields.insert("id".into(), format!("{prefix}_in{i}_{suffix}").into());
                }
                item
            })
            .collect()
    }
}

/// A request read and checked.
pub(super) struct Request {
    pub body: CreateBody,
    pub parsed: Parsed,
    pub record: Record,
}

impl Request {
    /// Reads `body`: an unknown field is a 400 as OpenAI answers it, and
    /// so is a wrong type or an input item it cannot take.
    pub fn read(body: Value) -> Result<Self, ApiError> {
        let echo = match body.as_object() {
            Some(object) => {
                if let Some(unknown) =
                    object.keys().find(|k| !ECHOED.contains(&k.as_str()) && !NOT_ECHOED.contains(&k.as_str()))
                {
                    return Err(ApiError::bad_request(format!("Unrecognized request argument supplied: {unknown}")));
                }
                (object.iter())
                    .filter(|(k, v)| ECHOED.contains(&k.as_str()) && !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
            None => Map::new(),
        };
        let body: CreateBody =
            serde_json::from_value(body).map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))?;
        if body.background == Some(true) && body.store == Some(false) {
            return Err(ApiError::bad_request("background responses need store: true"));
        }
        let (parsed, input) = parse(&body)?;
        Ok(Self { body, parsed, record: Record { echo, input } })
    }
}

fn input_message(role: &str, text: &str) -> Value {
    let content = if role == "assistant" {
        serde_json::json!([{"type": "output_text", "text": text, "annotations": []}])
    } else {
        serde_json::json!([{"type": "input_text", "text": text}])
    };
    serde_json::json!({"type": "message", "role": role, "status": "completed", "content": content})
}

/// A message's text: its string, or its text parts joined by lines.
fn message_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            (parts.iter())
                .filter(|p| matches!(p["type"].as_str(), Some("input_text" | "output_text" | "text")))
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// What the request's input says.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub id: String,
    /// Messages in order (instructions first).
    messages: Vec<(Role, String)>,
    outputs: Vec<(String, String)>,
    approvals: Vec<(String, bool, Option<String>)>,
    pub tools: Vec<FrontendTool>,
}

/// The request's input, instructions and function tools; and its input
/// items as `input_items` lists them ([`Record::input`]).
fn parse(body: &CreateBody) -> Result<(Parsed, Vec<Value>), ApiError> {
    let mut parsed = Parsed::default();
    if let Some(instructions) = body.instructions.as_ref().filter(|i| !i.is_empty()) {
        parsed.messages.push((Role::System, instructions.clone()));
    }
    let mut listed = Vec::new();
    match &body.input {
        Input::Text(text) => {
            parsed.messages.push((Role::User, text.clone()));
            listed.push(input_message("user", text));
        }
        Input::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                listed.extend(input_item(&mut parsed, i, item)?);
            }
        }
    }
    for (i, tool) in body.tools.iter().enumerate() {
        match tool["type"].as_str() {
            Some("function") => {
                let name = tool["name"]
                    .as_str()
                    .ok_or_else(|| invalid(&format!("tools[{i}].name"), "a string is required"))?;
                parsed.tools.push(FrontendTool {
                    name: name.to_string(),
                    description: tool["description"].as_str().unwrap_or_default().to_string(),
                    parameters: tool.get("parameters").cloned().filter(|p| !p.is_null()),
                    mode: FrontendMode::Pause,
                    noop_response: None,
                });
            }
            other => {
                return Err(invalid(
                    &format!("tools[{i}].type"),
                    &format!("{other:?} is not supported: function tools only (server tools are the gateway's)"),
                ));
            }
        }
    }
    Ok((parsed, listed))
}

/// Takes input item `i` into `parsed`; answers it as `input_items` lists
/// it: a message in OpenAI's item shape (its text parts joined as the turn
/// took them), an answer or an item sent back as sent (an answer with its
/// `status`); an `item_reference` names something else and is not listed.
fn input_item(parsed: &mut Parsed, i: usize, item: &Value) -> Result<Option<Value>, ApiError> {
    let kind = item["type"].as_str().unwrap_or(if item.get("role").is_some() { "message" } else { "" });
    match kind {
        "message" => {
            let (role, name) = match item["role"].as_str() {
                Some(name @ "user") => (Role::User, name),
                Some(name @ "assistant") => (Role::Assistant, name),
                Some(name @ ("system" | "developer")) => (Role::System, name),
                _ => return Err(invalid(&format!("input[{i}].role"), "user, assistant, system or developer")),
            };
            let text = message_text(&item["content"])
                .ok_or_else(|| invalid(&format!("input[{i}].content"), "a string or content parts"))?;
            let listed = input_message(name, &text);
            parsed.messages.push((role, text));
            return Ok(Some(listed));
        }
        "function_call_output" => {
            let call = item["call_id"]
                .as_str()
                .ok_or_else(|| invalid(&format!("input[{i}].call_id"), "a string is required"))?;
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            parsed.outputs.push((call.to_string(), output));
            let mut listed = item.clone();
            if let Some(fields) = listed.as_object_mut() {
                fields.entry("status").or_insert_with(|| "completed".into());
            }
            return Ok(Some(listed));
        }
        "mcp_approval_response" => {
            let id = (item["approval_request_id"].as_str())
                .ok_or_else(|| invalid(&format!("input[{i}].approval_request_id"), "a string is required"))?;
            let approve = item["approve"]
                .as_bool()
                .ok_or_else(|| invalid(&format!("input[{i}].approve"), "a boolean is required"))?;
            parsed.approvals.push((id.to_string(), approve, item["reason"].as_str().map(str::to_string)));
        }
        // Earlier output the client sends back: the store has it.
        "function_call" | "reasoning" | "mcp_call" | "mcp_approval_request" => {}
        "item_reference" => return Ok(None),
        other => return Err(invalid(&format!("input[{i}].type"), &format!("{other:?} is not supported"))),
    }
    Ok(Some(item.clone()))
}

fn invalid(param: &str, message: &str) -> ApiError {
    ApiError::bad_request(format!("Invalid value for '{param}': {message}"))
}

impl Conversation for Parsed {
    fn chat_id(&self) -> &str {
        &self.id
    }

    fn turn(&self) -> Option<(ChatMessage, Vec<ChatMessage>)> {
        let ((role, text), earlier) = self.messages.split_last()?;
        if *role != Role::User || text.is_empty() || !self.outputs.is_empty() || !self.approvals.is_empty() {
            return None;
        }
        let history = earlier.iter().map(|(role, text)| ChatMessage::text(*role, text.clone())).collect();
        Some((ChatMessage::text(Role::User, text.clone()), history))
    }

    fn run_input(&self) -> Option<RunInput> {
        Some(RunInput { frontend_tools: self.tools.clone(), context: Vec::new(), state: None })
    }

    fn answers(&self, session: &Session) -> Result<Answers, ApiError> {
        let mut answers = Answers::default();
        let (mut calls, mut approvals) = (Vec::new(), Vec::new());
        let (pending_calls, pending_relays) = (session.pending_calls(), session.pending_relays());
        for call in &pending_calls {
            match self.outputs.iter().find(|(id, _)| *id == call.tool_call_id) {
                Some((id, output)) => answers.outputs.push((id.clone(), output.clone())),
                None => calls.push(call.tool_call_id.as_str()),
            }
        }
        for relay in &pending_relays {
            match self.approvals.iter().find(|(id, _, _)| *id == relay.relay_id) {
                Some((_, approved, reason)) => answers.decisions.push(Decision {
                    tool_call_id: relay.tool_call_id.clone(),
                    approved: *approved,
                    reason: reason.clone(),
                }),
                None => approvals.push(relay.relay_id.as_str()),
            }
        }
        if calls.is_empty() && approvals.is_empty() {
            Ok(answers)
        } else {
            Err(client_chat::still_waiting(&calls, &approvals))
        }
    }
}
