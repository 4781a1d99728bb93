//! `GET /metrics` before and after a scripted workload: every metric the
//! gateway documents moves by what the workload did, with low-cardinality
//! labels only.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::{
    helpers::TestApp,
    orchestrator::{kinds, world},
    sse::SseReader,
    support::mock_upstream::Reply,
};

/// The OpenMetrics text of `app`.
pub async fn scrape(app: &TestApp) -> String {
    let response = app.get("/metrics", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.text().await.unwrap()
}

/// The value of the sample `name` whose labels include every pair of
/// `labels` (0 when there is none yet).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            (metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// What changed between two scrapes.
struct Delta<'a> {
    before: &'a str,
    after: &'a str,
}

impl Delta<'_> {
    fn of(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sample(self.after, name, labels) - sample(self.before, name, labels)
    }
}

/// Scrapes until the gauge `name` reads `value`: gauges fall when a turn's
/// task or a stream's encoder ends, just after the client saw the last event.
pub async fn gauge_reaches(app: &TestApp, name: &str, labels: &[(&str, &str)], value: f64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = scrape(app).await;
        if sample(&text, name, labels) == value {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name}{labels:?} never reached {value}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_scripted_workload_moves_every_metric_by_what_it_did() {
    let w = world(1, |options| {
        options.extra_toml.push_str(
            r#"
[[tenants]]
id = "initech"
jwt = { hs256_secret = "initech-test-secret-0123456789" }
rate_limit = { requests_per_second = 1, burst = 1 }
"#,
        );
    })
    .await;
    let app = &w.apps[0];
    let before = scrape(app).await;

    // A live relay turn: lookup runs, refund waits for a decision.
    w.upstream.push(
        Reply::new()
            .tool_call("call_l", "lookup", [r#"{"id":"1"}"#])
            .tool_call("call_r", "refund", [r#"{"order":"2"}"#])
            .usage(10, 2),
    );
    w.upstream.push(Reply::new().text(["Done."]).usage(20, 3));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "look up 1 and refund 2").await;
    let seen = stream.until_kind("relay_requested").await;
    let relay_id = seen.last().unwrap().data["relay_id"].as_str().unwrap().to_string();
    let during = scrape(app).await;
    assert_eq!(sample(&during, "switchboard_active_sessions", &[]), 1.0, "{during}");
    assert_eq!(sample(&during, "switchboard_open_streams", &[("dialect", "native")]), 1.0);
    let path = format!("/v1/sessions/{id}/relays/{relay_id}");
    assert_eq!(app.post_json(&path, Some(&w.token), &json!({"approved": true})).await.status(), StatusCode::OK);
    assert_eq!(stream.rest().await.last().unwrap().data["reason"], "final");

    // A paused turn, resumed by the client.
    w.upstream.push(Reply::new().tool_call("call_p", "refund", [r#"{"order":"3"}"#]).usage(5, 1));
    w.upstream.push(Reply::new().text(["Refunded."]).usage(7, 1));
    let paused = w.session(0, "mock", json!({"approval": "pause"})).await;
    let frames = w.send(0, &paused, "refund 3").await.rest().await;
    assert_eq!(kinds(&frames).last(), Some(&"paused"));
    let body = json!({"decisions": [{"tool_call_id": "call_p", "approved": false}]});
    let resumed = SseReader::new(app.tool_results(&w.token, &paused, &body).await).rest().await;
    assert_eq!(resumed.last().unwrap().data["reason"], "final");

    // initech is limited to one request per second: the second is refused by
    // Redis, the third by this replica, which remembers until when.
    let initech = app.token("initech", "ivan");
    assert_eq!(app.get_holmes_models(Some(&initech)).await.status(), StatusCode::OK);
    assert_eq!(app.get_holmes_models(Some(&initech)).await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(app.get_holmes_models(Some(&initech)).await.status(), StatusCode::TOO_MANY_REQUESTS);

    let after = gauge_reaches(app, "switchboard_active_sessions", &[], 0.0).await;
    let after_streams = gauge_reaches(app, "switchboard_open_streams", &[("dialect", "native")], 0.0).await;
    let d = Delta { before: &before, after: &after };

    let created = [("route", "/v1/sessions"), ("method", "POST"), ("status", "201")];
    assert_eq!(d.of("switchboard_http_requests_total", &created), 2.0);
    let sent = [("route", "/v1/sessions/{id}/messages"), ("status", "200")];
    assert_eq!(d.of("switchboard_http_requests_total", &sent), 2.0);
    assert_eq!(d.of("switchboard_http_request_duration_seconds_count", &[("route", "/v1/sessions")]), 2.0);

    let mock = [("model", "mock"), ("provider", "openai")];
    assert_eq!(d.of("switchboard_time_to_first_token_seconds_count", &mock), 4.0);
    assert_eq!(d.of("switchboard_model_call_duration_seconds_count", &[mock[0], mock[1], ("outcome", "ok")]), 4.0);
    let tokens = |kind| [("tenant", "acme"), ("model", "mock"), ("kind", kind)];
    assert_eq!(d.of("switchboard_model_tokens_total", &tokens("input")), 42.0);
    assert_eq!(d.of("switchboard_model_tokens_total", &tokens("output")), 7.0);

    assert_eq!(d.of("switchboard_tool_calls_total", &[("kind", "server"), ("outcome", "success")]), 2.0);
    assert_eq!(d.of("switchboard_tool_calls_total", &[("kind", "server"), ("outcome", "denied")]), 1.0);
    assert_eq!(d.of("switchboard_relays_total", &[("event", "requested")]), 1.0);
    assert_eq!(d.of("switchboard_relays_total", &[("event", "approved")]), 1.0);
    assert_eq!(d.of("switchboard_resumes_total", &[("dialect", "native")]), 1.0);

    for outcome in ["limited_global", "limited_local"] {
        let limited = [("tenant", "initech"), ("outcome", outcome)];
        assert_eq!(d.of("switchboard_rate_limit_decisions_total", &limited), 1.0, "{outcome}");
    }
    assert_eq!(d.of("switchboard_rate_limit_decisions_total", &[("tenant", "initech"), ("outcome", "allowed")]), 1.0);
    assert_eq!(d.of("switchboard_rate_limit_decisions_total", &[("tenant", "acme")]), 0.0, "acme has no limit");

    // Three turns, each at least a start commit and a round of the writer
    // with its end.
    let commits = [("op", "sessions.commit"), ("outcome", "ok")];
    let rounds = [("op", "sessions.write"), ("outcome", "ok")];
    let ops = |labels: &[(&str, &str)]| d.of("switchboard_store_operation_duration_seconds_count", labels);
    assert!(ops(&commits) >= 3.0 && ops(&rounds) >= 3.0, "{after}");
    let loads = [("op", "sessions.load"), ("outcome", "ok")];
    assert!(d.of("switchboard_store_operation_duration_seconds_count", &loads) >= 2.0);
    assert_eq!(sample(&after_streams, "switchboard_open_streams", &[("dialect", "native")]), 0.0);

    assert_dashboard_queries_exist(&after);

    // No session or user ids in any label.
    for line in after.lines().filter(|l| !l.starts_with('#')) {
        assert!(!line.contains(&id) && !line.contains("alice") && !line.contains("ivan"), "{line}");
    }
}

/// Every metric `deploy/grafana/dashboards/switchboard.json` queries is in
/// `text` (families appear once they have a sample, so `text` is a scrape
/// after a workload that touches them all).
fn assert_dashboard_queries_exist(text: &str) {
    let exported: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/dashboards/switchboard.json");
    let dashboard = std::fs::read_to_string(path).unwrap();
    let mut queried: Vec<String> = dashboard
        .match_indices("switchboard_")
        .map(|(at, _)| {
            let name: String = dashboard[at..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            let base = ["_bucket", "_count", "_sum", "_total"].iter().find_map(|s| name.strip_suffix(s));
            base.unwrap_or(&name).to_string()
        })
        .collect();
    queried.sort();
    queried.dedup();
    assert!(queried.len() >= 10, "{queried:?}");
    for name in &queried {
        assert!(exported.contains(&name.as_str()), "the dashboard queries {name}, which /metrics does not have");
    }
}
