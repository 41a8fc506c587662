//! A Telegram update, as the webhook receives it or `getUpdates` returns it, read and
//! normalized (`adapters/telegram/src/normalize.rs`).
//!
//! Asserts: reading and normalizing never panic (libFuzzer's panic hook aborts before
//! `normalize`'s own `catch_unwind` guard could hide one); a message that reaches the core
//! is a Telegram message with text or an attachment.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let Some(Ok(message)) = ferry_telegram::fuzzing::normalize_update(body) else { return };
    assert_eq!(message.channel, "telegram");
    assert!(!message.text.is_empty() || !message.attachments.is_empty(), "{message:?}");
    assert!(!message.chat.id.is_empty() && !message.sender.id.is_empty(), "{message:?}");
});
