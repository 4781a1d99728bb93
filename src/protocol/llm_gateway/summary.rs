//! The frames of llm-gateway's `POST /summarize` (docs/llm-gateway-tools.md §4): not a
//! session but one model call, streamed as the provider's events are:
//! `connected {sessionId, sourceIds}` first, then `text` / `reasoning
//! {runId, id, content}` as they arrive, `usage {runId, inputTokens,
//! outputTokens, …}` at the end, or `error {runId, message, code}` — none
//! with an `agentId` (no agent runs) and none with an `id:` line (there is
//! no log to rejoin). As llm-gateway's providers do, the call's text has one
//! `id` and its reasoning another.

use serde_json::{Value, json};

use super::usage_fields;
use crate::{domain::Usage, protocol::Frame};

pub struct SummaryEncoder {
    session_id: String,
    run_id: String,
    text_id: Option<String>,
    reasoning_id: Option<String>,
}

impl SummaryEncoder {
    pub fn new(session_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self { session_id: session_id.into(), run_id: run_id.into(), text_id: None, reasoning_id: None }
    }

    /// The first frame; `sourceIds` as the request sent them.
    pub fn connected(&self, source_ids: &[String]) -> Frame {
        let data = json!({"type": "connected", "sessionId": self.session_id, "sourceIds": source_ids});
        Frame::event("connected", data.to_string(), None)
    }

    pub fn text(&mut self, content: &str) -> Frame {
        let id = self.text_id.get_or_insert_with(new_id).clone();
        self.frame("text", json!({"id": id, "content": content}))
    }

    pub fn reasoning(&mut self, content: &str) -> Frame {
        let id = self.reasoning_id.get_or_insert_with(new_id).clone();
        self.frame("reasoning", json!({"id": id, "content": content}))
    }

    pub fn usage(&self, usage: &Usage) -> Frame {
        self.frame("usage", usage_fields(usage))
    }

    /// The call failed: `code` is a failure code (`upstream_error`,
    /// `rate_limited`, …), `retry_after` for a rate limit.
    pub fn error(&self, code: &str, message: &str, retry_after: Option<u64>) -> Frame {
        let mut fields = json!({"message": message, "code": code});
        if let Some(secs) = retry_after {
            fields["retryAfter"] = json!(secs);
        }
        self.frame("error", fields)
    }

    /// `{type, runId, …fields}`.
    fn frame(&self, name: &'static str, fields: Value) -> Frame {
        let mut data = json!({"type": name, "runId": self.run_id});
        if let (Value::Object(data), Value::Object(fields)) = (&mut data, fields) {
            data.extend(fields);
        }
        Frame::event(name, data.to_string(), None)
    }
}

/// A block id as llm-gateway's providers make them: a UUIDv7.
fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(frame: &Frame) -> Value {
        serde_json::from_str(&frame.data).unwrap()
    }

    #[test]
    fn a_summary_streams_one_text_block_and_its_usage_without_agent_ids() {
        let mut encoder = SummaryEncoder::new("s1", "r1");
        let connected = encoder.connected(&["n1".to_string()]);
        assert_eq!(data(&connected), json!({"type": "connected", "sessionId": "s1", "sourceIds": ["n1"]}));
        let (a, b, r) = (encoder.text("Sum"), encoder.text("mary"), encoder.reasoning("hm"));
        assert_eq!(data(&a)["id"], data(&b)["id"]);
        assert_ne!(data(&a)["id"], data(&r)["id"]);
        assert_eq!(data(&b), json!({"type": "text", "runId": "r1", "id": data(&a)["id"], "content": "mary"}));
        let usage = encoder.usage(&Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() });
        assert_eq!(data(&usage), json!({"type": "usage", "runId": "r1", "inputTokens": 3, "outputTokens": 2}));
        let error = encoder.error("rate_limited", "slow down", Some(7));
        assert_eq!(
            data(&error),
            json!({"type": "error", "runId": "r1", "message": "slow down", "code": "rate_limited", "retryAfter": 7})
        );
        assert!([connected, a, usage, error].iter().all(|f| f.id.is_none()));
    }
}
