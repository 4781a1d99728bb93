//! What both subscription tasks share ([`redis_notify`](super::redis_notify)
//! on one Redis, [`redis_notify_cluster`](super::redis_notify_cluster) on a
//! cluster): the requests the handle sends them, the channels they listen
//! to and what a message on one means, and the generation they bump when
//! every channel is confirmed subscribed.

use std::collections::HashMap;

use tokio::sync::{oneshot, watch};

use super::{Notice, SessionKey};

/// A request from the handle to its subscription task.
pub(super) enum Command {
    Watch {
        channel: String,
        key: SessionKey,
        done: oneshot::Sender<()>,
    },
    Unwatch {
        channel: String,
        done: oneshot::Sender<()>,
    },
    /// This replica's own channel (wake-ups for the sessions it runs) and
    /// its liveness channel: listened to from now on, like the hand-off
    /// channel.
    Listen {
        channel: String,
        live: Option<String>,
        done: oneshot::Sender<()>,
    },
}

struct Watched {
    key: SessionKey,
    count: usize,
}

/// The channels a subscription listens to, each with the session it is
/// about and how many watchers it has; and what a message on one means.
/// Both subscription tasks (one Redis, a cluster) keep theirs in one.
#[derive(Default)]
pub(super) struct Watches {
    channels: HashMap<String, Watched>,
    /// This replica's own channel, once known: its messages name the
    /// session (`w:<tenant>/<id>`, `f:<tenant>/<id>`).
    own: Option<String>,
    /// Its liveness channel (no messages: the subscription is the point).
    live: Option<String>,
}

impl Watches {
    /// Counts one more watcher of `channel`; true for its first (subscribe).
    pub(super) fn add(&mut self, channel: &str, key: SessionKey) -> bool {
        let watched = self.channels.entry(channel.to_string()).or_insert(Watched { key, count: 0 });
        watched.count += 1;
        watched.count == 1
    }

    /// Counts one fewer; true when that was the last (unsubscribe).
    pub(super) fn remove(&mut self, channel: &str) -> bool {
        let Some(watched) = self.channels.get_mut(channel) else { return false };
        watched.count -= 1;
        if watched.count > 0 {
            return false;
        }
        self.channels.remove(channel);
        true
    }

    pub(super) fn contains(&self, channel: &str) -> bool {
        self.channels.contains_key(channel)
            || self.own.as_deref() == Some(channel)
            || self.live.as_deref() == Some(channel)
    }

    /// Sets this replica's own and liveness channels; true if they are new
    /// (subscribe).
    pub(super) fn listen(&mut self, channel: String, live: Option<String>) -> bool {
        let new = self.own.as_ref() != Some(&channel) || self.live != live;
        self.own = Some(channel);
        self.live = live;
        new
    }

    pub(super) fn own(&self) -> Option<&String> {
        self.own.as_ref()
    }

    pub(super) fn live(&self) -> Option<&String> {
        self.live.as_ref()
    }

    pub(super) fn channels(&self) -> impl Iterator<Item = &String> {
        self.channels.keys()
    }

    /// The notice a message on `channel` carries: [`Notice::Orphaned`] on
    /// the hand-off channel `orphans`; none for a channel no longer watched
    /// (published just before an unsubscribe) or an unreadable payload
    /// (logged).
    pub(super) fn notice(&self, orphans: &str, channel: &str, payload: &[u8]) -> Option<Notice> {
        if channel == orphans {
            return Some(Notice::Orphaned);
        }
        if self.own.as_deref() == Some(channel) {
            let notice = parse_own(payload);
            if notice.is_none() {
                tracing::warn!(channel, "unreadable wake-up ignored");
            }
            return notice;
        }
        let watched = self.channels.get(channel)?;
        let notice = parse_notice(&watched.key, payload);
        if notice.is_none() {
            tracing::warn!(channel, "unreadable notification ignored");
        }
        notice
    }
}

/// Bumps `generation` (every channel, the liveness channel among them, is
/// subscribed now).
pub(super) fn bump(generation: &watch::Sender<u64>) {
    generation.send_modify(|g| *g += 1);
}

/// On a replica's own channel: `w:<tenant>/<id>` → [`Notice::Wake`] (a
/// decision, a cancel or a takeover of a session it runs), `f:<tenant>/<id>`
/// → [`Notice::Followed`] (another replica began following one).
fn parse_own(payload: &[u8]) -> Option<Notice> {
    let payload = std::str::from_utf8(payload).ok()?;
    let (kind, member) = payload.split_once(':')?;
    let key = SessionKey::from_member(member)?;
    match kind {
        "w" => Some(Notice::Wake { key }),
        "f" => Some(Notice::Followed { key }),
        _ => None,
    }
}

/// `e:<last_seq>:<replica>` (or `e:<last_seq>`) → [`Notice::Appended`];
/// `w` → [`Notice::Wake`].
fn parse_notice(key: &SessionKey, payload: &[u8]) -> Option<Notice> {
    let payload = std::str::from_utf8(payload).ok()?;
    if payload == "w" {
        return Some(Notice::Wake { key: key.clone() });
    }
    let appended = payload.strip_prefix("e:")?;
    let (last_seq, by) = match appended.split_once(':') {
        Some((seq, replica)) => (seq, Some(replica.to_string())),
        None => (appended, None),
    };
    Some(Notice::Appended { key: key.clone(), last_seq: last_seq.parse().ok()?, by })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_become_notices() {
        let key = SessionKey::new("acme", "s1");
        let appended =
            |last_seq, by: Option<&str>| Notice::Appended { key: key.clone(), last_seq, by: by.map(Into::into) };
        assert_eq!(parse_notice(&key, b"e:42:replica-a"), Some(appended(42, Some("replica-a"))));
        assert_eq!(parse_notice(&key, b"e:42"), Some(appended(42, None)));
        assert_eq!(parse_notice(&key, b"e:x:a"), None);
        assert_eq!(parse_notice(&key, b"w"), Some(Notice::Wake { key: key.clone() }));
        assert_eq!(parse_notice(&key, b"e:"), None);
        assert_eq!(parse_notice(&key, b"x"), None);
        assert_eq!(parse_notice(&key, &[0xff]), None);
    }

    #[test]
    fn an_instances_own_channel_names_the_session() {
        let key = SessionKey::new("acme", "s1");
        assert_eq!(parse_own(b"w:acme/s1"), Some(Notice::Wake { key: key.clone() }));
        assert_eq!(parse_own(b"f:acme/s1"), Some(Notice::Followed { key }));
        assert_eq!(parse_own(b"w:acme"), None);
        assert_eq!(parse_own(b"x:acme/s1"), None);
        assert_eq!(parse_own(b"w"), None);
    }
}
