//! The OpenAI Responses API (docs/protocols.md §9), for the official SDKs
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
//!   `DELETE /v1/responses/{id}` (its conversation's session with it);
//!   `GET /v1/responses/{id}/input_items`.
//!
//! A response id names its session and the log cursor its events start
//! after (`protocol::responses::response_id`): any replica finds it in the
//! store, and the encoder makes the same events from the same log. What
//! the log does not hold — the request's input items and the parameters
//! its response object echoes — is kept beside the session
//! ([`request::Record`], a store annex) when the response is made, and
//! listed by `GET /v1/responses/{id}/input_items`. A response is readable
//! for `responses.retention_secs` after it was made (its session's own
//! expiry may end it sooner); then it is a 404, and its session lives on.
//!
//! Function tools are the client's (pause mode: the response ends with
//! `function_call` items); server tools' asks end it with
//! `mcp_approval_request` items. Errors have OpenAI's body (the registry's
//! `ErrorStyle::OpenAi`), so the SDKs raise their own error classes.

mod request;

use std::time::Duration;

use axum::{
    Json,
    extract::{Path, Query, State},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use self::request::{Record, Request};
use super::{client_chat, stream};
use crate::{
    domain::{ApprovalMode, SessionOptions},
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

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    let Request { body, mut parsed, record } = Request::read(body)?;
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
    // Kept before anyone can name the response (its id is first sent below).
    let echo = record.keep(&state, &principal, &parsed.id, cursor).await?;
    let mut encoder = ResponsesEncoder::new(&parsed.id, cursor, &model).echoing(echo);
    let mut follower = state.sessions.follow_started(proceeded.started).await;
    if body.stream.unwrap_or(false) {
        return Ok(stream::stream(&state, principal, parsed.id, follower, Box::new(encoder)));
    }
    // In the background: as it stands after its first event (committed
    // with the turn's start); else as it ends.
    drive(&mut follower, &mut encoder, body.background.unwrap_or(false)).await;
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

#[derive(Debug, Deserialize)]
pub struct InputItemsQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    order: Option<String>,
}

/// `GET /v1/responses/{id}/input_items`: the items its request sent, a
/// page of them (`limit` 1–100, 20 by default; `order` `desc`, the
/// default, or `asc`; `after` an item id), as OpenAI lists them.
pub async fn input_items(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<InputItemsQuery>,
) -> Result<Response, ApiError> {
    let limit = match query.limit {
        None => 20,
        Some(limit @ 1..=100) => limit,
        Some(_) => return Err(ApiError::bad_request("Invalid value for 'limit': between 1 and 100")),
    };
    let mut items = find(&state, &principal, &id).await?.record.listed(&id);
    match query.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(_) => return Err(ApiError::bad_request("Invalid value for 'order': asc or desc")),
    }
    if let Some(after) = &query.after {
        let at = (items.iter().position(|item| item["id"].as_str() == Some(after.as_str())))
            .ok_or_else(|| ApiError::bad_request(format!("Invalid value for 'after': no input item {after}")))?;
        items.drain(..=at);
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    let (first_id, last_id) = (items.first().map(|i| i["id"].clone()), items.last().map(|i| i["id"].clone()));
    Ok(Json(json!({"object": "list", "data": items, "first_id": first_id, "last_id": last_id, "has_more": has_more}))
        .into_response())
}

/// A response the caller may see: its session, cursor and model, and
/// what was kept of its request.
struct Found {
    id: String,
    session: String,
    cursor: u64,
    model: String,
    record: Record,
}

/// The response `id` names, checked: its session is the caller's, its
/// first event starts a turn or a continuation, and it is younger than
/// `responses.retention_secs`; a 404 otherwise. The session (with its
/// first event) and the kept request are read together.
async fn find(state: &AppState, principal: &Principal, id: &str) -> Result<Found, ApiError> {
    let (session, cursor) = parse_response_id(id).ok_or_else(|| not_found(id))?;
    let (read, record) = tokio::join!(
        state.sessions.get_with_log(principal, session, cursor, 1),
        Record::read(state, principal, session, cursor),
    );
    let (view, first) = read.map_err(|e| missing(e, id))?;
    let Some(first) =
        first.first().filter(|e| matches!(e.event.kind, EventKind::TurnStarted { .. } | EventKind::Resumed { .. }))
    else {
        return Err(not_found(id));
    };
    let age_ms = crate::domain::now_ms().saturating_sub(first.event.ts);
    if u128::from(age_ms) >= state.config.responses.retention.as_millis() {
        return Err(not_found(id));
    }
    let record = record?;
    let model = view.session.model().to_string();
    Ok(Found { id: id.to_string(), session: session.to_string(), cursor, model, record })
}

/// The response as its log stands now.
async fn current(state: &AppState, principal: &Principal, id: &str) -> Result<ResponsesEncoder, ApiError> {
    find(state, principal, id).await?.read(state, principal).await
}

impl Found {
    fn encoder(&self) -> ResponsesEncoder {
        ResponsesEncoder::new(&self.session, self.cursor, &self.model).echoing(self.record.echo.clone())
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
