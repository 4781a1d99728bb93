//! Chat messages in OpenAI's format as clients send them — Holmes'
//! `conversation_history`, llm-gateway's `messages` — and their canonical
//! form. One parser for both dialects; each adds its own rules on top.
//! Unknown fields are ignored.

use serde::Deserialize;
use serde_json::Value;

use crate::providers::{ChatMessage, ImagePart, Role, ToolCall};

/// One message: `{role, content?, tool_calls?, tool_call_id?}`.
#[derive(Debug, Deserialize)]
pub struct WireMessage {
    role: Role,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// A string, or parts: `{type: "text", text}` and `{type: "image_url", image_url}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageInput },
}

/// An image: a URL or `data:` URI, or `{url, detail?, format?}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ImageInput {
    Url(String),
    Part(ImagePart),
}

impl ImageInput {
    pub fn to_part(&self) -> ImagePart {
        match self {
            Self::Url(url) => ImagePart { url: url.clone(), detail: None, format: None },
            Self::Part(part) => part.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    /// JSON text in OpenAI's format; some clients send the object.
    #[serde(default)]
    arguments: Option<Value>,
}

impl WireMessage {
    pub fn role(&self) -> Role {
        self.role
    }

    /// The canonical message: text parts joined by newlines, image parts as
    /// images, tool-call arguments as JSON text (`{}` when absent).
    pub fn to_message(&self) -> ChatMessage {
        let (content, images) = match &self.content {
            None => (None, Vec::new()),
            Some(Content::Text(text)) => (Some(text.clone()), Vec::new()),
            Some(Content::Parts(parts)) => {
                let mut texts = Vec::new();
                let mut images = Vec::new();
                for part in parts {
                    match part {
                        ContentPart::Text { text } => texts.push(text.as_str()),
                        ContentPart::ImageUrl { image_url } => images.push(image_url.to_part()),
                    }
                }
                ((!texts.is_empty()).then(|| texts.join("\n")), images)
            }
        };
        let tool_calls = self
            .tool_calls
            .iter()
            .flatten()
            .map(|c| ToolCall {
                id: c.id.clone(),
                name: c.function.name.clone(),
                arguments: match &c.function.arguments {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                },
            })
            .collect();
        ChatMessage { role: self.role, content, images, tool_calls, tool_call_id: self.tool_call_id.clone() }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> ChatMessage {
        serde_json::from_value::<WireMessage>(value).unwrap().to_message()
    }

    #[test]
    fn parts_tool_calls_and_argument_forms_become_the_canonical_message() {
        let user = parse(json!({"role": "user", "content": [
            {"type": "text", "text": "what"}, {"type": "text", "text": "is this?"},
            {"type": "image_url", "image_url": "https://x/a.png"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}],
            "unknown": true}));
        assert_eq!(user.content.as_deref(), Some("what\nis this?"));
        assert_eq!(user.images[0].url, "https://x/a.png");
        assert_eq!(user.images[1].detail.as_deref(), Some("low"));
        let assistant = parse(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{\"x\":1}"}},
            {"id": "b", "function": {"name": "t", "arguments": {"x": 2}}},
            {"id": "c", "function": {"name": "t"}}]}));
        let arguments: Vec<&str> = assistant.tool_calls.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(arguments, [r#"{"x":1}"#, r#"{"x":2}"#, "{}"]);
        assert_eq!(assistant.content, None);
        let tool = parse(json!({"role": "tool", "tool_call_id": "a", "content": "done"}));
        assert_eq!(tool.tool_call_id.as_deref(), Some("a"));
    }
}
