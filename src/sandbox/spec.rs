//! What the launcher is told: the confinement of one command, passed on its command line.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How one command runs. Built by Ferry per call, read by the launcher
/// ([`super::launcher`]) in the new process before anything else happens there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// `None`: on the host, as Ferry's user (the main session under `mode = "non-main"`).
    pub confinement: Option<Confinement>,
    /// What to run once confined.
    pub program: Program,
}

/// What the launcher runs after setting up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Program {
    /// `/bin/sh -c <command>`.
    Shell(String),
    /// The start-up probe's checks, run in Rust inside the real sandbox ([`super::probe`]).
    Probe(ProbeTargets),
    /// A parser of a user's file, run in Rust: the file's bytes on stdin, the answer on
    /// stdout (`crate::media::reader`). A parser that loops or eats memory then costs one
    /// process, never a thread of the daemon.
    Read(ReadJob),
}

/// One file to parse out of process: which parser, and the limits it runs under even when
/// the sandbox cannot be set up on this host (then the launcher applies them itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadJob {
    pub parser: FileParser,
    pub limits: Limits,
    /// The most characters of text to send back: what the prompt can take, plus one so the
    /// caller can tell that it was cut.
    pub keep_chars: usize,
}

/// The parsers that run out of process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileParser {
    /// A PDF's text (`crate::media::pdf_text`).
    Pdf,
}

/// What the probe tries to reach from inside, each of which must fail (or succeed) for the
/// sandbox to count as working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTargets {
    /// A file outside the workspace, in a hidden directory: must not be readable.
    pub canary: PathBuf,
    /// A path outside the workspace: must not be writable.
    pub outside: PathBuf,
    /// A port Ferry listens on at 127.0.0.1: must not be reachable without network.
    pub port: u16,
    /// How many processes to try to start: more than the probe's process limit.
    pub forks: u32,
}

/// Everything that confines a sandboxed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    /// Full access: the workspace and the private tmp.
    pub writable: Vec<PathBuf>,
    /// Read and execute: the system directories and `tools.sandbox.read_only`.
    pub readable: Vec<PathBuf>,
    /// Read and write, files only: `/dev/null` and the like.
    pub devices: Vec<PathBuf>,
    /// Never reachable, even inside a readable directory: Ferry's config and state, `~/.ssh`.
    pub hidden: Vec<PathBuf>,
    /// Keep the host's network (`tools.sandbox.network = true`); otherwise a new, empty
    /// network namespace.
    pub network: bool,
    pub limits: Limits,
    /// The user and group to become first, when Ferry runs as root: root is exempt from
    /// the process limit and bypasses file permissions.
    pub run_as: Option<(u32, u32)>,
}

/// Resource limits of each sandboxed process (`setrlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cpu_seconds: u64,
    pub data_bytes: u64,
    pub processes: u64,
    pub file_bytes: u64,
    pub open_files: u64,
}

/// The system directories every sandboxed command may read and run programs from.
pub const SYSTEM_READABLE: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc"];

/// The devices every sandboxed command may read and write.
pub const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];
