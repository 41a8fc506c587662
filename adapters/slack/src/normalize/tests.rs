use serde_json::{Value, json};
use slack_morphism::events::SlackPushEventCallback;

use super::*;

fn bot() -> BotIdentity {
    BotIdentity { user_id: "UBOT".to_owned(), bot_id: Some("BBOT".to_owned()) }
}

fn callback(event: Value) -> SlackPushEventCallback {
    serde_json::from_value(json!({
        "team_id": "T1", "api_app_id": "A1", "event_id": "Ev1", "event_time": 1_700_000_000,
        "type": "event_callback", "event": event,
    }))
    .unwrap()
}

fn run(event: Value) -> Result<Normalized, Skip> {
    normalize(&callback(event).event, &bot(), "default")
}

fn message(channel: &str, channel_type: &str, text: &str) -> Value {
    json!({"type": "message", "channel": channel, "channel_type": channel_type, "user": "U1", "text": text,
           "ts": "1700000000.000100"})
}

#[test]
fn conversations_map_to_direct_group_and_channel() {
    let kind = |channel, kind| run(message(channel, kind, "hi")).unwrap().message.chat.kind;
    assert_eq!(kind("D1", "im"), ChatKind::Direct);
    assert_eq!(kind("G1", "mpim"), ChatKind::Group);
    assert_eq!(kind("C1", "channel"), ChatKind::Channel);
    assert_eq!(kind("G2", "group"), ChatKind::Channel);
}

#[test]
fn a_thread_reply_carries_the_parents_ts_and_the_parent_is_top_level() {
    let mut reply = message("C1", "channel", "in thread");
    reply["thread_ts"] = json!("1699999999.000001");
    let normalized = run(reply).unwrap().message;
    assert_eq!(normalized.thread_id.as_deref(), Some("1699999999.000001"));
    assert_eq!(normalized.message_id, "1700000000.000100");
    let mut parent = message("C1", "channel", "parent");
    parent["thread_ts"] = json!("1700000000.000100");
    assert_eq!(run(parent).unwrap().message.thread_id, None);
    assert_eq!(run(message("C1", "channel", "top")).unwrap().message.thread_id, None);
}

#[test]
fn a_mention_of_the_bot_is_detected_in_both_forms() {
    assert!(run(message("C1", "channel", "<@UBOT> hello")).unwrap().message.mentions_bot);
    assert!(run(message("C1", "channel", "hey <@UBOT|ferry>")).unwrap().message.mentions_bot);
    assert!(!run(message("C1", "channel", "<@UOTHER> hello")).unwrap().message.mentions_bot);
}

#[test]
fn app_mention_and_message_of_one_post_normalize_to_the_same_message() {
    let from_message = run(message("C1", "channel", "<@UBOT> hi")).unwrap().message;
    let mention = json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> hi",
                         "ts": "1700000000.000100"});
    let normalized = run(mention).unwrap();
    assert!(!normalized.kind_unknown);
    let from_mention = normalized.message;
    assert!(from_mention.mentions_bot);
    assert_eq!(
        (&from_mention.chat, &from_mention.thread_id, &from_mention.message_id),
        (&from_message.chat, &from_message.thread_id, &from_message.message_id)
    );
}

#[test]
fn an_app_mention_in_a_g_channel_needs_a_lookup() {
    let mention = json!({"type": "app_mention", "channel": "G9", "user": "U1", "text": "<@UBOT>", "ts": "1.2"});
    assert!(run(mention).unwrap().kind_unknown);
}

#[test]
fn edits_deletes_joins_and_the_bots_own_messages_are_skipped() {
    let mut edit = message("C1", "channel", "x");
    edit["subtype"] = json!("message_changed");
    edit["message"] = json!({"text": "y", "user": "U1", "ts": "1.1"});
    assert_eq!(run(edit).unwrap_err(), "message edit");
    let deleted = json!({"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1.3",
                         "deleted_ts": "1.1", "hidden": true});
    assert!(run(deleted).is_err());
    let mut join = message("C1", "channel", "<@U1> has joined the channel");
    join["subtype"] = json!("channel_join");
    assert_eq!(run(join).unwrap_err(), "join or leave");
    let mut own = message("C1", "channel", "my own reply");
    own["user"] = json!("UBOT");
    assert_eq!(run(own).unwrap_err(), "the bot's own message");
    let own_bot = json!({"type": "message", "subtype": "bot_message", "channel": "C1", "channel_type": "channel",
                         "bot_id": "BBOT", "text": "from the bot", "ts": "1.4"});
    assert_eq!(run(own_bot).unwrap_err(), "the bot's own message");
}

#[test]
fn another_bots_message_is_passed_on_flagged_as_a_bot() {
    let other = json!({"type": "message", "subtype": "bot_message", "channel": "C1", "channel_type": "channel",
                       "bot_id": "BOTHER", "text": "beep", "ts": "1.5"});
    let sender = run(other).unwrap().message.sender;
    assert_eq!((sender.id.as_str(), sender.is_bot), ("BOTHER", true));
}

#[test]
fn a_file_share_carries_its_files_known_by_their_download_url() {
    let mut share = message("C1", "channel", "");
    share["subtype"] = json!("file_share");
    share["files"] = json!([
        {"id": "F1", "name": "photo.jpg", "mimetype": "image/jpeg", "size": 1234, "original_w": 640, "original_h": 480,
         "url_private": "https://files.slack.com/files-pri/T1-F1/photo.jpg",
         "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/photo.jpg"},
        {"id": "F2", "name": "notes.txt", "mimetype": "text/plain", "url_private": "https://files.slack.com/files-pri/T1-F2/notes.txt"},
        {"id": "F3", "file_access": "check_file_info"},
    ]);
    let normalized = run(share).unwrap().message;
    assert_eq!((normalized.text.as_str(), normalized.sender.is_bot), ("", false));
    let summary: Vec<_> = normalized
        .attachments
        .iter()
        .map(|a| (a.kind, a.reference.as_str(), a.file_name.as_deref(), a.mime_type.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (
                AttachmentKind::Image,
                "https://files.slack.com/files-pri/T1-F1/download/photo.jpg",
                Some("photo.jpg"),
                Some("image/jpeg")
            ),
            (
                AttachmentKind::Document,
                "https://files.slack.com/files-pri/T1-F2/notes.txt",
                Some("notes.txt"),
                Some("text/plain")
            ),
            (AttachmentKind::Other, "F3", None, None),
        ]
    );
}
