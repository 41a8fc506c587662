//! [`DiscordChannel`]: the `Channel` implementation — start-up (token check, gateway
//! client), inbound wiring, the outbound calls (create — with a file as `multipart/form-data`,
//! see `upload.rs` —, edit and delete message, trigger typing) and attachment downloads
//! (`download.rs`).
//!
//! Each outbound call is exactly one REST request (see `rest.rs`); the core's outbound
//! scheduler owns rate budgets and retries, driven by the [`ChannelError`] classification in
//! [`crate::error`]. A create carries a `nonce` derived from the message's idempotency key,
//! with `enforce_nonce`, so repeating a send whose outcome was unknown is safe (`nonce.rs`).

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry_channel::{
    Attachment, Channel, ChannelCapabilities, ChannelError, Download, InboundDelivery, InboundStream, IngressCursor,
    MessageRef, OutboundMessage, SentMessage, Target, TextFormat,
};
use futures::StreamExt;
use serde_json::{Value, json};
use serenity::Client;
use serenity::all::GatewayIntents;
use serenity::gateway::ShardManager;
use serenity::http::HttpBuilder;
use serenity::model::id::{ChannelId, MessageId, UserId};
use tokio::sync::mpsc;
use tracing::{error, info};

use crate::config::DiscordConfig;
use crate::download::Downloader;
use crate::error::{DiscordError, channel_error};
use crate::gateway::{Forwarder, GatewayEvent, Handler};
use crate::nonce::nonce_for;
use crate::normalize::BotIdentity;
use crate::rest::{CallError, Rest};
use crate::upload::{attachments_json, read_files};
use crate::{CHANNEL_NAME, capabilities};

/// Inbound deliveries buffered between the adapter and the core.
const INBOUND_BUFFER: usize = 100;

/// Discord's JSON error code for a message that does not exist (any more).
const UNKNOWN_MESSAGE: i64 = 10008;

/// What the bot needs from the gateway: guild and DM messages, with their content. Message
/// Content is a privileged intent: it must be switched on in the developer portal.
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

/// A connected Discord bot account. See the [crate documentation](crate).
pub struct DiscordChannel {
    account_id: String,
    capabilities: ChannelCapabilities,
    identity: BotIdentity,
    rest: Rest,
    /// Fetches inbound attachments from the CDN, without the bot token.
    downloader: Downloader,
    /// What a gateway client is built from, for each [`Channel::start_singleton`] after the
    /// first.
    gateway: GatewaySettings,
    /// What the first [`Channel::start`] takes; a second start finds `None`.
    pending: Mutex<Option<PendingStart>>,
    /// Where catch-up positions are kept when the channel is not started under a lease
    /// ([`DiscordConfig::positions`]).
    positions: Option<Arc<dyn IngressCursor>>,
}

/// What building a gateway client takes.
struct GatewaySettings {
    token: String,
    proxy: Option<String>,
    gateway_url: Option<String>,
    api_url: String,
    group_dms: bool,
}

/// The gateway client and the forwarder, built by `connect`, started by `start`.
struct PendingStart {
    client: Client,
    forwarder: Forwarder,
    messages: mpsc::UnboundedReceiver<GatewayEvent>,
}

impl DiscordChannel {
    /// Checks the token with `GET /users/@me` and prepares the gateway client; nothing is
    /// received until [`Channel::start`].
    ///
    /// A refused token is [`DiscordError::Unauthorized`]; an unreachable API is
    /// [`DiscordError::Unreachable`].
    pub async fn connect(config: DiscordConfig) -> Result<Self, DiscordError> {
        let token = config.token.trim().to_owned();
        if token.is_empty() {
            return Err(DiscordError::InvalidConfig {
                reason: "channels.discord.bot_token (or DISCORD_BOT_TOKEN) is empty".to_owned(),
            });
        }
        let proxy = config.proxy();
        if let Some(proxy) = &proxy {
            url::Url::parse(proxy).map_err(|error| DiscordError::InvalidConfig {
                reason: format!("channels.discord.api_url {proxy:?} is not a URL: {error}"),
            })?;
        }
        let rest = Rest::new(&token, proxy.clone()).map_err(|reason| DiscordError::InvalidConfig { reason })?;
        let downloader = Downloader::new().map_err(|reason| DiscordError::InvalidConfig { reason })?;
        let me = rest.current_user().await.map_err(|error| match error {
            CallError::Status(failure) if failure.status == 401 => {
                DiscordError::Unauthorized { reason: format!("GET /users/@me answered {}", failure.message()) }
            }
            other => DiscordError::Unreachable { api_url: config.api_url.clone(), reason: other.to_string() },
        })?;
        let identity = identity(&me).ok_or_else(|| DiscordError::Unreachable {
            api_url: config.api_url.clone(),
            reason: format!("GET /users/@me answered without a user id: {me}"),
        })?;
        info!(channel = CHANNEL_NAME, account_id = %config.account_id, bot = %identity.name, bot_id = %identity.id, "connected to Discord");

        let gateway = GatewaySettings {
            token,
            proxy,
            gateway_url: config.gateway_url,
            api_url: config.api_url,
            group_dms: config.group_dms,
        };
        let pending = build_client(&gateway, &rest, &identity, &config.account_id).await?;
        Ok(Self {
            account_id: config.account_id,
            capabilities: capabilities(),
            identity,
            rest,
            downloader,
            gateway,
            pending: Mutex::new(Some(pending)),
            positions: config.positions,
        })
    }

    /// The bot's user name, as `GET /users/@me` reported it.
    pub fn bot_name(&self) -> &str {
        &self.identity.name
    }

    /// The bot's user id: what `<@id>` mentions of it contain.
    pub fn bot_id(&self) -> u64 {
        self.identity.id.get()
    }

    fn error(&self, error: CallError, text: Option<&str>) -> ChannelError {
        match error {
            CallError::Status(failure) => channel_error(&failure, text.map(|t| t.chars().count())),
            CallError::Network(reason) => ChannelError::Transient { reason },
        }
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        CHANNEL_NAME
    }

    fn account_id(&self) -> &str {
        &self.account_id
    }

    fn capabilities(&self) -> &ChannelCapabilities {
        &self.capabilities
    }

    async fn start(&self) -> Result<InboundStream, ChannelError> {
        let pending = self
            .take_pending()
            .ok_or(ChannelError::Rejected { reason: "the Discord channel was already started".to_owned() })?;
        Ok(self.launch(pending, false, self.positions.clone()))
    }

    /// One gateway connection per shard: when the core runs as several replicas, the one
    /// holding this lease connects. Ferry runs one shard.
    fn singleton_ingress(&self) -> Option<String> {
        Some(format!("{CHANNEL_NAME}:{}:shard:0", self.identity.id))
    }

    /// Connects a fresh gateway client (the first start uses the one `connect` built). The
    /// client is shut down when the returned stream is dropped, so a replica that lost the
    /// lease stops receiving. The cursor keeps the catch-up positions (the last message seen
    /// per channel), so the replica taking the shard over reads what was written in between.
    async fn start_singleton(&self, cursor: Arc<dyn IngressCursor>) -> Result<InboundStream, ChannelError> {
        let pending = match self.take_pending() {
            Some(pending) => pending,
            None => build_client(&self.gateway, &self.rest, &self.identity, &self.account_id)
                .await
                .map_err(|error| ChannelError::Transient { reason: error.to_string() })?,
        };
        Ok(self.launch(pending, true, Some(cursor)))
    }

    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        // Discord has no "plain" mode: plain text (notices, pairing codes) goes as is.
        let mut body = json!({
            // Users named in the text may be pinged; @everyone, @here and roles never.
            "allowed_mentions": {"parse": ["users"], "replied_user": true},
        });
        // A file alone has no content; a text message always has (an empty one is Discord's
        // to refuse).
        if !message.text.is_empty() || message.attachments.is_empty() {
            body["content"] = message.text.clone().into();
        }
        if let Some(reply_to) = &message.reply_to_message_id {
            body["message_reference"] =
                json!({"message_id": snowflake(reply_to, "message")?.to_string(), "fail_if_not_exists": false});
        }
        if let Some(key) = &message.idempotency_key {
            // A repeat of this send (a retry after a timeout or a dropped connection, or after
            // a restart) is answered with the message already created, not a second one.
            body["nonce"] = nonce_for(key).into();
            body["enforce_nonce"] = true.into();
        }
        let channel_id = channel_of(&message.target)?;
        let sent = if message.attachments.is_empty() {
            self.rest.create_message(channel_id, &body).await
        } else {
            // The same body, as `payload_json`, naming the files.
            let files = read_files(&message.attachments).await?;
            body["attachments"] = attachments_json(&files);
            self.rest.create_message_with_files(channel_id, &body, files).await
        };
        let sent = sent.map_err(|error| self.error(error, Some(&message.text)))?;
        let id = sent.get("id").and_then(Value::as_str).ok_or_else(|| ChannelError::Transient {
            reason: "Discord accepted the message but its answer has no id".to_owned(),
        })?;
        Ok(SentMessage { message_id: id.to_owned() })
    }

    async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        self.downloader.download(attachment).await
    }

    async fn edit(&self, message: &MessageRef, text: &str, _format: TextFormat) -> Result<(), ChannelError> {
        let id = MessageId::new(snowflake(&message.message_id, "message")?);
        // Discord answers 200 to an edit to the same text: "not modified" is success already.
        self.rest
            .edit_message(channel_of(&message.target)?, id, &json!({"content": text}))
            .await
            .map(drop)
            .map_err(|error| self.error(error, Some(text)))
    }

    async fn delete(&self, message: &MessageRef) -> Result<(), ChannelError> {
        let id = MessageId::new(snowflake(&message.message_id, "message")?);
        match self.rest.delete_message(channel_of(&message.target)?, id).await {
            Ok(()) => Ok(()),
            // Already gone: what a delete wants.
            Err(CallError::Status(failure))
                if failure.body.get("code").and_then(Value::as_i64) == Some(UNKNOWN_MESSAGE) =>
            {
                Ok(())
            }
            Err(error) => Err(self.error(error, None)),
        }
    }

    async fn typing(&self, target: &Target) -> Result<(), ChannelError> {
        self.rest.typing(channel_of(target)?).await.map_err(|error| self.error(error, None))
    }
}

impl DiscordChannel {
    fn take_pending(&self) -> Option<PendingStart> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }

    /// Runs `pending`'s gateway client and forwarder; the stream ends when the client stops.
    /// With `shut_down_on_drop`, dropping the stream also shuts the client down. Catch-up
    /// positions are kept in `positions`.
    fn launch(
        &self,
        pending: PendingStart,
        shut_down_on_drop: bool,
        positions: Option<Arc<dyn IngressCursor>>,
    ) -> InboundStream {
        let PendingStart { mut client, forwarder, messages } = pending;
        let (tx, rx) = mpsc::channel::<InboundDelivery>(INBOUND_BUFFER);
        let (client_gone, gone) = tokio::sync::oneshot::channel();
        tokio::spawn(forwarder.run(messages, tx, gone, positions));
        let account_id = self.account_id.clone();
        crate::shard_watch::restart_shards_after_panics(client.shard_manager.clone(), account_id.clone());
        let guard = shut_down_on_drop.then(|| ShutDownOnDrop(client.shard_manager.clone()));
        tokio::spawn(async move {
            // Dropped when the client stops, however it stops: the forwarder then ends the
            // inbound stream and the core reports the channel as stopped.
            let _client_gone = client_gone;
            // Serenity reconnects and resumes by itself; it returns only when the shard gives
            // up for good (the token was revoked, the intents are not enabled) or was shut down.
            match client.start().await {
                Ok(()) => info!(channel = CHANNEL_NAME, %account_id, "the Discord gateway client stopped"),
                Err(e) => error!(
                    channel = CHANNEL_NAME,
                    %account_id,
                    error = %e,
                    "the Discord gateway client stopped; no more messages are received (check the token and that the Message Content intent is enabled)"
                ),
            }
        });
        futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
            rx.recv().await.map(|delivery| (delivery, (rx, guard)))
        })
        .boxed()
    }
}

/// Shuts a gateway client down when dropped with the stream it feeds.
struct ShutDownOnDrop(Arc<ShardManager>);

impl Drop for ShutDownOnDrop {
    fn drop(&mut self) {
        let manager = self.0.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { manager.shutdown_all().await });
        }
    }
}

/// A gateway client for the bot, with the handler that queues its messages and the forwarder
/// that hands them to the core; nothing connects until it is started.
async fn build_client(
    settings: &GatewaySettings,
    rest: &Rest,
    identity: &BotIdentity,
    account_id: &str,
) -> Result<PendingStart, DiscordError> {
    let mut http = HttpBuilder::new(&settings.token).ratelimiter_disabled(true);
    if let Some(proxy) = &settings.proxy {
        http = http.proxy(proxy);
    }
    let (tx, messages) = mpsc::unbounded_channel();
    let handler = Handler::new(tx, account_id);
    let client = serenity::client::ClientBuilder::new_with_http(http.build(), intents())
        .event_handler(handler)
        .await
        .map_err(|e| DiscordError::Unreachable {
        api_url: settings.api_url.clone(),
        reason: format!("building the gateway client: {e}"),
    })?;
    if let Some(gateway_url) = &settings.gateway_url {
        *client.ws_url.lock().await = gateway_url.trim_end_matches('/').to_owned();
    }
    let forwarder = Forwarder::new(rest.clone(), identity.clone(), account_id.to_owned(), settings.group_dms);
    Ok(PendingStart { client, forwarder, messages })
}

/// The Discord channel a target means: the thread if there is one (threads are channels),
/// else the chat.
fn channel_of(target: &Target) -> Result<ChannelId, ChannelError> {
    let id = target.thread_id.as_deref().unwrap_or(&target.chat.id);
    snowflake(id, "channel").map(ChannelId::new)
}

/// A Discord id (a non-zero integer), or a refusal naming what it should have been.
fn snowflake(id: &str, what: &str) -> Result<u64, ChannelError> {
    id.trim()
        .parse::<NonZeroU64>()
        .map(NonZeroU64::get)
        .map_err(|_| ChannelError::Rejected { reason: format!("{id:?} is not a Discord {what} id") })
}

fn identity(me: &Value) -> Option<BotIdentity> {
    let id = me.get("id").and_then(Value::as_str)?.parse::<NonZeroU64>().ok()?;
    let name = me
        .get("global_name")
        .and_then(Value::as_str)
        .or_else(|| me.get("username").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    Some(BotIdentity { id: UserId::from(id), name })
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef};

    use super::*;

    fn target(chat: &str, thread: Option<&str>) -> Target {
        Target { chat: ChatRef::new(ChatKind::Channel, chat), thread_id: thread.map(str::to_owned) }
    }

    #[test]
    fn a_thread_target_posts_into_the_thread_channel() {
        assert_eq!(channel_of(&target("100", None)).unwrap(), ChannelId::new(100));
        assert_eq!(channel_of(&target("100", Some("200"))).unwrap(), ChannelId::new(200));
        assert!(matches!(channel_of(&target("general", None)), Err(ChannelError::Rejected { .. })));
        assert!(matches!(channel_of(&target("0", None)), Err(ChannelError::Rejected { .. })));
    }

    #[test]
    fn the_bot_identity_prefers_the_display_name() {
        let me = json!({"id": "42", "username": "ferry", "global_name": "Ferry", "bot": true});
        assert_eq!(identity(&me), Some(BotIdentity { id: UserId::new(42), name: "Ferry".into() }));
        assert_eq!(identity(&json!({"username": "x"})), None);
    }
}
