//! The start-up probe: one real sandboxed process, started the way every command is, that
//! checks from inside that the sandbox holds. Kernels differ (Landlock off at boot,
//! unprivileged user namespaces disabled by AppArmor, a container's seccomp profile), so
//! nothing is assumed: if any check fails, sandboxed sessions are not offered commands.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::spec::{LaunchSpec, ProbeTargets, Program};
use super::{Placement, Sandbox};

/// Processes the probe's sandbox may run; it tries to start more.
const PROBE_PROCESSES: u64 = 16;
const PROBE_FORKS: u32 = 48;

/// What the probe saw from inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    pub workspace_writable: bool,
    pub canary_readable: bool,
    pub outside_writable: bool,
    pub loopback_reachable: bool,
    /// Children it managed to start, of [`ProbeTargets::forks`].
    pub forks: u32,
}

impl Findings {
    /// Why these findings mean the sandbox does not hold, if they do.
    fn problem(&self, network: bool, forks: u32) -> Option<String> {
        let mut problems = Vec::new();
        if !self.workspace_writable {
            problems.push("the workspace is not writable from inside");
        }
        if self.canary_readable {
            problems.push("a hidden file was readable");
        }
        if self.outside_writable {
            problems.push("a path outside the workspace was writable");
        }
        if self.loopback_reachable && !network {
            problems.push("the host's loopback was reachable");
        }
        if self.forks >= forks {
            problems.push("the process limit was not enforced");
        }
        (!problems.is_empty()).then(|| problems.join(", "))
    }
}

/// Runs inside the launcher, after confinement.
pub fn inside(targets: &ProbeTargets) -> Findings {
    let workspace_writable = std::fs::write(".ferry-probe", b"ok").is_ok();
    let _ = std::fs::remove_file(".ferry-probe");
    let canary_readable = std::fs::File::open(&targets.canary).is_ok_and(|mut file| {
        let mut text = String::new();
        file.read_to_string(&mut text).is_ok()
    });
    let outside_writable = std::fs::File::create(&targets.outside).is_ok_and(|mut file| file.write_all(b"x").is_ok());
    let loopback_reachable =
        TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, targets.port).into(), Duration::from_secs(1)).is_ok();
    Findings { workspace_writable, canary_readable, outside_writable, loopback_reachable, forks: forks(targets.forks) }
}

/// Starts up to `count` children that wait on a pipe, counts them, then lets them go.
fn forks(count: u32) -> u32 {
    let mut fds = [0; 2];
    // SAFETY: creates a pipe into a two-element array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return 0;
    }
    let mut started = Vec::new();
    for _ in 0..count {
        // SAFETY: single-threaded; the child only reads, closes and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let mut byte = 0u8;
            // SAFETY: the child blocks on the read end until the parent closes the write end.
            unsafe {
                libc::close(fds[1]);
                libc::read(fds[0], (&raw mut byte).cast(), 1);
                libc::_exit(0);
            }
        }
        if pid < 0 {
            break;
        }
        started.push(pid);
    }
    // SAFETY: closing our pipe ends, then reaping our own children.
    unsafe {
        libc::close(fds[1]);
        libc::close(fds[0]);
        for pid in &started {
            libc::waitpid(*pid, std::ptr::null_mut(), 0);
        }
    }
    started.len() as u32
}

/// Runs the probe through the production path; `Ok` with how long it took, or why the
/// sandbox cannot be used.
pub async fn run(sandbox: &Sandbox, scratch: &Path) -> Result<Duration, String> {
    let started = Instant::now();
    rules_supported()?;
    let workspace = scratch.join("probe-work");
    let tmp = scratch.join("probe-tmp");
    for dir in [&workspace, &tmp] {
        std::fs::create_dir_all(dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        sandbox.hand_over(dir).map_err(|error| format!("cannot prepare {}: {error}", dir.display()))?;
    }
    let canary = scratch.join("probe-canary");
    std::fs::write(&canary, b"canary").map_err(|error| format!("cannot write {}: {error}", canary.display()))?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|error| format!("cannot listen: {error}"))?;
    let port = listener.local_addr().map_err(|error| error.to_string())?.port();
    let placement = Placement { workspace: workspace.clone(), tmp, sandboxed: true };
    let mut confinement = sandbox.confinement(&placement);
    confinement.limits.processes = PROBE_PROCESSES;
    let targets = ProbeTargets { canary, outside: scratch.join("probe-outside"), port, forks: PROBE_FORKS };
    let spec = LaunchSpec { confinement: Some(confinement), program: Program::Probe(targets) };
    let output = sandbox
        .launch_command(&spec, &placement)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .map_err(|_| "the probe did not finish within 20 s".to_owned())?
        .map_err(|error| format!("cannot start the launcher: {error}"))?;
    drop(listener);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(stderr.trim().strip_prefix("sandbox: ").unwrap_or(stderr.trim()).to_owned());
    }
    let findings: Findings = serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("the probe's report is unreadable ({error})"))?;
    match findings.problem(sandbox.config.network, PROBE_FORKS) {
        Some(problem) => Err(format!("the sandbox does not hold: {problem}")),
        None => Ok(started.elapsed()),
    }
}

/// Landlock must be there, and new enough: with ABI 6 scopes a sandbox running as Ferry's
/// own user cannot signal it.
#[cfg(feature = "sandbox")]
fn rules_supported() -> Result<(), String> {
    let abi = super::rules::kernel_abi()?;
    let needed = if super::is_root() { super::rules::MIN_ABI } else { 6 };
    if abi < needed {
        return Err(format!("the kernel's Landlock ABI is {abi}; the sandbox needs {needed} or newer"));
    }
    Ok(())
}

/// A build without the `sandbox` feature has no Landlock to confine with.
#[cfg(not(feature = "sandbox"))]
fn rules_supported() -> Result<(), String> {
    Err(format!("the sandbox {}", crate::config::features::needs("sandbox")))
}

/// A build without Landlock reports, in the probe's one line, which build has it.
#[cfg(all(test, not(feature = "sandbox")))]
#[test]
fn without_the_sandbox_feature_the_probe_names_it() {
    let why = rules_supported().unwrap_err();
    assert!(why.contains("needs a ferry built with --features sandbox"), "{why}");
}
