//! Section 2 of `sandbox_costs`: what a tool's result costs when the tool
//! changed one file of the workspace, by the file's size, against the same
//! result committed without files, on the real Redis.
//!
//! A session is set up as `checkpoint` sets one up (created with an owner,
//! a short conversation, a running turn). Each sample is a tool round as
//! the orchestrator makes it: the model's step calling the tool is
//! committed (untimed); the "command" rewrites `data.bin` in the
//! materialised directory with new content of the row's size (untimed);
//! then (a) [`Workspace::changes`] and (b) the commit of the tool's result
//! carrying that [`WorkspaceWrite`] are timed, and the change is
//! [`Workspace::accept`]ed.

use std::{
    fmt::Write,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use switchboard::{
    config::{SandboxBackend, SandboxConfig, StoreConfig},
    domain::{
        AgentRef, CallDecision, ChatMessage, ConversationChange, Event, EventKind, PermissionRules, Role, Session,
        SessionOptions, SessionSpec, StepOutput, ToolCall, ToolOutcome,
    },
    store::{Commit, Fence, MessagesWrite, Notice, OwnerChange, SessionKey, StateWrite, Store, WorkspaceWrite},
    workspace::Workspaces,
};
use switchboard_load::{
    Result,
    redis_admin::Admin,
    stats::{Summary, int, millis},
};
use tokio::sync::mpsc;

use super::{Args, pair};

const INSTANCE: &str = "bench#1";
/// Text of each message of the conversation, and of the tool's output.
const MESSAGE_BYTES: usize = 200;
/// Messages in the conversation before the turn.
const HISTORY: usize = 9;
/// The file the "command" rewrites.
const FILE: &str = "data.bin";

/// The store of the run, under `prefix`, and the receiver of its notices
/// (kept for the run: nothing here watches a session, so none come).
pub fn open_store(redis: &str, prefix: &str) -> Result<(Store, mpsc::Receiver<Notice>)> {
    let config = StoreConfig {
        redis: Some(switchboard::config::RedisTarget::Node(redis.to_string())),
        tls: Default::default(),
        wait_replicas: 0,
        wait_replicas_timeout: std::time::Duration::from_millis(500),
        commit_linger: std::time::Duration::ZERO,
        append_tick: std::time::Duration::from_millis(1),
        key_prefix: prefix.to_string(),
        session_ttl: Duration::from_secs(600),
        event_log_max_len: 100_000,
        lease_ttl: Duration::from_secs(10),
        liveness_check: None,
        hold_notice: Duration::from_secs(5),
        hold_max: Duration::from_secs(60),
    };
    let (tx, notices) = mpsc::channel(switchboard::store::NOTICE_CHANNEL);
    Ok((Store::open(&config, tx, Default::default())?, notices))
}

/// Workspaces under `root` on `store`, their commands run by `backend`.
pub fn workspaces(root: &Path, store: &Store, backend: SandboxBackend) -> Arc<Workspaces> {
    let config = SandboxConfig { backend, dir: Some(root.to_path_buf()), ..SandboxConfig::default() };
    let sandbox = switchboard::sandbox::open(&config);
    Workspaces::new(root.to_path_buf(), config, sandbox, store.workspaces.clone(), Vec::new(), Default::default())
}

/// One row: a file size (0: the baseline, no file).
pub struct Row {
    size: usize,
    changes: Summary,
    commit: Summary,
    total: Summary,
    /// Mean bytes of the commit's arguments.
    sent: f64,
    /// Median of Redis' `total_net_input_bytes` delta per commit.
    read: f64,
}

pub struct Commits {
    rows: Vec<Row>,
}

pub async fn measure(args: &Args, admin: &mut Admin, root: &Path, store: &Store) -> Result<Commits> {
    let workspaces = workspaces(root, store, SandboxBackend::Bubblewrap);
    // What one `Admin::counters` (two INFOs) adds to the server's input
    // count, taken off each commit's bracket.
    let first = admin.counters().await?.net_input;
    let info_bytes = admin.counters().await?.net_input - first;
    let mut rows = Vec::new();
    for size in std::iter::once(0).chain(args.sizes.iter().copied()) {
        eprintln!("sandbox_costs: commits with a changed file of {size} bytes");
        rows.push(row(args, admin, store, &workspaces, size, info_bytes).await?);
    }
    Ok(Commits { rows })
}

async fn row(
    args: &Args,
    admin: &mut Admin,
    store: &Store,
    workspaces: &Workspaces,
    size: usize,
    info_bytes: u64,
) -> Result<Row> {
    let key = SessionKey::new("bench", format!("ws{size}"));
    let mut session = session(&key)?;
    let mut create = Commit::new(key.clone(), Fence::Absent, INSTANCE);
    create.owner = OwnerChange::Acquire(INSTANCE.into());
    create.state = Some(StateWrite { doc: serde_json::to_string(&session)?, status: session.status().as_str() });
    create.messages = MessagesWrite::Append(encoded(session.history().unwrap_or_default())?);
    store.sessions.commit(&[create]).await.remove(0)?;
    session.conversation_saved();
    // The first tenure (the create acquired it).
    let workspace = workspaces.open(&key, 1, false).await?;
    let file = workspace.dir().join(FILE);
    let output = "y".repeat(MESSAGE_BYTES);
    let mut n = 0;
    let (mut changes_ms, mut commit_ms, mut total_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sent, mut read) = (0usize, Vec::new());
    for i in 0..args.warmup + args.commits {
        let call = ToolCall { id: format!("c{i}"), name: "bash".into(), arguments: r#"{"command":"make"}"#.into() };
        let step = StepOutput { text: "Running it.".into(), calls: vec![call], ..StepOutput::default() };
        let events = session.complete_step(step, vec![CallDecision::Run], PermissionRules::default())?;
        n += 1;
        store.sessions.commit(&[transition(&key, n, &session, events)?]).await.remove(0)?;
        session.conversation_saved();
        if size > 0 {
            tokio::fs::write(&file, content(size, i as u64)).await?;
        }

        let started = Instant::now();
        let changes = workspace.changes().await?;
        let scanned = started.elapsed();
        let expected: &[&str] = if size > 0 { &[FILE] } else { &[] };
        if changes.changed != expected || !changes.removed.is_empty() || !changes.notes.is_empty() {
            return Err(
                format!("the scan found {:?} {:?} {:?}", changes.changed, changes.removed, changes.notes).into()
            );
        }
        let events = session.finish_tool(&format!("c{i}"), ToolOutcome::Success(output.clone()), None, None)?;
        n += 1;
        let mut result = transition(&key, n, &session, events)?;
        // As `RunHandle::transition_with_files` does: no files, no write.
        result.workspace = (!changes.write.is_empty()).then(|| changes.write.clone());
        let bytes = commit_bytes(&result);
        let before = admin.counters().await?.net_input;
        let started = Instant::now();
        store.sessions.commit(&[result]).await.remove(0)?;
        let committed = started.elapsed();
        let input = admin.counters().await?.net_input.saturating_sub(before + info_bytes);
        session.conversation_saved();
        workspace.accept(changes);
        if i >= args.warmup {
            changes_ms.push(millis(scanned));
            commit_ms.push(millis(committed));
            total_ms.push(millis(scanned + committed));
            sent += bytes;
            read.push(input as f64);
        }
    }
    let summary = |sample: Vec<f64>| Summary::of(sample).ok_or("no sample");
    Ok(Row {
        size,
        changes: summary(changes_ms)?,
        commit: summary(commit_ms)?,
        total: summary(total_ms)?,
        sent: sent as f64 / args.commits.max(1) as f64,
        read: summary(read)?.p50,
    })
}

/// A running turn with a short conversation, as `checkpoint` sets one up.
fn session(key: &SessionKey) -> Result<Session> {
    let spec = SessionSpec {
        id: key.id.to_string(),
        tenant: key.tenant.to_string(),
        subject: "bench".into(),
        model: "mock".into(),
        dialect: "native".into(),
        options: SessionOptions::default(),
    };
    let mut session = Session::new(spec);
    let text = "x".repeat(MESSAGE_BYTES);
    let history = (0..HISTORY)
        .map(|i| ChatMessage::text(if i % 2 == 0 { Role::User } else { Role::Assistant }, text.clone()))
        .collect();
    session.seed(history)?;
    session.start_turn(ChatMessage::text(Role::User, text), None)?;
    Ok(session)
}

/// The owner's commit number `n` of `session` as it stands, with `events`.
fn transition(key: &SessionKey, n: u64, session: &Session, events: Vec<EventKind>) -> Result<Commit> {
    let mut commit =
        Commit::new(key.clone(), Fence::Owner { instance: INSTANCE.into(), epoch: 1, n, after: 0 }, INSTANCE);
    commit.state = Some(StateWrite { doc: serde_json::to_string(session)?, status: session.status().as_str() });
    commit.messages = match session.conversation_change() {
        ConversationChange::Append(m) => MessagesWrite::Append(encoded(m)?),
        _ => MessagesWrite::Keep,
    };
    let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
    commit.events = events
        .into_iter()
        .map(|kind| serde_json::to_string(&Event { kind, agent: main.clone(), ts: 0 }))
        .collect::<std::result::Result<_, _>>()?;
    Ok(commit)
}

fn encoded(messages: &[ChatMessage]) -> Result<Vec<String>> {
    Ok(messages.iter().map(serde_json::to_string).collect::<std::result::Result<_, _>>()?)
}

/// `size` bytes no earlier sample wrote (xorshift64 from the sample's
/// number), so every sample is a new blob.
fn content(size: usize, sample: u64) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15 ^ (sample + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mut bytes = Vec::with_capacity(size + 8);
    while bytes.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(size);
    bytes
}

/// The bytes of a commit's variable arguments: state, messages, events,
/// and the workspace's blobs, entries and removals.
fn commit_bytes(commit: &Commit) -> usize {
    let state = commit.state.as_ref().map_or(0, |s| s.doc.len() + s.status.len());
    let messages = match &commit.messages {
        MessagesWrite::Keep => 0,
        MessagesWrite::Append(m) | MessagesWrite::Replace(m) => m.iter().map(String::len).sum(),
    };
    let files = commit.workspace.as_ref().map_or(0, |w: &WorkspaceWrite| {
        let blobs: usize = w.blobs.iter().map(|(d, b)| d.len() + b.len()).sum();
        let set: usize = w.set.iter().map(|(p, e)| p.len() + e.encode().len()).sum();
        blobs + set + w.remove.iter().chain(&w.drop_blobs).map(String::len).sum::<usize>()
    });
    state + messages + commit.events.iter().map(String::len).sum::<usize>() + files
}

/// `1 KiB`, `100 KiB`, `1 MiB`, or bytes.
fn size_label(size: usize) -> String {
    match size {
        0 => "none (baseline)".into(),
        s if s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s % 1024 == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

impl Commits {
    pub fn write(&self, w: &mut String, args: &Args) {
        let _ = writeln!(w, "\n## 2. Workspace commit per changed file\n");
        let _ = writeln!(
            w,
            "- per sample: the model's step calling `bash` committed (untimed); `{FILE}` in the workspace directory rewritten with new content of the row's size (untimed, as a command would); then timed (a) `Workspace::changes()` (the walk, the file read and its SHA-256, on the blocking pool) and (b) the store's commit of the tool's result: state document, the {MESSAGE_BYTES} B result message, its events and the `WorkspaceWrite` (the new blob, the manifest entry, the previous blob dropped); then `accept`"
        );
        let _ = writeln!(
            w,
            "- {} samples per row after {} untimed, one at a time; baseline: the same tool result, no file written, no `WorkspaceWrite`",
            args.commits, args.warmup
        );
        let _ = writeln!(
            w,
            "- bytes sent: the commit's variable arguments as built (mean); Redis read: `total_net_input_bytes` around each commit, less the counters' own `INFO`s (median; RESP framing and the script's fixed arguments included)\n"
        );
        let _ = writeln!(
            w,
            "| changed file | (a) `changes()` p50 / p99 (ms) | (b) commit p50 / p99 | (a) + (b) p50 / p99 | bytes sent per commit | Redis read per commit | (b) − baseline (p50) | (b) ÷ baseline (p50) |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|");
        let baseline = self.rows.first().map_or(f64::NAN, |r| r.commit.p50);
        for row in &self.rows {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {:+.2} ms | {:.1} |",
                size_label(row.size),
                pair(&row.changes),
                pair(&row.commit),
                pair(&row.total),
                int(row.sent),
                int(row.read),
                row.commit.p50 - baseline,
                row.commit.p50 / baseline
            );
        }
    }
}
