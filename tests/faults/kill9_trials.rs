//! kill -9 of the replica that runs a tool-using turn, at a random point of
//! the turn, in several trials: the turn still ends `final` on the replicas
//! left, the client that rejoins sees every event once, tools ran as their
//! `retry_on_takeover` allows with a stable `Idempotency-Key`, and the answer
//! is whole.
//!
//! The schedule is drawn from a seeded RNG (`FAULT_SEED`, printed); the
//! number of trials is `FAULT_TRIALS` (default 6).

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::harness::{
    checks::{self, Expect, Keys},
    cluster::{Cluster, ClusterOptions, ClusterShape},
};

const TOOL_ROUNDS: u32 = 2;
const WORDS: u32 = 30;
/// A whole trial, takeover included, ends well within this.
const TURN_TIMEOUT: Duration = Duration::from_secs(40);
const DEFAULT_TRIALS: usize = 6;

/// `lookup` may run again after a takeover, `charge` may not; both take long
/// enough that a kill can land during a call.
fn tools(retry_keys: bool) -> Vec<(&'static str, Duration, Duration, Option<bool>)> {
    let (min, max) = (Duration::from_millis(150), Duration::from_millis(300));
    vec![("lookup", min, max, retry_keys.then_some(true)), ("charge", min, max, retry_keys.then_some(false))]
}

/// The user message of a turn: two tool rounds (`lookup`, then `charge`)
/// and a 30-word answer; the nonce makes the tool call ids unique per turn.
fn orders() -> String {
    format!("run:{} tools:{TOOL_ROUNDS} tool:lookup,charge words:{WORDS}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_using_turn_without_faults_finishes_with_a_gapless_log() {
    let cluster = Cluster::start(ClusterOptions { tools: tools(false), ..ClusterOptions::default() }).await;
    let session = cluster.create_session(0).await;
    let follower = cluster.start_and_follow(1, &session, &orders(), TURN_TIMEOUT).await;
    let transcript = follower.finish().await;

    let runs = cluster.tools.calls_of(&session);
    let mut failures = checks::turn(&transcript, &Expect { cursor: 0, words: WORDS });
    failures.extend(checks::tools(&transcript, &runs, &["lookup", "charge"], Keys::IfPresent));
    if runs.len() != TOOL_ROUNDS as usize {
        failures.push(format!("expected {TOOL_ROUNDS} tool runs, got {}", checks::run_counts(&runs)));
    }
    if transcript.connections.len() != 1 {
        failures.push(format!("expected one connection, got {}", transcript.describe_connections()));
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

/// Where in the turn the owner dies.
#[derive(Debug, Clone, Copy)]
enum FaultPoint {
    /// Once the client has seen this many events.
    AfterEvents(usize),
    /// When the tool server receives the session's Nth tool call.
    AtToolCall(usize),
    /// This long after the turn started.
    AfterDelay(Duration),
}

impl FaultPoint {
    fn draw(rng: &mut StdRng) -> Self {
        match rng.random_range(0..3) {
            0 => Self::AfterEvents(rng.random_range(2..=40)),
            1 => Self::AtToolCall(rng.random_range(1..=TOOL_ROUNDS as usize)),
            _ => Self::AfterDelay(Duration::from_millis(rng.random_range(0..2000))),
        }
    }
}

fn seed() -> u64 {
    std::env::var("FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        nanos.as_nanos() as u64
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_using_turn_survives_kill9_of_its_owner_at_random_points_in_every_trial() {
    kill9_trials(None, "", DEFAULT_TRIALS).await
}

/// The same on a three-primary Redis Cluster, with fewer trials (CI's
/// budget; `FAULT_TRIALS` sets both).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_using_turn_survives_kill9_of_its_owner_on_a_redis_cluster() {
    kill9_trials(Some(ClusterShape::THREE_PRIMARIES), "", DEFAULT_TRIALS / 2).await
}

/// The same with a commit linger: tokens waiting for company when the
/// owner dies were never committed, like a commit in flight, and the turn
/// goes on from the last commit elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_using_turn_survives_kill9_of_its_owner_with_a_commit_linger() {
    kill9_trials(None, "commit_linger_ms = 100", DEFAULT_TRIALS / 2).await
}

async fn kill9_trials(redis_cluster: Option<ClusterShape>, store_toml: &str, default_trials: usize) {
    let trials = std::env::var("FAULT_TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_trials);
    let seed = seed();
    eprintln!(
        "kill9 trials: {trials} trials, FAULT_SEED={seed}, redis cluster: {redis_cluster:?}, [store] {store_toml}"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let options = ClusterOptions {
        tools: tools(true),
        redis_cluster,
        store_toml: store_toml.to_string(),
        ..ClusterOptions::default()
    };
    let mut cluster = Cluster::start(options).await;
    let mut failed = Vec::new();

    for trial in 1..=trials {
        let started = Instant::now();
        let fault = FaultPoint::draw(&mut rng);
        let on = rng.random_range(0..cluster.replicas.len());
        let session = cluster.create_session(on).await;
        let follower = cluster.start_and_follow(on, &session, &orders(), TURN_TIMEOUT).await;

        // Wait for the fault point, unless the turn ends first.
        let mut arrivals = cluster.tools.subscribe();
        let trigger = async {
            match fault {
                FaultPoint::AfterEvents(n) => {
                    // A turn that ends with fewer events (a linger merges
                    // them) never reaches the fault point: no kill then.
                    if !follower.wait_for_events(n, TURN_TIMEOUT).await {
                        std::future::pending::<()>().await;
                    }
                }
                FaultPoint::AtToolCall(n) => {
                    let _ = arrivals.wait_for(|_| cluster.tools.calls_of(&session).len() >= n).await;
                }
                // The fault schedule: a random moment inside the turn.
                FaultPoint::AfterDelay(delay) => tokio::time::sleep(delay).await,
            }
        };
        // An ended turn wins a tie: a fault point reached as the turn ends
        // is no fault inside it.
        let fired = tokio::select! {
            biased;
            () = follower.ended() => false,
            () = trigger => true,
        };
        let seen_at_kill = follower.seen();
        // Half the trials start the killed replica again at once (same id,
        // same port: it finds its own stale lease); the others only after
        // the turn ended, so the turn must end on another replica.
        let restart_at_once = rng.random_bool(0.5);
        let mut killed = None;
        if fired {
            let owner = match cluster.owner_of(&session).await {
                Some(owner) => owner,
                // The view may name its owner differently after the
                // refactor: any replica will do then.
                None => rng.random_range(0..cluster.replicas.len()),
            };
            cluster.replicas[owner].kill9().await;
            if restart_at_once {
                cluster.replicas[owner].restart().await;
            }
            killed = Some(owner);
        }
        let transcript = follower.finish().await;
        let finisher = cluster.session_view(&session).await.and_then(|v| v["replica"].as_str().map(str::to_string));
        let killed_name = killed.map(|k| cluster.replicas[k].name.clone());
        if let Some(owner) = killed
            && !restart_at_once
        {
            cluster.replicas[owner].restart().await;
        }

        let runs = cluster.tools.calls_of(&session);
        let mut failures = checks::turn(&transcript, &Expect { cursor: 0, words: WORDS });
        failures.extend(checks::tools(&transcript, &runs, &["charge"], Keys::Required));
        if let (Some(killed), Some(finisher), false) = (&killed_name, &finisher, restart_at_once)
            && killed == finisher
        {
            failures.push(format!("the turn ended on {finisher}, the replica that was killed and not yet restarted"));
        }
        let what = match &killed_name {
            None => "no kill (the turn ended first)".to_string(),
            Some(k) => format!("killed {k}, restarted {}", if restart_at_once { "at once" } else { "after the turn" }),
        };
        eprintln!(
            "trial {trial}/{trials} seed {seed}: fault {fault:?} -> {what} after {seen_at_kill} events; \
             turn {:?} by {}; {} events over {} connections; tools {}; step_restarted {}; {:.1}s; {}",
            transcript.turn_end_reason(),
            finisher.as_deref().unwrap_or("?"),
            transcript.seqs().len(),
            transcript.connections.len(),
            checks::run_counts(&runs),
            transcript.of_kind("step_restarted").count(),
            started.elapsed().as_secs_f64(),
            if failures.is_empty() { "ok".to_string() } else { format!("FAILED: {}", failures.join("; ")) },
        );
        if !failures.is_empty() {
            failed.push(format!("trial {trial} ({fault:?}, {what}): {}", failures.join("\n    ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {trials} trials failed (FAULT_SEED={seed}):\n  {}\n{}",
        failed.len(),
        failed.join("\n  "),
        cluster.dump_logs()
    );
}
