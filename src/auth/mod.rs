//! Authentication: a bearer JWT or an API key → [`Principal`], deny by
//! default.
//!
//! [`require_auth`] wraps the whole router; only [`PUBLIC_PATHS`] (and the
//! console's pages under [`CONSOLE_PATH`], when `server.console` is on: the
//! page asks for a credential and sends it with every API call) pass
//! without a credential, so a new route is protected unless it is added to
//! that list — or unless the deployment opts in to anonymous requests on a
//! dialect's routes (`[anonymous]`, [`Dialect::of_path`]): a request that sends
//! *no* credential there acts as the configured tenant and subject; one that
//! sends a bad credential is still refused.
//!
//! A browser's request is also checked against CORS's per-tenant origins
//! (`crate::cors`): a credential of tenant A sent from an origin only
//! tenant B lists is refused with 403.
//!
//! Credentials: `X-API-Key: <key>`, or `Authorization: Bearer <credential>`
//! where a credential shaped like a JWT (three base64url segments, the
//! first a JSON header) is verified as a token and anything else as an API
//! key (`api_keys.rs`).
//!
//! A token names its tenant in the `tenant` claim; it is then verified with
//! *that tenant's* keys only (a token of tenant B that claims to be tenant A
//! fails A's signature check). The candidate keys are the tenant's keys with
//! the header's `kid` (all of them when the token has none), and of those only
//! the keys whose configured algorithm equals the header's `alg`: the
//! algorithm belongs to the key, the header merely has to agree with it, so
//! `alg: none` and algorithm confusion (an HMAC over a public key) fail.
//!
//! Keys come from the configuration (HMAC secrets, RSA/EC/Ed25519 public keys
//! in PEM) and from a JWKS URL (`jwks.rs`), which is refreshed in the
//! background and when a token names an unknown `kid`. Tokens and key
//! material are never logged.

mod api_keys;
mod jwks;
mod keys;
#[cfg(test)]
mod tests;
mod verified;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::Response,
};
use jsonwebtoken::{EncodingKey, Header};
use serde::{Deserialize, Serialize};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use self::api_keys::{ApiKeyRing, RELOAD_INTERVAL};
use self::{
    jwks::JwksSource,
    keys::{ClaimRules, VerifyKey},
    verified::Verified,
};
use crate::{
    config::{Anonymous, Config, Dialect, TenantConfig},
    cors::CorsPolicy,
    error::{ApiError, ErrorCode},
    principal::Principal,
};

/// Routes reachable without a token: probes and the metrics scrape.
pub const PUBLIC_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The session console's page and assets (public when `server.console` is
/// on; the page itself asks for a credential).
pub const CONSOLE_PATH: &str = "/console";

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

/// Just enough of an unverified token to pick the tenant's keys.
#[derive(Deserialize)]
struct TenantHint {
    tenant: Option<String>,
}

/// One tenant's keys: the configured ones and, with a JWKS URL, the fetched ones.
struct TenantKeys {
    keys: Vec<VerifyKey>,
    jwks: Option<Arc<JwksSource>>,
}

impl TenantKeys {
    fn new(tenant: &TenantConfig, http: Option<&reqwest::Client>) -> Self {
        let rules = ClaimRules::from_config(&tenant.jwt);
        let keys = tenant.jwt.keys.iter().filter_map(|key| VerifyKey::from_config(key, &rules)).collect();
        let jwks = tenant
            .jwt
            .jwks
            .as_ref()
            .zip(http)
            .map(|(jwks, http)| Arc::new(JwksSource::new(&tenant.id, jwks, rules.clone(), http.clone())));
        Self { keys, jwks }
    }
}

/// Verifies tokens against the configured tenants' keys, and API keys.
pub struct Authenticator {
    tenants: HashMap<String, TenantKeys>,
    api_keys: Arc<ApiKeyRing>,
    anonymous: Option<Anonymous>,
    refreshing: AtomicBool,
    /// The console's pages are public.
    console: bool,
    /// Per-tenant browser origins, when CORS is on.
    cors: Option<Arc<CorsPolicy>>,
    /// Tokens verified before, until their `exp`.
    verified: Verified,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing credentials: send Authorization: Bearer <token or API key>, or X-API-Key: <key>")]
    Missing,
    #[error("unknown API key")]
    UnknownApiKey,
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
        let needs_http = config.tenants.values().any(|t| t.jwt.jwks.is_some());
        let http = needs_http.then(jwks_client);
        let tenants = config.tenants.values().map(|t| (t.id.clone(), TenantKeys::new(t, http.as_ref()))).collect();
        Self {
            tenants,
            api_keys: Arc::new(ApiKeyRing::from_config(config)),
            anonymous: config.anonymous.clone(),
            refreshing: AtomicBool::new(false),
            console: config.server.console,
            cors: None,
            verified: Verified::new(verified::CAPACITY),
        }
    }

    /// Refuses credentials sent from origins their tenant does not allow
    /// (see [`CorsPolicy::refuses`]).
    pub fn with_cors(mut self, cors: Option<Arc<CorsPolicy>>) -> Self {
        self.cors = cors;
        self
    }

    /// Whether `path` needs no credential: the probes, the metrics scrape,
    /// and the console's pages when it is on.
    pub fn is_public(&self, path: &str) -> bool {
        PUBLIC_PATHS.contains(&path)
            || (self.console && path.strip_prefix(CONSOLE_PATH).is_some_and(|r| r.is_empty() || r.starts_with('/')))
    }

    /// Starts one background task per tenant with a JWKS URL: it fetches the
    /// keys at once and then every `jwks_refresh_secs`, until `shutdown` is
    /// cancelled; and one that re-reads `api_keys_file`s. The tasks run on
    /// `tasks`, so waiting on the tracker waits for them. Calls after the
    /// first do nothing.
    pub fn start_refresh(&self, tasks: &TaskTracker, shutdown: CancellationToken) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        for source in self.tenants.values().filter_map(|t| t.jwks.as_ref()) {
            tasks.spawn(source.refresher(shutdown.clone()));
        }
        self.api_keys.start_reload(tasks, shutdown);
    }

    /// Who a request's credential names. `credential` is what it sent (a
    /// token or a key), `path` its route, for the anonymous routes.
    pub async fn authenticate(&self, credential: Option<&Credential>, path: &str) -> Result<Principal, AuthError> {
        match credential {
            Some(Credential::ApiKey(key)) => self.api_keys.verify(key).ok_or(AuthError::UnknownApiKey),
            Some(Credential::Bearer(token)) if looks_like_jwt(token) => self.verify(token).await,
            Some(Credential::Bearer(key)) => self.api_keys.verify(key).ok_or(AuthError::UnknownApiKey),
            None => self.anonymous_for(path).ok_or(AuthError::Missing),
        }
    }

    /// The anonymous principal, if `path` is a route the deployment opened.
    fn anonymous_for(&self, path: &str) -> Option<Principal> {
        let anonymous = self.anonymous.as_ref()?;
        let dialect = Dialect::of_path(path)?;
        anonymous.routes.contains(&dialect).then(|| Principal {
            tenant: Arc::from(anonymous.tenant.as_str()),
            subject: anonymous.subject.clone(),
            scopes: Vec::new(),
        })
    }

    /// Verifies `token` with the tenant's configured keys and its JWKS keys.
    /// When the token names a `kid` the tenant does not know (a key rotated
    /// in since the last fetch), the JWKS is fetched first, at most once per
    /// 10 s per tenant. A token verified before is taken from the cache
    /// until its `exp` (`verified.rs`).
    pub async fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let jwks_now = |tenant: &str| self.tenants.get(tenant)?.jwks.as_ref().map(|source| source.keys());
        if let Some(principal) = self.verified.get(token, now, jwks_now) {
            return Ok(principal);
        }
        let (header, entry) = self.tenant_of(token)?;
        let fetched = match &entry.jwks {
            None => Arc::default(),
            Some(source) => {
                let seen = source.attempts();
                let fetched = source.keys();
                let unknown = match header.kid.as_deref() {
                    Some(kid) => !entry.keys.iter().chain(fetched.iter()).any(|k| k.kid() == Some(kid)),
                    None => fetched.is_empty(),
                };
                if unknown {
                    source.refresh_on_demand(seen).await;
                    source.keys()
                } else {
                    fetched
                }
            }
        };
        let (principal, exp) = principal(token, &header, entry.keys.iter().chain(fetched.iter()))?;
        let jwks = entry.jwks.is_some().then_some(fetched);
        self.verified.insert(token, &principal, exp, jwks, now);
        Ok(principal)
    }

    /// The parsed header (this is where `alg: none` is refused) and the keys
    /// of the tenant the token claims.
    fn tenant_of(&self, token: &str) -> Result<(Header, &TenantKeys), AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        let hint: TenantHint =
            jsonwebtoken::dangerous::insecure_decode_claims(token).map_err(|_| AuthError::Malformed)?;
        let tenant = hint.tenant.ok_or(AuthError::Invalid)?;
        let entry = self.tenants.get(&tenant).ok_or(AuthError::Invalid)?;
        Ok((header, entry))
    }
}

fn principal<'a>(
    token: &str,
    header: &Header,
    keys: impl IntoIterator<Item = &'a VerifyKey>,
) -> Result<(Principal, u64), AuthError> {
    let claims = keys::verify_with(token, header, keys)?;
    let principal = Principal {
        tenant: Arc::from(claims.tenant.as_str()),
        subject: claims.sub,
        scopes: claims.scope.map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default(),
    };
    Ok((principal, claims.exp))
}

fn jwks_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// A new random API key (`sbk_` and 32 random bytes, base64url) and the
/// `api_keys` entry, as TOML, that accepts it for `subject`.
pub fn new_api_key(subject: &str, scopes: &[String]) -> (String, String) {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    let key = format!("sbk_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
    let digest = hex::encode(crate::config::access::digest(&key));
    let subject = toml::Value::String(subject.to_string());
    let mut entry = format!("{{ sha256 = \"{digest}\", subject = {subject}");
    if !scopes.is_empty() {
        let scopes = toml::Value::Array(scopes.iter().cloned().map(toml::Value::String).collect());
        entry.push_str(&format!(", scopes = {scopes}"));
    }
    entry.push_str(" }");
    (key, entry)
}

/// Why [`mint_token`] could not sign.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("tenant {0:?} has no HMAC key (HS256, HS384, HS512) to sign with; its tokens come from its issuer")]
    NoSigningKey(String),
    #[error(transparent)]
    Sign(#[from] jsonwebtoken::errors::Error),
}

/// Mints a token the tenant's configuration accepts, signed with its first
/// HMAC key (the `hs256_secret` shorthand when set) and carrying that key's
/// `kid`. Tenants with public keys only cannot be minted for.
pub fn mint_token(tenant: &TenantConfig, subject: &str, ttl: Duration, scopes: &[String]) -> Result<String, MintError> {
    let (key, secret) = tenant.jwt.signing_key().ok_or_else(|| MintError::NoSigningKey(tenant.id.clone()))?;
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
    let mut header = Header::new(key.algorithm);
    header.kid = key.kid.clone();
    Ok(jsonwebtoken::encode(&header, &body, &EncodingKey::from_secret(secret.expose().as_bytes()))?)
}

/// What a request presents. Never logged (no `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `X-API-Key: <key>`.
    ApiKey(String),
    /// `Authorization: Bearer <token or key>`.
    Bearer(String),
}

/// The header that carries an API key (Holmes deployments send it).
pub const API_KEY_HEADER: &str = "x-api-key";

/// A bearer credential shaped like a JWT: three base64url segments, the
/// first a JSON object (`eyJ` is `{"` encoded). Anything else is an API key.
fn looks_like_jwt(credential: &str) -> bool {
    let segments: Vec<&str> = credential.split('.').collect();
    let base64url = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    segments.len() == 3 && segments[0].starts_with("eyJ") && segments.iter().all(|s| base64url(s))
}

/// Middleware: authenticates every non-public request and puts the
/// [`Principal`] in the request's extensions.
pub async fn require_auth(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if auth.is_public(request.uri().path()) {
        return Ok(next.run(request).await);
    }
    // Owned: the request (whose body is not `Sync`) is not borrowed across
    // the verification.
    let path = request.uri().path().to_owned();
    let verified = match credential(&request) {
        Ok(credential) => auth.authenticate(credential.as_ref(), &path).await,
        Err(e) => Err(e),
    };
    let principal = verified.map_err(|e| ApiError::unauthorized(e.to_string()))?;
    tracing::Span::current().record(crate::telemetry::attributes::TENANT, &*principal.tenant);
    if let (Some(cors), Some(origin)) = (&auth.cors, request.headers().get(header::ORIGIN))
        && cors.refuses(origin, &principal.tenant)
    {
        return Err(ApiError::new(ErrorCode::Forbidden, "this tenant's credentials may not be used from this origin"));
    }
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

/// The request's credential: `X-API-Key` if sent, else a bearer
/// `Authorization`. A header that is present but unusable (another scheme,
/// an empty value) is malformed, not missing: it never falls through to
/// the anonymous routes.
fn credential(request: &Request) -> Result<Option<Credential>, AuthError> {
    if let Some(value) = request.headers().get(API_KEY_HEADER) {
        let key = value.to_str().map(str::trim).map_err(|_| AuthError::Malformed)?;
        return if key.is_empty() { Err(AuthError::Malformed) } else { Ok(Some(Credential::ApiKey(key.to_owned()))) };
    }
    let Some(value) = request.headers().get(header::AUTHORIZATION) else { return Ok(None) };
    let value = value.to_str().map_err(|_| AuthError::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(Some(Credential::Bearer(token.to_owned())))
}
