//! Per-tenant limits across replicas: request rate, concurrent sessions,
//! tokens per minute, and what happens when Redis cannot be asked.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use serde_json::json;
use switchboard::{sessions::TurnRunner, store::TokenWindow};

use crate::{
    helpers::{AppOptions, TestApp, assert_error, spawn_app_with, spawn_replicas},
    orchestrator::{of_kind, world},
    sse::SseReader,
    support::{mock_upstream::Reply, runner::ScriptedRunner},
};

const RATE: u32 = 20;

fn limited_tenants() -> String {
    format!(
        r#"
[[tenants]]
id = "limited"
jwt = {{ hs256_secret = "limited-secret-0123456789" }}
rate_limit = {{ requests_per_second = {RATE}, burst = 1 }}

[[tenants]]
id = "teamed"
jwt = {{ hs256_secret = "teamed-secret-0123456789" }}
rate_limit = {{ requests_per_second = 1000, subject_requests_per_second = 1, subject_burst = 1 }}

[[tenants]]
id = "capped"
jwt = {{ hs256_secret = "capped-secret-0123456789" }}
rate_limit = {{ max_concurrent_sessions = 1 }}

[[tenants]]
id = "metered"
jwt = {{ hs256_secret = "metered-secret-0123456789" }}
rate_limit = {{ tokens_per_minute = 6000 }}

[[tenants]]
id = "frugal"
jwt = {{ hs256_secret = "frugal-secret-0123456789" }}
rate_limit = {{ tokens_per_minute = 100 }}
"#
    )
}

async fn replicas(n: usize, runner: Option<Arc<ScriptedRunner>>, tweak: impl Fn(&mut AppOptions)) -> Vec<TestApp> {
    spawn_replicas(n, |options| {
        options.extra_toml = limited_tenants();
        options.runner = runner.clone().map(|r| r as Arc<dyn TurnRunner>);
        tweak(options);
    })
    .await
}

#[tokio::test]
async fn a_tenants_rate_holds_across_three_replicas_and_other_tenants_are_unaffected() {
    let apps = replicas(3, None, |_| {}).await;
    let limited = apps[0].token("limited", "x");
    let other = apps[0].token("acme", "y");
    let started = Instant::now();
    let window = Duration::from_secs(2);
    // One client loop per replica, all at once, so that requests arrive
    // densely: an accepted count below the rate would be the limiter's
    // doing, not the gaps of a single sequential client. Each loop
    // interleaves another tenant's requests.
    let loops = apps.iter().map(|app| {
        let (limited, other) = (&limited, &other);
        async move {
            let (mut accepted, mut refused, mut others_ok, mut sent) = (0u32, 0u32, 0u32, 0u32);
            while started.elapsed() < window {
                let (limited_reply, other_reply) =
                    tokio::join!(app.get("/api/model", Some(limited)), app.get("/api/model", Some(other)));
                match limited_reply.status() {
                    StatusCode::OK => accepted += 1,
                    StatusCode::TOO_MANY_REQUESTS => refused += 1,
                    status => panic!("unexpected {status}"),
                }
                if other_reply.status() == StatusCode::OK {
                    others_ok += 1;
                }
                sent += 1;
            }
            (accepted, refused, others_ok, sent)
        }
    });
    let counts = futures::future::join_all(loops).await;
    let sum = |f: fn(&(u32, u32, u32, u32)) -> u32| counts.iter().map(f).sum::<u32>();
    let (accepted, refused, others_ok, sent) = (sum(|c| c.0), sum(|c| c.1), sum(|c| c.2), sum(|c| c.3));
    let elapsed = started.elapsed().as_secs_f64();
    let expected = f64::from(RATE) * elapsed + 1.0; // the rate over the window plus the burst of 1
    let tolerance = 0.1 * f64::from(RATE) * elapsed;
    assert!(refused > accepted, "the client sent faster than the limit: {accepted} accepted, {refused} refused");
    // The limit holds: never more than the rate (plus the burst) across the
    // three replicas. Fewer is the client's doing when the machine is busy
    // (gaps between requests are capacity the limiter cannot give back), so
    // the lower bound only shows the limiter is not refusing everything.
    assert!(
        f64::from(accepted) <= expected + tolerance,
        "accepted {accepted} in {elapsed:.2} s; at most {expected:.1} + {tolerance:.1} may pass"
    );
    assert!(
        f64::from(accepted) >= 0.6 * expected,
        "accepted {accepted} in {elapsed:.2} s: the limiter refused far more than the rate ({expected:.1})"
    );
    assert_eq!(others_ok, sent, "the other tenant was never limited");
}

#[tokio::test]
async fn a_refusal_is_429_with_retry_after_and_rate_limit_headers_and_is_counted() {
    let apps = replicas(1, None, |_| {}).await;
    let token = apps[0].token("limited", "x");
    let ok = apps[0].get("/api/model", Some(&token)).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(ok.headers()["ratelimit-policy"].to_str().unwrap().contains(&format!("q={RATE}")));
    let mut refused = None;
    for _ in 0..50 {
        let response = apps[0].get("/api/model", Some(&token)).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("a refusal within 50 back-to-back requests");
    assert!(refused.headers().contains_key("retry-after"));
    assert!(refused.headers()["ratelimit"].to_str().unwrap().contains("r=0"));
    assert!(refused.headers().contains_key("ratelimit-policy"));
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    let metrics = apps[0].get("/metrics", None).await.text().await.unwrap();
    assert!(metrics.contains(r#"switchboard_rate_limit_decisions_total{tenant="limited",outcome="allowed"}"#));
    assert!(metrics.contains(r#"tenant="limited",outcome="limited_"#), "{metrics}");
}

#[tokio::test]
async fn one_subject_over_its_own_rate_is_refused_while_the_rest_of_its_tenant_goes_on() {
    let apps = replicas(1, None, |_| {}).await;
    let (x, y) = (apps[0].token("teamed", "x"), apps[0].token("teamed", "y"));
    assert_eq!(apps[0].get("/api/model", Some(&x)).await.status(), StatusCode::OK);
    // One a second with a burst of one: the next request of x in the same
    // second is refused here, before Redis is asked.
    let refused = apps[0].get("/api/model", Some(&x)).await;
    assert!(refused.headers()["ratelimit-policy"].to_str().unwrap().starts_with(r#""subject";q=1;"#));
    assert!(refused.headers().contains_key("retry-after"));
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    let other = apps[0].get("/api/model", Some(&y)).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert!(other.headers()["ratelimit-policy"].to_str().unwrap().starts_with(r#""tenant";q=1000;"#));

    let metrics = apps[0].get("/metrics", None).await.text().await.unwrap();
    for (outcome, count) in [("limited_subject", 1), ("allowed", 2)] {
        let line = format!(r#"switchboard_rate_limit_decisions_total{{tenant="teamed",outcome="{outcome}"}} {count}"#);
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

#[tokio::test]
async fn the_concurrent_session_cap_holds_across_replicas_and_frees_after_a_replica_dies() {
    let runner = ScriptedRunner::new();
    let mut apps = replicas(2, Some(runner.clone()), |o| o.lease_ttl_secs = 1).await;
    let token = apps[0].token("capped", "x");
    let first = apps[0].create_session(&token, "demo").await;
    let mut running = SseReader::new(apps[0].send_message(&token, &first, "gated 3").await);
    running.until_seq(1).await;

    let second = apps[1].create_session(&token, "demo").await;
    let refused = apps[1].send_message(&token, &second, "hello").await;
    assert!(refused.headers().contains_key("retry-after"));
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    let metrics = apps[1].get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains(r#"switchboard_rate_limit_decisions_total{tenant="capped",outcome="limited_sessions"} 1"#)
    );

    // A dies holding the slot; B takes the session over and ends it, which
    // frees the slot.
    let a = apps.remove(0);
    a.kill();
    tokio::time::timeout(Duration::from_secs(10), runner.wait_for_takeover()).await.expect("a takeover");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = apps[0].send_message(&token, &second, "hello").await;
        if response.status() == StatusCode::OK {
            let frames = SseReader::new(response).rest().await;
            assert_eq!(frames.last().unwrap().data["reason"], "final");
            break;
        }
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(Instant::now() < deadline, "the slot was never freed");
        // Wait for the taken-over turn to end rather than poll blindly.
        let events = apps[0].events(&token, &first, Some(0)).await;
        SseReader::new(events).rest().await;
    }
}

#[tokio::test]
async fn a_paused_session_does_not_count_against_the_cap() {
    let runner = ScriptedRunner::new();
    let apps = replicas(1, Some(runner), |_| {}).await;
    let token = apps[0].token("capped", "x");
    let first = apps[0].create_session(&token, "demo").await;
    let paused = SseReader::new(apps[0].send_message(&token, &first, "pause").await).rest().await;
    assert_eq!(paused.last().unwrap().event, "paused");
    let second = apps[0].create_session(&token, "demo").await;
    let frames = SseReader::new(apps[0].send_message(&token, &second, "hi").await).rest().await;
    assert_eq!(frames.last().unwrap().data["reason"], "final");
}

#[tokio::test]
async fn limits_fail_closed_when_redis_is_unreachable_unless_configured_open() {
    let unreachable = |extra: &str| AppOptions {
        redis_url: Some("redis://127.0.0.1:1".into()),
        extra_toml: format!("{}\n{extra}", limited_tenants()),
        ..AppOptions::default()
    };
    let closed = spawn_app_with(unreachable("")).await;
    let token = closed.token("limited", "x");
    assert_error(closed.get("/api/model", Some(&token)).await, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
        .await;
    // A tenant without limits is not affected.
    assert_eq!(closed.get("/api/model", Some(&closed.token("acme", "y"))).await.status(), StatusCode::OK);

    // Fail open: each subject is still held to the tenant's rate on this
    // replica (one per second here), other subjects unaffected.
    let slow = "[[tenants]]\nid = \"slow\"\njwt = { hs256_secret = \"slow-secret-0123456789\" }\n\
                rate_limit = { requests_per_second = 1, burst = 1 }\n[limits]\non_store_error = \"fail_open\"";
    let open = spawn_app_with(unreachable(slow)).await;
    let (x, y) = (open.token("slow", "x"), open.token("slow", "y"));
    assert_eq!(open.get("/api/model", Some(&x)).await.status(), StatusCode::OK);
    assert_error(open.get("/api/model", Some(&x)).await, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert_eq!(open.get("/api/model", Some(&y)).await.status(), StatusCode::OK);
    let metrics = open.get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains(r#"switchboard_rate_limit_decisions_total{tenant="slow",outcome="store_error_allowed"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"switchboard_rate_limit_decisions_total{tenant="slow",outcome="store_error_limited"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_spent_token_budget_fails_the_turn_with_a_rate_limit_error_before_calling_the_model() {
    let w = world(1, |o| o.extra_toml.push_str(&limited_tenants())).await;
    let token = w.apps[0].token("frugal", "x");
    let response = w.apps[0].post_json("/v1/sessions", Some(&token), &json!({"model": "mock"})).await;
    let id = response.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    // The reserved output alone (4096 tokens) is over a budget of 100.
    let frames = SseReader::new(w.apps[0].send_message(&token, &id, "hi").await).rest().await;
    assert_eq!(of_kind(&frames, "error")[0].data["code"], "rate_limited");
    assert_eq!(frames.last().unwrap().data["reason"], "failed");
    assert_eq!(w.upstream.calls(), 0);
    let metrics = w.apps[0].get("/metrics", None).await.text().await.unwrap();
    assert!(metrics.contains(r#"switchboard_rate_limit_decisions_total{tenant="frugal",outcome="limited_tokens"} 1"#));
}

#[tokio::test]
async fn a_model_call_is_charged_what_it_used_not_what_it_reserved() {
    // Budgets are per calendar minute: should the minute turn during a run,
    // the run is repeated rather than misread.
    for _ in 0..3 {
        let window = TokenWindow::now();
        let w = world(1, |o| o.extra_toml.push_str(&limited_tenants())).await;
        let token = w.apps[0].token("metered", "x");
        let response = w.apps[0].post_json("/v1/sessions", Some(&token), &json!({"model": "mock"})).await;
        let id = response.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string();
        let turn = |text: &'static str| {
            let (app, token, id) = (&w.apps[0], &token, &id);
            async move { SseReader::new(app.send_message(token, id, text).await).rest().await }
        };
        // Each call reserves its prompt plus the 4096 output tokens it may
        // write, of 6000. The first uses 12: the second fits only because
        // the first was corrected down. The second uses 5500: the third no
        // longer fits.
        w.upstream.push(Reply::new().text(["Short."]).usage(10, 2));
        let first = turn("one").await;
        w.upstream.push(Reply::new().text(["Long."]).usage(5000, 500));
        let second = turn("two").await;
        let third = turn("three").await;
        if TokenWindow::now() != window {
            continue;
        }
        assert_eq!(first.last().unwrap().data["reason"], "final");
        assert_eq!(second.last().unwrap().data["reason"], "final", "the first call was charged 12, not 4100");
        assert_eq!(of_kind(&third, "error")[0].data["code"], "rate_limited", "5512 used + 4100 > 6000");
        assert_eq!(w.upstream.calls(), 2);
        return;
    }
    panic!("the minute turned in three runs in a row");
}

/// The tokens `tenant` was charged in `window`, as Redis counts them.
pub async fn charged(app: &TestApp, tenant: &str, window: TokenWindow) -> i64 {
    let client = redis::Client::open(crate::helpers::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{}tpm:{tenant}:{}", app.config.store.key_prefix, window.0);
    redis::cmd("GET").arg(key).query_async::<Option<i64>>(&mut conn).await.unwrap().unwrap_or(0)
}

#[tokio::test]
async fn a_subagents_and_a_compactions_model_calls_are_charged_to_the_tenants_budget() {
    // Budgets are per calendar minute: should the minute turn during a run,
    // the run is repeated rather than misread.
    for _ in 0..3 {
        let window = TokenWindow::now();
        let w = world(1, |o| o.extra_toml.push_str(&limited_tenants())).await;
        let app = &w.apps[0];
        let token = app.token("metered", "x");
        let create = |model: &'static str| {
            let token = &token;
            async move {
                let response = app.post_json("/v1/sessions", Some(token), &json!({"model": model})).await;
                response.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string()
            }
        };
        // A turn with a subagent: the main call, the subagent's, the main one again.
        w.upstream.push(Reply::new().tool_call("call_a", "agent", [r#"{"task":"look"}"#]).usage(10, 1));
        w.upstream.push(Reply::new().text(["Found it."]).usage(20, 2));
        w.upstream.push(Reply::new().text(["Done."]).usage(30, 3));
        let with_subagent = create("mock").await;
        let frames = SseReader::new(app.send_message(&token, &with_subagent, "delegate").await).rest().await;
        assert_eq!(frames.last().unwrap().data["reason"], "final");
        let after_subagent = charged(app, "metered", window).await;

        // A turn that compacts first: the summary's call, then the answer.
        w.upstream.push(Reply::new().text(["Short."]).usage(1, 1));
        let compacting = create("small").await;
        SseReader::new(app.send_message(&token, &compacting, &"a".repeat(4_000)).await).rest().await;
        w.upstream.push(Reply::new().text(["<analysis>long</analysis>"]).usage(400, 40));
        w.upstream.push(Reply::new().text(["Answer."]).usage(50, 5));
        let frames = SseReader::new(app.send_message(&token, &compacting, &"b".repeat(3_000)).await).rest().await;
        assert!(frames.iter().any(|f| f.event == "compaction_done"));
        assert_eq!(frames.last().unwrap().data["reason"], "final");
        let after_compaction = charged(app, "metered", window).await;
        if TokenWindow::now() != window {
            continue;
        }
        assert_eq!(after_subagent, 11 + 22 + 33, "the subagent's 22 tokens are charged too");
        assert_eq!(after_compaction - after_subagent, 2 + 440 + 55, "the compaction's 440 tokens are charged too");
        return;
    }
    panic!("the minute turned in three runs in a row");
}

#[tokio::test]
async fn a_spent_token_budget_is_each_dialects_rate_limit_error_with_when_to_retry() {
    let w = world(1, |o| o.extra_toml.push_str(&limited_tenants())).await;
    let token = w.apps[0].token("frugal", "x");
    let app = &w.apps[0];
    // The budget is per calendar minute: a retry may pass when it ends.
    let within_a_minute = |secs: &serde_json::Value| (1..=60).contains(&secs.as_u64().unwrap_or(0));

    let holmes = json!({"ask": "hi", "model": "mock", "stream": true});
    let frames = SseReader::new(app.post_json("/api/chat", Some(&token), &holmes).await).rest().await;
    let error = &of_kind(&frames, "error")[0].data;
    assert_eq!((error["error_code"].as_u64(), error["success"].as_bool()), (Some(5204), Some(false)), "{error}");
    assert!(within_a_minute(&error["retry_after"]), "{error}");
    assert!(of_kind(&frames, "ai_answer_end").is_empty());

    let holmes = json!({"ask": "hi", "model": "mock"});
    let refused = app.post_json("/api/chat", Some(&token), &holmes).await;
    let retry_after: serde_json::Value = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(within_a_minute(&retry_after), "{retry_after}");
    let body = assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert!(body["error"]["message"].as_str().unwrap().contains(&format!("retry in {retry_after} s")), "{body}");

    let gateway = json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]});
    let frames = SseReader::new(app.post_json("/chat", Some(&token), &gateway).await).rest().await;
    let error = &of_kind(&frames, "error")[0].data;
    assert_eq!(error["code"], "rate_limited");
    assert!(within_a_minute(&error["retryAfter"]), "{error}");
    assert_eq!(frames.last().unwrap().data["reason"], "error");

    let native = app.post_json("/v1/sessions", Some(&token), &json!({"model": "mock"})).await;
    let id = native.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let frames = SseReader::new(app.send_message(&token, &id, "hi").await).rest().await;
    assert!(within_a_minute(&of_kind(&frames, "error")[0].data["retry_after_secs"]));

    assert_eq!(w.upstream.calls(), 0, "no dialect reached the model");
}
