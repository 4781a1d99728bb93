//! Redis away for longer than a lease: the owner cannot renew, the lease
//! lapses while nobody can write, and when Redis answers again the session
//! must not stay `running` with nobody working on it — some replica takes
//! it over and the turn finishes.

use std::time::{Duration, Instant};

use crate::harness::{
    checks::{self, Expect},
    cluster::{Cluster, ClusterOptions},
};

const LEASE_TTL_SECS: u64 = 2;
/// Three lease TTLs.
const FREEZE: Duration = Duration::from_secs(3 * LEASE_TTL_SECS);
const WORDS: u32 = 60;
const TURN_TIMEOUT: Duration = Duration::from_secs(40);
/// After the turn ends, the state document says so within this.
const SETTLE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_whose_redis_vanishes_for_three_lease_ttls_is_finished_not_left_running_unowned() {
    let mut cluster = Cluster::start(ClusterOptions {
        replicas: 2,
        lease_ttl_secs: LEASE_TTL_SECS,
        chunk_delay: Duration::from_millis(40),
        ..ClusterOptions::default()
    })
    .await;
    let session = cluster.create_session(0).await;
    let content = format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple());
    let follower = cluster.start_and_follow(0, &session, &content, TURN_TIMEOUT).await;
    assert!(
        follower.wait_for_events(6, Duration::from_secs(10)).await,
        "the turn did not stream\n{}",
        cluster.dump_logs()
    );

    cluster.redis().freeze();
    // The fault schedule: Redis frozen for three lease TTLs.
    tokio::time::sleep(FREEZE).await;
    cluster.redis().thaw();
    let thawed_at = Instant::now();

    let transcript = follower.finish().await;
    let mut failures = checks::turn(&transcript, &Expect { cursor: 0, words: WORDS });
    for replica in cluster.replicas.iter_mut() {
        if !replica.is_running() {
            failures.push(format!("replica {} exited", replica.name));
        }
    }
    // The state agrees with the log: not running any more.
    let deadline = Instant::now() + SETTLE;
    let status = loop {
        let status = cluster.session_view(&session).await.map(|v| v["status"].as_str().unwrap_or_default().to_string());
        let active = status.as_deref().is_none_or(|s| matches!(s, "running" | "awaiting_relay"));
        if !active || Instant::now() >= deadline {
            break status;
        }
        // Polling the session view under an overall deadline.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if status.as_deref() != Some("completed") {
        failures.push(format!("the session's status is {status:?} after its turn, not \"completed\""));
    }
    eprintln!(
        "store error: frozen {:.1}s; turn {:?} {:.1}s after thaw; status {status:?}; {} events over {} connections ({})",
        FREEZE.as_secs_f64(),
        transcript.turn_end_reason(),
        transcript.of_kind("turn_ended").next().map_or(f64::NAN, |e| (e.at - thawed_at).as_secs_f64()),
        transcript.seqs().len(),
        transcript.connections.len(),
        transcript.describe_connections()
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
