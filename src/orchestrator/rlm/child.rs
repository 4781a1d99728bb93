//! A child run: `llm_query` below `maxDepth` runs an rlm loop of its own,
//! with its own REPL (whose `context` is the query's second argument), its
//! own agent id, and the parent's cell as `parentId` (llm-gateway's
//! clients hang the child under that `repl_input`). Its events go to the
//! session's log; its state is not committed: the parent's cell records
//! only the child's answer, so a takeover while a child runs starts the
//! child again.

use super::{
    cell::{self, Owner, Served},
    host::{Host, Stopped, stopped},
};
use crate::{
    domain::{AgentRef, ChatMessage, EventKind, Role, TurnEndReason, Usage, rlm::feedback},
    orchestrator::model_call::{self, Output},
    repl::{self, Repl},
};

/// Runs the child of `parent`'s cell `cell` on `prompt`: its `FINAL`
/// answer (`""` when it never gave one, as llm-gateway returns) and its
/// usage; an error when it could not run at all.
pub(super) async fn run(
    parent: &Host,
    cell: &str,
    prompt: String,
    context: String,
) -> Result<(Result<String, String>, Usage), Stopped> {
    let agent = AgentRef {
        agent_id: format!("rlm_{}", uuid::Uuid::now_v7().simple()),
        parent_id: Some(cell.to_string()),
        depth: parent.depth + 1,
    };
    let host = Host { agent, depth: parent.depth + 1, ..parent.clone() };
    let repl = match Repl::start(context.clone(), super::limits(&host.context.config)) {
        Ok(repl) => repl,
        Err(e) => return Ok((Err(format!("llm_query failed: {e}")), Usage::default())),
    };
    let mut messages =
        vec![ChatMessage::text(Role::System, host.system_prompt(&context)), ChatMessage::text(Role::User, prompt)];
    let mut usage = Usage::default();
    let mut answer = None;
    let mut iterations = 0;
    let mut reason = TurnEndReason::MaxIterations;
    while iterations < host.max_iterations && answer.is_none() {
        iterations += 1;
        let request = host.request(messages.clone());
        let output = Output::Events { emitter: &host.context.emitter, agent: &host.agent };
        let reply = match model_call::call(&host.model_call(), request, output, &host.context.cancel).await {
            Ok(reply) => reply,
            Err(e) => {
                let message = match stopped::<()>(e)? {
                    Err(message) => message,
                    Ok(()) => String::new(),
                };
                let error = EventKind::ReplError { message };
                let _ = host.context.emitter.emit(&host.agent, error).await;
                break;
            }
        };
        usage.add(&reply.usage);
        let total = usage;
        let _ = host.context.emitter.emit(&host.agent, EventKind::Usage { usage: reply.usage, total }).await;
        messages.push(ChatMessage::text(Role::Assistant, reply.text.clone()));
        let code = match repl::extract(&reply.text) {
            Ok(code) => code,
            Err(message) => {
                messages.push(ChatMessage::text(Role::User, format!("error: {message}")));
                let _ = host.context.emitter.emit(&host.agent, EventKind::ReplError { message }).await;
                continue;
            }
        };
        let id = uuid::Uuid::now_v7().to_string();
        let iteration = iterations - 1;
        let input = EventKind::ReplInput { id: id.clone(), code: code.clone(), iteration };
        let _ = host.context.emitter.emit(&host.agent, input).await;
        let end = match cell::serve(&host, &repl, &id, &code, Vec::new(), Owner::Child).await {
            Ok(Served::Done { end, usage: used }) => {
                usage.add(&used);
                end
            }
            Ok(Served::Broken(e)) => return Ok((Err(format!("llm_query failed: {e}")), usage)),
            Ok(Served::Stopped) | Err(_) => return Err(Stopped),
        };
        let output = end.output;
        messages.push(ChatMessage::text(Role::User, feedback(&output)));
        let event = EventKind::ReplOutput {
            id,
            stdout: output.stdout.clone(),
            error: output.error.clone(),
            done: output.done,
            iteration,
            duration_ms: output.duration_ms,
            truncated: output.truncated,
        };
        let _ = host.context.emitter.emit(&host.agent, event).await;
        if let Some(text) = output.answer.filter(|_| output.done) {
            let _ = host.context.emitter.emit(&host.agent, EventKind::TextDelta { text: text.clone() }).await;
            answer = Some(text);
            reason = TurnEndReason::Final;
        }
    }
    let ended = EventKind::AgentEnded { reason, iterations, usage };
    let _ = host.context.emitter.emit(&host.agent, ended).await;
    Ok((Ok(answer.unwrap_or_default()), usage))
}
