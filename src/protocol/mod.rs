//! One encoder per wire protocol, over the domain's canonical events.
//!
//! An [`Encoder`] translates the canonical events of one HTTP stream into its
//! dialect's frames. It lives as long as that stream and keeps only what the
//! stream needs (say, the text of the answer so far, for a dialect whose
//! last frame repeats it); nothing it holds outlives the stream, so any
//! replica can encode any session.

pub mod ag_ui;
pub mod ai_sdk;
pub mod cosmo;
pub mod holmes;
pub mod llm_gateway;
pub mod native;
pub mod responses;
#[cfg(test)]
mod testing;
pub mod zot;

use std::{borrow::Cow, collections::BTreeMap, sync::Arc};

pub use crate::domain::events::{AgentRef, EventKind, LogEvent, PendingCall, PendingRelay, TurnEndReason};
use crate::{
    config::ModelConfig,
    domain::{Held, Session},
};

/// A model's context window and reserved output, for dialects that report
/// context use (Holmes' `metadata`, Cosmo's `contextUsage`), and its
/// prices, for those that report cost (Holmes' `metadata.costs`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Limits {
    pub max_tokens: u32,
    pub max_output_tokens: u32,
    pub prices: Option<crate::config::Prices>,
}

/// [`Limits`] by model alias, built once from the configuration; encoders
/// look up the alias a session's events or stored document name.
#[derive(Debug, Clone, Default)]
pub struct ModelLimits(Arc<BTreeMap<String, Limits>>);

impl ModelLimits {
    pub fn of(models: &BTreeMap<String, ModelConfig>) -> Self {
        (models.iter())
            .map(|(alias, m)| {
                let limits =
                    Limits { max_tokens: m.context_window, max_output_tokens: m.max_output_tokens, prices: m.prices };
                (alias.clone(), limits)
            })
            .collect()
    }

    /// The limits of the model `id` names (an alias, or an id a pattern serves).
    pub fn get(&self, id: &str) -> Option<Limits> {
        crate::config::resolve_key(&self.0, id).map(|(_, limits, _)| *limits)
    }
}

impl FromIterator<(String, Limits)> for ModelLimits {
    fn from_iter<I: IntoIterator<Item = (String, Limits)>>(limits: I) -> Self {
        Self(Arc::new(limits.into_iter().collect()))
    }
}

/// How a dialect's frames travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `text/event-stream`: each frame's `event:`, `data:` and `id:` lines
    /// (those it has), keep-alive comments.
    Sse,
    /// `application/x-ndjson`: each frame's `data` on a line of its own.
    Ndjson,
}

/// One frame, independent of the HTTP framework: an SSE event (`id`,
/// `event`, `data`), or for line-based dialects just the `data` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    /// The SSE event name; dialects' names are static, so most frames
    /// carry one without an allocation of their own.
    pub event: Option<Cow<'static, str>>,
    pub data: String,
    /// An SSE `retry:` line: how long a reconnecting client should wait.
    pub retry: Option<std::time::Duration>,
}

impl Frame {
    pub fn data(data: impl Into<String>) -> Self {
        Self { id: None, event: None, data: data.into(), retry: None }
    }

    /// An SSE frame with an event name and, when given, an id.
    pub fn event(event: impl Into<Cow<'static, str>>, data: impl Into<String>, id: Option<String>) -> Self {
        Self { id, event: Some(event.into()), data: data.into(), retry: None }
    }
}

/// A JSON value's compact text: the bytes its `Display` writes, written
/// straight into a buffer instead of through `core::fmt`'s writer (about
/// twice the instructions, for a text made per frame).
pub fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

pub trait Encoder: Send {
    /// The dialect's `?format=` name (a metric label).
    fn dialect(&self) -> &'static str;

    fn transport(&self) -> Transport {
        Transport::Sse
    }

    /// Response headers the dialect's clients expect.
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Frames the stream opens with, before its first event: for a dialect
    /// that restates the session to its client first (AG-UI: a run that
    /// continues its thread, a client joining a running one).
    fn opening(&mut self) -> Vec<Frame> {
        Vec::new()
    }

    /// The frames for one event (none, for events the dialect does not show).
    fn encode(&mut self, event: &LogEvent) -> Vec<Frame>;

    /// Whether a client that joins the session's stream (`GET …/events`)
    /// gets the session restated while a turn runs, rather than a replay
    /// after its cursor (`Sessions::join`): for a dialect whose clients keep
    /// no cursor (AG-UI).
    fn restates_on_join(&self) -> bool {
        false
    }

    /// The session a join restates: as of its last commit, with its
    /// conversation; the stream goes on from that commit. The frames come
    /// from [`Encoder::opening`].
    fn joined(&mut self, _session: &Session) {}

    /// Whether the stream's last frame was made: for a dialect whose stream
    /// is one part of the session's log (a Responses API response), so a
    /// replay of it ends there rather than following later turns.
    fn finished(&self) -> bool {
        false
    }

    /// The frames that report a broken stream: `code` is `recovery_failed`
    /// (the cursor is older than the retained log) or a store error code.
    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame>;

    /// The frames of a notice that the session's writes are held by the
    /// store (see [`Held`]): without an id (nothing of the log), in the
    /// dialect's own form; every few seconds while the hold lasts. When
    /// the writer gives up, [`Encoder::failure`] comes instead (code
    /// `store_held`).
    fn held(&mut self, held: &Held) -> Vec<Frame>;

    /// Whether [`Encoder::finish`] needs the stored session after the last
    /// event (saves a store read for dialects that do not).
    fn wants_finish(&self) -> bool {
        false
    }

    /// Frames after the stream's last event, given the session as stored
    /// (with its conversation).
    fn finish(&mut self, _session: &Session) -> Vec<Frame> {
        Vec::new()
    }

    /// Whether a `step_restarted` event of the main agent should come with
    /// the stored session (with its conversation), through
    /// [`Encoder::restarted`] (saves a store read for dialects that do not).
    fn wants_history_on_restart(&self) -> bool {
        false
    }

    /// The frames for a `step_restarted` event, given the session as stored
    /// when the event is read (its conversation may have gone on since: a
    /// replay of a finished turn), for a dialect whose reset replaces the
    /// client's whole conversation. Called instead of [`Encoder::encode`]
    /// when [`Encoder::wants_history_on_restart`] and the read succeeded.
    fn restarted(&mut self, event: &LogEvent, _session: &Session) -> Vec<Frame> {
        self.encode(event)
    }

    /// Whether a stream that starts mid-turn (a rejoin after a cursor)
    /// needs the turn's events before its cursor, through
    /// [`Encoder::context`]: for a dialect whose frames name what came
    /// before (llm-gateway's block ids and runs). Saves a store read for
    /// dialects that do not.
    fn wants_turn_context(&self) -> bool {
        false
    }

    /// Takes in an event of the current turn from before the stream's
    /// cursor: the client has its frames already, so none are made.
    fn context(&mut self, event: &LogEvent) {
        let _ = self.encode(event);
    }

    /// Whether the stream stays open after a turn's end that announced the
    /// session's title (`turn_ended` with `title_pending`), until the
    /// `title_updated` event: for dialects that show titles. Their last
    /// frames for the turn ([`Encoder::finish`], [`Encoder::close`]) go
    /// first, so the title never delays them.
    fn wants_title(&self) -> bool {
        false
    }

    /// Frames that close a stream whose events all arrived, needing nothing
    /// stored (after [`Encoder::finish`], if any).
    fn close(&mut self) -> Vec<Frame> {
        Vec::new()
    }

    /// Frames that end a stream this replica stops serving (it drains): the
    /// dialect's closest way of telling its client to rejoin elsewhere. The
    /// default sends nothing; the stream then just ends, which SSE clients
    /// take as a cue to reconnect with `Last-Event-ID`.
    fn reconnect(&mut self) -> Vec<Frame> {
        Vec::new()
    }
}

/// The encoder for `?format=<name>`, or `None` for an unknown name.
/// `models` lets it find the limits of the model the session names.
pub fn encoder_for(format: &str, models: &ModelLimits) -> Option<Box<dyn Encoder>> {
    match format {
        "native" => Some(Box::new(native::NativeEncoder)),
        "holmes" => Some(Box::new(holmes::HolmesEncoder::for_models(models.clone()))),
        "llm-gateway" => Some(Box::new(llm_gateway::LlmGatewayEncoder::default())),
        "cosmo" => Some(Box::new(cosmo::CosmoEncoder::new(models.clone()))),
        "zot" => Some(Box::new(zot::ZotEncoder::for_models(models.clone()))),
        "ai-sdk" => Some(Box::new(ai_sdk::AiSdkEncoder::default())),
        "ag-ui" => Some(Box::new(ag_ui::AgUiEncoder::default())),
        _ => None,
    }
}

/// The names `?format=` accepts, for error messages.
pub const FORMATS: &[&str] = &["native", "holmes", "llm-gateway", "cosmo", "zot", "ai-sdk", "ag-ui"];

/// The text of a tool's result as the model read it: the output's text, the
/// `context` of a workspace tool's `{context, result}`, or other JSON as text.
pub fn tool_text(output: &serde_json::Value) -> String {
    match output {
        serde_json::Value::String(text) => text.clone(),
        other => match other.get("context").and_then(serde_json::Value::as_str) {
            Some(context) => context.to_string(),
            None => other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::event;

    #[test]
    fn only_native_and_cosmo_show_a_title_and_wait_for_it() {
        for format in FORMATS {
            let mut encoder = encoder_for(format, &ModelLimits::default()).expect("a known format");
            let shows = ["native", "cosmo"].contains(format);
            assert_eq!(encoder.wants_title(), shows, "{format}");
            // A stream's first event may open it (AI SDK's `start`, AG-UI's `RUN_STARTED`).
            encoder.encode(&event(8, EventKind::TurnStarted { turn: 1, model: "m".into() }));
            let frames = encoder.encode(&event(9, EventKind::TitleUpdated { title: "Order 42".into() }));
            assert_eq!(!frames.is_empty(), shows, "{format}: {frames:?}");
        }
    }

    /// A hold's notice is no event of the log (no id) and says in each
    /// dialect's own form what is held and since when.
    #[test]
    fn a_held_notice_has_no_id_and_each_dialects_form() {
        let held = Held {
            since_ms: 1_700_000_000_000,
            held_for: std::time::Duration::from_secs(7),
            reason: "redis: timed out".into(),
            gave_up: false,
        };
        for format in FORMATS {
            let mut encoder = encoder_for(format, &ModelLimits::default()).expect("a known format");
            encoder.encode(&event(8, EventKind::TurnStarted { turn: 1, model: "m".into() }));
            let frames = encoder.held(&held);
            let notice = frames.last().unwrap_or_else(|| panic!("{format}: no notice"));
            assert!(frames.iter().all(|f| f.id.is_none()), "{format}: {frames:?}");
            let data: serde_json::Value = serde_json::from_str(&notice.data).expect("JSON");
            let (kind, fields) = match *format {
                "ai-sdk" => {
                    assert_eq!(data["transient"], true, "the AI SDK keeps it out of the message");
                    (data["type"].clone(), data["data"].clone())
                }
                "ag-ui" => {
                    assert_eq!(data["name"], "held");
                    (data["type"].clone(), data["value"].clone())
                }
                "cosmo" => (data["type"].clone(), data["held"].clone()),
                _ => (notice.event.clone().map_or(data["type"].clone(), serde_json::Value::from), data.clone()),
            };
            let expected = match *format {
                "ai-sdk" => "data-held",
                "ag-ui" => "CUSTOM",
                _ => "held",
            };
            assert_eq!(kind, expected, "{format}: {data}");
            assert_eq!(fields["since"], 1_700_000_000_000_u64, "{format}: {data}");
            assert_eq!(fields["heldSecs"], 7, "{format}: {data}");
            assert_eq!(fields["reason"], "redis: timed out", "{format}: {data}");
        }
    }
}
