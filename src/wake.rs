//! Wakers that stand between a future and its task.
//!
//! [`Polled`]: a future that is polled only once it has been woken. A task
//! that waits in a `select!` for something rare (the replica's drain or
//! shutdown, a session's cancellation) beside something frequent (the
//! next token) polls every branch at every wake: the rare futures are
//! polled once per token for nothing. A waiting `CancellationToken`
//! future locks its token's state and its `Notify`'s waiter list at each
//! of those polls (and the replica-wide tokens are shared by every stream
//! of the replica). Wrapped in [`Polled`], the inner future is polled
//! with a waker of its own — so it registers once — and polled again only
//! after that waker fired; between, a poll costs an atomic swap and a
//! waker comparison. This is sound for any future: a future is only ever
//! owed a poll after it woke its waker.
//!
//! [`Relay`]: the waker under [`Polled`] and under the model connection's
//! exchange (`providers/http1.rs`) — it notes each wake and passes it on to
//! the task, or, while the task [holds](Relay::hold) it (it is polling what
//! the relay wakes for), only notes it.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

use futures::task::AtomicWaker;

/// A waker that notes each wake and passes it on to the task that
/// registered last, except during a [`Relay::hold`].
pub struct Relay {
    task: AtomicWaker,
    woken: AtomicBool,
    holding: AtomicBool,
}

impl Relay {
    /// A relay, and the waker that wakes through it.
    pub fn new() -> (Arc<Self>, Waker) {
        let relay =
            Arc::new(Self { task: AtomicWaker::new(), woken: AtomicBool::new(false), holding: AtomicBool::new(false) });
        let waker = Waker::from(Arc::clone(&relay));
        (relay, waker)
    }

    /// The task wakes are passed on to (the one polling now).
    pub fn register(&self, task: &Waker) {
        self.task.register(task);
    }

    /// Whether it was woken since the last look; the note is cleared.
    pub fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }

    /// Until [`Relay::release`], wakes are only noted: the task is polling
    /// what they are for, and looks at the note when it is done.
    pub fn hold(&self) {
        self.woken.store(false, Ordering::SeqCst);
        self.holding.store(true, Ordering::SeqCst);
    }

    /// Ends a hold: whether a wake came during it (wakes from now on reach
    /// the task again).
    pub fn release(&self) -> bool {
        // Both sides SeqCst: either a wake sees the hold over and wakes the
        // task, or this sees the wake.
        self.holding.store(false, Ordering::SeqCst);
        self.woken.load(Ordering::SeqCst)
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.holding.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

/// `inner`, polled at its first poll and then only after it woke.
pub struct Polled<F> {
    inner: Pin<Box<F>>,
    relay: Arc<Relay>,
    waker: Waker,
    started: bool,
}

impl<F: Future> Polled<F> {
    pub fn new(inner: F) -> Self {
        let (relay, waker) = Relay::new();
        Self { inner: Box::pin(inner), relay, waker, started: false }
    }
}

impl<F: Future> Future for Polled<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the note is read: a wake after the read reaches
        // this task; one before it is in the note.
        this.relay.register(cx.waker());
        if this.started && !this.relay.take_woken() {
            return Poll::Pending;
        }
        this.started = true;
        this.inner.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use futures::task::noop_waker_ref;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A future that counts its polls and is ready once told.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn the_inner_future_is_polled_once_then_only_after_it_woke() {
        let (polls, ready, waker) = Default::default();
        let counted = Counted { polls: Arc::clone(&polls), ready: Arc::clone(&ready), waker: Arc::clone(&waker) };
        let mut polled = Polled::new(counted);
        let mut cx = Context::from_waker(noop_waker_ref());
        for _ in 0..5 {
            assert!(Pin::new(&mut polled).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "registered once, not polled again unwoken");
        ready.store(true, Ordering::SeqCst);
        waker.lock().unwrap().take().expect("the inner future kept a waker").wake();
        assert!(Pin::new(&mut polled).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_cancellation_reaches_a_task_waiting_on_it_beside_a_busy_branch() {
        let token = CancellationToken::new();
        let mut cancelled = Polled::new(token.clone().cancelled_owned());
        let (tick, mut ticks) = tokio::sync::mpsc::channel(1);
        let busy = tokio::spawn(async move {
            for _ in 0..100 {
                if tick.send(()).await.is_err() {
                    return;
                }
            }
        });
        let mut seen = 0;
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                tokio::select! {
                    Some(()) = ticks.recv() => {
                        seen += 1;
                        if seen == 50 {
                            token.cancel();
                        }
                    }
                    () = &mut cancelled => break,
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "the cancellation was never seen (after {seen} ticks)");
        busy.abort();
    }
}
