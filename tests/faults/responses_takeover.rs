//! The OpenAI SDK (`openai` on npm, unchanged) through nginx (the deployed
//! `deploy/nginx.conf`) in front of three real replicas: a background
//! streamed response whose replica is SIGKILLed mid-answer is picked up
//! with `responses.retrieve(id, {stream: true, starting_after: N})` through
//! the same nginx, and replayed whole by `responses.stream({response_id})`:
//! contiguous sequence numbers, nothing lost or repeated, the answer whole;
//! the Python SDK (`openai` on PyPI) gets the same events through nginx.
//! First, on the same cluster, each SDK holds a conversation through nginx
//! (a function tool, polling, a cancel, the error classes, an approval,
//! input items).

use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::{Value, json};

use crate::{
    harness::{
        cluster::{Cluster, ClusterOptions},
        upstream::{ScriptedCall, expected_answer},
    },
    nginx::Nginx,
};

const WORDS: u32 = 60;
/// Longer than the turn takes: the death hint takes the session over.
const LEASE_TTL_SECS: u64 = 30;
const DEADLINE: Duration = Duration::from_secs(30);

/// Three replicas (tokens 40 ms apart) behind nginx, and the SDKs' base
/// URL through it.
async fn behind_nginx() -> (Cluster, Nginx, String) {
    let cluster = Cluster::start(ClusterOptions {
        lease_ttl_secs: LEASE_TTL_SECS,
        chunk_delay: Duration::from_millis(40),
        agent_toml: "titles = false\n".into(),
        // A server tool that asks first: the approval round trip.
        extra_toml: r#"
[[tools]]
name = "refund_order"
description = "Refund an order."
parameters = { type = "object", properties = { id = { type = "string" } } }
builtin = "demo"
permission = "ask"
"#
        .into(),
        ..ClusterOptions::default()
    })
    .await;
    let upstreams: Vec<String> =
        cluster.urls().iter().map(|u| u.trim_start_matches("http://").trim_end_matches('/').to_string()).collect();
    let nginx = Nginx::start(&upstreams).await;
    let base = format!("{}/v1", nginx.url());
    (cluster, nginx, base)
}

/// Runs `clients/openai-responses.mjs` (npm's SDK) against `base` with `script`.
async fn sdk(base: &str, token: &str, script: &Value) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    run(tokio::process::Command::new("node").arg(dir.join("openai-responses.mjs")), base, token, script).await
}

/// Runs `clients/openai_responses.py` (PyPI's SDK) against `base` with `script`.
async fn sdk_python(base: &str, token: &str, script: &Value) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients");
    let mut command = tokio::process::Command::new(dir.join(".venv-py/bin/python"));
    run(command.arg(dir.join("openai_responses.py")), base, token, script).await
}

async fn run(command: &mut tokio::process::Command, base: &str, token: &str, script: &Value) -> Value {
    let child = command
        .arg(base)
        .arg(script.to_string())
        .env("SWITCHBOARD_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let output = tokio::time::timeout(DEADLINE, child.wait_with_output()).await.expect("the client ends").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the client printed no JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    });
    assert!(output.status.success(), "{value}\n{}", String::from_utf8_lossy(&output.stderr));
    value
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

/// The texts of a response's `message` items.
fn messages(response: &Value) -> Vec<String> {
    (response["output"].as_array().unwrap().iter())
        .filter(|item| item["type"] == "message")
        .map(|item| item["content"][0]["text"].as_str().unwrap().to_string())
        .collect()
}

/// One cluster behind nginx for both parts (each part's three replicas,
/// nginx and SDK processes would otherwise load the shared cores twice).
#[tokio::test]
async fn the_openai_sdks_hold_a_conversation_through_nginx_and_resume_a_response_whose_replica_is_killed() {
    let (mut cluster, nginx, base) = behind_nginx().await;
    conversation(&cluster, &base).await;
    killed_mid_answer(&mut cluster, &base).await;
    drop(nginx);
}

/// A background streamed response whose replica is SIGKILLed mid-answer:
/// resumed after its last number, replayed by the helper, by both SDKs.
async fn killed_mid_answer(cluster: &mut Cluster, base: &str) {
    let known = session_ids(cluster).await;
    let input = format!("words:{WORDS} {}", uuid::Uuid::new_v4().simple());
    let script = json!({"steps": [{"stream": {"model": "mock", "input": input, "background": true}}]});
    let streaming = tokio::spawn({
        let (base, token) = (base.to_string(), cluster.token.clone());
        async move { sdk(&base, &token, &script).await }
    });
    // The conversation's session, once it has a dozen events.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let session = loop {
        assert!(tokio::time::Instant::now() < deadline, "the response started\n{}", cluster.dump_logs());
        let new = session_ids(cluster).await.into_iter().find(|id| !known.contains(id));
        if let Some(id) = new
            && cluster.last_seq(&id).await >= 12
        {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let owner = cluster.owner_of(&session).await.expect("the session has an owner");
    cluster.replicas[owner].kill9().await;

    let first = streaming.await.unwrap();
    let first = &first["steps"][0];
    assert!(first["broken"].is_string(), "the stream broke with its replica: {first}");
    let first = first["events"].as_array().unwrap().clone();
    assert!(first.len() >= 5, "{first:?}");
    let id = first[0]["response"]["id"].as_str().unwrap().to_string();
    let last = first.last().unwrap()["sequence_number"].as_u64().unwrap();

    // The events after the last one received, then the helper's replay.
    let resume = json!({"steps": [{"retrieveStream": id, "startingAfter": last}, {"helper": id}]});
    let steps = sdk(base, &cluster.token, &resume).await;
    let steps = steps["steps"].as_array().unwrap();
    let resumed = steps[0]["events"].as_array().unwrap();
    let all: Vec<Value> = first.iter().chain(resumed).cloned().collect();
    assert_eq!(numbers(&all), (0..all.len() as u64).collect::<Vec<_>>(), "contiguous from 0\n{}", cluster.dump_logs());
    let completed = &all.last().unwrap()["response"];
    assert_eq!(all.last().unwrap()["type"], "response.completed", "{}", cluster.dump_logs());
    // The step the takeover cut stays as it was sent; the regenerated one
    // is the whole answer.
    let texts = messages(completed);
    println!(
        "{} events before the kill, {} after it on another replica; message items: {:?}",
        first.len(),
        resumed.len(),
        texts.iter().map(String::len).collect::<Vec<_>>()
    );
    assert_eq!(texts.last().unwrap(), &expected_answer(WORDS), "{texts:?}");
    assert_eq!(deltas(&all), texts.concat(), "every delta once, in order");
    // The helper replays the same events from the start.
    assert_eq!(steps[1]["events"].as_array().unwrap(), &all);
    assert_eq!(steps[1]["response"]["id"], id);
    // And so does the Python SDK, through the same nginx, checking every
    // event with its own types.
    let python = sdk_python(base, &cluster.token, &resume).await;
    let python = python["steps"].as_array().unwrap();
    let after = python[0]["events"].as_array().unwrap();
    assert_eq!(numbers(after), numbers(resumed), "the same events after N");
    assert_eq!(deltas(after), deltas(resumed));
    assert_eq!(python[1]["events"].as_array().unwrap().len(), all.len());
    assert_eq!(python[1]["outputText"], texts.concat());
}

/// The ids of the sessions the cluster's token sees (the newest 100,
/// asked of replica 0, before any kill); none when it does not answer.
async fn session_ids(cluster: &Cluster) -> Vec<String> {
    let response = reqwest::Client::new()
        .get(cluster.replicas[0].url("/v1/sessions?limit=100"))
        .bearer_auth(&cluster.token)
        .send();
    let Ok(response) = response.await else { return Vec::new() };
    let page: Value = response.json().await.unwrap_or_default();
    (page["sessions"].as_array().into_iter().flatten()).filter_map(|s| s["id"].as_str().map(str::to_string)).collect()
}

/// The SDKs' other calls through the same nginx, each request going to
/// the next replica: a function tool round trip with `previous_response_id`,
/// a background response polled to `completed`, a cancel of a running one,
/// the error classes, an approval round trip, and a response's input items.
async fn conversation(cluster: &Cluster, base: &str) {
    cluster
        .upstream
        .add_script("chart", vec![ScriptedCall::new("call_chart", "render_chart", json!({"metric": "eta"}))]);
    cluster.upstream.add_script("refund", vec![ScriptedCall::new("call_refund", "refund_order", json!({"id": "42"}))]);
    let chart = json!({"type": "function", "name": "render_chart", "parameters": {"type": "object"}});
    let script = |run: &str| {
        json!({"steps": [
            {"create": {"model": "mock", "input": format!("script:chart words:5 {run}"), "tools": [chart]}},
            {"create": {"model": "mock", "previous_response_id": "$0.response.id", "tools": [chart],
                "input": [{"type": "function_call_output", "call_id": "$0.response.output.0.call_id",
                    "output": "drawn"}]}},
            {"create": {"model": "mock", "previous_response_id": "$1.response.id", "background": true,
                "input": format!("words:8 {run}")}},
            {"poll": "$2.response.id"},
            {"stream": {"model": "mock", "previous_response_id": "$2.response.id", "background": true,
                "input": format!("words:300 {run}")}, "dropAfter": 5},
            {"cancel": "$4.events.0.response.id"},
            {"retrieve": "$4.events.0.response.id"},
            {"apiKey": "not-a-key", "retrieve": "$4.events.0.response.id", "expectError": true},
            {"retrieve": "resp_1_no-such-session", "expectError": true},
            {"create": {"model": "mock", "input": format!("script:refund words:4 {run}")}},
            {"create": {"model": "mock", "previous_response_id": "$9.response.id",
                "input": [{"type": "mcp_approval_response", "approve": true,
                    "approval_request_id": "$9.response.output.0.id"}]}},
            {"inputItems": "$10.response.id"},
        ]})
    };
    for (sdk_name, output) in [
        ("npm", sdk(base, &cluster.token, &script(&uuid::Uuid::new_v4().simple().to_string())).await),
        ("PyPI", sdk_python(base, &cluster.token, &script(&uuid::Uuid::new_v4().simple().to_string())).await),
    ] {
        let steps = output["steps"].as_array().unwrap();
        let logs = || format!("{sdk_name}: {output}\n{}", cluster.dump_logs());
        let call = &steps[0]["response"]["output"][0];
        assert_eq!(
            (call["type"].as_str(), call["name"].as_str()),
            (Some("function_call"), Some("render_chart")),
            "{}",
            logs()
        );
        assert_eq!(steps[1]["response"]["output_text"], expected_answer(5), "{}", logs());
        assert_eq!(steps[2]["response"]["status"], "in_progress", "{}", logs());
        assert_eq!(steps[3]["response"]["status"], "completed", "{}", logs());
        assert_eq!(steps[3]["response"]["output_text"], expected_answer(8), "{}", logs());
        assert_eq!(steps[5]["response"]["status"], "cancelled", "{}", logs());
        assert_eq!(steps[6]["response"]["status"], "cancelled", "{}", logs());
        assert_eq!(steps[7]["error"]["class"], "AuthenticationError", "{}", logs());
        assert_eq!(steps[8]["error"]["class"], "NotFoundError", "{}", logs());
        // The ask ends the response; the approval, on the next replica,
        // runs the tool and the answer follows.
        let asked = &steps[9]["response"]["output"][0];
        assert_eq!(
            (asked["type"].as_str(), asked["name"].as_str()),
            (Some("mcp_approval_request"), Some("refund_order")),
            "{}",
            logs()
        );
        let approved = &steps[10]["response"];
        assert_eq!(approved["output"][0]["type"], "mcp_call", "{}", logs());
        assert_eq!(approved["output"][0]["status"], "completed", "{}", logs());
        assert_eq!(approved["output_text"], expected_answer(4), "{}", logs());
        let items = steps[11]["items"].as_array().unwrap();
        assert_eq!(items[0]["type"], "mcp_approval_response", "{}", logs());
        assert_eq!(items[0]["approval_request_id"], asked["id"], "{}", logs());
    }
}
