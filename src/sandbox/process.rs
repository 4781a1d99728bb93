//! Running one prepared child process to its end: its own process group,
//! both output streams read at once (capped, streamed as chunks), the
//! timeout, the cancel, and the kill of the whole group — also when the
//! future running it is dropped. Shared by both backends.

use std::{process::Stdio, time::Duration};

use nix::{sys::signal::Signal, unistd::Pid};
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    sync::mpsc,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::{Chunk, Ending, ExecOutput, OutputStream, SandboxError};

/// How long the output of a killed command is still read: the pipes reach
/// their end as soon as the last process holding them is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Bytes read from a pipe at once.
const READ_BUFFER: usize = 8 * 1024;

/// Kills a process group when dropped, unless the group was reaped first.
struct GroupKill(Option<Pid>);

impl GroupKill {
    fn kill(&self) {
        if let Some(group) = self.0 {
            // ESRCH (nothing left) is fine.
            let _ = nix::sys::signal::killpg(group, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` (already set up: program, arguments, directory,
/// environment, child setup) for at most `timeout`.
pub(super) async fn run(
    mut command: tokio::process::Command,
    timeout: Duration,
    cap: usize,
    progress: Option<mpsc::Sender<Chunk>>,
    cancel: &CancellationToken,
) -> Result<ExecOutput, SandboxError> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let mut group = GroupKill(child.id().and_then(|pid| i32::try_from(pid).ok()).map(Pid::from_raw));
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(SandboxError::Io("the child has no output pipes".into()));
    };
    let readers = futures::future::join(
        read_capped(stdout, OutputStream::Stdout, cap, progress.clone()),
        read_capped(stderr, OutputStream::Stderr, cap, progress),
    );
    tokio::pin!(readers);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut read = None;
    // What ends the wait: the command exits, its timeout, or its cancel;
    // its output is read meanwhile (and may end first).
    let ending = loop {
        tokio::select! {
            status = child.wait() => break Ok(status),
            output = &mut readers, if read.is_none() => read = Some(output),
            () = &mut deadline => break Err(Ending::TimedOut),
            () = cancel.cancelled() => break Err(Ending::Cancelled),
        }
    };
    // Whatever is left in the group goes now: the command's background
    // processes die with it (the output is complete once they are gone).
    group.kill();
    let (ending, status) = match ending {
        Ok(status) => (Ending::Exited, status.ok()),
        Err(ending) => {
            let _ = child.start_kill();
            (ending, child.wait().await.ok())
        }
    };
    let ((stdout, stdout_cut), (stderr, stderr_cut)) = match read {
        Some(read) => read,
        None => match tokio::time::timeout(DRAIN_GRACE, &mut readers).await {
            Ok(read) => read,
            // A process outside the group still holds a pipe (unsandboxed
            // only): its output is lost.
            Err(_) => ((Vec::new(), true), (Vec::new(), true)),
        },
    };
    // Reaped and killed: nothing of the group is left to kill on drop.
    group.0 = None;
    use std::os::unix::process::ExitStatusExt as _;
    let (exit_code, signal) = match (ending, status) {
        (Ending::Exited, Some(status)) => (status.code(), status.signal()),
        _ => (None, Some(Signal::SIGKILL as i32)),
    };
    Ok(ExecOutput {
        ending,
        exit_code,
        signal,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        stdout_cut,
        stderr_cut,
        elapsed: started.elapsed(),
    })
}

/// Reads a pipe to its end: keeps the first `cap` bytes, drops the rest
/// (reading on, so the writer never blocks), and sends what it keeps as
/// chunks of whole UTF-8 characters. A progress receiver that is gone is
/// ignored.
async fn read_capped(
    mut pipe: impl AsyncRead + Unpin,
    stream: OutputStream,
    cap: usize,
    mut progress: Option<mpsc::Sender<Chunk>>,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buffer = vec![0u8; READ_BUFFER];
    // Bytes of a character split across reads, not yet sent.
    let mut pending = 0usize;
    loop {
        let n = match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(kept.len());
        if n > room {
            cut = true;
        }
        let take = n.min(room);
        if take == 0 {
            continue;
        }
        let start = kept.len() - pending;
        kept.extend_from_slice(&buffer[..take]);
        if let Some(sender) = &progress {
            let fresh = &kept[start..];
            let whole = match std::str::from_utf8(fresh) {
                Ok(_) => fresh.len(),
                // An incomplete character at the end waits for the next read;
                // invalid bytes are sent replaced.
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => fresh.len(),
            };
            pending = fresh.len() - whole;
            if whole > 0 {
                let text = String::from_utf8_lossy(&fresh[..whole]).into_owned();
                if sender.send(Chunk { stream, text }).await.is_err() {
                    progress = None;
                }
            }
        }
    }
    (kept, cut)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
pub fn utf8_prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_past_the_cap_is_cut_and_chunks_are_whole_characters() {
        let text = "héllo wörld ".repeat(100);
        let (tx, mut rx) = mpsc::channel(1024);
        let (kept, cut) = read_capped(text.as_bytes(), OutputStream::Stdout, 100, Some(tx)).await;
        assert!(cut);
        assert_eq!(kept.len(), 100);
        let mut streamed = String::new();
        while let Ok(chunk) = rx.try_recv() {
            streamed.push_str(&chunk.text);
        }
        assert!(text.starts_with(&streamed) && streamed.len() >= 98, "{streamed:?}");
        assert_eq!(utf8_prefix("héllo", 2), "h");
    }
}
