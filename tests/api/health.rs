use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{AppOptions, assert_error, spawn_app, spawn_app_with};

#[tokio::test]
async fn healthz_answers_200_without_a_token() {
    let app = spawn_app().await;
    let response = app.get_healthz().await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("x-request-id"));
}

#[tokio::test]
async fn readyz_answers_200_when_redis_answers() {
    let app = spawn_app().await;
    let response = app.get_readyz().await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["store"], "redis");
}

#[tokio::test]
async fn readyz_answers_503_with_a_clear_body_when_redis_is_unreachable() {
    // Nothing listens on port 1: connections are refused at once.
    let app =
        spawn_app_with(AppOptions { redis_url: Some("redis://127.0.0.1:1".to_string()), ..AppOptions::default() })
            .await;
    let response = app.get_readyz().await;
    assert!(response.headers().contains_key("retry-after"));
    let body = assert_error(response, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("redis"), "{body}");
    // Liveness is not readiness: the process itself is fine.
    assert_eq!(app.get_healthz().await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_in_memory_store_is_always_ready() {
    let app = spawn_app_with(AppOptions { redis_url: None, ..AppOptions::default() }).await;
    let body: Value = app.get_readyz().await.json().await.unwrap();
    assert_eq!(body["store"], "memory");
}

#[tokio::test]
async fn metrics_are_public_and_count_requests_by_route_and_status() {
    let app = spawn_app().await;
    app.get_healthz().await;
    app.get("/api/model", None).await;
    let response = app.get("/metrics", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    assert!(
        text.contains(r#"switchboard_http_requests_total{route="/healthz",method="GET",status="200"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"switchboard_http_requests_total{route="/api/model",method="GET",status="401"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_graceful_stop_completes() {
    let app = spawn_app().await;
    assert_eq!(app.get_healthz().await.status(), StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let app = spawn_app().await;
    let token = app.token("acme", "alice");
    assert_error(app.get("/nope", Some(&token)).await, StatusCode::NOT_FOUND, "not_found").await;
    let response = app.client.delete(app.url("/api/model")).bearer_auth(&token).send().await.unwrap();
    assert_error(response, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
}

#[tokio::test]
async fn readyz_answers_503_sandbox_unavailable_when_a_tenant_has_bash_and_the_sandbox_cannot_start() {
    let broken = |tools: &str| {
        let mut options = AppOptions::default();
        options.extra_toml.push_str("\n[sandbox]\nbwrap_path = \"/nonexistent/bwrap\"\n");
        options.tenant_toml.push(("acme".into(), format!("default_tools = {tools}")));
        options
    };
    let app = spawn_app_with(broken("[\"bash\", \"read\", \"patch\"]")).await;
    let body = assert_error(app.get_readyz().await, StatusCode::SERVICE_UNAVAILABLE, "sandbox_unavailable").await;
    assert_eq!(body["error"]["message"], "the sandbox does not work on this replica");
    assert_eq!(app.get_healthz().await.status(), StatusCode::OK);
    // Without bash nothing needs the sandbox: the replica serves.
    let app = spawn_app_with(broken("[\"read\", \"patch\"]")).await;
    let body: Value = app.get_readyz().await.json().await.unwrap();
    assert_eq!((&body["status"], &body["sandbox"]["works"]), (&"ready".into(), &false.into()), "{body}");
}
