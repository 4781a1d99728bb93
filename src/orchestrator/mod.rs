//! The agent orchestrator: the [`TurnRunner`] that runs a session's turns on
//! the replica holding its lease.
//!
//! - `turn.rs` — the loop of one turn, from its last commit to its end;
//! - `model_call.rs` — every model call (token budget, span, metrics,
//!   stream), as canonical events;
//! - `one_shot.rs` — one streamed call outside any session (`/summarize`);
//! - `title.rs` — the title phase after a session's first exchange;
//! - `tools_phase.rs` — deciding, running, relaying and pausing tool calls;
//! - `permissions.rs` — tenant policy and request rules;
//! - `context.rs`, `compaction.rs` — context-window limits;
//! - `subagent.rs` — the `agent` tool: a nested loop with its own ids;
//! - `rlm/` — rlm mode: a REPL loop instead of the tool loop;
//! - `prompt.rs` — the system prompt and its switchable sections.

mod compaction;
pub mod context;
mod end;
mod model_call;
pub mod one_shot;
pub mod permissions;
pub mod prompt;
mod rlm;
mod subagent;
mod title;
mod tools_phase;
mod turn;

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Config, DefaultTools, ModelConfig},
    domain::{AgentRef, ChatMessage, Role, Session, SessionOptions, ToolCall, ToolOutcome},
    providers::{ModelProvider, Providers, ToolSpec},
    sessions::{Emitter, RunHandle, Sessions, TurnRunner},
    telemetry::{attributes as attr, timing::UpstreamTime},
    tools::{CallContext, ServerTools, ToolReply, mcp::McpServers, skills::Skill, workspace_tools},
    workspace::{Workspace, Workspaces},
};
use tracing::Instrument as _;

pub struct Orchestrator {
    config: Arc<Config>,
    providers: Arc<Providers>,
    tools: Arc<ServerTools>,
    /// The `[[mcp_servers]]`' clients.
    mcp: Arc<McpServers>,
    /// The workspaces of the sessions this replica runs (`bash`, `read`,
    /// `patch`, and the rlm REPL's `exec`).
    pub workspaces: Arc<Workspaces>,
    /// Skills told to agents whose tenant has `read` (found at start-up).
    skills: Arc<Vec<Skill>>,
    /// `ENABLED_PROMPTS`, read once at start-up.
    enabled_prompts: Option<Vec<String>>,
}

impl Orchestrator {
    /// `providers` are the app's (built once from `config`; the handler of
    /// one-shot calls uses them too).
    pub fn new(
        config: Arc<Config>,
        providers: Arc<Providers>,
        enabled_prompts: Option<Vec<String>>,
        workspaces: Arc<Workspaces>,
        skills: Vec<Skill>,
    ) -> Arc<Self> {
        Arc::new(Self {
            providers,
            tools: ServerTools::from_config(&config),
            mcp: McpServers::from_config(&config),
            config,
            enabled_prompts,
            workspaces,
            skills: Arc::new(skills),
        })
    }

    /// The default tools `tenant` has (none for an unknown tenant).
    fn default_tools(&self, tenant: &str) -> &DefaultTools {
        static NONE: std::sync::LazyLock<DefaultTools> =
            std::sync::LazyLock::new(|| DefaultTools { enabled: Vec::new(), ..DefaultTools::default() });
        self.config.tenants.get(tenant).map_or(&NONE, |t| &t.tools)
    }

    /// The MCP servers whose tools `tenant`'s sessions get.
    fn mcp_servers_of(&self, tenant: &str) -> Vec<String> {
        self.config.tenants.get(tenant).map(|t| t.mcp_servers.clone()).unwrap_or_default()
    }

    /// The history as sent to the model: the client's own system message if
    /// the conversation has one, else ours; either way with the context the
    /// client gave its run (AG-UI's `context`) appended to it.
    fn messages_with_system(&self, session: &Session) -> Vec<ChatMessage> {
        self.messages_with_system_of(session, session.history().unwrap_or_default())
    }

    /// [`Orchestrator::messages_with_system`] for `messages` of `session`.
    fn messages_with_system_of(&self, session: &Session, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out = if messages.first().is_some_and(|m| m.role == Role::System) {
            messages.to_vec()
        } else {
            let mut out = Vec::with_capacity(messages.len() + 1);
            out.push(ChatMessage::text(Role::System, self.system_prompt(session.options())));
            out.extend(messages.iter().cloned());
            out
        };
        // llm-gateway's skills: a leading system message (agent mode).
        if !self.skills.is_empty() && self.default_tools(session.tenant()).has("read") {
            out.insert(1, ChatMessage::text(Role::System, crate::tools::skills::prompt(&self.skills)));
        }
        if let Some(context) = prompt::context_section(&session.options().context) {
            let system = out[0].content.get_or_insert_with(String::new);
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&context);
        }
        out
    }

    /// A model call of the turn `handle` runs, charged to its tenant.
    fn model_call<'a>(
        &'a self,
        handle: &'a RunHandle,
        model: &'a ModelConfig,
        provider: &'a dyn ModelProvider,
    ) -> model_call::ModelCall<'a> {
        model_call::ModelCall {
            provider,
            model,
            config: &self.config,
            tenant: &handle.key().tenant,
            session_id: &handle.key().id,
            budget: handle.sessions().token_budget(),
            metrics: handle.sessions().metrics(),
            upstream: handle.upstream_time(),
        }
    }

    pub fn system_prompt(&self, options: &SessionOptions) -> String {
        prompt::system_prompt(
            &options.behavior_controls,
            self.enabled_prompts.as_deref(),
            options.additional_system_prompt.as_deref(),
        )
    }

    /// Server tools, the tenant's default tools (`bash`, `read`, `patch`,
    /// `agent`) and the request's frontend tools.
    fn tool_specs(&self, tenant: &str, options: &SessionOptions) -> Vec<ToolSpec> {
        let defaults = self.default_tools(tenant);
        let mut specs = self.tools.specs();
        specs.extend(workspace_tools::specs().iter().filter(|s| defaults.has(&s.name)).cloned());
        specs.extend(options.frontend_tools.iter().map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        }));
        if defaults.has(subagent::TOOL_NAME) {
            specs.push(subagent::spec());
        }
        specs
    }

    fn exec_context(&self, handle: &RunHandle) -> ExecContext {
        let session = handle.session();
        ExecContext {
            tools: self.tools.clone(),
            mcp: self.mcp.clone(),
            mcp_servers: self.mcp_servers_of(session.tenant()),
            providers: self.providers.clone(),
            config: self.config.clone(),
            model_alias: session.model().to_string(),
            options: session.options().clone(),
            emitter: handle.emitter(),
            cancel: handle.cancelled().clone(),
            session_id: session.id().to_string(),
            tenant: session.tenant().to_string(),
            state: session.state().clone(),
            sessions: handle.sessions().clone(),
            upstream: handle.upstream_time().clone(),
            defaults: self.default_tools(session.tenant()).clone(),
            workspaces: self.workspaces.clone(),
            epoch: handle.epoch(),
            key: handle.key().clone(),
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
    mcp: Arc<McpServers>,
    /// The MCP servers of the session's tenant.
    mcp_servers: Vec<String>,
    providers: Arc<Providers>,
    config: Arc<Config>,
    model_alias: String,
    options: SessionOptions,
    emitter: Emitter,
    cancel: CancellationToken,
    session_id: String,
    tenant: String,
    /// The session's state as the tools phase began, for HTTP tools.
    state: serde_json::Value,
    /// The token budget and metrics of model calls.
    sessions: Sessions,
    upstream: Arc<UpstreamTime>,
    /// The tenant's default tools and their permissions.
    defaults: DefaultTools,
    workspaces: Arc<Workspaces>,
    /// The tenure the workspace is materialised for.
    epoch: u64,
    key: crate::store::SessionKey,
}

impl ExecContext {
    /// Runs one permitted call made by an agent at `depth` (0 = main), in an
    /// `execute_tool {name}` span (a child of the current one; an HTTP tool
    /// gets its trace context). Only the main agent's calls change the
    /// session's state: a subagent's caller keeps just the outcome.
    fn execute<'a>(&'a self, call: &'a ToolCall, depth: u32) -> BoxFuture<'a, ToolReply> {
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
            { attr::MCP_SERVER } = crate::config::mcp::server_of(&call.name),
        );
        let record = span.clone();
        let run = async move {
            if call.name == subagent::TOOL_NAME && self.defaults.has(subagent::TOOL_NAME) {
                return subagent::run(self, call, depth + 1).await.into();
            }
            if workspace_tools::NAMES.contains(&call.name.as_str()) && self.defaults.has(&call.name) {
                let workspace = match self.workspace().await {
                    Ok(workspace) => workspace,
                    Err(e) => {
                        return ToolOutcome::error(format!("the session's workspace is not available: {e}")).into();
                    }
                };
                let agent = AgentRef { agent_id: "main".into(), parent_id: None, depth };
                let answer = workspace_tools::run(&workspace, call, &self.emitter, &agent, &self.cancel).await;
                return ToolReply { outcome: answer.outcome, state_delta: None, shaped: Some(answer.result) };
            }
            if crate::config::mcp::server_of(&call.name).is_some() {
                let key = format!("{}:{}", self.session_id, call.id);
                let metrics = self.sessions.metrics();
                let started = tokio::time::Instant::now();
                let reply = self.mcp.call(&self.mcp_servers, call, &key, metrics).await;
                self.upstream.add(started.elapsed());
                return reply;
            }
            let Some(tool) = self.tools.get(&call.name) else {
                return ToolOutcome::error(format!("there is no tool named {:?}", call.name)).into();
            };
            let context = CallContext { session_id: &self.session_id, tenant: &self.tenant, state: &self.state };
            let started = tokio::time::Instant::now();
            let reply = self.tools.call(tool, call, &context).await;
            self.upstream.add(started.elapsed());
            reply
        };
        Box::pin(async move {
            let reply: ToolReply = run.instrument(span).await;
            if !reply.outcome.is_success() {
                record.record(attr::OTEL_STATUS_CODE, "ERROR");
            }
            reply
        })
    }

    /// The session's workspace, materialised for this tenure at first use.
    /// This is what the rlm REPL's `exec` runs in too.
    pub(crate) async fn workspace(&self) -> Result<Arc<Workspace>, crate::workspace::WorkspaceError> {
        self.workspaces.open(&self.key, self.epoch, self.defaults.network).await
    }

    /// Whether a call may change the workspace (it holds the workspace's
    /// lock from its start to its commit).
    fn changes_files(&self, call: &ToolCall) -> bool {
        self.defaults.uses_workspace()
            && ["bash", "patch", "read", subagent::TOOL_NAME].contains(&call.name.as_str())
            && self.defaults.has(&call.name)
    }

    fn max_depth(&self) -> u32 {
        self.options.max_depth.unwrap_or(self.config.agent.max_depth)
    }

    fn max_iterations(&self) -> u32 {
        self.options.max_iterations.unwrap_or(self.config.agent.max_iterations).max(1)
    }
}
