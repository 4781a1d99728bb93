//! One streamed model call outside any session (llm-gateway's
//! `POST /summarize`): no loop, no tools, no relay, nothing stored. It goes
//! through [`model_call::call`] like every call — charged to the tenant's
//! token budget, traced and measured — and its text and reasoning arrive on
//! a bounded channel as they stream; what it used comes back at its end.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::model_call::{self, ModelCall, Output};
pub use super::model_call::{Delta, Failure};
use crate::{
    config::Config,
    domain::{ChatMessage, FailureCode, Usage},
    providers::{ModelRequest, Providers},
    store::Quotas,
    telemetry::{metrics::Metrics, timing::UpstreamTime},
};

/// What a one-shot call needs from the app, and who it is charged to.
pub struct OneShot<'a> {
    pub config: &'a Config,
    pub providers: &'a Providers,
    pub budget: &'a dyn Quotas,
    pub metrics: &'a Metrics,
    pub tenant: &'a str,
    /// The call's own id, standing in for a session's in its span.
    pub call_id: &'a str,
}

/// How a one-shot call ends when it does not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneShotError {
    Failed(Failure),
    /// Cancelled, or its reader went away.
    Cancelled,
}

/// Calls the model `model_id` (a configured alias or an id a pattern
/// serves, already checked for the tenant) with `messages`, sending what
/// it streams to `deltas`. Wakes on the model's stream, or `cancelled`.
pub async fn stream(
    one: &OneShot<'_>,
    model_id: &str,
    messages: Vec<ChatMessage>,
    deltas: &mpsc::Sender<Delta>,
    cancelled: &CancellationToken,
) -> Result<Usage, OneShotError> {
    let resolved = one.config.model(model_id);
    let Some((model, provider)) = resolved.and_then(|m| Some((m.config, one.providers.get(one.tenant, m.key)?))) else {
        let message = format!("the model {model_id:?} is not configured");
        return Err(OneShotError::Failed(Failure { code: FailureCode::UnknownModel, message, retry_after_secs: None }));
    };
    let request = ModelRequest::plain(&model, messages);
    // Not a turn: nothing reports this upstream time.
    let upstream = UpstreamTime::default();
    let call = ModelCall {
        provider: provider.as_ref(),
        model: &model,
        config: one.config,
        tenant: one.tenant,
        session_id: one.call_id,
        budget: one.budget,
        metrics: one.metrics,
        upstream: &upstream,
    };
    match model_call::call(&call, request, Output::Deltas(deltas), cancelled).await {
        Ok(output) => Ok(output.usage),
        Err(e) => Err(match e.into_failure() {
            Ok(failure) => OneShotError::Failed(failure),
            // Cancelled; a session error cannot come from a call that has
            // no session to emit to.
            Err(_) => OneShotError::Cancelled,
        }),
    }
}
