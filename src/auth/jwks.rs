//! Keys from a tenant's JWKS document.
//!
//! The set is fetched by a background task every `jwks_refresh_secs` (see
//! [`super::Authenticator::start_refresh`]) and on demand when a token names
//! a `kid` the tenant does not know, at most once per [`ON_DEMAND_INTERVAL`]
//! per tenant, so tokens with made-up `kid`s cannot make the gateway hammer
//! the endpoint. One fetch runs at a time per tenant; a request that needs a
//! fetch while one is running waits for it instead of starting another. A
//! failed fetch keeps the last good set and logs a warning.
//!
//! Only signing keys are taken: RSA, EC P-256/P-384 and OKP Ed25519. The
//! JWK's `alg` (when present) or else its `kty`/`crv` decides the algorithm;
//! symmetric (`oct`) keys and keys marked for encryption are ignored.

use std::{
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use jsonwebtoken::{
    Algorithm, AlgorithmFamily, DecodingKey,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse},
};
use serde_json::Value;
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use super::keys::{ClaimRules, VerifyKey};
use crate::config::JwksConfig;

/// On-demand fetches (for an unknown `kid`) happen at most this often per tenant.
pub(super) const ON_DEMAND_INTERVAL: Duration = Duration::from_secs(10);
/// A JWKS document larger than this is refused.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

pub(super) struct JwksSource {
    tenant: String,
    url: String,
    refresh: Duration,
    rules: ClaimRules,
    http: reqwest::Client,
    keys: RwLock<Arc<Vec<VerifyKey>>>,
    /// Completed fetch attempts (successful or not).
    attempts: AtomicU64,
    /// Held while a fetch runs: one fetch at a time.
    fetching: Arc<tokio::sync::Mutex<()>>,
    last_on_demand: Mutex<Option<Instant>>,
}

impl JwksSource {
    pub fn new(tenant: &str, config: &JwksConfig, rules: ClaimRules, http: reqwest::Client) -> Self {
        Self {
            tenant: tenant.to_string(),
            url: config.url.clone(),
            refresh: config.refresh,
            rules,
            http,
            keys: RwLock::new(Arc::new(Vec::new())),
            attempts: AtomicU64::new(0),
            fetching: Arc::new(tokio::sync::Mutex::new(())),
            last_on_demand: Mutex::new(None),
        }
    }

    /// The current key set (empty until the first successful fetch).
    pub fn keys(&self) -> Arc<Vec<VerifyKey>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Read before [`JwksSource::keys`] and passed to
    /// [`JwksSource::refresh_on_demand`], so a fetch that completes in between
    /// is noticed.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Acquire)
    }

    /// Fetches now unless a fetch completed since `seen` (then its result is
    /// used) or an on-demand fetch ran in the last [`ON_DEMAND_INTERVAL`].
    /// The very first fetch (the initial load, when no refresher got to it
    /// first) does not count against that interval.
    pub async fn refresh_on_demand(&self, seen: u64) {
        let _running = self.fetching.lock().await;
        if self.attempts() != seen {
            return;
        }
        if seen > 0 {
            let mut last = self.last_on_demand.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < ON_DEMAND_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.fetch_and_store().await;
    }

    /// Takes the fetch lock now (so requests arriving before the first
    /// fetch wait for it) and returns the refresher to spawn.
    pub fn refresher(self: &Arc<Self>, shutdown: CancellationToken) -> impl Future<Output = ()> + Send + 'static {
        let first = self.fetching.clone().try_lock_owned().ok();
        let source = self.clone();
        async move { source.refresh_loop(first, shutdown).await }
    }

    async fn refresh_loop(self: Arc<Self>, mut held: Option<OwnedMutexGuard<()>>, shutdown: CancellationToken) {
        loop {
            let guard = match held.take() {
                Some(guard) => guard,
                None => tokio::select! {
                    () = shutdown.cancelled() => return,
                    guard = self.fetching.clone().lock_owned() => guard,
                },
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.fetch_and_store() => {}
            }
            drop(guard);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.refresh) => {}
            }
        }
    }

    /// One fetch; callers hold the fetch lock. On failure the last good set
    /// stays in place.
    async fn fetch_and_store(&self) {
        match self.fetch().await {
            Ok(keys) => {
                tracing::debug!(tenant = %self.tenant, keys = keys.len(), "JWKS keys loaded");
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
            }
            Err(error) => {
                tracing::warn!(
                    tenant = %self.tenant,
                    url = %self.url,
                    %error,
                    "JWKS refresh failed; keeping the last good key set"
                );
            }
        }
        self.attempts.fetch_add(1, Ordering::AcqRel);
    }

    async fn fetch(&self) -> Result<Vec<VerifyKey>, String> {
        let mut response = self
            .http
            .get(&self.url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| e.without_url().to_string())?;
        if response.content_length().is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64) {
            return Err("the document is too large".to_string());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DOCUMENT_BYTES {
                return Err("the document is too large".to_string());
            }
        }
        let keys = parse_jwks(&body, &self.rules)?;
        if keys.is_empty() {
            return Err("the document has no usable signing key".to_string());
        }
        Ok(keys)
    }
}

/// The usable signing keys of a JWKS document; unusable entries are skipped.
pub(super) fn parse_jwks(body: &[u8], rules: &ClaimRules) -> Result<Vec<VerifyKey>, String> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let document: Document = serde_json::from_slice(body).map_err(|_| "not a JWKS document".to_string())?;
    Ok(document.keys.into_iter().filter_map(|jwk| key_from_jwk(jwk, rules)).collect())
}

fn key_from_jwk(value: Value, rules: &ClaimRules) -> Option<VerifyKey> {
    let declared = match value.get("alg") {
        None => None,
        Some(alg) => Some(alg.as_str()?.parse::<Algorithm>().ok()?),
    };
    let jwk: Jwk = serde_json::from_value(value).ok()?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))) {
        return None;
    }
    if jwk.common.key_operations.as_ref().is_some_and(|ops| !ops.contains(&KeyOperations::Verify)) {
        return None;
    }
    let (algorithm, point_len) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => {
            let algorithm = declared.unwrap_or(Algorithm::RS256);
            (algorithm.family() == AlgorithmFamily::Rsa).then_some((algorithm, None))?
        }
        AlgorithmParameters::EllipticCurve(params) => {
            let (algorithm, len) = match params.curve {
                EllipticCurve::P256 => (Algorithm::ES256, 65),
                EllipticCurve::P384 => (Algorithm::ES384, 97),
                _ => return None,
            };
            declared.is_none_or(|d| d == algorithm).then_some((algorithm, Some(len)))?
        }
        AlgorithmParameters::OctetKeyPair(params) if params.curve == EllipticCurve::Ed25519 => {
            declared.is_none_or(|d| d == Algorithm::EdDSA).then_some((Algorithm::EdDSA, Some(32)))?
        }
        // Never a symmetric key from a JWKS, nor anything else.
        _ => return None,
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    if let Some(len) = point_len
        && key.try_get_as_bytes().map_or(true, |bytes| bytes.len() != len)
    {
        return None;
    }
    VerifyKey::new(jwk.common.key_id, algorithm, key, rules)
}
