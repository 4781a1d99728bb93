//! Credentials other than JWTs: per-tenant API keys (configured as SHA-256
//! digests, never as the keys themselves) and the opt-in anonymous routes.
//!
//! This module only describes and parses them; `auth` checks requests
//! against them and re-reads `api_keys_file`s when they change.

use std::{fmt, path::PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::Dialect;

/// One accepted API key: the SHA-256 of the key, the subject requests made
/// with it act as, and the scopes they carry.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub sha256: [u8; 32],
    pub subject: String,
    pub scopes: Vec<String>,
}

impl fmt::Debug for ApiKey {
    /// The digest is not secret, but there is no reason to print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey").field("subject", &self.subject).field("scopes", &self.scopes).finish_non_exhaustive()
    }
}

/// The SHA-256 digest of a presented key, as configured entries hold it.
pub fn digest(key: &str) -> [u8; 32] {
    digest_bytes(key.as_bytes())
}

pub fn digest_bytes(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// One `api_keys` entry as written: `{ sha256 = "<64 hex>", subject = "…", scopes? = [...] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiKey {
    pub sha256: Option<String>,
    pub subject: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl RawApiKey {
    /// The entry, or what is wrong with it (relative to the entry).
    pub fn check(self) -> Result<ApiKey, (&'static str, String)> {
        let hex_digest = self.sha256.ok_or(("sha256", "required: the SHA-256 of the key, 64 hex digits".into()))?;
        let mut sha256 = [0u8; 32];
        if hex_digest.len() != 64 || hex::decode_to_slice(&hex_digest, &mut sha256).is_err() {
            return Err(("sha256", "must be 64 hex digits (the SHA-256 of the key, not the key)".into()));
        }
        let subject = self.subject.filter(|s| !s.trim().is_empty()).ok_or(("subject", "required".to_string()))?;
        if self.scopes.iter().any(|s| s.is_empty() || s.contains(char::is_whitespace)) {
            return Err(("scopes", "each scope is one word".into()));
        }
        Ok(ApiKey { sha256, subject, scopes: self.scopes })
    }
}

/// An `api_keys_file`: more entries of the `api_keys` shape, as
/// `api_keys = [ { sha256 = "…", subject = "…" }, … ]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeysFile {
    #[serde(default)]
    api_keys: Vec<RawApiKey>,
}

/// Reads and checks an `api_keys_file`. The message names the entry.
pub fn read_keys_file(path: &std::path::Path) -> Result<Vec<ApiKey>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_keys_file(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse_keys_file(text: &str) -> Result<Vec<ApiKey>, String> {
    let raw: RawKeysFile = toml::from_str(text).map_err(|e| format!("not a valid keys file: {}", e.message()))?;
    (raw.api_keys.into_iter().enumerate())
        .map(|(i, entry)| entry.check().map_err(|(field, message)| format!("api_keys[{i}].{field}: {message}")))
        .collect()
}

/// Where a tenant's API keys come from.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    /// `api_keys` of the configuration file.
    pub keys: Vec<ApiKey>,
    /// `api_keys_file`, re-read when it changes; its entries at start-up.
    pub file: Option<(PathBuf, Vec<ApiKey>)>,
}

impl ApiKeys {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.file.is_none()
    }
}

/// Credential-less requests on the routes of `routes` act as `subject` of
/// `tenant`. Off unless configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anonymous {
    pub tenant: String,
    pub subject: String,
    pub routes: Vec<Dialect>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawAnonymous {
    pub tenant: Option<String>,
    pub subject: Option<String>,
    pub routes: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_file_is_parsed_and_each_bad_entry_is_named() {
        let good = format!(
            "api_keys = [{{ sha256 = \"{}\", subject = \"ui\", scopes = [\"sessions:admin\"] }}]",
            hex::encode(digest("k"))
        );
        let keys = parse_keys_file(&good).unwrap();
        assert_eq!(keys[0].sha256, digest("k"));
        assert_eq!(keys[0].scopes, ["sessions:admin"]);
        assert!(parse_keys_file("").unwrap().is_empty());
        let short = "api_keys = [{ sha256 = \"abc\", subject = \"ui\" }]";
        assert!(parse_keys_file(short).unwrap_err().starts_with("api_keys[0].sha256"));
        let anonymous = format!("api_keys = [{{ sha256 = \"{}\" }}]", "0".repeat(64));
        assert!(parse_keys_file(&anonymous).unwrap_err().starts_with("api_keys[0].subject"));
        assert!(parse_keys_file("api_keys = [{ key = \"plain\" }]").is_err(), "unknown fields are refused");
    }
}
