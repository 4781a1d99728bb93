//! HTTP/2 over cleartext (h2c, prior knowledge), as a load balancer or a
//! browser behind one speaks to the gateway: many chats on one connection,
//! a stream reset by the client ending only its own request, and a drain
//! ending every stream of the connection with the rejoin frame.

use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use serde_json::json;
use tokio::net::TcpStream;

use crate::{
    orchestrator::{World, world},
    sse::{STEP_TIMEOUT, SseReader},
    support::mock_upstream::Reply,
};

/// One h2c connection to `app` (the handshake's connection task runs
/// until the connection ends).
async fn connect(w: &World, on: usize) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(w.apps[on].addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.expect("an h2c handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A chat message on stream of its own; the response's body to read.
async fn send(client: &mut SendRequest<Bytes>, w: &World, id: &str) -> (h2::RecvStream, h2::SendStream<Bytes>) {
    let request = http::Request::post(format!("http://{}/v1/sessions/{id}/messages", w.apps[0].addr))
        .header("authorization", format!("Bearer {}", w.token))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let mut ready = client.clone().ready().await.expect("the connection takes another stream");
    let (response, mut body) = ready.send_request(request, false).unwrap();
    body.send_data(Bytes::from(json!({"content": "go"}).to_string()), true).unwrap();
    let response = tokio::time::timeout(STEP_TIMEOUT, response).await.unwrap().expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    (response.into_body(), body)
}

/// Reads a response body to its end.
async fn read_all(mut body: h2::RecvStream) -> String {
    let mut text = Vec::new();
    while let Some(chunk) = tokio::time::timeout(STEP_TIMEOUT, body.data()).await.expect("data in time") {
        let chunk = chunk.expect("the stream reads cleanly");
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    String::from_utf8(text).unwrap()
}

fn answer(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d["type"] == "text_delta")
        .map(|d| d["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn many_chats_share_one_h2c_connection_and_a_reset_ends_only_its_own_stream() {
    const CHATS: usize = 12;
    let w = world(1, |_| {}).await;
    for _ in 0..CHATS {
        w.upstream.push(Reply::new().text(["one ", "two ", "three"]).chunk_delay(Duration::from_millis(20)));
    }
    let mut ids = Vec::new();
    for _ in 0..CHATS {
        ids.push(w.session(0, "mock", json!({})).await);
    }
    let mut client = connect(&w, 0).await;
    let mut streams = Vec::new();
    for id in &ids {
        streams.push(send(&mut client, &w, id).await);
    }
    // The client resets the third chat's stream after its first bytes.
    let (mut reset_body, mut reset_request) = streams.remove(2);
    let first = tokio::time::timeout(STEP_TIMEOUT, reset_body.data()).await.unwrap().unwrap().unwrap();
    assert!(!first.is_empty());
    reset_request.send_reset(h2::Reason::CANCEL);
    drop(reset_body);

    // Every other chat streams its whole answer on the same connection.
    let bodies = futures::future::join_all(streams.into_iter().map(|(body, _request)| read_all(body))).await;
    for sse in &bodies {
        assert_eq!(answer(sse), "one two three", "{sse}");
        assert!(sse.contains("event: turn_ended"));
    }
    // The reset ended the stream, not the turn: the chat's answer is whole
    // when read again (a reader that went away does not cancel a turn).
    let rejoined = SseReader::new(w.apps[0].events(&w.token, &ids[2], Some(0)).await).rest().await;
    let text: String =
        rejoined.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "one two three");
    // And the connection still takes requests.
    let request = http::Request::get(format!("http://{}/healthz", w.apps[0].addr)).body(()).unwrap();
    let (response, _) = client.ready().await.unwrap().send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    assert_eq!(w.upstream.calls(), CHATS);
}

#[tokio::test]
async fn a_draining_replica_ends_each_h2c_stream_with_the_rejoin_frame_and_another_replica_finishes_the_turn() {
    let mut w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().text(["one ", "never"]).stall_after(1));
    w.upstream.push(Reply::new().text(["one ", "two"]));
    let id = w.session(0, "mock", json!({})).await;
    let mut client = connect(&w, 0).await;
    let (mut body, _request) = send(&mut client, &w, &id).await;
    // Read until the first word arrived, then drain replica 0.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("text_delta") {
        let chunk = tokio::time::timeout(STEP_TIMEOUT, body.data()).await.unwrap().unwrap().unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        seen.extend_from_slice(&chunk);
    }
    let a = w.apps.remove(0);
    let stopping = tokio::spawn(a.stop());
    let rest = read_all(body).await;
    let text = String::from_utf8_lossy(&seen).to_string() + &rest;
    assert!(text.contains("event: reconnect") && text.contains("retry:"), "{text}");
    tokio::time::timeout(Duration::from_secs(30), stopping).await.expect("the drain ends").unwrap();
    // The client rejoins on the other replica after its last id and gets the rest.
    let last =
        text.lines().filter_map(|l| l.strip_prefix("id: ")).filter_map(|s| s.trim().parse::<u64>().ok()).max().unwrap();
    let frames = SseReader::new(w.apps[0].events(&w.token, &id, Some(last)).await).rest().await;
    assert_eq!(frames.last().unwrap().event, "turn_ended");
    assert_eq!(frames.last().unwrap().data["reason"], "final");
}

#[tokio::test]
async fn a_model_with_http2_is_called_over_h2c_and_its_calls_share_a_connection() {
    let upstream = std::sync::Arc::new(crate::support::mock_upstream::MockUpstream::start().await);
    let base_url = upstream.base_url();
    let w = world(1, move |o| {
        o.extra_toml.push_str(&format!(
            "\n[models.mock-h2]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\nhttp2 = true\n"
        ));
    })
    .await;
    upstream.push(Reply::new().text(["over ", "h2"]));
    upstream.push(Reply::new().text(["again"]));
    w.upstream.push(Reply::new().text(["over ", "h1"]));
    for (model, expected) in [("mock-h2", "over h2"), ("mock-h2", "again"), ("mock", "over h1")] {
        let id = w.session(0, model, json!({})).await;
        let frames = w.send(0, &id, "hi").await.rest().await;
        let text: String =
            frames.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
        assert_eq!(text, expected);
    }
    let versions: Vec<http::Version> = upstream.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_2, http::Version::HTTP_2]);
    assert_eq!(w.upstream.requests()[0].version, http::Version::HTTP_11);
}
