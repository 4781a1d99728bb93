//! The native dialect: every canonical event as one SSE frame,
//! `id: <seq>`, `event: <type>`, `data: <json>` where the JSON carries `seq`,
//! `session_id`, `type`, the agent fields, `ts` and the event's own fields.

use serde_json::{Map, Value, json};

use super::{Encoder, Frame, LogEvent};

/// The native dialect: one frame per event, nothing skipped.
pub struct NativeEncoder;

impl Encoder for NativeEncoder {
    fn dialect(&self) -> &'static str {
        "native"
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        vec![encode(event)]
    }

    /// `title_updated` follows the `turn_ended` that announced it.
    fn wants_title(&self) -> bool {
        true
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        let data = json!({"type": code, "code": code, "message": message});
        vec![Frame::event(code.to_string(), data.to_string(), None)]
    }

    /// `event: held` without an id.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        let mut data = held.fields();
        data["type"] = json!("held");
        data["message"] = json!(held.message());
        vec![Frame::event("held", data.to_string(), None)]
    }

    /// `retry:` and an `event: reconnect` without an id, so the client's
    /// `Last-Event-ID` stays the last event it got.
    fn reconnect(&mut self) -> Vec<Frame> {
        let data = json!({
            "type": "reconnect",
            "message": "this replica is shutting down; rejoin with Last-Event-ID",
        });
        vec![Frame { retry: Some(RECONNECT_AFTER), ..Frame::event("reconnect", data.to_string(), None) }]
    }
}

/// How soon a client told to rejoin should reconnect (SSE `retry:`).
pub const RECONNECT_AFTER: std::time::Duration = std::time::Duration::from_millis(250);

pub fn encode(event: &LogEvent) -> Frame {
    let mut object = match serde_json::to_value(&event.event) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    object.insert("seq".into(), event.seq.into());
    object.insert("session_id".into(), Value::String(event.session_id.to_string()));
    Frame::event(event.event.kind.type_name(), super::json_text(&Value::Object(object)), Some(event.seq.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AgentRef, Event, EventKind};

    #[test]
    fn a_frame_carries_seq_session_and_type() {
        let event = LogEvent {
            seq: 7,
            session_id: "s1".into(),
            event: Event {
                kind: EventKind::TextDelta { text: "hi".into() },
                agent: AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 },
                ts: 1,
            },
        };
        let frame = encode(&event);
        assert_eq!(frame.id.as_deref(), Some("7"));
        assert_eq!(frame.event.as_deref(), Some("text_delta"));
        let data: Value = serde_json::from_str(&frame.data).unwrap();
        assert_eq!(data["seq"], 7);
        assert_eq!(data["session_id"], "s1");
        assert_eq!(data["type"], "text_delta");
        assert_eq!(data["text"], "hi");
        assert_eq!(data["agent_id"], "main");
    }
}
