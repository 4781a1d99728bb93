//! The agent orchestrator: the [`TurnRunner`] that runs a session's turns on
//! the replica holding its lease.
//!
//! - `turn.rs` — the loop of one turn, from its last checkpoint to its end;
//! - `step.rs` — one streamed model call, as canonical events;
//! - `tools_phase.rs` — deciding, running, relaying and pausing tool calls;
//! - `permissions.rs` — tenant policy and request rules;
//! - `context.rs`, `compaction.rs` — context-window limits;
//! - `subagent.rs` — the `agent` tool: a nested loop with its own ids;
//! - `prompt.rs` — the system prompt and its switchable sections.

mod compaction;
pub mod context;
pub mod permissions;
pub mod prompt;
mod step;
mod subagent;
mod tools_phase;
mod turn;

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    providers::{ChatMessage, Providers, Role, ToolCall, ToolSpec},
    sessions::{Emitter, RunHandle, SessionDoc, TurnRunner, state::SessionOptions},
    telemetry::{attributes as attr, metrics::Metrics, timing::UpstreamTime},
    tools::{CallContext, ServerTools, ToolOutcome},
};
use tracing::Instrument as _;

pub struct Orchestrator {
    config: Arc<Config>,
    providers: Arc<Providers>,
    tools: Arc<ServerTools>,
    /// `ENABLED_PROMPTS`, read once at start-up.
    enabled_prompts: Option<Vec<String>>,
}

impl Orchestrator {
    pub fn new(config: Arc<Config>, enabled_prompts: Option<Vec<String>>) -> Arc<Self> {
        Arc::new(Self {
            providers: Arc::new(Providers::from_config(&config)),
            tools: ServerTools::from_config(&config),
            config,
            enabled_prompts,
        })
    }

    /// The history as sent to the model: the client's own system message if
    /// the conversation has one, else ours.
    fn messages_with_system(&self, doc: &SessionDoc) -> Vec<ChatMessage> {
        if doc.messages.first().is_some_and(|m| m.role == Role::System) {
            return doc.messages.clone();
        }
        let mut messages = Vec::with_capacity(doc.messages.len() + 1);
        messages.push(ChatMessage::text(Role::System, self.system_prompt(&doc.options)));
        messages.extend(doc.messages.iter().cloned());
        messages
    }

    pub fn system_prompt(&self, options: &SessionOptions) -> String {
        prompt::system_prompt(
            &options.behavior_controls,
            self.enabled_prompts.as_deref(),
            options.additional_system_prompt.as_deref(),
        )
    }

    /// Server tools, the request's frontend tools, and the `agent` tool.
    fn tool_specs(&self, options: &SessionOptions) -> Vec<ToolSpec> {
        let mut specs = self.tools.specs();
        specs.extend(options.frontend_tools.iter().map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        }));
        specs.push(subagent::spec());
        specs
    }

    fn exec_context(&self, handle: &RunHandle) -> ExecContext {
        let doc = handle.doc();
        ExecContext {
            tools: self.tools.clone(),
            providers: self.providers.clone(),
            config: self.config.clone(),
            model_alias: doc.model.clone(),
            options: doc.options.clone(),
            emitter: handle.emitter(),
            cancel: handle.cancelled().clone(),
            session_id: doc.id.clone(),
            tenant: doc.tenant.clone(),
            metrics: handle.sessions().metrics().clone(),
            upstream: handle.upstream_time().clone(),
        }
    }
}

#[async_trait]
impl TurnRunner for Orchestrator {
    async fn run(&self, handle: RunHandle) {
        turn::run(self, handle).await;
    }
}

/// What running a tool call needs, owned, so calls run in parallel while the
/// turn checkpoints their results.
#[derive(Clone)]
struct ExecContext {
    tools: Arc<ServerTools>,
    providers: Arc<Providers>,
    config: Arc<Config>,
    model_alias: String,
    options: SessionOptions,
    emitter: Emitter,
    cancel: CancellationToken,
    session_id: String,
    tenant: String,
    metrics: Arc<Metrics>,
    upstream: Arc<UpstreamTime>,
}

impl ExecContext {
    /// Runs one permitted call made by an agent at `depth` (0 = main), in an
    /// `execute_tool {name}` span (a child of the current one; an HTTP tool
    /// gets its trace context).
    fn execute<'a>(&'a self, call: &'a ToolCall, depth: u32) -> BoxFuture<'a, ToolOutcome> {
        let tool_type = if call.name == subagent::TOOL_NAME { "extension" } else { "function" };
        let span = tracing::info_span!(
            "execute_tool",
            { attr::OTEL_NAME } = format!("{} {}", attr::OPERATION_EXECUTE_TOOL, call.name),
            { attr::OTEL_STATUS_CODE } = tracing::field::Empty,
            { attr::GEN_AI_OPERATION_NAME } = attr::OPERATION_EXECUTE_TOOL,
            { attr::GEN_AI_TOOL_NAME } = &call.name,
            { attr::GEN_AI_TOOL_CALL_ID } = &call.id,
            { attr::GEN_AI_TOOL_TYPE } = tool_type,
            { attr::GEN_AI_CONVERSATION_ID } = &self.session_id,
        );
        let record = span.clone();
        let run = async move {
            if call.name == subagent::TOOL_NAME {
                return subagent::run(self, call, depth + 1).await;
            }
            let Some(tool) = self.tools.get(&call.name) else {
                return ToolOutcome::error(format!("there is no tool named {:?}", call.name));
            };
            let context = CallContext { session_id: &self.session_id, tenant: &self.tenant };
            let started = tokio::time::Instant::now();
            let outcome = self.tools.call(tool, call, &context).await;
            self.upstream.add(started.elapsed());
            outcome
        };
        Box::pin(async move {
            let outcome = run.instrument(span).await;
            if !outcome.ok {
                record.record(attr::OTEL_STATUS_CODE, "ERROR");
            }
            outcome
        })
    }

    fn max_depth(&self) -> u32 {
        self.options.max_depth.unwrap_or(self.config.agent.max_depth)
    }

    fn max_iterations(&self) -> u32 {
        self.options.max_iterations.unwrap_or(self.config.agent.max_iterations).max(1)
    }
}
