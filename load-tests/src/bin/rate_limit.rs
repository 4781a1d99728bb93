//! `rate_limit`: what the per-tenant request limit costs and how closely it
//! holds, under a flood spread over two in-process replicas sharing Redis.
//! Prints a Markdown report on stdout (progress on stderr). See
//! `load-tests/README.md`.
//!
//! Two phases with the same load (`--clients` loops of `GET /api/model`,
//! half on replica A, half on B, for `--seconds`):
//!
//! 1. **baseline**: a tenant without a limit: no Redis call per request;
//! 2. **limited**: a tenant held to `--rate` requests per second (burst
//!    `--rate`): Redis' GCRA script decides, and a replica that was refused
//!    refuses on its own until Redis said the next request may pass.
//!
//! Reported per phase: requests answered per second, accepted and refused,
//! latency percentiles, and `EVALSHA` calls (the GCRA script; nothing else
//! runs a script in these phases) per request. Every request reaching Redis
//! would be 1.0 per request.

use std::{
    fmt::Write,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use switchboard_load::{
    Result,
    cluster::{ClusterOptions, Replica},
    machine::Context,
    redis_admin::{Admin, Counters},
    runner::BenchRunner,
    stats::{Summary, int, millis, ms, rate},
};

/// Rate-limit benchmark: a flood on an unlimited tenant (baseline) and on a
/// tenant limited to --rate per second, over two replicas sharing Redis.
#[derive(Debug, Clone, Parser)]
#[command(name = "rate_limit")]
struct Args {
    /// Redis to measure against (a unique key prefix is used, then deleted).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The limited tenant's requests per second (and burst).
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Concurrent client loops, half on each replica.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

/// One phase's answers.
#[derive(Debug, Default)]
struct Flood {
    elapsed: Duration,
    accepted: u64,
    refused: u64,
    other: u64,
    accepted_ms: Vec<f64>,
    refused_ms: Vec<f64>,
    redis: Counters,
}

impl Flood {
    fn answered(&self) -> u64 {
        self.accepted + self.refused + self.other
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut context = Context::gather();
    let mut admin = match Admin::connect(&args.redis).await {
        Ok(admin) => admin,
        Err(e) => {
            eprintln!("cannot connect to Redis at {}: {e}", args.redis);
            return ExitCode::from(2);
        }
    };
    context.redis_version = admin.version().await.unwrap_or_else(|e| format!("unknown ({e})"));
    let prefix = format!("sbload:{}:", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let outcome = run(&args, &prefix, &mut admin).await;
    if let Err(e) = admin.delete_prefix(&prefix).await {
        eprintln!("cleanup of {prefix}*: {e}");
    }
    context.finish();
    match outcome {
        Ok((baseline, limited)) => {
            print!("{}", report(&args, &context, &baseline, &limited));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, prefix: &str, admin: &mut Admin) -> Result<(Flood, Flood)> {
    let options = ClusterOptions {
        key_prefix: prefix.to_string(),
        event_log_max_len: 1000,
        extra_toml: format!(
            "[[tenants]]\nid = \"limited\"\njwt = {{ hs256_secret = \"limited-load-secret-0123456789\" }}\n\
             rate_limit = {{ requests_per_second = {rate}, burst = {rate} }}\n",
            rate = args.rate
        ),
    };
    // No turn runs here; the replicas just need a runner.
    let runner = BenchRunner::new(8);
    let a = Replica::start("a", &args.redis, &options, runner.clone()).await?;
    let b = Replica::start("b", &args.redis, &options, runner).await?;
    let bases = [a.base(), b.base()];
    let duration = Duration::from_secs(args.seconds);

    eprintln!("baseline: {} clients, {} s, tenant without a limit", args.clients, args.seconds);
    let baseline = flood(&bases, args.clients, &a.token()?, duration, admin).await?;
    eprintln!("limited: {} clients, {} s, tenant limited to {}/s", args.clients, args.seconds, args.rate);
    let limited = flood(&bases, args.clients, &a.token_for("limited", "loadgen")?, duration, admin).await?;
    a.stop().await?;
    b.stop().await?;
    Ok((baseline, limited))
}

/// `clients` loops of `GET /api/model` with `token`, spread over `bases`,
/// for `duration`; Redis counters around it.
async fn flood(bases: &[String], clients: usize, token: &str, duration: Duration, admin: &mut Admin) -> Result<Flood> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    let before = admin.counters().await?;
    let started = Instant::now();
    let deadline = started + duration;
    let loops = (0..clients).map(|i| {
        let (http, url, token) = (http.clone(), format!("{}/api/model", bases[i % bases.len()]), token.to_string());
        tokio::spawn(async move {
            let mut flood = Flood::default();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let Ok(response) = http.get(&url).bearer_auth(&token).send().await else {
                    flood.other += 1;
                    continue;
                };
                let status = response.status();
                let _ = response.bytes().await;
                let took = millis(sent.elapsed());
                match status.as_u16() {
                    200 => (flood.accepted += 1, flood.accepted_ms.push(took)),
                    429 => (flood.refused += 1, flood.refused_ms.push(took)),
                    _ => (flood.other += 1, ()),
                };
            }
            flood
        })
    });
    let mut total = Flood::default();
    for part in futures::future::join_all(loops).await {
        let part = part?;
        total.accepted += part.accepted;
        total.refused += part.refused;
        total.other += part.other;
        total.accepted_ms.extend(part.accepted_ms);
        total.refused_ms.extend(part.refused_ms);
    }
    total.elapsed = started.elapsed();
    total.redis = admin.counters().await?.since(&before);
    Ok(total)
}

fn report(args: &Args, context: &Context, baseline: &Flood, limited: &Flood) -> String {
    let mut out = String::new();
    let w = &mut out;
    context.write_header(w, "switchboard rate-limit benchmark", &args.redis);
    let _ = writeln!(
        w,
        "- replicas A and B (one process), Redis and {} client loops (half on each replica) share these {} CPUs; \
         {} s per phase\n",
        args.clients, context.cpus, args.seconds
    );
    let _ = writeln!(
        w,
        "| phase | answered/s | accepted | accepted/s | refused | other | EVALSHA | EVALSHA per request | \
         p50 / p99 accepted | p50 / p99 refused |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, flood) in [("baseline (no limit)", baseline), ("limited", limited)] {
        let percentiles = |sample: &[f64]| {
            Summary::of(sample.to_vec()).map_or("–".to_string(), |s| format!("{} / {}", ms(s.p50), ms(s.p99)))
        };
        let answered = flood.answered();
        let _ = writeln!(
            w,
            "| {name} | {} | {} | {} | {} | {} | {} | {:.4} | {} | {} |",
            int(rate(answered, flood.elapsed)),
            int(flood.accepted as f64),
            int(rate(flood.accepted, flood.elapsed)),
            int(flood.refused as f64),
            flood.other,
            int(flood.redis.evalsha as f64),
            flood.redis.evalsha as f64 / answered.max(1) as f64,
            percentiles(&flood.accepted_ms),
            percentiles(&flood.refused_ms),
        );
    }
    let expected = f64::from(args.rate) * limited.elapsed.as_secs_f64() + f64::from(args.rate);
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "- limited: accepted {} of the {} the limit allows over {:.2} s (rate × time + burst): {:.1} %",
        limited.accepted,
        int(expected),
        limited.elapsed.as_secs_f64(),
        100.0 * limited.accepted as f64 / expected
    );
    let _ = writeln!(
        w,
        "- limited: Redis script calls per request {:.4} (every request asking Redis would be 1.0); \
         per accepted request {:.2}",
        limited.redis.evalsha as f64 / limited.answered().max(1) as f64,
        limited.redis.evalsha as f64 / limited.accepted.max(1) as f64
    );
    let _ = writeln!(
        w,
        "- answered/s, limited ÷ baseline: {:.2}",
        rate(limited.answered(), limited.elapsed) / rate(baseline.answered(), baseline.elapsed).max(1e-9)
    );
    out
}
