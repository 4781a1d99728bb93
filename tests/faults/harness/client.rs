//! [`Follower`]: a client of the native API that rejoins, the way a
//! frontend behind a load balancer would. It reads a turn's SSE, and when
//! the stream ends without `turn_ended` or `paused` (or the connection fails)
//! it reconnects to the next replica in its list that answers, with
//! `Last-Event-ID: <last seq seen>`, until the turn ends or its deadline
//! passes. A `retry:` line is obeyed (capped) before the next connection.
//!
//! It records every frame in arrival order, every `retry:` line and
//! `event: reconnect` frame, and each connection, in a [`Transcript`].
//!
//! It speaks the native API or llm-gateway's dialect ([`Dialect`]): the
//! latter rejoins with `?format=llm-gateway`, ends at the main agent's
//! `harness_end`, and may start without a session id (a `POST /chat` makes
//! a fresh session): it takes the id from the stream's `connected` frame.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use serde_json::Value;
use tokio::{sync::watch, task::JoinHandle};

use super::{
    sse::{Parsed, SseParser},
    transcript::{Connection, SeenEvent, Transcript},
};

/// A response must start within this; a replica that cannot (its store is
/// frozen) is skipped for the next one.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// A stream silent for this long is taken for dead and rejoined elsewhere
/// (the gateway sends a keep-alive comment every `heartbeat_secs`, 15 s by
/// default, so this only fires on a stream that will not go on).
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest pause a server's `retry:` line gets.
const MAX_RETRY_WAIT: Duration = Duration::from_millis(1000);
/// Pause after every replica in the list failed in a row.
const ROUND_BACKOFF: Duration = Duration::from_millis(100);
/// A follower running in its own task.
pub struct Follower {
    transcript: Arc<Mutex<Transcript>>,
    /// Number of log events seen so far.
    progress: watch::Receiver<usize>,
    /// Number of frames seen so far, with an id or without (a notice).
    frames: watch::Receiver<usize>,
    task: Option<JoinHandle<()>>,
}

/// Which dialect a follower reads and rejoins in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `GET /v1/sessions/{id}/events`; a turn's stream ends at `turn_ended`
    /// or `paused`.
    Native,
    /// `GET /v1/sessions/{id}/events?format=llm-gateway`; a turn's stream
    /// ends at the main agent's `harness_end` (a subagent's has no `id:`).
    LlmGateway,
}

impl Dialect {
    fn events_query(self) -> &'static str {
        match self {
            Self::Native => "",
            Self::LlmGateway => "?format=llm-gateway",
        }
    }

    fn ends_turn(self, event: &SeenEvent) -> bool {
        match self {
            Self::Native => event.ends_turn(),
            Self::LlmGateway => {
                event.is_log_event() && event.kind == "harness_end" && event.data.get("parentId").is_none()
            }
        }
    }
}

/// Where a follower starts.
pub struct FollowSpec {
    /// Base URLs of the replicas, rejoined in turn.
    pub urls: Vec<String>,
    pub token: String,
    /// Empty when `first` is a `POST /chat` stream whose `connected` frame
    /// names the session.
    pub session_id: String,
    /// Events after this seq are expected.
    pub cursor: u64,
    /// The response of the request that started the turn, read first (its
    /// replica is `urls[start]`); `None` connects to `/events` at once.
    pub first: Option<reqwest::Response>,
    pub start: usize,
    /// The whole follow gives up after this.
    pub timeout: Duration,
    pub dialect: Dialect,
}

impl Follower {
    pub fn spawn(spec: FollowSpec) -> Self {
        let transcript =
            Arc::new(Mutex::new(Transcript { session_id: spec.session_id.clone(), ..Transcript::default() }));
        let (tx, progress) = watch::channel(0);
        let (frames_tx, frames) = watch::channel(0);
        let task = tokio::spawn(run(spec, transcript.clone(), tx, frames_tx));
        Self { transcript, progress, frames, task: Some(task) }
    }

    /// Log events seen so far.
    pub fn seen(&self) -> usize {
        *self.progress.borrow()
    }

    /// Waits until what was seen passes `check`, looked at after every
    /// frame (notices without an id too); `false` after `timeout` or when
    /// the follower stopped first without passing it.
    pub async fn wait_until(&self, timeout: Duration, check: impl Fn(&Transcript) -> bool) -> bool {
        let mut frames = self.frames.clone();
        let passes = || check(&self.transcript.lock().unwrap());
        let wait = async {
            loop {
                if passes() {
                    return true;
                }
                // Ends when the follower task does.
                if frames.changed().await.is_err() {
                    return passes();
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// A copy of what was seen so far.
    pub fn snapshot(&self) -> Transcript {
        self.transcript.lock().unwrap().clone()
    }

    /// Waits until `n` log events were seen; `false` after `timeout` or when
    /// the follower stopped first.
    pub async fn wait_for_events(&self, n: usize, timeout: Duration) -> bool {
        let mut progress = self.progress.clone();
        matches!(tokio::time::timeout(timeout, progress.wait_for(|seen| *seen >= n)).await, Ok(Ok(_)))
    }

    /// Waits until a log event of `kind` was seen and returns the first;
    /// `None` after `timeout` or when the follower stopped first.
    pub async fn wait_for_kind(&self, kind: &str, timeout: Duration) -> Option<SeenEvent> {
        let mut progress = self.progress.clone();
        let found = || self.transcript.lock().unwrap().of_kind(kind).next().cloned();
        let wait = async {
            loop {
                if let Some(event) = found() {
                    return Some(event);
                }
                // Ends when the follower task does.
                progress.changed().await.ok()?;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten().or_else(found)
    }

    /// Waits for the follow to end (turn ended or deadline) and returns
    /// what it saw.
    pub async fn finish(mut self) -> Transcript {
        if let Some(task) = self.task.take() {
            task.await.expect("the follower task does not panic");
        }
        self.transcript.lock().unwrap().clone()
    }

    /// Resolves when the follow has ended, without consuming the follower.
    pub async fn ended(&self) {
        let mut progress = self.progress.clone();
        // The sender is dropped when the task ends.
        while progress.changed().await.is_ok() {}
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(
    spec: FollowSpec,
    transcript: Arc<Mutex<Transcript>>,
    progress: watch::Sender<usize>,
    frames: watch::Sender<usize>,
) {
    let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(1)).build().expect("an HTTP client");
    let deadline = Instant::now() + spec.timeout;
    let mut first = spec.first;
    let mut session_id = spec.session_id.clone();
    let mut index = spec.start % spec.urls.len();
    let mut last = spec.cursor;
    let mut failures_in_a_row = 0;
    let mut wait = Duration::ZERO;
    let record = |mut connection: Connection| {
        connection.closed = Some(Instant::now());
        transcript.lock().unwrap().connections.push(connection);
    };
    loop {
        if !wait.is_zero() {
            // The reconnect delay a server asked for (retry:) or a pause
            // after every replica refused: a client's backoff.
            tokio::time::sleep(wait.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
        if Instant::now() >= deadline {
            return;
        }
        if first.is_none() && session_id.is_empty() {
            // The chat's stream ended before its `connected` frame: there is
            // nothing to rejoin.
            return;
        }
        let url = spec.urls[index].clone();
        let mut connection = Connection {
            url: url.clone(),
            after: last,
            opened: Instant::now(),
            closed: None,
            status: None,
            outcome: String::new(),
            frames: 0,
            retry_ms: None,
            reconnect_frame: false,
        };
        let response = match first.take() {
            Some(response) => Ok(response),
            None => {
                let request = http
                    .get(format!("{url}/v1/sessions/{session_id}/events{}", spec.dialect.events_query()))
                    .bearer_auth(&spec.token)
                    .header("last-event-id", last.to_string())
                    .send();
                match tokio::time::timeout(HEAD_TIMEOUT, request).await {
                    Ok(Ok(response)) => Ok(response),
                    Ok(Err(e)) => Err(format!("request failed: {e}")),
                    Err(_) => Err(format!("no response head within {HEAD_TIMEOUT:?}")),
                }
            }
        };
        let response = match response {
            Ok(response) if response.status().is_success() => response,
            failed => {
                match failed {
                    Ok(response) => {
                        connection.status = Some(response.status().as_u16());
                        let body = tokio::time::timeout(HEAD_TIMEOUT, response.text()).await;
                        connection.outcome = format!("refused: {}", body.ok().and_then(Result::ok).unwrap_or_default());
                    }
                    Err(e) => connection.outcome = e,
                }
                record(connection);
                index = (index + 1) % spec.urls.len();
                failures_in_a_row += 1;
                wait = if failures_in_a_row % spec.urls.len() == 0 { ROUND_BACKOFF } else { Duration::ZERO };
                continue;
            }
        };
        failures_in_a_row = 0;
        connection.status = Some(response.status().as_u16());
        let mut parser = SseParser::default();
        let mut body = response.bytes_stream();
        let mut ended = false;
        let outcome = loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT.min(remaining), body.next()).await {
                Err(_) if remaining <= IDLE_TIMEOUT => break "deadline".to_string(),
                Err(_) => break format!("idle for {IDLE_TIMEOUT:?}"),
                Ok(None) => break "stream ended".to_string(),
                Ok(Some(Err(e))) => break format!("stream failed: {e}"),
                Ok(Some(Ok(chunk))) => chunk,
            };
            for item in parser.push(&chunk) {
                match item {
                    Parsed::Retry(ms) => {
                        connection.retry_ms = Some(ms);
                        transcript.lock().unwrap().retry_lines.push(ms);
                    }
                    Parsed::Frame { id, event, data } => {
                        connection.frames += 1;
                        let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                        let seen = SeenEvent { seq: id, kind: event, data, at: Instant::now(), via: url.clone() };
                        connection.reconnect_frame |= seen.kind == "reconnect";
                        ended |= spec.dialect.ends_turn(&seen);
                        let mut t = transcript.lock().unwrap();
                        if spec.dialect == Dialect::LlmGateway
                            && seen.kind == "connected"
                            && let Some(id) = seen.data["sessionId"].as_str()
                        {
                            session_id = id.to_string();
                            t.session_id = session_id.clone();
                        }
                        if seen.is_log_event() {
                            // A repeat is kept (the gapless check reports it)
                            // but does not move the cursor back.
                            last = last.max(seen.seq.unwrap_or(0));
                            progress.send_modify(|n| *n += 1);
                        }
                        t.events.push(seen);
                        drop(t);
                        frames.send_modify(|n| *n += 1);
                    }
                }
            }
            if ended {
                break "turn ended".to_string();
            }
        };
        connection.outcome = outcome;
        let retry = connection.retry_ms;
        record(connection);
        if ended {
            transcript.lock().unwrap().finished = true;
            return;
        }
        index = (index + 1) % spec.urls.len();
        wait = retry.map_or(Duration::ZERO, |ms| Duration::from_millis(ms).min(MAX_RETRY_WAIT));
    }
}

/// Starts a turn (`POST /v1/sessions/{id}/messages`) on the first replica
/// from `urls[start]` on that answers 200, as a client behind a load
/// balancer would retry elsewhere; gives up after `timeout`. Returns the
/// index of the replica and the turn's stream.
pub async fn start_turn_anywhere(
    urls: &[String],
    start: usize,
    token: &str,
    session_id: &str,
    content: &str,
    timeout: Duration,
) -> Result<(usize, reqwest::Response), String> {
    let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(1)).build().expect("an HTTP client");
    let deadline = Instant::now() + timeout;
    let mut refusals = Vec::new();
    for attempt in 0.. {
        let index = (start + attempt) % urls.len();
        let request = http
            .post(format!("{}/v1/sessions/{session_id}/messages", urls[index]))
            .bearer_auth(token)
            .json(&serde_json::json!({"content": content}))
            .send();
        match tokio::time::timeout(HEAD_TIMEOUT, request).await {
            Ok(Ok(response)) if response.status().is_success() => return Ok((index, response)),
            Ok(Ok(response)) => {
                let status = response.status();
                let body = tokio::time::timeout(HEAD_TIMEOUT, response.text()).await;
                refusals.push(format!(
                    "{}: {status} {}",
                    urls[index],
                    body.ok().and_then(Result::ok).unwrap_or_default()
                ));
            }
            Ok(Err(e)) => refusals.push(format!("{}: {e}", urls[index])),
            Err(_) => refusals.push(format!("{}: no response head within {HEAD_TIMEOUT:?}", urls[index])),
        }
        if Instant::now() >= deadline {
            break;
        }
        if (attempt + 1) % urls.len() == 0 {
            // Every replica refused: a client's backoff before the next round.
            tokio::time::sleep(ROUND_BACKOFF).await;
        }
    }
    Err(format!("no replica started the turn within {timeout:?}: {}", refusals.join("; ")))
}
