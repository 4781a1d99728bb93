//! The native v1 API (`/v1/sessions…`): sessions as resources, their events
//! as SSE with `id: <seq>`, rejoinable on any replica with `Last-Event-ID`;
//! the caller's sessions listed newest first, and deleted.

use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::stream;
use crate::{
    domain::{Answers, ApprovalMode, Decision, FrontendTool, PermissionRules, RelayDecision, SessionOptions},
    error::ApiError,
    principal::Principal,
    protocol::{Encoder, FORMATS, ai_sdk::AiSdkEncoder, encoder_for},
    providers::{ChatMessage, Role},
    sessions::{ListRequest, NewSession, SessionView},
    state::AppState,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    pub model: String,
    /// Tools the client runs itself (`mode`: `pause` or `noop`).
    #[serde(default)]
    pub frontend_tools: Vec<FrontendTool>,
    /// llm-gateway's `{allowlist, allowOnce, deny}`.
    #[serde(default)]
    pub permissions: Option<PermissionRules>,
    pub max_iterations: Option<u32>,
    pub max_depth: Option<u32>,
    pub additional_system_prompt: Option<String>,
    pub response_format: Option<Value>,
    /// `relay` (default: decisions over the relay endpoint while the stream
    /// stays open) or `pause` (the stream ends; answer with tool-results).
    #[serde(default)]
    pub approval: ApprovalMode,
    /// The workspace's first files: `{files: [{path, content | content_base64}], template}`.
    pub workspace: Option<WorkspaceSeed>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSeed {
    #[serde(default)]
    pub files: Vec<crate::workspace::SeedFile>,
    pub template: Option<String>,
}

/// `POST /v1/sessions`: an idle session on the given model alias.
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    Json(body): Json<CreateSession>,
) -> Result<Response, ApiError> {
    super::check_model(&state, &principal, &body.model)?;
    super::check_frontend_tools(&state, &body.frontend_tools)?;
    let options = SessionOptions {
        frontend_tools: body.frontend_tools,
        rules: body.permissions.unwrap_or_default(),
        // A request may lower the server's bounds, never raise them.
        max_iterations: body.max_iterations.map(|n| n.clamp(1, state.config.agent.max_iterations)),
        max_depth: body.max_depth.map(|n| n.min(state.config.agent.max_depth)),
        additional_system_prompt: body.additional_system_prompt,
        response_format: body.response_format,
        approval: body.approval,
        ..SessionOptions::default()
    };
    let files = match &body.workspace {
        Some(seed) => Some(
            state
                .seeds
                .seed(&state.config.sandbox, seed.template.as_deref(), &seed.files)
                .map_err(super::workspace::seed_error)?,
        ),
        None => None,
    };
    let new = NewSession { id: None, model: body.model, dialect: "native", options, files };
    let session = state.sessions.create(&principal, new).await?;
    let created = SessionView { session, replica: None, last_seq: 0, turn_start_seq: 0 };
    Ok((StatusCode::CREATED, Json(view(&created))).into_response())
}

/// `GET /v1/sessions/{id}`: status, pending relays and calls, usage, last seq.
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let session = state.sessions.get(&principal, &id).await?;
    Ok(Json(view(&session)))
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    pub after: Option<u64>,
    /// Render the stream in another dialect (`native` by default).
    pub format: Option<String>,
}

/// The encoder `?format=` names; 400 listing the known ones otherwise.
/// `ai-sdk` is encoded for the `ai` version the request's headers name
/// (see [`super::ai_sdk::client_version`]).
fn encoder(state: &AppState, format: Option<&str>, headers: &HeaderMap) -> Result<Box<dyn Encoder>, ApiError> {
    let name = format.unwrap_or("native");
    if name == "ai-sdk" {
        return Ok(Box::new(AiSdkEncoder::new(super::ai_sdk::client_version(headers)?)));
    }
    encoder_for(name, &state.model_limits)
        .ok_or_else(|| ApiError::bad_request(format!("unknown format {name:?}; known: {}", FORMATS.join(", "))))
}

/// `GET /v1/sessions/{id}/events`: replay after `Last-Event-ID` (or
/// `?after=`), then live events until the session pauses or ends. A dialect
/// that restates on a join (AG-UI) joins a running turn instead: the
/// session as of its last commit, then the step in progress, whole.
pub async fn events(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event sequence number"))?,
        None => query.after.unwrap_or(0),
    };
    let mut encoder = encoder(&state, query.format.as_deref(), &headers)?;
    let follower = if encoder.restates_on_join() {
        let joined = state.sessions.join(&principal, &id, after).await?;
        if let Some(session) = &joined.session {
            encoder.joined(session);
        }
        joined.follower
    } else if encoder.wants_turn_context() {
        state.sessions.follow_in_turn(&principal, &id, after).await?
    } else {
        state.sessions.follow(&principal, &id, after).await?
    };
    Ok(stream::stream(&state, principal, id, follower, encoder))
}

#[derive(Debug, Deserialize)]
pub struct FormatQuery {
    pub format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    pub content: String,
}

/// `POST /v1/sessions/{id}/messages`: start a turn; the answer is its SSE.
pub async fn send_message(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<FormatQuery>,
    headers: HeaderMap,
    Json(body): Json<SendMessage>,
) -> Result<Response, ApiError> {
    let encoder = encoder(&state, query.format.as_deref(), &headers)?;
    let started = state.sessions.start_turn(&principal, &id, ChatMessage::text(Role::User, body.content)).await?;
    let follower = state.sessions.follow_started(started).await;
    Ok(stream::stream(&state, principal, id, follower, encoder))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResults {
    #[serde(default)]
    pub results: Vec<ToolResultBody>,
    /// Answers to approvals a paused turn waits for.
    #[serde(default)]
    pub decisions: Vec<DecisionBody>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    pub tool_call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResultBody {
    pub tool_call_id: String,
    pub output: String,
}

/// `POST /v1/sessions/{id}/tool-results`: resume a paused session with the
/// client's answers; the answer is the continuation's SSE. Of concurrent
/// resumes, one wins and the others get 409.
pub async fn tool_results(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<FormatQuery>,
    headers: HeaderMap,
    Json(body): Json<ToolResults>,
) -> Result<Response, ApiError> {
    let encoder = encoder(&state, query.format.as_deref(), &headers)?;
    let outputs = body.results.into_iter().map(|r| (r.tool_call_id, r.output)).collect();
    let decisions = body
        .decisions
        .into_iter()
        .map(|d| Decision { tool_call_id: d.tool_call_id, approved: d.approved, reason: d.reason })
        .collect();
    let started = state.sessions.resume(&principal, &id, Answers { outputs, decisions, ..Answers::default() }).await?;
    let follower = state.sessions.follow_started(started).await;
    Ok(stream::stream(&state, principal, id, follower, encoder))
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    #[serde(default)]
    pub all: bool,
}

/// `GET /v1/sessions?limit=&cursor=&all=`: the caller's sessions, newest
/// first (`all=true`: the tenant's, for `sessions:admin`), and the cursor
/// of the next page (`null` at the end).
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let request = ListRequest { limit: query.limit, cursor: query.cursor, all: query.all };
    let page = state.sessions.list(&principal, request).await?;
    let sessions: Vec<Value> = page.sessions.iter().map(summary).collect();
    Ok(Json(json!({"sessions": sessions, "next_cursor": page.next})))
}

/// `DELETE /v1/sessions/{id}`: 204; a running session is a 409 (cancel it
/// first).
pub async fn delete(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.sessions.delete(&principal, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A session in a list: what names it and where it stands (the same fields
/// as its full view).
fn summary(session: &crate::domain::Session) -> Value {
    json!({
        "id": session.id(),
        "title": session.title(),
        "status": session.status().as_str(),
        "model": session.model(),
        "created_ms": session.created_ms(),
        "updated_ms": session.updated_ms(),
    })
}

fn view(view: &SessionView) -> Value {
    let session = &view.session;
    json!({
        "id": session.id(),
        "title": session.title(),
        "status": session.status().as_str(),
        "model": session.model(),
        "turn": session.turn(),
        "replica": view.replica,
        "created_ms": session.created_ms(),
        "updated_ms": session.updated_ms(),
        "last_seq": view.last_seq,
        "pending_relays": session.pending_relays(),
        "pending_calls": session.pending_calls(),
        "usage": session.usage(),
        "error": session.error().map(|e| &e.message),
        "error_code": session.error().map(|e| e.code),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayDecisionBody {
    pub approved: bool,
    #[serde(default)]
    pub always: bool,
    pub reason: Option<String>,
}

/// `POST /v1/sessions/{id}/relays/{relayId}`: decide a live relay, on any
/// replica. 409 when it was already decided.
pub async fn decide_relay(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, relay_id)): Path<(String, String)>,
    Json(body): Json<RelayDecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let decision = RelayDecision { approved: body.approved, always: body.always, reason: body.reason };
    state.sessions.decide_relay(&principal, Some(&id), &relay_id, decision).await?;
    Ok(Json(json!({"relay_id": relay_id, "decided": true})))
}

/// `POST /v1/sessions/{id}/cancel`: stop the running (or paused) turn.
pub async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    state.sessions.cancel(&principal, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"id": id, "cancel_requested": true}))))
}
