//! The connections to a plain-HTTP/1.1 model server, read in the task of
//! the turn that streams from them.
//!
//! reqwest (kept for TLS, HTTP/2 and proxies) runs each connection in a
//! task of its own and hands the response body over a channel: every
//! streamed token woke that task, then the turn's, then that task once
//! more (the body asking for the next chunk). Here the turn polls the
//! connection itself — hyper's `client::conn::http1`, beside the response
//! body it feeds. The two wake each other as they hand a chunk over (the
//! body asks for the next one, the connection delivers it); those wakes,
//! made while the turn polls them, are acted on in that same poll (a
//! [`Relay`] held for the poll) rather than sent to the task, which would
//! be polled once more for nothing (and read the socket once more) at
//! every token. A token read from the model costs the turn's task one poll.
//!
//! A [`Pool`] keeps the connections whose last response was read to its
//! end, newest first, for at most [`IDLE_FOR`]; a connection the server
//! closed meanwhile is noticed when it is taken (one poll without waiting)
//! and dropped. A request that fails on a reused connection before any
//! answer is sent once more on a new one (the server may have closed it as
//! the request went out); every other failure is the caller's to retry.

use std::{
    collections::VecDeque,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::{Stream, task::noop_waker_ref};
use http_body_util::Full;
use hyper::{
    Request, Response,
    body::{Body as _, Incoming},
    client::conn::http1::{self, Connection, SendRequest},
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::sse::BodyError as Error;
use crate::wake::Relay;

/// How long an idle connection is kept: below the usual servers' idle
/// limits (uvicorn 5 s aside, which the check at taking covers).
const IDLE_FOR: Duration = Duration::from_secs(60);

/// One HTTP/1.1 connection: what sends on it, and what drives it.
struct Link {
    sender: SendRequest<Full<Bytes>>,
    conn: Connection<TokioIo<TcpStream>, Full<Bytes>>,
    /// Whether it has carried an exchange before (a failure on it before
    /// any answer may be the server's close racing the request).
    reused: bool,
}

impl Link {
    /// Drives the connection without waiting: `true` while it is open.
    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool {
        self.conn.poll_without_shutdown(cx).is_pending()
    }
}

/// The idle connections to one server (`host:port`).
pub(super) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    address: String,
    connect_timeout: Duration,
    /// Newest at the back; each with the moment it went idle.
    idle: Mutex<VecDeque<(Link, Instant)>>,
}

impl Pool {
    pub fn new(address: String, connect_timeout: Duration) -> Self {
        Self { inner: Arc::new(Inner { address, connect_timeout, idle: Mutex::new(VecDeque::new()) }) }
    }

    /// Sends `make()` and waits for the answer's head, driving the
    /// connection meanwhile. The body is read through the [`Exchange`],
    /// which must be polled for the connection to make progress.
    pub async fn send(&self, make: impl Fn() -> Request<Full<Bytes>>) -> Result<(Response<()>, Exchange), SendError> {
        if let Some(link) = self.inner.take_idle() {
            match exchange(link, make()).await {
                // The server closed it as the request went out: once more, anew.
                Err(ExchangeError { retry_anew: true, .. }) => {}
                result => return self.answer(result),
            }
        }
        let link = self.inner.connect().await?;
        self.answer(exchange(link, make()).await)
    }

    /// An exchange's result: the answer's head, and its body to read.
    fn answer(
        &self,
        result: Result<(Response<Incoming>, Link), ExchangeError>,
    ) -> Result<(Response<()>, Exchange), SendError> {
        let (response, link) = result.map_err(|e| SendError::Request(e.error))?;
        let (parts, body) = response.into_parts();
        Ok((Response::from_parts(parts, ()), Exchange::new(link, body, Arc::clone(&self.inner))))
    }

    /// Idle connections held now (for tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.inner.idle.lock().expect("pool lock").len()
    }
}

impl Inner {
    /// The newest idle connection still open, dropping the stale ones.
    fn take_idle(&self) -> Option<Link> {
        let mut idle = self.idle.lock().expect("pool lock");
        while let Some((mut link, since)) = idle.pop_back() {
            if since.elapsed() >= IDLE_FOR {
                // Everything older is staler still.
                idle.clear();
                return None;
            }
            // A close or an error that arrived while it was idle shows now.
            let mut cx = Context::from_waker(noop_waker_ref());
            if link.poll_open(&mut cx) && link.sender.is_ready() {
                return Some(link);
            }
        }
        None
    }

    fn put_idle(&self, mut link: Link) {
        link.reused = true;
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("pool lock");
        while idle.front().is_some_and(|(_, since)| now.duration_since(*since) >= IDLE_FOR) {
            idle.pop_front();
        }
        idle.push_back((link, now));
    }

    async fn connect(&self) -> Result<Link, SendError> {
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.address))
            .await
            .map_err(|_| SendError::ConnectTimeout)?
            .map_err(|e| SendError::Connect(e.into()))?;
        // Each request is written whole; a token's read must not wait on
        // Nagle either.
        let _ = tcp.set_nodelay(true);
        let (sender, conn) =
            http1::Builder::new().handshake(TokioIo::new(tcp)).await.map_err(|e| SendError::Connect(e.into()))?;
        Ok(Link { sender, conn, reused: false })
    }
}

/// Why a request got no answer.
#[derive(Debug)]
pub(super) enum SendError {
    ConnectTimeout,
    Connect(Error),
    Request(Error),
}

struct ExchangeError {
    error: Error,
    /// Whether the request may not have reached the server: a reused
    /// connection that ended (or was found closed) before any answer.
    retry_anew: bool,
}

/// Sends `request` on `link` and drives the connection until the answer's
/// head has arrived.
async fn exchange(mut link: Link, request: Request<Full<Bytes>>) -> Result<(Response<Incoming>, Link), ExchangeError> {
    let reused = link.reused;
    let mut response = std::pin::pin!(link.sender.try_send_request(request));
    let mut open = true;
    let result = std::future::poll_fn(|cx| {
        if open {
            open = link.poll_open(cx);
        }
        match response.as_mut().poll(cx) {
            Poll::Ready(Ok(response)) => Poll::Ready(Ok(response)),
            Poll::Ready(Err(error)) => {
                let error = error.into_error();
                let unanswered = error.is_canceled() || error.is_incomplete_message();
                Poll::Ready(Err(ExchangeError { error: error.into(), retry_anew: reused && unanswered }))
            }
            // The connection ended and no answer will come.
            Poll::Pending if !open => Poll::Ready(Err(ExchangeError {
                error: "the connection closed before an answer".into(),
                retry_anew: reused,
            })),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    result.map(|response| (response, link))
}

/// The body of one answer, read through its connection. Dropped before
/// its end, it closes the connection; read to its end (or found ended when
/// dropped), it gives the connection back to the pool.
pub(super) struct Exchange {
    parts: Parts,
    pool: Arc<Inner>,
    /// What the connection and the body are polled with: wakes from the
    /// socket reach the task, those between the two are seen in the poll.
    relay: Arc<Relay>,
    waker: Waker,
    /// Whether the last poll gave a chunk, and a chunk held back: chunks
    /// already here in a burst are given one per wake of the task (see
    /// [`Exchange::poll_next`]).
    gave: bool,
    held: Option<Bytes>,
}

/// The connection and the body it feeds.
struct Parts {
    link: Option<Link>,
    body: Incoming,
    ended: bool,
}

/// Passes over the connection and body within one poll, at most.
const PASSES: usize = 4;

impl Exchange {
    fn new(link: Link, body: Incoming, pool: Arc<Inner>) -> Self {
        let (relay, waker) = Relay::new();
        Self { parts: Parts { link: Some(link), body, ended: false }, pool, relay, waker, gave: false, held: None }
    }
}

impl Parts {
    /// One pass: the connection (what it reads goes into the body's
    /// channel), then the body.
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        loop {
            if let Some(link) = &mut self.link
                && !link.poll_open(cx)
            {
                // Closed: the body ends (or fails) with what it was given.
                self.link = None;
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => return Poll::Ready(Some(Ok(data))),
                    Err(_trailers) => {}
                },
                Poll::Ready(Some(Err(error))) => {
                    self.link = None;
                    return Poll::Ready(Some(Err(error.into())));
                }
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Stream for Exchange {
    type Item = Result<Bytes, Error>;

    /// A chunk already read when the last one was given (a burst: the
    /// model's chunks came in one read) is held back for one wake of the
    /// task, so what the reader did with the last one (an event queued for
    /// the writer, whose task it woke) goes first: a burst's events keep
    /// the model's granularity as they did over reqwest, where each chunk
    /// crossed to the reader's task by itself, instead of being merged by
    /// the writer into one delta. A paced stream (each chunk in a read of
    /// its own) never waits here.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(chunk) = this.held.take() {
            this.gave = true;
            return Poll::Ready(Some(Ok(chunk)));
        }
        let poll = this.poll_parts(cx);
        let gave = std::mem::replace(&mut this.gave, matches!(poll, Poll::Ready(Some(Ok(_)))));
        match poll {
            Poll::Ready(Some(Ok(chunk))) if gave => {
                this.held = Some(chunk);
                this.gave = false;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            poll => poll,
        }
    }
}

impl Exchange {
    /// The connection and the body polled until a chunk, the end, or both
    /// wait for something outside this task.
    fn poll_parts(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        self.relay.register(cx.waker());
        let mut inner = Context::from_waker(&self.waker);
        for _ in 0..PASSES {
            self.relay.hold();
            let poll = self.parts.poll_once(&mut inner);
            let woken = self.relay.release();
            // A chunk in hand: what the pass woke is seen to at the next
            // poll, which always begins with the connection.
            if poll.is_ready() || !woken {
                return poll;
            }
        }
        // Still waking each other: let other tasks run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // A reader that stopped at the answer's last event (`[DONE]`)
        // leaves the body's end unread: it is usually here already.
        let mut cx = Context::from_waker(noop_waker_ref());
        let parts = &mut self.parts;
        // A few chunks at most: a body that goes on is not waited for.
        for _ in 0..8 {
            if parts.ended || parts.link.is_none() {
                break;
            }
            match parts.poll_once(&mut cx) {
                Poll::Ready(Some(Ok(_)) | None) => {}
                Poll::Ready(Some(Err(_))) | Poll::Pending => return,
            }
        }
        let Some(mut link) = parts.link.take().filter(|_| parts.ended) else { return };
        // The connection takes up its next request once polled after the
        // body's end.
        if link.poll_open(&mut cx) && link.sender.is_ready() {
            self.pool.put_idle(link);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        task::Wake,
    };

    use futures::StreamExt;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
        sync::{mpsc, watch},
    };

    use super::*;

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";

    /// What the test server does with one request.
    #[derive(Clone, Copy)]
    enum Reply {
        Answer,
        /// Closes the connection without answering.
        HangUp,
    }

    /// A test server and what it reports.
    struct Server {
        address: String,
        /// Each connection accepted, by number.
        accepts: mpsc::UnboundedReceiver<usize>,
        /// Each connection closed.
        closes: mpsc::UnboundedReceiver<usize>,
        /// Set: every connection waiting for a request is closed.
        hang_up: watch::Sender<bool>,
    }

    /// A server doing with each request of each connection what `script`
    /// says (given the connection's number and the request's in it).
    async fn server(script: impl Fn(usize, usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (accepted, accepts) = mpsc::unbounded_channel();
        let (closed, closes) = mpsc::unbounded_channel();
        let (hang_up, hung_up) = watch::channel(false);
        let script = Arc::new(script);
        tokio::spawn(async move {
            for connection in 0.. {
                let (mut socket, _) = listener.accept().await.unwrap();
                accepted.send(connection).unwrap();
                let (script, closed, mut hung_up) = (Arc::clone(&script), closed.clone(), hung_up.clone());
                tokio::spawn(async move {
                    for request in 0.. {
                        let read = tokio::select! {
                            read = read_request(&mut socket) => read,
                            _ = hung_up.wait_for(|hang_up| *hang_up) => false,
                        };
                        if !read {
                            break;
                        }
                        match script(connection, request) {
                            Reply::Answer => socket.write_all(ANSWER).await.unwrap(),
                            Reply::HangUp => break,
                        }
                    }
                    drop(socket);
                    let _ = closed.send(connection);
                });
            }
        });
        Server { address, accepts, closes, hang_up }
    }

    /// Reads one request head and its `content-length` body; `false` at
    /// the end of the connection.
    async fn read_request(socket: &mut TcpStream) -> bool {
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let Ok(n @ 1..) = socket.read(&mut buffer).await else { return false };
            received.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&received).to_ascii_lowercase();
            let Some(head_end) = text.find("\r\n\r\n") else { continue };
            let length = text[..head_end]
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse::<usize>().unwrap());
            if received.len() >= head_end + 4 + length {
                return true;
            }
        }
    }

    fn request() -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::from_static(b"{}")));
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = hyper::Uri::from_static("/v1/chat/completions");
        request
    }

    /// Sends one request and reads its answer's body to the end.
    async fn ask(pool: &Pool) -> Result<Vec<u8>, SendError> {
        let (head, mut exchange) = pool.send(request).await?;
        assert_eq!(head.status(), 200);
        let mut body = Vec::new();
        while let Some(chunk) = exchange.next().await {
            body.extend_from_slice(&chunk.expect("the body arrives whole"));
        }
        Ok(body)
    }

    fn pool(address: String) -> Pool {
        Pool::new(address, Duration::from_secs(5))
    }

    #[tokio::test]
    async fn answers_read_to_their_end_leave_the_connection_for_the_next_request() {
        let mut server = server(|_, _| Reply::Answer).await;
        let pool = pool(server.address.clone());
        for _ in 0..3 {
            assert_eq!(ask(&pool).await.unwrap(), b"hello");
            assert_eq!(pool.idle(), 1);
        }
        assert_eq!(server.accepts.recv().await, Some(0));
        assert!(server.accepts.try_recv().is_err(), "one connection carried all three");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced() {
        let mut server = server(|_, _| Reply::Answer).await;
        let pool = pool(server.address.clone());
        assert_eq!(ask(&pool).await.unwrap(), b"hello");
        assert_eq!(pool.idle(), 1);
        server.hang_up.send_replace(true);
        assert_eq!(server.closes.recv().await, Some(0), "the server closed the idle connection");
        server.hang_up.send_replace(false);
        assert_eq!(ask(&pool).await.unwrap(), b"hello");
        assert_eq!(server.accepts.recv().await, Some(0));
        assert_eq!(server.accepts.recv().await, Some(1), "a new connection carried the request");
    }

    #[tokio::test]
    async fn a_reused_connection_closed_as_the_request_went_out_is_tried_once_anew() {
        // Connection 0 answers its first request and hangs up at its second.
        let mut server = server(|connection, request| match (connection, request) {
            (0, 1) => Reply::HangUp,
            _ => Reply::Answer,
        })
        .await;
        let pool = pool(server.address.clone());
        assert_eq!(ask(&pool).await.unwrap(), b"hello");
        assert_eq!(ask(&pool).await.unwrap(), b"hello", "the second went out again on a new connection");
        assert_eq!(server.accepts.recv().await, Some(0));
        assert_eq!(server.accepts.recv().await, Some(1));
    }

    #[tokio::test]
    async fn a_new_connection_that_fails_before_answering_is_an_error() {
        let server = server(|_, _| Reply::HangUp).await;
        let error = ask(&pool(server.address.clone())).await.unwrap_err();
        assert!(matches!(error, SendError::Request(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = pool(listener.local_addr().unwrap().to_string());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            assert!(read_request(&mut socket).await);
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            // The body never ends: wait for the client to hang up.
            read_request(&mut socket).await
        });
        let (_, mut exchange) = pool.send(request).await.unwrap();
        assert_eq!(exchange.next().await.unwrap().unwrap(), "hello");
        drop(exchange);
        assert_eq!(pool.idle(), 0);
        let read_more = tokio::time::timeout(Duration::from_secs(10), server).await.expect("the client hung up");
        assert!(!read_more.unwrap(), "the connection ended");
    }

    /// Counts the wakes it is given.
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn chunks_that_came_in_one_read_are_given_one_per_wake_of_the_task() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = pool(listener.local_addr().unwrap().to_string());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            assert!(read_request(&mut socket).await);
            let answer =
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nc1\r\n2\r\nc2\r\n2\r\nc3\r\n0\r\n\r\n";
            socket.write_all(answer.as_bytes()).await.unwrap();
            read_request(&mut socket).await
        });
        let (_, mut exchange) = pool.send(request).await.unwrap();
        assert_eq!(exchange.next().await.unwrap().unwrap(), "c1");
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut poll = || Pin::new(&mut exchange).poll_next(&mut cx).map(|chunk| chunk.map(Result::unwrap));
        for (chunk, wakes_before) in [("c2", 0), ("c3", 1)] {
            // Already read with the last one: held back once, the task woken.
            assert!(poll().is_pending());
            assert_eq!(wakes.0.load(Ordering::SeqCst), wakes_before + 1);
            assert_eq!(poll(), Poll::Ready(Some(Bytes::from(chunk))));
        }
        assert_eq!(poll(), Poll::Ready(None));
        drop(exchange);
        assert_eq!(pool.idle(), 1, "read to its end, the connection is kept");
    }
}
