//! The REPL thread: one QuickJS runtime and context, the host functions,
//! and the loop that runs cells as they come.

use std::{
    cell::RefCell,
    collections::VecDeque,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc as std_mpsc,
    },
    time::{Duration, Instant},
};

use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Exception, Function, Object, Promise, Runtime, Value};
use tokio::sync::{mpsc, oneshot};

use super::{CellEnd, HostCall, Job, Limits, Message, truncate_stdout};
use crate::domain::rlm::{CellOutput, ExecResult, HostResult, Tape};

/// Globals set once per REPL: the host's clock and random numbers behind
/// `Date` and `Math.random`, and the `scope` object.
const SETUP: &str = r#"
(() => {
  const RealDate = Date;
  const now = () => __sb.time();
  function HostDate(...args) {
    if (!new.target) return new RealDate(now()).toString();
    return args.length ? new RealDate(...args) : new RealDate(now());
  }
  HostDate.prototype = RealDate.prototype;
  HostDate.now = now;
  HostDate.parse = RealDate.parse;
  HostDate.UTC = RealDate.UTC;
  globalThis.Date = HostDate;
  Math.random = () => __sb.random();
})();
"#;

/// The start of every cell (llm-gateway's prelude).
const PRELUDE: &str = r#"const context = scope["context"];
const llm_query = (prompt, ctx) => __sb.llm_query(String(prompt), ctx === undefined || ctx === null ? null : String(ctx));
const exec = (command, timeout) => JSON.parse(__sb.exec(String(command), timeout === undefined || timeout === null ? null : Number(timeout)));
const console = {
  log: (...a) => __sb.print(false, a.map(String).join(" ")),
  info: (...a) => __sb.print(false, a.map(String).join(" ")),
  warn: (...a) => __sb.print(true, a.map(String).join(" ")),
  error: (...a) => __sb.print(true, a.map(String).join(" ")),
};
const FINAL = (answer) => __sb.final(String(answer));
"#;

/// The CPU-time budget of the running cell: a deadline the interrupt
/// handler checks, moved forward by the time spent waiting for the host.
struct Clock {
    base: Instant,
    /// Nanoseconds after `base`; 0 when no cell runs.
    deadline: AtomicU64,
    stop: Arc<AtomicBool>,
    expired: AtomicBool,
}

impl Clock {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn start(&self, budget: Duration) {
        self.expired.store(false, Ordering::Relaxed);
        self.deadline.store(self.now() + budget.as_nanos() as u64, Ordering::Relaxed);
    }

    fn extend(&self, by: Duration) {
        self.deadline.fetch_add(by.as_nanos() as u64, Ordering::Relaxed);
    }

    fn interrupt(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        let deadline = self.deadline.load(Ordering::Relaxed);
        if deadline != 0 && self.now() > deadline {
            self.expired.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// What the host functions share with the loop while a cell runs.
#[derive(Default)]
struct CellState {
    recorded: VecDeque<HostResult>,
    live: bool,
    tape: Tape,
    lines: Vec<String>,
    /// Characters in `lines` (printing stops counting past the limit).
    chars: usize,
    done: bool,
    answer: Option<String>,
    diverged: Option<String>,
    messages: Option<mpsc::Sender<Message>>,
}

impl CellState {
    /// The recorded result of the next host call of `kind`: `Ok(None)` when
    /// the tape is played out and the cell runs live.
    fn recorded(&mut self, kind: &str) -> Result<Option<HostResult>, String> {
        match self.recorded.pop_front() {
            Some(result) if result.kind() == kind => {
                self.tape.push(result.clone());
                Ok(Some(result))
            }
            Some(result) => {
                Err(self.diverge(format!("the replay called {kind} where the cell called {}", result.kind())))
            }
            None if self.live => Ok(None),
            None => Err(self.diverge(format!("the replay called {kind}, which the cell did not"))),
        }
    }

    fn diverge(&mut self, message: String) -> String {
        self.diverged.get_or_insert(message).clone()
    }

    /// Whether the cell runs past its tape (its output is news).
    fn is_live(&self) -> bool {
        self.live && self.recorded.is_empty()
    }
}

type Shared = Rc<RefCell<CellState>>;

/// The thread's body: runs each job until the sender is dropped.
pub(super) fn run(context: String, limits: Limits, stop: Arc<AtomicBool>, jobs: std_mpsc::Receiver<Job>) {
    let clock =
        Arc::new(Clock { base: Instant::now(), deadline: AtomicU64::new(0), stop, expired: AtomicBool::new(false) });
    let Ok(runtime) = Runtime::new() else { return };
    runtime.set_memory_limit(limits.memory_bytes);
    runtime.set_max_stack_size(1 << 20);
    let handler = clock.clone();
    runtime.set_interrupt_handler(Some(Box::new(move || handler.interrupt())));
    let Ok(js) = Context::full(&runtime) else { return };
    let state: Shared = Rc::default();
    let installed = js.with(|ctx| install(&ctx, &context, &state, &clock).catch(&ctx).map_err(|e| e.to_string()));
    if let Err(e) = installed {
        tracing::warn!(error = %e, "the REPL could not start");
        return;
    }
    while let Ok(job) = jobs.recv() {
        let end = js.with(|ctx| run_cell(&ctx, job.code, job.tape, job.live, &job.messages, &state, &clock, limits));
        let _ = job.messages.blocking_send(Message::Done(end));
        runtime.run_gc();
    }
}

fn install<'js>(ctx: &Ctx<'js>, context: &str, state: &Shared, clock: &Arc<Clock>) -> rquickjs::Result<()> {
    let host = Object::new(ctx.clone())?;
    let s = state.clone();
    host.set(
        "print",
        Function::new(ctx.clone(), move |stderr: bool, line: String| {
            let mut state = s.borrow_mut();
            let live = state.is_live();
            if state.chars <= 1 << 20 {
                state.chars += line.chars().count() + 1;
                state.lines.push(line.clone());
            }
            if let (true, Some(messages)) = (live, state.messages.clone()) {
                drop(state);
                let _ = messages.blocking_send(Message::Print { line, stderr });
            }
        })?,
    )?;
    let s = state.clone();
    host.set(
        "final",
        Function::new(ctx.clone(), move |answer: String| {
            let mut state = s.borrow_mut();
            state.done = true;
            state.answer = Some(answer);
        })?,
    )?;
    let s = state.clone();
    host.set(
        "time",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>| -> rquickjs::Result<f64> {
            let mut state = s.borrow_mut();
            match state.recorded("time").map_err(|e| Exception::throw_message(&ctx, &e))? {
                Some(HostResult::Time { ms }) => Ok(ms),
                _ => {
                    let ms = crate::domain::now_ms() as f64;
                    state.tape.push(HostResult::Time { ms });
                    Ok(ms)
                }
            }
        })?,
    )?;
    let s = state.clone();
    host.set(
        "random",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>| -> rquickjs::Result<f64> {
            let mut state = s.borrow_mut();
            match state.recorded("random").map_err(|e| Exception::throw_message(&ctx, &e))? {
                Some(HostResult::Random { value }) => Ok(value),
                _ => {
                    let value: f64 = rand::random();
                    state.tape.push(HostResult::Random { value });
                    Ok(value)
                }
            }
        })?,
    )?;
    let (s, c) = (state.clone(), clock.clone());
    host.set(
        "llm_query",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, prompt: String, context: Option<String>| {
            let call = HostCall::Query { prompt, context };
            match host_call(&s, &c, "llm_query", call) {
                Ok(HostResult::Query { result: Ok(text) }) => Ok(text),
                Ok(HostResult::Query { result: Err(e) }) | Err(e) => Err(Exception::throw_message(&ctx, &e)),
                Ok(other) => Err(Exception::throw_message(&ctx, &format!("llm_query got a {} result", other.kind()))),
            }
        })?,
    )?;
    let (s, c) = (state.clone(), clock.clone());
    host.set(
        "exec",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, command: String, timeout_secs: Option<f64>| {
            let call = HostCall::Exec { command, timeout_secs };
            match host_call(&s, &c, "exec", call) {
                Ok(HostResult::Exec { result: Ok(result) }) => Ok(exec_json(&result)),
                Ok(HostResult::Exec { result: Err(e) }) | Err(e) => Err(Exception::throw_message(&ctx, &e)),
                Ok(other) => Err(Exception::throw_message(&ctx, &format!("exec got a {} result", other.kind()))),
            }
        })?,
    )?;
    let globals = ctx.globals();
    globals.set("__sb", host)?;
    let scope = Object::new(ctx.clone())?;
    scope.set("context", context)?;
    globals.set("__scope", scope)?;
    ctx.eval::<(), _>(SETUP)?;
    Ok(())
}

fn exec_json(result: &ExecResult) -> String {
    serde_json::to_string(result).unwrap_or_else(|_| "{}".into())
}

/// A host call that must not run twice: from the tape, or asked of the
/// host (the wait does not count against the cell's CPU time).
fn host_call(state: &Shared, clock: &Clock, kind: &str, call: HostCall) -> Result<HostResult, String> {
    let (tape, messages) = {
        let mut state = state.borrow_mut();
        if let Some(result) = state.recorded(kind)? {
            return Ok(result);
        }
        (state.tape.clone(), state.messages.clone())
    };
    let messages = messages.ok_or("the host is gone")?;
    let (reply, answer) = oneshot::channel();
    let waited = Instant::now();
    let sent = messages.blocking_send(Message::Call { call, tape, reply });
    let result = sent.ok().and_then(|()| answer.blocking_recv().ok());
    clock.extend(waited.elapsed());
    let result = result.ok_or("the cell was stopped")?;
    state.borrow_mut().tape.push(result.clone());
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
fn run_cell<'js>(
    ctx: &Ctx<'js>,
    code: String,
    tape: Tape,
    live: bool,
    messages: &mpsc::Sender<Message>,
    state: &Shared,
    clock: &Clock,
    limits: Limits,
) -> CellEnd {
    *state.borrow_mut() =
        CellState { recorded: tape.into(), live, messages: Some(messages.clone()), ..CellState::default() };
    let started = Instant::now();
    clock.start(limits.cell_time);
    let source = format!("(async function (scope) {{\n{PRELUDE}\n{code}\n}})(globalThis.__scope)");
    let result: Result<Value<'js>, CaughtError<'js>> =
        ctx.eval::<Promise<'js>, _>(source).and_then(|p| p.finish::<Value<'js>>()).catch(ctx);
    clock.deadline.store(0, Ordering::Relaxed);
    let error = result.err().map(|e| error_text(e, clock, limits));
    let state = std::mem::take(&mut *state.borrow_mut());
    let (stdout, truncated) = truncate_stdout(state.lines.join("\n"), limits.max_stdout);
    let output = CellOutput {
        stdout,
        error,
        done: state.done,
        answer: state.answer,
        truncated,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    CellEnd { tape: state.tape, output, diverged: state.diverged }
}

/// What the model is told of a cell's failure: the error's message, as
/// llm-gateway tells it, or why the gateway stopped the cell.
fn error_text(error: CaughtError<'_>, clock: &Clock, limits: Limits) -> String {
    if clock.expired.load(Ordering::Relaxed) {
        return format!("the cell ran for more than {} s of CPU time and was stopped", limits.cell_time.as_secs());
    }
    if clock.stop.load(Ordering::Relaxed) {
        return "the cell was stopped".into();
    }
    match error {
        CaughtError::Exception(e) => e.message().unwrap_or_else(|| e.to_string()),
        CaughtError::Value(v) => value_text(&v),
        CaughtError::Error(rquickjs::Error::WouldBlock) => "the cell awaited a promise that never settles".into(),
        CaughtError::Error(e) => e.to_string(),
    }
}

fn value_text(value: &Value<'_>) -> String {
    if let Some(s) = value.as_string().and_then(|s| s.to_string().ok()) {
        return s;
    }
    value.get::<rquickjs::Coerced<String>>().map(|s| s.0).unwrap_or_else(|_| "a value was thrown".into())
}
