//! Redis goes away under a running turn, for less than a lease: frozen for
//! five seconds (SIGSTOP, connections hang), or killed and started again
//! from its append-only file (connections refused, then a fresh server).
//!
//! Meanwhile no replica process exits, and requests that need the store get
//! a prompt 503 `store_unavailable` instead of hanging; afterwards the turn
//! finishes with the model's whole answer and a gapless log.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    checks::{self, Expect},
    client::Follower,
    cluster::{Cluster, ClusterOptions},
    config,
};

const WORDS: u32 = 80;
/// Longer than the outages here: the lease outlives them.
const LEASE_TTL_SECS: u64 = 10;
const FREEZE: Duration = Duration::from_secs(5);
/// How long the killed Redis stays down before it is started again.
const DOWN: Duration = Duration::from_secs(2);
/// A request during the outage must be answered (503) within this.
const PROMPT_ANSWER: Duration = Duration::from_secs(2);
const TURN_TIMEOUT: Duration = Duration::from_secs(50);
/// Events seen before the outage begins: the turn is streaming.
const EVENTS_BEFORE_OUTAGE: usize = 6;

async fn two_replicas(persistent_redis: bool) -> Cluster {
    Cluster::start(ClusterOptions {
        replicas: 2,
        lease_ttl_secs: LEASE_TTL_SECS,
        persistent_redis,
        chunk_delay: Duration::from_millis(40),
        ..ClusterOptions::default()
    })
    .await
}

/// Starts an 80-word turn on replica 0 and waits until it streams.
async fn streaming_turn(cluster: &Cluster) -> (String, Follower) {
    let session = cluster.create_session(0).await;
    let content = format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple());
    let follower = cluster.start_and_follow(0, &session, &content, TURN_TIMEOUT).await;
    assert!(
        follower.wait_for_events(EVENTS_BEFORE_OUTAGE, Duration::from_secs(10)).await,
        "the turn did not start streaming\n{}",
        cluster.dump_logs()
    );
    (session, follower)
}

/// `GET /v1/sessions/{id}` and `POST /v1/sessions` on every replica while
/// the store is away: each must be a 503 `store_unavailable` within
/// [`PROMPT_ANSWER`]. Returns the failures.
async fn requests_get_prompt_503s(cluster: &Cluster, session: &str) -> Vec<String> {
    let http = reqwest::Client::builder().timeout(PROMPT_ANSWER + Duration::from_secs(3)).build().unwrap();
    let mut asks = Vec::new();
    for replica in &cluster.replicas {
        let view = http.get(replica.url(&format!("/v1/sessions/{session}"))).bearer_auth(&cluster.token);
        let create =
            http.post(replica.url("/v1/sessions")).bearer_auth(&cluster.token).json(&json!({"model": config::MODEL}));
        asks.push((format!("GET /v1/sessions/{{id}} on {}", replica.name), view));
        asks.push((format!("POST /v1/sessions on {}", replica.name), create));
    }
    let answers = futures::future::join_all(asks.into_iter().map(|(what, request)| async move {
        let started = Instant::now();
        let response = request.send().await;
        let elapsed = started.elapsed();
        let answer = match response {
            Ok(response) => {
                let status = response.status();
                Ok((status, response.json::<Value>().await.unwrap_or(Value::Null)))
            }
            Err(e) => Err(e.to_string()),
        };
        (what, elapsed, answer)
    }))
    .await;
    let mut failures = Vec::new();
    for (what, elapsed, answer) in answers {
        eprintln!(
            "  during the outage: {what} -> {:?} after {:.0}ms",
            answer.as_ref().map(|(s, b)| (s.as_u16(), b["error"]["code"].clone())),
            elapsed.as_secs_f64() * 1000.0
        );
        match answer {
            Ok((StatusCode::SERVICE_UNAVAILABLE, body)) if body["error"]["code"] == "store_unavailable" => {}
            Ok((status, body)) => failures.push(format!("{what}: {status} {body}, not 503 store_unavailable")),
            Err(e) => failures.push(format!("{what}: no answer ({e})")),
        }
        if elapsed > PROMPT_ANSWER {
            failures.push(format!("{what}: answered after {elapsed:?}, not within {PROMPT_ANSWER:?}"));
        }
    }
    failures
}

/// Every replica process still runs.
fn no_replica_exited(cluster: &mut Cluster, when: &str) -> Vec<String> {
    cluster
        .replicas
        .iter_mut()
        .filter_map(|replica| (!replica.is_running()).then(|| format!("replica {} exited {when}", replica.name)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_outlives_a_five_second_redis_freeze_and_requests_meanwhile_get_a_prompt_503() {
    let mut cluster = two_replicas(false).await;
    let (session, follower) = streaming_turn(&cluster).await;

    let frozen_at = Instant::now();
    cluster.redis().freeze();
    let mut failures = requests_get_prompt_503s(&cluster, &session).await;
    // The fault schedule: Redis stays frozen for FREEZE in all.
    tokio::time::sleep_until((frozen_at + FREEZE).into()).await;
    failures.extend(no_replica_exited(&mut cluster, "while Redis was frozen"));
    cluster.redis().thaw();

    let transcript = follower.finish().await;
    eprintln!(
        "redis freeze: turn {:?} {:.1}s after thaw; {} events over {} connections ({})",
        transcript.turn_end_reason(),
        (frozen_at + FREEZE).elapsed().as_secs_f64(),
        transcript.seqs().len(),
        transcript.connections.len(),
        transcript.describe_connections()
    );
    failures.extend(checks::turn(&transcript, &Expect { cursor: 0, words: WORDS }));
    failures.extend(no_replica_exited(&mut cluster, "after Redis thawed"));
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_outlives_a_restart_of_a_persistent_redis_and_requests_meanwhile_get_a_prompt_503() {
    let mut cluster = two_replicas(true).await;
    let (session, follower) = streaming_turn(&cluster).await;

    let killed_at = Instant::now();
    cluster.redis().kill().await;
    let mut failures = requests_get_prompt_503s(&cluster, &session).await;
    // The fault schedule: Redis stays down for DOWN at least.
    tokio::time::sleep_until((killed_at + DOWN).into()).await;
    failures.extend(no_replica_exited(&mut cluster, "while Redis was down"));
    cluster.redis().start_again().await;
    let down_for = killed_at.elapsed();

    let transcript = follower.finish().await;
    eprintln!(
        "redis restart: down {:.2}s; turn {:?} {:.1}s after Redis was back; {} events over {} connections ({})",
        down_for.as_secs_f64(),
        transcript.turn_end_reason(),
        (killed_at + down_for).elapsed().as_secs_f64(),
        transcript.seqs().len(),
        transcript.connections.len(),
        transcript.describe_connections()
    );
    failures.extend(checks::turn(&transcript, &Expect { cursor: 0, words: WORDS }));
    failures.extend(no_replica_exited(&mut cluster, "after Redis came back"));
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
