//! Every model call — a main-agent step, a subagent's step, a compaction's
//! summary, a one-shot call outside any session (`one_shot.rs`) — goes
//! through [`call`]: the tenant's token budget is reserved before it is
//! sent and settled to the reported usage after it, it runs in a
//! `chat {model}` CLIENT span with the GenAI attributes (the provider
//! request carries its trace context), and it is measured (time to first
//! token, duration by outcome, tokens by tenant and model). What arrives is
//! passed on as it arrives — as canonical events, or for a one-shot call as
//! deltas on a bounded channel, or not at all for a quiet call — and
//! assembled into the complete response.

use std::collections::BTreeMap;

use futures::StreamExt;
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::context;
use crate::{
    config::{Config, ModelConfig, StoreFailure},
    domain::{AgentRef, EventKind, FailureCode, StepOutput, ToolCall},
    providers::{FinishReason, ModelEvent, ModelProvider, ModelRequest, ProviderError},
    sessions::{Emitter, SessionError},
    store::{Quotas, TokenWindow},
    telemetry::{
        attributes as attr,
        metrics::{Metrics, ModelCallLabels, ModelLabels},
        timing::UpstreamTime,
    },
};

/// Who makes the call and what it is charged to: the labels of its span and
/// metrics, and the tenant's budget.
pub struct ModelCall<'a> {
    pub provider: &'a dyn ModelProvider,
    pub model: &'a ModelConfig,
    pub config: &'a Config,
    pub tenant: &'a str,
    pub session_id: &'a str,
    pub budget: &'a dyn Quotas,
    pub metrics: &'a Metrics,
    /// The turn's upstream time (`Server-Timing`).
    pub upstream: &'a UpstreamTime,
}

/// A stream that is always ready is checked for a cancel every this many
/// chunks (otherwise only when it waits).
const CANCEL_CHECK: u64 = 32;

/// `Retry-After` for a provider's rate limit that did not say how long.
const PROVIDER_RETRY_AFTER_SECS: u64 = 10;

/// Where a call's streamed output goes.
pub enum Output<'a> {
    /// As events of `agent`, to the session's clients.
    Events { emitter: &'a Emitter, agent: &'a AgentRef },
    /// Its text and reasoning, to whoever reads the channel (a one-shot
    /// call's client). Bounded: a slow reader slows the call down; a reader
    /// gone ends it as cancelled.
    Deltas(&'a mpsc::Sender<Delta>),
    /// Nowhere: only the assembled response counts (a compaction's summary).
    Quiet,
}

/// A piece of a call's streamed answer, for [`Output::Deltas`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
}

/// A failed call as its caller reports it: a code, a message safe to show
/// a client, and for a rate limit when a retry may pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
    pub retry_after_secs: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The tenant's token budget for this minute cannot take the call.
    #[error("the tenant's budget of {limit} model tokens per minute is spent; retry in {retry_after_secs} s")]
    OverBudget { limit: u64, retry_after_secs: u64 },
    /// The budget could not be checked (the store did not answer) and
    /// limits fail closed.
    #[error("the token budget cannot be checked")]
    BudgetUnchecked,
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl StepError {
    /// The failure to report, or the error itself when it is not the
    /// call's failure: a cancel, or a session error (the turn stops).
    pub fn into_failure(self) -> Result<Failure, Self> {
        let failed = |code, message: String| Ok(Failure { code, message, retry_after_secs: None });
        match self {
            Self::Provider(e) => Ok(provider_failure(&e)),
            Self::OverBudget { retry_after_secs, .. } => Ok(Failure {
                code: FailureCode::RateLimited,
                message: self.to_string(),
                retry_after_secs: Some(retry_after_secs),
            }),
            Self::BudgetUnchecked => failed(FailureCode::StoreUnavailable, self.to_string()),
            Self::Cancelled | Self::Session(_) => Err(self),
        }
    }

    /// `error.type` of the span: a low-cardinality class, never a message.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Provider(ProviderError::Http { .. }) => "http_error",
            Self::Provider(ProviderError::RateLimited { .. }) | Self::OverBudget { .. } => "rate_limited",
            Self::Provider(ProviderError::Timeout(_)) => "timeout",
            Self::Provider(ProviderError::Disconnected(_)) => "disconnected",
            Self::Provider(ProviderError::Protocol(_)) => "protocol",
            Self::BudgetUnchecked => "budget_unchecked",
            Self::Cancelled => "cancelled",
            Self::Session(_) => "session",
        }
    }
}

fn provider_failure(error: &ProviderError) -> Failure {
    let (code, message) = match error {
        ProviderError::RateLimited { retry_after } => {
            return Failure {
                code: FailureCode::RateLimited,
                message: "the model provider is rate limiting requests".to_string(),
                retry_after_secs: Some(retry_after.unwrap_or(PROVIDER_RETRY_AFTER_SECS)),
            };
        }
        ProviderError::Http { status, message, .. } => {
            (FailureCode::UpstreamError, format!("the model provider answered HTTP {status}: {message}"))
        }
        ProviderError::Timeout(what) => {
            (FailureCode::UpstreamTimeout, format!("the model provider timed out ({what})"))
        }
        ProviderError::Disconnected(_) => {
            (FailureCode::UpstreamDisconnected, "the connection to the model provider was lost mid-answer".to_string())
        }
        ProviderError::Protocol(detail) => {
            (FailureCode::UpstreamError, format!("the model provider's answer was unusable: {detail}"))
        }
    };
    Failure { code, message, retry_after_secs: None }
}

/// Makes one model call. Wakes on: the next upstream event, or `cancelled`
/// (which drops the upstream request).
pub async fn call(
    call: &ModelCall<'_>,
    request: ModelRequest,
    output: Output<'_>,
    cancelled: &CancellationToken,
) -> Result<StepOutput, StepError> {
    let reservation = reserve(call, &request).await?;
    let result = measured(call, request, output, cancelled).await;
    if let Some(reservation) = reservation {
        // A call that failed reports no usage: its reservation is given back.
        let used = result.as_ref().map_or(0, |o| o.usage.input_tokens + o.usage.output_tokens);
        reservation.settle(call, used).await;
    }
    result
}

/// Tokens of a model call reserved in the tenant's per-minute budget.
struct Reservation {
    window: TokenWindow,
    estimate: u64,
}

impl Reservation {
    /// Corrects the reservation to what the call used.
    async fn settle(self, call: &ModelCall<'_>, used: u64) {
        let delta = used as i64 - self.estimate as i64;
        if let Err(e) = call.budget.correct_tokens(call.tenant, self.window, delta).await {
            tracing::warn!(tenant = %call.tenant, error = %e, "cannot correct the token count");
        }
    }
}

/// Reserves the estimated tokens of a call (prompt plus the output it may
/// write) when the tenant has a budget.
async fn reserve(call: &ModelCall<'_>, request: &ModelRequest) -> Result<Option<Reservation>, StepError> {
    let limits = call.config.tenants.get(call.tenant).and_then(|t| t.rate_limit);
    let Some(limit) = limits.and_then(|l| l.tokens_per_minute) else { return Ok(None) };
    let estimate = context::estimate(&request.messages) + u64::from(request.max_output_tokens);
    match call.budget.reserve_tokens(call.tenant, estimate, limit).await {
        Ok(Some(window)) => Ok(Some(Reservation { window, estimate })),
        Ok(None) => {
            call.metrics.rate_limit(call.tenant, "limited_tokens");
            Err(StepError::OverBudget { limit, retry_after_secs: TokenWindow::seconds_left() })
        }
        Err(e) if call.config.on_store_error == StoreFailure::FailOpen => {
            tracing::warn!(tenant = %call.tenant, error = %e, "token budget unchecked (fail open)");
            Ok(None)
        }
        Err(_) => Err(StepError::BudgetUnchecked),
    }
}

/// The call in its span, measured.
async fn measured(
    call: &ModelCall<'_>,
    request: ModelRequest,
    output: Output<'_>,
    cancelled: &CancellationToken,
) -> Result<StepOutput, StepError> {
    let model = call.model;
    let agent_id = match &output {
        Output::Events { agent, .. } => agent.agent_id.as_str(),
        Output::Deltas(_) | Output::Quiet => "main",
    };
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
        { attr::GEN_AI_AGENT_ID } = agent_id,
        { attr::SERVER_ADDRESS } = model.server_address.as_str(),
        { attr::GEN_AI_RESPONSE_MODEL } = tracing::field::Empty,
        { attr::GEN_AI_USAGE_INPUT_TOKENS } = tracing::field::Empty,
        { attr::GEN_AI_USAGE_OUTPUT_TOKENS } = tracing::field::Empty,
        { attr::ERROR_TYPE } = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut first_token = None;
    // The span is entered where it is needed (the request, which carries
    // its trace context; errors logged in it), not at every chunk's poll.
    let result = stream(call.provider, request, &output, cancelled, &mut first_token, &span).await;
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

async fn stream(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    output: &Output<'_>,
    cancelled: &CancellationToken,
    first_token: &mut Option<Instant>,
    span: &tracing::Span,
) -> Result<(StepOutput, FinishReason), StepError> {
    let emit = |kind: EventKind| async move {
        match (output, kind) {
            (Output::Events { emitter, agent }, kind) => Ok(emitter.emit(agent, kind).await?),
            (Output::Deltas(deltas), EventKind::TextDelta { text }) => {
                deltas.send(Delta::Text(text)).await.map_err(|_| StepError::Cancelled)
            }
            (Output::Deltas(deltas), EventKind::ReasoningDelta { text }) => {
                deltas.send(Delta::Reasoning(text)).await.map_err(|_| StepError::Cancelled)
            }
            (Output::Deltas(_) | Output::Quiet, _) => Ok(()),
        }
    };
    // A continued answer starts with the text its clients already have.
    let mut out = StepOutput { text: request.prefill.clone().unwrap_or_default(), ..StepOutput::default() };
    let mut trim_next = out.text.ends_with(char::is_whitespace);
    // Waited for once per call, not registered anew at every chunk, and
    // polled only once it fired, not at every wait for a chunk.
    let mut cancel = crate::wake::Polled::new(cancelled.cancelled());
    let mut stream = tokio::select! {
        started = provider.stream(request).instrument(span.clone()) => started?,
        () = &mut cancel => return Err(StepError::Cancelled),
    };
    // index → (id, name, arguments so far)
    let mut calls: BTreeMap<u32, (String, String, String)> = BTreeMap::new();
    let mut finish = None;
    for read in 1u64.. {
        // The stream first: the cancel is looked at while it waits, and
        // every so often when it never does (an answer arriving faster than
        // it is read).
        if read % CANCEL_CHECK == 0 && cancelled.is_cancelled() {
            return Err(StepError::Cancelled);
        }
        let item = tokio::select! {
            biased;
            item = stream.next() => item,
            () = &mut cancel => return Err(StepError::Cancelled),
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
            ModelEvent::TextDelta(mut text) => {
                // The prefill sent had its trailing whitespace cut (Anthropic
                // refuses it); the model may write it again.
                if std::mem::take(&mut trim_next) {
                    text = text.trim_start().to_string();
                }
                out.text.push_str(&text);
                emit(EventKind::TextDelta { text }).await?;
            }
            ModelEvent::ReasoningDelta(text) => {
                out.reasoning.push_str(&text);
                emit(EventKind::ReasoningDelta { text }).await?;
            }
            ModelEvent::ToolCallStart { index, id, name } => {
                emit(EventKind::ToolCallStarted { tool_call_id: id.clone(), name: name.clone() }).await?;
                calls.insert(index, (id, name, String::new()));
            }
            ModelEvent::ToolCallDelta { index, fragment } => {
                let Some((id, _, arguments)) = calls.get_mut(&index) else {
                    return Err(ProviderError::Protocol(format!("arguments for unknown tool call {index}")).into());
                };
                arguments.push_str(&fragment);
                emit(EventKind::ToolCallArgs { tool_call_id: id.clone(), delta: fragment }).await?;
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
    Ok((out, finish))
}
