//! One turn of the agent loop, from its last commit to its end:
//!
//! ```text
//! rlm mode?              → the REPL loop instead (`rlm/`)
//! a compaction turn?     → compact the history, end (zot's `compact`)
//! loop:
//!   tool calls open?     → tools phase (run, relay, pause)
//!   iteration limit?     → end: max_iterations
//!   model step           → stream, then one commit: the answer, its events, the plan of its tool calls
//!   no tool calls?       → end: final (in the same commit)
//! ```
//!
//! Every transition is committed with the events it implies, so a replica
//! that takes the session over starts again here without re-running
//! finished tools; a model step cut short is generated again after a
//! `step_restarted` event, or continued from its durable text.
//!
//! A turn's end that leaves the session's title due is committed without
//! giving the session up; the title phase (`title.rs`) follows, and a run
//! of a session whose turn is over is that phase alone (a takeover after
//! the end).

use std::sync::Arc;

use super::{
    Orchestrator, context,
    end::{End, step_failure},
    model_call::{self, Output},
    title,
    tools_phase::{self, Phase},
};
use crate::{
    config::ModelConfig,
    domain::{EventKind, FailureCode, Refused, Session, TurnEndReason},
    providers::{ModelProvider, ModelRequest},
    sessions::{RunHandle, SessionError, Stop, main_agent},
};

/// Runs the turn to its end and records it. Logs one line at its start and
/// one at its end (ids, outcome and counts: never message text; the span
/// around the task carries the session, tenant and trace ids).
///
/// A turn's future lives as long as its chat, at the size of its largest
/// state: every phase (the model call, the tools, the plan and commit of a
/// step, compaction, the turn's end and its title) is boxed when it runs,
/// so the turn holds only the phase it is in — a chat waiting on a relay
/// does not carry the model call's state (2.5 KiB less per held chat).
pub(super) async fn run(orchestrator: &Orchestrator, mut handle: RunHandle) {
    if title::only_title(handle.session()) {
        if let Err(e) = Box::pin(title::run(orchestrator, handle)).await {
            tracing::warn!(error = %e, "could not record the session's title");
        }
        return;
    }
    tracing::debug!(model = %handle.session().model(), "turn started");
    let (workspace_key, epoch) = (handle.key().clone(), handle.epoch());
    let end = match drive(orchestrator, &mut handle).await {
        Ok(end) => end,
        Err(e) => {
            tracing::warn!(session = %handle.key().id, error = %e, "turn stopped by a store error");
            End::Stopped
        }
    };
    let key = handle.key().id.clone();
    let (iterations, usage) = (handle.session().iterations(), handle.session().turn_usage());
    let (input_tokens, output_tokens) = (usage.input_tokens, usage.output_tokens);
    let result = match end {
        End::Finished(reason) => {
            tracing::info!(outcome = ?reason, iterations, input_tokens, output_tokens, "turn ended");
            let titles = orchestrator.config.agent.titles_for(handle.session().dialect());
            Box::pin(close(orchestrator, handle, |s| s.end(reason, titles))).await
        }
        End::Paused => {
            let (relays, calls) = (handle.session().pending_relays().len(), handle.session().pending_calls().len());
            tracing::info!(outcome = "paused", relays, calls, "turn paused");
            Box::pin(handle.end(|s| s.pause())).await
        }
        End::Failed { code, message, retry_after_secs } => {
            tracing::info!(outcome = "failed", code = code.as_str(), iterations, "turn ended");
            Box::pin(close(orchestrator, handle, |s| s.fail(code, &message, retry_after_secs))).await
        }
        End::Stopped => match handle.stop_reason() {
            Some(Stop::Cancel) => {
                tracing::info!(outcome = "cancelled", iterations, "turn ended");
                handle.cancel_taken();
                // A title still due from an earlier turn: the fallback, at once
                // (the run's token is cancelled).
                Box::pin(close(orchestrator, handle, |s| s.cancel())).await
            }
            reason => {
                match reason {
                    Some(Stop::Drain) => tracing::info!(outcome = "handed_off", "turn handed to another replica"),
                    _ => tracing::info!(outcome = "stopped", ?reason, "turn left to whoever runs the session next"),
                }
                Box::pin(handle.stop()).await
            }
        },
    };
    if let Err(e) = result {
        tracing::warn!(session = %key, error = %e, "could not record the end of the turn");
    }
    // The session leaves this replica (or waits): its files are in the store.
    orchestrator.workspaces.release(&workspace_key, epoch);
}

/// Commits the transition that ends the turn. It gives the session up,
/// unless the session's title is due: then the session is kept for the
/// title phase, which gives it up with the title.
async fn close(
    orchestrator: &Orchestrator,
    mut handle: RunHandle,
    transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, Refused>,
) -> Result<(), SessionError> {
    if let Err(e) = handle.apply(transition) {
        handle.abandon().await;
        return Err(e);
    }
    if !handle.session().title_pending() {
        return handle.release().await;
    }
    if let Err(e) = handle.commit().await {
        handle.abandon().await;
        return Err(e);
    }
    title::run(orchestrator, handle).await
}

async fn drive(orchestrator: &Orchestrator, handle: &mut RunHandle) -> Result<End, SessionError> {
    let (alias, tenant) = (handle.session().model().to_string(), handle.session().tenant().to_string());
    let resolved = orchestrator.config.model(&alias);
    let Some((model, provider)) = resolved.and_then(|m| Some((m.config, orchestrator.providers.get(&tenant, m.key)?)))
    else {
        return Ok(End::failed(FailureCode::UnknownModel, format!("the model {alias:?} is not configured")));
    };
    if handle.session().options().rlm.is_some() {
        return Box::pin(super::rlm::drive(orchestrator, handle, Arc::new(model.into_owned()), provider)).await;
    }
    let model = &*model;
    if handle.session().compacting_only() {
        let messages = orchestrator.messages_with_system(handle.session());
        let before = context::estimate(&messages);
        return Ok(match Box::pin(compact(orchestrator, handle, model, provider.as_ref(), messages, before)).await? {
            Fit::Fits(_) => End::Finished(TurnEndReason::Final),
            Fit::End(end) => end,
        });
    }
    let max_iterations =
        handle.session().options().max_iterations.unwrap_or(orchestrator.config.agent.max_iterations).max(1);
    loop {
        if handle.cancelled().is_cancelled() {
            return Ok(End::Stopped);
        }
        if !handle.session().calls_done() {
            match Box::pin(tools_phase::run(orchestrator, handle, model)).await? {
                Phase::Done => {}
                Phase::End(end) => return Ok(end),
            }
        }
        if handle.session().iterations() >= max_iterations {
            return Ok(End::Finished(TurnEndReason::MaxIterations));
        }
        let messages = match Box::pin(fit_context(orchestrator, handle, model, provider.as_ref())).await? {
            Fit::Fits(messages) => messages,
            Fit::End(end) => return Ok(end),
        };
        let mut request = request(orchestrator, handle, model, messages);
        let servers = orchestrator.mcp_servers_of(&handle.key().tenant);
        if !servers.is_empty() {
            request.tools.extend(orchestrator.mcp.specs(&servers, handle.sessions().metrics()).await);
        }
        request.prefill = handle.take_continuation();
        let emitter = handle.emitter();
        let agent = main_agent();
        // Boxed like every phase: the turn's own future stays small for
        // the whole chat (a relay's wait holds it too), the call's state
        // lives only while the model streams.
        let result = {
            let call = orchestrator.model_call(handle, model, provider.as_ref());
            let output = Output::Events { emitter: &emitter, agent: &agent };
            Box::pin(model_call::call(&call, request, output, handle.cancelled())).await
        };
        let output = match result {
            Ok(output) => output,
            Err(e) => return step_failure(e),
        };
        let (decisions, rules) = Box::pin(tools_phase::plan(orchestrator, handle, &output.calls)).await?;
        let done = output.calls.is_empty();
        handle.apply(|s| s.complete_step(output, decisions, rules))?;
        if done {
            // Committed with the turn's end, in one commit.
            return Ok(End::Finished(TurnEndReason::Final));
        }
        Box::pin(handle.commit()).await?;
    }
}

/// The model request for the next step: `messages` (system prompt and
/// history), tools.
fn request(
    orchestrator: &Orchestrator,
    handle: &RunHandle,
    model: &ModelConfig,
    messages: Vec<crate::domain::ChatMessage>,
) -> ModelRequest {
    let session = handle.session();
    ModelRequest {
        model: model.model.clone(),
        messages,
        tools: orchestrator.tool_specs(session.tenant(), session.options()),
        max_output_tokens: model.max_output_tokens,
        response_format: session.options().response_format.clone(),
        prefill: None,
        reasoning: session.options().reasoning.clone(),
    }
}

/// What [`fit_context`] and [`compact`] found.
enum Fit {
    /// The history fits (as it was, or replaced by its summary): these are
    /// the messages as the model sees them.
    Fits(Vec<crate::domain::ChatMessage>),
    /// Even the summary does not fit, or summarizing failed: the turn ends.
    End(End),
}

/// Compacts the history when prompt plus reserved output passes the
/// threshold; fails the turn when even that does not make it fit.
async fn fit_context(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
    provider: &dyn ModelProvider,
) -> Result<Fit, SessionError> {
    let messages = orchestrator.messages_with_system(handle.session());
    let before = context::estimate(&messages);
    if !context::needs_compaction(before, model) {
        return Ok(Fit::Fits(messages));
    }
    compact(orchestrator, handle, model, provider, messages, before).await
}

/// Replaces the history by its summary (`messages` as the model sees them,
/// about `before` tokens), handing back the messages after it; fails the
/// turn when even that does not fit.
async fn compact(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
    provider: &dyn ModelProvider,
    messages: Vec<crate::domain::ChatMessage>,
    before: u64,
) -> Result<Fit, SessionError> {
    handle.transition(|s| s.begin_compaction(before)).await?;
    let result = {
        let call = orchestrator.model_call(handle, model, provider);
        super::compaction::summarize(&call, model, &messages, handle.cancelled()).await
    };
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => return step_failure(e).map(Fit::End),
    };
    let compacted = super::compaction::compacted(handle.session().history().unwrap_or_default(), &summary);
    // The messages the next request sends: the history is `compacted` once
    // the transition below is made.
    let messages = orchestrator.messages_with_system_of(handle.session(), &compacted);
    let after = context::estimate(&messages);
    handle.transition(|s| s.compacted(compacted, summary, before, after)).await?;
    if context::needs_compaction(after, model) {
        return Ok(Fit::End(End::failed(
            FailureCode::ContextOverflow,
            format!(
                "the conversation needs about {after} tokens and does not fit in the model's context window ({}) \
                 even after compaction",
                model.context_window
            ),
        )));
    }
    Ok(Fit::Fits(messages))
}
