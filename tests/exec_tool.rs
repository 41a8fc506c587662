//! `exec` and `process` as the agent loop calls them, with the real launcher (the `ferry`
//! binary): output and exit codes, streaming, timeouts, the background and its end, and
//! approvals through a chat.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::agent::skills::SkillsSnapshot;
use ferry::agent::tools::exec::{Exec, ExecArgs, Process, ProcessAction, ProcessArgs, Runtime};
use ferry::agent::tools::{Origin, RecentSessions, ToolContext, ToolError, TypedTool};
use ferry::channel::memory::MemoryChannel;
use ferry::channel::{ChatKind, ChatRef, Target};
use ferry::channels::ChannelRegistry;
use ferry::config::{ExecAsk, ExecConfig, SandboxConfig, SandboxMode, SandboxScope};
use ferry::sandbox::{Sandbox, SandboxPaths};
use tokio::sync::mpsc;

const GROUP: &str = "agent:main:telegram:group:-100";

struct Tools {
    _root: tempfile::TempDir,
    runtime: Arc<Runtime>,
    exec: Exec,
    process: Process,
}

async fn tools(exec: ExecConfig) -> Tools {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().canonicalize().unwrap().join("state");
    let config = SandboxConfig { mode: SandboxMode::NonMain, scope: SandboxScope::Session, ..SandboxConfig::default() };
    let paths = SandboxPaths {
        state_dir: state.clone(),
        agent_workspace: state.join("workspace"),
        config_file: None,
        launcher: PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
    };
    let sandbox = Arc::new(Sandbox::new(config, paths));
    sandbox.probe().await.expect("the sandbox works on this machine");
    let runtime = Runtime::new(sandbox, &exec, 50_000);
    Tools { _root: root, exec: Exec::new(runtime.clone()), process: Process::new(runtime.clone()), runtime }
}

fn no_asking() -> ExecConfig {
    ExecConfig { ask: ExecAsk::Off, ..ExecConfig::default() }
}

fn context(session_key: &str, channels: ChannelRegistry, origin: Option<Origin>) -> ToolContext {
    ToolContext {
        sender_id: None,
        memory_scope: None,
        run_id: "run-1".into(),
        session_key: session_key.into(),
        call_id: "call-1".into(),
        origin,
        channels,
        sessions: Arc::new(RecentSessions::default()),
        skills: Arc::new(SkillsSnapshot::default()),
        sends: Arc::new(Mutex::new(Vec::new())),
        updates: None,
        outgoing: None,
        schedulers: None,
        send_ledger: None,
    }
}

async fn exec(tools: &Tools, command: &str, timeout: Option<u64>, yield_ms: Option<u64>) -> Result<String, ToolError> {
    let args = ExecArgs { command: command.into(), timeout, yield_ms };
    tools.exec.run(args, &context(GROUP, ChannelRegistry::new(), None)).await.map(|output| output.text)
}

async fn process(tools: &Tools, action: ProcessAction, id: Option<&str>, input: Option<&str>) -> String {
    let args = ProcessArgs { action, id: id.map(Into::into), input: input.map(Into::into) };
    tools.process.run(args, &context(GROUP, ChannelRegistry::new(), None)).await.unwrap().text
}

/// The process id in exec's "still running … as process `pN`" result.
fn process_id(result: &str) -> String {
    result.split("process `").nth(1).and_then(|rest| rest.split('`').next()).unwrap().to_owned()
}

#[tokio::test]
async fn a_command_gives_its_output_and_exit_code() {
    let tools = tools(no_asking()).await;
    let result = exec(&tools, "echo out; echo err >&2; exit 3", None, None).await.unwrap();
    assert_eq!(result, "out\nerr\n[exit code 3]");
    let result = exec(&tools, "printf 'no newline'", None, None).await.unwrap();
    assert_eq!(result, "no newline\n[exit code 0]");
}

#[tokio::test]
async fn output_streams_as_updates_while_the_command_runs() {
    let tools = tools(no_asking()).await;
    let (updates, mut streamed) = mpsc::unbounded_channel();
    let mut context = context(GROUP, ChannelRegistry::new(), None);
    context.updates = Some(updates);
    let args = ExecArgs { command: "echo first; sleep 1; echo second".into(), timeout: None, yield_ms: None };
    let call = tools.exec.run(args, &context);
    let first = async {
        // The first line arrives before the command ends.
        let first = streamed.recv().await.unwrap();
        assert_eq!(first, "first\n");
    };
    let (result, ()) = tokio::join!(call, first);
    assert_eq!(result.unwrap().text, "first\nsecond\n[exit code 0]");
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_what_it_started() {
    let tools = tools(no_asking()).await;
    let marker = format!("timeout-marker-{}", std::process::id());
    let result =
        exec(&tools, &format!("echo begun; (sleep 600 # {marker}\n) & sleep 600"), Some(1), None).await.unwrap();
    assert_eq!(result, "begun\n[timed out after 1 s and was killed]");
    assert_eq!(processes_running(&marker).await, 0);
}

#[tokio::test]
async fn a_yielded_command_goes_on_in_the_background_for_process() {
    let tools = tools(no_asking()).await;
    let result = exec(&tools, "echo ready; read line; echo got:$line; sleep 600", None, Some(300)).await.unwrap();
    assert!(result.starts_with("ready\n[still running in the background as process `p"), "{result}");
    let id = process_id(&result);
    assert!(process(&tools, ProcessAction::List, None, None).await.contains(&format!("{id}: running")));
    assert_eq!(
        process(&tools, ProcessAction::Poll, Some(&id), None).await,
        format!("(no new output)\n[{id} is still running]")
    );
    process(&tools, ProcessAction::Write, Some(&id), Some("hello\n")).await;
    let mut polled = String::new();
    for _ in 0..50 {
        polled = process(&tools, ProcessAction::Poll, Some(&id), None).await;
        if polled.contains("got:hello") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(polled, format!("got:hello\n[{id} is still running]"));
    assert_eq!(process(&tools, ProcessAction::Kill, Some(&id), None).await, format!("{id}: killed"));
    assert_eq!(process(&tools, ProcessAction::List, None, None).await, "no background commands");
}

#[tokio::test]
async fn the_end_of_a_session_kills_its_background_commands_only() {
    let tools = tools(no_asking()).await;
    let marker = format!("session-marker-{}", std::process::id());
    exec(&tools, &format!("sleep 600 # {marker}"), Some(900), Some(100)).await.unwrap();
    let other = ExecArgs { command: format!("sleep 600 # other-{marker}"), timeout: Some(900), yield_ms: Some(100) };
    tools.exec.run(other, &context("agent:main:telegram:group:-200", ChannelRegistry::new(), None)).await.unwrap();
    // The launcher and the shell it became, for each.
    assert!(processes_running(&format!("# {marker}")).await > 0);
    assert!(processes_running(&format!("other-{marker}")).await > 0);
    TypedTool::session_ended(&tools.exec, GROUP);
    assert_eq!(processes_running(&format!("# {marker}")).await, 0, "the session's command was killed");
    assert!(processes_running(&format!("other-{marker}")).await > 0, "another session's kept running");
    TypedTool::shutdown(&tools.exec);
    assert_eq!(processes_running(&marker).await, 0);
}

#[tokio::test]
async fn background_commands_per_session_are_capped() {
    let tools = tools(ExecConfig { ask: ExecAsk::Off, max_background: 1, ..ExecConfig::default() }).await;
    exec(&tools, "sleep 600", None, Some(50)).await.unwrap();
    let refused = exec(&tools, "sleep 600", None, Some(50)).await.unwrap_err();
    assert!(refused.0.contains("already running in the background"), "{refused}");
    TypedTool::shutdown(&tools.exec);
}

fn telegram_group() -> (ChannelRegistry, Arc<MemoryChannel>, Origin) {
    let channel = Arc::new(MemoryChannel::new("telegram", "default"));
    let channels = ChannelRegistry::new();
    channels.register(channel.clone());
    let origin = Origin {
        channel: "telegram".into(),
        account_id: "default".into(),
        target: Target { chat: ChatRef::new(ChatKind::Group, "-100"), thread_id: None },
    };
    (channels, channel, origin)
}

#[tokio::test]
async fn a_command_waits_for_approval_and_runs_once_approved_or_not_at_all() {
    let tools =
        tools(ExecConfig { ask: ExecAsk::OnMiss, allowlist: vec!["echo *".into()], ..ExecConfig::default() }).await;
    let (channels, channel, origin) = telegram_group();
    let context = context(GROUP, channels, Some(origin));
    // Listed: runs without asking.
    let listed = ExecArgs { command: "echo listed".into(), timeout: None, yield_ms: None };
    assert_eq!(tools.exec.run(listed, &context).await.unwrap().text, "listed\n[exit code 0]");
    assert!(channel.sent_texts().is_empty());

    let mut seen: Vec<String> = Vec::new();
    for (approve, expected) in [(true, Ok("ran-42\n[exit code 0]")), (false, Err("denied the command"))] {
        let args = ExecArgs { command: "printf 'ran-%s\\n' $((6*7))".into(), timeout: None, yield_ms: None };
        let call = tools.exec.run(args, &context);
        let answer = async {
            let asked = loop {
                if let Some(text) =
                    channel.sent_texts().pop().filter(|text| text.contains("/approve") && !seen.contains(text))
                {
                    break text;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert!(asked.contains("printf 'ran-%s\\n' $((6*7))"), "the exact command is shown: {asked}");
            let id = asked.split("/approve ").nth(1).unwrap().split(|c: char| !c.is_alphanumeric()).next().unwrap();
            assert!(tools.runtime.approvals.answer("agent:main:telegram:group:-999", id, true, "mallory").is_err());
            tools.runtime.approvals.answer(GROUP, id, approve, "alice").unwrap();
            asked
        };
        let (result, asked) = tokio::join!(call, answer);
        seen.push(asked);
        match expected {
            Ok(output) => assert_eq!(result.unwrap().text, output),
            Err(why) => assert!(result.unwrap_err().0.contains(why)),
        }
    }
}

/// Processes whose command line contains `marker`, once the count has settled.
async fn processes_running(marker: &str) -> usize {
    let count = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
            .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(marker))
            .count()
    };
    let mut last = count();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = count();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}
