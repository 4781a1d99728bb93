//! MCP servers as tool sources, against real MCP servers nobody here wrote
//! (`tests/common/mcp_server.rs`): `@modelcontextprotocol/server-everything`
//! (npm) and `mcp-server-time` (PyPI), each in its Streamable HTTP mode on
//! a port of its own. The model is the scripted upstream; the replicas share
//! Redis (`crate::orchestrator::world`).

use std::{
    net::TcpListener,
    sync::{Arc, Mutex},
    time::Duration,
};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    orchestrator::{World, kinds, of_kind, tool_messages, world},
    sse::{Frame, SseReader},
    support::{mcp_server::McpServer, mock_upstream::Reply},
};

/// The `[[mcp_servers]]` of these tests: `everything` (echo allowed, the
/// rest asking, two tools hidden), `time` (allowed), `slow` (everything
/// again, with a 1 s timeout), `gone` (nothing listens); tenant `acme` has
/// all four, `globex` none.
fn mcp_toml(everything: &McpServer, time: &McpServer) -> String {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    format!(
        r#"
[[mcp_servers]]
name = "everything"
url = "{url}"
headers = {{ X-Test-Label = {{ value = "switchboard-tests" }} }}
denied_tools = ["get-env", "trigger-sampling-request"]
tool_permissions = {{ echo = "allow", trigger-long-running-operation = "allow" }}

[[mcp_servers]]
name = "time"
url = "{time}"
permission = "allow"

[[mcp_servers]]
name = "slow"
url = "{url}"
allowed_tools = ["trigger-long-running-operation"]
permission = "allow"
timeout_secs = 1

[[mcp_servers]]
name = "gone"
url = "http://{closed}/mcp"
permission = "allow"
timeout_secs = 2
"#,
        url = everything.url(),
        time = time.url(),
    )
}

/// The two servers, and `replicas` replicas using them.
async fn mcp_world(replicas: usize) -> (World, McpServer, McpServer) {
    let (everything, time) = tokio::join!(McpServer::everything(), McpServer::time());
    let toml = mcp_toml(&everything, &time);
    let w = world(replicas, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("acme".into(), r#"mcp_servers = ["everything", "time", "slow", "gone"]"#.into()));
    })
    .await;
    (w, everything, time)
}

fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()).map(str::to_string)).collect()
}

async fn turn(w: &World, on: usize, ask: &str) -> Vec<Frame> {
    let id = w.session(on, "mock", json!({})).await;
    w.send(on, &id, ask).await.rest().await
}

#[tokio::test]
async fn a_turn_lists_and_calls_tools_of_two_mcp_servers_in_three_dialects() {
    let (w, everything, time) = mcp_world(1).await;

    // Native API: one model response calling a tool of each server (the
    // first call's arguments split across chunks).
    w.upstream.push(
        Reply::new().tool_call("call_echo", "mcp__everything__echo", [r#"{"message":"#, r#""hi mcp"}"#]).tool_call(
            "call_time",
            "mcp__time__convert_time",
            [r#"{"source_timezone":"UTC","time":"12:00","target_timezone":"Asia/Tokyo"}"#],
        ),
    );
    w.upstream.push(Reply::new().text(["Echoed and converted."]));
    let id = w.session(0, "mock", json!({})).await;
    let frames = w.send(0, &id, "echo hi mcp, and noon UTC in Tokyo").await.rest().await;
    let offered = tool_names(&w.model_request(0));
    for name in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__time__get_current_time",
        "mcp__time__convert_time",
        "mcp__slow__trigger-long-running-operation",
    ] {
        assert!(offered.iter().any(|n| n == name), "{name} is offered: {offered:?}");
    }
    let names: Vec<&Value> = of_kind(&frames, "tool_call").iter().map(|f| &f.data["name"]).collect();
    assert_eq!(names, [&json!("mcp__everything__echo"), &json!("mcp__time__convert_time")]);
    let results = of_kind(&frames, "tool_result");
    let by_id = |id: &str| results.iter().find(|f| f.data["tool_call_id"] == id).unwrap().data.clone();
    assert_eq!(by_id("call_echo")["status"], "success", "{:?}", by_id("call_echo"));
    assert!(by_id("call_echo")["output"].as_str().unwrap().contains("hi mcp"), "{:?}", by_id("call_echo"));
    assert_eq!(by_id("call_time")["status"], "success", "{:?}", by_id("call_time"));
    assert!(by_id("call_time")["output"].as_str().unwrap().contains("21:00"), "{:?}", by_id("call_time"));
    let seen = tool_messages(&w.model_request(1));
    assert!(seen.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("hi mcp"))), "{seen:?}");
    assert!(seen.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("Asia/Tokyo"))), "{seen:?}");
    assert_eq!(frames.last().unwrap().data["reason"], "final", "{:?}", kinds(&frames));

    // The same turn read as Cosmo's stream: the tool's name as the model
    // called it (Cosmo's page formats `mcp__<server>__<tool>` itself).
    let cosmo = w.apps[0].get(&format!("/v1/sessions/{id}/events?format=cosmo&after=0"), Some(&w.token)).await;
    let cosmo = SseReader::new(cosmo).rest().await;
    let of_type = |kind: &str| -> Vec<Value> {
        cosmo.iter().filter(|f| f.data["type"] == kind).map(|f| f.data.clone()).collect()
    };
    let cosmo_calls: Vec<Value> = of_type("tool_call").iter().map(|d| d["toolName"].clone()).collect();
    assert_eq!(cosmo_calls, [json!("mcp__everything__echo"), json!("mcp__time__convert_time")], "{cosmo:?}");
    let previews: Vec<String> = of_type("tool_result").iter().map(|d| d["toolResult"].to_string()).collect();
    assert!(previews.iter().any(|p| p.contains("hi mcp")), "{previews:?}");

    // HolmesGPT's `/api/chat`: the same servers' tools in its shape.
    w.upstream.push(
        Reply::new().tool_call("call_echo2", "mcp__everything__echo", [r#"{"message":"from holmes"}"#]).tool_call(
            "call_time2",
            "mcp__time__get_current_time",
            [r#"{"timezone":"Europe/Paris"}"#],
        ),
    );
    w.upstream.push(Reply::new().text(["Echoed again."]));
    let body = json!({"ask": "echo from holmes and the time in Paris", "model": "mock", "stream": true});
    let response = w.apps[0].post_json("/api/chat", Some(&w.token), &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let frames = SseReader::new(response).rest().await;
    let results = of_kind(&frames, "tool_calling_result");
    assert_eq!(results.len(), 2, "{:?}", kinds(&frames));
    let by_name = |name: &str| results.iter().find(|f| f.data["name"] == name).unwrap().data.clone();
    let echoed = by_name("mcp__everything__echo");
    assert_eq!(echoed["result"]["status"], "success", "{echoed:?}");
    assert!(echoed["result"]["data"].to_string().contains("from holmes"), "{echoed:?}");
    let timed = by_name("mcp__time__get_current_time");
    assert_eq!(timed["result"]["status"], "success", "{timed:?}");
    assert!(timed["result"]["data"].to_string().contains("Europe/Paris"), "{timed:?}");
    assert_eq!(frames.last().unwrap().event, "ai_answer_end");

    let metrics = w.apps[0].get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains(r#"switchboard_mcp_tool_calls_total{server="everything",outcome="ok"} 2"#),
        "{}",
        metrics.lines().filter(|l| l.contains("mcp")).collect::<Vec<_>>().join("\n")
    );
    assert!(metrics.contains(r#"switchboard_mcp_tool_calls_total{server="time",outcome="ok"} 2"#));
    for url in [everything.url(), time.url()] {
        assert!(!metrics.contains(&url), "the server's URL is not exposed");
    }
}

#[tokio::test]
async fn an_asking_mcp_tool_is_decided_on_another_replica() {
    let (w, _everything, _time) = mcp_world(2).await;
    w.upstream.push(Reply::new().tool_call("call_sum", "mcp__everything__get-sum", [r#"{"a":2,"b":3}"#]));
    w.upstream.push(Reply::new().text(["Five."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut on_a = w.send(0, &id, "add 2 and 3").await;
    let before = on_a.until_kind("relay_requested").await;
    let relay = before.last().unwrap().data.clone();
    assert_eq!(relay["tool"], "mcp__everything__get-sum");
    assert_eq!(relay["params"], json!({"a": 2, "b": 3}));
    let path = format!("/v1/sessions/{id}/relays/{}", relay["relay_id"].as_str().unwrap());
    let decided = w.apps[1].post_json(&path, Some(&w.token), &json!({"approved": true})).await;
    assert_eq!(decided.status(), StatusCode::OK);
    let rest = on_a.rest().await;
    assert_eq!(&kinds(&rest)[..3], ["relay_decided", "tool_call", "tool_result"]);
    let result = of_kind(&rest, "tool_result")[0];
    assert_eq!(result.data["status"], "success", "{:?}", result.data);
    assert!(result.data["output"].as_str().unwrap().contains('5'), "{:?}", result.data);
    assert_eq!(rest.last().unwrap().data["reason"], "final");
}

#[tokio::test]
async fn allow_lists_hide_tools_and_another_tenant_sees_no_mcp_tool() {
    let (w, everything, time) = mcp_world(1).await;

    w.upstream.push(Reply::new().tool_call("call_env", "mcp__everything__get-env", ["{}"]));
    w.upstream.push(Reply::new().text(["No."]));
    let frames = turn(&w, 0, "show the environment").await;
    let offered = tool_names(&w.model_request(0));
    assert!(offered.iter().any(|n| n == "mcp__everything__echo"), "{offered:?}");
    for hidden in ["mcp__everything__get-env", "mcp__everything__trigger-sampling-request", "mcp__slow__echo"] {
        assert!(!offered.iter().any(|n| n == hidden), "{hidden} is hidden: {offered:?}");
    }
    // Called anyway (a model may make a name up): refused, nothing runs.
    let result = of_kind(&frames, "tool_result")[0];
    assert_eq!(result.data["status"], "error", "{:?}", result.data);
    assert!(result.data["output"].as_str().unwrap().contains("no tool named"), "{:?}", result.data);

    // A tenant without the servers (they are globex's here) is offered none
    // of their tools, and a call of one is no tool of its.
    let toml = mcp_toml(&everything, &time);
    let other = world(1, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("globex".into(), r#"mcp_servers = ["everything"]"#.into()));
    })
    .await;
    other.upstream.push(Reply::new().tool_call("call_echo", "mcp__everything__echo", [r#"{"message":"x"}"#]));
    other.upstream.push(Reply::new().text(["No."]));
    let frames = turn(&other, 0, "echo x").await;
    let offered = tool_names(&other.model_request(0));
    assert!(!offered.iter().any(|n| n.starts_with("mcp__")), "acme sees none of globex's MCP tools: {offered:?}");
    let result = of_kind(&frames, "tool_result")[0];
    assert_eq!(result.data["status"], "error", "{:?}", result.data);
    assert!(result.data["output"].as_str().unwrap().contains("no tool named"), "{:?}", result.data);
}

#[tokio::test]
async fn a_failing_server_gives_the_model_an_error_result_and_never_stops_the_turn() {
    let (w, everything, _time) = mcp_world(1).await;

    // `isError` (the server refuses arguments its schema does not allow),
    // a timeout (a 5 s operation on the server with a 1 s limit), and a
    // server nobody answers for (its tools were never listed): three error
    // results the model sees, and the turn ends as usual.
    w.upstream.push(
        Reply::new()
            .tool_call("call_bad", "mcp__everything__echo", [r#"{"message":42}"#])
            .tool_call("call_slow", "mcp__slow__trigger-long-running-operation", [r#"{"duration":5,"steps":1}"#])
            .tool_call("call_gone", "mcp__gone__anything", ["{}"]),
    );
    w.upstream.push(Reply::new().text(["Three failures."]));
    let started = tokio::time::Instant::now();
    let frames = turn(&w, 0, "fail three ways").await;
    let results = of_kind(&frames, "tool_result");
    assert_eq!(results.len(), 3, "{:?}", kinds(&frames));
    let by_id = |id: &str| results.iter().find(|f| f.data["tool_call_id"] == id).unwrap().data.clone();
    for id in ["call_bad", "call_slow", "call_gone"] {
        assert_eq!(by_id(id)["status"], "error", "{id}: {:?}", by_id(id));
    }
    assert!(by_id("call_slow")["output"].as_str().unwrap().contains("did not answer within 1 s"));
    assert!(by_id("call_gone")["output"].as_str().unwrap().contains("the MCP server gone could not be reached"));
    for result in &results {
        assert!(!result.data["output"].as_str().unwrap().contains(&everything.url()), "no URL reaches a client");
    }
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    assert!(started.elapsed() < Duration::from_secs(30), "the turn was not held by the failing servers");

    let metrics = w.apps[0].get("/metrics", None).await.text().await.unwrap();
    for sample in [
        r#"switchboard_mcp_tool_calls_total{server="everything",outcome="tool_error"} 1"#,
        r#"switchboard_mcp_tool_calls_total{server="slow",outcome="timeout"} 1"#,
        r#"switchboard_mcp_tool_calls_total{server="gone",outcome="unreachable"} 1"#,
    ] {
        assert!(
            metrics.contains(sample),
            "{sample}\n{}",
            metrics.lines().filter(|l| l.contains("mcp")).collect::<Vec<_>>().join("\n")
        );
    }
    assert!(
        metrics.contains(r#"switchboard_mcp_tool_lists_total{server="gone",outcome="#),
        "the failed listing is counted"
    );
}

#[tokio::test]
async fn a_server_that_goes_away_mid_call_gives_an_error_result_before_its_timeout() {
    let mut dying = McpServer::everything().await;
    let toml = format!(
        r#"
[[mcp_servers]]
name = "dying"
url = "{}"
permission = "allow"
timeout_secs = 60
"#,
        dying.url()
    );
    let w = world(1, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("acme".into(), r#"mcp_servers = ["dying"]"#.into()));
    })
    .await;
    w.upstream.push(Reply::new().tool_call(
        "call_long",
        "mcp__dying__trigger-long-running-operation",
        [r#"{"duration":30,"steps":30}"#],
    ));
    w.upstream.push(Reply::new().text(["It went away."]));
    let id = w.session(0, "mock", json!({})).await;
    let mut stream = w.send(0, &id, "run a long operation").await;
    stream.until_kind("tool_call").await;
    // The call is on its way (the operation reports progress each second).
    dying.kill().await;
    let rest = stream.rest().await;
    let result = of_kind(&rest, "tool_result")[0];
    assert_eq!(result.data["status"], "error", "{:?}", result.data);
    let output = result.data["output"].as_str().unwrap();
    // Neither the operation's 30 s nor the server's 60 s limit passed.
    assert!(output.contains("could not be reached"), "{output}");
    assert_eq!(rest.last().unwrap().data["reason"], "final", "{:?}", kinds(&rest));
}

#[tokio::test]
async fn a_server_answering_malformed_json_rpc_is_an_error_result() {
    // Not an MCP server: every request gets a 200 whose JSON body is cut.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let garbler = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buffer = [0u8; 8192];
                let _ = socket.read(&mut buffer).await;
                let body = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVers"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    let toml = format!(
        "\n[[mcp_servers]]\nname = \"garbled\"\nurl = \"http://{addr}/mcp\"\npermission = \"allow\"\ntimeout_secs = 5\n"
    );
    let w = world(1, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("acme".into(), r#"mcp_servers = ["garbled"]"#.into()));
    })
    .await;
    w.upstream.push(Reply::new().tool_call("call_g", "mcp__garbled__search", [r#"{"q":"x"}"#]));
    w.upstream.push(Reply::new().text(["It spoke no MCP."]));
    let frames = turn(&w, 0, "search x").await;
    let result = of_kind(&frames, "tool_result")[0];
    assert_eq!(result.data["status"], "error", "{:?}", result.data);
    assert!(result.data["output"].as_str().unwrap().contains("did not answer in MCP"), "{:?}", result.data);
    assert_eq!(frames.last().unwrap().data["reason"], "final");
    garbler.abort();
}

/// What a recording proxy saw of one request: its `x-user-token` and
/// `mcp-protocol-version` headers.
#[derive(Debug, Clone)]
struct Seen {
    token: Option<String>,
    version: Option<String>,
}

/// A reverse proxy in front of an MCP server that records some headers of
/// every request it passes on (responses, SSE included, are streamed back
/// as they come).
async fn recording_proxy(upstream: String) -> (String, Arc<Mutex<Vec<Seen>>>) {
    use axum::{body::Body, extract::Request, response::Response};

    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (http, record, upstream) = (http.clone(), record.clone(), upstream.clone());
        async move {
            let seen = {
                let headers = request.headers();
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
                Seen { token: header("x-user-token"), version: header("mcp-protocol-version") }
            };
            record.lock().unwrap().push(seen);
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let mut outgoing = http.request(parts.method, &upstream).body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    outgoing = outgoing.header(name, value);
                }
            }
            let answer = outgoing.send().await.unwrap();
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    response = response.header(name, value);
                }
            }
            response.body(Body::from_stream(answer.bytes_stream())).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), seen)
}

/// Every value under the test's key prefix, as text, whatever its type.
async fn everything_stored(prefix: &str) -> String {
    let client = redis::Client::open(crate::helpers::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}*")).query_async(&mut conn).await.unwrap();
    let mut all = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.unwrap();
        let value: redis::Value = match kind.as_str() {
            "hash" => redis::cmd("HGETALL").arg(&key).query_async(&mut conn).await.unwrap(),
            "stream" => redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query_async(&mut conn).await.unwrap(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query_async(&mut conn).await.unwrap(),
            "set" => redis::cmd("SMEMBERS").arg(&key).query_async(&mut conn).await.unwrap(),
            "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query_async(&mut conn).await.unwrap(),
            _ => redis::cmd("GET").arg(&key).query_async(&mut conn).await.unwrap(),
        };
        all.push_str(&format!("{key} {value:?}\n"));
    }
    all
}

#[tokio::test]
async fn forwarded_headers_reach_the_server_per_request_and_are_never_stored_or_streamed() {
    let everything = McpServer::everything().await;
    let (url, seen) = recording_proxy(everything.url()).await;
    let toml = format!(
        "\n[[mcp_servers]]\nname = \"personal\"\nurl = \"{url}\"\nforward_headers = [\"X-User-Token\"]\npermission = \"allow\"\n"
    );
    let w = world(1, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("acme".into(), r#"mcp_servers = ["personal"]"#.into()));
    })
    .await;
    let app = &w.apps[0];
    let mut streams = String::new();
    // Alice's turn with her token, then Bob's with his, then one with none.
    for (user, token) in [("alice", Some("alice-secret-1")), ("bob", Some("bob-secret-2")), ("carol", None)] {
        let bearer = app.token("acme", user);
        let created = app.post_json("/v1/sessions", Some(&bearer), &json!({"model": "mock"})).await;
        let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
        w.upstream.push(Reply::new().tool_call("call_p", "mcp__personal__echo", [r#"{"message":"mine"}"#]));
        w.upstream.push(Reply::new().text(["Done."]));
        let before = seen.lock().unwrap().len();
        let mut request = app.client.post(app.url(&format!("/v1/sessions/{id}/messages"))).bearer_auth(&bearer);
        if let Some(token) = token {
            request = request.header("X-User-Token", token);
        }
        let response = request.json(&json!({"content": "echo mine"})).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let frames = SseReader::new(response).rest().await;
        let result = of_kind(&frames, "tool_result")[0];
        assert_eq!(result.data["status"], "success", "{user}: {:?}", result.data);
        streams.push_str(&format!("{frames:?}"));
        let during: Vec<Option<String>> = seen.lock().unwrap()[before..].iter().map(|s| s.token.clone()).collect();
        assert!(!during.is_empty(), "{user}'s turn reached the server");
        assert!(during.iter().all(|t| t.as_deref() == token), "{user}'s requests carried {token:?} only: {during:?}");
    }
    let stored = everything_stored(&app.config.store.key_prefix).await;
    for secret in ["alice-secret-1", "bob-secret-2"] {
        assert!(!stored.contains(secret), "{secret} is not in the store");
        assert!(!streams.contains(secret), "{secret} is in no event");
    }
}

#[tokio::test]
async fn the_client_speaks_the_stateless_protocol_where_configured_and_sessions_by_default() {
    let (everything, time) = tokio::join!(McpServer::everything(), McpServer::time());
    let (everything_url, everything_seen) = recording_proxy(everything.url()).await;
    let (time_url, time_seen) = recording_proxy(time.url()).await;
    let toml = format!(
        "\n[[mcp_servers]]\nname = \"everything\"\nurl = \"{everything_url}\"\npermission = \"allow\"\n\
         \n[[mcp_servers]]\nname = \"time\"\nurl = \"{time_url}\"\npermission = \"allow\"\nprotocol = \"2026-07-28\"\n"
    );
    let w = world(1, |o| {
        o.extra_toml.push_str(&toml);
        o.tenant_toml.push(("acme".into(), r#"mcp_servers = ["everything", "time"]"#.into()));
    })
    .await;
    w.upstream.push(Reply::new().tool_call("call_echo", "mcp__everything__echo", [r#"{"message":"eras"}"#]).tool_call(
        "call_now",
        "mcp__time__get_current_time",
        [r#"{"timezone":"UTC"}"#],
    ));
    w.upstream.push(Reply::new().text(["Both."]));
    let frames = turn(&w, 0, "echo and tell the time").await;
    let results = of_kind(&frames, "tool_result");
    assert_eq!(results.len(), 2, "{:?}", kinds(&frames));
    assert!(results.iter().all(|r| r.data["status"] == "success"), "{results:?}");
    let versions = |seen: &Arc<Mutex<Vec<Seen>>>| -> Vec<Option<String>> {
        seen.lock().unwrap().iter().map(|s| s.version.clone()).collect()
    };
    let time_versions = versions(&time_seen);
    assert!(
        time_versions.iter().any(|v| v.as_deref() == Some("2026-07-28")),
        "the Python SDK's server, configured for it, is spoken to in 2026-07-28: {time_versions:?}"
    );
    let everything_versions = versions(&everything_seen);
    assert!(
        everything_versions.iter().any(|v| v.as_deref() == Some("2025-11-25")),
        "server-everything is spoken to with sessions (2025-11-25) by default: {everything_versions:?}"
    );
}
