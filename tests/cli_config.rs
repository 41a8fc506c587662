//! `ferry config check` / `config show` and the CLI surface, run as the real binary in a
//! clean environment (no inherited variables, a scratch HOME and working directory).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{error_line, stderr, stdout};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temp dir") }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        path
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path().join("home"))
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .output()
            .expect("run ferry")
    }
}

#[test]
fn config_check_passes_on_a_fresh_machine_with_no_config() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["config", "check"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("config OK: built-in defaults"), "{text}");
    assert!(
        text.contains(&format!("state_dir: {}", sandbox.dir.path().join("home/.local/share/ferry").display())),
        "{text}"
    );
}

#[test]
fn config_check_rejects_each_bad_case_with_one_line_naming_file_and_key() {
    let cases = [
        ("unknown-key.toml", "[gateway]\nprot = 18789\n", "gateway.prot"),
        ("wrong-type.toml", "[gateway]\nport = \"high\"\n", "gateway.port"),
        (
            "empty-allowlist.toml",
            "[channels.telegram]\ndm_policy = \"allowlist\"\nallow_from = []\n",
            "channels.telegram.allow_from",
        ),
        ("port-zero.toml", "[gateway]\nport = 0\n", "gateway.port"),
        ("port-too-big.toml", "[gateway]\nport = 65536\n", "gateway.port"),
        ("no-token.toml", "[channels.discord]\nenabled = true\n", "channels.discord.bot_token"),
    ];
    let sandbox = Sandbox::new();
    for (name, text, key) in cases {
        let path = sandbox.file(name, text);
        let output = sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[]);
        let line = error_line(&output);
        assert!(line.contains(name), "{name}: error does not name the file: {line}");
        assert!(line.contains(&format!(": {key}: ")), "{name}: error does not name {key}: {line}");
        assert!(!stderr(&output).contains("panicked"), "{name}: {}", stderr(&output));
    }
}

/// The error line `ferry config check` prints for a config file `name` holding `text`.
fn check_error(sandbox: &Sandbox, name: &str, text: &str) -> (String, PathBuf) {
    let path = sandbox.file(name, text);
    let output = sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    (error_line(&output), path)
}

#[test]
fn an_unknown_provider_kind_lists_the_valid_kinds() {
    let sandbox = Sandbox::new();
    let (line, path) = check_error(&sandbox, "kind.toml", "[models.providers.x]\nkind = \"gemini\"\n");
    assert_eq!(
        line,
        format!(
            r#"error: invalid config ({}): models.providers.x.kind: "gemini" is not one of "openai", "anthropic", "echo""#,
            path.display()
        )
    );
}

#[test]
fn a_queue_mode_typo_suggests_the_nearest_mode() {
    let sandbox = Sandbox::new();
    let (line, path) = check_error(&sandbox, "mode.toml", "[messages.queue]\nmode = \"colect\"\n");
    assert_eq!(
        line,
        format!(
            r#"error: invalid config ({}): messages.queue.mode: "colect" is not one of "collect", "steer", "followup", "steer-backlog", "interrupt"; did you mean "collect"?"#,
            path.display()
        )
    );
}

#[test]
fn a_duplicate_key_is_named_with_its_file_and_lines() {
    let sandbox = Sandbox::new();
    let (line, path) =
        check_error(&sandbox, "twice.toml", "[gateway]\nport = 18789\nbind = \"127.0.0.1\"\nport = 18790\n");
    assert_eq!(
        line,
        format!("error: {}:4:1: invalid TOML: duplicate key gateway.port (first set on line 2)", path.display())
    );
}

#[test]
fn a_port_over_65535_says_what_a_port_is() {
    let sandbox = Sandbox::new();
    let (line, path) = check_error(&sandbox, "port.toml", "[gateway]\nport = 70000\n");
    assert_eq!(
        line,
        format!("error: invalid config ({}): gateway.port: 70000 is not a port (1-65535)", path.display())
    );
}

#[test]
fn a_zero_timeout_says_the_range() {
    let sandbox = Sandbox::new();
    let (line, path) = check_error(&sandbox, "timeout.toml", "[agents.defaults]\ntimeout_seconds = 0\n");
    assert_eq!(
        line,
        format!(
            "error: invalid config ({}): agents.defaults.timeout_seconds: must be between 1 and 86400, got 0",
            path.display()
        )
    );
}

#[test]
fn a_provider_no_model_uses_is_a_warning_and_the_check_passes() {
    let sandbox = Sandbox::new();
    let path = sandbox.file(
        "unused.toml",
        "[agents.defaults]\nmodel = \"echo/echo\"\n\n[models.providers.spare]\nkind = \"openai\"\n",
    );
    let output = sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("config OK"), "{}", stdout(&output));
    let warnings: Vec<_> =
        stderr(&output).lines().filter(|line| line.starts_with("warning:")).map(str::to_owned).collect();
    assert_eq!(
        warnings,
        [format!(
            r#"warning: {}: models.providers.spare: defined but no model uses it (agents.defaults.model is "echo/echo")"#,
            path.display()
        )]
    );
}

#[test]
fn a_missing_token_is_satisfied_by_the_platform_variable() {
    let sandbox = Sandbox::new();
    let path = sandbox.file("tg.toml", "[channels.telegram]\nenabled = true\n");
    let output =
        sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[("TELEGRAM_BOT_TOKEN", "1:x")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("channels enabled: telegram, webchat"), "{}", stdout(&output));
}

#[test]
fn a_chunk_limit_over_the_platform_limit_is_refused() {
    let sandbox = Sandbox::new();
    let path = sandbox.file("big.toml", "[channels.telegram]\ntext_chunk_limit = 5000\n");
    let line = error_line(&sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[]));
    assert!(line.contains("channels.telegram.text_chunk_limit") && line.contains("4096"), "{line}");
}

#[test]
fn syntax_errors_and_missing_files_are_one_clear_line() {
    let sandbox = Sandbox::new();
    let path = sandbox.file("broken.toml", "[gateway\n");
    let line = error_line(&sandbox.run(&["config", "check", "--config", path.to_str().unwrap()], &[]));
    assert!(line.contains("broken.toml:1:") && line.contains("invalid TOML"), "{line}");

    let line = error_line(&sandbox.run(&["config", "check", "--config", "absent.toml"], &[]));
    assert!(line.contains("absent.toml") && line.contains("no such file"), "{line}");
}

#[test]
fn config_show_reflects_environment_overrides_of_nested_keys() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(
        &["config", "show"],
        &[("FERRY__GATEWAY__PORT", "19999"), ("FERRY__CHANNELS__TELEGRAM__API_URL", "http://127.0.0.1:8081")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let shown: toml::Table = stdout(&output).parse().expect("config show prints TOML");
    assert_eq!(shown["gateway"]["port"].as_integer(), Some(19999));
    assert_eq!(shown["channels"]["telegram"]["api_url"].as_str(), Some("http://127.0.0.1:8081"));
}

#[test]
fn config_show_redacts_every_secret() {
    let sandbox = Sandbox::new();
    let path = sandbox.file(
        "secrets.toml",
        "[gateway]\nauth_token = \"gateway-token-value\"\n[channels.slack]\nsigning_secret = \"slack-signing-value\"\n",
    );
    let output = sandbox.run(
        &["config", "show", "--config", path.to_str().unwrap()],
        &[("TELEGRAM_BOT_TOKEN", "telegram-token-value"), ("RUST_LOG", "trace")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let everything = format!("{}{}", stdout(&output), stderr(&output));
    for secret in ["gateway-token-value", "slack-signing-value", "telegram-token-value"] {
        assert!(!everything.contains(secret), "{secret} leaked into the output or logs:\n{everything}");
    }
    let shown: toml::Table = stdout(&output).parse().unwrap();
    assert_eq!(shown["gateway"]["auth_token"].as_str(), Some("***"));
    assert_eq!(shown["channels"]["telegram"]["bot_token"].as_str(), Some("***"));
    // The trace-level log of the loaded config went to stderr, redacted.
    assert!(stderr(&output).contains("configuration loaded"), "{}", stderr(&output));
}

#[test]
fn json_logs_are_one_object_per_line() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["config", "check", "--log-format", "json"], &[("RUST_LOG", "debug")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let lines: Vec<_> = stderr(&output).lines().map(str::to_owned).collect();
    assert!(!lines.is_empty(), "no logs at debug level");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value.get("level").is_some() && value.get("message").is_some(), "{line}");
    }
}

#[test]
fn a_bad_rust_log_falls_back_to_the_default_and_says_so() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["config", "check"], &[("RUST_LOG", "ferry=notalevel")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("RUST_LOG does not parse"), "{}", stderr(&output));
}

#[test]
fn help_works_on_every_command() {
    let sandbox = Sandbox::new();
    let commands: [&[&str]; 9] = [
        &[],
        &["gateway"],
        &["agent"],
        &["config"],
        &["config", "check"],
        &["config", "show"],
        &["pairing"],
        &["pairing", "approve"],
        &["sessions", "list"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let output = sandbox.run(&args, &[]);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(stdout(&output).contains("Usage: ferry"), "{args:?}: {}", stdout(&output));
        assert!(stdout(&output).contains("--config <FILE>"), "{args:?} lacks --config: {}", stdout(&output));
    }
}

#[test]
fn version_prints_the_package_version() {
    let output = Sandbox::new().run(&["--version"], &[]);
    assert!(output.status.success());
    assert_eq!(stdout(&output).trim(), format!("ferry {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn the_shipped_default_config_checks_clean() {
    let default_toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
    let output = Sandbox::new().run(&["config", "check", "--config", default_toml.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn agents_list_shows_each_agent_its_model_workspace_and_bindings() {
    let sandbox = Sandbox::new();
    let config = sandbox.file(
        "agents.toml",
        "state_dir = \"/srv/ferry\"\n\
         [agents.defaults]\nmodel = \"echo/echo\"\n\
         [agents.list.main]\n\
         [agents.list.support]\nname = \"Support\"\nmodel = \"echo/support\"\n\
         [agents.list.idle]\n\
         [[bindings]]\nagent = \"support\"\nmatch = { channel = \"slack\", peer = \"C0123\" }\n",
    );
    let output = sandbox.run(&["--config", config.to_str().unwrap(), "agents", "list"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "main [default]\n  model: echo/echo\n  workspace: /srv/ferry/workspace\n  and every chat no binding matches\n\
         support (Support)\n  model: echo/support\n  workspace: /srv/ferry/workspaces/support\n\
         \x20 bindings[0]: channel = \"slack\", peer = \"C0123\"\n\
         idle\n  model: echo/echo\n  workspace: /srv/ferry/workspaces/idle\n\
         \x20 no binding routes chats here (gateway clients may still name it)\n"
    );
}

#[test]
fn config_check_rejects_a_binding_to_an_unknown_agent_or_account_naming_the_key() {
    let sandbox = Sandbox::new();
    let cases = [
        ("[[bindings]]\nagent = \"sales\"\nmatch = { channel = \"slack\" }\n", "bindings[0].agent"),
        (
            "[[bindings]]\nagent = \"main\"\nmatch = { channel = \"telegram\", account = \"work\" }\n",
            "bindings[0].match.account",
        ),
    ];
    for (text, key) in cases {
        let (line, path) = check_error(&sandbox, "bindings.toml", text);
        assert!(line.starts_with(&format!("error: invalid config ({}): {key}: there is no", path.display())), "{line}");
    }
}

/// A single-agent config from before several agents and accounts existed shows exactly as
/// it did: `single-agent.shown.toml` is what `ferry config show` printed for it at f1282d4
/// (the last commit before them), plus what was added since at its defaults:
/// `agents.defaults.sessions_visibility`, the `[state]` table and the `[cron]` table.
// The golden config enables every channel.
#[cfg(all(feature = "telegram", feature = "discord", feature = "slack"))]
#[test]
fn a_single_agent_config_shows_as_it_did_before_agents_and_accounts() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let sandbox = Sandbox::new();
    let config = golden.join("single-agent.toml");
    let output = sandbox.run(&["--config", config.to_str().unwrap(), "config", "show"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let shown = stdout(&output);
    let (_source_line, body) = shown.split_once('\n').expect("a first line naming the file");
    let expected = std::fs::read_to_string(golden.join("single-agent.shown.toml")).unwrap();
    assert_eq!(body, expected);
    let listed = sandbox.run(&["--config", config.to_str().unwrap(), "agents", "list"], &[]);
    assert_eq!(
        stdout(&listed),
        "main [default]\n  model: local/llama3 → anthropic/claude-sonnet-4-5\n  workspace: /srv/ferry/workspace\n  \
         and every chat no binding matches\n"
    );
}

/// What the binary was built with decides what a config may ask for: `config check` lists the
/// features, and refuses, naming the file, the key and the feature, a config that needs one
/// the build lacks. Runs on every feature set CI builds, asserting whichever this one is.
#[test]
fn config_check_lists_the_features_and_refuses_what_this_build_lacks_by_name() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["config", "check"], &[]);
    let text = stdout(&output);
    let listed = text.lines().find(|line| line.starts_with("features: ")).unwrap_or_else(|| panic!("{text}"));
    let (built, missing) = listed.split_once("; not built: ").unwrap_or((listed, ""));
    let cases = [
        (
            "postgres",
            "[state]\nbackend = \"postgres\"\npostgres_url = \"postgres://u@127.0.0.1:1/f\"\n",
            "state.backend",
        ),
        ("mcp", "[mcp.servers.files]\ncommand = \"sh\"\n", "mcp.servers.files"),
        ("web", "[tools.web.search]\nprovider = \"searxng\"\nurl = \"http://127.0.0.1:1\"\n", "tools.web.search"),
        (
            "discord",
            "[channels.discord]\nenabled = true\nbot_token = \"t\"\n[channels.telegram]\nenabled = false\n",
            "channels.discord.enabled",
        ),
    ];
    for (feature, config, key) in cases {
        let is_built = built.trim_start_matches("features: ").split(", ").any(|name| name == feature);
        assert_eq!(is_built, !missing.contains(feature), "{listed}");
        let path = sandbox.file(&format!("{feature}.toml"), config);
        let output =
            sandbox.run(&["--config", path.to_str().unwrap(), "config", "check"], &[("PATH", "/usr/bin:/bin")]);
        if is_built {
            assert!(output.status.success(), "{feature}: {}", stderr(&output));
        } else {
            let line = error_line(&output);
            assert!(line.contains(&format!("{feature}.toml")) && line.contains(key), "{feature}: {line}");
            assert!(line.contains(&format!("needs a ferry built with --features {feature}")), "{feature}: {line}");
        }
    }
}
