//! An MCP tool call in flight when its owner is SIGKILLed: the new owner
//! runs it again only for a server configured with `retry_on_takeover`;
//! otherwise the model is told its outcome is unknown. Against the real
//! `@modelcontextprotocol/server-everything` (a 3 s operation), each
//! replica with its own MCP client: nothing of the call lives only in the
//! killed replica's memory.

use std::time::Duration;

use serde_json::json;

use crate::harness::{
    checks::{self, Expect},
    cluster::{Cluster, ClusterOptions},
    mcp_server::McpServer,
    upstream::ScriptedCall,
};

const WORDS: u32 = 5;
/// Longer than the turn may take: the death hint takes the session over.
const LEASE_TTL_SECS: u64 = 30;
const TURN_TIMEOUT: Duration = Duration::from_secs(30);
/// server-everything's answer to a finished operation.
const COMPLETED: &str = "Long running operation completed";
/// What the model is told of a call that must not run twice.
const UNKNOWN: &str = "may or may not have taken effect, and it is not run again";

async fn cluster(everything: &McpServer) -> Cluster {
    let servers = format!(
        r#"
[[mcp_servers]]
name = "retrying"
url = "{url}"
permission = "allow"
retry_on_takeover = true

[[mcp_servers]]
name = "once"
url = "{url}"
permission = "allow"
"#,
        url = everything.url()
    );
    Cluster::start(ClusterOptions {
        lease_ttl_secs: LEASE_TTL_SECS,
        tenant_toml: "mcp_servers = [\"retrying\", \"once\"]\n".into(),
        agent_toml: "titles = false\n".into(),
        extra_toml: servers,
        ..ClusterOptions::default()
    })
    .await
}

/// A turn on replica 0 whose one tool call is `server`'s 3 s operation;
/// replica 0 is killed once the call started. The output the turn's
/// `tool_result` carries, after the turn ended as it should.
async fn killed_mid_call(server: &str) -> String {
    let everything = McpServer::everything().await;
    let mut cluster = cluster(&everything).await;
    let script = format!("{server}-call");
    let name = format!("mcp__{server}__trigger-long-running-operation");
    cluster.upstream.add_script(&script, vec![ScriptedCall::new("call_op", &name, json!({"duration": 3, "steps": 3}))]);
    let session = cluster.create_session(0).await;
    let cursor = cluster.last_seq(&session).await;
    let message = format!("run the operation script:{script} words:{WORDS} {}", uuid::Uuid::new_v4().simple());
    let follower = cluster.start_and_follow(0, &session, &message, TURN_TIMEOUT).await;
    let started = follower.wait_for_kind("tool_call", TURN_TIMEOUT).await;
    assert!(started.is_some(), "the call started\n{}", cluster.dump_logs());
    cluster.replicas[0].kill9().await;
    let transcript = follower.finish().await;

    let failures = checks::turn(&transcript, &Expect { cursor, words: WORDS });
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
    let results: Vec<String> = transcript
        .of_kind("tool_result")
        .filter(|e| e.data["tool_call_id"] == "call_op")
        .map(|e| e.data["output"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results.len(), 1, "one result for the call: {results:?}\n{}", cluster.dump_logs());
    results.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_of_a_retrying_mcp_server_runs_again_on_the_new_owner() {
    let output = killed_mid_call("retrying").await;
    assert!(output.contains(COMPLETED), "the call ran again and finished: {output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_of_another_mcp_server_is_not_run_twice_and_the_model_is_told() {
    let output = killed_mid_call("once").await;
    assert!(output.contains(UNKNOWN), "the model was told its outcome is unknown: {output:?}");
}
