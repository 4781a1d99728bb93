//! Hostile input: oversized headers and bodies, deep or long JSON, and
//! clients that trickle their request. Each is refused with its status and
//! the JSON error body, and nothing reaches the store or the model.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{AppOptions, TestApp, assert_error, spawn_app_with, store_snapshot};

const WAIT: Duration = Duration::from_secs(10);

async fn app() -> TestApp {
    spawn_app_with(AppOptions {
        server_toml: "max_json_depth = 8\nmax_json_string_bytes = 1000\nmax_header_count = 20\n\
                      max_header_bytes = 4000\nmax_body_bytes = 20000\nbody_read_timeout_secs = 1\n\
                      header_read_timeout_secs = 1\n"
            .to_string(),
        ..AppOptions::default()
    })
    .await
}

/// Every POST endpoint that reads a JSON body, with a session of the caller's.
async fn post_endpoints(app: &TestApp, token: &str) -> Vec<String> {
    let id = app.create_session(token, "mock").await;
    vec![
        "/v1/sessions".to_string(),
        format!("/v1/sessions/{id}/messages"),
        format!("/v1/sessions/{id}/tool-results"),
        format!("/v1/sessions/{id}/relays/relay_x"),
        "/api/chat".to_string(),
        "/api/investigate".to_string(),
        "/api/issue_chat".to_string(),
        "/chat".to_string(),
        "/chat/relay/relay_x".to_string(),
        "/summarize".to_string(),
    ]
}

fn nested(depth: usize) -> String {
    format!("{{\"model\":\"mock\",\"response_format\":{}1{}}}", "[".repeat(depth), "]".repeat(depth))
}

async fn post_raw(app: &TestApp, path: &str, token: &str, body: String) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The error message of a refusal, whichever body shape the route uses
/// (ours, llm-gateway's `{"error": "…"}`, Holmes' `{"detail": "…"}`).
async fn message(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    let text = body["error"]["message"].as_str().or(body["error"].as_str()).or(body["detail"].as_str());
    text.unwrap_or_default().to_string()
}

#[tokio::test]
async fn deep_json_and_long_strings_are_refused_on_every_endpoint_before_the_store() {
    let app = app().await;
    let token = app.token("acme", "alice");
    let endpoints = post_endpoints(&app, &token).await;
    let before = store_snapshot(&app).await;
    for path in &endpoints {
        let response = post_raw(&app, path, &token, nested(20)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        assert!(message(response).await.contains("nested deeper than 8"), "{path}");

        let long = json!({"model": "mock", "content": "x".repeat(1001)}).to_string();
        let response = post_raw(&app, path, &token, long).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        assert!(message(response).await.contains("longer than 1000 bytes"), "{path}");

        let big = json!({"model": "mock", "parts": vec!["y".repeat(900); 30]}).to_string();
        let response = post_raw(&app, path, &token, big).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
    assert_eq!(store_snapshot(&app).await, before, "no refused request changed the store");
    // Within the limits, the same shapes get through to validation.
    let response = post_raw(&app, "/v1/sessions", &token, nested(6)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(app.upstream.calls(), 0);
}

#[tokio::test]
async fn array_bodies_are_refused_and_start_nothing() {
    let app = app().await;
    let token = app.token("acme", "alice");
    let id = app.create_session(&token, "mock").await;
    let before = store_snapshot(&app).await;
    // serde would read these as the structs' fields in order.
    for (path, body) in [
        (format!("/v1/sessions/{id}/messages"), r#"["hi"]"#),
        ("/api/chat".to_string(), r#"["why?", null, "demo"]"#),
        ("/chat".to_string(), r#" ["mock", [{"role": "user", "content": "hi"}]]"#),
        ("/summarize".to_string(), r#"["mock", [{"role": "user", "content": "hi"}]]"#),
    ] {
        let response = post_raw(&app, &path, &token, body.to_string()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        assert!(message(response).await.contains("must be a JSON object"), "{path}");
    }
    assert_eq!(store_snapshot(&app).await, before);
    assert_eq!(app.upstream.calls(), 0);
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_refused_without_a_content_length() {
    let app = app().await;
    let token = app.token("acme", "alice");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..30).map(|_| Ok(vec![b' '; 1000])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let response = app
        .client
        .post(app.url("/v1/sessions"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_431_with_the_json_body() {
    let app = app().await;
    let token = app.token("acme", "alice");
    let mut request = app.client.get(app.url("/api/model")).bearer_auth(&token);
    for i in 0..25 {
        request = request.header(format!("x-filler-{i}"), "1");
    }
    let body =
        assert_error(request.send().await.unwrap(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large")
            .await;
    assert!(body["error"]["message"].as_str().unwrap().contains("more than 20"));

    let request = app.client.get(app.url("/api/model")).bearer_auth(&token).header("x-filler", "z".repeat(5000));
    assert_error(request.send().await.unwrap(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large").await;

    // Public endpoints too, and within the limits all is well.
    let request = app.client.get(app.url("/healthz")).header("x-filler", "z".repeat(5000));
    assert_eq!(request.send().await.unwrap().status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let response = app.client.get(app.url("/api/model")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Reads what the server sends until it closes the connection.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut received))
        .await
        .expect("the server closes the connection")
        .expect("read");
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_client_trickling_its_body_gets_408_and_the_session_is_untouched() {
    let app = app().await;
    let token = app.token("acme", "alice");
    let before = store_snapshot(&app).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{{\"model\""
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // …and nothing more: the deadline for the body passes.
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert_eq!(store_snapshot(&app).await, before);
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let app = app().await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ").await.unwrap();
    // The header read timeout closes the connection (hyper answers 408 or
    // nothing at all); either way the socket is not held open.
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    // An idle keep-alive connection is closed the same way.
    let mut idle = TcpStream::connect(app.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
