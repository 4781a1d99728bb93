//! Running one cell live: its prints become `repl_progress` events, its
//! host calls are answered (an `exec` that needs permission waits for a
//! relay decision), and in the turn's own run each answer is committed
//! with the calls before it (and the workspace files an `exec` changed)
//! before the cell gets it: a takeover replays the cell up to there
//! without making those calls again, and finds the files as they were.

use super::host::{Host, Stopped};
use crate::{
    domain::{
        Usage,
        rlm::{HostResult, Tape},
    },
    orchestrator::{
        permissions::Verdict,
        tools_phase::{Wait, wait_for_decisions},
    },
    repl::{CellEnd, HostCall, Message, Repl},
    sessions::{RunHandle, SessionError},
};

/// Whose cell it is: the turn's (durable) or a child run's (not).
pub(super) enum Owner<'a> {
    Turn(&'a mut RunHandle),
    Child,
}

pub(super) enum Served {
    /// The cell ended; `usage` is what its `llm_query` calls used.
    Done {
        end: CellEnd,
        usage: Usage,
    },
    Stopped,
    /// The REPL's thread is gone.
    Broken(String),
}

/// Runs `code` on `repl`, its host calls answered from `tape` first.
pub(super) async fn serve(
    host: &Host,
    repl: &Repl,
    cell: &str,
    code: &str,
    tape: Tape,
    mut owner: Owner<'_>,
) -> Result<Served, SessionError> {
    let mut messages = match repl.run(code, tape, true) {
        Ok(messages) => messages,
        Err(e) => return Ok(Served::Broken(e.to_string())),
    };
    let cancel = host.context.cancel.clone();
    let mut usage = Usage::default();
    loop {
        let message = tokio::select! {
            message = messages.recv() => message,
            () = cancel.cancelled() => return Ok(Served::Stopped),
        };
        let Some(message) = message else { return Ok(Served::Broken("the REPL stopped".into())) };
        let (call, mut tape, reply) = match message {
            Message::Print { line, stderr } => {
                host.progress(cell, format!("{line}\n"), stderr).await;
                continue;
            }
            Message::Done(end) => return Ok(Served::Done { end, usage }),
            Message::Call { call, tape, reply } => (call, tape, reply),
        };
        // In the turn's own run, a call that may change files (an `exec`,
        // or one in a child's cell) holds the workspace until its commit,
        // which carries the files it changed with its result.
        let held = match (&owner, host.exec_enabled()) {
            (Owner::Turn(_), true) => match host.context.workspace().await {
                Ok(workspace) => Some((workspace.lock().await, workspace)),
                Err(_) => None,
            },
            _ => None,
        };
        let answered = tokio::select! {
            answered = answer(host, cell, call, &mut owner) => answered?,
            () = cancel.cancelled() => return Ok(Served::Stopped),
        };
        let Ok((result, used)) = answered else { return Ok(Served::Stopped) };
        usage.add(&used);
        if let Owner::Turn(handle) = &mut owner {
            let changes = match &held {
                Some((_, workspace)) => match workspace.changes().await {
                    Ok(changes) => Some(changes),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the workspace's changes");
                        return Ok(Served::Stopped);
                    }
                },
                None => None,
            };
            let files = changes.as_ref().map(|c| c.write.clone()).unwrap_or_default();
            tape.push(result.clone());
            handle.transition_with_files(|s| s.rlm_progress(tape, used), files).await?;
            if let (Some((_, workspace)), Some(changes)) = (&held, changes) {
                workspace.accept(changes);
            }
        }
        drop(held);
        let _ = reply.send(result);
    }
}

/// Answers one host call.
async fn answer(
    host: &Host,
    cell: &str,
    call: HostCall,
    owner: &mut Owner<'_>,
) -> Result<Result<(HostResult, Usage), Stopped>, SessionError> {
    let (command, timeout_secs) = match call {
        HostCall::Query { prompt, context } => return Ok(host.query(cell, prompt, context).await),
        HostCall::Exec { command, timeout_secs } => (command, timeout_secs),
    };
    if !host.exec_enabled() {
        let error = "exec is not enabled for this tenant (its default_tools have no bash)".to_string();
        return Ok(Ok((HostResult::Exec { result: Err(error) }, Usage::default())));
    }
    let permitted = match host.exec_verdict(&command) {
        Verdict::Allow => Ok(()),
        Verdict::Deny(reason) => Err(format!("exec denied: {reason}")),
        Verdict::Ask => match owner {
            Owner::Turn(handle) => match ask(host, handle, &command).await? {
                Ok(permitted) => permitted,
                Err(Stopped) => return Ok(Err(Stopped)),
            },
            Owner::Child => Err("exec denied: a nested run cannot ask for permission; allow the command with a \
                                 permission rule"
                .to_string()),
        },
    };
    let result = match permitted {
        Ok(()) => match host.exec(cell, &command, timeout_secs).await {
            Ok(result) => result,
            Err(Stopped) => return Ok(Err(Stopped)),
        },
        Err(denied) => HostResult::Exec { result: Err(denied) },
    };
    Ok(Ok((result, Usage::default())))
}

/// Asks for a decision on `command` by relay (unless a decision, or the
/// relay, is already there: a takeover during the ask) and takes it up.
async fn ask(
    host: &Host,
    handle: &mut RunHandle,
    command: &str,
) -> Result<Result<Result<(), String>, Stopped>, SessionError> {
    if handle.session().rlm().and_then(|r| r.ask.as_ref()).is_none() {
        let relay_id = format!("relay_{}", uuid::Uuid::new_v4().simple());
        let call_id = format!("exec_{}", uuid::Uuid::now_v7().simple());
        handle.sessions().put_relay(&relay_id, handle.key()).await?;
        handle.transition(|s| s.rlm_ask_exec(&relay_id, &call_id, command)).await?;
    }
    let timeout = host.context.config.agent.relay_timeout;
    let mut deadline = tokio::time::Instant::now() + timeout;
    while handle.session().rlm().and_then(|r| r.ask.as_ref()).is_some_and(|a| a.decision.is_none()) {
        match wait_for_decisions(handle, deadline).await? {
            Wait::Decided => {}
            Wait::TimedOut => {
                let reason = format!("no permission decision arrived within {} s", timeout.as_secs());
                handle.transition(|s| s.time_out_relays(&reason)).await?;
                deadline = tokio::time::Instant::now() + timeout;
            }
            Wait::Stop => return Ok(Err(Stopped)),
        }
    }
    let mut decision = None;
    handle.apply(|s| {
        decision = Some(s.rlm_take_decision()?);
        Ok(Vec::new())
    })?;
    let Some(decision) = decision else { return Ok(Ok(Err("exec denied: permission denied".into()))) };
    if decision.approved {
        return Ok(Ok(Ok(())));
    }
    let reason = decision.reason.unwrap_or_else(|| "permission denied".into());
    Ok(Ok(Err(format!("exec denied: {reason}"))))
}
