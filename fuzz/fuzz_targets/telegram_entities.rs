//! A Telegram message with arbitrary text and entities (offsets and lengths anywhere, past
//! the text, overflowing, cutting surrogate pairs), normalized
//! (`adapters/telegram/src/normalize.rs`).
//!
//! Asserts: never panics; whether the message mentions the bot is what an independent reading
//! of the entities says (spans sliced from the text's UTF-16 code units, a span that is not
//! whole characters of the text naming nobody); the text is passed on unchanged unless it
//! starts with a `/command@bot`.
#![no_main]

use ferry_telegram::fuzzing::{BOT_ID, BOT_USERNAME};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug)]
struct Input {
    text: String,
    entities: Vec<Entity>,
    /// The text as a photo's caption instead of a message's text.
    caption: bool,
    group: bool,
}

#[derive(Arbitrary, Debug)]
struct Entity {
    kind: Kind,
    offset: u16,
    length: u16,
    /// Replaces `offset` (huge values, overflow when added to the length).
    far_offset: Option<u64>,
    far_length: Option<u64>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Kind {
    Mention,
    BotCommand,
    TextMention { of_bot: bool },
    Bold,
    Hashtag,
    Url,
    Code,
}

impl Entity {
    fn offset(&self) -> u64 {
        self.far_offset.unwrap_or(u64::from(self.offset))
    }

    fn length(&self) -> u64 {
        self.far_length.unwrap_or(u64::from(self.length))
    }

    fn json(&self) -> Value {
        let mut entity = json!({"offset": self.offset(), "length": self.length()});
        let kind = match self.kind {
            Kind::Mention => "mention",
            Kind::BotCommand => "bot_command",
            Kind::TextMention { of_bot } => {
                let id = if of_bot { BOT_ID } else { 5 };
                entity["user"] = json!({"id": id, "is_bot": of_bot, "first_name": "someone"});
                "text_mention"
            }
            Kind::Bold => "bold",
            Kind::Hashtag => "hashtag",
            Kind::Url => "url",
            Kind::Code => "code",
        };
        entity["type"] = json!(kind);
        entity
    }

    /// Whether this entity names the bot, read independently of the adapter: the span as
    /// UTF-16 code units of the text, which must decode on its own.
    fn names_bot(&self, text: &str) -> bool {
        let units: Vec<u16> = text.encode_utf16().collect();
        let covered = || {
            let start = usize::try_from(self.offset()).ok()?;
            let end = start.checked_add(usize::try_from(self.length()).ok()?)?;
            String::from_utf16(units.get(start..end)?).ok()
        };
        match self.kind {
            Kind::Mention => covered()
                .and_then(|span| span.strip_prefix('@').map(str::to_owned))
                .is_some_and(|name| name.eq_ignore_ascii_case(BOT_USERNAME)),
            Kind::BotCommand => covered()
                .and_then(|span| span.split_once('@').map(|(_, name)| name.to_owned()))
                .is_some_and(|name| name.eq_ignore_ascii_case(BOT_USERNAME)),
            Kind::TextMention { of_bot } => of_bot,
            _ => false,
        }
    }
}

fuzz_target!(|input: Input| {
    let entities: Vec<Value> = input.entities.iter().map(Entity::json).collect();
    let chat = match input.group {
        true => json!({"id": -100123, "type": "supergroup", "title": "Team"}),
        false => json!({"id": 42, "type": "private", "first_name": "Alice"}),
    };
    let mut message = json!({
        "message_id": 7,
        "date": 1_700_000_000,
        "chat": chat,
        "from": {"id": 42, "is_bot": false, "first_name": "Alice"},
    });
    if input.caption {
        message["photo"] = json!([{"file_id": "p", "file_unique_id": "pu", "width": 1, "height": 1}]);
        message["caption"] = json!(input.text);
        message["caption_entities"] = json!(entities);
    } else {
        message["text"] = json!(input.text);
        message["entities"] = json!(entities);
    }
    let body = json!({"update_id": 1, "message": message}).to_string();

    let Some(outcome) = ferry_telegram::fuzzing::normalize_update(body.as_bytes()) else { return };
    let Ok(inbound) = outcome else {
        assert!(input.text.is_empty() && !input.caption, "{input:?} skipped: {outcome:?}");
        return;
    };
    let expected = input.entities.iter().any(|entity| entity.names_bot(&input.text));
    assert_eq!(inbound.mentions_bot, expected, "{input:?}");
    if !input.text.trim_start().starts_with('/') {
        assert_eq!(inbound.text, input.text);
    }
});
