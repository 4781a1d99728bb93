//! A client joining a session's stream in a dialect that restates the
//! session rather than resuming after a cursor (AG-UI: its clients keep no
//! event id, and a reconnecting page has nothing to resume from).
//!
//! While a turn runs, the join reads the session with its conversation as
//! of its last commit and follows the log from that commit: what the
//! commit holds (finished messages, tool calls, the state) is restated
//! from the read, and the step in progress — the events after the commit,
//! its streamed output — comes whole after it, then live. Read and cursor
//! come from one atomic load, so nothing is in both or in neither. A
//! session that no turn runs is replayed after the client's cursor, as
//! [`Sessions::follow`] does: there is nothing running to join.

use super::{Follower, SessionError, Sessions};
use crate::{domain::Session, principal::Principal, store::SessionKey};

/// A joined stream: the follower, and the session it restates (with its
/// conversation) when a turn runs.
pub struct Joined {
    pub follower: Follower,
    pub session: Option<Session>,
}

impl Sessions {
    /// Follows session `id` for a client that joins it (see the module
    /// docs): while a turn runs, from its last commit, with the session as
    /// of that commit; otherwise after `after`.
    pub async fn join(&self, principal: &Principal, id: &str, after: u64) -> Result<Joined, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, true).await?;
        if !session.status().is_active() {
            let follower = self.follow_loaded(key, &record, &session, after, after).await?;
            return Ok(Joined { follower, session: None });
        }
        let from = record.checkpoint_seq;
        let follower = self.follow_loaded(key, &record, &session, from, from).await?;
        Ok(Joined { follower, session: Some(session) })
    }
}
