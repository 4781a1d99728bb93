//! Following a session's title: after a stream's turn ended announcing one
//! (`turn_ended` with `title_pending`), dialects that show titles follow
//! the session on for its `title_updated` (see `api/stream.rs`). The title
//! is made by the session's owner after the turn's end was committed
//! (`orchestrator/title.rs`), so the stream's last frames for the turn never
//! wait for it; a session whose owner died before making it is taken over
//! here, like any read of it.

use super::{Follower, SessionError, Sessions, ownership};
use crate::{principal::Principal, store::SessionKey};

impl Sessions {
    /// Follows session `id` after `after` for its title only (see
    /// [`Follower`]). `None` when there is nothing to wait for: no title is
    /// due and nothing was logged after `after`.
    pub async fn follow_title(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
    ) -> Result<Option<Follower>, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, false).await?;
        // Read before the log (the follow reads it): a title made after
        // this read is in that read, or announced to the follow.
        let pending = session.title_pending();
        if !pending && record.last_seq <= after {
            return Ok(None);
        }
        if session.needs_owner() {
            ownership::take_over_if_orphaned(self, &key, &record).await;
        }
        let follower = self.inner.hub.follow(key, after, after, !pending).await;
        Ok(Some(follower.title_only()))
    }
}
