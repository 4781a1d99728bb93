//! The end of a Holmes stream, built from the stored session: `ai_answer_end`
//! (chat, or an investigation's sections), `approval_required`, and what
//! they carry — the conversation in OpenAI's format, `metadata` (usage,
//! token breakdown, truncations, costs), `follow_up_actions`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{Ending, HolmesEncoder, investigation};
use crate::{
    config::Prices,
    domain::{ChatMessage, Role, Session, Usage},
    orchestrator::context::estimate_text,
    protocol::{Frame, Limits},
};

/// HolmesGPT's follow-up actions, offered on a conversation's first answer
/// (its server offers them when the history it was sent held no assistant
/// message): id, label, notification text, prompt.
const FOLLOW_UP_ACTIONS: [(&str, &str, &str, &str); 3] = [
    ("logs", "Logs", "Fetching relevant logs...", "Show me the relevant logs"),
    (
        "graphs",
        "Graphs",
        "Drawing some graphs...",
        "Show me the relevant graphs. Use prometheus and make sure you embed the results with `<< >>` to display a \
         graph",
    ),
    (
        "articles",
        "Articles",
        "Looking up and summarizing runbooks and links...",
        "List the relevant runbooks and links used. Write a short summary for each",
    ),
];

impl HolmesEncoder {
    /// The frame that ends the stream, from the stored session.
    pub(super) fn ending_frames(&mut self, session: &Session) -> Vec<Frame> {
        let Some(ending) = self.ending.take() else { return Vec::new() };
        self.learn_model(session.model());
        let messages = session.history().unwrap_or_default();
        let history = render_history(messages);
        let metadata = self.final_metadata(session);
        let follow_ups = if self.resumed || answered_before(messages) { json!([]) } else { follow_up_actions() };
        let (name, data) = match ending {
            Ending::Answered => {
                let analysis = self.analysis.clone().or_else(|| last_answer(messages)).unwrap_or_default();
                match &session.options().investigation {
                    Some(sections) => {
                        let (sections, analysis) = investigation::sections_of(&analysis, sections);
                        let data = json!({
                            "sections": sections,
                            "analysis": analysis,
                            "instructions": [],
                            "metadata": metadata,
                            "session_id": session.id(),
                        });
                        ("ai_answer_end", data)
                    }
                    None => {
                        let data = json!({
                            "analysis": analysis,
                            "conversation_history": history,
                            "follow_up_actions": follow_ups,
                            "metadata": metadata,
                            "session_id": session.id(),
                        });
                        ("ai_answer_end", data)
                    }
                }
            }
            Ending::Paused { relays, calls } => {
                let approvals: Vec<Value> = relays
                    .iter()
                    .map(|r| {
                        json!({"tool_call_id": r.tool_call_id, "tool_name": r.tool,
                            "description": describe(&r.tool, &r.params), "params": r.params})
                    })
                    .collect();
                let frontend: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"tool_call_id": c.tool_call_id, "tool_name": c.tool, "arguments": c.arguments}))
                    .collect();
                let data = json!({
                    // The docs name it `content`, the real server `analysis`.
                    "content": null,
                    "analysis": null,
                    "conversation_history": history,
                    "follow_up_actions": follow_ups,
                    "requires_approval": true,
                    "pending_approvals": approvals,
                    "pending_frontend_tool_calls": frontend,
                    "metadata": metadata,
                    "session_id": session.id(),
                });
                ("approval_required", data)
            }
        };
        vec![self.frame(name, data)]
    }

    /// `metadata` at the end of the stream: the turn's usage, the stored
    /// conversation's token breakdown, this turn's truncations, and its
    /// cost when the model has prices.
    fn final_metadata(&self, session: &Session) -> Value {
        let messages = session.history().unwrap_or_default();
        let mut metadata = metadata(&session.turn_usage(), token_breakdown(messages), self.limits);
        if !session.truncations().is_empty() {
            metadata["truncations"] = serde_json::to_value(session.truncations()).unwrap_or(Value::Null);
        }
        metadata
    }
}

/// Did the conversation hold an assistant message before the current
/// turn's question? (Then HolmesGPT offers no follow-up actions.)
fn answered_before(messages: &[ChatMessage]) -> bool {
    let question = messages.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
    messages[..question].iter().any(|m| m.role == Role::Assistant)
}

fn follow_up_actions() -> Value {
    (FOLLOW_UP_ACTIONS.iter())
        .map(|(id, label, notification, prompt)| {
            json!({"id": id, "action_label": label, "pre_action_notification_text": notification, "prompt": prompt})
        })
        .collect()
}

/// Holmes' `metadata`: usage, token breakdown, the model's limits, and
/// `costs` (HolmesGPT's request stats) when the model has prices.
pub(super) fn metadata(usage: &Usage, tokens: Value, limits: Option<Limits>) -> Value {
    let mut metadata = json!({
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
        "tokens": tokens,
        "max_tokens": limits.map(|l| l.max_tokens),
        "max_output_tokens": limits.map(|l| l.max_output_tokens),
    });
    if let Some(prices) = limits.and_then(|l| l.prices) {
        metadata["costs"] = costs(usage, &prices);
    }
    metadata
}

/// HolmesGPT's `costs`: the dollars and tokens of the turn's model calls.
fn costs(usage: &Usage, prices: &Prices) -> Value {
    let mut costs = Map::new();
    let total_cost = prices.cost(usage.input_tokens, usage.output_tokens);
    costs.insert("total_cost".into(), json!((total_cost * 1e9).round() / 1e9));
    costs.insert("total_tokens".into(), json!(usage.input_tokens + usage.output_tokens));
    costs.insert("prompt_tokens".into(), json!(usage.input_tokens));
    costs.insert("completion_tokens".into(), json!(usage.output_tokens));
    if usage.cache_read_tokens > 0 {
        costs.insert("cached_tokens".into(), json!(usage.cache_read_tokens));
    }
    if usage.cache_write_tokens > 0 {
        costs.insert("cache_creation_tokens".into(), json!(usage.cache_write_tokens));
    }
    Value::Object(costs)
}

/// Holmes' per-role token counts, estimated as the orchestrator does
/// (tool definitions are not in the stored conversation: 0).
pub(super) fn token_breakdown(messages: &[ChatMessage]) -> Value {
    let (mut system, mut user, mut assistant, mut calls, mut tools) = (0, 0, 0, 0, 0);
    for message in messages {
        let content = message.content.as_deref().map_or(0, estimate_text);
        match message.role {
            Role::System => system += content,
            Role::User => user += content,
            Role::Assistant => assistant += content,
            Role::Tool => tools += content,
        }
        calls += message.tool_calls.iter().map(|c| estimate_text(&c.name) + estimate_text(&c.arguments)).sum::<u64>();
    }
    json!({
        "total_tokens": system + user + assistant + calls + tools,
        "tools_tokens": tools,
        "system_tokens": system,
        "user_tokens": user,
        "tools_to_call_tokens": calls,
        "assistant_tokens": assistant,
        "other_tokens": 0,
    })
}

/// A one-line description of a call: the tool and its arguments.
pub(super) fn describe(name: &str, params: &Value) -> String {
    match params {
        Value::Object(map) if map.is_empty() => name.to_string(),
        Value::Null => name.to_string(),
        other => format!("{name} {other}"),
    }
}

fn last_answer(messages: &[ChatMessage]) -> Option<String> {
    messages.iter().rev().find(|m| m.role == Role::Assistant).and_then(|m| m.content.clone())
}

/// The conversation in OpenAI's message format, as Holmes sends it: images
/// of a user message become content parts; tool messages carry the name of
/// the call they answer.
pub fn render_history(messages: &[ChatMessage]) -> Vec<Value> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    messages
        .iter()
        .map(|m| {
            let mut out = Map::new();
            out.insert("role".into(), serde_json::to_value(m.role).unwrap_or(Value::Null));
            let content = if m.images.is_empty() {
                json!(m.content)
            } else {
                let mut parts: Vec<Value> =
                    m.content.iter().map(|text| json!({"type": "text", "text": text})).collect();
                parts.extend(m.images.iter().map(|image| json!({"type": "image_url", "image_url": image})));
                Value::Array(parts)
            };
            out.insert("content".into(), content);
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        names.insert(&c.id, &c.name);
                        json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            if let Some(id) = &m.tool_call_id {
                out.insert("tool_call_id".into(), json!(id));
                if let Some(name) = names.get(id.as_str()) {
                    out.insert("name".into(), json!(name));
                }
            }
            Value::Object(out)
        })
        .collect()
}
