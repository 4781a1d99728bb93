//! What every handler can reach: the [`AppState`] that [`crate::app`]
//! builds once at start-up and the router hands to each request.
//!
//! It lives below `api/` and beside nothing: handlers take it, the app
//! builds it, and neither has to import the other for it.

use std::sync::Arc;

use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    config::Config, protocol::ModelLimits, providers::Providers, sandbox::Probe, sessions::Sessions, store::Store,
    telemetry::metrics::Metrics, workspace::Seeds,
};

/// What every handler can reach: one shared [`Shared`], so the clone each
/// request's extractors and middleware make is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    pub config: Arc<Config>,
    pub store: Store,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    /// Each model alias's context window and reserved output, for encoders.
    pub model_limits: ModelLimits,
    /// The model providers, shared with the orchestrator: one-shot calls
    /// (`/summarize`) are made by a handler, outside any turn.
    pub providers: Arc<Providers>,
    /// `ENABLED_PROMPTS`, parsed once at start-up (the orchestrator and the
    /// Holmes handler build the same system prompt from it).
    pub enabled_prompts: Arc<Option<Vec<String>>>,
    /// Cancelled when shutdown begins; long-lived streams end on it so clients
    /// reconnect to another replica.
    pub shutdown: CancellationToken,
    /// Every background task is spawned here; shutdown waits for them.
    pub tasks: TaskTracker,
    /// Whether the sandbox worked at start-up (`/readyz` reports it).
    pub sandbox: Arc<Probe>,
    /// Workspace templates, read at start-up.
    pub seeds: Arc<Seeds>,
}
