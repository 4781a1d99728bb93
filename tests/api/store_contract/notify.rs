//! Notifications (commits, wake-ups and hand-offs heard by watchers,
//! counted watching) and health.

use super::*;

contract!(
    a_watcher_hears_commits_with_events,
    commits_are_announced_only_while_another_instance_follows,
    a_watcher_hears_decisions_cancels_and_takeovers,
    every_replica_hears_a_hand_off,
    after_unwatch_commits_are_not_heard,
    watching_is_counted,
    the_store_is_healthy,
);

async fn a_watcher_hears_commits_with_events(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.follow(&k, "b", true).await.unwrap();
    tenure.append(&h.store, 1, 3).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k.clone(), 3));
    tenure.append(&h.store, 4, 4).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k, 4));
}

async fn a_watcher_hears_decisions_cancels_and_takeovers(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    let mut open = tenure.next();
    open.open_relays = vec!["r1".into()];
    commit_one(&h.store, open).await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    h.store.sessions.decide(&k, "r1", "yes").await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Wake { key: k.clone() });
    h.store.sessions.request_cancel(&k).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Wake { key: k.clone() });
    let mut takeover = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b");
    takeover.owner = OwnerChange::Acquire("b".into());
    commit_one(&h.store, takeover).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Wake { key: k });
}

async fn commits_are_announced_only_while_another_instance_follows(backend: Backend) {
    let mut h = backend.open();
    let (k, marker) = (key("acme", "s1"), key("acme", "marker"));
    let mut on_k = create_owned(&h.store, &k, "a").await;
    let mut on_marker = create_owned(&h.store, &marker, "a").await;
    for watched in [&k, &marker] {
        h.store.notifications.watch(watched).await.unwrap();
    }
    h.store.notifications.follow(&marker, "b", true).await.unwrap();
    // Only the committing instance follows k: its followers have the events
    // from memory, nobody else needs a notice.
    h.store.notifications.follow(&k, "a", true).await.unwrap();
    on_k.append(&h.store, 1, 1).await;
    // Another instance follows k twice (two feeds, one stopped): still one.
    h.store.notifications.follow(&k, "b", true).await.unwrap();
    h.store.notifications.follow(&k, "b", true).await.unwrap();
    h.store.notifications.follow(&k, "b", false).await.unwrap();
    on_k.append(&h.store, 2, 2).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k.clone(), 2), "seq 1 was not announced");
    h.store.notifications.follow(&k, "b", false).await.unwrap();
    on_k.append(&h.store, 3, 3).await;
    on_marker.append(&h.store, 1, 1).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(marker, 1), "seq 3 was not announced");
    // Following a session that does not exist leaves nothing behind.
    let gone = key("acme", "gone");
    h.store.notifications.follow(&gone, "b", true).await.unwrap();
    assert_eq!(h.store.sessions.load(&gone, false).await, Ok(None));
}

async fn every_replica_hears_a_hand_off(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    // Hand-offs are heard by every subscription; a watch returns once this
    // one is up (it subscribes the hand-off channel first).
    h.store.notifications.watch(&k).await.unwrap();
    let mut hand_off = tenure.next();
    hand_off.owner = OwnerChange::Release;
    commit_one(&h.store, hand_off).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Orphaned);
}

async fn after_unwatch_commits_are_not_heard(backend: Backend) {
    let mut h = backend.open();
    let gone = key("acme", "gone");
    let kept = key("acme", "kept");
    let mut on_gone = create_owned(&h.store, &gone, "a").await;
    let mut on_kept = create_owned(&h.store, &kept, "a").await;
    h.store.notifications.watch(&gone).await.unwrap();
    h.store.notifications.watch(&kept).await.unwrap();
    for followed in [&gone, &kept] {
        h.store.notifications.follow(followed, "b", true).await.unwrap();
    }
    h.store.notifications.unwatch(&gone).await.unwrap();
    on_gone.append(&h.store, 1, 1).await;
    on_kept.append(&h.store, 1, 2).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(kept, 2));
}

async fn watching_is_counted(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let marker = key("acme", "marker");
    let mut on_k = create_owned(&h.store, &k, "a").await;
    let mut on_marker = create_owned(&h.store, &marker, "a").await;
    for followed in [&marker, &k] {
        h.store.notifications.follow(followed, "b", true).await.unwrap();
    }
    h.store.notifications.watch(&marker).await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.unwatch(&k).await.unwrap();
    on_k.append(&h.store, 1, 1).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k.clone(), 1));
    h.store.notifications.unwatch(&k).await.unwrap();
    // Unwatching more often than watching is harmless.
    h.store.notifications.unwatch(&k).await.unwrap();
    on_k.append(&h.store, 2, 2).await;
    on_marker.append(&h.store, 1, 1).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(marker, 1));
}

async fn the_store_is_healthy(backend: Backend) {
    let h = backend.open();
    assert_eq!(h.store.health.ping().await, Ok(()));
}

/// The notice of a commit by instance `a` (every commit here is `a`'s): the
/// committing instance is named, so it can skip its own notices.
fn appended(key: SessionKey, last_seq: u64) -> Notice {
    Notice::Appended { key, last_seq, by: Some("a".to_string()) }
}
