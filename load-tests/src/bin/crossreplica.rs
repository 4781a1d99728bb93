//! `crossreplica`: what moving a session between replicas costs, against the
//! same step on one replica (the baseline), in the same run. Prints a
//! Markdown report on stdout (progress on stderr). See `load-tests/README.md`.
//!
//! Two gateway replicas (release binaries, processes of their own) share
//! Redis and the mock model. `--trials` times each, alternating baseline and
//! cross-replica trials so drift hits both alike:
//!
//! 1. **pause, then resume**: a turn on A asks for a tool's approval in
//!    `pause` mode and its stream ends `paused`; the approval is posted to
//!    A (baseline) or B. Measured: from the request to its first event
//!    (`resumed`) and to the first token of the continuation.
//! 2. **relay decided**: a turn on A waits on a live relay (its stream
//!    stays open); the decision is posted to A (baseline) or B. Measured:
//!    from the decision request to the next event on A's open stream.
//!
//! Every trial checks the continuation's text; a wrong one fails the run.

use std::{fmt::Write, process::ExitCode, time::Duration, time::Instant};

use clap::Parser;
use switchboard_load::{
    Result,
    machine::Context,
    mock::Order,
    native::{Native, Turn},
    procs::{Gateway, GatewayOptions, Mock, token},
    redis_admin::{Admin, run_prefix},
    stats::{Summary, millis},
    streams::http_client,
};

/// Pause on A and resume on B, relay decided on B: latency against the same
/// step on A alone.
#[derive(Debug, Clone, Parser)]
#[command(name = "crossreplica")]
struct Args {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Trials per scenario and path.
    #[arg(long, default_value_t = 200)]
    trials: usize,
}

/// One sample of [`Samples`].
type Pick = fn(&Samples) -> &Vec<f64>;

#[derive(Default)]
struct Samples {
    resume_first_event: Vec<f64>,
    resume_first_token: Vec<f64>,
    relay_next_event: Vec<f64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("crossreplica", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let mut admin = Admin::connect(&args.redis).await?;
    let mut context = Context::gather_with(&mut admin).await?;
    let mock = Mock::start().await?;
    let prefix = run_prefix();
    let options = |id: &str| GatewayOptions {
        tool_permission: "ask",
        ..GatewayOptions::new(id, &args.redis, &prefix, mock.addr)
    };
    let (a, b) = (Gateway::start(&options("a")).await?, Gateway::start(&options("b")).await?);
    let client = Native { http: http_client(), token: token()? };
    let order = Order { tokens: 3, pace: Duration::ZERO, first: Duration::ZERO, tools: 1, gate: false };
    let (mut same, mut cross) = (Samples::default(), Samples::default());
    // Ten untimed trials each way first: connections and caches warm.
    for trial in 0..args.trials + 10 {
        if trial % 50 == 0 {
            eprintln!("trial {trial}");
        }
        for (samples, decider) in [(&mut same, &a), (&mut cross, &b)] {
            let warm = trial < 10;
            let (first_event, first_token) = pause_resume(&client, &a, decider, &order).await?;
            let next_event = relay(&client, &a, decider, &order).await?;
            if !warm {
                samples.resume_first_event.push(millis(first_event));
                samples.resume_first_token.push(millis(first_token));
                samples.relay_next_event.push(millis(next_event));
            }
        }
    }
    admin.delete_prefix(&prefix).await?;
    context.finish();
    let mut w = String::new();
    context.write_header(&mut w, "Across replicas: resume and relay decisions", &args.redis);
    let _ = writeln!(w, "- {} trials per row, baseline and cross-replica alternating\n", args.trials);
    let _ = writeln!(w, "| step | decided on | p50 | p90 | p99 | max |");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|");
    let rows: [(&str, Pick); 3] = [
        ("resume request → first event (`resumed`)", |s| &s.resume_first_event),
        ("resume request → first token", |s| &s.resume_first_token),
        ("relay decision → next event on A's stream", |s| &s.relay_next_event),
    ];
    for (step, pick) in rows {
        for (samples, on) in [(&same, "A (baseline)"), (&cross, "B")] {
            if let Some(s) = Summary::of(pick(samples).clone()) {
                let _ = writeln!(w, "| {step} | {on} | {:.2} | {:.2} | {:.2} | {:.2} |", s.p50, s.p90, s.p99, s.max);
            }
        }
    }
    Ok(w)
}

/// A turn on `a` pauses for approval; `decider` resumes it. The times from
/// the resume request to its first event and to its first token.
async fn pause_resume(client: &Native, a: &Gateway, decider: &Gateway, order: &Order) -> Result<(Duration, Duration)> {
    let id = client.create(&a.base(), "pause").await?;
    let mut turn = client.send(&a.base(), &id, &order.message()).await?;
    let call = call_id(&mut turn).await?;
    let (_, last) = turn.rest().await?;
    if last != "paused" {
        return Err(format!("the turn ended with {last}, not paused").into());
    }
    let started = Instant::now();
    let mut resumed = client.approve_paused(&decider.base(), &id, &call).await?;
    let first = resumed.next().await?.ok_or("the resumed stream was empty")?;
    let first_event = started.elapsed();
    if first.kind != "resumed" {
        return Err(format!("the continuation began with {}", first.kind).into());
    }
    let (first_token, first_text) = loop {
        let event = resumed.next().await?.ok_or("no token after the resume")?;
        if event.kind == "text_delta" {
            break (started.elapsed(), event.data["text"].as_str().unwrap_or_default().to_string());
        }
    };
    let (text, last) = resumed.rest().await?;
    check(order, &(first_text + &text), &last)?;
    Ok((first_event, first_token))
}

/// A turn on `a` waits on a relay; `decider` approves it. The time from the
/// decision request to the next event on `a`'s stream.
async fn relay(client: &Native, a: &Gateway, decider: &Gateway, order: &Order) -> Result<Duration> {
    let id = client.create(&a.base(), "relay").await?;
    let mut turn = client.send(&a.base(), &id, &order.message()).await?;
    let requested = turn.until("relay_requested").await?;
    let relay = requested.data["relay_id"].as_str().ok_or("a relay without an id")?.to_string();
    let base = decider.base();
    let started = Instant::now();
    let (decided, next) = tokio::join!(client.decide(&base, &id, &relay, true), turn.next());
    let elapsed = started.elapsed();
    decided?;
    let next = next?.ok_or("the stream ended at the relay")?;
    if next.kind != "relay_decided" {
        return Err(format!("after the decision came {}", next.kind).into());
    }
    let (text, last) = turn.rest().await?;
    check(order, &text, &last)?;
    Ok(elapsed)
}

async fn call_id(turn: &mut Turn) -> Result<String> {
    let started = turn.until("tool_call_started").await?;
    Ok(started.data["tool_call_id"].as_str().ok_or("a tool call without an id")?.to_string())
}

fn check(order: &Order, text: &str, last: &str) -> Result<()> {
    let expected: String = (1..=order.tokens).map(Order::token).collect();
    if text != expected || last != "turn_ended" {
        return Err(format!("the continuation said {text:?} and ended with {last}").into());
    }
    Ok(())
}
