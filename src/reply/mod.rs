//! The chat-channel layer: turns a run's output into what people see in a chat (SPEC §7).
//!
//! The agent produces markdown and knows nothing about platforms; this layer shapes it for
//! the channel it goes back to, using only the channel's
//! [`ChannelCapabilities`](ferry_channel::ChannelCapabilities).
//!
//! - [`turn`]: one run's reply in one chat, from its events to delivered messages;
//! - [`silent`]: the `NO_REPLY` rules, for finals and while streaming;
//! - [`directive`]: reply directives (`[[reply_to_current]]`, `[[reply_to: <id>]]`, …)
//!   read tolerantly and taken out of finals and previews, never shown;
//! - [`shaping`]: the other reply-shaping steps — `HEARTBEAT_OK`, the response prefix,
//!   messaging-tool dedup, the tool-error fallback;
//! - [`format`](mod@format): the model's markdown rendered in the channel's markup dialect,
//!   then cut into messages that fit the channel's limits;
//! - [`chunker`]: block streaming — the growing reply cut into messages of
//!   `min_chars..=max_chars`, never splitting a code block it can keep whole;
//! - [`tool_summary`]: verbose mode's one line per tool call;
//! - [`preview`]: one message per turn, edited in place as the text grows;
//! - [`finals`]: the reply's final messages edited into the preview or sent, step by step;
//! - [`ledger`]: the delivery ledger — what became of each reply, so a restart finishes it
//!   instead of answering twice or leaving a preview frozen;
//! - [`coalesce`]: block streaming's sender — merging, pacing, giving up on a stuck send;
//! - [`outbound`]: the per-account scheduler every platform call goes through (budgets,
//!   finals before previews, retries, idempotency);
//! - [`typing`]: the typing indicator, kept on while a run works;
//! - [`chat_events`]: `chat` events for web and RPC clients.

pub mod attachments;
pub mod chat_events;
pub mod chunker;
pub mod coalesce;
pub mod directive;
pub mod finals;
pub mod format;
pub mod ledger;
pub mod media_lines;
pub mod outbound;
pub mod preview;
pub mod reasoning;
pub mod shaping;
pub mod silent;
pub mod tool_summary;
pub mod turn;
pub mod typing;
