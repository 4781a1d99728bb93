//! Configuration: the validated [`Config`] the rest of the gateway reads, and
//! how it is loaded.
//!
//! Loading is three steps: the TOML text (a file, or the embedded defaults
//! when there is none) is parsed into a raw struct (`raw.rs`); the
//! `SWITCHBOARD_*` environment overrides are laid over it; then `validate.rs`
//! checks everything and reports every mistake with its field path. Secrets
//! named by environment variable (`*_env` keys) are read during validation,
//! so a missing variable is a configuration error, not a runtime surprise.
//!
//! This module does not watch files or reload: a changed file takes effect at
//! the next start.

pub mod access;
pub mod cors;
mod dialect;
pub mod http2;
pub mod mcp;
mod models;
mod raw;
pub mod sandbox;
mod validate;

use std::{collections::BTreeMap, fmt, net::SocketAddr, path::Path, time::Duration};

pub use self::{
    access::{Anonymous, ApiKey, ApiKeys},
    cors::{CorsConfig, OriginPattern},
    dialect::{Dialect, DialectSpec, ErrorStyle},
    models::{
        ModelConfig, PATTERN_SUFFIX, Prices, ProviderKind, Resilience, ResolvedModel, pattern_prefix, resolve_key,
    },
    sandbox::{CommandLimits, DefaultTools, SandboxBackend, SandboxConfig, SkillsConfig},
};

/// Looks up an environment variable. Passed explicitly so tests can supply
/// their own environment instead of mutating the process's.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the real process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The embedded defaults: what `switchboard` runs with when no file is given.
/// In-memory store, one tenant `dev`, the `demo` model and a built-in demo tool,
/// so a fresh machine needs no network and no keys.
pub const EMBEDDED_DEFAULTS: &str = include_str!("defaults.toml");

/// The development HS256 secret used by the embedded defaults when
/// `SWITCHBOARD_DEV_SECRET` is not set. Start-up logs a warning when it is used.
pub const BUILTIN_DEV_SECRET: &str = "switchboard-dev-secret-not-for-production";

#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub agent: AgentConfig,
    pub rlm: RlmConfig,
    pub on_store_error: StoreFailure,
    /// Tenants by id.
    pub tenants: BTreeMap<String, TenantConfig>,
    /// Model aliases and patterns (what requests name) to their provider
    /// settings; [`Config::model`] resolves a requested id.
    pub models: BTreeMap<String, ModelConfig>,
    pub tools: Vec<ToolConfig>,
    /// `[[mcp_servers]]`: remote MCP servers, offered to the tenants that
    /// name them.
    pub mcp_servers: Vec<mcp::McpServerConfig>,
    /// Credential-less requests on chosen routes (off when `None`).
    pub anonymous: Option<Anonymous>,
    /// True when the dev tenant signs with [`BUILTIN_DEV_SECRET`].
    pub uses_builtin_dev_secret: bool,
    /// Where `bash`, `read`, `patch` and the rlm REPL's `exec` run.
    pub sandbox: SandboxConfig,
    pub skills: SkillsConfig,
    pub responses: ResponsesConfig,
}

/// `[responses]`: the OpenAI Responses API (`api/responses`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesConfig {
    /// How long a response stays readable after it was created
    /// (`retention_secs`): its object, its stream and its input items. Its
    /// session's own expiry (`store.session_ttl_secs` idle) may end it
    /// sooner.
    pub retention: Duration,
}

impl Default for ResponsesConfig {
    fn default() -> Self {
        Self { retention: Duration::from_secs(DEFAULT_RESPONSE_RETENTION_SECS) }
    }
}

/// A day: as long as an idle session lives by default.
pub const DEFAULT_RESPONSE_RETENTION_SECS: u64 = 86_400;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub replica_id: String,
    /// How long the drain after SIGTERM may take before the process exits.
    pub shutdown_grace: Duration,
    /// How long after SIGTERM the replica keeps accepting connections (and
    /// answering readiness with 503), for load balancers that watch
    /// readiness rather than a pre-stop hook. At most `shutdown_grace`.
    pub drain_delay: Duration,
    /// Interval of SSE keep-alive comments on idle streams.
    pub heartbeat: Duration,
    pub input: InputLimits,
    /// `[server.cors]`; `None` when absent (CORS is then on only if a
    /// tenant lists `cors_origins`: see [`Config::cors_enabled`]).
    pub cors: Option<CorsConfig>,
    /// Serve the session console at `/console` (a public page that asks
    /// for a credential).
    pub console: bool,
    /// HTTP/2 connections (h2c): streams per connection, buffers, pings.
    pub http2: http2::Http2Config,
}

/// Bounds on what a client may send, enforced before anything is parsed
/// into a request (`limits::input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    pub max_body_bytes: usize,
    /// Deepest nesting of JSON arrays and objects.
    pub max_json_depth: u32,
    /// Longest JSON string (key or value), in bytes as sent.
    pub max_json_string_bytes: usize,
    pub max_header_count: usize,
    /// Names and values of all headers together.
    pub max_header_bytes: usize,
    /// A connection must deliver a request's headers within this long (also
    /// closes idle keep-alive connections).
    pub header_read_timeout: Duration,
    /// A request's body must arrive completely within this long.
    pub body_read_timeout: Duration,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            max_json_depth: 64,
            max_json_string_bytes: 512 * 1024,
            max_header_count: 64,
            max_header_bytes: 32 * 1024,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

/// Where the Redis store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis (`store.redis_url`).
    Node(String),
    /// A Redis Cluster, by some of its nodes (`store.redis_cluster`): the
    /// client learns the rest of the topology from them.
    Cluster(Vec<String>),
}

/// `[store.tls]`, read: PEM bytes for `rediss://` connections.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// The CA(s) whose certificates the servers present, instead of the
    /// system's roots (a private CA).
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its key, for servers that check clients
    /// (Redis's own default, `tls-auth-clients yes`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Sizes only: the client key is a secret.
impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.as_ref().map(|pem| format!("{} bytes", pem.len())))
            .field("client", &self.client.as_ref().map(|_| "certificate and key"))
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `None` selects the in-memory store (one replica only).
    pub redis: Option<RedisTarget>,
    /// Certificates for `rediss://` (`[store.tls]`); none: the system's
    /// roots and no client certificate.
    pub tls: RedisTls,
    /// Replicas each commit round waits for (`WAIT`) before it is
    /// acknowledged; 0 = Redis's asynchronous replication alone.
    pub wait_replicas: u32,
    /// How long that wait may take before the commit counts as failed.
    pub wait_replicas_timeout: Duration,
    /// How long a streamed token may wait for more to join its commit
    /// (`store.commit_linger_ms`, 0 = none; see `sessions/writer.rs`).
    pub commit_linger: Duration,
    /// The least time between two of the writer's rounds that carry only
    /// streamed events after a step's first (`store.append_tick_us`; see
    /// `sessions/writer.rs`).
    pub append_tick: Duration,
    pub key_prefix: String,
    /// Idle sessions, their logs and relay ids expire after this long.
    pub session_ttl: Duration,
    /// Events kept per session; older ones are trimmed (a rejoin past them is
    /// answered with "recovery failed").
    pub event_log_max_len: u64,
    pub lease_ttl: Duration,
    /// How often this replica reads the other replicas' death hints
    /// (`store.liveness_check_ms`, 0 = never: the lease alone; see
    /// `sessions/ownership.rs`).
    pub liveness_check: Option<Duration>,
    /// How often a turn whose writes the store holds tells its streams
    /// (`store.hold_notice_secs`), and how long it is held before it
    /// stops and fails its streams (`store.hold_max_secs`), to go on from
    /// its last commit once the store answers (`sessions/writer.rs`).
    pub hold_notice: Duration,
    pub hold_max: Duration,
}

#[cfg(test)]
impl StoreConfig {
    /// The in-memory store with prefix `sb:`, short limits: what unit tests
    /// open.
    pub(crate) fn for_unit_tests() -> Self {
        Self {
            redis: None,
            tls: RedisTls::default(),
            wait_replicas: 0,
            wait_replicas_timeout: Duration::from_millis(500),
            commit_linger: Duration::ZERO,
            append_tick: Duration::from_millis(1),
            key_prefix: "sb:".into(),
            session_ttl: Duration::from_secs(60),
            event_log_max_len: 10,
            lease_ttl: Duration::from_secs(10),
            liveness_check: Some(Duration::from_millis(100)),
            hold_notice: Duration::from_secs(5),
            hold_max: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub max_iterations: u32,
    pub max_depth: u32,
    pub relay_timeout: Duration,
    /// The model of requests that name none, for tenants without their own
    /// `default_model` that may use it.
    pub default_model: Option<String>,
    /// Sessions get a title after their first exchange (one short model
    /// call, charged to the tenant); default on. See [`AgentConfig::titles_for`].
    pub titles: bool,
}

impl AgentConfig {
    /// Whether sessions of `dialect` get a title: on, and the dialect's
    /// clients show a session list ([`DialectSpec::titles`]).
    pub fn titles_for(&self, dialect: &str) -> bool {
        self.titles && Dialect::titles(dialect)
    }
}

/// rlm mode's bounds (`[rlm]`): what a request may ask for at most, and
/// what its REPL may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RlmConfig {
    /// Most model replies (cells) of one rlm turn; a request's
    /// `maxIterations` (default 10) is clamped to it.
    pub max_iterations: u32,
    /// Deepest `llm_query` recursion; a request's `maxDepth` (default 2)
    /// is clamped to it.
    pub max_depth: u32,
    /// CPU time of one cell (waiting for the host not counted).
    pub cell_timeout: Duration,
    /// Memory of one REPL.
    pub memory_bytes: usize,
    /// `exec`'s timeout when the cell gives none, and the most it may give.
    pub exec_timeout: Duration,
    pub max_exec_timeout: Duration,
    /// Longest `llm_query` prompt, in characters (data goes in its context).
    pub sub_prompt_budget: usize,
}

#[derive(Debug, Clone)]
pub struct TenantConfig {
    pub id: String,
    /// Token keys; empty (no keys, no JWKS) for a tenant that uses API keys only.
    pub jwt: JwtConfig,
    pub api_keys: ApiKeys,
    /// The model of requests that name none (wins over `agent.default_model`).
    pub default_model: Option<String>,
    pub rate_limit: Option<RateLimitConfig>,
    /// Aliases this tenant may use; `None` means all configured models.
    pub models: Option<Vec<String>>,
    /// The tenant's own provider keys by model alias, used instead of the
    /// model's key. Read at start-up; never stored in a session.
    pub credentials: BTreeMap<String, Secret>,
    /// Which of `agent`, `bash`, `read`, `patch` its sessions have, and how
    /// they are permitted.
    pub tools: DefaultTools,
    /// Browser origins this tenant's credentials may be used from, besides
    /// `server.cors.allowed_origins` (never `*`).
    pub cors_origins: Vec<OriginPattern>,
    /// The `[[mcp_servers]]` whose tools its sessions get.
    pub mcp_servers: Vec<String>,
}

impl TenantConfig {
    /// The model aliases and patterns visible to this tenant, as written.
    pub fn visible_models<'a>(&'a self, all: &'a BTreeMap<String, ModelConfig>) -> Vec<&'a str> {
        match &self.models {
            Some(list) => list.iter().map(String::as_str).collect(),
            None => all.keys().map(String::as_str).collect(),
        }
    }

    /// May this tenant use the configured model `key` (an alias or pattern)?
    pub fn allows(&self, key: &str) -> bool {
        self.models.as_ref().is_none_or(|list| list.iter().any(|m| m == key))
    }
}

#[derive(Debug, Clone, Default)]
pub struct JwtConfig {
    /// Static verification keys in configuration order; the `hs256_secret`
    /// shorthand, when set, comes first (as a key without `kid`).
    pub keys: Vec<JwtKey>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_secs: u64,
    /// Keys fetched from a JWKS document, in addition to `keys`.
    pub jwks: Option<JwksConfig>,
}

impl JwtConfig {
    /// The first HMAC key: what `switchboard token` signs with.
    pub fn signing_key(&self) -> Option<(&JwtKey, &Secret)> {
        self.keys.iter().find_map(|key| match &key.material {
            JwtKeyMaterial::Secret(secret) => Some((key, secret)),
            JwtKeyMaterial::PublicKey(_) => None,
        })
    }

    /// The secret of the first HS256 key, if there is one.
    pub fn hs256_secret(&self) -> Option<&Secret> {
        self.signing_key().filter(|(key, _)| key.algorithm == jsonwebtoken::Algorithm::HS256).map(|(_, s)| s)
    }
}

/// One configured verification key. Its algorithm is fixed here: a token is
/// only checked against keys whose algorithm equals its header's `alg`.
#[derive(Debug, Clone)]
pub struct JwtKey {
    pub kid: Option<String>,
    pub algorithm: jsonwebtoken::Algorithm,
    pub material: JwtKeyMaterial,
}

/// A key's material: an HMAC secret, or a public key parsed (and checked)
/// from PEM during validation. Neither prints its bytes in `Debug`.
#[derive(Debug, Clone)]
pub enum JwtKeyMaterial {
    Secret(Secret),
    PublicKey(jsonwebtoken::DecodingKey),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksConfig {
    pub url: String,
    /// Interval of the background refresh.
    pub refresh: Duration,
}

/// A tenant's limits. The tenant's requests per second hold across replicas
/// (in Redis); each subject's, when set, per replica (in memory); sessions
/// and tokens are counted across replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub requests_per_second: Option<u32>,
    /// Requests that may arrive at once above the steady rate.
    pub burst: u32,
    /// Each subject's own rate on each replica: keeps one noisy client from
    /// spending the whole tenant's rate, without a Redis round trip.
    pub subject_requests_per_second: Option<u32>,
    pub subject_burst: u32,
    /// Turns running at once (paused sessions do not count).
    pub max_concurrent_sessions: Option<u32>,
    /// Model tokens (input + output) per minute, estimated before a call and
    /// corrected after it.
    pub tokens_per_minute: Option<u64>,
}

/// What a limit does when Redis cannot be asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreFailure {
    /// Refuse the request (503): no tenant can exceed its limits unnoticed.
    #[default]
    FailClosed,
    /// Let the request through, counted in metrics and logged.
    FailOpen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Allow,
    Ask,
    Deny,
}

impl Permission {
    /// `allow`, `ask` or `deny`; anything else is a mistake reported at `path`.
    pub(crate) fn parse(errors: &mut ConfigErrors, path: &str, text: &str) -> Option<Self> {
        match text {
            "allow" => Some(Self::Allow),
            "ask" => Some(Self::Ask),
            "deny" => Some(Self::Deny),
            other => {
                errors.push(path, format!("{other:?} is not one of allow, ask, deny"));
                None
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolTarget {
    Http {
        url: String,
    },
    /// Answers inside the gateway with a deterministic echo; no network.
    BuiltinDemo,
}

#[derive(Debug, Clone)]
pub struct ToolConfig {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments, as sent to the model.
    pub parameters: serde_json::Value,
    pub target: ToolTarget,
    pub permission: Permission,
    pub timeout: Duration,
    /// A call cut short by a replica's death runs again on the replica that
    /// takes the session over (at least once; the `Idempotency-Key` header
    /// is the same). When false it never runs twice: the model is told its
    /// outcome is unknown.
    pub retry_on_takeover: bool,
}

/// A secret string whose `Debug` never prints the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// One mistake in the configuration, with the path of the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// Every mistake found, reported together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn single(path: impl Into<String>, message: impl Into<String>) -> Self {
        let mut errors = Self::default();
        errors.push(path, message);
        errors
    }
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError { path: path.into(), message: message.into() });
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn into_result<T>(self, value: T) -> Result<T, Self> {
        if self.is_empty() { Ok(value) } else { Err(self) }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let path = if e.path.is_empty() { "<file>" } else { e.path.as_str() };
            write!(f, "{path}: {}", e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Loads the configuration: the file at `path` (or named by
    /// `SWITCHBOARD_CONFIG`), else the embedded defaults; then the environment
    /// overrides; then validation.
    pub fn load(path: Option<&Path>, env: EnvLookup<'_>) -> Result<Self, ConfigErrors> {
        let from_env = env("SWITCHBOARD_CONFIG");
        let path = path.map(Path::to_path_buf).or_else(|| from_env.map(Into::into));
        match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| ConfigErrors::single("", format!("cannot read {}: {e}", path.display())))?;
                Self::from_toml(&text, env)
            }
            None => Self::embedded_defaults(env),
        }
    }

    /// Parses and validates TOML text, with the environment overrides applied.
    pub fn from_toml(text: &str, env: EnvLookup<'_>) -> Result<Self, ConfigErrors> {
        let (mut raw, unknown_keys) = raw::parse(text)?;
        validate::apply_env_overrides(&mut raw, env);
        validate::validate(raw, unknown_keys, env)
    }

    /// The embedded defaults, with the dev tenant's secret from
    /// `SWITCHBOARD_DEV_SECRET` or else the built-in development value.
    pub fn embedded_defaults(env: EnvLookup<'_>) -> Result<Self, ConfigErrors> {
        let dev_secret = env("SWITCHBOARD_DEV_SECRET");
        let uses_builtin = dev_secret.is_none();
        let with_fallback = |name: &str| match name {
            "SWITCHBOARD_DEV_SECRET" => Some(dev_secret.clone().unwrap_or_else(|| BUILTIN_DEV_SECRET.to_string())),
            other => env(other),
        };
        let mut config = Self::from_toml(EMBEDDED_DEFAULTS, &with_fallback)?;
        config.uses_builtin_dev_secret = uses_builtin;
        Ok(config)
    }

    /// Whether browsers on other origins may call the gateway at all:
    /// `[server.cors]` is present or a tenant lists `cors_origins`.
    pub fn cors_enabled(&self) -> bool {
        self.server.cors.is_some() || self.tenants.values().any(|t| !t.cors_origins.is_empty())
    }

    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The MCP server named `name`.
    pub fn mcp_server(&self, name: &str) -> Option<&mcp::McpServerConfig> {
        self.mcp_servers.iter().find(|s| s.name == name)
    }

    /// Every header some MCP server forwards (lower case).
    pub fn forwarded_headers(&self) -> Vec<String> {
        let mut names: Vec<String> = self.mcp_servers.iter().flat_map(|s| s.forward_headers.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether a model's tool name is a server-side tool: a `[[tools]]`
    /// entry, or a tool of a configured MCP server (`mcp__<server>__…`).
    pub fn is_server_tool(&self, name: &str) -> bool {
        self.tool(name).is_some() || mcp::server_of(name).is_some_and(|server| self.mcp_server(server).is_some())
    }

    /// What an operator should know before running this configuration
    /// (`check-config` prints them, start-up logs them).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(anonymous) = &self.anonymous {
            let routes: Vec<&str> = anonymous.routes.iter().map(|d| d.as_str()).collect();
            warnings.push(format!(
                "anonymous access is on: requests without credentials on the {} routes act as subject {:?} of \
                 tenant {:?}",
                routes.join(", "),
                anonymous.subject,
                anonymous.tenant
            ));
        }
        if self.sandbox.backend == SandboxBackend::Unsandboxed {
            warnings.push(
                "the sandbox is OFF (sandbox.backend = \"none\"): bash and exec run as plain processes of the \
                 gateway's user, with its view of the files and the network; for development only"
                    .to_string(),
            );
        }
        if let Some(cors) = &self.server.cors {
            if cors.allowed_origins.contains(&OriginPattern::Any) {
                warnings.push("CORS allows every origin (server.cors.allowed_origins = [\"*\"])".to_string());
            } else if cors.allowed_origins.is_empty() && !self.tenants.values().any(|t| !t.cors_origins.is_empty()) {
                warnings
                    .push("[server.cors] allows no origin: list allowed_origins or tenants' cors_origins".to_string());
            }
        }
        warnings
    }

    /// Whether some tenant's sessions run commands (`bash`), so the
    /// sandbox must work for this replica to be ready.
    pub fn needs_sandbox(&self) -> bool {
        self.tenants.values().any(|t| t.tools.has("bash"))
    }

    /// The model a requested id names: an exact alias, else a pattern
    /// (`openai/*` serves `openai/X` with upstream id `X`).
    pub fn model(&self, id: &str) -> Option<ResolvedModel<'_>> {
        models::resolve(&self.models, id)
    }

    /// The model id `tenant`'s requests get when they name none: its own
    /// `default_model`, else `agent.default_model` if it may use that.
    pub fn default_model(&self, tenant: &str) -> Option<&str> {
        let tenant = self.tenants.get(tenant)?;
        tenant.default_model.as_deref().or_else(|| {
            let id = self.agent.default_model.as_deref()?;
            self.model(id).is_some_and(|m| tenant.allows(m.key)).then_some(id)
        })
    }
}

#[cfg(test)]
mod tests;
