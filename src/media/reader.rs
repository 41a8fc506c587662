//! Users' files parsed out of process (issue 41): a parser that loops forever or exhausts
//! memory costs one child process, never a thread or the memory of the daemon.
//!
//! A [`FileReader`] starts Ferry's own binary as the sandbox launcher with
//! [`Program::Read`]: the child confines itself like a sandboxed command
//! ([`reader_confinement`]: no path of the filesystem, no network, as nobody when Ferry is
//! root), applies `RLIMIT_CPU` and `RLIMIT_DATA`, reads the file's bytes on stdin and writes
//! its answer, one JSON [`Answer`], on stdout ([`serve`]). The daemon waits at most
//! `[media] parse_timeout_seconds`; then it kills the child's process group and reaps it.
//! What the daemon reads back is capped by what the prompt can take, so a file whose text
//! is endless cannot grow the daemon either.
//!
//! At most as many parsers run at once as the machine has cores
//! ([`FileReader::at_most`]); further files wait for one to end, so a flood of files costs
//! time, never more than that many times the memory limit.
//!
//! The first read checks once whether the sandbox can be set up on this host. If it
//! cannot (no Landlock, no user namespaces), files are still parsed in a child under the
//! same rlimits and deadline, and a warning says so once: the parser touches nothing of the
//! host by design (its only input and output are the pipes), and what it must be fenced
//! against — endless loops, runaway memory, crashes — is bounded by the process, its
//! limits and the deadline, which work everywhere. The sandbox is defence in depth on top.
//!
//! ```no_run
//! # async fn demo(bytes: Vec<u8>) {
//! use std::time::Duration;
//! use ferry::media::{FileReader, ReaderLimits};
//! let limits = ReaderLimits { timeout: Duration::from_secs(20), memory_bytes: 512 << 20 };
//! let reader = FileReader::new("/proc/self/exe".into(), limits);
//! match reader.pdf_text(bytes, 20_000).await {
//!     Ok(read) => println!("{} (and {} more characters)", read.text, read.more_chars),
//!     Err(error) => println!("[PDF not read: {error}]"),
//! }
//! # }
//! ```

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OnceCell, Semaphore};

use super::pdf::{PdfError, pdf_text};
use crate::sandbox::{FileParser, LaunchSpec, Limits, Program, ReadJob, reader_command, reader_confinement};

/// Open files a parser may hold: its three pipes and a few the runtime opens.
const PARSER_OPEN_FILES: u64 = 16;
/// Processes a parser may have: the launcher and the parser, which becomes PID 1 of its
/// own PID namespace when confined. It starts no others.
const PARSER_PROCESSES: u64 = 4;
/// The most of a parser's stderr kept for the log (a panic message, an allocation failure).
const STDERR_KEPT: usize = 8 * 1024;
/// The most bytes one character of the text can take in the JSON answer: `\u001f`.
const JSON_BYTES_PER_CHAR: usize = 6;
/// Room in the answer beyond the text: the JSON around it, an error's reason.
const ANSWER_SLACK: usize = 64 * 1024;
/// What Rust prints when an allocation fails (`std::alloc::handle_alloc_error`): the child
/// reached its memory limit.
const ALLOCATION_FAILED: &str = "memory allocation of";
/// The exit status the launcher gives when the sandbox could not be set up
/// (`sandbox::launcher::SETUP_FAILED`).
const SETUP_FAILED: i32 = 125;

/// How long a parser may take and how much memory it may use (`[media]`
/// `parse_timeout_seconds`, `parse_memory_mb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderLimits {
    /// Wall-clock time from start to answer; the child is killed then.
    pub timeout: Duration,
    /// `RLIMIT_DATA`: the heap and every private writable mapping of the child.
    pub memory_bytes: u64,
}

/// A PDF's text as the reader sent it back: at most the characters asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfText {
    pub text: String,
    /// Characters left out after `text`.
    pub more_chars: usize,
}

/// What a parser writes on stdout: the text, or why there is none.
#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    Text { text: String, more_chars: usize },
    Failed(PdfError),
}

/// Starts parsers of users' files in child processes. Shared by every message: it holds no
/// per-file state beyond the one-time check of the sandbox.
#[derive(Debug)]
pub struct FileReader {
    /// Ferry's own binary, started as the launcher.
    launcher: PathBuf,
    limits: ReaderLimits,
    /// Whether parsers run confined: checked once, at the first file.
    confined: OnceCell<bool>,
    /// A permit per parser that may run at once.
    running: Semaphore,
}

impl FileReader {
    /// A reader that starts `launcher` (the `ferry` binary) for each file.
    /// At most one parser per core runs at a time.
    pub fn new(launcher: PathBuf, limits: ReaderLimits) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Self { launcher, limits, confined: OnceCell::new(), running: Semaphore::new(cores) }
    }

    /// At most `parsers` (at least one) run at a time; the others wait their turn.
    pub fn at_most(mut self, parsers: usize) -> Self {
        self.running = Semaphore::new(parsers.max(1));
        self
    }

    /// The text of the PDF in `bytes`, at most `keep_chars` characters of it, read in a
    /// child process within the reader's limits. Never panics; whatever the file does to
    /// the parser ends as a [`PdfError`] within the timeout (plus the time to reap).
    pub async fn pdf_text(&self, bytes: Vec<u8>, keep_chars: usize) -> Result<PdfText, PdfError> {
        // No parser to start: a child would only answer the same.
        if !cfg!(feature = "pdf") {
            return Err(PdfError::NotBuilt);
        }
        let confined = *self.confined.get_or_init(|| self.check_sandbox()).await;
        match self.run(FileParser::Pdf, bytes, keep_chars, confined).await? {
            Answer::Text { text, more_chars } => Ok(PdfText { text, more_chars }),
            Answer::Failed(error) => Err(error),
        }
    }

    /// Whether a confined parser can start here: one read of an empty file, ours, so no
    /// user's file can steer the answer.
    async fn check_sandbox(&self) -> bool {
        match self.spawn(FileParser::Pdf, Vec::new(), 0, true).await {
            Err(Ended::SetupFailed(why)) => {
                tracing::warn!(
                    reason = %why,
                    "the sandbox cannot be set up here, so users' files are parsed in a child process under \
                     CPU and memory limits only, without Landlock or namespaces"
                );
                false
            }
            _ => true,
        }
    }

    async fn run(&self, parser: FileParser, bytes: Vec<u8>, keep: usize, confined: bool) -> Result<Answer, PdfError> {
        // Never closed; were it, the file would be read anyway rather than refused.
        let _turn = self.running.acquire().await.ok();
        self.spawn(parser, bytes, keep, confined).await.map_err(|ended| match ended {
            Ended::TooSlow => PdfError::TooSlow(self.limits.timeout),
            Ended::OutOfMemory => PdfError::OutOfMemory(self.limits.memory_bytes / (1024 * 1024)),
            Ended::SetupFailed(why) | Ended::Other(why) => {
                tracing::warn!(reason = %why, "a file parser ended without an answer");
                PdfError::Unreadable(why)
            }
        })
    }

    /// One child, from start to reaped.
    async fn spawn(&self, parser: FileParser, bytes: Vec<u8>, keep: usize, confined: bool) -> Result<Answer, Ended> {
        let timeout = self.limits.timeout;
        let limits = Limits {
            // A backstop should the daemon's kill not come: CPU time never exceeds wall time
            // for this single-threaded child, so the deadline always comes first.
            cpu_seconds: timeout.as_secs().saturating_add(1),
            data_bytes: self.limits.memory_bytes,
            processes: PARSER_PROCESSES,
            file_bytes: 0,
            open_files: PARSER_OPEN_FILES,
        };
        let job = ReadJob { parser, limits, keep_chars: keep };
        let spec =
            LaunchSpec { confinement: confined.then(|| reader_confinement(limits)), program: Program::Read(job) };
        let mut child = reader_command(&self.launcher, &spec)
            .spawn()
            .map_err(|error| Ended::Other(format!("cannot start the parser: {error}")))?;
        let answer_cap = keep.saturating_mul(JSON_BYTES_PER_CHAR).saturating_add(ANSWER_SLACK);
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Ended::Other("the parser's pipes are missing".to_owned()));
        };
        let exchange = async {
            let feed = async {
                // The child may end before reading everything (it failed early): not an error.
                let _ = stdin.write_all(&bytes).await;
                drop(stdin);
            };
            let ((), (answer, too_long), (stderr, _)) =
                tokio::join!(feed, read_capped(stdout, answer_cap), read_capped(stderr, STDERR_KEPT));
            let status = child.wait().await;
            (answer, too_long, stderr, status)
        };
        let Ok((answer, too_long, stderr, status)) = tokio::time::timeout(timeout, exchange).await else {
            kill_group(&mut child).await;
            return Err(Ended::TooSlow);
        };
        let stderr = String::from_utf8_lossy(&stderr);
        let status = status.map_err(|error| Ended::Other(format!("cannot wait for the parser: {error}")))?;
        if too_long {
            return Err(Ended::Other(format!("its answer was longer than the {answer_cap} bytes asked for")));
        }
        judge(status, &answer, stderr.trim(), confined)
    }
}

/// How a child ended without an answer.
enum Ended {
    /// Past the timeout, or its CPU limit.
    TooSlow,
    /// It reached its memory limit.
    OutOfMemory,
    /// The launcher could not confine it; it never read the file.
    SetupFailed(String),
    Other(String),
}

/// The answer of a child that ended with `status`, having written `answer` and `stderr`.
fn judge(status: ExitStatus, answer: &[u8], stderr: &str, confined: bool) -> Result<Answer, Ended> {
    use std::os::unix::process::ExitStatusExt;
    if status.success()
        && let Ok(answer) = serde_json::from_slice::<Answer>(answer)
    {
        return Ok(answer);
    }
    if stderr.contains(ALLOCATION_FAILED) {
        return Err(Ended::OutOfMemory);
    }
    // Unconfined, a signal ends the child itself; confined, the launcher above it reports
    // the signal as 128 + its number.
    let signal = status.signal().or_else(|| status.code().filter(|code| *code > 128).map(|code| code - 128));
    if matches!(signal, Some(libc::SIGXCPU | libc::SIGKILL)) {
        return Err(Ended::TooSlow);
    }
    let last_words = stderr.lines().last().unwrap_or("nothing on stderr");
    if confined && status.code() == Some(SETUP_FAILED) && answer.is_empty() {
        return Err(Ended::SetupFailed(last_words.to_owned()));
    }
    Err(Ended::Other(format!("the parser ended without an answer ({status}): {last_words}")))
}

/// Everything `reader` gives until its end, keeping the first `cap` bytes; `true` when
/// there was more. Reading goes on past the cap, so the child never blocks on a full pipe.
async fn read_capped(reader: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut reader = reader;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut over = false;
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return (kept, over),
            Ok(read) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..read.min(room)]);
                over |= read > room;
            }
        }
    }
}

/// Kills the child's whole process group (the launcher and, confined, the parser under
/// it) and reaps the launcher.
async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: signals the process group this child leads (`process_group(0)`).
        unsafe { libc::killpg(pid, libc::SIGKILL) };
    }
    let _ = child.kill().await;
}

/// The child's side, in the launcher once it is confined: reads the file on stdin, parses
/// it and writes the [`Answer`] on stdout. Returns the exit code.
pub fn serve(job: &ReadJob) -> i32 {
    let mut bytes = Vec::new();
    if let Err(error) = std::io::stdin().lock().read_to_end(&mut bytes) {
        let _ = writeln!(std::io::stderr(), "cannot read the file on stdin: {error}");
        return 1;
    }
    let answer = match job.parser {
        FileParser::Pdf => match pdf_text(&bytes) {
            Ok(text) => cut(text, job.keep_chars),
            Err(error) => Answer::Failed(error),
        },
    };
    drop(bytes);
    let mut stdout = std::io::stdout().lock();
    match serde_json::to_writer(&mut stdout, &answer).and_then(|()| stdout.flush().map_err(serde_json::Error::io)) {
        Ok(()) => 0,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "cannot write the answer: {error}");
            1
        }
    }
}

/// `text` cut after `keep` characters.
fn cut(mut text: String, keep: usize) -> Answer {
    match text.char_indices().nth(keep) {
        Some((at, _)) => {
            let more_chars = text[at..].chars().count();
            text.truncate(at);
            Answer::Text { text, more_chars }
        }
        None => Answer::Text { text, more_chars: 0 },
    }
}

#[cfg(test)]
mod tests;
