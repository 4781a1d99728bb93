//! Chats the client names and resends whole: the AI SDK's chat id and
//! AG-UI's thread id are the session's id, and every request carries the
//! client's whole conversation.
//!
//! The store stays the truth. From the client's copy only the new part is
//! read: the last (user) message of a new turn, or the answers to a paused
//! turn's pending calls and approvals, matched to what the store says is
//! pending. The messages before it only seed a session whose id is new.
//!
//! A session id belongs to the tenant: an id another subject already uses
//! is a 404, like every session the caller may not see.
//!
//! Tools the client's messages show that are no server tool are the
//! client's own (an AI SDK app may declare them only in its UI): each
//! request's are remembered on the session as frontend tools, committed
//! with the turn it starts or resumes, so the model is offered them from
//! then on.
//!
//! A client that declares each run (AG-UI's tools, context and state) has
//! its run begun on the session in the commit that starts or resumes the
//! turn, on a new chat as on a known one ([`Conversation::run_input`]).

use super::ApiError;
use crate::{
    domain::{Answers, ChatMessage, RunInput, Session, Status},
    error::ErrorCode,
    principal::Principal,
    sessions::{NewSession, SessionError, Started},
    state::AppState,
};

/// Longest client-chosen id.
const MAX_ID_LEN: usize = 128;

/// A request's view of its conversation.
pub trait Conversation {
    /// The id the client gave the chat: the session's id.
    fn chat_id(&self) -> &str;

    /// The last message, which starts a turn, and the messages before it,
    /// which seed a new session; `None` unless the last message is the
    /// user's text.
    fn turn(&self) -> Option<(ChatMessage, Vec<ChatMessage>)>;

    /// The answers to the pending calls and approvals of `session`'s paused turn.
    fn answers(&self, session: &Session) -> Result<Answers, ApiError>;

    /// Checks that a regeneration request regenerates `session`'s last
    /// answer. Dialects without one refuse it.
    fn regenerates(&self, _session: &Session) -> Result<(), ApiError> {
        Err(ApiError::bad_request("this chat cannot regenerate an answer"))
    }

    /// The names of the tools the conversation's tool calls name (server
    /// tools among them: [`proceed`] keeps the client's). None by default.
    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the request declares for its run, for a client that declares
    /// each run; `None` leaves the session's tools, context and state as
    /// they are.
    fn run_input(&self) -> Option<RunInput> {
        None
    }

    /// Whether a turn started or resumed on a known chat hands back the
    /// conversation as committed ([`Started::conversation`]), for a dialect
    /// that restates it to its client.
    fn restates(&self) -> bool {
        false
    }
}

/// What a request did to its chat.
pub struct Proceeded {
    /// The turn to follow.
    pub started: Started,
    /// It answered a paused turn (rather than starting one).
    pub resumed: bool,
}

/// Refuses an id that is not 1 to 128 letters, digits, `-` or `_` (session
/// ids are parts of store keys).
pub fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    let fits =
        (1..=MAX_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fits {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::ValidationFailed,
            format!("{field}: must be 1 to {MAX_ID_LEN} letters, digits, '-' or '_'"),
        ))
    }
}

/// Answers the paused turn of the conversation's chat, or starts a turn on
/// it; when the id is new, the session is created as `new` says (with the
/// conversation's id and earlier messages).
pub async fn proceed(
    state: &AppState,
    principal: &Principal,
    new: NewSession,
    conversation: &impl Conversation,
) -> Result<Proceeded, ApiError> {
    let id = conversation.chat_id();
    let client_tools = client_tools(state, conversation);
    match state.sessions.load_for_command(principal, id).await {
        Ok(mut loaded) if loaded.session().status() == Status::AwaitingClient => {
            let resume = conversation.answers(loaded.session())?;
            loaded.learn_client_tools(&client_tools)?;
            prepare(&mut loaded, conversation)?;
            let started = state.sessions.resume_on(loaded, resume).await?;
            Ok(Proceeded { started, resumed: true })
        }
        Ok(mut loaded) => {
            let Some((message, _)) = conversation.turn() else {
                return Err(ApiError::conflict(
                    "nothing waits for this request: the last message must be the user's text",
                ));
            };
            if !loaded.session().status().is_active() {
                loaded.learn_client_tools(&client_tools)?;
            }
            prepare(&mut loaded, conversation)?;
            let started = state.sessions.start_turn_on(loaded, message).await?;
            Ok(Proceeded { started, resumed: false })
        }
        Err(SessionError::NotFound) => {
            let Some((message, history)) = conversation.turn() else {
                return Err(ApiError::bad_request("a new chat needs the user's text as its last message"));
            };
            let mut new = NewSession { id: Some(id.to_string()), ..new };
            new.options.learn_client_tools(&client_tools);
            let run = conversation.run_input();
            match state.sessions.start_conversation_run(principal, new, history, message, run).await {
                Ok(started) => Ok(Proceeded { started, resumed: false }),
                // Taken: by a concurrent request of the caller's (409), or
                // by a session the caller may not see (404).
                Err(SessionError::Conflict(message)) => match state.sessions.get(principal, id).await {
                    Ok(_) => Err(ApiError::conflict(message)),
                    Err(_) => Err(SessionError::NotFound.into()),
                },
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Drops the last answer of the conversation's chat and answers its user
/// message again (the AI SDK's `regenerate()`), remembering the client's
/// tools as [`proceed`] does. The chat must exist (a 404 otherwise, as for
/// a chat the caller may not see) and the request must regenerate its last
/// answer ([`Conversation::regenerates`]); a turn that runs or waits is a
/// 409, a chat without a turn a 400 (see [`Session::regenerate`]).
pub async fn regenerate(
    state: &AppState,
    principal: &Principal,
    conversation: &impl Conversation,
) -> Result<Started, ApiError> {
    let client_tools = client_tools(state, conversation);
    let mut loaded = state.sessions.load_for_command(principal, conversation.chat_id()).await?;
    conversation.regenerates(loaded.session())?;
    if !loaded.session().status().is_active() {
        loaded.learn_client_tools(&client_tools)?;
    }
    Ok(state.sessions.regenerate_on(loaded).await?)
}

/// The tools of the conversation that are the client's: no server tool
/// (nor the `agent` tool), and a name a model API accepts.
fn client_tools(state: &AppState, conversation: &impl Conversation) -> Vec<String> {
    let mut names = conversation.tool_names();
    names.retain(|name| is_tool_name(name) && !state.config.is_server_tool(name) && name != "agent");
    names
}

/// 1 to 64 letters, digits, `_` or `-`: what OpenAI's and Anthropic's
/// APIs take as a tool name.
fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Begins the request's run on a known chat, and asks for the conversation
/// back when the dialect restates it.
fn prepare(loaded: &mut crate::sessions::Loaded, conversation: &impl Conversation) -> Result<(), ApiError> {
    if let Some(run) = conversation.run_input() {
        loaded.begin_run(run)?;
    }
    if conversation.restates() {
        loaded.restate();
    }
    Ok(())
}

/// The conflict of a request that does not answer what a paused turn waits
/// for: the results of `calls` and the approvals of `approvals`.
pub fn still_waiting(calls: &[&str], approvals: &[&str]) -> ApiError {
    let mut waits = Vec::new();
    if !calls.is_empty() {
        waits.push(format!("the results of {}", calls.join(", ")));
    }
    if !approvals.is_empty() {
        waits.push(format!("decisions on {}", approvals.join(", ")));
    }
    ApiError::conflict(format!("the chat is paused; it waits for {}", waits.join(" and ")))
}
