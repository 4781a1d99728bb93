//! `[server.cors]` and `tenants[i].cors_origins`: every entry an origin
//! (`scheme://host[:port]`, or `scheme://host:*`), `*` only alone in the
//! server's list and never with credentials.

use crate::config::{
    ConfigErrors,
    cors::{CorsConfig, DEFAULT_MAX_AGE, OriginPattern, RawCors},
};

/// Browsers cap the preflight cache anyway (Chromium at 2 h); a longer
/// value is a mistake worth saying.
const MAX_AGE_LIMIT_SECS: u64 = 86_400;

pub(super) fn validate_cors(errors: &mut ConfigErrors, raw: RawCors) -> CorsConfig {
    let allowed_origins = origins(errors, "server.cors.allowed_origins", raw.allowed_origins.unwrap_or_default());
    let any = allowed_origins.contains(&OriginPattern::Any);
    if any && allowed_origins.len() > 1 {
        errors.push("server.cors.allowed_origins", "\"*\" allows every origin: list it alone, or list origins");
    }
    let allow_credentials = raw.allow_credentials.unwrap_or(false);
    if any && allow_credentials {
        errors.push(
            "server.cors.allow_credentials",
            "cannot be true with allowed_origins = [\"*\"]: browsers refuse credentials from a wildcard origin; \
             list the origins instead",
        );
    }
    let max_age = match raw.max_age_secs {
        Some(secs) if secs > MAX_AGE_LIMIT_SECS => {
            errors.push("server.cors.max_age_secs", format!("at most {MAX_AGE_LIMIT_SECS} (browsers cap it lower)"));
            DEFAULT_MAX_AGE
        }
        Some(secs) => std::time::Duration::from_secs(secs),
        None => DEFAULT_MAX_AGE,
    };
    CorsConfig { allowed_origins, allow_credentials, max_age }
}

/// A tenant's `cors_origins`: origins only (a tenant cannot open itself to
/// every origin; `server.cors.allowed_origins = ["*"]` does that for all).
pub(super) fn validate_tenant_origins(errors: &mut ConfigErrors, path: &str, raw: Vec<String>) -> Vec<OriginPattern> {
    let path = format!("{path}.cors_origins");
    let list = origins(errors, &path, raw);
    if list.contains(&OriginPattern::Any) {
        errors.push(&path, "\"*\" is only for server.cors.allowed_origins; list this tenant's origins");
    }
    list.into_iter().filter(|o| *o != OriginPattern::Any).collect()
}

fn origins(errors: &mut ConfigErrors, path: &str, raw: Vec<String>) -> Vec<OriginPattern> {
    let mut list = Vec::new();
    for (i, text) in raw.iter().enumerate() {
        match OriginPattern::parse(text) {
            Ok(origin) if !list.contains(&origin) => list.push(origin),
            Ok(_) => {}
            Err(message) => errors.push(format!("{path}[{i}]"), message),
        }
    }
    list
}
