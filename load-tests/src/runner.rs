//! The benchmark's [`TurnRunner`]: stands in for the orchestrator and a model
//! that streams tokens, so the measured path is the gateway's own (the hub's
//! writer, the Redis log, followers), with no upstream in the way.
//!
//! What a turn does is chosen by the user message ([`Command`]):
//! - `emit N`: N text deltas through [`RunHandle::emit`] (queued, coalesced),
//!   as fast as the writer's queue takes them, like a model streaming tokens;
//! - `append N`: N text deltas, each committed on its own through
//!   [`RunHandle::transition`] before the next (no coalescing across them);
//! - `live N US`: waits for [`BenchRunner::open_gate`], then emits N deltas
//!   one every `US` microseconds, each carrying its emit time (microseconds
//!   since [`BenchRunner::micros`]'s epoch) as `<micros>;`.
//!
//! Every turn then ends (final). Deltas of `emit` and `append`
//! are the same token text, so the bytes a client receives can be checked.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use switchboard::{
    domain::{AgentRef, EventKind, FailureCode, TurnEndReason},
    sessions::{RunHandle, SessionError, TurnRunner},
};
use tokio::{sync::Semaphore, time::MissedTickBehavior};

/// A scripted turn, written as the user message that asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Emit(usize),
    Append(usize),
    Live { tokens: usize, interval: Duration },
}

impl Command {
    pub fn message(&self) -> String {
        match self {
            Self::Emit(n) => format!("emit {n}"),
            Self::Append(n) => format!("append {n}"),
            Self::Live { tokens, interval } => format!("live {tokens} {}", interval.as_micros()),
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let verb = words.next()?;
        let n = words.next()?.parse().ok()?;
        match verb {
            "emit" => Some(Self::Emit(n)),
            "append" => Some(Self::Append(n)),
            "live" => Some(Self::Live { tokens: n, interval: Duration::from_micros(words.next()?.parse().ok()?) }),
            _ => None,
        }
    }

    /// Text deltas the turn emits.
    pub fn tokens(&self) -> usize {
        match *self {
            Self::Emit(n) | Self::Append(n) | Self::Live { tokens: n, .. } => n,
        }
    }
}

pub struct BenchRunner {
    epoch: Instant,
    token: String,
    gate: Semaphore,
}

impl BenchRunner {
    /// `token_bytes`: length of each `emit`/`append` delta's text (at least 1).
    pub fn new(token_bytes: usize) -> Arc<Self> {
        let token_bytes = token_bytes.max(1);
        let token: String = ('a'..='z').cycle().take(token_bytes - 1).chain([' ']).collect();
        Arc::new(Self { epoch: Instant::now(), token, gate: Semaphore::new(0) })
    }

    /// The text of every `emit`/`append` delta.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Lets one waiting `live` turn start emitting.
    pub fn open_gate(&self) {
        self.gate.add_permits(1);
    }

    /// Microseconds since this runner was made: the clock of `live` deltas.
    pub fn micros(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    async fn script(&self, handle: &mut RunHandle, command: Command) -> Result<(), SessionError> {
        let agent = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
        let delta = |text: String| EventKind::TextDelta { text };
        match command {
            Command::Emit(n) => {
                for _ in 0..n {
                    handle.emit(&agent, delta(self.token.clone())).await?;
                }
            }
            Command::Append(n) => {
                for _ in 0..n {
                    let token = self.token.clone();
                    handle.transition(|_| Ok(vec![delta(token)])).await?;
                }
            }
            Command::Live { tokens, interval } => {
                tokio::select! {
                    permit = self.gate.acquire() => permit.map_err(|e| SessionError::Invalid(e.to_string()))?.forget(),
                    () = handle.cancelled().cancelled() => return Err(SessionError::Invalid("cancelled".into())),
                }
                let mut ticker = tokio::time::interval(interval.max(Duration::from_micros(1)));
                ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                for _ in 0..tokens {
                    ticker.tick().await;
                    handle.emit(&agent, delta(format!("{};", self.micros()))).await?;
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl TurnRunner for BenchRunner {
    async fn run(&self, mut handle: RunHandle) {
        let history = handle.session().history().unwrap_or_default();
        let message = history.last().and_then(|m| m.content.clone()).unwrap_or_default();
        let outcome = match Command::parse(&message) {
            Some(command) => self.script(&mut handle, command).await,
            None => Err(SessionError::Invalid(format!("not a benchmark command: {message:?}"))),
        };
        let _ = match outcome {
            Ok(()) => handle.end(|s| s.end(TurnEndReason::Final, false)).await,
            Err(_) if handle.cancelled().is_cancelled() => handle.stop().await,
            Err(e) => handle.end(|s| s.fail(FailureCode::UpstreamError, &e.to_string(), None)).await,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_through_their_message() {
        for command in
            [Command::Emit(400), Command::Append(3), Command::Live { tokens: 200, interval: Duration::from_millis(10) }]
        {
            assert_eq!(Command::parse(&command.message()), Some(command));
        }
        assert_eq!(Command::parse("hello"), None);
    }

    #[test]
    fn tokens_have_the_asked_length() {
        assert_eq!(BenchRunner::new(8).token(), "abcdefg ");
        assert_eq!(BenchRunner::new(2).token(), "a ");
        assert_eq!(BenchRunner::new(0).token(), " ");
    }
}
