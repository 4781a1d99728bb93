//! The `agent` tool: a subagent with its own loop, its own `agent_id`, and
//! its parent's tool call as `parent_id`. It may use server tools that are
//! allowed without asking (it cannot wait for a relay or pause for a client)
//! and start subagents of its own up to `maxDepth`. Its events go to the
//! session's log like the main agent's, and its model calls are charged to
//! the tenant's token budget like the main agent's. It is not committed
//! step by step: a takeover runs an unfinished `agent` call again (with a
//! new agent id).

use serde_json::{Value, json};

use super::{
    ExecContext,
    model_call::{self, ModelCall, Output},
    permissions,
    permissions::Verdict,
};
use crate::{
    domain::{AgentRef, ChatMessage, EventKind, Role, ToolCall, ToolOutcome},
    providers::{ModelRequest, ToolSpec},
};

pub const TOOL_NAME: &str = "agent";

const SUBAGENT_PROMPT: &str = "You are a subagent. Complete the task you are given, using the tools offered \
when they help, and answer with the result only.";

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: TOOL_NAME.into(),
        description: "Start a subagent to work on a self-contained task; it answers with its result.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the subagent should do"}},
            "required": ["task"],
        }),
    }
}

/// Runs a subagent at `depth` for `call`; its answer is the call's output.
pub(super) async fn run(context: &ExecContext, call: &ToolCall, depth: u32) -> ToolOutcome {
    let max_depth = context.max_depth();
    if depth > max_depth {
        return ToolOutcome::error(format!(
            "subagents may nest at most {max_depth} deep; do this task yourself instead"
        ));
    }
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let Some(task) = arguments.get("task").and_then(Value::as_str) else {
        return ToolOutcome::error("the agent tool needs a \"task\" string");
    };
    let resolved = context.config.model(&context.model_alias);
    let Some((model, provider)) =
        resolved.and_then(|m| Some((context.providers.get(&context.tenant, m.key)?, m.config))).map(|(p, m)| (m, p))
    else {
        return ToolOutcome::error("the session's model is not configured");
    };
    let model = &*model;
    let agent = AgentRef {
        agent_id: format!("agent_{}", uuid::Uuid::new_v4().simple()),
        parent_id: Some(call.id.clone()),
        depth,
    };
    let mut messages = vec![ChatMessage::text(Role::System, SUBAGENT_PROMPT), ChatMessage::text(Role::User, task)];
    let mut tools = context.tools.specs();
    if !context.mcp_servers.is_empty() {
        tools.extend(context.mcp.specs(&context.mcp_servers, context.sessions.metrics()).await);
    }
    tools.extend(crate::tools::workspace_tools::specs().iter().filter(|s| context.defaults.has(&s.name)).cloned());
    tools.push(spec());
    for _ in 0..context.max_iterations() {
        let request = ModelRequest {
            model: model.model.clone(),
            messages: messages.clone(),
            tools: tools.clone(),
            max_output_tokens: model.max_output_tokens,
            response_format: None,
            prefill: None,
            reasoning: None,
        };
        let call = ModelCall {
            provider: provider.as_ref(),
            model,
            config: &context.config,
            tenant: &context.tenant,
            session_id: &context.session_id,
            budget: context.sessions.token_budget(),
            metrics: context.sessions.metrics(),
            upstream: &context.upstream,
        };
        let output = Output::Events { emitter: &context.emitter, agent: &agent };
        let output = match model_call::call(&call, request, output, &context.cancel).await {
            Ok(output) => output,
            Err(e) => return ToolOutcome::error(format!("the subagent failed: {e}")),
        };
        if !output.text.is_empty() || !output.reasoning.is_empty() {
            let completed = EventKind::MessageCompleted {
                content: (!output.text.is_empty()).then(|| output.text.clone()),
                reasoning: (!output.reasoning.is_empty()).then(|| output.reasoning.clone()),
            };
            let _ = context.emitter.emit(&agent, completed).await;
        }
        let mut assistant = ChatMessage::text(Role::Assistant, output.text.clone());
        assistant.tool_calls = output.calls.clone();
        messages.push(assistant);
        if output.calls.is_empty() {
            return ToolOutcome::Success(output.text);
        }
        for sub_call in &output.calls {
            let outcome = run_call(context, sub_call, &agent).await;
            let event = EventKind::ToolResult {
                tool_call_id: sub_call.id.clone(),
                name: sub_call.name.clone(),
                status: outcome.status(),
                output: Value::String(outcome.output()),
            };
            let _ = context.emitter.emit(&agent, event).await;
            messages.push(ChatMessage::tool_result(&sub_call.id, outcome.output()));
        }
    }
    ToolOutcome::error("the subagent reached its iteration limit without an answer")
}

async fn run_call(context: &ExecContext, call: &ToolCall, agent: &AgentRef) -> ToolOutcome {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let policy = context.tools.get(&call.name).map(|tool| tool.permission).or_else(|| {
        (crate::tools::workspace_tools::NAMES.contains(&call.name.as_str()) && context.defaults.has(&call.name))
            .then(|| context.defaults.permission(&call.name))
    });
    let permitted = call.name == TOOL_NAME
        || policy.is_some_and(|policy| {
            let mut rules = context.options.rules.clone();
            let verdict = permissions::decide(
                policy,
                &call.name,
                &call.id,
                &arguments,
                &mut rules,
                &context.options.session_allow,
            );
            verdict == Verdict::Allow
        });
    if !permitted {
        return ToolOutcome::error(format!(
            "subagents cannot ask for permission: {} is not allowed without asking",
            call.name
        ));
    }
    let announce =
        EventKind::ToolCall { tool_call_id: call.id.clone(), name: call.name.clone(), arguments: arguments.clone() };
    let _ = context.emitter.emit(agent, announce).await;
    context.execute(call, agent.depth).await.outcome
}
