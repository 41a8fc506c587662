//! Entry points for the fuzz targets in `fuzz/` (issue 19), behind the `fuzzing` feature.
//! Not part of the adapter's API: they take the bytes Slack sends and return what the
//! adapter makes of them, so the targets need not name slack-morphism's types.

use ferry_channel::InboundMessage;
use serde::Deserialize;
use slack_morphism::events::{SlackPushEvent, SlackPushEventCallback};

use crate::normalize::{BotIdentity, Skip, normalize};

/// The bot user the fuzzed events are normalized for…
pub const BOT_USER_ID: &str = "UBOT";
/// …and its bot id, which its own posts carry.
pub const BOT_ID: &str = "BBOT";

/// What the adapter made of one event: the message for the core and whether its
/// conversation kind still needs a `conversations.info` lookup, or why it was skipped.
pub type Outcome = Result<(InboundMessage, bool), Skip>;

/// Reads an Events API request body as the `/slack/events` handler does (UTF-8, then a
/// `SlackPushEvent`) and normalizes an event callback for the bot [`BOT_USER_ID`]. `None`
/// when the body is not a push event or not an event callback (URL verification, rate
/// limit notices).
pub fn events_api_body(body: &[u8]) -> Option<Outcome> {
    let body = std::str::from_utf8(body).ok()?;
    match serde_json::from_str::<SlackPushEvent>(body).ok()? {
        SlackPushEvent::EventCallback(callback) => Some(outcome(&callback)),
        _ => None,
    }
}

/// Reads a Socket Mode frame and normalizes the event of an `events_api` envelope; `None`
/// for anything else. slack-morphism's listener reads the envelope as its
/// `SlackSocketModeEvent`, which it does not export: [`Envelope`] reads the same `type` and
/// `payload` fields, and the payload with slack-morphism's own type.
pub fn socket_mode_frame(frame: &[u8]) -> Option<Outcome> {
    let envelope: Envelope = serde_json::from_slice(frame).ok()?;
    (envelope.kind == "events_api").then(|| outcome(&envelope.payload))
}

/// The part of a Socket Mode envelope the adapter acts on.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    payload: SlackPushEventCallback,
}

fn outcome(callback: &SlackPushEventCallback) -> Outcome {
    let bot = BotIdentity { user_id: BOT_USER_ID.to_owned(), bot_id: Some(BOT_ID.to_owned()) };
    normalize(&callback.event, &bot, "fuzz").map(|normalized| (normalized.message, normalized.kind_unknown))
}
