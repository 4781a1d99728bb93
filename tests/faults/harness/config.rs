//! The TOML configuration a [`super::replica::Replica`] runs with, and the
//! tokens its tenant accepts.
//!
//! Only the keys a test needs are written; `[[tools]] retry_on_takeover`
//! only when a tool sets it.

use std::{net::SocketAddr, time::Duration};

pub const TENANT: &str = "acme";
pub const TENANT_SECRET: &str = "acme-test-secret-0123456789";
pub const SUBJECT: &str = "alice";
/// The model alias the deterministic upstream serves.
pub const MODEL: &str = "mock";

/// A server-side HTTP tool of the configuration.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: String,
    pub url: String,
    /// `None` leaves the key out (the current binary refuses it).
    pub retry_on_takeover: Option<bool>,
}

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
    pub tools: Vec<ToolSpec>,
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
    /// The TOML text for a replica listening on `listen`.
    pub fn render(&self, listen: SocketAddr) -> String {
        let mut text = format!(
            r#"[server]
listen = "{listen}"
replica_id = "{replica}"
shutdown_grace_secs = {grace}
drain_delay_secs = {drain_delay}
{server_toml}

[store]
{store}
key_prefix = "{prefix}"
lease_ttl_secs = {lease}

[[tenants]]
id = "{TENANT}"
jwt = {{ hs256_secret = "{TENANT_SECRET}" }}
{tenant_toml}

[models.{MODEL}]
provider = "openai"
base_url = "{upstream}"
model = "mock-model"
retry_base_ms = 10

[agent]
max_iterations = {max_iterations}
{agent_toml}
"#,
            replica = self.replica_id,
            grace = self.shutdown_grace_secs,
            drain_delay = self.drain_delay_secs,
            store = self.store,
            prefix = self.key_prefix,
            lease = self.lease_ttl_secs,
            upstream = self.upstream_base_url,
            max_iterations = self.max_iterations,
            server_toml = self.server_toml,
            tenant_toml = self.tenant_toml,
            agent_toml = self.agent_toml,
        );
        for tool in &self.tools {
            text.push_str(&format!(
                r#"
[[tools]]
name = "{name}"
description = "{name} something"
parameters = {{ type = "object", properties = {{ id = {{ type = "string" }} }} }}
url = "{url}"
permission = "allow"
"#,
                name = tool.name,
                url = tool.url,
            ));
            if let Some(retry) = tool.retry_on_takeover {
                text.push_str(&format!("retry_on_takeover = {retry}\n"));
            }
        }
        text.push_str(&self.extra_toml);
        text
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
