//! `sandbox_costs`: what the `bash` tool pays around the command itself.
//! Prints a Markdown report on stdout (progress on stderr). See
//! `load-tests/README.md`.
//!
//! 1. **Start-up per command.** `true`, and a heavier `python3 -c pass`,
//!    run through [`Workspace::exec`] (as the `bash` tool runs them) with
//!    the `bubblewrap` backend, against baselines in the same run: the same
//!    command through the `none` backend, and a plain
//!    `std::process::Command::new("sh").args(["-c", …])` spawn and wait.
//!    Then where bubblewrap's time goes: `bwrap` run directly (no shell, no
//!    pipes), as the uid the backend runs it as: alone, then in namespaces
//!    with a root of the system directories, one more kind per row, then
//!    with the backend's other kinds of mounts.
//!    Every variant runs once per round, rounds repeat `--runs` times, so
//!    drift in the machine's load hits all alike.
//! 2. **Workspace commit per changed file** (`commits.rs`): a file of each
//!    `--sizes` written into a materialised workspace, then
//!    [`Workspace::changes`] (scan and digest) and the store commit of the
//!    tool's result carrying the change, against the same commit without
//!    files, on the real Redis.
//!
//! `cargo run --release -p switchboard-load --bin sandbox_costs`

#[path = "sandbox_costs/commits.rs"]
mod commits;

use std::{
    fmt::Write,
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::Path,
    process::{ExitCode, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use switchboard::{
    config::{SandboxBackend, SandboxConfig},
    store::{SessionKey, Store},
    workspace::Workspace,
};
use switchboard_load::{
    Result,
    machine::Context,
    redis_admin::run_prefix,
    stats::{Summary, millis},
};

/// The sandbox's `PATH` (both backends set it), given to the plain spawns
/// too, so `python3` is the same program in every column.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Sandbox start-up and workspace commit costs, each against a baseline
/// measured in the same run.
#[derive(Debug, Clone, Parser)]
#[command(name = "sandbox_costs")]
struct Args {
    /// Redis to measure the commits against (a unique key prefix is used,
    /// then deleted).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Runs of each command and backend.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// The heavier command (a program that starts an interpreter).
    #[arg(long, default_value = "python3 -c pass")]
    heavy: String,
    /// Commits measured per file size (and for the baseline without files).
    #[arg(long, default_value_t = 100)]
    commits: usize,
    /// Sizes of the changed file, in bytes, comma-separated.
    #[arg(long, default_value = "1024,102400,1048576", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Untimed runs (and commits) before each measurement: the first
    /// `bwrap` writes the sandbox's `/etc` files, the first commit loads
    /// the script.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    switchboard_load::exit("sandbox_costs", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<String> {
    let mut admin = switchboard_load::redis_admin::Admin::connect(&args.redis).await?;
    let mut context = Context::gather_with(&mut admin).await?;
    // A fresh directory in the system's temporary one, as the gateway makes
    // it when `[sandbox] dir` is not set.
    let root = switchboard::sandbox::prepare_root(&SandboxConfig::default()).await?;
    let prefix = run_prefix();
    let (store, _notices) = commits::open_store(&args.redis, &prefix)?;
    let startup = startup(&args, &root, &store).await;
    let commits = match &startup {
        Ok(_) => commits::measure(&args, &mut admin, &root, &store).await,
        Err(_) => Err("not measured: the start-up phase failed".into()),
    };
    let deleted = admin.delete_prefix(&prefix).await?;
    eprintln!("sandbox_costs: deleted {deleted} keys");
    tokio::fs::remove_dir_all(&root).await?;
    let (startup, commits) = (startup?, commits?);
    context.finish();

    let mut w = String::new();
    context.write_header(&mut w, "Sandbox start-up and workspace commit costs", &args.redis);
    startup.write(&mut w, &args);
    commits.write(&mut w, &args);
    Ok(w)
}

/// One way of running a command, timed per run.
enum Variant {
    /// `sh -c <command>`, spawned and waited for with `std::process`.
    Plain(String),
    /// `bwrap <args> /bin/true`, spawned and waited for with
    /// `std::process`, as `uid` (when this process is root).
    Bwrap { args: Vec<String>, uid: Option<u32> },
    /// Through a backend, as the `bash` tool runs it.
    Backend(Arc<Workspace>, String),
}

impl Variant {
    async fn time(&self) -> Result<Duration> {
        match self {
            Self::Plain(command) => {
                let mut plain = std::process::Command::new("sh");
                plain.args(["-c", command]).env_clear().env("PATH", SANDBOX_PATH);
                spawn_and_wait(plain).await
            }
            Self::Bwrap { args, uid } => {
                let mut bwrap = std::process::Command::new(&SandboxConfig::default().bwrap_path);
                bwrap.args(args).arg("/bin/true").env_clear();
                if let Some(uid) = uid {
                    bwrap.uid(*uid).gid(*uid);
                }
                spawn_and_wait(bwrap).await
            }
            Self::Backend(workspace, command) => {
                let started = Instant::now();
                let out = workspace.exec(command, Duration::from_secs(30), None, &Default::default()).await?;
                let took = started.elapsed();
                if out.exit_code != Some(0) {
                    return Err(format!("`{command}` failed: {out:?}").into());
                }
                Ok(took)
            }
        }
    }
}

/// Spawns and waits on the blocking pool; the time is taken there.
async fn spawn_and_wait(mut command: std::process::Command) -> Result<Duration> {
    command.stdin(Stdio::null()).stdout(Stdio::null());
    let (took, status) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let status = command.spawn().and_then(|mut child| child.wait());
        (started.elapsed(), status)
    })
    .await?;
    let status = status?;
    if !status.success() {
        return Err(format!("a plain spawn failed: {status}").into());
    }
    Ok(took)
}

/// The breakdown's rows: `bwrap` alone (`--version`: its exec and nothing
/// more); then in namespaces (a `bwrap` that is not setuid, as here, always
/// makes a user and a mount namespace) with a new root holding only the
/// system directories, one more kind of namespace per row; then with the
/// rest of the backend's kinds of mounts. The rows copy
/// `sandbox/bubblewrap.rs`'s lists by hand (its argument builder is
/// private): the last is close to the backend's `bwrap`, not the same.
fn breakdown(workspace: &Path) -> Vec<(&'static str, Vec<String>)> {
    let words = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut system = Vec::new();
    for path in ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"] {
        system.extend(match std::fs::read_link(path) {
            Ok(target) => ["--symlink".into(), target.to_string_lossy().into_owned(), path.into()],
            Err(_) => ["--ro-bind-try".into(), path.into(), path.into()],
        });
    }
    let user = [words(&["--unshare-user"]), system.clone()].concat();
    let others = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"];
    let others = [words(&others), system.clone()].concat();
    let all = [words(&["--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000"]), system].concat();
    let mut mounts = all.clone();
    mounts.extend(words(&["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]));
    let tmp = SandboxConfig::default().limits.tmp_bytes.to_string();
    mounts.extend(words(&["--proc", "/proc", "--dev", "/dev", "--size", &tmp, "--perms", "1777"]));
    mounts.extend(words(&["--tmpfs", "/tmp", "--dir", "/etc"]));
    for path in ["ssl", "ca-certificates", "pki", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives"] {
        let path = format!("/etc/{path}");
        mounts.extend(["--ro-bind-try".into(), path.clone(), path]);
    }
    mounts.extend(words(&["--ro-bind-try", "/etc/localtime", "/etc/localtime"]));
    mounts.extend(words(&["--ro-bind-try", "/etc/mime.types", "/etc/mime.types", "--bind"]));
    mounts.extend([workspace.to_string_lossy().into_owned(), "/workspace".into()]);
    mounts.extend(words(&["--chdir", "/workspace"]));
    vec![
        ("bwrap alone: `bwrap --version` (its start, no namespace)", words(&["--version"])),
        ("bwrap: user + mount namespaces, a new root with the system directories read-only", user),
        ("… + pid, ipc, uts, cgroup namespaces", others),
        ("… + net namespace (`--unshare-all`)", all),
        (
            "… + the backend's other kinds of mounts: `/etc` read-only, `/proc`, `/dev`, a tmpfs `/tmp`, the workspace; capabilities dropped",
            mounts,
        ),
    ]
}

/// Section 1's samples, in ms.
struct Startup {
    /// Per command: plain, `none`, `bubblewrap`.
    commands: Vec<(String, [Summary; 3])>,
    /// The breakdown's rows: what runs, and its times.
    breakdown: Vec<(&'static str, Summary)>,
    uid: Option<u32>,
}

async fn startup(args: &Args, root: &Path, store: &Store) -> Result<Startup> {
    // A workspace of its own per backend (of a session that has no files).
    let open = |backend, id: &'static str| {
        let workspaces = commits::workspaces(root, store, backend);
        async move { workspaces.open(&SessionKey::new("bench", id), 1, false).await }
    };
    let none = open(SandboxBackend::Unsandboxed, "startup-none").await?;
    let bwrap = open(SandboxBackend::Bubblewrap, "startup-bwrap").await?;
    // `/proc/self` belongs to the process's effective uid.
    let running_as_root = std::fs::metadata("/proc/self")?.uid() == 0;
    let uid = running_as_root.then_some(SandboxConfig::default().uid);
    let mut variants = Vec::new();
    for command in ["true", args.heavy.as_str()] {
        variants.push(Variant::Plain(command.into()));
        variants.push(Variant::Backend(none.clone(), command.into()));
        variants.push(Variant::Backend(bwrap.clone(), command.into()));
    }
    let rows = breakdown(bwrap.dir());
    for (_, args) in &rows {
        variants.push(Variant::Bwrap { args: args.clone(), uid });
    }
    let mut samples = vec![Vec::with_capacity(args.runs); variants.len()];
    for round in 0..args.warmup + args.runs {
        if round % 50 == 0 {
            eprintln!("sandbox_costs: start-up round {round} of {}", args.warmup + args.runs);
        }
        for (variant, samples) in variants.iter().zip(&mut samples) {
            let took = variant.time().await?;
            if round >= args.warmup {
                samples.push(millis(took));
            }
        }
    }
    let summaries = samples.into_iter().map(Summary::of).collect::<Option<Vec<_>>>().ok_or("no sample")?;
    // In the order the variants were made.
    let mut summaries = summaries.into_iter();
    let mut next = || summaries.next().ok_or("no variant");
    let mut commands = Vec::new();
    for command in ["true", args.heavy.as_str()] {
        commands.push((command.to_string(), [next()?, next()?, next()?]));
    }
    let breakdown = rows.into_iter().map(|(name, _)| Ok((name, next()?))).collect::<Result<_>>()?;
    Ok(Startup { commands, breakdown, uid })
}

fn pair(s: &Summary) -> String {
    format!("{:.2} / {:.2}", s.p50, s.p99)
}

impl Startup {
    fn write(&self, w: &mut String, args: &Args) {
        let who = match self.uid {
            Some(uid) => {
                format!("this process is root: both `bwrap` (the backend's and the breakdown's) run as uid {uid}")
            }
            None => "this process is not root: `bwrap` runs as its uid".to_string(),
        };
        let _ = writeln!(w, "\n## 1. Sandbox start-up per command\n");
        let _ = writeln!(
            w,
            "- {} runs of each variant after {} untimed, one at a time, every variant once per round; wall time from spawn to exit reaped (backends: the whole `Workspace::exec`, output pipes read to their end)",
            args.runs, args.warmup
        );
        let _ = writeln!(
            w,
            "- plain: `std::process::Command::new(\"sh\").args([\"-c\", command])`, `PATH={SANDBOX_PATH}`, spawn + wait"
        );
        let _ = writeln!(w, "- {who}\n");
        let _ = writeln!(
            w,
            "| command | plain `sh -c` p50 / p99 (ms) | `none` backend p50 / p99 | `bubblewrap` backend p50 / p99 | bubblewrap − none (p50) | bubblewrap ÷ plain (p50) |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|");
        for (command, [plain, none, bwrap]) in &self.commands {
            let _ = writeln!(
                w,
                "| `{command}` | {} | {} | {} | {:+.2} ms | {:.1} |",
                pair(plain),
                pair(none),
                pair(bwrap),
                bwrap.p50 - none.p50,
                bwrap.p50 / plain.p50
            );
        }
        let [plain, none, bwrap] = &self.commands[0].1;
        let _ = writeln!(w, "\n### Where bubblewrap's start-up goes (`true`)\n");
        let _ = writeln!(
            w,
            "`bwrap … /bin/true` spawned directly (no shell, no pipes, no limits; as the uid above): alone, then in namespaces with a root of the system directories, one more kind per row, then with the backend's other kinds of mounts; the last rows are the backends of the table above. Steps are differences of medians.\n"
        );
        let _ = writeln!(w, "| what runs | p50 / p99 (ms) | step from the row above (p50) |");
        let _ = writeln!(w, "|---|---:|---:|");
        let _ = writeln!(w, "| plain `sh -c true` | {} | |", pair(plain));
        let mut above = plain.p50;
        for (name, s) in &self.breakdown {
            let _ = writeln!(w, "| {name} | {} | {:+.2} ms |", pair(s), s.p50 - above);
            above = s.p50;
        }
        let _ = writeln!(
            w,
            "| the `bubblewrap` backend: the above, plus its made-up `/etc` files, the limits, the process-limit shell and `sh -c`, output pipes | {} | {:+.2} ms |",
            pair(bwrap),
            bwrap.p50 - above
        );
        let _ = writeln!(
            w,
            "| for comparison, the `none` backend: plain `sh -c` plus the limits, the process-limit shell and output pipes | {} | {:+.2} ms from plain |",
            pair(none),
            none.p50 - plain.p50
        );
    }
}
