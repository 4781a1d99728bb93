//! `tenants.jwt`: HMAC secrets, public keys in PEM (parsed and checked
//! here), a JWKS URL, and the claim rules.

use super::{env_secret, positive, secs};
use crate::config::{ConfigErrors, EnvLookup, JwtConfig, Secret, raw::RawJwt};

/// HS256 keys shorter than this are refused: they can be brute-forced offline.
const MIN_HS256_SECRET_LEN: usize = 16;

pub(super) fn validate_jwt(
    errors: &mut ConfigErrors,
    path: &str,
    raw: RawJwt,
    env: EnvLookup<'_>,
) -> Option<JwtConfig> {
    use crate::config::{JwksConfig, JwtKey, JwtKeyMaterial};
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
    raw: crate::config::raw::RawJwtKey,
    env: EnvLookup<'_>,
) -> Option<crate::config::JwtKey> {
    use jsonwebtoken::{Algorithm, AlgorithmFamily};

    use crate::config::{JwtKey, JwtKeyMaterial};
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
