//! `[[tenants]]`: id, credentials (JWT keys, API keys), limits, the models
//! a tenant may use and its own provider keys.

use std::collections::BTreeMap;

use super::{
    api_key, check_identifier, cors::validate_tenant_origins, jwt::validate_jwt, models::check_model_id, positive,
};
use crate::config::{
    ApiKeys, ConfigErrors, EnvLookup, JwtConfig, ModelConfig, ProviderKind, RateLimitConfig, TenantConfig,
    access::read_keys_file, raw::RawTenant,
};

pub(super) fn validate_tenant(
    errors: &mut ConfigErrors,
    path: &str,
    raw: RawTenant,
    models: &BTreeMap<String, ModelConfig>,
    env: EnvLookup<'_>,
) -> Option<TenantConfig> {
    let id = raw.id.unwrap_or_default();
    check_identifier(errors, &format!("{path}.id"), &id);
    let api_keys = validate_api_keys(errors, path, raw.api_keys, raw.api_keys_file);
    let jwt = match raw.jwt {
        Some(jwt) => validate_jwt(errors, &format!("{path}.jwt"), jwt, env),
        // A tenant whose clients send API keys only needs no token keys.
        None if !api_keys.is_empty() => Some(JwtConfig::default()),
        None => {
            errors.push(
                format!("{path}.jwt"),
                "required (hs256_secret, hs256_secret_env, keys or jwks_url) unless the tenant has api_keys",
            );
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
                errors
                    .push(format!("{path}.models[{j}]"), format!("no model alias or pattern {alias:?} is configured"));
            }
        }
    }
    if let Some(id) = &raw.default_model {
        check_model_id(errors, &format!("{path}.default_model"), id, models, raw.models.as_deref());
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
    let tools = crate::config::sandbox::validate_default_tools(
        errors,
        path,
        raw.default_tools,
        raw.tool_permissions,
        raw.sandbox_network,
    );
    let cors_origins = validate_tenant_origins(errors, path, raw.cors_origins.unwrap_or_default());
    Some(TenantConfig {
        tools,
        id,
        cors_origins,
        jwt: jwt?,
        api_keys,
        default_model: raw.default_model,
        rate_limit,
        models: raw.models,
        credentials,
        mcp_servers: raw.mcp_servers,
    })
}

/// `api_keys` entries and the `api_keys_file`, read now so a bad file
/// fails at start-up (later changes are re-read by `auth`).
fn validate_api_keys(
    errors: &mut ConfigErrors,
    path: &str,
    raw: Vec<crate::config::access::RawApiKey>,
    file: Option<String>,
) -> ApiKeys {
    let mut keys = Vec::new();
    for (i, entry) in raw.into_iter().enumerate() {
        match entry.check() {
            Ok(key) => keys.push(key),
            Err((field, message)) => errors.push(format!("{path}.api_keys[{i}].{field}"), message),
        }
    }
    let file = file.and_then(|file| match read_keys_file(file.as_ref()) {
        Ok(entries) => Some((file.into(), entries)),
        Err(message) => {
            errors.push(format!("{path}.api_keys_file"), message);
            None
        }
    });
    ApiKeys { keys, file }
}
