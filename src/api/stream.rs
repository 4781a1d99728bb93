//! Turns a session follower into a streaming response in any dialect: the
//! encoder renders each event, sent as SSE or, for line-based dialects, as
//! NDJSON; keep-alives fill idle time. A dialect whose reset after a
//! takeover replaces the client's conversation (AG-UI) gets the stored
//! session with the `step_restarted` event. When the replica drains, each
//! stream ends with its dialect's "rejoin" frame (native: `retry:` and an
//! `event: reconnect`), so clients reconnect to another replica with
//! `Last-Event-ID` or `?after=`.

use std::convert::Infallible;

use axum::{
    body::Body,
    http::{HeaderValue, header},
    response::{
        IntoResponse, Response,
        sse::{Event as SseEvent, KeepAlive, Sse},
    },
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{
    app::AppState,
    auth::Principal,
    protocol::{Encoder, EventKind, Frame, LogEvent, Transport},
    sessions::FollowItem,
};

/// The keep-alive line of NDJSON streams, for idle time (a relay wait):
/// proxies close connections that stay silent. A JSON object with a `type`
/// of its own, which line-based consumers skip like any type they do not map.
const NDJSON_HEARTBEAT: &[u8] = b"{\"type\":\"heartbeat\"}\n";

/// Frames buffered between the encoding task and the HTTP body.
const FRAME_BUFFER: usize = 64;

/// Streams `follower` through `encoder`, in the encoder's transport. The
/// session is re-read at the end, and at a `step_restarted`, only for
/// encoders that want it.
pub fn stream(
    state: &AppState,
    principal: Principal,
    session_id: String,
    follower: mpsc::Receiver<FollowItem>,
    encoder: Box<dyn Encoder>,
) -> Response {
    let (transport, headers) = (encoder.transport(), encoder.headers());
    let frames = encode(state, principal, session_id, follower, encoder);
    let mut response = match transport {
        Transport::Sse => {
            respond(state, ReceiverStream::new(frames).map(|frame| Ok::<_, Infallible>(sse_event(frame))))
        }
        Transport::Ndjson => ndjson(state, frames),
    };
    for (name, value) in headers {
        response.headers_mut().insert(*name, HeaderValue::from_static(value));
    }
    response
}

/// Runs the encoder in a task of its own (owned by the app's tracker) and
/// returns its frames. Ends when the follower ends, the client goes away, or
/// the replica drains (after the encoder's rejoin frames).
pub fn encode(
    state: &AppState,
    principal: Principal,
    session_id: String,
    mut follower: mpsc::Receiver<FollowItem>,
    mut encoder: Box<dyn Encoder>,
) -> mpsc::Receiver<Frame> {
    let (tx, rx) = mpsc::channel(FRAME_BUFFER);
    let sessions = state.sessions.clone();
    let draining = state.sessions.draining().clone();
    let shutdown = state.shutdown.clone();
    let open = state.metrics.open_stream(encoder.dialect());
    state.tasks.spawn(async move {
        let _open = open;
        let send_all = |frames: Vec<Frame>| {
            let tx = tx.clone();
            async move {
                for frame in frames {
                    if tx.send(frame).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        loop {
            let item = tokio::select! {
                item = follower.recv() => item,
                () = tx.closed() => return,
                () = draining.cancelled() => {
                    send_all(encoder.reconnect()).await;
                    return;
                }
                () = shutdown.cancelled() => return,
            };
            let frames = match item {
                None => break,
                Some(FollowItem::Event(event)) if restarts_main_step(&event) && encoder.wants_history_on_restart() => {
                    // Without the stored session (a store error), the
                    // dialect's plain restart frames: the stream goes on.
                    match sessions.get_with_history(&principal, &session_id).await {
                        Ok(view) => encoder.restarted(&event, &view.session),
                        Err(_) => encoder.encode(&event),
                    }
                }
                Some(FollowItem::Event(event)) => encoder.encode(&event),
                Some(FollowItem::RecoveryFailed { .. }) => {
                    encoder.failure("recovery_failed", "events after the cursor are no longer retained")
                }
                Some(FollowItem::Failed(e)) => {
                    encoder.failure(e.code(), "the event stream failed; reconnect with Last-Event-ID")
                }
            };
            if !send_all(frames).await {
                return;
            }
        }
        if encoder.wants_finish()
            && let Ok(view) = sessions.get_with_history(&principal, &session_id).await
            && !send_all(encoder.finish(&view.session)).await
        {
            return;
        }
        send_all(encoder.close()).await;
    });
    rx
}

/// A `step_restarted` of the main agent: the takeover voided the partial
/// output of its step.
fn restarts_main_step(event: &LogEvent) -> bool {
    matches!(event.event.kind, EventKind::StepRestarted { .. }) && event.event.agent.parent_id.is_none()
}

/// Fields in the order `event:`, `data:`, `id:` (axum writes them in call
/// order): simple line-by-line clients, Holmes' among them, take the event
/// name from the line before the data.
pub fn sse_event(frame: Frame) -> SseEvent {
    let mut event = SseEvent::default();
    if let Some(name) = frame.event {
        event = event.event(name);
    }
    event = event.data(frame.data);
    if let Some(id) = frame.id {
        event = event.id(id);
    }
    if let Some(retry) = frame.retry {
        event = event.retry(retry);
    }
    event
}

/// An SSE response with keep-alive comments and proxy buffering off.
pub fn respond(
    state: &AppState,
    events: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let keep_alive = KeepAlive::new().interval(state.config.server.heartbeat).text("heartbeat");
    let mut response = Sse::new(events).keep_alive(keep_alive).into_response();
    // Proxies (nginx) must not buffer the stream.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// An NDJSON response: each frame's `data` and a newline; after
/// `server.heartbeat_secs` without a frame, a heartbeat line.
fn ndjson(state: &AppState, frames: mpsc::Receiver<Frame>) -> Response {
    let period = state.config.server.heartbeat;
    let idle = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let lines = futures::stream::unfold((frames, idle), |(mut frames, mut idle)| async move {
        let line = tokio::select! {
            frame = frames.recv() => {
                idle.reset();
                let mut line = frame?.data.into_bytes();
                line.push(b'\n');
                Bytes::from(line)
            }
            _ = idle.tick() => Bytes::from_static(NDJSON_HEARTBEAT),
        };
        Some((Ok::<_, Infallible>(line), (frames, idle)))
    });
    let mut response = Body::from_stream(lines).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
