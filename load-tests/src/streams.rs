//! One chat as a client sees it, in any of the dialects a scenario drives,
//! or straight against the mock model (the baseline): the request, its SSE
//! read to the end, and the times a user feels — to the first token, between
//! tokens, to the end. Chats reach the server over HTTP/1.1 (a connection
//! per chat in flight) or h2c (many chats multiplexed on one connection):
//! [`Transport`], [`Clients`].

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{
    Result,
    mock::Order,
    native::Native,
    procs::MODEL,
    sse::{Frames, SILENCE},
};

/// Who answers, and in which wire format (`--dialects native,ai-sdk,…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// The mock model itself: OpenAI chunks.
    Direct,
    /// `POST /v1/sessions` (untimed), then `POST /v1/sessions/{id}/messages`.
    Native,
    /// `POST /v1/ai-sdk/chat`: the Vercel AI SDK UI message stream.
    AiSdk,
    /// `POST /chat`: llm-gateway's events.
    LlmGateway,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Native => "native",
            Self::AiSdk => "ai-sdk",
            Self::LlmGateway => "llm-gateway",
        }
    }

    /// The text of a token frame (`event`, `data`), if it is one.
    fn token(self, event: &str, data: &str) -> Option<String> {
        let is_token = match self {
            Self::Direct => data.contains("\"content\""),
            Self::Native => event == "text_delta",
            Self::AiSdk => data.contains("\"text-delta\""),
            Self::LlmGateway => event == "text",
        };
        if !is_token {
            return None;
        }
        let value: Value = serde_json::from_str(data).ok()?;
        let text = match self {
            Self::Direct => &value["choices"][0]["delta"]["content"],
            Self::Native => &value["text"],
            Self::AiSdk => &value["delta"],
            Self::LlmGateway => &value["content"],
        };
        text.as_str().map(str::to_string)
    }
}

/// What one stream delivered, and when.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    /// When the request was sent.
    pub started: Option<Instant>,
    /// From the request to the response's headers (the gateway has started
    /// the turn and subscribed to its events).
    pub headers: Option<Duration>,
    /// From the request to the first token.
    pub first_token: Option<Duration>,
    /// From the request to the end of the stream.
    pub total: Duration,
    /// Between consecutive token frames.
    pub gaps: Vec<Duration>,
    /// From the request to each token's frame, one entry per token (a frame
    /// may carry several): what a sustained run counts inside its window.
    pub arrivals: Vec<Duration>,
    /// The text received.
    pub text: String,
    pub error: Option<String>,
}

impl Timing {
    /// Whether the stream ended without error with exactly the ordered text.
    pub fn complete(&self, order: &Order) -> bool {
        self.error.is_none() && self.text == (1..=order.tokens).map(Order::token).collect::<String>()
    }
}

/// The transport options of a benchmark's command line.
#[derive(Debug, Clone, clap::Args)]
pub struct TransportArgs {
    /// Send the chats over HTTP/2 with prior knowledge (h2c).
    #[arg(long)]
    pub h2c: bool,
    /// With `--h2c`: chats multiplexed on one connection.
    #[arg(long, default_value_t = 100)]
    pub chats_per_connection: usize,
    /// The gateway calls the mock over h2c (`[models.bench] http2 = true`):
    /// one connection for all its calls.
    #[arg(long)]
    pub upstream_h2c: bool,
}

impl TransportArgs {
    /// How the chats reach a server.
    pub fn clients(&self) -> Transport {
        Transport::new(self.h2c, self.chats_per_connection)
    }

    /// How the gateway reaches the mock, for the report.
    pub fn upstream(&self) -> &'static str {
        if self.upstream_h2c { "h2c (one connection)" } else { "HTTP/1.1 (a connection per call in flight)" }
    }
}

/// How chats reach a server (`--h2c`, `--chats-per-connection`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1: a connection per chat in flight, kept alive between chats.
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (h2c), as a load balancer
    /// speaks to the gateway: this many chats multiplexed per connection.
    H2c { chats_per_connection: usize },
}

impl Transport {
    pub fn new(h2c: bool, chats_per_connection: usize) -> Self {
        if h2c { Self::H2c { chats_per_connection: chats_per_connection.max(1) } } else { Self::Http1 }
    }

    pub fn name(self) -> String {
        match self {
            Self::Http1 => "HTTP/1.1".into(),
            Self::H2c { chats_per_connection } => format!("h2c, {chats_per_connection} chats per connection"),
        }
    }
}

/// The HTTP clients of a run: chat `i` goes through [`Clients::get`]`(i)`.
/// For h2c, one `reqwest::Client` per group of chats: a client pools one
/// HTTP/2 connection per host and sends every request over it, so each
/// group is one connection.
#[derive(Clone)]
pub struct Clients {
    clients: Vec<reqwest::Client>,
    chats_per_client: usize,
}

impl Clients {
    /// Clients for up to `chats` chats at once over `transport`.
    pub fn new(transport: Transport, chats: usize) -> Self {
        match transport {
            Transport::Http1 => Self { clients: vec![http_client()], chats_per_client: usize::MAX },
            Transport::H2c { chats_per_connection } => Self {
                clients: (0..chats.div_ceil(chats_per_connection).max(1)).map(|_| h2c_client()).collect(),
                chats_per_client: chats_per_connection,
            },
        }
    }

    /// The client of chat `chat` (chats past those planned share the last).
    pub fn get(&self, chat: usize) -> &reqwest::Client {
        &self.clients[(chat / self.chats_per_client).min(self.clients.len() - 1)]
    }
}

/// Where a client sends its chats.
#[derive(Clone)]
pub struct Target {
    pub clients: Clients,
    /// The gateway's (or for `Direct`, the mock's) `http://host:port`.
    pub base: String,
    pub token: String,
    pub dialect: Dialect,
}

/// An HTTP client for many concurrent streams: one connection each, no
/// request timeout (streams are bounded by [`SILENCE`] instead).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(usize::MAX).tcp_nodelay(true).build().expect("an HTTP client")
}

/// An HTTP client speaking h2c (prior knowledge): one connection per host
/// for all its requests, no request timeout.
fn h2c_client() -> reqwest::Client {
    reqwest::Client::builder().http2_prior_knowledge().tcp_nodelay(true).build().expect("an HTTP/2 client")
}

impl Target {
    /// Prepares chat `chat` (for the native API: creates its session), untimed.
    pub async fn prepare(&self, chat: usize) -> Result<Option<String>> {
        if self.dialect != Dialect::Native {
            return Ok(None);
        }
        let client = Native { http: self.clients.get(chat).clone(), token: self.token.clone() };
        Ok(Some(client.create(&self.base, "relay").await?))
    }

    /// The request of chat `chat` ordering `order` (in the session `prepared`).
    fn request(&self, chat: usize, order: &Order, prepared: Option<&str>) -> reqwest::RequestBuilder {
        let message = order.message();
        let (path, body) = match self.dialect {
            Dialect::Direct => (
                "/v1/chat/completions".to_string(),
                json!({"model": "bench", "stream": true, "messages": [{"role": "user", "content": message}]}),
            ),
            Dialect::Native => {
                (format!("/v1/sessions/{}/messages", prepared.unwrap_or_default()), json!({"content": message}))
            }
            Dialect::AiSdk => (
                "/v1/ai-sdk/chat".to_string(),
                json!({"id": uuid::Uuid::new_v4().to_string(), "trigger": "submit-message", "model": MODEL,
                    "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": message}]}]}),
            ),
            Dialect::LlmGateway => {
                ("/chat".to_string(), json!({"model": MODEL, "messages": [{"role": "user", "content": message}]}))
            }
        };
        let mut request = self.clients.get(chat).post(format!("{}{path}", self.base)).json(&body);
        if self.dialect != Dialect::Direct {
            request = request.bearer_auth(&self.token);
        }
        request
    }

    /// Runs chat `chat` to the end of its stream.
    pub async fn chat(&self, chat: usize, order: &Order, prepared: Option<&str>) -> Timing {
        let started = Instant::now();
        let mut timing = Timing { started: Some(started), ..Timing::default() };
        if let Err(e) = self.read(chat, order, prepared, started, &mut timing).await {
            timing.error = Some(e.to_string());
        }
        timing.total = started.elapsed();
        timing
    }

    async fn read(
        &self,
        chat: usize,
        order: &Order,
        prepared: Option<&str>,
        started: Instant,
        timing: &mut Timing,
    ) -> Result<()> {
        let response = self.request(chat, order, prepared).send().await?;
        timing.headers = Some(started.elapsed());
        if !response.status().is_success() {
            return Err(format!("{}: {}", response.status(), response.text().await.unwrap_or_default()).into());
        }
        let mut frames = Frames::with_silence(response, SILENCE);
        let mut last = started;
        while let Some(frame) = frames.next().await? {
            if let Some(text) = self.dialect.token(&frame.event, &frame.data) {
                let now = Instant::now();
                if timing.first_token.is_none() {
                    timing.first_token = Some(now - started);
                } else {
                    timing.gaps.push(now - last);
                }
                last = now;
                timing.arrivals.extend(std::iter::repeat_n(now - started, text.matches('t').count()));
                timing.text.push_str(&text);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_finds_its_own_token_frames_only() {
        let cases = [
            (Dialect::Direct, "", r#"{"choices":[{"delta":{"content":"t1"}}]}"#, Some("t1")),
            (Dialect::Direct, "", r#"{"choices":[{"delta":{}}],"usage":{}}"#, None),
            (Dialect::Native, "text_delta", r#"{"text":"t1"}"#, Some("t1")),
            (Dialect::Native, "message_completed", r#"{"content":"t1"}"#, None),
            (Dialect::AiSdk, "", r#"{"type":"text-delta","id":"0","delta":"t1"}"#, Some("t1")),
            (Dialect::AiSdk, "", r#"{"type":"text-start","id":"0"}"#, None),
            (Dialect::LlmGateway, "text", r#"{"content":"t1"}"#, Some("t1")),
            (Dialect::LlmGateway, "usage", r#"{"content":"t1"}"#, None),
        ];
        for (dialect, event, data, expected) in cases {
            assert_eq!(dialect.token(event, data).as_deref(), expected, "{dialect:?} {event} {data}");
        }
    }

    #[test]
    fn a_chat_is_complete_only_with_every_token_in_order_and_no_error() {
        let order = Order::parse("tokens:3");
        let timing = |text: &str, error: Option<&str>| Timing {
            text: text.into(),
            error: error.map(str::to_string),
            ..Timing::default()
        };
        assert!(timing("t1 t2 t3", None).complete(&order));
        assert!(!timing("t1 t3", None).complete(&order));
        assert!(!timing("t1 t2 t3 t3", None).complete(&order));
        assert!(!timing("t1 t2 t3", Some("reset")).complete(&order));
    }
}
