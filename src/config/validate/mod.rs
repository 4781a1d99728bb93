//! Turns a [`RawConfig`] into a [`Config`]: applies defaults, resolves secrets
//! from the environment, and checks every field, collecting all mistakes with
//! their paths instead of stopping at the first.

pub(in crate::config) mod checks;
mod cors;
mod http2;
mod jwt;
mod models;
mod tenants;
mod tools;

pub(in crate::config) use self::checks::{positive, secs};
use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use super::{
    AgentConfig, Anonymous, Config, ConfigErrors, Dialect, EnvLookup, InputLimits, RedisTarget, RedisTls, Secret,
    ServerConfig, StoreConfig, ToolConfig,
    access::RawAnonymous,
    raw::{RawConfig, RawRedisTls, RawServer},
};

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The longest `store.commit_linger_ms`.
const MAX_COMMIT_LINGER_MS: u64 = 1000;
/// The longest `store.liveness_check_ms`, and its default.
const MAX_LIVENESS_CHECK_MS: u64 = 5_000;
const DEFAULT_LIVENESS_CHECK_MS: u64 = 100;
/// The longest `store.append_tick_us`, and its default.
const MAX_APPEND_TICK_US: u64 = 10_000;
const DEFAULT_APPEND_TICK_US: u64 = 1000;

/// Lays `SWITCHBOARD_LISTEN`, `SWITCHBOARD_REDIS_URL`,
/// `SWITCHBOARD_REDIS_CLUSTER` (comma-separated seed URLs) and
/// `SWITCHBOARD_REPLICA_ID` over the file's values. A store named in the
/// environment replaces the file's, whichever kind either is (naming both
/// kinds in the environment is an error, reported by validation).
pub fn apply_env_overrides(raw: &mut RawConfig, env: EnvLookup<'_>) {
    if let Some(listen) = env("SWITCHBOARD_LISTEN") {
        raw.server.listen = Some(listen);
    }
    let url = env("SWITCHBOARD_REDIS_URL");
    let cluster = env("SWITCHBOARD_REDIS_CLUSTER");
    if url.is_some() || cluster.is_some() {
        raw.store.redis_url = url;
        raw.store.redis_cluster = cluster
            .map(|seeds| seeds.split(',').map(str::trim).filter(|seed| !seed.is_empty()).map(String::from).collect());
    }
    if let Some(id) = env("SWITCHBOARD_REPLICA_ID") {
        raw.server.replica_id = Some(id);
    }
}

/// Validates `raw`; `errors` already holds the unknown keys found by the parse.
pub fn validate(raw: RawConfig, mut errors: ConfigErrors, env: EnvLookup<'_>) -> Result<Config, ConfigErrors> {
    let listen = raw.server.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen = listen.parse::<SocketAddr>().unwrap_or_else(|_| {
        errors.push("server.listen", format!("{listen:?} is not an address like 127.0.0.1:8080"));
        SocketAddr::from(([127, 0, 0, 1], 8080))
    });
    let replica_id = raw.server.replica_id.clone().unwrap_or_else(default_replica_id);
    check_identifier(&mut errors, "server.replica_id", &replica_id);
    let input = validate_input_limits(&mut errors, &raw.server);
    let shutdown_grace = secs(raw.server.shutdown_grace_secs, 10);
    let drain_delay = secs(raw.server.drain_delay_secs, 0);
    if drain_delay > shutdown_grace {
        errors.push("server.drain_delay_secs", "must not be longer than shutdown_grace_secs");
    }
    let server = ServerConfig {
        listen,
        replica_id,
        shutdown_grace,
        drain_delay,
        heartbeat: secs(positive(&mut errors, "server.heartbeat_secs", raw.server.heartbeat_secs), 15),
        input,
        cors: raw.server.cors.map(|cors| cors::validate_cors(&mut errors, cors)),
        http2: http2::validate_http2(&mut errors, raw.server.http2),
        console: raw.server.console.unwrap_or(false),
    };

    let store = StoreConfig {
        tls: validate_redis_tls(&mut errors, raw.store.tls, redis_urls(&raw.store.redis_url, &raw.store.redis_cluster)),
        redis: validate_redis_target(&mut errors, raw.store.redis_url, raw.store.redis_cluster),
        wait_replicas: wait_replicas(&mut errors, raw.store.wait_replicas, env),
        wait_replicas_timeout: Duration::from_millis(
            positive(&mut errors, "store.wait_replicas_timeout_ms", raw.store.wait_replicas_timeout_ms).unwrap_or(500),
        ),
        commit_linger: Duration::from_millis(match raw.store.commit_linger_ms {
            Some(ms) if ms > MAX_COMMIT_LINGER_MS => {
                errors.push(
                    "store.commit_linger_ms",
                    format!("at most {MAX_COMMIT_LINGER_MS} (a token that waits longer is no stream)"),
                );
                0
            }
            ms => ms.unwrap_or(0),
        }),
        append_tick: Duration::from_micros(match raw.store.append_tick_us {
            Some(us) if us > MAX_APPEND_TICK_US => {
                errors.push(
                    "store.append_tick_us",
                    format!("at most {MAX_APPEND_TICK_US} (a round trip per 10 ms is already few)"),
                );
                DEFAULT_APPEND_TICK_US
            }
            us => us.unwrap_or(DEFAULT_APPEND_TICK_US),
        }),
        key_prefix: match raw.store.key_prefix {
            // A brace would become (or break) the hash tag that keeps one
            // session's keys in one cluster slot.
            Some(prefix) if prefix.contains(['{', '}']) => {
                errors.push("store.key_prefix", "may not contain '{' or '}' (keys' hash tags are the gateway's)");
                prefix
            }
            prefix => prefix.unwrap_or_else(|| "sb:".to_string()),
        },
        session_ttl: secs(positive(&mut errors, "store.session_ttl_secs", raw.store.session_ttl_secs), 86_400),
        event_log_max_len: positive(&mut errors, "store.event_log_max_len", raw.store.event_log_max_len)
            .unwrap_or(10_000),
        lease_ttl: secs(positive(&mut errors, "store.lease_ttl_secs", raw.store.lease_ttl_secs), 10),
        // On by default, on one Redis and on a cluster.
        liveness_check: match raw.store.liveness_check_ms {
            Some(0) => None,
            Some(ms) if ms > MAX_LIVENESS_CHECK_MS => {
                errors.push(
                    "store.liveness_check_ms",
                    format!("at most {MAX_LIVENESS_CHECK_MS} (the lease takes over after a few seconds anyway), or 0 for no death hints"),
                );
                None
            }
            ms => Some(Duration::from_millis(ms.unwrap_or(DEFAULT_LIVENESS_CHECK_MS))),
        },
        hold_notice: secs(positive(&mut errors, "store.hold_notice_secs", raw.store.hold_notice_secs), 5),
        hold_max: secs(positive(&mut errors, "store.hold_max_secs", raw.store.hold_max_secs), 60),
    };

    let agent = AgentConfig {
        max_iterations: positive(&mut errors, "agent.max_iterations", raw.agent.max_iterations).unwrap_or(20),
        max_depth: raw.agent.max_depth.unwrap_or(2),
        relay_timeout: secs(positive(&mut errors, "agent.relay_timeout_secs", raw.agent.relay_timeout_secs), 300),
        default_model: raw.agent.default_model,
        titles: raw.agent.titles.unwrap_or(true),
    };

    let rlm = super::RlmConfig {
        max_iterations: positive(&mut errors, "rlm.max_iterations", raw.rlm.max_iterations).unwrap_or(50),
        max_depth: raw.rlm.max_depth.unwrap_or(4),
        cell_timeout: secs(positive(&mut errors, "rlm.cell_timeout_secs", raw.rlm.cell_timeout_secs), 30),
        memory_bytes: positive(&mut errors, "rlm.memory_mb", raw.rlm.memory_mb).unwrap_or(64) as usize * (1 << 20),
        exec_timeout: secs(positive(&mut errors, "rlm.exec_timeout_secs", raw.rlm.exec_timeout_secs), 10),
        max_exec_timeout: secs(positive(&mut errors, "rlm.max_exec_timeout_secs", raw.rlm.max_exec_timeout_secs), 120),
        sub_prompt_budget: positive(&mut errors, "rlm.sub_prompt_budget", raw.rlm.sub_prompt_budget).unwrap_or(10_000)
            as usize,
    };

    let on_store_error = match raw.limits.on_store_error.as_deref() {
        None | Some("fail_closed") => super::StoreFailure::FailClosed,
        Some("fail_open") => super::StoreFailure::FailOpen,
        Some(other) => {
            errors.push("limits.on_store_error", format!("{other:?} is not fail_closed or fail_open"));
            super::StoreFailure::FailClosed
        }
    };

    let mut models = BTreeMap::new();
    if raw.models.is_empty() {
        errors.push("models", "at least one model alias is required");
    }
    for (alias, model) in raw.models {
        let path = key_path("models", &alias);
        if let Some(model) = models::validate_model(&mut errors, &path, &alias, model, env) {
            models.insert(alias, model);
        }
    }
    if let Some(id) = &agent.default_model {
        models::check_model_id(&mut errors, "agent.default_model", id, &models, None);
    }

    let mut tenants = BTreeMap::new();
    if raw.tenants.is_empty() {
        errors.push("tenants", "at least one tenant is required");
    }
    for (i, tenant) in raw.tenants.into_iter().enumerate() {
        let path = format!("tenants[{i}]");
        if let Some(tenant) = tenants::validate_tenant(&mut errors, &path, tenant, &models, env) {
            if tenants.contains_key(&tenant.id) {
                errors.push(format!("{path}.id"), format!("duplicate tenant id {:?}", tenant.id));
            }
            tenants.insert(tenant.id.clone(), tenant);
        }
    }

    let mut tools: Vec<ToolConfig> = Vec::new();
    for (i, tool) in raw.tools.into_iter().enumerate() {
        let path = format!("tools[{i}]");
        if let Some(tool) = tools::validate_tool(&mut errors, &path, tool) {
            if tools.iter().any(|t| t.name == tool.name) {
                errors.push(format!("{path}.name"), format!("duplicate tool name {:?}", tool.name));
            }
            tools.push(tool);
        }
    }

    let mut mcp_servers: Vec<super::mcp::McpServerConfig> = Vec::new();
    for (i, server) in raw.mcp_servers.into_iter().enumerate() {
        let path = format!("mcp_servers[{i}]");
        let mut secret = |errors: &mut ConfigErrors, at: &str, var: Option<String>, file: Option<String>| {
            api_key(errors, at, var, file, env)
        };
        if let Some(server) = super::mcp::validate_server(&mut errors, &path, server, &mut secret) {
            if mcp_servers.iter().any(|s| s.name == server.name) {
                errors.push(format!("{path}.name"), format!("duplicate MCP server name {:?}", server.name));
            }
            mcp_servers.push(server);
        }
    }
    for tenant in tenants.values() {
        for name in &tenant.mcp_servers {
            if !mcp_servers.iter().any(|s| &s.name == name) {
                errors.push(
                    format!("tenants[{}].mcp_servers", tenant.id),
                    format!("no [[mcp_servers]] entry is named {name:?}"),
                );
            }
        }
    }

    let anonymous = raw.anonymous.and_then(|raw| validate_anonymous(&mut errors, raw, &tenants));
    let sandbox = super::sandbox::validate_sandbox(&mut errors, raw.sandbox);
    let skills = super::sandbox::validate_skills(&mut errors, raw.skills);
    let responses = super::ResponsesConfig {
        retention: secs(
            positive(&mut errors, "responses.retention_secs", raw.responses.retention_secs),
            super::DEFAULT_RESPONSE_RETENTION_SECS,
        ),
    };
    for (i, tool) in tools.iter().enumerate() {
        if ["bash", "read", "patch"].contains(&tool.name.as_str()) {
            errors.push(format!("tools[{i}].name"), format!("{:?} is the name of a default tool", tool.name));
        }
    }

    errors.into_result(Config {
        server,
        store,
        agent,
        rlm,
        on_store_error,
        tenants,
        models,
        tools,
        mcp_servers,
        anonymous,
        uses_builtin_dev_secret: false,
        sandbox,
        skills,
        responses,
    })
}

/// `store.wait_replicas`, or `SWITCHBOARD_WAIT_REPLICAS` over it (so a
/// deployment that names its store in the environment can turn it on too).
fn wait_replicas(errors: &mut ConfigErrors, file: Option<u32>, env: EnvLookup<'_>) -> u32 {
    match env("SWITCHBOARD_WAIT_REPLICAS") {
        Some(text) => text.trim().parse().unwrap_or_else(|_| {
            errors.push("store.wait_replicas", format!("SWITCHBOARD_WAIT_REPLICAS={text:?} is not a whole number"));
            0
        }),
        None => file.unwrap_or(0),
    }
}

/// Every Redis URL configured.
fn redis_urls<'a>(url: &'a Option<String>, cluster: &'a Option<Vec<String>>) -> Vec<&'a str> {
    url.iter().chain(cluster.iter().flatten()).map(String::as_str).collect()
}

/// `[store.tls]`: each file readable and PEM; a certificate with its key;
/// only for `rediss://` URLs (a plain connection would ignore them).
fn validate_redis_tls(errors: &mut ConfigErrors, raw: Option<RawRedisTls>, urls: Vec<&str>) -> RedisTls {
    let Some(raw) = raw else { return RedisTls::default() };
    if raw.cert_file.is_some() != raw.key_file.is_some() {
        errors.push("store.tls", "cert_file and key_file go together");
    }
    let mut read = |key: &str, file: Option<String>, marker: &str| -> Option<Vec<u8>> {
        let file = file?;
        match std::fs::read(&file) {
            Ok(pem) if pem.windows(marker.len()).any(|w| w == marker.as_bytes()) => Some(pem),
            Ok(_) => {
                errors.push(format!("store.tls.{key}"), format!("{file} holds no PEM {marker}"));
                None
            }
            Err(e) => {
                errors.push(format!("store.tls.{key}"), format!("cannot read {file}: {e}"));
                None
            }
        }
    };
    let ca = read("ca_file", raw.ca_file, "-----BEGIN CERTIFICATE-----");
    let cert = read("cert_file", raw.cert_file, "-----BEGIN CERTIFICATE-----");
    let key = read("key_file", raw.key_file, "PRIVATE KEY-----");
    let client = cert.zip(key);
    if urls.is_empty() || urls.iter().any(|url| !url.starts_with("rediss://")) {
        errors.push("store.tls", "needs rediss:// URLs in store.redis_url or store.redis_cluster");
    }
    RedisTls { ca, client }
}

/// `store.redis_url` or `store.redis_cluster` (never both): every URL one
/// the redis client accepts (`redis://`, `rediss://`, with credentials).
fn validate_redis_target(
    errors: &mut ConfigErrors,
    url: Option<String>,
    cluster: Option<Vec<String>>,
) -> Option<RedisTarget> {
    let readable = |url: &str| redis::Client::open(url).is_ok();
    match (url, cluster) {
        (Some(_), Some(_)) => {
            errors.push("store.redis_cluster", "give store.redis_url (one Redis) or store.redis_cluster, not both");
            None
        }
        (Some(url), None) => {
            if !readable(&url) {
                errors.push("store.redis_url", "not a redis:// or rediss:// URL");
            }
            Some(RedisTarget::Node(url))
        }
        (None, Some(seeds)) => {
            if seeds.is_empty() {
                errors.push("store.redis_cluster", "needs at least one node's redis:// or rediss:// URL");
            }
            for (i, seed) in seeds.iter().enumerate() {
                if !readable(seed) {
                    errors.push(format!("store.redis_cluster[{i}]"), "not a redis:// or rediss:// URL");
                }
            }
            Some(RedisTarget::Cluster(seeds))
        }
        (None, None) => None,
    }
}

/// `[anonymous]`: an existing tenant, a subject, and at least one known
/// dialect's routes.
fn validate_anonymous(
    errors: &mut ConfigErrors,
    raw: RawAnonymous,
    tenants: &BTreeMap<String, super::TenantConfig>,
) -> Option<Anonymous> {
    let tenant = raw.tenant.unwrap_or_default();
    if !tenants.contains_key(&tenant) {
        errors.push("anonymous.tenant", format!("no tenant {tenant:?} is configured"));
    }
    let subject = raw.subject.unwrap_or_default();
    if subject.trim().is_empty() {
        errors.push("anonymous.subject", "required: the subject credential-less requests act as");
    }
    let names = raw.routes.unwrap_or_default();
    if names.is_empty() {
        errors.push("anonymous.routes", "name at least one dialect's routes");
    }
    let mut routes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match Dialect::parse(name) {
            Some(dialect) if !routes.contains(&dialect) => routes.push(dialect),
            Some(_) => errors.push(format!("anonymous.routes[{i}]"), format!("{name:?} is listed twice")),
            None => {
                let known: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
                errors.push(format!("anonymous.routes[{i}]"), format!("{name:?} is not one of {}", known.join(", ")))
            }
        }
    }
    Some(Anonymous { tenant, subject, routes })
}

/// `prefix.key`, with the key quoted when it is not a bare TOML key
/// (`models."openai/*"`), so the path reads as the file is written.
fn key_path(prefix: &str, key: &str) -> String {
    let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if bare { format!("{prefix}.{key}") } else { format!("{prefix}.{key:?}") }
}

/// `server.max_*` and the read timeouts; each must be positive.
fn validate_input_limits(errors: &mut ConfigErrors, raw: &RawServer) -> InputLimits {
    let d = InputLimits::default();
    let mut size = |key: &str, value: Option<u64>, default: usize| {
        positive(errors, &format!("server.{key}"), value).map_or(default, |v| usize::try_from(v).unwrap_or(usize::MAX))
    };
    let max_body_bytes = size("max_body_bytes", raw.max_body_bytes, d.max_body_bytes);
    let max_json_string_bytes = size("max_json_string_bytes", raw.max_json_string_bytes, d.max_json_string_bytes);
    let max_header_bytes = size("max_header_bytes", raw.max_header_bytes, d.max_header_bytes);
    let max_header_count = size("max_header_count", raw.max_header_count.map(u64::from), d.max_header_count);
    InputLimits {
        max_body_bytes,
        max_json_depth: positive(errors, "server.max_json_depth", raw.max_json_depth).unwrap_or(d.max_json_depth),
        max_json_string_bytes,
        max_header_count,
        max_header_bytes,
        header_read_timeout: positive(errors, "server.header_read_timeout_secs", raw.header_read_timeout_secs)
            .map_or(d.header_read_timeout, Duration::from_secs),
        body_read_timeout: positive(errors, "server.body_read_timeout_secs", raw.body_read_timeout_secs)
            .map_or(d.body_read_timeout, Duration::from_secs),
    }
}

/// A provider key named by `api_key_env` or read from `api_key_file` (a
/// mounted secret: surrounding whitespace is dropped, an empty file refused).
fn api_key(
    errors: &mut ConfigErrors,
    path: &str,
    var: Option<String>,
    file: Option<String>,
    env: EnvLookup<'_>,
) -> Option<Secret> {
    match (var, file) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            errors.push(path, "set api_key_env or api_key_file, not both");
            None
        }
        (Some(var), None) => env_secret(errors, &format!("{path}.api_key_env"), &var, env),
        (None, Some(file)) => {
            let at = format!("{path}.api_key_file");
            match std::fs::read_to_string(&file) {
                Ok(text) if !text.trim().is_empty() => Some(Secret::new(text.trim())),
                Ok(_) => {
                    errors.push(at, format!("{file} is empty"));
                    None
                }
                Err(e) => {
                    errors.push(at, format!("cannot read {file}: {e}"));
                    None
                }
            }
        }
    }
}

fn env_secret(errors: &mut ConfigErrors, path: &str, var: &str, env: EnvLookup<'_>) -> Option<Secret> {
    match env(var) {
        Some(value) => Some(Secret::new(value)),
        None => {
            errors.push(path, format!("environment variable {var} is not set"));
            None
        }
    }
}

/// Ids that end up inside store keys and metric labels: short, plain ASCII.
fn check_identifier(errors: &mut ConfigErrors, path: &str, value: &str) {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        errors.push(path, format!("{value:?} must be 1-64 characters of A-Z a-z 0-9 - _ ."));
    }
}

fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "switchboard".to_string());
    let host: String = host.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(48).collect();
    format!("{host}-{}", std::process::id())
}
