//! Property tests: random methods, path parameters, queries, headers and
//! bodies at every route. Whatever arrives, the gateway never answers 5xx (a
//! handler panic would be a 500 from the rescue, a panic elsewhere a dropped
//! connection), every 4xx carries the JSON error body, and the store does
//! not change, except by a session create answered 201, which adds exactly
//! that session's state key (and its entries in its subject's and tenant's
//! session lists), and by a delete answered 204, which removes exactly the
//! session it names (its state key, and its list entries). A delete of the
//! test's own session is followed by a new one for alice (made outside the
//! fuzzed requests), so later cases still find a session to aim at.
//!
//! No generated request may start a turn. A turn keeps writing to the store
//! after the answer (its events, its lease, and here its failure, as the mock
//! upstream has no replies scripted), so "the store unchanged" would no
//! longer be a function of the requests: the comparison would flake, or wait
//! on timing. So a request that *could* start one is skipped before it is
//! sent: [`may_start_turn`] over-approximates what the turn-starting routes
//! accept (a string `content` for an existing session; a Holmes `ask` that is
//! not a resume, on a known or default model or an existing session — or a
//! resume without a session id whose history holds tool calls, which may
//! start a conversation anew; an issue chat or an investigation with its
//! required fields; an llm-gateway chat on a known or the default model
//! whose last message is an object; a summary, no turn but a model call,
//! likewise; serde's positional form, an array of fields, is refused by the
//! body guard). Other resumes need a paused session, and no session here
//! ever ran a turn. A
//! turn the guard missed cannot go unnoticed: starting one writes the state
//! and the first event before the answer, so that case's store comparison
//! fails; and at the end only session states may be stored and the upstream
//! must have had no call.
//!
//! Each case compares the store after its request with the store after the
//! previous one, so while a failure shrinks, each try is judged on its own.

use std::{cell::RefCell, collections::BTreeMap, fmt, time::Duration};

use proptest::{
    prelude::*,
    test_runner::{Config, TestCaseError, TestRunner},
};
use reqwest::{Method, StatusCode, header::CONTENT_TYPE};
use serde_json::Value;

use self::strategies::{Auth, BodyRecipe, Case, MODELS, case, mutated, valid_bodies};
use crate::helpers::{AppOptions, TestApp, api_key_entry, spawn_app_with, store_snapshot};

mod strategies;

type Snapshot = BTreeMap<String, Vec<u8>>;

/// About 100 requests per route: a few seconds in all.
const CASES: u32 = 1500;

/// Every route of `src/api/mod.rs`.
const ROUTES: [(&str, &str); 27] = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/api/model"),
    ("POST", "/api/chat"),
    ("POST", "/api/stream/chat"),
    ("POST", "/api/investigate"),
    ("POST", "/api/stream/investigate"),
    ("POST", "/api/issue_chat"),
    ("POST", "/api/stream/issue_chat"),
    ("GET", "/models"),
    ("POST", "/chat"),
    ("POST", "/chat/relay/{relay_id}"),
    ("POST", "/summarize"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/sessions"),
    ("GET", "/v1/sessions/{id}"),
    ("DELETE", "/v1/sessions/{id}"),
    ("GET", "/v1/sessions/{id}/events"),
    ("POST", "/v1/sessions/{id}/messages"),
    ("POST", "/v1/sessions/{id}/tool-results"),
    ("POST", "/v1/sessions/{id}/relays/{relay_id}"),
    ("POST", "/v1/sessions/{id}/cancel"),
    ("POST", "/v1/ai-sdk/chat"),
    ("GET", "/v1/ai-sdk/chat/{id}/stream"),
    ("POST", "/v1/ag-ui"),
    ("POST", "/v1/zot"),
];

/// Whether the gateway could take `body` as a new turn (see the module
/// docs). `session` is the raw `{id}`; `sessions` every id that exists.
///
/// A body `serde_json::Value` cannot parse counts as no turn. The handlers'
/// parsers accept no more than that, except oddities no strategy here makes
/// (an out-of-range number or a lone surrogate in a field they ignore).
fn may_start_turn(route: &str, session: &[u8], body: &[u8], sessions: &[String]) -> bool {
    if route == "/v1/zot" {
        return zot_may_change(body);
    }
    let known_session = sessions.iter().any(|s| s.as_bytes() == session);
    let body = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(body)) => body,
        // Anything else is refused before a handler sees it (an array too:
        // serde would read `["hi"]` as a struct's fields in order, and the
        // body guard refuses that form).
        _ => return false,
    };
    let known_model = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|m| MODELS.contains(&m));
    // Without a model (or an empty one), the tenant's default.
    let default_model = |v: Option<&Value>| v.is_none_or(|m| m.is_null() || m == "");
    let known_or_default = default_model(body.get("model")) || known_model(body.get("model"));
    let is = |key: &str, kind: fn(&Value) -> bool| body.get(key).is_some_and(kind);
    match route {
        "/v1/sessions/{id}/messages" => known_session && body.get("content").is_some_and(Value::is_string),
        "/api/chat" | "/api/stream/chat" => holmes_chat_may_start(&body, sessions, known_or_default),
        "/api/issue_chat" | "/api/stream/issue_chat" => {
            is("investigation_result", Value::is_object)
                && is("issue_type", Value::is_string)
                && holmes_chat_may_start(&body, sessions, known_or_default)
        }
        "/api/investigate" | "/api/stream/investigate" => {
            ["source", "title", "description"].iter().all(|k| is(k, Value::is_string))
                && ["subject", "context"].iter().all(|k| is(k, Value::is_object))
                && known_or_default
        }
        "/chat" => {
            known_or_default
                && body.get("messages").and_then(Value::as_array).and_then(|m| m.last()).is_some_and(Value::is_object)
        }
        // No turn, but a model call: skipped alike, so the upstream is never called.
        "/summarize" => {
            known_or_default && body.get("messages").and_then(Value::as_array).is_some_and(|m| !m.is_empty())
        }
        // A chat id or thread id (new: the session is created) with a last
        // message, on a known or the default model.
        "/v1/ai-sdk/chat" => {
            let model = body.get("model").is_none_or(Value::is_null) || known_model(body.get("model"));
            body.get("id").is_some_and(Value::is_string) && last_message_is_object(&body) && model
        }
        "/v1/ag-ui" => {
            let model = body.get("forwardedProps").and_then(|p| p.get("model")).and_then(Value::as_str);
            let ids = ["threadId", "runId"].iter().all(|k| body.get(*k).is_some_and(Value::is_string));
            ids && last_message_is_object(&body) && model.is_none_or(|m| MODELS.contains(&m))
        }
        _ => false,
    }
}

/// A Holmes chat body that may start a turn: a question (not a resume) on
/// a known or default model or an existing session, or a resume with no
/// session id whose history holds tool calls (a conversation started anew).
fn holmes_chat_may_start(body: &serde_json::Map<String, Value>, sessions: &[String], known_or_default: bool) -> bool {
    let resume = ["tool_decisions", "frontend_tool_results"]
        .iter()
        .any(|k| body.get(*k).and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    let no_session = body.get("session_id").is_none_or(Value::is_null);
    let on = match body.get("session_id") {
        None | Some(Value::Null) => known_or_default,
        Some(Value::String(id)) => sessions.contains(id),
        Some(_) => false,
    };
    let history_with_calls = (body.get("conversation_history").and_then(Value::as_array))
        .is_some_and(|h| h.iter().any(|m| m.get("tool_calls").is_some_and(|c| !c.is_null())));
    let asks = body.get("ask").is_some_and(Value::is_string);
    asks && ((!resume && on) || (resume && no_session && history_with_calls))
}

/// Whether a zot command line of `body` needs a session (the request then
/// makes one, and a prompt or compaction starts a turn): any command but
/// the ones that read nothing of a session.
fn zot_may_change(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else { return false };
    text.lines().filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok()).any(|command| {
        let kind = command.get("type").and_then(Value::as_str);
        kind.is_some_and(|kind| !["ping", "hello", "get_models", "abort"].contains(&kind))
    })
}

fn last_message_is_object(body: &serde_json::Map<String, Value>) -> bool {
    body.get("messages").and_then(Value::as_array).and_then(|m| m.last()).is_some_and(Value::is_object)
}

/// A request as sent, printed on failure.
struct Sent {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {}", self.method, self.path)?;
        for (name, value) in &self.headers {
            writeln!(f, "{name}: {value}")?;
        }
        write!(f, "body ({} bytes): {:?}", self.body.len(), String::from_utf8_lossy(&self.body))
    }
}

fn percent_encoded(raw: &[u8]) -> String {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    raw.iter().map(|&b| if plain(b) { char::from(b).to_string() } else { format!("%{b:02X}") }).collect()
}

/// Answers by route and status.
#[derive(Default)]
struct Tally {
    skipped: usize,
    /// Deletes of the test's own session (a new one was made each time).
    replaced: usize,
    /// By route (method and path, as in [`ROUTES`]) and status.
    answers: BTreeMap<((&'static str, &'static str), u16), usize>,
}

impl Tally {
    fn count(&self, pick: impl Fn(u16) -> bool) -> usize {
        self.answers.iter().filter(|((_, status), _)| pick(*status)).map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sent = self.count(|_| true);
        writeln!(f, "fuzz: {sent} requests sent, {} skipped as possible turn starters", self.skipped)?;
        writeln!(f, "  the test's session deleted (and made anew) {} times", self.replaced)?;
        let mut statuses = BTreeMap::new();
        for ((_, status), n) in &self.answers {
            *statuses.entry(status).or_insert(0) += n;
        }
        writeln!(f, "  by status: {statuses:?}")?;
        for (method, route) in ROUTES {
            let counts: Vec<String> = self
                .answers
                .iter()
                .filter(|((r, _), _)| *r == (method, route))
                .map(|((_, s), n)| format!("{s}×{n}"))
                .collect();
            writeln!(f, "  {method} {route}: {}", counts.join(" "))?;
        }
        Ok(())
    }
}

struct Fuzz {
    app: TestApp,
    client: reqwest::Client,
    /// The session of acme/alice that `{id}` may name (a new one after a
    /// delete of it).
    session: RefCell<String>,
    /// Authorization header values by [`Auth`] variant.
    alice: String,
    bob: String,
    admin: String,
    globex: String,
    tampered: String,
    /// Every session id in the store.
    sessions: RefCell<Vec<String>>,
    /// The store after the previous case.
    store: RefCell<Snapshot>,
    tally: RefCell<Tally>,
    /// Shrinking reports the simplest failing case; this is the one found.
    first_failure: RefCell<Option<String>>,
}

impl Fuzz {
    async fn start() -> Self {
        let mut options = AppOptions::default();
        let entry = |key: &str, subject: &str| format!("api_keys = [{}]", api_key_entry(key, subject));
        options.tenant_toml.push(("acme".into(), entry(ALICE_KEY, "alice")));
        options.tenant_toml.push(("globex".into(), entry(GLOBEX_KEY, "gary")));
        let app = spawn_app_with(options).await;
        let alice = app.token("acme", "alice");
        let session = app.create_session(&alice, "mock").await;
        // A character in the middle of the signature: all its bits count.
        let mut tampered = alice.clone();
        let at = tampered.len() - 10;
        tampered.replace_range(at..=at, if &alice[at..=at] == "A" { "B" } else { "A" });
        let admin = app.token_with("acme", "root", Duration::from_secs(600), &["sessions:admin"]);
        Self {
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
            bob: format!("Bearer {}", app.token("acme", "bob")),
            admin: format!("Bearer {admin}"),
            globex: format!("Bearer {}", app.token("globex", "gary")),
            tampered: format!("Bearer {tampered}"),
            alice: format!("Bearer {alice}"),
            sessions: RefCell::new(vec![session.clone()]),
            store: RefCell::new(store_snapshot(&app).await),
            tally: RefCell::default(),
            first_failure: RefCell::default(),
            session: RefCell::new(session),
            app,
        }
    }

    fn request(&self, case: &Case) -> Sent {
        let (method, route) = case.route;
        let session = self.session.borrow().clone();
        let id = percent_encoded(&case.session.raw(&session));
        let relay = percent_encoded(&case.relay.raw(&session));
        let mut path = route.replace("{id}", &id).replace("{relay_id}", &relay);
        if let Some(query) = &case.query {
            path = format!("{path}?{query}");
        }
        let h = &case.headers;
        let api_key = match &h.auth {
            Auth::AliceKey => Some(ALICE_KEY.to_string()),
            Auth::GlobexKey => Some(GLOBEX_KEY.to_string()),
            Auth::ApiKey(text) => Some(text.clone()),
            _ => None,
        };
        let authorization = match &h.auth {
            Auth::AliceKey | Auth::GlobexKey | Auth::ApiKey(_) => None,
            Auth::AliceKeyBearer => Some(format!("Bearer {ALICE_KEY}")),
            Auth::Alice => Some(self.alice.clone()),
            Auth::Bob => Some(self.bob.clone()),
            Auth::Admin => Some(self.admin.clone()),
            Auth::Globex => Some(self.globex.clone()),
            Auth::Tampered => Some(self.tampered.clone()),
            Auth::Bearer(text) => Some(format!("Bearer {text}")),
            Auth::Raw(text) => Some(text.clone()),
            Auth::Missing => None,
        };
        let named = [
            ("authorization", authorization),
            ("x-api-key", api_key),
            ("content-type", h.content_type.clone()),
            ("accept", h.accept.clone()),
            ("last-event-id", h.last_event_id.clone()),
        ];
        let mut headers: Vec<(String, String)> =
            named.into_iter().filter_map(|(name, value)| Some((name.to_string(), value?))).collect();
        headers.extend(h.extra.iter().cloned());
        let valid = valid_bodies(route, &session);
        let body = match &case.body {
            BodyRecipe::Empty => Vec::new(),
            BodyRecipe::Bytes(bytes) => bytes.clone(),
            BodyRecipe::Json(value) => value.to_string().into_bytes(),
            BodyRecipe::Mutated { base, target, op } => mutated(base.get(&valid), target, op).to_string().into_bytes(),
            BodyRecipe::Truncated { base, at } => {
                let text = base.get(&valid).to_string().into_bytes();
                text[..at.index(text.len())].to_vec()
            }
        };
        let method = case.method.clone().unwrap_or_else(|| method.parse().unwrap());
        Sent { method, path, headers, body }
    }

    /// The status and the body; an event stream is dropped unread.
    async fn send(&self, sent: &Sent) -> Result<(StatusCode, String), String> {
        let mut request = self.client.request(sent.method.clone(), self.app.url(&sent.path));
        for (name, value) in &sent.headers {
            request = request.header(name, value);
        }
        if !sent.body.is_empty() {
            request = request.body(sent.body.clone());
        }
        let response = request.send().await.map_err(|e| format!("no answer: {e:?}"))?;
        let status = response.status();
        let content_type = response.headers().get(CONTENT_TYPE).map(|v| v.as_bytes().to_vec()).unwrap_or_default();
        if content_type.starts_with(b"text/event-stream") {
            return Ok((status, "(an event stream, not read)".to_string()));
        }
        let body = response.text().await.map_err(|e| format!("{status}, then the body failed: {e:?}"))?;
        Ok((status, body))
    }

    async fn check(&self, case: &Case) -> Result<(), TestCaseError> {
        let sent = self.request(case);
        let (_, route) = case.route;
        let sessions = self.sessions.borrow().clone();
        let session = self.session.borrow().clone();
        if may_start_turn(route, &case.session.raw(&session), &sent.body, &sessions) {
            self.tally.borrow_mut().skipped += 1;
            return Ok(());
        }
        let answer = self.send(&sent).await;
        // Taken whatever the verdict: the next case, or the next try while a
        // failure shrinks, is compared with the store as this one left it.
        let after = store_snapshot(&self.app).await;
        let before = self.store.replace(after.clone());
        let (status, body) = answer.map_err(|e| TestCaseError::fail(format!("{e}\nfor {sent}")))?;
        *self.tally.borrow_mut().answers.entry((case.route, status.as_u16())).or_insert(0) += 1;
        prop_assert!(status.is_success() || status.is_client_error(), "{status} {body}\nfor {sent}");
        if status.is_client_error() {
            prop_assert!(is_error_body(&body), "{status} without the JSON error body: {body:?}\nfor {sent}");
        }
        // Reading is all a GET does; a create and a delete are the only
        // writes that can succeed here (on the paths that have them), and
        // zot's commands that read nothing of a session.
        let may_succeed = match sent.method.as_str() {
            "GET" => true,
            "POST" => route == "/v1/sessions" || route == "/v1/zot",
            "DELETE" => route == "/v1/sessions/{id}",
            _ => false,
        };
        prop_assert!(!status.is_success() || may_succeed, "{status} {body}\nfor {sent}");

        let mut changes = changes(&before, &after);
        if status == StatusCode::CREATED {
            let id = serde_json::from_str::<Value>(&body).ok().and_then(|v| v["id"].as_str().map(str::to_string));
            let id = id.ok_or_else(|| TestCaseError::fail(format!("201 without an id: {body}\nfor {sent}")))?;
            let state = format!(":s:{id}}}:state");
            let added = changes.iter().filter(|c| c.starts_with("added ") && c.ends_with(&state)).count() == 1;
            let others_are_lists = changes.iter().all(|c| c.ends_with(&state) || is_list_change(c));
            prop_assert!(added && others_are_lists, "a create changed {changes:?}, not just its {state}\nfor {sent}");
            changes.clear();
            self.sessions.borrow_mut().push(id);
        }
        if status == StatusCode::NO_CONTENT && sent.method == Method::DELETE {
            let id = String::from_utf8_lossy(&case.session.raw(&session)).into_owned();
            let state = format!(":s:{id}}}:state");
            let removed = changes.iter().filter(|c| c.starts_with("removed ") && c.ends_with(&state)).count() == 1;
            let others_are_lists = changes.iter().all(|c| c.ends_with(&state) || is_list_change(c));
            prop_assert!(removed && others_are_lists, "a delete changed {changes:?}, not just {id}\nfor {sent}");
            changes.clear();
            self.sessions.borrow_mut().retain(|s| *s != id);
            if id == session {
                self.replace_session().await;
            }
        }
        prop_assert!(
            changes.is_empty(),
            "the store changed: {changes:?} (a turn started? see may_start_turn)\nanswer: {status} {body}\nfor {sent}"
        );
        Ok(())
    }
}

/// A change to a session list (`{prefix}{t:<tenant>}…:sessions`), added,
/// changed or (emptied) removed.
fn is_list_change(change: &str) -> bool {
    change.contains("{t:") && change.ends_with(":sessions")
}

impl Fuzz {
    /// A new session for alice after hers was deleted; the store as it is
    /// then is the next case's "before".
    async fn replace_session(&self) {
        let alice = self.app.token("acme", "alice");
        let session = self.app.create_session(&alice, "mock").await;
        self.sessions.borrow_mut().push(session.clone());
        self.session.replace(session);
        self.store.replace(store_snapshot(&self.app).await);
        self.tally.borrow_mut().replaced += 1;
    }
}

/// `{"error": {"code": …, "message": …}}`, llm-gateway's `{"error": "…"}`,
/// or FastAPI's `{"detail": "…"}` / `{"detail": [{loc, msg, type}]}` (Holmes).
fn is_error_body(body: &str) -> bool {
    let Ok(body) = serde_json::from_str::<Value>(body) else { return false };
    let listed = |entries: &Vec<Value>| {
        !entries.is_empty()
            && entries.iter().all(|e| e["loc"].is_array() && e["msg"].is_string() && e["type"].is_string())
    };
    match (&body["error"], &body["detail"]) {
        (Value::String(message), _) => !message.is_empty(),
        (Value::Object(error), _) => error.get("code").is_some_and(Value::is_string) && error["message"].is_string(),
        (_, Value::String(detail)) => !detail.is_empty(),
        (_, Value::Array(entries)) => listed(entries),
        _ => false,
    }
}

/// The API keys of the fuzzed app: acme/alice's and globex/gary's.
const ALICE_KEY: &str = "sbk_fuzz_alice";
const GLOBEX_KEY: &str = "sbk_fuzz_gary";

fn changes(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let removed = before.keys().filter(|k| !after.contains_key(*k)).map(|k| format!("removed {k}"));
    let changed = after.iter().filter_map(|(k, v)| match before.get(k) {
        None => Some(format!("added {k}")),
        Some(old) if old != v => Some(format!("changed {k}")),
        Some(_) => None,
    });
    removed.chain(changed).collect()
}

#[test]
fn random_requests_at_every_endpoint_get_no_5xx_and_leave_the_store_unchanged() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let fuzz = runtime.block_on(Fuzz::start());
    let config = Config { cases: CASES, failure_persistence: None, max_shrink_iters: 500, ..Config::default() };
    let result = TestRunner::new(config).run(&case(), |case| {
        let verdict = runtime.block_on(fuzz.check(&case));
        if let Err(failure) = &verdict {
            fuzz.first_failure.borrow_mut().get_or_insert_with(|| failure.to_string());
        }
        verdict
    });
    let tally = fuzz.tally.take();
    eprintln!("{tally}");
    if let Err(error) = result {
        let first = fuzz.first_failure.take().unwrap_or_default();
        panic!("{error}\n\nThe failure as first found, before shrinking: {first}");
    }

    let store = runtime.block_on(store_snapshot(&fuzz.app));
    let prefix = &fuzz.app.config.store.key_prefix;
    let quotas: Vec<&String> = store
        .keys()
        .filter(|k| ["rl:", "slots:", "tpm:"].iter().any(|q| k.starts_with(&format!("{prefix}{q}"))))
        .collect();
    assert!(quotas.is_empty(), "the test tenants have no rate limits, yet: {quotas:?}");
    let traces: Vec<&String> = store.keys().filter(|k| !k.ends_with("}:state") && !is_list_change(k)).collect();
    assert!(traces.is_empty(), "no turn, relay or lease left a key: {traces:?}");
    let states = store.keys().filter(|k| k.ends_with("}:state")).count();
    assert_eq!(states, fuzz.sessions.borrow().len(), "one state per session created and not deleted");
    assert_eq!(fuzz.app.upstream.calls(), 0, "no request reached the model");

    // Not vacuous: most requests get past authentication, many into body
    // validation, and some as far as the store (404 for an unknown session
    // or relay, 409 for the idle session). Creates answered 201 are too
    // few (about 1 in 200) to require.
    let sent = tally.count(|_| true);
    assert!(sent * 10 >= CASES as usize * 9, "{sent} of {CASES} cases sent");
    assert!(tally.count(|s| s == 401) * 3 <= sent, "at most a third stop at authentication");
    assert!(tally.count(|s| s == 400 || s == 422) * 6 >= sent, "a sixth reach body validation");
    for status in [200, 404, 409] {
        assert!(tally.count(|s| s == status) > 0, "some {status}");
    }
}
