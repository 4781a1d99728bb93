//! zot's RPC commands over HTTP (`POST /v1/zot`): the body holds command
//! lines as `zot rpc` reads them on stdin (NDJSON, `{"id", "type", …}`),
//! and the answer is what it writes on stdout (NDJSON): each command's
//! `response` line (`id`, `command`, `success`, `data` or `error`), and
//! after a `prompt` or `compact`'s the events of seed 004 in zot's order
//! (`protocol/zot.rs`) up to `done`. Commands run in the order sent; a
//! prompt's events come before the next command's response.
//!
//! A zot session is a Switchboard session (dialect `zot`): `?session=<id>`
//! names it, else the request makes one (on `?model=`, else the tenant's
//! default) and says its id in `x-session-id`. It is durable like any:
//! a dropped answer is rejoined with
//! `GET /v1/sessions/{id}/events?format=zot&after=<seq>` on any replica
//! (every event line carries its `seq`), and `abort` is accepted from any
//! replica while the prompt runs elsewhere. `switchboard zot-rpc`
//! (`crate::bridge`) puts this behind stdin and stdout.
//!
//! Ours: a `prompt`'s or `compact`'s `data.cursor` (the seq before its
//! events, to rejoin from), `seq` on every event line.
//!
//! zot has no approvals: a session made here refuses the calls that need
//! one (the model reads why), as Holmes without `enable_tool_approval`.
//!
//! Where it differs from a `zot rpc` process: a `prompt` or `compact`
//! while a turn runs is refused (`agent is busy`) instead of queued (the
//! bridge queues); `hello`'s token is not checked (the request's
//! credential is); `user_message` has no `seq` (it is not in the log: the
//! request that starts the turn sends it).

mod render;

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{Query, State},
    http::HeaderValue,
    response::Response,
};
use futures::{StreamExt, stream::BoxStream};
use serde::Deserialize;
use serde_json::{Value, json};

use super::stream;
use crate::{
    domain::{ApprovalMode, ChatMessage, ImagePart, Role, SessionOptions},
    error::ApiError,
    principal::Principal,
    protocol::{Frame, zot::ZotEncoder},
    sessions::{NewSession, SessionError, Started},
    state::AppState,
};

/// Commands one request may carry.
const MAX_COMMANDS: usize = 64;
/// The levels `set_reasoning` takes, as zot's RPC mode lists them.
const REASONING_LEVELS: [&str; 7] = ["off", "minimum", "low", "medium", "high", "xhigh", "max"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZotQuery {
    /// The session the commands are for.
    pub session: Option<String>,
    /// The model of a session the request makes.
    pub model: Option<String>,
}

/// One command line.
#[derive(Debug)]
struct Command {
    id: Value,
    kind: String,
    body: Value,
}

impl Command {
    fn parse(line: &str) -> Result<Self, (Value, String)> {
        let value: Value = serde_json::from_str(line).map_err(|e| (Value::Null, format!("invalid JSON: {e}")))?;
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        match value.get("type").and_then(Value::as_str) {
            Some(kind) => Ok(Self { id, kind: kind.to_string(), body: value.clone() }),
            None => Err((id, "a command needs a string \"type\"".into())),
        }
    }

    /// Whether it reads or changes the session.
    fn needs_session(&self) -> bool {
        !matches!(self.kind.as_str(), "hello" | "ping" | "get_models" | "abort")
    }
}

/// `POST /v1/zot`.
pub async fn rpc(
    State(state): State<AppState>,
    principal: Principal,
    Query(query): Query<ZotQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let text = std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return Err(ApiError::bad_request("send one or more zot command lines (NDJSON)"));
    }
    if lines.len() > MAX_COMMANDS {
        return Err(ApiError::bad_request(format!("at most {MAX_COMMANDS} commands per request")));
    }
    let commands: Vec<Result<Command, (Value, String)>> = lines.into_iter().map(Command::parse).collect();
    let session = match query.session {
        Some(id) => Some(state.sessions.get(&principal, &id).await?.session.id().to_string()),
        None if commands.iter().flatten().any(Command::needs_session) => {
            let model = super::model_or_default(&state, &principal, query.model.as_deref())?;
            // zot has no approval command: a tool that needs one is refused
            // and the model told so, instead of waiting on a relay.
            let options = SessionOptions { approval: ApprovalMode::Refuse, ..SessionOptions::default() };
            let new = NewSession { id: None, model, dialect: "zot", options, files: None };
            Some(state.sessions.create(&principal, new).await?.id().to_string())
        }
        None => None,
    };
    let rpc = Arc::new(Rpc { state: state.clone(), principal, session: session.clone() });
    let frames = futures::stream::iter(commands)
        .then(move |command| {
            let rpc = rpc.clone();
            async move {
                match command {
                    Ok(command) => rpc.run(command).await,
                    Err((id, error)) => once(response(&id, "", Err(error))),
                }
            }
        })
        .flatten()
        .boxed();
    let mut response = stream::ndjson(&state, frames);
    if let Some(id) = session.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response.headers_mut().insert("x-session-id", id);
    }
    Ok(response)
}

/// What every command of one request shares.
struct Rpc {
    state: AppState,
    principal: Principal,
    session: Option<String>,
}

impl Rpc {
    /// The lines a command answers with.
    async fn run(&self, command: Command) -> BoxStream<'static, Frame> {
        let id = &command.id;
        let kind = command.kind.as_str();
        let session = self.session.as_deref();
        let answer = match (kind, session) {
            ("ping", _) => Ok(json!({"pong": true})),
            ("hello", _) => Ok(self.hello().await),
            ("get_models", _) => Ok(render::models(&self.state, &self.principal)),
            ("abort", None) => Err("no session to abort".to_string()),
            ("abort", Some(id)) => {
                self.state.sessions.cancel(&self.principal, id).await.map(|()| json!({})).map_err(|e| e.to_string())
            }
            ("prompt" | "compact", Some(id)) => return self.start(&command, id).await,
            ("get_state", Some(id)) => self.read(id, render::state).await,
            ("get_messages", Some(id)) => self.read(id, render::messages).await,
            ("set_model" | "set_reasoning" | "clear", Some(id)) => self.update(&command, id).await,
            ("prompt" | "compact" | "get_state" | "get_messages" | "set_model" | "set_reasoning" | "clear", None) => {
                Err("no session".to_string())
            }
            (other, _) => Err(format!("unknown command type {other:?}")),
        };
        once(response(id, kind, answer))
    }

    async fn hello(&self) -> Value {
        let model = match &self.session {
            Some(id) => self.state.sessions.get(&self.principal, id).await.ok().map(|v| v.session.model().to_string()),
            None => self.state.config.default_model(&self.principal.tenant).map(str::to_string),
        };
        let provider = model.as_deref().and_then(|m| render::provider_of(&self.state, m));
        json!({"protocol_version": 1, "version": env!("CARGO_PKG_VERSION"), "provider": provider, "model": model,
               "session_id": self.session})
    }

    /// A prompt or a compaction: the `response` line, then (a prompt) the
    /// user's message, then the turn's events up to `done`.
    async fn start(&self, command: &Command, session: &str) -> BoxStream<'static, Frame> {
        let id = &command.id;
        let kind = command.kind.as_str();
        let sessions = &self.state.sessions;
        let loaded = match sessions.load_for_command(&self.principal, session).await.map_err(|e| e.to_string()) {
            Ok(loaded) => loaded,
            Err(error) => return once(response(id, kind, Err(error))),
        };
        if let Err(error) = idle(loaded.session()) {
            return once(response(id, kind, Err(error)));
        }
        let (started, prompt): (Result<Started, SessionError>, Option<ChatMessage>) = if kind == "prompt" {
            let Some(message) = user_message(&command.body) else {
                return once(response(id, kind, Err("a prompt needs a string \"message\"".into())));
            };
            (sessions.start_turn_on(loaded, message.clone()).await, Some(message))
        } else {
            (sessions.start_compaction_on(loaded).await, None)
        };
        let started = match started {
            Ok(started) => started,
            Err(e) => return once(response(id, kind, Err(e.to_string()))),
        };
        // `cursor` is ours: the seq before the turn's events, so a client
        // whose answer drops before any event rejoins after it.
        let started_data = json!({"started": true, "cursor": started.cursor()});
        let mut lines = vec![response(id, kind, Ok(started_data))];
        lines.extend(prompt.map(|message| render::user_message(&message)));
        let session_id = started.id().to_string();
        let follower = sessions.follow_started(started).await;
        let encoder = Box::new(ZotEncoder::for_models(self.state.model_limits.clone()));
        let events = stream::encode(&self.state, self.principal.clone(), session_id, follower, encoder);
        futures::stream::iter(lines).chain(events).boxed()
    }

    async fn read(&self, session: &str, render: fn(&crate::sessions::SessionView) -> Value) -> Result<Value, String> {
        let view = self.state.sessions.get_with_history(&self.principal, session).await.map_err(|e| e.to_string())?;
        Ok(render(&view))
    }

    /// `set_model`, `set_reasoning`, `clear`: between turns only.
    async fn update(&self, command: &Command, session: &str) -> Result<Value, String> {
        let sessions = &self.state.sessions;
        let loaded = sessions.load_for_command(&self.principal, session).await.map_err(|e| e.to_string())?;
        idle(loaded.session())?;
        let updated = match command.kind.as_str() {
            "set_model" => {
                let model = command.body["model"].as_str().ok_or("set_model needs a string \"model\"")?;
                super::check_model(&self.state, &self.principal, model).map_err(|e| e.message)?;
                sessions.update_on(loaded, |s| s.set_model(model)).await
            }
            "set_reasoning" => {
                let level = command.body["reasoning"].as_str().ok_or("set_reasoning needs a string \"reasoning\"")?;
                if !REASONING_LEVELS.contains(&level) {
                    return Err(format!("reasoning must be one of {}", REASONING_LEVELS.join(", ")));
                }
                let level = (level != "off").then(|| level.to_string());
                sessions.update_on(loaded, |s| s.set_reasoning(level)).await
            }
            _ => sessions.update_on(loaded, |s| s.clear()).await,
        };
        updated.map(|_| json!({})).map_err(|e| e.to_string())
    }
}

/// A `response` line.
fn response(id: &Value, command: &str, answer: Result<Value, String>) -> Frame {
    let mut line = json!({"type": "response", "id": id, "command": command});
    match answer {
        Ok(data) => {
            line["success"] = json!(true);
            if data.as_object().is_none_or(|d| !d.is_empty()) {
                line["data"] = data;
            }
        }
        Err(error) => {
            line["success"] = json!(false);
            line["error"] = json!(error);
        }
    }
    Frame { id: None, event: None, data: line.to_string(), retry: None }
}

fn once(frame: Frame) -> BoxStream<'static, Frame> {
    futures::stream::iter([frame]).boxed()
}

/// zot's answer to a prompt, compaction or change while a turn runs
/// (its turn is running, waiting on a relay, or paused for the client).
fn idle(session: &crate::domain::Session) -> Result<(), String> {
    if session.status().takes_messages() {
        Ok(())
    } else {
        Err(format!("agent is busy (the session is {})", session.status().as_str()))
    }
}

/// A prompt's `message` (and `images: [{mime_type, data}]`) as the user's message.
fn user_message(body: &Value) -> Option<ChatMessage> {
    let text = body["message"].as_str()?;
    let images = (body["images"].as_array().into_iter().flatten())
        .filter_map(|image| {
            let mime = image["mime_type"].as_str()?;
            let data = image["data"].as_str()?;
            Some(ImagePart { url: format!("data:{mime};base64,{data}"), detail: None, format: Some(mime.to_string()) })
        })
        .collect();
    Some(ChatMessage { images, ..ChatMessage::text(Role::User, text) })
}
