//! Reading sessions on the replica that does not run them (B):
//!
//! - rejoin: a client reconnects to a finished session with `Last-Event-ID`
//!   and gets the replay; timed from sending the request to the last frame;
//! - live fan-out: many followers on B of a session running on A; each delta
//!   carries its emit time, so every follower measures emit → receipt. B's
//!   Redis connections are counted meanwhile (by its ACL user).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::{
    Result,
    cluster::Client,
    redis_admin::{Admin, Connections, Counters},
    runner::{BenchRunner, Command},
    sse::{Frame, Frames},
};

/// How long followers may take to attach before the live phase gives up.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

pub struct RejoinResult {
    pub last_seq: u64,
    pub cursor: u64,
    /// Whether each rejoin opened a new TCP connection (as a client that lost
    /// its stream does) rather than reusing a kept-alive one.
    pub new_connections: bool,
    /// Request sent → first frame received, per repeat.
    pub first_frame: Vec<Duration>,
    /// Request sent → frame `last_seq` received, per repeat.
    pub latencies: Vec<Duration>,
}

/// `repeats` rejoins, one after another, to the finished session `id` on the
/// replica at `base`, from `cursor`; each must replay exactly the events
/// after the cursor, up to `last_seq`. `client` decides whether connections
/// are reused ([`Client::without_keep_alive`]).
pub async fn rejoin(
    client: &Client,
    base: &str,
    id: &str,
    cursor: u64,
    last_seq: u64,
    repeats: usize,
) -> Result<RejoinResult> {
    let mut latencies = Vec::with_capacity(repeats);
    let mut first_frame = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let started = Instant::now();
        let mut frames = Frames::new(client.events(base, id, cursor).await?);
        let mut replayed = 0;
        loop {
            let frame = frames.next().await?.ok_or("the replay ended before the last event")?;
            replayed += 1;
            if replayed == 1 {
                first_frame.push(started.elapsed());
            }
            if frame.id == Some(last_seq) {
                break;
            }
        }
        latencies.push(started.elapsed());
        if replayed != last_seq - cursor || frames.next().await?.is_some() {
            return Err(format!("rejoin from {cursor} replayed {replayed} events, not {}", last_seq - cursor).into());
        }
    }
    Ok(RejoinResult { last_seq, cursor, new_connections: !client.keeps_alive(), first_frame, latencies })
}

/// Parameters of the live fan-out phase.
pub struct LiveOptions {
    pub followers: usize,
    pub tokens: usize,
    pub interval: Duration,
    /// The ACL users replicas A and B connect as, when there are such.
    pub users: Option<(String, String)>,
}

/// What one follower saw.
#[derive(Debug, Default)]
pub struct Follower {
    /// Emit → receipt, milliseconds, one per token received.
    pub latencies: Vec<f64>,
    pub ended: bool,
}

pub struct LiveResult {
    /// Followers on B.
    pub on_b: Vec<Follower>,
    /// The turn's own stream on A (the POST's answer: a follower on the owner).
    pub on_a: Follower,
    /// Redis connections of replicas A and B (by their ACL users) at three
    /// moments: before any follower, with all attached (the turn waiting),
    /// and halfway through the live stream.
    pub replicas: Option<[(Connections, Connections); 3]>,
    /// `connected_clients` of the whole server at the same three moments.
    pub clients: [u64; 3],
    /// From the first follower request until every follower had its first frame.
    pub attach: Duration,
    /// Server-wide counter deltas from the gate opening to the last follower's end.
    pub counters: Counters,
}

pub async fn live(
    client: &Client,
    a: &str,
    b: &str,
    admin: &mut Admin,
    runner: &Arc<BenchRunner>,
    options: &LiveOptions,
) -> Result<LiveResult> {
    let connections = async |admin: &mut Admin| -> Result<(Option<(Connections, Connections)>, u64)> {
        let of_replicas = match &options.users {
            Some((a, b)) => Some((admin.connections_of(a).await?, admin.connections_of(b).await?)),
            None => None,
        };
        Ok((of_replicas, admin.connected_clients().await?))
    };
    let id = client.create_session(a).await?;
    let (b_before, clients_before) = connections(admin).await?;

    // The turn starts on A (turn_started is appended), then waits for the gate.
    let command = Command::Live { tokens: options.tokens, interval: options.interval };
    let on_a = client.send_message(a, &id, &command.message()).await?;
    let on_a = tokio::spawn(follow(Frames::new(on_a), runner.clone(), None));

    let ready = Arc::new((AtomicUsize::new(0), Notify::new()));
    let attach_started = Instant::now();
    let followers: Vec<_> = (0..options.followers)
        .map(|_| {
            let (client, b, id, runner, ready) =
                (client.clone(), b.to_string(), id.clone(), runner.clone(), ready.clone());
            tokio::spawn(async move {
                let frames = Frames::new(client.events(&b, &id, 0).await?);
                follow(frames, runner, Some(ready)).await
            })
        })
        .collect();
    let all_attached = async {
        loop {
            let notified = ready.1.notified();
            if ready.0.load(Ordering::SeqCst) >= options.followers {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(ATTACH_TIMEOUT, all_attached)
        .await
        .map_err(|_| format!("only {} followers attached within {ATTACH_TIMEOUT:?}", ready.0.load(Ordering::SeqCst)))?;
    let attach = attach_started.elapsed();
    let (b_attached, clients_attached) = connections(admin).await?;

    let counters_before = admin.counters().await?;
    runner.open_gate();
    tokio::time::sleep(options.interval * (options.tokens as u32) / 2).await;
    let (b_streaming, clients_streaming) = connections(admin).await?;

    let mut on_b = Vec::with_capacity(followers.len());
    for follower in followers {
        on_b.push(follower.await??);
    }
    let on_a = on_a.await??;
    let counters = admin.counters().await?.since(&counters_before);
    Ok(LiveResult {
        on_b,
        on_a,
        replicas: b_before.zip(b_attached).zip(b_streaming).map(|((x, y), z)| [x, y, z]),
        clients: [clients_before, clients_attached, clients_streaming],
        attach,
        counters,
    })
}

/// Reads a live stream to its end, timing each token; signals `ready` at the
/// first frame (the replayed `turn_started`).
async fn follow(
    mut frames: Frames,
    runner: Arc<BenchRunner>,
    ready: Option<Arc<(AtomicUsize, Notify)>>,
) -> Result<Follower> {
    let mut follower = Follower::default();
    let mut first = true;
    while let Some(frame) = frames.next().await? {
        let now = runner.micros();
        if std::mem::take(&mut first)
            && let Some(ready) = &ready
        {
            ready.0.fetch_add(1, Ordering::SeqCst);
            ready.1.notify_waiters();
        }
        follower.latencies.extend(emit_times(&frame).into_iter().map(|t| now.saturating_sub(t) as f64 / 1000.0));
        follower.ended = frame.event == "turn_ended";
    }
    Ok(follower)
}

/// The emit times (runner microseconds) in a live delta; several when the
/// writer merged deltas.
fn emit_times(frame: &Frame) -> Vec<u64> {
    frame.text().map(|text| text.split(';').filter_map(|t| t.parse().ok()).collect()).unwrap_or_default()
}
