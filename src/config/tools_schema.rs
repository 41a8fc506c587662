//! `[tools.sandbox]` and `[tools.exec]`: where the host tools run and when a person must
//! approve a command first.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[tools.sandbox] mode`: which sessions' commands run confined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Every session but the agent's main one (`agent:<id>:main`, the operator's own) is
    /// sandboxed: groups, channels and other people's DMs never reach the host.
    #[default]
    NonMain,
    /// Every session is sandboxed, the main one too.
    All,
    /// Nothing is sandboxed: commands run on the host as Ferry's user. Only for a bot that
    /// nobody but its operator can talk to.
    Off,
}

/// `[tools.sandbox] scope`: how sessions share files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxScope {
    /// Each session has a workspace of its own under `<state_dir>/sandboxes`.
    #[default]
    Session,
    /// Every session works in the agent's workspace (`agents.defaults.workspace`).
    Agent,
}

/// `[tools.sandbox]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    pub scope: SandboxScope,
    /// Whether sandboxed commands may reach the network. Off: a fresh network namespace
    /// with nothing in it, so even services on the host's loopback (Ferry's own gateway)
    /// are out of reach.
    pub network: bool,
    /// CPU time one sandboxed process may use, in seconds (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Heap one sandboxed process may use, in MiB (`RLIMIT_DATA`; address space is not
    /// limited, which would break Node and the JVM).
    pub memory_mb: u64,
    /// Processes and threads one sandbox may run at once (`RLIMIT_NPROC`, counted per
    /// sandbox): a fork bomb stops here.
    pub max_processes: u64,
    /// The largest file a sandboxed process may write, in MiB (`RLIMIT_FSIZE`).
    pub max_file_mb: u64,
    /// Directories sandboxed commands may read and run programs from, besides the system's
    /// (`/usr`, `/bin`, `/lib`, `/etc`…): a toolchain under `/opt` or a home directory.
    pub read_only: Vec<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxMode::NonMain,
            scope: SandboxScope::Session,
            network: false,
            cpu_seconds: 600,
            memory_mb: 2048,
            max_processes: 256,
            max_file_mb: 1024,
            read_only: Vec::new(),
        }
    }
}

/// `[tools.exec] ask`: when a command needs a person's approval before it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecAsk {
    /// Never: every command runs.
    Off,
    /// Commands the allowlist does not match.
    #[default]
    OnMiss,
    /// Every command, listed or not.
    Always,
}

/// `[tools.exec]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    pub ask: ExecAsk,
    /// Commands that run without asking under `ask = "on-miss"`: exact commands, or
    /// patterns where `*` stands for anything (`"cargo *"`, `"git status"`).
    pub allowlist: Vec<String>,
    /// Seconds to wait for `/approve` or `/deny`; no answer denies the command.
    pub approval_timeout: u64,
    /// The longest `timeout` a command may ask for, in seconds (the default is 120).
    pub max_timeout: u64,
    /// Commands one session may keep running in the background at once.
    pub max_background: u64,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            ask: ExecAsk::OnMiss,
            allowlist: Vec::new(),
            approval_timeout: 300,
            max_timeout: 1800,
            max_background: 4,
        }
    }
}
