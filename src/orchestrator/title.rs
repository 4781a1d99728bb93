//! The title phase: after a turn's end that made the session's title due
//! (committed first, so no dialect's last frame waits for the title), the
//! owner asks the session's model for a title and commits it, giving the
//! session up with that commit.
//!
//! The call goes through [`model_call::call`] like every model call:
//! charged to the tenant's token budget, traced (`chat {model}`) and
//! measured; nothing streams to clients (a quiet call). It is bounded by
//! [`CALL_TIMEOUT`]. When it fails — a provider error, the budget, the
//! timeout, an answer with no words, a model no longer configured — the
//! title is the first words of the first user message
//! ([`title::fallback`]), so a stream waiting for the title never waits
//! for nothing. Titles are not logged (they are made of message content).
//!
//! Who makes the title when the owner goes away in the middle: the session
//! stays owned through the phase and needs an owner while the title is due
//! ([`crate::domain::Session::needs_owner`]), so the replica that takes it
//! over (the sweep of a dead instance's sessions, a read of the session, a
//! restart after a store failure) runs this phase again; the fenced commit
//! makes the title exactly once. A new turn started meanwhile takes the
//! session: this phase's commit is refused and the new turn's end makes the
//! title. A drain commits the fallback at once.

use std::time::Duration;

use super::{
    Orchestrator,
    model_call::{self, ModelCall, Output},
};
use crate::{
    domain::{Session, title},
    providers::ModelRequest,
    sessions::{RunHandle, SessionError, Stop},
    telemetry::timing::UpstreamTime,
};

/// The longest a title call may take before the fallback is used.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// A title is a few words: the most output a title call may write.
const MAX_OUTPUT_TOKENS: u32 = 64;

/// Makes the due title of `handle`'s session and commits it, giving the
/// session up; writes nothing if the session was lost meanwhile.
pub(super) async fn run(orchestrator: &Orchestrator, handle: RunHandle) -> Result<(), SessionError> {
    let title = match ask(orchestrator, &handle).await {
        Some(title) => title,
        None => match handle.stop_reason() {
            // Another instance runs it now, or the store failed (this
            // replica restarts the phase once it answers): write nothing.
            Some(Stop::Lost | Stop::StoreDown) => {
                handle.abandon().await;
                return Ok(());
            }
            _ => title::fallback(handle.session().history().unwrap_or_default()),
        },
    };
    tracing::info!(outcome = "titled", "session titled");
    handle.end(|session| session.set_title(title)).await
}

/// The model's title, or `None` when the call failed or was stopped.
async fn ask(orchestrator: &Orchestrator, handle: &RunHandle) -> Option<String> {
    let session = handle.session();
    // Titles were turned off after this one became due, or the run is
    // stopping (a cancel, a drain): the fallback, without a call.
    if !orchestrator.config.agent.titles || handle.cancelled().is_cancelled() {
        return None;
    }
    let resolved = orchestrator.config.model(session.model());
    let Some((model, provider)) =
        resolved.and_then(|m| Some((m.config, orchestrator.providers.get(session.tenant(), m.key)?)))
    else {
        tracing::warn!(outcome = "title_fallback", reason = "unknown_model", "title from the first message");
        return None;
    };
    let request = ModelRequest {
        max_output_tokens: MAX_OUTPUT_TOKENS.min(model.max_output_tokens),
        ..ModelRequest::plain(&model, title::request(session.history().unwrap_or_default()))
    };
    // Not the turn's: the turn was answered already.
    let upstream = UpstreamTime::default();
    let call = ModelCall {
        provider: provider.as_ref(),
        model: &model,
        config: &orchestrator.config,
        tenant: session.tenant(),
        session_id: session.id(),
        budget: handle.sessions().token_budget(),
        metrics: handle.sessions().metrics(),
        upstream: &upstream,
    };
    let result = bounded(&call, request, handle).await;
    match result.map(|output| title::normalize(&output.text)) {
        Ok(Some(title)) => Some(title),
        Ok(None) => {
            tracing::warn!(outcome = "title_fallback", reason = "no_words", "title from the first message");
            None
        }
        Err(e) => {
            if handle.stop_reason().is_none() {
                tracing::warn!(outcome = "title_fallback", reason = e.kind(), "title from the first message");
            }
            None
        }
    }
}

/// The call, cancelled after [`CALL_TIMEOUT`] (cancelling lets it give its
/// token reservation back) or when the run must stop.
async fn bounded(
    call: &ModelCall<'_>,
    request: ModelRequest,
    handle: &RunHandle,
) -> Result<crate::domain::StepOutput, model_call::StepError> {
    let cancel = handle.cancelled().child_token();
    let made = model_call::call(call, request, Output::Quiet, &cancel);
    tokio::pin!(made);
    match tokio::time::timeout(CALL_TIMEOUT, &mut made).await {
        Ok(result) => result,
        Err(_) => {
            cancel.cancel();
            made.await
        }
    }
}

/// Whether a run of `session` is only its title phase (a takeover after the
/// turn's end).
pub(super) fn only_title(session: &Session) -> bool {
    !session.status().is_active() && session.title_pending()
}
