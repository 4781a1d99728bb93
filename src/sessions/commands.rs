//! Commands that change a session from outside its turn: a new message, a
//! resume after a pause, a permission decision, a cancel. Each is one
//! compare-and-set on the state document, accepted on any replica; of two
//! racing commands exactly one wins and the other gets a conflict.

use super::{
    SessionError, Sessions, Status,
    state::{CallPlan, CallResult, RelayDecision, TurnState},
};
use crate::{
    auth::Principal,
    protocol::EventKind,
    providers::ChatMessage,
    store::{LeaseOp, SessionKey, WriteOutcome},
};

/// How often a command re-reads and retries when the running turn wrote the
/// document between our read and our write.
const WRITE_RETRIES: usize = 5;

/// A client's answers to a paused turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    /// Results of frontend tool calls: (tool_call_id, output).
    pub outputs: Vec<(String, String)>,
    /// Approvals of calls that needed permission, by tool call id.
    pub decisions: Vec<Decision>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub tool_call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

impl Sessions {
    /// Starts a turn with a new user message on an idle, completed or failed
    /// session, on this replica. Returns the cursor before the turn's events.
    pub async fn start_turn(&self, principal: &Principal, id: &str, message: ChatMessage) -> Result<u64, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (version, mut doc) = self.load_settled(principal, &key).await?;
        if !doc.status.can_become(Status::Running) || doc.status == Status::AwaitingClient {
            return Err(SessionError::Conflict(format!(
                "the session is {}: it cannot take a new message now",
                doc.status.as_str()
            )));
        }
        doc.turn += 1;
        doc.messages.push(message);
        doc.error = None;
        doc.turn_state = TurnState::default();
        doc.cancel_requested = false;
        let event = EventKind::TurnStarted { turn: doc.turn, model: doc.model.clone() };
        self.activate(&key, version, doc, vec![event]).await
    }

    /// Resumes a paused turn with the client's answers: every pending
    /// frontend call needs one result and every pending approval one
    /// decision. Returns the cursor from which to follow the continuation.
    pub async fn resume(&self, principal: &Principal, id: &str, resume: Resume) -> Result<u64, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (version, mut doc) = self.load_settled(principal, &key).await?;
        if doc.status != Status::AwaitingClient {
            return Err(SessionError::Conflict(format!(
                "the session is {}, not paused for the client",
                doc.status.as_str()
            )));
        }
        let mut events = vec![EventKind::Resumed { turn: doc.turn }];
        let waiting: Vec<usize> = doc
            .turn_state
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.result.is_none() && matches!(c.plan, CallPlan::Client | CallPlan::Ask { .. }))
            .map(|(i, _)| i)
            .collect();
        for (call_id, _) in &resume.outputs {
            let known = waiting.iter().any(|&i| {
                let c = &doc.turn_state.calls[i];
                c.call.id == *call_id && c.plan == CallPlan::Client
            });
            if !known {
                return Err(SessionError::Invalid(format!("tool call {call_id:?} is not waiting for a client result")));
            }
        }
        for decision in &resume.decisions {
            let known = waiting.iter().any(|&i| {
                let c = &doc.turn_state.calls[i];
                c.call.id == decision.tool_call_id && matches!(c.plan, CallPlan::Ask { .. })
            });
            if !known {
                return Err(SessionError::Invalid(format!(
                    "tool call {:?} is not waiting for an approval",
                    decision.tool_call_id
                )));
            }
        }
        for i in waiting {
            let planned = &mut doc.turn_state.calls[i];
            let id = planned.call.id.clone();
            match &planned.plan {
                CallPlan::Client => {
                    let mut answers = resume.outputs.iter().filter(|(c, _)| *c == id);
                    let (Some((_, output)), None) = (answers.next(), answers.next()) else {
                        return Err(SessionError::Invalid(format!("tool call {id:?} needs exactly one result")));
                    };
                    planned.result = Some(CallResult { status: "success".into(), output: output.clone() });
                    events.push(EventKind::ToolResult {
                        tool_call_id: id,
                        name: planned.call.name.clone(),
                        status: "success".into(),
                        output: serde_json::Value::String(output.clone()),
                    });
                }
                CallPlan::Ask { relay_id } => {
                    let mut answers = resume.decisions.iter().filter(|d| d.tool_call_id == id);
                    let (Some(decision), None) = (answers.next(), answers.next()) else {
                        return Err(SessionError::Invalid(format!("tool call {id:?} needs exactly one decision")));
                    };
                    doc.decisions.push(RelayDecision {
                        relay_id: relay_id.clone(),
                        approved: decision.approved,
                        always: false,
                        reason: decision.reason.clone(),
                    });
                }
                _ => {}
            }
        }
        doc.pending_calls.clear();
        doc.pending_relays.clear();
        let dialect = doc.dialect.clone();
        let cursor = self.activate(&key, version, doc, events).await?;
        self.metrics().resume(&dialect);
        Ok(cursor)
    }

    /// Records a permission decision for a live relay, from any replica, and
    /// wakes the replica whose turn waits for it. `session_id`, when the
    /// client sends it, must match the relay's session.
    pub async fn decide_relay(
        &self,
        principal: &Principal,
        session_id: Option<&str>,
        relay_id: &str,
        decision: RelayDecision,
    ) -> Result<(), SessionError> {
        let key = match self.store().relays.get_relay(relay_id).await? {
            Some(key) if *key.tenant == *principal.tenant => key,
            _ => return Err(SessionError::RelayNotFound),
        };
        if session_id.is_some_and(|id| id != &*key.id) {
            return Err(SessionError::RelayNotFound);
        }
        for _ in 0..WRITE_RETRIES {
            let (version, mut doc) = self.load_visible(principal, &key).await?;
            if doc.decisions.iter().any(|d| d.relay_id == relay_id)
                || !doc.pending_relays.iter().any(|r| r.relay_id == relay_id)
            {
                return Err(SessionError::Conflict("this relay was already decided".into()));
            }
            if doc.status != Status::AwaitingRelay {
                return Err(SessionError::Conflict(format!(
                    "the session is {}; answer its pending approvals by resuming it",
                    doc.status.as_str()
                )));
            }
            doc.decisions.push(RelayDecision { relay_id: relay_id.to_string(), ..decision.clone() });
            let encoded = super::encode(&doc)?;
            match self.store().state.compare_and_set(&key, version, &encoded, LeaseOp::None).await? {
                WriteOutcome::Written(_) => {
                    // The state is the truth; the wake-up only saves the owner a wait.
                    if let Err(e) = self.store().notifications.wake(&key).await {
                        tracing::warn!(session = %key.id, error = %e, "decision stored but the wake-up failed");
                    }
                    return Ok(());
                }
                _ => continue,
            }
        }
        Err(SessionError::Conflict("the session keeps changing; try again".into()))
    }

    /// Cancels the session's turn. A running turn is asked to stop (its
    /// replica is woken and ends it); a paused one is ended here.
    pub async fn cancel(&self, principal: &Principal, id: &str) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        for _ in 0..WRITE_RETRIES {
            let (version, mut doc) = self.load_visible(principal, &key).await?;
            match doc.status {
                Status::Running | Status::AwaitingRelay => {
                    if doc.cancel_requested {
                        return Ok(());
                    }
                    doc.cancel_requested = true;
                    let encoded = super::encode(&doc)?;
                    if let WriteOutcome::Written(_) =
                        self.store().state.compare_and_set(&key, version, &encoded, LeaseOp::None).await?
                    {
                        let _ = self.store().notifications.wake(&key).await;
                        self.wake_local(&key).await;
                        return Ok(());
                    }
                }
                Status::AwaitingClient => {
                    doc.cancel_requested = true;
                    doc.pending_calls.clear();
                    doc.pending_relays.clear();
                    match self.activate(&key, version, doc, vec![]).await {
                        Ok(_) => return Ok(()),
                        Err(SessionError::Conflict(_)) => continue,
                        Err(e) => return Err(e),
                    }
                }
                _ => return Err(SessionError::Conflict(format!("the session is {}", doc.status.as_str()))),
            }
        }
        Err(SessionError::Conflict("the session keeps changing; try again".into()))
    }
}
