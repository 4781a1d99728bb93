//! HTTP handlers, one file (or folder) per dialect. Handlers are thin:
//! extract, call one function of the service layer, map the result. No
//! business logic here. The router below builds each dialect's routes from
//! the registry of dialects ([`crate::config::Dialect`]) and checks that
//! every route lies under its dialect's prefixes there.

mod ag_ui;
mod ai_sdk;
mod client_chat;
mod console;
mod extract;
mod holmes;
mod llm_gateway;
mod native;
mod openai_messages;
mod ops;
mod responses;
mod stream;
mod workspace;
mod zot;

use axum::{
    Router,
    routing::{MethodRouter, get, post},
};

use crate::{config::Dialect, error::ApiError, state::AppState};

/// Every route of the gateway; the session console's when `console` is on.
pub fn routes(console: bool) -> Router<AppState> {
    let mut routes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics));
    for dialect in Dialect::ALL {
        routes = routes.merge(dialect_routes(dialect).router);
    }
    if console { routes.merge(console::routes()) } else { routes }
}

/// The routes of each dialect of the registry ([`Dialect`]).
fn dialect_routes(dialect: Dialect) -> DialectRoutes {
    let routes = DialectRoutes { dialect, router: Router::new() };
    match dialect {
        Dialect::Holmes => routes
            .route("/api/model", get(holmes::list_models))
            .route("/api/chat", post(holmes::chat))
            .route("/api/stream/chat", post(holmes::stream_chat))
            .route("/api/investigate", post(holmes::investigate))
            .route("/api/stream/investigate", post(holmes::stream_investigate))
            .route("/api/issue_chat", post(holmes::issue_chat))
            .route("/api/stream/issue_chat", post(holmes::stream_issue_chat)),
        Dialect::LlmGateway => routes
            .route("/models", get(llm_gateway::list_models))
            .route("/chat", post(llm_gateway::chat))
            .route("/chat/relay/{relay_id}", post(llm_gateway::relay))
            .route("/summarize", post(llm_gateway::summarize)),
        Dialect::Native => routes
            .route("/v1/sessions", post(native::create).get(native::list))
            .route("/v1/sessions/{id}", get(native::get).delete(native::delete))
            .route("/v1/sessions/{id}/events", get(native::events))
            .route("/v1/sessions/{id}/messages", post(native::send_message))
            .route("/v1/sessions/{id}/tool-results", post(native::tool_results))
            .route("/v1/sessions/{id}/relays/{relay_id}", post(native::decide_relay))
            .route("/v1/sessions/{id}/cancel", post(native::cancel))
            .route("/v1/sessions/{id}/workspace", get(workspace::get)),
        Dialect::AiSdk => routes
            .route("/v1/ai-sdk/chat", post(ai_sdk::chat))
            .route("/v1/ai-sdk/chat/{id}/stream", get(ai_sdk::reconnect)),
        Dialect::AgUi => routes.route("/v1/ag-ui", post(ag_ui::run)),
        Dialect::Zot => routes.route("/v1/zot", post(zot::rpc)),
        Dialect::Responses => routes
            .route("/v1/responses", post(responses::create))
            .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
            .route("/v1/responses/{id}/cancel", post(responses::cancel))
            .route("/v1/responses/{id}/input_items", get(responses::input_items)),
    }
}

/// One dialect's routes, each under the dialect's prefixes in the registry:
/// so `[anonymous] routes` and the error body a route answers with, both
/// read from the registry by path, are the dialect's own.
struct DialectRoutes {
    dialect: Dialect,
    router: Router<AppState>,
}

impl DialectRoutes {
    fn route(mut self, path: &str, handler: MethodRouter<AppState>) -> Self {
        assert_eq!(
            Dialect::of_path(path),
            Some(self.dialect),
            "{path} is not under the prefixes of {} in config/dialect.rs",
            self.dialect.as_str()
        );
        self.router = self.router.route(path, handler);
        self
    }
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// The model aliases and patterns the caller's tenant may use, as written.
fn visible_models(state: &AppState, principal: &crate::principal::Principal) -> Result<Vec<String>, ApiError> {
    let tenant =
        state.config.tenants.get(&*principal.tenant).ok_or_else(|| ApiError::unauthorized("unknown tenant"))?;
    Ok(tenant.visible_models(&state.config.models).into_iter().map(str::to_string).collect())
}

/// Refuses a model id that names no configured model (alias or pattern)
/// the caller's tenant may use, listing those it may.
fn check_model(state: &AppState, principal: &crate::principal::Principal, model: &str) -> Result<(), ApiError> {
    let tenant =
        state.config.tenants.get(&*principal.tenant).ok_or_else(|| ApiError::unauthorized("unknown tenant"))?;
    if state.config.model(model).is_some_and(|m| tenant.allows(m.key)) {
        return Ok(());
    }
    let allowed = visible_models(state, principal)?;
    Err(ApiError::new(
        crate::error::ErrorCode::UnknownModel,
        format!("unknown model {model:?}; allowed: {}", allowed.join(", ")),
    ))
}

/// The model a request names (checked), or the tenant's `default_model`
/// (see [`crate::config::Config::default_model`]); neither is a 400.
fn model_or_default(
    state: &AppState,
    principal: &crate::principal::Principal,
    model: Option<&str>,
) -> Result<String, ApiError> {
    let model = match model.filter(|m| !m.is_empty()) {
        Some(model) => model,
        None => state.config.default_model(&principal.tenant).ok_or_else(|| {
            ApiError::bad_request("no model given, and no default_model is configured for this tenant")
        })?,
    };
    check_model(state, principal, model)?;
    Ok(model.to_string())
}

/// Frontend tools may not shadow server tools (or the `agent` tool), and
/// names must be unique.
fn check_frontend_tools(state: &AppState, tools: &[crate::domain::FrontendTool]) -> Result<(), ApiError> {
    for (i, tool) in tools.iter().enumerate() {
        if state.config.tool(&tool.name).is_some() || tool.name == "agent" || tool.name.starts_with("mcp__") {
            return Err(ApiError::bad_request(format!("frontend tool {:?} has the name of a server tool", tool.name)));
        }
        if tools[..i].iter().any(|t| t.name == tool.name) {
            return Err(ApiError::bad_request(format!("frontend tool {:?} is declared twice", tool.name)));
        }
    }
    Ok(())
}
