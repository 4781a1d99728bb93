//! Seed 001's endpoints beside `/api/chat`, each a durable session like it
//! (rejoinable with `GET /v1/sessions/{id}/events?format=holmes` and
//! `Last-Event-ID` on any replica):
//!
//! - `POST /api/investigate` / `POST /api/stream/investigate`: an issue
//!   (`source`, `title`, `description`, `subject`, `context`) investigated
//!   with the tools; the answer is asked for as structured output with one
//!   field per section (the request's `sections`, else HolmesGPT's
//!   defaults) and read back into `sections` and `analysis`
//!   (`protocol/holmes/investigation.rs`). Answered `{analysis, sections,
//!   tool_calls, instructions}`, or streamed as `start_tool_calling`,
//!   `tool_calling_result`, `ai_message`, `token_count` and a closing
//!   `ai_answer_end {sections, analysis, instructions, metadata}`.
//!   `tool_calls` always lists every call with its result (as HolmesGPT's
//!   server does, whatever `include_tool_calls` / `include_tool_call_results`
//!   say); `instructions` (runbooks) is empty: the gateway has no runbooks.
//! - `POST /api/issue_chat` / `POST /api/stream/issue_chat`: `/api/chat`
//!   about an issue investigated before — `investigation_result {result,
//!   tools}` and `issue_type` go into the system prompt.

use std::fmt;

use axum::{body::Bytes, extract::State, response::Response};
use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor},
};
use serde_json::{Map, Value, json};

use super::{
    chat_request, encoder,
    request::ChatRequest,
    respond::{Shape, respond},
    validation,
};
use crate::{
    domain::{ApprovalMode, ChatMessage, Role, Section, SessionOptions},
    error::{ApiError, FieldError},
    orchestrator::prompt,
    principal::Principal,
    protocol::holmes::investigation,
    sessions::NewSession,
    state::AppState,
};

/// The one prompt template served (HolmesGPT's default).
const DEFAULT_TEMPLATE: &str = "builtin://generic_investigation.jinja2";
/// Characters of earlier tool output an issue chat's system prompt holds,
/// shared equally by the tools.
const ISSUE_TOOLS_BUDGET: usize = 20_000;

#[derive(Debug, Deserialize)]
struct InvestigateRequest {
    source: String,
    title: String,
    description: String,
    subject: Map<String, Value>,
    context: Map<String, Value>,
    #[serde(default = "default_source_instance")]
    source_instance_id: String,
    /// Accepted; every call is listed (see the module docs).
    #[serde(default)]
    #[allow(dead_code)]
    include_tool_calls: bool,
    #[serde(default)]
    #[allow(dead_code)]
    include_tool_call_results: bool,
    #[serde(default = "default_template")]
    prompt_template: String,
    #[serde(default)]
    sections: Option<Sections>,
    #[serde(default)]
    model: Option<String>,
}

fn default_source_instance() -> String {
    "ApiRequest".into()
}

fn default_template() -> String {
    DEFAULT_TEMPLATE.into()
}

/// `sections`: title → what it should hold, in the request's order.
#[derive(Debug)]
struct Sections(Vec<Section>);

impl<'de> Deserialize<'de> for Sections {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Sections;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of section title to description")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sections, A::Error> {
                let mut sections = Vec::new();
                while let Some((title, description)) = map.next_entry::<String, String>()? {
                    sections.push(Section { title, description });
                }
                Ok(Sections(sections))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

/// `POST /api/investigate`.
pub async fn investigate(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = validation::parse(&body, "/api/investigate")?;
    run_investigation(state, principal, request, false).await
}

/// `POST /api/stream/investigate`.
pub async fn stream_investigate(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = validation::parse(&body, "/api/stream/investigate")?;
    run_investigation(state, principal, request, true).await
}

async fn run_investigation(
    state: AppState,
    principal: Principal,
    request: InvestigateRequest,
    stream: bool,
) -> Result<Response, ApiError> {
    if request.prompt_template != DEFAULT_TEMPLATE {
        return Err(ApiError::invalid_field(FieldError {
            loc: vec![json!("body"), json!("prompt_template")],
            msg: format!("Value error, only {DEFAULT_TEMPLATE} is served by this gateway"),
            kind: "value_error".into(),
        }));
    }
    let model = super::super::model_or_default(&state, &principal, request.model.as_deref())?;
    let sections = investigation::sections_or_default(request.sections.map(|s| s.0));
    let instructions = investigation::instructions(&sections);
    let options = SessionOptions {
        response_format: Some(investigation::response_format(&sections)),
        investigation: Some(sections),
        approval: ApprovalMode::Refuse,
        ..SessionOptions::default()
    };
    let system =
        prompt::system_prompt(&options.behavior_controls, state.enabled_prompts.as_deref(), Some(&instructions));
    let issue = json!({
        "source": request.source,
        "source_instance_id": request.source_instance_id,
        "title": request.title,
        "description": request.description,
        "subject": request.subject,
        "context": request.context,
    });
    let question = format!(
        "Investigate this issue: {}\n\n{}\n\n#This is context from the issue:\n{issue:#}",
        request.title, request.description
    );
    let seed = vec![ChatMessage::text(Role::System, system)];
    let new = NewSession { id: None, model: model.clone(), dialect: "holmes", options, files: None };
    let started =
        state.sessions.start_conversation(&principal, new, seed, ChatMessage::text(Role::User, question)).await?;
    let encoder = encoder(&state, &model);
    respond(state, principal, started, Shape::Investigation { stream }, encoder).await
}

#[derive(Debug, Deserialize)]
struct IssueChatRequest {
    investigation_result: InvestigationResult,
    issue_type: String,
    #[serde(flatten)]
    chat: ChatRequest,
}

#[derive(Debug, Deserialize)]
struct InvestigationResult {
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    tools: Option<Vec<ToolUsed>>,
}

#[derive(Debug, Deserialize)]
struct ToolUsed {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    output: Option<String>,
}

/// `POST /api/issue_chat`.
pub async fn issue_chat(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: IssueChatRequest = validation::parse(&body, "/api/issue_chat")?;
    chat_request(state, principal, with_issue(request)).await
}

/// `POST /api/stream/issue_chat`: `/api/issue_chat`, always streamed.
pub async fn stream_issue_chat(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: IssueChatRequest = validation::parse(&body, "/api/stream/issue_chat")?;
    let mut chat = with_issue(request);
    chat.stream = true;
    chat_request(state, principal, chat).await
}

/// The chat request with the investigation in its system prompt.
fn with_issue(request: IssueChatRequest) -> ChatRequest {
    let IssueChatRequest { investigation_result, issue_type, mut chat } = request;
    let mut context = format!(
        "This conversation follows an investigation of a {issue_type} issue.\n#### Results of issue \
         Investigation:\n{}\n",
        investigation_result.result.as_deref().unwrap_or("(none)")
    );
    let tools = investigation_result.tools.unwrap_or_default();
    if !tools.is_empty() {
        let share = ISSUE_TOOLS_BUDGET / tools.len();
        context.push_str("Tools used for the investigation:\n");
        for tool in &tools {
            let output = tool.output.as_deref().unwrap_or_default();
            let cut: String = output.chars().take(share).collect();
            context.push_str(&format!("- {}: {}\n{cut}\n", tool.name, tool.description.as_deref().unwrap_or_default()));
        }
    }
    chat.additional_system_prompt = Some(match chat.additional_system_prompt.take() {
        Some(extra) => format!("{context}\n{extra}"),
        None => context,
    });
    chat
}
