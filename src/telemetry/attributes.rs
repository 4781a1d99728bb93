//! Span attribute names: the OpenTelemetry GenAI semantic conventions
//! (docs/protocols.md §8) and the gateway's own. Defined here because the Rust
//! semantic-conventions crate has deprecated its GenAI constants; every span
//! names its fields through these (`{ attributes::X } = value`).

pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// The session id.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
pub const GEN_AI_AGENT_ID: &str = "gen_ai.agent.id";
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` for server tools, `extension` for the subagent tool.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
pub const SERVER_ADDRESS: &str = "server.address";
pub const ERROR_TYPE: &str = "error.type";
pub const DB_SYSTEM_NAME: &str = "db.system.name";
pub const DB_OPERATION_NAME: &str = "db.operation.name";

pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
pub const HTTP_ROUTE: &str = "http.route";
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";

/// The gateway's own fields, on spans and in log lines (short names, as log
/// readers expect them).
pub const REQUEST_ID: &str = "request_id";
pub const TRACE_ID: &str = "trace_id";
pub const TENANT: &str = "tenant";
pub const SESSION_ID: &str = "session_id";
pub const REPLICA: &str = "replica";
pub const DIALECT: &str = "dialect";
pub const TURN: &str = "turn";
pub const RELAYS: &str = "relays";
/// The `[[mcp_servers]]` name of an MCP tool call.
pub const MCP_SERVER: &str = "mcp_server";

/// The special fields tracing-opentelemetry reads: span name, kind, status.
pub const OTEL_NAME: &str = "otel.name";
pub const OTEL_KIND: &str = "otel.kind";
pub const OTEL_STATUS_CODE: &str = "otel.status_code";

/// The operation names of `gen_ai.operation.name`.
pub const OPERATION_CHAT: &str = "chat";
pub const OPERATION_INVOKE_AGENT: &str = "invoke_agent";
pub const OPERATION_EXECUTE_TOOL: &str = "execute_tool";

/// `gen_ai.agent.name` of the gateway's agent loop.
pub const AGENT_NAME: &str = "switchboard";
