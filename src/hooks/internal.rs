//! Internal hooks: the operator's executables (`[hooks.internal]`), run on events.
//!
//! The executable gets the event as one JSON object on stdin (`{"event": "command:new",
//! ...}`) and may print one JSON object on stdout. It is killed after `hooks.timeout_ms`.
//! A timeout, a non-zero exit or an answer that is not the expected JSON is logged and
//! ignored: an operator's script never stops a message from being handled.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::config::{HooksConfig, InternalHookConfig};

/// Stderr kept in a log line about a failing hook.
const STDERR_LOGGED: usize = 2_000;

/// `agent:bootstrap`: the bootstrap files about to go into the system prompt.
#[derive(Debug, Clone, Serialize)]
pub struct AgentBootstrap<'a> {
    pub run_id: &'a str,
    pub session_key: &'a str,
    pub workspace: &'a std::path::Path,
    /// File names relative to the workspace, in prompt order.
    pub files: &'a [String],
}

/// The answer to `agent:bootstrap`: the files to use instead.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BootstrapAnswer {
    pub files: Option<Vec<String>>,
}

/// `command:new` / `command:reset` / `command:stop`.
#[derive(Debug, Clone, Serialize)]
pub struct CommandEvent {
    /// `new`, `reset` or `stop`.
    pub command: &'static str,
    pub session_key: String,
    /// The session that ended (`new` / `reset`), when there was one.
    pub session_id: Option<String>,
    pub channel: String,
    pub chat_id: String,
    pub sender_id: String,
    /// The agent workspace, where a hook may keep files.
    pub workspace: std::path::PathBuf,
    /// The session's last messages before the command, oldest first (`new` / `reset`).
    pub messages: Vec<TranscriptLine>,
}

/// One transcript entry as an internal hook sees it.
#[derive(Debug, Clone, Serialize)]
pub struct TranscriptLine {
    /// `user`, `assistant` or `tool`.
    pub role: &'static str,
    pub text: String,
}

/// The answer to a command hook: lines sent to the user, one message each.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CommandAnswer {
    #[serde(default)]
    pub replies: Vec<String>,
}

/// The configured executables, by event name.
#[derive(Debug, Clone, Default)]
pub struct InternalHooks {
    by_event: BTreeMap<String, InternalHookConfig>,
    timeout: Duration,
}

impl InternalHooks {
    pub fn from_config(config: &HooksConfig) -> Self {
        Self { by_event: config.internal.clone(), timeout: Duration::from_millis(config.timeout_ms) }
    }

    /// Whether an executable is attached to `event`; callers skip building the event if not.
    pub fn has(&self, event: &str) -> bool {
        self.by_event.contains_key(event)
    }

    /// Runs `event`'s executable, if any, and reads its answer. `None` when there is no
    /// executable, it failed, or it printed nothing.
    pub async fn call<E: Serialize, A: DeserializeOwned>(&self, event: &str, payload: &E) -> Option<A> {
        let hook = self.by_event.get(event)?;
        let mut input = match serde_json::to_value(payload) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) | Err(_) => {
                tracing::error!(event, "cannot encode a hook event; skipping the hook");
                return None;
            }
        };
        input.insert("event".into(), event.into());
        let input = serde_json::Value::Object(input).to_string();
        let span = tracing::info_span!("internal_hook", event, path = %hook.path.display());
        let _entered = span.enter();
        let output = match tokio::time::timeout(self.timeout, run(hook, input)).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot run an internal hook; going on without it");
                return None;
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    "an internal hook timed out; killed it and going on without it"
                );
                return None;
            }
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let stderr: String = stderr.chars().take(STDERR_LOGGED).collect();
            tracing::warn!(status = %output.status, %stderr, "an internal hook failed; ignoring its answer");
            return None;
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if stdout.trim().is_empty() {
            return None;
        }
        match serde_json::from_str(stdout.trim()) {
            Ok(answer) => Some(answer),
            Err(error) => {
                tracing::warn!(%error, "an internal hook's answer is not the expected JSON; ignoring it");
                None
            }
        }
    }
}

async fn run(hook: &InternalHookConfig, input: String) -> std::io::Result<std::process::Output> {
    let mut child = tokio::process::Command::new(&hook.path)
        .args(&hook.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropped on timeout: the executable does not outlive its turn.
        .kill_on_drop(true)
        .spawn()?;
    let stdin = child.stdin.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its input may close stdin early: not an error.
            let _ = stdin.write_all(input.as_bytes()).await;
        }
    };
    let ((), output) = tokio::join!(write, child.wait_with_output());
    output
}
