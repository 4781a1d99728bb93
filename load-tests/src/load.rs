//! Many chats at once: `n` chats against one [`Target`], their starts spread
//! evenly over a ramp, each read to its end; what each delivered and the
//! span of the whole phase.

use std::time::{Duration, Instant};

use crate::{
    Result,
    mock::Order,
    stats::{Summary, millis},
    streams::{Target, Timing},
};

pub struct Phase {
    pub timings: Vec<Timing>,
    /// From the first start to the last stream's end.
    pub elapsed: Duration,
}

impl Phase {
    /// Prepares `n` chats (for the native API, creates their sessions).
    pub async fn prepare(target: &Target, n: usize) -> Result<Vec<Option<String>>> {
        futures::future::try_join_all((0..n).map(|chat| target.prepare(chat))).await
    }

    /// Runs the `prepared` chats, starting chat `i` of `n` at `i * ramp / n`.
    pub async fn run(target: &Target, order: &Order, prepared: Vec<Option<String>>, ramp: Duration) -> Result<Self> {
        let n = prepared.len();
        let started = Instant::now();
        let chats: Vec<_> = prepared
            .into_iter()
            .enumerate()
            .map(|(i, prepared)| {
                let (target, order) = (target.clone(), order.clone());
                let at = started + ramp.mul_f64(i as f64 / n.max(1) as f64);
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    target.chat(i, &order, prepared.as_deref()).await
                })
            })
            .collect();
        let mut timings = Vec::with_capacity(n);
        for chat in chats {
            timings.push(chat.await?);
        }
        Ok(Self { timings, elapsed: started.elapsed() })
    }

    /// Chats that failed or lost, added or reordered text.
    pub fn incomplete(&self, order: &Order) -> usize {
        self.timings.iter().filter(|t| !t.complete(order)).count()
    }

    /// The first error seen, for the report.
    pub fn first_error(&self) -> Option<&str> {
        self.timings.iter().find_map(|t| t.error.as_deref())
    }

    /// Times to the first token, ms.
    pub fn first_token(&self) -> Option<Summary> {
        Summary::of(self.timings.iter().filter_map(|t| t.first_token).map(millis).collect())
    }

    /// Times to the response headers, ms.
    pub fn headers(&self) -> Option<Summary> {
        Summary::of(self.timings.iter().filter_map(|t| t.headers).map(millis).collect())
    }

    /// Times to the end of the stream, ms.
    pub fn total(&self) -> Option<Summary> {
        Summary::of(self.timings.iter().map(|t| millis(t.total)).collect())
    }

    /// Gaps between tokens, ms.
    pub fn gaps(&self) -> Option<Summary> {
        Summary::of(self.timings.iter().flat_map(|t| t.gaps.iter().copied()).map(millis).collect())
    }

    /// Tokens received (a frame may carry several: the gateway coalesces
    /// what queues behind a write; each token is `t` and its number).
    pub fn tokens(&self) -> u64 {
        self.timings.iter().map(|t| t.text.matches('t').count() as u64).sum()
    }

    /// Token frames received.
    pub fn frames(&self) -> u64 {
        self.timings.iter().map(|t| t.gaps.len() as u64 + u64::from(t.first_token.is_some())).sum()
    }
}
