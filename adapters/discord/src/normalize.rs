//! Discord messages → [`InboundMessage`] (SPEC §3.1, §10).
//!
//! Discord-specific meaning is resolved here so the core never sees it:
//! - a DM is a `direct` chat whose id is the DM channel's id (sends go there); the peer of DM
//!   session keys is the author's user id;
//! - a guild text channel is a `channel` chat with the channel's id, which is what the
//!   `guilds.<id>.channels` allowlist lists, and the guild's id as `space_id` (a guild
//!   allowlisted without a channel list admits all its channels);
//! - a thread is its own channel on Discord; here it is the parent channel's chat with the
//!   thread's id as `thread_id`, so it gets a `:thread:<id>` session and the parent's access
//!   settings, and replies are posted into the thread;
//! - `<@bot_id>` and the nickname form `<@!bot_id>` count as mentions and are cut from the
//!   text (the model sees what was said to it, not the markup of the address);
//! - a reply to one of the bot's messages counts as addressing it;
//! - each attachment is referenced by its signed CDN `url` (what `download.rs` fetches), with
//!   its kind from its `content_type`, its name, size and, for images and videos, pixel size;
//! - system messages (joins, pins, thread creation notices) and empty messages are skipped.

use ferry_channel::{Attachment, AttachmentKind, ChatKind, ChatRef, InboundMessage, Sender};
use serenity::model::channel::{Message, MessageType};
use serenity::model::id::UserId;

use crate::CHANNEL_NAME;

/// Who the bot is, from `GET /users/@me`: what mentions and replies are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub(crate) id: UserId,
    pub(crate) name: String,
}

/// Where a message was written, as the adapter resolved its channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A one-to-one DM channel.
    Direct,
    /// A group DM (several users, no guild).
    GroupDm,
    /// A guild channel; `thread` is set when the message's channel is a thread of `channel`.
    Guild { channel: String, thread: Option<String> },
}

/// Why a message does not reach the core; logged at debug level.
pub(crate) type Skip = &'static str;

/// Normalizes one message written in `place`, or says why it is skipped. Never panics: a
/// message that would make the code below panic (a bug) is skipped and logged, so it can
/// never stop the channel.
pub(crate) fn normalize(
    message: &Message,
    place: &Place,
    bot: &BotIdentity,
    account_id: &str,
    group_dms: bool,
) -> Result<InboundMessage, Skip> {
    std::panic::catch_unwind(|| normalize_message(message, place, bot, account_id, group_dms)).unwrap_or_else(|_| {
        tracing::warn!(
            channel = CHANNEL_NAME,
            message_id = message.id.get(),
            "normalizing a message panicked; skipped"
        );
        Err(PANICKED)
    })
}

/// Why a message whose normalizing panicked is skipped.
pub(crate) const PANICKED: Skip = "message Ferry failed to read (a bug: normalizing it panicked)";

fn normalize_message(
    message: &Message,
    place: &Place,
    bot: &BotIdentity,
    account_id: &str,
    group_dms: bool,
) -> Result<InboundMessage, Skip> {
    if !matches!(message.kind, MessageType::Regular | MessageType::InlineReply) {
        return Err("system message");
    }
    if message.author.id == bot.id {
        return Err("the bot's own message");
    }
    let (chat, thread_id) = match place {
        Place::Direct => (ChatRef::new(ChatKind::Direct, message.channel_id.to_string()), None),
        Place::GroupDm if group_dms => (ChatRef::new(ChatKind::Group, message.channel_id.to_string()), None),
        Place::GroupDm => return Err("group DM (not enabled)"),
        Place::Guild { channel, thread } => (ChatRef::new(ChatKind::Channel, channel.clone()), thread.clone()),
    };
    let attachments = attachments(message);
    let (text, mentioned) = strip_bot_mentions(&message.content, bot.id);
    if text.is_empty() && attachments.is_empty() && !mentioned {
        return Err("message with neither text nor an attachment (sticker, embed, …)");
    }

    let mut inbound =
        InboundMessage::new(CHANNEL_NAME, account_id, chat, sender(message), message.id.to_string(), text);
    inbound.thread_id = thread_id;
    if matches!(place, Place::Guild { .. }) {
        inbound.space_id = message.guild_id.map(|guild| guild.to_string());
    }
    inbound.mentions_bot = mentioned || message.mentions.iter().any(|user| user.id == bot.id);
    inbound.reply_to_bot = replies_to_bot(message, bot);
    inbound.attachments = attachments;
    inbound.received_at = chrono_time(message);
    Ok(inbound)
}

fn sender(message: &Message) -> Sender {
    let author = &message.author;
    let nick = message.member.as_ref().and_then(|member| member.nick.clone());
    let name = nick.or_else(|| author.global_name.clone()).unwrap_or_else(|| author.name.clone());
    Sender { id: author.id.to_string(), name: Some(name), is_bot: author.bot }
}

/// `content` without the bot's `<@id>` / `<@!id>` mentions (and the space after each), and whether
/// there was one. A message that is nothing but the mention keeps its text empty.
fn strip_bot_mentions(content: &str, bot: UserId) -> (String, bool) {
    let plain = format!("<@{bot}>");
    let nickname = format!("<@!{bot}>");
    if !content.contains(&plain) && !content.contains(&nickname) {
        return (content.to_owned(), false);
    }
    // The space after a mention goes with it; everything else (code indentation) stays.
    // Until none is left: cutting one can join its neighbours into another
    // (`<<@id>@id>`). Each pass that changes anything shortens the text, so this ends.
    let mut stripped = content.to_owned();
    loop {
        let before = stripped.len();
        for token in [&nickname, &plain] {
            stripped = stripped.replace(&format!("{token} "), "").replace(token.as_str(), "");
        }
        if stripped.len() == before {
            break;
        }
    }
    (stripped.trim().to_owned(), true)
}

fn replies_to_bot(message: &Message, bot: &BotIdentity) -> bool {
    message.referenced_message.as_ref().is_some_and(|replied| replied.author.id == bot.id)
}

fn chrono_time(message: &Message) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(message.timestamp.unix_timestamp(), 0).unwrap_or_else(chrono::Utc::now)
}

fn attachments(message: &Message) -> Vec<Attachment> {
    message
        .attachments
        .iter()
        .map(|attachment| {
            let mime = attachment.content_type.clone();
            let kind = AttachmentKind::from_mime(mime.as_deref());
            Attachment {
                kind,
                reference: attachment.url.clone(),
                mime_type: mime,
                file_name: Some(attachment.filename.clone()),
                size_bytes: Some(u64::from(attachment.size)),
                path: None,
                dimensions: attachment.width.zip(attachment.height),
                uploaded: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
