//! Quotas: a tenant's request rate (GCRA), its running-session slots and
//! its per-minute model token budget.

use switchboard::store::{RateDecision, TokenWindow};

use super::*;

contract!(
    requests_within_the_burst_pass_and_the_next_is_refused_with_a_retry_after,
    each_tenant_has_its_own_rate,
    the_slot_cap_holds_refreshes_and_frees_on_release,
    an_expired_slot_no_longer_counts,
    a_token_reservation_past_the_limit_is_refused_and_counts_nothing,
    a_correction_gives_tokens_back_in_its_own_window_only,
    a_correction_past_the_limit_is_counted_and_spends_the_budget,
);

async fn requests_within_the_burst_pass_and_the_next_is_refused_with_a_retry_after(backend: Backend) {
    let h = backend.open();
    let quotas = &h.store.quotas;
    // One a second with a burst of three: three at once pass, counting down.
    for remaining in [2, 1, 0] {
        assert_eq!(quotas.take_request("acme", 1, 3).await.unwrap(), RateDecision::Allowed { remaining });
    }
    match quotas.take_request("acme", 1, 3).await.unwrap() {
        RateDecision::Limited { retry_after } => {
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1), "{retry_after:?}");
        }
        allowed => panic!("the fourth request passed: {allowed:?}"),
    }
}

async fn each_tenant_has_its_own_rate(backend: Backend) {
    let h = backend.open();
    let quotas = &h.store.quotas;
    assert!(matches!(quotas.take_request("acme", 1, 1).await.unwrap(), RateDecision::Allowed { .. }));
    assert!(matches!(quotas.take_request("acme", 1, 1).await.unwrap(), RateDecision::Limited { .. }));
    assert!(matches!(quotas.take_request("globex", 1, 1).await.unwrap(), RateDecision::Allowed { .. }));
}

async fn the_slot_cap_holds_refreshes_and_frees_on_release(backend: Backend) {
    let h = backend.open();
    let quotas = &h.store.quotas;
    let ttl = Duration::from_secs(60);
    assert!(quotas.acquire_slot("acme", "s1", Some(2), ttl).await.unwrap());
    assert!(quotas.acquire_slot("acme", "s2", Some(2), ttl).await.unwrap());
    assert!(!quotas.acquire_slot("acme", "s3", Some(2), ttl).await.unwrap(), "the cap holds");
    assert!(quotas.acquire_slot("acme", "s1", Some(2), ttl).await.unwrap(), "a holder refreshes its slot");
    assert!(quotas.acquire_slot("globex", "s3", Some(2), ttl).await.unwrap(), "another tenant counts apart");
    quotas.release_slot("acme", "s1").await.unwrap();
    assert!(quotas.acquire_slot("acme", "s3", Some(2), ttl).await.unwrap(), "a released slot is free");
    assert!(quotas.acquire_slot("acme", "s4", None, ttl).await.unwrap(), "no cap, no refusal");
}

async fn an_expired_slot_no_longer_counts(backend: Backend) {
    let h = backend.open();
    let quotas = &h.store.quotas;
    // s1's holder died: its slot lapses without a release.
    assert!(quotas.acquire_slot("acme", "s1", Some(1), Duration::from_millis(100)).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !quotas.acquire_slot("acme", "s2", Some(1), Duration::from_secs(60)).await.unwrap() {
        assert!(Instant::now() < deadline, "the lapsed slot still counts");
        sleep(Duration::from_millis(20)).await;
    }
}

async fn a_token_reservation_past_the_limit_is_refused_and_counts_nothing(backend: Backend) {
    let h = backend.open();
    let quotas = &h.store.quotas;
    let window = quotas.reserve_tokens("acme", 60, 100).await.unwrap().expect("within the budget");
    assert!(TokenWindow::now().0 - window.0 <= 1, "the current minute: {window:?}");
    assert_eq!(quotas.reserve_tokens("acme", 50, 100).await.unwrap(), None);
    assert!(quotas.reserve_tokens("acme", 40, 100).await.unwrap().is_some(), "the refusal counted nothing");
    assert_eq!(quotas.reserve_tokens("acme", 1, 100).await.unwrap(), None);
    assert!(quotas.reserve_tokens("globex", 100, 100).await.unwrap().is_some(), "another tenant counts apart");
}

async fn a_correction_gives_tokens_back_in_its_own_window_only(backend: Backend) {
    // Reservations are per calendar minute: should the minute turn during
    // the run, the run is repeated (a new prefix) rather than misread.
    for _ in 0..3 {
        let h = backend.open();
        let quotas = &h.store.quotas;
        let window = quotas.reserve_tokens("acme", 80, 100).await.unwrap().unwrap();
        // A give-back addressed to the previous minute does not free this one.
        quotas.correct_tokens("acme", TokenWindow(window.0 - 1), -80).await.unwrap();
        let refused = quotas.reserve_tokens("acme", 30, 100).await.unwrap();
        quotas.correct_tokens("acme", window, -70).await.unwrap();
        let allowed = quotas.reserve_tokens("acme", 30, 100).await.unwrap();
        if TokenWindow::now() != window {
            continue;
        }
        assert_eq!(refused, None);
        assert_eq!(allowed, Some(window), "the used 10 + 30 fit");
        return;
    }
    panic!("the minute turned in three runs in a row");
}

async fn a_correction_past_the_limit_is_counted_and_spends_the_budget(backend: Backend) {
    for _ in 0..3 {
        let h = backend.open();
        let quotas = &h.store.quotas;
        let window = quotas.reserve_tokens("acme", 50, 100).await.unwrap().unwrap();
        // The call used 150, not 50: never refused, and counted.
        quotas.correct_tokens("acme", window, 100).await.unwrap();
        let refused = quotas.reserve_tokens("acme", 1, 100).await.unwrap();
        if TokenWindow::now() != window {
            continue;
        }
        assert_eq!(refused, None);
        return;
    }
    panic!("the minute turned in three runs in a row");
}
