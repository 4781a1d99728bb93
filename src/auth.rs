//! Authentication: bearer JWT → [`Principal`], deny by default.
//!
//! [`require_auth`] wraps the whole router; only [`PUBLIC_PATHS`] pass without
//! a token, so a new route is protected unless it is added to that list.
//!
//! A token names its tenant in the `tenant` claim; it is then verified with
//! *that tenant's* key, and the algorithm comes from the configured key, never
//! from the token header (so `alg: none` and algorithm confusion fail). A
//! token of tenant B that claims to be tenant A fails A's signature check.
//! Tokens are never logged.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    extract::{FromRequestParts, Request, State},
    http::{header, request::Parts},
    middleware::Next,
    response::Response,
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};

use crate::{
    config::{Config, TenantConfig},
    error::ApiError,
};

/// Routes reachable without a token: probes and the metrics scrape.
pub const PUBLIC_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// Who is calling, from a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: Arc<str>,
    pub subject: String,
    pub scopes: Vec<String>,
}

impl Principal {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// The claims Switchboard reads and writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub tenant: String,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Space-separated scopes, as in OAuth 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Just enough of an unverified token to pick the tenant's key.
#[derive(Deserialize)]
struct TenantHint {
    tenant: Option<String>,
}

struct TenantKey {
    key: DecodingKey,
    validation: Validation,
}

/// Verifies tokens against the configured tenants' keys.
pub struct Authenticator {
    tenants: HashMap<String, TenantKey>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing bearer token")]
    Missing,
    #[error("malformed token")]
    Malformed,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token is not valid for this gateway")]
    Invalid,
}

impl Authenticator {
    pub fn from_config(config: &Config) -> Self {
        let tenants = config
            .tenants
            .values()
            .map(|tenant| {
                let jwt = &tenant.jwt;
                let mut validation = Validation::new(Algorithm::HS256);
                validation.set_required_spec_claims(&["exp", "sub"]);
                validation.leeway = jwt.leeway_secs;
                validation.validate_nbf = true;
                if let Some(iss) = &jwt.issuer {
                    validation.set_issuer(&[iss]);
                }
                match &jwt.audience {
                    Some(aud) => validation.set_audience(&[aud]),
                    None => validation.validate_aud = false,
                }
                let key = DecodingKey::from_secret(jwt.hs256_secret.expose().as_bytes());
                (tenant.id.clone(), TenantKey { key, validation })
            })
            .collect();
        Self { tenants }
    }

    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        // The header must parse (this is where `alg: none` is refused).
        jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        let hint: TenantHint =
            jsonwebtoken::dangerous::insecure_decode_claims(token).map_err(|_| AuthError::Malformed)?;
        let tenant = hint.tenant.ok_or(AuthError::Invalid)?;
        let entry = self.tenants.get(&tenant).ok_or(AuthError::Invalid)?;
        let data =
            jsonwebtoken::decode::<Claims>(token, &entry.key, &entry.validation).map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => AuthError::Expired,
                ErrorKind::ImmatureSignature => AuthError::NotYetValid,
                _ => AuthError::Invalid,
            })?;
        let claims = data.claims;
        Ok(Principal {
            tenant: Arc::from(claims.tenant.as_str()),
            subject: claims.sub,
            scopes: claims.scope.map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default(),
        })
    }
}

/// Mints an HS256 token the tenant's configuration accepts.
pub fn mint_token(
    tenant: &TenantConfig,
    subject: &str,
    ttl: Duration,
    scopes: &[String],
) -> Result<String, jsonwebtoken::errors::Error> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let claims = Claims {
        sub: subject.to_string(),
        tenant: tenant.id.clone(),
        exp: now + ttl.as_secs(),
        iat: Some(now),
        scope: (!scopes.is_empty()).then(|| scopes.join(" ")),
    };
    #[derive(Serialize)]
    struct WithStd<'a> {
        #[serde(flatten)]
        claims: &'a Claims,
        #[serde(skip_serializing_if = "Option::is_none")]
        iss: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        aud: Option<&'a str>,
    }
    let body = WithStd { claims: &claims, iss: tenant.jwt.issuer.as_deref(), aud: tenant.jwt.audience.as_deref() };
    let key = EncodingKey::from_secret(tenant.jwt.hs256_secret.expose().as_bytes());
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &body, &key)
}

/// Middleware: verifies the bearer token of every non-public request and
/// puts the [`Principal`] in the request's extensions.
pub async fn require_auth(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if PUBLIC_PATHS.contains(&request.uri().path()) {
        return Ok(next.run(request).await);
    }
    let token = bearer(&request).ok_or(AuthError::Missing);
    let principal = token.and_then(|t| auth.verify(t)).map_err(|e| ApiError::unauthorized(e.to_string()))?;
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized(AuthError::Missing.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let text = r#"
[[tenants]]
id = "a"
jwt = { hs256_secret = "tenant-a-secret-0123456789" }
[[tenants]]
id = "b"
jwt = { hs256_secret = "tenant-b-secret-0123456789" }
[models.demo]
provider = "demo"
"#;
        Config::from_toml(text, &|_| None).unwrap()
    }

    #[test]
    fn a_minted_token_verifies_and_names_its_principal() {
        let config = config();
        let auth = Authenticator::from_config(&config);
        let token =
            mint_token(&config.tenants["a"], "alice", Duration::from_secs(60), &["sessions:admin".into()]).unwrap();
        let principal = auth.verify(&token).unwrap();
        assert_eq!(&*principal.tenant, "a");
        assert_eq!(principal.subject, "alice");
        assert!(principal.has_scope("sessions:admin"));
    }

    #[test]
    fn a_token_signed_by_another_tenant_claiming_this_one_is_refused() {
        let config = config();
        let auth = Authenticator::from_config(&config);
        let mut forged = config.tenants["b"].clone();
        forged.id = "a".into(); // tenant b's key, tenant a's claim
        let token = mint_token(&forged, "mallory", Duration::from_secs(60), &[]).unwrap();
        assert_eq!(auth.verify(&token), Err(AuthError::Invalid));
    }

    #[test]
    fn an_unsigned_token_is_malformed() {
        let auth = Authenticator::from_config(&config());
        // {"alg":"none","typ":"JWT"} . {"sub":"x","tenant":"a","exp":9999999999} .
        let token = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ4IiwidGVuYW50IjoiYSIsImV4cCI6OTk5OTk5OTk5OX0.";
        assert_eq!(auth.verify(token), Err(AuthError::Malformed));
    }
}
