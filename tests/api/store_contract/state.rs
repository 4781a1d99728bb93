//! State documents and leases: versions, compare-and-set, lease operations,
//! expiry, renewal and the lease index.

use super::*;

contract!(
    a_created_session_loads_back_at_version_one,
    a_missing_session_loads_as_nothing,
    creating_an_existing_session_is_a_version_conflict,
    cas_with_the_current_version_writes_the_next_one,
    cas_with_a_stale_version_is_refused_and_the_doc_is_unchanged,
    cas_on_a_missing_session_is_a_version_conflict,
    of_ten_concurrent_cas_on_one_version_exactly_one_is_written,
    a_version_conflict_is_reported_before_a_lease_conflict,
    a_held_lease_refuses_another_replica_and_writes_nothing,
    the_holder_can_acquire_again_and_require_its_lease,
    require_by_a_non_holder_is_a_lease_conflict,
    release_frees_the_lease_for_another_replica,
    an_expired_lease_is_listed_and_can_be_taken_over,
    renew_extends_the_holders_lease_only,
    forget_drops_a_session_from_the_lease_index,
);

async fn a_created_session_loads_back_at_version_one(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    assert_eq!(h.store.state.create(&k, r#"{"a":1}"#, LeaseOp::None).await, Ok(WriteOutcome::Written(1)));
    assert_eq!(h.store.state.load(&k).await, Ok(Some(Versioned { version: 1, doc: r#"{"a":1}"#.to_string() })));
}

async fn a_missing_session_loads_as_nothing(backend: Backend) {
    let h = backend.open();
    assert_eq!(h.store.state.load(&key("acme", "nope")).await, Ok(None));
}

async fn creating_an_existing_session_is_a_version_conflict(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.state.create(&k, "first", LeaseOp::None).await.unwrap();
    assert_eq!(h.store.state.create(&k, "second", LeaseOp::None).await, Ok(WriteOutcome::VersionConflict));
    let loaded = h.store.state.load(&k).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.doc.as_str()), (1, "first"));
}

async fn cas_with_the_current_version_writes_the_next_one(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.state.create(&k, "v1", LeaseOp::None).await.unwrap();
    assert_eq!(h.store.state.compare_and_set(&k, 1, "v2", LeaseOp::None).await, Ok(WriteOutcome::Written(2)));
    assert_eq!(h.store.state.compare_and_set(&k, 2, "v3", LeaseOp::None).await, Ok(WriteOutcome::Written(3)));
    let loaded = h.store.state.load(&k).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.doc.as_str()), (3, "v3"));
}

async fn cas_with_a_stale_version_is_refused_and_the_doc_is_unchanged(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.state.create(&k, "v1", LeaseOp::None).await.unwrap();
    h.store.state.compare_and_set(&k, 1, "v2", LeaseOp::None).await.unwrap();
    assert_eq!(h.store.state.compare_and_set(&k, 1, "stale", LeaseOp::None).await, Ok(WriteOutcome::VersionConflict));
    assert_eq!(h.store.state.compare_and_set(&k, 3, "ahead", LeaseOp::None).await, Ok(WriteOutcome::VersionConflict));
    let loaded = h.store.state.load(&k).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.doc.as_str()), (2, "v2"));
}

async fn cas_on_a_missing_session_is_a_version_conflict(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "nope");
    for expected in [0, 1] {
        assert_eq!(
            h.store.state.compare_and_set(&k, expected, "x", LeaseOp::None).await,
            Ok(WriteOutcome::VersionConflict)
        );
    }
    assert_eq!(h.store.state.load(&k).await, Ok(None));
}

async fn of_ten_concurrent_cas_on_one_version_exactly_one_is_written(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.state.create(&k, "v1", LeaseOp::None).await.unwrap();
    let writers: Vec<_> = (0..10)
        .map(|n| {
            let store = h.store.clone();
            let k = k.clone();
            tokio::spawn(async move { store.state.compare_and_set(&k, 1, &format!("writer {n}"), LeaseOp::None).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for writer in writers {
        outcomes.push(writer.await.unwrap().unwrap());
    }
    let written = outcomes.iter().filter(|o| **o == WriteOutcome::Written(2)).count();
    let refused = outcomes.iter().filter(|o| **o == WriteOutcome::VersionConflict).count();
    assert_eq!((written, refused), (1, 9), "{outcomes:?}");
    assert_eq!(h.store.state.load(&k).await.unwrap().unwrap().version, 2);
}

async fn a_version_conflict_is_reported_before_a_lease_conflict(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    assert_eq!(h.store.state.compare_and_set(&k, 7, "x", require("b")).await, Ok(WriteOutcome::VersionConflict));
}

async fn a_held_lease_refuses_another_replica_and_writes_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("a".to_string())));
    assert_eq!(h.store.state.compare_and_set(&k, 1, "by b", acquire("b")).await, Ok(WriteOutcome::LeaseConflict));
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("a".to_string())));
    let loaded = h.store.state.load(&k).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.doc.as_str()), (1, "{}"));
}

async fn the_holder_can_acquire_again_and_require_its_lease(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    assert_eq!(h.store.state.compare_and_set(&k, 1, "again", acquire("a")).await, Ok(WriteOutcome::Written(2)));
    assert_eq!(h.store.state.compare_and_set(&k, 2, "fenced", require("a")).await, Ok(WriteOutcome::Written(3)));
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("a".to_string())));
}

async fn require_by_a_non_holder_is_a_lease_conflict(backend: Backend) {
    let h = backend.open();
    let held = key("acme", "held");
    create_owned(&h.store, &held, "a").await;
    assert_eq!(h.store.state.compare_and_set(&held, 1, "x", require("b")).await, Ok(WriteOutcome::LeaseConflict));
    let free = key("acme", "free");
    h.store.state.create(&free, "{}", LeaseOp::None).await.unwrap();
    assert_eq!(h.store.state.compare_and_set(&free, 1, "x", require("b")).await, Ok(WriteOutcome::LeaseConflict));
    assert_eq!(h.store.leases.owner(&free).await, Ok(None));
    assert_eq!(h.store.state.load(&held).await.unwrap().unwrap().version, 1);
    assert_eq!(h.store.state.load(&free).await.unwrap().unwrap().version, 1);
}

async fn release_frees_the_lease_for_another_replica(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    assert_eq!(h.store.state.compare_and_set(&k, 1, "x", release("b")).await, Ok(WriteOutcome::LeaseConflict));
    assert_eq!(h.store.state.compare_and_set(&k, 1, "released", release("a")).await, Ok(WriteOutcome::Written(2)));
    assert_eq!(h.store.leases.owner(&k).await, Ok(None));
    // Releasing a free lease is fine.
    assert_eq!(h.store.state.compare_and_set(&k, 2, "still free", release("b")).await, Ok(WriteOutcome::Written(3)));
    assert_eq!(h.store.state.compare_and_set(&k, 3, "b's", acquire("b")).await, Ok(WriteOutcome::Written(4)));
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("b".to_string())));
}

async fn an_expired_lease_is_listed_and_can_be_taken_over(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let fresh = key("acme", "fresh");
    create_owned(&h.store, &fresh, "c").await;
    assert_eq!(
        h.store.state.create(&k, "{}", acquire_for("a", Duration::from_millis(300))).await,
        Ok(WriteOutcome::Written(1))
    );
    assert_eq!(h.store.state.compare_and_set(&k, 1, "x", acquire("b")).await, Ok(WriteOutcome::LeaseConflict));

    eventually("the lease index lists the session", || async {
        h.store.leases.expired(10).await.unwrap() == vec![k.clone()]
    })
    .await;
    eventually("the lease has no owner", || async { h.store.leases.owner(&k).await.unwrap().is_none() }).await;
    assert_eq!(h.store.state.compare_and_set(&k, 1, "b's", acquire("b")).await, Ok(WriteOutcome::Written(2)));
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("b".to_string())));
    assert_eq!(h.store.leases.expired(10).await, Ok(vec![]));
}

async fn renew_extends_the_holders_lease_only(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    assert_eq!(
        h.store.state.create(&k, "{}", acquire_for("a", Duration::from_millis(300))).await,
        Ok(WriteOutcome::Written(1))
    );
    assert_eq!(h.store.leases.renew(&k, "b", Duration::from_secs(10)).await, Ok(false));
    assert_eq!(h.store.leases.renew(&k, "a", Duration::from_secs(10)).await, Ok(true));
    // Past the original 300 ms the lease and its index entry still stand.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(h.store.leases.owner(&k).await, Ok(Some("a".to_string())));
    assert_eq!(h.store.leases.expired(10).await, Ok(vec![]));
    assert_eq!(h.store.leases.renew(&key("acme", "none"), "a", Duration::from_secs(10)).await, Ok(false));
}

async fn forget_drops_a_session_from_the_lease_index(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    assert_eq!(
        h.store.state.create(&k, "{}", acquire_for("a", Duration::from_millis(50))).await,
        Ok(WriteOutcome::Written(1))
    );
    eventually("the lease index lists the session", || async {
        h.store.leases.expired(10).await.unwrap() == vec![k.clone()]
    })
    .await;
    h.store.leases.forget(&k).await.unwrap();
    assert_eq!(h.store.leases.expired(10).await, Ok(vec![]));
}
