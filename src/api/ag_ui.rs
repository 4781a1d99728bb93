//! The AG-UI endpoint (docs/protocols.md §6), for `@ag-ui/client`'s
//! `HttpAgent({url: "/v1/ag-ui"})`: `POST` a `RunAgentInput`, get the run's
//! events as SSE.
//!
//! The thread id is the session id (see [`client_chat`]): a new thread
//! starts a session seeded with the earlier messages' text; a known one
//! starts a turn with the last (user) message; a paused one is answered by
//! `resume` entries for its interrupts (`{interruptId: <relay id>, status:
//! "resolved", payload: {approved, reason?}}`, or `"cancelled"`: denied) and
//! `role: "tool"` messages for its frontend tool calls. The model is
//! `forwardedProps.model` (default: the tenant's `default_model`).
//!
//! Every run declares, in the commit that starts or resumes its turn
//! ([`crate::domain::Session::begin_run`]): `tools`, the run's frontend
//! tools (pause mode; a name of a server tool is a 400); `context`, given to
//! the model at the end of the system prompt; `state`, which replaces the
//! session's (`null` or absent keeps it). HTTP tools get the state and may
//! change it (see `tools/http.rs`); a frontend tool's change comes back as
//! the next run's `state`, as AG-UI clients send it. A run on a known
//! thread restates the stored conversation first (`MESSAGES_SNAPSHOT`).

use std::collections::HashSet;

use axum::{Json, extract::State, response::Response};
use serde::Deserialize;
use serde_json::Value;

use super::{
    client_chat::{self, Conversation},
    stream,
};
use crate::{
    domain::{
        Answers, ApprovalMode, ChatMessage, ContextEntry, Decision, FrontendMode, FrontendTool, Role, RunInput,
        Session, SessionOptions,
    },
    error::{ApiError, ErrorCode},
    principal::Principal,
    protocol::ag_ui::AgUiEncoder,
    sessions::NewSession,
    state::AppState,
};

/// `RunAgentInput`. Unknown fields (`protocolVersion`, `parentRunId`, …)
/// are accepted.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<AgMessage>,
    #[serde(default)]
    tools: Vec<AgTool>,
    #[serde(default)]
    context: Vec<ContextEntry>,
    #[serde(default)]
    state: Option<Value>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(default)]
    resume: Vec<ResumeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Vec<AgToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AgToolCall {
    id: String,
}

#[derive(Debug, Deserialize)]
struct AgTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// `POST /v1/ag-ui`.
pub async fn run(
    State(state): State<AppState>,
    principal: Principal,
    Json(input): Json<RunAgentInput>,
) -> Result<Response, ApiError> {
    client_chat::check_id("threadId", &input.thread_id)?;
    super::check_frontend_tools(&state, &input.frontend_tools())?;
    let requested = input.forwarded_props.as_ref().and_then(|p| p["model"].as_str());
    let model = super::model_or_default(&state, &principal, requested)?;
    // The run's tools, context and state come with every run (run_input).
    let options = SessionOptions { approval: ApprovalMode::Pause, ..SessionOptions::default() };
    let new = NewSession { id: None, model, dialect: "ag-ui", options, files: None };
    let proceeded = client_chat::proceed(&state, &principal, new, &input).await?;

    let known: HashSet<String> =
        input.messages.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone())).collect();
    let answered: HashSet<String> = if proceeded.resumed {
        input.messages.iter().filter_map(|m| m.tool_call_id.clone()).collect()
    } else {
        HashSet::new()
    };
    let mut encoder = AgUiEncoder::for_run(input.thread_id.clone(), input.run_id.clone(), known, answered)
        .frontend_tools(input.tools.iter().map(|t| t.name.clone()));
    if let Some(conversation) = proceeded.started.conversation() {
        encoder = encoder.restating(conversation);
    }
    let follower = state.sessions.follow_started(proceeded.started).await;
    Ok(stream::stream(&state, principal, input.thread_id, follower, Box::new(encoder)))
}

impl RunAgentInput {
    /// `tools`, as frontend tools the client runs (the run pauses for them).
    fn frontend_tools(&self) -> Vec<FrontendTool> {
        (self.tools.iter())
            .map(|t| FrontendTool {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
                mode: FrontendMode::Pause,
                noop_response: None,
            })
            .collect()
    }
}

impl Conversation for RunAgentInput {
    fn chat_id(&self) -> &str {
        &self.thread_id
    }

    fn run_input(&self) -> Option<RunInput> {
        Some(RunInput {
            frontend_tools: self.frontend_tools(),
            context: self.context.clone(),
            state: self.state.clone().filter(|s| !s.is_null()),
        })
    }

    fn restates(&self) -> bool {
        true
    }

    fn turn(&self) -> Option<(ChatMessage, Vec<ChatMessage>)> {
        let (last, earlier) = self.messages.split_last()?;
        let text = text_of(last);
        if last.role != "user" || text.is_empty() {
            return None;
        }
        let history = earlier
            .iter()
            .filter_map(|m| {
                let role = match m.role.as_str() {
                    "system" | "developer" => Role::System,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    _ => return None,
                };
                let text = text_of(m);
                (!text.is_empty()).then(|| ChatMessage::text(role, text))
            })
            .collect();
        Some((ChatMessage::text(Role::User, text), history))
    }

    fn answers(&self, session: &Session) -> Result<Answers, ApiError> {
        let mut resume = Answers::default();
        let (mut missing_calls, mut missing_approvals) = (Vec::new(), Vec::new());
        let (pending_calls, pending_relays) = (session.pending_calls(), session.pending_relays());
        for call in &pending_calls {
            let result = self
                .messages
                .iter()
                .rev()
                .find(|m| m.role == "tool" && m.tool_call_id.as_deref() == Some(call.tool_call_id.as_str()));
            match result {
                Some(message) => resume.outputs.push((call.tool_call_id.clone(), content_text(&message.content))),
                None => missing_calls.push(call.tool_call_id.as_str()),
            }
        }
        for relay in &pending_relays {
            let Some((i, entry)) = self.resume.iter().enumerate().find(|(_, e)| e.interrupt_id == relay.relay_id)
            else {
                missing_approvals.push(relay.tool_call_id.as_str());
                continue;
            };
            let (approved, reason) = match entry.status {
                ResumeStatus::Cancelled => (false, Some("the user cancelled the request".to_string())),
                ResumeStatus::Resolved => {
                    let payload = entry.payload.as_ref().unwrap_or(&Value::Null);
                    let approved = payload["approved"].as_bool().ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::ValidationFailed,
                            format!("resume[{i}].payload.approved: a boolean is required"),
                        )
                    })?;
                    (approved, payload["reason"].as_str().map(str::to_string))
                }
            };
            resume.decisions.push(Decision { tool_call_id: relay.tool_call_id.clone(), approved, reason });
        }
        if missing_calls.is_empty() && missing_approvals.is_empty() {
            Ok(resume)
        } else {
            Err(client_chat::still_waiting(&missing_calls, &missing_approvals))
        }
    }
}

/// A message's text: its `content` string, or its text parts joined.
fn text_of(message: &AgMessage) -> String {
    match &message.content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> =
                parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// A tool message's content as the model sees it.
fn content_text(content: &Option<Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}
