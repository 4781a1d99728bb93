//! A scripted [`TurnRunner`]: stands in for the orchestrator so the session
//! machinery (log, leases, takeover, resume) is tested on its own. What a
//! turn does is chosen by the user message:
//!
//! - `gated N`: commits N text deltas, each on its own (so each is an event
//!   of its own) and only after the test releases one permit
//!   ([`ScriptedRunner::release`]), then ends the turn;
//! - `pause`: appends a delta, then completes a step that calls the frontend
//!   tool `render_chart` (`call_1`) and pauses for it;
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
    domain::{AgentRef, CallDecision, EventKind, PermissionRules, Role, StepOutput, ToolCall, TurnEndReason},
    sessions::{RunHandle, TurnRunner},
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
    async fn run(&self, mut handle: RunHandle) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let agent = main_agent();
        let end = |handle: RunHandle| async move {
            let _ = handle.end(|s| s.end(TurnEndReason::Final, false)).await;
        };
        if handle.taken_over_from().is_some() {
            self.takeovers.fetch_add(1, Ordering::SeqCst);
            self.takeover_seen.notify_waiters();
            let _ = handle.emit(&agent, delta("taken over")).await;
            return end(handle).await;
        }
        let history = handle.session().history().unwrap_or_default();
        let Some(last) = history.last().cloned() else { return };
        if last.role == Role::Tool {
            // Resumed: the frontend call has its result.
            let text = format!("got {}", last.content.unwrap_or_default());
            let _ = handle.emit(&agent, delta(text)).await;
            return end(handle).await;
        }
        let content = last.content.unwrap_or_default();
        if content == "pause" {
            let _ = handle.emit(&agent, delta("let me draw that")).await;
            let call =
                ToolCall { id: "call_1".into(), name: "render_chart".into(), arguments: r#"{"metric":"cpu"}"#.into() };
            let step = StepOutput { calls: vec![call], ..StepOutput::default() };
            let planned =
                handle.apply(|s| s.complete_step(step, vec![CallDecision::Client], PermissionRules::default()));
            if planned.is_ok() {
                let _ = handle.end(|s| s.pause()).await;
            }
        } else if let Some(n) = content.strip_prefix("gated ").and_then(|n| n.parse::<usize>().ok()) {
            for i in 1..=n {
                tokio::select! {
                    permit = self.gate.acquire() => permit.expect("the gate stays open").forget(),
                    () = handle.cancelled().cancelled() => return drop(handle.stop().await),
                }
                let text = format!("d{i} ");
                if handle.transition(|_| Ok(vec![delta(text)])).await.is_err() {
                    return drop(handle.stop().await);
                }
            }
            end(handle).await;
        } else {
            let _ = handle.emit(&agent, delta(format!("echo {content}"))).await;
            end(handle).await;
        }
    }
}
