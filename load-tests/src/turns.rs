//! Throughput through the gateway's event path: `sessions` turns started at
//! once over HTTP on one replica, each scripted by a [`Command`] (`emit N`:
//! coalesced deltas; `append N`: durable appends one by one), each turn's own
//! SSE stream read to its end. Timed from the first request until the last
//! stream delivered `turn_ended`; Redis counters are read around that span.

use std::time::{Duration, Instant};

use crate::{
    Result,
    cluster::Client,
    redis_admin::{Admin, Counters},
    runner::Command,
    sse::Frames,
};

/// What one turn's stream delivered.
#[derive(Debug, Clone, Default)]
pub struct TurnOutcome {
    /// The seq of the last frame: events in the session's log.
    pub last_seq: u64,
    pub frames: u64,
    /// `text_delta` frames: text delta events in the log.
    pub deltas: u64,
    /// Bytes of text received in those deltas.
    pub text_bytes: usize,
    /// The type of the last frame (`turn_ended` when all went well).
    pub last_event: String,
}

impl TurnOutcome {
    /// Reads `frames` to the end of the stream.
    pub async fn read(mut frames: Frames) -> Result<Self> {
        let mut outcome = Self::default();
        while let Some(frame) = frames.next().await? {
            outcome.frames += 1;
            if let Some(seq) = frame.id {
                outcome.last_seq = seq;
            }
            if let Some(text) = frame.text() {
                outcome.deltas += 1;
                outcome.text_bytes += text.len();
            }
            outcome.last_event = frame.event;
        }
        Ok(outcome)
    }
}

pub struct TurnsResult {
    pub command: Command,
    pub ids: Vec<String>,
    pub outcomes: Vec<TurnOutcome>,
    pub elapsed: Duration,
    /// Server-wide counter deltas over `elapsed`.
    pub counters: Counters,
}

impl TurnsResult {
    pub fn sessions(&self) -> usize {
        self.ids.len()
    }

    /// Text deltas the runner produced (tokens).
    pub fn tokens(&self) -> u64 {
        (self.sessions() * self.command.tokens()) as u64
    }

    /// Events appended to the logs during the turns (all types).
    pub fn events(&self) -> u64 {
        self.outcomes.iter().map(|o| o.last_seq).sum()
    }

    /// Text delta events appended (after coalescing).
    pub fn delta_events(&self) -> u64 {
        self.outcomes.iter().map(|o| o.deltas).sum()
    }

    /// Sessions whose stream did not end with `turn_ended` or lost text.
    pub fn incomplete(&self, token: &str) -> usize {
        let expected = self.command.tokens() * token.len();
        self.outcomes.iter().filter(|o| o.last_event != "turn_ended" || o.text_bytes != expected).count()
    }

    /// XADDs counted by Redis beyond the events these turns appended:
    /// another client was writing during the phase (counters are polluted).
    pub fn foreign_xadds(&self) -> i64 {
        self.counters.xadd as i64 - self.events() as i64
    }
}

/// Creates `sessions` sessions on the replica at `base` (untimed), then runs
/// one turn of `command` in each, all at once.
pub async fn run(
    client: &Client,
    base: &str,
    admin: &mut Admin,
    command: Command,
    sessions: usize,
) -> Result<TurnsResult> {
    let creates = (0..sessions).map(|_| client.create_session(base));
    let ids = futures::future::try_join_all(creates).await?;
    let message = command.message();
    let before = admin.counters().await?;
    let started = Instant::now();
    let turns: Vec<_> = ids
        .iter()
        .map(|id| {
            let (client, base, id, message) = (client.clone(), base.to_string(), id.clone(), message.clone());
            tokio::spawn(async move {
                let response = client.send_message(&base, &id, &message).await?;
                TurnOutcome::read(Frames::new(response)).await
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(turns.len());
    for turn in turns {
        outcomes.push(turn.await??);
    }
    let elapsed = started.elapsed();
    let counters = admin.counters().await?.since(&before);
    Ok(TurnsResult { command, ids, outcomes, elapsed, counters })
}
