//! [`SlackChannel`]: the `Channel` implementation — start-up (`auth.test`), inbound wiring,
//! the outbound calls (`chat.postMessage`, `chat.update`, `chat.delete`), and the lookup of
//! a sent message by its idempotency key (`lookup.rs`), which `chat.postMessage` records in
//! the message's metadata. Files go through `download.rs` (inbound) and `upload.rs` (a
//! message with an attachment, its id, and finding it again).
//!
//! Each outbound call is exactly one Web API request. slack-morphism's own rate controller
//! is not used: the core's outbound scheduler owns rate budgets and retries (it waits out a
//! 429's `Retry-After`), driven by the [`ChannelError`] classification in [`crate::error`].

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry_channel::catch_up::PositionKeeper;
use ferry_channel::{
    Attachment, Channel, ChannelCapabilities, ChannelError, Download, InboundDelivery, InboundStream, MessageRef,
    OutboundMessage, SentMessage, TextFormat,
};
use futures::StreamExt;
use slack_morphism::api::{
    SlackApiAppsConnectionOpenRequest, SlackApiChatDeleteRequest, SlackApiChatPostMessageRequest,
    SlackApiChatUpdateRequest, SlackApiFilesInfoRequest,
};
use slack_morphism::errors::SlackClientError;
use slack_morphism::{SlackApiToken, SlackApiTokenValue, SlackChannelId, SlackFileId, SlackMessageContent, SlackTs};
use tokio::sync::mpsc;
use tracing::info;

use crate::catch_up::ts_order;
use crate::client::{self, Client};
use crate::config::{ReplyToMode, SlackConfig, SlackMode};
use crate::download::{self, Downloads};
use crate::error::{SlackError, channel_error, is_auth_code};
use crate::events::{self, EventsState};
use crate::hosts::SlackHosts;
use crate::inbound::Inbound;
use crate::lookup;
use crate::normalize::BotIdentity;
use crate::upload::{self, FileMessage, Uploads};
use crate::{CHANNEL_NAME, capabilities, socket};

/// Inbound deliveries buffered between the adapter and the core.
const INBOUND_BUFFER: usize = 100;

/// A connected Slack app. See the [crate documentation](crate).
pub struct SlackChannel {
    account_id: String,
    capabilities: ChannelCapabilities,
    client: Arc<Client>,
    token: SlackApiToken,
    inbound: Arc<Inbound>,
    /// What the first [`Channel::start`] takes; a second start finds `None`.
    pending: Mutex<Option<PendingStart>>,
    /// The Events API route's state, in HTTP mode.
    events: Option<Arc<EventsState>>,
    /// `auth.test`'s answer, for logs.
    team: String,
    /// Users' files, fetched with the bot token from Slack's hosts only.
    downloads: Downloads,
    /// Messages with files, and the files uploaded for recent idempotency keys.
    uploads: Uploads,
}

/// The receiving end of the inbound channel, plus the app token Socket Mode connects with
/// (in HTTP mode the events route feeds the channel).
struct PendingStart {
    rx: mpsc::Receiver<InboundDelivery>,
    socket: Option<SlackApiToken>,
}

impl SlackChannel {
    /// Checks the bot token with `auth.test` (and, in Socket Mode, the app token with
    /// `apps.connections.open`) and prepares the inbound side; nothing is received until
    /// [`Channel::start`].
    ///
    /// A refused token is [`SlackError::Unauthorized`]; an unreachable API is
    /// [`SlackError::Unreachable`]; both concern this channel alone.
    pub async fn connect(config: SlackConfig) -> Result<Self, SlackError> {
        let invalid = |reason: &str| SlackError::InvalidConfig { reason: reason.to_owned() };
        if config.bot_token.trim().is_empty() {
            return Err(invalid("channels.slack.bot_token (or SLACK_BOT_TOKEN) is empty"));
        }
        match &config.mode {
            SlackMode::Socket { app_token } if app_token.trim().is_empty() => {
                return Err(invalid("Socket Mode needs channels.slack.app_token (or SLACK_APP_TOKEN)"));
            }
            SlackMode::Http { signing_secret } if signing_secret.is_empty() => {
                return Err(invalid("HTTP mode needs channels.slack.signing_secret (or SLACK_SIGNING_SECRET)"));
            }
            _ => {}
        }
        let client = Arc::new(client::build(&config.api_url)?);
        let token = api_token(&config.bot_token);
        let api_url = url::Url::parse(config.api_url.trim_end_matches('/')).map_err(|error| {
            SlackError::InvalidConfig { reason: format!("channels.slack.api_url is not a URL: {error}") }
        })?;
        let hosts = SlackHosts::of(&api_url);
        let files_http = download::file_client(&hosts)?;
        let downloads = Downloads::new(files_http.clone(), hosts.clone(), &config.bot_token)?;
        let uploads = Uploads::new(files_http, hosts);
        let unreachable = |error: &SlackClientError| SlackError::Unreachable {
            api_url: config.api_url.clone(),
            reason: error.to_string(),
        };
        let auth = client.open_session(&token).auth_test().await.map_err(|error| match &error {
            SlackClientError::ApiError(api) if is_auth_code(&api.code) => {
                SlackError::Unauthorized { code: api.code.clone() }
            }
            other => unreachable(other),
        })?;
        let identity =
            BotIdentity { user_id: auth.user_id.0.clone(), bot_id: auth.bot_id.as_ref().map(|id| id.0.clone()) };

        let socket = match &config.mode {
            SlackMode::Socket { app_token } => {
                let app_token = api_token(app_token);
                // Proves the app token before the listener starts retrying it in the background.
                client
                    .open_session(&app_token)
                    .apps_connections_open(&SlackApiAppsConnectionOpenRequest::new())
                    .await
                    .map_err(|error| match &error {
                        SlackClientError::ApiError(api) if is_auth_code(&api.code) => SlackError::InvalidConfig {
                            reason: format!(
                                "Slack refused the app token (check channels.slack.app_token / SLACK_APP_TOKEN, \
                                 scope connections:write): {}",
                                api.code
                            ),
                        },
                        other => unreachable(other),
                    })?;
                Some(app_token)
            }
            SlackMode::Http { .. } => None,
        };

        // Catch-up positions matter only in Socket Mode, which loses what is written while no
        // socket is open; they are read before the first `hello` asks for them.
        let positions = match (&config.mode, config.positions.clone()) {
            (SlackMode::Socket { .. }, Some(cursor)) => PositionKeeper::load(cursor, ts_order, CHANNEL_NAME).await,
            _ => PositionKeeper::in_memory(ts_order),
        };
        let (tx, rx) = mpsc::channel(INBOUND_BUFFER);
        let inbound = Arc::new(Inbound::new(
            config.account_id.clone(),
            identity.clone(),
            tx,
            client.clone(),
            token.clone(),
            positions,
        ));
        let events = match &config.mode {
            SlackMode::Http { signing_secret } => Some(Arc::new(EventsState::new(signing_secret, inbound.clone()))),
            SlackMode::Socket { .. } => None,
        };
        info!(channel = CHANNEL_NAME, account_id = %config.account_id, team = %auth.team, bot_user = %identity.user_id, "connected to Slack");
        let mut capabilities = capabilities();
        capabilities.supports_reply_to = config.reply_to_mode != ReplyToMode::Off;
        Ok(Self {
            account_id: config.account_id,
            capabilities,
            client,
            token,
            inbound,
            pending: Mutex::new(Some(PendingStart { rx, socket })),
            events,
            team: auth.team,
            downloads,
            uploads,
        })
    }

    /// The bot user's id (`U…`), as `auth.test` reported it: what `<@…>` mentions name.
    pub fn bot_user_id(&self) -> &str {
        &self.inbound.bot.user_id
    }

    /// The workspace's name, as `auth.test` reported it.
    pub fn team(&self) -> &str {
        &self.team
    }

    /// In HTTP mode, the routes the gateway mounts on its HTTP server: `POST /slack/events`
    /// ([`EVENTS_PATH`](crate::EVENTS_PATH)). `None` in Socket Mode.
    ///
    /// Events posted before [`Channel::start`] wait (up to the ack timeout) for the core.
    pub fn events_router(&self) -> Option<axum::Router> {
        self.events.clone().map(events::router)
    }

    fn session(
        &self,
    ) -> slack_morphism::SlackClientSession<'_, slack_morphism::prelude::SlackClientHyperHttpsConnector> {
        self.client.open_session(&self.token)
    }
}

#[async_trait]
impl Channel for SlackChannel {
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
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .ok_or(ChannelError::Rejected { reason: "the Slack channel was already started".to_owned() })?;
        if let Some(app_token) = pending.socket {
            tokio::spawn(socket::run(self.client.clone(), app_token, self.inbound.clone()));
        }
        let stream =
            futures::stream::unfold(pending.rx, |mut rx| async move { rx.recv().await.map(|delivery| (delivery, rx)) });
        Ok(stream.boxed())
    }

    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        // A message from a thread is answered in it; otherwise a thread is started under the
        // message answered only when the core asks (reply_to_mode first/all). Never invented.
        let thread = thread_of(&message).map(str::to_owned);
        let text = slack_text(&message.text, message.format);
        if !message.attachments.is_empty() {
            // The text goes as the file's comment, in the share message (upload.rs).
            let files = FileMessage {
                channel: &message.target.chat.id,
                thread: thread.as_deref(),
                comment: text,
                attachments: &message.attachments,
                idempotency_key: message.idempotency_key.as_deref(),
            };
            return self.uploads.send(&self.session(), &files).await;
        }
        let length = text.chars().count();
        let mut content = content(text);
        if let Some(key) = &message.idempotency_key {
            // What `find_sent` looks for if this call's outcome is never known.
            content = content.with_metadata(lookup::metadata(key));
        }
        let request = SlackApiChatPostMessageRequest::new(SlackChannelId(message.target.chat.id.clone()), content)
            .opt_thread_ts(thread.map(SlackTs));
        let sent =
            self.session().chat_post_message(&request).await.map_err(|error| channel_error(&error, Some(length)))?;
        Ok(SentMessage { message_id: sent.ts.0 })
    }

    async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        let reference = attachment.reference.as_str();
        if reference.starts_with("https://") || reference.starts_with("http://") {
            return self.downloads.fetch(reference, attachment.mime_type.as_deref()).await;
        }
        // A file shared without a URL (Slack Connect's `file_access: check_file_info`) is
        // known by its id: `files.info` gives its URL.
        let request = SlackApiFilesInfoRequest::new(SlackFileId(reference.to_owned()));
        let info = self.session().files_info(&request).await.map_err(|error| channel_error(&error, None))?;
        let url = info.file.url_private_download.or(info.file.url_private).ok_or_else(|| ChannelError::Rejected {
            reason: format!("Slack has no download URL for file {reference}"),
        })?;
        self.downloads.fetch(url.as_str(), attachment.mime_type.as_deref()).await
    }

    async fn edit(&self, message: &MessageRef, text: &str, format: TextFormat) -> Result<(), ChannelError> {
        if upload::is_file_id(&message.message_id) {
            return Err(ChannelError::Rejected {
                reason: "a file whose share message Slack had not reported cannot be edited".to_owned(),
            });
        }
        let text = slack_text(text, format);
        let length = text.chars().count();
        let request = SlackApiChatUpdateRequest::new(
            SlackChannelId(message.target.chat.id.clone()),
            content(text),
            SlackTs(message.message_id.clone()),
        );
        // Slack answers an update to the same text with ok: there is no "not modified".
        self.session().chat_update(&request).await.map(drop).map_err(|error| channel_error(&error, Some(length)))
    }

    async fn delete(&self, message: &MessageRef) -> Result<(), ChannelError> {
        if upload::is_file_id(&message.message_id) {
            return self.uploads.delete(&self.session(), &message.message_id).await;
        }
        let request = SlackApiChatDeleteRequest::new(
            SlackChannelId(message.target.chat.id.clone()),
            SlackTs(message.message_id.clone()),
        );
        self.session().chat_delete(&request).await.map(drop).map_err(|error| channel_error(&error, None))
    }

    async fn upload_ahead(&self, mut message: OutboundMessage) -> Result<OutboundMessage, ChannelError> {
        self.uploads.upload_ahead(&self.session(), &mut message.attachments).await?;
        Ok(message)
    }

    async fn find_sent(&self, message: &OutboundMessage) -> Result<Option<SentMessage>, ChannelError> {
        let Some(key) = message.idempotency_key.as_deref() else { return Ok(None) };
        if !message.attachments.is_empty() {
            let files = FileMessage {
                channel: &message.target.chat.id,
                thread: thread_of(message),
                comment: String::new(),
                attachments: &message.attachments,
                idempotency_key: Some(key),
            };
            return self.uploads.find_sent(&self.session(), key, &files).await;
        }
        // Where `send` posted it: its thread, or the thread under the message it answers.
        let query = lookup::Query { channel: &message.target.chat.id, thread: thread_of(message), key };
        let found = lookup::find_sent(&self.session(), &self.inbound.bot, &query)
            .await
            .map_err(|error| channel_error(&error, None))?;
        Ok(found.map(|ts| SentMessage { message_id: ts }))
    }
}

/// The thread a message is posted in: its target's, or (a reply threaded to the message it
/// answers, `reply_to_mode` first/all) the one under that message.
fn thread_of(message: &OutboundMessage) -> Option<&str> {
    message.target.thread_id.as_deref().or(message.reply_to_message_id.as_deref())
}

fn api_token(token: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue(token.trim().to_owned()))
}

fn content(text: String) -> SlackMessageContent {
    SlackMessageContent::new().with_text(text)
}

/// The text as Slack should read it: mrkdwn from the core's formatter goes as is; plain
/// text has Slack's three control characters escaped so `<`, `>` and `&` show literally.
fn slack_text(text: &str, format: TextFormat) -> String {
    match format {
        TextFormat::Markup => text.to_owned(),
        TextFormat::Plain => text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_escaped_but_mrkdwn_is_sent_as_is() {
        assert_eq!(slack_text("a < b & c > d", TextFormat::Plain), "a &lt; b &amp; c &gt; d");
        let mrkdwn = "*bold* <https://x.y|label> <@U123>";
        assert_eq!(slack_text(mrkdwn, TextFormat::Markup), mrkdwn);
    }
}
