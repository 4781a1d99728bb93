//! Existing HolmesGPT clients, unchanged: they send `X-API-Key` (or
//! nothing), no `session_id`, answer some approvals and not others, rebuild
//! their history, and call seed 001's endpoints. Two replicas share Redis,
//! one scripted model and one counting tool server
//! (`crate::orchestrator::world`); a pause made on replica A is answered on B.

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::{
    helpers::{AppOptions, api_key_entry, assert_detail, assert_invalid, store_snapshot},
    holmes::normalise,
    orchestrator::{World, kinds, of_kind, tool_messages, world},
    sse::{Frame, SseReader},
    support::{
        mock_upstream::Reply,
        raw_sse::{RawSse, assert_golden},
    },
};

/// The key a Holmes UI sends as `X-API-Key`.
const UI_KEY: &str = "holmes-ui-key-0123456789";

/// acme accepts [`UI_KEY`] for subject `holmes-ui`.
fn with_ui_key(options: &mut AppOptions) {
    options.tenant_toml.push(("acme".into(), format!("api_keys = [{}]", api_key_entry(UI_KEY, "holmes-ui"))));
}

/// `POST path` on replica `on` with the UI's key.
async fn post(w: &World, on: usize, path: &str, body: &Value) -> Response {
    let app = &w.apps[on];
    app.client.post(app.url(path)).header("x-api-key", UI_KEY).json(body).send().await.unwrap()
}

async fn frames(response: Response) -> Vec<Frame> {
    assert_eq!(response.status(), StatusCode::OK);
    SseReader::new(response).rest().await
}

/// The frames of a stream, after checking its raw text against the golden
/// transcript `golden`.
async fn golden_frames(response: Response, golden: &str) -> Vec<Frame> {
    let id = response.headers()["x-session-id"].to_str().unwrap().to_string();
    let mut raw = RawSse::new(response);
    let text = raw.rest().await;
    assert_golden(golden, &normalise(&text, &id));
    raw.frames()
}

/// A model message that calls `refund` twice (orders 1 and 2) and, when
/// `chart`, the pause-mode frontend tool `render_chart` twice.
fn two_refunds(chart: bool) -> Reply {
    let mut reply = Reply::new().tool_call("call_a", "refund", [r#"{"order":"#, r#""1"}"#]).tool_call(
        "call_b",
        "refund",
        [r#"{"order":"2"}"#],
    );
    if chart {
        reply = reply.tool_call("call_c1", "render_chart", [r#"{"metric":"cpu"}"#]).tool_call(
            "call_c2",
            "render_chart",
            [r#"{"metric":"mem"}"#],
        );
    }
    reply
}

fn chart_tool() -> Value {
    json!({"name": "render_chart", "description": "Draw a chart", "mode": "pause",
        "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}}})
}

#[tokio::test]
async fn a_key_holding_client_approves_one_of_two_calls_on_another_replica_and_the_other_is_denied() {
    let w = world(2, with_ui_key).await;
    w.upstream.push(two_refunds(false));
    let ask = json!({"ask": "refund orders 1 and 2", "model": "mock", "stream": true, "enable_tool_approval": true});
    let paused = frames(post(&w, 0, "/api/chat", &ask).await).await;
    let pause = paused.last().unwrap();
    assert_eq!(pause.event, "approval_required");
    let pending: Vec<&str> = pause.data["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(pending, ["call_a", "call_b"]);
    assert_eq!(w.tools.calls("refund"), 0);

    // On B: no session_id, no history; one decision.
    w.upstream.push(Reply::new().text(["Refunded order 1; order 2 was not approved."]));
    let decide = json!({"ask": "", "stream": true, "tool_decisions": [{"tool_call_id": "call_a", "approved": true}]});
    let resumed = golden_frames(post(&w, 1, "/api/chat", &decide).await, "holmes_partial_decisions.sse").await;
    assert_eq!(
        kinds(&resumed),
        ["tool_calling_result", "tool_calling_result", "ai_message", "token_count", "ai_answer_end"]
    );
    assert_eq!(w.tools.calls("refund"), 1, "the approved call ran once");
    assert_eq!(w.tools.bodies("refund")[0]["arguments"], json!({"order": "1"}), "with the stored arguments");
    let denied =
        of_kind(&resumed, "tool_calling_result").into_iter().find(|f| f.data["tool_call_id"] == "call_b").unwrap();
    assert_eq!(denied.data["result"]["status"], "error");
    assert_eq!(denied.data["result"]["error"], "Tool execution was denied by the user.");
    let seen = tool_messages(&w.model_request(1));
    let denial = seen.iter().find(|m| m["tool_call_id"] == "call_b").unwrap();
    assert!(denial["content"].as_str().unwrap().contains("Tool execution was denied by the user."), "{denial}");
    let end = resumed.last().unwrap();
    assert_eq!(end.data["analysis"], "Refunded order 1; order 2 was not approved.");
    assert_eq!(end.data["follow_up_actions"], json!([]), "a resume offers no follow-ups");

    // The pause is answered: the same decision again is a conflict (found by
    // history), or nothing to resume (by the call alone).
    let again = json!({"ask": "", "stream": true, "conversation_history": pause.data["conversation_history"],
        "tool_decisions": [{"tool_call_id": "call_a", "approved": true}]});
    assert_detail(post(&w, 0, "/api/chat", &again).await, StatusCode::CONFLICT).await;
    assert_detail(post(&w, 0, "/api/chat", &decide).await, StatusCode::NOT_FOUND).await;
    assert_eq!(w.tools.calls("refund"), 1);
}

#[tokio::test]
async fn a_client_that_rebuilds_its_history_resumes_with_frontend_results_alone_on_another_replica() {
    let w = world(2, with_ui_key).await;
    w.upstream.push(Reply::new().tool_call("call_c1", "render_chart", [r#"{"metric":"cpu"}"#]).tool_call(
        "call_c2",
        "render_chart",
        [r#"{"metric":"mem"}"#],
    ));
    let ask = json!({"ask": "chart cpu and memory", "model": "mock", "stream": true, "frontend_tools": [chart_tool()]});
    let paused = frames(post(&w, 0, "/api/chat", &ask).await).await;
    let pause = paused.last().unwrap();
    assert_eq!(pause.event, "approval_required");
    assert_eq!(pause.data["pending_frontend_tool_calls"].as_array().unwrap().len(), 2);

    // The client's own rebuild: its own system text, llm-style tool calls
    // with object arguments, and a tool message it made itself.
    let rebuilt = json!([
        {"role": "system", "content": "You are Holmes (as the client remembers it)."},
        {"role": "user", "content": "chart cpu and memory"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_c1", "type": "function", "function": {"name": "render_chart", "arguments": {"metric": "cpu"}}},
            {"id": "call_c2", "type": "function", "function": {"name": "render_chart", "arguments": {"metric": "mem"}}}]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "cpu chart drawn"},
    ]);
    w.upstream.push(Reply::new().text(["Here is the CPU chart."]));
    let resume = json!({"ask": "", "stream": true, "conversation_history": rebuilt, "frontend_tools": [chart_tool()],
        "frontend_tool_results": [{"tool_call_id": "call_c1", "tool_name": "render_chart", "result": "cpu chart drawn"}]});
    let resumed = frames(post(&w, 1, "/api/chat", &resume).await).await;
    assert_eq!(resumed.last().unwrap().event, "ai_answer_end");
    assert_eq!(resumed.last().unwrap().data["session_id"], pause.data["session_id"], "the stored pause went on");
    let sent = w.model_request(1);
    assert_eq!(sent["messages"][0]["content"], pause.data["conversation_history"][0]["content"], "the stored history");
    let seen = tool_messages(&sent);
    assert_eq!(
        seen.iter().map(|m| m["content"].as_str().unwrap()).collect::<Vec<_>>(),
        ["cpu chart drawn", "Error: frontend did not return a result for this tool call."]
    );
    let missing =
        of_kind(&resumed, "tool_calling_result").into_iter().find(|f| f.data["tool_call_id"] == "call_c2").unwrap();
    assert_eq!(missing.data["result"]["status"], "error");
}

#[tokio::test]
async fn a_history_paused_elsewhere_starts_a_new_conversation_in_which_nothing_approved_runs() {
    let w = world(1, with_ui_key).await;
    // A pause this gateway never made (another Holmes's, or expired).
    let history = json!([
        {"role": "system", "content": "You are Holmes."},
        {"role": "user", "content": "refund order 5 and chart it"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "refund", "arguments": "{\"order\":\"5\"}"}},
            {"id": "call_y", "type": "function", "function": {"name": "render_chart", "arguments": "{}"}}]},
    ]);
    w.upstream.push(Reply::new().text(["I could not refund it here."]));
    let body = json!({"ask": "", "model": "mock", "conversation_history": history,
        "tool_decisions": [{"tool_call_id": "call_x", "approved": true}],
        "frontend_tool_results": [{"tool_call_id": "call_y", "tool_name": "render_chart", "result": "drawn"}]});
    let response = post(&w, 0, "/api/chat", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["analysis"], "I could not refund it here.");
    assert_eq!(w.tools.calls("refund"), 0, "the client's approval is not carried out");
    let seen = tool_messages(&w.model_request(0));
    assert!(seen[0]["content"].as_str().unwrap().starts_with("This tool call was not run"), "{seen:?}");
    assert_eq!(seen[1]["content"], "drawn");
    let roles: Vec<&str> =
        answer["conversation_history"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "assistant"]);
}

/// An issue as seed 001's example sends it.
fn issue() -> Value {
    json!({"source": "prometheus", "title": "Pod CrashLoopBackOff", "description": "Pod is crashing repeatedly",
        "subject": {"namespace": "default", "pod": "my-pod"}, "context": {"alert": "KubePodCrashLooping"},
        "include_tool_calls": true, "model": "mock"})
}

#[tokio::test]
async fn an_investigation_answers_with_sections_from_structured_output_and_its_tool_calls() {
    let w = world(1, with_ui_key).await;
    w.upstream.push(Reply::new().tool_call("call_l", "lookup", [r#"{"id":"my-pod"}"#]));
    let answer = json!({"Alert Explanation": "The pod my-pod was OOMKilled.", "Key Findings": ["exit 137", "limit 64Mi"],
        "Conclusions and Possible Root causes": "The memory limit is too low.", "Next Steps": "Raise the limit.",
        "Related logs": null, "App or Infra?": "App.", "External links": null});
    w.upstream.push(Reply::new().text([answer.to_string()]).usage(100, 40));
    let response = post(&w, 0, "/api/investigate", &issue()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    // Field by field, as seed 001 documents the answer.
    assert_eq!(body["sections"]["Alert Explanation"], "The pod my-pod was OOMKilled.");
    assert_eq!(body["sections"]["Key Findings"], "exit 137\n\nlimit 64Mi");
    assert_eq!(body["sections"]["Related logs"], Value::Null);
    assert_eq!(body["sections"].as_object().unwrap().len(), 7);
    let analysis = body["analysis"].as_str().unwrap();
    assert!(analysis.starts_with("\n# Alert Explanation\nThe pod my-pod was OOMKilled.\n"), "{analysis}");
    assert!(analysis.find("# Key Findings").unwrap() < analysis.find("# Next Steps").unwrap());
    assert_eq!(body["tool_calls"][0]["tool_call_id"], "call_l");
    assert_eq!(body["tool_calls"][0]["tool_name"], "lookup");
    assert_eq!(body["tool_calls"][0]["result"]["status"], "success");
    assert!(body["tool_calls"][0]["description"].is_string());
    assert_eq!(body["instructions"], json!([]));
    assert!(body["metadata"]["usage"]["total_tokens"].as_u64().unwrap() >= 140);
    // The model was asked for the sections as structured output, with the issue in the question.
    let request = w.model_request(0);
    let schema = &request["response_format"]["json_schema"];
    assert_eq!(schema["name"], "InvestigationResult");
    assert_eq!(schema["schema"]["required"][0], "Alert Explanation");
    let question = request["messages"][1]["content"].as_str().unwrap();
    assert!(
        question.contains("Pod CrashLoopBackOff")
            && question.contains("my-pod")
            && question.contains("KubePodCrashLooping")
    );

    // Custom sections, in the request's order (raw text: `json!` sorts keys).
    w.upstream.push(Reply::new().text([r#"{"Summary": "OOM", "Fix": "more memory"}"#]));
    let custom =
        issue().to_string().replacen('{', r#"{"sections": {"Summary": "One line", "Fix": "What to change"}, "#, 1);
    let raw = w.apps[0].client.post(w.apps[0].url("/api/investigate")).header("x-api-key", UI_KEY);
    let response = raw.header("content-type", "application/json").body(custom).send().await.unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["sections"], json!({"Summary": "OOM", "Fix": "more memory"}));
    assert_eq!(body["analysis"], "\n# Summary\nOOM\n\n# Fix\nmore memory\n");
    assert_eq!(w.model_request(2)["response_format"]["json_schema"]["schema"]["required"], json!(["Summary", "Fix"]));
}

#[tokio::test]
async fn a_streamed_investigation_matches_the_golden_transcript() {
    let w = world(1, with_ui_key).await;
    w.upstream.push(Reply::new().text(["Checking the pod."]).tool_call("call_l", "lookup", [r#"{"id":"my-pod"}"#]));
    w.upstream.push(Reply::new().text([r#"{"Key Findings": "OOMKilled", "Next Steps": "raise the limit"}"#]));
    let body = issue().to_string().replacen('{', r#"{"sections": {"Key Findings": "what", "Next Steps": "then"}, "#, 1);
    let raw = w.apps[0].client.post(w.apps[0].url("/api/stream/investigate")).header("x-api-key", UI_KEY);
    let response = raw.header("content-type", "application/json").body(body).send().await.unwrap();
    let frames = golden_frames(response, "holmes_investigate.sse").await;
    assert_eq!(frames.last().unwrap().event, "ai_answer_end");
}

#[tokio::test]
async fn a_streamed_investigation_cut_mid_way_is_rejoined_on_another_replica() {
    let w = world(2, with_ui_key).await;
    w.upstream.push(Reply::new().text(["Checking."]).tool_call("call_l", "lookup", [r#"{"id":"my-pod"}"#]));
    w.upstream.push(Reply::new().text([r#"{"Key Findings": "OOMKilled", "Next Steps": "raise the limit"}"#]));
    let mut body = issue();
    body["sections"] = json!({"Key Findings": "what", "Next Steps": "then"});
    let response = post(&w, 0, "/api/stream/investigate", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let id = response.headers()["x-session-id"].to_str().unwrap().to_string();
    // Cut after the first tool result (a frame's id is the event that
    // released it: a client resumes after the last id it read whole).
    let mut stream = SseReader::new(response);
    let seen = stream.until_kind("tool_calling_result").await;
    let cursor = seen.last().unwrap().id.unwrap();
    drop(stream);

    let rejoined = w.apps[1]
        .client
        .get(w.apps[1].url(&format!("/v1/sessions/{id}/events?format=holmes")))
        .header("x-api-key", UI_KEY)
        .header("last-event-id", cursor.to_string())
        .send()
        .await
        .unwrap();
    let rest = frames(rejoined).await;
    assert!(rest.iter().all(|f| f.id.unwrap() > cursor), "nothing repeated");
    let mut all = seen;
    all.extend(rest);
    // Nothing lost, nothing repeated: the whole stream as seed 001 shows it.
    assert_eq!(
        kinds(&all),
        [
            "ai_message",
            "start_tool_calling",
            "tool_calling_result",
            "token_count",
            "ai_message",
            "token_count",
            "ai_answer_end"
        ]
    );
    let end = &all.last().unwrap().data;
    assert_eq!(end["sections"], json!({"Key Findings": "OOMKilled", "Next Steps": "raise the limit"}));
    assert_eq!(end["analysis"], "\n# Key Findings\nOOMKilled\n\n# Next Steps\nraise the limit\n");
    assert_eq!(end["instructions"], json!([]));
    assert!(end["metadata"]["usage"].is_object());
    assert_eq!(w.tools.calls("lookup"), 1);
}

#[tokio::test]
async fn issue_chat_and_the_streamed_chat_routes_answer_as_api_chat() {
    let w = world(1, with_ui_key).await;
    w.upstream.push(Reply::new().text(["Increase the memory limit."]));
    let body = json!({"ask": "How do I fix this issue?", "issue_type": "CrashLoopBackOff", "model": "mock",
        "investigation_result": {"result": "Pod crashed due to OOM.", "tools": [
            {"name": "kubectl_logs", "description": "kubectl logs my-pod", "output": "OOMKilled"}]},
        "conversation_history": [{"role": "system", "content": "You are a helpful assistant."}]});
    let response = post(&w, 0, "/api/issue_chat", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["analysis"], "Increase the memory limit.");
    let roles: Vec<&str> =
        answer["conversation_history"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant"]);
    assert!(
        answer["tool_calls"].is_array() && answer["follow_up_actions"].is_array() && answer["metadata"].is_object()
    );
    let system = w.model_request(0)["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system.starts_with("You are a helpful assistant."), "{system}");
    assert!(
        system.contains("CrashLoopBackOff")
            && system.contains("Pod crashed due to OOM.")
            && system.contains("OOMKilled")
    );

    let goldens = [("/api/stream/chat", "holmes_stream_chat.sse"), ("/api/stream/issue_chat", "holmes_issue_chat.sse")];
    for (path, golden) in goldens {
        w.upstream.push(Reply::new().text(["Streamed."]));
        let mut streamed = body.clone();
        streamed["stream"] = json!(false);
        let frames = golden_frames(post(&w, 0, path, &streamed).await, golden).await;
        assert_eq!(kinds(&frames), ["ai_message", "token_count", "ai_answer_end"], "{path}");
        assert_eq!(frames.last().unwrap().data["analysis"], "Streamed.");
    }
}

#[tokio::test]
async fn bad_input_on_the_seed_001_routes_is_fastapis_and_changes_nothing() {
    let w = world(1, with_ui_key).await;
    let before = store_snapshot(&w.apps[0]).await;
    let missing_title = {
        let mut body = issue();
        body.as_object_mut().unwrap().remove("title");
        body
    };
    let mut wrong_subject = issue();
    wrong_subject["subject"] = json!("my-pod");
    let mut template = issue();
    template["prompt_template"] = json!("builtin://my_own.jinja2");
    let invalid = [
        ("/api/investigate", missing_title.clone(), json!(["body", "title"]), "missing"),
        ("/api/stream/investigate", wrong_subject, json!(["body", "subject"]), "dict_type"),
        ("/api/investigate", template, json!(["body", "prompt_template"]), "value_error"),
        ("/api/issue_chat", json!({"ask": "x", "issue_type": "t"}), json!(["body", "investigation_result"]), "missing"),
        (
            "/api/stream/issue_chat",
            json!({"ask": "x", "investigation_result": {}}),
            json!(["body", "issue_type"]),
            "missing",
        ),
        ("/api/stream/chat", json!({"ask": 7}), json!(["body", "ask"]), "string_type"),
    ];
    for (path, body, loc, kind) in invalid {
        let entry = assert_invalid(post(&w, 0, path, &body).await).await;
        assert_eq!((&entry["loc"], entry["type"].as_str().unwrap()), (&loc, kind), "{path} {body}: {entry}");
    }
    let raw = w.apps[0].client.post(w.apps[0].url("/api/investigate")).header("x-api-key", UI_KEY);
    let malformed = raw.header("content-type", "application/json").body("{\"title\": ").send().await.unwrap();
    assert_eq!(assert_invalid(malformed).await["type"], "json_invalid");
    let mut unknown_model = issue();
    unknown_model["model"] = json!("gpt-9");
    let detail = assert_detail(post(&w, 0, "/api/investigate", &unknown_model).await, StatusCode::BAD_REQUEST).await;
    assert!(detail.contains("allowed"), "{detail}");
    let anonymous = w.apps[0].client.post(w.apps[0].url("/api/investigate")).json(&issue()).send().await.unwrap();
    assert_detail(anonymous, StatusCode::UNAUTHORIZED).await;
    let wrong_key = w.apps[0].client.post(w.apps[0].url("/api/issue_chat")).header("x-api-key", "nope").json(&issue());
    assert_detail(wrong_key.send().await.unwrap(), StatusCode::UNAUTHORIZED).await;
    assert_eq!(store_snapshot(&w.apps[0]).await, before, "nothing was stored");
    assert_eq!(w.upstream.calls(), 0, "nothing reached the model");
}
