//! `spawn_app` and friends: each test gets the real app on port 0, its own
//! Redis key prefix (so tests run in parallel against one Redis), its own
//! scripted mock upstream, and a client with one method per endpoint.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use reqwest::{Response, StatusCode};
use serde_json::Value;
use switchboard::{
    app::Application,
    auth,
    config::Config,
    sessions::{Sessions, TurnRunner},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::{
    mock_upstream::MockUpstream,
    test_config::{Model, Tenant, TestConfig, Tool},
};

/// Redis used by the tests; `.ci/run` makes sure one answers here.
pub fn redis_url() -> String {
    std::env::var("SWITCHBOARD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

/// Seed nodes of the Redis Cluster used by the tests (three primaries;
/// `.ci/run` starts them on 127.0.0.1:7000-7002 if none answers).
pub fn redis_cluster_seeds() -> Vec<String> {
    std::env::var("SWITCHBOARD_TEST_REDIS_CLUSTER")
        .unwrap_or_else(|_| "redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002".to_string())
        .split(',')
        .map(|seed| seed.trim().to_string())
        .collect()
}

pub const ACME_SECRET: &str = "acme-test-secret-0123456789";
pub const GLOBEX_SECRET: &str = "globex-test-secret-0123456789";

/// Options for [`spawn_app_with`].
pub struct AppOptions {
    /// `None` (and no `redis_cluster`) runs the in-memory store.
    pub redis_url: Option<String>,
    /// A Redis Cluster's seeds instead (`store.redis_cluster`).
    pub redis_cluster: Option<Vec<String>>,
    /// Shared by replicas of one test; unique per test.
    pub key_prefix: String,
    pub replica_id: String,
    /// HTTP tools (`[[tools]]`).
    pub tools: Vec<Tool>,
    /// Extra TOML appended to the test configuration.
    pub extra_toml: String,
    /// Extra keys of a tenant's table (`acme` or `globex`): (tenant, TOML lines).
    pub tenant_toml: Vec<(String, String)>,
    /// Extra keys of the `[server]` table.
    pub server_toml: String,
    /// Runs turns instead of the orchestrator.
    pub runner: Option<Arc<dyn TurnRunner>>,
    pub lease_ttl_secs: u64,
    pub event_log_max_len: u64,
    pub relay_timeout_secs: u64,
    pub max_iterations: u32,
    pub max_depth: u32,
    /// `[agent] titles`. Off unless a test asks: a title call would take a
    /// scripted upstream reply meant for a turn (the mock answers in order).
    pub titles: bool,
}

impl Default for AppOptions {
    fn default() -> Self {
        Self {
            redis_url: Some(redis_url()),
            redis_cluster: None,
            key_prefix: unique_prefix(),
            replica_id: "a".to_string(),
            tools: Vec::new(),
            extra_toml: String::new(),
            tenant_toml: Vec::new(),
            server_toml: String::new(),
            runner: None,
            lease_ttl_secs: 10,
            event_log_max_len: 10_000,
            relay_timeout_secs: 30,
            max_iterations: 10,
            max_depth: 2,
            titles: false,
        }
    }
}

/// The configuration of [`spawn_replica`]: tenants `acme` and `globex`
/// (which may use `demo` only), the `demo` model and the mock upstream's
/// `mock` (OpenAI) and `claude` (Anthropic).
fn test_config(options: &AppOptions, upstream: String) -> TestConfig {
    let mut config = TestConfig::new(
        &options.replica_id,
        upstream,
        Tenant::new("acme", ACME_SECRET),
        vec![Model::DEMO, Model::MOCK, Model::CLAUDE],
    );
    let mut globex = Tenant::new("globex", GLOBEX_SECRET);
    globex.toml = "models = [\"demo\"]\ndefault_model = \"demo\"\n".to_string();
    config.tenants.push(globex);
    for (tenant, lines) in &options.tenant_toml {
        config.tenant_mut(tenant).toml.push_str(&format!("{lines}\n"));
    }
    config.server_toml = format!("shutdown_grace_secs = 2\n{}", options.server_toml);
    config.store = match (&options.redis_url, &options.redis_cluster) {
        (_, Some(seeds)) => TestConfig::redis_cluster(seeds),
        (Some(url), None) => TestConfig::redis(url),
        (None, None) => String::new(),
    };
    config.key_prefix = options.key_prefix.clone();
    config.lease_ttl_secs = options.lease_ttl_secs;
    config.store_toml = format!("event_log_max_len = {}", options.event_log_max_len);
    // What requests without a model get (acme: the first of its models).
    config.agent_toml = format!(
        "default_model = \"claude\"\nrelay_timeout_secs = {}\nmax_iterations = {}\nmax_depth = {}\ntitles = {}",
        options.relay_timeout_secs, options.max_iterations, options.max_depth, options.titles
    );
    config.tools = options.tools.clone();
    config.extra_toml = options.extra_toml.clone();
    config
}

pub fn unique_prefix() -> String {
    format!("sbtest:{}:", uuid::Uuid::new_v4().simple())
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub config: Arc<Config>,
    pub client: reqwest::Client,
    pub upstream: Arc<MockUpstream>,
    pub sessions: Sessions,
    shutdown: CancellationToken,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

/// The app with Redis, tenants `acme` and `globex`, the `demo` model and a
/// `mock` model served by a fresh scripted upstream.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(AppOptions::default()).await
}

pub async fn spawn_app_with(options: AppOptions) -> TestApp {
    let upstream = Arc::new(MockUpstream::start().await);
    spawn_replica(options, upstream).await
}

/// Starts an app that uses an existing upstream: replicas of one test share
/// Redis (through `options.key_prefix`) and one mock upstream.
pub async fn spawn_replica(options: AppOptions, upstream: Arc<MockUpstream>) -> TestApp {
    let text = test_config(&options, upstream.base_url()).render();
    let config = Config::from_toml(&text, &|_| None).expect("the test configuration is valid");
    let app = Application::build_with_runner(config, options.runner).await.expect("the app starts");
    let addr = app.local_addr();
    let config = app.state().config.clone();
    let sessions = app.state().sessions.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let server = tokio::spawn(app.run_until_stopped(async move { stop.cancelled().await }));
    TestApp { addr, sessions, config, client: reqwest::Client::new(), upstream, shutdown, server: Some(server) }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// A valid token for `subject` of `tenant`.
    pub fn token(&self, tenant: &str, subject: &str) -> String {
        self.token_with(tenant, subject, Duration::from_secs(600), &[])
    }

    pub fn token_with(&self, tenant: &str, subject: &str, ttl: Duration, scopes: &[&str]) -> String {
        let tenant = &self.config.tenants[tenant];
        let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        auth::mint_token(tenant, subject, ttl, &scopes).expect("signing works")
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Response {
        let mut request = self.client.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("request sent")
    }

    pub async fn post_json(&self, path: &str, token: Option<&str>, body: &Value) -> Response {
        let mut request = self.client.post(self.url(path)).json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("request sent")
    }

    pub async fn get_healthz(&self) -> Response {
        self.get("/healthz", None).await
    }

    pub async fn get_readyz(&self) -> Response {
        self.get("/readyz", None).await
    }

    pub async fn get_holmes_models(&self, token: Option<&str>) -> Response {
        self.get("/api/model", token).await
    }

    /// Stops the app the way SIGTERM does, and waits for it.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.await.expect("the server task ends").expect("the server stops cleanly");
        }
    }
}

impl TestApp {
    /// Stops the app abruptly, as if its process died: no stream is ended
    /// cleanly, no lease is handed off (they expire by TTL).
    pub fn kill(mut self) {
        self.sessions.halt();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }

    /// Creates a native session and returns its id.
    pub async fn create_session(&self, token: &str, model: &str) -> String {
        let response = self.post_json("/v1/sessions", Some(token), &serde_json::json!({"model": model})).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    /// Starts a turn; the answer is the turn's SSE stream.
    pub async fn send_message(&self, token: &str, id: &str, content: &str) -> Response {
        self.post_json(&format!("/v1/sessions/{id}/messages"), Some(token), &serde_json::json!({"content": content}))
            .await
    }

    /// `GET /v1/sessions/{id}/events` with an optional `Last-Event-ID`.
    pub async fn events(&self, token: &str, id: &str, last_event_id: Option<u64>) -> Response {
        let mut request = self.client.get(self.url(&format!("/v1/sessions/{id}/events"))).bearer_auth(token);
        if let Some(cursor) = last_event_id {
            request = request.header("last-event-id", cursor.to_string());
        }
        request.send().await.expect("request sent")
    }

    pub async fn tool_results(&self, token: &str, id: &str, body: &Value) -> Response {
        self.post_json(&format!("/v1/sessions/{id}/tool-results"), Some(token), body).await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Asserts the standard JSON error body and returns it. On a Holmes route
/// (`/api/…`), whose body is FastAPI's `{"detail": "…"}` without a code, it
/// asserts that shape instead (the status stands for the code) and returns
/// the detail as `error.message` of the standard shape, so callers read it
/// in one place.
pub async fn assert_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let request_id = response.headers().get("x-request-id").cloned().expect("a request id on every response");
    if response.url().path().starts_with("/api/") {
        let body: Value = response.json().await.expect("a JSON error body");
        let detail = body["detail"].as_str().unwrap_or_else(|| panic!("not a FastAPI error body: {body}"));
        assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
        return serde_json::json!({"error": {"code": code, "message": detail, "request_id": request_id.to_str().unwrap()}});
    }
    let body: Value = response.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert_eq!(body["error"]["request_id"], request_id.to_str().unwrap(), "{body}");
    body
}

/// The store replicas of a test share: the one Redis, or the three-primary
/// Redis Cluster.
#[derive(Clone, Copy, Debug)]
pub enum SharedStore {
    Redis,
    Cluster,
}

impl SharedStore {
    pub fn apply(self, options: &mut AppOptions) {
        if let SharedStore::Cluster = self {
            options.redis_url = None;
            options.redis_cluster = Some(redis_cluster_seeds());
        }
    }
}

/// Runs each `async fn $name(store: SharedStore)` of the calling module as
/// two tests, `$name::redis` and `$name::redis_cluster`: the tests of
/// several replicas, on one Redis and on a Redis Cluster.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::helpers::SharedStore;

            #[tokio::test]
            async fn redis() {
                super::$name(SharedStore::Redis).await
            }

            #[tokio::test]
            async fn redis_cluster() {
                super::$name(SharedStore::Cluster).await
            }
        }
    )*};
}

pub(crate) use on_both_stores;

/// `n` replicas (`a`, `b`, `c`) sharing one Redis prefix and one mock
/// upstream; `tweak` adjusts each replica's options.
pub async fn spawn_replicas(n: usize, tweak: impl Fn(&mut AppOptions)) -> Vec<TestApp> {
    let prefix = unique_prefix();
    let upstream = Arc::new(MockUpstream::start().await);
    let mut apps = Vec::new();
    for name in ["a", "b", "c"].into_iter().take(n) {
        let mut options =
            AppOptions { key_prefix: prefix.clone(), replica_id: name.to_string(), ..AppOptions::default() };
        tweak(&mut options);
        apps.push(spawn_replica(options, upstream.clone()).await);
    }
    apps
}

/// Every store key of `app`'s prefix with its serialized value (`DUMP`), to
/// show that a refused request changed nothing. The instances' heartbeats
/// (`{prefix}replicas`) and liveness records (`{prefix}live`, written when
/// an instance's subscription is confirmed) and which instances follow a
/// session (the state
/// hash's `fw` and `f:<instance>` fields, written by any stream) are left
/// out: a state hash is compared by its other fields.
pub async fn store_snapshot(app: &TestApp) -> std::collections::BTreeMap<String, Vec<u8>> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = &app.config.store.key_prefix;
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}*")).query_async(&mut conn).await.unwrap();
    let instances = [format!("{prefix}replicas"), format!("{prefix}live")];
    let mut snapshot = std::collections::BTreeMap::new();
    for key in keys.into_iter().filter(|k| !instances.contains(k)) {
        let value = if key.ends_with(":state") {
            let fields: std::collections::BTreeMap<String, Vec<u8>> =
                redis::cmd("HGETALL").arg(&key).query_async(&mut conn).await.unwrap();
            let kept = fields.into_iter().filter(|(f, _)| f != "fw" && !f.starts_with("f:"));
            kept.flat_map(|(f, v)| [f.into_bytes(), vec![0], v, vec![0]].concat()).collect()
        } else {
            let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(&key).query_async(&mut conn).await.unwrap();
            value.unwrap_or_default()
        };
        snapshot.insert(key, value);
    }
    snapshot
}

/// Asserts a HolmesGPT (FastAPI) error body, `{"detail": "<message>"}`, and
/// returns the message.
pub async fn assert_detail(response: Response, status: StatusCode) -> String {
    assert_eq!(response.status(), status);
    assert!(response.headers().get("x-request-id").is_some(), "a request id on every response");
    let body: Value = response.json().await.expect("a JSON error body");
    let detail = body["detail"].as_str().unwrap_or_else(|| panic!("not a FastAPI error body: {body}"));
    assert!(!detail.is_empty(), "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    detail.to_string()
}

/// Asserts FastAPI's 422 validation list and returns its one entry
/// (`{loc, msg, type}`).
pub async fn assert_invalid(response: Response) -> Value {
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.expect("a JSON error body");
    let list = body["detail"].as_array().unwrap_or_else(|| panic!("not a FastAPI validation list: {body}"));
    assert_eq!(list.len(), 1, "{body}");
    let entry = list[0].clone();
    assert_eq!(entry["loc"][0], "body", "{body}");
    assert!(entry["msg"].as_str().is_some_and(|m| !m.is_empty()) && entry["type"].is_string(), "{body}");
    entry
}

/// The `api_keys` entry that accepts `key` for `subject` (TOML).
pub fn api_key_entry(key: &str, subject: &str) -> String {
    let digest: String = switchboard::config::access::digest(key).iter().map(|b| format!("{b:02x}")).collect();
    format!("{{ sha256 = \"{digest}\", subject = \"{subject}\" }}")
}
