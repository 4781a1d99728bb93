//! Instances and ownership: heartbeats, dead instances, the sessions each
//! owns, orphans.

use super::*;

contract!(
    a_beating_instance_is_alive_and_one_whose_beat_lapsed_is_dead,
    a_heartbeat_says_whether_the_last_one_had_lapsed,
    an_instance_that_leaves_is_dead_at_once,
    a_dead_instance_that_owns_nothing_is_forgotten,
    a_dead_instance_that_still_owns_sessions_is_kept,
);

async fn a_beating_instance_is_alive_and_one_whose_beat_lapsed_is_dead(backend: Backend) {
    let h = backend.open();
    let replicas = &h.store.replicas;
    replicas.heartbeat("a#1", Duration::from_secs(60)).await.unwrap();
    replicas.heartbeat("b#1", Duration::from_millis(50)).await.unwrap();
    assert_eq!(replicas.alive("a#1").await, Ok(true));
    assert_eq!(replicas.alive("never#1").await, Ok(false));
    eventually("b's beat lapses", || async { replicas.dead(10).await == Ok(vec!["b#1".to_string()]) }).await;
    assert_eq!(replicas.alive("b#1").await, Ok(false));
}

async fn a_heartbeat_says_whether_the_last_one_had_lapsed(backend: Backend) {
    let h = backend.open();
    let replicas = &h.store.replicas;
    assert_eq!(replicas.heartbeat("a#1", Duration::from_secs(60)).await, Ok(false), "the first beat");
    // The beat before it had not lapsed; this one lapses soon.
    assert_eq!(replicas.heartbeat("a#1", Duration::from_millis(50)).await, Ok(true));
    eventually("a's beat lapses", || async { replicas.alive("a#1").await == Ok(false) }).await;
    assert_eq!(replicas.heartbeat("a#1", Duration::from_secs(60)).await, Ok(false));
}

async fn an_instance_that_leaves_is_dead_at_once(backend: Backend) {
    let h = backend.open();
    let replicas = &h.store.replicas;
    replicas.heartbeat("a#1", Duration::from_secs(60)).await.unwrap();
    replicas.leave("a#1").await.unwrap();
    assert_eq!(replicas.alive("a#1").await, Ok(false));
    assert_eq!(replicas.dead(10).await, Ok(vec!["a#1".to_string()]));
}

async fn a_dead_instance_that_owns_nothing_is_forgotten(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a#1").await;
    h.store.replicas.heartbeat("a#1", Duration::from_secs(60)).await.unwrap();
    h.store.replicas.leave("a#1").await.unwrap();
    assert_eq!(h.store.replicas.owned("a#1", 10).await, Ok(vec![k.clone()]));
    h.store.replicas.disown("a#1", std::slice::from_ref(&k)).await.unwrap();
    assert_eq!(h.store.replicas.owned("a#1", 10).await, Ok(vec![]));
    assert_eq!(h.store.replicas.dead(10).await, Ok(vec![]), "forgotten");
}

async fn a_dead_instance_that_still_owns_sessions_is_kept(backend: Backend) {
    let h = backend.open();
    let (k1, k2) = (key("acme", "s1"), key("acme", "s2"));
    create_owned(&h.store, &k1, "a#1").await;
    create_owned(&h.store, &k2, "a#1").await;
    h.store.replicas.leave("a#1").await.unwrap();
    h.store.replicas.disown("a#1", std::slice::from_ref(&k1)).await.unwrap();
    assert_eq!(h.store.replicas.owned("a#1", 10).await, Ok(vec![k2]));
    assert_eq!(h.store.replicas.dead(10).await, Ok(vec!["a#1".to_string()]));
    // Orphans are listed until adopted.
    assert_eq!(h.store.replicas.orphans(10).await, Ok(vec![]));
}
