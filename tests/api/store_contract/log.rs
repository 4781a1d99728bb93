//! The event log (gapless seqs, cursors, limits, fencing, trimming, batches
//! for many sessions), tenant isolation and the relay index.

use super::*;

contract!(
    appends_get_gapless_sequence_numbers,
    read_after_returns_exactly_the_events_after_the_cursor,
    read_after_honours_the_limit,
    an_unknown_log_reads_as_empty,
    one_append_call_writes_batches_for_three_sessions,
    an_append_by_a_non_holder_is_fenced_and_spares_the_other_batches,
    an_empty_batch_appends_nothing,
    the_log_is_trimmed_to_its_max_len,
    another_tenant_sees_nothing,
    the_relay_index_resolves_a_relay_id_to_its_session,
);

async fn appends_get_gapless_sequence_numbers(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    append_numbered(&h.store, &k, 1, 1).await;
    append_numbered(&h.store, &k, 2, 4).await;
    append_numbered(&h.store, &k, 5, 9).await;
    let range = h.store.log.read_after(&k, 0, 100).await.unwrap();
    assert_eq!((range.first_seq, range.last_seq), (1, 9));
    let payloads: Vec<String> = range.events.into_iter().map(|e| e.payload).collect();
    assert_eq!(payloads, numbered(1, 9));
}

async fn read_after_returns_exactly_the_events_after_the_cursor(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    append_numbered(&h.store, &k, 1, 10).await;
    for after in [0, 1, 5, 9, 10, 15] {
        let expected: Vec<u64> = (after + 1..=10).collect();
        assert_eq!(seqs_after(&h.store, &k, after, 100).await, expected, "after {after}");
    }
    let range = h.store.log.read_after(&k, 4, 1).await.unwrap();
    assert_eq!(range.events[0].payload, r#"{"n":5}"#);
    assert_eq!((range.first_seq, range.last_seq), (1, 10));
}

async fn read_after_honours_the_limit(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    append_numbered(&h.store, &k, 1, 10).await;
    assert_eq!(seqs_after(&h.store, &k, 0, 3).await, [1, 2, 3]);
    assert_eq!(seqs_after(&h.store, &k, 3, 3).await, [4, 5, 6]);
    assert_eq!(seqs_after(&h.store, &k, 8, 3).await, [9, 10]);
    assert_eq!(seqs_after(&h.store, &k, 0, 0).await, Vec::<u64>::new());
}

async fn an_unknown_log_reads_as_empty(backend: Backend) {
    let h = backend.open();
    let range = h.store.log.read_after(&key("acme", "nope"), 0, 10).await.unwrap();
    assert_eq!((range.events.len(), range.first_seq, range.last_seq), (0, 0, 0));
}

async fn one_append_call_writes_batches_for_three_sessions(backend: Backend) {
    let h = backend.open();
    let keys = [key("acme", "s1"), key("acme", "s2"), key("globex", "s3")];
    for k in &keys {
        create_owned(&h.store, k, "a").await;
    }
    append_numbered(&h.store, &keys[1], 1, 2).await;
    let results = h
        .store
        .log
        .append(&[
            batch(&keys[0], "a", ["s1-1"]),
            batch(&keys[1], "a", ["s2-3", "s2-4"]),
            batch(&keys[2], "a", ["s3-1", "s3-2", "s3-3"]),
        ])
        .await;
    assert_eq!(results, vec![Ok((1, 1)), Ok((3, 4)), Ok((1, 3))]);
    assert_eq!(seqs_after(&h.store, &keys[0], 0, 10).await, [1]);
    assert_eq!(seqs_after(&h.store, &keys[1], 0, 10).await, [1, 2, 3, 4]);
    let third = h.store.log.read_after(&keys[2], 0, 10).await.unwrap();
    let payloads: Vec<&str> = third.events.iter().map(|e| e.payload.as_str()).collect();
    assert_eq!(payloads, ["s3-1", "s3-2", "s3-3"]);
}

async fn an_append_by_a_non_holder_is_fenced_and_spares_the_other_batches(backend: Backend) {
    let h = backend.open();
    let held = key("acme", "held");
    let free = key("acme", "free");
    let ours = key("acme", "ours");
    create_owned(&h.store, &held, "a").await;
    h.store.state.create(&free, "{}", LeaseOp::None).await.unwrap();
    create_owned(&h.store, &ours, "b").await;
    let results =
        h.store.log.append(&[batch(&held, "b", ["x"]), batch(&ours, "b", ["y", "z"]), batch(&free, "b", ["w"])]).await;
    assert_eq!(results, vec![Err(StoreError::NotLeaseholder), Ok((1, 2)), Err(StoreError::NotLeaseholder)]);
    for fenced in [&held, &free] {
        let range = h.store.log.read_after(fenced, 0, 10).await.unwrap();
        assert_eq!((range.events.len(), range.last_seq), (0, 0));
    }
    assert_eq!(seqs_after(&h.store, &ours, 0, 10).await, [1, 2]);
}

async fn an_empty_batch_appends_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    append_numbered(&h.store, &k, 1, 2).await;
    assert_eq!(h.store.log.append(&[batch(&k, "a", [])]).await, vec![Ok((0, 0))]);
    assert_eq!(h.store.log.append(&[]).await, vec![]);
    append_numbered(&h.store, &k, 3, 3).await;
}

async fn the_log_is_trimmed_to_its_max_len(backend: Backend) {
    let h = backend.open_with_max_len(5);
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await;
    append_numbered(&h.store, &k, 1, 4).await;
    append_numbered(&h.store, &k, 5, 8).await;
    append_numbered(&h.store, &k, 9, 12).await;
    let range = h.store.log.read_after(&k, 0, 100).await.unwrap();
    assert_eq!((range.first_seq, range.last_seq), (8, 12));
    let seqs: Vec<u64> = range.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [8, 9, 10, 11, 12]);
    // A cursor past retention is visible to the caller: after + 1 < first_seq.
    let behind = h.store.log.read_after(&k, 3, 100).await.unwrap();
    assert_eq!((behind.first_seq, behind.events[0].seq), (8, 8));
    append_numbered(&h.store, &k, 13, 13).await;
}

async fn another_tenant_sees_nothing(backend: Backend) {
    let h = backend.open();
    let ours = key("acme", "s1");
    let theirs = key("globex", "s1");
    create_owned(&h.store, &ours, "a").await;
    append_numbered(&h.store, &ours, 1, 3).await;
    assert_eq!(h.store.state.load(&theirs).await, Ok(None));
    let range = h.store.log.read_after(&theirs, 0, 10).await.unwrap();
    assert_eq!((range.events.len(), range.first_seq, range.last_seq), (0, 0, 0));
    assert_eq!(h.store.leases.owner(&theirs).await, Ok(None));
    assert_eq!(h.store.log.append(&[batch(&theirs, "a", ["x"])]).await, vec![Err(StoreError::NotLeaseholder)]);
    // The relay index names the exact session; the service checks its tenant.
    h.store.relays.put_relay("r-1", &ours).await.unwrap();
    assert_eq!(h.store.relays.get_relay("r-1").await, Ok(Some(ours.clone())));
}

async fn the_relay_index_resolves_a_relay_id_to_its_session(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.relays.put_relay("relay-1", &k).await.unwrap();
    h.store.relays.put_relay("relay-2", &key("globex", "s9")).await.unwrap();
    assert_eq!(h.store.relays.get_relay("relay-1").await, Ok(Some(k)));
    assert_eq!(h.store.relays.get_relay("relay-2").await, Ok(Some(key("globex", "s9"))));
    assert_eq!(h.store.relays.get_relay("unknown").await, Ok(None));
}
