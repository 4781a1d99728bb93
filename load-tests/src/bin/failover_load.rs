//! `failover_load`: kill -9 of a replica that owns many running chats, as
//! the chats' clients see it. Prints a Markdown report on stdout (progress
//! on stderr). See `load-tests/README.md`.
//!
//! Three gateway replicas (release binaries, processes of their own; lease
//! TTL `--lease-ttl-secs`) share Redis and the mock model. `--chats` native
//! turns start on A, each streaming `--tokens` tokens `--pace-ms` apart.
//! Each client reads its turn's stream and, when the stream breaks before
//! `turn_ended`, rejoins B or C (alternating) with `Last-Event-ID`, as a
//! browser's EventSource would. Two phases with the same chats:
//!
//! 1. **baseline**: nobody is killed;
//! 2. **kill**: once every chat has received `--tokens-before-kill` tokens,
//!    A gets SIGKILL.
//!
//! Per phase: chats that ended `turn_ended`, seqs lost (a gap) or repeated
//! across a client's connections, answers that differ from the ordered
//! text once a `step_restarted` has voided its step's partial text, steps
//! restarted, connections per chat, and the time from the kill to each
//! chat's next event and to the last chat's end.

use std::{
    fmt::Write,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use serde_json::Value;
use switchboard_load::{
    Result,
    machine::Context,
    mock::Order,
    native::Native,
    procs::{Gateway, GatewayOptions, Mock, token},
    redis_admin::{Admin, run_prefix},
    stats::{Summary, millis},
    streams::http_client,
};
use tokio::sync::Notify;

/// kill -9 of a replica owning many running chats: what their clients see.
#[derive(Debug, Clone, Parser)]
#[command(name = "failover_load")]
struct Args {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// A Redis Cluster instead: every node's URL, comma-separated (for
    /// example `redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002`).
    #[arg(long, value_delimiter = ',')]
    redis_cluster: Option<Vec<String>>,
    /// Chats running on A when it is killed.
    #[arg(long, default_value_t = 200)]
    chats: usize,
    /// Tokens per answer.
    #[arg(long, default_value_t = 60)]
    tokens: u32,
    /// Milliseconds between tokens.
    #[arg(long, default_value_t = 50)]
    pace_ms: u64,
    /// A is killed once every chat has received this many tokens.
    #[arg(long, default_value_t = 10)]
    tokens_before_kill: usize,
    /// The replicas' `store.lease_ttl_secs`.
    #[arg(long, default_value_t = 10)]
    lease_ttl_secs: u64,
    /// Also kill A with the death hints off (`store.liveness_check_ms =
    /// 0`): the lease alone, in the same sitting.
    #[arg(long)]
    without_hint: bool,
}

/// What one chat's client saw over all its connections.
#[derive(Default)]
struct Seen {
    seqs: Vec<u64>,
    /// Text per step as a client rebuilds it.
    answer: String,
    ended: bool,
    /// Token frames received (a restarted step's included).
    tokens: usize,
    restarted_steps: usize,
    connections: usize,
    /// Arrival of the first event after the kill.
    first_after_kill: Option<Instant>,
    /// Arrival of the takeover's first event (`step_restarted`).
    first_restart: Option<Instant>,
    finished_at: Option<Instant>,
    error: Option<String>,
}

impl Seen {
    /// Records one event; for a token, how many tokens the chat has had.
    fn record(&mut self, kind: &str, data: &Value, seq: Option<u64>, after_kill: bool) -> Option<usize> {
        if let Some(seq) = seq {
            self.seqs.push(seq);
        }
        if after_kill && self.first_after_kill.is_none() {
            self.first_after_kill = Some(Instant::now());
        }
        match kind {
            "text_delta" => {
                self.answer.push_str(data["text"].as_str().unwrap_or_default());
                self.tokens += 1;
                return Some(self.tokens);
            }
            "step_restarted" => {
                self.answer.clear();
                self.restarted_steps += 1;
                if after_kill && self.first_restart.is_none() {
                    self.first_restart = Some(Instant::now());
                }
            }
            "turn_ended" => self.ended = true,
            _ => {}
        }
        None
    }

    /// Repeated seqs and missing seqs, from the first seq seen to the last.
    fn repeats_and_gaps(&self) -> (usize, usize) {
        let (mut repeats, mut gaps) = (0, 0);
        for pair in self.seqs.windows(2) {
            if pair[1] <= pair[0] {
                repeats += 1;
            } else {
                gaps += (pair[1] - pair[0] - 1) as usize;
            }
        }
        (repeats, gaps)
    }
}

struct Outcome {
    name: &'static str,
    seen: Vec<Seen>,
    killed_at: Option<Instant>,
    started: Instant,
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("failover_load", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let mut admin = match &args.redis_cluster {
        Some(nodes) => Admin::connect_nodes(nodes).await?,
        None => Admin::connect(&args.redis).await?,
    };
    let mut context = Context::gather_with(&mut admin).await?;
    let mock = Mock::start().await?;
    let mut outcomes = Vec::new();
    let mut phases = vec![("baseline (no kill)", false, true), ("A killed (SIGKILL), death hints on", true, true)];
    if args.without_hint {
        phases.push(("A killed (SIGKILL), hints off: the lease alone", true, false));
    }
    for (name, kill, hints) in phases {
        eprintln!("{name}");
        let prefix = run_prefix();
        let options = |id: &str| GatewayOptions {
            lease_ttl_secs: args.lease_ttl_secs,
            liveness_check_ms: if hints { 100 } else { 0 },
            redis_cluster: args.redis_cluster.clone(),
            ..GatewayOptions::new(id, &args.redis, &prefix, mock.addr)
        };
        let mut a = Gateway::start(&options("a")).await?;
        let b = Gateway::start(&options("b")).await?;
        let c = Gateway::start(&options("c")).await?;
        outcomes.push(phase(&args, name, kill, &mut a, [b.base(), c.base()]).await?);
        admin.delete_prefix(&prefix).await?;
    }
    context.finish();
    Ok(report(&context, &args, &outcomes))
}

async fn phase(args: &Args, name: &'static str, kill: bool, a: &mut Gateway, others: [String; 2]) -> Result<Outcome> {
    let client = Native { http: http_client(), token: token()? };
    let order = Order {
        tokens: args.tokens,
        pace: Duration::from_millis(args.pace_ms),
        first: Duration::ZERO,
        tools: 0,
        gate: false,
    };
    let mut ids = Vec::with_capacity(args.chats);
    for _ in 0..args.chats {
        ids.push(client.create(&a.base(), "relay").await?);
    }
    let warmed = Arc::new(AtomicUsize::new(0));
    let all_warm = Arc::new(Notify::new());
    let killed = Arc::new(std::sync::OnceLock::<Instant>::new());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let (client, a, rejoin) = (client.clone(), a.base(), others[i % 2].clone());
        let (warmed, all_warm, killed, message) = (warmed.clone(), all_warm.clone(), killed.clone(), order.message());
        let (chats, threshold) = (args.chats, args.tokens_before_kill);
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut first = true;
            while !seen.ended && Instant::now() < deadline {
                seen.connections += 1;
                let turn = if first {
                    client.send(&a, &id, &message).await
                } else {
                    client.rejoin(&rejoin, &id, seen.seqs.last().copied().unwrap_or(0)).await
                };
                let mut turn = match turn {
                    Ok(turn) => turn,
                    Err(e) if first => {
                        seen.error = Some(format!("start: {e}"));
                        break;
                    }
                    Err(_) => {
                        // Not answered yet (the replica is gone, the session
                        // not yet taken over): try again, as EventSource does.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                first = false;
                while let Ok(Some(event)) = turn.next().await {
                    let tokens = seen.record(&event.kind, &event.data, event.seq, killed.get().is_some());
                    if tokens == Some(threshold) && warmed.fetch_add(1, Ordering::SeqCst) + 1 == chats {
                        all_warm.notify_one();
                    }
                    if event.kind == "turn_ended" {
                        break;
                    }
                }
            }
            seen.finished_at = Some(Instant::now());
            seen
        }));
    }
    let mut killed_at = None;
    if kill {
        tokio::time::timeout(Duration::from_secs(60), all_warm.notified())
            .await
            .map_err(|_| "the chats did not all reach the kill point within 60 s")?;
        a.proc.kill()?;
        let now = Instant::now();
        let _ = killed.set(now);
        killed_at = Some(now);
        eprintln!("killed A after {:.2} s", started.elapsed().as_secs_f64());
    }
    let mut seen = Vec::with_capacity(tasks.len());
    for task in tasks {
        seen.push(task.await?);
    }
    Ok(Outcome { name, seen, killed_at, started })
}

fn report(context: &Context, args: &Args, outcomes: &[Outcome]) -> String {
    let expected: String = (1..=args.tokens).map(Order::token).collect();
    let mut w = String::new();
    let store = match &args.redis_cluster {
        Some(nodes) => format!("a Redis Cluster at {}", nodes.join(", ")),
        None => args.redis.clone(),
    };
    context.write_header(&mut w, "kill -9 of a replica owning running chats", &store);
    let _ = writeln!(
        w,
        "- {} chats on A, {} tokens {} ms apart; A killed once every chat had {} tokens; lease TTL {} s; clients rejoin B or C with Last-Event-ID\n",
        args.chats, args.tokens, args.pace_ms, args.tokens_before_kill, args.lease_ttl_secs
    );
    let _ = writeln!(
        w,
        "| phase | chats | ended `turn_ended` | seqs lost | seqs repeated | wrong answer | steps restarted | connections per chat (max) | kill → next event p50 / p99 / max (ms) | kill → takeover's first event p50 / p99 / max (ms) | start → last chat ended (s) |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|");
    for outcome in outcomes {
        let ended = outcome.seen.iter().filter(|s| s.ended).count();
        let (repeats, gaps) =
            outcome.seen.iter().map(Seen::repeats_and_gaps).fold((0, 0), |(r, g), (r2, g2)| (r + r2, g + g2));
        let wrong = outcome.seen.iter().filter(|s| s.answer != expected).count();
        let restarted: usize = outcome.seen.iter().map(|s| s.restarted_steps).sum();
        let connections = outcome.seen.iter().map(|s| s.connections).max().unwrap_or(0);
        let after_kill = outcome.killed_at.and_then(|k| {
            Summary::of(outcome.seen.iter().filter_map(|s| s.first_after_kill).map(|t| millis(t - k)).collect())
        });
        let after_kill = after_kill.map_or("—".into(), |s| format!("{:.0} / {:.0} / {:.0}", s.p50, s.p99, s.max));
        let takeover = outcome.killed_at.and_then(|k| {
            Summary::of(outcome.seen.iter().filter_map(|s| s.first_restart).map(|t| millis(t - k)).collect())
        });
        let takeover = takeover.map_or("—".into(), |s| format!("{:.0} / {:.0} / {:.0}", s.p50, s.p99, s.max));
        let last = outcome
            .seen
            .iter()
            .filter_map(|s| s.finished_at)
            .max()
            .map_or(0.0, |t| (t - outcome.started).as_secs_f64());
        let _ = writeln!(
            w,
            "| {} | {} | {ended} | {gaps} | {repeats} | {wrong} | {restarted} | {connections} | {after_kill} | {takeover} | {last:.2} |",
            outcome.name,
            outcome.seen.len(),
        );
    }
    for outcome in outcomes {
        if let Some(e) = outcome.seen.iter().find_map(|s| s.error.as_deref()) {
            let _ = writeln!(w, "\n- first error, {}: `{e}`", outcome.name);
        }
    }
    w
}

/// The checks themselves, on made-up streams: a check that cannot fail
/// proves nothing.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn seen(events: &[(u64, &str, &str)]) -> Seen {
        let mut seen = Seen::default();
        for (seq, kind, text) in events {
            seen.record(kind, &json!({"text": text}), Some(*seq), false);
        }
        seen
    }

    #[test]
    fn a_gapless_stream_across_a_rejoin_has_no_repeat_and_no_gap() {
        let s =
            seen(&[(1, "turn_started", ""), (2, "text_delta", "t1"), (3, "text_delta", " t2"), (4, "turn_ended", "")]);
        assert_eq!(s.repeats_and_gaps(), (0, 0));
        assert!(s.ended);
        assert_eq!(s.answer, "t1 t2");
    }

    #[test]
    fn a_replayed_event_is_a_repeat_and_a_skipped_one_a_gap() {
        let repeat = seen(&[(1, "turn_started", ""), (2, "text_delta", "t1"), (2, "text_delta", "t1")]);
        assert_eq!(repeat.repeats_and_gaps(), (1, 0));
        let gap = seen(&[(1, "turn_started", ""), (2, "text_delta", "t1"), (5, "text_delta", " t2")]);
        assert_eq!(gap.repeats_and_gaps(), (0, 2));
    }

    #[test]
    fn a_restarted_step_voids_its_partial_text() {
        let s = seen(&[
            (1, "text_delta", "t1"),
            (2, "text_delta", " t2"),
            (3, "step_restarted", ""),
            (4, "text_delta", "t1"),
            (5, "text_delta", " t2"),
            (6, "text_delta", " t3"),
        ]);
        assert_eq!((s.answer.as_str(), s.restarted_steps, s.tokens), ("t1 t2 t3", 1, 5));
    }
}
