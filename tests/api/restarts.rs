//! A turn taken over mid-step, read in every dialect: replica A streams two
//! words of its answer and dies; B takes the session over, says
//! `step_restarted` and generates the step again. Each `?format=` replay of
//! the whole log, read as that dialect's client reads it, must end with the
//! answer once. AG-UI and the AI SDK (ai@6 and ai@7) are read by their real
//! npm clients (`clients/replay.mjs`); the others by small reducers that do
//! what each dialect's documentation tells its clients to do.

use serde_json::{Value, json};
use switchboard::protocol::ai_sdk::live_parts;

use crate::{
    clients::run_client,
    orchestrator::{World, kinds, world},
    sse::{Frame, STEP_TIMEOUT, SseReader},
    support::mock_upstream::Reply,
};

const ANSWER: &str = "w1 w2 w3";

/// A session whose only turn A began ("w1 ", "w2 ", then a stall) and B
/// finished after taking it over; `w.apps` holds B only.
async fn taken_over_mid_step() -> (World, String) {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    w.upstream.push(Reply::new().text(["w1 ", "w2 ", "never"]).stall_after(2));
    w.upstream.push(Reply::new().text(["w1 ", "w2 ", "w3"]));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "go").await;
    on_a.until_kind("text_delta").await;
    on_a.until_kind("text_delta").await;
    let a = w.apps.remove(0);
    a.kill();
    drop(on_a);
    let native = SseReader::new(w.apps[0].events(&w.token, &id, Some(0)).await).rest().await;
    assert_eq!(native.last().unwrap().data["reason"], "final", "{:?}", kinds(&native));
    assert_eq!(native_answer(&native), ANSWER);
    (w, id)
}

fn events_url(w: &World, id: &str, format: &str) -> String {
    w.apps[0].url(&format!("/v1/sessions/{id}/events?format={format}&after=0"))
}

async fn replay(w: &World, id: &str, format: &str) -> reqwest::Response {
    let response = w.apps[0].get(&format!("/v1/sessions/{id}/events?format={format}&after=0"), Some(&w.token)).await;
    assert!(response.status().is_success(), "{format}: {}", response.status());
    response
}

/// Native: `step_restarted` drops the text since the last step boundary.
fn native_answer(frames: &[Frame]) -> String {
    let (mut answer, mut step) = (String::new(), String::new());
    for frame in frames {
        match frame.event.as_str() {
            "text_delta" => step.push_str(frame.data["text"].as_str().unwrap()),
            "step_restarted" => step.clear(),
            "usage" => answer.push_str(&std::mem::take(&mut step)),
            _ => {}
        }
    }
    answer + &step
}

#[tokio::test]
async fn after_a_takeover_mid_step_every_dialects_client_ends_with_the_answer_once() {
    let (w, id) = taken_over_mid_step().await;

    // Holmes: one ai_message per model call; the cut call sent none.
    let holmes = SseReader::new(replay(&w, &id, "holmes").await).rest().await;
    let messages: Vec<&Value> = holmes.iter().filter(|f| f.event == "ai_message").map(|f| &f.data["content"]).collect();
    assert_eq!(messages, [&json!(ANSWER)]);
    let end = holmes.iter().find(|f| f.event == "ai_answer_end").expect("an ai_answer_end");
    assert_eq!(end.data["analysis"], ANSWER);

    // llm-gateway: a client drops the text blocks `step_restarted` names
    // (the cut call's one block; the regenerated call's has a new id).
    let gateway = SseReader::new(replay(&w, &id, "llm-gateway").await).rest().await;
    let mut texts: Vec<(Value, String)> = Vec::new();
    for frame in &gateway {
        match frame.event.as_str() {
            "text" => texts.push((frame.data["id"].clone(), frame.data["content"].as_str().unwrap().to_string())),
            "step_restarted" => {
                let discard = frame.data["discard"].as_array().unwrap();
                assert_eq!(discard.len(), 1, "{frame:?}");
                texts.retain(|(id, _)| !discard.contains(id));
            }
            _ => {}
        }
    }
    assert_eq!(texts.into_iter().map(|(_, text)| text).collect::<String>(), ANSWER);

    // Cosmo: a `thinking` with `restartedStep` voids the segment before it.
    let cosmo = SseReader::new(replay(&w, &id, "cosmo").await).rest().await;
    let mut segments = vec![String::new()];
    for event in cosmo.iter().map(|f| &f.data) {
        match event["type"].as_str().unwrap() {
            "thinking" if event.get("restartedStep").is_some() => *segments.last_mut().unwrap() = String::new(),
            "thinking" => segments.push(String::new()),
            "text" => segments.last_mut().unwrap().push_str(event["text"].as_str().unwrap()),
            _ => {}
        }
    }
    assert_eq!(segments.concat(), ANSWER);
    assert_eq!(cosmo.last().unwrap().data["type"], "done");

    // zot: a message ends with its `assistant_message`; the cut one ends empty.
    let zot = tokio::time::timeout(STEP_TIMEOUT, replay(&w, &id, "zot").await.text()).await.unwrap().unwrap();
    let mut messages: Vec<String> = Vec::new();
    for line in zot.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        match line["type"].as_str().unwrap() {
            "assistant_start" => messages.push(String::new()),
            "text_delta" => messages.last_mut().unwrap().push_str(line["delta"].as_str().unwrap()),
            "assistant_message" => {
                let blocks = line["content"].as_array().unwrap();
                *messages.last_mut().unwrap() =
                    blocks.iter().filter(|b| b["type"] == "text").map(|b| b["text"].as_str().unwrap()).collect();
            }
            "turn_end" if line["restarted"] == true => assert_eq!(line["stop"], "aborted"),
            _ => {}
        }
    }
    assert_eq!(messages, ["", ANSWER]);
}

#[tokio::test]
async fn after_a_takeover_mid_step_the_real_ag_ui_and_ai_sdk_clients_end_with_the_answer_once() {
    let (w, id) = taken_over_mid_step().await;

    // AG-UI: a client that held the user's message (its own id) ends with
    // the snapshot's copy of it and the regenerated answer.
    let held = json!([{"id": "user-1", "role": "user", "content": "go"}]);
    let input = json!({"dialect": "ag-ui", "threadId": id, "messages": held});
    let (ok, out) = run_client("replay.mjs", &events_url(&w, &id, "ag-ui"), &w.token, &input).await;
    assert!(ok, "{out}");
    let types: Vec<&str> = out["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"MESSAGES_SNAPSHOT"), "{types:?}");
    let messages: Vec<(&str, &str)> = (out["messages"].as_array().unwrap().iter())
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(messages, [("user", "go"), ("assistant", ANSWER)], "{out}");
    assert_eq!(out["warnings"], json!([]));

    // AI SDK, ai@6 (and ai@7 when it does not say it is): the reducer keeps
    // the void text (nothing ai@6 reads takes a part back); the marker after
    // it lets a frontend drop it.
    let text = |parts: Vec<&Value>| -> String {
        parts.iter().filter(|p| p["type"] == "text").map(|p| p["text"].as_str().unwrap()).collect()
    };
    for input in [json!({"dialect": "ai-sdk", "ai": 6}), json!({"dialect": "ai-sdk", "ai": 7})] {
        let (ok, out) = run_client("replay.mjs", &events_url(&w, &id, "ai-sdk"), &w.token, &input).await;
        assert!(ok, "{out}");
        let parts = out["message"]["parts"].as_array().unwrap();
        assert_eq!(text(parts.iter().collect()), "w1 w2 w1 w2 w3", "{input}");
        let marker = parts.iter().find(|p| p["type"] == "data-step-restarted").expect("the marker is a part");
        assert_eq!(marker["data"], json!({"step": 1}));
        assert_eq!(text(live_parts(parts)), ANSWER, "{out}");
        assert!(parts.iter().filter(|p| p["type"] == "text").all(|p| p["state"] == "done"), "{out}");
    }

    // AI SDK, ai@7 saying so: `reset-step` takes the void text back.
    let input = json!({"dialect": "ai-sdk", "ai": 7, "headers": {"x-ai-sdk-version": "7"}});
    let (ok, out) = run_client("replay.mjs", &events_url(&w, &id, "ai-sdk"), &w.token, &input).await;
    assert!(ok, "{out}");
    let parts = out["message"]["parts"].as_array().unwrap();
    assert_eq!(text(parts.iter().collect()), ANSWER, "{out}");
    assert!(parts.iter().all(|p| p["type"] != "data-step-restarted"), "{out}");
    assert!(parts.iter().filter(|p| p["type"] == "text").all(|p| p["state"] == "done"), "{out}");
}

#[tokio::test]
async fn an_llm_gateway_client_that_rejoins_after_a_takeover_is_told_to_discard_the_block_it_holds() {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    w.upstream.push(Reply::new().text(["w1 ", "w2 ", "never"]).stall_after(2));
    w.upstream.push(Reply::new().text(["w1 ", "w2 ", "w3"]));
    let body = json!({"model": "mock", "messages": [{"role": "user", "content": "go"}]});
    let mut on_a = SseReader::new(w.apps[0].post_json("/chat", Some(&w.token), &body).await);
    let session_id = on_a.next().await.unwrap().data["sessionId"].as_str().unwrap().to_string();
    let held = on_a.until_kind("text").await.pop().unwrap();
    let (block, cursor) = (held.data["id"].clone(), held.id.unwrap());
    let a = w.apps.remove(0);
    a.kill();
    drop(on_a);

    // Rejoined on B, which takes the turn over: whatever of the cut block
    // follows the cursor has the block's id, and `discard` names it.
    let url = w.apps[0].url(&format!("/v1/sessions/{session_id}/events?format=llm-gateway"));
    let request = w.apps[0].client.get(url).bearer_auth(&w.token).header("last-event-id", cursor.to_string());
    let rest = SseReader::new(request.send().await.unwrap()).rest().await;
    let restart = rest.iter().find(|f| f.event == "step_restarted").expect("a step_restarted");
    assert_eq!(restart.data["discard"], json!([block]));
    let mut texts = vec![(held.data["id"].clone(), held.data["content"].as_str().unwrap().to_string())];
    for frame in &rest {
        match frame.event.as_str() {
            "text" => texts.push((frame.data["id"].clone(), frame.data["content"].as_str().unwrap().to_string())),
            "step_restarted" => texts.retain(|(id, _)| !frame.data["discard"].as_array().unwrap().contains(id)),
            _ => {}
        }
    }
    assert_eq!(texts.into_iter().map(|(_, text)| text).collect::<String>(), ANSWER);
    assert_eq!(rest.last().unwrap().data["runId"], format!("{session_id}:1"));
}
