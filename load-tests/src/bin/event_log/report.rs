//! The Markdown report: the machine and the command first, then one table per
//! phase, the baseline ratios, and whatever failed.

use std::fmt::Write;

use switchboard_load::{
    fanout::LiveResult,
    machine::Context,
    raw::RawResult,
    stats::{Summary, int, millis, ms, rate},
    turns::TurnsResult,
};

use super::{Args, Results};

pub fn render(args: &Args, context: &Context, results: &Results) -> String {
    let mut out = String::new();
    let w = &mut out;
    context.write_header(w, "switchboard event-log benchmark", &args.redis);
    let _ = writeln!(
        w,
        "- the gateway (replicas A and B, one process, one tokio runtime), Redis and the load generator \
         all share these {} CPUs",
        context.cpus
    );
    let _ = writeln!(
        w,
        "- delta payload as stored: {} bytes of JSON ({}-byte token text)\n",
        results.payload_bytes, args.token_bytes
    );

    raw_section(w, results);
    turns_section(w, args, results);
    rejoin_section(w, results);
    if let Some(live) = &results.live {
        live_section(w, args, results, live);
    }
    ratios_section(w, results);
    if !results.errors.is_empty() {
        let _ = writeln!(w, "## Errors\n");
        for error in &results.errors {
            let _ = writeln!(w, "- {error}");
        }
        let _ = writeln!(w);
    }
    out
}

fn raw_section(w: &mut String, results: &Results) {
    let _ = writeln!(w, "## 1. Raw Redis baseline (XADD MAXLEN 0-*, one connection)\n");
    let _ = writeln!(w, "| mode | entries | time | entries/s |\n|---|---:|---:|---:|");
    let rows = [("(a) one XADD per round trip", &results.raw_sequential), ("(b) pipelined", &results.raw_pipelined)];
    for (name, result) in rows {
        if let Some(r) = result {
            let name = if r.batch > 1 { format!("{name}, {} per pipeline", r.batch) } else { name.to_string() };
            let _ = writeln!(
                w,
                "| {name} | {} | {:.2} s | {} |",
                int(r.entries as f64),
                r.elapsed.as_secs_f64(),
                int(raw_rate(r))
            );
        }
    }
    let _ = writeln!(w);
}

fn raw_rate(r: &RawResult) -> f64 {
    rate(r.entries, r.elapsed)
}

fn turns_section(w: &mut String, args: &Args, results: &Results) {
    let columns: Vec<(&str, &TurnsResult)> = [
        ("emit (coalesced)", &results.coalesced),
        ("append, 1 session", &results.durable_single),
        ("append, concurrent", &results.durable_many),
    ]
    .into_iter()
    .filter_map(|(name, r)| r.as_ref().map(|r| (name, r)))
    .collect();
    if columns.is_empty() {
        return;
    }
    let _ = writeln!(w, "## 2. Through the gateway: turns started over HTTP on replica A\n");
    let _ = write!(w, "| |");
    for (name, _) in &columns {
        let _ = write!(w, " {name} |");
    }
    let _ = write!(w, "\n|---|");
    for _ in &columns {
        let _ = write!(w, "---:|");
    }
    let _ = writeln!(w);
    let token = "x".repeat(args.token_bytes.max(1));
    type Row = (&'static str, fn(&TurnsResult, &str) -> String);
    let rows: [Row; 18] = [
        ("sessions × deltas", |r, _| format!("{} × {}", r.sessions(), r.command.tokens())),
        ("wall time, first request → all turns ended", |r, _| format!("{:.2} s", r.elapsed.as_secs_f64())),
        ("**deltas/s end to end**", |r, _| format!("**{}**", int(rate(r.tokens(), r.elapsed)))),
        ("events appended (all types; Σ last seq)", |r, _| int(r.events() as f64)),
        ("text-delta events appended", |r, _| int(r.delta_events() as f64)),
        ("deltas per text-delta event (coalescing)", |r, _| ratio(r.tokens(), r.delta_events())),
        ("EVALSHA calls (Δ INFO commandstats)", |r, _| int(r.counters.evalsha as f64)),
        ("**EVALSHA per delta**", |r, _| format!("**{}**", ratio(r.counters.evalsha, r.tokens()))),
        ("… of which appends (Δ PUBLISH)", |r, _| int(r.counters.publish as f64)),
        ("… of which log reads (Δ XREVRANGE)", |r, _| int(r.counters.xrevrange as f64)),
        ("… of which state writes (Δ HGET)", |r, _| int(r.counters.hget as f64)),
        ("deltas per append script call", |r, _| ratio(r.tokens(), r.counters.publish)),
        ("pool checkouts (Δ PING: deadpool's recycle check)", |r, _| int(r.counters.ping as f64)),
        ("Redis socket reads, all clients (Δ total_reads_processed)", |r, _| int(r.counters.socket_reads as f64)),
        ("socket reads per delta", |r, _| ratio(r.counters.socket_reads, r.tokens())),
        ("Redis commands, incl. inside scripts, per delta", |r, _| ratio(r.counters.commands, r.tokens())),
        ("Δ XADD − events appended (0: no other writer)", |r, _| r.foreign_xadds().to_string()),
        ("streams complete (turn_ended, all text)", |r, t| {
            format!("{}/{}", r.sessions() - r.incomplete(t), r.sessions())
        }),
    ];
    for (name, cell) in rows {
        let _ = write!(w, "| {name} |");
        for (_, result) in &columns {
            let _ = write!(w, " {} |", cell(result, &token));
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(w);
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 { "–".into() } else { format!("{:.3}", a as f64 / b as f64) }
}

fn rejoin_section(w: &mut String, results: &Results) {
    if results.rejoins.is_empty() {
        return;
    }
    let _ = writeln!(w, "## 3. Rejoin on replica B: a finished session, `GET …/events` with `Last-Event-ID`\n");
    let _ = writeln!(
        w,
        "| Last-Event-ID | events replayed | connection | repeats | first frame p50 | last frame p50 | last frame p95 | \
         last frame max |\n|---:|---:|---|---:|---:|---:|---:|---:|"
    );
    for r in &results.rejoins {
        let first = Summary::of(r.first_frame.iter().map(|d| millis(*d)).collect());
        let last = Summary::of(r.latencies.iter().map(|d| millis(*d)).collect());
        if let (Some(first), Some(s)) = (first, last) {
            let how = if r.new_connections { "new" } else { "kept alive" };
            let _ = writeln!(
                w,
                "| {} | {} | {how} | {} | {} | {} | {} | {} |",
                r.cursor,
                r.last_seq - r.cursor,
                s.n,
                ms(first.p50),
                ms(s.p50),
                ms(s.p95),
                ms(s.max)
            );
        }
    }
    let _ = writeln!(w);
}

fn live_section(w: &mut String, args: &Args, results: &Results, live: &LiveResult) {
    let _ = writeln!(
        w,
        "## 4. Live fan-out: a session running on A, {} deltas one every {} ms; emit → receipt\n",
        args.live_tokens, args.live_interval_ms
    );
    let _ = writeln!(
        w,
        "| stream | streams | samples | p50 | p95 | p99 | max | streams ended |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    let b: Vec<f64> = live.on_b.iter().flat_map(|f| f.latencies.iter().copied()).collect();
    let ended_b = live.on_b.iter().filter(|f| f.ended).count();
    let rows = [
        ("followers on B (other replica)", live.on_b.len(), b, ended_b),
        ("the turn's own stream on A (owner)", 1, live.on_a.latencies.clone(), usize::from(live.on_a.ended)),
    ];
    for (name, streams, sample, ended) in rows {
        if let Some(s) = Summary::of(sample) {
            let _ = writeln!(
                w,
                "| {name} | {streams} | {} | {} | {} | {} | {} | {ended}/{streams} |",
                int(s.n as f64),
                ms(s.p50),
                ms(s.p95),
                ms(s.p99),
                ms(s.max)
            );
        }
    }
    let expected = args.live_tokens * live.on_b.len();
    let received: usize = live.on_b.iter().map(|f| f.latencies.len()).sum();
    let c = &live.counters;
    let _ = writeln!(
        w,
        "\n{} followers attached in {:.2} s; they received {}/{} deltas. While the turn streamed: {} append \
         script calls (Δ PUBLISH) and {} log reads (Δ XREVRANGE) in all, for both replicas.\n",
        live.on_b.len(),
        live.attach.as_secs_f64(),
        int(received as f64),
        int(expected as f64),
        int(c.publish as f64),
        int(c.xrevrange as f64)
    );
    let _ = writeln!(
        w,
        "| Redis connections | before followers | {} followers attached | mid-stream |\n|---|---:|---:|---:|",
        live.on_b.len()
    );
    if let (Some((user_a, user_b)), Some(moments)) = (&results.users, live.replicas) {
        let cell = |c: switchboard_load::redis_admin::Connections| format!("{} ({} subscribed)", c.total, c.subscribed);
        let rows = [
            ("replica A, owner", user_a, moments.map(|m| m.0)),
            ("replica B, followers", user_b, moments.map(|m| m.1)),
        ];
        for (name, user, [before, attached, streaming]) in rows {
            let _ = writeln!(
                w,
                "| {name} (`CLIENT LIST` user={user}) | {} | {} | {} |",
                cell(before),
                cell(attached),
                cell(streaming)
            );
        }
    }
    let [before, attached, streaming] = live.clients;
    let _ = writeln!(w, "| whole server (`connected_clients`) | {before} | {attached} | {streaming} |\n");
}

fn ratios_section(w: &mut String, results: &Results) {
    let _ = writeln!(w, "## Ratios to the baseline measured in this run\n");
    let seq = results.raw_sequential.as_ref().map(raw_rate);
    let piped = results.raw_pipelined.as_ref().map(raw_rate);
    let per_sec = |r: &Option<TurnsResult>| r.as_ref().map(|r| rate(r.tokens(), r.elapsed));
    let lines = [
        ("gateway durable appends/s, 1 session ÷ raw sequential XADD/s", per_sec(&results.durable_single), seq),
        ("gateway durable appends/s, concurrent sessions ÷ raw sequential XADD/s", per_sec(&results.durable_many), seq),
        ("gateway deltas/s with coalescing ÷ raw pipelined XADD/s", per_sec(&results.coalesced), piped),
        ("gateway deltas/s with coalescing ÷ raw sequential XADD/s", per_sec(&results.coalesced), seq),
    ];
    for (name, a, b) in lines {
        if let (Some(a), Some(b)) = (a, b) {
            let _ = writeln!(w, "- {name}: {} ÷ {} = **{:.3}**", int(a), int(b), a / b);
        }
    }
    if let Some(r) = &results.coalesced {
        let _ = writeln!(
            w,
            "- Redis round trips per delta with coalescing: {} EVALSHA calls per delta, {} socket reads per delta",
            ratio(r.counters.evalsha, r.tokens()),
            ratio(r.counters.socket_reads, r.tokens())
        );
    }
    let _ = writeln!(w);
}
