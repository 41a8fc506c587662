//! Which chat adapters this binary was built with, and the checks that need them.
//!
//! This is the one module of the binary that names adapter crates (besides `main.rs`):
//! each is behind its cargo feature, and the core library never sees them.

use std::sync::Arc;

use ferry::channel::ChannelCapabilities;
use ferry::channels::ChannelRegistry;
use ferry::channels::supervisor::{Backoff, StartFailure, supervise};
use ferry::config::{Config, Violation};
use ferry::dispatch::Dispatcher;
use ferry::gateway::LateRoutes;
use ferry::routing::ThreadLabels;

/// The account every adapter connects as until several accounts per channel land.
const DEFAULT_ACCOUNT: &str = "default";

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

/// Checks the config against what the compiled adapters can do: an enabled channel must
/// be built in, and chunk limits must fit the platform's hard limits.
pub fn check_against_adapters(config: &Config) -> Result<(), Violation> {
    let adapters = compiled_adapters();
    let channels = &config.channels;
    let settings = [
        ("telegram", channels.telegram.enabled, channels.telegram.text_chunk_limit, None),
        (
            "discord",
            channels.discord.enabled,
            channels.discord.text_chunk_limit,
            Some(channels.discord.max_lines_per_message),
        ),
        ("slack", channels.slack.enabled, channels.slack.text_chunk_limit, None),
    ];
    for (name, enabled, chunk_limit, max_lines) in settings {
        let Some(adapter) = adapters.iter().find(|adapter| adapter.name == name) else {
            if enabled {
                return Err(Violation::new(
                    format!("channels.{name}.enabled"),
                    format!("this ferry binary was built without the `{name}` feature"),
                ));
            }
            continue;
        };
        if chunk_limit > adapter.capabilities.text_limit {
            return Err(Violation::new(
                format!("channels.{name}.text_chunk_limit"),
                format!("{chunk_limit} is over the platform limit of {} characters", adapter.capabilities.text_limit),
            ));
        }
        if let (Some(lines), Some(limit)) = (max_lines, adapter.capabilities.max_lines)
            && lines > limit
        {
            return Err(Violation::new(
                format!("channels.{name}.max_lines_per_message"),
                format!("{lines} is over the {limit} lines the platform shows before collapsing a message"),
            ));
        }
    }
    Ok(())
}

/// The names of the chat channels the config turns on, in a stable order.
pub fn enabled_channels(config: &Config) -> Vec<&'static str> {
    let channels = &config.channels;
    [
        ("telegram", channels.telegram.enabled),
        ("discord", channels.discord.enabled),
        ("slack", channels.slack.enabled),
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

/// Starts the enabled platform adapters, each under a supervisor that retries a channel
/// whose platform is unreachable (backoff 1 s → 5 min) and stops only on an error retrying
/// cannot fix (a refused token); `/healthz` shows each one's state. Returns after each
/// channel's first attempt, with the HTTP routes the adapters serve (webhooks): they answer
/// 503 until their channel runs.
#[cfg_attr(not(any(feature = "telegram", feature = "discord", feature = "slack")), allow(unused_variables))]
#[cfg_attr(not(any(feature = "telegram", feature = "slack")), allow(unused_mut))]
pub async fn start_channels(
    config: &Arc<Config>,
    dispatcher: &Dispatcher,
    registry: &ChannelRegistry,
) -> Vec<axum::Router> {
    let mut routes = Vec::new();
    #[cfg(feature = "telegram")]
    if config.channels.telegram.enabled {
        let webhook = config.channels.telegram.mode == ferry::config::TelegramMode::Webhook;
        let path = webhook.then_some(ferry_telegram::WEBHOOK_PATH);
        routes
            .extend(supervised(registry, config, dispatcher, ferry_telegram::CHANNEL_NAME, path, start_telegram).await);
    }
    #[cfg(feature = "discord")]
    if config.channels.discord.enabled {
        supervised(registry, config, dispatcher, ferry_discord::CHANNEL_NAME, None, start_discord).await;
    }
    #[cfg(feature = "slack")]
    if config.channels.slack.enabled {
        let http = config.channels.slack.mode == ferry::config::SlackMode::Http;
        let path = http.then_some(ferry_slack::EVENTS_PATH);
        routes.extend(supervised(registry, config, dispatcher, ferry_slack::CHANNEL_NAME, path, start_slack).await);
    }
    routes
}

/// Starts one adapter with `start` under a supervisor. Returns the route for its webhook
/// path, if it has one: served from now on, by the channel's own routes once it runs.
#[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
async fn supervised<F, Fut>(
    registry: &ChannelRegistry,
    config: &Arc<Config>,
    dispatcher: &Dispatcher,
    name: &'static str,
    webhook_path: Option<&'static str>,
    start: F,
) -> Option<axum::Router>
where
    F: Fn(Arc<Config>, Dispatcher) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Option<axum::Router>, StartFailure>> + Send,
{
    let late = LateRoutes::new();
    let route = webhook_path.map(|path| late.at(path));
    let (config, dispatcher) = (config.clone(), dispatcher.clone());
    supervise(registry.clone(), name, DEFAULT_ACCOUNT, Backoff::default(), move || {
        let (started, late) = (start(config.clone(), dispatcher.clone()), late.clone());
        async move { started.await.map(|routes| routes.into_iter().for_each(|routes| late.fill(routes))) }
    })
    .await;
    route
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
async fn attach(dispatcher: &Dispatcher, channel: Arc<dyn ferry::channel::Channel>) -> Result<(), StartFailure> {
    let name = channel.name().to_owned();
    match dispatcher.attach(channel).await {
        Ok(_) => {
            // Messages that waited for this channel (it was down at start-up) run now.
            dispatcher.scheduler().resume_kept(&name).await;
            Ok(())
        }
        Err(error) => {
            let permanent = matches!(error, ferry::channel::ChannelError::Unauthorized { .. });
            Err(start_failure(format!("starting the {name} channel: {error}"), permanent))
        }
    }
}

#[cfg(feature = "telegram")]
async fn start_telegram(config: Arc<Config>, dispatcher: Dispatcher) -> Result<Option<axum::Router>, StartFailure> {
    use ferry::config::TelegramMode as Mode;
    use ferry_telegram::{TelegramChannel, TelegramConfig, TelegramError, TelegramMode};

    let settings = &config.channels.telegram;
    let token = settings.bot_token.as_ref().map(|token| token.expose().to_owned()).unwrap_or_default();
    let mut telegram = TelegramConfig::new(token);
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
    tracing::info!(bot = %channel.bot_username(), mode = ?settings.mode, "telegram connected");
    attach(&dispatcher, channel).await?;
    Ok(route)
}

#[cfg(feature = "discord")]
async fn start_discord(config: Arc<Config>, dispatcher: Dispatcher) -> Result<Option<axum::Router>, StartFailure> {
    use ferry_discord::{DiscordChannel, DiscordConfig, DiscordError};

    let settings = &config.channels.discord;
    let token = settings.bot_token.as_ref().map(|token| token.expose().to_owned()).unwrap_or_default();
    let mut discord = DiscordConfig::new(token);
    discord.api_url.clone_from(&settings.api_url);
    discord.gateway_url.clone_from(&settings.gateway_url);
    let channel = DiscordChannel::connect(discord).await.map_err(|error| {
        let permanent = matches!(error, DiscordError::Unauthorized { .. } | DiscordError::InvalidConfig { .. });
        start_failure(error, permanent)
    })?;
    let channel = Arc::new(channel);
    tracing::info!(bot = %channel.bot_name(), bot_id = channel.bot_id(), "discord connected");
    attach(&dispatcher, channel).await?;
    Ok(None)
}

#[cfg(feature = "slack")]
async fn start_slack(config: Arc<Config>, dispatcher: Dispatcher) -> Result<Option<axum::Router>, StartFailure> {
    use ferry::config::{ReplyToMode as CoreReplyToMode, SlackMode as Mode};
    use ferry_slack::{ReplyToMode, SlackChannel, SlackConfig, SlackError};

    let settings = &config.channels.slack;
    let secret = |value: &Option<ferry::config::Secret>| {
        value.as_ref().map(|secret| secret.expose().to_owned()).unwrap_or_default()
    };
    let bot_token = secret(&settings.bot_token);
    let mut slack = match settings.mode {
        Mode::Socket => SlackConfig::socket(bot_token, secret(&settings.app_token)),
        Mode::Http => SlackConfig::http(bot_token, secret(&settings.signing_secret)),
    };
    slack.api_url.clone_from(&settings.api_url);
    slack.reply_to_mode = match config.messages.reply_to_mode {
        CoreReplyToMode::Off => ReplyToMode::Off,
        CoreReplyToMode::First => ReplyToMode::First,
        CoreReplyToMode::All => ReplyToMode::All,
    };
    let channel = SlackChannel::connect(slack).await.map_err(|error| {
        let permanent = matches!(error, SlackError::Unauthorized { .. } | SlackError::InvalidConfig { .. });
        start_failure(error, permanent)
    })?;
    let channel = Arc::new(channel);
    let route = channel.events_router();
    tracing::info!(team = %channel.team(), bot_user = %channel.bot_user_id(), mode = ?settings.mode, "slack connected");
    attach(&dispatcher, channel).await?;
    Ok(route)
}
