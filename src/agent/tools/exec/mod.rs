//! `exec` and `process` (`group:runtime`): shell commands in the session's workspace,
//! sandboxed unless the session runs on the host ([`crate::sandbox`]), approved first when
//! `[tools.exec] ask` says so ([`approvals`]), and kept in the background past `yield_ms`
//! ([`jobs`]).

pub mod approvals;
mod jobs;
mod output;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ferry_channel::OutboundMessage;
use schemars::JsonSchema;
use serde::Deserialize;

pub use approvals::{AnswerError, Approval, ApprovalState, Approvals, Asking, Decision};
pub use jobs::{Ending, Job, Jobs};

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::config::ExecConfig;
use crate::sandbox::Sandbox;

/// `timeout` when the model gives none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// What `exec` and `process` share.
pub struct Runtime {
    pub sandbox: Arc<Sandbox>,
    pub jobs: Arc<Jobs>,
    pub approvals: Arc<Approvals>,
    max_timeout: Duration,
    max_background: usize,
    /// Bytes of output kept per command (head and tail): the result cap.
    keep: usize,
}

impl Runtime {
    pub fn new(sandbox: Arc<Sandbox>, config: &ExecConfig, max_result_chars: usize) -> Arc<Self> {
        Self::with_approvals(sandbox, config, max_result_chars, Arc::new(Approvals::new(config)))
    }

    /// [`Runtime::new`] asking through `approvals`, which several agents' runtimes share so
    /// that one place (the gateway, `/approve`) sees every request.
    pub fn with_approvals(
        sandbox: Arc<Sandbox>,
        config: &ExecConfig,
        max_result_chars: usize,
        approvals: Arc<Approvals>,
    ) -> Arc<Self> {
        Arc::new(Self {
            sandbox,
            jobs: Arc::new(Jobs::default()),
            approvals,
            max_timeout: Duration::from_secs(config.max_timeout),
            max_background: usize::try_from(config.max_background).unwrap_or(usize::MAX),
            // Room for the status line, so the registry's cap does not cut a second time.
            keep: max_result_chars.saturating_sub(200).max(1000),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The shell command (`/bin/sh -c`), run in your workspace.
    pub command: String,
    /// Seconds before the command is killed (default 120), in the background too.
    pub timeout: Option<u64>,
    /// Milliseconds to wait before leaving the command running in the background and
    /// returning a process id for the `process` tool. Without it, wait until it ends.
    pub yield_ms: Option<u64>,
}

/// `exec`: runs a command.
pub struct Exec {
    runtime: Arc<Runtime>,
}

impl Exec {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }
}

#[async_trait]
impl TypedTool for Exec {
    type Args = ExecArgs;
    const NAME: &'static str = "exec";
    const DESCRIPTION: &'static str = "Run a shell command in your workspace and get its output (stdout and stderr \
        together) and exit code. Long output keeps its head and tail. `timeout` in seconds (default 120). For long \
        or interactive commands set `yield_ms`: after that long the command goes on in the background and you get \
        a process id to use with the `process` tool (poll its output, write to its input, kill it).";
    const MUTATES: bool = true;

    async fn run(&self, args: ExecArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let runtime = &self.runtime;
        let command = args.command.trim();
        if command.is_empty() {
            return Err(ToolError::new("`command` is empty"));
        }
        let session_key = &context.session_key;
        let placement = runtime
            .sandbox
            .place(session_key)
            .map_err(|error| ToolError::new(format!("the workspace is not available: {error}")))?;
        if placement.sandboxed
            && let Some(why) = runtime.sandbox.unavailable()
        {
            return Err(ToolError::new(format!(
                "commands cannot run in this chat: the sandbox is unavailable ({why})"
            )));
        }
        if args.yield_ms.is_some() && runtime.jobs.running(session_key) >= runtime.max_background {
            return Err(ToolError::new(format!(
                "{} commands are already running in the background, the most this chat may have; \
                 kill one with `process` first",
                runtime.max_background
            )));
        }
        let wanted = args.timeout.map_or(DEFAULT_TIMEOUT, Duration::from_secs).max(Duration::from_secs(1));
        let timeout = wanted.min(runtime.max_timeout);
        if runtime.approvals.needed(command) {
            approve(runtime, context, command).await?;
        }
        let job = Job::start(
            runtime.jobs.next_id(),
            command,
            runtime.sandbox.shell(command, &placement),
            timeout,
            runtime.keep,
        )
        .map_err(|error| ToolError::new(format!("cannot start the command: {error}")))?;
        if let Some(updates) = &context.updates {
            job.attach(updates.clone());
        }
        // Dropped with the call (a stopped run): a command in the foreground dies with it.
        let mut foreground = KillOnDrop(Some(job.clone()));
        let deadline = args.yield_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
        let ending = job.wait_until(deadline).await;
        job.detach();
        foreground.0 = None;
        let mut result = job.output();
        if !result.is_empty() && !result.ends_with('\n') {
            result.push('\n');
        }
        match ending {
            Some(ending) => {
                result.push_str(&format!("[{}]", ending.describe()));
                if wanted > timeout && matches!(ending, Ending::TimedOut(_)) {
                    result.push_str(&format!(" (timeout is capped at {} s)", timeout.as_secs()));
                }
            }
            None => {
                job.mark_read(runtime.keep);
                runtime.jobs.keep(session_key, job.clone());
                result.push_str(&format!(
                    "[still running in the background as process `{}`; it is killed after {} s. Use the `process` \
                     tool to poll its output, write to its input or kill it]",
                    job.id,
                    timeout.as_secs()
                ));
            }
        }
        Ok(result.into())
    }

    fn session_ended(&self, session_key: &str) {
        self.runtime.approvals.session_ended(session_key);
        let killed = self.runtime.jobs.end_session(session_key);
        if killed > 0 {
            tracing::info!(session_key, killed, "the session ended; its background commands were killed");
        }
    }

    fn shutdown(&self) {
        self.runtime.jobs.end_all();
    }
}

struct KillOnDrop(Option<Arc<Job>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            job.kill();
        }
    }
}

/// Asks the chat to approve `command`; `Ok` once someone did.
async fn approve(runtime: &Runtime, context: &ToolContext, command: &str) -> Result<(), ToolError> {
    let approvals = &runtime.approvals;
    let origin = context
        .origin
        .as_ref()
        .ok_or_else(|| ToolError::new("this command needs approval, and there is no chat to ask; it did not run"))?;
    let channel = context
        .channels
        .get(&origin.channel, Some(&origin.account_id))
        .ok_or_else(|| ToolError::new("this command needs approval, and the chat is not connected; it did not run"))?;
    let asking =
        Asking { session_key: &context.session_key, run_id: &context.run_id, call_id: &context.call_id, command };
    let (request, decided) = approvals.request(asking);
    let id = request.id;
    let _withdraw = Withdraw(approvals.clone(), id.clone());
    let mut message = OutboundMessage::text(origin.target.clone(), request.text);
    message.idempotency_key = Some(request.message_key);
    if let Err(error) = channel.send(message).await {
        // The chat never saw it, so nobody may find it there later either.
        approvals.discard(&id);
        return Err(ToolError::new(format!("cannot ask the chat for approval ({error}); the command did not run")));
    }
    tracing::info!(session_key = %context.session_key, approval = %id, "a command waits for approval");
    let minutes = approvals.timeout().as_secs().div_ceil(60);
    let decision = match tokio::time::timeout(approvals.timeout(), decided).await {
        Ok(Ok(decision)) => decision,
        Ok(Err(_)) => {
            return Err(ToolError::new(
                "the conversation was reset while the command waited for approval; it did not run",
            ));
        }
        Err(_) => approvals.time_out(&id),
    };
    match decision {
        Decision::Approved { by } => {
            tracing::info!(approval = %id, %by, "command approved");
            Ok(())
        }
        Decision::Denied { by } => Err(ToolError::new(format!(
            "{by} denied the command; it did not run. Do not run it again unless asked to."
        ))),
        Decision::TimedOut => Err(ToolError::new(format!(
            "nobody approved the command within {minutes} min, so it was denied; it did not run"
        ))),
    }
}

/// Withdraws a request when the call ends without an answer (its run was stopped).
struct Withdraw(Arc<Approvals>, String);

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.0.withdraw(&self.1);
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProcessAction {
    /// The background commands of this chat.
    List,
    /// New output of `id` since the last poll, and whether it still runs.
    Poll,
    /// Send `input` to the standard input of `id` (add "\n" to end a line).
    Write,
    /// Stop `id` and everything it started.
    Kill,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessArgs {
    pub action: ProcessAction,
    /// The process id `exec` gave (`p3`).
    pub id: Option<String>,
    /// For `write`: the text to send.
    pub input: Option<String>,
}

/// `process`: the commands `exec` left in the background.
pub struct Process {
    runtime: Arc<Runtime>,
}

impl Process {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }
}

#[async_trait]
impl TypedTool for Process {
    type Args = ProcessArgs;
    const NAME: &'static str = "process";
    const DESCRIPTION: &'static str = "Manage commands `exec` left running in the background: `list`; `poll` with `id` \
        (new output since the last poll, and whether it still runs); `write` with `id` and `input` (to its stdin); \
        `kill` with `id`.";
    const MUTATES: bool = true;

    async fn run(&self, args: ProcessArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.act(args, context).await.map(ToolOutput::from)
    }
}

impl Process {
    async fn act(&self, args: ProcessArgs, context: &ToolContext) -> Result<String, ToolError> {
        let jobs = &self.runtime.jobs;
        let session_key = &context.session_key;
        let find = || {
            let id = args.id.as_deref().map(str::trim).ok_or_else(|| ToolError::new("give the process `id`"))?;
            let job = jobs.get(session_key, id).ok_or_else(|| {
                ToolError::new(format!("there is no background command `{id}` in this chat; `list` shows them"))
            })?;
            Ok::<_, ToolError>((id, job))
        };
        match args.action {
            ProcessAction::List => {
                let listed: Vec<String> = jobs.list(session_key).iter().map(|job| describe(job)).collect();
                Ok(if listed.is_empty() { "no background commands".to_owned() } else { listed.join("\n") })
            }
            ProcessAction::Poll => {
                let (id, job) = find()?;
                let mut result = job.take_unread(self.runtime.keep);
                if result.is_empty() {
                    result.push_str("(no new output)\n");
                } else if !result.ends_with('\n') {
                    result.push('\n');
                }
                match job.ending() {
                    Some(ending) => {
                        jobs.forget(session_key, id);
                        result.push_str(&format!("[{id} ended: {}]", ending.describe()));
                    }
                    None => result.push_str(&format!("[{id} is still running]")),
                }
                Ok(result)
            }
            ProcessAction::Write => {
                let (id, job) = find()?;
                let input = args.input.ok_or_else(|| ToolError::new("`write` needs `input`"))?;
                job.write(&input).await.map_err(|why| ToolError::new(format!("`{id}`: {why}")))?;
                Ok(format!("sent {} bytes to {id}", input.len()))
            }
            ProcessAction::Kill => {
                let (id, job) = find()?;
                job.kill();
                let ending = job.wait_until(Some(Instant::now() + Duration::from_secs(5))).await;
                jobs.forget(session_key, id);
                Ok(format!("{id}: {}", ending.map_or("being killed".to_owned(), |ending| ending.describe())))
            }
        }
    }
}

fn describe(job: &Job) -> String {
    let status = match job.ending() {
        Some(ending) => format!("ended ({})", ending.describe()),
        None => format!("running for {} s", job.started.elapsed().as_secs()),
    };
    format!("{}: {status}: {}", job.id, job.command)
}

#[cfg(test)]
mod tests;
