//! The real-browser end-to-end test: headless Debian chromium, driven by
//! playwright-core (`run.mjs`, one browser launch for every scenario),
//! against three real `switchboard` processes behind nginx with
//! `deploy/nginx.conf`'s settings (`nginx.rs`), sharing the test Redis
//! under a key prefix of the test's own, with a scripted, paced model (the
//! fault tests' deterministic upstream: a step run again after a takeover
//! streams the same answer). A test page is served from a second origin
//! (`page_server.rs`, `page/`), and the console from the gateway's own.
//!
//! Scenarios, in order: CORS (an allowed origin reads the answer and its
//! exposed headers, another origin's fetch fails), a chat that streams, an
//! approval answered from the page and continued on another replica, the
//! replica streaming to the page killed with SIGKILL mid-answer (the page
//! rejoins with `Last-Event-ID` on its own and shows the answer once), a
//! tab reloaded mid-answer (it resumes from the seq it kept in
//! sessionStorage), and the console: the tenant's sessions listed, one
//! watched live through a relay it decides and a takeover (the replica
//! shown changes), a turn cancelled, a frontend tool call answered.
//!
//! Needs chromium and nginx from Debian's packages and the pinned
//! playwright-core in `tests/browser/node_modules`: `scripts/ensure-browser.sh`
//! installs them (CI runs it through `scripts/test`). Without them the test
//! fails and says so; it never skips. Screenshots and HTML of a failing page
//! go to `target/browser-artifacts/` (with the console's screenshot of a
//! passing run).

// The fault tests' harness: processes, the deterministic upstream, the
// tool server. Not every part of it is used here.
#[allow(dead_code)]
#[path = "../faults/harness/mod.rs"]
mod harness;
mod nginx;
mod page_server;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    process::Command,
};

use crate::{
    harness::{
        config::{self, ReplicaConfig, Tool},
        replica::Replica,
        tools::ToolServer,
        upstream::{DetUpstream, expected_answer},
    },
    nginx::Nginx,
    page_server::PageServer,
};

/// The longest the browser's whole run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(240);
/// The longest any one DOM state is waited for.
const STEP_TIMEOUT_MS: u64 = 30_000;
/// The model's pace: a 40-word answer streams for about two seconds, so a
/// kill or a reload lands mid-answer.
const CHUNK_DELAY: Duration = Duration::from_millis(50);

/// What the test needs on the machine, or what to run to get it.
struct Prerequisites {
    chromium: PathBuf,
}

fn prerequisites() -> Prerequisites {
    let fix = "run scripts/ensure-browser.sh (Debian's chromium and nginx, and playwright-core in tests/browser/)";
    let chromium = std::env::var_os("SWITCHBOARD_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        .or_else(|| nginx::which("chromium"))
        .unwrap_or_else(|| panic!("the browser test needs chromium: {fix}"));
    let modules = manifest_dir().join("tests/browser/node_modules/playwright-core");
    assert!(modules.is_dir(), "the browser test needs playwright-core: {fix}");
    assert!(
        nginx::which("nginx").is_some() || Path::new("/usr/sbin/nginx").is_file(),
        "the browser test needs nginx: {fix}"
    );
    Prerequisites { chromium }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/browser-artifacts/` (under `CARGO_TARGET_DIR` when set), empty.
fn artifacts_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| manifest_dir().join("target"), PathBuf::from);
    let dir = target.join("browser-artifacts");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the artifacts directory");
    dir
}

fn redis_url() -> String {
    std::env::var("SWITCHBOARD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

/// Everything the browser talks to.
struct Stack {
    upstream: DetUpstream,
    tools: ToolServer,
    page: PageServer,
    replicas: Vec<Replica>,
    nginx: Nginx,
    http: reqwest::Client,
}

impl Stack {
    async fn start() -> Self {
        let upstream = DetUpstream::start(CHUNK_DELAY, Duration::ZERO).await;
        let tools = ToolServer::start().await;
        let page = PageServer::start().await;
        let key_prefix = format!("sbbrowser:{}:", uuid::Uuid::new_v4().simple());
        let configs = ["a", "b", "c"].map(|name| ReplicaConfig {
            replica_id: name.to_string(),
            store: format!("redis_url = \"{}\"", redis_url()),
            key_prefix: key_prefix.clone(),
            // The default lease: a killed replica's chats go on by the
            // death hint, long before it lapses.
            lease_ttl_secs: 10,
            shutdown_grace_secs: 5,
            drain_delay_secs: 0,
            upstream_base_url: upstream.base_url(),
            tools: vec![Tool::asking("refund", tools.url("refund")).described("Refund an order").taking_id()],
            max_iterations: 10,
            server_toml: format!("console = true\n\n[server.cors]\nallowed_origins = [\"{}\"]\n", page.origin()),
            // A rate, so answers carry the RateLimit headers a page reads.
            tenant_toml: "rate_limit = { requests_per_second = 1000 }".to_string(),
            // The scripted model answers titles too; none are wanted here.
            agent_toml: "titles = false".to_string(),
            extra_toml: String::new(),
        });
        let replicas = futures::future::join_all(configs.map(Replica::start)).await;
        let upstreams: Vec<String> =
            replicas.iter().map(|r| r.base_url().trim_start_matches("http://").to_string()).collect();
        let nginx = Nginx::start(&upstreams).await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().expect("an HTTP client");
        Self { upstream, tools, page, replicas, nginx, http }
    }

    /// The session's view from the first running replica that answers.
    async fn view(&mut self, session: &str) -> Value {
        let token = config::token();
        for replica in self.replicas.iter_mut() {
            if !replica.is_running() {
                continue;
            }
            let url = replica.url(&format!("/v1/sessions/{session}"));
            if let Ok(response) = self.http.get(url).bearer_auth(&token).send().await
                && response.status().is_success()
                && let Ok(view) = response.json::<Value>().await
            {
                return view;
            }
        }
        panic!("no replica answered for session {session}:\n{}", self.logs());
    }

    fn index_of(&self, name: &str) -> usize {
        self.replicas.iter().position(|r| r.name == name).unwrap_or_else(|| panic!("no replica {name}"))
    }

    /// What the browser asks for: which replica owns a session, to kill
    /// it, to restart one, the refused origins counted so far.
    async fn answer(&mut self, question: &Value) -> Value {
        let session = question["session"].as_str().unwrap_or_default().to_string();
        match question["op"].as_str() {
            Some("owner") => json!({"replica": self.view(&session).await["replica"]}),
            Some("kill-owner") => {
                let owner = self.view(&session).await["replica"].as_str().expect("an owner").to_string();
                let index = self.index_of(&owner);
                self.replicas[index].kill9().await;
                json!({"replica": owner})
            }
            Some("restart") => {
                let name = question["replica"].as_str().expect("a replica name").to_string();
                let index = self.index_of(&name);
                self.replicas[index].restart().await;
                json!({"replica": name})
            }
            // Asked right after the refused origin's fetch: a replica killed
            // later takes its counts with it.
            Some("cors-refused") => json!({"preflight": self.cors_refused("preflight").await}),
            other => panic!("the browser asked for {other:?}"),
        }
    }

    /// `switchboard_cors_refused_total{kind}` summed over the replicas.
    async fn cors_refused(&mut self, kind: &str) -> f64 {
        let series = format!("switchboard_cors_refused_total{{kind=\"{kind}\"}} ");
        let mut total = 0.0;
        for replica in self.replicas.iter_mut() {
            if !replica.is_running() {
                continue;
            }
            let text = self.http.get(replica.url("/metrics")).send().await.expect("scrape").text().await.unwrap();
            total += text.lines().filter_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok()).sum::<f64>();
        }
        total
    }

    fn logs(&self) -> String {
        let mut out: Vec<String> = self.replicas.iter().map(Replica::dump_logs).collect();
        out.push(self.nginx.logs());
        out.join("\n")
    }
}

/// The scenarios' messages to the scripted model and the answers it gives
/// them (`tests/faults/harness/upstream.rs`: `words:N` answers
/// `w1 … wN`, `tools:1 tool:T` calls T first; a nonce keeps turns apart).
fn spec(stack: &Stack, chromium: &Path, artifacts: &Path) -> Value {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let chat = |words: u32, extra: &str, tag: &str| {
        (format!("{extra} words:{words} n:{tag}-{nonce}").trim().to_string(), expected_answer(words))
    };
    let (chat_message, chat_answer) = chat(24, "", "chat");
    let (approval_message, approval_answer) = chat(6, "tools:1 tool:refund", "approval");
    let (kill_message, kill_answer) = chat(40, "", "kill");
    let (reload_message, reload_answer) = chat(40, "", "reload");
    let (console_message, console_answer) = chat(40, "tools:1 tool:refund", "console");
    let (cancel_message, _) = chat(400, "delay:100", "cancel");
    let (tool_message, tool_answer) = chat(5, "tools:1 tool:pick_color", "tool");
    json!({
        "chromium": chromium,
        "artifacts": artifacts,
        "gateway": stack.nginx.url(),
        "page": stack.page.origin(),
        "refusedPage": stack.page.refused_origin(),
        "token": config::token(),
        "adminToken": config::token_for("ops", &["sessions:admin".to_string()]),
        "model": config::MODEL,
        "timeoutMs": STEP_TIMEOUT_MS,
        "chat": {"message": chat_message, "answer": chat_answer},
        "approval": {"message": approval_message, "answer": approval_answer},
        "kill": {"message": kill_message, "answer": kill_answer, "killAfterWords": 8},
        "reload": {"message": reload_message, "answer": reload_answer, "reloadAfterWords": 8},
        "console": {"message": console_message, "answer": console_answer, "killAfterWords": 8},
        "cancel": {"message": cancel_message},
        "frontendTool": {"tool": "pick_color", "message": tool_message, "answer": tool_answer, "output": "blue"},
    })
}

/// Runs `run.mjs` with `spec`, answering its questions; its final report.
async fn run_browser(stack: &mut Stack, spec: &Value) -> Result<Value, String> {
    let mut child = Command::new("node")
        .arg(manifest_dir().join("tests/browser/run.mjs"))
        .arg(spec.to_string())
        .current_dir(manifest_dir().join("tests/browser"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run node: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let mut stderr = child.stderr.take().expect("piped stderr");
    let stderr_text = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let conversation = async {
        while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
            let message: Value = serde_json::from_str(&line).map_err(|e| format!("run.mjs printed {line:?}: {e}"))?;
            if let Some(question) = message.get("ask") {
                let reply = stack.answer(question).await;
                stdin.write_all(format!("{reply}\n").as_bytes()).await.map_err(|e| e.to_string())?;
            } else if let Some(results) = message.get("done") {
                return Ok(results.clone());
            } else {
                return Err(serde_json::to_string_pretty(&message).unwrap_or(line));
            }
        }
        Err("run.mjs ended without a report".to_string())
    };
    let outcome = match tokio::time::timeout(RUN_TIMEOUT, conversation).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("the browser run took longer than {RUN_TIMEOUT:?}")),
    };
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let _ = child.start_kill();
    let stderr = stderr_text.await.unwrap_or_default();
    outcome.map_err(|e| format!("{e}\n---- run.mjs stderr ----\n{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_origin_and_the_console_work_through_nginx_across_replica_deaths() {
    let started = Instant::now();
    let prerequisites = prerequisites();
    let artifacts = artifacts_dir();
    let mut stack = Stack::start().await;
    let spec = spec(&stack, &prerequisites.chromium, &artifacts);
    let report = match run_browser(&mut stack, &spec).await {
        Ok(report) => report,
        Err(failure) => panic!(
            "the browser run failed (screenshots and pages in {}):\n{failure}\n{}",
            artifacts.display(),
            stack.logs()
        ),
    };

    // What the page could not see for itself.
    let approval = &report["approval"];
    assert_ne!(approval["pausedOn"], approval["continuedOn"], "the approval continued on another replica: {report}");
    let session = approval["session"].as_str().unwrap();
    assert_eq!(stack.tools.calls_of(session).len(), 1, "the approved refund ran once");
    assert!(
        report["cors"]["refusedPreflights"].as_f64() >= Some(1.0),
        "the refused origin's preflight was counted in switchboard_cors_refused_total: {report}"
    );
    let console = &report["console"];
    assert_eq!(console["scope"], "(the tenant's: sessions:admin)");
    for scenario in ["chat", "approval", "kill", "reload"] {
        let id = &report[scenario]["session"];
        assert!(console["listed"].as_array().unwrap().contains(id), "the console lists the page's {scenario} session");
    }
    assert!(stack.upstream.calls() > 0);

    let timings: Vec<String> =
        report.as_object().unwrap().iter().map(|(name, r)| format!("{name} {} ms", r["ms"])).collect();
    eprintln!("browser test: {} scenarios in {:.1?} ({})", timings.len(), started.elapsed(), timings.join(", "));
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
}
