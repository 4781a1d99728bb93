//! The bridge's side of HTTP: the gateway's `POST /v1/zot` for commands,
//! and for a turn its answer streamed line by line, rejoined by sequence
//! number (`GET /v1/sessions/{id}/events?format=zot&after=<seq>`) whenever
//! the connection drops before `done`.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Options, error_response, for_harness};

/// Tries to reach the gateway at all (a connection refused: nothing was
/// sent, so trying again is safe).
const CONNECT_TRIES: u32 = 10;
/// How long a turn's stream may stay silent (the gateway sends a
/// heartbeat line every 15 s by default) before it counts as lost.
const SILENCE: Duration = Duration::from_secs(45);
/// How long a turn is rejoined before the bridge gives up on it.
const REJOIN_FOR: Duration = Duration::from_secs(600);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How the bridge authenticates to the gateway.
#[derive(Clone)]
pub enum Credential {
    /// A JWT: `Authorization: Bearer <token>`.
    Token(String),
    /// An API key: `X-API-Key: <key>`.
    ApiKey(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Token(_) => "Token(***)",
            Self::ApiKey(_) => "ApiKey(***)",
        })
    }
}

/// The gateway, as the bridge talks to it.
pub struct Gateway {
    http: reqwest::Client,
    base: String,
    credential: Option<Credential>,
    /// The session, once known (made by the first command that needs it).
    session: Mutex<Option<String>>,
    model: Option<String>,
    reasoning: Option<String>,
    /// A turn is being relayed.
    busy: AtomicBool,
}

/// Why a turn's stream stopped before its `done`.
enum Cut {
    /// Nothing came back: the turn may not have started.
    NoAnswer(String),
    /// The answer started (its `response` line was read) and broke.
    Broken,
}

impl Gateway {
    pub fn new(options: &Options) -> Result<Self, String> {
        let base = options.url.trim_end_matches('/').to_string();
        reqwest::Url::parse(&base).map_err(|e| format!("--url {base:?}: {e}"))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Self {
            http,
            base,
            credential: options.credential.clone(),
            session: Mutex::new(options.session.clone()),
            model: options.model.clone(),
            reasoning: options.reasoning.clone(),
            busy: AtomicBool::new(false),
        })
    }

    /// Whether a turn is being relayed now.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        match &self.credential {
            Some(Credential::Token(token)) => request.bearer_auth(token),
            Some(Credential::ApiKey(key)) => request.header("x-api-key", key),
            None => request,
        }
    }

    /// `POST /v1/zot` with one command line, retried while the gateway
    /// cannot be reached at all.
    async fn post(&self, session: Option<&str>, line: &str, make_model: bool) -> Result<(Response, String), String> {
        let mut url = format!("{}/v1/zot", self.base);
        let mut query = Vec::new();
        if let Some(session) = session {
            query.push(format!("session={}", encode(session)));
        }
        if make_model && let Some(model) = &self.model {
            query.push(format!("model={}", encode(model)));
        }
        if !query.is_empty() {
            url = format!("{url}?{}", query.join("&"));
        }
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=CONNECT_TRIES {
            let request = self.authorized(self.http.post(&url)).header("content-type", "application/x-ndjson");
            match request.body(format!("{line}\n")).send().await {
                Ok(response) => {
                    let session = (response.headers().get("x-session-id").and_then(|v| v.to_str().ok()))
                        .map_or_else(String::new, str::to_string);
                    return Ok((response, session));
                }
                Err(e) if e.is_connect() && attempt < CONNECT_TRIES => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(format!("the gateway did not answer: {e}")),
            }
        }
        Err("the gateway cannot be reached".into())
    }

    /// The session the commands are for, made on first need.
    async fn session(&self) -> Result<String, String> {
        let mut session = self.session.lock().await;
        if let Some(id) = session.as_ref() {
            return Ok(id.clone());
        }
        let (response, id) = self.post(None, r#"{"type":"get_state"}"#, true).await?;
        if !response.status().is_success() || id.is_empty() {
            return Err(refusal(response).await);
        }
        if let Some(level) = &self.reasoning {
            let line = json!({"type": "set_reasoning", "reasoning": level}).to_string();
            let _ = self.post(Some(&id), &line, false).await;
        }
        *session = Some(id.clone());
        Ok(id)
    }

    /// Sends a command that is not a turn; the `response` line for it.
    pub async fn command(&self, command: &Value) -> String {
        let kind = command["type"].as_str().unwrap_or_default();
        let id = &command["id"];
        let session = match kind {
            "ping" | "hello" | "get_models" => self.session.lock().await.clone(),
            "abort" => match self.session.lock().await.clone() {
                Some(session) => Some(session),
                None => return error_response(id, kind, "no session to abort"),
            },
            _ => match self.session().await {
                Ok(session) => Some(session),
                Err(e) => return error_response(id, kind, &e),
            },
        };
        match self.post(session.as_deref(), &command.to_string(), false).await {
            Ok((response, _)) if response.status().is_success() => {
                let body = response.text().await.unwrap_or_default();
                let line = body.lines().filter_map(for_harness).map(|(line, ..)| line).next();
                line.unwrap_or_else(|| error_response(id, kind, "the gateway answered nothing"))
            }
            Ok((response, _)) => error_response(id, kind, &refusal(response).await),
            Err(e) => error_response(id, kind, &e),
        }
    }

    /// Runs a prompt or compaction: its lines to `out` up to `done`,
    /// rejoined by seq when the connection drops.
    /// `answered` fires once the command's `response` line is out.
    pub async fn turn(&self, command: &Value, out: &mpsc::Sender<String>, mut answered: Option<oneshot::Sender<()>>) {
        self.busy.store(true, Ordering::Release);
        if let Err(error) = self.relay_turn(command, out, &mut answered).await {
            let kind = command["type"].as_str().unwrap_or_default();
            let _ = out.send(error_response(&command["id"], kind, &error)).await;
        }
        if let Some(answered) = answered.take() {
            let _ = answered.send(());
        }
        self.busy.store(false, Ordering::Release);
    }

    /// The turn's lines to `out`; an error when it never started.
    async fn relay_turn(
        &self,
        command: &Value,
        out: &mpsc::Sender<String>,
        answered: &mut Option<oneshot::Sender<()>>,
    ) -> Result<(), String> {
        let session = self.session().await?;
        let (response, _) = self.post(Some(&session), &command.to_string(), false).await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut position = Position::default();
        match forward(response, &mut position, out, answered).await {
            Ok(()) => Ok(()),
            Err(Cut::NoAnswer(error)) => Err(error),
            Err(Cut::Broken) => {
                self.rejoin(&session, position, out).await;
                Ok(())
            }
        }
    }

    /// Follows the turn from `position` on whichever replica answers, until
    /// its `done`.
    async fn rejoin(&self, session: &str, mut position: Position, out: &mpsc::Sender<String>) {
        let deadline = tokio::time::Instant::now() + REJOIN_FOR;
        let mut backoff = FIRST_BACKOFF;
        while tokio::time::Instant::now() < deadline {
            let cursor = position.rejoin_after();
            let url = format!("{}/v1/sessions/{}/events?format=zot&after={cursor}", self.base, encode(session));
            if let Ok(response) = self.authorized(self.http.get(&url)).send().await
                && response.status().is_success()
            {
                match forward(response, &mut position, out, &mut None).await {
                    Ok(()) => return,
                    Err(_) => backoff = FIRST_BACKOFF,
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        let _ = out
            .send(json!({"type": "error", "message": "lost the gateway: the turn could not be rejoined"}).to_string())
            .await;
        let _ = out.send(json!({"type": "done"}).to_string()).await;
    }
}

/// Where a turn's answer stands: what the harness has been given.
#[derive(Debug, Default, Clone, Copy)]
struct Position {
    /// The seq before the turn's events (from its `response` line).
    cursor: Option<u64>,
    /// The seq of the last event line given, and how many of its lines
    /// were (one event may be several lines: `turn_start`,
    /// `assistant_start`).
    seq: Option<u64>,
    at_seq: usize,
}

impl Position {
    /// The cursor to rejoin after: the event whose lines may have been
    /// given only in part is read again (its lines given are skipped).
    fn rejoin_after(&self) -> u64 {
        match self.seq {
            Some(seq) => seq.saturating_sub(1),
            None => self.cursor.unwrap_or(0),
        }
    }
}

/// Forwards a stream's lines to `out` up to `done`. With `answered`, a
/// `POST /v1/zot` answer, whose first line is the command's `response`
/// (`answered` fires once it is out); without, a rejoin from
/// [`Position::rejoin_after`], whose lines already given are skipped, so
/// the harness gets each line once.
async fn forward(
    response: Response,
    position: &mut Position,
    out: &mpsc::Sender<String>,
    answered_tx: &mut Option<oneshot::Sender<()>>,
) -> Result<(), Cut> {
    let expects_response = answered_tx.is_some();
    let mut bytes = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut answered = !expects_response;
    let (given_seq, mut to_skip) = if expects_response { (None, 0) } else { (position.seq, position.at_seq) };
    loop {
        let chunk = match tokio::time::timeout(SILENCE, bytes.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(Some(Err(_)) | None) | Err(_) => {
                return Err(if answered { Cut::Broken } else { Cut::NoAnswer("the gateway's answer broke".into()) });
            }
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = buffer.drain(..=end).collect();
            let text = String::from_utf8_lossy(&raw);
            let text = text.trim();
            if !answered && let Ok(value) = serde_json::from_str::<Value>(text) {
                answered = true;
                if value["success"] == false {
                    let _ = out.send(for_harness(text).map_or_else(String::new, |(l, ..)| l)).await;
                    if let Some(tx) = answered_tx.take() {
                        let _ = tx.send(());
                    }
                    return Ok(());
                }
                position.cursor = value["data"]["cursor"].as_u64();
            }
            let Some((line, seq, done)) = for_harness(text) else { continue };
            if let Some(seq) = seq {
                if given_seq.is_some_and(|given| seq < given) {
                    continue;
                }
                if given_seq == Some(seq) && to_skip > 0 {
                    to_skip -= 1;
                    continue;
                }
                if position.seq == Some(seq) {
                    position.at_seq += 1;
                } else {
                    position.seq = Some(seq);
                    position.at_seq = 1;
                }
            }
            if out.send(line).await.is_err() {
                return Ok(());
            }
            if let Some(tx) = answered_tx.take() {
                let _ = tx.send(());
            }
            if done {
                return Ok(());
            }
        }
    }
}

/// A refusal's message, from any of the gateway's error bodies.
async fn refusal(response: Response) -> String {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"].as_str().or(body["error"].as_str()).or(body["detail"].as_str());
    match (status, message) {
        (StatusCode::UNAUTHORIZED, Some(m)) => format!("the gateway refused the credential: {m}"),
        (_, Some(m)) => m.to_string(),
        (status, None) => format!("the gateway answered {status}"),
    }
}

/// A query-string value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
