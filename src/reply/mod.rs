//! The chat-channel layer: turns a run's output into what people see in a chat (SPEC §7).
//!
//! The agent produces markdown and knows nothing about platforms; this layer shapes it for the
//! channel it goes back to, using only the channel's [`ChannelCapabilities`](ferry_channel::ChannelCapabilities).
//!
//! - [`format`](mod@format): platform formatting — the model's markdown rendered in the channel's markup
//!   dialect, then cut into messages that fit the channel's limits.

pub mod format;
