//! Reading SSE responses in tests: frames with their `id`, `event` and JSON
//! `data`, waited for with a timeout (never a sleep).

use std::{pin::Pin, time::Duration};

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Long enough for a slow CI machine; a hang fails instead of blocking.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

pub struct SseReader {
    inner: Pin<Box<dyn Stream<Item = Frame> + Send>>,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        assert!(response.status().is_success(), "expected a stream, got {}", response.status());
        let frames = response.bytes_stream().eventsource().filter_map(|item| async move {
            let event = item.ok()?;
            let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            Some(Frame { id: event.id.parse().ok(), event: event.event, data })
        });
        Self { inner: Box::pin(frames) }
    }

    /// The next frame, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Frame> {
        tokio::time::timeout(STEP_TIMEOUT, self.inner.next()).await.expect("a frame within the timeout")
    }

    /// Frames up to and including the one with `seq`.
    pub async fn until_seq(&mut self, seq: u64) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            let done = frame.id == Some(seq);
            frames.push(frame);
            if done {
                return frames;
            }
        }
        panic!("the stream ended before seq {seq}: {frames:?}");
    }

    /// Frames up to and including the first of type `kind`.
    pub async fn until_kind(&mut self, kind: &str) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            let done = frame.event == kind;
            frames.push(frame);
            if done {
                return frames;
            }
        }
        panic!("the stream ended before a {kind} event: {frames:?}");
    }

    /// Every frame until the server ends the stream.
    pub async fn rest(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            frames.push(frame);
        }
        frames
    }
}

pub fn seqs(frames: &[Frame]) -> Vec<u64> {
    frames.iter().filter_map(|f| f.id).collect()
}
