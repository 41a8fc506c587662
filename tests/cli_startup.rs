//! What `ferry gateway` says while it starts, as an operator reads it on stderr: which config
//! file it loaded (or where it looked), warnings about the config, and a port that is taken.
//! The real binary, in a clean environment with a scratch home and working directory.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Generous bound for waiting on explicit signals; never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

/// `ferry gateway` in `home` (also its working directory) with `env`, stderr piped.
fn spawn_gateway(home: &Path, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("gateway")
        .env_clear()
        .env("HOME", home)
        .envs(env.iter().copied())
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferry gateway")
}

/// A port nothing listens on (the listener that found it is closed again).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts the gateway, waits for its "gateway listening" line, kills it and returns what it
/// wrote to stderr until then. (Killed, not stopped with SIGTERM: its signal handlers are
/// installed only once it serves, just after that line, and how it stops is not the point.)
fn start_up_log(home: &Path, env: &[(&str, &str)]) -> String {
    let mut child = spawn_gateway(home, env);
    let (lines, received) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut log = Vec::new();
    loop {
        let line = received.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("no listening line in:\n{log:#?}"));
        let listening = line.contains("gateway listening");
        log.push(line);
        if listening {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    log.join("\n")
}

/// Runs the command to its end, failing the test if it outlives [`PATIENCE`].
fn wait_with_patience(child: Child) -> Output {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    finished.recv_timeout(PATIENCE).expect("ferry gateway did not exit").expect("wait for ferry gateway")
}

#[test]
fn the_loaded_config_file_and_its_warnings_are_logged_at_start() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("ferry.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nport = {}\n\n[agents.defaults]\nmodel = \"echo/echo\"\n\n[models.providers.spare]\nkind = \"openai\"\n",
            free_port()
        ),
    )
    .unwrap();
    let log = start_up_log(home.path(), &[]);

    let loaded = log.lines().find(|line| line.contains("config file loaded")).unwrap_or_else(|| panic!("{log}"));
    assert!(loaded.contains(" INFO "), "{loaded}");
    assert!(loaded.ends_with(&format!("path={}", config.display())), "{loaded}");
    let warning = log.lines().find(|line| line.contains("models.providers.spare")).unwrap_or_else(|| panic!("{log}"));
    assert!(warning.contains(" WARN "), "{warning}");
    assert!(
        warning.ends_with(&format!(
            r#"{}: models.providers.spare: defined but no model uses it (agents.defaults.model is "echo/echo")"#,
            config.display()
        )),
        "{warning}"
    );
}

#[test]
fn with_no_config_file_the_start_says_where_it_looked_and_that_defaults_apply() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let log = start_up_log(home.path(), &[("FERRY__GATEWAY__PORT", &port)]);

    let line = log.lines().find(|line| line.contains("no config file found")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(" INFO "), "{line}");
    let searched = [home.path().join("ferry.toml"), home.path().join(".config/ferry/ferry.toml")];
    assert!(
        line.ends_with(&format!(
            "no config file found; using the built-in defaults searched={:?}",
            searched.map(|path| path.display().to_string())
        )),
        "{line}"
    );
    assert!(!log.contains("config file loaded"), "{log}");
}

#[test]
fn a_port_in_use_is_said_once_with_the_fix_and_the_gateway_exits_non_zero() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let home = tempfile::tempdir().unwrap();
    let output = wait_with_patience(spawn_gateway(home.path(), &[("FERRY__GATEWAY__PORT", &port.to_string())]));
    let stderr = String::from_utf8_lossy(&output.stderr);

    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error:")).collect();
    assert_eq!(
        errors,
        [format!("error: 127.0.0.1:{port} is in use (another ferry?); set gateway.port or FERRY__GATEWAY__PORT")],
        "{stderr}"
    );
    assert_eq!(stderr.matches("in use").count(), 1, "said once: {stderr}");
    drop(taken);
}
