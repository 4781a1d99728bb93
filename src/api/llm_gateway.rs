//! llm-gateway dialect (`/chat`, `/chat/relay/{relayId}`, `/models`): see
//! PROTOCOLS.md §2. Errors on these routes use its `{"error": "…"}` body.

use axum::{Json, extract::State};
use serde_json::{Value, json};

use crate::{app::AppState, auth::Principal, error::ApiError};

/// `GET /models`: the tenant's model aliases and the default one.
pub async fn list_models(State(state): State<AppState>, principal: Principal) -> Result<Json<Value>, ApiError> {
    let models = super::visible_models(&state, &principal)?;
    Ok(Json(json!({"models": models, "defaultModel": models.first()})))
}

/// Being written.
pub async fn chat() -> ApiError {
    ApiError::new(crate::error::ErrorCode::Internal, "not implemented yet")
}

/// Being written.
pub async fn relay() -> ApiError {
    ApiError::new(crate::error::ErrorCode::Internal, "not implemented yet")
}
