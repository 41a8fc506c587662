//! Which chat adapters this binary was built with, and the checks that need them.
//!
//! This is the one module of the binary that names adapter crates (besides `main.rs`):
//! each is behind its cargo feature, and the core library never sees them.

use std::sync::Arc;

use ferry::channel::ChannelCapabilities;
use ferry::channels::ChannelRegistry;
use ferry::channels::supervisor::{Backoff, Running, StartFailure, supervise};
use ferry::config::{Config, Violation};
use ferry::dispatch::Dispatcher;
use ferry::gateway::LateRoutes;
use ferry::routing::ThreadLabels;

/// A chat adapter compiled into this binary.
pub struct CompiledAdapter {
    pub name: &'static str,
    pub capabilities: ChannelCapabilities,
}

/// The adapters this build includes, by cargo feature.
pub fn compiled_adapters() -> Vec<CompiledAdapter> {
    [
        #[cfg(feature = "telegram")]
        CompiledAdapter { name: ferry_telegram::CHANNEL_NAME, capabilities: ferry_telegram::capabilities() },
        #[cfg(feature = "discord")]
        CompiledAdapter { name: ferry_discord::CHANNEL_NAME, capabilities: ferry_discord::capabilities() },
        #[cfg(feature = "slack")]
        CompiledAdapter { name: ferry_slack::CHANNEL_NAME, capabilities: ferry_slack::capabilities() },
    ]
    .into_iter()
    .collect()
}

/// Checks the config against what the compiled adapters can do: an enabled account must
/// be built in, and chunk limits must fit the platform's hard limits.
pub fn check_against_adapters(config: &Config) -> Result<(), Violation> {
    use ferry::config::Accounts;

    /// The key of `field` in account `id` of platform `name`.
    fn key(name: &str, listed: bool, id: &str, field: &str) -> String {
        if listed { format!("channels.{name}.accounts.{id}.{field}") } else { format!("channels.{name}.{field}") }
    }
    let adapters = compiled_adapters();
    let channels = &config.channels;
    let mut settings = Vec::new();
    let telegram_listed = !channels.telegram.accounts.is_empty();
    for (id, telegram) in channels.telegram.each_account() {
        settings.push(("telegram", telegram_listed, id, telegram.enabled, telegram.text_chunk_limit, None));
    }
    let discord_listed = !channels.discord.accounts.is_empty();
    for (id, discord) in channels.discord.each_account() {
        let lines = Some(discord.max_lines_per_message);
        settings.push(("discord", discord_listed, id, discord.enabled, discord.text_chunk_limit, lines));
    }
    let slack_listed = !channels.slack.accounts.is_empty();
    for (id, slack) in channels.slack.each_account() {
        settings.push(("slack", slack_listed, id, slack.enabled, slack.text_chunk_limit, None));
    }
    for (name, listed, id, enabled, chunk_limit, max_lines) in settings {
        let Some(adapter) = adapters.iter().find(|adapter| adapter.name == name) else {
            if enabled {
                return Err(Violation::new(key(name, listed, id, "enabled"), ferry::config::features::needs(name)));
            }
            continue;
        };
        if chunk_limit > adapter.capabilities.text_limit {
            return Err(Violation::new(
                key(name, listed, id, "text_chunk_limit"),
                format!("{chunk_limit} is over the platform limit of {} characters", adapter.capabilities.text_limit),
            ));
        }
        if let (Some(lines), Some(limit)) = (max_lines, adapter.capabilities.max_lines)
            && lines > limit
        {
            return Err(Violation::new(
                key(name, listed, id, "max_lines_per_message"),
                format!("{lines} is over the {limit} lines the platform shows before collapsing a message"),
            ));
        }
    }
    Ok(())
}

/// The names of the chat channels the config turns on (any account of them), in a stable
/// order.
pub fn enabled_channels(config: &Config) -> Vec<&'static str> {
    use ferry::config::Accounts;

    fn any_enabled<A: Accounts>(table: &A, enabled: impl Fn(&A) -> bool) -> bool {
        table.each_account().into_iter().any(|(_, account)| enabled(account))
    }
    let channels = &config.channels;
    [
        ("telegram", any_enabled(&channels.telegram, |telegram| telegram.enabled)),
        ("discord", any_enabled(&channels.discord, |discord| discord.enabled)),
        ("slack", any_enabled(&channels.slack, |slack| slack.enabled)),
        ("webchat", channels.webchat.enabled),
    ]
    .into_iter()
    .filter_map(|(name, enabled)| enabled.then_some(name))
    .collect()
}

/// How each adapter's thread ids read in session keys: Telegram's are forum topics,
/// Discord's and Slack's (`thread_ts`) are threads (`:thread:<id>`, also the default; named
/// here so it is on record).
pub fn thread_labels() -> ThreadLabels {
    let labels = ThreadLabels::new();
    #[cfg(feature = "telegram")]
    let labels = labels.with(ferry_telegram::CHANNEL_NAME, ferry::routing::ThreadLabel::Topic);
    #[cfg(feature = "discord")]
    let labels = labels.with(ferry_discord::CHANNEL_NAME, ferry::routing::ThreadLabel::Thread);
    #[cfg(feature = "slack")]
    let labels = labels.with(ferry_slack::CHANNEL_NAME, ferry::routing::ThreadLabel::Thread);
    labels
}

/// Starts the enabled accounts of each platform adapter, each its own adapter instance
/// (its own poller, socket or webhook path, health entry and send budget) under a
/// supervisor that retries a channel whose platform is unreachable (backoff 1 s → 5 min)
/// and stops only on an error retrying cannot fix (a refused token); `/healthz` shows each
/// one's state. Returns after each account's first attempt, with the HTTP routes the
/// adapters serve (webhooks): they answer 503 until their account runs. Adapters that catch
/// up on history after a reconnect keep their positions under `state_dir/channels`.
#[cfg_attr(not(any(feature = "telegram", feature = "discord", feature = "slack")), allow(unused_variables))]
#[cfg_attr(not(any(feature = "telegram", feature = "slack")), allow(unused_mut))]
pub async fn start_channels(
    config: &Arc<Config>,
    dispatcher: &Dispatcher,
    registry: &ChannelRegistry,
    state_dir: &std::path::Path,
) -> Vec<axum::Router> {
    use ferry::config::Accounts;

    let mut routes = Vec::new();
    #[cfg(feature = "telegram")]
    for (id, telegram) in config.channels.telegram.each_account() {
        if !telegram.enabled {
            continue;
        }
        let webhook = telegram.mode == ferry::config::TelegramMode::Webhook;
        let paths = if webhook { ferry_telegram::webhook_paths(id) } else { Vec::new() };
        let start = Account {
            config: config.clone(),
            dispatcher: dispatcher.clone(),
            id: id.to_owned(),
            state_dir: state_dir.to_owned(),
        };
        routes.extend(supervised(registry, ferry_telegram::CHANNEL_NAME, start, paths, start_telegram).await);
    }
    #[cfg(feature = "discord")]
    for (id, discord) in config.channels.discord.each_account() {
        if !discord.enabled {
            continue;
        }
        let start = Account {
            config: config.clone(),
            dispatcher: dispatcher.clone(),
            id: id.to_owned(),
            state_dir: state_dir.to_owned(),
        };
        routes.extend(supervised(registry, ferry_discord::CHANNEL_NAME, start, Vec::new(), start_discord).await);
    }
    #[cfg(feature = "slack")]
    for (id, slack) in config.channels.slack.each_account() {
        if !slack.enabled {
            continue;
        }
        let http = slack.mode == ferry::config::SlackMode::Http;
        let paths = if http { ferry_slack::events_paths(id) } else { Vec::new() };
        let start = Account {
            config: config.clone(),
            dispatcher: dispatcher.clone(),
            id: id.to_owned(),
            state_dir: state_dir.to_owned(),
        };
        routes.extend(supervised(registry, ferry_slack::CHANNEL_NAME, start, paths, start_slack).await);
    }
    routes
}

/// What starting one account of an adapter needs.
#[derive(Clone)]
#[cfg_attr(not(any(feature = "telegram", feature = "discord", feature = "slack")), allow(dead_code))]
struct Account {
    config: Arc<Config>,
    dispatcher: Dispatcher,
    id: String,
    /// The state directory, for what an adapter keeps across restarts on one machine.
    #[cfg_attr(not(any(feature = "discord", feature = "slack")), allow(dead_code))]
    state_dir: std::path::PathBuf,
}

/// Starts one account with `start` under a supervisor. Returns the routes for its webhook
/// paths, if it has any: served from now on, by the channel's own routes once it runs.
#[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
async fn supervised<F, Fut>(
    registry: &ChannelRegistry,
    name: &'static str,
    account: Account,
    webhook_paths: Vec<String>,
    start: F,
) -> Vec<axum::Router>
where
    F: Fn(Account) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(Option<axum::Router>, Running), StartFailure>> + Send,
{
    let late = LateRoutes::new();
    let routes = webhook_paths.iter().map(|path| late.at(path)).collect();
    let id = account.id.clone();
    supervise(registry.clone(), name, &id, Backoff::default(), move || {
        let (started, late) = (start(account.clone()), late.clone());
        async move {
            let (routes, running) = started.await?;
            routes.into_iter().for_each(|routes| late.fill(routes));
            Ok(running)
        }
    })
    .await;
    routes
}

/// The settings of `account` of a platform table, or a permanent failure (the config was
/// validated, so only a bug gets here).
#[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
fn account_settings<'a, A: ferry::config::Accounts>(
    table: &'a A,
    name: &str,
    account: &str,
) -> Result<&'a A, StartFailure> {
    table.account(account).ok_or_else(|| StartFailure::Permanent(format!("{name} has no account {account:?}")))
}

/// Whether retrying could help after an adapter's connection attempt failed: not when the
/// platform refused the credentials or the settings cannot work.
#[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
fn start_failure(error: impl std::fmt::Display, permanent: bool) -> StartFailure {
    let reason = error.to_string();
    if permanent { StartFailure::Permanent(reason) } else { StartFailure::Transient(reason) }
}

/// Attaches a connected channel to the dispatcher; a refused token when its inbound
/// connection opens is permanent, anything else may pass.
#[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
async fn attach(dispatcher: &Dispatcher, channel: Arc<dyn ferry::channel::Channel>) -> Result<Running, StartFailure> {
    let name = channel.name().to_owned();
    match dispatcher.attach(channel).await {
        Ok(inbound) => {
            // Messages that waited for this channel (it was down at start-up) run now.
            dispatcher.scheduler().resume_kept(&name).await;
            Ok(Running::until(inbound))
        }
        Err(error) => {
            let permanent = matches!(error, ferry::channel::ChannelError::Unauthorized { .. });
            Err(start_failure(format!("starting the {name} channel: {error}"), permanent))
        }
    }
}

#[cfg(feature = "telegram")]
async fn start_telegram(account: Account) -> Result<(Option<axum::Router>, Running), StartFailure> {
    use ferry::config::TelegramMode as Mode;
    use ferry_telegram::{TelegramChannel, TelegramConfig, TelegramError, TelegramMode};

    let settings = account_settings(&account.config.channels.telegram, "telegram", &account.id)?;
    let token = settings.bot_token.as_ref().map(|token| token.expose().to_owned()).unwrap_or_default();
    let mut telegram = TelegramConfig::new(token);
    telegram.account_id.clone_from(&account.id);
    telegram.api_url.clone_from(&settings.api_url);
    telegram.mode = match settings.mode {
        Mode::Polling => TelegramMode::Polling,
        Mode::Webhook => TelegramMode::Webhook {
            secret: settings.webhook_secret.as_ref().map(|secret| secret.expose().to_owned()).unwrap_or_default(),
        },
    };
    let channel = TelegramChannel::connect(telegram).await.map_err(|error| {
        let permanent = matches!(error, TelegramError::Unauthorized { .. } | TelegramError::InvalidConfig { .. });
        start_failure(error, permanent)
    })?;
    let channel = Arc::new(channel);
    let route = channel.webhook_router();
    tracing::info!(account = %account.id, bot = %channel.bot_username(), mode = ?settings.mode, "telegram connected");
    let running = attach(&account.dispatcher, channel).await?;
    Ok((route, running))
}

#[cfg(feature = "discord")]
async fn start_discord(account: Account) -> Result<(Option<axum::Router>, Running), StartFailure> {
    use ferry_discord::{DiscordChannel, DiscordConfig, DiscordError};

    let settings = account_settings(&account.config.channels.discord, "discord", &account.id)?;
    let token = settings.bot_token.as_ref().map(|token| token.expose().to_owned()).unwrap_or_default();
    let mut discord = DiscordConfig::new(token);
    discord.account_id.clone_from(&account.id);
    discord.api_url.clone_from(&settings.api_url);
    discord.gateway_url.clone_from(&settings.gateway_url);
    // The last message seen per channel, for catching up after a restart. On a replica the
    // shard lease's cursor is used instead (shared by the replicas).
    let positions = account.state_dir.join("channels").join(format!("discord.{}.positions.json", account.id));
    discord.positions = Some(Arc::new(ferry::channel::FileCursor::new(positions)));
    let channel = DiscordChannel::connect(discord).await.map_err(|error| {
        let permanent = matches!(error, DiscordError::Unauthorized { .. } | DiscordError::InvalidConfig { .. });
        start_failure(error, permanent)
    })?;
    let channel = Arc::new(channel);
    tracing::info!(account = %account.id, bot = %channel.bot_name(), bot_id = channel.bot_id(), "discord connected");
    let running = attach(&account.dispatcher, channel).await?;
    Ok((None, running))
}

#[cfg(feature = "slack")]
async fn start_slack(account: Account) -> Result<(Option<axum::Router>, Running), StartFailure> {
    use ferry::config::{ReplyToMode as CoreReplyToMode, SlackMode as Mode};
    use ferry_slack::{ReplyToMode, SlackChannel, SlackConfig, SlackError};

    let config = &account.config;
    let settings = account_settings(&config.channels.slack, "slack", &account.id)?;
    let secret = |value: &Option<ferry::config::Secret>| {
        value.as_ref().map(|secret| secret.expose().to_owned()).unwrap_or_default()
    };
    let bot_token = secret(&settings.bot_token);
    let mut slack = match settings.mode {
        Mode::Socket => SlackConfig::socket(bot_token, secret(&settings.app_token)),
        Mode::Http => SlackConfig::http(bot_token, secret(&settings.signing_secret)),
    };
    slack.api_url.clone_from(&settings.api_url);
    slack.account_id.clone_from(&account.id);
    slack.reply_to_mode = match config.messages.reply_to_mode {
        CoreReplyToMode::Off => ReplyToMode::Off,
        CoreReplyToMode::First => ReplyToMode::First,
        CoreReplyToMode::All => ReplyToMode::All,
    };
    // The last message seen per conversation, for catching up on history after a restart
    // (Socket Mode). Every replica runs its own socket, so each keeps its own file.
    let positions = account.state_dir.join("channels").join(format!("slack.{}.positions.json", account.id));
    slack.positions = Some(Arc::new(ferry::channel::FileCursor::new(positions)));
    let channel = SlackChannel::connect(slack).await.map_err(|error| {
        let permanent = matches!(error, SlackError::Unauthorized { .. } | SlackError::InvalidConfig { .. });
        start_failure(error, permanent)
    })?;
    let channel = Arc::new(channel);
    let route = channel.events_router();
    tracing::info!(account = %account.id, team = %channel.team(), bot_user = %channel.bot_user_id(), mode = ?settings.mode, "slack connected");
    let running = attach(&account.dispatcher, channel).await?;
    Ok((route, running))
}
