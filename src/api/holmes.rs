//! HolmesGPT dialect (`/api/chat`, `/api/model`): see PROTOCOLS.md §1.

use axum::{Json, extract::State};
use serde_json::{Value, json};

use crate::{app::AppState, auth::Principal, error::ApiError};

/// `GET /api/model`: the model aliases the caller's tenant may use. (The real
/// server sends a JSON string here; its docs show an array, which we send.)
pub async fn list_models(State(state): State<AppState>, principal: Principal) -> Result<Json<Value>, ApiError> {
    let models = super::visible_models(&state, &principal)?;
    Ok(Json(json!({"model_name": models})))
}

/// Being written.
pub async fn chat() -> ApiError {
    ApiError::new(crate::error::ErrorCode::Internal, "not implemented yet")
}
