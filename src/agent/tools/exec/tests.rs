//! `exec` waiting for an approval, on tokio's paused clock: the end-to-end flow (approve,
//! deny) is in the conformance suite; the timeout, minutes long even at its minimum, is here.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_channel::memory::MemoryChannel;
use ferry_channel::{ChatKind, ChatRef, Target};

use super::*;
use crate::agent::tools::Origin;
use crate::agent::tools::tests::context;
use crate::channels::ChannelRegistry;
use crate::config::{ExecAsk, SandboxConfig};
use crate::sandbox::SandboxPaths;

/// The main session (`agent:main:main`, the one [`context`] runs in): on the host under the
/// default sandbox mode, so nothing here needs the launcher.
const SESSION: &str = "agent:main:main";

fn runtime(state_dir: &Path, config: &ExecConfig) -> Arc<Runtime> {
    let paths = SandboxPaths {
        state_dir: state_dir.to_owned(),
        agent_workspace: state_dir.join("workspace"),
        config_file: None,
        launcher: std::env::current_exe().unwrap(),
    };
    Runtime::new(Arc::new(Sandbox::new(SandboxConfig::default(), paths)), config, 50_000)
}

#[tokio::test(start_paused = true)]
async fn a_command_nobody_answers_is_denied_after_approval_timeout_and_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = ExecConfig { ask: ExecAsk::Always, approval_timeout: 10, ..ExecConfig::default() };
    let runtime = runtime(dir.path(), &config);
    let telegram = Arc::new(MemoryChannel::new("telegram", "default"));
    let channels = ChannelRegistry::new();
    channels.register(telegram.clone());
    let origin = Origin {
        channel: "telegram".into(),
        account_id: "default".into(),
        target: Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None },
    };
    let context = context(Some(origin), channels);
    let args = ExecArgs { command: "touch ran".into(), timeout: None, yield_ms: None };

    let asked_at = tokio::time::Instant::now();
    let error = Exec::new(runtime.clone()).run(args, &context).await.expect_err("nobody approved it");
    assert_eq!(asked_at.elapsed(), Duration::from_secs(10), "it waited exactly approval_timeout");
    assert!(error.0.contains("nobody approved the command") && error.0.contains("it did not run"), "{error}");

    let asked = telegram.sent_texts();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("touch ran") && asked[0].contains("No answer within 1 min denies it"), "{}", asked[0]);
    let id = asked[0].split_once("/approve ").and_then(|(_, rest)| rest.split_whitespace().next()).unwrap();
    let kept = runtime.approvals.of_session(SESSION);
    assert_eq!((kept.len(), &kept[0].state), (1, &ApprovalState::TimedOut), "it stays, settled, for the chat to show");
    let late = runtime.approvals.answer(SESSION, id, true, "alice");
    assert!(late.is_err(), "an answer after the timeout finds nothing to approve: {late:?}");
    let workspace = runtime.sandbox.place(SESSION).unwrap().workspace;
    assert!(!workspace.join("ran").exists(), "the command never ran");
}
