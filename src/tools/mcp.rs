//! MCP servers as tool sources (`[[mcp_servers]]`), through the official
//! Rust SDK's Streamable HTTP client (`rmcp`).
//!
//! - **Both protocol eras** (`protocol`): the 2025-11-25 `initialize`
//!   handshake with its MCP session (the default: what nearly every server
//!   speaks), the stateless 2026-07-28 protocol (`server/discover`), or a
//!   probe for the latter falling back to the former.
//! - **One client per server and replica**, opened at first use and
//!   opened again after the connection failed. It holds nothing a session
//!   needs: a session taken over by another replica calls the server
//!   through that replica's own client, so no MCP session state lives only
//!   in one replica's memory.
//! - **The tool list** is fetched at first use, kept for [`LIST_TTL`], and
//!   fetched again after the server sent `notifications/tools/list_changed`.
//!   The model sees each offered tool (`allowed_tools` / `denied_tools`) as
//!   `mcp__<server>__<tool>`, made of what providers accept
//!   (`[A-Za-z0-9_-]`, at most 64 characters; a name that had to be changed
//!   ends with a short hash of the original), and the call is sent with the
//!   server's own name.
//! - **A failing server never fails a turn**: a listing that fails leaves
//!   that server's tools out of the step (logged, counted); a call that
//!   fails, times out or answers `isError` becomes an error result the
//!   model sees. The server's URL and headers never reach a client, the
//!   store or a log.
//! - Each call carries its idempotency key (`<session id>:<tool call id>`,
//!   the same on the replica that takes a session over) in its `_meta`.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::http::{HeaderName, HeaderValue};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
    model::{CallToolRequestParams, CallToolResult, MetaObject, ProtocolVersion, RequestMetaObject},
    service::{NotificationContext, RunningService, ServiceError},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::{sync::Mutex, time::Instant};

use super::{MAX_RESPONSE_BYTES, ToolReply};
use crate::{
    config::{
        Config, Permission,
        mcp::{McpProtocol, McpServerConfig, server_of},
    },
    domain::{ToolCall, ToolOutcome},
    principal::Forwarded,
    providers::ToolSpec,
    telemetry::metrics::Metrics,
};

/// How long a server's tool list is used before it is fetched again.
pub const LIST_TTL: Duration = Duration::from_secs(300);
/// The longest tool name model APIs accept.
const MAX_NAME: usize = 64;
/// The `_meta` key of a call's idempotency key.
pub const IDEMPOTENCY_META: &str = "switchboard/idempotency_key";

/// The configured MCP servers' clients.
pub struct McpServers {
    servers: HashMap<String, Arc<Server>>,
}

struct Server {
    config: McpServerConfig,
    /// A client and a tool list per credential scope: the values of the
    /// server's `forward_headers` a request brought (`""` without any).
    scopes: std::sync::Mutex<HashMap<String, Arc<Mutex<Scope>>>>,
}

/// What one credential scope of a server holds.
#[derive(Default)]
struct Scope {
    /// `None` until first used, and after the connection failed.
    client: Option<Arc<Client>>,
    listing: Option<Listing>,
    /// Set by the server's `notifications/tools/list_changed` to this
    /// scope's client.
    changed: Arc<AtomicBool>,
}

/// The headers a scope's client sends besides the configured ones.
struct Credentials {
    key: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// Scopes kept per server at most (each an open client): past it they are
/// dropped and opened again when used.
const MAX_SCOPES: usize = 1024;

type Client = RunningService<RoleClient, Handler>;

/// What a model's tool name stands for (see [`McpServers::resolve`]).
type Resolved = Result<Option<(Arc<Server>, Listed)>, (Arc<Server>, Failure)>;

/// What the client does with the server's notifications.
#[derive(Clone)]
struct Handler {
    changed: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.store(true, Ordering::SeqCst);
    }
}

struct Listing {
    at: Instant,
    tools: Arc<Vec<Listed>>,
}

/// One offered tool of a server.
#[derive(Debug, Clone)]
struct Listed {
    /// As the model sees it.
    spec: ToolSpec,
    /// As the server names it.
    tool: String,
}

/// Why a server could not be used.
#[derive(Debug)]
enum Failure {
    TimedOut,
    /// The server could not be reached or answered outside the protocol.
    Unreachable,
    /// A JSON-RPC error of the server's.
    Refused(String),
}

impl Failure {
    fn of(error: &ServiceError) -> Self {
        match error {
            ServiceError::McpError(e) => Self::Refused(e.message.to_string()),
            ServiceError::Timeout { .. } => Self::TimedOut,
            _ => Self::Unreachable,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::TimedOut => "timeout",
            Self::Unreachable => "unreachable",
            Self::Refused(_) => "refused",
        }
    }

    /// What the model is told (never the URL).
    fn explain(&self, server: &McpServerConfig) -> String {
        match self {
            Self::TimedOut => {
                format!("the MCP server {} did not answer within {} s", server.name, server.timeout.as_secs())
            }
            Self::Unreachable => {
                format!("the MCP server {} could not be reached, or did not answer in MCP", server.name)
            }
            Self::Refused(message) => format!("the MCP server {} refused the call: {message}", server.name),
        }
    }
}

/// The model's name of `server`'s tool `tool` (see the module docs).
pub fn model_name(server: &str, tool: &str) -> String {
    let clean: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') { c } else { '_' }).collect();
    let full = format!("mcp__{server}__{clean}");
    if clean == tool && full.len() <= MAX_NAME {
        return full;
    }
    let digest = hex::encode(&Sha256::digest(tool.as_bytes())[..4]);
    let mut base = full;
    base.truncate(MAX_NAME - digest.len() - 1);
    format!("{base}_{digest}")
}

impl McpServers {
    pub fn from_config(config: &Config) -> Arc<Self> {
        let servers = config
            .mcp_servers
            .iter()
            .map(|server| {
                let entry = Server { config: server.clone(), scopes: std::sync::Mutex::new(HashMap::new()) };
                (server.name.clone(), Arc::new(entry))
            })
            .collect();
        Arc::new(Self { servers })
    }

    /// The tools of the servers `names` (a tenant's) as offered to the
    /// model; a server whose list cannot be had is left out of this step.
    pub async fn specs(&self, names: &[String], metrics: &Metrics) -> Vec<ToolSpec> {
        let forwarded = Forwarded::current();
        let servers = names.iter().filter_map(|name| self.servers.get(name));
        let listings = futures::future::join_all(servers.map(|server| async {
            let credentials = server.credentials(&forwarded);
            server.tools(&credentials, metrics).await
        }))
        .await;
        listings
            .into_iter()
            .filter_map(Result::ok)
            .flat_map(|tools| tools.iter().map(|t| t.spec.clone()).collect::<Vec<_>>())
            .collect()
    }

    /// The permission of the tool the model calls `name`, if it is an
    /// offered tool of one of the servers `names`; an error result for the
    /// model when its server's tools cannot be had.
    pub async fn permission(
        &self,
        names: &[String],
        name: &str,
        metrics: &Metrics,
    ) -> Result<Option<Permission>, String> {
        match self.resolve(names, name, metrics).await {
            Ok(found) => Ok(found.map(|(server, listed)| server.config.permission_of(&listed.tool))),
            Err((server, failure)) => {
                metrics.mcp_call(&server.config.name, failure.label());
                Err(failure.explain(&server.config))
            }
        }
    }

    /// Runs `call` (a tool of one of the servers `names`); `key`: its
    /// idempotency key.
    pub async fn call(&self, names: &[String], call: &ToolCall, key: &str, metrics: &Metrics) -> ToolReply {
        let (server, listed) = match self.resolve(names, &call.name, metrics).await {
            Ok(Some(found)) => found,
            Ok(None) => return ToolOutcome::error(format!("there is no tool named {:?}", call.name)).into(),
            Err((server, failure)) => {
                metrics.mcp_call(&server.config.name, failure.label());
                return ToolOutcome::error(failure.explain(&server.config)).into();
            }
        };
        let arguments = match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(arguments)) => Some(arguments),
            Ok(Value::Null) => None,
            Ok(_) => return ToolOutcome::error("the arguments must be a JSON object").into(),
            Err(e) => return ToolOutcome::error(format!("the arguments are not valid JSON: {e}")).into(),
        };
        let mut params = CallToolRequestParams::new(listed.tool.clone());
        params.arguments = arguments;
        let mut meta = serde_json::Map::new();
        meta.insert(IDEMPOTENCY_META.into(), Value::String(key.into()));
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        let started = Instant::now();
        let outcome = server.call(params, &server.credentials(&Forwarded::current())).await;
        metrics.mcp_call(&server.config.name, outcome.as_ref().map_or_else(Failure::label, |r| result_label(r)));
        metrics.mcp_latency(&server.config.name, started.elapsed());
        match outcome {
            Ok(result) => render(&result).into(),
            Err(failure) => ToolOutcome::error(failure.explain(&server.config)).into(),
        }
    }

    /// The server and tool the model's `name` stands for, among the
    /// servers `names`: `None` when it is none of their offered tools, an
    /// error when its server's tools cannot be had.
    async fn resolve(&self, names: &[String], name: &str, metrics: &Metrics) -> Resolved {
        let Some(server) = server_of(name).filter(|s| names.iter().any(|n| n == s)).and_then(|s| self.servers.get(s))
        else {
            return Ok(None);
        };
        let credentials = server.credentials(&Forwarded::current());
        let tools = server.tools(&credentials, metrics).await.map_err(|failure| (server.clone(), failure))?;
        Ok(tools.iter().find(|t| t.spec.name == name).map(|listed| (server.clone(), listed.clone())))
    }
}

impl Server {
    /// The scope of a request that brought `forwarded`.
    fn credentials(&self, forwarded: &Forwarded) -> Credentials {
        let mut headers = Vec::new();
        let mut digest = Sha256::new();
        for name in &self.config.forward_headers {
            if let Some(value) = forwarded.get(name)
                && let (Ok(header), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value))
            {
                digest.update(name.as_bytes());
                digest.update(b"=");
                digest.update(value.as_bytes());
                digest.update(b"\n");
                headers.push((header, value));
            }
        }
        let key = if headers.is_empty() { String::new() } else { hex::encode(&digest.finalize()[..16]) };
        Credentials { key, headers }
    }

    fn scope(&self, credentials: &Credentials) -> Arc<Mutex<Scope>> {
        let mut scopes = self.scopes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if scopes.len() >= MAX_SCOPES && !scopes.contains_key(&credentials.key) {
            scopes.clear();
        }
        scopes.entry(credentials.key.clone()).or_default().clone()
    }

    /// The offered tools, listed again when the list is old or changed.
    async fn tools(&self, credentials: &Credentials, metrics: &Metrics) -> Result<Arc<Vec<Listed>>, Failure> {
        let scope = self.scope(credentials);
        let mut scope = scope.lock().await;
        let changed = scope.changed.swap(false, Ordering::SeqCst);
        if let Some(current) = scope.listing.as_ref()
            && !changed
            && current.at.elapsed() < LIST_TTL
        {
            return Ok(current.tools.clone());
        }
        match self.list(&mut scope, credentials).await {
            Ok(tools) => {
                metrics.mcp_list(&self.config.name, "ok");
                let tools = Arc::new(tools);
                scope.listing = Some(Listing { at: Instant::now(), tools: tools.clone() });
                Ok(tools)
            }
            Err(failure) => {
                metrics.mcp_list(&self.config.name, failure.label());
                tracing::warn!(server = %self.config.name, failure = failure.label(), "cannot list an MCP server's tools; they are left out");
                // A list fetched before is better than none.
                scope.listing.as_ref().map(|l| l.tools.clone()).ok_or(failure)
            }
        }
    }

    async fn list(&self, scope: &mut Scope, credentials: &Credentials) -> Result<Vec<Listed>, Failure> {
        let client = self.client(scope, credentials).await?;
        let tools = match tokio::time::timeout(self.config.timeout, client.list_all_tools()).await {
            Err(_) => return Err(Failure::TimedOut),
            Ok(Err(e)) => {
                let failure = Failure::of(&e);
                self.note(&e, &failure, scope);
                return Err(failure);
            }
            Ok(Ok(tools)) => tools,
        };
        Ok(tools
            .into_iter()
            .filter(|tool| self.config.offers(&tool.name))
            .map(|tool| {
                let description = tool.description.as_deref().unwrap_or_default().to_string();
                let spec = ToolSpec {
                    name: model_name(&self.config.name, &tool.name),
                    description,
                    parameters: Value::Object((*tool.input_schema).clone()),
                };
                Listed { spec, tool: tool.name.to_string() }
            })
            .collect())
    }

    async fn call(&self, params: CallToolRequestParams, credentials: &Credentials) -> Result<CallToolResult, Failure> {
        let scope = self.scope(credentials);
        // The scope is held while its client opens, not during the call.
        let client = self.client(&mut *scope.lock().await, credentials).await?;
        match tokio::time::timeout(self.config.timeout, client.call_tool(params)).await {
            Err(_) => Err(Failure::TimedOut),
            Ok(Err(e)) => {
                let failure = Failure::of(&e);
                self.note(&e, &failure, &mut *scope.lock().await);
                Err(failure)
            }
            Ok(Ok(result)) => Ok(result),
        }
    }

    /// The scope's open client, or a new one.
    async fn client(&self, scope: &mut Scope, credentials: &Credentials) -> Result<Arc<Client>, Failure> {
        if let Some(client) = scope.client.as_ref() {
            return Ok(client.clone());
        }
        let mut headers = HashMap::new();
        for (name, value) in &self.config.headers {
            // Both were checked when the configuration was read.
            if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.expose()))
            {
                headers.insert(name, value);
            }
        }
        headers.extend(credentials.headers.iter().cloned());
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.config.url.clone()).custom_headers(headers),
        );
        let handler = Handler { changed: scope.changed.clone() };
        let lifecycle = match self.config.protocol {
            McpProtocol::Sessions => ClientLifecycleMode::Initialize,
            McpProtocol::Stateless => {
                ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] }
            }
            McpProtocol::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        };
        let opening = handler.serve_with_lifecycle(transport, lifecycle);
        let client = match tokio::time::timeout(self.config.timeout, opening).await {
            Err(_) => return Err(Failure::TimedOut),
            Ok(Err(e)) => {
                tracing::warn!(server = %self.config.name, error = %e, "cannot open an MCP session");
                return Err(Failure::Unreachable);
            }
            Ok(Ok(client)) => Arc::new(client),
        };
        scope.client = Some(client.clone());
        Ok(client)
    }

    /// A request failed: a client whose connection broke is opened again
    /// at the next use.
    fn note(&self, error: &ServiceError, failure: &Failure, scope: &mut Scope) {
        if matches!(failure, Failure::Unreachable) {
            tracing::warn!(server = %self.config.name, error = %error, "an MCP server's connection failed");
            scope.client = None;
        }
    }
}

fn result_label(result: &CallToolResult) -> &'static str {
    if result.is_error == Some(true) { "tool_error" } else { "ok" }
}

/// A call's result as the model gets it: text as it is, other content
/// named (an image's bytes are not text a model can read here), the
/// structured result when there is no content; `isError` an error result.
fn render(result: &CallToolResult) -> ToolOutcome {
    let mut parts = Vec::new();
    for block in &result.content {
        let block = serde_json::to_value(block).unwrap_or(Value::Null);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        match block["type"].as_str() {
            Some("text") => parts.push(text(&block["text"])),
            Some(kind @ ("image" | "audio")) => {
                parts.push(format!("[{kind} content, {}, not shown]", text(&block["mimeType"])));
            }
            Some("resource_link") => {
                parts.push(format!("[resource link {}: {}]", text(&block["name"]), text(&block["uri"])));
            }
            Some("resource") => match block["resource"]["text"].as_str() {
                Some(body) => parts.push(body.to_string()),
                None => parts.push(format!("[resource {}]", text(&block["resource"]["uri"]))),
            },
            _ => parts.push(block.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let mut text = parts.join("\n");
    if text.len() > MAX_RESPONSE_BYTES {
        let mut cut = MAX_RESPONSE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!("\n[response cut at {MAX_RESPONSE_BYTES} bytes]"));
    }
    if result.is_error == Some(true) { ToolOutcome::error(text) } else { ToolOutcome::Success(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_what_providers_accept_and_stay_apart() {
        assert_eq!(model_name("notion", "search"), "mcp__notion__search");
        let dotted = model_name("fs", "read.file");
        let underscored = model_name("fs", "read_file");
        assert!(dotted.starts_with("mcp__fs__read_file_") && dotted.len() == "mcp__fs__read_file_".len() + 8);
        assert_eq!(underscored, "mcp__fs__read_file");
        let long = model_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_NAME);
        assert_ne!(long, model_name("server", &"x".repeat(101)));
        for name in [dotted, long] {
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')), "{name}");
            assert_eq!(server_of(&name), Some(if name.starts_with("mcp__fs") { "fs" } else { "server" }));
        }
    }

    #[test]
    fn results_become_text_and_errors() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"}
            ]
        }))
        .unwrap();
        let ToolOutcome::Success(text) = render(&result) else { panic!("a success") };
        assert_eq!(text, "hello\n[image content, image/png, not shown]\n[resource link a.txt: file:///a.txt]");
        let failed: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [{"type": "text", "text": "no such city"}], "isError": true}),
        )
        .unwrap();
        assert_eq!(render(&failed), ToolOutcome::error("no such city"));
        let structured: CallToolResult =
            serde_json::from_value(serde_json::json!({"content": [], "structuredContent": {"sum": 3}})).unwrap();
        assert_eq!(render(&structured), ToolOutcome::Success(r#"{"sum":3}"#.into()));
    }
}
