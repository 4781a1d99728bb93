//! HTTP tools: `POST {tool_call_id, name, arguments, session_id, tenant,
//! state}` to the tool's URL, with its timeout, a response size cap, the W3C
//! trace context of the call's span, and an `Idempotency-Key` that is the
//! same every time the call is run (`<session id>:<tool call id>`).
//!
//! `state` is the session's state (`{}` unless an AG-UI client gave one). A
//! tool changes it by answering a JSON object with a top-level
//! `state_delta`: a JSON Patch (RFC 6902) of that state. The field is taken
//! out of the result the model sees (the rest of the object, as JSON) and
//! the patch is applied with the result, all of it or none; a
//! `state_delta` that is not a JSON Patch makes the call an error.

use futures::StreamExt;
use serde_json::{Value, json};

use super::{CallContext, MAX_RESPONSE_BYTES, ToolReply};
use crate::{
    config::ToolConfig,
    domain::{ToolCall, ToolOutcome},
};

/// The header that names a call the same way on every run of it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The field of a tool's JSON answer that changes the session's state.
pub const STATE_DELTA: &str = "state_delta";

pub(super) async fn call(
    http: &reqwest::Client,
    url: &str,
    tool: &ToolConfig,
    call: &ToolCall,
    arguments: Value,
    context: &CallContext<'_>,
) -> ToolReply {
    let body = json!({
        "tool_call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "session_id": context.session_id,
        "tenant": context.tenant,
        "state": context.state,
    });
    // The current span is the call's `execute_tool` span.
    let mut headers = reqwest::header::HeaderMap::new();
    crate::telemetry::trace::inject_current(&mut headers);
    if let Ok(key) = reqwest::header::HeaderValue::from_str(&format!("{}:{}", context.session_id, call.id)) {
        headers.insert(IDEMPOTENCY_KEY, key);
    }
    let request = http.post(url).timeout(tool.timeout).headers(headers).json(&body);
    let timed_out = || ToolOutcome::error(format!("the tool timed out after {:?}", tool.timeout)).into();
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return timed_out(),
        Err(_) => return ToolOutcome::error("the tool server could not be reached").into(),
    };
    let status = response.status();
    let (text, cut) = match read_capped(response).await {
        Ok(read) => read,
        Err(e) if e.is_timeout() => return timed_out(),
        Err(_) => return ToolOutcome::error("the tool server closed the connection mid-answer").into(),
    };
    if status.is_success() && cut {
        // Not whole, so not JSON: the model gets what arrived.
        ToolOutcome::Success(format!("{text}\n[response cut at {MAX_RESPONSE_BYTES} bytes]")).into()
    } else if status.is_success() {
        reply(text)
    } else {
        let preview: String = text.chars().take(500).collect();
        ToolOutcome::error(format!("the tool answered HTTP {}: {preview}", status.as_u16())).into()
    }
}

/// A successful answer: its text, or with a `state_delta` the rest of the
/// object and the patch. Any other text is the result as it came.
fn reply(text: String) -> ToolReply {
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(&text) else {
        return ToolOutcome::Success(text).into();
    };
    let Some(delta) = object.remove(STATE_DELTA) else { return ToolOutcome::Success(text).into() };
    match serde_json::from_value::<json_patch::Patch>(delta) {
        Ok(patch) => {
            let outcome = ToolOutcome::Success(Value::Object(object).to_string());
            ToolReply { outcome, state_delta: Some(patch), shaped: None }
        }
        Err(e) => ToolOutcome::error(format!("the tool answered a {STATE_DELTA} that is not a JSON Patch: {e}")).into(),
    }
}

/// Reads at most [`MAX_RESPONSE_BYTES`]; `true` when the body was longer.
async fn read_capped(response: reqwest::Response) -> Result<(String, bool), reqwest::Error> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        let room = MAX_RESPONSE_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((String::from_utf8_lossy(&body).into_owned(), true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((String::from_utf8_lossy(&body).into_owned(), false))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_state_delta_leaves_the_result_and_comes_as_a_patch() {
        let answer = json!({"was": 1, "state_delta": [{"op": "replace", "path": "/count", "value": 2}]});
        let reply = reply(answer.to_string());
        assert_eq!(reply.outcome, ToolOutcome::Success(r#"{"was":1}"#.into()));
        let patch = serde_json::to_value(reply.state_delta.unwrap()).unwrap();
        assert_eq!(patch, json!([{"op": "replace", "path": "/count", "value": 2}]));
    }

    #[test]
    fn other_answers_are_the_result_as_they_came() {
        for text in [r#"{ "order": 9 }"#, "plain text", "[1, 2]"] {
            assert_eq!(reply(text.into()), ToolReply::from(ToolOutcome::Success(text.into())));
        }
        let bad = reply(json!({"state_delta": {"count": 2}}).to_string());
        assert!(matches!(bad.outcome, ToolOutcome::Error(_)) && bad.state_delta.is_none(), "{bad:?}");
    }
}
