//! `overhead`: what the gateway adds to a streamed chat, against the same
//! load sent straight to the mock model in the same run (the baseline).
//! Prints a Markdown report on stdout (progress on stderr). See
//! `load-tests/README.md`.
//!
//! The gateway is the release binary as a process of its own, with the Redis
//! store; the mock model is another (`mock_upstream`); this generator a
//! third. For each concurrency of `--streams`: `n` chats straight to the
//! mock, then `n` chats through the gateway per dialect, the starts of each
//! phase spread evenly over `--ramp-ms`. Each chat orders `--tokens` tokens
//! `--pace-ms` apart, the first after `--first-ms`.
//!
//! Reported per phase: time to first token and total time by percentile,
//! and what the gateway adds (gateway minus direct, percentile by
//! percentile); chats that failed or lost text; tokens per second; CPU time
//! of the gateway and of the mock per 1,000 tokens (from `/proc`); Redis
//! commands per 100 tokens and per chat (`total_commands_processed`); the
//! CPU time of every process (gateway, mock, Redis, this generator) against
//! the phase's wall time, which shows when the shared cores are the limit.
//! With `--pace-ms 0` and long answers the same report is the throughput
//! scenario.
//!
//! With `--sustain S` (module `sustain`), each of `n` clients starts a new
//! chat as soon as its previous one ends, so `n` streams are open at every
//! moment, and the costs are read over an `S`-second window of that steady
//! state. `--h2c` sends the chats over HTTP/2 with prior knowledge,
//! `--chats-per-connection` per connection, to the mock and the gateway
//! alike; `--upstream-h2c` has the gateway call the mock over h2c.

#[path = "overhead/sustain.rs"]
mod sustain;

use std::{fmt::Write, process::ExitCode, time::Duration};

use clap::Parser;
use switchboard_load::{
    Result,
    load::Phase,
    machine::Context,
    mock::Order,
    procs::{Gateway, GatewayOptions, Mock, cpu_of, token},
    redis_admin::{Admin, Counters, run_prefix},
    stats::{Summary, int, ms, rate},
    streams::{Clients, Dialect, Target, TransportArgs},
};

/// Gateway overhead against a same-run baseline straight to the mock model.
#[derive(Debug, Clone, Parser)]
#[command(name = "overhead")]
struct Args {
    /// Redis for the gateway's store (a unique key prefix, deleted after).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// A Redis Cluster instead: every node's URL, comma-separated (the
    /// gateway gets them as seeds; Redis counters and CPU are summed over
    /// all of them). `scripts/redis-cluster.sh` starts one.
    #[arg(long, value_delimiter = ',')]
    redis_cluster: Option<Vec<String>>,
    /// `[store] wait_replicas` of the gateway.
    #[arg(long, default_value_t = 0)]
    wait_replicas: u32,
    /// `[store] commit_linger_ms` of the gateway.
    #[arg(long, default_value_t = 0)]
    commit_linger_ms: u64,
    /// Concurrent chats per phase (comma-separated: one set of phases each).
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    streams: Vec<usize>,
    /// Dialects to measure through the gateway.
    #[arg(long, value_delimiter = ',', default_value = "native,ai-sdk,llm-gateway")]
    dialects: Vec<Dialect>,
    /// Tokens per answer.
    #[arg(long, default_value_t = 20)]
    tokens: u32,
    /// Milliseconds between tokens.
    #[arg(long, default_value_t = 50)]
    pace_ms: u64,
    /// Milliseconds before the first token.
    #[arg(long, default_value_t = 0)]
    first_ms: u64,
    /// The starts of a phase's chats are spread over this many milliseconds.
    #[arg(long, default_value_t = 1000)]
    ramp_ms: u64,
    /// Sustained mode: each of the `--streams` clients starts a new chat as
    /// soon as its previous one ends; costs are read over this many seconds
    /// (after the ramp and a few seconds of settling).
    #[arg(long, value_name = "SECONDS")]
    sustain: Option<u64>,
    /// `--h2c` (to the mock and the gateway alike), `--chats-per-connection`,
    /// `--upstream-h2c`.
    #[command(flatten)]
    transport: TransportArgs,
}

impl Args {
    /// The store, as the report's header names it.
    fn store(&self) -> String {
        let store = match &self.redis_cluster {
            Some(nodes) => format!(
                "a Redis Cluster of {} nodes ({}), wait_replicas = {}",
                nodes.len(),
                nodes.join(", "),
                self.wait_replicas
            ),
            None => self.redis.clone(),
        };
        match self.commit_linger_ms {
            0 => store,
            ms => format!("{store}, commit_linger_ms = {ms}"),
        }
    }
}

/// One measured phase.
struct Row {
    streams: usize,
    dialect: Dialect,
    phase: Phase,
    gateway_cpu: Duration,
    mock_cpu: Duration,
    redis_cpu: Duration,
    generator_cpu: Duration,
    redis: Counters,
    chats: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("overhead", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let order = Order {
        tokens: args.tokens,
        pace: Duration::from_millis(args.pace_ms),
        first: Duration::from_millis(args.first_ms),
        tools: 0,
        gate: false,
    };
    let ramp = Duration::from_millis(args.ramp_ms);
    let mut admin = match &args.redis_cluster {
        Some(nodes) => Admin::connect_nodes(nodes).await?,
        None => Admin::connect(&args.redis).await?,
    };
    let mut context = Context::gather_with(&mut admin).await?;
    let mock = Mock::start().await?;
    let prefix = run_prefix();
    let options = GatewayOptions {
        upstream_h2c: args.transport.upstream_h2c,
        redis_cluster: args.redis_cluster.clone(),
        wait_replicas: args.wait_replicas,
        commit_linger_ms: args.commit_linger_ms,
        ..GatewayOptions::new("a", &args.redis, &prefix, mock.addr)
    };
    let gateway = Gateway::start(&options).await?;
    let clients = Clients::new(args.transport.clients(), args.streams.iter().copied().max().unwrap_or(0));
    let token = token()?;
    let target = |dialect| {
        let base = if dialect == Dialect::Direct { format!("http://{}", mock.addr) } else { gateway.base() };
        Target { clients: clients.clone(), base, token: token.clone(), dialect }
    };

    // Warm-up: connections, caches, the gateway's first sessions.
    let warm = Order { tokens: 5, pace: Duration::ZERO, first: Duration::ZERO, tools: 0, gate: false };
    for &dialect in std::iter::once(&Dialect::Direct).chain(&args.dialects) {
        let prepared = Phase::prepare(&target(dialect), 50).await?;
        Phase::run(&target(dialect), &warm, prepared, Duration::from_millis(200)).await?;
    }

    if let Some(seconds) = args.sustain {
        let rows =
            sustain::measure(&args, &order, Duration::from_secs(seconds), &gateway, &mock, &mut admin, target).await?;
        admin.delete_prefix(&prefix).await?;
        context.finish();
        return Ok(sustain::report(&context, &args, &order, &rows));
    }

    let mut rows = Vec::new();
    for &streams in &args.streams {
        for &dialect in std::iter::once(&Dialect::Direct).chain(&args.dialects) {
            eprintln!("{streams} chats, {}", dialect.name());
            let prepared = Phase::prepare(&target(dialect), streams).await?;
            let (gateway_cpu, mock_cpu, generator_cpu) = (gateway.proc.cpu(), mock.proc.cpu(), cpu_of("self"));
            let (before, redis_cpu) = (admin.counters().await?, admin.cpu().await?);
            let phase = Phase::run(&target(dialect), &order, prepared, ramp).await?;
            let redis = admin.counters().await?.since(&before);
            let redis_cpu = admin.cpu().await?.saturating_sub(redis_cpu);
            rows.push(Row {
                streams,
                dialect,
                gateway_cpu: gateway.proc.cpu().saturating_sub(gateway_cpu),
                mock_cpu: mock.proc.cpu().saturating_sub(mock_cpu),
                redis_cpu,
                generator_cpu: cpu_of("self").saturating_sub(generator_cpu),
                redis,
                chats: streams,
                phase,
            });
        }
    }
    let peak_rss = gateway.proc.peak_rss_kib();
    let redis_rtt = Summary::of(admin.ping_times(1000).await?);
    admin.delete_prefix(&prefix).await?;
    context.finish();
    Ok(report(&context, &args, &order, &rows, peak_rss, redis_rtt))
}

fn report(
    context: &Context,
    args: &Args,
    order: &Order,
    rows: &[Row],
    peak_rss: u64,
    redis_rtt: Option<Summary>,
) -> String {
    let mut w = String::new();
    context.write_header(&mut w, "Gateway overhead against the mock model", &args.store());
    let _ = writeln!(
        w,
        "- workload: each chat orders {} tokens {} ms apart, the first after {} ms; a phase's starts spread over {} ms",
        order.tokens,
        order.pace.as_millis(),
        order.first.as_millis(),
        args.ramp_ms
    );
    let _ = writeln!(
        w,
        "- chats sent over {}; the gateway calls the mock over {}",
        args.transport.clients().name(),
        args.transport.upstream()
    );
    let _ = writeln!(w, "- gateway binary: `{}`", switchboard_load::procs::gateway_binary().display());
    let _ = writeln!(w, "- gateway peak resident memory over the run: {} KiB", int(peak_rss as f64));
    if let Some(rtt) = redis_rtt {
        let _ = writeln!(
            w,
            "- a Redis round trip (1,000 sequential PINGs from this generator, at the end): p50 {:.3} ms, p99 {:.3} ms\n",
            rtt.p50, rtt.p99
        );
    }

    let _ = writeln!(w, "## Time to first token (ms)\n");
    let _ = writeln!(w, "| chats | path | p50 | p90 | p99 | added p50 | added p90 | added p99 | incomplete |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let direct = baseline(rows, row.streams).and_then(Phase::first_token);
        write_percentiles(&mut w, order, row, row.phase.first_token(), direct);
    }
    let _ = writeln!(w, "\n## Time to the response's headers (ms)\n");
    let _ = writeln!(
        w,
        "The gateway answers with headers once the turn is started (committed) and its stream subscribed; the first token comes after.\n"
    );
    let _ = writeln!(w, "| chats | path | p50 | p90 | p99 | added p50 | added p90 | added p99 | incomplete |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let direct = baseline(rows, row.streams).and_then(Phase::headers);
        write_percentiles(&mut w, order, row, row.phase.headers(), direct);
    }
    let _ = writeln!(w, "\n## Total time of a chat (ms)\n");
    let _ = writeln!(w, "| chats | path | p50 | p90 | p99 | added p50 | added p90 | added p99 | incomplete |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let direct = baseline(rows, row.streams).and_then(Phase::total);
        write_percentiles(&mut w, order, row, row.phase.total(), direct);
    }
    let _ = writeln!(w, "\n## Gaps between tokens (ms)\n");
    let _ = writeln!(w, "| chats | path | p50 | p99 | max |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|");
    for row in rows {
        if let Some(s) = row.phase.gaps() {
            let _ = writeln!(
                w,
                "| {} | {} | {:.2} | {:.2} | {:.2} |",
                row.streams,
                row.dialect.name(),
                s.p50,
                s.p99,
                s.max
            );
        }
    }
    let _ = writeln!(w, "\n## Cost\n");
    let _ = writeln!(
        w,
        "| chats | path | tokens | token frames | tokens/s | gateway CPU per 1k tokens | mock CPU per 1k tokens | Redis commands per 100 tokens | Redis commands per chat |"
    );
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let tokens = row.phase.tokens();
        let per_k = |cpu: Duration| ms(cpu.as_secs_f64() * 1000.0 * 1000.0 / tokens.max(1) as f64);
        let gateway = if row.dialect == Dialect::Direct { "—".to_string() } else { per_k(row.gateway_cpu) };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            row.streams,
            row.dialect.name(),
            int(tokens as f64),
            int(row.phase.frames() as f64),
            int(rate(tokens, row.phase.elapsed)),
            gateway,
            per_k(row.mock_cpu),
            row.redis.commands as f64 * 100.0 / tokens.max(1) as f64,
            row.redis.commands as f64 / row.chats.max(1) as f64,
        );
    }
    let _ = writeln!(w, "\n## Where the CPU went (the machine has {} CPUs)\n", context.cpus);
    let _ = writeln!(
        w,
        "CPU seconds of each process over the phase (from the first start to the last stream's end; native sessions are created before it), and their sum as cores busy over the phase's wall time.\n"
    );
    let _ = writeln!(w, "| chats | path | wall s | gateway | mock | Redis | generator | cores busy |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let wall = row.phase.elapsed.as_secs_f64();
        let all = row.gateway_cpu + row.mock_cpu + row.redis_cpu + row.generator_cpu;
        let _ = writeln!(
            w,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            row.streams,
            row.dialect.name(),
            wall,
            row.gateway_cpu.as_secs_f64(),
            row.mock_cpu.as_secs_f64(),
            row.redis_cpu.as_secs_f64(),
            row.generator_cpu.as_secs_f64(),
            all.as_secs_f64() / wall.max(1e-9),
        );
    }
    for row in rows {
        if let Some(error) = row.phase.first_error() {
            let _ = writeln!(w, "\n- first error, {} chats {}: `{error}`", row.streams, row.dialect.name());
        }
    }
    w
}

fn baseline(rows: &[Row], streams: usize) -> Option<&Phase> {
    rows.iter().find(|r| r.streams == streams && r.dialect == Dialect::Direct).map(|r| &r.phase)
}

fn write_percentiles(w: &mut String, order: &Order, row: &Row, s: Option<Summary>, direct: Option<Summary>) {
    let Some(s) = s else {
        let _ = writeln!(w, "| {} | {} | — | — | — | — | — | — | {} |", row.streams, row.dialect.name(), row.chats);
        return;
    };
    let added = |pick: fn(&Summary) -> f64| match (row.dialect, direct) {
        (Dialect::Direct, _) | (_, None) => "—".to_string(),
        (_, Some(d)) => format!("{:+.2}", pick(&s) - pick(&d)),
    };
    let _ = writeln!(
        w,
        "| {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} |",
        row.streams,
        row.dialect.name(),
        s.p50,
        s.p90,
        s.p99,
        added(|s| s.p50),
        added(|s| s.p90),
        added(|s| s.p99),
        row.phase.incomplete(order),
    );
}
