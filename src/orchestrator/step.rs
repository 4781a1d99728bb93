//! One model call: stream it, turn what arrives into canonical events as it
//! arrives, and assemble the complete response (text, reasoning, tool calls
//! whose arguments came in fragments, usage, finish reason).
//!
//! Each call runs in a `chat {model}` CLIENT span with the GenAI attributes
//! (the provider request carries its trace context), and is measured: time
//! to first token, duration by outcome, tokens by tenant and model.

use std::collections::BTreeMap;

use futures::StreamExt;
use tokio::time::Instant;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::{
    config::ModelConfig,
    protocol::{AgentRef, EventKind},
    providers::{FinishReason, ModelEvent, ModelProvider, ModelRequest, ProviderError, ToolCall, Usage},
    sessions::{Emitter, SessionError},
    telemetry::{
        attributes as attr,
        metrics::{Metrics, ModelCallLabels, ModelLabels},
        timing::UpstreamTime,
    },
};
use tokio_util::sync::CancellationToken;

/// What a model call is for: the labels of its span and metrics.
pub struct ModelCall<'a> {
    pub provider: &'a dyn ModelProvider,
    pub model: &'a ModelConfig,
    pub tenant: &'a str,
    pub session_id: &'a str,
    pub metrics: &'a Metrics,
    /// The turn's upstream time (`Server-Timing`).
    pub upstream: &'a UpstreamTime,
}

#[derive(Debug, Default)]
pub struct StepOutput {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl StepError {
    /// `error.type` of the span: a low-cardinality class, never a message.
    fn kind(&self) -> &'static str {
        match self {
            Self::Provider(ProviderError::Http { .. }) => "http_error",
            Self::Provider(ProviderError::RateLimited { .. }) => "rate_limited",
            Self::Provider(ProviderError::Timeout(_)) => "timeout",
            Self::Provider(ProviderError::Disconnected(_)) => "disconnected",
            Self::Provider(ProviderError::Protocol(_)) => "protocol",
            Self::Cancelled => "cancelled",
            Self::Session(_) => "session",
        }
    }
}

/// Streams one response, emitting events for `agent`. Wakes on: the next
/// upstream event, or the turn's cancellation (which drops the upstream
/// request).
pub async fn run(
    call: &ModelCall<'_>,
    request: ModelRequest,
    events: &Emitter,
    cancelled: &CancellationToken,
    agent: &AgentRef,
) -> Result<StepOutput, StepError> {
    let model = call.model;
    let span = tracing::info_span!(
        "chat",
        { attr::OTEL_NAME } = format!("{} {}", attr::OPERATION_CHAT, model.model),
        { attr::OTEL_KIND } = "client",
        { attr::OTEL_STATUS_CODE } = tracing::field::Empty,
        { attr::GEN_AI_OPERATION_NAME } = attr::OPERATION_CHAT,
        { attr::GEN_AI_PROVIDER_NAME } = call.provider.name(),
        { attr::GEN_AI_REQUEST_MODEL } = &model.model,
        { attr::GEN_AI_REQUEST_MAX_TOKENS } = i64::from(request.max_output_tokens),
        { attr::GEN_AI_CONVERSATION_ID } = call.session_id,
        { attr::GEN_AI_AGENT_ID } = &agent.agent_id,
        { attr::SERVER_ADDRESS } = server_address(&model.base_url),
        { attr::GEN_AI_RESPONSE_MODEL } = tracing::field::Empty,
        { attr::GEN_AI_USAGE_INPUT_TOKENS } = tracing::field::Empty,
        { attr::GEN_AI_USAGE_OUTPUT_TOKENS } = tracing::field::Empty,
        { attr::ERROR_TYPE } = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut first_token = None;
    let result =
        stream(call.provider, request, events, cancelled, agent, &mut first_token).instrument(span.clone()).await;
    let labels = ModelLabels { model: model.alias.clone(), provider: call.provider.name().to_string() };
    if let Some(at) = first_token {
        call.metrics.time_to_first_token.get_or_create(&labels).observe(at.duration_since(started).as_secs_f64());
    }
    let outcome = match &result {
        Ok((out, finish)) => {
            span.record(attr::GEN_AI_RESPONSE_MODEL, model.model.as_str());
            let reasons = vec![opentelemetry::StringValue::from(finish.as_str().to_string())];
            span.set_attribute(attr::GEN_AI_RESPONSE_FINISH_REASONS, opentelemetry::Value::Array(reasons.into()));
            span.record(attr::GEN_AI_USAGE_INPUT_TOKENS, out.usage.input_tokens as i64);
            span.record(attr::GEN_AI_USAGE_OUTPUT_TOKENS, out.usage.output_tokens as i64);
            call.metrics.tokens(call.tenant, &model.alias, out.usage.input_tokens, out.usage.output_tokens);
            "ok"
        }
        Err(StepError::Cancelled) => "cancelled",
        Err(e) => {
            span.record(attr::OTEL_STATUS_CODE, "ERROR");
            span.record(attr::ERROR_TYPE, e.kind());
            "error"
        }
    };
    let labels = ModelCallLabels { model: labels.model, provider: labels.provider, outcome: outcome.to_string() };
    call.metrics.model_call_duration.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
    call.upstream.add(started.elapsed());
    result.map(|(out, _)| out)
}

/// The host of a provider URL (`server.address`).
fn server_address(base_url: &str) -> String {
    reqwest::Url::parse(base_url).ok().and_then(|url| url.host_str().map(str::to_string)).unwrap_or_default()
}

async fn stream(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    events: &Emitter,
    cancelled: &CancellationToken,
    agent: &AgentRef,
    first_token: &mut Option<Instant>,
) -> Result<(StepOutput, FinishReason), StepError> {
    let mut stream = tokio::select! {
        started = provider.stream(request) => started?,
        () = cancelled.cancelled() => return Err(StepError::Cancelled),
    };
    let mut out = StepOutput::default();
    // index → (id, name, arguments so far)
    let mut calls: BTreeMap<u32, (String, String, String)> = BTreeMap::new();
    let mut finish = None;
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            () = cancelled.cancelled() => return Err(StepError::Cancelled),
        };
        let event = match item {
            None => break,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(event)) => event,
        };
        if first_token.is_none()
            && matches!(
                event,
                ModelEvent::TextDelta(_) | ModelEvent::ReasoningDelta(_) | ModelEvent::ToolCallStart { .. }
            )
        {
            *first_token = Some(Instant::now());
        }
        match event {
            ModelEvent::TextDelta(text) => {
                out.text.push_str(&text);
                events.emit(agent, EventKind::TextDelta { text }).await?;
            }
            ModelEvent::ReasoningDelta(text) => {
                out.reasoning.push_str(&text);
                events.emit(agent, EventKind::ReasoningDelta { text }).await?;
            }
            ModelEvent::ToolCallStart { index, id, name } => {
                events.emit(agent, EventKind::ToolCallStarted { tool_call_id: id.clone(), name: name.clone() }).await?;
                calls.insert(index, (id, name, String::new()));
            }
            ModelEvent::ToolCallDelta { index, fragment } => {
                let Some((id, _, arguments)) = calls.get_mut(&index) else {
                    return Err(ProviderError::Protocol(format!("arguments for unknown tool call {index}")).into());
                };
                arguments.push_str(&fragment);
                events.emit(agent, EventKind::ToolCallArgs { tool_call_id: id.clone(), delta: fragment }).await?;
            }
            ModelEvent::Usage(usage) => out.usage.add(&usage),
            ModelEvent::Finish(reason) => finish = Some(reason),
        }
    }
    let Some(finish) = finish else {
        return Err(ProviderError::Disconnected("the response ended without a finish reason".into()).into());
    };
    if finish == FinishReason::Length && calls.is_empty() && out.text.is_empty() {
        return Err(ProviderError::Protocol("the model hit its output limit before answering".into()).into());
    }
    out.calls = calls
        .into_values()
        .map(|(id, name, arguments)| ToolCall {
            id,
            name,
            arguments: if arguments.is_empty() { "{}".into() } else { arguments },
        })
        .collect();
    if !out.text.is_empty() || !out.reasoning.is_empty() {
        let content = (!out.text.is_empty()).then(|| out.text.clone());
        let reasoning = (!out.reasoning.is_empty()).then(|| out.reasoning.clone());
        events.emit(agent, EventKind::MessageCompleted { content, reasoning }).await?;
    }
    Ok((out, finish))
}
