//! `[[mcp_servers]]`: remote MCP servers (Streamable HTTP) whose tools the
//! sessions of the tenants that name them (`tenants.mcp_servers`) get, as
//! server-side tools named `mcp__<server>__<tool>`.

use std::{collections::BTreeMap, time::Duration};

use serde::Deserialize;

use super::{
    ConfigErrors, Permission, Secret,
    validate::checks::{positive, secs},
};

/// Longest server name: the model's tool name (`mcp__<server>__<tool>`,
/// at most 64 characters) keeps room for the tool.
pub const MAX_SERVER_NAME: usize = 24;

#[derive(Debug, Default, Deserialize)]
pub struct RawMcpServer {
    pub name: Option<String>,
    pub url: Option<String>,
    /// Header name → where its value comes from.
    #[serde(default)]
    pub headers: BTreeMap<String, RawHeaderValue>,
    /// Request headers passed on per request (a caller's own token).
    #[serde(default)]
    pub forward_headers: Vec<String>,
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    pub denied_tools: Vec<String>,
    pub permission: Option<String>,
    /// Tool (the server's own name) → allow | ask | deny.
    #[serde(default)]
    pub tool_permissions: BTreeMap<String, String>,
    pub timeout_secs: Option<u64>,
    pub retry_on_takeover: Option<bool>,
    /// `2025-11-25` (default), `2026-07-28` or `auto`.
    pub protocol: Option<String>,
}

/// Which MCP protocol era the client speaks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpProtocol {
    /// The `initialize` handshake and its MCP session (2025-11-25): what
    /// nearly every server speaks today.
    Sessions,
    /// The stateless protocol (2026-07-28, `server/discover`).
    Stateless,
    /// `server/discover` first, falling back to the handshake: for a
    /// server that may be either (an older one costs the probe at each
    /// first use).
    Auto,
}

/// A header's value: from an environment variable, from a file (a mounted
/// secret), or written here (for values that are no secret).
#[derive(Debug, Default, Deserialize)]
pub struct RawHeaderValue {
    pub env: Option<String>,
    pub file: Option<String>,
    pub value: Option<String>,
}

/// One MCP server, validated.
#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// `[A-Za-z0-9-]`, at most [`MAX_SERVER_NAME`] characters: the middle
    /// of its tools' names.
    pub name: String,
    /// Its Streamable HTTP endpoint. Never shown to a client.
    pub url: String,
    /// Sent with every request to the server; values never logged.
    pub headers: Vec<(String, Secret)>,
    /// Headers (lower case) of the request that started a turn, passed on
    /// with that turn's calls and tool lists (a client and a tool list per
    /// set of values): never stored, never logged, gone after a takeover.
    pub forward_headers: Vec<String>,
    /// The server's tools offered to the model: all when `None`.
    pub allowed_tools: Option<Vec<String>>,
    /// Never offered (and refused if called anyway).
    pub denied_tools: Vec<String>,
    pub permission: Permission,
    pub tool_permissions: BTreeMap<String, Permission>,
    /// A call (and a listing) that takes longer fails with a result the
    /// model sees.
    pub timeout: Duration,
    /// A call cut short by the owner's death runs again on the new owner;
    /// when false (the default: an MCP server gets no idempotency header)
    /// the model is told its outcome is unknown.
    pub retry_on_takeover: bool,
    pub protocol: McpProtocol,
}

impl McpServerConfig {
    /// Whether the server's tool `tool` is offered to the model.
    pub fn offers(&self, tool: &str) -> bool {
        !self.denied_tools.iter().any(|t| t == tool)
            && self.allowed_tools.as_ref().is_none_or(|allowed| allowed.iter().any(|t| t == tool))
    }

    /// The permission of the server's tool `tool`.
    pub fn permission_of(&self, tool: &str) -> Permission {
        self.tool_permissions.get(tool).copied().unwrap_or(self.permission)
    }
}

/// The server named in a model's tool name `mcp__<server>__<tool>`.
pub fn server_of(tool_name: &str) -> Option<&str> {
    let rest = tool_name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some(server)
}

/// A permission as written (`ask` when absent or mistaken; the mistake is
/// reported).
fn permission(errors: &mut ConfigErrors, path: &str, value: Option<&str>) -> Permission {
    value.and_then(|text| Permission::parse(errors, path, text)).unwrap_or(Permission::Ask)
}

/// Reads a secret named by an environment variable or a file (the error
/// reported at the path given).
pub(super) type SecretReader<'a> =
    &'a mut dyn FnMut(&mut ConfigErrors, &str, Option<String>, Option<String>) -> Option<Secret>;

/// Validates one `[[mcp_servers]]` entry; `secret` reads a header's value
/// from `env` or `file`.
pub(super) fn validate_server(
    errors: &mut ConfigErrors,
    path: &str,
    raw: RawMcpServer,
    secret: SecretReader<'_>,
) -> Option<McpServerConfig> {
    let name = raw.name.unwrap_or_default();
    let name_ok = !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !name_ok {
        errors
            .push(format!("{path}.name"), format!("{name:?} must be 1-{MAX_SERVER_NAME} characters of A-Z a-z 0-9 -"));
    }
    let url = raw.url.unwrap_or_default();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        errors.push(format!("{path}.url"), "required: the server's Streamable HTTP URL (http:// or https://)");
    }
    let mut headers = Vec::new();
    for (header, value) in raw.headers {
        let at = format!("{path}.headers.{header}");
        if axum::http::HeaderName::try_from(header.as_str()).is_err() {
            errors.push(&at, "not a valid header name");
            continue;
        }
        let value = match (value.env, value.file, value.value) {
            (env, file, None) if env.is_some() || file.is_some() => secret(errors, &at, env, file),
            (None, None, Some(value)) => Some(Secret::new(value)),
            _ => {
                errors.push(&at, "set exactly one of env, file, value");
                None
            }
        };
        if let Some(value) = value {
            if axum::http::HeaderValue::try_from(value.expose()).is_err() {
                errors.push(&at, "the value is not a valid header value");
            } else {
                headers.push((header, value));
            }
        }
    }
    let mut forward_headers = Vec::new();
    for (i, header) in raw.forward_headers.into_iter().enumerate() {
        let at = format!("{path}.forward_headers[{i}]");
        let lower = header.to_ascii_lowercase();
        if axum::http::HeaderName::try_from(lower.as_str()).is_err() {
            errors.push(&at, "not a valid header name");
        } else if headers.iter().any(|(name, _)| name.eq_ignore_ascii_case(&lower)) {
            errors.push(&at, "also set in headers: a header is configured or forwarded, not both");
        } else if matches!(lower.as_str(), "host" | "content-length" | "content-type" | "accept" | "mcp-session-id") {
            errors.push(&at, "a header of the HTTP or MCP transport itself");
        } else {
            forward_headers.push(lower);
        }
    }
    let mut tool_permissions = BTreeMap::new();
    for (tool, value) in raw.tool_permissions {
        let at = format!("{path}.tool_permissions.{tool}");
        tool_permissions.insert(tool, permission(errors, &at, Some(&value)));
    }
    let timeout = secs(positive(errors, &format!("{path}.timeout_secs"), raw.timeout_secs), 30);
    let protocol = match raw.protocol.as_deref() {
        None | Some("2025-11-25") => McpProtocol::Sessions,
        Some("2026-07-28") => McpProtocol::Stateless,
        Some("auto") => McpProtocol::Auto,
        Some(other) => {
            errors.push(format!("{path}.protocol"), format!("{other:?} is not one of 2025-11-25, 2026-07-28, auto"));
            McpProtocol::Sessions
        }
    };
    Some(McpServerConfig {
        name,
        protocol,
        url,
        headers,
        forward_headers,
        allowed_tools: raw.allowed_tools,
        denied_tools: raw.denied_tools,
        permission: permission(errors, &format!("{path}.permission"), raw.permission.as_deref()),
        tool_permissions,
        timeout,
        retry_on_takeover: raw.retry_on_takeover.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_read_from_a_tool_name() {
        assert_eq!(server_of("mcp__notion__search"), Some("notion"));
        assert_eq!(server_of("mcp__a-b__x__y"), Some("a-b"));
        assert_eq!(server_of("mcp____x"), None);
        assert_eq!(server_of("mcp__notion__"), None);
        assert_eq!(server_of("lookup"), None);
    }
}
