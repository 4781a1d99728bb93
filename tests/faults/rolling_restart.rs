//! A rolling restart under load: three replicas, thirty sessions streaming
//! turn after turn, each followed by a rejoining client, while each replica
//! in turn gets SIGTERM, must exit 0 within its grace, and is started again.
//!
//! The drain contract (docs/design.md, "Process"): readiness is 503 at once, every
//! open stream ends with a `retry:` line and an `event: reconnect` frame,
//! every running turn is handed to another replica at once (well before its
//! lease would expire), and the process exits 0 within
//! `shutdown_grace_secs`. No turn loses, repeats or garbles an event.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::harness::{
    checks::{self, Expect},
    client::{Dialect, FollowSpec, Follower, start_turn_anywhere},
    cluster::{Cluster, ClusterOptions, ClusterShape},
    transcript::{Connection, Transcript},
};

const SESSIONS: usize = 30;
const WORDS: u32 = 40;
/// Long enough that a replica dying is not confused with a lease expiring.
const LEASE_TTL_SECS: u64 = 10;
const GRACE_SECS: u64 = 5;
/// A handed-off turn must go on well before its lease would have expired.
const MAX_HANDOFF_GAP: Duration = Duration::from_secs(5);
const TURN_TIMEOUT: Duration = Duration::from_secs(45);

/// One turn a session driver ran.
struct Turn {
    cursor: u64,
    started: Instant,
    transcript: Transcript,
}

/// Runs turns on `session_id` back to back until `stop` says so (at least
/// one), each on the next replica that takes it, each followed to its end.
async fn drive(
    urls: Vec<String>,
    token: String,
    session_id: String,
    first: usize,
    mut stop: watch::Receiver<bool>,
) -> Vec<Turn> {
    let mut turns = Vec::new();
    let mut cursor = 0;
    let mut next = first;
    loop {
        let content = format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple());
        let started = Instant::now();
        let transcript = match start_turn_anywhere(&urls, next, &token, &session_id, &content, TURN_TIMEOUT).await {
            Ok((on, response)) => {
                let follower = Follower::spawn(FollowSpec {
                    urls: urls.clone(),
                    token: token.clone(),
                    session_id: session_id.clone(),
                    cursor,
                    first: Some(response),
                    start: on,
                    timeout: TURN_TIMEOUT,
                    dialect: Dialect::Native,
                });
                follower.finish().await
            }
            Err(e) => {
                let mut transcript = Transcript { session_id: session_id.clone(), ..Transcript::default() };
                transcript.connections.push(Connection {
                    url: String::new(),
                    after: cursor,
                    opened: started,
                    closed: Some(Instant::now()),
                    status: None,
                    outcome: e,
                    frames: 0,
                    retry_ms: None,
                    reconnect_frame: false,
                });
                transcript
            }
        };
        let finished = transcript.finished;
        let last = transcript.seqs().last().copied().unwrap_or(cursor);
        turns.push(Turn { cursor, started, transcript });
        cursor = last;
        next += 1;
        if !finished || *stop.borrow_and_update() {
            return turns;
        }
    }
}

/// What happened to one replica's restart.
struct Restart {
    name: String,
    url: String,
    sigterm_at: Instant,
    /// Sessions whose turn this replica ran at SIGTERM.
    owned: Vec<String>,
    /// `/readyz` from SIGTERM to exit: when, and the status or the error.
    readyz: Vec<(Duration, Result<u16, String>)>,
    exit: Result<std::process::ExitStatus, String>,
    drained_in: Duration,
}

/// Signal delivery and the handler take a moment: answers in this window
/// after SIGTERM are not held against readiness.
const SIGNAL_SLACK: Duration = Duration::from_millis(100);
/// A drain shorter than this may end before a probe could see the 503.
const QUICK_EXIT: Duration = Duration::from_millis(300);
/// How often readiness is asked while a replica drains.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// Asks `url` every [`PROBE_EVERY`] until `exited` fires: when (since
/// `since`) and what it answered.
async fn probe_readiness(
    url: String,
    since: Instant,
    mut exited: tokio::sync::oneshot::Receiver<()>,
) -> Vec<(Duration, Result<u16, String>)> {
    let http = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
    let mut probes = Vec::new();
    loop {
        let asked = since.elapsed();
        let answer = tokio::select! {
            answer = http.get(&url).send() => answer,
            _ = &mut exited => return probes,
        };
        probes.push((asked, answer.map(|r| r.status().as_u16()).map_err(|e| e.to_string())));
        tokio::select! {
            () = tokio::time::sleep(PROBE_EVERY) => {}
            _ = &mut exited => return probes,
        }
    }
}

/// Readiness must turn 503 at once: `None` if some probe saw 503, or the
/// drain was too quick to ask and nothing said 200 after the slack.
fn readiness_failure(probes: &[(Duration, Result<u16, String>)], drained_in: Duration) -> Option<String> {
    if probes.iter().any(|(_, answer)| *answer == Ok(503)) {
        return None;
    }
    let late = probes.iter().find(|(at, _)| *at > SIGNAL_SLACK);
    match late {
        None if drained_in < QUICK_EXIT => None,
        _ => Some(format!("/readyz never answered 503 while draining ({})", describe_probes(probes))),
    }
}

/// `200 ×3, then refused ×2` style summary of readiness probes.
fn describe_probes(probes: &[(Duration, Result<u16, String>)]) -> String {
    let mut runs: Vec<(String, usize, Duration)> = Vec::new();
    for (at, answer) in probes {
        let label = match answer {
            Ok(status) => status.to_string(),
            Err(_) => "no answer".to_string(),
        };
        match runs.last_mut() {
            Some((last, n, _)) if *last == label => *n += 1,
            _ => runs.push((label, 1, *at)),
        }
    }
    if runs.is_empty() {
        return "not asked (exited first)".to_string();
    }
    runs.iter()
        .map(|(label, n, at)| format!("{label}×{n} from {:.0}ms", at.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_under_thirty_streaming_sessions_loses_no_event_and_hands_turns_off_at_once() {
    rolling_restart(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_on_a_redis_cluster_loses_no_event_and_hands_turns_off_at_once() {
    rolling_restart(Some(ClusterShape::THREE_PRIMARIES)).await
}

async fn rolling_restart(redis_cluster: Option<ClusterShape>) {
    let mut cluster = Cluster::start(ClusterOptions {
        redis_cluster,
        replicas: 3,
        lease_ttl_secs: LEASE_TTL_SECS,
        shutdown_grace_secs: GRACE_SECS,
        // Long enough for the readiness probe to see the 503.
        drain_delay_secs: 1,
        chunk_delay: Duration::from_millis(50),
        ..ClusterOptions::default()
    })
    .await;
    let test_started = Instant::now();
    let (stop_tx, stop) = watch::channel(false);
    let mut sessions = Vec::new();
    let mut drivers = Vec::new();
    for i in 0..SESSIONS {
        let session = cluster.create_session(i % 3).await;
        let driver = drive(cluster.urls(), cluster.token.clone(), session.clone(), i % 3, stop.clone());
        drivers.push(tokio::spawn(driver));
        sessions.push(session);
    }

    // Every session's first turn is streaming before the first SIGTERM.
    assert!(cluster.upstream.wait_for_calls(SESSIONS, Duration::from_secs(20)).await, "{}", cluster.dump_logs());

    let mut restarts = Vec::new();
    for index in 0..cluster.replicas.len() {
        let name = cluster.replicas[index].name.clone();
        let views = futures::future::join_all(sessions.iter().map(|s| cluster.session_view(s))).await;
        let owned: Vec<String> = sessions
            .iter()
            .zip(views)
            .filter(|(_, view)| {
                view.as_ref().is_some_and(|v| v["status"] == "running" && v["replica"].as_str() == Some(name.as_str()))
            })
            .map(|(s, _)| s.clone())
            .collect();
        let sigterm_at = Instant::now();
        cluster.replicas[index].sigterm();
        let (exited_tx, exited) = tokio::sync::oneshot::channel();
        let probing = tokio::spawn(probe_readiness(cluster.replicas[index].url("/readyz"), sigterm_at, exited));
        let exit = cluster.replicas[index].try_wait_exit(Duration::from_secs(GRACE_SECS + 2)).await;
        let _ = exited_tx.send(());
        let readyz = probing.await.expect("the probe does not panic");
        let drained_in = sigterm_at.elapsed();
        cluster.replicas[index].restart().await;
        let url = cluster.replicas[index].base_url();
        eprintln!(
            "rolling restart: {name} owned {} running turns at SIGTERM; /readyz while draining {}; exit {exit:?} \
             after {:.2}s; ready again after {:.2}s",
            owned.len(),
            describe_probes(&readyz),
            drained_in.as_secs_f64(),
            sigterm_at.elapsed().as_secs_f64()
        );
        restarts.push(Restart { name, url, sigterm_at, owned, readyz, exit, drained_in });
    }
    stop_tx.send_replace(true);
    let mut all_turns = Vec::new();
    for (session, driver) in sessions.iter().zip(drivers) {
        all_turns.push((session.clone(), driver.await.expect("a driver does not panic")));
    }

    let mut failures = Vec::new();
    let mut turn_count = 0;
    for (session, turns) in &all_turns {
        for (n, turn) in turns.iter().enumerate() {
            turn_count += 1;
            for failure in checks::turn(&turn.transcript, &Expect { cursor: turn.cursor, words: WORDS }) {
                failures.push(format!("session {session} turn {}: {failure}", n + 1));
            }
        }
    }
    for restart in &restarts {
        match &restart.exit {
            Ok(status) if status.code() == Some(0) => {}
            Ok(status) => failures.push(format!("{} exited with {status} on SIGTERM, not 0", restart.name)),
            Err(e) => failures.push(e.clone()),
        }
        if restart.drained_in > Duration::from_secs(GRACE_SECS + 2) {
            failures.push(format!("{} took {:?} to exit", restart.name, restart.drained_in));
        }
        if let Some(failure) = readiness_failure(&restart.readyz, restart.drained_in) {
            failures.push(format!("{}: {failure}", restart.name));
        }
        for session in &restart.owned {
            let turns = &all_turns.iter().find(|(s, _)| s == session).expect("a driven session").1;
            let cut = turns.iter().find(|t| {
                t.started < restart.sigterm_at
                    && t.transcript.of_kind("turn_ended").next().is_none_or(|end| end.at > restart.sigterm_at)
            });
            let Some(turn) = cut else { continue };
            match turn.transcript.first_event_after(restart.sigterm_at) {
                Some(next) => {
                    let gap = next.at - restart.sigterm_at;
                    eprintln!(
                        "  {session}: next event {:.3}s after SIGTERM of {} (seq {:?} {} via {})",
                        gap.as_secs_f64(),
                        restart.name,
                        next.seq,
                        next.kind,
                        next.via
                    );
                    if gap >= MAX_HANDOFF_GAP {
                        failures.push(format!(
                            "session {session}: {gap:?} from the SIGTERM of {} to its next event (at most \
                             {MAX_HANDOFF_GAP:?}; the lease TTL is {LEASE_TTL_SECS}s)",
                            restart.name
                        ));
                    }
                }
                None => failures.push(format!("session {session}: no event after the SIGTERM of {}", restart.name)),
            }
        }
        // Every stream open on the draining replica must end with the
        // reconnect frame and a retry line.
        let mut open_streams = 0;
        for (session, turns) in &all_turns {
            for turn in turns {
                for connection in &turn.transcript.connections {
                    let open_at_sigterm = connection.url == restart.url
                        && connection.opened < restart.sigterm_at
                        && connection.closed.is_some_and(|c| c > restart.sigterm_at)
                        && connection.outcome != "turn ended";
                    if !open_at_sigterm {
                        continue;
                    }
                    open_streams += 1;
                    if !connection.reconnect_frame || connection.retry_ms.is_none() {
                        failures.push(format!(
                            "session {session}: the stream on draining {} ended ({}) without {}",
                            restart.name,
                            connection.outcome,
                            match (connection.reconnect_frame, connection.retry_ms.is_some()) {
                                (false, false) => "a retry: line or an event: reconnect frame",
                                (false, true) => "an event: reconnect frame",
                                _ => "a retry: line",
                            }
                        ));
                    }
                }
            }
        }
        eprintln!("  {}: {open_streams} client streams were open on it at SIGTERM", restart.name);
    }
    eprintln!(
        "rolling restart: {SESSIONS} sessions, {turn_count} turns, {} failures, {:.1}s",
        failures.len(),
        test_started.elapsed().as_secs_f64()
    );
    for failure in &failures {
        eprintln!("FAILURE {failure}");
    }
    let shown = failures.iter().take(40).cloned().collect::<Vec<_>>().join("\n");
    assert!(failures.is_empty(), "{} failures (first 40):\n{shown}\n{}", failures.len(), cluster.dump_logs());
}
