//! Tests of the scripted upstream mock itself: each scripted behaviour, seen
//! through a real HTTP client and a real SSE parser.

use std::time::{Duration, Instant};

use eventsource_stream::{Event, Eventsource};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::mock_upstream::{MockUpstream, Reply};

const WAIT: Duration = Duration::from_secs(5);

async fn post(up: &MockUpstream, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", up.base_url()))
        .json(&body)
        .send()
        .await
        .expect("request to mock upstream")
}

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-test", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
}

fn messages(stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 100, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
}

/// Every SSE event of a response whose stream must end cleanly.
async fn events(resp: reqwest::Response) -> Vec<Event> {
    let events = resp.bytes_stream().eventsource();
    events.map(|e| e.expect("clean SSE stream")).collect().await
}

/// OpenAI chunks as JSON, after checking the stream ended with `[DONE]`.
async fn openai_chunks(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut events = events(resp).await;
    let done = events.pop().expect("at least one event");
    assert_eq!(done.data, "[DONE]");
    events.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect()
}

fn delta(chunk: &Value) -> &Value {
    &chunk["choices"][0]["delta"]
}

fn finish_reason(chunk: &Value) -> &Value {
    &chunk["choices"][0]["finish_reason"]
}

/// Reassemble streamed tool calls into (id, name, arguments).
fn tool_calls(chunks: &[Value]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for chunk in chunks {
        for call in delta(chunk)["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(index, calls.len(), "a new tool call takes the next index");
                assert_eq!(call["type"], "function");
                let name = call["function"]["name"].as_str().unwrap();
                calls.push((id.into(), name.into(), String::new()));
            }
            calls[index].2 += call["function"]["arguments"].as_str().unwrap();
        }
    }
    calls
}

#[tokio::test]
async fn text_arrives_split_across_chunks_then_usage_then_done() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["Hel", "lo ", "world"]).usage(12, 3));

    let resp = post(&up, "/chat/completions", chat(true)).await;
    assert_eq!(resp.status(), 200);
    let chunks = openai_chunks(resp).await;

    assert_eq!(chunks.len(), 4, "three text chunks and a usage chunk");
    let texts: Vec<&str> = chunks[..3].iter().map(|c| delta(c)["content"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Hel", "lo ", "world"]);
    assert_eq!(delta(&chunks[0])["role"], "assistant");
    for chunk in &chunks {
        assert_eq!(chunk["id"], "chatcmpl-mock-1");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-test");
    }
    assert_eq!(finish_reason(&chunks[1]), &Value::Null);
    assert_eq!(finish_reason(&chunks[2]), "stop");
    assert_eq!(chunks[3]["choices"], json!([]));
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15});
    assert_eq!(chunks[3]["usage"], usage);
}

#[tokio::test]
async fn usage_chunk_appears_only_when_requested_or_scripted() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["a", "b"]));
    up.push(Reply::new().text(["a", "b"]));

    let plain = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;
    assert_eq!(plain.len(), 2);
    assert!(plain.iter().all(|c| c.get("usage").is_none()));

    let mut body = chat(true);
    body["stream_options"] = json!({"include_usage": true});
    let with_usage = openai_chunks(post(&up, "/chat/completions", body).await).await;
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12});
    assert_eq!(with_usage.last().unwrap()["usage"], usage);
}

#[tokio::test]
async fn reasoning_streams_as_reasoning_content_before_the_text() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().reasoning(["thinking", "..."]).text(["ok"]));

    let chunks = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;

    assert_eq!(chunks.len(), 3);
    assert_eq!(delta(&chunks[0])["role"], "assistant");
    assert_eq!(delta(&chunks[0])["reasoning_content"], "thinking");
    assert_eq!(delta(&chunks[1])["reasoning_content"], "...");
    assert!(delta(&chunks[1]).get("content").is_none());
    assert_eq!(delta(&chunks[2])["content"], "ok");
    assert_eq!(finish_reason(&chunks[2]), "stop");
}

#[tokio::test]
async fn tool_call_arguments_in_five_fragments_reassemble_to_valid_json() {
    let up = MockUpstream::start().await;
    let fragments = [r#"{"i"#, r#"d":"#, r#""42"#, r#"","qty"#, r#"":3}"#];
    up.push(Reply::new().tool_call("call_1", "lookup_order", fragments));

    let chunks = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;

    assert_eq!(chunks.len(), 6, "one header chunk and five argument fragments");
    let first = &delta(&chunks[0])["tool_calls"][0];
    assert_eq!(first["function"]["arguments"], "");
    for chunk in &chunks[1..] {
        assert!(delta(chunk)["tool_calls"][0].get("id").is_none());
    }
    let calls = tool_calls(&chunks);
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].0.as_str(), calls[0].1.as_str()), ("call_1", "lookup_order"));
    let args: Value = serde_json::from_str(&calls[0].2).expect("valid JSON arguments");
    assert_eq!(args, json!({"id": "42", "qty": 3}));
    assert_eq!(finish_reason(&chunks[5]), "tool_calls");
}

#[tokio::test]
async fn two_tool_calls_in_one_response_finish_with_tool_calls() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().tool_call("call_1", "lookup_order", [r#"{"i"#, r#"d":"#, r#""42"#, r#""}"#]).tool_call(
        "call_2",
        "other",
        [r#"{}"#],
    ));

    let chunks = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;

    let calls = tool_calls(&chunks);
    let expected = [("call_1", "lookup_order", r#"{"id":"42"}"#), ("call_2", "other", "{}")];
    let got: Vec<(&str, &str, &str)> =
        calls.iter().map(|(id, name, args)| (id.as_str(), name.as_str(), args.as_str())).collect();
    assert_eq!(got, expected);
    let finishes: Vec<&Value> = chunks.iter().map(finish_reason).collect();
    assert!(finishes[..finishes.len() - 1].iter().all(|f| f.is_null()));
    assert_eq!(finishes.last().unwrap(), &"tool_calls");
}

#[tokio::test]
async fn explicit_finish_reason_is_translated_per_format() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["cut"]).finish("length"));
    up.push(Reply::new().text(["cut"]).finish("length"));

    let chunks = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;
    assert_eq!(finish_reason(chunks.last().unwrap()), "length");

    let answer: Value = post(&up, "/messages", messages(false)).await.json().await.unwrap();
    assert_eq!(answer["stop_reason"], "max_tokens");
}

#[tokio::test]
async fn http_error_carries_status_body_and_retry_after() {
    let up = MockUpstream::start().await;
    up.push(Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#).retry_after(1));

    let resp = post(&up, "/chat/completions", chat(true)).await;

    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["message"], "slow down");
}

#[tokio::test]
async fn stalled_stream_sends_its_chunks_then_holds_the_connection_open() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["a", "b", "c"]).stall_after(2));

    let resp = post(&up, "/chat/completions", chat(true)).await;
    let mut events = resp.bytes_stream().eventsource();
    for expected in ["a", "b"] {
        let event = events.next().await.expect("an event").expect("no error");
        let chunk: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(delta(&chunk)["content"], expected);
    }

    // Asserts absence: nothing more arrives, and the stream does not end.
    let next = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(next.is_err(), "expected silence, got {next:?}");
}

#[tokio::test]
async fn disconnect_breaks_the_stream_after_its_chunks_without_done() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["a", "b", "c"]).disconnect_after(1));

    let resp = post(&up, "/chat/completions", chat(true)).await;
    assert_eq!(resp.status(), 200);
    let items: Vec<_> = resp.bytes_stream().eventsource().collect().await;

    let received: Vec<&Event> = items.iter().filter_map(|i| i.as_ref().ok()).collect();
    assert_eq!(received.len(), 1, "only the first chunk arrives: {items:?}");
    let chunk: Value = serde_json::from_str(&received[0].data).unwrap();
    assert_eq!(delta(&chunk)["content"], "a");
    assert!(items.iter().any(Result::is_err), "the client sees a broken stream");
}

#[tokio::test]
async fn anthropic_stream_has_thinking_text_and_tool_use_blocks_in_order() {
    let up = MockUpstream::start().await;
    up.push(
        Reply::new()
            .reasoning(["Let me ", "check."])
            .text(["Looking ", "it up"])
            .tool_call("toolu_1", "lookup_order", [r#"{"id""#, r#":"42"}"#])
            .usage(20, 7),
    );

    let resp = post(&up, "/messages", messages(true)).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = events(resp).await;

    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    let (start, step, stop) = ("content_block_start", "content_block_delta", "content_block_stop");
    let expected = [
        vec!["message_start"],
        vec![start, step, step, step, stop], // thinking: two deltas + signature
        vec![start, step, step, stop],
        vec![start, step, step, stop],
        vec!["message_delta", "message_stop"],
    ];
    assert_eq!(names, expected.concat());
    let data: Vec<Value> = events.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    for (event, data) in events.iter().zip(&data) {
        assert_eq!(data["type"], event.event.as_str());
    }

    let message = &data[0]["message"];
    assert_eq!(message["model"], "claude-test");
    assert_eq!((message["type"].as_str(), message["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(message["usage"], json!({"input_tokens": 20, "output_tokens": 0}));

    let blocks: Vec<&Value> = data.iter().filter(|d| d["type"] == start).collect();
    let kinds: Vec<(&Value, &Value)> = blocks.iter().map(|b| (&b["index"], &b["content_block"]["type"])).collect();
    assert_eq!(kinds, [(&json!(0), &json!("thinking")), (&json!(1), &json!("text")), (&json!(2), &json!("tool_use"))]);
    let tool = json!({"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}});
    assert_eq!(blocks[2]["content_block"], tool);

    let mut assembled = [String::new(), String::new(), String::new()];
    for d in data.iter().filter(|d| d["type"] == step) {
        let text = match d["delta"]["type"].as_str().unwrap() {
            "thinking_delta" => &d["delta"]["thinking"],
            "text_delta" => &d["delta"]["text"],
            "input_json_delta" => &d["delta"]["partial_json"],
            "signature_delta" => continue,
            other => panic!("unexpected delta type {other}"),
        };
        assembled[d["index"].as_u64().unwrap() as usize] += text.as_str().unwrap();
    }
    assert_eq!(assembled[0], "Let me check.");
    assert_eq!(assembled[1], "Looking it up");
    let input: Value = serde_json::from_str(&assembled[2]).expect("valid JSON input");
    assert_eq!(input, json!({"id": "42"}));

    let message_delta = &data[data.len() - 2];
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(message_delta["usage"]["output_tokens"], 7);
}

#[tokio::test]
async fn error_event_ends_the_stream_mid_answer_in_both_formats() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["par"]).error_event("overloaded_error", "Overloaded"));
    up.push(Reply::new().text(["par"]).error_event("server_error", "boom"));

    let anthropic = events(post(&up, "/messages", messages(true)).await).await;
    let last = anthropic.last().unwrap();
    assert_eq!(last.event, "error");
    let error: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(error, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
    assert!(anthropic.iter().all(|e| e.event != "message_stop"));

    let openai = events(post(&up, "/chat/completions", chat(true)).await).await;
    let data: Vec<Value> = openai.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    assert_eq!(data.len(), 2, "one text chunk then the error, no [DONE]");
    assert_eq!(finish_reason(&data[0]), &Value::Null);
    assert_eq!(data[1]["error"]["message"], "boom");
}

#[tokio::test]
async fn non_stream_requests_get_one_assembled_json_answer() {
    let up = MockUpstream::start().await;
    let reply = Reply::new()
        .reasoning(["hm", "m"])
        .text(["Hel", "lo"])
        .tool_call("call_1", "lookup_order", [r#"{"id":"#, r#""42"}"#])
        .usage(5, 4);
    up.push(reply.clone());
    up.push(reply);

    let resp = post(&up, "/chat/completions", chat(false)).await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], "Hello");
    assert_eq!(choice["message"]["reasoning_content"], "hmm");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"], json!({"name": "lookup_order", "arguments": r#"{"id":"42"}"#}));
    assert_eq!(answer["usage"]["total_tokens"], 9);

    let answer: Value = post(&up, "/messages", messages(false)).await.json().await.unwrap();
    let kinds: Vec<&Value> = answer["content"].as_array().unwrap().iter().map(|b| &b["type"]).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use"]);
    assert_eq!(answer["content"][2]["input"], json!({"id": "42"}));
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(answer["usage"], json!({"input_tokens": 5, "output_tokens": 4}));
}

#[tokio::test]
async fn requests_are_recorded_with_path_headers_and_body() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["ok"]));
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    reqwest::Client::new()
        .post(format!("{}/chat/completions", up.base_url()))
        .header("authorization", "Bearer sk-test")
        .header("traceparent", traceparent)
        .json(&chat(true))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();

    assert_eq!(up.calls(), 1);
    let requests = up.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("traceparent"), Some(traceparent));
    assert_eq!(request.body, chat(true));
}

#[tokio::test]
async fn an_empty_queue_answers_500_with_an_explanation() {
    let up = MockUpstream::start().await;

    let resp = post(&up, "/messages", messages(true)).await;

    assert_eq!(resp.status(), 500);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["message"], "mock upstream: no scripted reply left");
    assert_eq!(up.calls(), 1, "the failed call is still recorded");
}

#[tokio::test]
async fn unknown_paths_are_recorded_and_answer_404_without_consuming_a_reply() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["kept"]));

    let resp = post(&up, "/completions", chat(true)).await;

    assert_eq!(resp.status(), 404);
    assert_eq!(up.remaining(), 1);
    assert_eq!(up.requests()[0].path, "/v1/completions");
}

#[tokio::test]
async fn replies_are_consumed_in_order_across_both_routes() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["first"]));
    up.push(Reply::new().text(["second"]));

    let anthropic: Value = post(&up, "/messages", messages(false)).await.json().await.unwrap();
    let openai: Value = post(&up, "/chat/completions", chat(false)).await.json().await.unwrap();

    assert_eq!(anthropic["content"][0]["text"], "first");
    assert_eq!(openai["choices"][0]["message"]["content"], "second");
    assert_eq!(up.remaining(), 0);
}

#[tokio::test]
async fn wait_for_calls_resolves_once_enough_requests_arrived() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["one"]));
    up.push(Reply::new().text(["two"]));
    let url = format!("{}/chat/completions", up.base_url());

    let client = tokio::spawn(async move {
        for _ in 0..2 {
            let resp = reqwest::Client::new().post(&url).json(&chat(false)).send().await;
            resp.unwrap().bytes().await.unwrap();
        }
    });
    up.wait_for_calls(2, WAIT).await;

    assert!(up.calls() >= 2);
    client.await.unwrap();
    assert_eq!(up.calls(), 2);
}

#[tokio::test]
#[should_panic(expected = "expected at least 1 calls")]
async fn wait_for_calls_panics_when_the_calls_never_come() {
    let up = MockUpstream::start().await;
    up.wait_for_calls(1, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn chunk_delay_spaces_the_frames_out() {
    let up = MockUpstream::start().await;
    let delay = Duration::from_millis(40);
    up.push(Reply::new().text(["a", "b", "c"]).chunk_delay(delay));

    let started = Instant::now();
    let chunks = openai_chunks(post(&up, "/chat/completions", chat(true)).await).await;

    assert_eq!(chunks.len(), 3);
    assert!(started.elapsed() >= delay * 4, "four frames, each delayed");
}
