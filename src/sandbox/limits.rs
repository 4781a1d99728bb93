//! What a sandboxed child sets up between fork and exec: resource limits,
//! the uid it drops to when the gateway is root, and death with its parent.
//! See the module docs of `sandbox` for what each limit guarantees and why
//! the process limit is not set here but inside the user namespace.

use nix::{
    sys::{
        resource::{Resource, setrlimit},
        signal::Signal,
    },
    unistd::{Gid, Uid, geteuid, setgid, setgroups, setuid},
};

use crate::config::CommandLimits;

/// Descriptors a command may have open at once.
const OPEN_FILES: u64 = 1024;

/// The setup of one child.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChildSetup {
    pub limits: CommandLimits,
    /// Drop to this uid and gid (only when the gateway runs as root).
    pub drop_to: Option<u32>,
}

impl ChildSetup {
    /// The uid to drop to: `uid` when this process is root, else none (a
    /// process that is not root cannot change its uid, and needs not).
    pub fn drop_to_if_root(uid: u32) -> Option<u32> {
        geteuid().is_root().then_some(uid)
    }

    /// Makes `command` apply this setup in its child.
    pub fn install(self, command: &mut tokio::process::Command) {
        // SAFETY: the closure runs in the forked child before exec; it only
        // makes system calls (setrlimit, setgroups, setgid, setuid, prctl)
        // with values copied in beforehand, allocates nothing and takes no
        // lock, so it is async-signal-safe.
        unsafe {
            command.pre_exec(move || self.in_child());
        }
    }

    fn in_child(&self) -> std::io::Result<()> {
        let limits = &self.limits;
        setrlimit(Resource::RLIMIT_AS, limits.memory_bytes, limits.memory_bytes)?;
        // SIGXCPU at the soft limit, SIGKILL a second later.
        setrlimit(Resource::RLIMIT_CPU, limits.cpu_secs, limits.cpu_secs.saturating_add(1))?;
        setrlimit(Resource::RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes)?;
        setrlimit(Resource::RLIMIT_NOFILE, OPEN_FILES, OPEN_FILES)?;
        setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
        if let Some(uid) = self.drop_to {
            setgroups(&[])?;
            setgid(Gid::from_raw(uid))?;
            setuid(Uid::from_raw(uid))?;
        }
        // If the gateway dies (kill -9), its commands die with it.
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
        Ok(())
    }
}

/// `sh -c` text that sets the process limit, then runs `"$1"` (the
/// command, passed as an argument so it is never re-parsed). dash and
/// busybox call RLIMIT_NPROC `-p`; bash and zsh `-u` (where `-p` is the
/// pipe size, which cannot be set: the first form fails there). A shell
/// that can set neither runs nothing.
pub(super) fn process_limit_wrapper(processes: u64) -> String {
    format!(
        "ulimit -p {processes} 2>/dev/null || ulimit -u {processes} 2>/dev/null || \
         {{ echo 'sandbox: cannot limit processes' >&2; exit 126; }}; exec sh -c \"$1\""
    )
}
