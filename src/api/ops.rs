//! Operations endpoints, public by design: liveness, readiness, metrics.

use std::time::Duration;

use axum::{Json, extract::State, http::header, response::IntoResponse};
use serde_json::{Value, json};

use crate::{
    error::{ApiError, ErrorCode},
    state::AppState,
};

/// How long readiness waits for the store before calling it down.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// The process is alive and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process can do useful work: it is not draining, its store answers,
/// and its sandbox worked at start-up when a tenant runs commands.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.sessions.draining().is_cancelled() {
        return Err(ApiError::new(ErrorCode::Draining, "this replica is shutting down").with_retry_after(1));
    }
    let store = state.store.kind;
    let unavailable = |detail: String| {
        ApiError::new(ErrorCode::StoreUnavailable, format!("the {store} store is not reachable"))
            .with_retry_after(1)
            .with_detail(detail)
    };
    let sandbox = json!({"backend": state.sandbox.backend, "works": state.sandbox.works});
    if state.config.needs_sandbox() && !state.sandbox.works {
        return Err(ApiError::new(ErrorCode::SandboxUnavailable, "the sandbox does not work on this replica")
            .with_detail(state.sandbox.detail.clone()));
    }
    match tokio::time::timeout(READY_TIMEOUT, state.store.health.ping()).await {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready", "store": store, "sandbox": sandbox}))),
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(_) => Err(unavailable(format!("no answer within {READY_TIMEOUT:?}"))),
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render())
}
