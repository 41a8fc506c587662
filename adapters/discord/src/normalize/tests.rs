use serde_json::{Value, json};

use super::*;

const BOT: u64 = 900;

fn bot() -> BotIdentity {
    BotIdentity { id: UserId::new(BOT), name: "ferry".into() }
}

fn message(content: &str, extra: Value) -> Message {
    let mut json = json!({
        "id": "5000", "channel_id": "10", "content": content,
        "author": {"id": "42", "username": "ada", "global_name": "Ada L", "discriminator": "0", "avatar": null},
        "timestamp": "2026-01-02T03:04:05.000000+00:00", "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
        "pinned": false, "type": 0,
    });
    if let (Some(object), Value::Object(extra)) = (json.as_object_mut(), extra) {
        object.extend(extra);
    }
    serde_json::from_value(json).unwrap()
}

fn guild() -> Place {
    Place::Guild { channel: "10".into(), thread: None }
}

#[test]
fn only_the_bots_own_mentions_are_cut_and_counted() {
    let normalized =
        normalize(&message("<@900> hi <@!900>  there <@7>", json!({})), &guild(), &bot(), "default", false);
    let normalized = normalized.unwrap();
    assert!(normalized.mentions_bot);
    assert_eq!(normalized.text, "hi  there <@7>");
    let other = normalize(&message("<@7> hi", json!({})), &guild(), &bot(), "default", false).unwrap();
    assert!(!other.mentions_bot);
    assert_eq!(other.text, "<@7> hi");
}

/// Found by fuzzing (fuzz/seeds/discord_gateway/regression-nested-mention): cutting the
/// inner mention of `<<@900>@900>` left a whole one behind.
#[test]
fn a_mention_formed_by_cutting_another_is_cut_too() {
    let text = "<<@900>@900> hi <<@!900>@!900>";
    let normalized = normalize(&message(text, json!({})), &guild(), &bot(), "default", false).unwrap();
    assert!(normalized.mentions_bot);
    assert_eq!(normalized.text, "hi");
}

#[test]
fn a_bare_mention_is_kept_as_an_empty_addressed_message() {
    let normalized = normalize(&message("<@900>", json!({})), &guild(), &bot(), "default", false).unwrap();
    assert!(normalized.mentions_bot && normalized.text.is_empty());
}

#[test]
fn code_blocks_keep_their_lines_when_a_mention_is_cut() {
    let text = "<@900> look:\n```\n    indented\n```";
    let normalized = normalize(&message(text, json!({})), &guild(), &bot(), "default", false).unwrap();
    assert_eq!(normalized.text, "look:\n```\n    indented\n```");
}

#[test]
fn system_messages_own_messages_and_empty_ones_are_skipped() {
    assert!(normalize(&message("joined", json!({"type": 7})), &guild(), &bot(), "d", false).is_err());
    let own = message("echo", json!({"author": {"id": "900", "username": "ferry", "bot": true}}));
    assert!(normalize(&own, &guild(), &bot(), "d", false).is_err());
    assert!(normalize(&message("", json!({})), &guild(), &bot(), "d", false).is_err());
}

#[test]
fn group_dms_are_skipped_unless_enabled_and_then_are_group_chats() {
    let group = message("hello all", json!({}));
    assert!(normalize(&group, &Place::GroupDm, &bot(), "d", false).is_err());
    let normalized = normalize(&group, &Place::GroupDm, &bot(), "d", true).unwrap();
    assert_eq!(normalized.chat.kind, ChatKind::Group);
}

#[test]
fn the_sender_is_named_by_guild_nickname_then_display_name() {
    let plain = normalize(&message("x", json!({})), &guild(), &bot(), "d", false).unwrap();
    assert_eq!(plain.sender.name.as_deref(), Some("Ada L"));
    let nick = message(
        "x",
        json!({"member": {"nick": "Countess", "roles": [], "deaf": false, "mute": false, "joined_at": null, "flags": 0}}),
    );
    let nick = normalize(&nick, &guild(), &bot(), "d", false).unwrap();
    assert_eq!(nick.sender.name.as_deref(), Some("Countess"));
}

#[test]
fn attachments_are_kept_by_url_and_kind() {
    let attachment = json!({"attachments": [{"id": "1", "filename": "cat.png", "size": 10, "url": "https://cdn/cat.png",
        "proxy_url": "https://media/cat.png", "content_type": "image/png"}]});
    let normalized = normalize(&message("", attachment), &guild(), &bot(), "d", false).unwrap();
    assert_eq!(normalized.attachments.len(), 1);
    assert_eq!(normalized.attachments[0].kind, AttachmentKind::Image);
    assert_eq!(normalized.attachments[0].reference, "https://cdn/cat.png");
}

#[test]
fn an_attachment_keeps_its_name_size_type_and_pixel_size() {
    let attachments = json!({"attachments": [
        {"id": "1", "filename": "cat.png", "size": 2048, "url": "https://cdn/a/cat.png?ex=1&hm=2",
         "proxy_url": "https://media/cat.png", "content_type": "image/png", "width": 640, "height": 480},
        {"id": "2", "filename": "notes", "size": 3, "url": "https://cdn/a/notes", "proxy_url": "https://media/notes"},
    ]});
    let normalized = normalize(&message("see", attachments), &guild(), &bot(), "d", false).unwrap();
    let [image, bare] = normalized.attachments.as_slice() else { panic!("{:?}", normalized.attachments) };
    assert_eq!(image.reference, "https://cdn/a/cat.png?ex=1&hm=2");
    assert_eq!(
        (image.file_name.as_deref(), image.mime_type.as_deref(), image.size_bytes, image.dimensions),
        (Some("cat.png"), Some("image/png"), Some(2048), Some((640, 480)))
    );
    assert_eq!((bare.kind, bare.mime_type.as_deref(), bare.dimensions), (AttachmentKind::Other, None, None));
    assert!(image.path.is_none() && bare.path.is_none(), "platform files are fetched with download");
}

#[test]
fn guild_messages_carry_their_guild_as_the_space_and_dms_none() {
    let in_guild = normalize(&message("x", json!({"guild_id": "77"})), &guild(), &bot(), "d", false).unwrap();
    assert_eq!(in_guild.space_id.as_deref(), Some("77"));
    let direct = normalize(&message("x", json!({})), &Place::Direct, &bot(), "d", false).unwrap();
    assert_eq!((direct.chat.kind, direct.space_id), (ChatKind::Direct, None));
}
