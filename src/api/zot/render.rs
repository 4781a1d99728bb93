//! zot's shapes for what its commands answer with: `get_state`,
//! `get_messages` (zot's message shape: `role`, `content` blocks, `time`),
//! `get_models`, and the `user_message` event.

use serde_json::{Value, json};

use crate::{
    config::ProviderKind,
    domain::{ChatMessage, Role},
    principal::Principal,
    protocol::Frame,
    sessions::SessionView,
    state::AppState,
};

/// `get_state`: the session's model and size, whether a turn runs, and its
/// usage (`reasoning` is not reported apart; `cost_usd` from the model's
/// prices). `cwd` has no meaning here: null.
pub fn state(view: &SessionView) -> Value {
    let session = &view.session;
    let usage = session.usage();
    json!({
        "session_id": session.id(),
        "model": session.model(),
        "cwd": null,
        "message_count": session.history().map_or(0, <[ChatMessage]>::len),
        "busy": !session.status().takes_messages(),
        "status": session.status().as_str(),
        "usage": {"input": usage.input_tokens, "output": usage.output_tokens, "reasoning": null,
                  "cache_read": usage.cache_read_tokens, "cache_write": usage.cache_write_tokens},
    })
}

/// `get_messages`: the stored conversation (system messages left out, as
/// zot's transcript holds none), in zot's message shape. Times are not
/// stored per message: null.
pub fn messages(view: &SessionView) -> Value {
    let messages = view.session.history().unwrap_or_default();
    let rendered: Vec<Value> = messages.iter().filter(|m| m.role != Role::System).map(message).collect();
    json!({"messages": rendered})
}

fn message(message: &ChatMessage) -> Value {
    let mut content = Vec::new();
    if message.role == Role::Tool {
        let text = message.content.clone().unwrap_or_default();
        content.push(json!({"type": "tool_result", "call_id": message.tool_call_id, "is_error": false,
                            "content": [{"type": "text", "text": text}]}));
    } else {
        content.extend(message.content.iter().filter(|t| !t.is_empty()).map(|t| json!({"type": "text", "text": t})));
        content.extend(message.images.iter().map(|image| {
            json!({"type": "image", "mime_type": image.format.clone().unwrap_or_else(|| "image/*".into()),
                   "bytes": image.url.len()})
        }));
        content.extend(message.tool_calls.iter().map(|call| {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            json!({"type": "tool_call", "id": call.id, "name": call.name, "args": args})
        }));
    }
    json!({"role": message.role, "content": content, "time": null})
}

/// The `user_message` event of a prompt: its text (and images, by size).
pub fn user_message(message: &ChatMessage) -> Frame {
    let mut content = vec![json!({"type": "text", "text": message.content.clone().unwrap_or_default()})];
    content.extend(message.images.iter().map(|image| {
        json!({"type": "image", "mime_type": image.format.clone().unwrap_or_else(|| "image/*".into()),
               "bytes": image.url.len()})
    }));
    let time = crate::protocol::zot::iso_time(crate::domain::now_ms());
    let line = json!({"type": "user_message", "content": content, "time": time});
    Frame { id: None, event: None, data: line.to_string(), retry: None }
}

/// `get_models`: the models the caller's tenant may use (patterns as
/// written), with their limits.
pub fn models(state: &AppState, principal: &Principal) -> Value {
    let visible = state.config.tenants.get(&*principal.tenant).map(|t| t.visible_models(&state.config.models));
    let models: Vec<Value> = (visible.into_iter().flatten())
        .filter_map(|id| {
            let model = state.config.models.get(id)?;
            Some(json!({"id": id, "provider": provider_name(model.provider), "context_window": model.context_window,
                        "max_output": model.max_output_tokens, "reasoning": false}))
        })
        .collect();
    json!({"models": models})
}

/// The provider a model id is served by.
pub fn provider_of(state: &AppState, model: &str) -> Option<&'static str> {
    state.config.model(model).map(|m| provider_name(m.config.provider))
}

fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAiCompatible => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Demo => "demo",
    }
}
