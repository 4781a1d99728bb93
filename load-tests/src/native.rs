//! The native API step by step, for scenarios that act in the middle of a
//! turn (decide a relay, resume a pause, hold a stream open): create a
//! session, start a turn, read its events one by one, decide, resume.

use std::{pin::Pin, time::Duration};

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use crate::{Result, procs::MODEL, streams::SILENCE};

/// One SSE event of the native API.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: String,
    pub data: Value,
}

type Events = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

/// A turn's open stream.
pub struct Turn {
    events: Events,
}

impl Turn {
    fn new(response: reqwest::Response) -> Self {
        let events = response.bytes_stream().eventsource().map(|item| {
            let event = item.map_err(|e| format!("SSE: {e}"))?;
            Ok(Event { kind: event.event, data: serde_json::from_str(&event.data).unwrap_or(Value::Null) })
        });
        Self { events: Box::pin(events) }
    }

    /// The next event; `None` when the stream ends.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        match tokio::time::timeout(SILENCE, self.events.next()).await {
            Ok(event) => event.transpose(),
            Err(_) => Err(format!("no event within {SILENCE:?}").into()),
        }
    }

    /// Reads up to and including the first event of `kind`.
    pub async fn until(&mut self, kind: &str) -> Result<Event> {
        while let Some(event) = self.next().await? {
            if event.kind == kind {
                return Ok(event);
            }
        }
        Err(format!("the stream ended before {kind}").into())
    }

    /// Reads to the end; the text of its `text_delta`s and the last kind.
    pub async fn rest(&mut self) -> Result<(String, String)> {
        let (mut text, mut last) = (String::new(), String::new());
        while let Some(event) = self.next().await? {
            if event.kind == "text_delta" {
                text.push_str(event.data["text"].as_str().unwrap_or_default());
            }
            last = event.kind;
        }
        Ok((text, last))
    }
}

/// A native-API client of one tenant.
#[derive(Clone)]
pub struct Native {
    pub http: reqwest::Client,
    pub token: String,
}

impl Native {
    /// Creates a session; `approval` is `relay` or `pause`.
    pub async fn create(&self, base: &str, approval: &str) -> Result<String> {
        let body = json!({"model": MODEL, "approval": approval});
        let response = self.post(format!("{base}/v1/sessions"), &body).await?;
        let body: Value = response.json().await?;
        Ok(body["id"].as_str().ok_or("no session id")?.to_string())
    }

    /// Starts a turn with `content`; its stream.
    pub async fn send(&self, base: &str, id: &str, content: &str) -> Result<Turn> {
        let response = self.post(format!("{base}/v1/sessions/{id}/messages"), &json!({"content": content})).await?;
        Ok(Turn::new(response))
    }

    /// Decides a live relay.
    pub async fn decide(&self, base: &str, id: &str, relay: &str, approved: bool) -> Result<()> {
        self.post(format!("{base}/v1/sessions/{id}/relays/{relay}"), &json!({"approved": approved})).await?;
        Ok(())
    }

    /// Resumes a paused turn approving `call`; the continuation's stream.
    pub async fn approve_paused(&self, base: &str, id: &str, call: &str) -> Result<Turn> {
        let body = json!({"decisions": [{"tool_call_id": call, "approved": true}]});
        Ok(Turn::new(self.post(format!("{base}/v1/sessions/{id}/tool-results"), &body).await?))
    }

    async fn post(&self, url: String, body: &Value) -> Result<reqwest::Response> {
        let response = self.http.post(&url).bearer_auth(&self.token).json(body).send().await?;
        if !response.status().is_success() {
            let status = response.status();
            return Err(format!("{url}: {status}: {}", response.text().await.unwrap_or_default()).into());
        }
        Ok(response)
    }
}

/// Runs `f` over `items` with at most `limit` at a time, in order.
pub async fn bounded<T, F, Fut, R>(items: Vec<T>, limit: usize, f: F) -> Vec<R>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = R>,
{
    futures::stream::iter(items.into_iter().map(f)).buffered(limit).collect().await
}

/// How long a whole scenario step may take before it is reported as stuck.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(300);
