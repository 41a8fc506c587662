//! Rules a configuration must satisfy beyond its types: the combinations that would
//! otherwise fail later, at run time, in front of a user.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::error::{Violation, one_line};
use super::human_delay::HumanDelay;
use super::model_choice::ModelSetting;
use super::schema::{
    AgentDefaults, Config, DEFAULT_PROFILE, DmPolicy, GatewayConfig, HooksConfig, ModelsConfig, ProviderConfig,
    QueueConfig, ResetMode, SessionConfig, SlackMode, TelegramMode, ToolLists, WebSearchProvider, WebToolsConfig,
};
use super::{Secret, ranges};

/// Channel names the core knows; `messages.queue.by_channel` keys must be one of these.
pub const CHANNEL_NAMES: [&str; 4] = ["telegram", "discord", "slack", "webchat"];

/// Provider names that need no `[models.providers.NAME]` table: `echo` is built in, and
/// `openai` / `anthropic` are configured from `OPENAI_*` / `ANTHROPIC_*` variables.
pub const IMPLICIT_PROVIDERS: [&str; 3] = ["echo", "openai", "anthropic"];

/// Checks every rule and reports the first broken one: first every number against its
/// range ([`ranges::RANGES`]), then the rules below.
pub fn validate(config: &Config) -> Result<(), Violation> {
    ranges::check(config)?;
    gateway(&config.gateway)?;
    models(&config.models)?;
    agent_defaults(&config.agents.defaults, &config.models)?;
    queue(&config.messages.queue)?;
    session(&config.session)?;
    hooks(&config.hooks)?;
    tool_lists(config)?;
    web_tools(&config.tools.web)?;
    super::mcp_schema::validate(&config.mcp)?;
    super::media_schema::validate(&config.media)?;
    channels(config)
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
    let mut levels: Vec<(String, &ToolLists)> = vec![(String::new(), &global)];
    levels.push(("channels.telegram.".to_owned(), &channels.telegram.tools));
    levels.push(("channels.discord.".to_owned(), &channels.discord.tools));
    levels.push(("channels.slack.".to_owned(), &channels.slack.tools));
    levels.push(("channels.webchat.".to_owned(), &channels.webchat.tools));
    for (id, group) in &channels.telegram.groups {
        levels.push((format!("channels.telegram.groups.{id}."), &group.tools));
    }
    for (id, guild) in &channels.discord.guilds {
        levels.push((format!("channels.discord.guilds.{id}."), &guild.tools));
    }
    for (id, channel) in &channels.slack.channels {
        levels.push((format!("channels.slack.channels.{id}."), &channel.tools));
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
    config
        .models
        .providers
        .keys()
        .filter(|name| !used.contains(name.as_str()))
        .map(|name| {
            Violation::new(format!("models.providers.{name}"), format!("defined but no model uses it ({model})"))
        })
        .collect()
}

/// The provider names that model settings refer to (`PROVIDER/MODEL`). A new setting that
/// names a model (fallbacks, per-agent models) belongs here, or its provider is reported as
/// unused.
fn providers_in_use(config: &Config) -> BTreeSet<&str> {
    let defaults = &config.agents.defaults;
    let chain = defaults.model.iter().flat_map(ModelSetting::chain);
    let models = chain.chain(defaults.models.iter().map(String::as_str));
    models.filter_map(|model| model.split_once('/').map(|(provider, _)| provider)).collect()
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

fn agent_defaults(defaults: &AgentDefaults, models: &ModelsConfig) -> Result<(), Violation> {
    const KEY: &str = "agents.defaults";
    if let Some(setting) = &defaults.model {
        let key = if setting.fallbacks.is_empty() { format!("{KEY}.model") } else { format!("{KEY}.model.primary") };
        model_reference(&key, &setting.primary, models)?;
        for (index, fallback) in setting.fallbacks.iter().enumerate() {
            model_reference(&format!("{KEY}.model.fallbacks[{index}]"), fallback, models)?;
        }
    }
    for (index, allowed) in defaults.models.iter().enumerate() {
        model_reference(&format!("{KEY}.models[{index}]"), allowed, models)?;
    }
    let chunk = &defaults.block_streaming_chunk;
    if chunk.max_chars < chunk.min_chars {
        return Err(Violation::new(
            format!("{KEY}.block_streaming_chunk.max_chars"),
            format!("must be at least min_chars ({})", chunk.min_chars),
        ));
    }
    if let HumanDelay::Custom { min_ms, max_ms } = defaults.human_delay
        && max_ms < min_ms
    {
        return Err(Violation::new(
            format!("{KEY}.human_delay.max_ms"),
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
    Ok(())
}

/// What every chat channel shares: who may talk to it and how it is reached.
struct ChannelRules<'a> {
    name: &'static str,
    enabled: bool,
    api_url: &'a str,
    dm_policy: DmPolicy,
    allow_from: &'a [String],
    mention_patterns: &'a [String],
    /// Credentials the channel cannot start without, when enabled: (field, environment
    /// fallback or "", extra condition under which it is needed or "").
    required: Vec<(&'static str, &'static str, &'a Option<Secret>, &'static str)>,
}

fn channels(config: &Config) -> Result<(), Violation> {
    let telegram = &config.channels.telegram;
    let discord = &config.channels.discord;
    let slack = &config.channels.slack;

    let mut telegram_required = vec![("bot_token", "TELEGRAM_BOT_TOKEN", &telegram.bot_token, "")];
    if telegram.mode == TelegramMode::Webhook {
        telegram_required.push(("webhook_secret", "", &telegram.webhook_secret, " and mode = \"webhook\""));
    }
    let mut slack_required = vec![("bot_token", "SLACK_BOT_TOKEN", &slack.bot_token, "")];
    match slack.mode {
        SlackMode::Socket => slack_required.push(("app_token", "SLACK_APP_TOKEN", &slack.app_token, "")),
        SlackMode::Http => slack_required.push((
            "signing_secret",
            "SLACK_SIGNING_SECRET",
            &slack.signing_secret,
            " and mode = \"http\"",
        )),
    }

    let rules = [
        ChannelRules {
            name: "telegram",
            enabled: telegram.enabled,
            api_url: &telegram.api_url,
            dm_policy: telegram.dm_policy,
            allow_from: &telegram.allow_from,
            mention_patterns: &telegram.mention_patterns,
            required: telegram_required,
        },
        ChannelRules {
            name: "discord",
            enabled: discord.enabled,
            api_url: &discord.api_url,
            dm_policy: discord.dm_policy,
            allow_from: &discord.allow_from,
            mention_patterns: &discord.mention_patterns,
            required: vec![("bot_token", "DISCORD_BOT_TOKEN", &discord.bot_token, "")],
        },
        ChannelRules {
            name: "slack",
            enabled: slack.enabled,
            api_url: &slack.api_url,
            dm_policy: slack.dm_policy,
            allow_from: &slack.allow_from,
            mention_patterns: &slack.mention_patterns,
            required: slack_required,
        },
    ];
    for rules in &rules {
        channel(rules)?;
    }
    if let Some(gateway_url) = &discord.gateway_url {
        let key = "channels.discord.gateway_url";
        let parsed = url::Url::parse(gateway_url).map_err(|error| Violation::new(key, format!("{error}")))?;
        if !matches!(parsed.scheme(), "ws" | "wss") {
            return Err(Violation::new(key, format!("{gateway_url:?} must be a ws:// or wss:// URL")));
        }
    }
    Ok(())
}

fn channel(rules: &ChannelRules<'_>) -> Result<(), Violation> {
    let key = |field: &str| format!("channels.{}.{field}", rules.name);
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
