//! The one configuration builder of the test suites: `tests/api` (and
//! `tests/telemetry`, which reuses its helpers) runs the app in-process,
//! `tests/faults` and `tests/browser` run the real binary; all of them write
//! the gateway's TOML with [`TestConfig::render`], and their HTTP tools with
//! [`Tool`]. Each suite starts from its own defaults (what the suite's
//! tenants, models and agent limits are); only the keys a test sets are
//! written beyond them.

/// A server-side HTTP tool (`[[tools]]`).
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    pub url: String,
    /// `allow`, `ask` or `deny`.
    pub permission: &'static str,
    pub description: Option<String>,
    /// Declares one string argument `id` (the scripted models call tools
    /// with `{"id": …}`).
    pub takes_id: bool,
    /// `None` leaves the key out.
    pub retry_on_takeover: Option<bool>,
}

impl Tool {
    fn new(name: &str, url: String, permission: &'static str) -> Self {
        Self { name: name.to_string(), url, permission, description: None, takes_id: false, retry_on_takeover: None }
    }

    /// A tool that runs without asking.
    pub fn allowed(name: &str, url: String) -> Self {
        Self::new(name, url, "allow")
    }

    /// A tool whose calls need a permission decision (a relay).
    pub fn asking(name: &str, url: String) -> Self {
        Self::new(name, url, "ask")
    }

    /// A tool the gateway refuses to run.
    pub fn denied(name: &str, url: String) -> Self {
        Self::new(name, url, "deny")
    }

    pub fn described(mut self, description: &str) -> Self {
        self.description = Some(description.to_string());
        self
    }

    /// Declares the `id` argument.
    pub fn taking_id(mut self) -> Self {
        self.takes_id = true;
        self
    }

    pub fn retry_on_takeover(mut self, retry: Option<bool>) -> Self {
        self.retry_on_takeover = retry;
        self
    }

    fn render(&self) -> String {
        let mut text = format!("\n[[tools]]\nname = \"{}\"\n", self.name);
        if let Some(description) = &self.description {
            text.push_str(&format!("description = \"{description}\"\n"));
        }
        if self.takes_id {
            text.push_str("parameters = { type = \"object\", properties = { id = { type = \"string\" } } }\n");
        }
        text.push_str(&format!("url = \"{}\"\npermission = \"{}\"\n", self.url, self.permission));
        if let Some(retry) = self.retry_on_takeover {
            text.push_str(&format!("retry_on_takeover = {retry}\n"));
        }
        text
    }
}

/// A tenant (`[[tenants]]`) with an HS256 key.
#[derive(Clone, Debug)]
pub struct Tenant {
    pub id: String,
    pub secret: String,
    /// More keys of its table.
    pub toml: String,
}

impl Tenant {
    pub fn new(id: &str, secret: &str) -> Self {
        Self { id: id.to_string(), secret: secret.to_string(), toml: String::new() }
    }
}

/// A model alias (`[models.<alias>]`); every provider but `demo` is served
/// by the test's mock upstream.
#[derive(Clone, Debug)]
pub struct Model {
    pub alias: &'static str,
    pub provider: &'static str,
    /// The upstream's model name.
    pub model: &'static str,
}

impl Model {
    pub const DEMO: Self = Self { alias: "demo", provider: "demo", model: "" };
    pub const MOCK: Self = Self { alias: "mock", provider: "openai", model: "mock-model" };
    pub const CLAUDE: Self = Self { alias: "claude", provider: "anthropic", model: "mock-claude" };
}

/// A whole configuration, section by section.
#[derive(Clone, Debug)]
pub struct TestConfig {
    pub listen: String,
    pub replica_id: String,
    /// More keys of `[server]` (and tables below it, such as `[server.cors]`).
    pub server_toml: String,
    /// Where sessions live: `redis_url = "…"`, `redis_cluster = […]`, or
    /// nothing (the in-memory store).
    pub store: String,
    /// Shared by the replicas of one test; unique per test.
    pub key_prefix: String,
    pub lease_ttl_secs: u64,
    /// More keys of `[store]`.
    pub store_toml: String,
    pub tenants: Vec<Tenant>,
    /// `http://127.0.0.1:PORT/v1`, the mock model's.
    pub upstream: String,
    pub models: Vec<Model>,
    /// The keys of `[agent]`.
    pub agent_toml: String,
    pub tools: Vec<Tool>,
    /// More tables, appended.
    pub extra_toml: String,
}

impl TestConfig {
    /// One tenant, `tenant` with `secret`, and the models, on `upstream`;
    /// the in-memory store until [`TestConfig::store`] is set.
    pub fn new(replica_id: &str, upstream: String, tenant: Tenant, models: Vec<Model>) -> Self {
        Self {
            listen: "127.0.0.1:0".to_string(),
            replica_id: replica_id.to_string(),
            server_toml: String::new(),
            store: String::new(),
            key_prefix: String::new(),
            lease_ttl_secs: 10,
            store_toml: String::new(),
            tenants: vec![tenant],
            upstream,
            models,
            agent_toml: String::new(),
            tools: Vec::new(),
            extra_toml: String::new(),
        }
    }

    /// The `[store]` line of one Redis.
    pub fn redis(url: &str) -> String {
        format!("redis_url = \"{url}\"")
    }

    /// The `[store]` line of a Redis Cluster.
    pub fn redis_cluster(seeds: &[String]) -> String {
        format!("redis_cluster = {seeds:?}")
    }

    /// The tenant `id`, for adding keys to its table.
    pub fn tenant_mut(&mut self, id: &str) -> &mut Tenant {
        self.tenants.iter_mut().find(|t| t.id == id).expect("a tenant of the configuration")
    }

    pub fn render(&self) -> String {
        let mut text = format!(
            "[server]\nlisten = \"{}\"\nreplica_id = \"{}\"\n{}\n\n[store]\n{}\nkey_prefix = \"{}\"\nlease_ttl_secs = {}\n{}\n",
            self.listen,
            self.replica_id,
            self.server_toml,
            self.store,
            self.key_prefix,
            self.lease_ttl_secs,
            self.store_toml,
        );
        for tenant in &self.tenants {
            text.push_str(&format!(
                "\n[[tenants]]\nid = \"{}\"\njwt = {{ hs256_secret = \"{}\" }}\n{}\n",
                tenant.id, tenant.secret, tenant.toml
            ));
        }
        for model in &self.models {
            text.push_str(&format!("\n[models.{}]\nprovider = \"{}\"\n", model.alias, model.provider));
            if model.provider != "demo" {
                text.push_str(&format!(
                    "base_url = \"{}\"\nmodel = \"{}\"\nretry_base_ms = 10\n",
                    self.upstream, model.model
                ));
            }
        }
        text.push_str(&format!("\n[agent]\n{}\n", self.agent_toml));
        for tool in &self.tools {
            text.push_str(&tool.render());
        }
        text.push('\n');
        text.push_str(&self.extra_toml);
        text
    }
}
