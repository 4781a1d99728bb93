//! The TOML configuration a [`super::replica::Replica`] runs with, and the
//! tokens its tenant accepts.
//!
//! Written with the suites' one builder (`tests/common/config.rs`): only
//! the keys a test needs; `[[tools]] retry_on_takeover` only when a tool
//! sets it.

use std::{net::SocketAddr, time::Duration};

pub use super::test_config::Tool;
use super::test_config::{Model, Tenant, TestConfig};

pub const TENANT: &str = "acme";
pub const TENANT_SECRET: &str = "acme-test-secret-0123456789";
pub const SUBJECT: &str = "alice";
/// The model alias the deterministic upstream serves.
pub const MODEL: &str = "mock";

/// Everything a replica's configuration is made of, except its port.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    pub replica_id: String,
    /// The `[store]` line naming the store: `redis_url = "…"` or
    /// `redis_cluster = […]`.
    pub store: String,
    /// Shared by the replicas of one test; unique per test.
    pub key_prefix: String,
    pub lease_ttl_secs: u64,
    pub shutdown_grace_secs: u64,
    pub drain_delay_secs: u64,
    /// `http://127.0.0.1:PORT/v1`
    pub upstream_base_url: String,
    pub tools: Vec<Tool>,
    pub max_iterations: u32,
    /// More keys of `[server]` (and tables below it, such as `[server.cors]`).
    pub server_toml: String,
    /// More keys of the tenant's table.
    pub tenant_toml: String,
    /// More keys of `[agent]` (`titles = false`).
    pub agent_toml: String,
    /// More tables, appended (`[[tools]]` of other permissions, tenants).
    pub extra_toml: String,
}

impl ReplicaConfig {
    /// The TOML text for a replica listening on `listen`: the tenant
    /// [`TENANT`] and the model [`MODEL`] on the deterministic upstream.
    pub fn render(&self, listen: SocketAddr) -> String {
        let mut tenant = Tenant::new(TENANT, TENANT_SECRET);
        tenant.toml = self.tenant_toml.clone();
        let mut config = TestConfig::new(&self.replica_id, self.upstream_base_url.clone(), tenant, vec![Model::MOCK]);
        config.listen = listen.to_string();
        config.server_toml = format!(
            "shutdown_grace_secs = {}\ndrain_delay_secs = {}\n{}",
            self.shutdown_grace_secs, self.drain_delay_secs, self.server_toml
        );
        config.store = self.store.clone();
        config.key_prefix = self.key_prefix.clone();
        config.lease_ttl_secs = self.lease_ttl_secs;
        config.agent_toml = format!("max_iterations = {}\n{}", self.max_iterations, self.agent_toml);
        config.tools = self.tools.clone();
        config.extra_toml = self.extra_toml.clone();
        config.render()
    }
}

/// A token of `SUBJECT` in `TENANT`, minted by the library from a
/// configuration holding only the tenant and the built-in demo model (so it
/// does not depend on keys the library may not know yet).
pub fn token() -> String {
    token_for(SUBJECT, &[])
}

/// A token of `subject` in `TENANT` with `scopes` (`sessions:admin`).
pub fn token_for(subject: &str, scopes: &[String]) -> String {
    let text = format!(
        "[[tenants]]\nid = \"{TENANT}\"\njwt = {{ hs256_secret = \"{TENANT_SECRET}\" }}\n\n[models.demo]\nprovider = \"demo\"\n"
    );
    let config = switchboard::config::Config::from_toml(&text, &|_| None).expect("a tenant-only configuration");
    switchboard::auth::mint_token(&config.tenants[TENANT], subject, Duration::from_secs(3600), scopes)
        .expect("the tenant has an HS256 key")
}
