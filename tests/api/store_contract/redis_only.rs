//! Redis only: what the memory store cannot have — an outage at start-up,
//! reconnection of the subscription, backoff, the connections ending with
//! the store, and scripts reloaded after a SCRIPT FLUSH.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use tokio::{
    net::{TcpListener, TcpStream},
    time::timeout,
};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};

use super::*;

#[tokio::test]
async fn a_redis_store_opens_while_redis_is_down_and_reports_it_unavailable() {
    // Nothing listens on port 1.
    opens_while_nothing_answers(RedisTarget::Node("redis://127.0.0.1:1".to_string())).await;
}

/// A store of `target`, where nothing answers, opens; every call is
/// `Unavailable`, and a watch only registers (no notice yet).
pub(super) async fn opens_while_nothing_answers(target: RedisTarget) {
    let mut h = open_store(Some(target), 100);
    let k = key("acme", "s1");
    assert!(matches!(h.store.health.ping().await, Err(StoreError::Unavailable(_))));
    assert!(matches!(h.store.sessions.load(&k, true).await, Err(StoreError::Unavailable(_))));
    let commits = [Commit::new(k.clone(), Fence::Absent, "a"), Commit::new(key("acme", "s2"), Fence::Absent, "a")];
    let results = h.store.sessions.commit(&commits).await;
    assert!(results.iter().all(|r| matches!(r, Err(CommitError::Store(StoreError::Unavailable(_))))), "{results:?}");
    // Watching only registers while the subscription is down.
    let watched = timeout(Duration::from_secs(5), h.store.notifications.watch(&k)).await;
    assert_eq!(watched.expect("watch answers while the store is down"), Ok(()));
    assert!(h.notices.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscription_reconnects_resubscribes_and_announces_it() {
    let proxy = Proxy::start().await;
    let mut h = open_store(Some(RedisTarget::Node(proxy.url())), 100);
    let k = key("acme", "s1");
    let tenure = create_owned(&h.store, &k, "a").await;
    h.store.notifications.watch(&k).await.unwrap();
    h.store.notifications.follow(&k, "b", true).await.unwrap();

    proxy.cut_connections();
    // Nothing else was published meanwhile, so the first notice is this one.
    let first = timeout(Duration::from_secs(10), h.notices.recv()).await;
    assert_eq!(first.expect("a notice within 10 s"), Some(Notice::Resubscribed));
    // The connection may still be the cut one: retry until it heals (the
    // same commit number each time: one that went through is answered again).
    let mut commit =
        Commit::new(k.clone(), Fence::Owner { instance: tenure.instance.clone(), epoch: 1, n: 1, after: 0 }, "a");
    commit.events = vec!["x".into()];
    eventually("a commit goes through again", || async { commit_one(&h.store, commit.clone()).await.is_ok() }).await;
    assert!(matches!(
        next_notice(&mut h.notices).await,
        Notice::Appended { key, .. } if key == k
    ));
}

#[tokio::test]
async fn the_subscription_backs_off_while_redis_refuses_it() {
    let proxy = Proxy::start().await;
    proxy.refuse(true);
    let h = open_store(Some(RedisTarget::Node(proxy.url())), 100);
    sleep(Duration::from_secs(2)).await;
    // 100 + 200 + 400 + 800 ms of backoff: about five attempts in two seconds.
    let attempts = proxy.accepted();
    assert!((1..=7).contains(&attempts), "{attempts} connection attempts");
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_redis_store_closes_its_connections() {
    let proxy = Proxy::start().await;
    let h = open_store(Some(RedisTarget::Node(proxy.url())), 100);
    h.store.health.ping().await.unwrap();
    h.store.notifications.watch(&key("acme", "s1")).await.unwrap();
    assert!(proxy.live() >= 2, "a command and a subscription connection");
    drop(h);
    eventually("every connection is closed", || async { proxy.live() == 0 }).await;
}

/// A TCP proxy in front of the test Redis that can cut its connections or
/// refuse new ones, and counts them.
struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
    _task: AbortOnDropHandle<()>,
}

#[derive(Default)]
struct ProxyState {
    accepted: AtomicUsize,
    live: AtomicUsize,
    refuse: AtomicBool,
    cut: Mutex<CancellationToken>,
}

impl Proxy {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = redis_url().trim_start_matches("redis://").trim_end_matches('/').to_string();
        let state = Arc::new(ProxyState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                if shared.refuse.load(Ordering::SeqCst) {
                    continue;
                }
                let cut = shared.cut.lock().unwrap().clone();
                let shared = shared.clone();
                let upstream = upstream.clone();
                shared.live.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cut.cancelled() => {}
                        }
                    }
                    shared.live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self { port, state, _task: AbortOnDropHandle::new(task) }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cut_connections(&self) {
        let mut cut = self.state.cut.lock().unwrap();
        cut.cancel();
        *cut = CancellationToken::new();
    }

    fn refuse(&self, refuse: bool) {
        self.state.refuse.store(refuse, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    fn live(&self) -> usize {
        self.state.live.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn commits_load_the_script_again_after_a_script_flush() {
    let h = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let keys = [key("acme", "s1"), key("acme", "s2")];
    let mut tenures = Vec::new();
    for k in &keys {
        let mut tenure = create_owned(&h.store, k, "a").await;
        tenure.append(&h.store, 1, 1).await;
        tenures.push(tenure);
    }
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(&mut conn).await.unwrap();
    let mut commits: Vec<Commit> = tenures.iter_mut().map(Tenure::next).collect();
    commits[0].events = vec!["x".into()];
    commits[1].fence = Fence::Owner { instance: "b".into(), epoch: 1, n: 2, after: 0 };
    let results = h.store.sessions.commit(&commits).await;
    assert!(matches!(results[0], Ok(Committed { first_seq: 2, last_seq: 2, .. })), "{results:?}");
    assert_eq!(results[1], Err(CommitError::Conflict(Conflict::Fenced)));
    assert_eq!(seqs_after(&h.store, &keys[0], 0, 10).await, [1, 2]);
}

/// The TTL of each of `key`'s keys in Redis (`-2`: the key does not exist).
async fn ttls(prefix: &str, key: &SessionKey) -> Vec<i64> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut out = Vec::new();
    for suffix in ["state", "msgs", "events", "ws", "blobs"] {
        out.push(redis::cmd("PTTL").arg(session_key(prefix, key, suffix)).query_async(&mut conn).await.unwrap());
    }
    out
}

/// The Redis key of `key`'s `suffix` (`state`, `msgs`, `events`, `ws`, `blobs`).
fn session_key(prefix: &str, key: &SessionKey, suffix: &str) -> String {
    format!("{prefix}{{t:{}:s:{}}}:{suffix}", key.tenant, key.id)
}

/// A workspace write of one new file.
fn one_file() -> switchboard::store::WorkspaceWrite {
    let content = bytes::Bytes::from_static(b"print(1)\n");
    let entry = switchboard::workspace::entry_of(&content, 0o644);
    switchboard::store::WorkspaceWrite {
        blobs: vec![(entry.digest.clone(), content)],
        set: vec![("a.py".into(), entry)],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_commit_that_writes_the_document_renews_every_key_the_session_has() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let k = key("acme", "s1");
    let mut tenure = create_owned(&store, &k, "a#1").await;
    let fresh = |ttl: i64| ttl > 50_000 && ttl <= 60_000;
    let [state_ttl, msgs, events, ws, blobs] = ttls(&prefix, &k).await[..] else { unreachable!() };
    assert!(fresh(state_ttl), "{state_ttl}");
    // No conversation or workspace yet: those keys do not exist. The log
    // does, empty, its top at the owner's epoch: the fence of its appends.
    assert!(fresh(events), "{events}");
    assert_eq!((msgs, ws, blobs), (-2, -2, -2));

    let mut with_file = tenure.next();
    with_file.state = state("two", "running");
    with_file.messages = MessagesWrite::Append(vec!["m1".into(), "m2".into()]);
    with_file.events = vec!["e1".into()];
    with_file.workspace = Some(one_file());
    commit_one(&store, with_file).await.unwrap();
    let ttls = ttls(&prefix, &k).await;
    assert!(ttls.iter().all(|t| fresh(*t)), "every key of the session renewed: {ttls:?}");
    let record = load(&store, &k).await;
    assert_eq!(record.message_count, 2);

    // A replaced conversation counts what it holds now.
    let mut replace = tenure.next();
    replace.state = state("three", "running");
    replace.messages = MessagesWrite::Replace(vec!["summary".into()]);
    commit_one(&store, replace).await.unwrap();
    assert_eq!(load(&store, &k).await.message_count, 1);
}

#[tokio::test]
async fn a_commit_told_not_to_renew_leaves_the_keys_expiry_and_the_next_renews_it() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let k = key("acme", "s1");
    let mut tenure = create_owned(&store, &k, "a#1").await;
    // `suffix`'s keys as if renewed long ago: 5 s left of the TTL's 60.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut age = async |suffixes: &[&str]| {
        for suffix in suffixes {
            let name = session_key(&prefix, &k, suffix);
            let _: i64 = redis::cmd("PEXPIRE").arg(name).arg(5_000).query_async(&mut conn).await.unwrap();
        }
    };
    age(&["state", "events"]).await;
    let short = |ttl: i64| ttl > 0 && ttl <= 5_000;
    let fresh = |ttl: i64| ttl > 50_000 && ttl <= 60_000;

    // A turn's end the writer knows renewed moments before: the document,
    // messages, events and a file are written, the expiry of the keys there
    // is left as it was; the keys the commit made (the conversation, the
    // workspace) get theirs, or they would outlive the session.
    let mut end = tenure.next();
    end.state = state("done", "completed");
    end.messages = MessagesWrite::Append(vec!["m1".into()]);
    end.events = vec!["e1".into()];
    end.workspace = Some(one_file());
    end.owner = OwnerChange::Release;
    end.renew = false;
    commit_one(&store, end).await.unwrap();
    let [state_ttl, msgs, events, ws, blobs] = ttls(&prefix, &k).await[..] else { unreachable!() };
    assert!(short(state_ttl) && short(events), "{state_ttl} {events}");
    assert!(fresh(msgs) && fresh(ws) && fresh(blobs), "new keys expire: {msgs} {ws} {blobs}");
    let record = load(&store, &k).await;
    assert_eq!((record.doc.as_str(), record.owner, record.message_count, record.last_seq), ("done", None, 1, 1));

    // Another that does not renew, on keys that have an expiry: it stays.
    age(&["msgs", "ws", "blobs"]).await;
    let mut more = Commit::new(k.clone(), unchanged(&store, &k).await, "a#1");
    more.state = state("more", "completed");
    more.messages = MessagesWrite::Append(vec!["m2".into()]);
    more.renew = false;
    commit_one(&store, more).await.unwrap();
    let ttls_now = ttls(&prefix, &k).await;
    assert!(ttls_now.iter().all(|t| short(*t)), "no expiry renewed: {ttls_now:?}");

    // The next commit that may renew does: every key's expiry is the TTL.
    let mut again = Commit::new(k.clone(), unchanged(&store, &k).await, "a#1");
    again.state = state("again", "completed");
    commit_one(&store, again).await.unwrap();
    let ttls_now = ttls(&prefix, &k).await;
    assert!(ttls_now.iter().all(|t| fresh(*t)), "every key renewed: {ttls_now:?}");
}

#[tokio::test]
async fn a_session_created_over_an_old_log_of_its_id_begins_its_tenure_above_it() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let k = key("acme", "s1");
    // The log of a gone session of that id, last written in its third
    // tenure (the session's keys expire one by one).
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let stream = format!("{prefix}{{t:acme:s:s1}}:events");
    let _: String =
        redis::cmd("XADD").arg(&stream).arg("3-7").arg("e").arg("old").query_async(&mut conn).await.unwrap();

    let mut create = Commit::new(k.clone(), Fence::Absent, "a#1");
    create.owner = OwnerChange::Acquire("a#1".into());
    create.state = state("one", "running");
    create.events = vec!["e1".into()];
    let committed = commit_one(&store, create).await.expect("the session is created");
    assert_eq!((committed.epoch, committed.first_seq, committed.last_seq), (4, 8, 8));
    assert_eq!(seqs_after(&store, &k, 7, 10).await, [8]);
}

/// A session whose id was made here (`Fence::New`) is created with plain
/// commands in one `MULTI` instead of the commit script: every key holds
/// what the script writes for the same creation (the state hash field by
/// field, the conversation, the log's ids and entries, an expiry on each),
/// the answer is the same, and the session goes on as any other: its
/// owner's commits follow, a takeover fences them.
#[tokio::test]
async fn a_session_whose_id_was_made_here_is_created_as_the_commit_script_creates_it() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let conn = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let creation = |k: &SessionKey, fence: Fence| {
        let mut create = Commit::new(k.clone(), fence, "a#1");
        create.owner = OwnerChange::Acquire("a#1".into());
        create.state = state(r#"{"doc":"one"}"#, "running");
        create.messages = MessagesWrite::Append(vec!["m1".into(), "m2".into()]);
        create.events = numbered(1, 3);
        create.open_relays = vec!["r1".into()];
        create.turn_start = true;
        create
    };
    let (scripted, plain) = (key("acme", "scripted"), key("acme", "plain"));
    let by_script = commit_one(&store, creation(&scripted, Fence::Absent)).await.expect("the script creates it");
    let by_commands = commit_one(&store, creation(&plain, Fence::New)).await.expect("the commands create it");
    assert_eq!(by_commands, by_script);
    assert_eq!((by_commands.version, by_commands.epoch, by_commands.first_seq, by_commands.last_seq), (1, 1, 1, 3));

    let hash = |k: &SessionKey| {
        let name = session_key(&prefix, k, "state");
        let mut conn = conn.clone();
        async move {
            let fields: std::collections::BTreeMap<String, String> =
                redis::cmd("HGETALL").arg(name).query_async(&mut conn).await.unwrap();
            fields
        }
    };
    let (script_hash, plain_hash) = (hash(&scripted).await, hash(&plain).await);
    assert_eq!(plain_hash, script_hash);
    assert_eq!(plain_hash.get("eps").map(String::as_str), Some("1:1;"));
    for suffix in ["msgs", "events"] {
        let read = |k: &SessionKey| {
            let name = session_key(&prefix, k, suffix);
            let mut conn = conn.clone();
            async move {
                let dumped: redis::Value = match suffix {
                    "msgs" => redis::cmd("LRANGE").arg(name).arg(0).arg(-1).query_async(&mut conn).await.unwrap(),
                    _ => redis::cmd("XRANGE").arg(name).arg("-").arg("+").query_async(&mut conn).await.unwrap(),
                };
                dumped
            }
        };
        assert_eq!(read(&plain).await, read(&scripted).await, "{suffix}");
    }
    let fresh = |ttl: i64| ttl > 50_000 && ttl <= 60_000;
    let plain_ttls = ttls(&prefix, &plain).await;
    assert!(plain_ttls[..3].iter().all(|t| fresh(*t)) && plain_ttls[3..] == [-2, -2], "{plain_ttls:?}");
    assert_eq!(ttls(&prefix, &scripted).await[3..], [-2, -2]);
    assert_eq!(load(&store, &plain).await, load(&store, &scripted).await);

    // The owner's commits go on from it; a takeover fences them.
    let mut tenure = Tenure { key: plain.clone(), instance: "a#1".into(), epoch: 1, n: 0, seq: 3 };
    tenure.append(&store, 4, 5).await;
    let mut takeover = Commit::new(plain.clone(), unchanged(&store, &plain).await, "b#1");
    takeover.owner = OwnerChange::Acquire("b#1".into());
    assert_eq!(commit_one(&store, takeover).await.expect("taken over").epoch, 2);
    let mut stale = tenure.next();
    stale.events = numbered(6, 6);
    assert!(matches!(commit_one(&store, stale).await, Err(CommitError::Conflict(Conflict::Fenced))));
    assert_eq!(seqs_after(&store, &plain, 0, 10).await, [1, 2, 3, 4, 5]);
}

/// Builds before the bucketed indexes kept one `owned:<instance>` set and
/// one `orphans` set: a replica of such a build that dies during a rolling
/// upgrade is still found, taken over and forgotten.
#[tokio::test]
async fn the_one_set_indexes_of_older_builds_are_still_swept() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (owned, orphan) = (key("acme", "old-owned"), key("acme", "old-orphan"));
    let _: () = redis::pipe()
        .cmd("SADD")
        .arg(format!("{prefix}owned:old#1"))
        .arg(owned.to_member())
        .ignore()
        .cmd("SADD")
        .arg(format!("{prefix}orphans"))
        .arg(orphan.to_member())
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    // Known, and dead already (a lapsed beat within the same millisecond
    // would still count as alive, and never be forgotten).
    store.replicas.leave("old#1").await.unwrap();

    assert_eq!(store.replicas.owned("old#1", 10).await.unwrap(), vec![owned.clone()]);
    assert_eq!(store.replicas.orphans(10).await.unwrap(), vec![orphan.clone()]);
    store.replicas.disown("old#1", std::slice::from_ref(&owned)).await.unwrap();
    store.replicas.adopted(&orphan).await.unwrap();
    assert!(store.replicas.owned("old#1", 10).await.unwrap().is_empty());
    assert!(store.replicas.orphans(10).await.unwrap().is_empty());
    // Owning nothing any more, the old replica is forgotten.
    let dead: Vec<String> = store.replicas.dead(10).await.unwrap();
    assert!(!dead.contains(&"old#1".to_string()), "{dead:?}");
}

/// Relay ids and resume hints an older build wrote (one key per id,
/// `relay:<id>`, before the tenant's tag) are still found, by their own
/// tenant only, and deleted with their session.
#[tokio::test]
async fn the_relay_index_of_older_builds_is_still_read_for_its_tenant() {
    use switchboard::store::{Deleted, Deletion, Listing};
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let mut conn = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let k = key("acme", "s1");
    create_idle(&store, &k).await;
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}relay:relay_old"))
        .arg(k.to_member())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.relays.get_relay("acme", "relay_old").await, Ok(Some(k.clone())));
    assert_eq!(store.relays.get_relay("globex", "relay_old").await, Ok(None));

    let deletion = Deletion {
        listing: Listing { subject: "alice".into(), created_ms: 1 },
        relay_ids: vec!["relay_old".into()],
        owner: None,
    };
    assert_eq!(store.catalog.delete(&k, &deletion).await, Ok(Deleted::Deleted));
    assert_eq!(store.relays.get_relay("acme", "relay_old").await, Ok(None));
    let left: i64 = redis::cmd("EXISTS").arg(format!("{prefix}relay:relay_old")).query_async(&mut conn).await.unwrap();
    assert_eq!(left, 0);
}

/// `store.wait_replicas` where no replica answers (the test Redis and the
/// test cluster have none): a commit, a relay decision and a cancel request
/// are applied on the primary but not acknowledged, and a retry finds each
/// done rather than doing it twice.
async fn writes_wait_for_replicas_that_are_not_there(target: RedisTarget) {
    let mut config = store_config(Some(target), 100);
    config.wait_replicas = 1;
    config.wait_replicas_timeout = Duration::from_millis(50);
    let h = open_config(config);
    let k = key("acme", "s1");
    let mut create = Commit::new(k.clone(), Fence::Absent, "a#1");
    create.owner = OwnerChange::Acquire("a#1".into());
    create.state = state("{}", "running");
    create.open_relays = vec!["r1".into()];
    let refused = commit_one(&h.store, create).await;
    assert!(matches!(&refused, Err(CommitError::Store(StoreError::Unavailable(e))) if e.contains("not acknowledged")));
    assert_eq!(load(&h.store, &k).await.version, 1, "applied on the primary");
    // An owner's commit, retried as the writer does: applied once.
    let mut tenure = Tenure { key: k.clone(), instance: "a#1".into(), epoch: 1, n: 0, seq: 0 };
    let mut append = tenure.next();
    append.events = numbered(1, 2);
    for _ in 0..2 {
        let refused = commit_one(&h.store, append.clone()).await;
        assert!(matches!(&refused, Err(CommitError::Store(StoreError::Unavailable(_)))), "{refused:?}");
    }
    assert_eq!(seqs_after(&h.store, &k, 0, 10).await, vec![1, 2]);

    let decided = h.store.sessions.decide(&k, "r1", "yes").await;
    assert!(matches!(&decided, Err(StoreError::Unavailable(e)) if e.contains("relay decision")), "{decided:?}");
    use switchboard::store::{CancelRequest, Decided};
    assert_eq!(h.store.sessions.decide(&k, "r1", "yes").await, Ok(Decided::AlreadyDecided));
    assert_eq!(load(&h.store, &k).await.relays, vec![("r1".to_string(), Some("yes".to_string()))]);

    let cancel = h.store.sessions.request_cancel(&k).await;
    assert!(matches!(&cancel, Err(StoreError::Unavailable(e)) if e.contains("cancel request")), "{cancel:?}");
    assert!(load(&h.store, &k).await.cancel_requested);
    // A decision or a cancel that changes nothing waits for nothing.
    assert_eq!(h.store.sessions.decide(&k, "r9", "no").await, Ok(Decided::AlreadyDecided));
    let missing = h.store.sessions.request_cancel(&key("acme", "nope")).await;
    assert_eq!(missing, Ok(CancelRequest::Missing));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_replicas_one_redis_acknowledges_no_write_no_replica_holds() {
    writes_wait_for_replicas_that_are_not_there(RedisTarget::Node(redis_url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_replicas_a_cluster_acknowledges_no_write_no_replica_holds() {
    writes_wait_for_replicas_that_are_not_there(RedisTarget::Cluster(redis_cluster_seeds())).await;
}

/// A log an older build wrote (ids `0-<seq>`, its end in the state's `seq`)
/// is read and taken over by this one: its tenure's ids are above every
/// old one, and reads from any cursor cross from the old ids to the new.
#[tokio::test]
async fn a_log_of_an_older_build_is_read_and_continued() {
    let Harness { store, prefix, notices: _notices } = open_store(Some(RedisTarget::Node(redis_url())), 100);
    let k = key("acme", "old");
    let tag = format!("{prefix}{{t:{}:s:{}}}", k.tenant, k.id);
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut old = redis::pipe();
    old.cmd("HSET")
        .arg(format!("{tag}:state"))
        .arg(&["v", "1", "doc", "{}", "st", "running", "own", "old#1", "ep", "1", "cn", "1", "seq", "3", "ck", "3"])
        .ignore();
    for (seq, payload) in numbered(1, 3).iter().enumerate() {
        old.cmd("XADD").arg(format!("{tag}:events")).arg(format!("0-{}", seq + 1)).arg("e").arg(payload).ignore();
    }
    let _: () = old.query_async(&mut conn).await.unwrap();
    assert_eq!(load(&store, &k).await.last_seq, 3);
    assert_eq!(seqs_after(&store, &k, 1, 10).await, vec![2, 3]);

    // Taken over by this build (the old replica died).
    let mut takeover = Commit::new(k.clone(), unchanged(&store, &k).await, "new#1");
    takeover.owner = OwnerChange::Acquire("new#1".into());
    takeover.events = numbered(4, 4);
    let committed = commit_one(&store, takeover).await.unwrap();
    assert_eq!((committed.epoch, committed.first_seq), (2, 4));
    let mut tenure = Tenure { key: k.clone(), instance: "new#1".into(), epoch: 2, n: 0, seq: 4 };
    let append = switchboard::store::Append {
        instance: tenure.instance.as_str().into(),
        epoch: 2,
        first_seq: 5,
        events: numbered(5, 6),
        announce: false,
    };
    let write = switchboard::store::SessionWrite { key: k.clone(), append: Some(append), commit: None };
    store.sessions.write(&[write]).await.remove(0).unwrap();
    tenure.seq = 6;
    tenure.append(&store, 7, 7).await;
    for after in 0..=7 {
        assert_eq!(seqs_after(&store, &k, after, 10).await, (after + 1..=7).collect::<Vec<_>>(), "after {after}");
    }
    // The old replica, not knowing, appends as its build did: refused.
    let late: redis::RedisResult<String> =
        redis::cmd("XADD").arg(format!("{tag}:events")).arg("0-8").arg("e").arg("late").query_async(&mut conn).await;
    assert!(late.is_err());
    assert_eq!(load(&store, &k).await.last_seq, 7);
}
