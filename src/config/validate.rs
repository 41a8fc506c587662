//! Rules a configuration must satisfy beyond its types: the combinations that would
//! otherwise fail later, at run time, in front of a user.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use super::agents_schema::{ID_RULE, MAIN_AGENT, valid_id};
use super::error::{Violation, one_line};
use super::human_delay::HumanDelay;
use super::model_choice::ModelSetting;
use super::schema::{
    AgentSettings, Config, DEFAULT_PROFILE, DiscordConfig, DmPolicy, GatewayConfig, HooksConfig, ModelsConfig,
    ProviderConfig, QueueConfig, ResetMode, SessionConfig, SlackConfig, SlackMode, TelegramConfig, TelegramMode,
    ToolLists, WebSearchProvider, WebToolsConfig,
};
use super::{Accounts, BindingMatch, Secret, ranges};

/// Channel names the core knows; `messages.queue.by_channel` keys must be one of these.
pub const CHANNEL_NAMES: [&str; 4] = ["telegram", "discord", "slack", "webchat"];

/// Provider names that need no `[models.providers.NAME]` table: `echo` is built in, and
/// `openai` / `anthropic` are configured from `OPENAI_*` / `ANTHROPIC_*` variables.
pub const IMPLICIT_PROVIDERS: [&str; 3] = ["echo", "openai", "anthropic"];

/// Checks every rule and reports the first broken one: first every number against its
/// range ([`ranges::RANGES`]), then the rules below.
pub fn validate(config: &Config) -> Result<(), Violation> {
    ranges::check(config)?;
    super::features::validate(config)?;
    gateway(&config.gateway)?;
    models(&config.models)?;
    agent_settings("agents.defaults", &config.agents.defaults, &config.models)?;
    for (id, agent) in &config.agents.list {
        agent_settings(&format!("agents.list.{id}"), agent, &config.models)?;
    }
    let defaults = &config.agents.defaults;
    super::cron_schema::validate_agent("agents.defaults", defaults.user_timezone.as_deref(), &defaults.heartbeat)?;
    for (id, agent) in &config.agents.list {
        let prefix = format!("agents.list.{id}");
        super::cron_schema::validate_agent(&prefix, agent.user_timezone.as_deref(), &agent.heartbeat)?;
    }

    agents(config)?;
    queue(&config.messages.queue)?;
    session(&config.session)?;
    hooks(&config.hooks)?;
    tool_lists(config)?;
    web_tools(&config.tools.web)?;
    super::mcp_schema::validate(&config.mcp)?;
    super::media_schema::validate(&config.media)?;
    super::memory_schema::validate(&config.memory)?;
    super::state_schema::validate(&config.state)?;
    channels(config)?;
    bindings(config)
}

/// Each binding names an agent and accounts that exist, and no two are ambiguous.
fn bindings(config: &Config) -> Result<(), Violation> {
    let agents = &config.agents;
    for (index, binding) in config.bindings.iter().enumerate() {
        let key = format!("bindings[{index}]");
        if !agents.has(&binding.agent) {
            return Err(Violation::new(
                format!("{key}.agent"),
                format!("there is no agent {:?} (agents: {})", binding.agent, agents.ids().join(", ")),
            ));
        }
        let matches = &binding.matches;
        if *matches == BindingMatch::default() {
            return Err(Violation::new(
                format!("{key}.match"),
                "matches nothing: give channel, account, peer, guild, team, thread or topic (the agent for                  everything else is the one with default = true)",
            ));
        }
        for (one, other, set) in [
            ("guild", "team", matches.guild.is_some() && matches.team.is_some()),
            ("thread", "topic", matches.thread.is_some() && matches.topic.is_some()),
        ] {
            if set {
                return Err(Violation::new(format!("{key}.match.{other}"), format!("set {one} or {other}, not both")));
            }
        }
        if let Some(channel) = &matches.channel
            && !CHANNEL_NAMES.contains(&channel.as_str())
        {
            return Err(Violation::new(
                format!("{key}.match.channel"),
                format!("unknown channel {channel:?} (expected one of {})", CHANNEL_NAMES.join(", ")),
            ));
        }
        if let Some(account) = &matches.account {
            let channels: Vec<&str> =
                matches.channel.as_deref().map_or(CHANNEL_NAMES.to_vec(), |channel| vec![channel]);
            if !channels.iter().any(|channel| config.channels.account_ids(channel).contains(&account.as_str())) {
                let known: Vec<String> = channels
                    .iter()
                    .flat_map(|channel| {
                        config.channels.account_ids(channel).into_iter().map(move |id| format!("{channel}.{id}"))
                    })
                    .collect();
                return Err(Violation::new(
                    format!("{key}.match.account"),
                    format!("there is no account {account:?} (accounts: {})", known.join(", ")),
                ));
            }
        }
    }
    super::binding_keys::check_bindings(&config.bindings)
        .map(drop)
        .map_err(|conflict| Violation::new(format!("bindings[{}]", conflict.second), conflict.to_string()))
}

/// `[tools.web.search]` names a provider `web_search` can reach: SearXNG needs its URL, Brave
/// its key (here or in `BRAVE_API_KEY`, already applied by loading).
fn web_tools(web: &WebToolsConfig) -> Result<(), Violation> {
    let Some(search) = &web.search else { return Ok(()) };
    const KEY: &str = "tools.web.search";
    if let Some(url) = &search.url {
        http_url(&format!("{KEY}.url"), url)?;
    }
    match search.provider {
        WebSearchProvider::Searxng if search.url.is_none() => Err(Violation::new(
            format!("{KEY}.url"),
            "missing; required when provider = \"searxng\" (the instance's base URL, e.g. \"http://127.0.0.1:8888\")",
        )),
        WebSearchProvider::Brave if missing(&search.api_key) => Err(Violation::new(
            format!("{KEY}.api_key"),
            "missing; required when provider = \"brave\" (set it here or in BRAVE_API_KEY)",
        )),
        _ => Ok(()),
    }
}

/// Every `allow` / `deny` list names tools or groups of tools that exist.
fn tool_lists(config: &Config) -> Result<(), Violation> {
    let channels = &config.channels;
    let global = config.tools.lists();
    let mut owned: Vec<(String, ToolLists)> = vec![(String::new(), global)];
    for (id, agent) in &config.agents.list {
        if let Some(tools) = &agent.tools {
            owned.push((format!("agents.list.{id}."), tools.lists()));
        }
    }
    let mut levels: Vec<(String, &ToolLists)> = owned.iter().map(|(prefix, lists)| (prefix.clone(), lists)).collect();
    levels.push(("channels.webchat.".to_owned(), &channels.webchat.tools));
    for (table, telegram) in accounts_of("telegram", &channels.telegram) {
        levels.push((format!("{table}."), &telegram.tools));
        levels.extend(telegram.groups.iter().map(|(id, group)| (format!("{table}.groups.{id}."), &group.tools)));
    }
    for (table, discord) in accounts_of("discord", &channels.discord) {
        levels.push((format!("{table}."), &discord.tools));
        levels.extend(discord.guilds.iter().map(|(id, guild)| (format!("{table}.guilds.{id}."), &guild.tools)));
    }
    for (table, slack) in accounts_of("slack", &channels.slack) {
        levels.push((format!("{table}."), &slack.tools));
        levels.extend(slack.channels.iter().map(|(id, channel)| (format!("{table}.channels.{id}."), &channel.tools)));
    }
    let servers: Vec<&str> = config.mcp.servers.keys().map(String::as_str).collect();
    for (prefix, lists) in levels {
        lists.check(&servers).map_err(|(list, why)| Violation::new(format!("{prefix}tools.{list}"), why))?;
    }
    Ok(())
}

/// Settings that are valid but look like mistakes. Reported, never refused.
pub fn warnings(config: &Config) -> Vec<Violation> {
    let used = providers_in_use(config);
    let model = match &config.agents.defaults.model {
        Some(model) => format!("agents.defaults.model is {:?}", model.chain().collect::<Vec<_>>().join(", ")),
        None => "agents.defaults.model is not set".to_owned(),
    };
    let mut found: Vec<Violation> = config
        .models
        .providers
        .keys()
        .filter(|name| !used.contains(name.as_str()))
        .map(|name| {
            Violation::new(format!("models.providers.{name}"), format!("defined but no model uses it ({model})"))
        })
        .collect();
    if config.memory.mirror_files && config.tools.sandbox.scope == super::schema::SandboxScope::Agent {
        found.push(Violation::new(
            "memory.mirror_files",
            "with tools.sandbox.scope = \"agent\" every session's file tools and commands work in the agent's \
             workspace, so every chat can read and edit the mirrored memory; mirror only a scope they may all see, \
             or keep scope = \"session\"",
        ));
    }
    found.extend(super::features::warnings(config));
    found
}

/// The provider names that model settings refer to (`PROVIDER/MODEL`). A new setting that
/// names a model (fallbacks, per-agent models) belongs here, or its provider is reported as
/// unused.
fn providers_in_use(config: &Config) -> BTreeSet<&str> {
    let agents = std::iter::once(&config.agents.defaults).chain(config.agents.list.values());
    agents
        .flat_map(|agent| {
            agent.model.iter().flat_map(ModelSetting::chain).chain(agent.models.iter().map(String::as_str))
        })
        .filter_map(|model| model.split_once('/').map(|(provider, _)| provider))
        .collect()
}

/// Events an internal hook may be attached to (SPEC §9).
pub const INTERNAL_HOOK_EVENTS: [&str; 6] =
    ["agent:bootstrap", "command:new", "command:reset", "command:stop", "message:received", "message:sent"];

fn hooks(hooks: &HooksConfig) -> Result<(), Violation> {
    for (event, hook) in &hooks.internal {
        let key = format!("hooks.internal.\"{event}\"");
        if !INTERNAL_HOOK_EVENTS.contains(&event.as_str()) {
            return Err(Violation::new(
                key,
                format!("unknown event (expected one of {})", INTERNAL_HOOK_EVENTS.join(", ")),
            ));
        }
        if !hook.path.is_file() {
            return Err(Violation::new(
                format!("{key}.path"),
                format!("{} does not exist or is not a file", hook.path.display()),
            ));
        }
    }
    Ok(())
}

fn gateway(gateway: &GatewayConfig) -> Result<(), Violation> {
    let loopback = match gateway.bind.as_str() {
        "localhost" => true,
        bind => match bind.parse::<IpAddr>() {
            Ok(address) => address.is_loopback(),
            Err(_) => {
                return Err(Violation::new(
                    "gateway.bind",
                    format!("{bind:?} is not an IP address (use e.g. \"127.0.0.1\", \"0.0.0.0\" or \"localhost\")"),
                ));
            }
        },
    };
    if !loopback && missing(&gateway.auth_token) {
        return Err(Violation::new(
            "gateway.auth_token",
            format!("is required when gateway.bind ({}) is not a loopback address", gateway.bind),
        ));
    }
    Ok(())
}

fn models(models: &ModelsConfig) -> Result<(), Violation> {
    for (name, provider) in &models.providers {
        let key = format!("models.providers.{name}");
        if name.is_empty() || name.contains('/') {
            return Err(Violation::new(key, "a provider name must be non-empty and contain no '/'"));
        }
        if let Some(base_url) = &provider.base_url {
            http_url(&format!("{key}.base_url"), base_url)?;
        }
        profiles(&key, provider)?;
    }
    Ok(())
}

/// Each profile names one key; a bare `api_key` is the profile `default`, so it cannot be
/// given twice.
fn profiles(key: &str, provider: &ProviderConfig) -> Result<(), Violation> {
    if provider.api_key.is_some() && provider.profiles.contains_key(DEFAULT_PROFILE) {
        return Err(Violation::new(
            format!("{key}.api_key"),
            format!(
                "is the profile \"{DEFAULT_PROFILE}\", which [{key}.profiles.{DEFAULT_PROFILE}] defines too; keep one"
            ),
        ));
    }
    for (id, profile) in &provider.profiles {
        let key = format!("{key}.profiles.{id}");
        if id.trim().is_empty() {
            return Err(Violation::new(key, "a profile id must not be empty"));
        }
        match (&profile.api_key, &profile.api_key_env) {
            (Some(_), Some(_)) => {
                return Err(Violation::new(key, "set either api_key or api_key_env, not both"));
            }
            (None, None) => {
                return Err(Violation::new(key, "needs api_key or api_key_env (the variable holding the key)"));
            }
            (None, Some(var)) if var.trim().is_empty() || var.contains('=') => {
                return Err(Violation::new(format!("{key}.api_key_env"), "must name an environment variable"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `[agents.defaults]` and each `[agents.list.<id>]` (`table`).
fn agent_settings(table: &str, defaults: &AgentSettings, models: &ModelsConfig) -> Result<(), Violation> {
    if let Some(setting) = &defaults.model {
        let key =
            if setting.fallbacks.is_empty() { format!("{table}.model") } else { format!("{table}.model.primary") };
        model_reference(&key, &setting.primary, models)?;
        for (index, fallback) in setting.fallbacks.iter().enumerate() {
            model_reference(&format!("{table}.model.fallbacks[{index}]"), fallback, models)?;
        }
    }
    for (index, allowed) in defaults.models.iter().enumerate() {
        model_reference(&format!("{table}.models[{index}]"), allowed, models)?;
    }
    let chunk = &defaults.block_streaming_chunk;
    if chunk.max_chars < chunk.min_chars {
        return Err(Violation::new(
            format!("{table}.block_streaming_chunk.max_chars"),
            format!("must be at least min_chars ({})", chunk.min_chars),
        ));
    }
    if let HumanDelay::Custom { min_ms, max_ms } = defaults.human_delay
        && max_ms < min_ms
    {
        return Err(Violation::new(
            format!("{table}.human_delay.max_ms"),
            format!("must be at least min_ms ({min_ms}), got {max_ms}"),
        ));
    }
    Ok(())
}

/// A `PROVIDER/MODEL` whose provider exists.
fn model_reference(key: &str, reference: &str, models: &ModelsConfig) -> Result<(), Violation> {
    let (provider, model_name) = reference.split_once('/').ok_or_else(|| {
        Violation::new(key, format!("{reference:?} must be PROVIDER/MODEL, e.g. \"openai/gpt-4o-mini\""))
    })?;
    if provider.is_empty() || model_name.is_empty() {
        return Err(Violation::new(key, format!("{reference:?} must be PROVIDER/MODEL")));
    }
    if !models.providers.contains_key(provider) && !IMPLICIT_PROVIDERS.contains(&provider) {
        return Err(Violation::new(
            key,
            format!("provider {provider:?} is not defined: add [models.providers.{provider}]"),
        ));
    }
    Ok(())
}

fn queue(queue: &QueueConfig) -> Result<(), Violation> {
    if let Some(unknown) = queue.by_channel.keys().find(|name| !CHANNEL_NAMES.contains(&name.as_str())) {
        return Err(Violation::new(
            format!("messages.queue.by_channel.{unknown}"),
            format!("unknown channel (expected one of {})", CHANNEL_NAMES.join(", ")),
        ));
    }
    Ok(())
}

fn session(session: &SessionConfig) -> Result<(), Violation> {
    if session.reset.mode == ResetMode::Idle && session.reset.idle_minutes == 0 {
        return Err(Violation::new("session.reset.idle_minutes", "must be greater than 0 when reset.mode = \"idle\""));
    }
    for (index, entry) in session.operators.iter().enumerate() {
        let well_formed = entry.split_once(':').is_some_and(|(channel, id)| {
            CHANNEL_NAMES.contains(&channel) && channel != "webchat" && !id.trim().is_empty()
        });
        if !well_formed {
            return Err(Violation::new(
                format!("session.operators[{index}]"),
                format!(
                    "{entry:?} is not <channel>:<sender id> with channel one of telegram, discord, slack (e.g. \"telegram:12345\")"
                ),
            ));
        }
    }
    Ok(())
}

/// What every chat channel shares: who may talk to it and how it is reached.
struct ChannelRules<'a> {
    /// The table's key: `channels.telegram`, or `channels.telegram.accounts.work`.
    table: String,
    enabled: bool,
    api_url: &'a str,
    dm_policy: DmPolicy,
    allow_from: &'a [String],
    mention_patterns: &'a [String],
    /// Credentials the channel cannot start without, when enabled: (field, environment
    /// fallback or "", extra condition under which it is needed or "").
    required: Vec<(&'static str, &'static str, &'a Option<Secret>, &'static str)>,
}

/// Every platform table and each of its accounts. A table that lists accounts is checked
/// without its credentials (its accounts bring their own), then each account in full.
fn channels(config: &Config) -> Result<(), Violation> {
    fn telegram(table: String, telegram: &TelegramConfig) -> ChannelRules<'_> {
        let mut required = vec![("bot_token", "TELEGRAM_BOT_TOKEN", &telegram.bot_token, "")];
        if telegram.mode == TelegramMode::Webhook {
            required.push(("webhook_secret", "", &telegram.webhook_secret, " and mode = \"webhook\""));
        }
        ChannelRules {
            table,
            enabled: telegram.enabled,
            api_url: &telegram.api_url,
            dm_policy: telegram.dm_policy,
            allow_from: &telegram.allow_from,
            mention_patterns: &telegram.mention_patterns,
            required,
        }
    }
    fn discord(table: String, discord: &DiscordConfig) -> ChannelRules<'_> {
        ChannelRules {
            table,
            enabled: discord.enabled,
            api_url: &discord.api_url,
            dm_policy: discord.dm_policy,
            allow_from: &discord.allow_from,
            mention_patterns: &discord.mention_patterns,
            required: vec![("bot_token", "DISCORD_BOT_TOKEN", &discord.bot_token, "")],
        }
    }
    fn slack(table: String, slack: &SlackConfig) -> ChannelRules<'_> {
        let mut required = vec![("bot_token", "SLACK_BOT_TOKEN", &slack.bot_token, "")];
        match slack.mode {
            SlackMode::Socket => required.push(("app_token", "SLACK_APP_TOKEN", &slack.app_token, "")),
            SlackMode::Http => {
                required.push(("signing_secret", "SLACK_SIGNING_SECRET", &slack.signing_secret, " and mode = \"http\""))
            }
        }
        ChannelRules {
            table,
            enabled: slack.enabled,
            api_url: &slack.api_url,
            dm_policy: slack.dm_policy,
            allow_from: &slack.allow_from,
            mention_patterns: &slack.mention_patterns,
            required,
        }
    }
    let channels = &config.channels;
    platform("telegram", &channels.telegram, telegram, |account| vec![&account.bot_token])?;
    platform("discord", &channels.discord, discord, |account| vec![&account.bot_token])?;
    platform("slack", &channels.slack, slack, |account| vec![&account.bot_token, &account.app_token])?;
    for (table, discord) in accounts_of("discord", &channels.discord) {
        if let Some(gateway_url) = &discord.gateway_url {
            let key = format!("{table}.gateway_url");
            let parsed = url::Url::parse(gateway_url).map_err(|error| Violation::new(&key, format!("{error}")))?;
            if !matches!(parsed.scheme(), "ws" | "wss") {
                return Err(Violation::new(key, format!("{gateway_url:?} must be a ws:// or wss:// URL")));
            }
        }
    }
    Ok(())
}

/// The table key of each account of a platform, with its settings.
fn accounts_of<'a, A: Accounts>(name: &str, table: &'a A) -> Vec<(String, &'a A)> {
    if table.listed().is_empty() {
        return vec![(format!("channels.{name}"), table)];
    }
    table.each_account().into_iter().map(|(id, account)| (format!("channels.{name}.accounts.{id}"), account)).collect()
}

/// One platform: its table, its account ids, each account's rules, and no token used by
/// two accounts (two pollers on one bot fight over its updates).
fn platform<'a, A: Accounts>(
    name: &str,
    table: &'a A,
    rules: impl Fn(String, &'a A) -> ChannelRules<'a>,
    tokens: impl Fn(&'a A) -> Vec<&'a Option<Secret>>,
) -> Result<(), Violation> {
    if !table.listed().is_empty() {
        let mut own = rules(format!("channels.{name}"), table);
        own.required.clear();
        channel(&own)?;
    }
    if let Some(id) = table.listed().keys().find(|id| !super::valid_id(id)) {
        return Err(Violation::new(
            format!("channels.{name}.accounts.{id}"),
            format!("the account id {id:?} {}", super::ID_RULE),
        ));
    }
    if let Some((id, _)) = table.listed().iter().find(|(_, account)| !account.listed().is_empty()) {
        return Err(Violation::new(
            format!("channels.{name}.accounts.{id}.accounts"),
            "accounts cannot list accounts of their own",
        ));
    }
    // Compared across accounts only: an account's own tokens are of different kinds. A token
    // shown redacted (`ferry config show`'s `***`) says nothing about which bot it is.
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (key, account) in accounts_of(name, table) {
        channel(&rules(key.clone(), account))?;
        let own: Vec<&str> = tokens(account)
            .into_iter()
            .flatten()
            .filter(|token| !token.is_blank())
            .map(Secret::expose)
            .filter(|token| *token != super::REDACTED)
            .collect();
        if let Some((first, _)) = seen.iter().find(|(_, other)| own.contains(other)) {
            return Err(Violation::new(
                key,
                format!("uses the same token as {first}; each account is a bot of its own"),
            ));
        }
        seen.extend(own.into_iter().map(|token| (key.clone(), token)));
    }
    Ok(())
}

fn channel(rules: &ChannelRules<'_>) -> Result<(), Violation> {
    let key = |field: &str| format!("{}.{field}", rules.table);
    http_url(&key("api_url"), rules.api_url)?;
    match rules.dm_policy {
        DmPolicy::Allowlist if rules.allow_from.is_empty() => {
            return Err(Violation::new(
                key("allow_from"),
                "must list at least one sender id when dm_policy = \"allowlist\"",
            ));
        }
        DmPolicy::Open if !rules.allow_from.iter().any(|entry| entry == "*") => {
            return Err(Violation::new(
                key("allow_from"),
                "must contain \"*\" when dm_policy = \"open\" (so opening DMs to everyone is explicit)",
            ));
        }
        _ => {}
    }
    for (index, pattern) in rules.mention_patterns.iter().enumerate() {
        if let Err(error) = compile_mention_pattern(pattern) {
            return Err(Violation::new(
                key(&format!("mention_patterns[{index}]")),
                format!("{pattern:?} is not a valid regular expression: {}", one_line(&error.to_string())),
            ));
        }
    }
    if rules.enabled {
        for (field, env_var, value, condition) in &rules.required {
            if missing(value) {
                let hint = if env_var.is_empty() { String::new() } else { format!(" (set it here or in {env_var})") };
                return Err(Violation::new(
                    key(field),
                    format!("missing; required when enabled = true{condition}{hint}"),
                ));
            }
        }
    }
    Ok(())
}

/// Compiles one of a channel's `mention_patterns` the way routing matches it: case-insensitive,
/// anywhere in the message. Validation and the router share it so a pattern that passes
/// `ferry config check` is exactly one the router can use.
pub fn compile_mention_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern).case_insensitive(true).build()
}

fn http_url(key: &str, value: &str) -> Result<(), Violation> {
    let parsed =
        url::Url::parse(value).map_err(|error| Violation::new(key, format!("{value:?} is not a URL: {error}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Violation::new(key, format!("{value:?} must be an http:// or https:// URL")));
    }
    Ok(())
}

fn missing(secret: &Option<Secret>) -> bool {
    secret.as_ref().is_none_or(Secret::is_blank)
}

/// The agents' own rules: ids, one default, one workspace each, and keys that only mean
/// something in a listed agent.
fn agents(config: &Config) -> Result<(), Violation> {
    let agents = &config.agents;
    let defaults = &agents.defaults;
    for (key, set) in
        [("name", defaults.name.is_some()), ("default", defaults.default), ("tools", defaults.tools.is_some())]
    {
        if set {
            return Err(Violation::new(
                format!("agents.defaults.{key}"),
                "belongs in an agent's own table ([agents.list.<id>]), not in the defaults",
            ));
        }
    }
    let marked: Vec<&String> = agents.list.iter().filter(|(_, agent)| agent.default).map(|(id, _)| id).collect();
    if let [first, second, ..] = marked.as_slice() {
        return Err(Violation::new(
            format!("agents.list.{second}.default"),
            format!("only one agent can be the default, and agents.list.{first} already is"),
        ));
    }
    if agents.list.len() > 1 && marked.is_empty() && !agents.list.contains_key(MAIN_AGENT) {
        return Err(Violation::new(
            "agents.list",
            format!(
                "which agent answers where no binding matches? Set default = true on one of {}, or name one \"{MAIN_AGENT}\"",
                agents.list.keys().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    // One lane of runs serves every agent: a limit of one agent's own would be ignored.
    if let Some((id, agent)) = agents.list.iter().find(|(_, agent)| agent.max_concurrent != defaults.max_concurrent) {
        return Err(Violation::new(
            format!("agents.list.{id}.max_concurrent"),
            format!(
                "is {} but runs share one gateway-wide limit: set agents.defaults.max_concurrent ({})",
                agent.max_concurrent, defaults.max_concurrent
            ),
        ));
    }
    if let Some(id) = agents.list.keys().find(|id| !valid_id(id)) {
        return Err(Violation::new(format!("agents.list.{id}"), format!("the agent id {id:?} {ID_RULE}")));
    }
    // Compared as they will be, under a stand-in for the state directory.
    let resolved = agents.resolved(Path::new("<state_dir>"));
    for (index, agent) in resolved.iter().enumerate() {
        if let Some(other) = resolved[..index].iter().find(|other| other.workspace == agent.workspace) {
            let (first, second) = if agents.list.get_index_of(&other.id) < agents.list.get_index_of(&agent.id) {
                (&other.id, &agent.id)
            } else {
                (&agent.id, &other.id)
            };
            return Err(Violation::new(
                format!("agents.list.{second}.workspace"),
                format!(
                    "{} is agents.list.{first}'s workspace too; each agent needs its own",
                    agent.workspace.display()
                ),
            ));
        }
    }
    Ok(())
}
