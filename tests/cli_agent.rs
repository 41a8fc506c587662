//! `ferry agent` as a user runs it: the real binary, a clean environment, and either no
//! model at all (the echo fallback) or the fake OpenAI server via `OPENAI_BASE_URL`.

use std::process::{Command, Output};

use ferry_fakes::{FakeOpenAi, Reply, Turn};

/// `ferry` with `env`, on a gateway port nothing listens on: these runs are embedded.
async fn ferry(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().expect("home");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(&args)
            .env_clear()
            .env("HOME", home.path())
            .env("FERRY__GATEWAY__PORT", port)
            .envs(env)
            .current_dir(home.path())
            .output()
            .expect("run ferry")
    })
    .await
    .expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn with_nothing_configured_the_echo_provider_answers_and_says_so() {
    let output = ferry(&["agent", "--message", "hello from a fresh machine"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "hello from a fresh machine\n");
    assert!(text(&output.stderr).contains("offline echo provider"), "{}", text(&output.stderr));
}

/// The level of each log line on stderr (pretty format: timestamp, level, target, message).
fn log_levels(stderr: &str) -> Vec<String> {
    stderr.lines().filter_map(|line| line.split_whitespace().nth(1)).map(str::to_owned).collect()
}

#[tokio::test]
async fn an_embedded_run_prints_the_answer_and_only_warnings_and_errors() {
    let output = ferry(&["agent", "--message", "just the answer, please"], &[]).await;
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(text(&output.stdout), "just the answer, please\n");
    let levels = log_levels(&stderr);
    assert!(!levels.is_empty(), "the echo provider's warning is missing: {stderr}");
    assert!(levels.iter().all(|level| level == "WARN" || level == "ERROR"), "{stderr}");
}

#[tokio::test]
async fn v_adds_info_lines_and_vv_debug_lines_on_stderr_only() {
    let output = ferry(&["agent", "-v", "--message", "tell me more"], &[]).await;
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(text(&output.stdout), "tell me more\n", "logs never reach stdout");
    let levels = log_levels(&stderr);
    assert!(levels.iter().any(|level| level == "INFO"), "{stderr}");
    assert!(!levels.iter().any(|level| level == "DEBUG"), "{stderr}");
    assert!(stderr.contains("running the agent embedded"), "says which it used: {stderr}");
    assert!(stderr.contains("no config file found; using the built-in defaults"), "{stderr}");

    let output = ferry(&["-vv", "agent", "--message", "and more"], &[]).await;
    assert!(log_levels(&text(&output.stderr)).iter().any(|level| level == "DEBUG"), "{}", text(&output.stderr));
}

#[tokio::test]
async fn openai_base_url_points_the_agent_at_a_compatible_server() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key("sk-cli");
    fake.push(Turn::text(["The answer ", "is 42."]));
    let url = fake.url();
    let output = ferry(
        &["agent", "--message", "what is the answer?", "--session", "agent:main:cli-test"],
        &[("OPENAI_BASE_URL", &url), ("OPENAI_API_KEY", "sk-cli"), ("OPENAI_MODEL", "gpt-test")],
    )
    .await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "The answer is 42.\n");
    let request = &fake.requests()[0];
    assert_eq!(request.body["model"], "gpt-test");
    assert_eq!(request.body["messages"].as_array().unwrap().last().unwrap()["content"], "what is the answer?");
    assert!(!text(&output.stderr).contains("sk-cli"), "the key leaked into logs");
}

#[tokio::test]
async fn a_session_continues_across_invocations_and_is_listed() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["Nice to meet you, Ada."])).push(Turn::text(["You are Ada."]));
    let url = fake.url();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().display().to_string();
    let env = [("OPENAI_BASE_URL", url.as_str()), ("FERRY_STATE_DIR", state_dir.as_str())];
    let session = ["--session", "agent:main:cli-memory"];

    let first = ferry(&[&["agent", "--message", "I am Ada"][..], &session[..]].concat(), &env).await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = ferry(&[&["agent", "--message", "who am I?"][..], &session[..]].concat(), &env).await;
    assert_eq!(text(&second.stdout), "You are Ada.\n");
    let history: Vec<String> = fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(&history[1..], ["I am Ada", "Nice to meet you, Ada.", "who am I?"]);

    let listed = ferry(&["sessions", "list"], &env).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listing = text(&listed.stdout);
    assert!(listing.lines().any(|line| line.starts_with("agent:main:cli-memory")), "{listing}");
}

#[tokio::test]
async fn json_mode_prints_every_event_as_a_json_line() {
    let output = ferry(&["agent", "--message", "one two three four five six", "--json"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let events: Vec<serde_json::Value> =
        text(&output.stdout).lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
    assert_eq!(events.first().unwrap()["data"]["phase"], "start");
    assert_eq!(events.last().unwrap()["data"]["phase"], "end");
    assert_eq!(events.last().unwrap()["data"]["aborted"], false);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]));
    assert!(events.iter().filter(|e| e["data"]["type"] == "delta").count() > 1, "the reply streams in several deltas");
}

#[tokio::test]
async fn timeout_and_provider_failures_exit_non_zero_with_a_clear_line() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::stall(Reply::text(["slow", "never"]), 1));
    let url = fake.url();
    let output = ferry(&["agent", "--message", "hi", "--timeout", "1"], &[("OPENAI_BASE_URL", &url)]).await;
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("error: the run timed out"), "{}", text(&output.stderr));

    fake.push(Turn::error(400, "model `nope` does not exist"));
    let output = ferry(&["agent", "--message", "hi"], &[("OPENAI_BASE_URL", &url)]).await;
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("rejected the request: model `nope` does not exist"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn a_message_over_the_inbound_limit_is_refused_before_anything_runs() {
    let fake = FakeOpenAi::start().await.unwrap();
    let url = fake.url();
    let long = "x".repeat(101);
    let env = [("OPENAI_BASE_URL", url.as_str()), ("FERRY__MESSAGES__MAX_INBOUND_CHARS", "100")];
    let output = ferry(&["agent", "--message", &long], &env).await;
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("the message is 101 characters; messages.max_inbound_chars allows 100"), "{stderr}");
    assert!(fake.requests().is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn an_embedded_run_is_offered_only_the_tools_the_config_allows() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["Fine."]));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ferry.toml");
    std::fs::write(&config, "[tools]\ndeny = [\"current_time\", \"sessions_list\"]\n").unwrap();
    let url = fake.url();
    let config = config.to_string_lossy().into_owned();
    let output = ferry(&["--config", &config, "agent", "--message", "hi"], &[("OPENAI_BASE_URL", &url)]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let tools = fake.requests()[0].body["tools"].as_array().cloned().unwrap_or_default();
    let offered: Vec<&str> = tools.iter().filter_map(|tool| tool["function"]["name"].as_str()).collect();
    assert_eq!(offered, ["message"]);
}

#[tokio::test]
async fn agent_runs_the_named_agent_with_its_own_model_and_refuses_an_unknown_one() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["helper here"]));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agents.toml");
    let agents =
        "[agents.list.main]\nmodel = \"openai/main-model\"\n[agents.list.helper]\nmodel = \"openai/helper-model\"\n";
    std::fs::write(&config, agents).unwrap();
    let config = config.to_str().unwrap();
    let env = [("OPENAI_BASE_URL", fake.url()), ("OPENAI_API_KEY", "sk-test".to_owned())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let output = ferry(&["--config", config, "agent", "--agent", "helper", "--message", "hi"], &env).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), "helper here");
    assert_eq!(fake.requests()[0].body["model"], "helper-model", "the helper agent's own model");

    let output = ferry(&["--config", config, "agent", "--agent", "nope", "--message", "hi"], &env).await;
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("there is no agent \"nope\" (agents: main, helper)"),
        "{}",
        text(&output.stderr)
    );
}
