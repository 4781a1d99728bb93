//! The configuration file exactly as written: plain serde structs, every field
//! optional where a default exists. Nothing here is validated; `validate.rs`
//! turns a [`RawConfig`] into a [`super::Config`] and reports every mistake.
//!
//! Unknown keys are not silently dropped: [`parse`] collects each one (with its
//! path) through `serde_ignored`, so a file with several typos gets all of them
//! reported at once instead of one per run.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    ConfigErrors,
    access::{RawAnonymous, RawApiKey},
    cors::RawCors,
    http2::RawHttp2,
    sandbox::{RawSandbox, RawSkills},
};

#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub agent: RawAgent,
    #[serde(default)]
    pub rlm: RawRlm,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub tenants: Vec<RawTenant>,
    #[serde(default)]
    pub models: BTreeMap<String, RawModel>,
    #[serde(default)]
    pub tools: Vec<RawTool>,
    #[serde(default)]
    pub mcp_servers: Vec<super::mcp::RawMcpServer>,
    pub anonymous: Option<RawAnonymous>,
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub skills: RawSkills,
    #[serde(default)]
    pub responses: RawResponses,
}

/// `[responses]`: the OpenAI Responses API.
#[derive(Debug, Default, Deserialize)]
pub struct RawResponses {
    pub retention_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawServer {
    pub listen: Option<String>,
    pub replica_id: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub shutdown_grace_secs: Option<u64>,
    pub drain_delay_secs: Option<u64>,
    pub heartbeat_secs: Option<u64>,
    pub max_json_depth: Option<u32>,
    pub max_json_string_bytes: Option<u64>,
    pub max_header_count: Option<u32>,
    pub max_header_bytes: Option<u64>,
    pub header_read_timeout_secs: Option<u64>,
    pub body_read_timeout_secs: Option<u64>,
    /// The session console at `/console` (off unless true).
    pub console: Option<bool>,
    /// Browser origins (`[server.cors]`); CORS is off without it and
    /// without tenants' `cors_origins`.
    pub cors: Option<RawCors>,
    /// `[server.http2]`: settings of HTTP/2 connections.
    pub http2: Option<RawHttp2>,
}

/// `[store.tls]`: PEM files.
#[derive(Debug, Default, Deserialize)]
pub struct RawRedisTls {
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawStore {
    pub redis_url: Option<String>,
    /// Seed nodes of a Redis Cluster (exclusive with `redis_url`).
    pub redis_cluster: Option<Vec<String>>,
    /// `[store.tls]`: the CA and client certificate for `rediss://`.
    pub tls: Option<RawRedisTls>,
    pub wait_replicas: Option<u32>,
    pub wait_replicas_timeout_ms: Option<u64>,
    pub commit_linger_ms: Option<u64>,
    pub append_tick_us: Option<u64>,
    pub key_prefix: Option<String>,
    pub session_ttl_secs: Option<u64>,
    pub event_log_max_len: Option<u64>,
    pub lease_ttl_secs: Option<u64>,
    pub liveness_check_ms: Option<u64>,
    pub hold_notice_secs: Option<u64>,
    pub hold_max_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawAgent {
    pub max_iterations: Option<u32>,
    pub max_depth: Option<u32>,
    pub relay_timeout_secs: Option<u64>,
    pub default_model: Option<String>,
    pub titles: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawRlm {
    pub max_iterations: Option<u32>,
    pub max_depth: Option<u32>,
    pub cell_timeout_secs: Option<u64>,
    pub memory_mb: Option<u64>,
    pub exec_timeout_secs: Option<u64>,
    pub max_exec_timeout_secs: Option<u64>,
    pub sub_prompt_budget: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawTenant {
    pub id: Option<String>,
    pub jwt: Option<RawJwt>,
    pub rate_limit: Option<RawRateLimit>,
    /// Model aliases this tenant may use; absent means every configured alias.
    pub models: Option<Vec<String>>,
    /// The tenant's own provider keys, by model alias.
    #[serde(default)]
    pub credentials: BTreeMap<String, RawCredential>,
    pub default_model: Option<String>,
    #[serde(default)]
    pub api_keys: Vec<RawApiKey>,
    /// A TOML file of more `api_keys` entries, re-read when it changes.
    pub api_keys_file: Option<String>,
    /// `agent`, `bash`, `read`, `patch`: absent means `["agent"]`.
    pub default_tools: Option<Vec<String>>,
    /// `bash`, `read`, `patch` → allow | ask | deny.
    #[serde(default)]
    pub tool_permissions: BTreeMap<String, String>,
    /// Sandboxed commands of this tenant may reach the network.
    pub sandbox_network: Option<bool>,
    /// Browser origins this tenant's credentials may also be used from.
    pub cors_origins: Option<Vec<String>>,
    /// Names of `[[mcp_servers]]` whose tools its sessions get.
    #[serde(default)]
    pub mcp_servers: Vec<String>,
}

/// Where a provider key comes from: an environment variable or a file (a
/// mounted secret). Exactly one is set.
#[derive(Debug, Default, Deserialize)]
pub struct RawCredential {
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawJwt {
    pub hs256_secret: Option<String>,
    /// Name of an environment variable holding the HS256 secret.
    pub hs256_secret_env: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_secs: Option<u64>,
    /// Verification keys, each with an optional `kid`.
    #[serde(default)]
    pub keys: Vec<RawJwtKey>,
    /// A JWKS document whose keys are added to `keys`, refreshed in the background.
    pub jwks_url: Option<String>,
    pub jwks_refresh_secs: Option<u64>,
}

/// One entry of `jwt.keys`: an HMAC secret or a public key in PEM.
#[derive(Debug, Default, Deserialize)]
pub struct RawJwtKey {
    pub kid: Option<String>,
    pub alg: Option<String>,
    pub secret: Option<String>,
    /// Name of an environment variable holding the HMAC secret.
    pub secret_env: Option<String>,
    pub public_key_file: Option<String>,
    /// Name of an environment variable holding the public key's PEM text.
    pub public_key_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawRateLimit {
    pub requests_per_second: Option<u32>,
    pub burst: Option<u32>,
    pub subject_requests_per_second: Option<u32>,
    pub subject_burst: Option<u32>,
    pub max_concurrent_sessions: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawLimits {
    /// `fail_closed` (default) or `fail_open`.
    pub on_store_error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawModel {
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
    pub context_window: Option<u32>,
    pub max_output_tokens: Option<u32>,
    pub connect_timeout_secs: Option<u64>,
    pub first_byte_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub max_retries: Option<u32>,
    pub retry_base_ms: Option<u64>,
    pub continue_partial: Option<bool>,
    pub prices: Option<RawPrices>,
    pub http2: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawPrices {
    pub input_per_million: Option<f64>,
    pub output_per_million: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawTool {
    pub name: Option<String>,
    pub description: Option<String>,
    pub parameters: Option<toml::Value>,
    pub url: Option<String>,
    /// A tool served inside the gateway (only `demo` exists), for the
    /// no-network embedded defaults.
    pub builtin: Option<String>,
    pub permission: Option<String>,
    pub timeout_secs: Option<u64>,
    pub retry_on_takeover: Option<bool>,
}

/// Parses TOML text into a [`RawConfig`] and the list of unknown keys (to be
/// reported together with the validation errors). Syntax and type errors stop
/// the parse: the file cannot be read past them.
pub fn parse(text: &str) -> Result<(RawConfig, ConfigErrors), ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let deserializer = toml::Deserializer::parse(text)
        .map_err(|e| ConfigErrors::single("", format!("not valid TOML: {}", e.message())))?;
    // serde_path_to_error names the field of a type error; serde_ignored
    // reports every key the structs do not know.
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(deserializer, &mut track);
    let parsed = serde_ignored::deserialize(tracked, |path| {
        errors.push(path.to_string(), "unknown key");
    });
    match parsed {
        Ok(raw) => Ok((raw, errors)),
        Err(e) => {
            let e: toml::de::Error = e;
            errors.push(track.path().to_string(), e.message().to_string());
            Err(errors)
        }
    }
}
