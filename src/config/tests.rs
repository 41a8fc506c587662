//! Loading end to end: files, lookup order, environment overrides, validation and errors.

use std::path::{Path, PathBuf};

use super::*;

mod agents;
mod cron;
#[cfg(all(feature = "mcp", feature = "web"))]
mod default_toml;
mod features;
mod memory;
// PostgreSQL's settings, which a build without the feature refuses whole (`features`).
#[cfg(feature = "postgres")]
mod state;

const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// A scratch directory with an optional `ferry.toml`, and an environment rooted in it.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn env(&self, vars: &[(&str, &str)]) -> Environment {
        let home = self.dir.path().join("home").display().to_string();
        let mut all = vec![("HOME".to_owned(), home)];
        all.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        Environment::new(all, self.dir.path())
    }

    fn load_text(&self, text: &str, vars: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
        let path = self.write("case.toml", text);
        load(Some(&path), &self.env(vars))
    }
}

fn invalid_key(error: ConfigError) -> String {
    match error {
        ConfigError::Invalid { key, .. } => key,
        other => panic!("expected an invalid-key error, got: {other}"),
    }
}

#[test]
fn no_file_anywhere_means_built_in_defaults() {
    let scratch = Scratch::new();
    let loaded = load(None, &scratch.env(&[])).unwrap();
    assert_eq!(loaded.source, ConfigSource::Defaults);
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn default_toml_loads_to_exactly_the_built_in_defaults() {
    let scratch = Scratch::new();
    let loaded = scratch.load_text(DEFAULT_TOML, &[]).unwrap();
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn nested_keys_are_overridden_from_the_environment() {
    let scratch = Scratch::new();
    let loaded = load(
        None,
        &scratch.env(&[
            ("FERRY__GATEWAY__PORT", "19999"),
            ("FERRY__CHANNELS__TELEGRAM__API_URL", "http://127.0.0.1:8081"),
            ("FERRY__CHANNELS__TELEGRAM__ALLOW_FROM", "111,222"),
            ("FERRY__AGENTS__DEFAULTS__BLOCK_STREAMING_CHUNK__MIN_CHARS", "100"),
            ("FERRY__MESSAGES__QUEUE__MODE", "steer-backlog"),
        ]),
    )
    .unwrap();
    let config = loaded.config;
    assert_eq!(config.gateway.port, 19999);
    assert_eq!(config.channels.telegram.api_url, "http://127.0.0.1:8081");
    assert_eq!(config.channels.telegram.allow_from, ["111", "222"]);
    assert_eq!(config.agents.defaults.block_streaming_chunk.min_chars, 100);
    assert_eq!(config.messages.queue.mode, QueueMode::SteerBacklog);
}

#[test]
fn the_environment_wins_over_the_file() {
    let scratch = Scratch::new();
    let loaded =
        scratch.load_text("[gateway]\nport = 1000\nbind = \"::1\"\n", &[("FERRY__GATEWAY__PORT", "2000")]).unwrap();
    assert_eq!(loaded.config.gateway.port, 2000);
    assert_eq!(loaded.config.gateway.bind, "::1");
}

#[test]
fn file_keys_keep_their_case() {
    let scratch = Scratch::new();
    let loaded = scratch.load_text("[channels.slack.channels.C0123ABCD]\nrequire_mention = false\n", &[]).unwrap();
    assert_eq!(loaded.config.channels.slack.channels["C0123ABCD"].require_mention, Some(false));
}

#[test]
fn lookup_order_is_flag_then_variable_then_working_directory_then_xdg() {
    let scratch = Scratch::new();
    let flag = scratch.write("flag.toml", "[gateway]\nport = 1\n");
    let variable = scratch.write("variable.toml", "[gateway]\nport = 2\n");
    let xdg = scratch.write("xdg/ferry/ferry.toml", "[gateway]\nport = 4\n");
    let xdg_home = xdg.parent().unwrap().parent().unwrap().display().to_string();
    let port = |explicit: Option<&Path>, vars: &[(&str, &str)]| {
        load(explicit, &scratch.env(vars)).unwrap().config.gateway.port
    };

    let variable_text = variable.display().to_string();
    let both = [("FERRY_CONFIG", variable_text.as_str()), ("XDG_CONFIG_HOME", xdg_home.as_str())];
    assert_eq!(port(None, &both[1..]), 4);
    scratch.write("ferry.toml", "[gateway]\nport = 3\n");
    assert_eq!(port(None, &both[1..]), 3);
    assert_eq!(port(None, &both), 2);
    assert_eq!(port(Some(&flag), &both), 1);
}

#[test]
fn a_named_file_must_exist() {
    let scratch = Scratch::new();
    let error = load(Some(Path::new("missing.toml")), &scratch.env(&[])).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    assert!(error.to_string().contains("missing.toml"), "{error}");

    let error = load(None, &scratch.env(&[("FERRY_CONFIG", "/nowhere/ferry.toml")])).unwrap_err();
    assert!(error.to_string().contains("/nowhere/ferry.toml"), "{error}");
}

#[test]
fn platform_token_variables_fill_missing_tokens_but_not_set_ones() {
    let scratch = Scratch::new();
    let vars = [("TELEGRAM_BOT_TOKEN", "from-env"), ("SLACK_BOT_TOKEN", "xoxb-env"), ("SLACK_APP_TOKEN", "xapp-env")];
    let loaded = scratch
        .load_text(
            "[channels.telegram]\nenabled = true\n[channels.slack]\nenabled = true\nbot_token = \"xoxb-file\"\n",
            &vars,
        )
        .unwrap();
    let channels = &loaded.config.channels;
    assert_eq!(channels.telegram.bot_token.as_ref().map(Secret::expose), Some("from-env"));
    assert_eq!(channels.slack.bot_token.as_ref().map(Secret::expose), Some("xoxb-file"));
    assert_eq!(channels.slack.app_token.as_ref().map(Secret::expose), Some("xapp-env"));
}

#[cfg(feature = "web")]
#[test]
fn web_search_needs_what_its_provider_needs_and_brave_reads_its_key_from_the_environment() {
    let scratch = Scratch::new();
    let brave = "[tools.web.search]\nprovider = \"brave\"\n";
    let error = scratch.load_text(brave, &[]).unwrap_err();
    assert!(error.to_string().contains("BRAVE_API_KEY"), "{error}");
    assert_eq!(invalid_key(error), "tools.web.search.api_key");
    let loaded = scratch.load_text(brave, &[("BRAVE_API_KEY", "bsa-env")]).unwrap();
    let search = loaded.config.tools.web.search.as_ref().unwrap();
    assert_eq!(search.api_key.as_ref().map(Secret::expose), Some("bsa-env"));
    let with_key = format!("{brave}api_key = \"bsa-file\"\n");
    let loaded = scratch.load_text(&with_key, &[("BRAVE_API_KEY", "bsa-env")]).unwrap();
    assert_eq!(loaded.config.tools.web.search.unwrap().api_key.as_ref().map(Secret::expose), Some("bsa-file"));

    let searxng = "[tools.web.search]\nprovider = \"searxng\"\n";
    assert_eq!(invalid_key(scratch.load_text(searxng, &[("BRAVE_API_KEY", "k")]).unwrap_err()), "tools.web.search.url");
    let bad_url = format!("{searxng}url = \"ftp://x\"\n");
    assert_eq!(invalid_key(scratch.load_text(&bad_url, &[]).unwrap_err()), "tools.web.search.url");
    let good = format!("{searxng}url = \"http://127.0.0.1:8888\"\n");
    assert!(scratch.load_text(&good, &[]).unwrap().config.tools.web.search.unwrap().api_key.is_none());
    let no_provider = "[tools.web.search]\nurl = \"http://127.0.0.1:8888\"\n";
    assert_eq!(invalid_key(scratch.load_text(no_provider, &[]).unwrap_err()), "tools.web.search.provider");
    let error = scratch.load_text("[tools.web.search]\nprovider = \"google\"\n", &[]).unwrap_err();
    assert!(error.to_string().contains("searxng") && error.to_string().contains("brave"), "{error}");
    for (text, key) in [
        ("[tools.web]\ntimeout_seconds = 0", "tools.web.timeout_seconds"),
        ("[tools.web]\nmax_bytes = 10", "tools.web.max_bytes"),
        ("[tools.web]\nmax_redirects = 50", "tools.web.max_redirects"),
        ("[tools.web]\nallow_privat = true", "tools.web.allow_privat"),
    ] {
        assert_eq!(invalid_key(scratch.load_text(text, &[]).unwrap_err()), key, "{text}");
    }
}

#[test]
fn each_broken_rule_names_its_key() {
    let cases = [
        ("bogus = 1", "bogus"),
        ("[gateway]\nprot = 1", "gateway.prot"),
        ("[gateway]\nport = \"abc\"", "gateway.port"),
        ("[gateway]\nport = 70000", "gateway.port"),
        ("[gateway]\nport = 0", "gateway.port"),
        ("[gateway]\nbind = \"not an ip\"", "gateway.bind"),
        ("[gateway]\nbind = \"0.0.0.0\"", "gateway.auth_token"),
        ("[models.providers.x]\nkind = \"nope\"", "models.providers.x.kind"),
        ("[models.providers.x]\nkind = \"openai\"\nbase_url = \"ftp://x\"", "models.providers.x.base_url"),
        ("[models.providers.x]\nkind = \"openai\"\ncontext_window = 0", "models.providers.x.context_window"),
        ("[agents.defaults]\nmodel = \"gpt-4o\"", "agents.defaults.model"),
        ("[agents.defaults]\nmodel = \"nowhere/gpt-4o\"", "agents.defaults.model"),
        ("[agents.defaults]\ntimeout_seconds = 0", "agents.defaults.timeout_seconds"),
        ("[agents.defaults]\nmax_concurrent = 0", "agents.defaults.max_concurrent"),
        ("[agents.defaults]\nmax_tool_rounds = 0", "agents.defaults.max_tool_rounds"),
        ("[agents.defaults]\nmodel_idle_timeout_seconds = 0", "agents.defaults.model_idle_timeout_seconds"),
        (
            "[agents.defaults.block_streaming_chunk]\nmin_chars = 900\nmax_chars = 800",
            "agents.defaults.block_streaming_chunk.max_chars",
        ),
        ("[agents.defaults]\nhuman_delay = { min_ms = 9, max_ms = 1 }", "agents.defaults.human_delay.max_ms"),
        ("[agents.defaults]\nhuman_delay = \"slow\"", "agents.defaults.human_delay"),
        ("[messages.queue]\nmode = \"batch\"", "messages.queue.mode"),
        ("[messages.queue]\ncap = 0", "messages.queue.cap"),
        ("[messages.queue.by_channel]\nirc = \"steer\"", "messages.queue.by_channel.irc"),
        ("[session]\ndm_scope = \"per-room\"", "session.dm_scope"),
        ("[session.reset]\nat_hour = 24", "session.reset.at_hour"),
        ("[session]\noperators = [\"telegram:1\", \"12345\"]", "session.operators[1]"),
        ("[session]\noperators = [\"irc:12345\"]", "session.operators[0]"),
        ("[hooks]\ntimeout_ms = 0", "hooks.timeout_ms"),
        ("[tools]\nmax_result_chars = 10", "tools.max_result_chars"),
        ("[tools]\nmax_results = 10", "tools.max_results"),
        ("[tools]\nprofile = \"admin\"", "tools.profile"),
        ("[tools]\ndeny = [\"exce\"]", "tools.deny"),
        ("[channels.slack]\ntools = { allow = [\"group:shell\"] }", "channels.slack.tools.allow"),
        (
            "[channels.telegram.groups.\"-100\"]\ntools = { deny = [\"rm\"] }",
            "channels.telegram.groups.-100.tools.deny",
        ),
        ("[channels.discord.guilds.G1]\ntools = { allow = [\"shell\"] }", "channels.discord.guilds.G1.tools.allow"),
        ("[hooks.internal.\"command:new\"]\npath = \"/nowhere/hook.py\"", "hooks.internal.\"command:new\".path"),
        ("[hooks.internal.\"command:frobnicate\"]\npath = \"/bin/sh\"", "hooks.internal.\"command:frobnicate\""),
        ("[session.reset]\nmode = \"idle\"", "session.reset.idle_minutes"),
        ("[channels.telegram]\ndm_policy = \"allowlist\"", "channels.telegram.allow_from"),
        ("[channels.discord]\ndm_policy = \"open\"\nallow_from = [\"1\"]", "channels.discord.allow_from"),
        ("[channels.telegram]\nenabled = true", "channels.telegram.bot_token"),
        ("[channels.telegram]\nenabled = true\nbot_token = \"  \"", "channels.telegram.bot_token"),
        (
            "[channels.telegram]\nenabled = true\nbot_token = \"t\"\nmode = \"webhook\"",
            "channels.telegram.webhook_secret",
        ),
        ("[channels.discord]\nenabled = true", "channels.discord.bot_token"),
        ("[channels.slack]\nenabled = true\nbot_token = \"b\"", "channels.slack.app_token"),
        ("[channels.slack]\nenabled = true\nbot_token = \"b\"\nmode = \"http\"", "channels.slack.signing_secret"),
        ("[channels.slack]\napi_url = \"not a url\"", "channels.slack.api_url"),
        ("[channels.discord]\ngateway_url = \"http://x\"", "channels.discord.gateway_url"),
        ("[channels.telegram]\ntext_chunk_limit = 0", "channels.telegram.text_chunk_limit"),
        (
            "[channels.telegram.groups.\"-100\"]\nrequire_mentions = true",
            "channels.telegram.groups.-100.require_mentions",
        ),
        ("[channels.webchat]\nenabled = \"maybe\"", "channels.webchat.enabled"),
        ("[channels.telegram]\nmention_patterns = [\"(unclosed\"]", "channels.telegram.mention_patterns[0]"),
        ("[channels.slack]\nmention_patterns = [\"^ok$\", \"a{2,1}\"]", "channels.slack.mention_patterns[1]"),
        ("[channels.discord]\nmention_patterns = \"ferry\"", "channels.discord.mention_patterns"),
        ("[channels.discord]\nallow_bots = \"maybe\"", "channels.discord.allow_bots"),
        ("[channels.telegram]\nhistory_limit = -1", "channels.telegram.history_limit"),
        ("[channels.webchat]\nallow_bots = true", "channels.webchat.allow_bots"),
    ];
    let scratch = Scratch::new();
    for (text, expected_key) in cases {
        let error = scratch.load_text(text, &[]).expect_err(text);
        let message = error.to_string();
        assert!(!message.contains('\n'), "error for {text:?} spans lines: {message}");
        assert!(message.contains("case.toml"), "error for {text:?} does not name the file: {message}");
        assert_eq!(invalid_key(error), expected_key, "for {text:?}: {message}");
    }
}

#[test]
fn valid_combinations_pass() {
    let cases = [
        "[gateway]\nbind = \"0.0.0.0\"\nauth_token = \"t\"",
        "[gateway]\nbind = \"localhost\"",
        "[agents.defaults]\nmodel = \"echo/echo\"",
        "[agents.defaults]\nmodel = \"local/llama3\"\n[models.providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"",
        "[channels.telegram]\ndm_policy = \"open\"\nallow_from = [\"*\"]",
        "[channels.discord]\ndm_policy = \"allowlist\"\nallow_from = [\"42\"]",
        "[channels.slack]\nenabled = true\nbot_token = \"b\"\nsigning_secret = \"s\"\nmode = \"http\"",
        "[agents.defaults]\nhuman_delay = { min_ms = 1, max_ms = 1 }",
        "[session.reset]\nmode = \"idle\"\nidle_minutes = 30",
        "[channels.telegram]\nmention_patterns = [\"^(hey )?ferry\\\\b\", \"@?assistant\"]\nallow_bots = true",
        "[channels.discord]\nhistory_limit = 0",
    ];
    let scratch = Scratch::new();
    for text in cases {
        scratch.load_text(text, &[]).unwrap_or_else(|error| panic!("{text:?} was refused: {error}"));
    }
}

#[test]
fn new_routing_keys_default_to_ignoring_bots_no_patterns_and_fifty_messages_of_history() {
    let config = Config::default();
    for (allow_bots, patterns, limit) in [
        (
            config.channels.telegram.allow_bots,
            &config.channels.telegram.mention_patterns,
            config.channels.telegram.history_limit,
        ),
        (
            config.channels.discord.allow_bots,
            &config.channels.discord.mention_patterns,
            config.channels.discord.history_limit,
        ),
        (
            config.channels.slack.allow_bots,
            &config.channels.slack.mention_patterns,
            config.channels.slack.history_limit,
        ),
    ] {
        assert!(!allow_bots);
        assert!(patterns.is_empty());
        assert_eq!(limit, 50);
    }
}

#[test]
fn mention_patterns_compile_case_insensitively() {
    let regex = compile_mention_pattern("^hey ferry").unwrap();
    assert!(regex.is_match("HEY Ferry, what's up?"));
    assert!(!regex.is_match("well, hey ferry"));
}

#[test]
fn errors_from_the_environment_name_the_variable() {
    let scratch = Scratch::new();
    let error = load(None, &scratch.env(&[("FERRY__GATEWAY__PORT", "abc")])).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("environment variable FERRY__GATEWAY__PORT"), "{message}");
    assert!(message.contains("gateway.port"), "{message}");

    let error = load(None, &scratch.env(&[("FERRY__CHANNELS__SLACK__BOGUS", "1")])).unwrap_err();
    assert!(error.to_string().contains("FERRY__CHANNELS__SLACK__BOGUS"), "{error}");
}

#[test]
fn syntax_errors_point_at_line_and_column() {
    let scratch = Scratch::new();
    let error = scratch.load_text("[gateway]\nport = = 3\n", &[]).unwrap_err();
    match &error {
        ConfigError::Syntax { line, column, .. } => assert_eq!((*line, *column), (2, 8), "{error}"),
        other => panic!("expected a syntax error, got {other}"),
    }
    assert!(!error.to_string().contains('\n'), "{error}");
}

#[test]
fn rendering_and_debug_output_never_show_secrets() {
    let scratch = Scratch::new();
    let loaded = scratch
        .load_text(
            "[gateway]\nauth_token = \"gw-secret\"\n[models.providers.p]\nkind = \"openai\"\napi_key = \"sk-secret\"\n\
             [channels.slack]\nbot_token = \"xoxb-secret\"\n",
            &[("TELEGRAM_BOT_TOKEN", "tg-secret")],
        )
        .unwrap();
    let rendered = render_redacted(&loaded.config).unwrap();
    let debugged = format!("{:?}", loaded.config);
    for output in [&rendered, &debugged] {
        assert!(!output.contains("secret\""), "a secret leaked: {output}");
        assert!(!output.contains("tg-secret") && !output.contains("sk-secret"), "a secret leaked: {output}");
    }
    assert!(rendered.contains("bot_token = \"***\""), "{rendered}");
    assert!(rendered.contains("api_key = \"***\""), "{rendered}");
}

/// The whole line `ferry config check` prints for `text` in `case.toml`, without the path
/// of the scratch directory.
fn error_text(scratch: &Scratch, text: &str) -> String {
    let error = scratch.load_text(text, &[]).expect_err(text).to_string();
    error.replace(&scratch.dir.path().display().to_string(), "DIR")
}

#[test]
fn an_unknown_provider_kind_lists_the_valid_kinds() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[models.providers.x]\nkind = \"gemini\"\n"),
        r#"invalid config (DIR/case.toml): models.providers.x.kind: "gemini" is not one of "openai", "anthropic", "echo""#
    );
}

#[test]
fn a_queue_mode_typo_lists_the_modes_and_suggests_the_nearest() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[messages.queue]\nmode = \"colect\"\n"),
        r#"invalid config (DIR/case.toml): messages.queue.mode: "colect" is not one of "collect", "steer", "followup", "steer-backlog", "interrupt"; did you mean "collect"?"#
    );
}

#[test]
fn every_enum_key_lists_its_values_from_the_file_and_the_environment() {
    let scratch = Scratch::new();
    let cases = [
        ("[messages.queue.by_channel]\ntelegram = \"stere\"", "messages.queue.by_channel.telegram", "steer"),
        (
            "[agents.defaults]\nblock_streaming_break = \"text-end\"",
            "agents.defaults.block_streaming_break",
            "text_end",
        ),
        (
            "[agents.defaults.block_streaming_chunk]\nbreak_preference = \"paragrah\"",
            "agents.defaults.block_streaming_chunk.break_preference",
            "paragraph",
        ),
        ("[messages]\nreply_to_mode = \"First\"", "messages.reply_to_mode", "first"),
        ("[messages.queue]\ndrop = \"olds\"", "messages.queue.drop", "old"),
        ("[session]\ndm_scope = \"per-chanel-peer\"", "session.dm_scope", "per-channel-peer"),
        ("[session.reset]\nmode = \"dayly\"", "session.reset.mode", "daily"),
        ("[channels.telegram]\nmode = \"poling\"", "channels.telegram.mode", "polling"),
        ("[channels.discord]\ndm_policy = \"pairng\"", "channels.discord.dm_policy", "pairing"),
        ("[channels.slack]\ngroup_policy = \"opne\"", "channels.slack.group_policy", "open"),
        ("[channels.slack]\nstreaming = \"partal\"", "channels.slack.streaming", "partial"),
        ("[channels.slack]\nmode = \"htp\"", "channels.slack.mode", "http"),
    ];
    for (text, key, nearest) in cases {
        let message = scratch.load_text(text, &[]).expect_err(text).to_string();
        assert!(message.contains(&format!("{key}: ")), "{message}");
        assert!(message.contains(" is not one of \""), "{message}");
        assert!(message.ends_with(&format!("; did you mean {nearest:?}?")), "{message}");
    }

    let error = load(None, &scratch.env(&[("FERRY__SESSION__RESET__MODE", "weekly")])).unwrap_err();
    assert_eq!(
        error.to_string(),
        r#"invalid config (environment variable FERRY__SESSION__RESET__MODE): session.reset.mode: "weekly" is not one of "daily", "idle", "manual""#
    );
}

#[test]
fn an_enum_given_a_number_lists_its_values() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[messages.queue]\nmode = 3\n"),
        r#"invalid config (DIR/case.toml): messages.queue.mode: expected one of "collect", "steer", "followup", "steer-backlog", "interrupt""#
    );
}

#[test]
fn an_unknown_key_lists_the_keys_of_its_table_and_suggests_the_nearest() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[gateway]\nprot = 1\n"),
        r#"invalid config (DIR/case.toml): gateway.prot: unknown key, expected one of "bind", "port", "auth_token"; did you mean "port"?"#
    );
}

#[test]
fn a_duplicate_key_is_named_with_its_line_and_first_definition() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[gateway]\nport = 18789\nbind = \"127.0.0.1\"\nport = 18790\n"),
        "DIR/case.toml:4:1: invalid TOML: duplicate key gateway.port (first set on line 2)"
    );
    assert_eq!(
        error_text(&scratch, "[gateway]\nport = 1\n\n[gateway]\nbind = \"::1\"\n"),
        "DIR/case.toml:4:2: invalid TOML: table [gateway] is defined twice (first on line 1)"
    );
}

#[test]
fn a_port_out_of_range_says_what_a_port_is() {
    let scratch = Scratch::new();
    for (port, shown) in [("70000", "70000"), ("0", "0"), ("-1", "-1")] {
        assert_eq!(
            error_text(&scratch, &format!("[gateway]\nport = {port}\n")),
            format!("invalid config (DIR/case.toml): gateway.port: {shown} is not a port (1-65535)")
        );
    }
    let error = load(None, &scratch.env(&[("FERRY__GATEWAY__PORT", "70000")])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config (environment variable FERRY__GATEWAY__PORT): gateway.port: 70000 is not a port (1-65535)"
    );
}

#[test]
fn a_zero_timeout_says_the_range() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[agents.defaults]\ntimeout_seconds = 0\n"),
        "invalid config (DIR/case.toml): agents.defaults.timeout_seconds: must be between 1 and 86400, got 0"
    );
}

#[test]
fn a_missing_required_key_is_named_by_its_full_path() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[models.providers.x]\nbase_url = \"http://127.0.0.1:1\"\n"),
        r#"invalid config (DIR/case.toml): models.providers.x.kind: missing, and required: set it to one of "openai", "anthropic", "echo""#
    );
    assert_eq!(
        error_text(&scratch, "[hooks.internal.\"command:new\"]\nargs = []\n"),
        r#"invalid config (DIR/case.toml): hooks.internal.command:new.path: missing, and required"#
    );
}

#[test]
fn an_integer_past_64_bits_is_too_large_for_toml() {
    let scratch = Scratch::new();
    assert_eq!(
        error_text(&scratch, "[agents.defaults]\ntimeout_seconds = 99999999999999999999\n"),
        "DIR/case.toml:2:19: invalid TOML: 99999999999999999999 is too large for a TOML integer (at most 9223372036854775807)"
    );
}

#[test]
fn numbers_too_big_or_negative_for_their_type_get_the_key_range_too() {
    let scratch = Scratch::new();
    let cases = [
        ("[session.reset]\nat_hour = 300", "session.reset.at_hour: 300 is not an hour of the day (0-23)"),
        ("[session.reset]\nat_hour = 24", "session.reset.at_hour: 24 is not an hour of the day (0-23)"),
        (
            "[channels.telegram]\nhistory_limit = -1",
            "channels.telegram.history_limit: must be between 0 and 1000, got -1",
        ),
        ("[messages.queue]\ncap = 5000000000000", "messages.queue.cap: must be between 1 and 1000, got 5000000000000"),
        (
            "[models.providers.p]\nkind = \"echo\"\ncontext_window = 5000000000",
            "models.providers.p.context_window: must be between 1 and 10000000, got 5000000000",
        ),
        (
            "[session.reset]\nidle_minutes = 1000000000000000",
            "session.reset.idle_minutes: must be between 0 and 525600, got 1000000000000000",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error_text(&scratch, text), format!("invalid config (DIR/case.toml): {expected}"), "{text}");
    }
}

#[test]
fn a_provider_no_model_uses_is_a_warning_not_an_error() {
    let scratch = Scratch::new();
    let loaded = scratch
        .load_text(
            "[agents.defaults]\nmodel = \"local/llama3\"\n\n[models.providers.local]\nkind = \"openai\"\n\
             base_url = \"http://127.0.0.1:11434/v1\"\n\n[models.providers.spare]\nkind = \"anthropic\"\n",
            &[],
        )
        .unwrap();
    let warnings: Vec<String> = loaded
        .warnings
        .iter()
        .map(|warning| warning.to_string().replace(&scratch.dir.path().display().to_string(), "DIR"))
        .collect();
    assert_eq!(
        warnings,
        [
            r#"DIR/case.toml: models.providers.spare: defined but no model uses it (agents.defaults.model is "local/llama3")"#
        ]
    );

    let loaded = scratch.load_text("[models.providers.spare]\nkind = \"echo\"\n", &[]).unwrap();
    assert_eq!(loaded.warnings[0].reason, "defined but no model uses it (agents.defaults.model is not set)");
    let loaded = load(None, &scratch.env(&[("FERRY__MODELS__PROVIDERS__SPARE__KIND", "echo")])).unwrap();
    assert_eq!(loaded.warnings[0].origin, "environment variable FERRY__MODELS__PROVIDERS__SPARE__KIND");

    assert!(scratch.load_text("", &[]).unwrap().warnings.is_empty());
}

#[test]
fn the_default_locations_are_the_working_directory_then_xdg() {
    let scratch = Scratch::new();
    let home = scratch.dir.path().join("home");
    assert_eq!(
        default_locations(&scratch.env(&[])),
        [scratch.dir.path().join("ferry.toml"), home.join(".config/ferry/ferry.toml")]
    );
    assert_eq!(env_var_for("gateway.port"), "FERRY__GATEWAY__PORT");
}

#[test]
fn adapter_findings_are_attributed_like_load_errors() {
    let scratch = Scratch::new();
    let loaded = scratch.load_text("[channels.telegram]\ntext_chunk_limit = 9000\n", &[]).unwrap();
    let error = loaded.error_at(Violation::new("channels.telegram.text_chunk_limit", "over the limit"));
    assert!(error.to_string().contains("case.toml"), "{error}");
}

#[test]
fn vision_is_a_switch_or_a_list_of_models() {
    let scratch = Scratch::new();
    let table = "[models.providers.p]\nkind = \"openai\"\n";
    let loaded = scratch.load_text(&format!("{table}vision = [\"gpt-4o\", \"claude-*\"]\n"), &[]).unwrap();
    let vision = &loaded.config.models.providers["p"].vision;
    assert!(vision.covers("gpt-4o") && vision.covers("claude-sonnet-4-5") && !vision.covers("llama3"));
    let loaded = scratch.load_text(&format!("{table}vision = true\n"), &[]).unwrap();
    assert_eq!(loaded.config.models.providers["p"].vision, Vision::All(true));
    let refused = scratch.load_text(&format!("{table}vision = \"yes\"\n"), &[]).expect_err("neither");
    let message = refused.to_string();
    assert!(message.contains("true, false, or a list of model names"), "{message}");
    assert_eq!(invalid_key(refused), "models.providers.p.vision");
}
