//! The event log (gapless seqs, cursors, limits, trimming) and the relay
//! index.

use super::*;

contract!(
    appends_get_gapless_sequence_numbers,
    read_after_returns_exactly_the_events_after_the_cursor,
    read_after_honours_the_limit,
    an_unknown_log_reads_as_empty,
    the_log_is_trimmed_to_its_max_len,
    the_relay_index_resolves_a_relay_id_to_its_session,
);

async fn appends_get_gapless_sequence_numbers(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    tenure.append(&h.store, 1, 1).await;
    tenure.append(&h.store, 2, 4).await;
    tenure.append(&h.store, 5, 9).await;
    let range = h.store.log.read_after(&k, 0, 100).await.unwrap();
    assert_eq!((range.first_seq, range.last_seq), (1, 9));
    let payloads: Vec<String> = range.events.into_iter().map(|e| e.payload).collect();
    assert_eq!(payloads, numbered(1, 9));
}

async fn read_after_returns_exactly_the_events_after_the_cursor(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a").await.append(&h.store, 1, 10).await;
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
    create_owned(&h.store, &k, "a").await.append(&h.store, 1, 10).await;
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

async fn the_log_is_trimmed_to_its_max_len(backend: Backend) {
    let h = backend.open_with_max_len(5);
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    tenure.append(&h.store, 1, 4).await;
    tenure.append(&h.store, 5, 8).await;
    tenure.append(&h.store, 9, 12).await;
    let range = h.store.log.read_after(&k, 0, 100).await.unwrap();
    assert_eq!((range.first_seq, range.last_seq), (8, 12));
    let seqs: Vec<u64> = range.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [8, 9, 10, 11, 12]);
    // A cursor past retention is visible to the caller: after + 1 < first_seq.
    let behind = h.store.log.read_after(&k, 3, 100).await.unwrap();
    assert_eq!((behind.first_seq, behind.events[0].seq), (8, 8));
    tenure.append(&h.store, 13, 13).await;
}

async fn the_relay_index_resolves_a_relay_id_to_its_session(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    h.store.relays.put_relay("relay-1", &k).await.unwrap();
    h.store.relays.put_relay("relay-2", &key("globex", "s9")).await.unwrap();
    assert_eq!(h.store.relays.get_relay("acme", "relay-1").await, Ok(Some(k.clone())));
    assert_eq!(h.store.relays.get_relay("globex", "relay-2").await, Ok(Some(key("globex", "s9"))));
    assert_eq!(h.store.relays.get_relay("acme", "unknown").await, Ok(None));
    // A tenant finds only its own: the same id of two tenants names two sessions.
    assert_eq!(h.store.relays.get_relay("globex", "relay-1").await, Ok(None));
    h.store.relays.put_relay("relay-1", &key("globex", "s9")).await.unwrap();
    assert_eq!(h.store.relays.get_relay("acme", "relay-1").await, Ok(Some(k)));
    assert_eq!(h.store.relays.get_relay("globex", "relay-1").await, Ok(Some(key("globex", "s9"))));
}
