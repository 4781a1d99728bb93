//! The tool calls of one model response: deciding each (permissions),
//! running the permitted ones in parallel, waiting for relay decisions, and
//! pausing for the client. Every result is checkpointed as it arrives, so a
//! takeover never runs a finished call again.

use std::time::Duration;

use futures::{StreamExt, stream::FuturesUnordered};
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{
    Orchestrator, context, permissions,
    permissions::Verdict,
    subagent,
    turn::{End, stopped_or_cancelled},
};
use crate::{
    config::ModelConfig,
    protocol::{EventKind, PendingCall, PendingRelay},
    providers::ToolCall,
    sessions::{
        RunHandle, SessionError, Status, main_agent,
        state::{ApprovalMode, CallPlan, CallResult, FrontendMode, PermissionRules, PlannedCall, ToolRule, Truncation},
    },
    telemetry::attributes as attr,
};

/// How often a relay wait re-reads the state even without a wake-up, in case
/// a wake-up was lost with a dropped subscription.
const RELAY_POLL: Duration = Duration::from_secs(2);

pub(super) enum Phase {
    /// Every call has its result.
    Done,
    End(End),
}

/// What a model response's tool calls became, before it is checkpointed.
pub(super) struct Plan {
    calls: Vec<PlannedCall>,
    relays: Vec<PendingRelay>,
    rules: PermissionRules,
    events: Vec<EventKind>,
}

impl Plan {
    pub fn apply(&self, doc: &mut crate::sessions::SessionDoc) {
        doc.turn_state.calls = self.calls.clone();
        doc.options.rules = self.rules.clone();
        if !self.relays.is_empty() {
            doc.pending_relays = self.relays.clone();
            doc.status = Status::AwaitingRelay;
        }
    }

    /// Tells clients, after the checkpoint (so a fast relay answer finds it).
    pub async fn announce(&self, handle: &RunHandle) -> Result<(), SessionError> {
        if !self.events.is_empty() {
            handle.append(&main_agent(), self.events.clone()).await?;
        }
        Ok(())
    }
}

/// Decides every call of a model response.
pub(super) async fn plan(
    orchestrator: &Orchestrator,
    handle: &RunHandle,
    calls: &[ToolCall],
) -> Result<Plan, SessionError> {
    let options = &handle.doc().options;
    let mut plan = Plan { calls: Vec::new(), relays: Vec::new(), rules: options.rules.clone(), events: Vec::new() };
    for call in calls {
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let announce = EventKind::ToolCall {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: arguments.clone(),
        };
        let (call_plan, result) = if let Some(tool) = options.frontend_tools.iter().find(|t| t.name == call.name) {
            plan.events.push(announce);
            match tool.mode {
                FrontendMode::Pause => (CallPlan::Client, None),
                FrontendMode::Noop => {
                    let response = tool.noop_response.clone().unwrap_or_else(|| "ok".into());
                    (CallPlan::Noop { response: response.clone() }, Some(success(response)))
                }
            }
        } else if call.name == subagent::TOOL_NAME {
            plan.events.push(announce);
            (CallPlan::Run, None)
        } else if let Some(tool) = orchestrator.tools.get(&call.name) {
            let verdict = permissions::decide(
                tool.permission,
                &call.name,
                &call.id,
                &arguments,
                &mut plan.rules,
                &options.session_allow,
            );
            match (verdict, options.approval) {
                (Verdict::Allow, _) => {
                    plan.events.push(announce);
                    (CallPlan::Run, None)
                }
                (Verdict::Deny(reason), _) => (CallPlan::Deny { reason: reason.clone() }, Some(denied(&reason))),
                (Verdict::Ask, ApprovalMode::Refuse) => {
                    let reason = format!(
                        "the tool {} needs approval, and this client does not give approvals \
                         (enable_tool_approval is off)",
                        call.name
                    );
                    (CallPlan::Deny { reason: reason.clone() }, Some(error(reason)))
                }
                (Verdict::Ask, mode) => {
                    let relay_id = format!("relay_{}", uuid::Uuid::new_v4().simple());
                    let session = handle.sessions();
                    session.put_relay(&relay_id, handle.key()).await?;
                    if mode == ApprovalMode::Relay {
                        let pending = PendingRelay {
                            relay_id: relay_id.clone(),
                            tool_call_id: call.id.clone(),
                            tool: call.name.clone(),
                            params: arguments.clone(),
                        };
                        plan.events.push(EventKind::RelayRequested(pending.clone()));
                        session.metrics().relay("requested");
                        plan.relays.push(pending);
                    }
                    (CallPlan::Ask { relay_id }, None)
                }
            }
        } else {
            (CallPlan::Run, Some(error(format!("there is no tool named {:?}", call.name))))
        };
        if let Some(result) = &result {
            plan.events.push(result_event(call, result));
        }
        plan.calls.push(PlannedCall { call: call.clone(), plan: call_plan, result });
    }
    Ok(plan)
}

/// Runs the tools phase until every call has a result, or the turn must
/// pause or stop.
pub(super) async fn run(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
    restarted: bool,
) -> Result<Phase, SessionError> {
    let mut announce_relays = restarted;
    let mut deadline = Instant::now() + orchestrator.config.agent.relay_timeout;
    loop {
        apply_decisions(handle).await?;
        if handle.cancelled().is_cancelled() {
            return stopped_or_cancelled(handle).await.map(Phase::End);
        }
        if let Some(end) = run_permitted(orchestrator, handle, model).await? {
            return Ok(Phase::End(end));
        }
        let open: Vec<&PlannedCall> = handle.doc().turn_state.calls.iter().filter(|c| c.result.is_none()).collect();
        let asks: Vec<PendingRelay> = open
            .iter()
            .filter_map(|c| match &c.plan {
                CallPlan::Ask { relay_id } => Some(PendingRelay {
                    relay_id: relay_id.clone(),
                    tool_call_id: c.call.id.clone(),
                    tool: c.call.name.clone(),
                    params: serde_json::from_str(&c.call.arguments).unwrap_or(Value::Null),
                }),
                _ => None,
            })
            .collect();
        let client: Vec<PendingCall> = open
            .iter()
            .filter(|c| c.plan == CallPlan::Client)
            .map(|c| PendingCall {
                tool_call_id: c.call.id.clone(),
                tool: c.call.name.clone(),
                arguments: serde_json::from_str(&c.call.arguments).unwrap_or(Value::Null),
            })
            .collect();
        if asks.is_empty() && client.is_empty() {
            return Ok(Phase::Done);
        }
        if asks.is_empty() || handle.doc().options.approval == ApprovalMode::Pause {
            return Ok(Phase::End(End::Paused { relays: asks, calls: client }));
        }
        // Live relays: wait for decisions written on any replica.
        if announce_relays {
            let events = asks.iter().cloned().map(EventKind::RelayRequested).collect();
            handle.append(&main_agent(), events).await?;
            announce_relays = false;
        }
        let waiting = tracing::info_span!(
            "relay_wait",
            { attr::OTEL_NAME } = "relay_wait",
            { attr::RELAYS } = asks.len() as i64,
            { attr::GEN_AI_CONVERSATION_ID } = &*handle.key().id,
        );
        match wait_for_decision(handle, deadline).instrument(waiting).await? {
            Wait::Decided => {}
            Wait::TimedOut => {
                for _ in &asks {
                    handle.sessions().metrics().relay("timed_out");
                }
                let reason = format!(
                    "no permission decision arrived within {} s",
                    orchestrator.config.agent.relay_timeout.as_secs()
                );
                deny_all(handle, &asks, &reason).await?;
                deadline = Instant::now() + orchestrator.config.agent.relay_timeout;
            }
            Wait::Stop => return stopped_or_cancelled(handle).await.map(Phase::End),
        }
    }
}

/// Runs every permitted call without a result, in parallel, checkpointing
/// each result as it arrives.
async fn run_permitted(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: &ModelConfig,
) -> Result<Option<End>, SessionError> {
    let runnable: Vec<(usize, ToolCall)> = handle
        .doc()
        .turn_state
        .calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.result.is_none() && c.plan == CallPlan::Run)
        .map(|(i, c)| (i, c.call.clone()))
        .collect();
    if runnable.is_empty() {
        return Ok(None);
    }
    let context = orchestrator.exec_context(handle);
    let mut running: FuturesUnordered<_> = runnable
        .into_iter()
        .map(|(index, call)| {
            let context = context.clone();
            async move {
                let outcome = context.execute(&call, 0).await;
                (index, call, outcome)
            }
        })
        .collect();
    let cancelled = handle.cancelled().clone();
    let limit = context::tool_result_limit(model);
    loop {
        let next = tokio::select! {
            next = running.next() => next,
            () = cancelled.cancelled() => return stopped_or_cancelled(handle).await.map(Some),
        };
        let Some((index, call, outcome)) = next else { return Ok(None) };
        let (output, cut) = context::truncate(&outcome.output, limit);
        let truncation = cut.map(|(end_index, original_token_count)| Truncation {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            start_index: 0,
            end_index,
            original_token_count,
        });
        let result = CallResult { status: outcome.status().into(), output };
        handle
            .checkpoint(|doc| {
                if let Some(planned) = doc.turn_state.calls.get_mut(index) {
                    planned.result = Some(result.clone());
                }
                doc.turn_state.truncations.extend(truncation.clone());
            })
            .await?;
        handle.append(&main_agent(), vec![result_event(&call, &result)]).await?;
    }
}

/// Takes up decisions written for this turn's relays: approved calls become
/// runnable, denied ones get a denial result, `always` adds a session rule.
async fn apply_decisions(handle: &mut RunHandle) -> Result<(), SessionError> {
    let doc = handle.doc();
    let mut updates: Vec<(usize, CallPlan, Option<CallResult>)> = Vec::new();
    let mut rules: Vec<ToolRule> = Vec::new();
    let mut events = Vec::new();
    let mut taken = Vec::new();
    for (i, planned) in doc.turn_state.calls.iter().enumerate() {
        let CallPlan::Ask { relay_id } = &planned.plan else { continue };
        if planned.result.is_some() {
            continue;
        }
        let Some(decision) = doc.decisions.iter().find(|d| d.relay_id == *relay_id) else { continue };
        taken.push(relay_id.clone());
        events.push(EventKind::RelayDecided {
            relay_id: relay_id.clone(),
            tool_call_id: planned.call.id.clone(),
            approved: decision.approved,
            always: decision.always,
        });
        let arguments: Value = serde_json::from_str(&planned.call.arguments).unwrap_or(Value::Null);
        if decision.approved {
            if decision.always {
                rules.push(permissions::always_rule(&planned.call.name, &arguments));
            }
            events.push(EventKind::ToolCall {
                tool_call_id: planned.call.id.clone(),
                name: planned.call.name.clone(),
                arguments,
            });
            updates.push((i, CallPlan::Run, None));
        } else {
            let reason = decision.reason.clone().unwrap_or_else(|| "the user denied this tool call".into());
            let result = denied(&reason);
            events.push(result_event(&planned.call, &result));
            updates.push((i, CallPlan::Deny { reason }, Some(result)));
        }
    }
    if taken.is_empty() {
        return Ok(());
    }
    handle
        .checkpoint(|doc| {
            for (i, plan, result) in &updates {
                if let Some(planned) = doc.turn_state.calls.get_mut(*i) {
                    planned.plan = plan.clone();
                    planned.result = result.clone();
                }
            }
            doc.decisions.retain(|d| !taken.contains(&d.relay_id));
            doc.pending_relays.retain(|r| !taken.contains(&r.relay_id));
            doc.options.session_allow.extend(rules.iter().cloned());
            if doc.pending_relays.is_empty() && doc.status == Status::AwaitingRelay {
                doc.status = Status::Running;
            }
        })
        .await?;
    handle.append(&main_agent(), events).await?;
    Ok(())
}

async fn deny_all(handle: &mut RunHandle, asks: &[PendingRelay], reason: &str) -> Result<(), SessionError> {
    let ids: Vec<&str> = asks.iter().map(|a| a.tool_call_id.as_str()).collect();
    let result = denied(reason);
    let events: Vec<EventKind> = handle
        .doc()
        .turn_state
        .calls
        .iter()
        .filter(|c| ids.contains(&c.call.id.as_str()))
        .map(|c| result_event(&c.call, &result))
        .collect();
    handle
        .checkpoint(|doc| {
            for planned in doc.turn_state.calls.iter_mut().filter(|c| ids.contains(&c.call.id.as_str())) {
                planned.plan = CallPlan::Deny { reason: reason.to_string() };
                planned.result = Some(result.clone());
            }
            doc.pending_relays.retain(|r| !ids.contains(&r.tool_call_id.as_str()));
            if doc.status == Status::AwaitingRelay {
                doc.status = Status::Running;
            }
        })
        .await?;
    handle.append(&main_agent(), events).await?;
    Ok(())
}

enum Wait {
    Decided,
    TimedOut,
    /// Cancelled, shut down, or the lease was lost.
    Stop,
}

/// Waits until a decision for one of the turn's relays is in the state.
/// Wakes on: a wake-up for this session, the periodic re-read, the deadline,
/// or the turn's cancellation.
async fn wait_for_decision(handle: &mut RunHandle, deadline: Instant) -> Result<Wait, SessionError> {
    let wake = handle.wake();
    let cancelled = handle.cancelled().clone();
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let doc = handle.reload().await?;
        if doc.cancel_requested {
            return Ok(Wait::Stop);
        }
        let decided = doc.turn_state.calls.iter().any(|c| match &c.plan {
            CallPlan::Ask { relay_id } => c.result.is_none() && doc.decisions.iter().any(|d| d.relay_id == *relay_id),
            _ => false,
        });
        if decided {
            return Ok(Wait::Decided);
        }
        if Instant::now() >= deadline {
            return Ok(Wait::TimedOut);
        }
        let poll = (Instant::now() + RELAY_POLL).min(deadline);
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(poll) => {}
            () = cancelled.cancelled() => return Ok(Wait::Stop),
        }
    }
}

fn success(output: String) -> CallResult {
    CallResult { status: "success".into(), output }
}

fn error(output: String) -> CallResult {
    CallResult { status: "error".into(), output }
}

fn denied(reason: &str) -> CallResult {
    CallResult { status: "denied".into(), output: format!("Permission denied: {reason}") }
}

pub(super) fn result_event(call: &ToolCall, result: &CallResult) -> EventKind {
    EventKind::ToolResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        status: result.status.clone(),
        output: Value::String(result.output.clone()),
    }
}
