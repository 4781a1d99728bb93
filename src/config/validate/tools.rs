//! `[[tools]]`: server-side tools, reached over HTTP or built in.

use super::{positive, secs};
use crate::config::{ConfigErrors, Permission, ToolConfig, ToolTarget, raw::RawTool};

pub(super) fn validate_tool(errors: &mut ConfigErrors, path: &str, raw: RawTool) -> Option<ToolConfig> {
    let name = raw.name.unwrap_or_default();
    check_tool_name(errors, &format!("{path}.name"), &name);
    let target = match (raw.url, raw.builtin.as_deref()) {
        (Some(url), None) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errors.push(format!("{path}.url"), "must be an http:// or https:// URL");
            }
            Some(ToolTarget::Http { url })
        }
        (None, Some("demo")) => Some(ToolTarget::BuiltinDemo),
        (None, Some(other)) => {
            errors.push(format!("{path}.builtin"), format!("unknown builtin {other:?}; only \"demo\" exists"));
            None
        }
        (Some(_), Some(_)) => {
            errors.push(path, "set url or builtin, not both");
            None
        }
        (None, None) => {
            errors.push(format!("{path}.url"), "required (or builtin = \"demo\")");
            None
        }
    };
    let permission = match raw.permission.as_deref() {
        None => Some(Permission::Ask),
        Some(text) => Permission::parse(errors, &format!("{path}.permission"), text),
    };
    let parameters = match raw.parameters {
        None => Some(serde_json::json!({"type": "object", "properties": {}})),
        Some(toml::Value::Table(table)) => serde_json::to_value(table).ok(),
        Some(_) => {
            errors.push(format!("{path}.parameters"), "must be a table (a JSON Schema object)");
            None
        }
    };
    Some(ToolConfig {
        name,
        description: raw.description.unwrap_or_default(),
        parameters: parameters?,
        target: target?,
        permission: permission?,
        timeout: secs(positive(errors, &format!("{path}.timeout_secs"), raw.timeout_secs), 30),
        retry_on_takeover: raw.retry_on_takeover.unwrap_or(true),
    })
}

/// Tool names as model APIs accept them (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`).
/// `agent` is reserved for the subagent tool.
fn check_tool_name(errors: &mut ConfigErrors, path: &str, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if !ok {
        errors.push(path, format!("{name:?} must be 1-64 characters of A-Z a-z 0-9 - _"));
    } else if name == "agent" {
        errors.push(path, "\"agent\" is reserved for the subagent tool");
    }
}
