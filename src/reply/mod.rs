//! The chat-channel layer: turns a run's output into what people see in a chat (SPEC §7).
//!
//! - [`chat_events`]: `chat` events for web and RPC clients;
//! - [`silent`]: the `NO_REPLY` rules, for finals and while streaming;
//! - [`shaping`]: the other reply-shaping steps — `HEARTBEAT_OK`, the response prefix and
//!   messaging-tool dedup;
//! - [`turn`]: one run's reply in one chat, from its events to delivered messages;
//! - [`split`]: cutting a reply to the channel's text limit;
//! - [`typing`]: the typing indicator, kept on while a run works;
//! - [`coalesce`]: block streaming's sender — merging, pacing, giving up on a stuck send;
//! - [`preview`]: one message per turn, edited in place as the text grows;
//! - [`outbound`]: the per-account scheduler every platform call goes through (budgets,
//!   finals before previews, retries, idempotency).

pub mod chat_events;
pub mod coalesce;
pub mod outbound;
pub mod preview;
pub mod shaping;
pub mod silent;
pub mod split;
pub mod turn;
pub mod typing;
