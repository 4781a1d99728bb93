//! HTTP tools: `POST {tool_call_id, name, arguments, session_id, tenant}` to
//! the tool's URL, with its timeout, a response size cap, the W3C trace
//! context of the call's span, and an `Idempotency-Key` that is the same
//! every time the call is run (`<session id>:<tool call id>`).

use futures::StreamExt;
use serde_json::{Value, json};

use super::{CallContext, MAX_RESPONSE_BYTES};
use crate::{
    config::ToolConfig,
    domain::{ToolCall, ToolOutcome},
};

/// The header that names a call the same way on every run of it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

pub(super) async fn call(
    http: &reqwest::Client,
    url: &str,
    tool: &ToolConfig,
    call: &ToolCall,
    arguments: Value,
    context: &CallContext<'_>,
) -> ToolOutcome {
    let body = json!({
        "tool_call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "session_id": context.session_id,
        "tenant": context.tenant,
    });
    // The current span is the call's `execute_tool` span.
    let mut headers = reqwest::header::HeaderMap::new();
    crate::telemetry::trace::inject_current(&mut headers);
    if let Ok(key) = reqwest::header::HeaderValue::from_str(&format!("{}:{}", context.session_id, call.id)) {
        headers.insert(IDEMPOTENCY_KEY, key);
    }
    let request = http.post(url).timeout(tool.timeout).headers(headers).json(&body);
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return ToolOutcome::error(format!("the tool timed out after {:?}", tool.timeout)),
        Err(_) => return ToolOutcome::error("the tool server could not be reached"),
    };
    let status = response.status();
    let (text, cut) = match read_capped(response).await {
        Ok(read) => read,
        Err(e) if e.is_timeout() => return ToolOutcome::error(format!("the tool timed out after {:?}", tool.timeout)),
        Err(_) => return ToolOutcome::error("the tool server closed the connection mid-answer"),
    };
    let text = if cut { format!("{text}\n[response cut at {MAX_RESPONSE_BYTES} bytes]") } else { text };
    if status.is_success() {
        ToolOutcome::Success(text)
    } else {
        let preview: String = text.chars().take(500).collect();
        ToolOutcome::error(format!("the tool answered HTTP {}: {preview}", status.as_u16()))
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
