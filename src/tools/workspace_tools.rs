//! The default tools `bash`, `read` and `patch`, with llm-gateway's schemas,
//! result shapes (`{context, result?}`: the model reads `context`) and error
//! texts (docs/llm-gateway-tools.md §1), on the session's workspace: `bash` in the
//! sandbox, `read` and `patch` in this process on the materialised
//! directory, confined to it (and `read` to the skills too).
//!
//! What differs from llm-gateway: output is capped (and said to be cut);
//! a timed-out command keeps the output it printed; an image or PDF is
//! described in text (a tool result carries no image to the model here),
//! its bytes in `result` only up to [`MAX_EMBEDDED`]; the read-before-patch
//! record (llm-gateway's `FileTime`) lives with the replica's workspace, so
//! after a takeover a file must be read again before it is patched.
//! Committing the files a call changed is the tools phase's business.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::patch::{self, Operation};
use crate::{
    domain::{AgentRef, EventKind, OutputStream, ToolCall, ToolOutcome},
    sessions::Emitter,
    workspace::{Workspace, resolve},
};

pub const NAMES: &[&str] = &["bash", "read", "patch"];
/// Image and PDF bytes put in a `read` result (base64) at most.
pub const MAX_EMBEDDED: u64 = 1 << 20;
/// Lines `read` returns unless told otherwise, and its other bounds.
const READ_LINES: usize = 2000;
const LINE_CHARS: usize = 2000;
const READ_BYTES: usize = 50 * 1024;
/// How often a running command's output goes out as `tool_progress`.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
const PROGRESS_BYTES: usize = 16 * 1024;

/// What a workspace tool answered: the text the model reads, and
/// llm-gateway's `result`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub outcome: ToolOutcome,
    pub result: Option<Value>,
}

impl Answer {
    fn ok(context: impl Into<String>, result: Option<Value>) -> Self {
        Self { outcome: ToolOutcome::Success(context.into()), result }
    }
    fn error(context: impl Into<String>) -> Self {
        Self { outcome: ToolOutcome::Error(context.into()), result: None }
    }
}

/// The specs of `bash`, `read` and `patch`, built once.
pub fn specs() -> &'static [crate::providers::ToolSpec] {
    static SPECS: std::sync::LazyLock<Vec<crate::providers::ToolSpec>> = std::sync::LazyLock::new(build_specs);
    &SPECS
}

fn build_specs() -> Vec<crate::providers::ToolSpec> {
    use crate::providers::ToolSpec;
    vec![
        ToolSpec {
            name: "bash".into(),
            description: "Execute a non-sudo shell command. Returns stdout, stderr, and exit code. It runs in a sandbox \
                          whose working directory, /workspace, holds the session's files."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The shell command to execute"},
                "timeout": {"type": "number", "exclusiveMinimum": 0, "default": 5, "description": "Timeout in seconds (default: 5)"}},
                "required": ["command"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "read".into(),
            description: "Read a file from the filesystem. Returns text with line numbers for code files, base64-encoded \
                          content for images (png, jpg, gif, webp) and PDFs."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "filePath": {"type": "string", "description": "Absolute path to the file to read"},
                "offset": {"type": "number", "description": "0-based line number to start reading from"},
                "limit": {"type": "number", "description": "Maximum number of lines to read (default 2000)"}},
                "required": ["filePath"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "patch".into(),
            description: "Apply a patch to files in /workspace. The patch starts with \"*** Begin Patch\" and ends with \
                          \"*** End Patch\"; between them \"*** Add File: <path>\" (lines starting with +), \"*** Delete \
                          File: <path>\" and \"*** Update File: <path>\" with hunks starting with @@ (lines starting with \
                          space for context, - to remove, + to add). Read a file before updating it."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "patch": {"type": "string", "description": "The patch to apply, using the patch grammar format"}},
                "required": ["patch"], "additionalProperties": false}),
        },
    ]
}

/// Runs a call of `bash`, `read` or `patch` on `workspace`.
pub async fn run(
    workspace: &Workspace,
    call: &ToolCall,
    emitter: &Emitter,
    agent: &AgentRef,
    cancel: &CancellationToken,
) -> Answer {
    let arguments: Value = match serde_json::from_str(&call.arguments) {
        Ok(arguments) => arguments,
        Err(e) => {
            return Answer::error(format!(
                "Tool call had malformed arguments. Parse error: {e}. Raw arguments: {}",
                call.arguments
            ));
        }
    };
    let text = |name: &str| arguments.get(name).and_then(Value::as_str).map(str::to_string);
    match call.name.as_str() {
        "bash" => {
            let Some(command) = text("command") else { return Answer::error("bash needs a \"command\" string") };
            let secs = arguments.get("timeout").and_then(Value::as_f64).filter(|t| *t > 0.0);
            let timeout = secs.map_or(workspace.config().default_timeout, Duration::from_secs_f64);
            bash(workspace, &command, timeout, call, emitter, agent, cancel).await
        }
        "read" => {
            let Some(path) = text("filePath") else { return Answer::error("read needs a \"filePath\" string") };
            let number = |name: &str| arguments.get(name).and_then(Value::as_f64).map(|n| n.max(0.0) as usize);
            read(workspace, &path, number("offset").unwrap_or(0), number("limit").unwrap_or(READ_LINES)).await
        }
        "patch" => {
            let Some(text) = text("patch") else { return Answer::error("patch needs a \"patch\" string") };
            apply_patch(workspace, &text).await
        }
        other => Answer::error(format!("there is no tool named {other:?}")),
    }
}

async fn bash(
    workspace: &Workspace,
    command: &str,
    timeout: Duration,
    call: &ToolCall,
    emitter: &Emitter,
    agent: &AgentRef,
    cancel: &CancellationToken,
) -> Answer {
    let (tx, rx) = mpsc::channel(64);
    let forward = forward_progress(rx, emitter, agent, call);
    let (output, ()) = tokio::join!(workspace.exec(command, timeout, Some(tx), cancel), forward);
    let output = match output {
        Ok(output) => output,
        Err(e) => return Answer::error(format!("The command could not run: {e}")),
    };
    let result = json!({"exitCode": output.exit_code_or_signal(), "stdout": output.stdout, "stderr": output.stderr});
    let cap = workspace.config().limits.output_bytes;
    let cut = |cut: bool, name: &str| if cut { format!("[{name} cut at {cap} bytes]\n") } else { String::new() };
    if output.ending == crate::sandbox::Ending::TimedOut {
        let secs = timeout.min(workspace.config().max_timeout).as_secs_f64();
        return Answer {
            outcome: ToolOutcome::Error(format!("Command timed out after {secs} seconds")),
            result: Some(result),
        };
    }
    let mut context = String::new();
    if !output.stdout.is_empty() {
        context.push_str(&format!("stdout:\n{}\n{}", output.stdout, cut(output.stdout_cut, "stdout")));
    }
    if !output.stderr.is_empty() {
        context.push_str(&format!("stderr:\n{}\n{}", output.stderr, cut(output.stderr_cut, "stderr")));
    }
    context.push_str(&format!("exit code: {}", output.exit_code_or_signal()));
    Answer::ok(context, Some(result))
}

/// Sends a command's output as `tool_progress` events, a piece at a time:
/// what arrived in the last [`PROGRESS_EVERY`], or [`PROGRESS_BYTES`] of it.
async fn forward_progress(
    mut rx: mpsc::Receiver<crate::sandbox::Chunk>,
    emitter: &Emitter,
    agent: &AgentRef,
    call: &ToolCall,
) {
    let mut pending: Vec<(OutputStream, String)> = Vec::new();
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let flush = |pending: &mut Vec<(OutputStream, String)>| {
        std::mem::take(pending).into_iter().map(|(stream, text)| EventKind::ToolProgress {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            stream,
            text,
        })
    };
    loop {
        let done = tokio::select! {
            chunk = rx.recv() => match chunk {
                Some(chunk) => {
                    match pending.last_mut() {
                        Some((stream, text)) if *stream == chunk.stream => text.push_str(&chunk.text),
                        _ => pending.push((chunk.stream, chunk.text)),
                    }
                    if pending.iter().map(|(_, t)| t.len()).sum::<usize>() < PROGRESS_BYTES { continue }
                    false
                }
                None => true,
            },
            _ = tick.tick() => false,
        };
        for event in flush(&mut pending) {
            let _ = emitter.emit(agent, event).await;
        }
        if done {
            return;
        }
    }
}

fn is_image(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let ext = lower.rsplit('.').next()?;
    Some(match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

async fn read(workspace: &Workspace, path: &str, offset: usize, limit: usize) -> Answer {
    let resolved = match resolve(workspace.dir(), workspace.mounts(), path) {
        Ok(resolved) => resolved,
        Err(e) => return Answer::error(e.to_string()),
    };
    let file = resolved.host.clone();
    let read = tokio::task::spawn_blocking(move || {
        let meta = file.symlink_metadata().ok().filter(|m| m.is_file())?;
        Some((std::fs::read(&file).ok()?, meta.modified().ok()))
    })
    .await
    .ok()
    .flatten();
    let Some((content, mtime)) = read else { return Answer::error(format!("File not found: {path}")) };
    if let Some(media_type) = is_image(path) {
        let (kind, what) = if media_type == "application/pdf" { ("document", "PDF") } else { ("image", "Image") };
        if content.len() > 5 * 1024 * 1024 {
            return Answer::error(format!("{what} file exceeds 5MB limit: {path}"));
        }
        let context = format!(
            "Read {}: {path} ({media_type}, {} bytes). Its content is not shown to the model: tool results carry text \
             only here.",
            what.to_lowercase().replace("pdf", "PDF"),
            content.len()
        );
        let mut part = json!({"type": kind, "mediaType": media_type, "size": content.len()});
        if content.len() as u64 <= MAX_EMBEDDED {
            part["data"] = json!(base64::engine::general_purpose::STANDARD.encode(&content));
        }
        return Answer::ok(context, Some(part));
    }
    if content[..content.len().min(8192)].contains(&0) {
        return Answer::error(format!("Cannot read binary file: {path}"));
    }
    if let Some(relative) = &resolved.relative {
        workspace.record_read(relative, &content, mtime);
    }
    let text = String::from_utf8_lossy(&content);
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let total = lines.len();
    let mut out = Vec::new();
    let mut size = 0usize;
    let mut cut = false;
    for (n, line) in lines.iter().enumerate().skip(offset).take(limit) {
        let line = if line.chars().count() > LINE_CHARS {
            format!("{} [truncated]", line.chars().take(LINE_CHARS).collect::<String>())
        } else {
            line.to_string()
        };
        let formatted = format!("{:>4} | {line}", n + 1);
        if size + formatted.len() > READ_BYTES {
            cut = true;
            break;
        }
        size += formatted.len();
        out.push(formatted);
    }
    let end = offset + out.len();
    let mut context = format!("<file path=\"{path}\" lines=\"{}-{end}\" total=\"{total}\">\n", offset + 1);
    context.push_str(&out.join("\n"));
    context.push_str("\n</file>");
    if cut {
        context.push_str("\n[Output truncated at 50KB. Use offset/limit to read more.]");
    }
    Answer::ok(context, None)
}

async fn apply_patch(workspace: &Workspace, text: &str) -> Answer {
    let operations = match patch::parse(text) {
        Ok(operations) => operations,
        Err(message) => return Answer::error(format!("Patch parse error: {message}")),
    };
    let mut done = Vec::new();
    for operation in &operations {
        let path = operation.path();
        match apply_one(workspace, operation).await {
            Ok(line) => done.push(line),
            Err(message) => {
                let mut context = done.join("\n");
                if !context.is_empty() {
                    context.push('\n');
                }
                context.push_str(&format!("Patch failed on {path}: {message}"));
                return Answer::error(context);
            }
        }
    }
    Answer::ok(done.join("\n"), None)
}

async fn apply_one(workspace: &Workspace, operation: &Operation) -> Result<String, String> {
    let path = operation.path();
    let resolved = resolve(workspace.dir(), &[], path).map_err(|e| e.to_string())?;
    let relative = resolved.relative.clone().unwrap_or_default();
    let host = resolved.host;
    let meta = host.symlink_metadata().ok();
    match operation {
        Operation::Add { content, .. } => {
            if meta.is_some() {
                return Err(format!("File already exists: {path}"));
            }
            if let Some(parent) = host.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(|e| e.to_string())?;
                let mut at = parent.to_path_buf();
                while at.starts_with(workspace.dir()) && at != workspace.dir() {
                    workspace.own(&at);
                    at.pop();
                }
            }
            tokio::fs::write(&host, content).await.map_err(|e| e.to_string())?;
            workspace.own(&host);
            let mtime = tokio::fs::metadata(&host).await.ok().and_then(|m| m.modified().ok());
            workspace.record_read(&relative, content.as_bytes(), mtime);
            Ok(format!("Added {path}"))
        }
        Operation::Delete { .. } => {
            check_read(workspace, path, &relative, meta.as_ref(), &host).await?;
            tokio::fs::remove_file(&host).await.map_err(|e| e.to_string())?;
            Ok(format!("Deleted {path}"))
        }
        Operation::Update { hunks, .. } => {
            check_read(workspace, path, &relative, meta.as_ref(), &host).await?;
            let old = tokio::fs::read(&host).await.map_err(|e| e.to_string())?;
            let new = patch::apply(&String::from_utf8_lossy(&old), hunks)?;
            tokio::fs::write(&host, &new).await.map_err(|e| e.to_string())?;
            let mtime = tokio::fs::metadata(&host).await.ok().and_then(|m| m.modified().ok());
            workspace.record_read(&relative, new.as_bytes(), mtime);
            Ok(format!("Updated {path}"))
        }
    }
}

/// llm-gateway's `FileTime.assert`: the file was read, is still there, and
/// has not changed since (its time, else its content).
async fn check_read(
    workspace: &Workspace,
    path: &str,
    relative: &str,
    meta: Option<&std::fs::Metadata>,
    host: &std::path::Path,
) -> Result<(), String> {
    let Some((mtime, digest)) = workspace.read_record(relative) else {
        return Err(format!("{path} must be read before patching"));
    };
    let Some(meta) = meta.filter(|m| m.is_file()) else { return Err(format!("{path} was deleted after last read")) };
    if meta.modified().ok() == mtime {
        return Ok(());
    }
    let now = tokio::fs::read(host).await.map_err(|e| e.to_string())?;
    if crate::workspace::digest(&now) == digest {
        return Ok(());
    }
    Err(format!("{path} has been modified externally since last read. Please re-read before patching."))
}
