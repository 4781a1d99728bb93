//! A coding chat survives SIGKILL of its replica between a `patch` and the
//! `bash` that runs what the patch wrote, with real processes: two
//! `switchboard` replicas sharing the test's own Redis, a tenant with the
//! workspace tools (`patch` allowed, `bash` on "ask", `read`), and a
//! scripted model that 1) adds `hello.py` with `patch`, 2) runs
//! `python3 hello.py` with `bash`, 3) `read`s `/workspace/hello.py`, 4)
//! answers.
//!
//! The relay that `bash` asks for is the deterministic point between the
//! two tools: it is requested right after the patch's result (and its file)
//! was committed. Once the client sees it, the replica that owns the session
//! is SIGKILLed; the relay is approved on the other replica, the client
//! rejoins there, and the turn goes on there. One test drives the native
//! API, the other `POST /chat` in llm-gateway's dialect (rejoined with
//! `?format=llm-gateway`). Both prove:
//!
//! - the file was in place on the surviving replica: `bash` printed
//!   `hello from the sandbox` there and `read` shows the line (and the
//!   workspace holds the file);
//! - the turn ended `final` with the whole answer, on the survivor;
//! - no tool ran twice: each call id has one `tool_call` and one
//!   `tool_result` in the event log, `bash`'s output streamed once, and the
//!   model's last request carries each tool result once.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    checks::{self, Expect},
    client::Follower,
    cluster::{Cluster, ClusterOptions},
    transcript::{SeenEvent, Transcript},
    upstream::{ScriptedCall, expected_answer},
};

const PATCH: &str = "*** Begin Patch\n*** Add File: hello.py\n+print('hello from the sandbox')\n*** End Patch";
const HELLO: &str = "hello from the sandbox\n";
/// What the patch writes.
const SOURCE: &str = "print('hello from the sandbox')\n";
/// How `read` numbers the file's one line (llm-gateway's format).
const READ_LINE: &str = "   1 | print('hello from the sandbox')";
const SCRIPT: &str = "coding";
const WORDS: u32 = 6;
/// The three tool calls, in the order the model makes them.
const CALLS: [(&str, &str); 3] = [("call_patch", "patch"), ("call_bash", "bash"), ("call_read", "read")];
/// Two model calls and a sandboxed `patch` (the first one of a replica
/// starts the sandbox) come before the relay.
const RELAY_TIMEOUT: Duration = Duration::from_secs(30);
/// The whole turn, takeover included (the dead owner's lease expires after
/// `lease_ttl_secs`, 2).
const TURN_TIMEOUT: Duration = Duration::from_secs(60);

/// The scripted model's tool calls; its answer after them is `w1 … w6`.
fn script() -> Vec<ScriptedCall> {
    vec![
        ScriptedCall::new("call_patch", "patch", json!({"patch": PATCH})),
        ScriptedCall::new("call_bash", "bash", json!({"command": "python3 hello.py"})),
        ScriptedCall::new("call_read", "read", json!({"filePath": "/workspace/hello.py"})),
    ]
}

/// The user's message: the upstream's orders (the script, the answer's
/// length) in a sentence.
fn message() -> String {
    format!("write hello.py, run it and read it back script:{SCRIPT} words:{WORDS}")
}

/// Two replicas; acme has `bash`, `read` and `patch` (no `agent`), `patch`
/// allowed and `bash` asking, so the turn waits on a relay between them.
/// Titles are off: the upstream's requests are the turn's alone.
async fn cluster() -> Cluster {
    let cluster = Cluster::start(ClusterOptions {
        replicas: 2,
        tenant_toml: "default_tools = [\"bash\", \"read\", \"patch\"]\n\
                      tool_permissions = { patch = \"allow\", bash = \"ask\", read = \"allow\" }\n"
            .into(),
        agent_toml: "titles = false\n".into(),
        extra_toml: "\n[sandbox]\nbackend = \"bubblewrap\"\n".into(),
        ..ClusterOptions::default()
    })
    .await;
    cluster.upstream.add_script(SCRIPT, script());
    cluster
}

/// A JSON string's text (empty for anything else).
fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The output of call `id`'s `tool_result` in a native stream.
fn native_output(t: &Transcript, id: &str) -> Option<Value> {
    t.of_kind("tool_result").find(|e| e.data["tool_call_id"] == id).map(|e| e.data["output"].clone())
}

/// The output of call `id`'s `tool_result` in an llm-gateway stream.
fn gateway_output(t: &Transcript, id: &str) -> Option<Value> {
    t.of_kind("tool_result").find(|e| e.data["id"] == id).map(|e| e.data["output"].clone())
}

/// Where the turn stood when the owner was killed.
struct Killed {
    owner: usize,
    survivor: usize,
    relay_id: String,
    at: Instant,
}

/// Waits for the relay `bash` asks for (`kind` in the follower's dialect),
/// checks that the patch's result came first and `bash` has not run, and
/// SIGKILLs the replica that owns the session.
async fn kill_the_owner_at_the_relay(
    cluster: &mut Cluster,
    follower: &Follower,
    session_id: &str,
    kind: &str,
    relay_of: impl Fn(&SeenEvent) -> (String, String),
    output: fn(&Transcript, &str) -> Option<Value>,
) -> Killed {
    let Some(relay) = follower.wait_for_kind(kind, RELAY_TIMEOUT).await else {
        panic!("no {kind} within {RELAY_TIMEOUT:?}: {:?}\n{}", follower.snapshot().events, cluster.dump_logs());
    };
    let (relay_id, tool_call_id) = relay_of(&relay);
    let seen = follower.snapshot();
    assert_eq!(tool_call_id, "call_bash", "the relay is bash's: {relay:?}");
    assert_eq!(output(&seen, "call_patch"), Some(json!({"context": "Added hello.py"})), "the patch's result first");
    assert_eq!(output(&seen, "call_bash"), None, "bash waits for its relay");
    let Some(owner) = cluster.owner_of(session_id).await else {
        let view = cluster.session_view(session_id).await;
        panic!("the session view names no owner: {view:?}\n{}", cluster.dump_logs());
    };
    let at = Instant::now();
    cluster.replicas[owner].kill9().await;
    Killed { owner, survivor: 1 - owner, relay_id, at }
}

/// The checks both dialects share, on the session's whole event log as the
/// survivor replays it, the model's requests, the workspace and the view.
async fn shared_checks(cluster: &mut Cluster, session_id: &str, killed: &Killed) -> Vec<String> {
    let mut failures = Vec::new();
    let log = cluster.event_log(killed.survivor, session_id).await;
    if log.turn_end_reason().as_deref() != Some("final") {
        failures.push(format!("the log's turn_ended reason is {:?}, not \"final\"", log.turn_end_reason()));
    }
    let (calls, results) = (log.tool_call_ids("tool_call"), log.tool_call_ids("tool_result"));
    for (id, tool) in CALLS {
        let (n_calls, n_results) =
            (calls.iter().filter(|c| *c == id).count(), results.iter().filter(|r| *r == id).count());
        if (n_calls, n_results) != (1, 1) {
            failures.push(format!("{tool} {id}: {n_calls} tool_call and {n_results} tool_result events, not 1 and 1"));
        }
    }
    if results.len() != CALLS.len() {
        failures.push(format!("the log has tool results for {results:?}, expected one for each of {CALLS:?}"));
    }
    let progress: String = (log.of_kind("tool_progress"))
        .filter(|e| e.data["tool_call_id"] == "call_bash")
        .filter_map(|e| e.data["text"].as_str())
        .collect();
    if progress != HELLO {
        failures.push(format!("bash's live output was {progress:?}, expected {HELLO:?} once"));
    }
    let restarted = log.of_kind("step_restarted").count();
    if restarted != 0 {
        failures.push(format!("{restarted} step_restarted events: no model step was running at the kill"));
    }

    // The model saw each result once, in order, in its last request.
    let requests = cluster.upstream.requests();
    if requests.len() != CALLS.len() + 1 {
        failures.push(format!("{} model requests, expected {} (a step ran again?)", requests.len(), CALLS.len() + 1));
    }
    let last = requests.last().map(|r| r.body.clone()).unwrap_or(Value::Null);
    let tool_messages: Vec<&Value> =
        last["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool").collect();
    let ids: Vec<&str> = tool_messages.iter().filter_map(|m| m["tool_call_id"].as_str()).collect();
    if ids != CALLS.map(|(id, _)| id) {
        failures.push(format!("the model's last request carries the tool results {ids:?}"));
    }
    let content = |id: &str| {
        let message = tool_messages.iter().find(|m| m["tool_call_id"] == id);
        message.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
    };
    if !content("call_bash").contains(HELLO.trim_end()) {
        failures.push(format!("the model read bash's result as {:?}", content("call_bash")));
    }
    if !content("call_read").contains(READ_LINE) {
        failures.push(format!("the model read read's result as {:?}", content("call_read")));
    }

    // The file is in the store, and the survivor finished the turn.
    let (status, workspace) = cluster.workspace(killed.survivor, session_id).await;
    let files = &workspace["files"];
    let one_file = files.as_array().map(Vec::len) == Some(1);
    if status != StatusCode::OK || !one_file || files[0]["path"] != "hello.py" || files[0]["content"] != SOURCE {
        failures.push(format!("the workspace on the survivor: {status} {workspace}"));
    }
    let view = cluster.session_view(session_id).await.unwrap_or(Value::Null);
    let survivor = &cluster.replicas[killed.survivor].name;
    if view["replica"].as_str() != Some(survivor) {
        failures
            .push(format!("the session view names {} as its replica, not the survivor {survivor}", view["replica"]));
    }
    if cluster.replicas[killed.owner].is_running() {
        failures.push("the killed replica is running".into());
    }
    failures
}

/// The client's stream after the kill came from the survivor alone.
fn rejoined_on_the_survivor(t: &Transcript, survivor_url: &str, killed_at: Instant) -> Vec<String> {
    let elsewhere: Vec<String> = (t.log_events())
        .filter(|e| e.at > killed_at && e.via != survivor_url)
        .map(|e| format!("{} {:?} via {}", e.kind, e.seq, e.via))
        .collect();
    match (t.connections.len(), elsewhere.is_empty()) {
        (2.., true) => Vec::new(),
        _ => vec![format!(
            "the client should have rejoined on the survivor ({survivor_url}) only; events from elsewhere after the \
             kill: {elsewhere:?}; connections: {}",
            t.describe_connections()
        )],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_native_coding_chat_goes_on_with_its_file_after_sigkill_between_patch_and_bash_and_runs_no_tool_twice() {
    let started = Instant::now();
    let mut cluster = cluster().await;
    let session = cluster.create_session(0).await;
    let follower = cluster.start_and_follow(0, &session, &message(), TURN_TIMEOUT).await;
    let killed = kill_the_owner_at_the_relay(
        &mut cluster,
        &follower,
        &session,
        "relay_requested",
        |relay| (text(&relay.data["relay_id"]), text(&relay.data["tool_call_id"])),
        native_output,
    )
    .await;
    // The decision, on the survivor, lets the turn go on there.
    let (status, body) = cluster.decide_relay(killed.survivor, &session, &killed.relay_id, true).await;
    assert_eq!(status, StatusCode::OK, "deciding the relay on the survivor: {body}\n{}", cluster.dump_logs());
    let transcript = follower.finish().await;
    let ended_after = killed.at.elapsed();

    let mut failures = checks::turn(&transcript, &Expect { cursor: 0, words: WORDS });
    let bash = native_output(&transcript, "call_bash").unwrap_or(Value::Null);
    if bash["result"]["stdout"] != HELLO || bash["result"]["exitCode"] != 0 {
        failures.push(format!("bash on the survivor: {bash}"));
    }
    let read = native_output(&transcript, "call_read").unwrap_or(Value::Null);
    if !read["context"].as_str().unwrap_or_default().contains(READ_LINE) {
        failures.push(format!("read on the survivor: {read}"));
    }
    failures.extend(rejoined_on_the_survivor(&transcript, &cluster.replicas[killed.survivor].base_url(), killed.at));
    failures.extend(shared_checks(&mut cluster, &session, &killed).await);
    eprintln!(
        "native coding chat: killed {} at the relay, turn ended on {} {:.1}s later; {} events over {} connections; \
         {:.1}s in all",
        cluster.replicas[killed.owner].name,
        cluster.replicas[killed.survivor].name,
        ended_after.as_secs_f64(),
        transcript.seqs().len(),
        transcript.connections.len(),
        started.elapsed().as_secs_f64(),
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_llm_gateway_coding_chat_goes_on_with_its_file_after_sigkill_between_patch_and_bash_and_runs_no_tool_twice()
{
    let started = Instant::now();
    let mut cluster = cluster().await;
    let body = json!({"model": "mock", "messages": [{"role": "user", "content": message()}]});
    let follower = cluster.chat_and_follow(0, &body, TURN_TIMEOUT).await;
    // The `connected` frame came before any relay: the session is known.
    let session = match follower.wait_for_kind("relay", RELAY_TIMEOUT).await {
        Some(_) => follower.snapshot().session_id,
        None => panic!("no relay within {RELAY_TIMEOUT:?}: {:?}\n{}", follower.snapshot().events, cluster.dump_logs()),
    };
    assert!(!session.is_empty(), "no connected frame named the session: {:?}", follower.snapshot().events);
    let killed = kill_the_owner_at_the_relay(
        &mut cluster,
        &follower,
        &session,
        "relay",
        |relay| (text(&relay.data["id"]), text(&relay.data["toolCallId"])),
        gateway_output,
    )
    .await;
    let (status, answer) = cluster.answer_chat_relay(killed.survivor, &session, &killed.relay_id, true).await;
    assert_eq!(
        (status, &answer),
        (StatusCode::OK, &json!({"success": true})),
        "answering the relay on the survivor\n{}",
        cluster.dump_logs()
    );
    let transcript = follower.finish().await;
    let ended_after = killed.at.elapsed();

    let mut failures = Vec::new();
    if !transcript.finished {
        failures.push(format!("the chat did not end: {}", transcript.describe_connections()));
    }
    let end = transcript.of_kind("harness_end").last().map(|e| e.data["reason"].clone());
    if end != Some(json!("final")) {
        failures.push(format!("harness_end reason {end:?}, not \"final\""));
    }
    // Rejoined with Last-Event-ID: every frame once, in order.
    let seqs = transcript.seqs();
    if seqs.windows(2).any(|w| w[0] >= w[1]) {
        failures.push(format!("the stream's ids repeat or go back: {seqs:?}"));
    }
    let text: String = transcript.of_kind("text").filter_map(|e| e.data["content"].as_str()).collect();
    if text != expected_answer(WORDS) {
        failures.push(format!("the answer is {text:?}, expected {:?}", expected_answer(WORDS)));
    }
    let bash = gateway_output(&transcript, "call_bash").unwrap_or(Value::Null);
    if bash["result"]["stdout"] != HELLO || bash["result"]["exitCode"] != 0 {
        failures.push(format!("bash on the survivor: {bash}"));
    }
    let read = gateway_output(&transcript, "call_read").unwrap_or(Value::Null);
    if !read["context"].as_str().unwrap_or_default().contains(READ_LINE) {
        failures.push(format!("read on the survivor: {read}"));
    }
    let progress: String =
        transcript.of_kind("tool_progress").filter_map(|e| e.data["content"]["data"].as_str()).collect();
    if progress != HELLO {
        failures.push(format!("the stream carried bash's live output as {progress:?}, expected {HELLO:?} once"));
    }
    failures.extend(rejoined_on_the_survivor(&transcript, &cluster.replicas[killed.survivor].base_url(), killed.at));
    failures.extend(shared_checks(&mut cluster, &session, &killed).await);
    eprintln!(
        "llm-gateway coding chat: killed {} at the relay, chat ended on {} {:.1}s later; {} frames over {} \
         connections; {:.1}s in all",
        cluster.replicas[killed.owner].name,
        cluster.replicas[killed.survivor].name,
        ended_after.as_secs_f64(),
        transcript.events.len(),
        transcript.connections.len(),
        started.elapsed().as_secs_f64(),
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
