//! `checkpoint`: what a checkpoint costs as the conversation grows, the
//! atomic core's commit against the design it replaced. Prints a Markdown
//! report on stdout (progress on stderr). See `load-tests/README.md`.
//!
//! For each conversation length N (`--sizes`), a session is set up with N
//! messages, then `--commits` checkpoints are written one after the other,
//! each what a tool round makes: a model response calling one tool and the
//! tool's result (two transitions in one commit): the session's state
//! document, two new messages (`--message-bytes` of text each) and their
//! events.
//!
//! - **now**: the store's commit (`lua/commit.lua`): the state document,
//!   the message appended to the conversation list, the event, fenced by
//!   the owner's tenure — what the gateway writes.
//! - **before** (same run, same Redis, the baseline): the previous design's
//!   checkpoint, `state_write.lua` of commit `ec7dc7c` (kept beside this
//!   file): the whole state document, conversation included, written again
//!   (the event was a second call then; it is left out, in its favour).
//!
//! Reported per N: bytes sent per checkpoint (the commands' arguments, as
//! built), Redis' own count of bytes it read (`total_net_input_bytes`, a
//! check on the first; includes RESP framing), and the time per checkpoint
//! (p50 / p99, one at a time, so the round trip is in it).

use std::{fmt::Write, process::ExitCode, time::Instant};

use clap::Parser;
use redis::{Script, aio::MultiplexedConnection};
use switchboard::{
    config::StoreConfig,
    domain::{
        AgentRef, CallDecision, ChatMessage, ConversationChange, Event, PermissionRules, Role, Session, SessionOptions,
        SessionSpec, StepOutput, ToolCall, ToolOutcome,
    },
    store::{Commit, Fence, MessagesWrite, OwnerChange, SessionKey, StateWrite, Store},
};
use switchboard_load::{
    Result,
    machine::Context,
    redis_admin::{Admin, run_prefix},
    stats::{Summary, int},
};

const OLD_STATE_WRITE: &str = include_str!("checkpoint/old_state_write.lua");
const INSTANCE: &str = "bench#1";

/// Checkpoint cost at growing conversation lengths: the atomic commit
/// against the whole-document rewrite it replaced.
#[derive(Debug, Clone, Parser)]
#[command(name = "checkpoint")]
struct Args {
    /// Redis to measure against (a unique key prefix is used, then deleted).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Conversation lengths, comma-separated.
    #[arg(long, default_value = "10,100,1000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Checkpoints measured per length and design.
    #[arg(long, default_value_t = 200)]
    commits: usize,
    /// Text per message.
    #[arg(long, default_value_t = 200)]
    message_bytes: usize,
}

/// One design at one length.
struct Measured {
    sent_bytes: f64,
    read_bytes: f64,
    micros: Summary,
}

impl Measured {
    /// Totals over the commits `micros` timed, as per-commit figures.
    fn per_commit(sent: usize, read: u64, micros: Vec<f64>) -> Result<Self> {
        let count = micros.len().max(1) as f64;
        Ok(Self {
            sent_bytes: sent as f64 / count,
            read_bytes: read as f64 / count,
            micros: Summary::of(micros).ok_or("no sample")?,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("checkpoint", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let mut admin = Admin::connect(&args.redis).await?;
    let mut context = Context::gather_with(&mut admin).await?;
    let prefix = run_prefix();
    let config = StoreConfig {
        redis: Some(switchboard::config::RedisTarget::Node(args.redis.clone())),
        tls: Default::default(),
        wait_replicas: 0,
        wait_replicas_timeout: std::time::Duration::from_millis(500),
        commit_linger: std::time::Duration::ZERO,
        append_tick: std::time::Duration::from_millis(1),
        key_prefix: prefix.clone(),
        session_ttl: std::time::Duration::from_secs(600),
        event_log_max_len: 100_000,
        lease_ttl: std::time::Duration::from_secs(10),
        liveness_check: None,
        hold_notice: std::time::Duration::from_secs(5),
        hold_max: std::time::Duration::from_secs(60),
    };
    let (tx, _notices) = tokio::sync::mpsc::channel(1024);
    let store = Store::open(&config, tx, Default::default())?;
    let mut conn = redis::Client::open(args.redis.as_str())?.get_multiplexed_async_connection().await?;
    let mut rows = Vec::new();
    for &n in &args.sizes {
        eprintln!("checkpoint: {n} messages");
        let now = measure_now(&store, &mut admin, n, &args).await?;
        let before = measure_before(&mut conn, &mut admin, &prefix, n, &args).await?;
        rows.push((n, now, before));
    }
    let deleted = admin.delete_prefix(&prefix).await?;
    eprintln!("checkpoint: deleted {deleted} keys");
    context.finish();

    let mut w = String::new();
    context.write_header(&mut w, "Checkpoint cost against conversation length", &args.redis);
    let _ = writeln!(
        w,
        "- each checkpoint: a tool round (a model response calling one tool, and its result): the state document, two {} B messages and their events; {} checkpoints per row, one at a time; the conversation grows by two messages per checkpoint\n",
        args.message_bytes, args.commits
    );
    let _ = writeln!(
        w,
        "| messages | now: bytes sent | now: Redis read | now: p50 / p99 | before: bytes sent | before: Redis read | before: p50 / p99 | bytes before ÷ now |"
    );
    let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, now, before) in rows {
        let _ = writeln!(
            w,
            "| {n} | {} | {} | {:.0} / {:.0} µs | {} | {} | {:.0} / {:.0} µs | {:.1} |",
            int(now.sent_bytes),
            int(now.read_bytes),
            now.micros.p50,
            now.micros.p99,
            int(before.sent_bytes),
            int(before.read_bytes),
            before.micros.p50,
            before.micros.p99,
            before.sent_bytes / now.sent_bytes,
        );
    }
    Ok(w)
}

/// A session running its first turn with `n` messages, and the tool call
/// its checkpoints answer.
fn session(n: usize, message_bytes: usize) -> Result<Session> {
    let spec = SessionSpec {
        id: format!("s{n}"),
        tenant: "bench".into(),
        subject: "bench".into(),
        model: "mock".into(),
        dialect: "native".into(),
        options: SessionOptions::default(),
    };
    let mut session = Session::new(spec);
    let text = "x".repeat(message_bytes);
    let history = (0..n.saturating_sub(1))
        .map(|i| ChatMessage::text(if i % 2 == 0 { Role::User } else { Role::Assistant }, text.clone()))
        .collect();
    session.seed(history)?;
    session.start_turn(ChatMessage::text(Role::User, text), None)?;
    Ok(session)
}

/// Tool round `i`: a model response (`text`) that calls one tool, and the
/// tool's result (`output`). Returns the events.
fn tool_round(
    session: &mut Session,
    i: usize,
    text: &str,
    output: &str,
) -> Result<Vec<switchboard::domain::EventKind>> {
    let call = ToolCall { id: format!("c{i}"), name: "lookup".into(), arguments: r#"{"id":"42"}"#.into() };
    let step = StepOutput { text: text.to_string(), calls: vec![call], ..StepOutput::default() };
    let mut events = session.complete_step(step, vec![CallDecision::Run], PermissionRules::default())?;
    events.extend(session.finish_tool(&format!("c{i}"), ToolOutcome::Success(output.to_string()), None, None)?);
    Ok(events)
}

fn encoded_messages(messages: &[ChatMessage]) -> Result<Vec<String>> {
    Ok(messages.iter().map(serde_json::to_string).collect::<std::result::Result<_, _>>()?)
}

async fn measure_now(store: &Store, admin: &mut Admin, n: usize, args: &Args) -> Result<Measured> {
    let key = SessionKey::new("bench", format!("now{n}"));
    let mut session = session(n, args.message_bytes)?;
    let mut create = Commit::new(key.clone(), Fence::Absent, INSTANCE);
    create.owner = OwnerChange::Acquire(INSTANCE.into());
    create.state = Some(StateWrite { doc: serde_json::to_string(&session)?, status: session.status().as_str() });
    create.messages = MessagesWrite::Append(encoded_messages(session.history().unwrap_or_default())?);
    store.sessions.commit(&[create]).await.remove(0)?;
    session.conversation_saved();
    let (text, output) = ("z".repeat(args.message_bytes), "y".repeat(args.message_bytes));
    let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
    let (mut sent, mut micros) = (0usize, Vec::with_capacity(args.commits));
    let read_before = admin.counters().await?.net_input;
    for i in 0..args.commits {
        let events = tool_round(&mut session, i, &text, &output)?;
        let mut commit = Commit::new(
            key.clone(),
            Fence::Owner { instance: INSTANCE.into(), epoch: 1, n: i as u64 + 1, after: 0 },
            INSTANCE,
        );
        commit.state = Some(StateWrite { doc: serde_json::to_string(&session)?, status: session.status().as_str() });
        let appended = match session.conversation_change() {
            ConversationChange::Append(m) => encoded_messages(m)?,
            _ => Vec::new(),
        };
        commit.messages = MessagesWrite::Append(appended);
        commit.events = events
            .into_iter()
            .map(|kind| serde_json::to_string(&Event { kind, agent: main.clone(), ts: 0 }))
            .collect::<std::result::Result<_, _>>()?;
        sent += commit_bytes(&commit);
        let started = Instant::now();
        store.sessions.commit(&[commit]).await.remove(0)?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        session.conversation_saved();
    }
    Measured::per_commit(sent, admin.counters().await?.net_input - read_before, micros)
}

/// The bytes of a commit's arguments: what `commit.lua` is sent besides
/// its fixed fields.
fn commit_bytes(commit: &Commit) -> usize {
    let state = commit.state.as_ref().map_or(0, |s| s.doc.len() + s.status.len());
    let messages = match &commit.messages {
        MessagesWrite::Keep => 0,
        MessagesWrite::Append(m) | MessagesWrite::Replace(m) => m.iter().map(String::len).sum(),
    };
    state + messages + commit.events.iter().map(String::len).sum::<usize>()
}

async fn measure_before(
    conn: &mut MultiplexedConnection,
    admin: &mut Admin,
    prefix: &str,
    n: usize,
    args: &Args,
) -> Result<Measured> {
    let key = SessionKey::new("bench", format!("before{n}"));
    let script = Script::new(OLD_STATE_WRITE);
    let state = format!("{prefix}{{t:{}:s:{}}}:state", key.tenant, key.id);
    let lease = format!("{prefix}{{t:{}:s:{}}}:lease", key.tenant, key.id);
    let events = format!("{prefix}{{t:{}:s:{}}}:events", key.tenant, key.id);
    let mut session = session(n, args.message_bytes)?;
    // The old document: the state with the whole conversation in it.
    let document = |session: &Session| -> Result<String> {
        let mut doc = serde_json::to_value(session)?;
        doc["messages"] = serde_json::to_value(session.history().unwrap_or_default())?;
        Ok(doc.to_string())
    };
    let invoke = |mode: &str, version: u64, doc: &str| {
        let mut call = script.prepare_invoke();
        call.key(&state)
            .key(&lease)
            .key(&events)
            .arg(mode)
            .arg(version)
            .arg(doc)
            .arg(600_000)
            .arg("require")
            .arg(INSTANCE)
            .arg(10_000);
        call
    };
    redis::cmd("SET").arg(&lease).arg(INSTANCE).arg("PX").arg(600_000).query_async::<()>(conn).await?;
    let first: i64 = invoke("create", 0, &document(&session)?).invoke_async(conn).await?;
    let (text, output) = ("z".repeat(args.message_bytes), "y".repeat(args.message_bytes));
    let (mut sent, mut micros, mut version) = (0usize, Vec::with_capacity(args.commits), first as u64);
    let read_before = admin.counters().await?.net_input;
    for i in 0..args.commits {
        tool_round(&mut session, i, &text, &output)?;
        let doc = document(&session)?;
        sent += doc.len();
        let started = Instant::now();
        let written: i64 = invoke("cas", version, &doc).invoke_async(conn).await?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        if written < 0 {
            return Err(format!("the old state write answered {written}").into());
        }
        version = written as u64;
    }
    Measured::per_commit(sent, admin.counters().await?.net_input - read_before, micros)
}
