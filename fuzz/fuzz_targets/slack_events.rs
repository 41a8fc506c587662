//! A Slack event as both transports deliver it: an Events API request body
//! (`adapters/slack/src/events.rs`) and a Socket Mode envelope (`socket.rs`), each event
//! normalized (`normalize.rs`, the path `inbound.rs` takes).
//!
//! Asserts: never panics; the bot's own messages never reach the core; a message that does
//! has text or files, mentions the bot whenever its text names it (`<@UBOT>` or
//! `<@UBOT|name>`; an `app_mention` always does), and is in a thread only when its
//! `thread_ts` is not its own `ts`.
#![no_main]

use ferry_channel::InboundMessage;
use ferry_slack::fuzzing::{BOT_ID, BOT_USER_ID, events_api_body, socket_mode_frame};
use libfuzzer_sys::fuzz_target;

fn check(message: &InboundMessage) {
    assert_eq!(message.channel, "slack");
    assert_ne!(message.sender.id, BOT_USER_ID, "{message:?}");
    assert_ne!(message.sender.id, BOT_ID, "{message:?}");
    assert!(!message.text.trim().is_empty() || !message.attachments.is_empty() || message.mentions_bot, "{message:?}");
    let names_bot =
        message.text.contains(&format!("<@{BOT_USER_ID}>")) || message.text.contains(&format!("<@{BOT_USER_ID}|"));
    assert!(message.mentions_bot || !names_bot, "{message:?}");
    assert_ne!(message.thread_id.as_deref(), Some(message.message_id.as_str()), "{message:?}");
}

fuzz_target!(|body: &[u8]| {
    let outcomes = [events_api_body(body), socket_mode_frame(body)];
    for (message, _kind_unknown) in outcomes.into_iter().flatten().flatten() {
        check(&message);
    }
});
