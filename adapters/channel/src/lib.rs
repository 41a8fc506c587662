//! The contract between Ferry's core and its chat-platform adapters.
//!
//! Every adapter (Telegram, Discord, Slack, the built-in web chat) implements [`Channel`];
//! the core only ever talks to `dyn Channel`. It lives in its own crate because the `ferry`
//! binary depends on the adapters, so the adapters cannot depend on `ferry`: both depend on
//! this crate instead.
//!
//! The flow is one-way:
//!
//! 1. [`Channel::start`] yields [`InboundDelivery`] values — a normalized [`InboundMessage`]
//!    plus an [`Ack`] the core resolves once the message is durably recorded. Adapters only
//!    confirm a message to their platform (Telegram update offset, Slack envelope ack) after
//!    that, so a crash between receive and record re-delivers instead of losing the message.
//! 2. The core routes, queues and runs the agent, then replies through [`Channel::send`],
//!    [`Channel::edit`], [`Channel::delete`] and [`Channel::typing`].
//! 3. Platform differences reach the core only as [`ChannelCapabilities`] (text limit, line
//!    limit, markup dialect, preview edit interval…), never as `if channel == "telegram"`.
//!
//! ```
//! use ferry_channel::{Channel, ChatKind, ChatRef, OutboundMessage, memory::MemoryChannel};
//! use futures::StreamExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let channel = MemoryChannel::new("memory", "default");
//! let mut inbound = channel.start().await.unwrap();
//!
//! // A user writes to the bot…
//! let _ack = channel.inject(channel.message(ChatRef::new(ChatKind::Direct, "alice"), "alice", "hello"));
//! let delivery = inbound.next().await.unwrap();
//! delivery.ack.accept(); // …the core records the message, then acknowledges it…
//!
//! // …and answers in the same conversation.
//! channel.send(OutboundMessage::reply_to(&delivery.message, "hi alice")).await.unwrap();
//! assert_eq!(channel.sent_texts(), ["hi alice"]);
//! # }
//! ```

mod ack;
mod capabilities;
pub mod catch_up;
mod channel;
mod error;
mod file_cursor;
mod inbound;
pub mod memory;
mod outbound;
mod singleton;

pub use ack::{Ack, AckOutcome, AckReceiver};
pub use capabilities::{ChannelCapabilities, MarkupDialect, Rate, SendBudget, SendReconciliation};
pub use channel::DEFAULT_ACCOUNT_ID;
pub use channel::{Channel, Download, InboundStream};
pub use error::ChannelError;
pub use file_cursor::FileCursor;
pub use inbound::{
    Attachment, AttachmentKind, ChatKind, ChatRef, ClientRequest, Delivery, InboundDelivery, InboundMessage,
    ScheduledFire, Sender,
};
pub use outbound::{MessageRef, OutboundMessage, SentMessage, Target, TextFormat};
pub use singleton::{CursorError, IngressCursor};
