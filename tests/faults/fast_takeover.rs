//! The death hint: a replica killed outright has its sessions taken over
//! within a fraction of a second, not when its lease lapses — and nothing
//! that merely looks like a death (a stopped process, a Redis restart, a
//! proxy that hides subscriptions) takes a live replica's sessions.
//!
//! Every test runs with a lease far longer than its turns may take
//! (`lease_ttl_secs = 30`), so a turn that finishes after its owner's
//! SIGKILL was taken over by the hint; the replicas' own counters
//! (`switchboard_death_hints_total`) say whether a hint fired. Times are
//! printed, not asserted (`load-tests/` measures them).

use std::time::{Duration, Instant};

use crate::harness::{
    checks::{self, Expect},
    client::{Dialect, FollowSpec, Follower},
    cluster::{Cluster, ClusterOptions, ClusterShape},
    config,
    lb::FirstLive,
    upstream::expected_answer,
};

const WORDS: u32 = 80;
/// Far longer than any turn here: only the hint can take over in time.
const LEASE_TTL_SECS: u64 = 30;
/// A turn, takeover included, ends well within this (and within the lease).
const TURN_TIMEOUT: Duration = Duration::from_secs(20);
const DEAD: &str = "switchboard_death_hints_total{outcome=\"dead\"}";
const WRONG: &str = "switchboard_death_hints_total{outcome=\"wrong\"}";

fn options(redis_cluster: Option<ClusterShape>) -> ClusterOptions {
    ClusterOptions {
        lease_ttl_secs: LEASE_TTL_SECS,
        chunk_delay: Duration::from_millis(40),
        redis_cluster,
        ..ClusterOptions::default()
    }
}

fn words() -> String {
    format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple())
}

/// A follower of `session` on replica `on` from `cursor` (no first
/// response: `GET /events`, rejoining the others only if its stream fails).
fn follow(cluster: &Cluster, on: usize, session: &str, cursor: u64) -> Follower {
    Follower::spawn(FollowSpec {
        urls: cluster.urls(),
        token: cluster.token.clone(),
        session_id: session.to_string(),
        cursor,
        first: None,
        start: on,
        timeout: TURN_TIMEOUT,
        dialect: Dialect::Native,
    })
}

/// Waits until every replica's self-test turned the hints on, so that a
/// test showing no hint fired shows something.
async fn hints_on(cluster: &Cluster) {
    for replica in &cluster.replicas {
        let on = replica.wait_for_log("death hints on", TURN_TIMEOUT).await;
        assert!(on, "replica {} did not turn the hints on\n{}", replica.name, replica.dump_logs());
    }
}

async fn sum(cluster: &Cluster, sample: &str, replicas: &[usize]) -> f64 {
    let mut total = 0.0;
    for &on in replicas {
        total += cluster.metric(on, sample).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_owner_is_taken_over_by_the_hint_long_before_its_lease_lapses() {
    killed_owner(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_owner_is_taken_over_by_the_hint_on_a_redis_cluster() {
    killed_owner(Some(ClusterShape::THREE_PRIMARIES)).await
}

/// The owner (replica 0) is killed mid-answer. The client of the turn's own
/// stream rejoins another replica; a second client, following from replica
/// 1 all along, keeps its one connection: both get the whole answer, long
/// before the 30 s lease could have lapsed.
async fn killed_owner(redis_cluster: Option<ClusterShape>) {
    let mut cluster = Cluster::start(options(redis_cluster)).await;
    let session = cluster.create_session(0).await;
    let cursor = cluster.last_seq(&session).await;
    let rejoining = cluster.start_and_follow(0, &session, &words(), TURN_TIMEOUT).await;
    let watching = follow(&cluster, 1, &session, cursor);
    assert!(rejoining.wait_for_events(10, TURN_TIMEOUT).await, "the turn streams\n{}", cluster.dump_logs());
    assert_eq!(cluster.owner_of(&session).await, Some(0), "replica 0 runs the turn");

    cluster.replicas[0].kill9().await;
    let killed = Instant::now();
    // The takeover's first event: the cut step, restarted.
    let restarted = watching.wait_for_kind("step_restarted", TURN_TIMEOUT).await;
    let rejoined = rejoining.finish().await;
    let watched = watching.finish().await;
    if let Some(event) = &restarted {
        eprintln!(
            "kill -9 of the owner: the takeover's first event at a follower on a live replica {:?} after the kill",
            event.at.saturating_duration_since(killed)
        );
    }

    let mut failures = checks::turn(&rejoined, &Expect { cursor, words: WORDS });
    failures
        .extend(checks::turn(&watched, &Expect { cursor, words: WORDS }).into_iter().map(|f| format!("follower: {f}")));
    if restarted.is_none() {
        failures.push("the follower on a live replica saw no step_restarted after the kill".into());
    }
    if watched.connections.len() != 1 {
        failures.push(format!("the follower on a live replica reconnected: {}", watched.describe_connections()));
    }
    let dead = sum(&cluster, DEAD, &[1, 2]).await;
    if dead < 1.0 {
        failures.push(format!("no replica counted a death hint ({DEAD} = {dead})"));
    }
    let wrong = sum(&cluster, WRONG, &[1, 2]).await;
    if wrong > 0.0 {
        failures.push(format!("{WRONG} = {wrong}"));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

/// SIGSTOP of the owner for 5 s, then SIGCONT: its connections stay open,
/// so nobody takes its session; the turn goes on where it stopped, on the
/// same replica, without a restarted step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_owner_keeps_its_session() {
    let cluster = Cluster::start(options(None)).await;
    hints_on(&cluster).await;
    let session = cluster.create_session(0).await;
    let cursor = cluster.last_seq(&session).await;
    let follower = cluster.start_and_follow(0, &session, &words(), TURN_TIMEOUT).await;
    assert!(follower.wait_for_events(10, TURN_TIMEOUT).await, "the turn streams\n{}", cluster.dump_logs());

    cluster.replicas[0].freeze();
    // The fault itself: how long the process stays stopped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.replicas[0].thaw();
    let transcript = follower.finish().await;

    let mut failures = checks::turn(&transcript, &Expect { cursor, words: WORDS });
    if transcript.of_kind("step_restarted").count() > 0 {
        failures.push("a step was restarted: the session was taken over".into());
    }
    let finisher = cluster.session_view(&session).await.and_then(|v| v["replica"].as_str().map(str::to_string));
    if finisher.as_deref() != Some("a") {
        failures.push(format!("the turn ended on {finisher:?}, not on the stopped replica a"));
    }
    let dead = sum(&cluster, DEAD, &[0, 1, 2]).await;
    if dead > 0.0 {
        failures.push(format!("a stopped replica was taken for dead ({DEAD} = {dead})"));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

/// Redis restarted (SIGKILL, then the same server on its data) under
/// running turns: every subscription vanishes at once, but the node is
/// another, so no live replica is taken for dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_takes_no_live_replicas_sessions() {
    let mut cluster = Cluster::start(ClusterOptions { persistent_redis: true, ..options(None) }).await;
    hints_on(&cluster).await;
    let mut followers = Vec::new();
    for on in 0..cluster.replicas.len() {
        let session = cluster.create_session(on).await;
        let cursor = cluster.last_seq(&session).await;
        followers.push((cursor, cluster.start_and_follow(on, &session, &words(), TURN_TIMEOUT).await));
    }
    for (_, follower) in &followers {
        assert!(follower.wait_for_events(5, TURN_TIMEOUT).await, "the turns stream\n{}", cluster.dump_logs());
    }
    cluster.redis().restart().await;

    let mut failures = Vec::new();
    for (cursor, follower) in followers {
        failures.extend(checks::turn(&follower.finish().await, &Expect { cursor, words: WORDS }));
    }
    // Every replica has subscribed again and recorded the new server by
    // the time the turns ended; hints read now see the live replicas.
    let dead = sum(&cluster, DEAD, &[0, 1, 2]).await;
    if dead > 0.0 {
        failures.push(format!("a Redis restart made a live replica look dead ({DEAD} = {dead})"));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

/// Through a proxy whose `PUBSUB NUMSUB` sees no subscription, every
/// replica would look dead: the self-test finds it cannot see its own
/// subscription, turns the hints off and says why; a killed owner's turn
/// is then taken over when its (short) lease lapses, and nothing is taken
/// from a live replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn behind_a_proxy_that_hides_subscriptions_the_hint_is_off_and_the_lease_takes_over() {
    let mut cluster =
        Cluster::start(ClusterOptions { hide_subscriptions: true, lease_ttl_secs: 3, ..options(None) }).await;
    for replica in &cluster.replicas {
        // The self-test's verdict is logged within a few seconds of the start.
        let off = replica.wait_for_log("death hints off", TURN_TIMEOUT).await;
        assert!(off, "replica {} did not turn the hints off\n{}", replica.name, replica.dump_logs());
    }
    let session = cluster.create_session(0).await;
    let cursor = cluster.last_seq(&session).await;
    let follower = cluster.start_and_follow(0, &session, &words(), TURN_TIMEOUT).await;
    assert!(follower.wait_for_events(10, TURN_TIMEOUT).await, "the turn streams\n{}", cluster.dump_logs());
    cluster.replicas[0].kill9().await;
    let transcript = follower.finish().await;

    let mut failures = checks::turn(&transcript, &Expect { cursor, words: WORDS });
    if transcript.of_kind("step_restarted").count() == 0 {
        failures.push("the killed owner's turn was not taken over".into());
    }
    let dead = sum(&cluster, DEAD, &[1, 2]).await;
    if dead > 0.0 {
        failures.push(format!("a hint fired behind the proxy ({DEAD} = {dead})"));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

/// `switchboard zot-rpc` (a harness's `zot rpc`) behind a load balancer;
/// the replica serving its turn is killed mid-answer. The bridge rejoins
/// by seq through the balancer, which now picks a live replica: the
/// harness sees a pause (printed), then the rest of the turn — the cut
/// step regenerated — each line once, and the whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zot_rpc_harness_sees_only_a_short_pause_when_the_owner_is_killed() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let mut cluster = Cluster::start(options(None)).await;
    hints_on(&cluster).await;
    let backends = cluster.urls().iter().map(|url| url.trim_start_matches("http://").to_string()).collect();
    let balancer = FirstLive::start(backends).await;
    let mut bridge = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["zot-rpc", "--url", &balancer.url(), "--token", &cluster.token, "--model", config::MODEL])
        .env_remove("ZOTCORE_RPC_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the bridge starts");
    let mut stdin = bridge.stdin.take().expect("the bridge's stdin");
    let mut stdout = BufReader::new(bridge.stdout.take().expect("the bridge's stdout")).lines();
    let prompt = serde_json::json!({"id": "1", "type": "prompt", "message": words()});
    stdin.write_all(format!("{prompt}\n").as_bytes()).await.expect("a prompt to the bridge");
    stdin.flush().await.expect("the prompt sent");

    // Every line up to `done`, with its arrival.
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Ok(Some(line)) = stdout.next_line().await {
            let line: serde_json::Value = serde_json::from_str(&line).expect("the bridge writes JSON lines");
            let done = line["type"] == "done";
            let _ = lines_tx.send((Instant::now(), line));
            if done {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut killed = None;
    let mut first_after_kill = None;
    // The takeover's first line: the cut step's `turn_end` (restarted).
    let mut restarted = None;
    loop {
        let Ok(Some((at, line))) = tokio::time::timeout(TURN_TIMEOUT, lines.recv()).await else {
            panic!("the bridge stopped before `done`: {seen:?}\n{}", cluster.dump_logs());
        };
        if killed.is_some() && first_after_kill.is_none() {
            first_after_kill = Some(at);
        }
        if line["type"] == "turn_end" && line["restarted"] == true && restarted.is_none() {
            restarted = Some(at);
        }
        let done = line["type"] == "done";
        seen.push(line);
        if done {
            break;
        }
        if killed.is_none() && seen.iter().filter(|l| l["type"] == "text_delta").count() == 10 {
            // The balancer sent every connection to replica 0 so far: it runs the turn.
            cluster.replicas[0].kill9().await;
            killed = Some(Instant::now());
        }
    }
    reader.await.expect("the reader ends at `done`");
    let killed = killed.expect("the turn streamed 10 tokens before its end");
    let first_after_kill = first_after_kill.expect("lines after the kill");
    eprintln!(
        "kill -9 of the owner: at a zot-rpc harness, the next line {:?} and the takeover's first line {:?} after the kill",
        first_after_kill.saturating_duration_since(killed),
        restarted.map(|at| at.saturating_duration_since(killed)),
    );

    let kinds: Vec<&str> = seen.iter().filter_map(|l| l["type"].as_str()).collect();
    let mut failures = Vec::new();
    if restarted.is_none() {
        failures.push(format!("the takeover did not regenerate the cut step: {kinds:?}"));
    }
    let last = seen.iter().rev().find(|l| l["type"] == "assistant_message");
    let text = last.and_then(|l| l["content"][0]["text"].as_str());
    if text != Some(expected_answer(WORDS).as_str()) {
        failures.push(format!("the harness's last answer is {text:?}"));
    }
    let dead = sum(&cluster, DEAD, &[1, 2]).await;
    if dead < 1.0 {
        failures.push(format!("no replica counted a death hint ({DEAD} = {dead})"));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
