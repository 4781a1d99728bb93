//! The native API step by step, for scenarios that act in the middle of a
//! turn (decide a relay, resume a pause, hold a stream open): create a
//! session, start a turn, read its events one by one, decide, resume.

use futures::StreamExt;
use serde_json::{Value, json};

use crate::{
    Result,
    procs::MODEL,
    sse::{Frames, SILENCE},
};

/// One SSE event of the native API.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its seq (the frame's `id:`), when it is a log event.
    pub seq: Option<u64>,
    pub kind: String,
    pub data: Value,
}

/// A turn's open stream.
pub struct Turn {
    frames: Frames,
}

impl Turn {
    fn new(response: reqwest::Response) -> Self {
        Self { frames: Frames::with_silence(response, SILENCE) }
    }

    /// The next event; `None` when the stream ends.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        let frame = self.frames.next().await?;
        Ok(frame.map(|f| Event {
            seq: f.id,
            kind: f.event,
            data: serde_json::from_str(&f.data).unwrap_or(Value::Null),
        }))
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

    /// Rejoins a session's events after `after` (`Last-Event-ID`), as a
    /// browser's EventSource does when its stream breaks.
    pub async fn rejoin(&self, base: &str, id: &str, after: u64) -> Result<Turn> {
        let url = format!("{base}/v1/sessions/{id}/events");
        let response =
            self.http.get(&url).bearer_auth(&self.token).header("last-event-id", after.to_string()).send().await?;
        Ok(Turn::new(success(&url, response).await?))
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
        success(&url, response).await
    }
}

/// `response`, or its status and body as the error.
async fn success(url: &str, response: reqwest::Response) -> Result<reqwest::Response> {
    if !response.status().is_success() {
        let status = response.status();
        return Err(format!("{url}: {status}: {}", response.text().await.unwrap_or_default()).into());
    }
    Ok(response)
}

/// Runs `f` over `items` with at most `limit` at a time, in order.
pub async fn bounded<T, F, Fut, R>(items: Vec<T>, limit: usize, f: F) -> Vec<R>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = R>,
{
    futures::stream::iter(items.into_iter().map(f)).buffered(limit).collect().await
}
