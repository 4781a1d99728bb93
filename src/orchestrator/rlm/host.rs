//! What a cell's host calls reach: `llm_query` (a child run with its own
//! REPL below `max_depth`, one flat model call at it) and `exec` (a command
//! in the session's sandbox), for the run of `agent` at `depth`.

use std::{sync::Arc, time::Duration};

use serde_json::json;
use tokio::sync::mpsc;

use super::{super::ExecContext, child, prompt};
use crate::{
    config::ModelConfig,
    domain::{
        AgentRef, ChatMessage, EventKind, Role, Usage,
        rlm::{ExecResult, HostResult},
        session::EXEC_TOOL,
    },
    orchestrator::{
        model_call::{self, ModelCall, Output, StepError},
        permissions::{self, Verdict},
    },
    providers::{ModelProvider, ModelRequest},
    sandbox::{Chunk, Ending, OutputStream},
};

/// The turn stopped while a host call ran: its result is not recorded (the
/// next owner makes the call again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stopped;

/// The host of one run's cells.
#[derive(Clone)]
pub(super) struct Host {
    pub context: ExecContext,
    pub model: Arc<ModelConfig>,
    pub provider: Arc<dyn ModelProvider>,
    /// The run's agent (the session's main agent at the root).
    pub agent: AgentRef,
    pub depth: u32,
    /// The request's `maxDepth`: runs at depth < `max_depth` have children.
    pub max_depth: u32,
    pub max_iterations: u32,
}

impl Host {
    pub fn model_call(&self) -> ModelCall<'_> {
        ModelCall {
            provider: self.provider.as_ref(),
            model: &self.model,
            config: &self.context.config,
            tenant: &self.context.tenant,
            session_id: &self.context.session_id,
            budget: self.context.sessions.token_budget(),
            metrics: self.context.sessions.metrics(),
            upstream: &self.context.upstream,
        }
    }

    pub fn request(&self, messages: Vec<ChatMessage>) -> ModelRequest {
        ModelRequest::plain(&self.model, messages)
    }

    /// The system prompt of this run, whose REPL `context` is `context`.
    pub fn system_prompt(&self, context: &str) -> String {
        prompt::system(context, self.context.config.rlm.sub_prompt_budget, self.depth, self.max_depth)
    }

    /// Streams a progress line of cell `cell` to the session's clients.
    pub async fn progress(&self, cell: &str, chunk: String, stderr: bool) {
        let stream = if stderr { "stderr" } else { "stdout" };
        let event = EventKind::ReplProgress { id: cell.to_string(), chunk, stream: stream.into() };
        let _ = self.context.emitter.emit(&self.agent, event).await;
    }

    /// `llm_query(prompt, context)` of cell `cell`: its answer (or the error
    /// the cell gets) and the usage of the model calls it made.
    pub async fn query(
        &self,
        cell: &str,
        prompt: String,
        context: Option<String>,
    ) -> Result<(HostResult, Usage), Stopped> {
        let budget = self.context.config.rlm.sub_prompt_budget;
        let length = prompt.chars().count();
        if length > budget {
            let error = format!(
                "llm_query prompt exceeds {budget} char limit (got {length}). Keep instructions short — pass data \
                 as the second argument (context)."
            );
            return Ok((HostResult::Query { result: Err(error) }, Usage::default()));
        }
        let context_length = context.as_deref().map_or(0, |c| c.chars().count());
        let note = format!("[llm_query] prompt={length} context={context_length} depth={}\n", self.depth);
        self.progress(cell, note, true).await;
        let (result, usage) = if self.depth < self.max_depth {
            // Boxed: a child's cells make host calls of their own.
            Box::pin(child::run(self, cell, prompt, context.unwrap_or_default())).await?
        } else {
            self.flat(prompt, context).await?
        };
        let chars = result.as_ref().map_or(0, |r| r.chars().count());
        self.progress(cell, format!("[llm_query] done result={chars} chars\n"), true).await;
        Ok((HostResult::Query { result }, usage))
    }

    /// One model call, no REPL: the prompt, then the context.
    async fn flat(&self, prompt: String, context: Option<String>) -> Result<(Result<String, String>, Usage), Stopped> {
        let text = match context {
            Some(context) if !context.is_empty() => format!("{prompt}\n\n{context}"),
            _ => prompt,
        };
        let request = self.request(vec![ChatMessage::text(Role::User, text)]);
        match model_call::call(&self.model_call(), request, Output::Quiet, &self.context.cancel).await {
            Ok(output) => {
                let usage = output.usage;
                let event = EventKind::Usage { usage, total: usage };
                let _ = self.context.emitter.emit(&self.agent, event).await;
                Ok((Ok(output.text), usage))
            }
            Err(e) => Ok((stopped(e)?, Usage::default())),
        }
    }

    /// Whether `command` may run without asking (the tenant's policy for
    /// `exec` and the request's rules).
    pub fn exec_verdict(&self, command: &str) -> Verdict {
        let options = &self.context.options;
        let mut rules = options.rules.clone();
        let arguments = json!({"command": command});
        // The tenant's policy for its shell, `bash`, under the name `exec`.
        let policy = self.context.defaults.permission("bash");
        permissions::decide(policy, EXEC_TOOL, "", &arguments, &mut rules, &options.session_allow)
    }

    /// Runs a permitted `exec` in the session's sandbox.
    pub async fn exec(&self, cell: &str, command: &str, timeout_secs: Option<f64>) -> Result<HostResult, Stopped> {
        let rlm = &self.context.config.rlm;
        let timeout = timeout_secs
            .filter(|t| t.is_finite() && *t > 0.0)
            .map_or(rlm.exec_timeout, Duration::from_secs_f64)
            .min(rlm.max_exec_timeout);
        let result = self.run_command(cell, command, timeout).await?;
        Ok(HostResult::Exec { result })
    }

    /// Whether this tenant's cells may run commands: `exec` is the REPL's
    /// shell, on when the tenant has the `bash` tool.
    pub fn exec_enabled(&self) -> bool {
        self.context.defaults.has("bash")
    }

    /// Runs `command` in the session's workspace, in the sandbox, its
    /// output streamed as `repl_progress` of `cell`.
    async fn run_command(
        &self,
        cell: &str,
        command: &str,
        timeout: Duration,
    ) -> Result<Result<ExecResult, String>, Stopped> {
        let workspace = match self.context.workspace().await {
            Ok(workspace) => workspace,
            Err(e) => return Ok(Err(format!("exec failed: the session's workspace is not available: {e}"))),
        };
        let (chunks, mut received) = mpsc::channel::<Chunk>(64);
        let run = workspace.exec(command, timeout, Some(chunks), &self.context.cancel);
        tokio::pin!(run);
        let started = tokio::time::Instant::now();
        let output = loop {
            tokio::select! {
                output = &mut run => break output,
                Some(chunk) = received.recv() => {
                    self.progress(cell, chunk.text, chunk.stream == OutputStream::Stderr).await;
                }
            }
        };
        while let Ok(chunk) = received.try_recv() {
            self.progress(cell, chunk.text, chunk.stream == OutputStream::Stderr).await;
        }
        self.context.upstream.add(started.elapsed());
        let output = match output {
            Ok(output) => output,
            Err(e) => return Ok(Err(format!("exec failed: {e}"))),
        };
        match output.ending {
            Ending::Cancelled => Err(Stopped),
            Ending::TimedOut => {
                let secs = timeout.as_secs_f64();
                self.progress(cell, format!("[exec] TIMEOUT after {secs}s — process killed\n"), true).await;
                let stderr = format!("exec timeout: killed after {secs}s");
                Ok(Ok(ExecResult { stdout: String::new(), stderr, exit_code: -1 }))
            }
            Ending::Exited => Ok(Ok(ExecResult {
                exit_code: output.exit_code_or_signal(),
                stdout: output.stdout,
                stderr: output.stderr,
            })),
        }
    }
}

/// A model call's failure as the cell sees it, or the turn's stop.
pub(super) fn stopped<T>(error: StepError) -> Result<Result<T, String>, Stopped> {
    match error {
        StepError::Cancelled | StepError::Session(_) => Err(Stopped),
        other => Ok(Err(format!("llm_query failed: {other}"))),
    }
}
