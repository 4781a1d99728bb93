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

/// A Redis user of the test's own on every node of the test cluster (ACL
/// users are per node), whose index writes (`SADD`, `ZADD`) can be denied
/// on some nodes: a hint lost to a node, as a failing primary loses it,
/// while every other test's commands go on.
struct NodeUser {
    name: String,
    nodes: Vec<String>,
}

impl NodeUser {
    const PASSWORD: &str = "hint-repair-test";

    async fn create() -> Self {
        let user = Self { name: format!("sbtest-{}", uuid::Uuid::new_v4().simple()), nodes: redis_cluster_seeds() };
        for node in &user.nodes {
            user.acl(node, &["on", &format!(">{}", Self::PASSWORD), "~*", "&*", "+@all"]).await;
        }
        user
    }

    /// The cluster's seeds, logged in as this user.
    fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.replace("redis://", &format!("redis://{}:{}@", self.name, Self::PASSWORD)))
            .collect()
    }

    async fn acl(&self, node: &str, rules: &[&str]) {
        let mut conn = redis::Client::open(node).unwrap().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("ACL").arg("SETUSER").arg(&self.name).arg(rules).query_async::<()>(&mut conn).await.unwrap();
    }

    /// Index writes fail everywhere but on `home`.
    async fn deny_index_writes_but_on(&self, home: &str) {
        for node in self.nodes.iter().filter(|n| *n != home) {
            self.acl(node, &["-sadd", "-zadd"]).await;
        }
    }

    async fn allow_index_writes(&self) {
        for node in &self.nodes {
            self.acl(node, &["+sadd", "+zadd"]).await;
        }
    }

    async fn remove(self) {
        for node in &self.nodes {
            let mut conn =
                redis::Client::open(node.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
            redis::cmd("ACL").arg("DELUSER").arg(&self.name).query_async::<()>(&mut conn).await.unwrap();
        }
    }
}

/// The seed node serving `key`'s slot (a primary answers a key of another
/// node's slot with MOVED).
async fn node_of(key: &str) -> String {
    for node in redis_cluster_seeds() {
        let mut conn = redis::Client::open(node.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        if redis::cmd("EXISTS").arg(key).query_async::<i64>(&mut conn).await.is_ok() {
            return node;
        }
    }
    panic!("no seed node serves {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_entry_lost_to_a_node_is_written_again_from_the_sessions_state() {
    use switchboard::store::{ListScope, Listing};
    let user = NodeUser::create().await;
    let metrics = std::sync::Arc::new(switchboard::telemetry::metrics::Metrics::new());
    let h = open_config_with(store_config(Some(RedisTarget::Cluster(user.seeds())), 100), metrics.clone());
    let owned_by = |instance: &'static str, k: SessionKey| {
        let store = h.store.clone();
        async move { store.replicas.owned(instance, 1000).await.unwrap().contains(&k) }
    };
    let listed = |tenant: String| {
        let store = h.store.clone();
        async move { !store.catalog.list(&ListScope::Tenant(tenant.into()), None, 10).await.unwrap().is_empty() }
    };

    // A create whose owner entry and list entries are both lost: their
    // slots are on other nodes than the session's (tried until so).
    let mut lost = None;
    for i in 0..100 {
        let k = key(&format!("tenant{i}"), &format!("session{i}"));
        let home = node_of(&format!("{}{{t:{}:s:{}}}:state", h.prefix, k.tenant, k.id)).await;
        user.deny_index_writes_but_on(&home).await;
        let mut create = Commit::new(k.clone(), Fence::Absent, "a#1");
        create.owner = OwnerChange::Acquire("a#1".into());
        create.state = state("{}", "running");
        create.listing = Some(Listing { subject: "alice".into(), created_ms: 1 });
        commit_one(&h.store, create).await.expect("the session's own node takes the commit");
        if !owned_by("a#1", k.clone()).await && !listed(k.tenant.to_string()).await {
            lost = Some((k, home));
            break;
        }
        user.allow_index_writes().await;
    }
    let (k, home) = lost.expect("a session whose index slots are on other nodes");
    user.allow_index_writes().await;
    eventually("the owner's entry is written again", || owned_by("a#1", k.clone())).await;
    eventually("the list entry is written again", || listed(k.tenant.to_string())).await;

    // Lost again, three times over: released while running (an orphan),
    // then adopted by b#1. What is written once the node answers is what
    // the state says now (owned by b#1), not the lost commands replayed.
    user.deny_index_writes_but_on(&home).await;
    let mut tenure = Tenure { key: k.clone(), instance: "a#1".into(), epoch: 1, n: 0, seq: 0 };
    let mut release = tenure.next();
    release.owner = OwnerChange::Release;
    commit_one(&h.store, release).await.unwrap();
    let mut adopt = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    adopt.owner = OwnerChange::Acquire("b#1".into());
    commit_one(&h.store, adopt).await.unwrap();
    assert!(!owned_by("b#1", k.clone()).await, "the entry was lost");
    user.allow_index_writes().await;
    eventually("the new owner's entry is written again", || owned_by("b#1", k.clone())).await;
    assert_eq!(h.store.replicas.orphans(10).await, Ok(vec![]), "an orphan entry the state no longer implies");
    // Counted for operators.
    let counted = |outcome: &str| {
        let line = format!("switchboard_store_index_entries_total{{outcome=\"{outcome}\"}} ");
        let text = metrics.render();
        text.lines().find_map(|l| l.strip_prefix(line.as_str())).map_or(0, |n| n.parse::<u64>().unwrap())
    };
    assert!(counted("lost") >= 4, "{}", metrics.render());
    assert!(counted("repaired") >= 2, "{}", metrics.render());
    user.remove().await;
}
