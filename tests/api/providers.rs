//! The OpenAI and Anthropic providers against the scripted mock upstream:
//! wire formats both ways, retries before the first event, timeouts and lost
//! connections after it. Most behaviours run once per API (`…::openai`,
//! `…::anthropic`).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use serde_json::json;
use switchboard::{
    config::Config,
    providers::{
        ChatMessage, FinishReason, ImagePart, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError,
        Providers, Role, ToolCall, ToolSpec, Usage,
    },
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use crate::support::mock_upstream::{MockUpstream, Reply};

/// Upper bound for anything that should happen promptly: a hang fails.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq)]
enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    fn provider_name(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    /// How many SSE frames the mock sends up to and including the first text
    /// delta (Anthropic opens with `message_start` and `content_block_start`).
    fn frames_through_first_text(self) -> usize {
        match self {
            Api::OpenAi => 1,
            Api::Anthropic => 3,
        }
    }
}

/// Runs each named `async fn(Api)` as two tests, `name::openai` and `name::anthropic`.
macro_rules! for_both_apis {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn openai() {
                super::$name(super::Api::OpenAi).await
            }
            #[tokio::test]
            async fn anthropic() {
                super::$name(super::Api::Anthropic).await
            }
        }
    )*};
}

for_both_apis!(
    streamed_text_arrives_in_order_then_usage_then_stop,
    reasoning_arrives_as_reasoning_deltas_before_the_answer,
    a_tool_call_in_five_fragments_assembles_to_the_exact_json,
    two_tool_calls_in_one_response_keep_indices_zero_and_one,
    a_rate_limit_with_retry_after_is_waited_out_and_retried,
    two_server_errors_are_retried_until_the_upstream_answers,
    a_bad_request_fails_at_once_with_the_upstream_message,
    rate_limits_beyond_max_retries_end_in_rate_limited,
    silence_before_the_first_byte_fails_stream_with_a_timeout,
    a_disconnect_after_the_first_token_yields_it_then_disconnected,
    a_stall_after_the_first_token_ends_with_an_idle_timeout,
    an_error_event_mid_stream_arrives_as_an_error_item,
    an_overload_before_the_first_token_is_retried,
    an_unreachable_upstream_fails_with_disconnected,
    dropping_the_stream_closes_the_upstream_connection,
);

fn provider_at(api: Api, base_url: &str, extra_toml: &str) -> Arc<dyn ModelProvider> {
    provider_with_env(api, base_url, extra_toml, &|_| None)
}

fn provider_with_env(
    api: Api,
    base_url: &str,
    extra_toml: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Arc<dyn ModelProvider> {
    let toml = format!(
        r#"
[[tenants]]
id = "acme"
jwt = {{ hs256_secret = "0123456789abcdef0123" }}

[models.m]
provider = "{}"
base_url = "{base_url}"
model = "mock-model"
retry_base_ms = 10
{extra_toml}
"#,
        api.provider_name()
    );
    let config = Config::from_toml(&toml, env).expect("test config is valid");
    let provider = Providers::from_config(&config).get("acme", "m").expect("alias m is configured");
    assert_eq!(provider.name(), api.provider_name());
    provider
}

fn provider(api: Api, up: &MockUpstream, extra_toml: &str) -> Arc<dyn ModelProvider> {
    provider_at(api, &up.base_url(), extra_toml)
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest {
        model: "mock-model".into(),
        messages: vec![ChatMessage::text(Role::User, text)],
        tools: vec![],
        max_output_tokens: 256,
        response_format: None,
        prefill: None,
        reasoning: None,
    }
}

/// Every item until the stream ends; fails instead of hanging.
async fn drain(stream: ModelStream) -> Vec<Result<ModelEvent, ProviderError>> {
    tokio::time::timeout(WAIT, stream.collect()).await.expect("the stream ends")
}

/// The whole answer to `request`, which must succeed throughout.
async fn answer(provider: &dyn ModelProvider, request: ModelRequest) -> Vec<ModelEvent> {
    let stream = provider.stream(request).await.expect("the stream starts");
    drain(stream).await.into_iter().map(|item| item.expect("no error item")).collect()
}

/// The error `stream()` itself returns.
async fn refusal(provider: &dyn ModelProvider, request: ModelRequest) -> ProviderError {
    match tokio::time::timeout(WAIT, provider.stream(request)).await.expect("stream() returns") {
        Ok(_) => panic!("expected stream() to fail"),
        Err(error) => error,
    }
}

fn arguments_of(events: &[ModelEvent], call: u32) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCallDelta { index, fragment } if *index == call => Some(fragment.as_str()),
            _ => None,
        })
        .collect()
}

fn usage(input_tokens: u64, output_tokens: u64) -> ModelEvent {
    ModelEvent::Usage(Usage { input_tokens, output_tokens, ..Usage::default() })
}

async fn streamed_text_arrives_in_order_then_usage_then_stop(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["Hel", "lo", " world"]).usage(12, 3));
    let events = answer(&*provider(api, &up, ""), ask("hi")).await;
    assert_eq!(
        events,
        vec![
            ModelEvent::TextDelta("Hel".into()),
            ModelEvent::TextDelta("lo".into()),
            ModelEvent::TextDelta(" world".into()),
            usage(12, 3),
            ModelEvent::Finish(FinishReason::Stop),
        ]
    );
}

async fn reasoning_arrives_as_reasoning_deltas_before_the_answer(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().reasoning(["thinking ", "hard"]).text(["42"]).usage(5, 4));
    let events = answer(&*provider(api, &up, ""), ask("meaning of life?")).await;
    assert_eq!(
        events,
        vec![
            ModelEvent::ReasoningDelta("thinking ".into()),
            ModelEvent::ReasoningDelta("hard".into()),
            ModelEvent::TextDelta("42".into()),
            usage(5, 4),
            ModelEvent::Finish(FinishReason::Stop),
        ]
    );
}

async fn a_tool_call_in_five_fragments_assembles_to_the_exact_json(api: Api) {
    let up = MockUpstream::start().await;
    let fragments = [r#"{"id"#, r#"": "#, r#""42","#, r#" "verbose""#, r#": true}"#];
    up.push(Reply::new().tool_call("call_1", "lookup_order", fragments));
    let events = answer(&*provider(api, &up, ""), ask("where is 42?")).await;
    assert_eq!(events[0], ModelEvent::ToolCallStart { index: 0, id: "call_1".into(), name: "lookup_order".into() });
    assert_eq!(arguments_of(&events, 0), r#"{"id": "42", "verbose": true}"#);
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
    let finishes = events.iter().filter(|e| matches!(e, ModelEvent::Finish(_))).count();
    assert_eq!(finishes, 1);
}

async fn two_tool_calls_in_one_response_keep_indices_zero_and_one(api: Api) {
    let up = MockUpstream::start().await;
    up.push(
        Reply::new().text(["Checking both."]).tool_call("call_a", "lookup_order", [r#"{"id":"#, r#""1"}"#]).tool_call(
            "call_b",
            "lookup_order",
            [r#"{"id":"#, r#""2"}"#],
        ),
    );
    let events = answer(&*provider(api, &up, ""), ask("orders 1 and 2?")).await;
    let starts: Vec<&ModelEvent> = events.iter().filter(|e| matches!(e, ModelEvent::ToolCallStart { .. })).collect();
    assert_eq!(
        starts,
        vec![
            &ModelEvent::ToolCallStart { index: 0, id: "call_a".into(), name: "lookup_order".into() },
            &ModelEvent::ToolCallStart { index: 1, id: "call_b".into(), name: "lookup_order".into() },
        ]
    );
    assert_eq!(arguments_of(&events, 0), r#"{"id":"1"}"#);
    assert_eq!(arguments_of(&events, 1), r#"{"id":"2"}"#);
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
}

/// A conversation with every kind of message: system, user with an image,
/// an assistant tool call, its result, and a follow-up.
fn rich_request() -> ModelRequest {
    let mut look = ChatMessage::text(Role::User, "What is in this picture?");
    look.images =
        vec![ImagePart { url: "https://example.com/cat.png".into(), detail: Some("low".into()), format: None }];
    let mut assistant = ChatMessage { content: None, ..ChatMessage::text(Role::Assistant, "") };
    assistant.tool_calls =
        vec![ToolCall { id: "call_1".into(), name: "lookup_order".into(), arguments: r#"{"id":"42"}"#.into() }];
    ModelRequest {
        model: "mock-model".into(),
        messages: vec![
            ChatMessage::text(Role::System, "Be brief."),
            look,
            assistant,
            ChatMessage::tool_result("call_1", "shipped"),
        ],
        tools: vec![ToolSpec {
            name: "lookup_order".into(),
            description: "Look up an order".into(),
            parameters: json!({"type": "object", "properties": {"id": {"type": "string"}}}),
        }],
        max_output_tokens: 256,
        response_format: Some(json!({"type": "json_object"})),
        prefill: None,
        reasoning: None,
    }
}

fn key_env(name: &str) -> Option<String> {
    (name == "MOCK_UPSTREAM_KEY").then(|| "sk-test-123".to_string())
}

#[tokio::test]
async fn the_openai_request_is_a_streamed_chat_completion_with_the_bearer_key() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["ok"]));
    let provider = provider_with_env(Api::OpenAi, &up.base_url(), r#"api_key_env = "MOCK_UPSTREAM_KEY""#, &key_env);
    answer(&*provider, rich_request()).await;
    let request = &up.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
    let body = &request.body;
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "lookup_order",
        "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "lookup_order", "arguments": "{\"id\":\"42\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
        ])
    );
}

#[tokio::test]
async fn the_anthropic_request_is_a_streamed_message_with_the_api_key_and_version() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["ok"]));
    let provider = provider_with_env(Api::Anthropic, &up.base_url(), r#"api_key_env = "MOCK_UPSTREAM_KEY""#, &key_env);
    answer(&*provider, rich_request()).await;
    let request = &up.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-test-123"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = &request.body;
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(body.get("response_format"), None, "Anthropic has no response_format");
    assert_eq!(
        body["tools"],
        json!([{"name": "lookup_order", "description": "Look up an order",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                {"type": "text", "text": "What is in this picture?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "lookup_order", "input": {"id": "42"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "shipped"}]},
        ])
    );
}

#[tokio::test]
async fn no_key_configured_sends_no_credentials() {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["ok"]));
    up.push(Reply::new().text(["ok"]));
    answer(&*provider(Api::OpenAi, &up, ""), ask("hi")).await;
    answer(&*provider(Api::Anthropic, &up, ""), ask("hi")).await;
    let requests = up.requests();
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[1].header("x-api-key"), None);
}

async fn a_rate_limit_with_retry_after_is_waited_out_and_retried(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#).retry_after(1));
    up.push(Reply::new().text(["ok"]));
    let started = Instant::now();
    let events = answer(&*provider(api, &up, ""), ask("hi")).await;
    assert_eq!(events[0], ModelEvent::TextDelta("ok".into()));
    assert_eq!(up.calls(), 2);
    // The backoff alone would be at most 10 ms: the second attempt waited for Retry-After.
    assert!(started.elapsed() >= Duration::from_millis(900), "waited only {:?}", started.elapsed());
}

async fn two_server_errors_are_retried_until_the_upstream_answers(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::http_error(500, r#"{"error":{"message":"boom"}}"#));
    up.push(Reply::http_error(503, r#"{"error":{"message":"busy"}}"#));
    up.push(Reply::new().text(["ok"]));
    let events = answer(&*provider(api, &up, "max_retries = 2"), ask("hi")).await;
    assert_eq!(events[0], ModelEvent::TextDelta("ok".into()));
    assert_eq!(up.calls(), 3);
}

async fn a_bad_request_fails_at_once_with_the_upstream_message(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::http_error(400, r#"{"error":{"type":"invalid_request_error","message":"messages: too long"}}"#));
    up.push(Reply::new().text(["never sent"]));
    let error = refusal(&*provider(api, &up, ""), ask("hi")).await;
    assert_eq!(error, ProviderError::Http { status: 400, retry_after: None, message: "messages: too long".into() });
    assert_eq!(up.calls(), 1);
}

async fn rate_limits_beyond_max_retries_end_in_rate_limited(api: Api) {
    let up = MockUpstream::start().await;
    for _ in 0..3 {
        up.push(Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#));
    }
    let error = refusal(&*provider(api, &up, "max_retries = 1"), ask("hi")).await;
    assert_eq!(error, ProviderError::RateLimited { retry_after: None });
    assert_eq!(up.calls(), 2);
}

async fn silence_before_the_first_byte_fails_stream_with_a_timeout(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["late"]).stall_after(0));
    let provider = provider(api, &up, "first_byte_timeout_secs = 1\nmax_retries = 0");
    let error = refusal(&*provider, ask("hi")).await;
    assert!(matches!(error, ProviderError::Timeout(_)), "got {error:?}");
    assert_eq!(up.calls(), 1);
}

async fn a_disconnect_after_the_first_token_yields_it_then_disconnected(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["Hel", "lo"]).disconnect_after(api.frames_through_first_text()));
    let stream = provider(api, &up, "").stream(ask("hi")).await.expect("the first token arrived");
    let items = drain(stream).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(ModelEvent::TextDelta("Hel".into())));
    assert!(matches!(items[1], Err(ProviderError::Disconnected(_))), "{items:?}");
    assert_eq!(up.calls(), 1, "nothing is retried after the first event");
}

async fn a_stall_after_the_first_token_ends_with_an_idle_timeout(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["Hel", "lo"]).stall_after(api.frames_through_first_text()));
    let stream = provider(api, &up, "idle_timeout_secs = 1").stream(ask("hi")).await.expect("the first token arrived");
    let items = drain(stream).await;
    assert_eq!(items, vec![Ok(ModelEvent::TextDelta("Hel".into())), Err(ProviderError::Timeout("idle"))]);
}

async fn an_error_event_mid_stream_arrives_as_an_error_item(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().text(["partial"]).error_event("overloaded_error", "Overloaded"));
    let stream = provider(api, &up, "").stream(ask("hi")).await.expect("the first token arrived");
    let items = drain(stream).await;
    assert_eq!(
        items,
        vec![
            Ok(ModelEvent::TextDelta("partial".into())),
            Err(ProviderError::Http { status: 529, retry_after: None, message: "Overloaded".into() }),
        ]
    );
}

async fn an_overload_before_the_first_token_is_retried(api: Api) {
    let up = MockUpstream::start().await;
    up.push(Reply::new().error_event("overloaded_error", "Overloaded"));
    up.push(Reply::new().text(["ok"]));
    let events = answer(&*provider(api, &up, ""), ask("hi")).await;
    assert_eq!(events[0], ModelEvent::TextDelta("ok".into()));
    assert_eq!(up.calls(), 2);
}

async fn an_unreachable_upstream_fails_with_disconnected(api: Api) {
    // A port that was just free: nothing listens there any more.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let error = refusal(&*provider_at(api, &base_url, "max_retries = 1"), ask("hi")).await;
    assert!(matches!(error, ProviderError::Disconnected(_)), "got {error:?}");
}

/// The mock cannot report a client hanging up, so this test serves one raw
/// HTTP response by hand: the first SSE event, then silence until the client
/// closes the connection.
async fn dropping_the_stream_closes_the_upstream_connection(api: Api) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let first_event = match api {
        Api::OpenAi => format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
        Api::Anthropic => {
            let delta = json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"}});
            format!("event: content_block_delta\ndata: {delta}\n\n")
        }
    };
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(format!("{head}{first_event}").as_bytes()).await.unwrap();
        // Nothing more is sent: wait for the client to close its end.
        let mut buffer = [0u8; 1024];
        while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
    });
    let mut stream =
        provider_at(api, &base_url, "max_retries = 0").stream(ask("hi")).await.expect("the first token arrived");
    assert_eq!(stream.next().await, Some(Ok(ModelEvent::TextDelta("Hel".into()))));
    assert!(!server.is_finished(), "the connection stays open while the stream is alive");
    drop(stream);
    tokio::time::timeout(WAIT, server).await.expect("the upstream connection was closed").unwrap();
}

/// Reads one HTTP/1.1 request (head, then a `content-length` body).
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = socket.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the client closed before sending its request");
        received.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&received).to_ascii_lowercase();
        let Some(head_end) = text.find("\r\n\r\n") else { continue };
        let length = text[..head_end]
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |value| value.trim().parse::<usize>().unwrap());
        if received.len() >= head_end + 4 + length {
            return;
        }
    }
}
