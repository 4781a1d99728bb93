//! The tool calls of one model response: deciding each (permissions),
//! running the permitted ones in parallel, taking up relay decisions, and
//! pausing for the client. Every result is committed with its event as it
//! arrives (and with the tool's change of the session's state, if it asked
//! for one), so a takeover never runs a finished call again.

use futures::{StreamExt, stream::FuturesUnordered};
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{Orchestrator, context, end::End, permissions, permissions::Verdict, subagent};
use crate::{
    config::ModelConfig,
    domain::{ApprovalMode, CallDecision, FrontendMode, PermissionRules, ToolCall, ToolOutcome, Truncation},
    sessions::{RunHandle, SessionError, Stop},
    telemetry::attributes as attr,
};

pub(super) enum Phase {
    /// Every call has its result.
    Done,
    End(End),
}

/// What a noop-mode frontend tool answers when the request gives no
/// `noop_response` (HolmesGPT's default).
pub const NOOP_RESPONSE: &str = "The action was performed successfully in the user's browser.";

/// Decides every call of a model response (in order), and the request
/// rules after the decisions (an `allowOnce` rule is used up by its call).
/// Relays are indexed before the plan is committed, so a fast decision
/// finds its session.
pub(super) async fn plan(
    orchestrator: &Orchestrator,
    handle: &RunHandle,
    calls: &[ToolCall],
) -> Result<(Vec<CallDecision>, PermissionRules), SessionError> {
    let options = handle.session().options();
    let defaults = orchestrator.default_tools(handle.session().tenant());
    let mut rules = options.rules.clone();
    let mcp_servers = orchestrator.mcp_servers_of(handle.session().tenant());
    let mut decisions = Vec::with_capacity(calls.len());
    for call in calls {
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let mcp_policy = match crate::config::mcp::server_of(&call.name) {
            // Boxed: an MCP server's listing is 5.7 KB of future state
            // (release build), which every turn held inline for as long as it
            // lived, MCP tools or not.
            Some(_) => {
                Box::pin(orchestrator.mcp.permission(&mcp_servers, &call.name, handle.sessions().metrics())).await
            }
            None => Ok(None),
        };
        let mcp_policy = match mcp_policy {
            Ok(policy) => policy,
            Err(unavailable) => {
                // Its server is down: the model is told so.
                decisions.push(CallDecision::Answer { outcome: ToolOutcome::error(unavailable), announce: false });
                continue;
            }
        };
        let decision = if let Some(tool) = options.frontend_tools.iter().find(|t| t.name == call.name) {
            match tool.mode {
                FrontendMode::Pause => CallDecision::Client,
                FrontendMode::Noop => {
                    let response =
                        (tool.noop_response.clone()).filter(|r| !r.is_empty()).unwrap_or_else(|| NOOP_RESPONSE.into());
                    CallDecision::Answer { outcome: ToolOutcome::Success(response), announce: true }
                }
            }
        } else if call.name == subagent::TOOL_NAME && defaults.has(subagent::TOOL_NAME) {
            CallDecision::Run
        } else if let Some(policy) = orchestrator
            .tools
            .get(&call.name)
            .map(|tool| tool.permission)
            .or(mcp_policy)
            .or_else(|| defaults.has(&call.name).then(|| defaults.permission(&call.name)))
        {
            let verdict =
                permissions::decide(policy, &call.name, &call.id, &arguments, &mut rules, &options.session_allow);
            match (verdict, options.approval) {
                (Verdict::Allow, _) => CallDecision::Run,
                (Verdict::Deny(reason), _) => {
                    CallDecision::Answer { outcome: ToolOutcome::Denied { reason }, announce: false }
                }
                (Verdict::Ask, ApprovalMode::Refuse) => CallDecision::Answer {
                    outcome: ToolOutcome::error(format!(
                        "Tool call rejected for security reasons: the tool {} needs approval, and this session's \
                         client does not give approvals",
                        call.name
                    )),
                    announce: false,
                },
                (Verdict::Ask, _) => {
                    let relay_id = format!("relay_{}", uuid::Uuid::new_v4().simple());
                    handle.sessions().put_relay(&relay_id, handle.key()).await?;
                    CallDecision::Ask { relay_id }
                }
            }
        } else if options.undeclared_tools_are_client {
            // Its client may declare tools only in its UI: the call is the client's.
            CallDecision::Client
        } else {
            let outcome = ToolOutcome::error(format!("there is no tool named {:?}", call.name));
            CallDecision::Answer { outcome, announce: false }
        };
        decisions.push(decision);
    }
    Ok((decisions, rules))
}

/// Runs the tools phase until every call has a result, or the turn must
/// pause or stop.
pub(super) async fn run(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
) -> Result<Phase, SessionError> {
    let mut deadline = Instant::now() + orchestrator.config.agent.relay_timeout;
    loop {
        if let Some(end) = run_permitted(orchestrator, handle, model).await? {
            return Ok(Phase::End(end));
        }
        let session = handle.session();
        if session.calls_done() {
            return Ok(Phase::Done);
        }
        if session.waits_for_client() {
            return Ok(Phase::End(End::Paused));
        }
        // Live relays: wait for decisions written on any replica.
        let waiting = tracing::info_span!(
            "relay_wait",
            { attr::OTEL_NAME } = "relay_wait",
            { attr::RELAYS } = session.live_relays().len() as i64,
            { attr::GEN_AI_CONVERSATION_ID } = &*handle.key().id,
        );
        match wait_for_decisions(handle, deadline).instrument(waiting).await? {
            Wait::Decided => {}
            Wait::TimedOut => {
                for _ in handle.session().live_relays() {
                    handle.sessions().metrics().relay("timed_out");
                }
                let reason = format!(
                    "no permission decision arrived within {} s",
                    orchestrator.config.agent.relay_timeout.as_secs()
                );
                handle.transition(|s| s.time_out_relays(&reason)).await?;
                deadline = Instant::now() + orchestrator.config.agent.relay_timeout;
            }
            Wait::Stop => return Ok(Phase::End(End::Stopped)),
        }
    }
}

/// Runs every permitted call without a result, in parallel, committing
/// each result as it arrives. A drain lets the calls in flight finish (so
/// they are not run again elsewhere) before the turn is handed off; any
/// other stop leaves them.
async fn run_permitted(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
) -> Result<Option<End>, SessionError> {
    let runnable = handle.session().runnable();
    if runnable.is_empty() {
        return Ok(None);
    }
    let context = orchestrator.exec_context(handle);
    let mut running: FuturesUnordered<_> = runnable
        .into_iter()
        .map(|call| {
            let context = context.clone();
            async move {
                // A call that may change files holds the workspace from its
                // start to its commit: the commit carries its changes alone.
                let held = match context.changes_files(&call) {
                    true => match context.workspace().await {
                        Ok(workspace) => Some((workspace.lock().await, workspace)),
                        Err(_) => None,
                    },
                    false => None,
                };
                let reply = context.execute(&call, 0).await;
                (call, reply, held)
            }
        })
        .collect();
    let cancelled = handle.cancelled().clone();
    let limit = context::tool_result_limit(model);
    let mut stopping = false;
    loop {
        let next = tokio::select! {
            next = running.next() => next,
            () = cancelled.cancelled(), if !stopping => {
                if handle.stop_reason() != Some(Stop::Drain) {
                    return Ok(Some(End::Stopped));
                }
                stopping = true;
                continue;
            }
        };
        let Some((call, reply, held)) = next else {
            return Ok(stopping.then_some(End::Stopped));
        };
        let (mut outcome, mut changes) = (reply.outcome, None);
        if let Some((_guard, workspace)) = &held {
            match workspace.changes().await {
                Ok(found) => {
                    if !found.notes.is_empty() {
                        outcome = with_notes(outcome, &found.notes);
                    }
                    changes = Some(found);
                }
                Err(e) => {
                    tracing::warn!(session = %handle.key().id, error = %e, "cannot read the workspace's changes");
                    return Ok(Some(End::Stopped));
                }
            }
        }
        let (outcome, truncation) = truncated(&call, outcome, limit);
        let delta = reply.state_delta.as_ref();
        let files = changes.as_ref().map(|c| c.write.clone()).unwrap_or_default();
        match reply.shaped {
            Some(result) => {
                let finish =
                    |s: &mut crate::domain::Session| s.finish_tool_with_result(&call.id, outcome, truncation, result);
                handle.transition_with_files(finish, files).await?;
            }
            None => {
                handle.transition_with_files(|s| s.finish_tool(&call.id, outcome, truncation, delta), files).await?;
            }
        }
        if let (Some((_guard, workspace)), Some(changes)) = (held, changes) {
            workspace.accept(changes);
        }
    }
}

/// The outcome with what the workspace did not keep said after it.
fn with_notes(outcome: ToolOutcome, notes: &[String]) -> ToolOutcome {
    let note = format!("\n[workspace] {}", notes.join("; "));
    match outcome {
        ToolOutcome::Success(text) => ToolOutcome::Success(text + &note),
        ToolOutcome::Error(text) => ToolOutcome::Error(text + &note),
        denied => denied,
    }
}

/// The outcome cut to fit the context window, and how it was cut.
fn truncated(call: &ToolCall, outcome: ToolOutcome, limit: u64) -> (ToolOutcome, Option<Truncation>) {
    let text = match &outcome {
        ToolOutcome::Success(text) | ToolOutcome::Error(text) => text,
        ToolOutcome::Denied { .. } => return (outcome, None),
    };
    let (kept, cut) = context::truncate(text, limit);
    let Some((end_index, original_token_count)) = cut else { return (outcome, None) };
    let truncation = Truncation {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        start_index: 0,
        end_index,
        original_token_count,
    };
    let outcome = match outcome {
        ToolOutcome::Success(_) => ToolOutcome::Success(kept),
        _ => ToolOutcome::Error(kept),
    };
    (outcome, Some(truncation))
}

pub(super) enum Wait {
    Decided,
    TimedOut,
    /// Cancelled, draining, shut down, or taken over elsewhere.
    Stop,
}

/// Takes up the decisions other replicas recorded for this turn's relays,
/// waiting for them when there are none. Wakes on: a wake-up for this
/// session (a decision, a cancel, a takeover: each heard on the replica's
/// subscription), the deadline, or the turn's cancellation.
pub(super) async fn wait_for_decisions(handle: &mut RunHandle, deadline: Instant) -> Result<Wait, SessionError> {
    let wake = handle.wake();
    let cancelled = handle.cancelled().clone();
    loop {
        // Enabled before the read, so a decision recorded after it still wakes us.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let inbox = handle.inbox().await?;
        if cancelled.is_cancelled() {
            return Ok(Wait::Stop);
        }
        let live = handle.session().live_relays();
        let decisions: Vec<_> = inbox.decisions.into_iter().filter(|(relay, _)| live.contains(relay)).collect();
        if !decisions.is_empty() {
            for (relay_id, decision) in decisions {
                handle.apply(|s| s.decide_relay(&relay_id, &decision))?;
            }
            handle.commit().await?;
            return Ok(Wait::Decided);
        }
        if Instant::now() >= deadline {
            return Ok(Wait::TimedOut);
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = cancelled.cancelled() => return Ok(Wait::Stop),
        }
    }
}
