//! Turns a session follower into an SSE response: one frame per event,
//! keep-alive comments on idle streams, and an end at shutdown (the follower
//! stops, so clients reconnect to another replica with `Last-Event-ID`).

use std::convert::Infallible;

use axum::response::{
    IntoResponse, Response,
    sse::{Event as SseEvent, KeepAlive, Sse},
};
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{
    app::AppState,
    protocol::native::{self, Frame},
    sessions::FollowItem,
};

/// The native dialect's stream.
pub fn native(state: &AppState, follower: mpsc::Receiver<FollowItem>) -> Response {
    let frames = ReceiverStream::new(follower).map(|item| match item {
        FollowItem::Event(event) => native::encode(&event),
        FollowItem::RecoveryFailed { first_seq } => Frame {
            id: None,
            event: Some("recovery_failed".into()),
            data: json!({
                "type": "recovery_failed",
                "code": "recovery_failed",
                "message": "events after the cursor are no longer retained",
                "first_seq": first_seq,
            })
            .to_string(),
        },
        FollowItem::Failed(e) => Frame {
            id: None,
            event: Some("error".into()),
            data: json!({"type": "error", "code": e.code(), "message": "the event stream failed; reconnect with Last-Event-ID"})
                .to_string(),
        },
    });
    respond(state, frames)
}

fn respond(state: &AppState, frames: impl Stream<Item = Frame> + Send + 'static) -> Response {
    let events = frames.map(|frame| {
        let mut event = SseEvent::default().data(frame.data);
        if let Some(id) = frame.id {
            event = event.id(id);
        }
        if let Some(name) = frame.event {
            event = event.event(name);
        }
        Ok::<_, Infallible>(event)
    });
    let keep_alive = KeepAlive::new().interval(state.config.server.heartbeat).text("heartbeat");
    let mut response = Sse::new(events).keep_alive(keep_alive).into_response();
    // Proxies (nginx) must not buffer the stream.
    response.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    response
}
