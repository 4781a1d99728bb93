//! Reading the gateway's SSE streams: frames with their `id` (the event's
//! seq), `event` (its type) and raw `data`, each waited for with a timeout.

use std::{pin::Pin, time::Duration};

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};

use crate::Result;

/// Longest wait for one frame: a stalled stream fails the phase, never hangs.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest silence on a stream before it counts as failed.
pub const SILENCE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

impl Frame {
    /// The `text` of a `text_delta` frame.
    pub fn text(&self) -> Option<String> {
        if self.event != "text_delta" {
            return None;
        }
        let data: serde_json::Value = serde_json::from_str(&self.data).ok()?;
        data["text"].as_str().map(str::to_string)
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<Frame>> + Send>>;

pub struct Frames {
    inner: FrameStream,
    /// Longest wait for one frame.
    silence: Duration,
}

impl Frames {
    pub fn new(response: reqwest::Response) -> Self {
        Self::with_silence(response, FRAME_TIMEOUT)
    }

    /// Frames of a stream that may stay silent up to `silence` (one held
    /// open on purpose).
    pub fn with_silence(response: reqwest::Response, silence: Duration) -> Self {
        let frames = response.bytes_stream().eventsource().map(|item| {
            let event = item.map_err(|e| format!("SSE stream: {e}"))?;
            Ok(Frame { id: event.id.parse().ok(), event: event.event, data: event.data })
        });
        Self { inner: Box::pin(frames), silence }
    }

    /// The next frame, `None` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<Frame>> {
        match tokio::time::timeout(self.silence, self.inner.next()).await {
            Ok(frame) => frame.transpose(),
            Err(_) => Err(format!("no SSE frame within {:?}", self.silence).into()),
        }
    }
}
