//! What a [`super::client::Follower`] saw — every frame with its seq, type,
//! JSON data, arrival time and replica, and every connection — and the
//! checks the fault tests make on it: a gapless log from a cursor, and the
//! final answer rebuilt as a client would (dropping the partial text of a
//! restarted step).

use std::time::Instant;

use serde_json::Value;

/// One SSE frame as received.
#[derive(Clone, Debug)]
pub struct SeenEvent {
    /// The frame's `id:`, if it had one.
    pub seq: Option<u64>,
    /// The `event:` name (`message` when absent).
    pub kind: String,
    pub data: Value,
    pub at: Instant,
    /// The base URL of the replica it came through.
    pub via: String,
}

impl SeenEvent {
    /// A log event: it has a seq and is not the drain's `reconnect` frame.
    pub fn is_log_event(&self) -> bool {
        self.seq.is_some() && self.kind != "reconnect"
    }

    /// `turn_ended` or `paused`: the follow is over.
    pub fn ends_turn(&self) -> bool {
        self.is_log_event() && matches!(self.kind.as_str(), "turn_ended" | "paused")
    }
}

/// One connection the follower made.
#[derive(Clone, Debug)]
pub struct Connection {
    pub url: String,
    /// The cursor it asked for.
    pub after: u64,
    pub opened: Instant,
    /// When it ended (set when recorded).
    pub closed: Option<Instant>,
    /// HTTP status, or `None` when no response came.
    pub status: Option<u16>,
    /// How it ended: `turn ended`, `stream ended`, `idle`, an error.
    pub outcome: String,
    pub frames: usize,
    pub retry_ms: Option<u64>,
    pub reconnect_frame: bool,
}

/// Everything a follower saw.
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    pub session_id: String,
    pub events: Vec<SeenEvent>,
    pub connections: Vec<Connection>,
    /// Every `retry:` value, in order.
    pub retry_lines: Vec<u64>,
    /// `turn_ended` or `paused` arrived before the deadline.
    pub finished: bool,
}

/// The final answer as a client rebuilds it.
#[derive(Clone, Debug, PartialEq)]
pub struct FinalText {
    /// The `text_delta`s of the main agent's last step with text, minus the
    /// text a `step_restarted` voided.
    pub streamed: String,
    /// The last `message_completed.content` of the main agent.
    pub completed: Option<String>,
}

impl Transcript {
    /// The log events (seq'd frames), in arrival order.
    pub fn log_events(&self) -> impl Iterator<Item = &SeenEvent> {
        self.events.iter().filter(|e| e.is_log_event())
    }

    pub fn seqs(&self) -> Vec<u64> {
        self.log_events().filter_map(|e| e.seq).collect()
    }

    /// `Ok` when the seqs seen are exactly `cursor+1, cursor+2, …` — a
    /// repeat or a gap is reported with the seqs around it.
    pub fn check_gapless_from(&self, cursor: u64) -> Result<(), String> {
        let seqs = self.seqs();
        for (i, seq) in seqs.iter().enumerate() {
            let expected = cursor + 1 + i as u64;
            if *seq != expected {
                let what = if *seq < expected { "a repeat" } else { "a gap" };
                let around = &seqs[i.saturating_sub(5)..(i + 5).min(seqs.len())];
                return Err(format!(
                    "{what} in session {}: expected seq {expected}, got {seq} (seqs around it: {around:?}; \
                     connections: {})",
                    self.session_id,
                    self.describe_connections()
                ));
            }
        }
        if seqs.is_empty() {
            return Err(format!("no events at all for session {}", self.session_id));
        }
        Ok(())
    }

    pub fn assert_gapless_from(&self, cursor: u64) {
        if let Err(e) = self.check_gapless_from(cursor) {
            panic!("{e}");
        }
    }

    /// The `reason` of the `turn_ended` event, if one arrived.
    pub fn turn_end_reason(&self) -> Option<String> {
        self.log_events()
            .filter(|e| e.kind == "turn_ended")
            .last()
            .and_then(|e| e.data["reason"].as_str().map(str::to_string))
    }

    /// Events of `kind` (log events only).
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a SeenEvent> + 'a {
        self.log_events().filter(move |e| e.kind == kind)
    }

    /// The `tool_call_id`s of the events of `kind`.
    pub fn tool_call_ids(&self, kind: &str) -> Vec<String> {
        self.of_kind(kind).filter_map(|e| e.data["tool_call_id"].as_str().map(str::to_string)).collect()
    }

    /// Rebuilds the main agent's answer: text accumulates per step; a
    /// `step_restarted` drops the text since the last boundary
    /// (`message_completed`, `usage`, `tool_call`); the answer is the text of
    /// the last step that had any.
    pub fn final_text(&self) -> FinalText {
        let (mut current, mut last_step, mut completed) = (String::new(), String::new(), None);
        for event in self.log_events().filter(|e| e.data["agent_id"].as_str().is_none_or(|a| a == "main")) {
            match event.kind.as_str() {
                "text_delta" => current.push_str(event.data["text"].as_str().unwrap_or_default()),
                "step_restarted" => current.clear(),
                "message_completed" | "usage" | "tool_call" => {
                    if event.kind == "message_completed" {
                        completed = event.data["content"].as_str().map(str::to_string);
                    }
                    if !current.is_empty() {
                        last_step = std::mem::take(&mut current);
                    }
                }
                _ => {}
            }
        }
        if !current.is_empty() {
            last_step = current;
        }
        FinalText { streamed: last_step, completed }
    }

    /// The first log event that arrived after `instant`.
    pub fn first_event_after(&self, instant: Instant) -> Option<&SeenEvent> {
        self.log_events().find(|e| e.at > instant)
    }

    /// Connections, one per line-ish, for failure messages.
    pub fn describe_connections(&self) -> String {
        let lines: Vec<String> = self
            .connections
            .iter()
            .map(|c| {
                format!(
                    "[{} after={} status={:?} frames={} retry={:?} reconnect_frame={} -> {}]",
                    c.url, c.after, c.status, c.frames, c.retry_ms, c.reconnect_frame, c.outcome
                )
            })
            .collect();
        lines.join(" ")
    }
}

/// The checks themselves, on made-up transcripts: a check that cannot fail
/// proves nothing.
#[cfg(test)]
mod checks_of_the_checks {
    use std::time::Instant;

    use serde_json::json;

    use super::{SeenEvent, Transcript};

    fn event(seq: u64, kind: &str, data: serde_json::Value) -> SeenEvent {
        SeenEvent { seq: Some(seq), kind: kind.to_string(), data, at: Instant::now(), via: String::new() }
    }

    fn text(seq: u64, text: &str) -> SeenEvent {
        event(seq, "text_delta", json!({"agent_id": "main", "text": text}))
    }

    fn transcript(events: Vec<SeenEvent>) -> Transcript {
        Transcript { session_id: "s".into(), events, ..Transcript::default() }
    }

    #[test]
    fn a_repeat_and_a_gap_are_both_reported_with_the_seqs_around_them() {
        let repeat = transcript(vec![text(1, "a"), text(2, "b"), text(2, "b"), text(3, "c")]);
        let error = repeat.check_gapless_from(0).unwrap_err();
        assert!(error.starts_with("a repeat") && error.contains("expected seq 3, got 2"), "{error}");
        let gap = transcript(vec![text(5, "a"), text(7, "b")]);
        let error = gap.check_gapless_from(4).unwrap_err();
        assert!(error.starts_with("a gap") && error.contains("expected seq 6, got 7"), "{error}");
        assert!(transcript(vec![text(5, "a"), text(6, "b")]).check_gapless_from(4).is_ok());
        assert!(transcript(Vec::new()).check_gapless_from(0).is_err(), "no events is not a gapless log");
    }

    #[test]
    fn a_reconnect_frame_is_not_a_log_event() {
        let mut reconnect = event(2, "reconnect", json!({}));
        reconnect.seq = Some(1);
        let t = transcript(vec![text(1, "a"), reconnect, text(2, "b")]);
        assert_eq!(t.seqs(), vec![1, 2]);
    }

    #[test]
    fn a_restarted_step_drops_its_partial_text_and_the_answer_is_the_last_step() {
        let t = transcript(vec![
            text(1, "thinking out loud"),
            event(2, "usage", json!({"agent_id": "main"})),
            event(3, "tool_call", json!({"agent_id": "main", "tool_call_id": "c1"})),
            text(4, "w1 w2"),
            event(5, "step_restarted", json!({"agent_id": "main", "step": 2})),
            text(6, "w1"),
            event(7, "text_delta", json!({"agent_id": "sub-1", "text": "not mine"})),
            text(8, " w2 w3"),
            event(9, "message_completed", json!({"agent_id": "main", "content": "w1 w2 w3"})),
            event(10, "usage", json!({"agent_id": "main"})),
            event(11, "turn_ended", json!({"agent_id": "main", "reason": "final"})),
        ]);
        let text = t.final_text();
        assert_eq!(text.streamed, "w1 w2 w3");
        assert_eq!(text.completed.as_deref(), Some("w1 w2 w3"));
        assert_eq!(t.turn_end_reason().as_deref(), Some("final"));
    }
}
