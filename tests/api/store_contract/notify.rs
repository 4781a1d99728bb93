//! Notifications (appends and wakes heard by watchers, counted watching)
//! and health.

use super::*;

contract!(
    a_watcher_hears_appends,
    a_watcher_hears_wakes,
    after_unwatch_appends_are_not_heard,
    watching_is_counted,
    the_store_is_healthy,
);

async fn a_watcher_hears_appends(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    h.store.notifications.watch(&k).await.unwrap();
    append_numbered(&h.store, &k, 1, 3).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k.clone(), 3));
    append_numbered(&h.store, &k, 4, 4).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k, 4));
}

async fn a_watcher_hears_wakes(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.wake(&k).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Wake { key: k });
}

async fn after_unwatch_appends_are_not_heard(backend: Backend) {
    let mut h = backend.open();
    let gone = key("acme", "gone");
    let kept = key("acme", "kept");
    create_owned(&h.store, &gone, "a").await;
    create_owned(&h.store, &kept, "a").await;
    h.store.notifications.watch(&gone).await.unwrap();
    h.store.notifications.watch(&kept).await.unwrap();
    h.store.notifications.unwatch(&gone).await.unwrap();
    append_numbered(&h.store, &gone, 1, 1).await;
    h.store.notifications.wake(&gone).await.unwrap();
    append_numbered(&h.store, &kept, 1, 2).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(kept, 2));
}

async fn watching_is_counted(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let marker = key("acme", "marker");
    create_owned(&h.store, &k, "a").await;
    create_owned(&h.store, &marker, "a").await;
    h.store.notifications.watch(&marker).await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.unwatch(&k).await.unwrap();
    append_numbered(&h.store, &k, 1, 1).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(k.clone(), 1));
    h.store.notifications.unwatch(&k).await.unwrap();
    // Unwatching more often than watching is harmless.
    h.store.notifications.unwatch(&k).await.unwrap();
    append_numbered(&h.store, &k, 2, 2).await;
    append_numbered(&h.store, &marker, 1, 1).await;
    assert_eq!(next_notice(&mut h.notices).await, appended(marker, 1));
}

async fn the_store_is_healthy(backend: Backend) {
    let h = backend.open();
    assert_eq!(h.store.health.ping().await, Ok(()));
}

/// The notice of an append by replica `a` (every append here is `a`'s): the
/// appending replica is named, so it can skip its own notices.
fn appended(key: SessionKey, last_seq: u64) -> Notice {
    Notice::Appended { key, last_seq, by: Some("a".to_string()) }
}
