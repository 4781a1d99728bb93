//! Sustained load: `n` clients, each starting a new chat as soon as its
//! previous one ends, so `n` streams are open at every moment — a
//! deployment's steady state, where [`crate::load::Phase`] measures one
//! wave of chats.
//!
//! The clients start spread over a ramp and stop starting chats at the end
//! of the run; the chats still running then finish. What counts is a
//! [`Window`] inside the run, after the ramp has settled: the tokens that
//! arrived inside it, the chats that started inside it. The caller samples
//! the processes' CPU and Redis' counters at the window's edges, so every
//! cost is divided by the work done in the same interval.

use std::time::{Duration, Instant};

use crate::{
    Result,
    mock::Order,
    stats::{Summary, millis},
    streams::{Target, Timing},
};

/// The measured part of a sustained run.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn contains(&self, at: Instant) -> bool {
        (self.start..self.end).contains(&at)
    }

    pub fn length(&self) -> Duration {
        self.end - self.start
    }
}

/// Every chat of a sustained run.
pub struct Sustained {
    pub clients: usize,
    /// In the order the clients ended them; the ramp's and the drain's
    /// chats included.
    pub timings: Vec<Timing>,
}

impl Sustained {
    /// `clients` clients, client `i` starting at `started + i * ramp /
    /// clients`, each running chats back to back until `stop`. A chat of the
    /// native API creates its session first (outside its times, inside the
    /// window's CPU: a sustained user creates sessions too).
    pub async fn run(
        target: &Target,
        order: &Order,
        clients: usize,
        started: Instant,
        ramp: Duration,
        stop: Instant,
    ) -> Result<Self> {
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                let (target, order) = (target.clone(), order.clone());
                let at = started + ramp.mul_f64(i as f64 / clients.max(1) as f64);
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    let mut timings = Vec::new();
                    while Instant::now() < stop {
                        let timing = match target.prepare(i).await {
                            Ok(prepared) => target.chat(i, &order, prepared.as_deref()).await,
                            Err(e) => Timing {
                                started: Some(Instant::now()),
                                error: Some(e.to_string()),
                                ..Timing::default()
                            },
                        };
                        timings.push(timing);
                    }
                    timings
                })
            })
            .collect();
        let mut timings = Vec::new();
        for task in tasks {
            timings.extend(task.await?);
        }
        Ok(Self { clients, timings })
    }

    /// Chats that started inside `window`.
    fn started_in<'a>(&'a self, window: &'a Window) -> impl Iterator<Item = &'a Timing> + 'a {
        self.timings.iter().filter(|t| t.started.is_some_and(|at| window.contains(at)))
    }

    /// How many chats started inside `window`.
    pub fn chats(&self, window: &Window) -> usize {
        self.started_in(window).count()
    }

    /// Tokens that arrived inside `window`, whichever chat carried them.
    pub fn tokens(&self, window: &Window) -> u64 {
        let arrived = |t: &Timing| {
            let Some(started) = t.started else { return 0 };
            t.arrivals.iter().filter(|&&offset| window.contains(started + offset)).count() as u64
        };
        self.timings.iter().map(arrived).sum()
    }

    /// Times to the first token of the chats started inside `window`, ms.
    pub fn first_token(&self, window: &Window) -> Option<Summary> {
        Summary::of(self.started_in(window).filter_map(|t| t.first_token).map(millis).collect())
    }

    /// Times to the response headers of the chats started inside `window`, ms.
    pub fn headers(&self, window: &Window) -> Option<Summary> {
        Summary::of(self.started_in(window).filter_map(|t| t.headers).map(millis).collect())
    }

    /// Total times of the chats started inside `window`, ms.
    pub fn total(&self, window: &Window) -> Option<Summary> {
        Summary::of(self.started_in(window).map(|t| millis(t.total)).collect())
    }

    /// Gaps between tokens of the chats started inside `window`, ms.
    pub fn gaps(&self, window: &Window) -> Option<Summary> {
        Summary::of(self.started_in(window).flat_map(|t| t.gaps.iter().copied()).map(millis).collect())
    }

    /// Chats of the whole run that failed or lost, added or reordered text.
    pub fn incomplete(&self, order: &Order) -> usize {
        self.timings.iter().filter(|t| !t.complete(order)).count()
    }

    /// The first error seen, for the report.
    pub fn first_error(&self) -> Option<&str> {
        self.timings.iter().find_map(|t| t.error.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_the_tokens_that_arrived_in_it_and_the_chats_that_started_in_it() {
        let t0 = Instant::now();
        let window = Window { start: t0 + Duration::from_secs(10), end: t0 + Duration::from_secs(20) };
        let chat = |start_s: u64, arrivals_s: &[u64]| Timing {
            started: Some(t0 + Duration::from_secs(start_s)),
            arrivals: arrivals_s.iter().map(|&s| Duration::from_secs(s)).collect(),
            first_token: arrivals_s.first().map(|&s| Duration::from_secs(s)),
            ..Timing::default()
        };
        let run = Sustained {
            clients: 2,
            timings: vec![
                chat(9, &[0, 1, 2]),  // started before, tokens at 9, 10, 11: two inside
                chat(12, &[1, 2]),    // inside
                chat(19, &[0, 1, 2]), // started inside, tokens at 19, 20, 21: one inside
                chat(20, &[1]),       // started at the end: outside
            ],
        };
        assert_eq!(run.tokens(&window), 2 + 2 + 1);
        assert_eq!(run.chats(&window), 2);
        assert_eq!(run.first_token(&window).map(|s| s.n), Some(2));
    }
}
