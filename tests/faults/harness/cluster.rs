//! [`Cluster`]: what one fault test runs against — its own Redis, a
//! deterministic upstream, a tool server and N replicas sharing a key prefix
//! — with one method per endpoint the tests use (native, and llm-gateway's
//! `POST /chat` and relay answer).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{
    client::{Dialect, FollowSpec, Follower},
    config::{self, ReplicaConfig, Tool},
    redis::OwnRedis,
    redis_cluster::OwnRedisCluster,
    replica::Replica,
    resp_proxy::HidingProxy,
    tools::ToolServer,
    transcript::Transcript,
    upstream::DetUpstream,
};

/// How a cluster is built.
pub struct ClusterOptions {
    pub replicas: usize,
    pub lease_ttl_secs: u64,
    pub shutdown_grace_secs: u64,
    /// How long a SIGTERMed replica keeps answering (readiness: 503).
    pub drain_delay_secs: u64,
    pub persistent_redis: bool,
    /// Pause between upstream chunks, and before the first one.
    pub chunk_delay: Duration,
    pub first_token_delay: Duration,
    /// `(name, min delay, max delay, retry_on_takeover)`
    pub tools: Vec<(&'static str, Duration, Duration, Option<bool>)>,
    /// More keys of the tenant's table (`default_tools`), of `[agent]`, and
    /// more tables (`[sandbox]`), the same for every replica (see
    /// [`ReplicaConfig`]).
    pub tenant_toml: String,
    pub agent_toml: String,
    pub extra_toml: String,
    /// More keys of `[store]` (`commit_linger_ms = 100`).
    pub store_toml: String,
    /// Run on a Redis Cluster of the test's own instead of one Redis.
    pub redis_cluster: Option<ClusterShape>,
    /// Reach the test's one Redis over TLS (`rediss://`, `[store.tls]`
    /// with its private CA and a client certificate).
    pub redis_tls: bool,
    /// Reach the test's one Redis through a proxy that hides subscriptions
    /// from `PUBSUB NUMSUB` ([`HidingProxy`]).
    pub hide_subscriptions: bool,
}

/// A Redis Cluster for [`ClusterOptions::redis_cluster`].
#[derive(Clone, Copy, Debug)]
pub struct ClusterShape {
    pub primaries: usize,
    pub replicas_per_primary: usize,
    /// `[store] wait_replicas`.
    pub wait_replicas: u32,
}

impl ClusterShape {
    /// Three primaries, no replicas.
    pub const THREE_PRIMARIES: Self = Self { primaries: 3, replicas_per_primary: 0, wait_replicas: 0 };
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            replicas: 3,
            lease_ttl_secs: 2,
            shutdown_grace_secs: 5,
            drain_delay_secs: 0,
            persistent_redis: false,
            chunk_delay: Duration::from_millis(30),
            first_token_delay: Duration::ZERO,
            tools: Vec::new(),
            tenant_toml: String::new(),
            agent_toml: String::new(),
            extra_toml: String::new(),
            store_toml: String::new(),
            redis_cluster: None,
            redis_tls: false,
            hide_subscriptions: false,
        }
    }
}

pub struct Cluster {
    /// The test's own Redis, unless it runs on `redis_cluster`.
    redis: Option<OwnRedis>,
    pub redis_cluster: Option<OwnRedisCluster>,
    pub upstream: DetUpstream,
    pub tools: ToolServer,
    pub replicas: Vec<Replica>,
    pub token: String,
    http: reqwest::Client,
    _proxy: Option<HidingProxy>,
}

/// Replica ids, in order.
const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

impl Cluster {
    pub async fn start(options: ClusterOptions) -> Self {
        let (redis, redis_cluster, store) = match options.redis_cluster {
            Some(shape) => {
                let cluster = OwnRedisCluster::start(shape.primaries, shape.replicas_per_primary).await;
                let store = format!("redis_cluster = {:?}\nwait_replicas = {}", cluster.seeds(), shape.wait_replicas);
                (None, Some(cluster), store)
            }
            None if options.redis_tls => {
                let redis = OwnRedis::start_tls().await;
                let certs = redis.certificates();
                let store = format!(
                    "redis_url = \"{}\"\ntls = {{ ca_file = {:?}, cert_file = {:?}, key_file = {:?} }}",
                    redis.tls_url(),
                    certs.path("ca.pem"),
                    certs.path("client.pem"),
                    certs.path("client.key")
                );
                (Some(redis), None, store)
            }
            None => {
                let redis =
                    if options.persistent_redis { OwnRedis::start_persistent().await } else { OwnRedis::start().await };
                let store = format!("redis_url = \"{}\"", redis.url());
                (Some(redis), None, store)
            }
        };
        let (store, proxy) = match (&redis, options.hide_subscriptions) {
            (Some(redis), true) => {
                let addr = redis.url().trim_start_matches("redis://").parse().expect("a redis address");
                let proxy = HidingProxy::start(addr).await;
                (format!("redis_url = \"{}\"", proxy.url()), Some(proxy))
            }
            _ => (store, None),
        };
        let store = format!("{store}\n{}", options.store_toml);
        let upstream = DetUpstream::start(options.chunk_delay, options.first_token_delay).await;
        let delays: Vec<(&str, Duration, Duration)> =
            options.tools.iter().map(|(name, min, max, _)| (*name, *min, *max)).collect();
        let tools = ToolServer::start_with_delays(&delays).await;
        let tool_specs: Vec<Tool> = options
            .tools
            .iter()
            .map(|(name, _, _, retry)| {
                let tool = Tool::allowed(name, tools.url(name)).described(&format!("{name} something"));
                tool.taking_id().retry_on_takeover(*retry)
            })
            .collect();
        let key_prefix = format!("sbfault:{}:", uuid::Uuid::new_v4().simple());
        let configs: Vec<ReplicaConfig> = NAMES[..options.replicas]
            .iter()
            .map(|name| ReplicaConfig {
                replica_id: name.to_string(),
                store: store.clone(),
                key_prefix: key_prefix.clone(),
                lease_ttl_secs: options.lease_ttl_secs,
                shutdown_grace_secs: options.shutdown_grace_secs,
                drain_delay_secs: options.drain_delay_secs,
                upstream_base_url: upstream.base_url(),
                tools: tool_specs.clone(),
                max_iterations: 10,
                server_toml: String::new(),
                tenant_toml: options.tenant_toml.clone(),
                agent_toml: options.agent_toml.clone(),
                extra_toml: options.extra_toml.clone(),
            })
            .collect();
        // Started together: each waits for its own readiness.
        let replicas = futures::future::join_all(configs.into_iter().map(Replica::start)).await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("an HTTP client");
        Self { redis, redis_cluster, upstream, tools, replicas, token: config::token(), http, _proxy: proxy }
    }

    /// The value of the metric sample `sample` (its name and labels as
    /// exposed, `switchboard_takeovers_total`) on replica `on`; 0 when it
    /// is not exposed yet.
    pub async fn metric(&self, on: usize, sample: &str) -> f64 {
        let text = self
            .http
            .get(self.replicas[on].url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics text");
        text.lines().find_map(|line| line.strip_prefix(sample)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
    }

    /// The test's own Redis, to freeze and thaw.
    pub fn redis_ref(&self) -> &OwnRedis {
        self.redis.as_ref().expect("this test runs on one Redis of its own")
    }

    /// The test's own Redis (tests that freeze or restart it run on one).
    pub fn redis(&mut self) -> &mut OwnRedis {
        self.redis.as_mut().expect("this test runs on one Redis of its own")
    }

    /// The replicas' base URLs, the follower's rejoin list.
    pub fn urls(&self) -> Vec<String> {
        self.replicas.iter().map(Replica::base_url).collect()
    }

    /// Index of the replica named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.replicas.iter().position(|r| r.name == name)
    }

    /// `POST /v1/sessions {"model":"mock"}` on replica `on`; the session id.
    pub async fn create_session(&self, on: usize) -> String {
        let response = self
            .http
            .post(self.replicas[on].url("/v1/sessions"))
            .bearer_auth(&self.token)
            .json(&json!({"model": config::MODEL}))
            .send()
            .await
            .expect("create a session");
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::CREATED, "creating a session: {body}\n{}", self.dump_logs());
        body["id"].as_str().expect("a session id").to_string()
    }

    /// `POST /v1/sessions/{id}/messages` on replica `on`: the turn's stream,
    /// once its head arrived (200 asserted).
    pub async fn start_turn(&self, on: usize, session_id: &str, content: &str) -> reqwest::Response {
        let path = format!("/v1/sessions/{session_id}/messages");
        self.post_stream(on, &path, &json!({"content": content}), "a turn").await
    }

    /// POSTs `body` to `path` on replica `on` and returns the response, a
    /// stream, once its head arrived (200 asserted; the logs dumped if not).
    async fn post_stream(&self, on: usize, path: &str, body: &Value, what: &str) -> reqwest::Response {
        // No overall timeout: the body is the stream.
        let client = reqwest::Client::new();
        let request = client.post(self.replicas[on].url(path)).bearer_auth(&self.token).json(body).send();
        let response = tokio::time::timeout(Duration::from_secs(10), request)
            .await
            .unwrap_or_else(|_| panic!("{what}'s head in time"))
            .expect("send");
        if response.status() != StatusCode::OK {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            panic!("starting {what} on {}: {status} {body}\n{}", self.replicas[on].name, self.dump_logs());
        }
        response
    }

    /// Starts a turn on replica `on` and follows it (from the turn's own
    /// stream, then rejoining any replica) for at most `timeout`.
    pub async fn start_and_follow(&self, on: usize, session_id: &str, content: &str, timeout: Duration) -> Follower {
        let cursor = self.last_seq(session_id).await;
        let first = self.start_turn(on, session_id, content).await;
        Follower::spawn(FollowSpec {
            urls: self.urls(),
            token: self.token.clone(),
            session_id: session_id.to_string(),
            cursor,
            first: Some(first),
            start: on,
            timeout,
            dialect: Dialect::Native,
        })
    }

    /// `POST /chat` (llm-gateway) with `body` on replica `on`: the chat's
    /// stream, once its head arrived (200 asserted).
    pub async fn start_chat(&self, on: usize, body: &Value) -> reqwest::Response {
        self.post_stream(on, "/chat", body, "a chat").await
    }

    /// Starts a chat on replica `on` and follows it in llm-gateway's
    /// dialect (its stream, then rejoining any replica with
    /// `?format=llm-gateway`) for at most `timeout`.
    pub async fn chat_and_follow(&self, on: usize, body: &Value, timeout: Duration) -> Follower {
        let first = self.start_chat(on, body).await;
        Follower::spawn(FollowSpec {
            urls: self.urls(),
            token: self.token.clone(),
            // The chat makes a fresh session: its `connected` frame names it.
            session_id: String::new(),
            cursor: 0,
            first: Some(first),
            start: on,
            timeout,
            dialect: Dialect::LlmGateway,
        })
    }

    /// `POST /v1/sessions/{id}/relays/{relay_id}` on replica `on`: the
    /// status and the body.
    pub async fn decide_relay(
        &self,
        on: usize,
        session_id: &str,
        relay_id: &str,
        approved: bool,
    ) -> (StatusCode, Value) {
        let path = format!("/v1/sessions/{session_id}/relays/{relay_id}");
        self.post_json(on, &path, &json!({"approved": approved})).await
    }

    /// llm-gateway's `POST /chat/relay/{relay_id}` on replica `on`: the
    /// status and the body.
    pub async fn answer_chat_relay(
        &self,
        on: usize,
        session_id: &str,
        relay_id: &str,
        approved: bool,
    ) -> (StatusCode, Value) {
        let body = json!({"sessionId": session_id, "response": {"approved": approved}});
        self.post_json(on, &format!("/chat/relay/{relay_id}"), &body).await
    }

    /// The session's whole event log as replica `on` replays it
    /// (`GET /v1/sessions/{id}/events` from seq 0, up to its first
    /// `turn_ended` or `paused`).
    pub async fn event_log(&self, on: usize, session_id: &str) -> Transcript {
        Follower::spawn(FollowSpec {
            urls: vec![self.replicas[on].base_url()],
            token: self.token.clone(),
            session_id: session_id.to_string(),
            cursor: 0,
            first: None,
            start: 0,
            timeout: Duration::from_secs(10),
            dialect: Dialect::Native,
        })
        .finish()
        .await
    }

    /// `GET /v1/sessions/{id}/workspace?format=json` on replica `on`.
    pub async fn workspace(&self, on: usize, session_id: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .get(self.replicas[on].url(&format!("/v1/sessions/{session_id}/workspace?format=json")))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("fetch a workspace");
        (response.status(), response.json().await.unwrap_or(Value::Null))
    }

    /// `GET /v1/sessions/{id}` from the first replica that answers 200.
    pub async fn session_view(&self, session_id: &str) -> Option<Value> {
        for replica in &self.replicas {
            let response = self
                .http
                .get(replica.url(&format!("/v1/sessions/{session_id}")))
                .bearer_auth(&self.token)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(response) = response
                && response.status() == StatusCode::OK
                && let Ok(body) = response.json::<Value>().await
            {
                return Some(body);
            }
        }
        None
    }

    /// The session's `last_seq` (0 for a new session).
    pub async fn last_seq(&self, session_id: &str) -> u64 {
        self.session_view(session_id).await.and_then(|v| v["last_seq"].as_u64()).unwrap_or(0)
    }

    /// The index of the replica the session view names as its owner
    /// (`replica`), if the field is there and names one of ours.
    pub async fn owner_of(&self, session_id: &str) -> Option<usize> {
        let view = self.session_view(session_id).await?;
        view["replica"].as_str().and_then(|name| self.index_of(name))
    }

    /// `POST {path}` with a JSON body on replica `on`: the status and the
    /// body (`null` when it is not JSON).
    async fn post_json(&self, on: usize, path: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(self.replicas[on].url(path))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path} on {}: {e}", self.replicas[on].name));
        (response.status(), response.json().await.unwrap_or(Value::Null))
    }

    /// Every replica's log tail, and Redis's.
    pub fn dump_logs(&self) -> String {
        let mut out: Vec<String> = self.replicas.iter().map(Replica::dump_logs).collect();
        if let Some(redis) = &self.redis {
            out.push(format!("---- redis log tail ----\n{}", redis.log_tail()));
        }
        if let Some(cluster) = &self.redis_cluster {
            out.push(format!("---- redis cluster log tails ----\n{}", cluster.log_tail()));
        }
        out.join("\n")
    }
}
