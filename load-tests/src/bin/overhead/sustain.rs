//! `overhead --sustain S`: `n` clients per phase, each starting a new chat
//! as soon as its previous one ends (so `n` streams are open at every
//! moment), straight to the mock (the baseline) and then through the
//! gateway per dialect, in the same run. The processes' CPU and Redis'
//! counters are sampled at the edges of an `S`-second window that opens
//! [`SETTLE`] after the ramp, and every cost is divided by the tokens that
//! arrived, or the chats that started, inside that window.

use std::{
    fmt::Write,
    time::{Duration, Instant},
};

use switchboard_load::{
    Result,
    machine::Context,
    mock::Order,
    procs::{Gateway, Mock, cpu_of},
    redis_admin::{Admin, Counters},
    stats::{Summary, int},
    streams::{Dialect, Target},
    sustain::{Sustained, Window},
};

use crate::Args;

/// From the end of the ramp to the window: the first chats, started in a
/// wave, have ended and been replaced, so starts are spread as in a steady
/// state.
const SETTLE: Duration = Duration::from_secs(3);

/// One sustained phase and what it cost inside its window.
pub struct Row {
    streams: usize,
    dialect: Dialect,
    run: Sustained,
    window: Window,
    cost: Cost,
    /// Sockets the gateway held at the window's end (clients, the mock,
    /// Redis, its listener): how many connections the chats took.
    gateway_sockets: usize,
}

/// CPU of each process and Redis' counters, at one moment or between two.
#[derive(Clone, Copy)]
struct Cost {
    gateway: Duration,
    mock: Duration,
    redis: Duration,
    generator: Duration,
    commands: Counters,
}

impl Cost {
    async fn now(gateway: &Gateway, mock: &Mock, admin: &mut Admin) -> Result<Self> {
        Ok(Self {
            gateway: gateway.proc.cpu(),
            mock: mock.proc.cpu(),
            redis: admin.cpu().await?,
            generator: cpu_of("self"),
            commands: admin.counters().await?,
        })
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            gateway: self.gateway.saturating_sub(before.gateway),
            mock: self.mock.saturating_sub(before.mock),
            redis: self.redis.saturating_sub(before.redis),
            generator: self.generator.saturating_sub(before.generator),
            commands: self.commands.since(&before.commands),
        }
    }
}

/// Every sustained phase of the run: per count of `--streams`, direct, then
/// each dialect through the gateway.
pub async fn measure(
    args: &Args,
    order: &Order,
    length: Duration,
    gateway: &Gateway,
    mock: &Mock,
    admin: &mut Admin,
    target: impl Fn(Dialect) -> Target,
) -> Result<Vec<Row>> {
    let ramp = Duration::from_millis(args.ramp_ms);
    let mut rows = Vec::new();
    for &streams in &args.streams {
        for &dialect in std::iter::once(&Dialect::Direct).chain(&args.dialects) {
            eprintln!("{streams} sustained streams, {}, {} s", dialect.name(), length.as_secs());
            let started = Instant::now();
            let planned = started + ramp + SETTLE;
            let stop = planned + length;
            let target = target(dialect);
            // The window's edges are the moments the samples were taken.
            let sample = async {
                tokio::time::sleep_until(planned.into()).await;
                let (start, before) = (Instant::now(), Cost::now(gateway, mock, admin).await?);
                tokio::time::sleep_until(stop.into()).await;
                let (end, after) = (Instant::now(), Cost::now(gateway, mock, admin).await?);
                Result::Ok((Window { start, end }, after.since(&before), gateway.proc.sockets()))
            };
            let (run, sampled) = tokio::join!(Sustained::run(&target, order, streams, started, ramp, stop), sample);
            let (window, cost, gateway_sockets) = sampled?;
            rows.push(Row { streams, dialect, run: run?, window, cost, gateway_sockets });
        }
    }
    Ok(rows)
}

pub fn report(context: &Context, args: &Args, order: &Order, rows: &[Row]) -> String {
    let mut w = String::new();
    context.write_header(&mut w, "Sustained streams: the gateway against the mock model", &args.store());
    let _ = writeln!(
        w,
        "- workload: per phase, each of n clients starts a new chat as soon as its previous one ends; each chat orders {} tokens {} ms apart, the first after {} ms; clients start over {} ms; measured over a {} s window opening {} s after the ramp",
        order.tokens,
        order.pace.as_millis(),
        order.first.as_millis(),
        args.ramp_ms,
        args.sustain.unwrap_or_default(),
        SETTLE.as_secs()
    );
    let _ = writeln!(
        w,
        "- chats sent over {}; the gateway calls the mock over {}",
        args.transport.clients().name(),
        args.transport.upstream()
    );
    let _ = writeln!(w, "- gateway binary: `{}`\n", switchboard_load::procs::gateway_binary().display());
    let _ = writeln!(
        w,
        "Tokens are those that arrived inside the window; chats, and their times, those that started inside it. \"added\" is the path's percentile minus the direct one's of the same n. CPU and Redis commands are the window's, divided by its tokens or its chats (the same CPU, divided two ways).\n"
    );

    let _ = writeln!(w, "## Delivery\n");
    let _ = writeln!(
        w,
        "| streams | path | chats | tokens | tokens/s | of direct | TTFT p50 | TTFT p99 | added p50 | added p99 | headers added p50 / p99 | total p50 / p99 | gap p99 | failed or lost text (whole run) |"
    );
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|");
    for row in rows {
        let direct = baseline(rows, row.streams);
        let rate = row.tokens_per_sec();
        let of_direct = match direct {
            Some(d) if row.dialect != Dialect::Direct => {
                format!("{:.1} %", 100.0 * rate / d.tokens_per_sec().max(1e-9))
            }
            _ => "—".into(),
        };
        let ttft = row.run.first_token(&row.window);
        let added = |pick: fn(&Summary) -> f64, of: fn(&Row) -> Option<Summary>| match (row.dialect, direct) {
            (Dialect::Direct, _) | (_, None) => "—".to_string(),
            (_, Some(d)) => match (of(row), of(d)) {
                (Some(s), Some(b)) => format!("{:+.2}", pick(&s) - pick(&b)),
                _ => "—".into(),
            },
        };
        let first = |r: &Row| r.run.first_token(&r.window);
        let headers = |r: &Row| r.run.headers(&r.window);
        let total = row.run.total(&row.window);
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            int(row.streams as f64),
            row.dialect.name(),
            int(row.run.chats(&row.window) as f64),
            int(row.run.tokens(&row.window) as f64),
            int(rate),
            of_direct,
            pct(ttft, |s| s.p50),
            pct(ttft, |s| s.p99),
            added(|s| s.p50, first),
            added(|s| s.p99, first),
            added(|s| s.p50, headers),
            added(|s| s.p99, headers),
            match total {
                Some(t) => format!("{:.0} / {:.0}", t.p50, t.p99),
                None => "—".into(),
            },
            pct(row.run.gaps(&row.window), |s| s.p99),
            row.run.incomplete(order),
        );
    }

    let _ = writeln!(w, "\n## Cost per streamed token and per chat\n");
    let _ = writeln!(
        w,
        "| streams | path | gateway CPU per token (ms) | Redis CPU per token (ms) | mock CPU per token (ms) | gateway CPU per chat (ms) | Redis CPU per chat (ms) | Redis commands per token | Redis commands per chat | EVALSHA per token | gateway sockets |"
    );
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let tokens = row.run.tokens(&row.window).max(1) as f64;
        let chats = row.run.chats(&row.window).max(1) as f64;
        let per = |cpu: Duration, n: f64| format!("{:.4}", cpu.as_secs_f64() * 1000.0 / n);
        let through = row.dialect != Dialect::Direct;
        let gated = |text: String| if through { text } else { "—".into() };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            int(row.streams as f64),
            row.dialect.name(),
            gated(per(row.cost.gateway, tokens)),
            gated(per(row.cost.redis, tokens)),
            per(row.cost.mock, tokens),
            gated(format!("{:.2}", row.cost.gateway.as_secs_f64() * 1000.0 / chats)),
            gated(format!("{:.2}", row.cost.redis.as_secs_f64() * 1000.0 / chats)),
            gated(format!("{:.2}", row.cost.commands.commands as f64 / tokens)),
            gated(format!("{:.1}", row.cost.commands.commands as f64 / chats)),
            gated(format!("{:.2}", row.cost.commands.evalsha as f64 / tokens)),
            if through { int(row.gateway_sockets as f64) } else { "—".into() },
        );
    }

    let _ = writeln!(w, "\n## Where the CPU went (the machine has {} CPUs)\n", context.cpus);
    let _ = writeln!(w, "CPU seconds of each process inside the window, and their sum as cores busy.\n");
    let _ = writeln!(w, "| streams | path | window s | gateway | mock | Redis | generator | cores busy |");
    let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let wall = row.window.length().as_secs_f64();
        let c = &row.cost;
        let all = c.gateway + c.mock + c.redis + c.generator;
        let _ = writeln!(
            w,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            int(row.streams as f64),
            row.dialect.name(),
            wall,
            c.gateway.as_secs_f64(),
            c.mock.as_secs_f64(),
            c.redis.as_secs_f64(),
            c.generator.as_secs_f64(),
            all.as_secs_f64() / wall.max(1e-9),
        );
    }
    for row in rows {
        if let Some(error) = row.run.first_error() {
            let _ = writeln!(w, "\n- first error, {} streams {}: `{error}`", row.streams, row.dialect.name());
        }
    }
    w
}

impl Row {
    fn tokens_per_sec(&self) -> f64 {
        self.run.tokens(&self.window) as f64 / self.window.length().as_secs_f64().max(1e-9)
    }
}

fn baseline(rows: &[Row], streams: usize) -> Option<&Row> {
    rows.iter().find(|r| r.streams == streams && r.dialect == Dialect::Direct)
}

fn pct(summary: Option<Summary>, pick: fn(&Summary) -> f64) -> String {
    summary.map_or_else(|| "—".into(), |s| format!("{:.2}", pick(&s)))
}
