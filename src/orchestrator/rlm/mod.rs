//! rlm mode (llm-gateway's `mode: "rlm"`, docs/llm-gateway-tools.md §3): a turn whose
//! model writes one ```` ```js ```` cell per reply, run in the session's
//! REPL (`crate::repl`), whose output is the model's next input, until a
//! cell calls `FINAL(answer)` or the turn uses its iterations.
//!
//! ```text
//! rebuild:  replay the finished cells from their tapes (no host call made);
//!           a cell that prints otherwise → step_restarted, ask again from before it
//! resume:   the cell that was running → run it on, its recorded host calls replayed
//! loop:     model reply → commit (repl_input, or the error the model gets)
//!           cell → each llm_query / exec answer committed before the cell sees it
//!                → commit (repl_output; with FINAL, the answer and the turn's end)
//! ```
//!
//! - `host.rs` — `llm_query` and `exec` for a run at a depth;
//! - `cell.rs` — one cell run live, its host calls answered and recorded;
//! - `child.rs` — a nested run below `maxDepth`;
//! - `prompt.rs` — the system prompt.

mod cell;
mod child;
mod host;
mod prompt;

use std::sync::Arc;

use self::{
    cell::{Owner, Served},
    host::Host,
};
use super::{
    Orchestrator,
    end::{End, step_failure},
    model_call::{self, Output},
};
use crate::{
    config::{Config, ModelConfig},
    domain::{ChatMessage, FailureCode, RlmReply, Role, TurnEndReason, rlm::Cell},
    providers::ModelProvider,
    repl::{self, Limits, Repl},
    sessions::{RunHandle, SessionError, main_agent},
};

/// The REPL limits of the configuration.
pub(super) fn limits(config: &Config) -> Limits {
    Limits {
        memory_bytes: config.rlm.memory_bytes,
        cell_time: config.rlm.cell_timeout,
        max_stdout: Limits::default().max_stdout,
    }
}

/// Runs an rlm turn from its last commit to its end.
pub(super) async fn drive(
    orchestrator: &Orchestrator,
    handle: &mut RunHandle,
    model: Arc<ModelConfig>,
    provider: Arc<dyn ModelProvider>,
) -> Result<End, SessionError> {
    let options = handle.session().options().rlm.clone().unwrap_or_default();
    let host = Host {
        context: orchestrator.exec_context(handle),
        model,
        provider,
        agent: main_agent(),
        depth: 0,
        max_depth: options.max_depth,
        max_iterations: handle.session().options().max_iterations.unwrap_or(orchestrator.config.rlm.max_iterations),
    };
    let repl = loop {
        let repl = match Repl::start(options.context.clone(), limits(&orchestrator.config)) {
            Ok(repl) => repl,
            Err(e) => return Ok(broken(e.to_string())),
        };
        match rebuild(&repl, handle).await? {
            Rebuilt::Ready => break repl,
            Rebuilt::Diverged(index) => {
                let replica = handle.sessions().replica().to_string();
                handle.transition(|s| s.rlm_restart(index, &replica)).await?;
            }
            Rebuilt::Broken(e) => return Ok(broken(e)),
        }
    };
    if let Some(cell) = handle.session().rlm().and_then(|r| r.open_cell()).cloned() {
        if let Some(end) = run_cell(&host, &repl, handle, &cell).await? {
            return Ok(end);
        }
    }
    loop {
        if handle.cancelled().is_cancelled() {
            return Ok(End::Stopped);
        }
        if handle.session().iterations() >= host.max_iterations {
            return Ok(End::Finished(TurnEndReason::MaxIterations));
        }
        let mut request = host.request(messages(&host, handle, &options.context));
        request.prefill = handle.take_continuation();
        let emitter = handle.emitter();
        let output = Output::Events { emitter: &emitter, agent: &host.agent };
        let output = match model_call::call(&host.model_call(), request, output, handle.cancelled()).await {
            Ok(output) => output,
            Err(e) => return step_failure(e),
        };
        let reply = match repl::extract(&output.text) {
            Ok(code) => RlmReply::Cell { id: uuid::Uuid::now_v7().to_string(), code },
            Err(message) => RlmReply::NoCell(message),
        };
        handle.transition(|s| s.rlm_reply(output, reply)).await?;
        if let Some(cell) = handle.session().rlm().and_then(|r| r.open_cell()).cloned() {
            if let Some(end) = run_cell(&host, &repl, handle, &cell).await? {
                return Ok(end);
            }
        }
    }
}

/// How rebuilding the REPL went.
enum Rebuilt {
    Ready,
    /// Cell `index` printed something else than it had.
    Diverged(usize),
    Broken(String),
}

/// Replays the finished cells of the turn on a fresh REPL, checking each
/// prints what it printed.
async fn rebuild(repl: &Repl, handle: &RunHandle) -> Result<Rebuilt, SessionError> {
    let Some(rlm) = handle.session().rlm() else { return Ok(Rebuilt::Ready) };
    for (index, cell) in rlm.finished().iter().enumerate() {
        let mut messages = match repl.run(&cell.code, cell.tape.clone(), false) {
            Ok(messages) => messages,
            Err(e) => return Ok(Rebuilt::Broken(e.to_string())),
        };
        let end = loop {
            match messages.recv().await {
                Some(repl::Message::Done(end)) => break end,
                Some(_) => continue,
                None => return Ok(Rebuilt::Broken("the REPL stopped".into())),
            }
        };
        let recorded = cell.output.as_ref().map(|o| (&o.stdout, &o.error));
        if end.diverged.is_some() || recorded != Some((&end.output.stdout, &end.output.error)) {
            tracing::warn!(cell = index, "an rlm cell's replay diverged; the model is asked again from before it");
            return Ok(Rebuilt::Diverged(index));
        }
    }
    Ok(Rebuilt::Ready)
}

/// Runs the turn's open cell on to its end and commits it; the turn's end
/// when it answered (committed with the end) or stopped.
async fn run_cell(host: &Host, repl: &Repl, handle: &mut RunHandle, cell: &Cell) -> Result<Option<End>, SessionError> {
    let served = cell::serve(host, repl, &cell.id, &cell.code, cell.tape.clone(), Owner::Turn(handle)).await?;
    let end = match served {
        Served::Done { end, .. } => end,
        Served::Stopped => return Ok(Some(End::Stopped)),
        Served::Broken(e) => return Ok(Some(broken(e))),
    };
    handle.apply(|s| s.rlm_cell_done(end.tape, end.output))?;
    if handle.session().rlm_answered() {
        // Committed with the turn's end, in one commit.
        return Ok(Some(End::Finished(TurnEndReason::Final)));
    }
    handle.commit().await?;
    Ok(None)
}

/// What the model sees: the rlm system prompt (with the client's own
/// system message after it), the conversation, the REPL loop so far.
fn messages(host: &Host, handle: &RunHandle, context: &str) -> Vec<ChatMessage> {
    let session = handle.session();
    let conversation = session.history().unwrap_or_default();
    let mut system = host.system_prompt(context);
    let rest = match conversation.first() {
        Some(first) if first.role == Role::System => {
            system.push_str("\n\n");
            system.push_str(first.content.as_deref().unwrap_or_default());
            &conversation[1..]
        }
        _ => conversation,
    };
    let mut out = vec![ChatMessage::text(Role::System, system)];
    out.extend(rest.iter().cloned());
    out.extend(session.rlm().map(|r| r.messages.clone()).unwrap_or_default());
    out
}

fn broken(error: String) -> End {
    End::Failed { code: FailureCode::Internal, message: format!("the REPL failed: {error}"), retry_after_secs: None }
}
