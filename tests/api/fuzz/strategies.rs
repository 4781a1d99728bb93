//! What the fuzzer sends: routes' valid bodies and their mutations, and the
//! proptest strategies for path parameters, headers and bodies.

use proptest::{prelude::*, sample::Index};
use reqwest::Method;
use serde_json::{Value, json};

use super::ROUTES;

/// Every model alias of the test configuration.
pub(super) const MODELS: &[&str] = &["claude", "demo", "mock"];

/// Valid bodies of the route, to mutate. The chat bodies that start a new
/// conversation name no configured model, so that their mutations reach
/// validation without starting a turn.
pub(super) fn valid_bodies(route: &str, id: &str) -> Vec<Value> {
    let tool = json!({"name": "render_chart", "description": "Draw a chart", "mode": "pause"});
    let permissions = json!({"allowlist": [{"tool": "lookup", "params": {"id": "4*"}}], "allowOnce": [],
        "deny": [{"toolCallId": "call_9", "reason": "no"}]});
    match route {
        "/v1/sessions" => vec![
            json!({"model": "mock"}),
            json!({"model": "mock", "frontend_tools": [tool], "permissions": permissions, "max_iterations": 3,
                "max_depth": 1, "additional_system_prompt": "Be brief.", "response_format": {"type": "json_object"},
                "approval": "pause"}),
        ],
        "/v1/sessions/{id}/messages" => vec![json!({"content": "hi"})],
        "/v1/sessions/{id}/tool-results" => vec![json!({"results": [{"tool_call_id": "call_1", "output": "done"}],
            "decisions": [{"tool_call_id": "call_2", "approved": true, "reason": "fine"}]})],
        "/v1/sessions/{id}/relays/{relay_id}" => vec![json!({"approved": true, "always": false, "reason": "fine"})],
        "/chat/relay/{relay_id}" => vec![json!({"sessionId": id, "response": {"approved": true, "reason": "fine"}})],
        "/summarize" => vec![json!({"model": "no-such-model", "sourceIds": ["n1"], "messages": [
            {"role": "user", "content": "Plan a trip"},
            {"role": "assistant", "content": [{"type": "text", "text": "Rome."}]}]})],
        "/api/chat" => vec![
            json!({"ask": "hi", "model": "no-such-model", "stream": true, "enable_tool_approval": true,
                "conversation_history": [{"role": "system", "content": "You help."},
                    {"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}],
                "frontend_tools": [tool], "images": ["data:image/png;base64,AA", {"url": "https://x/y.png"}],
                "additional_system_prompt": "Be brief.", "behavior_controls": {"todowrite": false},
                "response_format": {"type": "json_object"}}),
            json!({"ask": "", "session_id": id, "stream": false,
                "tool_decisions": [{"tool_call_id": "call_1", "approved": true, "feedback": "ok"}],
                "frontend_tool_results": [{"tool_call_id": "call_2", "tool_name": "render_chart", "result": "{}"}]}),
        ],
        "/api/stream/chat" => valid_bodies("/api/chat", id),
        // One command line each; mutations make others (a prompt would be skipped).
        "/v1/zot" => vec![
            json!({"id": "1", "type": "ping"}),
            json!({"id": 2, "type": "hello", "token": "t"}),
            json!({"id": "3", "type": "get_models"}),
        ],
        "/api/investigate" | "/api/stream/investigate" => vec![json!({"source": "prometheus", "title": "Pod down",
            "description": "It crashed", "subject": {"pod": "p"}, "context": {"alert": "x"},
            "source_instance_id": "ApiRequest", "include_tool_calls": true, "include_tool_call_results": false,
            "prompt_template": "builtin://generic_investigation.jinja2", "sections": {"Summary": "One line"},
            "model": "no-such-model"})],
        "/api/issue_chat" | "/api/stream/issue_chat" => vec![json!({"ask": "how do I fix it?",
            "issue_type": "CrashLoopBackOff", "model": "no-such-model",
            "investigation_result": {"result": "OOM", "tools": [{"name": "logs", "description": "d", "output": "o"}]},
            "conversation_history": [{"role": "system", "content": "You help."}]})],
        "/chat" => vec![json!({"model": "no-such-model", "mode": "agent", "maxIterations": 3, "maxDepth": 1,
            "permissions": permissions, "messages": [
                {"role": "system", "content": "You help."},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "found"},
                {"role": "user", "content": [{"type": "text", "text": "and now?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]})],
        "/v1/ai-sdk/chat" => vec![json!({"id": "fuzz-chat", "model": "no-such-model", "trigger": "submit-message",
            "messageId": "a1", "frontend_tools": [tool], "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                {"id": "a1", "role": "assistant", "parts": [{"type": "step-start"},
                    {"type": "tool-render_chart", "toolCallId": "call_1", "state": "output-available",
                        "input": {}, "output": {"drawn": true}},
                    {"type": "tool-refund", "toolCallId": "call_2", "state": "approval-responded", "input": {},
                        "approval": {"id": "relay_1", "approved": true, "reason": "fine"}}]}]})],
        "/v1/ag-ui" => vec![json!({"threadId": "fuzz-thread", "runId": "run-1", "state": {}, "context": [],
            "forwardedProps": {"model": "no-such-model"}, "protocolVersion": "1.0",
            "tools": [{"name": "render_chart", "description": "Draw a chart", "parameters": {"type": "object"}}],
            "resume": [{"interruptId": "relay_1", "status": "resolved", "payload": {"approved": true}}],
            "messages": [{"id": "u1", "role": "user", "content": "hi"},
                {"id": "a1", "role": "assistant", "toolCalls": [
                    {"id": "call_1", "type": "function", "function": {"name": "render_chart", "arguments": "{}"}}]},
                {"id": "t1", "role": "tool", "toolCallId": "call_1", "content": "drawn"}]})],
        _ => vec![json!({})],
    }
}

#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) route: (&'static str, &'static str),
    /// Another method than the route's.
    pub(super) method: Option<Method>,
    pub(super) session: Param,
    pub(super) relay: Param,
    pub(super) query: Option<String>,
    pub(super) headers: Headers,
    pub(super) body: BodyRecipe,
}

/// A path parameter.
#[derive(Debug, Clone)]
pub(super) enum Param {
    /// The id of the test's session.
    Session,
    Uuid(u128),
    Text(String),
    Bytes(Vec<u8>),
}

impl Param {
    pub(super) fn raw(&self, session: &str) -> Vec<u8> {
        match self {
            Self::Session => session.as_bytes().to_vec(),
            Self::Uuid(n) => uuid::Uuid::from_u128(*n).to_string().into_bytes(),
            Self::Text(text) => text.clone().into_bytes(),
            Self::Bytes(bytes) => bytes.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Headers {
    pub(super) auth: Auth,
    pub(super) content_type: Option<String>,
    pub(super) accept: Option<String>,
    pub(super) last_event_id: Option<String>,
    pub(super) extra: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub(super) enum Auth {
    Alice,
    /// Alice's API key as `X-API-Key`, or as `Authorization: Bearer <key>`.
    AliceKey,
    AliceKeyBearer,
    /// globex's key.
    GlobexKey,
    /// `X-API-Key: <text>`.
    ApiKey(String),
    /// Same tenant, another subject.
    Bob,
    /// Same tenant, `sessions:admin`.
    Admin,
    Globex,
    /// Alice's token with one signature character changed.
    Tampered,
    /// `Bearer <text>`.
    Bearer(String),
    /// The whole header value.
    Raw(String),
    Missing,
}

#[derive(Debug, Clone)]
pub(super) enum BodyRecipe {
    Empty,
    Bytes(Vec<u8>),
    Json(Value),
    /// One of the route's valid bodies, with one node changed.
    Mutated {
        base: Index,
        target: Index,
        op: Op,
    },
    /// One of the route's valid bodies, cut short.
    Truncated {
        base: Index,
        at: Index,
    },
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    /// The valid body as it is.
    Keep,
    Replace(Value),
    Remove,
    /// A field added to the innermost object holding the target.
    Add(String, Value),
}

/// One of the `|`-separated `values`.
pub(super) fn one_of(values: &'static str) -> impl Strategy<Value = String> {
    prop::sample::select(values.split('|').collect::<Vec<_>>()).prop_map(str::to_string)
}

/// Visible ASCII, as a header value may hold.
pub(super) fn visible(max: usize) -> impl Strategy<Value = String> {
    prop::string::string_regex(&format!("[ -~]{{0,{max}}}")).unwrap()
}

/// Any JSON value, nested at most 5 deep; strings and keys are often words
/// the gateway knows, so that objects get past the first field checks.
pub(super) fn json_value() -> impl Strategy<Value = Value> {
    let string = prop_oneof![
        "\\PC{0,24}",
        "[\\x00-\\x7f]{0,8}",
        one_of(
            "| |mock|demo|user|assistant|system|tool|pause|noop|relay|agent|rlm|native|holmes|call_1|relay_x|\
             lookup|render_chart"
        ),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        string.prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..6).prop_map(|f| Value::Object(f.into_iter().collect())),
        ]
    })
}

pub(super) fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        one_of(
            "model|content|results|decisions|tool_call_id|output|approved|always|reason|ask|messages|role|\
             session_id|sessionId|response|stream|frontend_tools|tool_decisions|frontend_tool_results|\
             conversation_history|images|url|name|mode|permissions|allowlist|deny|tool|type|text|tool_calls|\
             function|arguments"
        ),
        "\\PC{0,8}",
    ]
}

pub(super) fn param(texts: &'static str) -> impl Strategy<Value = Param> {
    prop_oneof![
        4 => Just(Param::Session),
        2 => any::<u128>().prop_map(Param::Uuid),
        1 => texts.prop_map(Param::Text),
        1 => prop::collection::vec(any::<u8>(), 0..12).prop_map(Param::Bytes),
    ]
}

/// Names a random header must not take: framing headers would make the
/// request unreadable before the app sees it, the others are drawn apart.
pub(super) const RESERVED: &str = "host|content-length|transfer-encoding|connection|te|upgrade|expect|keep-alive|\
                        proxy-connection|trailer|authorization|x-api-key|content-type|accept|last-event-id";

pub(super) fn headers() -> impl Strategy<Value = Headers> {
    let auth = prop_oneof![
        10 => Just(Auth::Alice),
        1 => Just(Auth::AliceKey),
        1 => Just(Auth::AliceKeyBearer),
        1 => Just(Auth::GlobexKey),
        1 => visible(40).prop_map(Auth::ApiKey),
        1 => Just(Auth::Bob),
        1 => Just(Auth::Admin),
        1 => Just(Auth::Globex),
        1 => Just(Auth::Tampered),
        1 => visible(40).prop_map(Auth::Bearer),
        1 => prop_oneof![visible(40), one_of("Basic YWxpY2U6cGFzcw==|bearer|Bearer")].prop_map(Auth::Raw),
        1 => Just(Auth::Missing),
    ];
    let content_type = prop_oneof![
        9 => Just(Some("application/json".to_string())),
        3 => one_of(
            "application/json; charset=utf-8|text/plain|application/merge-patch+json|\
             multipart/form-data; boundary=x|application/x-www-form-urlencoded"
        )
        .prop_map(Some),
        2 => Just(None),
        1 => visible(32).prop_map(Some),
    ];
    let accept = prop_oneof![
        3 => Just(None),
        2 => one_of("text/event-stream|application/json|*/*|text/html;q=0.9, */*;q=0.1").prop_map(Some),
        1 => visible(32).prop_map(Some),
    ];
    let last_event_id = prop_oneof![
        6 => Just(None),
        2 => prop_oneof!["[0-9]{1,3}", one_of("0| 1 |-1|18446744073709551615|18446744073709551616")].prop_map(Some),
        1 => visible(16).prop_map(Some),
    ];
    let name = prop_oneof![
        one_of(
            "x-request-id|traceparent|tracestate|x-forwarded-for|origin|cookie|range|content-encoding|\
             accept-encoding|x-session-id|if-none-match|forwarded"
        ),
        "[a-z][a-z0-9-]{0,20}".prop_filter("a reserved header", |n| !RESERVED.split('|').any(|r| r == n)),
    ];
    let extra = prop::collection::vec((name, visible(64)), 0..6);
    (auth, content_type, accept, last_event_id, extra).prop_map(|(auth, content_type, accept, last_event_id, extra)| {
        Headers { auth, content_type, accept, last_event_id, extra }
    })
}

pub(super) fn body() -> impl Strategy<Value = BodyRecipe> {
    let op = prop_oneof![
        2 => Just(Op::Keep),
        3 => json_value().prop_map(Op::Replace),
        1 => Just(Op::Remove),
        1 => (json_key(), json_value()).prop_map(|(key, value)| Op::Add(key, value)),
    ];
    prop_oneof![
        1 => Just(BodyRecipe::Empty),
        2 => prop::collection::vec(any::<u8>(), 0..512).prop_map(BodyRecipe::Bytes),
        3 => json_value().prop_map(BodyRecipe::Json),
        6 => (any::<Index>(), any::<Index>(), op)
            .prop_map(|(base, target, op)| BodyRecipe::Mutated { base, target, op }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(base, at)| BodyRecipe::Truncated { base, at }),
    ]
}

pub(super) fn case() -> impl Strategy<Value = Case> {
    let method = prop_oneof![
        9 => Just(None),
        1 => prop::sample::select(vec![Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::PATCH,
            Method::OPTIONS]).prop_map(Some),
    ];
    let relay = prop_oneof![3 => Just(Param::Text("relay_x".into())), 1 => param("relay_[a-z0-9]{1,10}")];
    let query = prop_oneof![
        6 => Just(None),
        2 => one_of(
            "format=native|format=holmes|format=llm-gateway|format=klingon|format=|after=0|after=1|after=-1|\
             after=18446744073709551616|after=x&format=native|%FF=%FE|after=0&after=1"
        )
        .prop_map(Some),
        1 => "[a-z0-9=&%]{0,16}".prop_map(Some),
    ];
    let route = prop::sample::select(ROUTES.to_vec());
    (route, method, param("[A-Za-z0-9._~-]{0,12}"), relay, query, headers(), body()).prop_map(
        |(route, method, session, relay, query, headers, body)| Case {
            route,
            method,
            session,
            relay,
            query,
            headers,
            body,
        },
    )
}

/// JSON pointers to every node of `value` below `at`.
pub(super) fn pointers(value: &Value, at: &str, out: &mut Vec<String>) {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v)).collect(),
        Value::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
        _ => Vec::new(),
    };
    for (step, child) in children {
        let pointer = format!("{at}/{step}");
        out.push(pointer.clone());
        pointers(child, &pointer, out);
    }
}

pub(super) fn mutated(base: &Value, target: &Index, op: &Op) -> Value {
    let mut doc = base.clone();
    let mut all = vec![String::new()];
    pointers(base, "", &mut all);
    let pointer = target.get(&all).clone();
    match op {
        Op::Keep => {}
        Op::Replace(value) => *doc.pointer_mut(&pointer).expect("a node of the base") = value.clone(),
        Op::Remove => match pointer.rsplit_once('/') {
            None => doc = json!({}),
            Some((parent, step)) => match doc.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&step.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(items)) => {
                    items.remove(step.parse::<usize>().expect("an index"));
                }
                _ => unreachable!("a parent is a container"),
            },
        },
        Op::Add(key, value) => {
            let mut at = pointer.as_str();
            loop {
                if let Some(Value::Object(map)) = doc.pointer_mut(at) {
                    map.insert(key.clone(), value.clone());
                    break;
                }
                match at.rsplit_once('/') {
                    Some((parent, _)) => at = parent,
                    None => break,
                }
            }
        }
    }
    doc
}
