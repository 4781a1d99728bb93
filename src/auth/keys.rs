//! Verification keys: one key, one algorithm, one [`Validation`].
//!
//! A [`VerifyKey`] is built from a configured key or from a JWK. Its
//! algorithm is fixed when it is built, and a token is only checked against
//! keys whose algorithm equals the token header's `alg`; a secret is only
//! ever turned into an HMAC key (never a public key), so algorithm confusion
//! has nothing to work with.

use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Header, Validation, errors::ErrorKind};

use super::{AuthError, Claims};
use crate::config::{JwtConfig, JwtKey, JwtKeyMaterial};

/// The claim checks a tenant asks for, shared by all its keys.
#[derive(Debug, Clone)]
pub(super) struct ClaimRules {
    issuer: Option<String>,
    audience: Option<String>,
    leeway_secs: u64,
}

impl ClaimRules {
    pub fn from_config(jwt: &JwtConfig) -> Self {
        Self { issuer: jwt.issuer.clone(), audience: jwt.audience.clone(), leeway_secs: jwt.leeway_secs }
    }

    /// `exp` and `sub` required, `nbf` checked, the leeway, and `iss`/`aud`
    /// required and checked when configured (jsonwebtoken only checks the
    /// ones a token carries); only `algorithm` accepted.
    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        let mut required = vec!["exp", "sub"];
        required.extend(self.issuer.as_ref().map(|_| "iss"));
        required.extend(self.audience.as_ref().map(|_| "aud"));
        validation.set_required_spec_claims(&required);
        validation.leeway = self.leeway_secs;
        validation.validate_nbf = true;
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
        }
        match &self.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        validation
    }
}

pub(super) struct VerifyKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
    validation: Validation,
}

impl VerifyKey {
    /// `None` when the key's family does not fit the algorithm (validation
    /// refuses such a configuration; this is the second line).
    pub fn new(kid: Option<String>, algorithm: Algorithm, key: DecodingKey, rules: &ClaimRules) -> Option<Self> {
        (key.family() == algorithm.family()).then(|| Self {
            kid,
            algorithm,
            key,
            validation: rules.validation(algorithm),
        })
    }

    pub fn from_config(key: &JwtKey, rules: &ClaimRules) -> Option<Self> {
        let decoding = match (&key.material, key.algorithm.family()) {
            (JwtKeyMaterial::Secret(secret), AlgorithmFamily::Hmac) => {
                DecodingKey::from_secret(secret.expose().as_bytes())
            }
            (JwtKeyMaterial::PublicKey(public), family) if family != AlgorithmFamily::Hmac => public.clone(),
            _ => return None,
        };
        Self::new(key.kid.clone(), key.algorithm, decoding, rules)
    }

    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// A candidate for `header`: same algorithm, and the same `kid` when the
    /// token names one.
    pub fn matches(&self, header: &Header) -> bool {
        self.algorithm == header.alg && header.kid.as_ref().is_none_or(|kid| self.kid.as_ref() == Some(kid))
    }

    pub fn decode(&self, token: &str) -> Result<Claims, AuthError> {
        jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map(|data| data.claims).map_err(|e| match e
            .kind()
        {
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            _ => AuthError::Invalid,
        })
    }
}

/// Tries each candidate; the first that verifies wins. When none does, a
/// time error (only reachable once a signature checked out) beats "invalid".
pub(super) fn verify_with<'a>(
    token: &str,
    header: &Header,
    keys: impl IntoIterator<Item = &'a VerifyKey>,
) -> Result<Claims, AuthError> {
    let mut failure = AuthError::Invalid;
    for key in keys.into_iter().filter(|k| k.matches(header)) {
        match key.decode(token) {
            Ok(claims) => return Ok(claims),
            Err(e @ (AuthError::Expired | AuthError::NotYetValid)) => failure = e,
            Err(_) => {}
        }
    }
    Err(failure)
}
