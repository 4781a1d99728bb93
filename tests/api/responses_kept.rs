//! What the Responses API keeps of a request beside its session: its input
//! items (`GET /v1/responses/{id}/input_items`, listed by both SDKs page
//! after page and checked as their `ResponseItem`s) and its parameters,
//! echoed in the response object by every replica, for
//! `responses.retention_secs` and no longer.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    orchestrator::world,
    responses::{assert_openai_error, events, python, sdk},
    support::mock_upstream::Reply,
};

#[tokio::test]
async fn every_replica_lists_a_responses_input_items_and_echoes_its_parameters() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_c", "render_chart", [r#"{"metric":"eta"}"#]));
    w.upstream.push(Reply::new().text(["Drawn."]));
    let chart = json!({"type": "function", "name": "render_chart", "description": "Draw a chart",
        "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}});
    let params = json!({"model": "mock", "instructions": "You draw charts.", "tools": [chart],
    "metadata": {"ticket": "T-7"}, "temperature": 0.5, "max_output_tokens": 300, "tool_choice": "auto",
    "input": [
        {"role": "user", "content": "chart the refunds"},
        {"role": "assistant", "content": "Which month?"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "March"}]},
    ]});
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"create": params},
            // Two pages of two (the SDK asks for the second after the first).
            {"on": 1, "inputItems": "$0.response.id", "query": {"limit": 2}},
            {"on": 2, "retrieve": "$0.response.id"},
            {"on": 2, "stream": {"model": "mock", "previous_response_id": "$0.response.id", "tools": [chart],
                "metadata": {"ticket": "T-8"},
                "input": [{"type": "function_call_output", "call_id": "call_c", "output": "{\"drawn\":true}"}]}},
            {"on": 0, "inputItems": "$3.events.0.response.id"},
        ]}),
    )
    .await;
    let made = &steps[0]["response"];
    // Newest first, as OpenAI lists them; every item has an id.
    let items = steps[1]["items"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["March", "Which month?", "chart the refunds"]);
    let roles: Vec<&str> = items.iter().map(|i| i["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(items[1]["content"][0]["type"], "output_text");
    assert!(items.iter().all(|i| i["id"].as_str().is_some_and(|id| !id.is_empty())), "{items:?}");
    let first = made["id"].as_str().unwrap();
    // Echoed as sent, by the replica that made it and by another.
    let polled = &steps[2]["response"];
    for response in [made, polled] {
        assert_eq!(response["instructions"], "You draw charts.");
        assert_eq!(response["metadata"], json!({"ticket": "T-7"}));
        assert_eq!(response["temperature"], 0.5);
        assert_eq!(response["max_output_tokens"], 300);
        assert_eq!(response["tools"][0]["name"], "render_chart");
        assert_eq!(response["previous_response_id"], Value::Null);
    }
    // The continuation is a response of its own: its own input, its own
    // parameters, and the one it continues.
    let continued = events(&steps[3]);
    let done = &continued.last().unwrap()["response"];
    assert_eq!(done["previous_response_id"], first);
    assert_eq!(done["metadata"], json!({"ticket": "T-8"}));
    assert_eq!(done["instructions"], Value::Null);
    assert_eq!(continued[0]["response"]["metadata"], json!({"ticket": "T-8"}), "from its first event");
    let answered = steps[4]["items"].as_array().unwrap();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(
        (answered[0]["type"].as_str(), answered[0]["call_id"].as_str(), answered[0]["status"].as_str()),
        (Some("function_call_output"), Some("call_c"), Some("completed"))
    );

    // The Python SDK on another replica: oldest first, page after page,
    // each item one of its types; a page after an item goes on from it.
    let steps = python(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"on": 2, "inputItems": first, "query": {"order": "asc", "limit": 1}},
            {"on": 1, "inputItems": first, "query": {"order": "asc", "after": items[2]["id"]}},
            {"on": 1, "retrieve": first},
        ]}),
    )
    .await;
    let texts = |step: &Value| -> Vec<String> {
        (step["items"].as_array().unwrap().iter())
            .map(|i| i["content"][0]["text"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(texts(&steps[0]), ["chart the refunds", "Which month?", "March"]);
    assert_eq!(texts(&steps[1]), ["Which month?", "March"]);
    assert_eq!(steps[2]["response"]["metadata"], json!({"ticket": "T-7"}));

    // Bad queries; a response that is not there.
    let (app, token) = (&w.apps[1], Some(w.token.as_str()));
    for (query, part) in [("limit=0", "limit"), ("limit=101", "limit"), ("order=up", "order"), ("after=nope", "nope")] {
        let path = format!("/v1/responses/{first}/input_items?{query}");
        assert_openai_error(app.get(&path, token).await, 400, "invalid_request_error", part).await;
    }
    let path = format!("/v1/responses/{}/input_items", first.replace("resp_0_", "resp_0_x"));
    assert_openai_error(app.get(&path, token).await, 404, "not_found_error", "not found").await;
    let other = app.token("globex", "mallory");
    let path = format!("/v1/responses/{first}/input_items");
    assert_openai_error(app.get(&path, Some(&other)).await, 404, "not_found_error", "not found").await;
}

#[tokio::test]
async fn a_response_is_gone_after_its_retention_and_its_session_stays() {
    let w = world(2, |options| options.extra_toml.push_str("\n[responses]\nretention_secs = 1\n")).await;
    w.upstream.push(Reply::new().text(["Kept a second."]));
    let (a, b, token) = (&w.apps[0], &w.apps[1], Some(w.token.as_str()));
    let made: Value =
        (a.post_json("/v1/responses", token, &json!({"model": "mock", "input": "hi"})).await.json()).await.unwrap();
    let id = made["id"].as_str().unwrap();
    let response = format!("/v1/responses/{id}");
    assert_eq!(b.get(&response, token).await.status(), 200, "readable at first");
    assert_eq!(b.get(&format!("{response}/input_items"), token).await.status(), 200);
    // Polled until it lapses (a second after it was made).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while b.get(&response, token).await.status() == 200 {
        assert!(tokio::time::Instant::now() < deadline, "{id} is still readable 10 s after it was made");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_openai_error(b.get(&response, token).await, 404, "not_found_error", "not found").await;
    for path in [format!("{response}?stream=true"), format!("{response}/input_items")] {
        assert_openai_error(a.get(&path, token).await, 404, "not_found_error", "not found").await;
    }
    // Its conversation is a session that lives on (`store.session_ttl_secs`).
    let session = id.splitn(3, '_').nth(2).unwrap();
    assert_eq!(a.get(&format!("/v1/sessions/{session}"), token).await.status(), 200);
}
