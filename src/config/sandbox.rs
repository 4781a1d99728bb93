//! `[sandbox]`, `[sandbox.templates.<name>]` and `[skills]`: where the
//! default tools (`bash`, `read`, `patch`) and the rlm REPL's `exec` run,
//! with which limits, how big a session's workspace may grow, and which
//! skills the agent is told about. The tenant side (`default_tools`,
//! `tool_permissions`, `sandbox_network`) is in `validate/tenants.rs`.
//!
//! This module validates; it runs nothing. Whether the sandbox works on
//! this host is found out by a probe at start-up (`crate::sandbox::probe`).

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde::Deserialize;

use super::{ConfigErrors, Permission};

/// The default tools a tenant may have (`[[tenants]] default_tools`).
pub const DEFAULT_TOOLS: &[&str] = &["agent", "bash", "read", "patch"];
/// What a tenant that lists no `default_tools` has: the subagent tool, as
/// before the workspace tools existed.
pub const LEGACY_DEFAULT_TOOLS: &[&str] = &["agent"];

#[derive(Debug, Default, Deserialize)]
pub struct RawSandbox {
    pub backend: Option<String>,
    pub allow_unsandboxed: Option<bool>,
    pub bwrap_path: Option<String>,
    pub dir: Option<String>,
    pub uid: Option<u32>,
    pub timeout_secs: Option<u64>,
    pub max_timeout_secs: Option<u64>,
    pub output_max_bytes: Option<u64>,
    pub memory_max_bytes: Option<u64>,
    pub cpu_max_secs: Option<u64>,
    pub processes_max: Option<u64>,
    pub tmp_max_bytes: Option<u64>,
    pub workspace_max_bytes: Option<u64>,
    pub workspace_max_file_bytes: Option<u64>,
    pub retry_on_takeover: Option<bool>,
    #[serde(default)]
    pub templates: BTreeMap<String, RawTemplate>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawTemplate {
    pub dir: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawSkills {
    #[serde(default)]
    pub dirs: Vec<String>,
}

/// Which sandbox runs commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxBackend {
    /// bubblewrap: namespaces, a read-only system view, no network unless
    /// the tenant allows it.
    Bubblewrap,
    /// Commands run as plain child processes with the limits only.
    /// Development only: refused unless `allow_unsandboxed = true`.
    Unsandboxed,
}

impl SandboxBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bubblewrap => "bubblewrap",
            Self::Unsandboxed => "none",
        }
    }
}

/// Per-command limits, applied to every process a command starts (see
/// `crate::sandbox` for what each one really guarantees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandLimits {
    /// RLIMIT_AS of each process.
    pub memory_bytes: u64,
    /// RLIMIT_CPU of each process (seconds of CPU time).
    pub cpu_secs: u64,
    /// RLIMIT_NPROC inside the sandbox's user namespace: processes (and
    /// threads) one command may have at once.
    pub processes: u64,
    /// RLIMIT_FSIZE: the largest file a command may write.
    pub file_bytes: u64,
    /// Size of the command's own `/tmp` (a tmpfs).
    pub tmp_bytes: u64,
    /// Bytes of stdout and of stderr kept per command; the rest is cut.
    pub output_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    pub backend: SandboxBackend,
    pub bwrap_path: PathBuf,
    /// Where workspaces are materialised; `None`: a directory of the
    /// system's temporary directory, made at start-up.
    pub dir: Option<PathBuf>,
    /// The uid (and gid) sandboxed commands run as outside their user
    /// namespace, when the gateway runs as root.
    pub uid: u32,
    /// `bash`'s timeout when the model gives none, and the most it may ask.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub limits: CommandLimits,
    pub workspace_max_bytes: u64,
    pub workspace_max_file_bytes: u64,
    /// A `bash` call cut by a replica's death runs again on the replica
    /// that takes over (its workspace is as it was before the call).
    pub retry_on_takeover: bool,
    /// Named seeds of new workspaces: name → directory.
    pub templates: BTreeMap<String, PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            backend: SandboxBackend::Bubblewrap,
            bwrap_path: PathBuf::from("/usr/bin/bwrap"),
            dir: None,
            uid: 65534,
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(600),
            limits: CommandLimits {
                memory_bytes: 1 << 30,
                cpu_secs: 60,
                processes: 64,
                file_bytes: 4 << 20,
                tmp_bytes: 64 << 20,
                output_bytes: 64 * 1024,
            },
            workspace_max_bytes: 16 << 20,
            workspace_max_file_bytes: 4 << 20,
            retry_on_takeover: true,
            templates: BTreeMap::new(),
        }
    }
}

/// `[skills] dirs`: each `DIR/<skill>/SKILL.md` is a skill (found at start-up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillsConfig {
    pub dirs: Vec<PathBuf>,
}

/// The default tools a tenant has and how each is permitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultTools {
    /// Names from [`DEFAULT_TOOLS`], in the order listed.
    pub enabled: Vec<String>,
    /// `bash` and `patch` ask, `read` is allowed, unless the tenant says
    /// otherwise. (`agent` always runs: subagents ask for nothing.)
    pub permissions: BTreeMap<String, Permission>,
    /// Commands of this tenant may reach the network.
    pub network: bool,
}

impl Default for DefaultTools {
    fn default() -> Self {
        Self {
            enabled: LEGACY_DEFAULT_TOOLS.iter().map(|t| t.to_string()).collect(),
            permissions: BTreeMap::new(),
            network: false,
        }
    }
}

impl DefaultTools {
    pub fn has(&self, tool: &str) -> bool {
        self.enabled.iter().any(|t| t == tool)
    }

    /// Whether any workspace tool is on.
    pub fn uses_workspace(&self) -> bool {
        ["bash", "read", "patch"].iter().any(|t| self.has(t))
    }

    /// How a call of `tool` is permitted for this tenant.
    pub fn permission(&self, tool: &str) -> Permission {
        self.permissions.get(tool).copied().unwrap_or(match tool {
            "read" | "agent" => Permission::Allow,
            _ => Permission::Ask,
        })
    }
}

pub(super) fn validate_sandbox(errors: &mut ConfigErrors, raw: RawSandbox) -> SandboxConfig {
    let d = SandboxConfig::default();
    let allow_unsandboxed = raw.allow_unsandboxed.unwrap_or(false);
    let backend = match raw.backend.as_deref() {
        None | Some("bubblewrap") => SandboxBackend::Bubblewrap,
        Some("none") if allow_unsandboxed => SandboxBackend::Unsandboxed,
        Some("none") => {
            errors.push(
                "sandbox.backend",
                "\"none\" runs commands without a sandbox (development only): set allow_unsandboxed = true to accept that",
            );
            SandboxBackend::Unsandboxed
        }
        Some(other) => {
            errors.push("sandbox.backend", format!("{other:?} is not bubblewrap or none"));
            SandboxBackend::Bubblewrap
        }
    };
    let mut number = |key: &str, value: Option<u64>, default: u64| -> u64 {
        match value {
            Some(0) => {
                errors.push(format!("sandbox.{key}"), "must be a positive integer");
                default
            }
            Some(v) => v,
            None => default,
        }
    };
    let default_timeout = number("timeout_secs", raw.timeout_secs, d.default_timeout.as_secs());
    let max_timeout = number("max_timeout_secs", raw.max_timeout_secs, d.max_timeout.as_secs());
    let output_bytes = number("output_max_bytes", raw.output_max_bytes, d.limits.output_bytes as u64);
    let memory_bytes = number("memory_max_bytes", raw.memory_max_bytes, d.limits.memory_bytes);
    let cpu_secs = number("cpu_max_secs", raw.cpu_max_secs, d.limits.cpu_secs);
    let processes = number("processes_max", raw.processes_max, d.limits.processes);
    let tmp_bytes = number("tmp_max_bytes", raw.tmp_max_bytes, d.limits.tmp_bytes);
    let workspace_max_bytes = number("workspace_max_bytes", raw.workspace_max_bytes, d.workspace_max_bytes);
    let workspace_max_file_bytes =
        number("workspace_max_file_bytes", raw.workspace_max_file_bytes, d.workspace_max_file_bytes);
    if default_timeout > max_timeout {
        errors.push("sandbox.timeout_secs", "must not be longer than max_timeout_secs");
    }
    if workspace_max_file_bytes > workspace_max_bytes {
        errors.push("sandbox.workspace_max_file_bytes", "must not be larger than workspace_max_bytes");
    }
    // A workspace is written to the store in one commit: keep it well
    // below what one Redis command may carry (512 MiB).
    if workspace_max_bytes > 256 << 20 {
        errors.push("sandbox.workspace_max_bytes", "must be at most 268435456 (256 MiB)");
    }
    if memory_bytes < 16 << 20 {
        errors.push("sandbox.memory_max_bytes", "must be at least 16777216 (16 MiB): the sandbox itself needs some");
    }
    if processes < 4 {
        errors.push("sandbox.processes_max", "must be at least 4 (the shell, the command, a pipe)");
    }
    let mut templates = BTreeMap::new();
    for (name, template) in raw.templates {
        let at = format!("sandbox.templates.{name}.dir");
        match template.dir {
            Some(dir) if std::path::Path::new(&dir).is_dir() => {
                templates.insert(name, PathBuf::from(dir));
            }
            Some(dir) => errors.push(at, format!("{dir} is not a directory")),
            None => errors.push(at, "required"),
        }
    }
    let dir = raw.dir.map(PathBuf::from);
    if let Some(dir) = &dir
        && !dir.is_absolute()
    {
        errors.push("sandbox.dir", "must be an absolute path");
    }
    SandboxConfig {
        backend,
        bwrap_path: raw.bwrap_path.map(PathBuf::from).unwrap_or(d.bwrap_path),
        dir,
        uid: raw.uid.unwrap_or(d.uid),
        default_timeout: Duration::from_secs(default_timeout),
        max_timeout: Duration::from_secs(max_timeout),
        limits: CommandLimits {
            memory_bytes,
            cpu_secs,
            processes,
            file_bytes: workspace_max_file_bytes,
            tmp_bytes,
            output_bytes: usize::try_from(output_bytes).unwrap_or(usize::MAX),
        },
        workspace_max_bytes,
        workspace_max_file_bytes,
        retry_on_takeover: raw.retry_on_takeover.unwrap_or(d.retry_on_takeover),
        templates,
    }
}

pub(super) fn validate_skills(errors: &mut ConfigErrors, raw: RawSkills) -> SkillsConfig {
    let mut dirs = Vec::new();
    for (i, dir) in raw.dirs.into_iter().enumerate() {
        if !std::path::Path::new(&dir).is_absolute() {
            errors.push(format!("skills.dirs[{i}]"), "must be an absolute path");
        }
        dirs.push(PathBuf::from(dir));
    }
    SkillsConfig { dirs }
}

/// `[[tenants]] default_tools`, `tool_permissions` and `sandbox_network`.
pub(super) fn validate_default_tools(
    errors: &mut ConfigErrors,
    path: &str,
    listed: Option<Vec<String>>,
    permissions: BTreeMap<String, String>,
    network: Option<bool>,
) -> DefaultTools {
    let mut tools = DefaultTools { network: network.unwrap_or(false), ..DefaultTools::default() };
    if let Some(listed) = listed {
        tools.enabled.clear();
        for (i, name) in listed.into_iter().enumerate() {
            if !DEFAULT_TOOLS.contains(&name.as_str()) {
                errors.push(
                    format!("{path}.default_tools[{i}]"),
                    format!("{name:?} is not one of {}", DEFAULT_TOOLS.join(", ")),
                );
            } else if tools.enabled.contains(&name) {
                errors.push(format!("{path}.default_tools[{i}]"), format!("{name:?} is listed twice"));
            } else {
                tools.enabled.push(name);
            }
        }
    }
    for (tool, permission) in permissions {
        let at = format!("{path}.tool_permissions.{tool}");
        if !["bash", "read", "patch"].contains(&tool.as_str()) {
            errors.push(&at, "only bash, read and patch have a permission here ([[tools]] have their own)");
            continue;
        }
        if let Some(permission) = Permission::parse(errors, &at, &permission) {
            tools.permissions.insert(tool, permission);
        }
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsandboxed_backend_needs_an_explicit_yes() {
        let mut errors = ConfigErrors::default();
        let raw = RawSandbox { backend: Some("none".into()), ..RawSandbox::default() };
        assert_eq!(validate_sandbox(&mut errors, raw).backend, SandboxBackend::Unsandboxed);
        assert_eq!(errors.0[0].path, "sandbox.backend");
        let mut errors = ConfigErrors::default();
        let raw = RawSandbox { backend: Some("none".into()), allow_unsandboxed: Some(true), ..RawSandbox::default() };
        validate_sandbox(&mut errors, raw);
        assert!(errors.is_empty(), "{errors}");
    }

    #[test]
    fn a_tenant_without_default_tools_keeps_the_agent_tool_only() {
        let mut errors = ConfigErrors::default();
        let legacy = validate_default_tools(&mut errors, "t", None, BTreeMap::new(), None);
        assert!(legacy.has("agent") && !legacy.has("bash") && !legacy.uses_workspace());
        let listed = Some(vec!["bash".to_string(), "read".to_string()]);
        let mut permissions = BTreeMap::new();
        permissions.insert("bash".to_string(), "allow".to_string());
        let tools = validate_default_tools(&mut errors, "t", listed, permissions, Some(true));
        assert!(errors.is_empty(), "{errors}");
        assert!(!tools.has("agent") && tools.has("bash") && tools.network);
        assert_eq!(tools.permission("bash"), Permission::Allow);
        assert_eq!(tools.permission("patch"), Permission::Ask);
        assert_eq!(tools.permission("read"), Permission::Allow);
        let bad = Some(vec!["rm".to_string()]);
        validate_default_tools(&mut errors, "t", bad, BTreeMap::new(), None);
        assert_eq!(errors.0[0].path, "t.default_tools[0]");
    }
}
