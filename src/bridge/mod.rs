//! `switchboard zot-rpc`: a process that behaves on stdin and stdout as
//! `zot rpc` does (docs/rpc.md of zot), relaying to a Switchboard server's
//! `POST /v1/zot`, so a harness that spawns `zot rpc` (Colibri) spawns this
//! instead and changes nothing else.
//!
//! - stdin: one command per line. `prompt` and `compact` queue and run one
//!   at a time (as zot's do); every other command is sent at once, in the
//!   order read, while a turn runs (so `abort` reaches it).
//! - stdout: the `response` line of each command and, for a turn, its
//!   event lines up to `done`, each line once, in order. Our additions are
//!   taken off (`seq`, `data.cursor`) and heartbeat lines dropped, so what
//!   the harness reads is zot's wire format.
//! - A dropped connection (a replica killed, a rolling restart) is rejoined
//!   by sequence number through the same URL (the load balancer picks a
//!   live replica): `GET /v1/sessions/{id}/events?format=zot&after=<seq>`,
//!   retried with backoff; the harness sees a pause, no gap, no repeat.
//! - stdin EOF: the process exits 0 once the running turn is settled.
//! - `ZOTCORE_RPC_TOKEN` set: the first line must be a `hello` with that
//!   token, else the process answers `success: false` and exits, as zot.
//!
//! The session is `--session`'s, or one the first command that needs it
//! makes (on `--model`, or `--provider`/`--model`).

mod client;

use std::{process::ExitCode, sync::Arc};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt},
    sync::{mpsc, oneshot},
};

pub use self::client::{Credential, Gateway};

/// Lines waiting for stdout.
const OUTPUT_BUFFER: usize = 256;
/// Turns waiting behind the running one.
const TURN_QUEUE: usize = 64;

/// How the bridge was started.
#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub credential: Option<Credential>,
    pub session: Option<String>,
    /// The model of a session the bridge makes.
    pub model: Option<String>,
    /// A reasoning level set on a session the bridge makes.
    pub reasoning: Option<String>,
}

/// Runs the bridge on the process's stdin and stdout.
pub async fn run(options: Options) -> ExitCode {
    let gateway = match Gateway::new(&options) {
        Ok(gateway) => Arc::new(gateway),
        Err(e) => {
            eprintln!("zot-rpc: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTPUT_BUFFER);
    // The one writer of stdout: whole lines, flushed as they come.
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            let written = async {
                stdout.write_all(line.as_bytes()).await?;
                stdout.write_all(b"\n").await?;
                stdout.flush().await
            };
            if written.await.is_err() {
                return;
            }
        }
    });
    let (turn_tx, mut turn_rx) = mpsc::channel::<Turn>(TURN_QUEUE);
    let turns = {
        let (gateway, out) = (gateway.clone(), out_tx.clone());
        tokio::spawn(async move {
            while let Some(Turn { command, answered }) = turn_rx.recv().await {
                gateway.turn(&command, &out, answered).await;
            }
        })
    };
    let code = read_commands(&gateway, &out_tx, &turn_tx).await;
    // EOF (or a refused hello): the queued turns settle, then we are done.
    drop(turn_tx);
    let _ = turns.await;
    drop(out_tx);
    let _ = writer.await;
    code
}

/// A prompt or compaction for the turn worker; `answered` fires once its
/// `response` line is out.
struct Turn {
    command: Value,
    answered: Option<oneshot::Sender<()>>,
}

/// Reads stdin to its end, dispatching each command. A prompt that starts
/// at once (nothing runs) is answered before the next command is read, as
/// zot answers it at once; one queued behind a running turn is not waited
/// for, so an `abort` still gets through.
async fn read_commands(gateway: &Gateway, out: &mpsc::Sender<String>, turns: &mpsc::Sender<Turn>) -> ExitCode {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut needs_hello = std::env::var("ZOTCORE_RPC_TOKEN").ok().filter(|t| !t.is_empty());
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let command: Value = match serde_json::from_str(&line) {
            Ok(command @ Value::Object(_)) => command,
            _ => {
                let _ = out.send(error_response(&Value::Null, "", "invalid JSON command line")).await;
                continue;
            }
        };
        let kind = command["type"].as_str().unwrap_or_default().to_string();
        if let Some(token) = needs_hello.take()
            && (kind != "hello" || command["token"].as_str() != Some(token.as_str()))
        {
            let _ = out.send(error_response(&command["id"], &kind, "hello with the RPC token required")).await;
            return ExitCode::FAILURE;
        }
        match kind.as_str() {
            "prompt" | "compact" => {
                let idle = turns.capacity() == turns.max_capacity() && !gateway.busy();
                let (answered, wait) = oneshot::channel();
                if turns.send(Turn { command, answered: Some(answered) }).await.is_err() {
                    return ExitCode::FAILURE;
                }
                if idle {
                    let _ = wait.await;
                }
            }
            _ => {
                let line = gateway.command(&command).await;
                let _ = out.send(line).await;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A `response` line with `success: false`.
fn error_response(id: &Value, command: &str, error: &str) -> String {
    json!({"type": "response", "id": id, "command": command, "success": false, "error": error}).to_string()
}

/// A line as the harness gets it: our `seq` and `data.cursor` taken off;
/// `None` for our heartbeat lines.
fn for_harness(line: &str) -> Option<(String, Option<u64>, bool)> {
    let mut value: Value = serde_json::from_str(line).ok()?;
    let object = value.as_object_mut()?;
    if object.get("type").and_then(Value::as_str) == Some("heartbeat") {
        return None;
    }
    let seq = object.remove("seq").and_then(|s| s.as_u64());
    if let Some(data) = object.get_mut("data").and_then(Value::as_object_mut) {
        data.remove("cursor");
    }
    let done = object.get("type").and_then(Value::as_str) == Some("done");
    Some((value.to_string(), seq, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_additions_are_taken_off_and_heartbeats_dropped() {
        let (line, seq, done) = for_harness(r#"{"type":"text_delta","delta":"hi","seq":7}"#).unwrap();
        assert_eq!(
            (serde_json::from_str::<Value>(&line).unwrap(), seq, done),
            (json!({"type":"text_delta","delta":"hi"}), Some(7), false)
        );
        let (line, seq, _) = for_harness(
            r#"{"type":"response","id":"1","command":"prompt","success":true,"data":{"started":true,"cursor":4}}"#,
        )
        .unwrap();
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["data"], json!({"started": true}));
        assert_eq!(seq, None);
        assert!(for_harness(r#"{"type":"heartbeat"}"#).is_none());
        assert!(for_harness(r#"{"type":"done","seq":9}"#).unwrap().2);
    }
}
