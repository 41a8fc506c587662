//! The launcher: Ferry's own binary started as `ferry __sandbox-exec SPEC` to confine itself
//! and then become the command.
//!
//! Why a separate process rather than `pre_exec`: a `pre_exec` hook makes the standard
//! library `fork()` the whole daemon, whose cost grows with its memory (+9 ms at 128 MiB
//! in the sandbox study), and it may only make async-signal-safe calls. The launcher is
//! spawned cheaply (`posix_spawn`), is single-threaded (so it may create a user namespace),
//! and may allocate freely. `main` dispatches here before any runtime starts.
//!
//! Order, each step where it must be (docs/design/sandbox-study/REPORT.md):
//! 1. build the Landlock ruleset (opening paths may need Ferry's privileges);
//! 2. as root: become `run_as` (root ignores `RLIMIT_NPROC` even in a user namespace);
//! 3. `unshare` user, PID and (without network) network namespaces;
//! 4. `setrlimit`, after the user namespace so the process count is per sandbox;
//! 5. `restrict_self` (Landlock, which also sets no-new-privileges);
//! 6. fork: the command becomes PID 1 of its namespace, so when it ends or Ferry kills the
//!    launcher, the kernel kills everything it started;
//! 7. exec `/bin/sh -c COMMAND` (or, for the probe and the file parsers, run Rust code of
//!    this binary: no exec, the process already holds it).

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;

#[cfg(feature = "sandbox")]
use landlock::RulesetStatus;

use super::probe;
#[cfg(feature = "sandbox")]
use super::rules;
use super::spec::{Confinement, LaunchSpec, Limits, Program};

/// The first argument that makes `ferry` a launcher.
pub const LAUNCHER_ARG: &str = "__sandbox-exec";

/// The exit status when the sandbox cannot be set up: the command never ran.
pub const SETUP_FAILED: i32 = 125;

/// Runs the launcher when `args` (the process's arguments) ask for it; returns otherwise.
pub fn dispatch(args: &[OsString]) {
    if args.get(1).is_some_and(|arg| arg == LAUNCHER_ARG) {
        let code = match launch(args.get(2)) {
            Ok(never) => match never {},
            Err(problem) => {
                let _ = writeln!(io::stderr(), "sandbox: {problem}; the command did not run");
                SETUP_FAILED
            }
        };
        std::process::exit(code);
    }
}

enum Never {}

fn launch(spec: Option<&OsString>) -> Result<Never, String> {
    let spec = spec.and_then(|spec| spec.to_str()).ok_or("no launch spec")?;
    let spec: LaunchSpec = serde_json::from_str(spec).map_err(|error| format!("unreadable launch spec: {error}"))?;
    die_with_parent()?;
    if let Some(confinement) = &spec.confinement {
        confine(confinement)?;
    }
    match spec.program {
        Program::Shell(command) => {
            let error = std::process::Command::new("/bin/sh").arg("-c").arg(command).exec();
            Err(format!("cannot run /bin/sh: {error}"))
        }
        Program::Probe(targets) => {
            let report = probe::inside(&targets);
            let _ = writeln!(io::stdout(), "{}", serde_json::to_string(&report).unwrap_or_default());
            std::process::exit(0)
        }
        Program::Read(job) => {
            // Confined, these are already in force (the same values); unconfined (no sandbox
            // on this host), they are all that bounds the parser besides its deadline.
            set_limits(&job.limits)?;
            std::process::exit(crate::media::reader::serve(&job))
        }
    }
}

/// Steps 1–6 of the module doc.
#[cfg(feature = "sandbox")]
fn confine(confinement: &Confinement) -> Result<(), String> {
    let ruleset = rules::ruleset(confinement)?;
    if let Some((uid, gid)) = confinement.run_as {
        // SAFETY: plain syscalls on this single-threaded process's own credentials.
        unsafe {
            check(libc::setgroups(0, std::ptr::null()), "drop supplementary groups")?;
            check(libc::setresgid(gid, gid, gid), "become the sandbox group")?;
            check(libc::setresuid(uid, uid, uid), "become the sandbox user")?;
        }
        // A change of credentials clears the parent-death signal.
        die_with_parent()?;
    }
    let mut namespaces = libc::CLONE_NEWUSER | libc::CLONE_NEWPID;
    if !confinement.network {
        namespaces |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare on a single-threaded process.
    check(unsafe { libc::unshare(namespaces) }, "create the namespaces")?;
    set_limits(&confinement.limits)?;
    let status = ruleset.restrict_self().map_err(|error| format!("cannot enforce Landlock: {error}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced by this kernel".to_owned());
    }
    become_namespace_init()
}

/// A build without the `sandbox` feature has no Landlock: a confined program is refused, never
/// run with less (the probe says so first, so sandboxed sessions are not offered commands).
#[cfg(not(feature = "sandbox"))]
fn confine(_confinement: &Confinement) -> Result<(), String> {
    Err(format!("Landlock confinement {}", crate::config::features::needs("sandbox")))
}

/// Forks once: the parent waits and exits as the child does; the child, PID 1 of the new
/// PID namespace, goes on to exec the command.
#[cfg(feature = "sandbox")]
fn become_namespace_init() -> Result<(), String> {
    // SAFETY: the process is single-threaded, so the child may do anything after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("cannot fork into the PID namespace: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        return die_with_parent();
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid {
            break;
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            std::process::exit(SETUP_FAILED);
        }
    }
    if libc::WIFEXITED(status) {
        std::process::exit(libc::WEXITSTATUS(status));
    }
    std::process::exit(128 + libc::WTERMSIG(status));
}

/// Asks the kernel to SIGKILL this process when its parent dies, and exits now if it
/// already has (the launcher then belongs to nobody who could stop it).
fn die_with_parent() -> Result<(), String> {
    // SAFETY: prctl on this process only.
    let parent = unsafe {
        check(
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0),
            "set the parent-death signal",
        )?;
        libc::getppid()
    };
    if parent == 1 {
        std::process::exit(SETUP_FAILED);
    }
    Ok(())
}

fn set_limits(limits: &Limits) -> Result<(), String> {
    let table = [
        // One more second before the hard limit: SIGXCPU first, then SIGKILL.
        (libc::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds.saturating_add(1), "limit CPU time"),
        (libc::RLIMIT_DATA, limits.data_bytes, limits.data_bytes, "limit memory"),
        (libc::RLIMIT_NPROC, limits.processes, limits.processes, "limit processes"),
        (libc::RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes, "limit file size"),
        (libc::RLIMIT_NOFILE, limits.open_files, limits.open_files, "limit open files"),
        (libc::RLIMIT_CORE, 0, 0, "turn core dumps off"),
    ];
    for (resource, soft, hard, what) in table {
        let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
        // SAFETY: sets a limit of this process from a valid struct.
        check(unsafe { libc::setrlimit(resource, &limit) }, what)?;
    }
    Ok(())
}

fn check(result: libc::c_int, what: &str) -> Result<(), String> {
    if result == 0 { Ok(()) } else { Err(format!("cannot {what}: {}", io::Error::last_os_error())) }
}
