//! A Holmes resume (`tool_decisions` / `frontend_tool_results`), answered
//! as HolmesGPT's server answers it, with the paused state from the store:
//!
//! - the paused session is found by `session_id`, else by the pending calls
//!   the request answers, else by the history it sends back
//!   ([`crate::sessions::Sessions::find_paused`]); the stored calls are
//!   what runs, never the client's copy;
//! - an approval left without a decision is denied (the model reads
//!   Holmes' denial text), a frontend call left without a result gets
//!   Holmes' error text, and an answer for a call that is not pending is
//!   ignored ([`AnswerRules::Lenient`]);
//! - a history that holds the answered calls but matches no paused
//!   conversation of the caller (paused on another Holmes, or expired)
//!   starts a new conversation from that history: the client's messages
//!   become context, its frontend results stay what they are, and nothing
//!   it approves is run — the model is told so.

use axum::response::Response;
use serde_json::json;

use super::{
    encoder, options,
    request::ChatRequest,
    respond::{Shape, respond},
    seed,
};
use crate::{
    domain::{AnswerRules, Answers, ChatMessage, Decision, Role},
    error::ApiError,
    principal::Principal,
    sessions::{FindError, NewSession, ResumeLookup},
    state::AppState,
};

/// What the model reads for a call the user denied (HolmesGPT's text); the
/// user's feedback follows it.
pub const DENIED: &str = "Tool execution was denied by the user.";
/// What the model reads for a pending frontend call the client sent no
/// result for (HolmesGPT's text).
pub const NO_FRONTEND_RESULT: &str = "Error: frontend did not return a result for this tool call.";
/// What the model reads for an approved call of a conversation the server
/// does not hold: the approval is not acted on.
pub const NOT_RUN: &str = "This tool call was not run: the server holds no paused conversation with this call, so \
                           the decision about it was not carried out.";

/// Answers the paused session the request names with its decisions and
/// results.
pub async fn resume(
    state: AppState,
    principal: Principal,
    request: ChatRequest,
    history: Option<Vec<ChatMessage>>,
) -> Result<Response, ApiError> {
    let answered = request.answered_calls();
    let lookup =
        ResumeLookup { session_id: request.session_id.as_deref(), call_ids: &answered, history: history.as_deref() };
    let session = match state.sessions.find_paused(&principal, lookup).await {
        Ok(session) => session,
        Err(FindError::UnknownHistory) if holds_calls(history.as_deref(), &answered) => {
            let history = history.unwrap_or_default();
            return resume_elsewhere(state, principal, request, history).await;
        }
        Err(FindError::UnknownHistory) if request.session_id.is_none() && history.is_none() => {
            return Err(ApiError::not_found(
                "no paused conversation holds the answered tool calls; send the session_id or the \
                 conversation_history of the paused conversation",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let results = request.frontend_tool_results.unwrap_or_default();
    for (i, result) in results.iter().enumerate() {
        let stored = session.call(&result.tool_call_id).map(|c| c.call());
        if let Some(stored) = stored.filter(|c| c.name != result.tool_name) {
            return Err(ApiError::bad_request(format!(
                "frontend_tool_results[{i}].tool_name: call {:?} is a call of {:?}, not {:?}",
                result.tool_call_id, stored.name, result.tool_name
            )));
        }
    }
    let outputs = results.into_iter().map(|r| (r.tool_call_id, r.result)).collect();
    let decisions = (request.tool_decisions.unwrap_or_default().into_iter())
        .map(|d| {
            let reason = (!d.approved).then(|| denial(d.feedback.as_deref()));
            Decision { tool_call_id: d.tool_call_id, approved: d.approved, reason }
        })
        .collect();
    let rules = AnswerRules::Lenient { unanswered: DENIED.into(), missing_result: NO_FRONTEND_RESULT.into() };
    let started = state.sessions.resume(&principal, session.id(), Answers { outputs, decisions, rules }).await?;
    let mut encoder = encoder(&state, session.model());
    for planned in session.calls() {
        let call = planned.call();
        encoder.remember_call(&call.id, serde_json::from_str(&call.arguments).unwrap_or(json!({})));
    }
    respond(state, principal, started, Shape::Chat { stream: request.stream }, encoder).await
}

/// The reason a denied call gives the model: Holmes' text and the user's
/// feedback.
fn denial(feedback: Option<&str>) -> String {
    match feedback.map(str::trim).filter(|f| !f.is_empty()) {
        Some(feedback) => format!("{DENIED} User feedback: {feedback}"),
        None => DENIED.to_string(),
    }
}

/// Does the history hold (as assistant tool calls) one of the answered calls?
fn holds_calls(history: Option<&[ChatMessage]>, answered: &[&str]) -> bool {
    history.into_iter().flatten().flat_map(|m| m.tool_calls.iter()).any(|call| answered.contains(&call.id.as_str()))
}

/// A new conversation from a history whose pause this gateway does not
/// hold. The calls the history leaves open are closed: with the client's
/// result for a frontend call, with [`NOT_RUN`] for anything else. The
/// model then answers the question, or (no question) the conversation as
/// it stands.
async fn resume_elsewhere(
    state: AppState,
    principal: Principal,
    request: ChatRequest,
    mut history: Vec<ChatMessage>,
) -> Result<Response, ApiError> {
    let answered: Vec<String> =
        history.iter().filter(|m| m.role == Role::Tool).filter_map(|m| m.tool_call_id.clone()).collect();
    let open: Vec<String> = (history.iter().flat_map(|m| m.tool_calls.iter()))
        .map(|call| call.id.clone())
        .filter(|id| !answered.contains(id))
        .collect();
    let results = request.frontend_tool_results.iter().flatten();
    for id in open {
        let output = match results.clone().find(|r| r.tool_call_id == id) {
            Some(result) => result.result.clone(),
            None => NOT_RUN.to_string(),
        };
        history.push(ChatMessage::tool_result(id, output));
    }
    tracing::info!("resume of a conversation this gateway does not hold: started anew from the client's history");
    let model = super::super::model_or_default(&state, &principal, request.model.as_deref())?;
    let options = options(&request);
    let seed = seed(Some(history), &options, state.enabled_prompts.as_deref());
    let new = NewSession { id: None, model: model.clone(), dialect: "holmes", options, files: None };
    let started = if request.ask.trim().is_empty() {
        state.sessions.start_conversation_on_history(&principal, new, seed).await?
    } else {
        let message = request.user_message();
        state.sessions.start_conversation(&principal, new, seed, message).await?
    };
    let encoder = encoder(&state, &model);
    respond(state, principal, started, Shape::Chat { stream: request.stream }, encoder).await
}
