//! Redis Cluster only: where keys land. A session's keys share its hash
//! tag, so they live on one node; sessions of many tenants spread over the
//! primaries as evenly as their slots do.

use std::collections::BTreeMap;

use futures::future::join_all;

use super::*;

/// Every key of `prefix` on each seed node, by node (`SCAN` answers a
/// node's own keys only).
async fn keys_by_node(prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_node = BTreeMap::new();
    for seed in redis_cluster_seeds() {
        let mut conn = redis::Client::open(seed.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let mut cursor = 0u64;
        let mut keys = Vec::new();
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        by_node.insert(seed, keys);
    }
    by_node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_keys_share_a_node_and_sessions_of_a_hundred_tenants_spread_within_ten_percent() {
    const TENANTS: usize = 100;
    const PER_TENANT: usize = 100;
    let h = Backend::Cluster.open();
    let sessions: Vec<SessionKey> = (0..TENANTS)
        .flat_map(|t| (0..PER_TENANT).map(move |s| key(&format!("tenant{t}"), &format!("session{s}"))))
        .collect();
    for chunk in sessions.chunks(500) {
        join_all(chunk.iter().map(|k| async {
            // State, conversation and log: three keys of one session.
            let mut tenure = create_owned(&h.store, k, "a#1").await;
            let mut commit = tenure.next();
            commit.messages = MessagesWrite::Append(vec!["{\"role\":\"user\"}".into()]);
            commit.events = numbered(1, 1);
            commit_one(&h.store, commit).await.expect("the commit goes through");
        }))
        .await;
    }

    let by_node = keys_by_node(&h.prefix).await;
    // Each session's keys are on one node, all three of them.
    let mut node_of: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (node, keys) in &by_node {
        // Session keys only (the owner's index `owned:a#1` is one key too).
        for k in keys.iter().filter(|k| k.contains("{t:")) {
            let session = k[..k.find('}').expect("a hash tag") + 1].to_string();
            let entry = node_of.entry(session.clone()).or_insert((node.clone(), 0));
            assert_eq!(&entry.0, node, "{session} has keys on {} and on {node}", entry.0);
            entry.1 += 1;
        }
    }
    assert_eq!(node_of.len(), TENANTS * PER_TENANT, "every session has keys");
    assert!(node_of.values().all(|(_, n)| *n == 3), "state, messages and events of each session");

    // Sessions per node: within ±10 % of an even share.
    let mean = (TENANTS * PER_TENANT) as f64 / by_node.len() as f64;
    let per_node: Vec<(String, usize)> =
        by_node.keys().map(|node| (node.clone(), node_of.values().filter(|(n, _)| n == node).count())).collect();
    eprintln!("sessions per node (mean {mean:.0}): {per_node:?}");
    for (node, count) in &per_node {
        let off = (*count as f64 - mean).abs() / mean;
        assert!(off <= 0.10, "{node} holds {count} sessions, {:.1} % off the mean {mean:.0}", off * 100.0);
    }
}

#[tokio::test]
async fn a_cluster_store_opens_while_the_cluster_is_down_and_reports_it_unavailable() {
    // Nothing listens on port 1: the cluster's first command connects, and fails.
    super::redis_only::opens_while_nothing_answers(RedisTarget::Cluster(vec!["redis://127.0.0.1:1".to_string()])).await;
}
