//! The default tools end to end: a coding chat whose scripted model writes
//! a file with `patch`, runs it with `bash` and reads the output, with the
//! owning replica killed between the `patch` and the `bash`; workspaces
//! seeded at creation and fetched as JSON and tar; per-tenant
//! `default_tools`.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::AppOptions,
    orchestrator::{World, of_kind, tool_messages, world},
    sse::SseReader,
    support::mock_upstream::Reply,
};

/// acme has the workspace tools; `bash` asks (the default), `patch` and
/// `read` are allowed.
fn with_tools(options: &mut AppOptions) {
    options.extra_toml.push_str("\n[sandbox]\nworkspace_max_bytes = 524288\nworkspace_max_file_bytes = 400000\n");
    options.tenant_toml.push((
        "acme".into(),
        "default_tools = [\"agent\", \"bash\", \"read\", \"patch\"]\ntool_permissions = { patch = \"allow\" }".into(),
    ));
}

const PATCH: &str = "*** Begin Patch\n*** Add File: hello.py\n+print('hello from the sandbox')\n*** End Patch";

async fn workspace(w: &World, on: usize, id: &str, format: &str) -> reqwest::Response {
    w.apps[on].get(&format!("/v1/sessions/{id}/workspace?format={format}"), Some(&w.token)).await
}

#[tokio::test]
async fn a_coding_chat_survives_the_death_of_its_replica_between_patch_and_bash() {
    let mut w = world(2, with_tools).await;
    w.upstream.push(Reply::new().tool_call("call_patch", "patch", [json!({"patch": PATCH}).to_string()]));
    w.upstream.push(Reply::new().tool_call("call_bash", "bash", [r#"{"command":"python3 hello.py"}"#]));
    w.upstream.push(Reply::new().tool_call("call_read", "read", [r#"{"filePath":"/workspace/hello.py"}"#]));
    w.upstream.push(Reply::new().text(["It printed hello."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "write and run hello.py").await;
    let frames = stream.until_kind("relay_requested").await;
    let relay = of_kind(&frames, "relay_requested")[0].data["relay_id"].as_str().unwrap().to_string();
    let patched = of_kind(&frames, "tool_result");
    assert_eq!(patched[0].data["output"], json!({"context": "Added hello.py"}), "{frames:?}");
    // The patch is committed with its file: replica b sees it before a dies.
    let listing: Value = workspace(&w, 1, &id, "json").await.json().await.unwrap();
    assert_eq!(listing["files"][0]["path"], "hello.py");

    w.apps.remove(0).kill();
    // The decision on the surviving replica takes the session over there.
    let decided = w.apps[0]
        .post_json(&format!("/v1/sessions/{id}/relays/{relay}"), Some(&w.token), &json!({"approved": true}))
        .await;
    assert_eq!(decided.status(), StatusCode::OK);
    let mut rest = SseReader::new(w.apps[0].events(&w.token, &id, Some(frames.last().unwrap().id.unwrap())).await);
    let frames = rest.rest().await;
    let results = of_kind(&frames, "tool_result");
    let bash = results.iter().find(|f| f.data["name"] == "bash").expect("bash ran on b");
    assert_eq!(bash.data["output"]["result"]["stdout"], "hello from the sandbox\n", "{frames:?}");
    assert_eq!(bash.data["output"]["result"]["exitCode"], 0);
    let progress = of_kind(&frames, "tool_progress");
    assert!(progress.iter().any(|f| f.data["text"] == "hello from the sandbox\n"), "{frames:?}");
    assert_eq!(of_kind(&frames, "turn_ended")[0].data["reason"], "final");
    // No tool ran twice: one result each, and the model saw each once.
    let last = w.upstream.requests().len() - 1;
    let seen = tool_messages(&w.model_request(last));
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[2]["content"].as_str().unwrap().contains("   1 | print('hello from the sandbox')"), "{seen:?}");
}

#[tokio::test]
async fn a_seeded_workspace_is_fetched_as_json_and_as_tar_and_only_by_its_owner() {
    let w = world(1, with_tools).await;
    let seed = json!({"workspace": {"files": [
        {"path": "src/main.py", "content": "print(1)\n"},
        {"path": "run.sh", "content": "echo hi\n", "executable": true},
        {"path": "blob.bin", "content_base64": "/wD/"},
    ]}});
    let id = w.session(0, "mock", seed).await;
    let listing: Value = workspace(&w, 0, &id, "json").await.json().await.unwrap();
    let paths: Vec<&str> = listing["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["blob.bin", "run.sh", "src/main.py"]);
    assert_eq!(listing["files"][0]["content_base64"], "/wD/");
    assert_eq!(listing["files"][1]["mode"], "755");
    let tar = workspace(&w, 0, &id, "tar").await.bytes().await.unwrap();
    let mut archive = tar::Archive::new(tar.as_ref());
    let names: Vec<String> =
        archive.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["blob.bin", "run.sh", "src/main.py"]);
    let stranger = w.apps[0].token("acme", "mallory");
    let response = w.apps[0].get(&format!("/v1/sessions/{id}/workspace"), Some(&stranger)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let too_big = json!({"model": "mock", "workspace": {"files": [
        {"path": "x", "content": "a".repeat(300 << 10)}, {"path": "y", "content": "b".repeat(300 << 10)}]}});
    let response = w.apps[0].post_json("/v1/sessions", Some(&w.token), &too_big).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_tenant_without_default_tools_offers_the_agent_tool_only() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text(["hi"]));
    let id = w.session(0, "mock", json!({})).await;
    w.send(0, &id, "hello").await.rest().await;
    let names: Vec<String> = w.model_request(0)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"agent".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| ["bash", "read", "patch"].contains(&n.as_str())), "{names:?}");
}

#[tokio::test]
async fn patch_and_read_errors_read_as_llm_gateways() {
    let w = world(1, |o| {
        o.tenant_toml.push(("acme".into(), "default_tools = [\"bash\", \"read\", \"patch\"]\ntool_permissions = { bash = \"allow\", patch = \"allow\" }".into()));
    })
    .await;
    let update = "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n*** End Patch";
    w.upstream.push(
        Reply::new()
            .tool_call("c1", "patch", [json!({"patch": "nonsense"}).to_string()])
            .tool_call("c2", "read", [r#"{"filePath":"/workspace/missing.txt"}"#])
            .tool_call("c3", "patch", [json!({"patch": update}).to_string()])
            .tool_call("c4", "read", [r#"{"filePath":"/etc/passwd"}"#])
            .tool_call("c5", "bash", [r#"{"command":"sleep 5","timeout":0.5}"#]),
    );
    w.upstream.push(Reply::new().text(["done"]));
    let id = w.session(0, "mock", json!({"workspace": {"files": [{"path": "a.txt", "content": "x\n"}]}})).await;
    let frames = w.send(0, &id, "go").await.rest().await;
    let context = |call: &str| -> String {
        let result = of_kind(&frames, "tool_result").into_iter().find(|f| f.data["tool_call_id"] == call).unwrap();
        result.data["output"]["context"].as_str().unwrap().to_string()
    };
    assert_eq!(context("c1"), "Patch parse error: Patch must start with \"*** Begin Patch\"");
    assert_eq!(context("c2"), "File not found: /workspace/missing.txt");
    assert_eq!(context("c3"), "Patch failed on a.txt: a.txt must be read before patching");
    assert!(context("c4").contains("outside the workspace"), "{}", context("c4"));
    assert_eq!(context("c5"), "Command timed out after 0.5 seconds");
}
