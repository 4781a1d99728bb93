//! Turns a session follower into a streaming response in any dialect: the
//! encoder renders each event, sent as SSE or, for line-based dialects, as
//! NDJSON; keep-alives fill idle time. A dialect whose reset after a
//! takeover replaces the client's conversation (AG-UI) gets the stored
//! session with the `step_restarted` event. When the replica drains, each
//! stream ends with its dialect's "rejoin" frame (native: `retry:` and an
//! `event: reconnect`), so clients reconnect to another replica with
//! `Last-Event-ID` or `?after=`.
//!
//! A rejoin mid-turn in a dialect whose frames name what came before
//! (llm-gateway: a block's id is its first delta's seq, a run is the turn)
//! is followed with the turn's context: the events of the turn up to the
//! cursor are read (by the follower, from the store, like any replay) and
//! pass through the encoder without being sent, so it resumes in the state
//! the rejoined stream was in. Nothing is stored per token for it, and
//! other dialects pay nothing (see `Encoder::wants_turn_context`).
//!
//! Titles: a dialect that shows them (`Encoder::wants_title`: native,
//! Cosmo) gets the session's title on the stream of the turn whose end
//! announced it. The turn's frames end as always (Cosmo's `done` included);
//! then the stream follows the session on for the title alone
//! (`Sessions::follow_title`) and ends after it. A stream that starts after
//! that turn's end (a rejoin) does the same when the title is still due, so
//! the title arrives once, after `done`, on whichever replica. The wait ends
//! at a new turn (whose end brings the title) and after [`TITLE_WAIT`].

mod body;

use std::collections::VecDeque;

use axum::{
    body::Body,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use futures::{StreamExt, stream::BoxStream};
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::{
    principal::Principal,
    protocol::{Encoder, EventKind, Frame, LogEvent, Transport},
    sessions::{FollowItem, Follower, Sessions},
    state::AppState,
    telemetry::metrics::StreamGuard,
    wake::Polled,
};

/// A follower that is always ready is checked for a drain every this many
/// items.
const DRAIN_CHECK: u64 = 64;
/// The failure code of a stream whose turn's writes the store held for
/// `store.hold_max_secs`.
const HELD_CODE: &str = "store_held";

/// The longest a stream waits for a title after its turn's end: the title
/// call's own bound, plus a takeover of an owner that died meanwhile.
const TITLE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Streams `follower` through `encoder`, in the encoder's transport. The
/// session is re-read at the end, and at a `step_restarted`, only for
/// encoders that want it.
pub fn stream(
    state: &AppState,
    principal: Principal,
    session_id: String,
    follower: Follower,
    encoder: Box<dyn Encoder>,
) -> Response {
    let (transport, headers) = (encoder.transport(), encoder.headers());
    let frames = encode(state, principal, session_id, follower, encoder);
    let mut response = match transport {
        Transport::Sse => sse(state, frames),
        Transport::Ndjson => ndjson(state, frames),
    };
    for (name, value) in headers {
        response.headers_mut().insert(*name, HeaderValue::from_static(value));
    }
    response
}

/// The encoder's frames for `follower`'s events, as a stream the response
/// body drives: no task and no channel of its own per client. Ends when the
/// follower ends, when the client goes away (the body is dropped), or when
/// the replica drains (after the encoder's rejoin frames).
pub fn encode(
    state: &AppState,
    principal: Principal,
    session_id: String,
    follower: Follower,
    encoder: Box<dyn Encoder>,
) -> BoxStream<'static, Frame> {
    let mut encoding = Encoding {
        _open: state.metrics.open_stream(encoder.dialect()),
        follower,
        encoder,
        sessions: state.sessions.clone(),
        principal,
        session_id,
        draining: Polled::new(state.sessions.draining().clone().cancelled_owned()),
        shutdown: Polled::new(state.shutdown.clone().cancelled_owned()),
        pending: VecDeque::new(),
        taken: 0,
        ended: false,
        title: TitleWatch::default(),
    };
    // What the dialect restates first (AG-UI), ahead of any event.
    let opening = encoding.encoder.opening();
    encoding.pending.extend(opening);
    // Boxed: the state moves into each frame's future and back out of it,
    // a pointer's copy instead of the whole state's per frame.
    futures::stream::unfold(Box::new(encoding), |mut encoding| async move {
        let frame = encoding.next_frame().await?;
        Some((frame, encoding))
    })
    .boxed()
}

/// One stream's encoding state, driven by the response body.
struct Encoding {
    /// Counts the stream as open while it lives.
    _open: StreamGuard,
    follower: Follower,
    encoder: Box<dyn Encoder>,
    sessions: Sessions,
    principal: Principal,
    session_id: String,
    /// The replica drains, it shuts down: waited for once per stream (a
    /// wait made anew per frame would register with the token, shared by
    /// every stream, each time), and polled only once fired (a waiting
    /// token's future locks the token at each poll).
    draining: Polled<WaitForCancellationFutureOwned>,
    shutdown: Polled<WaitForCancellationFutureOwned>,
    /// Frames encoded and not yet sent.
    pending: VecDeque<Frame>,
    /// Items taken from the follower.
    taken: u64,
    ended: bool,
    title: TitleWatch,
}

/// What a stream saw that decides whether it waits for the title.
#[derive(Default)]
struct TitleWatch {
    /// The seq of the last event the encoder got.
    position: u64,
    /// The last `turn_ended`'s `title_pending`, `None` before any (or
    /// after a pause).
    announced: Option<bool>,
    /// A stream-ending event was seen (a turn's end or a pause).
    ended_turn: bool,
    /// A `title_updated` was seen since the last turn's end.
    seen: bool,
    /// The stream failed: it waits for nothing.
    failed: bool,
    /// Following the title now, until this deadline.
    deadline: Option<tokio::time::Instant>,
}

impl TitleWatch {
    fn saw(&mut self, event: &LogEvent) {
        self.position = self.position.max(event.seq);
        match &event.event.kind {
            EventKind::TurnEnded { title_pending, .. } => {
                (self.announced, self.ended_turn, self.seen) = (Some(*title_pending), true, false);
            }
            EventKind::Paused { .. } => (self.announced, self.ended_turn) = (None, true),
            EventKind::TitleUpdated { .. } => self.seen = true,
            _ => {}
        }
    }

    /// Whether to follow the session on for its title: its turn's end
    /// announced one, or the stream began after the end (the session says).
    fn wanted(&self) -> bool {
        let announced = self.announced.unwrap_or(!self.ended_turn);
        announced && !self.seen && !self.failed && self.deadline.is_none()
    }
}

impl Encoding {
    /// What wakes it: the follower's next item, the replica draining,
    /// shutdown, or the end of the wait for a title.
    async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame);
            }
            if self.ended {
                return None;
            }
            // A follower that is always ready (a long replay) is checked for
            // a drain every so often; otherwise only while it waits.
            self.taken += 1;
            if self.taken % DRAIN_CHECK == 0 && futures::FutureExt::now_or_never(&mut self.draining).is_some() {
                self.drained();
                continue;
            }
            let deadline = self.title.deadline;
            // The follower first: drain and shutdown are looked at only
            // while it waits.
            let item = tokio::select! {
                biased;
                item = self.follower.next() => item,
                () = &mut self.draining => {
                    self.drained();
                    continue;
                }
                () = &mut self.shutdown => return None,
                () = sleep_until(deadline) => {
                    self.ended = true;
                    continue;
                }
            };
            if let Some(FollowItem::Event(event)) = &item {
                self.title.saw(event);
            }
            let frames = match item {
                // The title follow ended (after the title, at a new turn).
                None if self.title.deadline.is_some() => {
                    self.ended = true;
                    continue;
                }
                None => {
                    // Boxed: run once per stream, they would otherwise
                    // size every open stream's state.
                    let frames = Box::pin(self.closing_frames()).await;
                    if !Box::pin(self.follow_title()).await {
                        self.ended = true;
                    }
                    frames
                }
                Some(FollowItem::Event(event))
                    if restarts_main_step(&event) && self.encoder.wants_history_on_restart() =>
                {
                    // Without the stored session (a store error), the
                    // dialect's plain restart frames: the stream goes on.
                    match Box::pin(self.sessions.get_with_history(&self.principal, &self.session_id)).await {
                        Ok(view) => self.encoder.restarted(&event, &view.session),
                        Err(_) => self.encoder.encode(&event),
                    }
                }
                // A replay that holds the title after the turn's end: the
                // turn's last frames (Cosmo's `done`) come first.
                Some(FollowItem::Event(event))
                    if matches!(event.event.kind, EventKind::TitleUpdated { .. }) && self.encoder.wants_title() =>
                {
                    let mut frames = Box::pin(self.finish_frames()).await;
                    frames.extend(self.encoder.encode(&event));
                    frames
                }
                Some(FollowItem::Event(event)) => {
                    let frames = self.encoder.encode(&event);
                    // Its stream is a part of the log (a response): a
                    // replay of it does not follow later turns.
                    if self.encoder.finished() {
                        self.ended = true;
                    }
                    frames
                }
                Some(FollowItem::Context(event)) => {
                    self.encoder.context(&event);
                    continue;
                }
                Some(FollowItem::RecoveryFailed { .. }) => {
                    self.title.failed = true;
                    self.encoder.failure("recovery_failed", "events after the cursor are no longer retained")
                }
                Some(FollowItem::Failed(e)) => {
                    self.title.failed = true;
                    self.encoder.failure(e.code(), "the event stream failed; reconnect with Last-Event-ID")
                }
                Some(FollowItem::Held(held)) if held.gave_up => {
                    self.title.failed = true;
                    self.ended = true;
                    self.encoder.failure(HELD_CODE, &held.message())
                }
                Some(FollowItem::Held(held)) => self.encoder.held(&held),
            };
            self.pending.extend(frames);
        }
    }

    /// The replica drains: the stream ends with the dialect's rejoin frames.
    fn drained(&mut self) {
        self.ended = true;
        self.pending.extend(self.encoder.reconnect());
    }

    /// After the turn's frames: follows the session on for its title, when
    /// the encoder shows titles and one is due. True when it does.
    async fn follow_title(&mut self) -> bool {
        if !self.encoder.wants_title() || !self.title.wanted() {
            return false;
        }
        let after = self.title.position.max(self.follower.cursor());
        match self.sessions.follow_title(&self.principal, &self.session_id, after).await {
            Ok(Some(follower)) => {
                self.follower = follower;
                self.title.deadline = Some(tokio::time::Instant::now() + TITLE_WAIT);
                true
            }
            // Nothing due, the session is gone, or the store failed: the
            // stream ends as it would have (a rejoin asks again).
            Ok(None) | Err(_) => false,
        }
    }

    /// The frames after the last event: the encoder's finish (with the
    /// stored session, for encoders that want it), then its close.
    async fn closing_frames(&mut self) -> Vec<Frame> {
        let mut frames = self.finish_frames().await;
        frames.extend(self.encoder.close());
        frames
    }

    /// The encoder's finish, if it wants one, with the stored session.
    async fn finish_frames(&mut self) -> Vec<Frame> {
        if self.encoder.wants_finish()
            && let Ok(view) = self.sessions.get_with_history(&self.principal, &self.session_id).await
        {
            return self.encoder.finish(&view.session);
        }
        Vec::new()
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A `step_restarted` of the main agent: the takeover voided the partial
/// output of its step.
fn restarts_main_step(event: &LogEvent) -> bool {
    matches!(event.event.kind, EventKind::StepRestarted { .. }) && event.event.agent.parent_id.is_none()
}

/// An SSE response of `frames`, with keep-alive comments and proxy
/// buffering off.
pub fn sse(state: &AppState, frames: BoxStream<'static, Frame>) -> Response {
    let chunks = body::chunks(frames, Transport::Sse, state.config.server.heartbeat);
    let mut response = Body::from_stream(chunks).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies (nginx) must not buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// An NDJSON response: each frame's `data` and a newline; after
/// `server.heartbeat_secs` without a frame, a heartbeat line.
pub fn ndjson(state: &AppState, frames: BoxStream<'static, Frame>) -> Response {
    let chunks = body::chunks(frames, Transport::Ndjson, state.config.server.heartbeat);
    let mut response = Body::from_stream(chunks).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
