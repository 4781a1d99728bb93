//! Two replicas of the real app, A and B, in this process, sharing one Redis
//! key prefix (as the API tests do), plus the HTTP client that drives them.
//! Each replica may connect as its own Redis ACL user, so `CLIENT LIST` can
//! tell its connections apart from the other replica's and the benchmark's.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use reqwest::Response;
use serde_json::{Value, json};
use switchboard::{app::Application, auth, config::Config, sessions::TurnRunner};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{
    Result,
    procs::{SECRET, TENANT},
};

/// How long a stopping replica may take before it is abandoned.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What the replicas share.
pub struct ClusterOptions {
    pub key_prefix: String,
    pub event_log_max_len: u64,
    /// More configuration (tenants, say), appended to the replicas' own.
    pub extra_toml: String,
}

pub struct Replica {
    pub name: String,
    pub addr: SocketAddr,
    config: Arc<Config>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
}

impl Replica {
    /// Builds and serves a replica named `name`, connecting to `redis_url`.
    pub async fn start(
        name: &str,
        redis_url: &str,
        options: &ClusterOptions,
        runner: Arc<dyn TurnRunner>,
    ) -> Result<Self> {
        let text = format!(
            r#"
[server]
listen = "127.0.0.1:0"
replica_id = "{name}"
shutdown_grace_secs = 1

[store]
redis_url = "{redis_url}"
key_prefix = "{prefix}"
event_log_max_len = {max_len}

[[tenants]]
id = "{TENANT}"
jwt = {{ hs256_secret = "{SECRET}" }}

[models.demo]
provider = "demo"

{extra}
"#,
            prefix = options.key_prefix,
            max_len = options.event_log_max_len,
            extra = options.extra_toml,
        );
        let config = Config::from_toml(&text, &|_| None).map_err(|e| format!("benchmark configuration: {e}"))?;
        let app = Application::build_with_runner(config, Some(runner)).await?;
        let addr = app.local_addr();
        let config = app.state().config.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        Ok(Self { name: name.to_string(), addr, config, stop: Some(stop), server })
    }

    /// `http://host:port`, what [`Client`] calls take.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A token for the benchmark's tenant that this replica accepts.
    pub fn token(&self) -> Result<String> {
        self.token_for(TENANT, "loadgen")
    }

    /// A token for `subject` of `tenant` (an HMAC tenant of the configuration).
    pub fn token_for(&self, tenant: &str, subject: &str) -> Result<String> {
        let tenant = self.config.tenants.get(tenant).ok_or_else(|| format!("no tenant {tenant:?}"))?;
        Ok(auth::mint_token(tenant, subject, Duration::from_secs(3600), &[])?)
    }

    /// Stops the replica the way SIGTERM does and waits (bounded) for it.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(STOP_TIMEOUT, &mut self.server).await {
            Ok(joined) => Ok(joined??),
            Err(_) => {
                self.server.abort();
                Err(format!("replica {} did not stop within {STOP_TIMEOUT:?}", self.name).into())
            }
        }
    }
}

/// The HTTP side: one client, one token, every call the benchmark makes.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    token: String,
    keep_alive: bool,
}

impl Client {
    pub fn new(token: String) -> Result<Self> {
        Self::build(token, true)
    }

    /// The same client, but every request opens a new TCP connection.
    pub fn without_keep_alive(&self) -> Result<Self> {
        Self::build(self.token.clone(), false)
    }

    pub fn keeps_alive(&self) -> bool {
        self.keep_alive
    }

    fn build(token: String, keep_alive: bool) -> Result<Self> {
        // No overall timeout: SSE bodies are long. Readers time out per frame.
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        if !keep_alive {
            builder = builder.pool_max_idle_per_host(0);
        }
        Ok(Self { http: builder.build()?, token, keep_alive })
    }

    /// `POST /v1/sessions {model: "demo"}` on the replica at `base`; the new
    /// session's id.
    pub async fn create_session(&self, base: &str) -> Result<String> {
        let response = self
            .http
            .post(format!("{base}/v1/sessions"))
            .bearer_auth(&self.token)
            .json(&json!({"model": "demo"}))
            .send();
        let response = expect_success(response.await?).await?;
        let body: Value = response.json().await?;
        Ok(body["id"].as_str().ok_or("no id in the created session")?.to_string())
    }

    /// `POST /v1/sessions/{id}/messages`: starts a turn; the answer is its SSE.
    pub async fn send_message(&self, base: &str, id: &str, content: &str) -> Result<Response> {
        let url = format!("{base}/v1/sessions/{id}/messages");
        let response = self.http.post(url).bearer_auth(&self.token).json(&json!({"content": content})).send();
        expect_success(response.await?).await
    }

    /// `GET /v1/sessions/{id}/events` with `Last-Event-ID: cursor`.
    pub async fn events(&self, base: &str, id: &str, cursor: u64) -> Result<Response> {
        let url = format!("{base}/v1/sessions/{id}/events");
        let response = self.http.get(url).bearer_auth(&self.token).header("last-event-id", cursor.to_string()).send();
        expect_success(response.await?).await
    }
}

async fn expect_success(response: Response) -> Result<Response> {
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    Err(format!("HTTP {status}: {body}").into())
}
