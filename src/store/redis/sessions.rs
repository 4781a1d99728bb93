//! Sessions in Redis: one `HGETALL` and the stream's newest entry (plus
//! `LRANGE` for the conversation) to read, one `lua/commit.lua` per commit
//! to write; the writer's round ([`SessionStore::write`]): every session's
//! streamed events as plain `XADD`s with explicit ids, then its commit, all
//! in one pipeline; relay decisions and cancel requests (`lua/decide.lua`,
//! `lua/cancel.lua`).
//!
//! An owner's plain appends are fenced by their ids, `<epoch>-<seq>`: a
//! takeover's commit moves the stream's top to its own epoch, and Redis
//! refuses an id not above the top. A refused append is one of two things,
//! told apart by the state hash: the same tenure's entry, already there
//! from an attempt whose answer was lost (the hash still names this owner
//! and epoch), or a later tenure's fence. `NOMKSTREAM` keeps a late append
//! from making a deleted session's stream again.

use std::collections::HashMap;

use async_trait::async_trait;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::{
    RedisStore,
    conn::{Conn, Redo, Spread},
    log::Entry,
    map_err,
};
use crate::store::{
    Append, CancelRequest, Commit, CommitError, Committed, Conflict, Decided, FIRST_EPOCH, Fence, Loaded,
    MessagesWrite, OwnerChange, Record, SessionKey, SessionStore, SessionWrite, StoreError, Wrote, is_active,
};

impl RedisStore {
    /// A session's state, with its conversation when `history`, and the
    /// newest `newest` entries of its log (newest first), in one
    /// transaction (the keys share a hash tag): the log's end and the
    /// conversation are the ones the state describes, never ones a commit
    /// between the reads changed. The owner's plain appends since its last
    /// commit are in the stream only: its newest entry says where the log
    /// ends.
    async fn read_session(
        &self,
        key: &SessionKey,
        history: bool,
        newest: usize,
    ) -> Result<Option<(Record, Vec<Entry>)>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HGETALL").arg(self.keys.state(key));
        pipe.cmd("XREVRANGE").arg(self.keys.events(key)).arg("+").arg("-").arg("COUNT").arg(newest.max(1));
        if history {
            pipe.cmd("LRANGE").arg(self.keys.messages(key)).arg(0).arg(-1);
        }
        let mut conn = self.connection();
        let (fields, newest, messages): (HashMap<String, String>, Vec<Entry>, Option<Vec<String>>) = if history {
            let (fields, newest, messages): (_, _, Vec<String>) = pipe.query_async(&mut conn).await.map_err(map_err)?;
            (fields, newest, Some(messages))
        } else {
            let (fields, newest) = pipe.query_async(&mut conn).await.map_err(map_err)?;
            (fields, newest, None)
        };
        if fields.is_empty() {
            return Ok(None);
        }
        let mut record = record(fields, messages)?;
        if let Some((id, _)) = newest.first() {
            record.last_seq = record.last_seq.max(super::log::parse_seq(id)?);
        }
        Ok(Some((record, newest)))
    }

    /// The `commit.lua` call of one commit (see the script for ARGV), as
    /// one `EVALSHA` command written straight into its buffer: a
    /// `ScriptInvocation` would hold each argument in a buffer of its own
    /// and copy them all again into the command (twice a chat, ≈ 35
    /// arguments each). A Redis that lost the script answers `NOSCRIPT`,
    /// and [`RedisStore::round`] loads it and sends the commit again.
    fn commit_command(&self, commit: &Commit) -> redis::Cmd {
        let (kind, version, epoch, fourth, owner) = match &commit.fence {
            Fence::Absent | Fence::New => ("absent", 0, 0, 0, ""),
            Fence::Unchanged { version, owner, epoch, last_seq } => {
                ("unchanged", *version, *epoch, *last_seq, owner.as_deref().unwrap_or(""))
            }
            Fence::Owner { instance, epoch, n, after } => ("owner", *after, *epoch, *n, instance.as_str()),
        };
        let (change, new_owner) = match &commit.owner {
            OwnerChange::Keep => ("keep", ""),
            OwnerChange::Acquire(instance) => ("acquire", instance.as_str()),
            OwnerChange::Release => ("release", ""),
        };
        let (doc, status) = commit.state.as_ref().map_or(("", ""), |s| (s.doc.as_str(), s.status));
        let (op, messages): (&str, &[String]) = match &commit.messages {
            MessagesWrite::Keep => ("keep", &[]),
            MessagesWrite::Append(m) => ("append", m),
            MessagesWrite::Replace(m) => ("replace", m),
        };
        let empty = crate::store::WorkspaceWrite::default();
        let files = commit.workspace.as_ref().unwrap_or(&empty);
        let mut flags = String::with_capacity(3);
        for (set, flag) in [(commit.clear_cancel, 'c'), (commit.turn_start, 't'), (!commit.renew, 'k')] {
            if set {
                flags.push(flag);
            }
        }
        let texts = messages.iter().chain(&commit.events).chain(&commit.open_relays).chain(&commit.close_relays);
        // EVALSHA, its hash and key count, the keys, ARGV[1..26], the rest.
        let files_args = 2 * (files.blobs.len() + files.set.len()) + files.remove.len() + files.drop_blobs.len();
        let args = 3 + 5 + 26 + texts.clone().count() + files_args;
        let bytes = 512 + doc.len() + texts.clone().map(String::len).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(args, bytes);
        cmd.arg("EVALSHA").arg(self.scripts.commit.get_hash()).arg(5);
        cmd.arg(self.keys.state(&commit.key))
            .arg(self.keys.messages(&commit.key))
            .arg(self.keys.events(&commit.key))
            .arg(self.keys.manifest(&commit.key))
            .arg(self.keys.blobs(&commit.key));
        cmd.arg(kind)
            .arg(version)
            .arg(epoch)
            .arg(fourth)
            .arg(owner)
            .arg(change)
            .arg(new_owner)
            .arg(doc)
            .arg(status)
            .arg(op)
            .arg(messages.len())
            .arg(commit.events.len())
            .arg(commit.open_relays.len())
            .arg(commit.close_relays.len())
            .arg(flags)
            .arg(self.session_ttl_ms)
            .arg(self.max_len)
            .arg(self.keys.channel(&commit.key))
            .arg(&commit.by);
        cmd.arg(files.blobs.len()).arg(files.set.len()).arg(files.remove.len()).arg(files.drop_blobs.len());
        cmd.arg(self.publish).arg(self.keys.instance_channel_prefix()).arg(commit.key.to_member());
        for text in texts {
            cmd.arg(text);
        }
        for (digest, content) in &files.blobs {
            cmd.arg(digest).arg(content.as_ref());
        }
        for (path, entry) in &files.set {
            cmd.arg(path).arg(entry.encode());
        }
        for text in files.remove.iter().chain(&files.drop_blobs) {
            cmd.arg(text);
        }
        cmd
    }

    /// One batch ([`Spread`]): each part's appends (and their
    /// announcement), then its commit's script, in order (one group: on a
    /// cluster they go to the session's node as one pipeline), and after
    /// them the ownership index commands the commit implies (hints for the
    /// takeover sweep, sent even if the script refuses: the sweep re-checks
    /// what it finds). On a cluster they live in other slots than the
    /// session's: a second write that may fail alone. An entry lost that
    /// way is written again from the session's state
    /// ([`repair`](super::repair)); the state hash, not the index, says who
    /// owns it.
    /// Returns each part's replies, in its order; with
    /// `store.wait_replicas`, only once that many replicas hold the round's
    /// writes.
    async fn commit_round(&self, conn: &mut Conn, parts: &[Part<'_>]) -> Result<Vec<Replies>, RedisError> {
        // Each append, each announcement, each commit and the hints it may
        // imply (at most three, a create's listing aside).
        let commands =
            parts.iter().map(|p| p.append.map_or(0, |a| a.events.len() + 1) + p.commit.map_or(0, |_| 4)).sum();
        let mut spread = Spread::with_capacity(commands);
        // Per commit, in order: the commands its creation queued in a
        // `MULTI` (its replies are those and `MULTI`'s and `EXEC`'s), or
        // `None` for a script (one reply).
        let mut queued: Vec<Option<usize>> = Vec::with_capacity(parts.len());
        let mut id = String::new();
        for (group, part) in parts.iter().enumerate() {
            if let Some(append) = part.append {
                let stream = self.keys.events(part.key);
                for (i, event) in append.events.iter().enumerate() {
                    entry_id(&mut id, append.epoch, append.first_seq + i as u64);
                    // Sized up front: built per token, it would otherwise
                    // grow its buffers a few times each.
                    let mut xadd = redis::Cmd::with_capacity(8, stream.len() + id.len() + event.len() + 40);
                    xadd.arg("XADD")
                        .arg(&stream)
                        .arg("NOMKSTREAM")
                        .arg("MAXLEN")
                        .arg(self.max_len)
                        .arg(&id)
                        .arg("e")
                        .arg(event);
                    spread.answered_in(group).add_command(xadd);
                }
                // A commit after them announces them with its own events.
                if append.announce && part.commit.is_none() {
                    let notice = format!("e:{}:{}", append.last_seq(), append.instance);
                    spread.answered_in(group).cmd(self.publish).arg(self.keys.channel(part.key)).arg(notice);
                }
            }
            let Some(commit) = part.commit else { continue };
            match self.creation(commit) {
                Some(commands) => {
                    queued.push(Some(commands.len()));
                    spread.answered_in(group).cmd("MULTI");
                    for command in commands {
                        spread.answered_in(group).add_command(command);
                    }
                    spread.answered_in(group).cmd("EXEC");
                }
                None => {
                    queued.push(None);
                    spread.answered_in(group).add_command(self.commit_command(commit));
                }
            }
            self.hints(&mut spread, commit);
        }
        let replies = self.send(conn, spread).await?;
        let mut replies = replies.into_iter();
        let mut queued = queued.into_iter();
        let mut out = Vec::with_capacity(parts.len());
        for part in parts {
            let appended = part.append.map_or(0, |a| a.events.len());
            let announced = usize::from(part.append.is_some_and(|a| a.announce) && part.commit.is_none());
            let appends: Vec<_> = replies.by_ref().take(appended).collect();
            let _announcement = replies.by_ref().take(announced).count();
            let commit = part.commit.map(|commit| match queued.next().expect("one entry per commit") {
                Some(queued) => created(replies.by_ref().take(queued + 2), commit),
                None => replies.next().expect("a reply per command"),
            });
            out.push(Replies { appends, commit });
        }
        let wrote =
            out.iter().any(|r| r.appends.iter().any(Result::is_ok) || r.commit.as_ref().is_some_and(Result::is_ok));
        if wrote && self.wait_replicas.0 > 0 {
            let written: Vec<String> = parts.iter().map(|p| self.keys.state(p.key)).collect();
            self.replicated(conn, &written, "commit").await?;
        }
        Ok(out)
    }

    /// A creating commit of a session whose id was made here
    /// ([`Fence::New`]), as the plain commands it comes to, for one `MULTI`
    /// … `EXEC`: the session cannot exist, so the commit script's reads and
    /// checks have nothing to find, and its writes are cheaper sent as
    /// commands (the script's invocation and each `redis.call` cost Redis
    /// more than the commands themselves: `load-tests/commit_cost.py`).
    /// What it writes is what the script writes for such a commit: the
    /// state hash of tenure 1 (commit number 0), the conversation, the
    /// events `1-1` … `1-n`, the keys' expiry. `None` for any other
    /// commit, and for a creation the script must write (no events, files,
    /// a release while draining): those go through the script.
    fn creation(&self, commit: &Commit) -> Option<Vec<redis::Cmd>> {
        let plain = commit.fence == Fence::New
            && !commit.events.is_empty()
            && commit.workspace.is_none()
            && commit.close_relays.is_empty()
            && !commit.clear_cancel
            && commit.renew;
        let (true, OwnerChange::Acquire(owner), Some(state)) = (plain, &commit.owner, &commit.state) else {
            return None;
        };
        let messages: Option<&[String]> = match &commit.messages {
            MessagesWrite::Keep => None,
            MessagesWrite::Append(m) if m.is_empty() => None,
            MessagesWrite::Append(m) | MessagesWrite::Replace(m) => Some(m),
        };
        let (state_key, messages_key, events_key) =
            (self.keys.state(&commit.key), self.keys.messages(&commit.key), self.keys.events(&commit.key));
        let last = commit.events.len() as u64;
        let mut commands = Vec::with_capacity(commit.events.len() + 5);
        let mut id = String::new();
        // Each command sized up front (growing them was most of the cost).
        for (i, event) in commit.events.iter().enumerate() {
            entry_id(&mut id, FIRST_EPOCH, i as u64 + 1);
            let mut xadd = redis::Cmd::with_capacity(7, events_key.len() + id.len() + event.len() + 32);
            xadd.arg("XADD").arg(&events_key).arg("MAXLEN").arg(self.max_len).arg(&id).arg("e").arg(event);
            commands.push(xadd);
        }
        let fields = 13 + commit.open_relays.len();
        let relay_bytes: usize = commit.open_relays.iter().map(|r| r.len() + 3).sum();
        let mut hset = redis::Cmd::with_capacity(2 + 2 * fields, state_key.len() + state.doc.len() + relay_bytes + 160);
        hset.arg("HSET").arg(&state_key);
        hset.arg("v").arg(1).arg("doc").arg(&state.doc).arg("st").arg(state.status);
        hset.arg("own").arg(owner).arg("lo").arg(owner).arg("ep").arg(FIRST_EPOCH).arg("cn").arg(0);
        hset.arg("seq").arg(last).arg("ck").arg(last);
        hset.arg("eps").arg(FIRST_TENURE);
        if commit.turn_start {
            hset.arg("ts").arg(0);
        }
        if let Some(messages) = messages {
            hset.arg("nm").arg(messages.len());
        }
        for relay in &commit.open_relays {
            hset.arg(format!("r:{relay}")).arg("1");
        }
        commands.push(hset);
        let expire = |key: &str| {
            let mut pexpire = redis::Cmd::with_capacity(3, key.len() + 28);
            pexpire.arg("PEXPIRE").arg(key).arg(self.session_ttl_ms);
            pexpire
        };
        commands.push(expire(&state_key));
        commands.push(expire(&events_key));
        if let Some(messages) = messages.filter(|m| !m.is_empty()) {
            let bytes = messages_key.len() + messages.iter().map(String::len).sum::<usize>() + 5;
            let mut rpush = redis::Cmd::with_capacity(2 + messages.len(), bytes);
            rpush.arg("RPUSH").arg(&messages_key).arg(messages);
            commands.push(rpush);
            commands.push(expire(&messages_key));
        }
        Some(commands)
    }

    /// The ownership index commands `commit` implies, as hints.
    fn hints(&self, spread: &mut Spread, commit: &Commit) {
        let member = commit.key.to_member();
        // A create's list entries: hints in the tenant's slot, checked
        // (and pruned if the create was refused) by whoever lists.
        if let Some(listing) = &commit.listing {
            let position = crate::store::ListPosition { created_ms: listing.created_ms, id: commit.key.id.to_string() };
            for scope in listing.scopes(&commit.key.tenant) {
                let (list, position) = (self.list_key(&scope), position.to_member());
                let redo = Redo::Listed { key: commit.key.clone(), list: list.clone(), position: position.clone() };
                spread.hint_or_redo(redo).cmd("ZADD").arg(list).arg(0).arg(position);
            }
        }
        match &commit.owner {
            OwnerChange::Keep => {}
            OwnerChange::Acquire(instance) => {
                spread
                    .hint_or_redo(Redo::Ownership(commit.key.clone()))
                    .cmd("SADD")
                    .arg(self.keys.owned_of(instance, &commit.key))
                    .arg(&member);
                // A session being created was never an orphan.
                if !commit.fence.creates() {
                    spread.hint().cmd("SREM").arg(self.keys.orphans_of(&commit.key)).arg(&member);
                }
            }
            OwnerChange::Release => {
                if let Fence::Owner { instance, .. } = &commit.fence {
                    spread.hint().cmd("SREM").arg(self.keys.owned_of(instance, &commit.key)).arg(&member);
                }
                let active = commit.state.as_ref().is_none_or(|s| is_active(s.status));
                if active {
                    spread
                        .hint_or_redo(Redo::Ownership(commit.key.clone()))
                        .cmd("SADD")
                        .arg(self.keys.orphans_of(&commit.key))
                        .arg(&member);
                    spread.hint().cmd("PUBLISH").arg(self.keys.orphans_channel()).arg("o");
                }
            }
        }
    }

    /// Sends `parts` as one round ([`RedisStore::commit_round`]); after a
    /// Redis restart (or SCRIPT FLUSH) the commit script is unknown: it is
    /// loaded and the parts it refused sent again (their scripts wrote
    /// nothing; their appends answer as already there).
    async fn round(&self, parts: &[Part<'_>]) -> Vec<Result<Replies, StoreError>> {
        let mut conn = self.connection();
        let mut replies = match self.commit_round(&mut conn, parts).await {
            Ok(replies) => replies.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(error) => {
                let error = map_err(error);
                return parts.iter().map(|_| Err(error.clone())).collect();
            }
        };
        let no_script = |r: &Result<Replies, StoreError>| matches!(r, Ok(Replies { commit: Some(Err(e)), .. }) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript));
        let unknown: Vec<usize> = (0..replies.len()).filter(|&i| no_script(&replies[i])).collect();
        if !unknown.is_empty() {
            let again: Vec<Part<'_>> = unknown.iter().map(|&i| parts[i]).collect();
            let rerun = match self.scripts.commit.prepare_invoke().load_async(&mut conn).await {
                Ok(_) => self.commit_round(&mut conn, &again).await,
                Err(error) => Err(error),
            };
            match rerun {
                Ok(rerun) => {
                    for (i, reply) in unknown.into_iter().zip(rerun) {
                        replies[i] = Ok(reply);
                    }
                }
                Err(error) => {
                    for i in unknown {
                        replies[i] = Err(map_err(error.clone()));
                    }
                }
            }
        }
        replies
    }

    /// Whether the appends of `append` that Redis refused as not above the
    /// stream's top are this tenure's own (an earlier attempt's, whose
    /// answer was lost): the state hash still names this owner and epoch.
    /// Otherwise a later tenure fenced them (or the session is gone).
    async fn still_owner(&self, key: &SessionKey, append: &Append) -> Result<bool, StoreError> {
        let (owner, epoch): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.keys.state(key))
            .arg("own")
            .arg("ep")
            .query_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(owner.as_deref() == Some(&*append.instance) && epoch == Some(append.epoch))
    }

    /// With `store.wait_replicas`: returns once that many replicas hold
    /// every write `conn` made to the slots of `keys`, an error if they do
    /// not within the timeout. A write applied on its primary but not known
    /// to survive the primary's failover is not acknowledged: the caller
    /// answers a failure, and a retry finds it done (a commit's script
    /// answers "duplicate"; a decision "already decided") or redoes it.
    async fn replicated(&self, conn: &mut Conn, keys: &[String], what: &str) -> Result<(), RedisError> {
        let (replicas, timeout_ms) = self.wait_replicas;
        if replicas == 0 {
            return Ok(());
        }
        let reached = conn.wait_replicas(replicas, timeout_ms, keys).await?;
        if reached < replicas {
            return Err(RedisError::from((
                ErrorKind::Io,
                "write not acknowledged",
                format!("{what}: {reached} of {replicas} replica(s) within {timeout_ms} ms"),
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl SessionStore for RedisStore {
    async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<Record>, StoreError> {
        Ok(self.read_session(key, history, 1).await?.map(|(record, _)| record))
    }

    async fn load_with_tail(&self, key: &SessionKey, limit: usize) -> Result<Option<Loaded>, StoreError> {
        // The newest `limit + 1` entries: when the checkpoint's next seq is
        // among them, they hold the whole tail.
        let Some((record, newest)) = self.read_session(key, true, limit + 1).await? else { return Ok(None) };
        let after = record.checkpoint_seq;
        let mut tail = Vec::with_capacity(newest.len());
        for entry in newest.into_iter().rev() {
            let event = super::log::stored_event(entry)?;
            if event.seq > after {
                tail.push(event);
            }
        }
        let whole = record.last_seq <= after || tail.first().is_some_and(|first| first.seq == after + 1);
        Ok(Some(Loaded { tail: (whole && tail.len() <= limit).then_some(tail), record }))
    }

    async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>> {
        if commits.is_empty() {
            return Vec::new();
        }
        let parts: Vec<Part<'_>> =
            commits.iter().map(|c| Part { key: &c.key, append: None, commit: Some(c) }).collect();
        let replies = self.round(&parts).await;
        replies
            .into_iter()
            .zip(commits)
            .map(|(replies, commit)| {
                let reply = replies.map_err(CommitError::Store)?.commit.expect("a commit's reply");
                outcome(reply, commit)
            })
            .collect()
    }

    async fn write(&self, writes: &[SessionWrite]) -> Vec<Result<Wrote, CommitError>> {
        if writes.is_empty() {
            return Vec::new();
        }
        let parts: Vec<Part<'_>> =
            writes.iter().map(|w| Part { key: &w.key, append: w.append.as_ref(), commit: w.commit.as_ref() }).collect();
        let replies = self.round(&parts).await;
        let mut results = Vec::with_capacity(writes.len());
        for (write, replies) in writes.iter().zip(replies) {
            let result = match replies {
                Err(error) => Err(CommitError::Store(error)),
                Ok(replies) => match appended(&replies.appends) {
                    Appended::Yes => match (replies.commit, &write.commit) {
                        (Some(reply), Some(commit)) => outcome(reply, commit).map(|c| Wrote { committed: Some(c) }),
                        _ => Ok(Wrote::default()),
                    },
                    // The commit after them checked the same fence.
                    Appended::Refused => match (replies.commit, &write.commit) {
                        (Some(reply), Some(commit)) => outcome(reply, commit).map(|c| Wrote { committed: Some(c) }),
                        _ => {
                            let append = write.append.as_ref().expect("refused appends exist");
                            match self.still_owner(&write.key, append).await {
                                Ok(true) => Ok(Wrote::default()),
                                Ok(false) => Err(CommitError::Conflict(Conflict::Fenced)),
                                Err(error) => Err(CommitError::Store(error)),
                            }
                        }
                    },
                    Appended::Gone => Err(CommitError::Conflict(Conflict::Fenced)),
                    Appended::Failed(error) => Err(CommitError::Store(error)),
                    Appended::Gap => Err(CommitError::Store(StoreError::Corrupt(
                        "an append was refused between two that landed: the log has a gap".into(),
                    ))),
                },
            };
            results.push(result);
        }
        results
    }

    async fn decide(&self, key: &SessionKey, relay_id: &str, decision: &str) -> Result<Decided, StoreError> {
        let mut conn = self.connection();
        let answer: String = self
            .scripts
            .decide
            .key(self.keys.state(key))
            .arg(relay_id)
            .arg(decision)
            .arg(self.keys.channel(key))
            .arg(self.publish)
            .arg(self.keys.instance_channel_prefix())
            .arg(key.to_member())
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        match answer.as_str() {
            "recorded" => {
                self.replicated(&mut conn, &[self.keys.state(key)], "relay decision").await.map_err(map_err)?;
                Ok(Decided::Recorded)
            }
            "decided" => Ok(Decided::AlreadyDecided),
            "missing" => Ok(Decided::Missing),
            other => Err(StoreError::Corrupt(format!("decide script answered {other:?}"))),
        }
    }

    async fn request_cancel(&self, key: &SessionKey) -> Result<CancelRequest, StoreError> {
        let mut conn = self.connection();
        let answer: String = self
            .scripts
            .cancel
            .key(self.keys.state(key))
            .arg(self.keys.channel(key))
            .arg(self.publish)
            .arg(self.keys.instance_channel_prefix())
            .arg(key.to_member())
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(match answer.as_str() {
            "recorded" => {
                self.replicated(&mut conn, &[self.keys.state(key)], "cancel request").await.map_err(map_err)?;
                CancelRequest::Recorded
            }
            "missing" => CancelRequest::Missing,
            status => CancelRequest::NotRunning(status.to_string()),
        })
    }
}

/// One session's part of a round: its appends, then its commit.
#[derive(Clone, Copy)]
struct Part<'a> {
    key: &'a SessionKey,
    append: Option<&'a Append>,
    commit: Option<&'a Commit>,
}

/// A part's replies: one per append, and the commit script's.
struct Replies {
    appends: Vec<redis::RedisResult<Value>>,
    commit: Option<redis::RedisResult<Value>>,
}

/// What became of a part's appends.
#[derive(Debug)]
enum Appended {
    /// All landed (or there were none).
    Yes,
    /// Some were refused as not above the stream's top, the others landed:
    /// this tenure's own entries, or a later tenure's fence.
    Refused,
    /// The stream does not exist (`NOMKSTREAM`): the session is gone.
    Gone,
    /// One failed otherwise (the round is sent again).
    Failed(StoreError),
    /// One failed and a later one landed.
    Gap,
}

/// Redis's answer to an `XADD` whose id is not above the stream's top.
const NOT_ABOVE_TOP: &str = "equal or smaller than the target stream top item";

fn appended(replies: &[redis::RedisResult<Value>]) -> Appended {
    let mut outcome = Appended::Yes;
    for reply in replies {
        match (reply, &outcome) {
            (Ok(Value::Nil), _) => return Appended::Gone,
            (Ok(_), Appended::Failed(_)) => return Appended::Gap,
            (Ok(_), _) => {}
            (Err(e), Appended::Yes | Appended::Refused) if e.to_string().contains(NOT_ABOVE_TOP) => {
                outcome = Appended::Refused;
            }
            (Err(e), Appended::Yes | Appended::Refused) => outcome = Appended::Failed(map_err(e.clone())),
            (Err(_), _) => {}
        }
    }
    outcome
}

/// The commit script's reply as an outcome.
fn outcome(reply: redis::RedisResult<Value>, commit: &Commit) -> Result<Committed, CommitError> {
    let reply = reply.map_err(|e| CommitError::Store(map_err(e)))?;
    let corrupt = |what: &str| CommitError::Store(StoreError::Corrupt(format!("commit script answered {what}")));
    let Value::Array(items) = reply else { return Err(corrupt("a non-array")) };
    let word = match items.first() {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::SimpleString(text)) => text.clone(),
        _ => return Err(corrupt("no status")),
    };
    let number = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| corrupt("a negative number")),
        _ => Err(corrupt("a missing number")),
    };
    let followed = |i: usize| Ok::<bool, CommitError>(number(i)? == 1);
    match word.as_str() {
        "ok" => Ok(Committed {
            version: number(1)?,
            epoch: number(2)?,
            first_seq: number(3)?,
            last_seq: number(4)?,
            followed_elsewhere: followed(5)?,
        }),
        // Already applied by an earlier attempt whose answer was lost; no
        // later commit of the tenure exists yet, so its events end the log.
        "duplicate" => {
            let last_seq = number(3)?;
            let first_seq = (last_seq + 1).saturating_sub(commit.events.len() as u64);
            Ok(Committed {
                version: number(1)?,
                epoch: number(2)?,
                first_seq,
                last_seq,
                followed_elsewhere: followed(4)?,
            })
        }
        // An append of the same round did not land: nothing was written.
        "behind" => Err(CommitError::Store(StoreError::Unavailable(format!(
            "the log ends at {} before the commit's appends",
            number(1)?
        )))),
        "exists" => Err(CommitError::Conflict(Conflict::Exists)),
        "changed" => Err(CommitError::Conflict(Conflict::Changed)),
        "fenced" => Err(CommitError::Conflict(Conflict::Fenced)),
        other => Err(corrupt(other)),
    }
}

/// The replies of a creation's `MULTI`, its queued commands and `EXEC`
/// ([`RedisStore::creation`]) as the commit script would have answered:
/// made as foreseen, or the first error.
fn created(replies: impl Iterator<Item = redis::RedisResult<Value>>, commit: &Commit) -> redis::RedisResult<Value> {
    // `MULTI`'s answer, each command's `QUEUED`, then `EXEC`'s: the first
    // error stands (the iterator is consumed whole either way).
    let mut exec = Ok(Value::Nil);
    for reply in replies {
        if exec.is_ok() {
            exec = reply;
        }
    }
    let Value::Array(results) = exec? else {
        return Err(RedisError::from((ErrorKind::Io, "a creation's transaction was not run")));
    };
    if let Some(error) = results.into_iter().find_map(|r| r.extract_error().err()) {
        return Err(error);
    }
    let last = commit.events.len() as i64;
    Ok(Value::Array(vec![
        Value::SimpleString("ok".into()),
        Value::Int(1),
        Value::Int(FIRST_EPOCH as i64),
        Value::Int(1),
        Value::Int(last),
        Value::Int(0),
    ]))
}

/// The state's `eps` of a session created in [`FIRST_EPOCH`]: that tenure's
/// entries begin at seq 1 (see `lua/commit.lua`).
const FIRST_TENURE: &str = "1:1;";

/// The state hash (and conversation) as a [`Record`].
fn record(mut fields: HashMap<String, String>, messages: Option<Vec<String>>) -> Result<Record, StoreError> {
    let number = |fields: &HashMap<String, String>, name: &str| -> Result<u64, StoreError> {
        match fields.get(name) {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| StoreError::Corrupt(format!("state field {name} = {text:?}"))),
        }
    };
    let doc = fields.remove("doc").ok_or_else(|| StoreError::Corrupt("state hash lacks doc".into()))?;
    let mut relays: Vec<(String, Option<String>)> = fields
        .iter()
        .filter_map(|(field, value)| {
            let id = field.strip_prefix("r:")?;
            Some((id.to_string(), (value != "1").then(|| value.clone())))
        })
        .collect();
    relays.sort();
    Ok(Record {
        version: number(&fields, "v")?,
        doc,
        owner: fields.get("own").filter(|o| !o.is_empty()).cloned(),
        last_owner: fields.get("lo").filter(|o| !o.is_empty()).cloned(),
        epoch: number(&fields, "ep")?,
        last_seq: number(&fields, "seq")?,
        checkpoint_seq: number(&fields, "ck")?,
        turn_start_seq: number(&fields, "ts")?,
        message_count: number(&fields, "nm")?,
        messages,
        cancel_requested: fields.contains_key("cancel"),
        relays,
    })
}

/// Writes the stream entry id `<epoch>-<seq>` into `id` (cleared first):
/// made once per streamed token, so without `core::fmt`.
fn entry_id(id: &mut String, epoch: u64, seq: u64) {
    id.clear();
    id.push_str(itoa::Buffer::new().format(epoch));
    id.push('-');
    id.push_str(itoa::Buffer::new().format(seq));
}
