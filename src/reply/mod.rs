//! The chat-channel layer: turns a run's output into what people see in a chat (SPEC §7).
//!
//! - [`chunker`]: block streaming — the growing reply cut into messages of
//!   `min_chars..=max_chars`, never splitting a code block it can keep whole.

pub mod chunker;
