//! One turn of the agent loop, from its last checkpoint to its end:
//!
//! ```text
//! loop:
//!   tool calls pending?  → tools phase (run, relay, pause); fold results into the history
//!   iteration limit?     → end: max_iterations
//!   model step           → stream, emit, plan the tool calls it asked for; checkpoint
//!   no tool calls?       → end: final
//! ```
//!
//! Checkpoints follow every model response and every tool result, so a
//! replica that takes the session over starts again here without re-running
//! finished tools; a model step cut short is generated again, after a
//! `step_restarted` event.

use super::{
    Orchestrator, context,
    step::{self, StepError},
    tools_phase::{self, Phase},
};
use crate::{
    config::ModelConfig,
    protocol::{EventKind, PendingCall, PendingRelay, TurnEndReason},
    providers::{ChatMessage, ModelProvider, ModelRequest, ProviderError, Role},
    sessions::{RunHandle, SessionError, main_agent},
    store::TokenWindow,
};

/// `Retry-After` for a provider's rate limit that did not say how long.
const PROVIDER_RETRY_AFTER_SECS: u64 = 10;

/// How a turn stops.
pub(super) enum End {
    Finished(TurnEndReason),
    Paused {
        relays: Vec<PendingRelay>,
        calls: Vec<PendingCall>,
    },
    Failed {
        code: &'static str,
        message: String,
        /// For a rate limit: when a retry may pass.
        retry_after_secs: Option<u64>,
    },
    /// Lease lost or shutting down: write nothing; whoever holds the
    /// session next carries it on.
    Stopped,
}

impl End {
    fn failed(code: &'static str, message: impl Into<String>) -> Self {
        Self::Failed { code, message: message.into(), retry_after_secs: None }
    }
}

/// Runs the turn to its end and records it. Logs one line at its start and
/// one at its end (ids, outcome and counts: never message text; the span
/// around the task carries the session, tenant and trace ids).
pub(super) async fn run(orchestrator: &Orchestrator, mut handle: RunHandle) {
    tracing::info!(model = %handle.doc().model, "turn started");
    let end = match drive(orchestrator, &mut handle).await {
        Ok(end) => end,
        Err(e) => {
            tracing::warn!(session = %handle.key().id, error = %e, "turn stopped by a store error");
            End::Stopped
        }
    };
    let key = handle.key().id.clone();
    let state = &handle.doc().turn_state;
    let (iterations, usage) = (state.iterations, state.usage);
    let (input_tokens, output_tokens) = (usage.input_tokens, usage.output_tokens);
    match &end {
        End::Finished(reason) => {
            tracing::info!(outcome = ?reason, iterations, input_tokens, output_tokens, "turn ended")
        }
        End::Paused { relays, calls } => {
            tracing::info!(outcome = "paused", relays = relays.len(), calls = calls.len(), "turn paused")
        }
        End::Failed { code, .. } => tracing::info!(outcome = "failed", code = *code, iterations, "turn ended"),
        End::Stopped => tracing::info!(outcome = "stopped", "turn left to the next lease holder"),
    }
    let result = match end {
        End::Finished(reason) => handle.finish(reason, iterations, usage).await,
        End::Paused { relays, calls } => handle.pause(relays, calls).await,
        End::Failed { code, message, retry_after_secs } => handle.fail(code, &message, retry_after_secs).await,
        End::Stopped => Ok(()),
    };
    if let Err(e) = result {
        tracing::warn!(session = %key, error = %e, "could not record the end of the turn");
    }
}

async fn drive(orchestrator: &Orchestrator, handle: &mut RunHandle) -> Result<End, SessionError> {
    let (alias, tenant) = (handle.doc().model.clone(), handle.doc().tenant.clone());
    let (Some(model), Some(provider)) =
        (orchestrator.config.models.get(&alias), orchestrator.providers.get(&tenant, &alias))
    else {
        return Ok(End::failed("unknown_model", format!("the model {alias:?} is not configured")));
    };
    let max_iterations = handle.doc().options.max_iterations.unwrap_or(orchestrator.config.agent.max_iterations).max(1);
    let mut restarted = handle.taken_over_from().is_some();
    loop {
        if handle.doc().cancel_requested {
            return Ok(End::Finished(TurnEndReason::Cancelled));
        }
        if handle.cancelled().is_cancelled() {
            return stopped_or_cancelled(handle).await;
        }
        if !handle.doc().turn_state.calls.is_empty() {
            match tools_phase::run(orchestrator, handle, model, restarted).await? {
                Phase::Done => {}
                Phase::End(end) => return Ok(end),
            }
            restarted = false;
            handle
                .checkpoint(|doc| {
                    for planned in std::mem::take(&mut doc.turn_state.calls) {
                        let output = planned.result.map(|r| r.output).unwrap_or_default();
                        doc.messages.push(ChatMessage::tool_result(planned.call.id, output));
                    }
                })
                .await?;
        }
        if handle.doc().turn_state.iterations >= max_iterations {
            return Ok(End::Finished(TurnEndReason::MaxIterations));
        }
        if restarted {
            let step = handle.doc().turn_state.iterations + 1;
            let replica = handle.sessions().replica().to_string();
            handle.append(&main_agent(), vec![EventKind::StepRestarted { step, replica }]).await?;
            restarted = false;
        }
        if let Some(end) = fit_context(orchestrator, handle, model, provider.as_ref()).await? {
            return Ok(end);
        }
        let request = request(orchestrator, handle, model);
        let reserved = match reserve_tokens(orchestrator, handle, &request).await {
            Ok(reserved) => reserved,
            Err(end) => return Ok(end),
        };
        let (session_id, tenant) = (handle.key().id.clone(), handle.key().tenant.clone());
        let model_call = step::ModelCall {
            provider: provider.as_ref(),
            model,
            tenant: &tenant,
            session_id: &session_id,
            metrics: handle.sessions().metrics(),
            upstream: handle.upstream_time(),
        };
        let result =
            step::run(&model_call, request, &handle.emitter(), &handle.cancelled().clone(), &main_agent()).await;
        if let Some(reservation) = reserved {
            // A call that failed reports no usage: its reservation is given back.
            let used = result.as_ref().map_or(0, |o| o.usage.input_tokens + o.usage.output_tokens);
            reservation.settle(handle, used).await;
        }
        let output = match result {
            Ok(output) => output,
            Err(StepError::Cancelled) => return stopped_or_cancelled(handle).await,
            Err(StepError::Session(e)) => return Err(e),
            Err(StepError::Provider(e)) => return Ok(provider_failure(&e)),
        };
        let mut total = handle.doc().turn_state.usage;
        total.add(&output.usage);
        // Durable, and so is every delta emitted before it.
        handle.append(&main_agent(), vec![EventKind::Usage { usage: output.usage, total }]).await?;
        let plan = tools_phase::plan(orchestrator, handle, &output.calls).await?;
        let assistant = ChatMessage {
            tool_calls: output.calls.clone(),
            content: (!output.text.is_empty()).then(|| output.text.clone()),
            ..ChatMessage::text(Role::Assistant, "")
        };
        handle
            .checkpoint(|doc| {
                doc.messages.push(assistant.clone());
                doc.turn_state.iterations += 1;
                doc.turn_state.usage.add(&output.usage);
                doc.usage.add(&output.usage);
                plan.apply(doc);
            })
            .await?;
        plan.announce(handle).await?;
        if output.calls.is_empty() {
            return Ok(End::Finished(TurnEndReason::Final));
        }
    }
}

/// The turn's token was cancelled: by a cancel request (end the turn as
/// cancelled) or by shutdown / a lost lease (stop, write nothing).
pub(super) async fn stopped_or_cancelled(handle: &mut RunHandle) -> Result<End, SessionError> {
    match handle.reload().await {
        Ok(doc) if doc.cancel_requested => Ok(End::Finished(TurnEndReason::Cancelled)),
        _ => Ok(End::Stopped),
    }
}

fn provider_failure(error: &ProviderError) -> End {
    let (code, message) = match error {
        ProviderError::RateLimited { retry_after } => {
            return End::Failed {
                code: "rate_limited",
                message: "the model provider is rate limiting requests".to_string(),
                retry_after_secs: Some(retry_after.unwrap_or(PROVIDER_RETRY_AFTER_SECS)),
            };
        }
        ProviderError::Http { status, message, .. } => {
            ("upstream_error", format!("the model provider answered HTTP {status}: {message}"))
        }
        ProviderError::Timeout(what) => ("upstream_timeout", format!("the model provider timed out ({what})")),
        ProviderError::Disconnected(_) => {
            ("upstream_disconnected", "the connection to the model provider was lost mid-answer".to_string())
        }
        ProviderError::Protocol(detail) => {
            ("upstream_error", format!("the model provider's answer was unusable: {detail}"))
        }
    };
    End::failed(code, message)
}

/// The model request for the next step: system prompt, history, tools.
fn request(orchestrator: &Orchestrator, handle: &RunHandle, model: &ModelConfig) -> ModelRequest {
    let doc = handle.doc();
    ModelRequest {
        model: model.model.clone(),
        messages: orchestrator.messages_with_system(doc),
        tools: orchestrator.tool_specs(&doc.options),
        max_output_tokens: model.max_output_tokens,
        response_format: doc.options.response_format.clone(),
    }
}

/// Compacts the history when prompt plus reserved output passes the
/// threshold; fails the turn when even that does not make it fit.
async fn fit_context(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
    provider: &dyn ModelProvider,
) -> Result<Option<End>, SessionError> {
    let messages = orchestrator.messages_with_system(handle.doc());
    let before = context::estimate(&messages);
    if !context::needs_compaction(before, model) {
        return Ok(None);
    }
    let agent = main_agent();
    handle.append(&agent, vec![EventKind::CompactionStarted { tokens: before, messages: messages.len() }]).await?;
    let summary = match super::compaction::summarize(provider, model, &messages, handle.cancelled()).await {
        Ok(summary) => summary,
        Err(StepError::Cancelled) => return stopped_or_cancelled(handle).await.map(Some),
        Err(StepError::Provider(e)) => return Ok(Some(provider_failure(&e))),
        Err(StepError::Session(e)) => return Err(e),
    };
    let compacted = super::compaction::compacted(&handle.doc().messages, &summary);
    handle.checkpoint(|doc| doc.messages = compacted.clone()).await?;
    let after = context::estimate(&orchestrator.messages_with_system(handle.doc()));
    handle
        .append(&agent, vec![EventKind::CompactionDone { tokens_before: before, tokens_after: after, summary }])
        .await?;
    if context::needs_compaction(after, model) {
        return Ok(Some(End::failed(
            "context_overflow",
            format!(
                "the conversation needs about {after} tokens and does not fit in the model's context window ({}) \
                 even after compaction",
                model.context_window
            ),
        )));
    }
    Ok(None)
}

/// Tokens of a model call reserved in the tenant's per-minute budget.
struct Reservation {
    tenant: String,
    window: TokenWindow,
    estimate: u64,
}

impl Reservation {
    /// Corrects the reservation to what the call used.
    async fn settle(self, handle: &RunHandle, used: u64) {
        let delta = used as i64 - self.estimate as i64;
        if let Err(e) = handle.sessions().token_budget().correct_tokens(&self.tenant, self.window, delta).await {
            tracing::warn!(tenant = %self.tenant, error = %e, "cannot correct the token count");
        }
    }
}

/// Reserves the estimated tokens of a model call (prompt plus the output it
/// may write) in the tenant's per-minute budget, when it has one. `Err(end)`
/// when the budget is spent (or cannot be checked and limits fail closed).
async fn reserve_tokens(
    orchestrator: &Orchestrator,
    handle: &RunHandle,
    request: &ModelRequest,
) -> Result<Option<Reservation>, End> {
    let tenant = handle.doc().tenant.clone();
    let limit = orchestrator.config.tenants.get(&tenant).and_then(|t| t.rate_limit).and_then(|l| l.tokens_per_minute);
    let Some(limit) = limit else { return Ok(None) };
    let estimate = context::estimate(&request.messages) + u64::from(request.max_output_tokens);
    match handle.sessions().token_budget().reserve_tokens(&tenant, estimate, limit).await {
        Ok(Some(window)) => Ok(Some(Reservation { tenant, window, estimate })),
        Ok(None) => {
            handle.sessions().metrics().rate_limit(&tenant, "limited_tokens");
            let retry_after = TokenWindow::seconds_left();
            Err(End::Failed {
                code: "rate_limited",
                message: format!(
                    "the tenant's budget of {limit} model tokens per minute is spent; retry in {retry_after} s"
                ),
                retry_after_secs: Some(retry_after),
            })
        }
        Err(e) if orchestrator.config.on_store_error == crate::config::StoreFailure::FailOpen => {
            tracing::warn!(tenant = %tenant, error = %e, "token budget unchecked (fail open)");
            Ok(None)
        }
        Err(_) => Err(End::failed("store_unavailable", "the token budget cannot be checked")),
    }
}
