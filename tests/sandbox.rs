//! The sandbox from the outside: the start-up probe, and escape attempts by sandboxed
//! commands run the way `exec` runs them (through the `ferry` binary as the launcher).
//! Every attempt must fail.

use std::path::{Path, PathBuf};
use std::process::Output;

use ferry::config::{SandboxConfig, SandboxMode, SandboxScope};
use ferry::sandbox::{Placement, Sandbox, SandboxPaths};

struct Fixture {
    _root: tempfile::TempDir,
    state: PathBuf,
    config_file: PathBuf,
    sandbox: Sandbox,
}

fn fixture(configure: impl FnOnce(&mut SandboxConfig)) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let state = base.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("ferry.db"), "state secrets").unwrap();
    let config_file = base.join("ferry.toml");
    std::fs::write(&config_file, "api_key = \"sk-config-secret\"").unwrap();
    let mut config = SandboxConfig { mode: SandboxMode::All, scope: SandboxScope::Session, ..SandboxConfig::default() };
    configure(&mut config);
    let paths = SandboxPaths {
        state_dir: state.clone(),
        agent_workspace: state.join("workspace"),
        config_file: Some(config_file.clone()),
        launcher: PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
    };
    Fixture { _root: root, state, config_file, sandbox: Sandbox::new(config, paths) }
}

async fn probed(fixture: &Fixture) {
    if let Err(why) = fixture.sandbox.probe().await {
        panic!("the sandbox probe failed on this machine: {why}");
    }
}

async fn run(fixture: &Fixture, session: &str, command: &str) -> (Placement, Output) {
    let placement = fixture.sandbox.place(session).unwrap();
    let output = fixture.sandbox.shell(command, &placement).output().await.unwrap();
    (placement, output)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[tokio::test]
async fn the_probe_passes_and_a_command_runs_in_its_workspace() {
    let fixture = fixture(|_| {});
    probed(&fixture).await;
    let (placement, output) =
        run(&fixture, "agent:main:telegram:group:-1", "pwd; echo hi > made.txt; echo $HOME").await;
    assert!(output.status.success(), "{}", text(&output));
    let shown = text(&output);
    assert!(shown.contains(placement.workspace.to_str().unwrap()), "{shown}");
    assert_eq!(std::fs::read_to_string(placement.workspace.join("made.txt")).unwrap(), "hi\n");
}

#[tokio::test]
async fn writing_outside_the_workspace_fails() {
    let fixture = fixture(|_| {});
    probed(&fixture).await;
    let outside = fixture.state.parent().unwrap().join("escaped.txt");
    let command = format!(
        "echo x > {0}; echo x > /tmp/ferry-escape-$$; echo x > ../escape; touch /etc/escape",
        outside.display()
    );
    let (placement, output) = run(&fixture, "agent:main:telegram:group:-1", &command).await;
    assert!(!outside.exists(), "{}", text(&output));
    assert!(!placement.workspace.parent().unwrap().join("escape").exists());
    assert!(!Path::new("/etc/escape").exists());
    assert!(text(&output).contains("ermission denied"), "{}", text(&output));
}

#[tokio::test]
async fn ferrys_config_state_and_other_sessions_are_unreadable() {
    let fixture = fixture(|_| {});
    probed(&fixture).await;
    let (other, _) = run(&fixture, "agent:main:discord:channel:2", "echo private > notes.txt").await;
    let command = format!(
        "cat {config}; cat {db}; cat {other}/notes.txt; ls {state}",
        config = fixture.config_file.display(),
        db = fixture.state.join("ferry.db").display(),
        other = other.workspace.display(),
        state = fixture.state.display(),
    );
    let (_, output) = run(&fixture, "agent:main:discord:channel:1", &command).await;
    let shown = text(&output);
    for secret in ["sk-config-secret", "state secrets", "private"] {
        assert!(!shown.contains(secret), "{secret} leaked: {shown}");
    }
    assert!(!shown.lines().any(|line| line == "ferry.db" || line == "sandboxes"), "the state dir was listed: {shown}");
}

#[tokio::test]
async fn the_gateways_own_port_is_unreachable_without_network() {
    let fixture = fixture(|_| {});
    probed(&fixture).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // bash's /dev/tcp when there is bash; python's socket when there is python.
    let command = format!(
        "bash -c 'echo GET > /dev/tcp/127.0.0.1/{port}' 2>&1 && echo CONNECTED; \
         python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); print(\"CONNECTED\")' 2>&1; true"
    );
    let (_, output) = run(&fixture, "agent:main:slack:channel:c1", &command).await;
    assert!(!text(&output).contains("CONNECTED"), "{}", text(&output));
}

#[tokio::test]
async fn the_environment_holds_no_secret_and_ferrys_cannot_be_read() {
    let fixture = fixture(|_| {});
    probed(&fixture).await;
    // The test process plays Ferry: its environment holds a key.
    // SAFETY: set before any sandboxed child starts; only this test reads it.
    unsafe { std::env::set_var("OPENAI_API_KEY", "sk-env-secret-123") };
    let command = format!("env; cat /proc/{}/environ; cat /proc/$PPID/environ", std::process::id());
    let (_, output) = run(&fixture, "agent:main:slack:channel:c1", &command).await;
    let shown = text(&output);
    assert!(!shown.contains("sk-env-secret-123"), "{shown}");
    assert!(shown.contains("PATH=/usr/local/bin:/usr/bin:/bin"), "{shown}");
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_cleaned_up() {
    let fixture = fixture(|config| config.max_processes = 32);
    probed(&fixture).await;
    let marker = format!("bomb{}", std::process::id());
    let command = format!("{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 3; echo survived");
    let placement = fixture.sandbox.place("agent:main:telegram:group:-9").unwrap();
    let mut child = fixture.sandbox.shell(&command, &placement).spawn().unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let during = processes_running(&marker);
    assert!(during <= 32, "{during} bomb processes: the process limit did not hold");
    // The host still starts processes meanwhile.
    assert!(std::process::Command::new("/bin/true").status().unwrap().success());
    let waited = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait()).await;
    assert!(waited.is_ok(), "the bomb's command did not end");
    // Its shell was PID 1 of its namespace: when it ended, the kernel killed every fork.
    let mut left = processes_running(&marker);
    for _ in 0..20 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = processes_running(&marker);
    }
    assert_eq!(left, 0, "bomb processes outlived their sandbox");
}

/// Processes whose command line mentions `marker`.
fn processes_running(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(marker))
        .count()
}

#[tokio::test]
async fn a_10_gb_file_stops_at_the_file_size_limit() {
    let fixture = fixture(|config| config.max_file_mb = 8);
    probed(&fixture).await;
    let (placement, output) =
        run(&fixture, "agent:main:telegram:group:-1", "head -c 10G /dev/zero > big; echo status=$?; ls -l big").await;
    let size = std::fs::metadata(placement.workspace.join("big")).map(|meta| meta.len()).unwrap_or(0);
    assert!(size <= 8 * 1024 * 1024, "{size} bytes: {}", text(&output));
    assert!(!text(&output).contains("status=0"), "{}", text(&output));
}

/// The control for the tests above: the same attempts, from a session that runs on the
/// host (`mode = "off"`), do succeed, so their failing above is the sandbox's doing.
#[tokio::test]
async fn on_the_host_the_same_attempts_succeed() {
    let fixture = fixture(|config| config.mode = SandboxMode::Off);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "cat {config}; bash -c 'echo GET > /dev/tcp/127.0.0.1/{port}' 2>&1 && echo CONNECTED",
        config = fixture.config_file.display()
    );
    let (placement, output) = run(&fixture, "agent:main:slack:channel:c1", &command).await;
    assert!(!placement.sandboxed);
    let shown = text(&output);
    assert!(shown.contains("sk-config-secret") && shown.contains("CONNECTED"), "{shown}");
}
