//! `exec` spawn-to-first-output, on the host and in the sandbox (issue 21's target: the
//! sandbox adds at most 15 ms at p50). Both go through the launcher, as `exec` does; the
//! timer runs from building the command to the first byte of `echo hi` on its pipe.
//! Interleaved, so load on the machine hits both alike. Prints p50/p99 per variant.
//!
//! `cargo bench --bench sandbox` (`SANDBOX_BENCH_N` sets the rounds; default 200).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferry::config::{SandboxConfig, SandboxMode, SandboxScope};
use ferry::sandbox::{Sandbox, SandboxPaths};
use tokio::io::AsyncReadExt;

#[path = "common/interleaved.rs"]
mod interleaved;

fn sandbox(mode: SandboxMode, state: &std::path::Path) -> Sandbox {
    let config = SandboxConfig { mode, scope: SandboxScope::Session, ..SandboxConfig::default() };
    let paths = SandboxPaths {
        state_dir: state.to_path_buf(),
        agent_workspace: state.join("workspace"),
        config_file: None,
        launcher: PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
    };
    Sandbox::new(config, paths)
}

async fn first_output(sandbox: &Sandbox, session: &str) -> Duration {
    let started = Instant::now();
    let placement = sandbox.place(session).expect("workspace");
    let mut child = sandbox.shell("echo hi", &placement).stdout(std::process::Stdio::piped()).spawn().expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut byte = [0u8; 1];
    stdout.read_exact(&mut byte).await.expect("first byte");
    let took = started.elapsed();
    let _ = child.wait().await;
    took
}

#[tokio::main]
async fn main() {
    let rounds = interleaved::rounds("SANDBOX_BENCH_N", 200);
    let state = tempfile::tempdir().expect("tempdir");
    let host = sandbox(SandboxMode::Off, state.path());
    let confined = sandbox(SandboxMode::All, state.path());
    if let Err(why) = confined.probe().await {
        eprintln!("the sandbox does not work here: {why}");
        std::process::exit(1);
    }
    let session = "agent:main:telegram:group:-1";
    let (on_host, in_sandbox) =
        interleaved::interleaved(10, rounds, || first_output(&host, session), || first_output(&confined, session))
            .await;
    println!("exec spawn-to-first-output, {rounds} rounds each, interleaved (ms)");
    interleaved::report(("host (launcher, no sandbox)", &on_host), ("sandbox", &in_sandbox), "added by the sandbox");
}
