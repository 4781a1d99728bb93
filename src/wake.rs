//! [`Polled`]: a future that is polled only once it has been woken.
//!
//! A task that waits in a `select!` for something rare (the replica's
//! drain or shutdown, a session's cancellation) beside something frequent
//! (the next token) polls every branch at every wake: the rare futures are
//! polled once per token for nothing. A waiting `CancellationToken`
//! future locks its token's state and its `Notify`'s waiter list at each
//! of those polls (and the replica-wide tokens are shared by every stream
//! of the replica). Wrapped in [`Polled`], the inner future is polled
//! with a waker of its own — so it registers once — and polled again only
//! after that waker fired; between, a poll costs an atomic swap and a
//! waker comparison.
//!
//! This is sound for any future: a future is only ever owed a poll after
//! it woke its waker.

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

/// `inner`, polled at its first poll and then only after it woke.
pub struct Polled<F> {
    inner: Pin<Box<F>>,
    proxy: Arc<Proxy>,
    waker: Waker,
    started: bool,
}

/// The waker the inner future is given: it notes the wake and passes it
/// on to the task that polled last.
struct Proxy {
    task: AtomicWaker,
    woken: AtomicBool,
}

impl Wake for Proxy {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.task.wake();
    }
}

impl<F: Future> Polled<F> {
    pub fn new(inner: F) -> Self {
        let proxy = Arc::new(Proxy { task: AtomicWaker::new(), woken: AtomicBool::new(false) });
        let waker = Waker::from(Arc::clone(&proxy));
        Self { inner: Box::pin(inner), proxy, waker, started: false }
    }
}

impl<F: Future> Future for Polled<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read: a wake after the read reaches
        // this task; one before it is seen in the flag.
        this.proxy.task.register(cx.waker());
        if this.started && !this.proxy.woken.swap(false, Ordering::SeqCst) {
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
        assert!(seen >= 50);
        busy.abort();
    }
}
