//! Entry points for the fuzz targets in `fuzz/` (issue 19), behind the `fuzzing` feature.
//! Not part of the adapter's API: they take the bytes Discord sends and return what the
//! adapter makes of them, so the targets need not name serenity's types.

use ferry_channel::InboundMessage;
use serenity::model::event::{Event, GatewayEvent};
use serenity::model::id::{ChannelId, UserId};

use crate::gateway::place_of;
use crate::normalize::{BotIdentity, Place, Skip, normalize};

/// The bot the fuzzed messages are normalized for.
pub const BOT_ID: u64 = 999;

/// Where a fuzzed message is taken to be written, one of each kind the adapter resolves.
pub const PLACES: usize = 4;

/// Reads a gateway frame as serenity's shard does (a JSON text message into a
/// [`GatewayEvent`]); for a `MESSAGE_CREATE` dispatch, normalizes its message as written in
/// a DM, a group DM (enabled), a guild channel and a thread, for the bot [`BOT_ID`].
/// `None` when the bytes are not a gateway event; an empty list for other events.
pub fn gateway_frame(frame: &[u8]) -> Option<Vec<Result<InboundMessage, Skip>>> {
    let event: GatewayEvent = serde_json::from_slice(frame).ok()?;
    let GatewayEvent::Dispatch(_, Event::MessageCreate(create)) = event else { return Some(Vec::new()) };
    let bot = BotIdentity { id: UserId::new(BOT_ID), name: "ferry".to_owned() };
    let places = [
        Place::Direct,
        Place::GroupDm,
        Place::Guild { channel: create.message.channel_id.to_string(), thread: None },
        Place::Guild { channel: "800".to_owned(), thread: Some(create.message.channel_id.to_string()) },
    ];
    Some(places.iter().map(|place| normalize(&create.message, place, &bot, "fuzz", true)).collect())
}

/// Reads a channel object as the REST lookup's answer and resolves where a message in it
/// was written: `None` for bytes that are not JSON, else the place's description.
pub fn channel_place(body: &[u8]) -> Option<String> {
    let channel: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(format!("{:?}", place_of(&channel, ChannelId::new(900))))
}
