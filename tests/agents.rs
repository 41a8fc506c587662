//! Several agents and accounts in one gateway, end to end: the real `ferry gateway` binary
//! against the fake platforms and a fake model that says which model answered, so each
//! reply shows which agent's model it came from.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferry_fakes::{DiscordUser, FakeDiscord, FakeOpenAi, FakeSlack, FakeTelegram, Mention, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, daemon_in, health};

/// A fake model server whose every answer is `<model>: <the user's text>`.
async fn naming_model() -> FakeOpenAi {
    FakeOpenAi::start().await.unwrap().with_responder(|request| {
        let model = request.body["model"].as_str().unwrap_or("?").to_owned();
        let said = request.last_user_text().unwrap_or_default();
        Turn::text([format!("{model}: {said}")])
    })
}

/// Two agents on the fake model, `main` (the default) and `helper`, with different models.
fn agents(openai: &FakeOpenAi) -> String {
    format!(
        "[models.providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"sk-test\"\n\n\
         [agents.list.main]\nmodel = \"fake/model-main\"\n\n\
         [agents.list.helper]\nname = \"Helper\"\nmodel = \"fake/model-helper\"\n",
        openai.url()
    )
}

/// Waits until `done` holds for what `read` returns, and returns that.
async fn wait_for<T: std::fmt::Debug>(what: &str, read: impl Fn() -> T, done: impl Fn(&T) -> bool) -> T {
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            let value = read();
            if done(&value) {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{what}: still {:?}", read()))
}

/// Runs `ferry <args>` against the daemon's home; its stdout.
fn ferry(home: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .current_dir(home)
        .output()
        .expect("run ferry");
    assert!(output.status.success(), "ferry {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `ferry pairing approve …` command a pairing reply tells the sender to pass on.
fn approval_command(reply: &str) -> Vec<String> {
    let line = reply.lines().find(|line| line.starts_with("ferry pairing approve ")).expect("the approval command");
    line.split_whitespace().skip(1).map(str::to_owned).collect()
}

/// Waits until every account in `accounts` of `channel` shows running on `/healthz`.
async fn accounts_running(daemon: &Daemon, channel: &str, accounts: &[&str]) -> serde_json::Value {
    let port = daemon.port;
    let mut last = serde_json::Value::Null;
    let running = tokio::time::timeout(PATIENCE, async {
        loop {
            last = health(port).await;
            let entries = last["channels"].as_array().cloned().unwrap_or_default();
            let up = |account: &&str| {
                entries.iter().any(|entry| {
                    entry["name"] == channel && entry["account"] == *account && entry["state"] == "running"
                })
            };
            if accounts.iter().all(up) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(running.is_ok(), "not every {channel} account runs: {last}");
    last
}

#[tokio::test]
async fn two_telegram_bots_are_answered_by_their_own_agents_with_their_own_pairing_sessions_and_offsets() {
    let openai = naming_model().await;
    let (first, second) = ("111:first-bot", "222:second-bot");
    let main_bot = FakeTelegram::start(first).await.unwrap().without_rate_limits();
    let helper_bot = FakeTelegram::start(second).await.unwrap().without_rate_limits();
    let config = format!(
        "{}\n[channels.telegram]\nenabled = true\n\n\
         [channels.telegram.accounts.default]\nbot_token = \"{first}\"\napi_url = \"{}\"\n\n\
         [channels.telegram.accounts.helper]\nbot_token = \"{second}\"\napi_url = \"{}\"\n\n\
         [[bindings]]\nagent = \"helper\"\nmatch = {{ channel = \"telegram\", account = \"helper\" }}\n",
        agents(&openai),
        main_bot.url(),
        helper_bot.url()
    );
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    let health = accounts_running(&daemon, "telegram", &["default", "helper"]).await;
    let telegram_entries = health["channels"].as_array().unwrap().iter().filter(|entry| entry["name"] == "telegram");
    assert_eq!(telegram_entries.count(), 2, "one health entry per account: {health}");
    let home = daemon.home.as_ref().unwrap().path().to_owned();

    // Pairing is per bot: approving Ada on the first bot does not let her talk to the second.
    main_bot.private_message(42, "Ada", "hello first");
    let code = wait_for("the first bot's pairing code", || main_bot.messages_in(42), |shown| shown.len() == 1).await;
    let approve = approval_command(&code[0].visible_text);
    assert_eq!(approve[2], "telegram", "account default pairs as before: {approve:?}");
    ferry(&home, &approve.iter().map(String::as_str).collect::<Vec<_>>());
    helper_bot.private_message(42, "Ada", "hello second");
    let code = wait_for("the second bot's pairing code", || helper_bot.messages_in(42), |shown| shown.len() == 1).await;
    let approve = approval_command(&code[0].visible_text);
    assert_eq!(approve[2], "telegram:helper", "{approve:?}");

    main_bot.private_message(42, "Ada", "who are you?");
    let shown = wait_for("the first bot's answer", || main_bot.messages_in(42), |shown| shown.len() == 2).await;
    assert_eq!(shown[1].visible_text, "model-main: who are you?");
    assert_eq!(helper_bot.messages_in(42).len(), 1, "the second bot still waits for its approval");

    ferry(&home, &approve.iter().map(String::as_str).collect::<Vec<_>>());
    helper_bot.private_message(42, "Ada", "and you?");
    let shown = wait_for("the second bot's answer", || helper_bot.messages_in(42), |shown| shown.len() == 2).await;
    assert_eq!(shown[1].visible_text, "model-helper: and you?");

    // Two agents never share a transcript: each bot's chat is a session of its own agent.
    let sessions = ferry(&home, &["sessions", "list"]);
    assert!(sessions.contains("agent:main:telegram:direct:42"), "{sessions}");
    assert!(sessions.contains("agent:helper:telegram:direct:42"), "{sessions}");

    // Each bot confirms its own updates; after a crash each resumes from its own offset:
    // nothing is answered twice, and both answer what comes next.
    let offsets = (main_bot.current_offset(), helper_bot.current_offset());
    let home = daemon.crash();
    let daemon = daemon_in(home, &config, &openai, "telegram").await;
    accounts_running(&daemon, "telegram", &["default", "helper"]).await;
    main_bot.private_message(42, "Ada", "still there?");
    helper_bot.private_message(42, "Ada", "you too?");
    let main_shown = wait_for("the first bot after the restart", || main_bot.messages_in(42), |s| s.len() == 3).await;
    let helper_shown =
        wait_for("the second bot after the restart", || helper_bot.messages_in(42), |s| s.len() == 3).await;
    assert_eq!(main_shown[2].visible_text, "model-main: still there?");
    assert_eq!(helper_shown[2].visible_text, "model-helper: you too?");
    assert!(main_bot.current_offset() > offsets.0 && helper_bot.current_offset() > offsets.1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((main_bot.messages_in(42).len(), helper_bot.messages_in(42).len()), (3, 3), "nothing repeated");
    drop(daemon);
}

#[tokio::test]
async fn a_discord_guild_channel_goes_to_its_agent_while_dms_go_to_the_default() {
    let openai = naming_model().await;
    let discord = FakeDiscord::start("fake.discord.token").await.unwrap();
    let config = format!(
        "{}\n[channels.discord]\nenabled = true\nbot_token = \"fake.discord.token\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\n\n[channels.discord.guilds.\"1\"]\nchannels = [\"10\"]\n\n\
         [[bindings]]\nagent = \"helper\"\nmatch = {{ channel = \"discord\", guild = \"1\" }}\n",
        agents(&openai),
        discord.url()
    );
    let _daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "discord").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("the gateway session is live");
    let ada = DiscordUser::new(4242, "ada");
    let (dm, _) = discord.dm(&ada, "in private");
    discord.guild_message(1, 10, &ada, "in the guild", Mention::Plain);
    let private = wait_for("the DM's answer", || discord.messages_in(dm), |shown| !shown.is_empty()).await;
    let guild = wait_for("the guild's answer", || discord.messages_in(10), |shown| !shown.is_empty()).await;
    assert_eq!(private[0].content, "model-main: in private");
    assert!(guild[0].content.starts_with("model-helper: "), "{guild:?}");
    assert!(guild[0].content.ends_with("in the guild"), "{guild:?}");
}

#[tokio::test]
async fn a_slack_channel_binding_routes_that_channel_only() {
    let openai = naming_model().await;
    let slack = FakeSlack::start().await.unwrap();
    let config = format!(
        "{}\n[channels.slack]\nenabled = true\nbot_token = \"{}\"\napp_token = \"{}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\ngroup_policy = \"open\"\nrequire_mention = false\n\n\
         [[bindings]]\nagent = \"helper\"\nmatch = {{ channel = \"slack\", peer = \"C0SUPPORT\" }}\n",
        agents(&openai),
        FakeSlack::BOT_TOKEN,
        FakeSlack::APP_TOKEN,
        slack.api_url()
    );
    // Each agent reads the bootstrap files of its own workspace.
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join(".local/share/ferry");
    for (workspace, persona) in [("workspace", "You are Main."), ("workspaces/helper", "You are Helper.")] {
        std::fs::create_dir_all(state.join(workspace)).unwrap();
        std::fs::write(state.join(workspace).join("AGENTS.md"), persona).unwrap();
    }
    let _daemon = daemon_in(home, &config, &openai, "slack").await;
    slack.deliver(&slack.channel_message("C0SUPPORT", "U1", "need help"));
    slack.deliver(&slack.channel_message("C0GENERAL", "U1", "hello all"));
    let support = slack.wait_for_messages("C0SUPPORT", 1).await;
    let general = slack.wait_for_messages("C0GENERAL", 1).await;
    assert!(support[0].text.starts_with("model-helper: ") && support[0].text.ends_with("need help"), "{support:?}");
    assert!(general[0].text.starts_with("model-main: ") && general[0].text.ends_with("hello all"), "{general:?}");
    for request in openai.requests() {
        let (prompt, model) =
            (request.body["messages"].to_string(), request.body["model"].as_str().unwrap_or_default());
        let (own, other) = if model == "model-helper" { ("Helper", "Main") } else { ("Main", "Helper") };
        assert!(prompt.contains(&format!("You are {own}.")), "{model} misses its own AGENTS.md: {prompt}");
        assert!(!prompt.contains(&format!("You are {other}.")), "{model} read the other agent's AGENTS.md");
    }
}

/// A private message from Ada to the bot, as Telegram POSTs it to a webhook.
fn update(id: i64, text: &str) -> serde_json::Value {
    serde_json::json!({
        "update_id": id,
        "message": {"message_id": id, "date": 0, "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                    "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": text}
    })
}

#[tokio::test]
async fn each_telegram_account_has_its_own_webhook_path_and_secret() {
    let openai = naming_model().await;
    let main_bot = FakeTelegram::start("111:first-bot").await.unwrap().without_rate_limits();
    let work_bot = FakeTelegram::start("222:work-bot").await.unwrap().without_rate_limits();
    let config = format!(
        "{}\n[channels.telegram]\nenabled = true\nmode = \"webhook\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n\n\
         [channels.telegram.accounts.default]\nbot_token = \"111:first-bot\"\napi_url = \"{}\"\nwebhook_secret = \"first\"\n\n\
         [channels.telegram.accounts.work]\nbot_token = \"222:work-bot\"\napi_url = \"{}\"\nwebhook_secret = \"work\"\n\n\
         [[bindings]]\nagent = \"helper\"\nmatch = {{ account = \"work\" }}\n",
        agents(&openai),
        main_bot.url(),
        work_bot.url()
    );
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    accounts_running(&daemon, "telegram", &["default", "work"]).await;
    // The fakes learn of the chat from a first message (the update stays queued: nobody polls).
    main_bot.private_message(42, "Ada", "hi");
    work_bot.private_message(42, "Ada", "hi");
    let client = reqwest::Client::new();
    let post = |path: &str, secret: &str, update: serde_json::Value| {
        let url = format!("http://127.0.0.1:{}{path}", daemon.port);
        client.post(url).header("X-Telegram-Bot-Api-Secret-Token", secret).json(&update).send()
    };
    let status = |response: Result<reqwest::Response, reqwest::Error>| response.unwrap().status().as_u16();
    assert_eq!(status(post("/telegram-webhook/work", "first", update(1, "x")).await), 401, "another bot's secret");
    assert_eq!(status(post("/telegram-webhook/nobody", "work", update(1, "x")).await), 404);
    assert_eq!(status(post("/telegram-webhook/work", "work", update(1, "to work")).await), 200);
    assert_eq!(status(post("/telegram-webhook", "first", update(1, "to the first")).await), 200);
    assert_eq!(status(post("/telegram-webhook/default", "first", update(2, "again")).await), 200);
    let work = wait_for("the work bot's answer", || work_bot.messages_in(42), |shown| !shown.is_empty()).await;
    assert_eq!(work[0].visible_text, "model-helper: to work");
    let first = wait_for("the first bot's answers", || main_bot.messages_in(42), |shown| shown.len() == 2).await;
    assert_eq!(first[0].visible_text, "model-main: to the first");
    assert_eq!(first[1].visible_text, "model-main: again");
}
