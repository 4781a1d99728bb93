//! llm-gateway's default tools (`bash`, `read`, `patch`) through `POST /chat`:
//! their results and errors, word for word as llm-gateway's tools give
//! them (docs/llm-gateway-tools.md §1), in a golden transcript. One tool call per
//! model step, so the order is fixed: the patch grammar's errors, a patch
//! before its file was read, a hunk whose context is not found, an added
//! file that exists, a successful update, reads of a missing and a binary
//! file, a command with output on both streams and an exit code, and a
//! command that outlives its timeout.

use serde_json::{Value, json};

use super::{chat, chat_body, session_of, user};
use crate::{
    helpers::AppOptions,
    orchestrator::world,
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise},
    },
};

fn with_tools(options: &mut AppOptions) {
    options.tenant_toml.push(("acme".into(), "default_tools = [\"bash\", \"read\", \"patch\"]".into()));
    options.max_iterations = 20;
}

/// The request's rules: every call of the three tools runs without asking.
fn all_allowed() -> Value {
    json!({"allowlist": [{"tool": "bash"}, {"tool": "read"}, {"tool": "patch"}]})
}

fn patch(text: &str) -> String {
    json!({ "patch": text }).to_string()
}

/// `(tool, arguments)` of each step, and the context its result must carry.
fn steps() -> Vec<(&'static str, String, &'static str)> {
    let update = |body: &str| patch(&format!("*** Begin Patch\n*** Update File: a.txt\n{body}\n*** End Patch"));
    vec![
        ("bash", json!({"command": "printf 'one\\ntwo\\n' > a.txt; printf 'a\\0b' > blob.bin"}).to_string(), ""),
        ("patch", patch("nonsense"), "Patch parse error: Patch must start with \"*** Begin Patch\""),
        (
            "patch",
            patch("*** Begin Patch\n*** Add File: b.txt\n+b"),
            "Patch parse error: Patch must end with \"*** End Patch\"",
        ),
        (
            "patch",
            patch("*** Begin Patch\n*** Add File: b.txt\n*** End Patch"),
            "Patch parse error: Add File \"b.txt\" has no content lines",
        ),
        (
            "patch",
            patch("*** Begin Patch\n*** Update File: a.txt\n*** End Patch"),
            "Patch parse error: Update File \"a.txt\" has no hunks",
        ),
        ("patch", update("@@\n@@\n-one\n+uno"), "Patch parse error: Update File \"a.txt\" has an empty hunk"),
        (
            "patch",
            patch("*** Begin Patch\nwhat is this\n*** End Patch"),
            "Patch parse error: Unexpected line at position 1: \"what is this\"",
        ),
        ("patch", update("@@\n-one\n+uno"), "Patch failed on a.txt: a.txt must be read before patching"),
        (
            "read",
            json!({"filePath": "/workspace/a.txt"}).to_string(),
            "<file path=\"/workspace/a.txt\" lines=\"1-2\" total=\"2\">\n   1 | one\n   2 | two\n</file>",
        ),
        (
            "patch",
            update("@@\n two\n-three\n+tres"),
            "Patch failed on a.txt: Could not find matching context for hunk. Context lines: [two]. Please re-read the file and try again.",
        ),
        (
            "patch",
            patch("*** Begin Patch\n*** Add File: a.txt\n+again\n*** End Patch"),
            "Patch failed on a.txt: File already exists: a.txt",
        ),
        ("patch", update("@@\n-one\n+uno\n two"), "Updated a.txt"),
        ("read", json!({"filePath": "/workspace/missing.txt"}).to_string(), "File not found: /workspace/missing.txt"),
        (
            "read",
            json!({"filePath": "/workspace/blob.bin"}).to_string(),
            "Cannot read binary file: /workspace/blob.bin",
        ),
        (
            "bash",
            json!({"command": "cat a.txt; echo oops >&2; exit 3"}).to_string(),
            "stdout:\nuno\ntwo\n\nstderr:\noops\n\nexit code: 3",
        ),
        (
            "bash",
            json!({"command": "echo early; sleep 5", "timeout": 0.5}).to_string(),
            "Command timed out after 0.5 seconds",
        ),
    ]
}

#[tokio::test]
async fn the_tools_results_and_errors_read_as_llm_gateways_matching_the_golden_transcript() {
    let w = world(1, with_tools).await;
    let steps = steps();
    for (i, (tool, arguments, _)) in steps.iter().enumerate() {
        w.upstream.push(Reply::new().tool_call(format!("call_{i}"), *tool, [arguments.as_str()]));
    }
    w.upstream.push(Reply::new().text(["All done."]));
    let body = chat_body(
        "mock",
        json!([user("Exercise the tools.")]),
        json!({"permissions": all_allowed(), "maxIterations": 20}),
    );
    let mut stream = chat(&w, 0, &body).await;
    let text = stream.rest().await;
    let frames = stream.frames();
    let session_id = session_of(&stream);

    let results: Vec<&Value> = frames.iter().filter(|f| f.event == "tool_result").map(|f| &f.data).collect();
    assert_eq!(results.len(), steps.len(), "{text}");
    for (i, ((tool, _, context), result)) in steps.iter().zip(&results).enumerate() {
        assert_eq!(result["id"], format!("call_{i}"), "{result}");
        assert_eq!(result["name"], *tool);
        if i > 0 {
            assert_eq!(result["output"]["context"], *context, "step {i}");
        }
    }
    // bash's result beside its context, as llm-gateway's client reads it.
    assert_eq!(results[14]["output"]["result"], json!({"exitCode": 3, "stdout": "uno\ntwo\n", "stderr": "oops\n"}));
    // Unlike llm-gateway, a timeout keeps what the command printed (docs/tools.md).
    assert_eq!(results[15]["output"]["result"], json!({"exitCode": -1, "stdout": "early\n", "stderr": ""}));
    // The model got each context as the tool message's content.
    let last = w.model_request(w.upstream.requests().len() - 1);
    let tool_messages: Vec<&Value> =
        last["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_messages[2]["content"], steps[2].2);
    assert_eq!(tool_messages[15]["content"], steps[15].2);

    // A command's output streams as tool_progress while it runs; stdout and
    // stderr are read apart, so their order is the scheduler's: checked as
    // a set here and left out of the transcript (their ids stay in it).
    let progress = |call: &str| -> Vec<Value> {
        let mut content: Vec<Value> = frames
            .iter()
            .filter(|f| f.event == "tool_progress" && f.data["toolCallId"] == call)
            .map(|f| f.data["content"].clone())
            .collect();
        content.sort_by_key(Value::to_string);
        content
    };
    assert_eq!(
        progress("call_14"),
        [json!({"channel": "stderr", "data": "oops\n"}), json!({"channel": "stdout", "data": "uno\ntwo\n"})]
    );
    assert_eq!(progress("call_15"), [json!({"channel": "stdout", "data": "early\n"})]);
    let transcript: String = normalise(&text, &[(session_id.as_str(), "<session>")])
        .split_inclusive("\n\n")
        .filter(|block| !block.starts_with("event: tool_progress\n"))
        .collect();
    assert_golden("llm_gateway_tools.sse", &transcript);
}
