//! The owner's plain appends (`SessionStore::write`): streamed events with
//! no script, numbered by the owner and fenced by the epoch in their ids.

use switchboard::store::{Append, SessionWrite, Wrote};

use super::*;

contract!(
    appends_continue_the_log_and_a_commit_after_them_continues_where_they_end,
    a_stale_owners_appends_after_a_takeover_are_all_refused_and_the_log_stays_gapless,
    an_append_sent_again_after_a_lost_answer_is_applied_once,
    a_commit_whose_appends_did_not_land_is_refused_and_writes_nothing,
    appends_to_a_deleted_session_are_refused_and_leave_nothing_behind,
    a_read_finds_its_cursor_in_any_tenure,
    appends_are_announced_when_asked_and_the_owner_hears_of_a_new_follower,
    while_it_runs_only_the_owner_appends_events,
    a_takeovers_read_has_the_events_after_the_checkpoint_when_they_are_few,
);

impl Tenure {
    /// The owner's appends of `from..=to` (not yet sent).
    fn appends(&self, from: u64, to: u64) -> Append {
        Append {
            instance: self.instance.as_str().into(),
            epoch: self.epoch,
            first_seq: from,
            events: numbered(from, to),
            announce: false,
        }
    }

    /// Writes `from..=to` as plain appends; the store must take them.
    async fn stream(&mut self, store: &Store, from: u64, to: u64) {
        let write = SessionWrite { key: self.key.clone(), append: Some(self.appends(from, to)), commit: None };
        assert_eq!(write_one(store, write).await, Ok(Wrote::default()));
        self.seq = to;
    }
}

async fn write_one(store: &Store, write: SessionWrite) -> Result<Wrote, CommitError> {
    store.sessions.write(std::slice::from_ref(&write)).await.remove(0)
}

/// The events' payloads after `after`, as numbers.
async fn payloads_after(store: &Store, key: &SessionKey, after: u64) -> Vec<u64> {
    let range = store.log.read_after(key, after, 100).await.expect("read_after works");
    range
        .events
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.payload).unwrap()["n"].as_u64().unwrap())
        .collect()
}

async fn appends_continue_the_log_and_a_commit_after_them_continues_where_they_end(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.append(&h.store, 1, 2).await;
    tenure.stream(&h.store, 3, 5).await;
    assert_eq!(load(&h.store, &k).await.last_seq, 5, "a read of the session sees where the appends end");
    // One round: more appends, then a transition after them.
    let mut commit = tenure.next();
    commit.fence = Fence::Owner { instance: "a#1".into(), epoch: 1, n: tenure.n, after: 7 };
    commit.events = numbered(8, 9);
    commit.state = state("after", "running");
    let write = SessionWrite { key: k.clone(), append: Some(tenure.appends(6, 7)), commit: Some(commit) };
    let wrote = write_one(&h.store, write).await.expect("the round is written");
    let committed = wrote.committed.expect("the commit's answer");
    assert_eq!((committed.first_seq, committed.last_seq), (8, 9));
    assert_eq!(seqs_after(&h.store, &k, 0, 100).await, (1..=9).collect::<Vec<_>>());
    assert_eq!(payloads_after(&h.store, &k, 0).await, (1..=9).collect::<Vec<_>>());
    let r = load(&h.store, &k).await;
    assert_eq!((r.last_seq, r.checkpoint_seq, r.doc.as_str()), (9, 9, "after"));
}

async fn a_stale_owners_appends_after_a_takeover_are_all_refused_and_the_log_stays_gapless(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut a = create_owned(&h.store, &k, "a#1").await;
    a.stream(&h.store, 1, 3).await;
    // b takes the session over (a was presumed dead) and writes nothing yet.
    let mut takeover = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    takeover.owner = OwnerChange::Acquire("b#1".into());
    takeover.state = state("taken", "running");
    assert_eq!(commit_one(&h.store, takeover).await.unwrap().epoch, 2);
    // a, not knowing, goes on appending, several rounds of them pipelined
    // together with another session's that must still land.
    let other = key("acme", "s2");
    let mut c = create_owned(&h.store, &other, "a#1").await;
    let stale = |from, to| SessionWrite { key: k.clone(), append: Some(a.appends(from, to)), commit: None };
    let rounds = [stale(4, 5), SessionWrite { key: other.clone(), append: Some(c.appends(1, 2)), commit: None }];
    let results = h.store.sessions.write(&rounds).await;
    assert_eq!(results[0], Err(CommitError::Conflict(Conflict::Fenced)), "{results:?}");
    assert_eq!(results[1], Ok(Wrote::default()), "another session's appends land");
    c.seq = 2;
    assert_eq!(write_one(&h.store, stale(6, 6)).await, Err(CommitError::Conflict(Conflict::Fenced)));
    // a's transition is fenced too.
    let mut late = a.next();
    late.events = numbered(4, 4);
    assert_eq!(commit_one(&h.store, late).await, Err(CommitError::Conflict(Conflict::Fenced)));
    // b goes on from 3: nothing of a's after the takeover is in the log.
    let mut b = Tenure { key: k.clone(), instance: "b#1".into(), epoch: 2, n: 0, seq: 3 };
    b.stream(&h.store, 4, 5).await;
    b.append(&h.store, 6, 6).await;
    assert_eq!(seqs_after(&h.store, &k, 0, 100).await, (1..=6).collect::<Vec<_>>());
    assert_eq!(payloads_after(&h.store, &k, 0).await, (1..=6).collect::<Vec<_>>());
    assert_eq!(load(&h.store, &k).await.last_seq, 6);
    assert_eq!(seqs_after(&h.store, &other, 0, 100).await, vec![1, 2]);
}

async fn an_append_sent_again_after_a_lost_answer_is_applied_once(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.stream(&h.store, 1, 2).await;
    // The same round again (its answer was lost), and one that landed in
    // part: both count as applied, nothing is written twice.
    tenure.stream(&h.store, 1, 2).await;
    tenure.stream(&h.store, 2, 4).await;
    // With its commit: the commit's number tells it was applied too.
    let mut commit = tenure.next();
    commit.fence = Fence::Owner { instance: "a#1".into(), epoch: 1, n: tenure.n, after: 6 };
    commit.events = numbered(7, 7);
    let write = SessionWrite { key: k.clone(), append: Some(tenure.appends(5, 6)), commit: Some(commit) };
    let first = write_one(&h.store, write.clone()).await.unwrap();
    let again = write_one(&h.store, write).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(payloads_after(&h.store, &k, 0).await, (1..=7).collect::<Vec<_>>());
}

async fn a_commit_whose_appends_did_not_land_is_refused_and_writes_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.stream(&h.store, 1, 2).await;
    // The owner believes seqs 3 and 4 are in (their appends failed).
    let mut commit = tenure.next();
    commit.fence = Fence::Owner { instance: "a#1".into(), epoch: 1, n: tenure.n, after: 4 };
    commit.events = numbered(5, 5);
    commit.state = state("too soon", "completed");
    let refused = commit_one(&h.store, commit.clone()).await;
    assert!(matches!(&refused, Err(CommitError::Store(StoreError::Unavailable(_)))), "{refused:?}");
    let r = load(&h.store, &k).await;
    assert_eq!((r.last_seq, r.version), (2, 1), "nothing written");
    // Sent again with its appends, as the writer does: all of it lands.
    let write = SessionWrite { key: k.clone(), append: Some(tenure.appends(3, 4)), commit: Some(commit) };
    assert!(write_one(&h.store, write).await.unwrap().committed.is_some());
    assert_eq!(payloads_after(&h.store, &k, 0).await, (1..=5).collect::<Vec<_>>());
}

async fn appends_to_a_deleted_session_are_refused_and_leave_nothing_behind(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.stream(&h.store, 1, 1).await;
    let mut end = tenure.next();
    end.owner = OwnerChange::Release;
    end.state = state("done", "completed");
    commit_one(&h.store, end).await.unwrap();
    let listing = switchboard::store::Listing { subject: "alice".into(), created_ms: 1 };
    let deletion = switchboard::store::Deletion { listing, relay_ids: vec![], owner: None };
    h.store.catalog.delete(&k, &deletion).await.expect("the session is deleted");
    // A late append of its last owner (which could not happen after its own
    // end, but an owner presumed dead could be late by that much).
    let late = SessionWrite { key: k.clone(), append: Some(tenure.appends(2, 3)), commit: None };
    assert_eq!(write_one(&h.store, late).await, Err(CommitError::Conflict(Conflict::Fenced)));
    assert_eq!(h.store.sessions.load(&k, false).await, Ok(None));
    let range = h.store.log.read_after(&k, 0, 10).await.unwrap();
    assert_eq!((range.events.len(), range.last_seq), (0, 0), "no log made again");
}

async fn a_read_finds_its_cursor_in_any_tenure(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut a = create_owned(&h.store, &k, "a#1").await;
    a.stream(&h.store, 1, 3).await;
    // Three more tenures: one that writes nothing, two that write.
    let mut at = 3;
    for (instance, epoch, writes) in [("b#1", 2, 0), ("c#1", 3, 2), ("d#1", 4, 3)] {
        let mut takeover = Commit::new(k.clone(), unchanged(&h.store, &k).await, instance);
        takeover.owner = OwnerChange::Acquire(instance.into());
        assert_eq!(commit_one(&h.store, takeover).await.unwrap().epoch, epoch);
        let mut tenure = Tenure { key: k.clone(), instance: instance.into(), epoch, n: 0, seq: at };
        if writes > 0 {
            tenure.stream(&h.store, at + 1, at + writes).await;
            at += writes;
        }
    }
    assert_eq!(at, 8);
    for after in 0..=8 {
        assert_eq!(payloads_after(&h.store, &k, after).await, (after + 1..=8).collect::<Vec<_>>(), "after {after}");
        assert_eq!(seqs_after(&h.store, &k, after, 2).await, (after + 1..=8).take(2).collect::<Vec<_>>());
    }
    let range = h.store.log.read_after(&k, 8, 10).await.unwrap();
    assert_eq!((range.events.len(), range.first_seq, range.last_seq), (0, 1, 8));
}

async fn appends_are_announced_when_asked_and_the_owner_hears_of_a_new_follower(backend: Backend) {
    let mut h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a").await;
    h.store.notifications.listen("a").await.unwrap();
    h.store.notifications.watch(&k).await.unwrap();
    // The owner following its own session is no news to it.
    h.store.notifications.follow(&k, "a", true).await.unwrap();
    // Not asked: not announced.
    tenure.stream(&h.store, 1, 1).await;
    h.store.notifications.follow(&k, "b", true).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Followed { key: k.clone() });
    // A second follow of the same instance is not news either.
    h.store.notifications.follow(&k, "b", true).await.unwrap();
    let mut announced = tenure.appends(2, 3);
    announced.announce = true;
    let write = SessionWrite { key: k.clone(), append: Some(announced), commit: None };
    write_one(&h.store, write).await.unwrap();
    let heard = next_notice(&mut h.notices).await;
    assert_eq!(heard, Notice::Appended { key: k.clone(), last_seq: 3, by: Some("a".into()) }, "seq 1 unannounced");
    // Nothing to append: the announcement of where the log ends alone.
    let mut alone = tenure.appends(4, 3);
    alone.events.clear();
    alone.announce = true;
    let write = SessionWrite { key: k.clone(), append: Some(alone), commit: None };
    write_one(&h.store, write).await.unwrap();
    assert_eq!(next_notice(&mut h.notices).await, Notice::Appended { key: k, last_seq: 3, by: Some("a".into()) });
}

async fn while_it_runs_only_the_owner_appends_events(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.stream(&h.store, 1, 1).await;
    // A request's commit that keeps the owner may not put events in: their
    // seqs are the owner's to give.
    let mut intruder = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    intruder.events = numbered(2, 2);
    assert_eq!(commit_one(&h.store, intruder).await, Err(CommitError::Conflict(Conflict::Changed)));
    // Without events it may (a change of the document between steps).
    let mut quiet = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    quiet.state = state("changed", "running");
    commit_one(&h.store, quiet).await.expect("a commit without events");
    tenure.stream(&h.store, 2, 2).await;
    assert_eq!(seqs_after(&h.store, &k, 0, 10).await, vec![1, 2]);
}

async fn a_takeovers_read_has_the_events_after_the_checkpoint_when_they_are_few(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.append(&h.store, 1, 2).await;
    let mut commit = tenure.next();
    commit.state = state("checkpoint", "running");
    commit_one(&h.store, commit).await.unwrap();
    let tail = |loaded: Option<switchboard::store::Loaded>| {
        let loaded = loaded.expect("the session is there");
        assert_eq!(loaded.record.checkpoint_seq, 2);
        assert!(loaded.record.messages.is_some(), "with its conversation");
        loaded.tail.map(|events| events.iter().map(|e| e.seq).collect::<Vec<_>>())
    };
    // Nothing after the checkpoint yet: an empty tail.
    assert_eq!(tail(h.store.sessions.load_with_tail(&k, 4).await.unwrap()), Some(vec![]));
    // The step in progress: plain appends after it, in the read.
    tenure.stream(&h.store, 3, 6).await;
    let loaded = h.store.sessions.load_with_tail(&k, 4).await.unwrap();
    assert_eq!(loaded.as_ref().unwrap().record.last_seq, 6);
    assert_eq!(tail(loaded), Some(vec![3, 4, 5, 6]));
    assert_eq!(h.store.sessions.load_with_tail(&k, 4).await.unwrap().unwrap().tail.unwrap()[0].payload, r#"{"n":3}"#);
    // More than asked for: none, the caller pages.
    tenure.stream(&h.store, 7, 7).await;
    assert_eq!(tail(h.store.sessions.load_with_tail(&k, 4).await.unwrap()), None);
    assert_eq!(h.store.sessions.load_with_tail(&key("acme", "nope"), 4).await, Ok(None));
}
