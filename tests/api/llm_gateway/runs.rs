//! Runs and blocks: a subagent's run of its own (golden transcript), and a
//! stream rejoined on another replica with `Last-Event-ID` that names runs
//! and text blocks as the stream it replaces did.

use std::time::Duration;

use serde_json::{Value, json};

use super::{chat, chat_body, kinds, rejoin, session_of, user};
use crate::{
    orchestrator::world,
    sse::{Frame, SseReader},
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise},
    },
};

/// A frame as a client compares it: event, id and data.
fn seen(frame: &Frame) -> (String, Option<u64>, Value) {
    (frame.event.clone(), frame.id, frame.data.clone())
}

#[tokio::test]
async fn a_subagent_runs_under_its_own_run_id_matching_the_golden_transcript_and_a_rejoin_keeps_it() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_main", "agent", [r#"{"task":"look up 42"}"#]).usage(40, 8));
    w.upstream.push(Reply::new().text(["sub: 42 is fine"]).usage(20, 4));
    w.upstream.push(Reply::new().text(["All good."]).usage(60, 3));
    let mut stream = chat(&w, 0, &chat_body("mock", json!([user("use a helper")]), json!({}))).await;
    let text = stream.rest().await;
    let frames = stream.frames();
    let session_id = session_of(&stream);
    let start = frames.iter().find(|f| f.event == "harness_start" && f.data.get("parentId").is_some()).unwrap();
    let agent_id = start.data["agentId"].as_str().unwrap().to_string();
    assert_ne!(agent_id, "main");
    assert_golden(
        "llm_gateway_subagent.sse",
        &normalise(&text, &[(&session_id, "<session>"), (&agent_id, "<subagent>")]),
    );

    // The subagent's run: started before its first event, ended before the
    // parent's result for its call; every event names the run and parent.
    let sub: Vec<&Frame> = frames.iter().filter(|f| f.data.get("parentId").is_some()).collect();
    let sub_kinds: Vec<&str> = sub.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(sub_kinds, ["harness_start", "text", "harness_end"]);
    let sub_run = format!("{session_id}:1:{agent_id}");
    for frame in &sub {
        assert_eq!((&frame.data["runId"], &frame.data["parentId"]), (&json!(sub_run), &json!("call_main")));
        assert_eq!(frame.data["agentId"], agent_id.as_str());
    }
    assert_eq!((sub[0].data["depth"].as_u64(), sub[2].data["reason"].as_str()), (Some(1), Some("final")));
    let main: Vec<&Frame> = frames[1..].iter().filter(|f| f.data.get("parentId").is_none()).collect();
    assert!(main.iter().all(|f| f.data["runId"] == format!("{session_id}:1")), "{main:?}");
    let ends: Vec<&str> = kinds(&frames).into_iter().filter(|k| *k == "harness_end" || *k == "tool_result").collect();
    assert_eq!(ends, ["harness_end", "tool_result", "harness_end"]);
    let call = frames.iter().find(|f| f.event == "tool_call").unwrap();
    assert_eq!((&call.data["id"], &call.data["runId"]), (&json!("call_main"), &json!(format!("{session_id}:1"))));

    // Rejoined on B after the subagent's first text: the same frames follow.
    let cursor = sub[1].id.expect("a text frame has an id");
    let mut rejoined = rejoin(&w.apps[1], &w.token, &session_id, cursor).await;
    rejoined.rest().await;
    let expected: Vec<_> = frames.iter().skip_while(|f| f.id != Some(cursor)).skip(1).map(seen).collect();
    let actual: Vec<_> = rejoined.frames().iter().map(seen).collect();
    assert_eq!(actual, expected);
}

#[tokio::test]
async fn a_stream_rejoined_mid_block_on_another_replica_keeps_the_blocks_ids_and_the_run() {
    let w = world(2, |_| {}).await;
    // Reasoning and text interleaved, so no two deltas are adjacent (the
    // writer merges adjacent ones of a kind): each is an event of its own.
    // Slow chunks, so the rejoin usually lands while the call streams; the
    // ids must agree whether the rest is live or replayed.
    w.upstream.push(
        Reply::new()
            .reasoning(["Let me think."])
            .text(["The "])
            .reasoning(["Sure."])
            .text(["answer "])
            .reasoning(["Yes."])
            .text(["is 42."])
            .usage(30, 6)
            .chunk_delay(Duration::from_millis(30)),
    );
    let body = chat_body("mock", json!([user("the answer?")]), json!({}));
    let mut on_a = SseReader::new(w.apps[0].post_json("/chat", Some(&w.token), &body).await);
    let session_id = on_a.next().await.unwrap().data["sessionId"].as_str().unwrap().to_string();
    let mut read = on_a.until_kind("text").await;
    read.extend(on_a.until_kind("text").await);
    drop(on_a);
    let id_of = |kind: &str| read.iter().find(|f| f.event == kind).unwrap().data["id"].clone();
    let (text, reasoning) = (id_of("text"), id_of("reasoning"));
    assert_ne!(text, reasoning);
    let cursor = read.last().unwrap().id.unwrap();

    let mut on_b = rejoin(&w.apps[1], &w.token, &session_id, cursor).await;
    on_b.rest().await;
    let rest = on_b.frames();
    assert_eq!(kinds(&rest), ["reasoning", "text", "usage", "harness_end"]);
    assert_eq!((&rest[0].data["id"], &rest[1].data["id"]), (&reasoning, &text));
    let answer: String =
        (read.iter().chain(&rest)).filter(|f| f.event == "text").map(|f| f.data["content"].as_str().unwrap()).collect();
    assert_eq!(answer, "The answer is 42.");
    assert!(rest.iter().all(|f| f.data["runId"] == format!("{session_id}:1")), "{rest:?}");

    // Replayed whole on B, every delta carries the id A gave its block.
    let mut whole = rejoin(&w.apps[1], &w.token, &session_id, 0).await;
    whole.rest().await;
    for frame in whole.frames().iter().filter(|f| f.event == "text" || f.event == "reasoning") {
        assert_eq!(&frame.data["id"], if frame.event == "text" { &text } else { &reasoning }, "{frame:?}");
    }
}
