//! One model call: stream it, turn what arrives into canonical events as it
//! arrives, and assemble the complete response (text, reasoning, tool calls
//! whose arguments came in fragments, usage, finish reason).

use std::collections::BTreeMap;

use futures::StreamExt;

use crate::{
    protocol::{AgentRef, EventKind},
    providers::{FinishReason, ModelEvent, ModelProvider, ModelRequest, ProviderError, ToolCall, Usage},
    sessions::{Emitter, SessionError},
};
use tokio_util::sync::CancellationToken;

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

/// Streams one response from `provider`, emitting events for `agent`.
/// Wakes on: the next upstream event, or the turn's cancellation (which
/// drops the upstream request).
pub async fn run(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    events: &Emitter,
    cancelled: &CancellationToken,
    agent: &AgentRef,
) -> Result<StepOutput, StepError> {
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
    Ok(out)
}
