//! HTTP handlers, one file per dialect. Handlers are thin: extract, call one
//! function of the service layer, map the result. No business logic here.

mod holmes;
mod llm_gateway;
mod native;
mod ops;
mod sse;

use axum::{
    Router,
    routing::{get, post},
};

use crate::{app::AppState, error::ApiError};

/// Every route of the gateway.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/api/model", get(holmes::list_models))
        .route("/models", get(llm_gateway::list_models))
        .route("/v1/sessions", post(native::create))
        .route("/v1/sessions/{id}", get(native::get))
        .route("/v1/sessions/{id}/events", get(native::events))
        .route("/v1/sessions/{id}/messages", post(native::send_message))
        .route("/v1/sessions/{id}/tool-results", post(native::tool_results))
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// The model aliases the caller's tenant may use, in name order.
fn visible_models(state: &AppState, principal: &crate::auth::Principal) -> Result<Vec<String>, ApiError> {
    let tenant =
        state.config.tenants.get(&*principal.tenant).ok_or_else(|| ApiError::unauthorized("unknown tenant"))?;
    Ok(tenant.visible_models(&state.config.models).into_iter().map(str::to_string).collect())
}

/// Refuses a model alias the caller's tenant may not use, listing those it may.
fn check_model(state: &AppState, principal: &crate::auth::Principal, model: &str) -> Result<(), ApiError> {
    let allowed = visible_models(state, principal)?;
    if allowed.iter().any(|m| m == model) {
        Ok(())
    } else {
        Err(ApiError::new(
            crate::error::ErrorCode::UnknownModel,
            format!("unknown model {model:?}; allowed: {}", allowed.join(", ")),
        ))
    }
}
