//! `capacity`: how many open chats one replica holds, in how much memory,
//! what holding them costs Redis, and whether every one still gets its
//! events. Prints a Markdown report on stdout (progress on stderr). See
//! `load-tests/README.md`.
//!
//! One gateway replica (the release binary, a process of its own) with the
//! Redis store, the mock model in another process. For each count of
//! `--chats`, two kinds of open chat, each a native-API turn:
//!
//! - **slow model**: the model's first token waits on the mock's gate, so
//!   each chat holds a client stream and an upstream stream open;
//! - **relay-waiting**: the model asked for a tool that needs permission; the
//!   chat's stream stays open on its live relay (no upstream call open).
//!
//! Once every chat's stream is open (`turn_started` seen, or
//! `relay_requested`), the gateway's resident memory is read and Redis'
//! command counter is sampled over `--idle-secs` of holding; then the gate
//! opens (or every relay is approved) and every chat must end with exactly
//! its text. Baseline: the mock's resident memory per held stream in the
//! same phase (slow model).
//!
//! `--h2c` opens the chats over HTTP/2 with prior knowledge,
//! `--chats-per-connection` on each connection (a load balancer's shape);
//! `--upstream-h2c` has the gateway call the mock over one h2c connection.
//! The report counts the gateway's sockets while the chats are open.
//!
//! Needs file descriptors: `ulimit -n` of about 2 x chats + 1,000 (the
//! gateway holds two sockets per slow-model chat; children inherit it).

use std::{
    fmt::Write,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use clap::{Parser, ValueEnum};
use switchboard_load::{
    Result,
    machine::Context,
    mock::Order,
    native::{Native, bounded},
    procs::{Gateway, GatewayOptions, Mock, token},
    redis_admin::{Admin, run_prefix},
    stats::int,
    streams::{Clients, TransportArgs},
};
use tokio::sync::Notify;

/// Open chats one replica holds: memory, idle Redis load, delivery.
#[derive(Debug, Clone, Parser)]
#[command(name = "capacity")]
struct Args {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Open chats per phase (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,9900")]
    chats: Vec<usize>,
    /// Kinds to measure: slow, relay.
    #[arg(long, value_delimiter = ',', default_value = "slow,relay")]
    kinds: Vec<Kind>,
    /// Seconds of holding over which idle Redis commands are counted.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Requests in flight while opening or releasing chats.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// The gateway's lease TTL (seconds): a lease lost while holding shows
    /// as a takeover.
    #[arg(long, default_value_t = 10)]
    lease_ttl_secs: u64,
    /// `--h2c`, `--chats-per-connection`, `--upstream-h2c`.
    #[command(flatten)]
    transport: TransportArgs,
}

/// What an open chat waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// The model's first token (held on the mock's gate).
    Slow,
    /// A live relay (a tool that asks for permission).
    Relay,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Slow => "slow model",
            Self::Relay => "relay-waiting",
        }
    }
}

struct Row {
    kind: Kind,
    chats: usize,
    opened: usize,
    open_secs: f64,
    rss_before: u64,
    rss_open: u64,
    mock_rss_before: u64,
    mock_rss_open: u64,
    threads: u64,
    /// The gateway's open sockets with every chat open.
    sockets: usize,
    idle_commands: u64,
    idle: Duration,
    takeovers: f64,
    complete: usize,
    release_secs: f64,
    first_error: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("capacity", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let mut admin = Admin::connect(&args.redis).await?;
    let mut context = Context::gather_with(&mut admin).await?;
    let mut rows = Vec::new();
    for &chats in &args.chats {
        for &kind in &args.kinds {
            eprintln!("{chats} chats, {}", kind.name());
            rows.push(phase(&args, &mut admin, kind, chats).await?);
        }
    }
    context.finish();
    Ok(report(&context, &args, &rows))
}

/// One fresh gateway and mock, `chats` chats of `kind` opened, held,
/// measured and released.
async fn phase(args: &Args, admin: &mut Admin, kind: Kind, chats: usize) -> Result<Row> {
    let mock = Mock::start().await?;
    let prefix = run_prefix();
    let options = GatewayOptions {
        tool_permission: "ask",
        lease_ttl_secs: args.lease_ttl_secs,
        upstream_h2c: args.transport.upstream_h2c,
        ..GatewayOptions::new("a", &args.redis, &prefix, mock.addr)
    };
    let gateway = Gateway::start(&options).await?;
    let clients = Clients::new(args.transport.clients(), chats);
    let token = token()?;
    // Chat `i`'s client: its session, its turn and its decision share a
    // connection (with h2c, that of its group of chats).
    let client = |i: usize| Native { http: clients.get(i).clone(), token: token.clone() };
    let relay = kind == Kind::Relay;
    let order = Order { tokens: 5, pace: Duration::ZERO, first: Duration::ZERO, tools: u32::from(relay), gate: !relay };
    let base = gateway.base();

    // Sessions first (untimed), then memory before any turn runs.
    let ids: Vec<String> = bounded((0..chats).collect(), args.concurrency, |i| {
        let (client, base) = (client(i), base.clone());
        async move { client.create(&base, "relay").await }
    })
    .await
    .into_iter()
    .collect::<Result<_>>()?;
    let rss_before = gateway.proc.rss_kib();
    let mock_rss_before = mock.proc.rss_kib();

    let opened = Arc::new(AtomicUsize::new(0));
    let all_open = Arc::new(Notify::new());
    let relays = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(chats);
    let gate = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    for (i, id) in ids.iter().enumerate() {
        let (client, base, id, message) = (client(i), base.clone(), id.clone(), order.message());
        let (opened, all_open, relays, gate) = (opened.clone(), all_open.clone(), relays.clone(), gate.clone());
        let expected: String = (1..=order.tokens).map(Order::token).collect();
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await.expect("never closed");
            let mut turn = client.send(&base, &id, &message).await?;
            let marker = if relay { "relay_requested" } else { "turn_started" };
            let event = turn.until(marker).await?;
            drop(permit);
            if relay {
                let relay_id = event.data["relay_id"].as_str().ok_or("a relay without an id")?.to_string();
                relays.lock().expect("not poisoned").push((i, id.clone(), relay_id));
            }
            if opened.fetch_add(1, Ordering::SeqCst) + 1 == chats {
                all_open.notify_one();
            }
            let (text, last) = turn.rest().await?;
            if text != expected || last != "turn_ended" {
                return Err(format!("chat {id} said {text:?} and ended with {last}").into());
            }
            Result::Ok(())
        }));
    }
    let waited = tokio::time::timeout(Duration::from_secs(600), all_open.notified()).await;
    let open_secs = started.elapsed().as_secs_f64();
    let opened_count = opened.load(Ordering::SeqCst);
    if waited.is_err() {
        eprintln!("only {opened_count} of {chats} chats opened within 600 s");
    }
    let rss_open = gateway.proc.rss_kib();
    let mock_rss_open = mock.proc.rss_kib();
    let threads = gateway.proc.threads();
    let sockets = gateway.proc.sockets();
    let takeovers_before = gateway.metric("switchboard_takeovers").await?;
    let before = admin.counters().await?;
    let idle_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle_commands = admin.counters().await?.since(&before).commands;
    let idle = idle_started.elapsed();
    let takeovers = gateway.metric("switchboard_takeovers").await? - takeovers_before;

    let released = Instant::now();
    if relay {
        let pending = std::mem::take(&mut *relays.lock().expect("not poisoned"));
        let decided = bounded(pending, args.concurrency, |(i, id, relay_id)| {
            let (client, base) = (client(i), base.clone());
            async move { client.decide(&base, &id, &relay_id, true).await }
        })
        .await;
        if let Some(Err(e)) = decided.into_iter().find(Result::is_err) {
            eprintln!("a decision failed: {e}");
        }
    } else {
        reqwest::Client::new().post(format!("http://{}/release", mock.addr)).send().await?;
    }
    let (mut complete, mut first_error) = (0, None);
    for task in tasks {
        match task.await? {
            Ok(()) => complete += 1,
            Err(e) => {
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let release_secs = released.elapsed().as_secs_f64();
    admin.delete_prefix(&prefix).await?;
    Ok(Row {
        kind,
        chats,
        opened: opened_count,
        open_secs,
        rss_before,
        rss_open,
        mock_rss_before,
        mock_rss_open,
        threads,
        sockets,
        idle_commands,
        idle,
        takeovers,
        complete,
        release_secs,
        first_error,
    })
}

fn report(context: &Context, args: &Args, rows: &[Row]) -> String {
    let mut w = String::new();
    context.write_header(&mut w, "Open chats on one replica", &args.redis);
    let _ = writeln!(
        w,
        "- lease TTL {} s; idle Redis commands counted over {} s of holding",
        args.lease_ttl_secs, args.idle_secs
    );
    let upstream = args.transport.upstream();
    let _ = writeln!(
        w,
        "- chats opened over {}; the gateway calls the mock over {upstream}\n",
        args.transport.clients().name()
    );
    let _ = writeln!(
        w,
        "| kind | chats | opened | s to open | gateway RSS before → open (KiB) | KiB per chat | mock KiB per chat | gateway threads | gateway sockets | Redis commands/s per idle chat | takeovers while holding | ended with their text | s to release all |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let per = |after: u64, before: u64| (after.saturating_sub(before)) as f64 / row.opened.max(1) as f64;
        let mock = if row.kind == Kind::Slow {
            format!("{:.1}", per(row.mock_rss_open, row.mock_rss_before))
        } else {
            "—".into()
        };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {:.1} | {} → {} | {:.1} | {} | {} | {} | {:.4} | {} | {} | {:.1} |",
            row.kind.name(),
            int(row.chats as f64),
            int(row.opened as f64),
            row.open_secs,
            int(row.rss_before as f64),
            int(row.rss_open as f64),
            per(row.rss_open, row.rss_before),
            mock,
            row.threads,
            int(row.sockets as f64),
            row.idle_commands as f64 / row.idle.as_secs_f64() / row.opened.max(1) as f64,
            row.takeovers,
            int(row.complete as f64),
            row.release_secs,
        );
    }
    for row in rows {
        if let Some(e) = &row.first_error {
            let _ = writeln!(w, "\n- first error, {} {}: `{e}`", row.chats, row.kind.name());
        }
    }
    w
}
