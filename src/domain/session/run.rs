//! The transitions of a client-driven run (AG-UI): declaring the run
//! (its frontend tools, context and state) before its turn starts or
//! resumes, and a tool's change of the state, which [`Session::finish_tool`]
//! applies with the tool's result.

use json_patch::Patch;

use super::{Refused, Session, conflict};
use crate::domain::{
    codes::ToolOutcome,
    events::{EventKind, now_ms},
    run::{RunInput, is_empty_state},
};

impl Session {
    /// A client begins a run: the session's frontend tools and context
    /// become the run's, and its state the client's (when the run brings
    /// one). Only between turns — idle, ended, or paused for the client —
    /// and committed with the start or the resume that follows, so the turn
    /// runs with what its run declared on whichever replica runs it.
    ///
    /// Returns `state_replaced` when the run brings a state that is not
    /// `{}`, or that clears a stored one; a run that brings `{}` to a
    /// session with no state says nothing.
    pub fn begin_run(&mut self, run: RunInput) -> Result<Vec<EventKind>, Refused> {
        if self.status.is_active() {
            return conflict(format!("the session is {}: a run cannot begin now", self.status.as_str()));
        }
        self.options.frontend_tools = run.frontend_tools;
        self.options.context = run.context;
        let mut events = Vec::new();
        if let Some(state) = run.state {
            let said = !is_empty_state(&state) || state != self.state;
            self.state = state;
            if said {
                events.push(EventKind::StateReplaced { state: self.state.clone() });
            }
        }
        self.updated_ms = now_ms();
        Ok(events)
    }

    /// A tool's outcome with its change of the state applied (see
    /// [`Session::finish_tool`]): the `state_updated` event, or, when the
    /// patch does not apply, no change and an error outcome that says so.
    pub(super) fn apply_state_delta(
        &mut self,
        outcome: ToolOutcome,
        delta: Option<&Patch>,
    ) -> (Vec<EventKind>, ToolOutcome) {
        match delta.map(|delta| self.patch_state(delta)) {
            None => (Vec::new(), outcome),
            Some(Ok(updated)) => (vec![updated], outcome),
            Some(Err(reason)) => {
                let told = format!(
                    "{}\n\nThe tool's change of the session state does not apply ({reason}); the state is unchanged.",
                    outcome.output()
                );
                (Vec::new(), ToolOutcome::Error(told))
            }
        }
    }

    /// Applies a tool's change of the state, all of it or nothing: the
    /// `state_updated` event, or why the patch does not apply (the state is
    /// then unchanged).
    fn patch_state(&mut self, delta: &Patch) -> Result<EventKind, String> {
        let mut next = self.state.clone();
        json_patch::patch(&mut next, delta).map_err(|e| e.to_string())?;
        let delta = serde_json::to_value(delta).map_err(|e| e.to_string())?;
        self.state = next;
        self.updated_ms = now_ms();
        Ok(EventKind::StateUpdated { delta })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::domain::{
        ApprovalMode, CallDecision, ChatMessage, ContextEntry, FrontendTool, PermissionRules, Role, SessionOptions,
        SessionSpec, Status, StepOutput, ToolCall, ToolStatus,
    };

    fn session() -> Session {
        Session::new(SessionSpec {
            id: "s1".into(),
            tenant: "acme".into(),
            subject: "alice".into(),
            model: "mock".into(),
            dialect: "ag-ui".into(),
            options: SessionOptions { approval: ApprovalMode::Pause, ..SessionOptions::default() },
        })
    }

    fn parse_patch(delta: Value) -> Result<Patch, serde_json::Error> {
        serde_json::from_value(delta)
    }

    fn chart() -> FrontendTool {
        serde_json::from_value(json!({"name": "render_chart", "description": "Draw"})).unwrap()
    }

    fn run(state: Option<Value>) -> RunInput {
        let context = vec![ContextEntry { description: "page".into(), value: "orders".into() }];
        RunInput { frontend_tools: vec![chart()], context, state }
    }

    /// A running turn whose model called `bump` (`c1`), permitted.
    fn calling_bump(state: Value) -> Session {
        let mut s = session();
        s.begin_run(run(Some(state))).unwrap();
        s.start_turn(ChatMessage::text(Role::User, "bump"), None).unwrap();
        let call = ToolCall { id: "c1".into(), name: "bump".into(), arguments: "{}".into() };
        let step = StepOutput { calls: vec![call], ..StepOutput::default() };
        s.complete_step(step, vec![CallDecision::Run], PermissionRules::default()).unwrap();
        s
    }

    #[test]
    fn a_run_declares_its_tools_context_and_state_before_its_turn() {
        let mut s = session();
        let events = s.begin_run(run(Some(json!({"count": 1})))).unwrap();
        assert_eq!(events, vec![EventKind::StateReplaced { state: json!({"count": 1}) }]);
        assert_eq!(s.options().frontend_tools, vec![chart()]);
        assert_eq!(s.options().context[0].value, "orders");
        assert_eq!(s.state(), &json!({"count": 1}));
        assert_eq!(s.status(), Status::Idle, "the status is the start's business");

        // The next run replaces the tools and context, and keeps the state it does not bring.
        let events = s.begin_run(RunInput::default()).unwrap();
        assert!(events.is_empty());
        assert!(s.options().frontend_tools.is_empty() && s.options().context.is_empty());
        assert_eq!(s.state(), &json!({"count": 1}));
        // The stored document carries them.
        let stored: Session = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(stored.state(), &json!({"count": 1}));
    }

    #[test]
    fn an_empty_state_is_said_only_when_it_clears_one() {
        let mut s = session();
        assert!(s.begin_run(run(Some(json!({})))).unwrap().is_empty(), "nothing to say");
        s.begin_run(run(Some(json!({"a": 1})))).unwrap();
        let events = s.begin_run(run(Some(json!({})))).unwrap();
        assert_eq!(events, vec![EventKind::StateReplaced { state: json!({}) }]);
    }

    #[test]
    fn a_run_that_answers_a_pause_declares_the_tools_its_continuation_runs_with() {
        let mut s = session();
        s.begin_run(run(None)).unwrap();
        s.start_turn(ChatMessage::text(Role::User, "chart it"), None).unwrap();
        let call = ToolCall { id: "c1".into(), name: "render_chart".into(), arguments: "{}".into() };
        let step = StepOutput { calls: vec![call], ..StepOutput::default() };
        s.complete_step(step, vec![CallDecision::Client], PermissionRules::default()).unwrap();
        s.pause().unwrap();
        assert!(s.begin_run(RunInput { state: Some(json!({"drawn": true})), ..RunInput::default() }).is_ok());
        assert!(s.options().frontend_tools.is_empty(), "the answering run declared none");
        assert_eq!(s.status(), Status::AwaitingClient);
        assert_eq!(s.pending_calls().len(), 1, "the pending call is still the client's");
    }

    #[test]
    fn a_run_cannot_begin_while_a_turn_runs() {
        let mut s = session();
        s.start_turn(ChatMessage::text(Role::User, "hi"), None).unwrap();
        assert!(matches!(s.begin_run(RunInput::default()), Err(Refused::Conflict(_))));
    }

    #[test]
    fn a_tool_result_applies_its_state_change_with_it() {
        let mut s = calling_bump(json!({"count": 1}));
        let delta = parse_patch(json!([{"op": "replace", "path": "/count", "value": 2}])).unwrap();
        let events = s.finish_tool("c1", ToolOutcome::Success("bumped".into()), None, Some(&delta)).unwrap();
        assert_eq!(
            events,
            vec![
                EventKind::StateUpdated { delta: json!([{"op": "replace", "path": "/count", "value": 2}]) },
                EventKind::ToolResult {
                    tool_call_id: "c1".into(),
                    name: "bump".into(),
                    status: ToolStatus::Success,
                    output: json!("bumped"),
                },
            ]
        );
        assert_eq!(s.state(), &json!({"count": 2}));
    }

    #[test]
    fn a_state_change_that_does_not_apply_changes_nothing_and_the_model_is_told() {
        let mut s = calling_bump(json!({"count": 1}));
        let delta = parse_patch(json!([
            {"op": "replace", "path": "/count", "value": 2},
            {"op": "remove", "path": "/missing"}
        ]))
        .unwrap();
        let events = s.finish_tool("c1", ToolOutcome::Success("bumped".into()), None, Some(&delta)).unwrap();
        assert_eq!(events.len(), 1);
        let EventKind::ToolResult { status, output, .. } = &events[0] else { panic!("{events:?}") };
        assert_eq!(*status, ToolStatus::Error);
        assert!(output.as_str().unwrap().starts_with("bumped\n\n"), "{output}");
        assert_eq!(s.state(), &json!({"count": 1}), "none of the patch applied");
    }
}
