//! llm-gateway's `POST /summarize` (docs/llm-gateway-tools.md §4): `{model?, messages,
//! sourceIds?}`, summarized by one model call and streamed as SSE (frames:
//! `protocol::llm_gateway::summary`). As in llm-gateway it is a raw call:
//! no agent loop, no tools, no relay — and here not a session either, so
//! nothing is stored and there is nothing to rejoin.
//!
//! The call is the orchestrator's one-shot call, so it is charged to the
//! tenant's token budget, traced and measured like every model call. It
//! runs as a task of the app's tracker (the budget is settled even when
//! the client leaves), cancelled when the response is dropped or the
//! replica shuts down; its deltas reach the response through a bounded
//! channel.

use axum::{body::Bytes, extract::State, response::Response};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::DropGuard;
use tracing::Instrument as _;

use crate::{
    api::stream,
    domain::{ChatMessage, Role, Usage},
    error::ApiError,
    orchestrator::one_shot::{self, Delta, OneShot, OneShotError},
    principal::Principal,
    protocol::{Frame, llm_gateway::summary::SummaryEncoder},
    state::AppState,
    telemetry::metrics::StreamGuard,
};

/// llm-gateway's summarizing instruction, word for word.
const SYSTEM_PROMPT: &str = "Summarize the following conversation concisely. Preserve key decisions, \
conclusions, and important details. Output only the summary, no preamble.";

/// llm-gateway's answer to a body without messages, or without a model
/// when there is no default.
const REQUIRED: &str = "model and messages are required";

/// Deltas buffered between the call and the response: a slow client slows
/// the call (and its upstream read) down instead of growing a queue.
const DELTAS: usize = 32;

/// `POST /summarize`: `connected {sessionId, sourceIds}`, then the call's
/// `text` / `reasoning`, then `usage` (or `error`).
pub async fn summarize(State(state): State<AppState>, principal: Principal, body: Bytes) -> Result<Response, ApiError> {
    let request = SummarizeRequest::parse(&body).map_err(ApiError::bad_request)?;
    let model = (request.model.as_deref())
        .or_else(|| state.config.default_model(&principal.tenant))
        .ok_or_else(|| ApiError::bad_request(REQUIRED))?
        .to_string();
    crate::api::check_model(&state, &principal, &model)?;
    let session_id = uuid::Uuid::now_v7().to_string();
    let encoder = SummaryEncoder::new(&session_id, uuid::Uuid::now_v7().to_string());
    let connected = encoder.connected(&request.source_ids);
    let call = Call::start(&state, principal, session_id, model, request.prompt());
    let frames = futures::stream::iter([connected]).chain(call.frames(encoder));
    Ok(stream::sse(&state, frames.boxed()))
}

/// A validated `POST /summarize` body.
#[derive(Debug)]
struct SummarizeRequest {
    model: Option<String>,
    /// As sent: only their `role` and `content` are read.
    messages: Vec<Value>,
    source_ids: Vec<String>,
}

impl SummarizeRequest {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let body: Value = serde_json::from_slice(body).map_err(|_| "Invalid JSON body".to_string())?;
        let model = match body.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(model)) => Some(model.clone()).filter(|m| !m.is_empty()),
            Some(_) => return Err("`model` must be a string".into()),
        };
        let messages = match body.get("messages") {
            None | Some(Value::Null) => return Err(REQUIRED.into()),
            Some(Value::Array(messages)) if messages.is_empty() => return Err("`messages` must not be empty".into()),
            Some(Value::Array(messages)) => messages.clone(),
            Some(_) => return Err("`messages` must be an array of messages".into()),
        };
        for (i, message) in messages.iter().enumerate() {
            if !message.get("role").is_some_and(Value::is_string) {
                return Err(format!("`messages[{i}]` needs a `role` string"));
            }
        }
        let source_ids = match body.get("sourceIds") {
            None | Some(Value::Null) => Vec::new(),
            Some(ids) => serde_json::from_value(ids.clone()).map_err(|e| format!("`sourceIds`: {e}"))?,
        };
        Ok(Self { model, messages, source_ids })
    }

    /// llm-gateway's prompt: the instruction, then the conversation as one
    /// `[{role}]: {content}` line per message (content that is not a string
    /// as JSON text).
    fn prompt(&self) -> Vec<ChatMessage> {
        let lines: Vec<String> = (self.messages.iter())
            .map(|message| {
                let role = message["role"].as_str().unwrap_or_default();
                let content = match message.get("content") {
                    None => String::new(),
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                };
                format!("[{role}]: {content}")
            })
            .collect();
        vec![ChatMessage::text(Role::System, SYSTEM_PROMPT), ChatMessage::text(Role::User, lines.join("\n"))]
    }
}

/// The running call, as the response sees it.
struct Call {
    deltas: mpsc::Receiver<Delta>,
    result: oneshot::Receiver<Result<Usage, OneShotError>>,
    /// Cancels the call when the response is dropped (the client left).
    _cancel: DropGuard,
    /// Counts the response as an open stream.
    _open: StreamGuard,
}

impl Call {
    /// Starts the call on the app's tracker, in the request's span.
    fn start(
        state: &AppState,
        principal: Principal,
        session_id: String,
        model: String,
        prompt: Vec<ChatMessage>,
    ) -> Self {
        let (deltas_tx, deltas) = mpsc::channel(DELTAS);
        let (result_tx, result) = oneshot::channel();
        let cancel = state.shutdown.child_token();
        let (config, providers, sessions) = (state.config.clone(), state.providers.clone(), state.sessions.clone());
        let metrics = state.metrics.clone();
        let running = cancel.clone();
        let task = async move {
            let one = OneShot {
                config: &config,
                providers: &providers,
                budget: sessions.token_budget(),
                metrics: &metrics,
                tenant: &principal.tenant,
                call_id: &session_id,
            };
            let outcome = one_shot::stream(&one, &model, prompt, &deltas_tx, &running).await;
            // The deltas end before the outcome is read.
            drop(deltas_tx);
            let _ = result_tx.send(outcome);
        };
        state.tasks.spawn(task.instrument(tracing::Span::current()));
        Self { deltas, result, _cancel: cancel.drop_guard(), _open: state.metrics.open_stream("llm-gateway") }
    }

    /// The call's frames: each delta as it comes, then the usage or the
    /// error; nothing more when it was cancelled.
    fn frames(self, encoder: SummaryEncoder) -> impl futures::Stream<Item = Frame> + Send + 'static {
        futures::stream::unfold(Some((self, encoder)), |state| async move {
            let (mut call, mut encoder) = state?;
            if let Some(delta) = call.deltas.recv().await {
                let frame = match &delta {
                    Delta::Text(text) => encoder.text(text),
                    Delta::Reasoning(text) => encoder.reasoning(text),
                };
                return Some((frame, Some((call, encoder))));
            }
            let last = match (&mut call.result).await {
                Ok(Ok(usage)) => encoder.usage(&usage),
                Ok(Err(OneShotError::Failed(failure))) => {
                    encoder.error(failure.code.as_str(), &failure.message, failure.retry_after_secs)
                }
                Ok(Err(OneShotError::Cancelled)) | Err(_) => return None,
            };
            Some((last, None))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<SummarizeRequest, String> {
        SummarizeRequest::parse(body.to_string().as_bytes())
    }

    #[test]
    fn the_prompt_is_llm_gateways_one_line_per_message() {
        let request = parse(json!({"messages": [
            {"role": "user", "content": "Plan the trip"},
            {"role": "assistant", "content": [{"type": "text", "text": "Rome, then Florence"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool"},
        ]}))
        .unwrap();
        assert_eq!((request.model.as_deref(), request.source_ids.len()), (None, 0));
        let prompt = request.prompt();
        assert_eq!(prompt[0].content.as_deref(), Some(SYSTEM_PROMPT));
        assert_eq!(
            prompt[1].content.as_deref(),
            Some(
                "[user]: Plan the trip\n[assistant]: [{\"text\":\"Rome, then Florence\",\"type\":\"text\"}]\n[assistant]: null\n[tool]: "
            )
        );
    }

    #[test]
    fn bad_bodies_get_llm_gateways_answers_or_name_the_field() {
        assert_eq!(SummarizeRequest::parse(b"{\"messages\": ").unwrap_err(), "Invalid JSON body");
        let cases = [
            (json!({"model": "m"}), REQUIRED),
            (json!([]), REQUIRED),
            (json!({"messages": []}), "must not be empty"),
            (json!({"messages": "hi"}), "must be an array"),
            (json!({"messages": [{"content": "x"}]}), "`messages[0]` needs a `role`"),
            (json!({"model": 5, "messages": [{"role": "user"}]}), "`model` must be a string"),
            (json!({"messages": [{"role": "user"}], "sourceIds": [1]}), "`sourceIds`: invalid type"),
        ];
        for (body, expected) in cases {
            let error = parse(body.clone()).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        }
        let request = parse(json!({"model": "", "messages": [{"role": "user"}], "sourceIds": ["a", "b"]})).unwrap();
        assert_eq!((request.model, request.source_ids), (None, vec!["a".to_string(), "b".to_string()]));
    }
}
