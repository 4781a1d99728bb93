use serde_json::{Value, json};

use super::*;
use crate::protocol::testing::{all_data, event, restarted_turn, types, usage};

fn encoder() -> ResponsesEncoder {
    ResponsesEncoder::new("s1", 7, "m")
}

/// The events of a turn, numbered from seq 8 (the response's cursor is 7).
fn encode_all(encoder: &mut ResponsesEncoder, kinds: Vec<EventKind>) -> Vec<Frame> {
    kinds.into_iter().enumerate().flat_map(|(i, kind)| encoder.encode(&event(8 + i as u64, kind))).collect()
}

#[test]
fn a_response_id_names_its_session_and_cursor() {
    assert_eq!(response_id("chat_1-a", 42), "resp_42_chat_1-a");
    assert_eq!(parse_response_id("resp_42_chat_1-a"), Some(("chat_1-a", 42)));
    for bad in ["resp_x_s", "resp_4_", "msg_4_s", "resp_4"] {
        assert_eq!(parse_response_id(bad), None, "{bad}");
    }
}

#[test]
fn every_event_is_numbered_from_zero_and_a_resume_gets_exactly_the_events_after_its_number() {
    let frames = encode_all(&mut encoder(), restarted_turn(1));
    let data = all_data(&frames);
    let numbers: Vec<u64> = data.iter().map(|d| d["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (0..frames.len() as u64).collect::<Vec<_>>());
    for (frame, data) in frames.iter().zip(&data) {
        assert_eq!(frame.event.as_deref(), data["type"].as_str(), "the SSE event is named by its type");
        assert!(frame.id.is_none());
    }
    // The same log again (another replica) after number 5: the same bytes.
    let mut resumed = encoder().starting_after(Some(5));
    let again = encode_all(&mut resumed, restarted_turn(1));
    let tail: Vec<&str> = frames[6..].iter().map(|f| f.data.as_str()).collect();
    assert_eq!(again.iter().map(|f| f.data.as_str()).collect::<Vec<_>>(), tail);
    assert!(resumed.finished());
}

#[test]
fn a_takeover_ends_the_cut_item_and_the_regenerated_step_opens_a_new_one() {
    let mut encoder = encoder();
    let frames = encode_all(&mut encoder, restarted_turn(1));
    assert_eq!(
        types(&frames),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let completed = &all_data(&frames)[17]["response"];
    assert_eq!(completed["status"], "completed");
    let texts: Vec<&str> =
        completed["output"].as_array().unwrap().iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["w1 w2 ", "w1 w2 w3"], "nothing sent is retracted");
    assert_eq!(completed["usage"]["input_tokens"], 10);
    assert_eq!(completed["usage"]["total_tokens"], 13);
    assert_eq!(encoder.snapshot(), *completed, "a poll answers what the stream ended with");
}

#[test]
fn a_pause_ends_the_response_with_function_calls_and_approval_requests() {
    let mut encoder = encoder();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::TextDelta { text: "Let me draw.".into() },
            EventKind::ToolCall {
                tool_call_id: "call_c".into(),
                name: "render_chart".into(),
                arguments: json!({"metric": "refunds"}),
            },
            EventKind::Paused {
                pending_relays: vec![PendingRelay {
                    relay_id: "relay_1".into(),
                    tool_call_id: "call_r".into(),
                    tool: "refund".into(),
                    params: json!({"order": "42"}),
                }],
                pending_calls: vec![PendingCall {
                    tool_call_id: "call_c".into(),
                    tool: "render_chart".into(),
                    arguments: json!({"metric": "refunds"}),
                }],
            },
        ],
    );
    let data = all_data(&frames);
    let last = data.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    let output = last["response"]["output"].as_array().unwrap();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "function_call", "mcp_approval_request"]);
    assert_eq!(output[1]["call_id"], "call_c");
    assert_eq!(output[1]["arguments"], r#"{"metric":"refunds"}"#);
    assert_eq!((output[2]["id"].as_str(), output[2]["name"].as_str()), (Some("relay_1"), Some("refund")));
    let deltas: String = (data.iter())
        .filter(|d| d["type"] == "response.function_call_arguments.delta")
        .map(|d| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, output[1]["arguments"].as_str().unwrap(), "the deltas make the arguments");
    // Every item added was done before the end, as the SDK's stream checks.
    let added = data.iter().filter(|d| d["type"] == "response.output_item.added").count();
    let done = data.iter().filter(|d| d["type"] == "response.output_item.done").count();
    assert_eq!((added, done), (3, 3));
}

#[test]
fn a_server_tool_is_an_mcp_call_with_its_output_and_a_failed_turn_a_failed_response() {
    let mut encoder = encoder();
    let frames = encode_all(
        &mut encoder,
        vec![
            EventKind::TurnStarted { turn: 1, model: "m".into() },
            EventKind::ToolCall {
                tool_call_id: "call_l".into(),
                name: "lookup".into(),
                arguments: json!({"id": "42"}),
            },
            EventKind::ToolResult {
                tool_call_id: "call_l".into(),
                name: "lookup".into(),
                status: ToolStatus::Success,
                output: Value::String("shipped".into()),
            },
            EventKind::Error {
                code: FailureCode::UpstreamError,
                message: "the model failed".into(),
                retry_after_secs: None,
            },
            EventKind::TurnEnded {
                reason: TurnEndReason::Failed,
                iterations: 1,
                usage: usage(1, 1),
                title_pending: false,
            },
        ],
    );
    let data = all_data(&frames);
    let last = data.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["message"], "the model failed");
    let call = &last["response"]["output"][0];
    assert_eq!((call["type"].as_str(), call["output"].as_str()), (Some("mcp_call"), Some("shipped")));
    assert_eq!(call["server_label"], "switchboard");
    assert!(types(&frames).contains(&"response.mcp_call.completed".to_string()));
}

#[test]
fn events_after_the_end_and_subagents_events_are_not_shown() {
    let mut encoder = encoder();
    let mut kinds = restarted_turn(1);
    kinds.push(EventKind::TurnStarted { turn: 2, model: "m".into() });
    kinds.push(EventKind::TextDelta { text: "next turn".into() });
    let frames = encode_all(&mut encoder, kinds);
    assert_eq!(types(&frames).last().unwrap(), "response.completed");
    let sub = crate::protocol::testing::subagent_event(30, EventKind::TextDelta { text: "inner".into() });
    assert!(ResponsesEncoder::new("s1", 7, "m").encode(&sub).is_empty());
}
