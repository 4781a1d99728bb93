//! HTTP handlers, one file per dialect. Handlers are thin: extract, call one
//! function of the service layer, map the result. No business logic here.

mod holmes;
mod llm_gateway;
mod ops;

use axum::{Router, routing::get};

use crate::{app::AppState, error::ApiError};

/// Every route of the gateway.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/api/model", get(holmes::list_models))
        .route("/models", get(llm_gateway::list_models))
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// The model aliases the caller's tenant may use, in name order.
fn visible_models(
    state: &AppState,
    principal: &crate::auth::Principal,
) -> Result<Vec<String>, ApiError> {
    let tenant = state
        .config
        .tenants
        .get(&*principal.tenant)
        .ok_or_else(|| ApiError::unauthorized("unknown tenant"))?;
    Ok(tenant
        .visible_models(&state.config.models)
        .into_iter()
        .map(str::to_string)
        .collect())
}
