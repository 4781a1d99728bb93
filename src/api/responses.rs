//! The OpenAI Responses API (docs/protocols.md §8), for the official SDKs
//! pointed at `<gateway>/v1` with a Switchboard credential as their API
//! key:
//!
//! - `POST /v1/responses` starts a response: a new conversation (a session
//!   of its own), or with `previous_response_id` the next response of that
//!   conversation, on any replica — a new turn, or, when the previous one
//!   ended on function calls or approval requests, its continuation with
//!   `function_call_output` / `mcp_approval_response` input items.
//!   `stream: true` streams it; `background: true` without a stream answers
//!   at once (the response `in_progress`), else the answer waits for the
//!   response's end.
//! - `GET /v1/responses/{id}` (the response as it stands), with
//!   `?stream=true[&starting_after=N]` its events (all, or those after N),
//!   live until it ends; `POST /v1/responses/{id}/cancel`;
//!   `DELETE /v1/responses/{id}` (its conversation's session with it).
//!
//! A response id names its session and the log cursor its events start
//! after (`protocol::responses::response_id`): any replica finds it in the
//! store, and the encoder makes the same events from the same log. It
//! lives as long as its session does (`store.session_ttl_secs`).
//!
//! Function tools are the client's (pause mode: the response ends with
//! `function_call` items); server tools' asks end it with
//! `mcp_approval_request` items. Errors have OpenAI's body (the registry's
//! `ErrorStyle::OpenAi`), so the SDKs raise their own error classes.

use std::time::Duration;

use axum::{
    Json,
    extract::{Path, Query, State},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    client_chat::{self, Conversation},
    stream,
};
use crate::{
    domain::{
        Answers, ApprovalMode, ChatMessage, Decision, FrontendMode, FrontendTool, Role, RunInput, Session,
        SessionOptions,
    },
    error::ApiError,
    principal::Principal,
    protocol::{
        Encoder, EventKind,
        responses::{ResponsesEncoder, parse_response_id},
    },
    sessions::{FollowItem, Follower, NewSession, SessionError},
    state::AppState,
};

/// How long a cancel waits for the response to end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Events read per page for a poll.
const PAGE: usize = 512;

/// The request fields OpenAI's API takes; the ones not listed as used
/// are accepted and have no effect (docs/protocols.md §8 lists them). An
/// unknown field is a 400, as OpenAI answers it.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "previous_response_id",
    "background",
    "stream",
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
    "include",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "stream_options",
    "top_logprobs",
    "max_tool_calls",
    "prompt",
    "conversation",
    "context_management",
    "prompt_cache_retention",
];

#[derive(Debug, Deserialize)]
struct CreateBody {
    #[serde(default)]
    model: Option<String>,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    background: Option<bool>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    store: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// What the request's input says.
#[derive(Debug, Default)]
struct Parsed {
    id: String,
    /// Messages in order (instructions first).
    messages: Vec<(Role, String)>,
    outputs: Vec<(String, String)>,
    approvals: Vec<(String, bool, Option<String>)>,
    tools: Vec<FrontendTool>,
}

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    if let Some(object) = body.as_object()
        && let Some(unknown) = object.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!("Unrecognized request argument supplied: {unknown}")));
    }
    let body: CreateBody =
        serde_json::from_value(body).map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))?;
    let (background, streamed) = (body.background.unwrap_or(false), body.stream.unwrap_or(false));
    if background && body.store == Some(false) {
        return Err(ApiError::bad_request("background responses need store: true"));
    }
    let mut parsed = parse(&body)?;
    super::check_frontend_tools(&state, &parsed.tools)?;
    let model = match &body.previous_response_id {
        Some(previous) => {
            let (session, cursor) = parse_response_id(previous).ok_or_else(|| not_found(previous))?;
            let view = state.sessions.get(&principal, session).await.map_err(|e| missing(e, previous))?;
            if cursor != view.turn_start_seq {
                return Err(ApiError::bad_request(format!(
                    "{previous} is not the latest response of its conversation: only the latest can be continued"
                )));
            }
            parsed.id = session.to_string();
            view.session.model().to_string()
        }
        None => {
            parsed.id = uuid::Uuid::now_v7().to_string();
            super::model_or_default(&state, &principal, body.model.as_deref())?
        }
    };
    let options = SessionOptions { approval: ApprovalMode::Pause, ..SessionOptions::default() };
    let new = NewSession { id: None, model: model.clone(), dialect: "openai-responses", options, files: None };
    let proceeded = client_chat::proceed(&state, &principal, new, &parsed).await?;
    let cursor = proceeded.started.cursor();
    let mut encoder = ResponsesEncoder::new(&parsed.id, cursor, &model);
    let mut follower = state.sessions.follow_started(proceeded.started).await;
    if streamed {
        return Ok(stream::stream(&state, principal, parsed.id, follower, Box::new(encoder)));
    }
    // In the background: as it stands after its first event (committed
    // with the turn's start); else as it ends.
    drive(&mut follower, &mut encoder, background).await;
    Ok(Json(encoder.snapshot()).into_response())
}

/// Feeds `follower`'s events to `encoder` until the response ends (or,
/// with `first_only`, after its first event).
async fn drive(follower: &mut Follower, encoder: &mut ResponsesEncoder, first_only: bool) {
    while let Some(item) = follower.next().await {
        if let FollowItem::Event(event) = item {
            let _ = encoder.encode(&event);
            if first_only || encoder.status().is_final() {
                return;
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct RetrieveQuery {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    starting_after: Option<u64>,
}

/// `GET /v1/responses/{id}`, with `?stream=true` its events.
pub async fn retrieve(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<RetrieveQuery>,
) -> Result<Response, ApiError> {
    if query.stream != Some(true) {
        return Ok(Json(current(&state, &principal, &id).await?.snapshot()).into_response());
    }
    let found = find(&state, &principal, &id).await?;
    let encoder = found.encoder().starting_after(query.starting_after);
    let follower = found.follow(&state, &principal).await?;
    Ok(stream::stream(&state, principal, found.session, follower, Box::new(encoder)))
}

/// `POST /v1/responses/{id}/cancel`: idempotent; answers the response as
/// it ends (or as it stands after [`CANCEL_WAIT`]).
pub async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let found = find(&state, &principal, &id).await?;
    let encoder = found.read(&state, &principal).await?;
    if encoder.status().is_final() {
        return Ok(Json(encoder.snapshot()).into_response());
    }
    match state.sessions.cancel(&principal, &found.session).await {
        // Ended meanwhile: the response says how.
        Ok(()) | Err(SessionError::Conflict(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut encoder = found.encoder();
    let mut follower = found.follow(&state, &principal).await?;
    let _ = tokio::time::timeout(CANCEL_WAIT, drive(&mut follower, &mut encoder, false)).await;
    Ok(Json(encoder.snapshot()).into_response())
}

/// `DELETE /v1/responses/{id}`: the response's conversation goes with it.
pub async fn delete(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let found = find(&state, &principal, &id).await?;
    state.sessions.delete(&principal, &found.session).await.map_err(|e| missing(e, &id))?;
    Ok(Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response())
}

/// A response the caller may see: its session, cursor and model.
struct Found {
    id: String,
    session: String,
    cursor: u64,
    model: String,
}

/// The response `id` names, checked: its session is the caller's and its
/// first event starts a turn or a continuation; a 404 otherwise.
async fn find(state: &AppState, principal: &Principal, id: &str) -> Result<Found, ApiError> {
    let (session, cursor) = parse_response_id(id).ok_or_else(|| not_found(id))?;
    let view = state.sessions.get(principal, session).await.map_err(|e| missing(e, id))?;
    let first = state.sessions.read_log(principal, session, cursor, 1).await.map_err(|e| missing(e, id))?;
    if !first.first().is_some_and(|e| matches!(e.event.kind, EventKind::TurnStarted { .. } | EventKind::Resumed { .. }))
    {
        return Err(not_found(id));
    }
    let model = view.session.model().to_string();
    Ok(Found { id: id.to_string(), session: session.to_string(), cursor, model })
}

/// The response as its log stands now.
async fn current(state: &AppState, principal: &Principal, id: &str) -> Result<ResponsesEncoder, ApiError> {
    find(state, principal, id).await?.read(state, principal).await
}

impl Found {
    fn encoder(&self) -> ResponsesEncoder {
        ResponsesEncoder::new(&self.session, self.cursor, &self.model)
    }

    /// Its events as the log holds them now, a page at a time, to its end.
    async fn read(&self, state: &AppState, principal: &Principal) -> Result<ResponsesEncoder, ApiError> {
        let mut encoder = self.encoder();
        let mut after = self.cursor;
        loop {
            let events = (state.sessions.read_log(principal, &self.session, after, PAGE).await)
                .map_err(|e| missing(e, &self.id))?;
            for event in &events {
                let _ = encoder.encode(event);
            }
            match events.last() {
                Some(last) if events.len() == PAGE && !encoder.status().is_final() => after = last.seq,
                _ => return Ok(encoder),
            }
        }
    }

    /// Its events from its start, live until it ends.
    async fn follow(&self, state: &AppState, principal: &Principal) -> Result<Follower, ApiError> {
        state.sessions.follow(principal, &self.session, self.cursor).await.map_err(|e| missing(e, &self.id))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Response with id '{id}' not found."))
}

/// A session the caller may not see is a response that is not there.
fn missing(error: SessionError, id: &str) -> ApiError {
    match error {
        SessionError::NotFound => not_found(id),
        other => other.into(),
    }
}

/// The request's input, instructions and function tools.
fn parse(body: &CreateBody) -> Result<Parsed, ApiError> {
    let mut parsed = Parsed::default();
    if let Some(instructions) = body.instructions.as_ref().filter(|i| !i.is_empty()) {
        parsed.messages.push((Role::System, instructions.clone()));
    }
    match &body.input {
        Input::Text(text) => parsed.messages.push((Role::User, text.clone())),
        Input::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                input_item(&mut parsed, i, item)?;
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
    Ok(parsed)
}

fn input_item(parsed: &mut Parsed, i: usize, item: &Value) -> Result<(), ApiError> {
    let kind = item["type"].as_str().unwrap_or(if item.get("role").is_some() { "message" } else { "" });
    match kind {
        "message" => {
            let role = match item["role"].as_str() {
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some("system" | "developer") => Role::System,
                _ => return Err(invalid(&format!("input[{i}].role"), "user, assistant, system or developer")),
            };
            let text = match &item["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => (parts.iter())
                    .filter(|p| matches!(p["type"].as_str(), Some("input_text" | "output_text" | "text")))
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return Err(invalid(&format!("input[{i}].content"), "a string or content parts")),
            };
            parsed.messages.push((role, text));
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
        "function_call" | "reasoning" | "mcp_call" | "mcp_approval_request" | "item_reference" => {}
        other => return Err(invalid(&format!("input[{i}].type"), &format!("{other:?} is not supported"))),
    }
    Ok(())
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
