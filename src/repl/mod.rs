//! The JavaScript REPL of rlm mode: QuickJS (through `rquickjs`) on a
//! thread of its own, one engine per running rlm loop, whose `scope`
//! object persists from cell to cell.
//!
//! JavaScript reaches nothing of the host but the functions a cell's
//! prelude names (llm-gateway's): `context`, `llm_query(prompt, context?)`,
//! `exec(command, timeout?)`, `console.{log,info,warn,error}` and
//! `FINAL(answer)`. `Date` and `Math.random` are the host's too, so that
//! a cell's every input is a host call. The engine has a memory limit, and
//! a cell a CPU-time limit (time spent waiting for the host does not count);
//! either stops the cell with an error the model sees.
//!
//! Host calls are recorded on a [`Tape`]. A cell runs with the tape of an
//! earlier run: the calls it makes get the recorded results, in order; past
//! the tape's end a *live* run asks the host ([`Message::Call`]) and a
//! replay fails ([`CellEnd::diverged`]). That is how a replica rebuilds a
//! REPL it takes over without calling a model or running a command again.
//!
//! `code.rs` finds a reply's cell.

mod code;
mod engine;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc as std_mpsc,
    },
    time::Duration,
};

use tokio::sync::{mpsc, oneshot};

pub use self::code::extract;
use crate::domain::rlm::{CellOutput, HostResult, Tape};

/// What a REPL may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: usize,
    /// CPU time of one cell, host calls not counted.
    pub cell_time: Duration,
    /// Characters of a cell's stdout kept (llm-gateway: 4,000).
    pub max_stdout: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { memory_bytes: 64 << 20, cell_time: Duration::from_secs(30), max_stdout: 4000 }
    }
}

/// A call a live cell makes to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum HostCall {
    Query { prompt: String, context: Option<String> },
    Exec { command: String, timeout_secs: Option<f64> },
}

/// What a running cell tells the host.
#[derive(Debug)]
pub enum Message {
    /// A line the cell printed live (`stderr` for `console.warn/error`).
    Print { line: String, stderr: bool },
    /// A host call: answer on `reply`. `tape` is every host call the cell
    /// made before this one (to commit with this one's result).
    Call { call: HostCall, tape: Tape, reply: oneshot::Sender<HostResult> },
    /// The cell ended.
    Done(CellEnd),
}

/// How a cell ended.
#[derive(Debug, Clone, PartialEq)]
pub struct CellEnd {
    /// Every host call it made, in order.
    pub tape: Tape,
    pub output: CellOutput,
    /// A replay made a call its tape does not have (or another kind of
    /// call than recorded): the REPL's state cannot be trusted from here.
    pub diverged: Option<String>,
}

/// The REPL is gone (its thread ended: it could not start, or panicked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the JavaScript REPL is not running: {0}")]
pub struct ReplGone(pub String);

struct Job {
    code: String,
    tape: Tape,
    live: bool,
    messages: mpsc::Sender<Message>,
}

/// One REPL: a thread that runs cells in order. Dropping it stops the
/// running cell at its next interrupt check, and the thread ends.
pub struct Repl {
    jobs: Option<std_mpsc::SyncSender<Job>>,
    stop: Arc<AtomicBool>,
}

/// How many messages a cell may have in flight before it waits.
const MESSAGES: usize = 64;

impl Repl {
    /// A fresh REPL whose `scope.context` is `context`.
    pub fn start(context: String, limits: Limits) -> Result<Self, ReplGone> {
        let (jobs, queue) = std_mpsc::sync_channel::<Job>(1);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("repl".into())
            .stack_size(8 << 20)
            .spawn(move || engine::run(context, limits, flag, queue))
            .map_err(|e| ReplGone(e.to_string()))?;
        Ok(Self { jobs: Some(jobs), stop })
    }

    /// Runs `code`, answering its host calls from `tape` first. `live`: past
    /// the tape, host calls go to the host; else they end the cell as
    /// diverged. The cell's messages end with [`Message::Done`]; dropping
    /// the receiver stops the cell.
    pub fn run(&self, code: &str, tape: Tape, live: bool) -> Result<mpsc::Receiver<Message>, ReplGone> {
        let (messages, receiver) = mpsc::channel(MESSAGES);
        let job = Job { code: code.to_string(), tape, live, messages };
        let jobs = self.jobs.as_ref().ok_or_else(|| ReplGone("stopped".into()))?;
        jobs.send(job).map_err(|_| ReplGone("its thread ended".into()))?;
        Ok(receiver)
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs.take();
    }
}

/// `stdout` cut to `max` characters, as llm-gateway cuts it.
pub fn truncate_stdout(stdout: String, max: usize) -> (String, bool) {
    match stdout.char_indices().nth(max) {
        Some((end, _)) => (format!("{}\n...[truncated]", &stdout[..end]), true),
        None => (stdout, false),
    }
}

#[cfg(test)]
mod tests;
