//! Signals to child processes, through `kill(1)`: the harness stops and
//! continues processes (SIGSTOP/SIGCONT) and asks them to drain (SIGTERM),
//! which `std` cannot do, and `libc`/`nix` are not dependencies of the crate.

use std::process::Command;

/// Sends `signal` (`"STOP"`, `"CONT"`, `"TERM"`, `"KILL"`) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill -{signal} {pid}: {e}"));
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// The last `lines` lines of a log file, for failure messages.
pub fn tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
