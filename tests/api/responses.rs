//! The official OpenAI SDK (`openai` on npm, pinned in clients/), unchanged,
//! against three replicas sharing one Redis on `/v1/responses`, driven by
//! `clients/openai-responses.mjs`: the SDK parses every event and every
//! error with its own types and checks (its `responses.stream` helper
//! refuses a stream whose items do not add up), so what it accepts is what
//! an app on it accepts. The same scenarios run with the Python SDK
//! (`openai` on PyPI, in clients/.venv-py, driven by
//! `clients/openai_responses.py`), which validates every event with its own
//! pydantic types; and a golden transcript of a response is checked against
//! those types strictly. After a change to the stream,
//! `UPDATE_GOLDEN=1 cargo test --test api responses` and review the diff
//! against docs/protocols.md §9.

use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::{Value, json};

use crate::{
    clients::run_client,
    helpers::TestApp,
    orchestrator::{tool_messages, world},
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise},
    },
};

/// Runs `openai-responses.mjs` with `script` against `apps` (the first is
/// step's `on: 0`); panics unless every step not marked `expectError` passed.
pub(crate) async fn sdk(apps: &[TestApp], token: &str, mut script: Value) -> Vec<Value> {
    script["urls"] = apps[1..].iter().map(|app| Value::String(app.url("/v1"))).collect();
    let (ok, output) = run_client("openai-responses.mjs", &apps[0].url("/v1"), token, &script).await;
    assert!(ok, "{output}");
    output["steps"].as_array().unwrap().clone()
}

/// Runs `clients/openai_responses.py` (the Python SDK) like [`sdk`].
pub(crate) async fn python(apps: &[TestApp], token: &str, mut script: Value) -> Vec<Value> {
    script["urls"] = apps[1..].iter().map(|app| Value::String(app.url("/v1"))).collect();
    let clients = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    let interpreter = clients.join(".venv-py/bin/python");
    assert!(interpreter.exists(), "the Python clients are not installed: run scripts/ensure-python-clients.sh");
    let child = tokio::process::Command::new(interpreter)
        .arg(clients.join("openai_responses.py"))
        .arg(apps[0].url("/v1"))
        .arg(script.to_string())
        .env("SWITCHBOARD_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the client ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the client printed no JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    });
    assert!(output.status.success(), "{value}\n{}", String::from_utf8_lossy(&output.stderr));
    value["steps"].as_array().unwrap().clone()
}

pub(crate) fn events(step: &Value) -> &Vec<Value> {
    step["events"].as_array().unwrap()
}

fn numbers(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect()
}

fn deltas(events: &[Value]) -> String {
    (events.iter())
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

const ANSWER: [&str; 8] = ["Order ", "42 ", "ships ", "today ", "from ", "the ", "north ", "depot."];

#[tokio::test]
async fn a_dropped_background_stream_is_resumed_after_its_last_number_and_replayed_by_the_helper_on_other_replicas() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().text(ANSWER).usage(12, 8).chunk_delay(Duration::from_millis(20)));
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"stream": {"model": "mock", "input": "where is order 42?", "background": true}, "dropAfter": 6},
            {"on": 1, "retrieveStream": "$0.events.0.response.id", "startingAfter": "$0.events.5.sequence_number"},
            {"on": 2, "helper": "$0.events.0.response.id"},
            {"on": 2, "poll": "$0.events.0.response.id"},
        ]}),
    )
    .await;
    let (first, resumed, replayed) = (events(&steps[0]), events(&steps[1]), events(&steps[2]));
    assert_eq!(numbers(first), (0..6).collect::<Vec<_>>());
    assert_eq!(first[0]["type"], "response.created");
    assert_eq!(first[0]["response"]["status"], "in_progress");
    let id = first[0]["response"]["id"].as_str().unwrap();
    // Picked up on replica B: the numbers go on from 6 without a gap, and
    // the text is whole.
    let all: Vec<Value> = first.iter().chain(resumed).cloned().collect();
    assert_eq!(numbers(&all), (0..all.len() as u64).collect::<Vec<_>>());
    assert_eq!(deltas(&all), ANSWER.concat());
    let last = all.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["id"], id);
    assert_eq!(last["response"]["usage"]["output_tokens"], 8);
    // The helper on replica C replays it from the start, the same events.
    assert_eq!(replayed, &all, "a replay is the same events");
    assert_eq!(steps[2]["outputText"], ANSWER.concat());
    assert_eq!(steps[3]["response"]["status"], "completed");
    assert_eq!(steps[3]["response"]["output_text"], ANSWER.concat());
}

#[tokio::test]
async fn a_conversation_goes_on_with_previous_response_id_on_another_replica_through_a_function_tool() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().text(["Drawing."]).tool_call(
        "call_c",
        "render_chart",
        [r#"{"metric":"#, r#""refunds"}"#],
    ));
    w.upstream.push(Reply::new().text(["Here is the chart."]));
    w.upstream.push(Reply::new().text(["You asked for a chart."]));
    let chart = json!({"type": "function", "name": "render_chart", "description": "Draw a chart",
        "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}});
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"create": {"model": "mock", "input": "chart the refunds", "tools": [chart],
                "instructions": "You draw charts."}},
            {"on": 1, "stream": {"model": "mock", "previous_response_id": "$0.response.id", "tools": [chart],
                "input": [{"type": "function_call_output", "call_id": "$0.response.output.1.call_id",
                    "output": "{\"drawn\":true}"}]}},
            {"on": 2, "create": {"model": "mock", "previous_response_id": "$1.events.0.response.id",
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "what did I ask?"}]}]}},
        ]}),
    )
    .await;
    let paused = &steps[0]["response"];
    assert_eq!(paused["status"], "completed");
    let output = paused["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[1]["type"], "function_call");
    assert_eq!(
        (output[1]["name"].as_str(), output[1]["arguments"].as_str()),
        (Some("render_chart"), Some(r#"{"metric":"refunds"}"#))
    );
    let continued = events(&steps[1]);
    assert_eq!(continued[0]["sequence_number"], 0, "a new response, numbered from 0");
    assert_ne!(continued[0]["response"]["id"], paused["id"]);
    assert_eq!(deltas(continued), "Here is the chart.");
    assert_eq!(steps[2]["response"]["output_text"], "You asked for a chart.");
    // The model got the instructions, the client's output as the call's
    // result, and the whole conversation on the third response.
    let requests = w.upstream.requests();
    assert_eq!(requests[0].body["messages"][0]["content"], "You draw charts.");
    assert!(tool_messages(&requests[1].body).iter().any(|m| m["content"] == r#"{"drawn":true}"#));
    let last = requests[2].body["messages"].as_array().unwrap();
    assert!(last.iter().any(|m| m["content"] == "chart the refunds"), "{last:?}");
    assert_eq!(last.last().unwrap()["content"], "what did I ask?");
}

#[tokio::test]
async fn an_approval_request_ends_the_response_and_the_approval_runs_the_tool_on_another_replica() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"42"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    let asked =
        sdk(&w.apps, &w.token, json!({"steps": [{"create": {"model": "mock", "input": "refund order 42"}}]})).await;
    let paused = &asked[0]["response"];
    let asked = &paused["output"][0];
    assert_eq!(asked["type"], "mcp_approval_request");
    assert_eq!((asked["name"].as_str(), asked["server_label"].as_str()), (Some("refund"), Some("switchboard")));
    assert_eq!(w.tools.calls("refund"), 0, "nothing ran before the approval");
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"on": 2, "stream": {"model": "mock", "previous_response_id": paused["id"],
                "input": [{"type": "mcp_approval_response", "approval_request_id": asked["id"], "approve": true}]}},
        ]}),
    )
    .await;
    let approved = events(&steps[0]);
    let completed = &approved.last().unwrap()["response"];
    let call = &completed["output"][0];
    assert_eq!((call["type"].as_str(), call["status"].as_str()), (Some("mcp_call"), Some("completed")));
    assert_eq!(completed["output_text"], "Refunded.");
    assert_eq!(w.tools.calls("refund"), 1);
}

#[tokio::test]
async fn a_background_response_is_cancelled_from_another_replica_and_a_second_cancel_answers_the_same() {
    let w = world(3, |_| {}).await;
    // The model sends two chunks and holds the stream: the turn runs on.
    w.upstream.push(Reply::new().text(["one ", "two ", "three"]).stall_after(2));
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"stream": {"model": "mock", "input": "count", "background": true}, "dropAfter": 4},
            {"on": 1, "cancel": "$0.events.0.response.id"},
            {"on": 2, "cancel": "$0.events.0.response.id"},
            {"on": 0, "retrieve": "$0.events.0.response.id"},
        ]}),
    )
    .await;
    for step in &steps[1..] {
        assert_eq!(step["response"]["status"], "cancelled", "{step}");
    }
    assert_eq!(steps[1]["response"], steps[2]["response"], "cancel is idempotent");
}

#[tokio::test]
async fn errors_are_the_sdks_own_classes() {
    let w = world(1, |o| {
        o.tenant_toml.push(("globex".into(), "rate_limit = { requests_per_second = 1, burst = 1 }".into()));
    })
    .await;
    let other_tenant = w.apps[0].token("globex", "bob");
    w.upstream.push(Reply::new().text(["Hi."]));
    let steps = sdk(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"create": {"model": "mock", "input": "hi"}},
            {"apiKey": "not-a-key", "create": {"model": "mock", "input": "hi"}, "expectError": true},
            {"retrieve": "resp_1_no-such-session", "expectError": true},
            {"apiKey": other_tenant, "retrieve": "$0.response.id", "expectError": true},
            {"create": {"model": "no-such-model", "input": "hi"}, "expectError": true},
            {"create": {"model": "mock", "input": "hi", "frobnicate": true}, "expectError": true},
            {"create": {"model": "mock", "input": [{"type": "web_search_call"}]}, "expectError": true},
            {"apiKey": other_tenant, "retrieve": "resp_1_x", "expectError": true},
            {"apiKey": other_tenant, "retrieve": "resp_1_x", "expectError": true},
        ]}),
    )
    .await;
    let class = |i: usize| {
        (steps[i]["error"]["class"].as_str().unwrap_or_default().to_string(), steps[i]["error"]["status"].as_u64())
    };
    assert_eq!(class(1), ("AuthenticationError".into(), Some(401)));
    assert_eq!(class(2), ("NotFoundError".into(), Some(404)));
    assert_eq!(class(3), ("NotFoundError".into(), Some(404)), "another tenant's response is not there");
    assert_eq!(class(4).1, Some(400));
    assert_eq!(class(4).0, "BadRequestError");
    assert_eq!(class(5), ("BadRequestError".into(), Some(400)));
    assert!(steps[5]["error"]["message"].as_str().unwrap().contains("frobnicate"));
    assert_eq!(class(6), ("BadRequestError".into(), Some(400)));
    assert_eq!(class(8), ("RateLimitError".into(), Some(429)), "globex's second request in a second");
    assert_eq!(steps[8]["error"]["type"], "rate_limit_error");

    // With the SDK's retries on, it waits the `retry-after` it was given
    // and gets through.
    let output = run_client(
        "openai-responses.mjs",
        &w.apps[0].url("/v1"),
        &other_tenant,
        &json!({"maxRetries": 2, "steps": [{"retrieve": "resp_1_x", "expectError": true},
            {"retrieve": "resp_1_x", "expectError": true}]}),
    )
    .await
    .1;
    let statuses: Vec<u64> =
        output["exchanges"].as_array().unwrap().iter().map(|e| e["status"].as_u64().unwrap()).collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(output["steps"][1]["error"]["class"], "NotFoundError", "retried past the 429: {output}");
}

#[tokio::test]
async fn the_python_sdk_resumes_replays_and_continues_a_response_across_replicas_with_its_own_types() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().text(ANSWER).usage(12, 8).chunk_delay(Duration::from_millis(20)));
    w.upstream.push(Reply::new().text(["Drawing."]).tool_call("call_c", "render_chart", [r#"{"metric":"refunds"}"#]));
    w.upstream.push(Reply::new().text(["Here is the chart."]));
    let chart = json!({"type": "function", "name": "render_chart", "parameters": {"type": "object"}});
    let steps = python(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"stream": {"model": "mock", "input": "where is order 42?", "background": true}, "dropAfter": 6},
            {"on": 1, "retrieveStream": "$0.events.0.response.id", "startingAfter": 5},
            {"on": 2, "helper": "$0.events.0.response.id"},
            {"on": 1, "create": {"model": "mock", "previous_response_id": "$0.events.0.response.id",
                "input": "chart the refunds", "tools": [chart]}},
            {"on": 2, "create": {"model": "mock", "previous_response_id": "$3.response.id", "tools": [chart],
                "input": [{"type": "function_call_output", "call_id": "$3.response.output.1.call_id",
                    "output": "drawn"}]}},
            {"apiKey": "not-a-key", "retrieve": "$3.response.id", "expectError": true},
            {"retrieve": "resp_3_no-such-session", "expectError": true},
            {"create": {"model": "mock", "input": "hi", "extra_body": {"frobnicate": 1}}, "expectError": true},
        ]}),
    )
    .await;
    let all: Vec<Value> = events(&steps[0]).iter().chain(events(&steps[1])).cloned().collect();
    assert_eq!(numbers(&all), (0..all.len() as u64).collect::<Vec<_>>());
    assert_eq!(deltas(&all), ANSWER.concat());
    assert_eq!(steps[2]["outputText"], ANSWER.concat(), "the helper on replica C");
    assert_eq!(events(&steps[2]).len(), all.len());
    let paused = &steps[3]["response"];
    assert_eq!(paused["output"][1]["type"], "function_call");
    assert_eq!(steps[4]["response"]["output_text"], "Here is the chart.");
    let class = |i: usize| steps[i]["error"]["class"].as_str().unwrap_or_default().to_string();
    assert_eq!(class(5), "AuthenticationError");
    assert_eq!(class(6), "NotFoundError");
    assert_eq!(class(7), "BadRequestError");
}

#[tokio::test]
async fn a_response_matches_the_golden_transcript_and_the_python_sdks_types_strictly() {
    let w = world(2, |_| {}).await;
    w.upstream.push(Reply::new().text(["Checking."]).tool_call("call_l", "lookup", [r#"{"id":"#, r#""42"}"#]));
    w.upstream.push(Reply::new().text(["Order 42 ", "ships today."]).tool_call(
        "call_c",
        "render_chart",
        [r#"{"metric":"eta"}"#],
    ));
    w.upstream.push(Reply::new().text(["Here is the chart."]).usage(30, 4));
    let chart = json!({"type": "function", "name": "render_chart", "parameters": {"type": "object"}});
    let body = json!({"model": "mock", "input": "where is order 42?", "tools": [chart], "stream": true});
    let paused = w.apps[0].post_json("/v1/responses", Some(&w.token), &body).await;
    assert_eq!(paused.headers()["content-type"], "text/event-stream");
    let paused = paused.text().await.unwrap();
    let first = data_of(&paused)[0].clone();
    let id = first["response"]["id"].as_str().unwrap().to_string();
    let call = data_of(&paused)
        .iter()
        .find_map(|d| (d["item"]["type"] == "function_call").then(|| d["item"]["call_id"].clone()))
        .unwrap();
    let body = json!({"model": "mock", "previous_response_id": id, "tools": [chart], "stream": true,
        "input": [{"type": "function_call_output", "call_id": call, "output": "drawn"}]});
    let resumed = w.apps[1].post_json("/v1/responses", Some(&w.token), &body).await.text().await.unwrap();

    let session = id.split_once('_').unwrap().1.split_once('_').unwrap().1.to_string();
    for (name, transcript) in [("responses_pause.sse", &paused), ("responses_resume.sse", &resumed)] {
        let created = data_of(transcript)[0]["response"]["created_at"].to_string();
        let normalised = normalise(
            transcript,
            &[(&session, "<session>"), (&format!("\"created_at\":{created}"), "\"created_at\":\"<created_at>\"")],
        );
        assert_golden(name, &normalised);
        // The SDK's own types, strictly, on what was sent.
        let path = std::env::temp_dir().join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, transcript).unwrap();
        let steps = python(&w.apps, &w.token, json!({"steps": [{"validate": path}]})).await;
        let _ = std::fs::remove_file(&path);
        let types = steps[0]["types"].as_array().unwrap();
        assert_eq!(types.len(), data_of(transcript).len(), "{name}: every event is one of the SDK's");
    }
    let kinds: Vec<String> = data_of(&paused).iter().map(|d| d["type"].as_str().unwrap().to_string()).collect();
    assert!(kinds.contains(&"response.mcp_call.completed".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"response.function_call_arguments.done".to_string()), "{kinds:?}");
}

/// The `data:` payloads of an SSE transcript.
fn data_of(transcript: &str) -> Vec<Value> {
    transcript.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[tokio::test]
async fn the_python_sdk_answers_an_approval_polls_a_background_response_and_cancels_from_other_replicas() {
    let w = world(3, |_| {}).await;
    w.upstream.push(Reply::new().tool_call("call_r", "refund", [r#"{"order":"42"}"#]));
    w.upstream.push(Reply::new().text(["Refunded."]));
    w.upstream.push(Reply::new().text(["one ", "two ", "three"]).stall_after(2));
    let asked =
        python(&w.apps, &w.token, json!({"steps": [{"create": {"model": "mock", "input": "refund 42"}}]})).await;
    let paused = &asked[0]["response"];
    assert_eq!(paused["output"][0]["type"], "mcp_approval_request");
    assert_eq!(w.tools.calls("refund"), 0);
    let steps = python(
        &w.apps,
        &w.token,
        json!({"steps": [
            {"on": 1, "create": {"model": "mock", "previous_response_id": paused["id"], "background": true,
                "input": [{"type": "mcp_approval_response", "approval_request_id": paused["output"][0]["id"],
                    "approve": true}]}},
            {"on": 2, "poll": "$0.response.id"},
            {"on": 0, "create": {"model": "mock", "input": "count", "background": true}},
            {"on": 1, "cancel": "$2.response.id"},
            {"on": 2, "cancel": "$2.response.id"},
        ]}),
    )
    .await;
    assert_eq!(steps[0]["response"]["status"], "in_progress", "a background response answers at once");
    let done = &steps[1]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["type"], "mcp_call");
    assert_eq!(done["output_text"], "Refunded.");
    assert_eq!(w.tools.calls("refund"), 1);
    assert_eq!(steps[3]["response"]["status"], "cancelled");
    assert_eq!(steps[3]["response"], steps[4]["response"], "cancel is idempotent");
}

/// An OpenAI error body with `status`, its `type` and a message naming `part`.
pub(crate) async fn assert_openai_error(response: reqwest::Response, status: u16, kind: &str, part: &str) {
    assert_eq!(response.status().as_u16(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(part), "{body}");
    assert!(body["error"].get("param").is_some() && body["error"]["code"].is_string(), "{body}");
}

#[tokio::test]
async fn bad_requests_get_openai_errors_and_lose_nothing() {
    let w = world(2, |_| {}).await;
    let (a, b, token) = (&w.apps[0], &w.apps[1], Some(w.token.as_str()));
    // Not JSON, a wrong type, no input, a tool type that is not served.
    let raw = a.client.post(a.url("/v1/responses")).bearer_auth(&w.token).header("content-type", "application/json");
    assert_openai_error(raw.body("{\"model\":").send().await.unwrap(), 400, "invalid_request_error", "").await;
    for (body, part) in [
        (json!({"model": "mock", "input": 5}), "invalid request"),
        (json!({"model": "mock"}), "input"),
        (json!({"model": "mock", "input": "hi", "tools": [{"type": "web_search"}]}), "tools[0].type"),
        (json!({"model": "mock", "input": [{"type": "message", "role": "robot", "content": "x"}]}), "input[0].role"),
        (json!({"model": "mock", "input": "hi", "background": true, "store": false}), "store"),
    ] {
        assert_openai_error(a.post_json("/v1/responses", token, &body).await, 400, "invalid_request_error", part).await;
    }
    // An expired token; an id that is no response id.
    assert_openai_error(a.get("/v1/responses/resp_1_x", Some("not.a.jwt")).await, 401, "authentication_error", "")
        .await;
    assert_openai_error(a.get("/v1/responses/msg_1", token).await, 404, "not_found_error", "msg_1").await;

    // A conversation paused on a function call: a wrong call id and a
    // second answer after the first are refused, and the first one lands once.
    w.upstream.push(Reply::new().tool_call("call_c", "render_chart", [r#"{}"#]));
    w.upstream.push(Reply::new().text(["Drawn."]));
    w.upstream.push(Reply::new().text(["Again."]));
    let chart = json!({"type": "function", "name": "render_chart"});
    let paused: Value = a
        .post_json("/v1/responses", token, &json!({"model": "mock", "input": "chart", "tools": [chart]}))
        .await
        .json()
        .await
        .unwrap();
    let id = paused["id"].as_str().unwrap();
    let answer = |call: &str| {
        json!({"model": "mock", "previous_response_id": id, "tools": [chart],
            "input": [{"type": "function_call_output", "call_id": call, "output": "ok"}]})
    };
    assert_openai_error(
        b.post_json("/v1/responses", token, &answer("call_nope")).await,
        409,
        "conflict_error",
        "call_c",
    )
    .await;
    let answered = b.post_json("/v1/responses", token, &answer("call_c")).await;
    assert_eq!(answered.status(), 200);
    let answered: Value = answered.json().await.unwrap();
    assert_eq!(answered["output_text"], "Drawn.");
    // The paused response is no longer the latest: continuing it is a 400.
    assert_openai_error(
        a.post_json("/v1/responses", token, &answer("call_c")).await,
        400,
        "invalid_request_error",
        "latest",
    )
    .await;
    let next = json!({"model": "mock", "previous_response_id": answered["id"], "input": "again"});
    let again: Value = a.post_json("/v1/responses", token, &next).await.json().await.unwrap();
    assert_eq!(again["output_text"], "Again.");
    assert_eq!(w.upstream.requests().len(), 3, "nothing ran twice");
    // Polled on either replica, each response is as it ended.
    for (app, response) in [(a, &paused), (b, &answered), (b, &again)] {
        let path = format!("/v1/responses/{}", response["id"].as_str().unwrap());
        let polled: Value = app.get(&path, token).await.json().await.unwrap();
        assert_eq!(&polled, response);
    }
    // Deleted: gone on every replica.
    let deleted = b.client.delete(b.url(&format!("/v1/responses/{}", again["id"].as_str().unwrap())));
    assert_eq!(deleted.bearer_auth(&w.token).send().await.unwrap().status(), 200);
    let path = format!("/v1/responses/{}", answered["id"].as_str().unwrap());
    assert_openai_error(a.get(&path, token).await, 404, "not_found_error", "not found").await;
}
