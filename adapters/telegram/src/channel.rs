//! [`TelegramChannel`]: the `Channel` implementation — start-up, inbound wiring, and the
//! outbound calls (`sendMessage`, `editMessageText`, `deleteMessage`, `sendChatAction`; files
//! go through [`crate::media_send`], downloads through [`crate::download`]).
//!
//! Each outbound call is exactly one Bot API request. No teloxide `Throttle` or retry
//! adaptor is used: the core's outbound scheduler owns rate budgets and retries, driven by
//! the [`ChannelError`] classification in [`crate::error`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_channel::{
    Attachment, Channel, ChannelCapabilities, ChannelError, Download, InboundDelivery, InboundStream, IngressCursor,
    MessageRef, OutboundMessage, SentMessage, Target, TextFormat,
};
use futures::StreamExt;
use teloxide::payloads::{EditMessageTextSetters, SendChatActionSetters, SendMessageSetters};
use teloxide::requests::Requester;
use teloxide::types::{BotCommand, ChatAction, ChatId, MessageId, ParseMode, Recipient, ReplyParameters, ThreadId};
use teloxide::{Bot, RequestError};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::{TelegramConfig, TelegramMode};
use crate::error::{TelegramError, channel_error, is_not_modified, redact};
use crate::media_send::{self, Envelope};
use crate::normalize::{BotIdentity, GENERAL_TOPIC};
use crate::polling::Poller;
use crate::webhook::{self, WebhookState};
use crate::{CHANNEL_NAME, capabilities};

/// Inbound deliveries buffered between the adapter and the core: one `getUpdates` batch.
const INBOUND_BUFFER: usize = 100;

/// The HTTP timeout of outbound calls (teloxide's default). The long-poll client gets
/// the poll timeout plus [`POLL_TIMEOUT_MARGIN`] instead.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(17);

/// The HTTP timeout of uploads and downloads, which move up to 50 MB (uploads) or 20 MB
/// (downloads) in one request: at 2 Mbit/s a 50 MB upload takes about 200 s.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(300);

/// How much longer than the long-poll timeout the polling client waits for an answer,
/// so a poll that returns empty on time is never cut off as a network error.
const POLL_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// The commands shown in Telegram's command menu (`setMyCommands`), handled by the core
/// (SPEC §3.6).
const COMMANDS: [(&str, &str); 5] = [
    ("new", "Start a new session"),
    ("reset", "Reset the session"),
    ("stop", "Stop the current run and clear the queue"),
    ("status", "Show the session status"),
    ("queue", "Show or change the queue mode"),
];

/// A connected Telegram bot account. See the [crate documentation](crate).
pub struct TelegramChannel {
    account_id: String,
    token: String,
    capabilities: ChannelCapabilities,
    identity: BotIdentity,
    /// For outbound calls, with an ordinary request timeout.
    bot: Bot,
    /// For uploads and downloads, with [`MEDIA_TIMEOUT`].
    media_bot: Bot,
    /// In webhook mode, what the first [`Channel::start`] takes; a second start finds `None`.
    inbound: Mutex<Option<PendingStart>>,
    /// In polling mode, the poll loop each start runs a copy of.
    poller: Option<Poller>,
    /// Set while a poll loop runs: a bot has one `getUpdates` at a time.
    polling: Arc<AtomicBool>,
    /// The webhook's side of the inbound channel, in webhook mode.
    webhook: Option<Arc<WebhookState>>,
}

/// The receiving end of the webhook's inbound channel (the webhook router feeds it).
struct PendingStart {
    rx: mpsc::Receiver<InboundDelivery>,
}

/// The deliveries arriving on `rx`, as a stream.
fn receiving(rx: mpsc::Receiver<InboundDelivery>) -> InboundStream {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|delivery| (delivery, rx)) }).boxed()
}

impl TelegramChannel {
    /// Starts a poll loop (polling mode), unless one runs: it ends when the returned stream
    /// is dropped, or by itself when `getUpdates` keeps failing (the stream ends then), and
    /// the channel can then be started again.
    fn start_polling(&self, cursor: Option<Arc<dyn IngressCursor>>) -> Result<InboundStream, ChannelError> {
        let Some(poller) = self.poller.clone() else {
            return Err(ChannelError::Rejected { reason: "the Telegram channel is not in polling mode".to_owned() });
        };
        if self.polling.swap(true, Ordering::AcqRel) {
            return Err(ChannelError::Rejected { reason: "the Telegram channel is already polling".to_owned() });
        }
        let (tx, rx) = mpsc::channel(INBOUND_BUFFER);
        let polling = self.polling.clone();
        let account_id = self.account_id.clone();
        tokio::spawn(async move {
            let stopped = poller.run(&tx, cursor).await;
            // Free for the next start before the stream ends, so whoever sees it end can start
            // the channel again (the core's supervisor starts a new one).
            polling.store(false, Ordering::Release);
            drop(tx);
            if let Err(error) = stopped {
                warn!(channel = CHANNEL_NAME, %account_id, %error, "Telegram polling stopped; the channel's inbound ends and the channel is started again");
            }
        });
        Ok(receiving(rx))
    }

    /// Checks the token with `getMe`, registers the command menu, and prepares the inbound
    /// side; nothing is received until [`Channel::start`].
    ///
    /// A refused token is [`TelegramError::Unauthorized`]; an unreachable API is
    /// [`TelegramError::Unreachable`]. A failing `setMyCommands` is only logged: the menu is
    /// a convenience, the bot works without it.
    pub async fn connect(config: TelegramConfig) -> Result<Self, TelegramError> {
        if config.token.trim().is_empty() {
            return Err(TelegramError::InvalidConfig { reason: "channels.telegram.bot_token is empty".to_owned() });
        }
        if let TelegramMode::Webhook { secret } = &config.mode
            && secret.is_empty()
        {
            return Err(TelegramError::InvalidConfig {
                reason: "webhook mode needs channels.telegram.webhook_secret".to_owned(),
            });
        }
        let bot = build_bot(&config, REQUEST_TIMEOUT)?;
        let me = bot.get_me().await.map_err(|error| match error {
            RequestError::Api(teloxide::ApiError::InvalidToken) => {
                TelegramError::Unauthorized { reason: "getMe answered Unauthorized".to_owned() }
            }
            other => TelegramError::Unreachable {
                api_url: config.api_url.clone(),
                reason: redact(&other.to_string(), &config.token),
            },
        })?;
        let identity = BotIdentity::from_me(&me);
        info!(channel = CHANNEL_NAME, account_id = %config.account_id, bot = %identity.username, "connected to Telegram");

        let commands = COMMANDS.iter().map(|(command, description)| BotCommand::new(*command, *description));
        if let Err(error) = bot.set_my_commands(commands).await {
            warn!(
                channel = CHANNEL_NAME,
                account_id = %config.account_id,
                error = %redact(&error.to_string(), &config.token),
                "setMyCommands failed; the command menu may be missing or stale, commands still work"
            );
        }

        let media_bot = build_bot(&config, MEDIA_TIMEOUT)?;
        let (tx, rx) = mpsc::channel(INBOUND_BUFFER);
        let (poller, webhook) = match &config.mode {
            TelegramMode::Polling => {
                let poller = Poller {
                    bot: build_bot(&config, config.poll_timeout + POLL_TIMEOUT_MARGIN)?,
                    token: config.token.clone(),
                    identity: identity.clone(),
                    account_id: config.account_id.clone(),
                    timeout: config.poll_timeout,
                };
                drop(tx);
                (Some(poller), None)
            }
            TelegramMode::Webhook { secret } => {
                let state = WebhookState {
                    secret: secret.clone(),
                    identity: identity.clone(),
                    account_id: config.account_id.clone(),
                    tx,
                };
                (None, Some(Arc::new(state)))
            }
        };
        Ok(Self {
            account_id: config.account_id,
            token: config.token,
            capabilities: capabilities(),
            identity,
            media_bot,
            bot,
            inbound: Mutex::new(webhook.is_some().then_some(PendingStart { rx })),
            poller,
            polling: Arc::default(),
            webhook,
        })
    }

    /// The bot's username (without `@`), as `getMe` reported it.
    pub fn bot_username(&self) -> &str {
        &self.identity.username
    }

    /// In webhook mode, the routes the gateway mounts on its HTTP server: `POST
    /// /telegram-webhook` ([`WEBHOOK_PATH`](crate::WEBHOOK_PATH)). `None` in polling mode.
    ///
    /// Updates posted before [`Channel::start`] wait (up to the ack timeout) for the core.
    pub fn webhook_router(&self) -> Option<axum::Router> {
        self.webhook.clone().map(webhook::router)
    }

    fn error(&self, error: &RequestError, text: Option<&str>) -> ChannelError {
        channel_error(error, text.map(|t| t.chars().count()), &self.token)
    }

    /// Sends `message` as the file at `path` with its text as the caption: one upload, the
    /// same placement (topic, reply) and error classification as a text send.
    async fn send_file(
        &self,
        message: &OutboundMessage,
        attachment: &Attachment,
        path: &std::path::Path,
    ) -> Result<SentMessage, ChannelError> {
        let envelope = Envelope {
            recipient: recipient(&message.target)?,
            thread: thread(&message.target, ThreadUse::Send)?,
            reply: reply_parameters(message)?,
            message,
        };
        let sent = media_send::send_file(&self.media_bot, &envelope, attachment, path)
            .await?
            .map_err(|error| self.error(&error, Some(&message.text)))?;
        Ok(SentMessage { message_id: sent.id.0.to_string() })
    }
}

#[async_trait]
impl Channel for TelegramChannel {
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
        if self.poller.is_some() {
            return self.start_polling(None);
        }
        let pending = self
            .inbound
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .ok_or(ChannelError::Rejected { reason: "the Telegram channel was already started".to_owned() })?;
        Ok(receiving(pending.rx))
    }

    /// In polling mode only one process may poll a bot: replicas of the core take turns.
    fn singleton_ingress(&self) -> Option<String> {
        self.poller.as_ref().map(|_| format!("{CHANNEL_NAME}:{}", self.identity.id))
    }

    async fn start_singleton(&self, cursor: Arc<dyn IngressCursor>) -> Result<InboundStream, ChannelError> {
        if self.poller.is_none() {
            return self.start().await;
        }
        self.start_polling(Some(cursor))
    }

    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        if let Some(attachment) = message.attachments.first() {
            if message.attachments.len() > 1 {
                warn!(
                    channel = CHANNEL_NAME,
                    account_id = %self.account_id,
                    chat_id = %message.target.chat.id,
                    count = message.attachments.len(),
                    "only one attachment is sent per message; the others are dropped"
                );
            }
            match &attachment.path {
                Some(path) => return self.send_file(&message, attachment, path).await,
                None => warn!(
                    channel = CHANNEL_NAME,
                    account_id = %self.account_id,
                    chat_id = %message.target.chat.id,
                    attachment = %attachment.reference,
                    "an outbound attachment without a local file cannot be uploaded; sending the text only"
                ),
            }
        }
        let mut request = self.bot.send_message(recipient(&message.target)?, &message.text);
        if message.format == TextFormat::Markup {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(thread) = thread(&message.target, ThreadUse::Send)? {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = reply_parameters(&message)? {
            request = request.reply_parameters(reply);
        }
        let sent = request.await.map_err(|error| self.error(&error, Some(&message.text)))?;
        Ok(SentMessage { message_id: sent.id.0.to_string() })
    }

    async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        crate::download::download(&self.media_bot, attachment).await
    }

    async fn edit(&self, message: &MessageRef, text: &str, format: TextFormat) -> Result<(), ChannelError> {
        let mut request =
            self.bot.edit_message_text(recipient(&message.target)?, message_id(&message.message_id)?, text);
        if format == TextFormat::Markup {
            request = request.parse_mode(ParseMode::Html);
        }
        match request.await {
            Ok(_) => Ok(()),
            Err(error) if is_not_modified(&error) => {
                debug!(channel = CHANNEL_NAME, account_id = %self.account_id, "edit not modified: already shows this text");
                Ok(())
            }
            Err(error) => Err(self.error(&error, Some(text))),
        }
    }

    async fn delete(&self, message: &MessageRef) -> Result<(), ChannelError> {
        self.bot
            .delete_message(recipient(&message.target)?, message_id(&message.message_id)?)
            .await
            .map(drop)
            .map_err(|error| self.error(&error, None))
    }

    async fn typing(&self, target: &Target) -> Result<(), ChannelError> {
        let mut request = self.bot.send_chat_action(recipient(target)?, ChatAction::Typing);
        if let Some(thread) = thread(target, ThreadUse::ChatAction)? {
            request = request.message_thread_id(thread);
        }
        request.await.map(drop).map_err(|error| self.error(&error, None))
    }
}

fn build_bot(config: &TelegramConfig, timeout: Duration) -> Result<Bot, TelegramError> {
    // A trailing slash would make teloxide request `…//bot<token>/…`.
    let api_url = config.api_url.trim_end_matches('/');
    let url = url::Url::parse(api_url).map_err(|error| TelegramError::InvalidConfig {
        reason: format!("channels.telegram.api_url {api_url:?} is not a URL: {error}"),
    })?;
    let client = teloxide::net::default_reqwest_settings()
        .timeout(timeout)
        .build()
        .map_err(|error| TelegramError::InvalidConfig { reason: format!("cannot build the HTTP client: {error}") })?;
    Ok(Bot::with_client(config.token.clone(), client).set_api_url(url))
}

/// The chat of a target: Telegram chat ids are signed integers; `@channelname` also works.
fn recipient(target: &Target) -> Result<Recipient, ChannelError> {
    let id = target.chat.id.trim();
    if let Ok(id) = id.parse::<i64>() {
        return Ok(Recipient::Id(ChatId(id)));
    }
    if id.starts_with('@') && id.len() > 1 {
        return Ok(Recipient::ChannelUsername(id.to_owned()));
    }
    Err(ChannelError::Rejected { reason: format!("{id:?} is not a Telegram chat id") })
}

/// Threads a reply to the message it answers, and still sends it if that message was
/// deleted meanwhile.
fn reply_parameters(message: &OutboundMessage) -> Result<Option<ReplyParameters>, ChannelError> {
    let Some(reply_to) = &message.reply_to_message_id else { return Ok(None) };
    Ok(Some(ReplyParameters { allow_sending_without_reply: Some(true), ..ReplyParameters::new(message_id(reply_to)?) }))
}

fn message_id(id: &str) -> Result<MessageId, ChannelError> {
    id.trim()
        .parse::<i32>()
        .map(MessageId)
        .map_err(|_| ChannelError::Rejected { reason: format!("{id:?} is not a Telegram message id") })
}

/// Whether a thread id is for a message or for a chat action: Telegram rejects the General
/// topic's id on sends but needs it to show "typing…" in General.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ThreadUse {
    Send,
    ChatAction,
}

fn thread(target: &Target, usage: ThreadUse) -> Result<Option<ThreadId>, ChannelError> {
    match target.thread_id.as_deref() {
        None => Ok(None),
        Some(GENERAL_TOPIC) if usage == ThreadUse::Send => Ok(None),
        Some(id) => message_id(id).map(|id| Some(ThreadId(id))),
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef};

    use super::*;

    fn target(chat: &str, thread: Option<&str>) -> Target {
        Target { chat: ChatRef::new(ChatKind::Group, chat), thread_id: thread.map(str::to_owned) }
    }

    #[test]
    fn chat_ids_are_signed_integers_or_channel_usernames() {
        assert_eq!(recipient(&target("-100123", None)).unwrap(), Recipient::Id(ChatId(-100123)));
        assert_eq!(recipient(&target("@news", None)).unwrap(), Recipient::ChannelUsername("@news".into()));
        assert!(matches!(recipient(&target("alice", None)), Err(ChannelError::Rejected { .. })));
    }

    #[test]
    fn the_general_topic_is_omitted_on_sends_but_kept_for_typing() {
        let general = target("-100", Some("1"));
        assert_eq!(thread(&general, ThreadUse::Send).unwrap(), None);
        assert_eq!(thread(&general, ThreadUse::ChatAction).unwrap(), Some(ThreadId(MessageId(1))));
        let topic = target("-100", Some("50"));
        assert_eq!(thread(&topic, ThreadUse::Send).unwrap(), Some(ThreadId(MessageId(50))));
        assert_eq!(thread(&target("-100", None), ThreadUse::ChatAction).unwrap(), None);
    }

    #[test]
    fn a_trailing_slash_on_the_api_url_is_dropped() {
        let mut config = TelegramConfig::new("1:T");
        config.api_url = "http://127.0.0.1:9/prefix/".to_owned();
        let bot = build_bot(&config, REQUEST_TIMEOUT).unwrap();
        assert_eq!(bot.api_url().as_str(), "http://127.0.0.1:9/prefix");
    }
}
