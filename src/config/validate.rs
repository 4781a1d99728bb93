//! Turns a [`RawConfig`] into a [`Config`]: applies defaults, resolves secrets
//! from the environment, and checks every field, collecting all mistakes with
//! their paths instead of stopping at the first.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use super::{
    AgentConfig, Config, ConfigErrors, EnvLookup, InputLimits, JwtConfig, ModelConfig, Permission, ProviderKind,
    RateLimitConfig, Secret, ServerConfig, StoreConfig, TenantConfig, ToolConfig, ToolTarget,
    raw::{RawConfig, RawJwt, RawModel, RawServer, RawTenant, RawTool},
};

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_CONTEXT_WINDOW: u32 = 128_000;
const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;
/// HS256 keys shorter than this are refused: they can be brute-forced offline.
const MIN_HS256_SECRET_LEN: usize = 16;

/// Lays `SWITCHBOARD_LISTEN`, `SWITCHBOARD_REDIS_URL` and
/// `SWITCHBOARD_REPLICA_ID` over the file's values.
pub fn apply_env_overrides(raw: &mut RawConfig, env: EnvLookup<'_>) {
    if let Some(listen) = env("SWITCHBOARD_LISTEN") {
        raw.server.listen = Some(listen);
    }
    if let Some(url) = env("SWITCHBOARD_REDIS_URL") {
        raw.store.redis_url = Some(url);
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
    };

    if let Some(url) = &raw.store.redis_url
        && redis::Client::open(url.as_str()).is_err()
    {
        errors.push("store.redis_url", "not a redis:// or rediss:// URL");
    }
    let store = StoreConfig {
        redis_url: raw.store.redis_url,
        key_prefix: raw.store.key_prefix.unwrap_or_else(|| "sb:".to_string()),
        session_ttl: secs(positive(&mut errors, "store.session_ttl_secs", raw.store.session_ttl_secs), 86_400),
        event_log_max_len: positive(&mut errors, "store.event_log_max_len", raw.store.event_log_max_len)
            .unwrap_or(10_000),
        lease_ttl: secs(positive(&mut errors, "store.lease_ttl_secs", raw.store.lease_ttl_secs), 10),
    };

    let agent = AgentConfig {
        max_iterations: positive(&mut errors, "agent.max_iterations", raw.agent.max_iterations).unwrap_or(20),
        max_depth: raw.agent.max_depth.unwrap_or(2),
        relay_timeout: secs(positive(&mut errors, "agent.relay_timeout_secs", raw.agent.relay_timeout_secs), 300),
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
        let path = format!("models.{alias}");
        check_identifier(&mut errors, &path, &alias);
        if let Some(model) = validate_model(&mut errors, &path, &alias, model, env) {
            models.insert(alias, model);
        }
    }

    let mut tenants = BTreeMap::new();
    if raw.tenants.is_empty() {
        errors.push("tenants", "at least one tenant is required");
    }
    for (i, tenant) in raw.tenants.into_iter().enumerate() {
        let path = format!("tenants[{i}]");
        if let Some(tenant) = validate_tenant(&mut errors, &path, tenant, &models, env) {
            if tenants.contains_key(&tenant.id) {
                errors.push(format!("{path}.id"), format!("duplicate tenant id {:?}", tenant.id));
            }
            tenants.insert(tenant.id.clone(), tenant);
        }
    }

    let mut tools: Vec<ToolConfig> = Vec::new();
    for (i, tool) in raw.tools.into_iter().enumerate() {
        let path = format!("tools[{i}]");
        if let Some(tool) = validate_tool(&mut errors, &path, tool) {
            if tools.iter().any(|t| t.name == tool.name) {
                errors.push(format!("{path}.name"), format!("duplicate tool name {:?}", tool.name));
            }
            tools.push(tool);
        }
    }

    errors.into_result(Config {
        server,
        store,
        agent,
        on_store_error,
        tenants,
        models,
        tools,
        uses_builtin_dev_secret: false,
    })
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

fn validate_model(
    errors: &mut ConfigErrors,
    path: &str,
    alias: &str,
    raw: RawModel,
    env: EnvLookup<'_>,
) -> Option<ModelConfig> {
    let provider = match raw.provider.as_deref() {
        Some("openai") | Some("openai-compatible") => ProviderKind::OpenAiCompatible,
        Some("anthropic") => ProviderKind::Anthropic,
        Some("demo") => ProviderKind::Demo,
        Some(other) => {
            errors.push(
                format!("{path}.provider"),
                format!("unknown provider {other:?}; expected openai-compatible, anthropic or demo"),
            );
            return None;
        }
        None => {
            errors.push(format!("{path}.provider"), "required");
            return None;
        }
    };
    let base_url = match (provider, raw.base_url) {
        (_, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errors.push(format!("{path}.base_url"), "must be an http:// or https:// URL");
            }
            url.trim_end_matches('/').to_string()
        }
        (ProviderKind::OpenAiCompatible, None) => "https://api.openai.com/v1".to_string(),
        (ProviderKind::Anthropic, None) => "https://api.anthropic.com/v1".to_string(),
        (ProviderKind::Demo, None) => String::new(),
    };
    let model = match (provider, raw.model) {
        (_, Some(m)) => m,
        (ProviderKind::Demo, None) => "demo".to_string(),
        (_, None) => {
            errors.push(format!("{path}.model"), "required for this provider");
            String::new()
        }
    };
    let api_key = api_key(errors, path, raw.api_key_env, raw.api_key_file, env);
    if api_key.is_some() && provider == ProviderKind::Demo {
        errors.push(path, "the demo provider takes no API key");
    }
    let context_window = raw.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
    let max_output_tokens = raw.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    if max_output_tokens >= context_window {
        errors.push(format!("{path}.max_output_tokens"), "must be smaller than context_window");
    }
    Some(ModelConfig {
        alias: alias.to_string(),
        provider,
        base_url,
        model,
        api_key,
        context_window,
        max_output_tokens,
        resilience: {
            let d = super::Resilience::default();
            super::Resilience {
                connect_timeout: raw.connect_timeout_secs.map_or(d.connect_timeout, Duration::from_secs),
                first_byte_timeout: raw.first_byte_timeout_secs.map_or(d.first_byte_timeout, Duration::from_secs),
                idle_timeout: raw.idle_timeout_secs.map_or(d.idle_timeout, Duration::from_secs),
                max_retries: raw.max_retries.unwrap_or(d.max_retries),
                retry_base: raw.retry_base_ms.map_or(d.retry_base, Duration::from_millis),
            }
        },
        continue_partial: raw.continue_partial.unwrap_or(false),
    })
}

fn validate_tenant(
    errors: &mut ConfigErrors,
    path: &str,
    raw: RawTenant,
    models: &BTreeMap<String, ModelConfig>,
    env: EnvLookup<'_>,
) -> Option<TenantConfig> {
    let id = raw.id.unwrap_or_default();
    check_identifier(errors, &format!("{path}.id"), &id);
    let jwt = match raw.jwt {
        Some(jwt) => validate_jwt(errors, &format!("{path}.jwt"), jwt, env),
        None => {
            errors.push(format!("{path}.jwt"), "required: hs256_secret, hs256_secret_env, keys or jwks_url");
            None
        }
    };
    let rate_limit = raw.rate_limit.map(|rl| {
        let at = |field: &str| format!("{path}.rate_limit.{field}");
        let rps = positive(errors, &at("requests_per_second"), rl.requests_per_second);
        let burst = positive(errors, &at("burst"), rl.burst);
        let subject_rps = positive(errors, &at("subject_requests_per_second"), rl.subject_requests_per_second);
        let subject_burst = positive(errors, &at("subject_burst"), rl.subject_burst);
        if let (Some(subject), Some(tenant)) = (subject_rps, rps)
            && subject > tenant
        {
            errors.push(at("subject_requests_per_second"), "must not exceed requests_per_second");
        }
        RateLimitConfig {
            requests_per_second: rps,
            burst: burst.or(rps).unwrap_or(1),
            subject_requests_per_second: subject_rps,
            subject_burst: subject_burst.or(subject_rps).unwrap_or(1),
            max_concurrent_sessions: positive(errors, &at("max_concurrent_sessions"), rl.max_concurrent_sessions),
            tokens_per_minute: positive(errors, &at("tokens_per_minute"), rl.tokens_per_minute),
        }
    });
    if let Some(list) = &raw.models {
        for (j, alias) in list.iter().enumerate() {
            if !models.contains_key(alias) {
                errors.push(format!("{path}.models[{j}]"), format!("no model alias {alias:?} is configured"));
            }
        }
    }
    let mut credentials = BTreeMap::new();
    for (alias, credential) in raw.credentials {
        let at = format!("{path}.credentials.{alias}");
        match models.get(&alias) {
            None => errors.push(&at, format!("no model alias {alias:?} is configured")),
            Some(_) if raw.models.as_ref().is_some_and(|list| !list.contains(&alias)) => {
                errors.push(&at, format!("{alias:?} is not in this tenant's models"));
            }
            Some(model) if model.provider == ProviderKind::Demo => {
                errors.push(&at, "the demo provider takes no API key");
            }
            Some(_) if credential.api_key_env.is_none() && credential.api_key_file.is_none() => {
                errors.push(&at, "set api_key_env or api_key_file");
            }
            Some(_) => {
                if let Some(key) = api_key(errors, &at, credential.api_key_env, credential.api_key_file, env) {
                    credentials.insert(alias, key);
                }
            }
        }
    }
    Some(TenantConfig { id, jwt: jwt?, rate_limit, models: raw.models, credentials })
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

fn validate_jwt(errors: &mut ConfigErrors, path: &str, raw: RawJwt, env: EnvLookup<'_>) -> Option<JwtConfig> {
    use super::{JwksConfig, JwtKey, JwtKeyMaterial};
    let before = errors.0.len();
    let configured =
        raw.hs256_secret.is_some() || raw.hs256_secret_env.is_some() || !raw.keys.is_empty() || raw.jwks_url.is_some();
    let mut keys: Vec<JwtKey> = Vec::new();
    let shorthand = match (raw.hs256_secret, raw.hs256_secret_env) {
        (Some(s), None) => Some(Secret::new(s)),
        (None, Some(var)) => env_secret(errors, &format!("{path}.hs256_secret_env"), &var, env),
        (Some(_), Some(_)) => {
            errors.push(path, "set hs256_secret or hs256_secret_env, not both");
            None
        }
        (None, None) => None,
    };
    if let Some(secret) = shorthand {
        if secret.expose().len() < MIN_HS256_SECRET_LEN {
            errors.push(path, format!("the HS256 secret must be at least {MIN_HS256_SECRET_LEN} bytes"));
        }
        let material = JwtKeyMaterial::Secret(secret);
        keys.push(JwtKey { kid: None, algorithm: jsonwebtoken::Algorithm::HS256, material });
    }
    let mut kids: Vec<String> = Vec::new();
    for (i, raw_key) in raw.keys.into_iter().enumerate() {
        let at = format!("{path}.keys[{i}]");
        if let Some(kid) = &raw_key.kid {
            if kids.contains(kid) {
                errors.push(format!("{at}.kid"), format!("duplicate kid {kid:?}"));
            }
            kids.push(kid.clone());
        }
        keys.extend(validate_jwt_key(errors, &at, raw_key, env));
    }
    let refresh_path = format!("{path}.jwks_refresh_secs");
    let jwks = match raw.jwks_url {
        Some(url) => {
            let ok = reqwest::Url::parse(&url)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty()));
            if !ok {
                errors.push(format!("{path}.jwks_url"), "must be an http:// or https:// URL");
            }
            let refresh = secs(positive(errors, &refresh_path, raw.jwks_refresh_secs), 300);
            Some(JwksConfig { url, refresh })
        }
        None => {
            if raw.jwks_refresh_secs.is_some() {
                errors.push(refresh_path, "only used with jwks_url");
            }
            None
        }
    };
    if !configured {
        errors.push(path, "a key is required: hs256_secret, hs256_secret_env, keys or jwks_url");
    }
    (errors.0.len() == before).then(|| JwtConfig {
        keys,
        issuer: raw.issuer,
        audience: raw.audience,
        leeway_secs: raw.leeway_secs.unwrap_or(30),
        jwks,
    })
}

/// Algorithms a configured key may name (`none` is not one of them).
const JWT_ALGORITHMS: &str = "HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA";

/// One entry of `jwt.keys`: an HMAC algorithm takes a secret, any other a
/// public key in PEM, which is read and parsed here so a bad key fails at
/// start-up.
fn validate_jwt_key(
    errors: &mut ConfigErrors,
    path: &str,
    raw: super::raw::RawJwtKey,
    env: EnvLookup<'_>,
) -> Option<super::JwtKey> {
    use jsonwebtoken::{Algorithm, AlgorithmFamily};

    use super::{JwtKey, JwtKeyMaterial};
    if raw.kid.as_deref().is_some_and(str::is_empty) {
        errors.push(format!("{path}.kid"), "must not be empty");
    }
    let algorithm = match raw.alg.as_deref() {
        None => {
            errors.push(format!("{path}.alg"), format!("required: one of {JWT_ALGORITHMS}"));
            return None;
        }
        Some(name) => match name.parse::<Algorithm>() {
            Ok(algorithm) => algorithm,
            Err(_) => {
                errors.push(format!("{path}.alg"), format!("{name:?} is not one of {JWT_ALGORITHMS}"));
                return None;
            }
        },
    };
    let has_public_key = raw.public_key_file.is_some() || raw.public_key_env.is_some();
    let material = if algorithm.family() == AlgorithmFamily::Hmac {
        if has_public_key {
            errors
                .push(path, format!("{algorithm:?} is an HMAC algorithm: set secret or secret_env, not a public key"));
            return None;
        }
        let (secret, at) = match (raw.secret, raw.secret_env) {
            (Some(s), None) => (Secret::new(s), format!("{path}.secret")),
            (None, Some(var)) => {
                let at = format!("{path}.secret_env");
                (env_secret(errors, &at, &var, env)?, at)
            }
            (Some(_), Some(_)) => {
                errors.push(path, "set secret or secret_env, not both");
                return None;
            }
            (None, None) => {
                errors.push(path, format!("{algorithm:?} needs secret or secret_env"));
                return None;
            }
        };
        if secret.expose().len() < MIN_HS256_SECRET_LEN {
            errors.push(at, format!("the secret must be at least {MIN_HS256_SECRET_LEN} bytes"));
        }
        JwtKeyMaterial::Secret(secret)
    } else {
        if raw.secret.is_some() || raw.secret_env.is_some() {
            errors.push(
                path,
                format!("{algorithm:?} is a public-key algorithm: set public_key_file or public_key_env, not a secret"),
            );
            return None;
        }
        let (pem, at) = match (raw.public_key_file, raw.public_key_env) {
            (Some(file), None) => {
                let at = format!("{path}.public_key_file");
                match std::fs::read(&file) {
                    Ok(bytes) => (bytes, at),
                    Err(e) => {
                        errors.push(at, format!("cannot read {file}: {e}"));
                        return None;
                    }
                }
            }
            (None, Some(var)) => {
                let at = format!("{path}.public_key_env");
                (env_secret(errors, &at, &var, env)?.expose().as_bytes().to_vec(), at)
            }
            (Some(_), Some(_)) => {
                errors.push(path, "set public_key_file or public_key_env, not both");
                return None;
            }
            (None, None) => {
                errors.push(path, format!("{algorithm:?} needs public_key_file or public_key_env"));
                return None;
            }
        };
        match public_key_from_pem(algorithm, &pem) {
            Ok(key) => JwtKeyMaterial::PublicKey(key),
            Err(message) => {
                errors.push(at, message);
                return None;
            }
        }
    };
    Some(JwtKey { kid: raw.kid, algorithm, material })
}

/// Parses a public key in PEM (`BEGIN PUBLIC KEY`, or `BEGIN RSA PUBLIC KEY`
/// for RSA) for `algorithm`, and checks it is of that algorithm's kind and
/// size. The message never quotes the key.
fn public_key_from_pem(algorithm: jsonwebtoken::Algorithm, pem: &[u8]) -> Result<jsonwebtoken::DecodingKey, String> {
    use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
    let text = String::from_utf8_lossy(pem);
    if text.contains("PRIVATE KEY-----") {
        return Err("is a private key: configure the public key only".to_string());
    }
    let (kind, parsed, expected_len) = match algorithm.family() {
        AlgorithmFamily::Rsa => ("an RSA", DecodingKey::from_rsa_pem(pem), None),
        AlgorithmFamily::Ec if algorithm == Algorithm::ES256 => ("a P-256 EC", DecodingKey::from_ec_pem(pem), Some(65)),
        AlgorithmFamily::Ec => ("a P-384 EC", DecodingKey::from_ec_pem(pem), Some(97)),
        AlgorithmFamily::Ed => ("an Ed25519", DecodingKey::from_ed_pem(pem), Some(32)),
        AlgorithmFamily::Hmac => return Err("an HMAC algorithm takes a secret, not a PEM key".to_string()),
    };
    let public_pem = text.contains("-----BEGIN PUBLIC KEY-----")
        || (algorithm.family() == AlgorithmFamily::Rsa && text.contains("-----BEGIN RSA PUBLIC KEY-----"));
    let bad = || format!("not {kind} public key in PEM (-----BEGIN PUBLIC KEY-----) as {algorithm:?} needs");
    let key = parsed.ok().filter(|_| public_pem).ok_or_else(bad)?;
    if let Some(len) = expected_len
        && key.try_get_as_bytes().map_or(true, |bytes| bytes.len() != len)
    {
        return Err(bad());
    }
    Ok(key)
}

fn validate_tool(errors: &mut ConfigErrors, path: &str, raw: RawTool) -> Option<ToolConfig> {
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
        None | Some("ask") => Some(Permission::Ask),
        Some("allow") => Some(Permission::Allow),
        Some("deny") => Some(Permission::Deny),
        Some(other) => {
            errors.push(format!("{path}.permission"), format!("{other:?} is not one of allow, ask, deny"));
            None
        }
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

fn positive<T: Copy + Default + PartialOrd>(errors: &mut ConfigErrors, path: &str, value: Option<T>) -> Option<T> {
    match value {
        Some(v) if v <= T::default() => {
            errors.push(path, "must be a positive integer");
            None
        }
        other => other,
    }
}

fn secs(value: Option<u64>, default: u64) -> Duration {
    Duration::from_secs(value.unwrap_or(default))
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
