//! A stream's frames as the bytes of its response body: SSE events or
//! NDJSON lines, with a keep-alive after a quiet `heartbeat`.
//!
//! The frames ready together go out as one chunk (one write to the
//! socket): a wake-up that brings several events costs one system call,
//! not one per event. Frames are written straight into that chunk, in
//! exactly the bytes axum's `Sse` writes (`event: `, `data: ` per line,
//! `id: `, `retry: `, a blank line), with no event builder per frame. The
//! keep-alive timer is not reset per chunk: a chunk notes when it went
//! out, and the timer, when it fires, sends a keep-alive only if that was
//! `heartbeat` ago (else it sets itself to that moment).

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt, stream::BoxStream};
use tokio::time::{Instant, Sleep, sleep};

use crate::protocol::{Frame, Transport};

/// The most one chunk gathers before it goes out.
const CHUNK: usize = 64 * 1024;
/// SSE's keep-alive: a comment (axum's `KeepAlive::text("heartbeat")`).
const SSE_HEARTBEAT: &[u8] = b": heartbeat\n\n";
/// The keep-alive line of NDJSON streams, for idle time (a relay wait):
/// proxies close connections that stay silent. A JSON object with a `type`
/// of its own, which line-based consumers skip like any type they do not map.
const NDJSON_HEARTBEAT: &[u8] = b"{\"type\":\"heartbeat\"}\n";

/// The body stream of `frames` in `transport`.
pub fn chunks(
    frames: BoxStream<'static, Frame>,
    transport: Transport,
    heartbeat: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    Chunks { frames, transport, heartbeat, idle: Box::pin(sleep(heartbeat)), last: Instant::now(), ended: false }
}

struct Chunks {
    frames: BoxStream<'static, Frame>,
    transport: Transport,
    heartbeat: Duration,
    idle: Pin<Box<Sleep>>,
    /// When the last chunk went out.
    last: Instant,
    ended: bool,
}

impl Stream for Chunks {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut chunk = BytesMut::new();
        while !this.ended && chunk.len() < CHUNK {
            match this.frames.poll_next_unpin(cx) {
                Poll::Ready(Some(frame)) => write(&frame, this.transport, &mut chunk),
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        if !chunk.is_empty() {
            this.last = Instant::now();
            return Poll::Ready(Some(Ok(chunk.freeze())));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            ready!(this.idle.as_mut().poll(cx));
            let due = this.last + this.heartbeat;
            if due > Instant::now() {
                this.idle.as_mut().reset(due);
                continue;
            }
            this.last = Instant::now();
            this.idle.as_mut().reset(this.last + this.heartbeat);
            let heartbeat = match this.transport {
                Transport::Sse => SSE_HEARTBEAT,
                Transport::Ndjson => NDJSON_HEARTBEAT,
            };
            return Poll::Ready(Some(Ok(Bytes::from_static(heartbeat))));
        }
    }
}

/// Appends `frame` to `out` as the transport writes it.
fn write(frame: &Frame, transport: Transport, out: &mut BytesMut) {
    match transport {
        Transport::Ndjson => {
            out.put_slice(frame.data.as_bytes());
            out.put_u8(b'\n');
        }
        Transport::Sse => write_sse(frame, out),
    }
}

/// One SSE event, fields in the order `event:`, `data:`, `id:`, `retry:`:
/// simple line-by-line clients, Holmes' among them, take the event name
/// from the line before the data.
pub fn write_sse(frame: &Frame, out: &mut BytesMut) {
    out.reserve(frame.data.len() + 64);
    if let Some(name) = &frame.event {
        field(out, b"event", name.as_bytes());
    }
    // Each line of the data its own `data:` field (a line ends at \n or \r,
    // which is kept); no data, no field.
    if !frame.data.is_empty() {
        let data = frame.data.as_bytes();
        out.put_slice(b"data: ");
        let mut from = 0;
        for end in memchr::memchr2_iter(b'\n', b'\r', data) {
            out.put_slice(&data[from..=end]);
            out.put_slice(b"data: ");
            from = end + 1;
        }
        out.put_slice(&data[from..]);
        out.put_u8(b'\n');
    }
    if let Some(id) = &frame.id {
        field(out, b"id", id.as_bytes());
    }
    if let Some(retry) = frame.retry {
        field(out, b"retry", retry.as_millis().to_string().as_bytes());
    }
    out.put_u8(b'\n');
}

fn field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    debug_assert!(memchr::memchr2(b'\n', b'\r', value).is_none(), "an SSE field is one line");
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use axum::response::sse::Event;

    use super::*;

    fn ours(frame: &Frame) -> Bytes {
        let mut out = BytesMut::new();
        write_sse(frame, &mut out);
        out.freeze()
    }

    /// axum's bytes for the same event, as its `Sse` body writes it.
    async fn axums(frame: &Frame) -> Bytes {
        use axum::response::{IntoResponse, Sse};
        use http_body_util::BodyExt;
        let mut event = Event::default();
        if let Some(name) = &frame.event {
            event = event.event(name);
        }
        event = event.data(&frame.data);
        if let Some(id) = &frame.id {
            event = event.id(id);
        }
        if let Some(retry) = frame.retry {
            event = event.retry(retry);
        }
        let response = Sse::new(futures::stream::iter([Ok::<_, Infallible>(event)])).into_response();
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn frames_are_written_as_axum_wrote_them() {
        let frames = [
            Frame::event("text", r#"{"a":1}"#, Some("42".into())),
            Frame::data("line one\nline two\rthree\n"),
            Frame::data(""),
            Frame { retry: Some(Duration::from_millis(1500)), ..Frame::event("reconnect", "{}", None) },
        ];
        let expected = [
            "event: text\ndata: {\"a\":1}\nid: 42\n\n",
            "data: line one\ndata: line two\rdata: three\ndata: \n\n",
            "\n",
            "event: reconnect\ndata: {}\nretry: 1500\n\n",
        ];
        for (frame, expected) in frames.iter().zip(expected) {
            assert_eq!(String::from_utf8_lossy(&ours(frame)), expected);
            assert_eq!(ours(frame), axums(frame).await);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ready_frames_go_in_one_chunk_and_quiet_is_filled_with_keep_alives() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Frame>();
        let mut body = Box::pin(chunks(rx.boxed(), Transport::Ndjson, Duration::from_secs(15)));
        tx.unbounded_send(Frame::data("a")).unwrap();
        tx.unbounded_send(Frame::data("b")).unwrap();
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from_static(b"a\nb\n"));
        // 15 s after the last frame: a keep-alive, then every 15 s.
        let sent = Instant::now();
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from_static(NDJSON_HEARTBEAT));
        assert_eq!(Instant::now() - sent, Duration::from_secs(15));
        tokio::time::advance(Duration::from_secs(10)).await;
        tx.unbounded_send(Frame::data("c")).unwrap();
        let sent = Instant::now();
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from_static(b"c\n"));
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from_static(NDJSON_HEARTBEAT));
        assert_eq!(Instant::now() - sent, Duration::from_secs(15), "counted from the last frame");
        drop(tx);
        assert!(body.next().await.is_none());
    }
}
