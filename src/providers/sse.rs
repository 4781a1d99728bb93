//! Reading an upstream's SSE body: the shared pump that turns
//! `text/event-stream` bytes into [`ModelEvent`]s through a per-provider
//! [`Decoder`], with the first-byte and idle timeouts applied.
//!
//! It owns no task and no retry: the pump owns the response body, so
//! dropping the [`ModelStream`] made from it closes the upstream connection.
//! Retrying (before anything was yielded) is `retry.rs`'s business.
//!
//! Timeouts count SSE events, not bytes: keep-alive comments (`: ping`) do
//! not reset the idle timer, while Anthropic's `ping` events do. The idle
//! timer is one timer per response, not one per event: each wait for an
//! event notes when it began, and the timer, when it fires, times the
//! response out only if that was `idle` ago (else it sets itself to that
//! moment).

mod reader;

use std::{collections::VecDeque, pin::Pin, time::Duration};

use bytes::Bytes;
use futures::{Stream, StreamExt, stream};
use tokio::time::Instant;

pub(super) use self::reader::Event;
use self::reader::{ParseError, Reader};
use super::{ModelEvent, ModelStream, ProviderError};

/// One provider's wire format: what each SSE event means.
pub(super) trait Decoder: Send + 'static {
    /// Handles one SSE event, pushing the events it means onto `out`.
    /// Returns `true` once the response is complete (`[DONE]`,
    /// `message_stop`): nothing after it is read.
    fn on_event(&mut self, event: &Event, out: &mut VecDeque<ModelEvent>) -> Result<bool, ProviderError>;

    /// The body ended cleanly before the decoder saw the end of the response.
    /// By default that is a lost connection; a decoder may accept it instead.
    fn on_eof(&mut self, _out: &mut VecDeque<ModelEvent>) -> Result<(), ProviderError> {
        Err(ProviderError::Disconnected("stream ended before the response was complete".into()))
    }
}

/// A response body, whichever transport read it (`retry.rs`).
pub(super) type Body = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;
/// An error of the connection or of the body read from it.
pub(super) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// Pulls [`ModelEvent`]s out of one upstream response.
pub(super) struct Pump<D> {
    body: Body,
    reader: Reader,
    /// The event being read (its strings reused from one to the next).
    event: Event,
    decoder: D,
    pending: VecDeque<ModelEvent>,
    /// Until the first SSE event arrives, the first-byte deadline applies
    /// (it started when the request was sent); after it, the idle timeout.
    first_byte_deadline: Option<Instant>,
    idle_timeout: Duration,
    /// When the wait for the current event began, and the timer that
    /// checks it.
    last_event: Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Set once the response completed or failed: only `pending` is left.
    ended: bool,
}

impl<D: Decoder> Pump<D> {
    pub(super) fn new(body: Body, decoder: D, first_byte_deadline: Instant, idle: Duration) -> Self {
        Self {
            body,
            reader: Reader::default(),
            event: Event::default(),
            decoder,
            pending: VecDeque::new(),
            first_byte_deadline: Some(first_byte_deadline),
            idle_timeout: idle,
            last_event: Instant::now(),
            timer: Box::pin(tokio::time::sleep_until(first_byte_deadline)),
            ended: false,
        }
    }

    /// The next event, an error (after which the pump ends), or `None` at the
    /// end of the response. Never waits longer than the timeouts allow.
    pub(super) async fn next(&mut self) -> Option<Result<ModelEvent, ProviderError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            if let Err(error) = self.read_one().await {
                self.ended = true;
                return Some(Err(error));
            }
        }
    }

    /// Reads one SSE event (or the end of the body) and decodes it.
    async fn read_one(&mut self) -> Result<(), ProviderError> {
        // Idle counts from when the wait began (a slow reader of the
        // stream is not the upstream's silence).
        self.last_event = Instant::now();
        loop {
            match self.reader.next_event(&mut self.event) {
                Ok(true) => break,
                Ok(false) => {}
                Err(ParseError::Utf8) => return Err(ProviderError::Protocol("stream is not valid UTF-8".into())),
                Err(ParseError::LineTooLong) => {
                    return Err(ProviderError::Protocol("an SSE line longer than the gateway reads".into()));
                }
            }
            let next = tokio::select! {
                biased;
                next = self.body.next() => next,
                () = self.timer.as_mut() => {
                    if self.first_byte_deadline.is_some() {
                        return Err(timeout_first_byte());
                    }
                    let due = self.last_event + self.idle_timeout;
                    if due <= Instant::now() {
                        return Err(ProviderError::Timeout("idle"));
                    }
                    self.timer.as_mut().reset(due);
                    continue;
                }
            };
            match next {
                Some(Ok(bytes)) => self.reader.feed(&bytes),
                Some(Err(error)) => return Err(ProviderError::Disconnected(describe(&*error))),
                None => {
                    self.ended = true;
                    return self.decoder.on_eof(&mut self.pending);
                }
            }
        }
        if self.first_byte_deadline.take().is_some() {
            self.timer.as_mut().reset(Instant::now() + self.idle_timeout);
        }
        self.ended = self.decoder.on_event(&self.event, &mut self.pending)?;
        Ok(())
    }

    /// The rest of the response as a stream, `first` (already received) ahead.
    pub(super) fn into_stream(self, first: ModelEvent) -> ModelStream {
        let rest = stream::unfold(self, |mut pump| async move { pump.next().await.map(|item| (item, pump)) });
        Box::pin(stream::once(async move { Ok(first) }).chain(rest))
    }
}

pub(super) fn timeout_first_byte() -> ProviderError {
    ProviderError::Timeout("first byte")
}

/// A transport error with its causes, for logs and `Disconnected`. reqwest
/// and hyper errors name the URL at most (never a header), so no key can
/// leak through here.
pub(super) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
