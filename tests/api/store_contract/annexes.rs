//! Annexes: documents kept beside a session under a name, each for its own
//! retention, another tenant's apart, gone with the session.

use switchboard::store::{Deleted, Deletion, Listing};

use super::*;

contract!(an_annex_reads_back_until_its_retention_ends, an_annex_is_the_sessions_own_and_goes_with_it,);

async fn an_annex_reads_back_until_its_retention_ends(backend: Backend) {
    let h = backend.open();
    let k = key("acme", "s1");
    create_idle(&h.store, &k).await;
    let annexes = &h.store.annexes;
    assert_eq!(annexes.get_annex(&k, "r0").await, Ok(None), "nothing kept yet");
    annexes.put_annex(&k, "r0", r#"{"input":"a: b"}"#, Duration::from_secs(60)).await.unwrap();
    annexes.put_annex(&k, "r7", "short", Duration::from_millis(50)).await.unwrap();
    assert_eq!(annexes.get_annex(&k, "r0").await, Ok(Some(r#"{"input":"a: b"}"#.into())));
    // A later value of the same name replaces it.
    annexes.put_annex(&k, "r0", "second", Duration::from_secs(60)).await.unwrap();
    assert_eq!(annexes.get_annex(&k, "r0").await, Ok(Some("second".into())));
    // The short one lapses on its own; the other stays.
    eventually("the short annex lapses", || async { annexes.get_annex(&k, "r7").await == Ok(None) }).await;
    assert_eq!(annexes.get_annex(&k, "r0").await, Ok(Some("second".into())));
}

async fn an_annex_is_the_sessions_own_and_goes_with_it(backend: Backend) {
    let h = backend.open();
    let (k, other) = (key("acme", "s1"), key("globex", "s1"));
    create_idle(&h.store, &k).await;
    create_idle(&h.store, &other).await;
    h.store.annexes.put_annex(&k, "r0", "acme's", Duration::from_secs(60)).await.unwrap();
    assert_eq!(h.store.annexes.get_annex(&other, "r0").await, Ok(None), "another tenant's session of the same id");
    let deletion =
        Deletion { listing: Listing { subject: "alice".into(), created_ms: 1 }, relay_ids: vec![], owner: None };
    assert_eq!(h.store.catalog.delete(&k, &deletion).await, Ok(Deleted::Deleted));
    assert_eq!(h.store.annexes.get_annex(&k, "r0").await, Ok(None), "deleted with its session");
    if matches!(backend, Backend::Redis) {
        // Its key is gone, not just unreadable.
        let client = redis::Client::open(redis_url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let annex = format!("{}{{t:acme:s:s1}}:annex", h.prefix);
        let exists: bool = redis::cmd("EXISTS").arg(&annex).query_async(&mut conn).await.unwrap();
        assert!(!exists, "{annex} is left");
    }
}
