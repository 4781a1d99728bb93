//! HolmesGPT dialect (`/api/…`): see docs/protocols.md §1 (seeds 000/001).
//!
//! `POST /api/chat` (and seed 001's `/api/stream/chat`, the same events
//! always streamed) is three requests in one:
//! - a new question (no decisions or results): a new session, seeded with
//!   the client's `conversation_history` (or a follow-up turn of the session
//!   `session_id` names);
//! - a resume (`tool_decisions` and/or `frontend_tool_results`): the paused
//!   session, found by `session_id`, by the calls it answers or by the
//!   history the client sends back (`resume.rs`), answered as HolmesGPT's
//!   server answers it;
//! - either streamed (`stream: true`, SSE in the Holmes encoder) or answered
//!   as one JSON body once the turn ends or pauses (`respond.rs`).
//!
//! Seed 001's investigation endpoints and `/api/issue_chat` are in
//! `investigate.rs`. Errors on every Holmes route are FastAPI's
//! `{"detail": …}` (`error.rs`), validation errors its 422 list
//! (`validation.rs`).

mod investigate;
mod request;
mod respond;
mod resume;
mod validation;

use axum::{Json, body::Bytes, extract::State, response::Response};
use serde_json::{Value, json};

pub use self::investigate::{investigate, issue_chat, stream_investigate, stream_issue_chat};
use self::{
    request::{ChatRequest, check_calls_answered},
    respond::{Shape, respond},
};
use crate::{
    domain::{ApprovalMode, ChatMessage, FrontendMode, Role, SessionOptions},
    error::{ApiError, ErrorCode},
    orchestrator::prompt,
    principal::Principal,
    protocol::holmes::HolmesEncoder,
    sessions::NewSession,
    state::AppState,
};

/// `GET /api/model`: the model aliases the caller's tenant may use. (The real
/// server sends a JSON string here; its docs show an array, which we send.)
pub async fn list_models(State(state): State<AppState>, principal: Principal) -> Result<Json<Value>, ApiError> {
    let models = super::visible_models(&state, &principal)?;
    Ok(Json(json!({"model_name": models})))
}

/// `POST /api/chat`: a question, or the answer to a paused one.
pub async fn chat(State(state): State<AppState>, principal: Principal, body: Bytes) -> Result<Response, ApiError> {
    let request = request::parse(&body)?;
    chat_request(state, principal, request).await
}

/// `POST /api/stream/chat` (seed 001 names it among its streaming
/// endpoints): `/api/chat`, streamed whatever `stream` says.
pub async fn stream_chat(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut request = request::parse(&body)?;
    request.stream = true;
    chat_request(state, principal, request).await
}

async fn chat_request(state: AppState, principal: Principal, request: ChatRequest) -> Result<Response, ApiError> {
    let history = request.history()?;
    if let Some(tools) = &request.frontend_tools {
        super::check_frontend_tools(&state, tools)?;
        if !request.stream && tools.iter().any(|t| t.mode == FrontendMode::Pause) {
            return Err(ApiError::bad_request(
                "frontend_tools with mode='pause' requires stream=true (the pause/resume flow needs SSE)",
            ));
        }
    }
    if request.is_resume() {
        resume::resume(state, principal, request, history).await
    } else {
        ask(state, principal, request, history).await
    }
}

/// A new turn: on a new session seeded with the client's history, or on
/// the session `session_id` names.
async fn ask(
    state: AppState,
    principal: Principal,
    request: ChatRequest,
    history: Option<Vec<ChatMessage>>,
) -> Result<Response, ApiError> {
    if request.ask.trim().is_empty() && request.images.as_ref().is_none_or(Vec::is_empty) {
        return Err(ApiError::new(ErrorCode::ValidationFailed, "ask: must not be empty unless resuming"));
    }
    if let Some(history) = &history {
        check_calls_answered(history)?;
    }
    let message = request.user_message();
    let (model, started) = match &request.session_id {
        Some(id) => {
            let session = state.sessions.find_for_turn(&principal, id).await?;
            let started = state.sessions.start_turn(&principal, id, message).await?;
            (session.model().to_string(), started)
        }
        None => {
            let model = super::model_or_default(&state, &principal, request.model.as_deref())?;
            let options = options(&request);
            let seed = seed(history, &options, state.enabled_prompts.as_deref());
            let new = NewSession { id: None, model: model.clone(), dialect: "holmes", options, files: None };
            (model, state.sessions.start_conversation(&principal, new, seed, message).await?)
        }
    };
    let (shape, encoder) = (Shape::Chat { stream: request.stream }, encoder(&state, &model));
    respond(state, principal, started, shape, encoder).await
}

/// The session's options from the request. Later turns and resumes keep
/// them (Holmes clients re-send `frontend_tools`; the stored ones apply).
fn options(request: &ChatRequest) -> SessionOptions {
    SessionOptions {
        frontend_tools: request.frontend_tools.clone().unwrap_or_default(),
        additional_system_prompt: request.additional_system_prompt.clone(),
        response_format: request.response_format.clone().map(Value::Object),
        behavior_controls: request.behavior_controls.clone().unwrap_or_default(),
        approval: if request.enable_tool_approval { ApprovalMode::Pause } else { ApprovalMode::Refuse },
        ..SessionOptions::default()
    }
}

/// The conversation a new session starts with, system message first: the
/// client's (with `additional_system_prompt` appended), or ours, rendered
/// now and stored, so every history we hand out shows what the model saw.
fn seed(
    history: Option<Vec<ChatMessage>>,
    options: &SessionOptions,
    enabled_prompts: Option<&[String]>,
) -> Vec<ChatMessage> {
    let extra = options.additional_system_prompt.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match history {
        Some(mut history) => {
            if let (Some(extra), Some(system)) = (extra, history.first_mut()) {
                let text = system.content.get_or_insert_with(String::new);
                // A follow-up sends back a prompt that already has it.
                if !text.ends_with(extra) {
                    text.push_str("\n\n");
                    text.push_str(extra);
                }
            }
            history
        }
        None => {
            let text = prompt::system_prompt(&options.behavior_controls, enabled_prompts, extra);
            vec![ChatMessage::text(Role::System, text)]
        }
    }
}

fn encoder(state: &AppState, model: &str) -> HolmesEncoder {
    HolmesEncoder::new(state.model_limits.get(model))
}
