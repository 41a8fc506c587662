use ferry_channel::AttachmentKind;
use serde_json::{Value, json};

use super::*;

const BOT_ID: u64 = 999;

fn bot() -> BotIdentity {
    BotIdentity { id: UserId(BOT_ID), username: "ferry_bot".to_owned() }
}

fn alice() -> Value {
    json!({"id": 42, "is_bot": false, "first_name": "Alice", "last_name": "Liddell", "username": "alice"})
}

fn private_chat() -> Value {
    json!({"id": 42, "type": "private", "first_name": "Alice"})
}

fn group_chat() -> Value {
    json!({"id": -100123, "type": "supergroup", "title": "Team"})
}

fn forum_chat() -> Value {
    json!({"id": -100777, "type": "supergroup", "title": "Forum", "is_forum": true})
}

fn message(chat: Value, extra: Value) -> Value {
    let mut message = json!({"message_id": 7, "date": 1_700_000_000, "chat": chat, "from": alice()});
    for (key, value) in extra.as_object().unwrap() {
        message[key] = value.clone();
    }
    message
}

fn update(kind: &str, message: Value) -> Update {
    let mut update = json!({"update_id": 1});
    update[kind] = message;
    parse(&update)
}

/// As on the wire: teloxide's `Update` parser needs borrowed keys, which `from_value` lacks.
fn parse(update: &Value) -> Update {
    serde_json::from_str(&update.to_string()).expect("a valid update")
}

fn normalized(message: Value) -> InboundMessage {
    normalize(&update("message", message), &bot(), "default").expect("normalized")
}

fn skipped(update: Update) -> Skip {
    normalize(&update, &bot(), "default").expect_err("skipped")
}

#[test]
fn a_private_message_is_a_direct_chat_keyed_by_the_user() {
    let inbound = normalized(message(private_chat(), json!({"text": "hello"})));
    assert_eq!(inbound.channel, "telegram");
    assert_eq!(inbound.account_id, "default");
    assert_eq!(inbound.chat, ChatRef::new(ChatKind::Direct, "42"));
    assert_eq!(inbound.thread_id, None);
    assert_eq!(inbound.sender, Sender { id: "42".into(), name: Some("Alice Liddell".into()), is_bot: false });
    assert_eq!(inbound.message_id, "7");
    assert_eq!(inbound.text, "hello");
    assert!(!inbound.mentions_bot && !inbound.reply_to_bot);
    assert!(inbound.attachments.is_empty() && inbound.request.is_none());
}

#[test]
fn groups_and_supergroups_are_group_chats() {
    let inbound = normalized(message(group_chat(), json!({"text": "hi all"})));
    assert_eq!(inbound.chat, ChatRef::new(ChatKind::Group, "-100123"));
    let basic = json!({"id": -555, "type": "group", "title": "Old group"});
    assert_eq!(normalized(message(basic, json!({"text": "x"}))).chat, ChatRef::new(ChatKind::Group, "-555"));
}

#[test]
fn a_sender_without_a_name_falls_back_to_the_username_and_bots_are_flagged() {
    let from = json!({"id": 5, "is_bot": true, "first_name": "", "username": "other_bot"});
    let inbound = normalized(message(group_chat(), json!({"text": "beep", "from": from})));
    assert_eq!(inbound.sender, Sender { id: "5".into(), name: Some("other_bot".into()), is_bot: true });
}

#[test]
fn an_at_mention_of_the_bot_counts_case_insensitively_after_non_ascii_text() {
    // "héllo 👋 " is 9 UTF-16 units before the mention; offsets are in UTF-16.
    let text = "héllo 👋 @Ferry_Bot what's up";
    let entities = json!([{"type": "mention", "offset": 9, "length": 10}]);
    let inbound = normalized(message(group_chat(), json!({"text": text, "entities": entities})));
    assert!(inbound.mentions_bot);
}

#[test]
fn a_mention_of_someone_else_does_not_count() {
    let entities = json!([{"type": "mention", "offset": 0, "length": 10}]);
    let inbound = normalized(message(group_chat(), json!({"text": "@other_bot hi", "entities": entities})));
    assert!(!inbound.mentions_bot);
}

#[test]
fn a_text_mention_of_the_bots_id_counts() {
    let entities = json!([{"type": "text_mention", "offset": 0, "length": 5, "user": {"id": BOT_ID, "is_bot": true, "first_name": "Ferry"}}]);
    let inbound = normalized(message(group_chat(), json!({"text": "Ferry, help", "entities": entities})));
    assert!(inbound.mentions_bot);
}

#[test]
fn a_command_addressed_to_the_bot_is_a_mention_and_loses_the_suffix() {
    let entities = json!([{"type": "bot_command", "offset": 0, "length": 16}]);
    let inbound = normalized(message(group_chat(), json!({"text": "/queue@ferry_bot steer", "entities": entities})));
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "/queue steer");
    // Another bot's command is left alone.
    let entities = json!([{"type": "bot_command", "offset": 0, "length": 14}]);
    let inbound = normalized(message(group_chat(), json!({"text": "/new@other_bot", "entities": entities})));
    assert!(!inbound.mentions_bot);
    assert_eq!(inbound.text, "/new@other_bot");
}

#[test]
fn a_reply_to_the_bot_counts_and_a_reply_to_someone_else_does_not() {
    let bots_message = json!({"message_id": 3, "date": 1_700_000_000, "chat": group_chat(), "text": "earlier answer",
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Ferry", "username": "ferry_bot"}});
    let inbound = normalized(message(group_chat(), json!({"text": "and?", "reply_to_message": bots_message})));
    assert!(inbound.reply_to_bot);
    let users_message =
        json!({"message_id": 4, "date": 1_700_000_000, "chat": group_chat(), "text": "x", "from": alice()});
    let inbound = normalized(message(group_chat(), json!({"text": "and?", "reply_to_message": users_message})));
    assert!(!inbound.reply_to_bot);
}

#[test]
fn a_forum_topic_message_carries_its_thread_and_its_implicit_reply_is_not_to_the_bot() {
    // The bot created the topic; every message in it "replies" to the creation message.
    let creation = json!({"message_id": 50, "date": 1_700_000_000, "chat": forum_chat(),
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Ferry", "username": "ferry_bot"},
        "message_thread_id": 50, "is_topic_message": true,
        "forum_topic_created": {"name": "Support", "icon_color": 7322096}});
    let inbound = normalized(message(
        forum_chat(),
        json!({"text": "in a topic", "message_thread_id": 50, "is_topic_message": true, "reply_to_message": creation}),
    ));
    assert_eq!(inbound.chat, ChatRef::new(ChatKind::Group, "-100777"));
    assert_eq!(inbound.thread_id.as_deref(), Some("50"));
    assert!(!inbound.reply_to_bot);
}

#[test]
fn a_forum_general_topic_message_is_thread_one_and_plain_group_reply_threads_are_not_topics() {
    let inbound = normalized(message(forum_chat(), json!({"text": "in general"})));
    assert_eq!(inbound.thread_id.as_deref(), Some(GENERAL_TOPIC));
    let reply_thread = normalized(message(group_chat(), json!({"text": "x", "message_thread_id": 3})));
    assert_eq!(reply_thread.thread_id, None);
}

#[test]
fn a_captioned_photo_keeps_the_caption_as_text_and_the_largest_size_as_attachment() {
    let photo = json!([
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 1000},
        {"file_id": "large", "file_unique_id": "l", "width": 1280, "height": 1280, "file_size": 90000}
    ]);
    let entities = json!([{"type": "mention", "offset": 5, "length": 10}]);
    let inbound = normalized(message(
        group_chat(),
        json!({"photo": photo, "caption": "look @ferry_bot", "caption_entities": entities}),
    ));
    assert_eq!(inbound.text, "look @ferry_bot");
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.attachments.len(), 1);
    assert_eq!(inbound.attachments[0].kind, AttachmentKind::Image);
    assert_eq!(inbound.attachments[0].reference, "large");
    assert_eq!(inbound.attachments[0].size_bytes, Some(90000));
}

#[test]
fn a_document_and_a_voice_note_become_attachments_with_their_metadata() {
    let document = json!({"file_id": "doc1", "file_unique_id": "d", "file_name": "report.pdf",
        "mime_type": "application/pdf", "file_size": 1234});
    let inbound = normalized(message(private_chat(), json!({"document": document})));
    assert_eq!(inbound.text, "");
    let attachment = &inbound.attachments[0];
    assert_eq!(attachment.kind, AttachmentKind::Document);
    assert_eq!(
        (attachment.reference.as_str(), attachment.file_name.as_deref(), attachment.mime_type.as_deref()),
        ("doc1", Some("report.pdf"), Some("application/pdf"))
    );
    let voice = json!({"file_id": "v1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"});
    let inbound = normalized(message(private_chat(), json!({"voice": voice})));
    assert_eq!(inbound.attachments[0].kind, AttachmentKind::Audio);
}

#[test]
fn a_photo_keeps_the_largest_size_a_bot_may_download_with_its_dimensions() {
    // Telegram's sizes, smallest first; the original is over getFile's 20 MiB limit.
    let photo = json!([
        {"file_id": "s", "file_unique_id": "s", "width": 90, "height": 60, "file_size": 1000},
        {"file_id": "x", "file_unique_id": "x", "width": 1280, "height": 853, "file_size": 300_000},
        {"file_id": "w", "file_unique_id": "w", "width": 9000, "height": 6000, "file_size": 25_000_000}
    ]);
    let inbound = normalized(message(private_chat(), json!({"photo": photo})));
    let attachment = &inbound.attachments[0];
    assert_eq!(attachment.reference, "x");
    assert_eq!(attachment.dimensions, Some((1280, 853)));
    assert_eq!(attachment.mime_type.as_deref(), Some("image/jpeg"));

    // Nothing fits: the largest, so the core sees the size and says why it was not read.
    let photo =
        json!([{"file_id": "w", "file_unique_id": "w", "width": 9000, "height": 6000, "file_size": 25_000_000}]);
    let inbound = normalized(message(private_chat(), json!({"photo": photo})));
    assert_eq!(inbound.attachments[0].size_bytes, Some(25_000_000));
}

#[test]
fn a_voice_note_keeps_its_type_and_a_video_note_is_a_square_mp4() {
    // (teloxide cannot read a voice note without `mime_type`: Telegram always sends one.)
    let voice =
        json!({"file_id": "v1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/mpeg", "file_size": 4000});
    let inbound = normalized(message(private_chat(), json!({"voice": voice})));
    let attachment = &inbound.attachments[0];
    assert_eq!((attachment.kind, attachment.mime_type.as_deref()), (AttachmentKind::Audio, Some("audio/mpeg")));
    assert_eq!(attachment.size_bytes, Some(4000));

    let note = json!({"file_id": "n1", "file_unique_id": "n", "length": 240, "duration": 5});
    let inbound = normalized(message(private_chat(), json!({"video_note": note})));
    let attachment = &inbound.attachments[0];
    assert_eq!((attachment.kind, attachment.mime_type.as_deref()), (AttachmentKind::Video, Some("video/mp4")));
    assert_eq!((attachment.dimensions, attachment.size_bytes), (Some((240, 240)), None));
}

#[test]
fn static_stickers_are_webp_images_and_animated_or_video_ones_are_other_files() {
    let sticker = |animated: bool, video: bool| {
        json!({"sticker": {"file_id": "st", "file_unique_id": "st", "type": "regular", "width": 512,
            "height": 320, "is_animated": animated, "is_video": video, "emoji": "🙂", "file_size": 2000}})
    };
    let shown = |animated, video| {
        let attachment = normalized(message(private_chat(), sticker(animated, video))).attachments.remove(0);
        (attachment.kind, attachment.mime_type, attachment.file_name, attachment.dimensions)
    };
    let webp = (AttachmentKind::Image, Some("image/webp".to_owned()), None, Some((512, 320)));
    assert_eq!(shown(false, false), webp);
    let tgs = (
        AttachmentKind::Other,
        Some("application/x-tgsticker".to_owned()),
        Some("sticker.tgs".to_owned()),
        Some((512, 320)),
    );
    assert_eq!(shown(true, false), tgs);
    let webm =
        (AttachmentKind::Other, Some("video/webm".to_owned()), Some("sticker.webm".to_owned()), Some((512, 320)));
    assert_eq!(shown(false, true), webm);
}

#[test]
fn a_video_and_an_animation_are_videos_with_their_size() {
    let video = json!({"file_id": "vid", "file_unique_id": "vid", "width": 640, "height": 360, "duration": 4,
        "mime_type": "video/mp4", "file_name": "clip.mp4", "file_size": 50_000});
    let inbound = normalized(message(private_chat(), json!({"video": video, "caption": "watch"})));
    assert_eq!(inbound.text, "watch");
    let attachment = &inbound.attachments[0];
    assert_eq!((attachment.kind, attachment.dimensions), (AttachmentKind::Video, Some((640, 360))));
    assert_eq!(attachment.file_name.as_deref(), Some("clip.mp4"));

    let animation = json!({"file_id": "gif", "file_unique_id": "gif", "width": 320, "height": 240, "duration": 2,
        "mime_type": "video/mp4", "file_name": "fun.gif.mp4"});
    let document =
        json!({"file_id": "gif", "file_unique_id": "gif", "mime_type": "video/mp4", "file_name": "fun.gif.mp4"});
    let inbound = normalized(message(private_chat(), json!({"animation": animation, "document": document})));
    assert_eq!(inbound.attachments.len(), 1, "{:?}", inbound.attachments);
    assert_eq!(inbound.attachments[0].kind, AttachmentKind::Video);
}

#[test]
fn edits_channel_posts_service_messages_and_other_updates_are_skipped() {
    let edited = message(private_chat(), json!({"text": "fixed", "edit_date": 1_700_000_100}));
    assert_eq!(skipped(update("edited_message", edited)), "edited message");

    let channel = json!({"id": -100999, "type": "channel", "title": "News"});
    let post = json!({"message_id": 1, "date": 1_700_000_000, "chat": channel, "text": "news"});
    assert_eq!(skipped(update("channel_post", post)), "channel post");

    let joined = message(group_chat(), json!({"new_chat_members": [alice()]}));
    assert_eq!(skipped(update("message", joined)), "service message");

    // A negative offset cannot be read as an entity, so teloxide reads no kind of message.
    let malformed =
        message(private_chat(), json!({"text": "hello", "entities": [{"type": "bold", "offset": -1, "length": 3}]}));
    assert_eq!(skipped(update("message", malformed)), UNREADABLE_MESSAGE);

    let location = message(private_chat(), json!({"location": {"latitude": 52.5, "longitude": 13.4}}));
    assert!(skipped(update("message", location)).starts_with("message with neither text"));

    let callback = parse(
        &json!({"update_id": 2, "callback_query": {"id": "1", "from": alice(), "chat_instance": "c", "data": "x"}}),
    );
    assert_eq!(skipped(callback), "update kind Ferry does not handle");
}

#[test]
fn entities_outside_the_text_are_ignored_and_the_message_still_arrives() {
    // Offsets past the end, a length that overflows, a span that cuts the 👋 (two UTF-16
    // units) in two: teloxide's own entity parsing panics on the first, which stopped the
    // channel for good (the update was never confirmed, so it came back after each restart).
    let text = "hi 👋 @ferry_bot";
    for (offset, length) in [(500, 10), (3, usize::MAX), (4, 11), (0, 100), (usize::MAX, 1)] {
        let entities = json!([{"type": "mention", "offset": offset, "length": length}]);
        let inbound = normalized(message(group_chat(), json!({"text": text, "entities": entities})));
        assert!(!inbound.mentions_bot, "({offset}, {length})");
        assert_eq!(inbound.text, text);
    }
    let command = json!([{"type": "bot_command", "offset": 0, "length": 99}]);
    let inbound = normalized(message(private_chat(), json!({"text": "/new@ferry_bot", "entities": command})));
    assert_eq!(inbound.text, "/new", "the command still works; only the broken entity is ignored");
}

#[test]
fn an_entity_span_is_read_in_utf16_units() {
    let text = "hi 👋 @ferry_bot";
    assert_eq!(super::entity_text(text, 6, 10), Some("@ferry_bot"));
    assert_eq!(super::entity_text(text, 3, 2), Some("👋"));
    assert_eq!(super::entity_text(text, 4, 2), None, "inside the surrogate pair");
    assert_eq!(super::entity_text(text, 16, 0), Some(""));
    assert_eq!(super::entity_text(text, 16, 1), None);
    assert_eq!(super::entity_text(text, 17, 0), None);
}

proptest::proptest! {
    #[test]
    fn resolving_any_entity_span_never_panics_and_matches_utf16(text in "\\PC{0,40}", offset in 0usize..60, length in 0usize..60) {
        if let Some(covered) = super::entity_text(&text, offset, length) {
            let units: Vec<u16> = text.encode_utf16().collect();
            proptest::prop_assert_eq!(String::from_utf16_lossy(&units[offset..offset + length]), covered);
        }
    }
}
