//! `switchboard zot-rpc` as a harness spawns it (the real binary, stdin and
//! stdout piped), in front of two replicas behind a TCP proxy that sends
//! every connection to the first live replica, as a load balancer would.
//! The replica serving the bridge is killed mid-turn: the harness sees a
//! pause and then the rest, every line once, in order.

use std::{
    collections::HashSet,
    net::SocketAddr,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    net::{TcpListener, TcpStream},
    process::{Child, ChildStdin, ChildStdout},
    task::JoinHandle,
};

use crate::{orchestrator::world, support::mock_upstream::Reply};

/// How long one line may take (a takeover waits for the dead replica's lease).
const LINE_TIMEOUT: Duration = Duration::from_secs(30);

/// Open connections: backend index and the task copying its bytes.
type Open = Arc<Mutex<Vec<(usize, JoinHandle<()>)>>>;

/// A TCP proxy: each connection to the first backend not cut.
struct Proxy {
    addr: SocketAddr,
    cut: Arc<Mutex<HashSet<usize>>>,
    open: Open,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(backends: Vec<SocketAddr>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut: Arc<Mutex<HashSet<usize>>> = Arc::default();
        let open: Open = Arc::default();
        let (cut_, open_) = (cut.clone(), open.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let live = (0..backends.len()).find(|i| !cut_.lock().unwrap().contains(i));
                let Some(index) = live else { continue };
                let Ok(mut backend) = TcpStream::connect(backends[index]).await else { continue };
                let copy = tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                });
                open_.lock().unwrap().push((index, copy));
            }
        });
        Self { addr, cut, open, accept }
    }

    /// Backend `index` is gone: its connections drop, new ones go elsewhere.
    fn cut(&self, index: usize) {
        self.cut.lock().unwrap().insert(index);
        for (_, copy) in self.open.lock().unwrap().iter().filter(|(i, _)| *i == index) {
            copy.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for (_, copy) in self.open.lock().unwrap().iter() {
            copy.abort();
        }
    }
}

/// The bridge process and its pipes.
struct Harness {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Harness {
    fn spawn(url: &str, token: &str) -> Self {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["zot-rpc", "--url", url, "--token", token, "--model", "mock"])
            .env_remove("ZOTCORE_RPC_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, stdin, stdout }
    }

    async fn send(&mut self, command: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{command}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(LINE_TIMEOUT, self.stdout.next_line()).await.expect("a line in time");
        serde_json::from_str(&line.unwrap().expect("the bridge is still writing")).unwrap()
    }

    /// Lines up to and including the first of type `kind`.
    async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut lines = Vec::new();
        loop {
            let line = self.line().await;
            let done = line["type"] == kind;
            lines.push(line);
            if done {
                return lines;
            }
        }
    }
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines.iter().map(|l| l["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_harness_sees_zot_rpc_and_only_a_pause_when_the_serving_replica_dies() {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    let proxy = Proxy::start(w.apps.iter().map(|a| a.addr).collect()).await;
    let mut zot = Harness::spawn(&format!("http://{}", proxy.addr), &w.token);

    zot.send(json!({"id": "1", "type": "ping"})).await;
    assert_eq!(
        zot.line().await,
        json!({"type": "response", "id": "1", "command": "ping", "success": true,
        "data": {"pong": true}})
    );

    // A prompt that uses a tool: zot's lines, none of ours (`seq`, heartbeats).
    w.upstream.push(Reply::new().tool_call("call_1", "lookup", [r#"{"id":"42"}"#]));
    w.upstream.push(Reply::new().text(["Order 42 shipped."]));
    zot.send(json!({"id": "2", "type": "prompt", "message": "where is order 42?"})).await;
    let first = zot.until("done").await;
    assert_eq!(types(&first)[..3], ["response", "user_message", "turn_start"]);
    assert_eq!(
        first[0],
        json!({"type": "response", "id": "2", "command": "prompt", "success": true,
        "data": {"started": true}})
    );
    let at = |kind: &str| types(&first).iter().position(|t| *t == kind).unwrap();
    // An HTTP tool has no live output: no `tool_progress` (bash sends its chunks).
    assert!(at("tool_call") < at("turn_end") && at("turn_end") < at("tool_result"));
    assert!(!types(&first).contains(&"tool_progress"));
    assert!(first.iter().all(|l| l.get("seq").is_none()));
    assert_eq!(w.tools.calls("lookup"), 1);

    // An abort during a second prompt.
    w.upstream.push(Reply::new().text(["Thinking ", "more"]).stall_after(1));
    zot.send(json!({"id": "3", "type": "prompt", "message": "think forever"})).await;
    zot.until("text_delta").await;
    zot.send(json!({"id": "4", "type": "abort"})).await;
    let aborted = zot.until("done").await;
    assert!(aborted.contains(&json!({"type": "response", "id": "4", "command": "abort", "success": true})));
    let ends: Vec<&Value> = aborted.iter().filter(|l| l["type"] != "response").collect();
    assert_eq!((ends[0]["type"].as_str(), ends[0]["stop"].as_str()), (Some("turn_end"), Some("aborted")));
    assert_eq!(ends[1]["type"], "done");

    // A third prompt; the replica serving it dies mid-answer. Another takes
    // the session over and generates the cut step again.
    w.upstream
        .push(Reply::new().text(["one ", "two ", "three ", "four ", "five"]).chunk_delay(Duration::from_millis(150)));
    w.upstream.push(Reply::new().text(["one two three four five"]));
    zot.send(json!({"id": "5", "type": "prompt", "message": "count to five"})).await;
    let mut third = zot.until("text_delta").await;
    third.extend(zot.until("text_delta").await);
    proxy.cut(0);
    w.apps.remove(0).kill();
    third.extend(zot.until("done").await);

    // Every line once, in order: the bridge's lines are the turn's log as
    // a zot stream renders it afresh (`response` and `user_message` are
    // the request's, not the log's).
    let id = {
        let state = json!({"id": "6", "type": "get_state"});
        zot.send(state).await;
        zot.line().await["data"]["session_id"].as_str().unwrap().to_string()
    };
    let url = w.apps[0].url(&format!("/v1/sessions/{id}/events?format=zot&after=0"));
    let log = w.apps[0].client.get(url).bearer_auth(&w.token).send().await.unwrap().text().await.unwrap();
    let log: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] != "heartbeat")
        .map(|mut l| {
            l.as_object_mut().unwrap().remove("seq");
            l
        })
        .collect();
    let turns: Vec<&[Value]> = log.split_inclusive(|l| l["type"] == "done").collect();
    let bridged: Vec<Value> =
        third.into_iter().filter(|l| l["type"] != "response" && l["type"] != "user_message").collect();
    assert_eq!(bridged, turns[2], "the harness got the turn's lines, each once, in order");
    let restarted = bridged.iter().any(|l| l["type"] == "turn_end" && l["restarted"] == true);
    assert!(restarted, "the takeover regenerated the cut step: {bridged:?}");
    let finals: Vec<&Value> = bridged.iter().filter(|l| l["type"] == "assistant_message").collect();
    assert_eq!(finals.last().unwrap()["content"], json!([{"type": "text", "text": "one two three four five"}]));

    // EOF: the process exits 0.
    drop(zot.stdin.take());
    let status = tokio::time::timeout(LINE_TIMEOUT, zot.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}
