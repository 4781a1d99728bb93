//! Chat messages in OpenAI's format as clients send them — Holmes'
//! `conversation_history`, llm-gateway's `messages` — and their canonical
//! form. One parser for both dialects; each adds its own rules on top.
//! Unknown fields are ignored.
//!
//! Besides OpenAI's shapes it reads llm-gateway's own (its `Message` type):
//! assistant tool calls as `{id, name, arguments?}` (arguments an object or
//! JSON text) beside OpenAI's `{id, type, function: {name, arguments}}`, and
//! image parts as `{type: "image", mediaType, data}` (base64, kept as a
//! `data:` URI) beside `{type: "image_url", image_url}`. Its `document`
//! parts (PDFs) are refused by name: the canonical conversation has no
//! place for them, and a model answering without the document the user
//! sent would mislead.

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

/// A string, or parts (see [`ContentPart`]). Parsed by hand so that a bad
/// part is reported with its index and its reason, not as "no variant
/// matched".
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// `{type: "text", text}`, `{type: "image_url", image_url}` (OpenAI) or
/// `{type: "image", mediaType, data}` (llm-gateway).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: ImageInput,
    },
    Image {
        #[serde(rename = "mediaType")]
        media_type: String,
        /// Base64, without a `data:` prefix.
        data: String,
    },
}

impl TryFrom<Value> for Content {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, String> {
        match value {
            Value::String(text) => Ok(Self::Text(text)),
            Value::Array(parts) => (parts.into_iter().enumerate())
                .map(|(i, part)| content_part(part).map_err(|e| format!("`content[{i}]`: {e}")))
                .collect::<Result<_, _>>()
                .map(Self::Parts),
            _ => Err("`content` must be a string or an array of parts".into()),
        }
    }
}

fn content_part(part: Value) -> Result<ContentPart, String> {
    if part.get("type").and_then(Value::as_str) == Some("document") {
        return Err("document parts are not supported by this gateway; send the document's text instead".into());
    }
    serde_json::from_value(part).map_err(|e| e.to_string())
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

/// An assistant's tool call, in either shape (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawToolCall")]
struct WireToolCall {
    id: String,
    name: String,
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawToolCall {
    id: String,
    /// OpenAI's shape.
    #[serde(default)]
    function: Option<WireFunction>,
    /// llm-gateway's shape: `name` and `arguments` beside the id.
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    /// JSON text in OpenAI's format; some clients send the object.
    #[serde(default)]
    arguments: Option<Value>,
}

impl TryFrom<RawToolCall> for WireToolCall {
    type Error = String;

    fn try_from(raw: RawToolCall) -> Result<Self, String> {
        match (raw.function, raw.name) {
            (Some(function), _) => Ok(Self { id: raw.id, name: function.name, arguments: function.arguments }),
            (None, Some(name)) => Ok(Self { id: raw.id, name, arguments: raw.arguments }),
            (None, None) => Err(format!(
                "tool call {:?} needs `function: {{name, arguments}}` (OpenAI) or `name` (llm-gateway)",
                raw.id
            )),
        }
    }
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
                        ContentPart::Image { media_type, data } => images.push(ImagePart {
                            url: format!("data:{media_type};base64,{data}"),
                            detail: None,
                            format: None,
                        }),
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
                name: c.name.clone(),
                arguments: match &c.arguments {
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

    fn refusal(value: Value) -> String {
        serde_json::from_value::<WireMessage>(value).unwrap_err().to_string()
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

    #[test]
    fn llm_gateways_own_tool_calls_and_image_parts_are_read_too() {
        let assistant = parse(json!({"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "a", "name": "lookup", "arguments": {"id": "42"}},
            {"id": "b", "name": "lookup", "arguments": "{\"id\":\"7\"}"},
            {"id": "c", "name": "now"},
            {"id": "d", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}));
        let calls: Vec<(&str, &str, &str)> =
            assistant.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(
            calls,
            [("a", "lookup", r#"{"id":"42"}"#), ("b", "lookup", r#"{"id":"7"}"#), ("c", "now", "{}"), ("d", "t", "{}")]
        );
        let user = parse(json!({"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo="}]}));
        assert_eq!(user.content.as_deref(), Some("what is this?"));
        assert_eq!(user.images[0].url, "data:image/png;base64,iVBORw0KGgo=");
        let tool = parse(json!({"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "42 ok"}]}));
        assert_eq!(tool.content.as_deref(), Some("42 ok"));
    }

    #[test]
    fn bad_parts_and_tool_calls_are_refused_with_a_reason() {
        let document = refusal(json!({"role": "user", "content": [{"type": "text", "text": "read"},
            {"type": "document", "mediaType": "application/pdf", "data": "JVBERi0="}]}));
        assert!(document.contains("`content[1]`: document parts are not supported"), "{document}");
        let unknown = refusal(json!({"role": "user", "content": [{"type": "audio", "data": "x"}]}));
        assert!(unknown.contains("`content[0]`: unknown variant `audio`"), "{unknown}");
        let image = refusal(json!({"role": "user", "content": [{"type": "image", "data": "x"}]}));
        assert!(image.contains("missing field `mediaType`"), "{image}");
        assert!(refusal(json!({"role": "user", "content": 5})).contains("a string or an array of parts"));
        let nameless = refusal(json!({"role": "assistant", "tool_calls": [{"id": "a", "arguments": {}}]}));
        assert!(nameless.contains("tool call \"a\" needs"), "{nameless}");
    }
}
