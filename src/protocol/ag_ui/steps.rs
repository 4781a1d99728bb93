//! AG-UI's `STEP_STARTED` / `STEP_FINISHED {stepName}`, derived from the
//! canonical events (nothing is stored for them): a step named `model`
//! around each model call's output — from its first streamed event to its
//! `usage` — and one step per tool call the server runs, named after the
//! tool, from the call's `tool_call` (the call is about to run) to its
//! `tool_result`. Frontend tools' calls get none: the client runs them,
//! after the run (a stream that does not know the run's frontend tools,
//! `?format=ag-ui` on a native turn, gives them a step the pause finishes).
//!
//! `verifyEvents` refuses a second open step of a name and a finish of a
//! step it did not see start, and wants every step finished before
//! `RUN_FINISHED`. So a name already open (the same tool running twice at
//! once) is numbered (`lookup #2`, the lowest free number), each step is
//! finished under the name it started with, only steps this stream started
//! are finished, and [`Steps::finish_all`] closes what a pause or the
//! turn's end leaves open.

/// The name of the step around a model call's output.
pub const MODEL_STEP: &str = "model";

/// The steps a stream has open.
#[derive(Debug, Default)]
pub struct Steps {
    /// The open model step's name.
    model: Option<String>,
    /// Open tool steps: (tool call id, step name), in start order.
    tools: Vec<(String, String)>,
}

impl Steps {
    /// Opens the model step; its name, unless it is open already.
    pub fn start_model(&mut self) -> Option<String> {
        if self.model.is_some() {
            return None;
        }
        let name = self.free_name(MODEL_STEP);
        self.model = Some(name.clone());
        Some(name)
    }

    /// Finishes the model step; its name, if it was open.
    pub fn finish_model(&mut self) -> Option<String> {
        self.model.take()
    }

    /// Opens the step of tool call `call_id` of `tool`; its name, unless
    /// that call's step is open already.
    pub fn start_tool(&mut self, call_id: &str, tool: &str) -> Option<String> {
        if self.tools.iter().any(|(id, _)| id == call_id) {
            return None;
        }
        let name = self.free_name(tool);
        self.tools.push((call_id.to_string(), name.clone()));
        Some(name)
    }

    /// Finishes the step of tool call `call_id`; its name, if it was open.
    pub fn finish_tool(&mut self, call_id: &str) -> Option<String> {
        let at = self.tools.iter().position(|(id, _)| id == call_id)?;
        Some(self.tools.remove(at).1)
    }

    /// Finishes every open step; their names, the model's first.
    pub fn finish_all(&mut self) -> Vec<String> {
        self.model.take().into_iter().chain(std::mem::take(&mut self.tools).into_iter().map(|(_, name)| name)).collect()
    }

    /// `base`, or `base #n` with the lowest n ≥ 2 no open step has.
    fn free_name(&self, base: &str) -> String {
        let open = |name: &str| self.model.as_deref() == Some(name) || self.tools.iter().any(|(_, n)| n == name);
        if !open(base) {
            return base.to_string();
        }
        (2..).map(|n| format!("{base} #{n}")).find(|name| !open(name)).unwrap_or_else(|| base.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_running_twice_at_once_numbers_its_second_step() {
        let mut steps = Steps::default();
        assert_eq!(steps.start_model().as_deref(), Some("model"));
        assert_eq!(steps.start_model(), None, "open already");
        assert_eq!(steps.finish_model().as_deref(), Some("model"));
        assert_eq!(steps.start_tool("c1", "lookup").as_deref(), Some("lookup"));
        assert_eq!(steps.start_tool("c2", "lookup").as_deref(), Some("lookup #2"));
        assert_eq!(steps.start_tool("c2", "lookup"), None);
        assert_eq!(steps.finish_tool("c1").as_deref(), Some("lookup"));
        assert_eq!(steps.start_tool("c3", "lookup").as_deref(), Some("lookup"), "the name is free again");
        assert_eq!(steps.finish_tool("c9"), None, "never started here");
        assert_eq!(steps.finish_all(), ["lookup #2", "lookup"]);
        assert!(steps.finish_all().is_empty());
    }
}
