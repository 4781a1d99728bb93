//! On a Redis Cluster a node that does not answer delays only the watchers
//! of its own channels. One primary of a cluster of the test's own is
//! frozen (SIGSTOP) while the store subscribes a channel it holds; a
//! watch of a channel on another primary, asked after it, is answered
//! first, and that channel's notices go on arriving. Once the node thaws
//! the first watch is answered too and its channel is heard.
//!
//! (The subscription task used to send each subscription and wait for it
//! itself: every later watch on the replica waited behind a node that did
//! not answer — in a failover, new followers got no response for tens of
//! seconds.)

use std::time::{Duration, Instant};

use switchboard::{
    config::{RedisTarget, RedisTls},
    store::{Commit, Fence, Notice, OwnerChange, SessionKey, StateWrite, Store},
};
use tokio::sync::mpsc;

use crate::harness::{process, redis_cluster::OwnRedisCluster, store::open};

const HEARD_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_delays_only_the_watchers_of_its_own_channels() {
    let cluster = OwnRedisCluster::start(3, 0).await;
    let (store, prefix, mut notices) = open(RedisTarget::Cluster(cluster.seeds()), RedisTls::default());
    let victim = cluster.first_primaries()[0];
    let mut admin = redis::Client::open(cluster.seeds()[1].as_str())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a node answers");
    let owners = slot_owners(&mut admin).await;
    // Sessions whose channels live on the victim and on another primary.
    let mut on_victim = None;
    let mut elsewhere = None;
    while on_victim.is_none() || elsewhere.is_none() {
        let key = SessionKey::new("acme", uuid::Uuid::new_v4().simple().to_string());
        let channel = format!("{prefix}{{t:{}:s:{}}}:n", key.tenant, key.id);
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&channel).query_async(&mut admin).await.unwrap();
        let port = owners.iter().find(|(from, to, _)| (*from..=*to).contains(&slot)).expect("every slot served").2;
        let place = if port == victim { &mut on_victim } else { &mut elsewhere };
        if place.is_none() {
            create(&store, &key).await;
            *place = Some(key);
        }
    }
    let (on_victim, elsewhere) = (on_victim.unwrap(), elsewhere.unwrap());
    // The subscription is up: a wake-up on the other primary is heard.
    store.notifications.watch(&elsewhere).await.expect("watched");
    hear_wake(&store, &mut notices, &elsewhere).await;
    store.notifications.unwatch(&elsewhere).await.expect("unwatched");

    process::signal(cluster.pid(victim), "STOP");
    let frozen = async {
        store.notifications.watch(&on_victim).await.expect("watched");
        Instant::now()
    };
    let live = async {
        // Asked after the frozen node's watch is queued.
        tokio::task::yield_now().await;
        store.notifications.watch(&elsewhere).await.expect("watched");
        let answered = Instant::now();
        // Its notices arrive while the other node is frozen.
        hear_wake(&store, &mut notices, &elsewhere).await;
        process::signal(cluster.pid(victim), "CONT");
        answered
    };
    let (frozen_answered, live_answered) = tokio::join!(frozen, live);
    assert!(
        live_answered < frozen_answered,
        "the watch of a channel on a live primary waited for the frozen one's ({:?} after it)",
        live_answered - frozen_answered
    );
    // Thawed: the victim's channel is heard too (after a resubscription if
    // its subscription timed out meanwhile).
    hear_wake(&store, &mut notices, &on_victim).await;
}

/// `(first slot, last slot, port)` of every range a primary serves.
async fn slot_owners(admin: &mut redis::aio::MultiplexedConnection) -> Vec<(u16, u16, u16)> {
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(admin).await.expect("CLUSTER SLOTS");
    slots
        .iter()
        .map(|range| {
            let redis::Value::Array(fields) = range else { panic!("a slot range: {range:?}") };
            let int = |v: &redis::Value| -> u16 { redis::from_redis_value_ref::<i64>(v).expect("a number") as u16 };
            let redis::Value::Array(primary) = &fields[2] else { panic!("a node: {:?}", fields[2]) };
            (int(&fields[0]), int(&fields[1]), int(&primary[1]))
        })
        .collect()
}

async fn create(store: &Store, key: &SessionKey) {
    let mut create = Commit::new(key.clone(), Fence::Absent, "b#1");
    create.owner = OwnerChange::Acquire("b#1".into());
    create.state = Some(StateWrite { doc: "{}".into(), status: "running" });
    store.sessions.commit(std::slice::from_ref(&create)).await.remove(0).expect("created");
}

/// Asks to cancel `key` until its wake-up is heard on the subscription.
async fn hear_wake(store: &Store, notices: &mut mpsc::Receiver<Notice>, key: &SessionKey) {
    let heard = tokio::time::timeout(HEARD_WITHIN, async {
        loop {
            // Asked again until heard: the subscription may be repairing.
            let _ = store.sessions.request_cancel(key).await;
            match tokio::time::timeout(Duration::from_millis(200), notices.recv()).await {
                Ok(Some(Notice::Wake { key: heard })) if heard == *key => return,
                _ => continue,
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "the wake-up of {} not heard within {HEARD_WITHIN:?}", key.id);
}
