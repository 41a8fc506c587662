//! Running commands: their output, their end, and the ones a session keeps in the
//! background (`exec`'s `yield_ms`, the `process` tool).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::output::Output;

/// How long output may still arrive after the command ended (a child it left behind
/// holding the pipe, on the host) before its result is given.
const LINGER: Duration = Duration::from_millis(300);

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
    TimedOut(Duration),
    Killed,
}

impl Ending {
    pub fn describe(&self) -> String {
        match self {
            Ending::Exited(code) => format!("exit code {code}"),
            Ending::Signaled(signal) => format!("killed by signal {signal}"),
            Ending::TimedOut(after) => format!("timed out after {} s and was killed", after.as_secs()),
            Ending::Killed => "killed".to_owned(),
        }
    }
}

struct State {
    /// Everything, head and tail.
    all: Output,
    /// What came since the last `poll`.
    unread: Output,
    ending: Option<Ending>,
    /// Where output streams while a tool call waits on the command in the foreground.
    live: Option<mpsc::UnboundedSender<String>>,
}

/// One running (or finished) command.
pub struct Job {
    pub id: String,
    pub command: String,
    pub started: Instant,
    state: Mutex<State>,
    /// Bumped on every change (output, ending), so waiters wake.
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    kill: CancellationToken,
}

impl Job {
    /// Starts `command` (a launcher command from the sandbox), its stdout and stderr merged
    /// into one pipe, and tasks that collect its output and its end.
    pub fn start(
        id: String,
        shown: &str,
        mut command: tokio::process::Command,
        timeout: Duration,
        keep: usize,
    ) -> std::io::Result<Arc<Job>> {
        let (reader, writer) = std::io::pipe()?;
        command.stdin(std::process::Stdio::piped()).stdout(writer.try_clone()?).stderr(writer);
        let mut child = command.spawn()?;
        // The parent's copies of the write end go with the command, so EOF means the end.
        drop(command);
        let stdin = child.stdin.take();
        let job = Arc::new(Job {
            id,
            command: shown.to_owned(),
            started: Instant::now(),
            state: Mutex::new(State { all: Output::new(keep), unread: Output::new(keep), ending: None, live: None }),
            changed: watch::Sender::new(0),
            stdin: tokio::sync::Mutex::new(stdin),
            kill: CancellationToken::new(),
        });
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
        let (read_done, read_finished) = tokio::sync::oneshot::channel();
        tokio::spawn(read_output(job.clone(), pipe, read_done));
        tokio::spawn(wait_for_end(job.clone(), child, timeout, read_finished));
        Ok(job)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    pub fn ending(&self) -> Option<Ending> {
        self.state().ending.clone()
    }

    /// Streams new output to `live` until [`Job::detach`].
    pub fn attach(&self, live: mpsc::UnboundedSender<String>) {
        self.state().live = Some(live);
    }

    pub fn detach(&self) {
        self.state().live = None;
    }

    /// Waits until the command ends or `deadline` passes; the ending, if it came.
    pub async fn wait_until(&self, deadline: Option<Instant>) -> Option<Ending> {
        let mut changed = self.changed.subscribe();
        loop {
            if let Some(ending) = self.ending() {
                return Some(ending);
            }
            let wait = changed.changed();
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline.into(), wait).await.is_err() {
                        return self.ending();
                    }
                }
                None => {
                    if wait.await.is_err() {
                        return self.ending();
                    }
                }
            }
        }
    }

    /// All the output kept (head and tail).
    pub fn output(&self) -> String {
        self.state().all.render()
    }

    /// Output since the last call, which it marks read.
    pub fn take_unread(&self, keep: usize) -> String {
        let mut state = self.state();
        let unread = std::mem::replace(&mut state.unread, Output::new(keep));
        unread.render()
    }

    /// Marks everything so far read: the foreground call already showed it.
    pub fn mark_read(&self, keep: usize) {
        self.state().unread = Output::new(keep);
    }

    /// Sends `input` to the command's stdin.
    pub async fn write(&self, input: &str) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else { return Err("its input is closed".to_owned()) };
        pipe.write_all(input.as_bytes()).await.map_err(|error| format!("cannot write to it: {error}"))?;
        pipe.flush().await.map_err(|error| format!("cannot write to it: {error}"))
    }

    /// Kills the command and everything it started.
    pub fn kill(&self) {
        self.kill.cancel();
    }
}

async fn read_output(
    job: Arc<Job>,
    mut pipe: tokio::net::unix::pipe::Receiver,
    done: tokio::sync::oneshot::Sender<()>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    // A multi-byte character split across reads is completed by the next one.
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let read = match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let bytes = &buffer[..read];
        {
            let mut state = job.state();
            state.all.push(bytes);
            state.unread.push(bytes);
            if let Some(live) = &state.live {
                partial.extend_from_slice(bytes);
                let valid = match std::str::from_utf8(&partial) {
                    Ok(_) => partial.len(),
                    Err(error) if error.error_len().is_none() => error.valid_up_to(),
                    Err(_) => partial.len(),
                };
                let text = String::from_utf8_lossy(&partial[..valid]).into_owned();
                partial.drain(..valid);
                if !text.is_empty() && live.send(text).is_err() {
                    state.live = None;
                }
            } else {
                partial.clear();
            }
        }
        job.bump();
    }
    let _ = done.send(());
}

async fn wait_for_end(
    job: Arc<Job>,
    mut child: Child,
    timeout: Duration,
    read_finished: tokio::sync::oneshot::Receiver<()>,
) {
    let group = child.id();
    let ending = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => ending_of(status),
            Err(_) => Ending::Killed,
        },
        () = tokio::time::sleep(timeout) => Ending::TimedOut(timeout),
        () = job.kill.cancelled() => Ending::Killed,
    };
    // Whatever the command left running in its process group goes with it (in a sandbox
    // the PID namespace has already taken it).
    if let Some(group) = group.and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: signals the process group this command leads.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let _ = child.wait().await;
    let _ = tokio::time::timeout(LINGER, read_finished).await;
    job.state().ending = Some(ending);
    job.bump();
}

fn ending_of(status: std::process::ExitStatus) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Ending::Exited(code),
        (None, Some(signal)) => Ending::Signaled(signal),
        (None, None) => Ending::Killed,
    }
}

/// The commands sessions keep in the background.
#[derive(Default)]
pub struct Jobs {
    by_session: Mutex<HashMap<String, Vec<Arc<Job>>>>,
    next: AtomicU64,
}

impl Jobs {
    /// A new process id, unique for the daemon's life: `p1`, `p2`…
    pub fn next_id(&self) -> String {
        format!("p{}", self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Job>>>> {
        self.by_session.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Commands of `session_key` still running in the background.
    pub fn running(&self, session_key: &str) -> usize {
        self.lock().get(session_key).map_or(0, |jobs| jobs.iter().filter(|job| job.ending().is_none()).count())
    }

    pub fn keep(&self, session_key: &str, job: Arc<Job>) {
        self.lock().entry(session_key.to_owned()).or_default().push(job);
    }

    pub fn list(&self, session_key: &str) -> Vec<Arc<Job>> {
        self.lock().get(session_key).cloned().unwrap_or_default()
    }

    pub fn get(&self, session_key: &str, id: &str) -> Option<Arc<Job>> {
        self.lock().get(session_key)?.iter().find(|job| job.id == id).cloned()
    }

    /// Forgets a finished job whose end the model has seen.
    pub fn forget(&self, session_key: &str, id: &str) {
        if let Some(jobs) = self.lock().get_mut(session_key) {
            jobs.retain(|job| job.id != id);
        }
    }

    /// Kills and forgets every background command of `session_key` (`/reset`, the
    /// session's end); how many were still running.
    pub fn end_session(&self, session_key: &str) -> usize {
        let jobs = self.lock().remove(session_key).unwrap_or_default();
        let running = jobs.iter().filter(|job| job.ending().is_none()).count();
        jobs.iter().for_each(|job| job.kill());
        running
    }

    /// Kills every background command (shutdown).
    pub fn end_all(&self) {
        let all: Vec<Arc<Job>> = self.lock().drain().flat_map(|(_, jobs)| jobs).collect();
        all.iter().for_each(|job| job.kill());
    }
}
