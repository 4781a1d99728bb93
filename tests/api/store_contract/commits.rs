//! Commits: a session's state, conversation and events written together or
//! not at all, under each fence; the inbox (relay decisions, cancel
//! requests); tenant isolation.

use super::*;

contract!(
    a_created_session_loads_back_with_its_owner_and_tenure,
    a_missing_session_loads_as_nothing,
    creating_an_existing_session_is_refused_and_changes_nothing,
    a_session_whose_id_was_made_here_reads_back_as_any_created_one,
    a_commit_writes_state_messages_and_events_together,
    loading_without_history_leaves_the_messages_out,
    a_replace_rewrites_the_conversation,
    an_events_only_commit_keeps_the_version_and_the_checkpoint,
    a_command_on_a_stale_read_is_refused_and_writes_nothing,
    of_ten_concurrent_commands_on_one_read_exactly_one_is_applied,
    a_former_owners_commit_is_fenced_and_writes_nothing,
    an_owner_commit_sent_twice_is_applied_once,
    an_owner_commit_that_skips_a_number_is_fenced,
    a_released_active_session_is_an_orphan_until_acquired,
    a_live_relay_takes_exactly_one_decision,
    a_cancel_request_is_recorded_for_a_running_session_only,
    the_start_of_a_turns_stream_is_recorded,
    one_call_commits_for_three_sessions_independently,
    another_tenant_sees_nothing,
);

async fn a_created_session_loads_back_with_its_owner_and_tenure(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a#1").await;
    let r = load(&h.store, &k).await;
    assert_eq!((r.version, r.epoch, r.last_seq, r.message_count), (1, 1, 0, 0));
    assert_eq!(r.owner.as_deref(), Some("a#1"));
    assert_eq!(r.doc, r#"{"doc":1}"#);
    assert_eq!(r.messages, Some(vec![]));
    assert!(!r.cancel_requested && r.relays.is_empty());
}

async fn a_missing_session_loads_as_nothing(backend: Backend) {
    let h = backend.open();
    assert_eq!(h.store.sessions.load(&key("acme", "nope"), true).await, Ok(None));
}

async fn creating_an_existing_session_is_refused_and_changes_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_owned(&h.store, &k, "a#1").await;
    let mut again = Commit::new(k.clone(), Fence::Absent, "b#1");
    again.owner = OwnerChange::Acquire("b#1".into());
    again.state = state("second", "running");
    again.events = numbered(1, 1);
    assert_eq!(commit_one(&h.store, again).await, Err(CommitError::Conflict(Conflict::Exists)));
    let r = load(&h.store, &k).await;
    assert_eq!((r.doc.as_str(), r.owner.as_deref(), r.last_seq), (r#"{"doc":1}"#, Some("a#1"), 0));
}

/// A creation fenced `New` (an id this replica made: the Redis store
/// writes it without its script) leaves the session a creation fenced
/// `Absent` leaves, and its owner's commits follow as they would.
async fn a_session_whose_id_was_made_here_reads_back_as_any_created_one(backend: Backend) {
    let h = backend.open();
    let creation = |k: &SessionKey, fence: Fence| {
        let mut create = Commit::new(k.clone(), fence, "a#1");
        create.owner = OwnerChange::Acquire("a#1".into());
        create.state = state("one", "running");
        create.messages = MessagesWrite::Append(vec!["m1".into()]);
        create.events = numbered(1, 2);
        create.open_relays = vec!["r1".into()];
        create.turn_start = true;
        create
    };
    let (checked, made) = (key("acme", "checked"), key("acme", "made"));
    let first = commit_one(&h.store, creation(&checked, Fence::Absent)).await.unwrap();
    assert_eq!(commit_one(&h.store, creation(&made, Fence::New)).await, Ok(first));
    assert_eq!(load(&h.store, &made).await, load(&h.store, &checked).await);
    assert_eq!(load(&h.store, &made).await.turn_start_seq, 0);
    let mut tenure = Tenure { key: made.clone(), instance: "a#1".into(), epoch: 1, n: 0, seq: 2 };
    tenure.append(&h.store, 3, 4).await;
    assert_eq!(seqs_after(&h.store, &made, 0, 10).await, [1, 2, 3, 4]);
}

async fn a_commit_writes_state_messages_and_events_together(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    let mut commit = tenure.next();
    commit.state = state("doc2", "awaiting_relay");
    commit.messages = MessagesWrite::Append(vec!["m1".into(), "m2".into()]);
    commit.events = numbered(1, 3);
    let committed = commit_one(&h.store, commit).await.unwrap();
    assert_eq!(committed, Committed { version: 2, epoch: 1, first_seq: 1, last_seq: 3, followed_elsewhere: false });
    let mut commit = tenure.next();
    commit.messages = MessagesWrite::Append(vec!["m3".into()]);
    commit.state = state("doc3", "running");
    commit_one(&h.store, commit).await.unwrap();
    let r = load(&h.store, &k).await;
    assert_eq!((r.version, r.doc.as_str(), r.last_seq, r.checkpoint_seq), (3, "doc3", 3, 3));
    assert_eq!(r.messages, Some(vec!["m1".to_string(), "m2".into(), "m3".into()]));
    assert_eq!(r.message_count, 3);
    assert_eq!(seqs_after(&h.store, &k, 0, 10).await, [1, 2, 3]);
}

async fn loading_without_history_leaves_the_messages_out(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    let mut commit = tenure.next();
    commit.messages = MessagesWrite::Append(vec!["m1".into()]);
    commit.state = state("doc", "running");
    commit_one(&h.store, commit).await.unwrap();
    let r = h.store.sessions.load(&k, false).await.unwrap().unwrap();
    assert_eq!((r.messages, r.message_count), (None, 1));
}

async fn a_replace_rewrites_the_conversation(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    let mut commit = tenure.next();
    commit.messages = MessagesWrite::Append(numbered(1, 5));
    commit.state = state("doc", "running");
    commit_one(&h.store, commit).await.unwrap();
    let mut commit = tenure.next();
    commit.messages = MessagesWrite::Replace(vec!["summary".into(), "last".into()]);
    commit.state = state("doc", "running");
    commit_one(&h.store, commit).await.unwrap();
    let r = load(&h.store, &k).await;
    assert_eq!((r.messages, r.message_count), (Some(vec!["summary".to_string(), "last".into()]), 2));
}

async fn an_events_only_commit_keeps_the_version_and_the_checkpoint(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.append(&h.store, 1, 4).await;
    let r = load(&h.store, &k).await;
    assert_eq!((r.version, r.doc.as_str(), r.last_seq, r.checkpoint_seq), (1, r#"{"doc":1}"#, 4, 0));
}

async fn a_command_on_a_stale_read_is_refused_and_writes_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_idle(&h.store, &k).await;
    let stale = unchanged(&h.store, &k).await;
    let mut first = Commit::new(k.clone(), stale.clone(), "api");
    first.state = state("first", "running");
    first.events = numbered(1, 1);
    commit_one(&h.store, first).await.unwrap();
    let mut second = Commit::new(k.clone(), stale, "api");
    second.state = state("second", "running");
    second.events = numbered(2, 2);
    second.messages = MessagesWrite::Append(vec!["m".into()]);
    assert_eq!(commit_one(&h.store, second).await, Err(CommitError::Conflict(Conflict::Changed)));
    let r = load(&h.store, &k).await;
    assert_eq!((r.doc.as_str(), r.last_seq, r.message_count), ("first", 1, 0));
    // A session that is not there is changed too.
    let missing = Fence::Unchanged { version: 1, owner: None, epoch: 0, last_seq: 0 };
    let absent = Commit::new(key("acme", "nope"), missing, "api");
    assert_eq!(commit_one(&h.store, absent).await, Err(CommitError::Conflict(Conflict::Changed)));
}

async fn of_ten_concurrent_commands_on_one_read_exactly_one_is_applied(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_idle(&h.store, &k).await;
    let fence = unchanged(&h.store, &k).await;
    let attempts = (0..10).map(|i| {
        let (store, k, fence) = (h.store.clone(), k.clone(), fence.clone());
        tokio::spawn(async move {
            let mut commit = Commit::new(k, fence, format!("r{i}#1"));
            commit.owner = OwnerChange::Acquire(format!("r{i}#1"));
            commit.state = state(&format!("by {i}"), "running");
            commit.events = vec![format!("started by {i}")];
            commit_one(&store, commit).await
        })
    });
    let results = futures::future::join_all(attempts).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(won, 1, "{results:?}");
    let r = load(&h.store, &k).await;
    assert_eq!((r.last_seq, r.epoch), (1, 1));
}

async fn a_former_owners_commit_is_fenced_and_writes_nothing(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut a = create_owned(&h.store, &k, "a#1").await;
    a.append(&h.store, 1, 2).await;
    let mut takeover = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    takeover.owner = OwnerChange::Acquire("b#1".into());
    takeover.state = state("taken", "running");
    assert_eq!(commit_one(&h.store, takeover).await.unwrap().epoch, 2);
    let mut late = a.next();
    late.events = numbered(3, 3);
    late.state = state("late", "completed");
    assert_eq!(commit_one(&h.store, late).await, Err(CommitError::Conflict(Conflict::Fenced)));
    let r = load(&h.store, &k).await;
    assert_eq!((r.doc.as_str(), r.last_seq, r.owner.as_deref()), ("taken", 2, Some("b#1")));
    // The new owner's tenure numbers its commits from 1.
    let mut b = Tenure { key: k.clone(), instance: "b#1".into(), epoch: 2, n: 0, seq: 0 };
    b.append(&h.store, 3, 3).await;
}

async fn an_owner_commit_sent_twice_is_applied_once(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    let mut commit = tenure.next();
    commit.events = numbered(1, 3);
    commit.messages = MessagesWrite::Append(vec!["m".into()]);
    let first = commit_one(&h.store, commit.clone()).await.unwrap();
    let again = commit_one(&h.store, commit).await.unwrap();
    assert_eq!(first, again, "the repeat is answered as the first was");
    let r = load(&h.store, &k).await;
    assert_eq!((r.last_seq, r.message_count), (3, 1));
    tenure.append(&h.store, 4, 4).await;
}

async fn an_owner_commit_that_skips_a_number_is_fenced(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.n += 1;
    let mut skipped = tenure.next();
    skipped.events = numbered(1, 1);
    assert_eq!(commit_one(&h.store, skipped).await, Err(CommitError::Conflict(Conflict::Fenced)));
    assert_eq!(load(&h.store, &k).await.last_seq, 0);
}

async fn a_released_active_session_is_an_orphan_until_acquired(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    assert_eq!(h.store.replicas.owned("a#1", 10).await, Ok(vec![k.clone()]));
    let mut hand_off = tenure.next();
    hand_off.owner = OwnerChange::Release;
    commit_one(&h.store, hand_off).await.unwrap();
    let r = load(&h.store, &k).await;
    assert_eq!((r.owner, r.epoch), (None, 1));
    assert_eq!(h.store.replicas.orphans(10).await, Ok(vec![k.clone()]));
    assert_eq!(h.store.replicas.owned("a#1", 10).await, Ok(vec![]));
    let mut adopt = Commit::new(k.clone(), unchanged(&h.store, &k).await, "b#1");
    adopt.owner = OwnerChange::Acquire("b#1".into());
    assert_eq!(commit_one(&h.store, adopt).await.unwrap().epoch, 2);
    assert_eq!(h.store.replicas.orphans(10).await, Ok(vec![]));
    assert_eq!(h.store.replicas.owned("b#1", 10).await, Ok(vec![k.clone()]));
    // Ending a turn releases it without making it an orphan.
    let mut b = Tenure { key: k.clone(), instance: "b#1".into(), epoch: 2, n: 0, seq: 0 };
    let mut end = b.next();
    end.owner = OwnerChange::Release;
    end.state = state("done", "completed");
    commit_one(&h.store, end).await.unwrap();
    assert_eq!(h.store.replicas.orphans(10).await, Ok(vec![]));
    assert_eq!(h.store.replicas.owned("b#1", 10).await, Ok(vec![]));
}

async fn a_live_relay_takes_exactly_one_decision(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    let mut open = tenure.next();
    open.open_relays = vec!["r1".into(), "r2".into()];
    commit_one(&h.store, open).await.unwrap();
    assert_eq!(load(&h.store, &k).await.relays, vec![("r1".to_string(), None), ("r2".to_string(), None)]);
    use switchboard::store::Decided;
    assert_eq!(h.store.sessions.decide(&k, "r1", "yes").await, Ok(Decided::Recorded));
    assert_eq!(h.store.sessions.decide(&k, "r1", "no").await, Ok(Decided::AlreadyDecided));
    assert_eq!(h.store.sessions.decide(&k, "r9", "no").await, Ok(Decided::AlreadyDecided));
    assert_eq!(h.store.sessions.decide(&key("acme", "nope"), "r1", "no").await, Ok(Decided::Missing));
    let r = load(&h.store, &k).await;
    assert_eq!(r.relays, vec![("r1".to_string(), Some("yes".to_string())), ("r2".to_string(), None)]);
    let mut taken = tenure.next();
    taken.close_relays = vec!["r1".into()];
    commit_one(&h.store, taken).await.unwrap();
    assert_eq!(load(&h.store, &k).await.relays, vec![("r2".to_string(), None)]);
    assert_eq!(h.store.sessions.decide(&k, "r1", "again").await, Ok(Decided::AlreadyDecided));
}

async fn a_cancel_request_is_recorded_for_a_running_session_only(backend: Backend) {
    use switchboard::store::CancelRequest;
    let h = backend.open();
    let running = key("acme", "running");
    let idle = key("acme", "idle");
    let mut tenure = create_owned(&h.store, &running, "a#1").await;
    create_idle(&h.store, &idle).await;
    assert_eq!(h.store.sessions.request_cancel(&running).await, Ok(CancelRequest::Recorded));
    assert!(load(&h.store, &running).await.cancel_requested);
    assert_eq!(h.store.sessions.request_cancel(&idle).await, Ok(CancelRequest::NotRunning("idle".into())));
    assert_eq!(h.store.sessions.request_cancel(&key("acme", "nope")).await, Ok(CancelRequest::Missing));
    let mut taken = tenure.next();
    taken.clear_cancel = true;
    taken.state = state("cancelled", "cancelled");
    commit_one(&h.store, taken).await.unwrap();
    assert!(!load(&h.store, &running).await.cancel_requested);
}

async fn the_start_of_a_turns_stream_is_recorded(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    let mut tenure = create_owned(&h.store, &k, "a#1").await;
    tenure.append(&h.store, 1, 5).await;
    let mut start = tenure.next();
    start.turn_start = true;
    start.events = numbered(6, 7);
    commit_one(&h.store, start).await.unwrap();
    tenure.append(&h.store, 8, 9).await;
    assert_eq!(load(&h.store, &k).await.turn_start_seq, 5);
}

async fn one_call_commits_for_three_sessions_independently(backend: Backend) {
    let h = backend.open();
    let keys = [key("acme", "s1"), key("acme", "s2"), key("globex", "s3")];
    let mut tenures = Vec::new();
    for k in &keys {
        tenures.push(create_owned(&h.store, k, "a#1").await);
    }
    tenures[1].append(&h.store, 1, 2).await;
    let mut commits: Vec<Commit> = tenures.iter_mut().map(Tenure::next).collect();
    commits[0].events = vec!["s1-1".into()];
    commits[1].events = vec!["s2-3".into(), "s2-4".into()];
    // The third is not a's to write any more.
    commits[2].fence = Fence::Owner { instance: "z#9".into(), epoch: 1, n: 1, after: 0 };
    commits[2].events = vec!["s3-1".into()];
    let results = h.store.sessions.commit(&commits).await;
    assert!(matches!(results[0], Ok(Committed { first_seq: 1, last_seq: 1, .. })), "{results:?}");
    assert!(matches!(results[1], Ok(Committed { first_seq: 3, last_seq: 4, .. })), "{results:?}");
    assert_eq!(results[2], Err(CommitError::Conflict(Conflict::Fenced)));
    assert_eq!(seqs_after(&h.store, &keys[1], 0, 10).await, [1, 2, 3, 4]);
    assert_eq!(seqs_after(&h.store, &keys[2], 0, 10).await, Vec::<u64>::new());
    assert_eq!(h.store.sessions.commit(&[]).await, vec![]);
}

async fn another_tenant_sees_nothing(backend: Backend) {
    let h = backend.open();
    let ours = key("acme", "s1");
    let theirs = key("globex", "s1");
    let mut tenure = create_owned(&h.store, &ours, "a#1").await;
    tenure.append(&h.store, 1, 3).await;
    assert_eq!(h.store.sessions.load(&theirs, true).await, Ok(None));
    let range = h.store.log.read_after(&theirs, 0, 10).await.unwrap();
    assert_eq!((range.events.len(), range.first_seq, range.last_seq), (0, 0, 0));
    let mut foreign =
        Commit::new(theirs.clone(), Fence::Owner { instance: "a#1".into(), epoch: 1, n: 2, after: 0 }, "a#1");
    foreign.events = vec!["x".into()];
    assert_eq!(commit_one(&h.store, foreign).await, Err(CommitError::Conflict(Conflict::Fenced)));
    // The relay index is the tenant's own.
    h.store.relays.put_relay("r-1", &ours).await.unwrap();
    assert_eq!(h.store.relays.get_relay("acme", "r-1").await, Ok(Some(ours.clone())));
    assert_eq!(h.store.relays.get_relay("globex", "r-1").await, Ok(None));
}
