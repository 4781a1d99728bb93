//! `event_log`: the event log's throughput and latency, through the gateway
//! and against a raw Redis baseline measured in the same run. Prints a
//! Markdown report on stdout (progress on stderr). See `load-tests/README.md`.

#[path = "event_log/report.rs"]
mod report;

use std::{
    future::Future,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use switchboard::{
    domain::{AgentRef, Event, EventKind},
    sessions::TurnRunner,
};
use switchboard_load::{
    Result,
    cluster::{Client, ClusterOptions, Replica},
    fanout::{self, LiveOptions, LiveResult, RejoinResult},
    raw::{RawBench, RawResult},
    redis_admin::{self, Admin},
    runner::{BenchRunner, Command},
    turns::{self, TurnsResult},
};

/// Event log benchmark: raw Redis XADD baseline, token streaming through two
/// in-process gateway replicas (coalesced and durable), rejoin latency and
/// live fan-out latency. Stops by itself; cleans its Redis keys.
#[derive(Debug, Clone, Parser)]
#[command(name = "event_log")]
pub struct Args {
    /// Redis to measure against (a unique key prefix is used, then deleted).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis: String,
    /// Concurrent sessions of the coalesced phase (each emits --tokens deltas).
    #[arg(long, default_value_t = 50)]
    pub sessions: usize,
    /// Text deltas per session in the coalesced phase (`RunHandle::emit`).
    #[arg(long, default_value_t = 2000)]
    pub tokens: usize,
    /// Bytes of text per delta (a token), in every phase but the live one.
    #[arg(long, default_value_t = 8)]
    pub token_bytes: usize,
    /// Durable appends (`RunHandle::transition`, one awaited per delta) by ONE session. 0 skips.
    #[arg(long, default_value_t = 400)]
    pub durable_single_tokens: usize,
    /// Concurrent sessions of the durable phase (0 skips it and the rejoin phase).
    #[arg(long, default_value_t = 50)]
    pub durable_sessions: usize,
    /// Durable appends per session in the durable phase; a rejoined session has this + 2 events.
    #[arg(long, default_value_t = 1000)]
    pub durable_tokens: usize,
    /// Entries of raw baseline (a): one XADD per round trip. 0 skips.
    #[arg(long, default_value_t = 20_000)]
    pub raw_entries: u64,
    /// Entries of raw baseline (b): pipelined XADDs. 0 skips.
    #[arg(long, default_value_t = 200_000)]
    pub raw_pipelined_entries: u64,
    /// XADDs per pipeline in raw baseline (b).
    #[arg(long, default_value_t = 64)]
    pub raw_batch: usize,
    /// Rejoins timed per cursor (from 0, and from --rejoin-tail before the end). 0 skips.
    #[arg(long, default_value_t = 30)]
    pub rejoin_repeats: usize,
    /// The second rejoin cursor is this many events before the end.
    #[arg(long, default_value_t = 10)]
    pub rejoin_tail: u64,
    /// Followers on replica B of the live session running on A. 0 skips the live phase.
    #[arg(long, default_value_t = 200)]
    pub followers: usize,
    /// Deltas the live session emits, one every --live-interval-ms.
    #[arg(long, default_value_t = 200)]
    pub live_tokens: usize,
    /// Pace of the live session's deltas (a model at 100 tokens/s is 10 ms).
    #[arg(long, default_value_t = 10)]
    pub live_interval_ms: u64,
    /// `store.event_log_max_len` of the replicas, also the baseline's MAXLEN.
    #[arg(long, default_value_t = 10_000)]
    pub event_log_max_len: u64,
    /// Hard limit for all phases; whatever is left is skipped, then cleanup runs.
    #[arg(long, default_value_t = 120)]
    pub max_seconds: u64,
}

/// Everything measured; phases that failed or were skipped stay `None`.
#[derive(Default)]
pub struct Results {
    pub payload_bytes: usize,
    pub raw_sequential: Option<RawResult>,
    pub raw_pipelined: Option<RawResult>,
    pub coalesced: Option<TurnsResult>,
    pub durable_single: Option<TurnsResult>,
    pub durable_many: Option<TurnsResult>,
    /// From 0 and from near the end, each over new and reused connections.
    pub rejoins: Vec<RejoinResult>,
    pub live: Option<LiveResult>,
    /// ACL users the replicas connected as (A, B), when they could be made.
    pub users: Option<(String, String)>,
    pub errors: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut context = switchboard_load::machine::Context::gather();
    let mut admin = match Admin::connect(&args.redis).await {
        Ok(admin) => admin,
        Err(e) => {
            eprintln!("cannot connect to Redis at {}: {e}", args.redis);
            return ExitCode::from(2);
        }
    };
    context.redis_version = admin.version().await.unwrap_or_else(|e| format!("unknown ({e})"));
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let prefix = format!("sbload:{run_id}:");
    let users = make_users(&mut admin, &args.redis, &run_id).await;
    let mut results = Results { users, ..Results::default() };

    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    tokio::select! {
        () = run_phases(&args, &prefix, deadline, &mut admin, &mut results) => {}
        _ = tokio::signal::ctrl_c() => results.errors.push("interrupted (Ctrl-C); cleaning up".into()),
    }

    match admin.delete_prefix(&prefix).await {
        Ok(n) => eprintln!("cleanup: deleted {n} keys under {prefix}"),
        Err(e) => results.errors.push(format!("cleanup of {prefix}*: {e}")),
    }
    if let Some((a, b)) = &results.users {
        for user in [a, b] {
            if let Err(e) = admin.delete_user(user).await {
                results.errors.push(format!("cleanup of ACL user {user}: {e}"));
            }
        }
    }
    context.finish();
    print!("{}", report::render(&args, &context, &results));
    if results.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// One ACL user per replica, so CLIENT LIST tells their connections apart.
async fn make_users(admin: &mut Admin, url: &str, run_id: &str) -> Option<(String, String)> {
    redis_admin::url_as_user(url, "x")?;
    let (a, b) = (format!("sbload-{run_id}-a"), format!("sbload-{run_id}-b"));
    for user in [&a, &b] {
        if let Err(e) = admin.create_user(user).await {
            eprintln!("cannot create ACL user {user} ({e}); connections are counted server-wide only");
            let _ = admin.delete_user(&a).await;
            return None;
        }
    }
    Some((a, b))
}

/// Runs `future` as the phase `name`, within the global deadline; a failure
/// is recorded and the run goes on.
async fn phase<T>(
    errors: &mut Vec<String>,
    deadline: Instant,
    name: &str,
    future: impl Future<Output = Result<T>>,
) -> Option<T> {
    eprintln!("== {name}");
    let started = Instant::now();
    let outcome = tokio::time::timeout_at(deadline.into(), future).await;
    eprintln!("   {:.2} s", started.elapsed().as_secs_f64());
    match outcome {
        Ok(Ok(value)) => Some(value),
        Ok(Err(e)) => {
            errors.push(format!("{name}: {e}"));
            None
        }
        Err(_) => {
            errors.push(format!("{name}: stopped at the --max-seconds deadline"));
            None
        }
    }
}

async fn run_phases(args: &Args, prefix: &str, deadline: Instant, admin: &mut Admin, results: &mut Results) {
    let runner = BenchRunner::new(args.token_bytes);
    let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
    let delta = Event { kind: EventKind::TextDelta { text: runner.token().into() }, agent: main, ts: now_ms() };
    let payload = serde_json::to_string(&delta).expect("an event serializes");
    results.payload_bytes = payload.len();
    let errors = &mut results.errors;

    // 1. Raw Redis baseline.
    let key = format!("{prefix}raw");
    let budget = Duration::from_secs(15);
    let raw = RawBench::connect(&args.redis, key, payload, args.event_log_max_len).await;
    match raw {
        Ok(mut raw) => {
            if args.raw_entries > 0 {
                let run = raw.run(args.raw_entries, 1, budget);
                results.raw_sequential = phase(errors, deadline, "raw XADD, 1 per round trip", run).await;
            }
            if args.raw_pipelined_entries > 0 {
                let run = raw.run(args.raw_pipelined_entries, args.raw_batch, budget);
                results.raw_pipelined = phase(errors, deadline, "raw XADD, pipelined", run).await;
            }
        }
        Err(e) => errors.push(format!("raw baseline connection: {e}")),
    }

    // 2-4. Through the gateway: replicas A and B.
    let options = ClusterOptions {
        key_prefix: prefix.to_string(),
        event_log_max_len: args.event_log_max_len,
        extra_toml: String::new(),
    };
    let url_of = |user: Option<&String>| {
        user.and_then(|u| redis_admin::url_as_user(&args.redis, u)).unwrap_or_else(|| args.redis.clone())
    };
    let users = results.users.clone();
    let (url_a, url_b) = (url_of(users.as_ref().map(|u| &u.0)), url_of(users.as_ref().map(|u| &u.1)));
    let turn_runner: Arc<dyn TurnRunner> = runner.clone();
    let started = async {
        let a = Replica::start("a", &url_a, &options, turn_runner.clone()).await?;
        let b = Replica::start("b", &url_b, &options, turn_runner.clone()).await?;
        let client = Client::new(a.token()?)?;
        // Untimed warm-up: scripts loaded, pools and subscription connected.
        let warm = turns::run(&client, &a.base(), admin, Command::Emit(10), 2).await?;
        fanout::rejoin(&client, &b.base(), &warm.ids[0], 0, warm.outcomes[0].last_seq, 1).await?;
        Ok((a, b, client))
    };
    let Some((a, b, client)) = phase(errors, deadline, "start replicas A and B, warm up", started).await else {
        return;
    };
    let (base_a, base_b) = (a.base(), b.base());

    if args.sessions > 0 && args.tokens > 0 {
        let run = turns::run(&client, &base_a, admin, Command::Emit(args.tokens), args.sessions);
        results.coalesced = phase(errors, deadline, "gateway: emit (coalesced)", run).await;
    }
    if args.durable_single_tokens > 0 {
        let run = turns::run(&client, &base_a, admin, Command::Append(args.durable_single_tokens), 1);
        results.durable_single = phase(errors, deadline, "gateway: append, 1 session", run).await;
    }
    if args.durable_sessions > 0 && args.durable_tokens > 0 {
        let run = turns::run(&client, &base_a, admin, Command::Append(args.durable_tokens), args.durable_sessions);
        results.durable_many = phase(errors, deadline, "gateway: append, concurrent sessions", run).await;
    }

    if let Some(durable) = &results.durable_many
        && args.rejoin_repeats > 0
    {
        let (id, last) = (&durable.ids[0], durable.outcomes[0].last_seq);
        match client.without_keep_alive() {
            Ok(fresh) => {
                for cursor in [0, last.saturating_sub(args.rejoin_tail)] {
                    for client in [&fresh, &client] {
                        let how = if client.keeps_alive() { "kept-alive connection" } else { "new connection" };
                        let name = format!("rejoin on B from {cursor}, {how}");
                        let run = fanout::rejoin(client, &base_b, id, cursor, last, args.rejoin_repeats);
                        results.rejoins.extend(phase(errors, deadline, &name, run).await);
                    }
                }
            }
            Err(e) => errors.push(format!("rejoin client: {e}")),
        }
    }

    if args.followers > 0 && args.live_tokens > 0 {
        let live = LiveOptions {
            followers: args.followers,
            tokens: args.live_tokens,
            interval: Duration::from_millis(args.live_interval_ms),
            users,
        };
        let run = fanout::live(&client, &base_a, &base_b, admin, &runner, &live);
        results.live = phase(errors, deadline, "live fan-out to followers on B", run).await;
    }

    for replica in [a, b] {
        if let Err(e) = replica.stop().await {
            errors.push(format!("stopping a replica: {e}"));
        }
    }
}

fn now_ms() -> u64 {
    switchboard::domain::now_ms()
}
