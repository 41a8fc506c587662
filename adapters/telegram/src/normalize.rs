//! Telegram updates → [`InboundMessage`] (SPEC §3.1, §10).
//!
//! Only new messages in private chats, groups and supergroups reach the core. Edits,
//! channel posts, service messages (joins, pins, topic creation) and every other update
//! kind are skipped here, with a debug log naming why.
//!
//! Telegram-specific meaning is resolved here so the core never sees it:
//! - a private chat's id is the user's id, so it doubles as the peer id of DM session keys;
//! - forum topics become `thread_id`; a forum's General topic has no thread id on the wire
//!   and is reported as `"1"`, the id Telegram gives it (sends omit it again, see
//!   [`GENERAL_TOPIC`]);
//! - `@botname`, a text mention of the bot and `/command@botname` count as mentions;
//!   `/command@botname` is rewritten to `/command` so the core's command parser sees it;
//! - a reply to the bot counts, but not the implicit "reply" to a topic's creation message
//!   that Telegram attaches to every message in a forum topic;
//! - photos, documents, voice notes, audio, videos, video notes, animations and stickers
//!   become [`Attachment`](ferry_channel::Attachment)s (see `attachments`), each referring to
//!   its `file_id` for [`Channel::download`](ferry_channel::Channel::download).

use ferry_channel::{ChatKind, ChatRef, InboundMessage, Sender};
use teloxide::types::{
    ChatKind as TgChatKind, Me, Message, MessageEntity, MessageEntityKind, MessageKind, PublicChatKind, Update,
    UpdateKind, User, UserId,
};

use crate::CHANNEL_NAME;

mod attachments;

use attachments::attachments;

/// The thread id of a forum's General topic. Telegram rejects it as `message_thread_id` on
/// sends (they go to General without one) but expects it for `sendChatAction`.
pub const GENERAL_TOPIC: &str = "1";

/// Who the bot is, from `getMe`: what mentions and replies are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub(crate) id: UserId,
    /// Without the `@`.
    pub(crate) username: String,
}

impl BotIdentity {
    pub(crate) fn from_me(me: &Me) -> Self {
        Self { id: me.user.id, username: me.user.username.clone().unwrap_or_default() }
    }
}

/// Why an update does not reach the core; see [`log_skipped`].
pub(crate) type Skip = &'static str;

/// A message none of whose kinds teloxide could read (a negative entity offset, say).
const UNREADABLE_MESSAGE: Skip = "message Ferry's Telegram client cannot read (malformed fields)";
/// An update teloxide could not read at all.
const UNREADABLE_UPDATE: Skip = "update Ferry's Telegram client cannot parse";
/// An update whose normalizing panicked: a bug in Ferry.
const PANICKED: Skip = "update Ferry failed to read (a bug: normalizing it panicked)";

/// Logs a skipped update: at debug level when skipping is normal (an edit, a service
/// message), as a warning when the update was malformed or hit a bug, so an operator sees
/// messages that were lost that way.
pub(crate) fn log_skipped(account_id: &str, update_id: u32, skip: Skip) {
    if [UNREADABLE_MESSAGE, UNREADABLE_UPDATE, PANICKED].contains(&skip) {
        tracing::warn!(channel = CHANNEL_NAME, account_id, update_id, reason = skip, "update skipped");
    } else {
        tracing::debug!(channel = CHANNEL_NAME, account_id, update_id, reason = skip, "update skipped");
    }
}

/// Normalizes one update, or says why it is skipped. Never panics: an update that would
/// make the code below panic (a bug) is skipped like any other, so its offset is confirmed
/// and it cannot stop the channel or come back after every restart.
pub(crate) fn normalize(update: &Update, bot: &BotIdentity, account_id: &str) -> Result<InboundMessage, Skip> {
    std::panic::catch_unwind(|| normalize_update(update, bot, account_id)).unwrap_or(Err(PANICKED))
}

fn normalize_update(update: &Update, bot: &BotIdentity, account_id: &str) -> Result<InboundMessage, Skip> {
    match &update.kind {
        UpdateKind::Message(message) => normalize_message(message, bot, account_id),
        UpdateKind::EditedMessage(_) => Err("edited message"),
        UpdateKind::ChannelPost(_) | UpdateKind::EditedChannelPost(_) => Err("channel post"),
        UpdateKind::Error(_) => Err(UNREADABLE_UPDATE),
        _ => Err("update kind Ferry does not handle"),
    }
}

fn normalize_message(message: &Message, bot: &BotIdentity, account_id: &str) -> Result<InboundMessage, Skip> {
    match &message.kind {
        MessageKind::Common(_) => {}
        // What teloxide makes of a message none of whose kinds it could read, such as one
        // with a negative entity offset: not a service message, a malformed one.
        MessageKind::Empty {} => return Err(UNREADABLE_MESSAGE),
        _ => return Err("service message"),
    }
    let kind = match &message.chat.kind {
        TgChatKind::Private(_) => ChatKind::Direct,
        TgChatKind::Public(public) => match public.kind {
            PublicChatKind::Group | PublicChatKind::Supergroup(_) => ChatKind::Group,
            PublicChatKind::Channel(_) => return Err("channel message"),
        },
    };
    let from = message.from.as_ref().ok_or("message without a sender")?;

    // The raw entities, resolved here: teloxide's `parse_entities` slices the text at the
    // offsets Telegram sent and panics on one out of range, which stopped the channel.
    let (text, entities) = match message.text() {
        Some(text) => (text, message.entities()),
        None => (message.caption().unwrap_or_default(), message.caption_entities()),
    };
    let entities = entities.unwrap_or_default();
    let attachments = attachments(message);
    if text.is_empty() && attachments.is_empty() {
        return Err("message with neither text nor a supported attachment (location, contact, poll, …)");
    }

    let chat = ChatRef::new(kind, message.chat.id.0.to_string());
    let mut inbound = InboundMessage::new(CHANNEL_NAME, account_id, chat, sender(from), message.id.0.to_string(), text);
    inbound.thread_id = topic(message);
    inbound.mentions_bot = entities.iter().any(|entity| mentions(text, entity, bot));
    if let Some(command) = strip_own_command_suffix(text, bot) {
        inbound.text = command;
    }
    inbound.reply_to_bot = replies_to_bot(message, bot);
    inbound.attachments = attachments;
    Ok(inbound)
}

fn sender(user: &User) -> Sender {
    let name = match (user.first_name.trim(), user.last_name.as_deref().map(str::trim)) {
        ("", None | Some("")) => user.username.clone(),
        (first, None | Some("")) => Some(first.to_owned()),
        ("", Some(last)) => Some(last.to_owned()),
        (first, Some(last)) => Some(format!("{first} {last}")),
    };
    Sender { id: user.id.0.to_string(), name, is_bot: user.is_bot }
}

/// The forum topic a message belongs to: its thread id in a topic, General in a forum's
/// General topic, none outside forums (reply threads in plain groups are not topics).
fn topic(message: &Message) -> Option<String> {
    if message.is_topic_message {
        return message.thread_id.map(|thread| thread.0.0.to_string());
    }
    let is_forum = matches!(
        &message.chat.kind,
        TgChatKind::Public(public) if matches!(&public.kind, PublicChatKind::Supergroup(s) if s.is_forum)
    );
    is_forum.then(|| GENERAL_TOPIC.to_owned())
}

fn mentions(text: &str, entity: &MessageEntity, bot: &BotIdentity) -> bool {
    // An entity whose span is not in the text (a hostile or broken update) names nobody.
    let covered = || entity_text(text, entity.offset, entity.length);
    match &entity.kind {
        MessageEntityKind::Mention => covered()
            .and_then(|mention| mention.strip_prefix('@'))
            .is_some_and(|name| name.eq_ignore_ascii_case(&bot.username)),
        MessageEntityKind::TextMention { user } => user.id == bot.id,
        MessageEntityKind::BotCommand => {
            covered().and_then(command_target).is_some_and(|name| name.eq_ignore_ascii_case(&bot.username))
        }
        _ => false,
    }
}

/// The part of `text` an entity covers. Telegram counts `offset` and `length` in UTF-16
/// code units; `None` when the span runs past the text or cuts a character in two.
fn entity_text(text: &str, offset: usize, length: usize) -> Option<&str> {
    let end = offset.checked_add(length)?;
    // The byte index where `target` UTF-16 units of the text end, if that is between two
    // characters of it.
    let byte_at = |target: usize| -> Option<usize> {
        let mut units = 0;
        for (byte, character) in text.char_indices() {
            if units >= target {
                return (units == target).then_some(byte);
            }
            units += character.len_utf16();
        }
        (units == target).then_some(text.len())
    };
    text.get(byte_at(offset)?..byte_at(end)?)
}

/// The bot a `/command@botname` is addressed to.
fn command_target(command: &str) -> Option<&str> {
    command.split_once('@').map(|(_, name)| name)
}

/// `/new@ferry_bot rest` → `/new rest` when the bot is `ferry_bot`; `None` otherwise.
fn strip_own_command_suffix(text: &str, bot: &BotIdentity) -> Option<String> {
    let first = text.split_whitespace().next()?;
    let (command, name) = first.strip_prefix('/')?.split_once('@')?;
    if command.is_empty() || !name.eq_ignore_ascii_case(&bot.username) {
        return None;
    }
    let rest = &text[text.find(first)? + first.len()..];
    Some(format!("/{command}{rest}"))
}

fn replies_to_bot(message: &Message, bot: &BotIdentity) -> bool {
    let Some(replied) = message.reply_to_message() else { return false };
    // In a forum topic every message "replies" to the topic's creation message.
    let topic_root = message.is_topic_message
        && (replied.forum_topic_created().is_some() || message.thread_id.is_some_and(|t| t.0 == replied.id));
    !topic_root && replied.from.as_ref().is_some_and(|from| from.id == bot.id)
}

#[cfg(test)]
mod tests;
