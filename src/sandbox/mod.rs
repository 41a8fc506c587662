//! Where the host tools run: each session's workspace, and the sandbox that confines
//! commands started for anyone but the operator (`[tools.sandbox]`).
//!
//! A sandboxed command runs through the [`launcher`] as nobody, in its own user, PID and
//! (without `network`) network namespaces, under Landlock rules that let it write only its
//! workspace and a private tmp and read only the system directories, with rlimits on CPU,
//! memory, processes and file size, and an environment holding no secret. At start-up a
//! [`probe`] checks from inside a real sandbox that all of it holds; if it does not,
//! sandboxed sessions are not offered commands at all. Nothing falls back to the host.
//!
//! The launcher also runs the parsers of users' files ([`reader_confinement`]: no path at
//! all, no network), for `crate::media::reader`.
//!
//! Landlock is the `sandbox` cargo feature: without it the probe fails with the reason,
//! and nothing is run confined (`crate::config::features`).
//!
//! The file tools do not need the launcher: they resolve every path inside the session's
//! workspace with `openat2(RESOLVE_BENEATH)` (see `agent::tools::fs`).

pub mod launcher;
pub mod probe;
#[cfg(feature = "sandbox")]
pub mod rules;
pub mod spec;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

pub use spec::{Confinement, FileParser, LaunchSpec, Limits, Program, ReadJob};

use crate::config::{SandboxConfig, SandboxMode, SandboxScope};
use crate::routing::is_main_session;

/// The user and group sandboxed commands become when Ferry runs as root: `nobody`.
const NOBODY: (u32, u32) = (65534, 65534);
/// The `PATH` sandboxed commands get.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Open files per sandboxed process.
const OPEN_FILES: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// Whether Ferry runs as root (and so must drop to `nobody` in the sandbox).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The places the sandbox must know: where workspaces go and what stays hidden.
#[derive(Debug, Clone)]
pub struct SandboxPaths {
    pub state_dir: PathBuf,
    /// `agents.defaults.workspace`.
    pub agent_workspace: PathBuf,
    /// The config file Ferry loaded, if any: never readable from a sandbox.
    pub config_file: Option<PathBuf>,
    /// Ferry's own binary, run as the launcher.
    pub launcher: PathBuf,
}

/// Where one session's tools work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The commands' working directory and `HOME`, and the file tools' root.
    pub workspace: PathBuf,
    /// The private `TMPDIR`.
    pub tmp: PathBuf,
    /// Whether commands run confined ([`Confinement`]) or on the host.
    pub sandboxed: bool,
}

/// The sandbox as configured, with the start-up probe's verdict.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    paths: SandboxPaths,
    /// `Ok` once the probe passed; until it has run, sandboxed commands are not available.
    verdict: OnceLock<Result<(), String>>,
}

impl Sandbox {
    pub fn new(config: SandboxConfig, paths: SandboxPaths) -> Self {
        Self { config, paths, verdict: OnceLock::new() }
    }

    /// For tests of the file tools: nothing confined, one workspace for every session at
    /// `root/workspace`, state at `root/state`.
    #[cfg(test)]
    pub(crate) fn unconfined(root: &Path) -> Self {
        let config = SandboxConfig { mode: SandboxMode::Off, scope: SandboxScope::Agent, ..SandboxConfig::default() };
        let paths = SandboxPaths {
            state_dir: root.join("state"),
            agent_workspace: root.join("workspace"),
            config_file: None,
            launcher: PathBuf::from("/nonexistent"),
        };
        Self::new(config, paths)
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Runs the start-up probe once and remembers its verdict; `Ok` with how long it took.
    pub async fn probe(&self) -> Result<std::time::Duration, String> {
        let scratch = self.paths.state_dir.join("sandboxes").join(".probe");
        let result = probe::run(self, &scratch).await;
        let _ = std::fs::remove_dir_all(&scratch);
        let _ = self.verdict.set(result.as_ref().map(|_| ()).map_err(Clone::clone));
        result
    }

    /// Why sandboxed commands cannot run, or `None` when they can.
    pub fn unavailable(&self) -> Option<String> {
        match self.verdict.get() {
            Some(Ok(())) => None,
            Some(Err(why)) => Some(why.clone()),
            None => Some("the sandbox has not been checked yet".to_owned()),
        }
    }

    /// Whether `session_key`'s commands must run sandboxed (`tools.sandbox.mode`).
    pub fn confines(&self, session_key: &str) -> bool {
        match self.config.mode {
            SandboxMode::Off => false,
            SandboxMode::All => true,
            SandboxMode::NonMain => !is_main_session(session_key),
        }
    }

    /// Whether `session_key` may run commands: on the host, or in a sandbox that works.
    pub fn can_run_commands(&self, session_key: &str) -> bool {
        !self.confines(session_key) || self.unavailable().is_none()
    }

    /// The session's workspace and tmp, created (and handed to the sandbox user when Ferry
    /// is root). The workspace follows `tools.sandbox.scope`.
    pub fn place(&self, session_key: &str) -> std::io::Result<Placement> {
        let own = self.paths.state_dir.join("sandboxes").join(slug(session_key));
        let workspace = match self.config.scope {
            SandboxScope::Session => own.join("work"),
            SandboxScope::Agent => self.paths.agent_workspace.clone(),
        };
        let tmp = own.join("tmp");
        let sandboxed = self.confines(session_key);
        for dir in [&workspace, &tmp] {
            std::fs::create_dir_all(dir)?;
            if sandboxed {
                self.hand_over(dir)?;
            }
        }
        Ok(Placement { workspace, tmp, sandboxed })
    }

    /// Gives `dir` to the sandbox user, so a command running as nobody can write it.
    pub fn hand_over(&self, dir: &Path) -> std::io::Result<()> {
        match sandbox_user() {
            Some((uid, gid)) => std::os::unix::fs::chown(dir, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }

    /// The confinement of a sandboxed command in `placement`.
    pub fn confinement(&self, placement: &Placement) -> Confinement {
        let mut readable: Vec<PathBuf> = spec::SYSTEM_READABLE.iter().map(PathBuf::from).collect();
        readable.extend(self.config.read_only.iter().cloned());
        let mut hidden = vec![self.paths.state_dir.clone()];
        hidden.extend(self.paths.config_file.iter().cloned());
        if let Some(home) = std::env::var_os("HOME") {
            hidden.push(Path::new(&home).join(".ssh"));
        }
        if self.config.scope == SandboxScope::Session {
            hidden.push(self.paths.agent_workspace.clone());
        }
        Confinement {
            writable: vec![placement.workspace.clone(), placement.tmp.clone()],
            readable,
            devices: spec::DEVICES.iter().map(PathBuf::from).collect(),
            hidden,
            network: self.config.network,
            limits: Limits {
                cpu_seconds: self.config.cpu_seconds,
                data_bytes: self.config.memory_mb.saturating_mul(MIB),
                processes: self.config.max_processes,
                file_bytes: self.config.max_file_mb.saturating_mul(MIB),
                open_files: OPEN_FILES,
            },
            run_as: sandbox_user(),
        }
    }

    /// A shell command in `placement`: confined when the placement is sandboxed.
    pub fn shell(&self, command: &str, placement: &Placement) -> tokio::process::Command {
        let confinement = placement.sandboxed.then(|| self.confinement(placement));
        let spec = LaunchSpec { confinement, program: Program::Shell(command.to_owned()) };
        self.launch_command(&spec, placement)
    }

    /// The launcher process for `spec`, not yet started. Spawned without `pre_exec` and by
    /// absolute path, so the standard library uses `posix_spawn` rather than forking the
    /// daemon. Its own process group, so the host's commands can be killed as a group.
    pub fn launch_command(&self, spec: &LaunchSpec, placement: &Placement) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.paths.launcher);
        command
            .arg(launcher::LAUNCHER_ARG)
            .arg(serde_json::to_string(spec).unwrap_or_default())
            .current_dir(&placement.workspace)
            .env_clear()
            .stdin(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        if spec.confinement.is_some() {
            command
                .env("PATH", SANDBOX_PATH)
                .env("HOME", &placement.workspace)
                .env("TMPDIR", &placement.tmp)
                .env("LANG", "C.UTF-8")
                .env("TERM", "dumb");
        } else {
            command.envs(host_environment()).env("TMPDIR", &placement.tmp).env("TERM", "dumb");
        }
        command
    }
}

/// The confinement of a file parser (`crate::media::reader`): nothing of the filesystem,
/// no network, `limits`. It reads its file on stdin and answers on stdout, both open before
/// the sandbox closes, so it needs no path at all.
pub fn reader_confinement(limits: Limits) -> Confinement {
    Confinement {
        writable: Vec::new(),
        readable: Vec::new(),
        devices: Vec::new(),
        hidden: Vec::new(),
        network: false,
        limits,
        run_as: sandbox_user(),
    }
}

/// The launcher process for a file parser's `spec`, not yet started: `launcher` (Ferry's own
/// binary) with an empty environment, in `/`, its stdin, stdout and stderr piped, its own
/// process group (so a deadline kills the parser and the launcher together), killed if
/// dropped.
pub fn reader_command(launcher: &Path, spec: &LaunchSpec) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(launcher);
    command
        .arg(launcher::LAUNCHER_ARG)
        .arg(serde_json::to_string(spec).unwrap_or_default())
        .current_dir("/")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// The user sandboxed commands run as: nobody when Ferry is root, else Ferry's own user.
fn sandbox_user() -> Option<(u32, u32)> {
    is_root().then_some(NOBODY)
}

/// Ferry's environment without anything that looks like a credential: even the
/// operator's own commands on the host do not see the model keys and bot tokens.
fn host_environment() -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(|(name, _)| {
        let name = name.to_string_lossy().to_uppercase();
        !(name.starts_with("FERRY_")
            || ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "_AUTH"]
                .iter()
                .any(|word| name.contains(word)))
    })
}

/// A directory name for a session key: readable, and unique through a checksum of the key.
fn slug(session_key: &str) -> String {
    let readable: String = session_key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' })
        .take(80)
        .collect();
    format!("{}-{:08x}", readable.trim_start_matches('.'), crc32fast::hash(session_key.as_bytes()))
}

#[cfg(test)]
mod tests;
