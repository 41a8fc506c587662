//! Slack events → [`InboundMessage`] (SPEC §3.1, §10).
//!
//! Two event types carry messages: `message` (every message in a conversation the app is in,
//! given the `message.*` subscriptions) and `app_mention` (a message naming the bot, in a
//! channel). Both are normalized the same way and keyed by channel + `ts`, so a message that
//! arrives as both is one message to the core's dedupe and runs once.
//!
//! Slack-specific meaning is resolved here so the core never sees it:
//! - `channel_type` `im` is a DM, `mpim` a group, `channel`/`group` (public and private
//!   channels) a channel; `app_mention` has no `channel_type`, so the channel id's prefix
//!   decides (`D…` DM, `C…` channel) and a `G…` id is looked up with `conversations.info`;
//! - a reply in a thread has `thread_ts` (the parent's `ts`), which becomes `thread_id` and
//!   so a `:thread:<thread_ts>` session; the thread's parent itself is top-level;
//! - `<@BOT_USER_ID>` in the text is a mention;
//! - files shared with a message (`files[]`, also `subtype: file_share`) become attachments
//!   known by their `url_private_download` (the bytes are fetched only when the core asks,
//!   `download.rs`);
//! - edits, deletions, joins/leaves and other subtypes are skipped, and the bot's own
//!   messages are never taken in (other bots' are passed on flagged `is_bot`, for the core's
//!   `allow_bots` rule).

use ferry_channel::{Attachment, AttachmentKind, ChatKind, ChatRef, InboundMessage, Sender};
use slack_morphism::events::{SlackEventCallbackBody, SlackMessageEvent, SlackMessageEventType};
use slack_morphism::{SlackFile, SlackMessageContent, SlackMessageOrigin};

use crate::CHANNEL_NAME;

/// Who the bot is, from `auth.test`: what mentions and own messages are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    /// The bot user's id (`U…`).
    pub(crate) user_id: String,
    /// The bot's id (`B…`), which Slack puts on messages the bot posted.
    pub(crate) bot_id: Option<String>,
}

/// Why an event does not reach the core; logged at debug level.
pub(crate) type Skip = &'static str;

/// A normalized message, plus whether its conversation kind still needs a lookup.
#[derive(Debug)]
pub(crate) struct Normalized {
    pub(crate) message: InboundMessage,
    /// `true` when neither `channel_type` nor the id's prefix told a private channel from a
    /// group DM; the caller asks `conversations.info` (the kind given meanwhile is `Channel`).
    pub(crate) kind_unknown: bool,
}

/// Normalizes one event, or says why it is skipped. Never panics: an event that would make
/// the code below panic (a bug) is skipped and logged, so it can never stop the channel.
pub(crate) fn normalize(
    event: &SlackEventCallbackBody,
    bot: &BotIdentity,
    account_id: &str,
) -> Result<Normalized, Skip> {
    std::panic::catch_unwind(|| normalize_event(event, bot, account_id)).unwrap_or_else(|_| {
        tracing::warn!(channel = CHANNEL_NAME, "normalizing an event panicked; skipped");
        Err(PANICKED)
    })
}

/// Why an event whose normalizing panicked is skipped.
pub(crate) const PANICKED: Skip = "event Ferry failed to read (a bug: normalizing it panicked)";

fn normalize_event(event: &SlackEventCallbackBody, bot: &BotIdentity, account_id: &str) -> Result<Normalized, Skip> {
    match event {
        SlackEventCallbackBody::Message(message) => normalize_message(message, bot, account_id),
        SlackEventCallbackBody::AppMention(mention) => {
            let text = mention.content.text.clone().unwrap_or_default();
            let sender = Sender { id: mention.user.0.clone(), name: None, is_bot: false };
            if sender.id == bot.user_id {
                return Err("the bot's own message");
            }
            let mut normalized = build(&mention.origin, &mention.channel.0, None, sender, text, account_id);
            normalized.message.mentions_bot = true;
            normalized.message.attachments = attachments(&mention.content);
            Ok(normalized)
        }
        _ => Err("event type Ferry does not handle"),
    }
}

fn normalize_message(event: &SlackMessageEvent, bot: &BotIdentity, account_id: &str) -> Result<Normalized, Skip> {
    let is_bot = match &event.subtype {
        None | Some(SlackMessageEventType::FileShare | SlackMessageEventType::ThreadBroadcast) => false,
        Some(SlackMessageEventType::MeMessage) => false,
        Some(SlackMessageEventType::BotMessage) => true,
        Some(SlackMessageEventType::MessageChanged) => return Err("message edit"),
        Some(SlackMessageEventType::MessageDeleted) => return Err("message deletion"),
        Some(SlackMessageEventType::ChannelJoin | SlackMessageEventType::ChannelLeave) => {
            return Err("join or leave");
        }
        Some(_) => return Err("service message subtype"),
    };
    if event.hidden == Some(true) {
        return Err("hidden message");
    }
    let sender = &event.sender;
    let own = sender.user.as_ref().is_some_and(|user| user.0 == bot.user_id)
        || sender.bot_id.as_ref().zip(bot.bot_id.as_ref()).is_some_and(|(id, own)| &id.0 == own);
    if own {
        return Err("the bot's own message");
    }
    let id = sender
        .user
        .as_ref()
        .map(|user| user.0.clone())
        .or_else(|| sender.bot_id.as_ref().map(|bot| bot.0.clone()))
        .ok_or("message without a sender")?;
    let name = sender
        .user_profile
        .as_ref()
        .and_then(|profile| profile.display_name.clone().filter(|n| !n.is_empty()).or(profile.real_name.clone()))
        .or_else(|| sender.username.clone());
    let channel = event.origin.channel.as_ref().ok_or("message without a channel")?;
    let content = event.content.as_ref();
    let text = content.and_then(|content| content.text.clone()).unwrap_or_default();
    let attachments = content.map(attachments).unwrap_or_default();
    if text.trim().is_empty() && attachments.is_empty() {
        return Err("message with neither text nor files");
    }
    let channel_type = event.origin.channel_type.as_ref().map(|kind| kind.0.as_str());
    let sender = Sender { id, name, is_bot: is_bot || sender.bot_id.is_some() };
    let mut normalized = build(&event.origin, &channel.0, channel_type, sender, text, account_id);
    normalized.message.mentions_bot = mentions(&normalized.message.text, bot);
    normalized.message.attachments = attachments;
    Ok(normalized)
}

fn build(
    origin: &SlackMessageOrigin,
    channel: &str,
    channel_type: Option<&str>,
    sender: Sender,
    text: String,
    account_id: &str,
) -> Normalized {
    let kind = chat_kind(channel, channel_type);
    let chat = ChatRef::new(kind.unwrap_or(ChatKind::Channel), channel);
    let mut message = InboundMessage::new(CHANNEL_NAME, account_id, chat, sender, origin.ts.0.clone(), text);
    // The parent of a thread carries its own ts as thread_ts on some events: it is top-level.
    message.thread_id =
        origin.thread_ts.as_ref().filter(|thread| thread.0 != origin.ts.0).map(|thread| thread.0.clone());
    Normalized { message, kind_unknown: kind.is_none() }
}

/// The conversation kind from `channel_type`, or else from the id's prefix; `None` when
/// only `conversations.info` can tell (a `G…` id: a private channel or a group DM).
pub(crate) fn chat_kind(channel: &str, channel_type: Option<&str>) -> Option<ChatKind> {
    match channel_type {
        Some("im") => Some(ChatKind::Direct),
        Some("mpim") => Some(ChatKind::Group),
        Some("channel" | "group") => Some(ChatKind::Channel),
        _ => match channel.chars().next() {
            Some('D') => Some(ChatKind::Direct),
            Some('C') => Some(ChatKind::Channel),
            _ => None,
        },
    }
}

/// `<@U123>` or `<@U123|name>` naming the bot.
fn mentions(text: &str, bot: &BotIdentity) -> bool {
    let plain = format!("<@{}>", bot.user_id);
    let labelled = format!("<@{}|", bot.user_id);
    text.contains(&plain) || text.contains(&labelled)
}

fn attachments(content: &SlackMessageContent) -> Vec<Attachment> {
    content.files.iter().flatten().map(attachment).collect()
}

/// One shared file. The reference is the URL the bytes are downloaded from
/// (`url_private_download`, else `url_private`), or the file id when Slack sent no URL
/// (a Slack Connect file to be looked up with `files.info`).
///
/// Size and pixel dimensions stay unknown here: Slack sends `size` and `original_w` /
/// `original_h`, but slack-morphism's `SlackFile` (2.31) does not read them, and the event
/// reaches the adapter already parsed into it. The download's `Content-Length` gives the
/// core the size before the first byte.
fn attachment(file: &SlackFile) -> Attachment {
    let mime_type = file.mimetype.as_ref().map(|mime| mime.0.clone());
    let kind = AttachmentKind::from_mime(mime_type.as_deref());
    let url = file.url_private_download.as_ref().or(file.url_private.as_ref());
    Attachment {
        kind,
        reference: url.map(ToString::to_string).unwrap_or_else(|| file.id.0.clone()),
        mime_type,
        file_name: file.name.clone(),
        size_bytes: None,
        path: None,
        dimensions: None,
        uploaded: None,
    }
}

#[cfg(test)]
mod tests;
