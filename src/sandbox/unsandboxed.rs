//! The `none` backend, for development only: the command runs as a plain
//! child process of the gateway, in the workspace directory, with an empty
//! environment and the same limits — but with the gateway's user, its view
//! of every file and its network. The configuration refuses it unless
//! `allow_unsandboxed = true`, and start-up and `check-config` warn.
//!
//! The process limit counts every process of the gateway's user here (no
//! user namespace of its own), and a process that leaves the command's
//! process group (`setsid`) outlives the kill at the timeout.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    Chunk, ExecOutput, ExecRequest, Sandbox, SandboxError,
    limits::{ChildSetup, process_limit_wrapper},
    process,
};
use crate::config::CommandLimits;

pub(super) struct Unsandboxed {
    limits: CommandLimits,
}

impl Unsandboxed {
    pub fn new(limits: CommandLimits) -> Self {
        Self { limits }
    }
}

#[async_trait]
impl Sandbox for Unsandboxed {
    fn name(&self) -> &'static str {
        "none"
    }

    async fn exec(
        &self,
        request: ExecRequest<'_>,
        progress: Option<mpsc::Sender<Chunk>>,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, SandboxError> {
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", request.workspace)
            .env("LANG", "C.UTF-8")
            .current_dir(request.workspace)
            .args(["-c", &process_limit_wrapper(self.limits.processes), "sh", request.command]);
        // No uid change: a development gateway runs as its developer.
        ChildSetup { limits: self.limits, drop_to: None }.install(&mut command);
        process::run(command, request.timeout, self.limits.output_bytes, progress, cancel).await
    }
}
