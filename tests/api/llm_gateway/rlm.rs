//! rlm mode (`mode: "rlm"`): cells, `scope`, `llm_query` children, errors
//! the model is told, the events in llm-gateway's shapes and order (golden
//! transcript), and a takeover that rebuilds the REPL by replay without
//! calling the model again for the replayed cells.

use serde_json::{Value, json};

use super::{chat, chat_body, kinds, session_of, user};
use crate::{
    helpers::AppOptions,
    orchestrator::world,
    sse::Frame,
    support::{
        mock_upstream::Reply,
        raw_sse::{assert_golden, normalise},
    },
};

/// acme's cells may run commands (`exec` is on with the `bash` tool; it
/// asks, as `bash` does, unless a rule allows it).
fn with_exec(options: &mut AppOptions) {
    options.tenant_toml.push(("acme".into(), "default_tools = [\"agent\", \"bash\", \"read\", \"patch\"]".into()));
}

/// A request rule that lets every `exec` run.
fn exec_allowed() -> Value {
    json!({"allowlist": [{"tool": "exec"}]})
}

/// The command the tests run: it appends a line to `runs.txt` and prints
/// how many lines it has, so a second run shows.
const COUNTED: &str = "echo run >> runs.txt; wc -l < runs.txt";

fn cell(code: &str) -> String {
    format!("```js\n{code}\n```")
}

/// The ids a stream's events carry that differ from run to run (cells,
/// child agents), as placeholders in order of appearance.
fn placeholders(frames: &[Frame], session_id: &str) -> Vec<(String, String)> {
    let mut out = vec![(session_id.to_string(), "<session>".to_string())];
    for frame in frames {
        let ids = [("repl_input", "id", "cell"), ("harness_start", "agentId", "child")];
        for (event, field, name) in ids {
            if frame.event != event {
                continue;
            }
            let Some(id) = frame.data[field].as_str() else { continue };
            if id != "main" && !out.iter().any(|(from, _)| from == id) {
                let n = out.iter().filter(|(_, to)| to.starts_with(&format!("<{name}"))).count() + 1;
                out.push((id.to_string(), format!("<{name}{n}>")));
            }
        }
    }
    out
}

#[tokio::test]
async fn an_rlm_turn_keeps_scope_queries_a_child_and_ends_with_final_matching_the_golden_transcript() {
    let w = world(1, |_| {}).await;
    w.upstream.push(
        Reply::new()
            .text(["Let me look.\n", &cell("scope.n = context.length;\nconsole.log('n =', scope.n)")])
            .usage(30, 10),
    );
    w.upstream.push(
        Reply::new()
            .text([cell("const one = await llm_query('Say one', 'the data');\nconsole.log('child said', one)")])
            .usage(40, 12),
    );
    // The child (its own REPL, context "the data"): a reply without code,
    // then its FINAL.
    w.upstream.push(Reply::new().text(["I will answer."]).usage(5, 3));
    w.upstream.push(Reply::new().text([cell("FINAL(context.toUpperCase())")]).usage(6, 4));
    w.upstream.push(Reply::new().text([cell("throw new Error('oops')")]).usage(50, 5));
    w.upstream.push(Reply::new().text([cell("FINAL(`${scope.n} chars`)")]).usage(60, 6));
    let body = chat_body(
        "mock",
        json!([user("How long is the context?")]),
        json!({"mode": "rlm", "context": "hello world", "maxDepth": 1}),
    );
    let mut stream = chat(&w, 0, &body).await;
    let text = stream.rest().await;
    let frames = stream.frames();
    let session_id = session_of(&stream);
    let owned = placeholders(&frames, &session_id);
    let replacements: Vec<(&str, &str)> = owned.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_golden("llm_gateway_rlm.sse", &normalise(&text, &replacements));
    assert_eq!(w.upstream.calls(), 6);

    // The loop as llm-gateway's REPL view reads it.
    let outputs: Vec<&Value> = frames.iter().filter(|f| f.event == "repl_output").map(|f| &f.data).collect();
    let root: Vec<&&Value> = outputs.iter().filter(|o| o.get("parentId").is_none()).collect();
    let stdout: Vec<&str> = root.iter().map(|o| o["stdout"].as_str().unwrap()).collect();
    assert_eq!(stdout, ["n = 11", "child said THE DATA", "", ""]);
    assert_eq!(root[2]["error"], "oops");
    assert_eq!(root.iter().map(|o| o["done"].as_bool().unwrap()).collect::<Vec<_>>(), [false, false, false, true]);
    assert_eq!(root.iter().map(|o| o["iteration"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2, 3]);
    let last = frames.iter().rev().find(|f| f.event == "text").unwrap();
    assert_eq!(last.data["content"], "11 chars");
    let end = frames.last().unwrap();
    assert_eq!(
        (end.event.as_str(), &end.data["reason"], &end.data["iterations"]),
        ("harness_end", &json!("final"), &json!(4))
    );

    // The child: its run hangs under the cell that queried it.
    let query_cell = frames.iter().filter(|f| f.event == "repl_input").nth(1).unwrap().data["id"].clone();
    let child: Vec<&Frame> = frames.iter().filter(|f| f.data.get("parentId") == Some(&query_cell)).collect();
    assert_eq!(
        kinds(&child.iter().map(|f| (*f).clone()).collect::<Vec<_>>()),
        [
            "harness_start",
            "text",
            "usage",
            "error",
            "text",
            "usage",
            "repl_input",
            "repl_output",
            "text",
            "harness_end"
        ]
    );
    assert_eq!(child[0].data["depth"], 1);
    let child_end = child.last().unwrap();
    assert_eq!((&child_end.data["reason"], &child_end.data["iterations"]), (&json!("final"), &json!(2)));

    // The conversation keeps the answer, not the REPL loop.
    let session: Value =
        w.apps[0].get(&format!("/v1/sessions/{session_id}"), Some(&w.token)).await.json().await.unwrap();
    assert_eq!(session["status"], "completed", "{session}");
}

#[tokio::test]
async fn a_replica_that_takes_an_rlm_turn_over_replays_its_cells_without_calling_the_model_again() {
    let mut w = world(2, |o| {
        o.lease_ttl_secs = 1;
        with_exec(o);
    })
    .await;
    let first = "scope.answer = 41;\nscope.r = Math.random();\nconsole.log('stored', Date.now() > 0)";
    w.upstream.push(Reply::new().text([cell(first)]));
    let second = format!(
        "scope.one = await llm_query('Say one');\nconst r = exec('{COUNTED}');\nconsole.log(scope.one, scope.r, r.stdout.trim())"
    );
    w.upstream.push(Reply::new().text([cell(&second)]));
    w.upstream.push(Reply::new().text([cell("FINAL('one')")]));
    // The third root reply never comes on A.
    w.upstream.push(Reply::new().text(["```js\n"]).stall_after(1));
    w.upstream.push(Reply::new().text([cell("FINAL(`${scope.answer + 1} ${scope.one}`)")]));
    let body =
        chat_body("mock", json!([user("go")]), json!({"mode": "rlm", "maxDepth": 1, "permissions": exec_allowed()}));
    let mut on_a = chat(&w, 0, &body).await;
    let root_output = |f: &Frame| f.event == "repl_output" && f.data.get("parentId").is_none();
    let frames = on_a.until(|frames| frames.iter().filter(|f| root_output(f)).count() == 2).await;
    let outputs: Vec<String> =
        frames.iter().filter(|f| root_output(f)).map(|f| f.data["stdout"].as_str().unwrap().to_string()).collect();
    let session_id = session_of(&on_a);
    // The cut reply's first words reached the log: B must take them back.
    let seen = frames.len();
    let frames = on_a.until(|frames| frames[seen..].iter().any(|f| f.event == "text")).await;
    let cut = frames[seen..].iter().find(|f| f.event == "text").unwrap().clone();
    w.apps.remove(0).kill();
    drop(on_a);

    let mut on_b = super::rejoin(&w.apps[0], &w.token, &session_id, 0).await;
    on_b.rest().await;
    let frames = on_b.frames();
    let end = frames.last().unwrap();
    assert_eq!((end.event.as_str(), &end.data["reason"]), ("harness_end", &json!("final")), "{:?}", kinds(&frames));
    let answer = frames.iter().rev().find(|f| f.event == "text").unwrap();
    assert_eq!(answer.data["content"], "42 one", "scope was rebuilt by the replay");
    // A's two cells, their model replies and the child's, were not made
    // again: one more model call, for the cut third reply.
    assert_eq!(w.upstream.calls(), 5);
    let restarted: Vec<&Frame> = frames.iter().filter(|f| f.event == "step_restarted").collect();
    assert_eq!(restarted.len(), 1, "{:?}", kinds(&frames));
    assert_eq!(restarted[0].data["discard"], json!([cut.data["id"]]));
    let root_outputs: Vec<&str> = frames
        .iter()
        .filter(|f| f.event == "repl_output" && f.data.get("parentId").is_none())
        .map(|f| f.data["stdout"].as_str().unwrap())
        .collect();
    assert_eq!(root_outputs[..2], outputs.iter().map(String::as_str).collect::<Vec<_>>()[..]);
    assert_eq!(root_outputs.len(), 3, "each cell's output once: {root_outputs:?}");
    assert!(outputs[1].ends_with(" 1"), "the command ran once on A: {outputs:?}");
    // The command's file was committed with its result, and B's replay did
    // not run it again.
    let files: Value = w.apps[0]
        .get(&format!("/v1/sessions/{session_id}/workspace?format=json"), Some(&w.token))
        .await
        .json()
        .await
        .unwrap();
    let runs = files["files"].as_array().unwrap().iter().find(|f| f["path"] == "runs.txt").expect("runs.txt");
    assert_eq!(runs["content"], "run\n", "{files}");
    // The last model call saw the replayed cells' feedback.
    let last = &w.upstream.requests()[4];
    let text = last.body.to_string();
    assert!(text.contains("stored true") && text.contains(&outputs[1]), "{text}");
}

#[tokio::test]
async fn exec_runs_in_the_sandbox_streams_its_output_and_asks_for_permission_on_any_replica() {
    let w = world(2, with_exec).await;
    let first = format!(
        "const r = exec('{COUNTED}; echo to-stderr >&2; cat /etc/shadow');\nconsole.log(r.exitCode, r.stdout.trim())"
    );
    w.upstream.push(Reply::new().text([cell(&first)]));
    w.upstream.push(Reply::new().text([cell("try { exec('rm runs.txt') } catch (e) { console.log(e.message) }")]));
    w.upstream.push(Reply::new().text([cell("const t = exec('sleep 5', 0.5); FINAL(t.exitCode + ' ' + t.stderr)")]));
    // The first exec asks (no rule allows it): approved on replica 1.
    let body = chat_body("mock", json!([user("count")]), json!({"mode": "rlm"}));
    let mut stream = chat(&w, 0, &body).await;
    let relay = stream.until_event("relay").await;
    let command = format!("{COUNTED}; echo to-stderr >&2; cat /etc/shadow");
    assert_eq!((&relay.data["tool"], &relay.data["params"]["command"]), (&json!("exec"), &json!(command)));
    let session_id = session_of(&stream);
    let approve = json!({"sessionId": session_id, "response": {"approved": true}});
    let relay_id = relay.data["id"].as_str().unwrap();
    let decided = super::answer_relay(&w.apps[1], &w.token, relay_id, &approve).await;
    assert_eq!(decided.status(), reqwest::StatusCode::OK);
    // The second asks too: denied with a reason, which the cell catches.
    let frames = stream.until(|f| f.iter().filter(|f| f.event == "relay").count() == 2).await;
    let second = frames.iter().filter(|f| f.event == "relay").nth(1).unwrap();
    let deny = json!({"sessionId": session_id, "response": {"approved": false, "reason": "not that"}});
    let relay_id = second.data["id"].as_str().unwrap();
    assert_eq!(super::answer_relay(&w.apps[1], &w.token, relay_id, &deny).await.status(), reqwest::StatusCode::OK);
    // The third asks, approved; its command outlives its timeout.
    let frames = stream.until(|f| f.iter().filter(|f| f.event == "relay").count() == 3).await;
    let third = frames.iter().filter(|f| f.event == "relay").nth(2).unwrap();
    let relay_id = third.data["id"].as_str().unwrap();
    assert_eq!(super::answer_relay(&w.apps[0], &w.token, relay_id, &approve).await.status(), reqwest::StatusCode::OK);
    stream.rest().await;
    let frames = stream.frames();

    let outputs: Vec<&Value> = frames.iter().filter(|f| f.event == "repl_output").map(|f| &f.data).collect();
    assert_eq!(outputs.len(), 3, "{:?}", kinds(&frames));
    // The host's secret files are not in the sandbox's view.
    let first = outputs[0]["stdout"].as_str().unwrap();
    assert!(first.starts_with("1 1") && !first.contains("root:"), "{first}");
    assert_eq!(outputs[1]["stdout"], "exec denied: not that");
    let progress: String = frames
        .iter()
        .filter(|f| f.event == "repl_progress" && f.data["id"] == outputs[0]["id"])
        .map(|f| format!("{}:{}", f.data["stream"].as_str().unwrap(), f.data["chunk"].as_str().unwrap()))
        .collect();
    assert!(progress.contains("stdout:1\n") && progress.contains("stderr:to-stderr\n"), "{progress}");
    let answer = frames.iter().rev().find(|f| f.event == "text").unwrap();
    assert_eq!(answer.data["content"], "-1 exec timeout: killed after 0.5s");
    let note = "[exec] TIMEOUT after 0.5s — process killed\n";
    assert!(frames.iter().any(|f| f.event == "repl_progress" && f.data["chunk"] == note), "{:?}", kinds(&frames));
}

#[tokio::test]
async fn exec_is_off_for_a_tenant_without_the_bash_tool() {
    let w = world(1, |_| {}).await;
    w.upstream.push(Reply::new().text([cell("try { exec('true') } catch (e) { FINAL(e.message) }")]));
    let body = chat_body("mock", json!([user("x")]), json!({"mode": "rlm", "permissions": exec_allowed()}));
    let mut stream = chat(&w, 0, &body).await;
    stream.rest().await;
    let answer = stream.frames().into_iter().rev().find(|f| f.event == "text").unwrap();
    assert_eq!(answer.data["content"], "exec is not enabled for this tenant (its default_tools have no bash)");
}

#[tokio::test]
async fn a_replay_that_prints_otherwise_restarts_from_before_its_cell() {
    let mut w = world(2, |o| o.lease_ttl_secs = 1).await;
    w.upstream.push(Reply::new().text([cell("scope.k = 1; console.log('one')")]));
    w.upstream.push(Reply::new().text(["thinking"]).stall_after(0));
    w.upstream.push(Reply::new().text([cell("FINAL('again ' + scope.k)")]));
    let body = chat_body("mock", json!([user("go")]), json!({"mode": "rlm"}));
    let mut on_a = chat(&w, 0, &body).await;
    on_a.until_event("repl_output").await;
    let session_id = session_of(&on_a);
    w.upstream.wait_for_calls(2, std::time::Duration::from_secs(10)).await;
    let a = w.apps.remove(0);
    // The recorded output of the first cell no longer matches what its
    // code prints (as if the engine had changed between the replicas).
    let key = format!("{}{{t:acme:s:{session_id}}}:state", a.config.store.key_prefix);
    a.kill();
    drop(on_a);
    let client = redis::Client::open(crate::helpers::redis_url()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let doc: String = redis::cmd("HGET").arg(&key).arg("doc").query_async(&mut redis).await.unwrap();
    let mut doc: Value = serde_json::from_str(&doc).unwrap();
    let recorded = &mut doc["turn_state"]["rlm"]["cells"][0]["output"]["stdout"];
    assert_eq!(recorded, "one");
    *recorded = json!("two");
    let _: () = redis::cmd("HSET").arg(&key).arg("doc").arg(doc.to_string()).query_async(&mut redis).await.unwrap();

    let mut on_b = super::rejoin(&w.apps[0], &w.token, &session_id, 0).await;
    on_b.rest().await;
    let frames = on_b.frames();
    assert!(frames.iter().any(|f| f.event == "step_restarted"), "{:?}", kinds(&frames));
    let inputs: Vec<&Value> = frames.iter().filter(|f| f.event == "repl_input").map(|f| &f.data["iteration"]).collect();
    assert_eq!(inputs, [&json!(0), &json!(0)], "the cell's iteration is asked for again");
    let answer = frames.iter().rev().find(|f| f.event == "text").unwrap();
    assert_eq!(answer.data["content"], "again undefined", "the dropped cell's effects are gone");
    assert_eq!(w.upstream.calls(), 3);
}
