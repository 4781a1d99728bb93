//! A scripted [`TurnRunner`]: stands in for the orchestrator so the session
//! machinery (log, leases, takeover, resume) is tested on its own. What a
//! turn does is chosen by the user message:
//!
//! - `gated N`: appends N text deltas, each only after the test releases one
//!   permit ([`ScriptedRunner::release`]), then ends the turn;
//! - `pause`: appends a delta, then pauses with one pending frontend call
//!   `call_1` (`render_chart`);
//! - after a resume (the pending call has its result): appends a delta
//!   quoting it and ends the turn.
//!
//! A run that is a takeover is counted and ends the turn at once.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use async_trait::async_trait;
use switchboard::{
    protocol::{AgentRef, EventKind, PendingCall, TurnEndReason},
    providers::{ToolCall, Usage},
    sessions::{
        RunHandle, TurnRunner,
        state::{CallPlan, PlannedCall},
    },
};
use tokio::sync::{Notify, Semaphore};

pub struct ScriptedRunner {
    pub runs: AtomicUsize,
    pub takeovers: AtomicUsize,
    takeover_seen: Notify,
    gate: Semaphore,
}

impl ScriptedRunner {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            runs: AtomicUsize::new(0),
            takeovers: AtomicUsize::new(0),
            takeover_seen: Notify::new(),
            gate: Semaphore::new(0),
        })
    }

    /// Lets `gated` turns append `n` more deltas.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Waits until a takeover has been run (by any replica sharing this runner).
    pub async fn wait_for_takeover(&self) {
        loop {
            let notified = self.takeover_seen.notified();
            if self.takeovers.load(Ordering::SeqCst) > 0 {
                return;
            }
            notified.await;
        }
    }
}

fn main_agent() -> AgentRef {
    AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
}

fn delta(text: impl Into<String>) -> EventKind {
    EventKind::TextDelta { text: text.into() }
}

#[async_trait]
impl TurnRunner for ScriptedRunner {
    async fn run(&self, handle: RunHandle) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let agent = main_agent();
        if handle.taken_over_from().is_some() {
            self.takeovers.fetch_add(1, Ordering::SeqCst);
            self.takeover_seen.notify_waiters();
            let _ = handle.append(&agent, vec![delta("taken over")]).await;
            let _ = handle.finish(TurnEndReason::Final, 1, Usage::default()).await;
            return;
        }
        let answered = handle.doc().turn_state.calls.first().and_then(|c| c.result.clone());
        if let Some(result) = answered {
            let text = format!("got {}", result.output);
            let _ = handle.append(&agent, vec![delta(text)]).await;
            let _ = handle.finish(TurnEndReason::Final, 2, Usage::default()).await;
            return;
        }
        let Some(last) = handle.doc().messages.last().cloned() else { return };
        let content = last.content.unwrap_or_default();
        if content == "pause" {
            let _ = handle.append(&agent, vec![delta("let me draw that")]).await;
            let call = PendingCall {
                tool_call_id: "call_1".into(),
                tool: "render_chart".into(),
                arguments: serde_json::json!({"metric": "cpu"}),
            };
            let planned = PlannedCall {
                call: ToolCall {
                    id: "call_1".into(),
                    name: "render_chart".into(),
                    arguments: r#"{"metric":"cpu"}"#.into(),
                },
                plan: CallPlan::Client,
                result: None,
            };
            let mut handle = handle;
            if handle.checkpoint(|doc| doc.turn_state.calls = vec![planned.clone()]).await.is_ok() {
                let _ = handle.pause(vec![], vec![call]).await;
            }
        } else if let Some(n) = content.strip_prefix("gated ").and_then(|n| n.parse::<usize>().ok()) {
            for i in 1..=n {
                tokio::select! {
                    permit = self.gate.acquire() => permit.expect("the gate stays open").forget(),
                    () = handle.cancelled().cancelled() => return,
                }
                if handle.append(&agent, vec![delta(format!("d{i} "))]).await.is_err() {
                    return;
                }
            }
            let _ = handle.finish(TurnEndReason::Final, 1, Usage::default()).await;
        } else {
            let _ = handle.append(&agent, vec![delta(format!("echo {content}"))]).await;
            let _ = handle.finish(TurnEndReason::Final, 1, Usage::default()).await;
        }
    }
}
