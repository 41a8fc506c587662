//! Several agents, several accounts and the bindings between them: inheritance, the keys
//! errors name, and single-agent configs unchanged.

use std::path::Path;

use super::{Scratch, error_text};
use crate::config::{Accounts, Config, MAIN_AGENT, SessionsVisibility, ThinkingLevel};

fn load(text: &str) -> Config {
    Scratch::new().load_text(text, &[]).unwrap().config
}

fn refused(text: &str) -> String {
    let scratch = Scratch::new();
    let error = error_text(&scratch, text);
    error.strip_prefix("invalid config (DIR/case.toml): ").unwrap_or(&error).to_owned()
}

#[test]
fn an_agent_starts_from_the_defaults_and_overrides_key_by_key() {
    let config = load(
        "[agents.defaults]\ntimeout_seconds = 300\nthinking = \"low\"\n[agents.defaults.compaction]\nreserve_tokens = 1000\n\
         [agents.defaults.block_streaming_chunk]\nmin_chars = 10\nmax_chars = 20\n\
         [agents.list.main]\n\
         [agents.list.coder]\nname = \"Coder\"\nmodel = \"anthropic/claude-sonnet-4-5\"\nthinking = \"high\"\n\
         [agents.list.coder.block_streaming_chunk]\nmax_chars = 30\n",
    );
    let coder = &config.agents.list["coder"];
    assert_eq!(coder.timeout_seconds, 300, "inherited");
    assert_eq!(coder.compaction.reserve_tokens, 1000, "inherited table");
    assert_eq!(coder.thinking, ThinkingLevel::High, "overridden");
    assert_eq!((coder.block_streaming_chunk.min_chars, coder.block_streaming_chunk.max_chars), (10, 30));
    assert_eq!(coder.model.as_ref().map(|model| model.primary.as_str()), Some("anthropic/claude-sonnet-4-5"));
    let mut main = config.agents.list["main"].clone();
    main.default = false;
    assert_eq!(main, config.agents.defaults, "an agent that sets nothing is the defaults");
    assert_eq!(config.agents.default_id(), MAIN_AGENT);
    assert_eq!(config.agents.ids(), ["main", "coder"]);
}

#[test]
fn each_agent_has_its_own_workspace_and_main_keeps_the_old_one() {
    let config = load(
        "[agents.defaults]\nworkspace = \"/srv/ferry/ws\"\n[agents.list.main]\n[agents.list.coder]\n\
         [agents.list.ops]\nworkspace = \"/srv/ops\"\n",
    );
    let agents = config.agents.resolved(Path::new("/state"));
    let workspaces: Vec<(&str, &Path)> =
        agents.iter().map(|agent| (agent.id.as_str(), agent.workspace.as_path())).collect();
    assert_eq!(
        workspaces,
        [
            ("main", Path::new("/srv/ferry/ws")),
            ("coder", Path::new("/state/workspaces/coder")),
            ("ops", Path::new("/srv/ops"))
        ]
    );
    assert!(
        refused("[agents.list.a]\ndefault = true\nworkspace = \"/x\"\n[agents.list.b]\nworkspace = \"/x\"\n")
            .starts_with("agents.list.b.workspace: /x is agents.list.a's workspace too")
    );
}

#[test]
fn the_default_agent_is_marked_or_main_or_the_only_one() {
    let config = load("[agents.list.a]\n[agents.list.b]\ndefault = true\n");
    assert_eq!(config.agents.default_id(), "b");
    assert_eq!(config.agents.ids(), ["b", "a"]);
    assert_eq!(load("[agents.list.solo]\n").agents.default_id(), "solo");
    assert_eq!(load("").agents.ids(), [MAIN_AGENT]);
    assert!(refused("[agents.list.a]\n[agents.list.b]\n").starts_with("agents.list: which agent answers"));
    assert_eq!(
        refused("[agents.list.a]\ndefault = true\n[agents.list.b]\ndefault = true\n"),
        "agents.list.b.default: only one agent can be the default, and agents.list.a already is"
    );
}

#[test]
fn a_bad_agent_key_is_named_at_the_agents_own_path() {
    let cases = [
        ("[agents.list.coder]\nmodle = \"x/y\"\n", "agents.list.coder.modle: unknown key"),
        (
            "[agents.list.coder]\nmax_concurrent = 9\n",
            "agents.list.coder.max_concurrent: is 9 but runs share one gateway-wide limit",
        ),
        (
            "[agents.list.coder]\ntimeout_seconds = 0\n",
            "agents.list.coder.timeout_seconds: must be between 1 and 86400, got 0",
        ),
        ("[agents.list.coder]\nthinking = \"hgh\"\n", "agents.list.coder.thinking: \"hgh\" is not one of"),
        ("[agents.list.coder]\nmodel = \"nope/x\"\n", "agents.list.coder.model: provider \"nope\" is not defined"),
        ("[agents.list.Coder]\n", "agents.list.Coder: the agent id \"Coder\" must be"),
        ("[agents.defaults]\nname = \"x\"\n", "agents.defaults.name: belongs in an agent's own table"),
        ("[agents.list.coder.tools]\ndeny = [\"nope\"]\n", "agents.list.coder.tools.deny"),
        (
            "[agents.list.coder]\nsessions_visibility = \"some\"\n",
            "agents.list.coder.sessions_visibility: \"some\" is not one of \"agent\", \"all\"",
        ),
    ];
    for (text, expected) in cases {
        let error = refused(text);
        assert!(error.starts_with(expected), "{text}\n→ {error}");
    }
    let config = load("[agents.list.coder]\nsessions_visibility = \"all\"\n");
    assert_eq!(config.agents.list["coder"].sessions_visibility, SessionsVisibility::All);
}

#[test]
fn an_account_inherits_its_channel_but_not_its_token() {
    let config = load(
        "[channels.telegram]\nbot_token = \"1:main\"\nrequire_mention = false\nallow_from = [\"7\"]\n\
         [channels.telegram.groups.\"-100\"]\n\
         [channels.telegram.accounts.default]\n\
         [channels.telegram.accounts.work]\nbot_token = \"2:work\"\nallow_from = [\"8\"]\n",
    );
    let telegram = &config.channels.telegram;
    let ids: Vec<&str> = telegram.each_account().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["default", "work"]);
    let work = telegram.account("work").unwrap();
    assert_eq!(work.bot_token.as_ref().map(|token| token.expose()), Some("2:work"));
    assert_eq!(work.allow_from, ["8"], "a list is replaced, not merged");
    assert!(!work.require_mention && work.groups.contains_key("-100"), "the rest is inherited");
    let default = telegram.account("default").unwrap();
    assert_eq!(default.bot_token.as_ref().map(|token| token.expose()), Some("1:main"));
    assert!(telegram.account("other").is_none());
    let single = load("[channels.discord]\nbot_token = \"x\"\n");
    assert_eq!(single.channels.discord.each_account().len(), 1);
    assert!(single.channels.discord.account("default").is_some());
}

#[test]
fn only_account_default_takes_the_platform_variable() {
    let scratch = Scratch::new();
    let text = "[channels.telegram]\nenabled = true\n[channels.telegram.accounts.default]\n\
                [channels.telegram.accounts.work]\nbot_token = \"2:work\"\n";
    let config = scratch.load_text(text, &[("TELEGRAM_BOT_TOKEN", "1:env")]).unwrap().config;
    let token =
        |id: &str| config.channels.telegram.account(id).unwrap().bot_token.as_ref().unwrap().expose().to_owned();
    assert_eq!((token("default"), token("work")), ("1:env".to_owned(), "2:work".to_owned()));
    let vars = [("FERRY__CHANNELS__TELEGRAM__ACCOUNTS__WORK__BOT_TOKEN", "2:from-env")];
    let text = "[channels.telegram]\nenabled = true\n[channels.telegram.accounts.work]\n";
    let config = scratch.load_text(text, &vars).unwrap().config;
    let work = config.channels.telegram.account("work").unwrap();
    assert_eq!(work.bot_token.as_ref().map(|token| token.expose()), Some("2:from-env"), "an account's own variable");
    let missing = "[channels.telegram]\nenabled = true\n[channels.telegram.accounts.work]\n";
    assert_eq!(
        refused(missing),
        "channels.telegram.accounts.work.bot_token: missing; required when enabled = true (set it here or in TELEGRAM_BOT_TOKEN)"
    );
}

#[test]
fn a_bad_account_is_named_at_its_own_path() {
    let cases = [
        (
            "[channels.telegram.accounts.work]\ndm_polcy = \"open\"\n",
            "channels.telegram.accounts.work.dm_polcy: unknown key",
        ),
        (
            "[channels.slack.accounts.work]\nhistory_limit = 5000\n",
            "channels.slack.accounts.work.history_limit: must be between 0 and 1000",
        ),
        (
            "[channels.discord.accounts.work]\nstreaming = \"full\"\n",
            "channels.discord.accounts.work.streaming: \"full\" is not one of",
        ),
        ("[channels.discord.accounts.Work]\n", "channels.discord.accounts.Work: the account id \"Work\" must be"),
        (
            "[channels.telegram.accounts.a]\nbot_token = \"same\"\n[channels.telegram.accounts.b]\nbot_token = \"same\"\n",
            "channels.telegram.accounts.b: uses the same token as channels.telegram.accounts.a",
        ),
        (
            "[channels.telegram.accounts.a.accounts.b]\n",
            "channels.telegram.accounts.a.accounts: accounts cannot list accounts",
        ),
        ("[channels.telegram.accounts.a]\ntools = { deny = [\"nope\"] }\n", "channels.telegram.accounts.a.tools.deny"),
    ];
    for (text, expected) in cases {
        let error = refused(text);
        assert!(error.starts_with(expected), "{text}\n→ {error}");
    }
}

#[test]
fn one_accounts_own_tokens_and_redacted_ones_are_not_compared() {
    let same_inside = "[channels.slack]\nbot_token = \"same\"\napp_token = \"same\"\n";
    assert!(Scratch::new().load_text(same_inside, &[]).is_ok());
    let shown =
        "[channels.telegram.accounts.a]\nbot_token = \"***\"\n[channels.telegram.accounts.b]\nbot_token = \"***\"\n";
    assert!(Scratch::new().load_text(shown, &[]).is_ok(), "config show's rendering loads again");
}

#[test]
fn bindings_must_name_agents_and_accounts_that_exist() {
    let agents = "[agents.list.main]\n[agents.list.support]\n[channels.telegram.accounts.work]\nbot_token = \"t\"\n";
    let cases = [
        (
            "[[bindings]]\nagent = \"sales\"\nmatch = { channel = \"slack\" }\n",
            "bindings[0].agent: there is no agent \"sales\" (agents: main, support)",
        ),
        (
            "[[bindings]]\nagent = \"support\"\nmatch = { channel = \"telegram\", account = \"home\" }\n",
            "bindings[0].match.account: there is no account \"home\" (accounts: telegram.work)",
        ),
        (
            "[[bindings]]\nagent = \"support\"\nmatch = { channel = \"irc\" }\n",
            "bindings[0].match.channel: unknown channel \"irc\"",
        ),
        ("[[bindings]]\nagent = \"support\"\nmatch = {}\n", "bindings[0].match: matches nothing"),
        (
            "[[bindings]]\nagent = \"support\"\nmatch = { guild = \"1\", team = \"1\" }\n",
            "bindings[0].match.team: set guild or team, not both",
        ),
        (
            "[[bindings]]\nagent = \"support\"\nmatch = { chanel = \"slack\" }\n",
            "bindings[0].match.chanel: unknown key",
        ),
        (
            "[[bindings]]\nagent = \"support\"\nmatch = { peer = \"42\" }\n[[bindings]]\nagent = \"main\"\nmatch = { peer = \"42\" }\n",
            "bindings[1]: bindings[0] and bindings[1] both match peer = \"42\" with the same specificity",
        ),
    ];
    for (binding, expected) in cases {
        let error = refused(&format!("{agents}{binding}"));
        assert!(error.starts_with(expected), "{binding}\n→ {error}");
    }
    let fine = format!(
        "{agents}[[bindings]]\nagent = \"support\"\nmatch = {{ channel = \"telegram\", account = \"work\" }}\n\
         [[bindings]]\nagent = \"main\"\nmatch = {{ account = \"default\" }}\n"
    );
    assert_eq!(load(&fine).bindings.len(), 2);
}

#[test]
fn a_single_agent_config_keeps_its_agent_workspace_and_account() {
    let config = load(
        "[agents.defaults]\nmodel = \"openai/gpt-4o-mini\"\n[channels.telegram]\nenabled = true\nbot_token = \"1:x\"\n\
         [channels.slack]\nbot_token = \"xoxb\"\napp_token = \"xapp\"\n",
    );
    assert!(config.agents.list.is_empty() && config.bindings.is_empty());
    let agents = config.agents.resolved(Path::new("/state"));
    assert_eq!(agents.len(), 1);
    assert_eq!((agents[0].id.as_str(), agents[0].workspace.as_path()), ("main", Path::new("/state/workspace")));
    assert_eq!(agents[0].settings, config.agents.defaults);
    for channel in ["telegram", "discord", "slack", "webchat"] {
        assert_eq!(config.channels.account_ids(channel), ["default"], "{channel}");
    }
    let shown = crate::config::render_redacted(&config).unwrap();
    for new_key in ["[agents.list", "bindings", "accounts"] {
        assert!(!shown.contains(new_key), "{new_key} shown for a config without it:\n{shown}");
    }
}
