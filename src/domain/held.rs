//! [`Held`]: a turn whose writes the store does not take.

/// A turn whose writes the store holds, as its streams on the owner are
/// told (`sessions/writer.rs`): not an event of the log, a notice of the
/// moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// When its writes first failed, Unix ms.
    pub since_ms: u64,
    /// How long they have been failing.
    pub held_for: std::time::Duration,
    /// The store's error (it names the failure, never a URL or secret).
    pub reason: String,
    /// The writer stopped trying (`store.hold_max_secs`): the turn stopped,
    /// and goes on from its last commit once the store answers.
    pub gave_up: bool,
}

impl Held {
    /// The notice as JSON fields every dialect's form carries.
    pub fn fields(&self) -> serde_json::Value {
        serde_json::json!({
            "held": "writes",
            "reason": self.reason,
            "since": self.since_ms,
            "heldSecs": self.held_for.as_secs(),
            "gaveUp": self.gave_up,
        })
    }

    /// A sentence for a client.
    pub fn message(&self) -> String {
        if self.gave_up {
            format!(
                "the store has not taken this turn's writes for {} s ({}); it stopped and goes on from its last \
                 saved step once the store answers: rejoin with Last-Event-ID",
                self.held_for.as_secs(),
                self.reason
            )
        } else {
            format!(
                "the store has not taken this turn's writes for {} s ({}); still trying",
                self.held_for.as_secs(),
                self.reason
            )
        }
    }
}
