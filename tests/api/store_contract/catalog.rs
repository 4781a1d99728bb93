//! The catalog: each subject's and tenant's sessions, newest first, paged
//! from a position; pruning; deleting a session with its entries and relay
//! ids, and never a running one.

use switchboard::store::{Deleted, Deletion, ListPosition, ListScope, Listed, Listing};

use super::*;

contract!(
    a_created_session_is_listed_for_its_subject_and_its_tenant_newest_first,
    pages_go_on_from_a_position_and_new_sessions_do_not_shift_them,
    unlisted_entries_are_gone_from_the_list_only,
    a_stopped_session_is_deleted_with_its_entries_and_relay_ids,
    a_running_session_is_not_deleted,
    another_tenants_lists_are_apart,
);

fn subject(tenant: &str, subject: &str) -> ListScope {
    ListScope::Subject { tenant: tenant.into(), subject: subject.into() }
}

fn listing(subject: &str, created_ms: u64) -> Listing {
    Listing { subject: subject.to_string(), created_ms }
}

/// Creates `key` for `owner` at `created_ms`, in `status`, listed; owned
/// by `a#1` unless idle.
async fn create_listed(store: &Store, key: &SessionKey, owner: &str, created_ms: u64, status: &'static str) {
    let mut commit = Commit::new(key.clone(), Fence::Absent, "api");
    if status != "idle" {
        commit.owner = OwnerChange::Acquire("a#1".into());
    }
    commit.state = state(&format!("{{\"id\":\"{}\"}}", key.id), status);
    commit.events = numbered(1, 2);
    commit.messages = MessagesWrite::Append(vec!["m1".into()]);
    commit.listing = Some(listing(owner, created_ms));
    commit_one(store, commit).await.expect("the session is created");
}

async fn list(store: &Store, scope: &ListScope, before: Option<&ListPosition>, limit: usize) -> Vec<Listed> {
    store.catalog.list(scope, before, limit).await.expect("listing works")
}

fn ids(listed: &[Listed]) -> Vec<&str> {
    listed.iter().map(|l| l.position.id.as_str()).collect()
}

async fn a_created_session_is_listed_for_its_subject_and_its_tenant_newest_first(backend: Backend) {
    let h = backend.open();
    for (id, owner, at) in [("s1", "alice", 100), ("s2", "alice", 300), ("s3", "bob", 200), ("s4", "alice", 200)] {
        create_listed(&h.store, &key("acme", id), owner, at, "idle").await;
    }
    let alice = list(&h.store, &subject("acme", "alice"), None, 10).await;
    assert_eq!(ids(&alice), ["s2", "s4", "s1"]);
    assert_eq!(alice[0].position, ListPosition { created_ms: 300, id: "s2".into() });
    assert_eq!(alice[0].doc.as_deref(), Some(r#"{"id":"s2"}"#), "each entry comes with its session's state");
    assert_eq!(ids(&list(&h.store, &subject("acme", "bob"), None, 10).await), ["s3"]);
    let tenant = list(&h.store, &ListScope::Tenant("acme".into()), None, 10).await;
    assert_eq!(ids(&tenant), ["s2", "s4", "s3", "s1"], "creation time, then id");
    assert!(list(&h.store, &subject("acme", "carol"), None, 10).await.is_empty());
}

async fn pages_go_on_from_a_position_and_new_sessions_do_not_shift_them(backend: Backend) {
    let h = backend.open();
    for n in 1..=5u64 {
        create_listed(&h.store, &key("acme", &format!("s{n}")), "alice", n * 10, "completed").await;
    }
    let scope = subject("acme", "alice");
    let first = list(&h.store, &scope, None, 2).await;
    assert_eq!(ids(&first), ["s5", "s4"]);
    let cursor = first[1].position.clone();
    let second = list(&h.store, &scope, Some(&cursor), 2).await;
    assert_eq!(ids(&second), ["s3", "s2"]);
    for n in 6..=8u64 {
        create_listed(&h.store, &key("acme", &format!("s{n}")), "alice", n * 10, "idle").await;
    }
    assert_eq!(ids(&list(&h.store, &scope, Some(&cursor), 2).await), ["s3", "s2"], "the same page");
    assert_eq!(ids(&list(&h.store, &scope, Some(&second[1].position), 2).await), ["s1"]);
    assert_eq!(ids(&list(&h.store, &scope, None, 2).await), ["s8", "s7"]);
}

async fn unlisted_entries_are_gone_from_the_list_only(backend: Backend) {
    let h = backend.open();
    create_listed(&h.store, &key("acme", "s1"), "alice", 10, "idle").await;
    create_listed(&h.store, &key("acme", "s2"), "alice", 20, "idle").await;
    let scope = subject("acme", "alice");
    let s1 = ListPosition { created_ms: 10, id: "s1".into() };
    h.store.catalog.unlist(&scope, std::slice::from_ref(&s1)).await.unwrap();
    assert_eq!(ids(&list(&h.store, &scope, None, 10).await), ["s2"]);
    assert_eq!(ids(&list(&h.store, &ListScope::Tenant("acme".into()), None, 10).await), ["s2", "s1"]);
    assert!(h.store.sessions.load(&key("acme", "s1"), false).await.unwrap().is_some(), "the session stays");
    h.store.catalog.unlist(&scope, &[]).await.unwrap();
}

async fn a_stopped_session_is_deleted_with_its_entries_and_relay_ids(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_listed(&h.store, &k, "alice", 10, "completed").await;
    create_listed(&h.store, &key("acme", "s2"), "alice", 20, "idle").await;
    h.store.relays.put_relay("relay_1", &k).await.unwrap();
    h.store.relays.put_relay("relay_other", &key("acme", "s2")).await.unwrap();
    // Completed and still owned: an owner making its title.
    let relay_ids = vec!["relay_1".into(), "relay_other".into()];
    let deletion = Deletion { listing: listing("alice", 10), relay_ids, owner: Some("a#1".into()) };
    assert!(h.store.replicas.owned("a#1", 10).await.unwrap().contains(&k));
    assert_eq!(h.store.catalog.delete(&k, &deletion).await, Ok(Deleted::Deleted));
    assert!(!h.store.replicas.owned("a#1", 10).await.unwrap().contains(&k), "the owner's set forgot it");
    assert_eq!(h.store.sessions.load(&k, true).await, Ok(None));
    let log = h.store.log.read_after(&k, 0, 10).await.unwrap();
    assert!(log.events.is_empty() && log.last_seq == 0, "{log:?}");
    assert_eq!(ids(&list(&h.store, &subject("acme", "alice"), None, 10).await), ["s2"]);
    assert_eq!(ids(&list(&h.store, &ListScope::Tenant("acme".into()), None, 10).await), ["s2"]);
    assert_eq!(h.store.relays.get_relay("acme", "relay_1").await, Ok(None));
    if matches!(backend, Backend::Memory) {
        // Redis deletes the ids it is given; the memory store only those
        // naming the session (the result is the same for relay ids the
        // session layer derives).
        assert!(h.store.relays.get_relay("acme", "relay_other").await.unwrap().is_some());
    }
    assert_eq!(h.store.catalog.delete(&k, &deletion).await, Ok(Deleted::Missing));
    // A session that is gone takes no followers (its state is not recreated).
    h.store.notifications.follow(&k, "b#1", true).await.unwrap();
    assert_eq!(h.store.sessions.load(&k, false).await, Ok(None));
}

async fn a_running_session_is_not_deleted(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_listed(&h.store, &k, "alice", 10, "running").await;
    let deletion = Deletion { listing: listing("alice", 10), relay_ids: vec![], owner: None };
    assert_eq!(h.store.catalog.delete(&k, &deletion).await, Ok(Deleted::Running("running".into())));
    assert!(h.store.sessions.load(&k, false).await.unwrap().is_some());
    assert_eq!(ids(&list(&h.store, &subject("acme", "alice"), None, 10).await), ["s1"]);
}

async fn another_tenants_lists_are_apart(backend: Backend) {
    let h = backend.open();
    create_listed(&h.store, &key("acme", "s1"), "alice", 10, "idle").await;
    create_listed(&h.store, &key("globex", "s1"), "alice", 20, "idle").await;
    let acme = list(&h.store, &subject("acme", "alice"), None, 10).await;
    assert_eq!((ids(&acme), acme[0].position.created_ms), (vec!["s1"], 10));
    let globex = list(&h.store, &ListScope::Tenant("globex".into()), None, 10).await;
    assert_eq!((ids(&globex), globex[0].position.created_ms), (vec!["s1"], 20));
    let deletion = Deletion { listing: listing("alice", 10), relay_ids: vec![], owner: None };
    h.store.catalog.delete(&key("acme", "s1"), &deletion).await.unwrap();
    assert_eq!(ids(&list(&h.store, &subject("globex", "alice"), None, 10).await), ["s1"]);
}
