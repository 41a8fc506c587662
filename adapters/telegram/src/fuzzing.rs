//! Entry points for the fuzz targets in `fuzz/` (issue 19), behind the `fuzzing` feature.
//! Not part of the adapter's API: they take the bytes Telegram sends and return what the
//! adapter makes of them, so the targets need not name teloxide's types.

use ferry_channel::InboundMessage;
use teloxide::types::{Update, UserId};

use crate::normalize::{BotIdentity, Skip, normalize};

/// The bot the fuzzed updates are normalized for: its user id…
pub const BOT_ID: u64 = 999;
/// …and its username, without the `@`.
pub const BOT_USERNAME: &str = "ferry_bot";

/// Reads a webhook body (or one element of `getUpdates`) as an [`Update`], as the webhook
/// handler does, and normalizes it for the bot [`BOT_USERNAME`]: `None` when the bytes are
/// not an update, else what the core would get or why the update is skipped.
pub fn normalize_update(body: &[u8]) -> Option<Result<InboundMessage, Skip>> {
    let update: Update = serde_json::from_slice(body).ok()?;
    let bot = BotIdentity { id: UserId(BOT_ID), username: BOT_USERNAME.to_owned() };
    Some(normalize(&update, &bot, "fuzz"))
}
