//! rlm mode (llm-gateway's `mode: "rlm"`): the model answers with one
//! JavaScript cell per reply, the gateway runs it in a REPL whose `scope`
//! persists across the turn, and the cell's output is the model's next
//! input, until a cell calls `FINAL(answer)`.
//!
//! What is durable, and why: a REPL's state cannot be saved, but it can be
//! rebuilt by running the same cells again with the same inputs. So the
//! session keeps every cell's code, the result of every call the cell made
//! to the host (`llm_query`, `exec`, the clock, random numbers: the
//! [`Tape`]) and the cell's output. A replica that takes the session over
//! runs the cells again, feeding each host call its recorded result (no
//! model call or command runs twice), and checks that each cell prints what
//! it printed the first time.

use serde::{Deserialize, Serialize};

use super::{conversation::ChatMessage, events::RelayDecision};

/// How an rlm turn runs, from the request that started the session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlmOptions {
    /// How deep `llm_query` recurses: a child at depth `d < max_depth` runs
    /// its own REPL loop; at `max_depth` it is one flat model call.
    pub max_depth: u32,
    /// The REPL's `context` variable (the request's `context` field).
    #[serde(default)]
    pub context: String,
}

/// One host call's result, in the order the cell made them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HostResult {
    /// `Date.now()` (milliseconds) or the time behind `new Date()`.
    Time {
        ms: f64,
    },
    Random {
        value: f64,
    },
    /// What `llm_query` returned, or the error it threw.
    Query {
        result: Result<String, String>,
    },
    /// What `exec` returned, or the error it threw (denied, no sandbox).
    Exec {
        result: Result<ExecResult, String>,
    },
}

impl HostResult {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Time { .. } => "time",
            Self::Random { .. } => "random",
            Self::Query { .. } => "llm_query",
            Self::Exec { .. } => "exec",
        }
    }
}

/// `exec`'s answer: llm-gateway's `{stdout, stderr, exitCode}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The host calls of one cell, in order.
pub type Tape = Vec<HostResult>;

/// What a cell printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellOutput {
    pub stdout: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `FINAL` was called.
    #[serde(default)]
    pub done: bool,
    /// `FINAL`'s answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub duration_ms: u64,
}

/// A cell of the turn: its code, its host calls so far and, once it ran to
/// its end, its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The `repl_input` id (a child run's `parentId`).
    pub id: String,
    /// 0-based, as llm-gateway counts.
    pub iteration: u32,
    pub code: String,
    #[serde(default)]
    pub tape: Tape,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<CellOutput>,
    /// How long the REPL's history was before this cell's reply (a
    /// divergent replay goes back there).
    pub history_len: usize,
}

/// An `exec` waiting for a permission decision, or decided and not yet
/// taken up by its cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecAsk {
    pub relay_id: String,
    /// A call id of its own (llm-gateway's relay carries one).
    pub tool_call_id: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<RelayDecision>,
}

/// The rlm loop's durable state for the turn in progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RlmState {
    /// The REPL loop's own history after the conversation: each reply of
    /// the model and the feedback it got.
    #[serde(default)]
    pub messages: Vec<ChatMessage>,
    /// Cells in order; the last may still be running (no output yet).
    #[serde(default)]
    pub cells: Vec<Cell>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<ExecAsk>,
}

impl RlmState {
    /// The cell that started and has not finished.
    pub fn open_cell(&self) -> Option<&Cell> {
        self.cells.last().filter(|c| c.output.is_none())
    }

    pub(super) fn open_cell_mut(&mut self) -> Option<&mut Cell> {
        self.cells.last_mut().filter(|c| c.output.is_none())
    }

    /// The finished cells.
    pub fn finished(&self) -> &[Cell] {
        match self.open_cell() {
            Some(_) => &self.cells[..self.cells.len() - 1],
            None => &self.cells,
        }
    }
}

/// The feedback the model gets for a cell's output (llm-gateway's).
pub fn feedback(output: &CellOutput) -> String {
    let mut parts = Vec::new();
    if !output.stdout.is_empty() {
        parts.push(format!("stdout:\n{}", output.stdout));
    }
    if let Some(error) = &output.error {
        parts.push(format!("error: {error}"));
    }
    if parts.is_empty() { "(no output)".to_string() } else { parts.join("\n") }
}
