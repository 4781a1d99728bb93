//! API keys: a key sent as `X-API-Key: <key>` or `Authorization: Bearer
//! <key>` maps to a tenant and a subject.
//!
//! Keys are configured as SHA-256 digests (`tenants.api_keys`, and the
//! entries of `tenants.api_keys_file`), so neither the configuration nor
//! this process holds a key in the clear. A presented key is hashed once
//! and compared with every configured digest in constant time (no early
//! exit, no lookup keyed by it), so the time taken says nothing about which
//! digest came closest.
//!
//! An `api_keys_file` is re-read every [`RELOAD_INTERVAL`] (a changed file
//! is parsed; an unchanged one costs a read and a hash): keys added to it
//! work and keys removed from it stop working within seconds, without a
//! restart. A file that cannot be read or parsed keeps the last good set,
//! with a warning, so a half-written file never locks every client out.
//! Polling rather than inotify: a Kubernetes secret volume swaps a symlink,
//! which file watches miss.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::ArcSwap;
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::config::{ApiKey, Config, access};
use crate::principal::Principal;

/// How often `api_keys_file`s are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// One accepted digest and whom it names.
#[derive(Debug, Clone)]
struct Entry {
    sha256: [u8; 32],
    tenant: Arc<str>,
    subject: String,
    scopes: Vec<String>,
}

impl Entry {
    fn of(tenant: &Arc<str>, key: &ApiKey) -> Self {
        Self { sha256: key.sha256, tenant: tenant.clone(), subject: key.subject.clone(), scopes: key.scopes.clone() }
    }
}

/// One tenant's `api_keys_file` and the entries last read from it.
struct KeysFile {
    tenant: Arc<str>,
    path: PathBuf,
    entries: ArcSwap<Vec<Entry>>,
    /// SHA-256 of the contents last seen (parsed or not): an unchanged file
    /// is not parsed again, and a bad one is warned about once.
    seen: Mutex<[u8; 32]>,
}

/// Every API key of every tenant.
pub struct ApiKeyRing {
    fixed: Vec<Entry>,
    files: Vec<KeysFile>,
}

impl ApiKeyRing {
    pub fn from_config(config: &Config) -> Self {
        let mut fixed = Vec::new();
        let mut files = Vec::new();
        for tenant in config.tenants.values() {
            let id: Arc<str> = Arc::from(tenant.id.as_str());
            fixed.extend(tenant.api_keys.keys.iter().map(|key| Entry::of(&id, key)));
            if let Some((path, keys)) = &tenant.api_keys.file {
                let seen = std::fs::read(path).map(|bytes| access::digest_bytes(&bytes)).unwrap_or_default();
                files.push(KeysFile {
                    tenant: id.clone(),
                    path: path.clone(),
                    entries: ArcSwap::from_pointee(keys.iter().map(|key| Entry::of(&id, key)).collect()),
                    seen: Mutex::new(seen),
                });
            }
        }
        Self { fixed, files }
    }

    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.files.is_empty()
    }

    /// The principal `key` names, if it is a configured key.
    pub fn verify(&self, key: &str) -> Option<Principal> {
        let presented = access::digest(key);
        let loaded: Vec<_> = self.files.iter().map(|f| f.entries.load_full()).collect();
        let all = self.fixed.iter().chain(loaded.iter().flat_map(|entries| entries.iter()));
        // Every digest is compared; the match is selected without a branch
        // on secret data.
        let mut found = Choice::from(0);
        let mut index = 0u32;
        for (i, entry) in all.clone().enumerate() {
            let equal = entry.sha256.ct_eq(&presented);
            index.conditional_assign(&(i as u32), equal & !found);
            found |= equal;
        }
        if !bool::from(found) {
            return None;
        }
        let entry = all.clone().nth(index as usize)?;
        Some(Principal { tenant: entry.tenant.clone(), subject: entry.subject.clone(), scopes: entry.scopes.clone() })
    }

    /// Re-reads every `api_keys_file` that changed since it was last read.
    pub fn reload(&self) {
        for file in &self.files {
            file.reload();
        }
    }

    /// Re-reads the files every [`RELOAD_INTERVAL`] until `shutdown`.
    pub fn start_reload(self: &Arc<Self>, tasks: &TaskTracker, shutdown: CancellationToken) {
        if self.files.is_empty() {
            return;
        }
        let ring = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let ring = ring.clone();
                        // File reads block: off the async workers.
                        let _ = tokio::task::spawn_blocking(move || ring.reload()).await;
                    }
                    () = shutdown.cancelled() => return,
                }
            }
        });
    }
}

impl KeysFile {
    fn reload(&self) {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) => {
                let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                if *seen != [0; 32] {
                    tracing::warn!(tenant = %self.tenant, file = %self.path.display(), error = %e,
                        "cannot read api_keys_file; keeping the keys last read from it");
                    *seen = [0; 32];
                }
                return;
            }
        };
        let digest = access::digest_bytes(&bytes);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if *seen == digest {
                return;
            }
            *seen = digest;
        }
        let parsed = std::str::from_utf8(&bytes).map_err(|e| e.to_string()).and_then(access::parse_keys_file);
        match parsed {
            Ok(keys) => {
                let entries: Vec<Entry> = keys.iter().map(|key| Entry::of(&self.tenant, key)).collect();
                tracing::info!(tenant = %self.tenant, file = %self.path.display(), keys = entries.len(),
                    "api_keys_file changed; keys reloaded");
                self.entries.store(Arc::new(entries));
            }
            Err(message) => {
                tracing::warn!(tenant = %self.tenant, file = %self.path.display(), error = %message,
                    "api_keys_file changed but is not valid; keeping the keys last read from it");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            r#"
[[tenants]]
id = "acme"
api_keys = [{{ sha256 = "{}", subject = "ui" }}]
{extra}

[[tenants]]
id = "globex"
api_keys = [{{ sha256 = "{}", subject = "bot", scopes = ["sessions:admin"] }}]

[models.demo]
provider = "demo"
"#,
            hex::encode(access::digest("acme-key")),
            hex::encode(access::digest("globex-key")),
        );
        Config::from_toml(&text, &|_| None).unwrap()
    }

    #[test]
    fn a_key_names_its_tenant_and_subject_and_nothing_else_passes() {
        let ring = ApiKeyRing::from_config(&config(""));
        let acme = ring.verify("acme-key").unwrap();
        assert_eq!((&*acme.tenant, acme.subject.as_str()), ("acme", "ui"));
        let globex = ring.verify("globex-key").unwrap();
        assert_eq!((&*globex.tenant, globex.scopes.as_slice()), ("globex", ["sessions:admin".to_string()].as_slice()));
        assert!(ring.verify("acme-key ").is_none());
        assert!(ring.verify("").is_none());
        assert!(ring.verify(&hex::encode(access::digest("acme-key"))).is_none(), "the digest is not the key");
    }

    #[test]
    fn a_keys_file_is_re_read_when_it_changes_and_a_bad_one_keeps_the_last_good_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let entry = |key: &str| format!("{{ sha256 = \"{}\", subject = \"{key}\" }}", hex::encode(access::digest(key)));
        std::fs::write(&path, format!("api_keys = [{}]", entry("one"))).unwrap();
        let ring = ApiKeyRing::from_config(&config(&format!("api_keys_file = {:?}", path.display().to_string())));
        assert_eq!(ring.verify("one").unwrap().subject, "one");
        assert!(ring.verify("acme-key").is_some(), "the configured keys stay");

        std::fs::write(&path, format!("api_keys = [{}]", entry("two"))).unwrap();
        ring.reload();
        assert!(ring.verify("one").is_none(), "a removed key stops working");
        assert_eq!(ring.verify("two").unwrap().subject, "two");

        std::fs::write(&path, "api_keys = [ { sha256 = \"nope\" } ]").unwrap();
        ring.reload();
        assert!(ring.verify("two").is_some(), "a bad file keeps the last good keys");
        std::fs::remove_file(&path).unwrap();
        ring.reload();
        assert!(ring.verify("two").is_some(), "so does a missing one");
    }
}
