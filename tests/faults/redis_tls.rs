//! The store over TLS: a redis-server (and a three-primary Redis Cluster)
//! of the test's own with a private CA that checks client certificates
//! (Redis's default), reached at `rediss://` with `[store.tls]`. The store
//! speaks to it (commands and the subscription) only with the CA and the
//! client certificate; the real binary streams a turn across two replicas
//! through one Redis.

use std::time::Duration;

use switchboard::{
    config::{RedisTarget, RedisTls},
    store::{CancelRequest, Commit, Fence, Notice, OwnerChange, SessionKey, StateWrite, StoreError},
};

use crate::harness::{
    checks::{self, Expect},
    cluster::{Cluster, ClusterOptions},
    redis::OwnRedis,
    redis_cluster::OwnRedisCluster,
    store::open,
    tls::Certificates,
};

const WORDS: u32 = 40;
const TURN_TIMEOUT: Duration = Duration::from_secs(30);

fn read(path: String) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_speaks_tls_with_a_private_ca_and_a_client_certificate_and_nothing_less() {
    let redis = OwnRedis::start_tls().await;
    let plain = redis.tls_url().replace("rediss://", "redis://");
    speaks_tls_only(redis.certificates(), RedisTarget::Node(redis.tls_url()), RedisTarget::Node(plain)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_speaks_tls_with_a_private_ca_and_a_client_certificate_and_nothing_less() {
    let cluster = OwnRedisCluster::start_tls(3, 0).await;
    let plain = cluster.seeds().iter().map(|seed| seed.replace("rediss://", "redis://")).collect();
    speaks_tls_only(cluster.certificates(), RedisTarget::Cluster(cluster.seeds()), RedisTarget::Cluster(plain)).await;
}

/// A store of `target` with the CA and the client certificate commits,
/// reads and hears a wake-up; without either, or in plain text (`plain`),
/// it is refused.
async fn speaks_tls_only(certs: &Certificates, target: RedisTarget, plain: RedisTarget) {
    let ca = read(certs.path("ca.pem"));
    let client = (read(certs.path("client.pem")), read(certs.path("client.key")));
    let full = RedisTls { ca: Some(ca.clone()), client: Some(client.clone()) };

    let (store, _, mut notices) = open(target.clone(), full);
    store.health.ping().await.expect("PING over TLS");
    // A write, read back; a cancel request's wake-up heard on the
    // subscription (its own TLS connection).
    let key = SessionKey::new("acme", "s1");
    let mut create = Commit::new(key.clone(), Fence::Absent, "b#1");
    create.owner = OwnerChange::Acquire("b#1".into());
    create.state = Some(StateWrite { doc: "{}".into(), status: "running" });
    create.events = vec!["{\"n\":1}".into()];
    store.sessions.commit(std::slice::from_ref(&create)).await.remove(0).expect("a commit over TLS");
    let record = store.sessions.load(&key, false).await.unwrap().expect("the session");
    assert_eq!((record.owner.as_deref(), record.last_seq), (Some("b#1"), 1));
    store.notifications.watch(&key).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            // Asked again until heard: the subscription may still be connecting.
            assert_eq!(store.sessions.request_cancel(&key).await, Ok(CancelRequest::Recorded));
            match tokio::time::timeout(Duration::from_millis(200), notices.recv()).await {
                Ok(Some(Notice::Wake { key: k })) if k == key => return,
                _ => continue,
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "the cancel request's wake-up within 5 s");

    // Nothing less is let through: no client certificate, the system's
    // roots instead of the CA, or plain text to the TLS port.
    let refused = [
        ("no client certificate", target.clone(), RedisTls { ca: Some(ca), client: None }),
        ("the system's roots", target, RedisTls { ca: None, client: Some(client) }),
        ("plain text", plain, RedisTls::default()),
    ];
    for (what, target, tls) in refused {
        let (store, _, _notices) = open(target, tls);
        let answer = store.health.ping().await;
        assert!(matches!(answer, Err(StoreError::Unavailable(_))), "{what}: {answer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_started_on_one_replica_streams_from_another_over_tls() {
    let cluster = Cluster::start(ClusterOptions {
        replicas: 2,
        redis_tls: true,
        chunk_delay: Duration::from_millis(10),
        ..ClusterOptions::default()
    })
    .await;
    // Created on a, its turn started on b: both replicas read and write the
    // session over TLS.
    let session = cluster.create_session(0).await;
    let content = format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple());
    let follower = cluster.start_and_follow(1, &session, &content, TURN_TIMEOUT).await;
    let transcript = follower.finish().await;
    let failures = checks::turn(&transcript, &Expect { cursor: 0, words: WORDS });
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
