//! What the fake Telegram remembers: chats and their messages, the queue of unconfirmed
//! updates, the call log, scripted faults (see `faults.rs`) and flood-control counters.
//!
//! Inbound messages are built here in the shape Telegram sends them (a `Message` inside an
//! `Update`), so the handle's injection helpers and the Bot API methods share one store: a
//! reply to a bot message embeds the message the bot really sent, and an edit finds the message
//! a user really wrote.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::faults::Faults;
use super::files::Files;
use super::rate_limit::{Limiter, RateLimits};
use super::{BotCommand, Call, ChatAction, SentMessage, TgUser};

/// The first `update_id` handed out. Far from message ids, so mixing the two up shows.
const FIRST_UPDATE_ID: i64 = 1000;

/// Chat ids at or below this are supergroups (`-100…`), as Telegram numbers them.
const SUPERGROUP_ID_LIMIT: i64 = -1_000_000_000_000;

/// The General topic of a forum: its messages carry no `message_thread_id`.
pub(crate) const GENERAL_TOPIC_ID: i64 = 1;

/// Update kinds Telegram leaves out unless `allowed_updates` names them.
const OPT_IN_UPDATES: &[&str] = &["chat_member", "message_reaction", "message_reaction_count"];

/// One message in a chat, as Telegram would return it.
pub(crate) struct StoredMessage {
    pub(crate) json: Value,
    /// Set when the bot sent the message; what tests read back through `sent()`.
    pub(crate) sent: Option<SentMessage>,
}

pub(crate) struct ChatState {
    /// The `Chat` object embedded in every message of this chat.
    pub(crate) json: Value,
    /// Forum topics known to exist (created by injected topic messages).
    pub(crate) topics: BTreeSet<i64>,
    next_message_id: i64,
    /// Messages that still exist, by id; deleted ones are removed.
    pub(crate) messages: BTreeMap<i64, StoredMessage>,
}

impl ChatState {
    pub(crate) fn is_forum(&self) -> bool {
        self.json.get("is_forum").and_then(Value::as_bool).unwrap_or(false)
    }

    pub(crate) fn peek_message_id(&self) -> i64 {
        self.next_message_id
    }

    pub(crate) fn take_message_id(&mut self) -> i64 {
        let id = self.next_message_id;
        self.next_message_id += 1;
        id
    }
}

/// Everything behind the fake's mutex.
pub(crate) struct State {
    pub(crate) bot: TgUser,
    pub(crate) chats: HashMap<i64, ChatState>,
    next_update_id: i64,
    /// Updates not yet confirmed by an `offset` above their id, oldest first.
    pub(crate) pending: VecDeque<Value>,
    /// The kinds the last `getUpdates` that named `allowed_updates` asked for.
    pub(crate) allowed_updates: Option<Vec<String>>,
    /// Bumped by each `getUpdates`; a waiting poll that is no longer the newest gets a 409.
    pub(crate) poll_generation: u64,
    pub(crate) webhook: Option<Webhook>,
    pub(crate) calls: Vec<Call>,
    /// Scripted one-shot faults and storms.
    pub(crate) faults: Faults,
    pub(crate) rate_limits: Option<RateLimits>,
    pub(crate) limiter: Limiter,
    pub(crate) rate_limited: usize,
    pub(crate) chat_actions: Vec<ChatAction>,
    pub(crate) commands: Vec<BotCommand>,
    /// `(chat_id, message_id)` of every bot message in send order, for `sent()`.
    pub(crate) sent_order: Vec<(i64, i64)>,
    /// Every file a user or the bot sent, by `file_id`.
    pub(crate) files: Files,
}

pub(crate) struct Webhook {
    pub(crate) url: String,
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs() as i64).unwrap_or_default()
}

/// The kind of an update: its one field besides `update_id`.
pub(crate) fn update_kind(update: &Value) -> Option<&str> {
    update.as_object()?.keys().map(String::as_str).find(|key| *key != "update_id")
}

/// Mention and command entities Telegram attaches to a user's text, offsets in UTF-16 units.
pub(crate) fn detect_entities(text: &str) -> Vec<Value> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut entities = Vec::new();
    let mut utf16 = 0;
    let mut index = 0;
    let word = |ch: char| ch.is_ascii_alphanumeric() || ch == '_';
    while index < chars.len() {
        let (_, ch) = chars[index];
        let at_word_start = index == 0 || !word(chars[index - 1].1);
        if (ch == '@' || (ch == '/' && index == 0)) && at_word_start {
            let mut end = index + 1;
            while end < chars.len() && (word(chars[end].1) || (ch == '/' && chars[end].1 == '@')) {
                end += 1;
            }
            let length = end - index; // ASCII only, so chars == UTF-16 units
            let kind = if ch == '@' { "mention" } else { "bot_command" };
            if (kind == "mention" && (6..=33).contains(&length)) || (kind == "bot_command" && length > 1) {
                entities.push(json!({ "type": kind, "offset": utf16, "length": length }));
                utf16 += length;
                index = end;
                continue;
            }
        }
        utf16 += ch.len_utf16();
        index += 1;
    }
    entities
}

impl State {
    pub(crate) fn new(bot: TgUser) -> Self {
        Self {
            bot,
            chats: HashMap::new(),
            next_update_id: FIRST_UPDATE_ID,
            pending: VecDeque::new(),
            allowed_updates: None,
            poll_generation: 0,
            webhook: None,
            calls: Vec::new(),
            faults: Faults::default(),
            rate_limits: Some(RateLimits::telegram()),
            limiter: Limiter::default(),
            rate_limited: 0,
            chat_actions: Vec::new(),
            commands: Vec::new(),
            sent_order: Vec::new(),
            files: Files::default(),
        }
    }

    /// The lowest update id not yet confirmed: the `offset` a caught-up client would send.
    pub(crate) fn current_offset(&self) -> i64 {
        self.pending.front().and_then(|update| update["update_id"].as_i64()).unwrap_or(self.next_update_id)
    }

    /// Forgets updates below `offset`; a negative offset keeps only the last `-offset` updates.
    pub(crate) fn confirm(&mut self, offset: i64) {
        if offset < 0 {
            let keep = offset.unsigned_abs() as usize;
            while self.pending.len() > keep {
                self.pending.pop_front();
            }
            return;
        }
        while self.pending.front().is_some_and(|update| update["update_id"].as_i64().unwrap_or(0) < offset) {
            self.pending.pop_front();
        }
    }

    /// Up to `limit` pending updates of the allowed kinds. Updates of other kinds are dropped,
    /// as Telegram never stores them for this bot.
    pub(crate) fn deliverable(&mut self, limit: usize) -> Vec<Value> {
        let allowed = self.allowed_updates.clone();
        self.pending.retain(|update| {
            let kind = update_kind(update).unwrap_or_default();
            match &allowed {
                Some(allowed) if !allowed.is_empty() => allowed.iter().any(|name| name == kind),
                _ => !OPT_IN_UPDATES.contains(&kind),
            }
        });
        self.pending.iter().take(limit).cloned().collect()
    }

    /// Queues an update, giving it the next `update_id` unless it brings its own.
    pub(crate) fn push_update(&mut self, mut update: Value) -> i64 {
        let id = match update.get("update_id").and_then(Value::as_i64) {
            Some(id) => id,
            None => {
                let id = self.next_update_id;
                if let Some(object) = update.as_object_mut() {
                    object.insert("update_id".into(), id.into());
                }
                id
            }
        };
        self.next_update_id = self.next_update_id.max(id + 1);
        self.pending.push_back(update);
        id
    }

    /// The chat with this id, created on first use: a private chat with `user` for positive ids,
    /// a supergroup for `-100…` ids, a basic group otherwise.
    pub(crate) fn chat_for(&mut self, chat_id: i64, user: &TgUser) -> &mut ChatState {
        self.chats.entry(chat_id).or_insert_with(|| {
            let json = if chat_id > 0 {
                let mut chat = json!({ "id": chat_id, "type": "private", "first_name": user.first_name });
                if let Some(username) = &user.username {
                    chat["username"] = username.clone().into();
                }
                chat
            } else if chat_id <= SUPERGROUP_ID_LIMIT {
                json!({ "id": chat_id, "type": "supergroup", "title": format!("Ferry test supergroup {chat_id}") })
            } else {
                json!({ "id": chat_id, "type": "group", "title": format!("Ferry test group {chat_id}") })
            };
            ChatState { json, topics: BTreeSet::new(), next_message_id: 1, messages: BTreeMap::new() }
        })
    }

    /// Stores a new message from `from` in `chat_id` and returns its JSON; `fill` adds the
    /// content fields (text, caption, service fields).
    pub(crate) fn new_message(
        &mut self,
        chat_id: i64,
        from: &TgUser,
        fill: impl FnOnce(&mut ChatState, &mut Map<String, Value>),
    ) -> Value {
        let chat = self.chat_for(chat_id, from);
        let mut message = Map::new();
        message.insert("message_id".into(), chat.take_message_id().into());
        message.insert("from".into(), from.to_json());
        message.insert("chat".into(), chat.json.clone());
        message.insert("date".into(), unix_now().into());
        fill(chat, &mut message);
        let message = Value::Object(message);
        let id = message["message_id"].as_i64().unwrap_or_default();
        chat.messages.insert(id, StoredMessage { json: message.clone(), sent: None });
        message
    }

    /// Makes `chat_id` a forum supergroup that has topic `thread_id`.
    pub(crate) fn ensure_topic(&mut self, chat_id: i64, thread_id: i64, from: &TgUser) {
        let chat = self.chat_for(chat_id, from);
        chat.json["type"] = "supergroup".into();
        chat.json["is_forum"] = true.into();
        if chat.topics.insert(thread_id) {
            // Creating a topic is itself a message whose id becomes the thread id.
            chat.next_message_id = chat.next_message_id.max(thread_id + 1);
        }
    }

    /// A copy of a stored message fit to embed as `reply_to_message` (which never nests).
    pub(crate) fn reply_copy(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        let mut copy = self.chats.get(&chat_id)?.messages.get(&message_id)?.json.clone();
        if let Some(object) = copy.as_object_mut() {
            object.remove("reply_to_message");
        }
        Some(copy)
    }

    /// Counts a message to `chat_id` against the flood limits, or returns `retry_after`.
    pub(crate) fn admit(&mut self, chat_id: i64) -> Result<(), u64> {
        let Some(limits) = &self.rate_limits else { return Ok(()) };
        self.limiter.admit(limits, chat_id, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mentions_and_commands_in_utf16_units() {
        let entities = detect_entities("/start@ferry_test_bot hi 😀 @ferry_test_bot and a@b.c");
        assert_eq!(
            entities,
            vec![
                json!({ "type": "bot_command", "offset": 0, "length": 21 }),
                json!({ "type": "mention", "offset": 28, "length": 15 }),
            ]
        );
    }

    #[test]
    fn offsets_confirm_and_negative_offsets_keep_the_tail() {
        let mut state = State::new(TgUser::new(1, "bot"));
        for _ in 0..4 {
            state.push_update(json!({ "message": {} }));
        }
        assert_eq!(state.current_offset(), 1000);
        state.confirm(1002);
        assert_eq!(state.current_offset(), 1002);
        state.confirm(-1);
        assert_eq!(state.current_offset(), 1003);
        state.confirm(1004);
        assert_eq!(state.current_offset(), 1004);
    }
}
