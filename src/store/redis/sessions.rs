//! Sessions in Redis: one `HGETALL` (plus `LRANGE` for the conversation) to
//! read, one `lua/commit.lua` per commit to write, all of a batch's commits
//! in one pipeline; relay decisions and cancel requests (`lua/decide.lua`,
//! `lua/cancel.lua`).

use std::collections::HashMap;

use async_trait::async_trait;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::{
    RedisStore,
    conn::{Conn, Spread},
    map_err,
    repair::Redo,
};
use crate::store::{
    CancelRequest, Commit, CommitError, Committed, Conflict, Decided, Fence, MessagesWrite, OwnerChange, Record,
    SessionKey, SessionStore, StoreError, is_active,
};

impl RedisStore {
    /// The `commit.lua` invocation of one commit (see the script for ARGV).
    fn commit_invocation<'a>(&'a self, commit: &'a Commit) -> redis::ScriptInvocation<'a> {
        let (kind, version, epoch, fourth, owner) = match &commit.fence {
            Fence::Absent => ("absent", 0, 0, 0, ""),
            Fence::Unchanged { version, owner, epoch, last_seq } => {
                ("unchanged", *version, *epoch, *last_seq, owner.as_deref().unwrap_or(""))
            }
            Fence::Owner { instance, epoch, n } => ("owner", 0, *epoch, *n, instance.as_str()),
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
        let mut script = self.scripts.commit.prepare_invoke();
        script
            .key(self.keys.state(&commit.key))
            .key(self.keys.messages(&commit.key))
            .key(self.keys.events(&commit.key))
            .key(self.keys.manifest(&commit.key))
            .key(self.keys.blobs(&commit.key))
            .arg(kind)
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
            .arg(format!("{}{}", if commit.clear_cancel { "c" } else { "" }, if commit.turn_start { "t" } else { "" }))
            .arg(self.session_ttl_ms)
            .arg(self.max_len)
            .arg(self.keys.channel(&commit.key))
            .arg(&commit.by);
        let empty = crate::store::WorkspaceWrite::default();
        let files = commit.workspace.as_ref().unwrap_or(&empty);
        script.arg(files.blobs.len()).arg(files.set.len()).arg(files.remove.len()).arg(files.drop_blobs.len());
        script.arg(self.publish);
        for text in messages.iter().chain(&commit.events).chain(&commit.open_relays).chain(&commit.close_relays) {
            script.arg(text);
        }
        for (digest, content) in &files.blobs {
            script.arg(digest).arg(content.as_ref());
        }
        for (path, entry) in &files.set {
            script.arg(path).arg(entry.encode());
        }
        for text in files.remove.iter().chain(&files.drop_blobs) {
            script.arg(text);
        }
        script
    }

    /// One batch ([`Spread`]): each commit's script, and after it the
    /// ownership index commands it implies (hints for the takeover sweep,
    /// sent even if the script refuses: the sweep re-checks what it finds).
    /// On a cluster they live in other slots than the session's: a second
    /// write that may fail alone. An entry lost that way is written again
    /// from the session's state ([`repair`](super::repair)); the state hash,
    /// not the index, says who owns it.
    /// Returns the scripts' replies; with `store.wait_replicas`, only once
    /// that many replicas hold the round's writes.
    async fn commit_round(
        &self,
        conn: &mut Conn,
        commits: &[&Commit],
    ) -> Result<Vec<redis::RedisResult<Value>>, RedisError> {
        let invocations: Vec<_> = commits.iter().map(|c| self.commit_invocation(c)).collect();
        let mut spread = Spread::default();
        for (commit, invocation) in commits.iter().zip(&invocations) {
            spread.answered().invoke_script(invocation);
            let member = commit.key.to_member();
            // A create's list entries: hints in the tenant's slot, checked
            // (and pruned if the create was refused) by whoever lists.
            if let Some(listing) = &commit.listing {
                let position =
                    crate::store::ListPosition { created_ms: listing.created_ms, id: commit.key.id.to_string() };
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
                    if commit.fence != Fence::Absent {
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
        let replies = self.send(conn, spread).await?;
        debug_assert_eq!(replies.len(), commits.len());
        if replies.iter().any(Result::is_ok) {
            let written: Vec<String> = commits.iter().map(|c| self.keys.state(&c.key)).collect();
            self.replicated(conn, &written, "commit").await?;
        }
        Ok(replies)
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
        let mut conn = self.connection();
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(self.keys.state(key));
        if history {
            // One transaction (both keys share a hash tag): the conversation
            // is the one the state's counters describe, never one a commit
            // between the two reads changed.
            pipe.atomic();
            pipe.cmd("LRANGE").arg(self.keys.messages(key)).arg(0).arg(-1);
        }
        let (fields, messages): (HashMap<String, String>, Option<Vec<String>>) = if history {
            let (fields, messages): (HashMap<String, String>, Vec<String>) =
                pipe.query_async(&mut conn).await.map_err(map_err)?;
            (fields, Some(messages))
        } else {
            let (fields,): (HashMap<String, String>,) = pipe.query_async(&mut conn).await.map_err(map_err)?;
            (fields, None)
        };
        if fields.is_empty() {
            return Ok(None);
        }
        record(fields, messages).map(Some)
    }

    async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>> {
        if commits.is_empty() {
            return Vec::new();
        }
        let mut conn = self.connection();
        let all: Vec<&Commit> = commits.iter().collect();
        let mut replies = match self.commit_round(&mut conn, &all).await {
            Ok(replies) => replies,
            Err(error) => {
                let error = map_err(error);
                return commits.iter().map(|_| Err(CommitError::Store(error.clone()))).collect();
            }
        };
        // After a Redis restart (or SCRIPT FLUSH) the script is unknown: load
        // it and rerun only the commits refused for that, which wrote nothing.
        let unknown: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)))
            .collect();
        if !unknown.is_empty() {
            let again: Vec<&Commit> = unknown.iter().map(|&i| &commits[i]).collect();
            let rerun = match self.scripts.commit.prepare_invoke().load_async(&mut conn).await {
                Ok(_) => self.commit_round(&mut conn, &again).await,
                Err(error) => Err(error),
            };
            match rerun {
                Ok(rerun) => {
                    for (i, reply) in unknown.into_iter().zip(rerun) {
                        replies[i] = reply;
                    }
                }
                Err(error) => {
                    for i in unknown {
                        replies[i] = Err(error.clone());
                    }
                }
            }
        }
        replies.into_iter().zip(commits).map(|(reply, commit)| outcome(reply, commit)).collect()
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
    match word.as_str() {
        "ok" => Ok(Committed { version: number(1)?, epoch: number(2)?, first_seq: number(3)?, last_seq: number(4)? }),
        // Already applied by an earlier attempt whose answer was lost; no
        // later commit of the tenure exists yet, so its events end the log.
        "duplicate" => {
            let last_seq = number(3)?;
            let first_seq = (last_seq + 1).saturating_sub(commit.events.len() as u64);
            Ok(Committed { version: number(1)?, epoch: number(2)?, first_seq, last_seq })
        }
        "exists" => Err(CommitError::Conflict(Conflict::Exists)),
        "changed" => Err(CommitError::Conflict(Conflict::Changed)),
        "fenced" => Err(CommitError::Conflict(Conflict::Fenced)),
        other => Err(corrupt(other)),
    }
}

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
