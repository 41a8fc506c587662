//! tokio-tungstenite 0.24 under the name and version serenity 0.12 asks for (0.21).
//!
//! serenity's gateway WebSocket comes from `tokio-tungstenite = "0.21"`, which brings rustls
//! 0.22 and rustls-webpki 0.102.8, a line with open advisories and no fixed release. This
//! crate re-exports tokio-tungstenite 0.24 (rustls 0.23, patched rustls-webpki 0.103) whole,
//! `tungstenite` module included, so serenity builds against it unchanged; the compiler
//! checks every item serenity uses. Between 0.21 and 0.24 tungstenite changed its TLS
//! dependencies, made `url` optional (enabled here) and flushes after a handshake; nothing
//! serenity relies on. Remove this crate and its `[patch.crates-io]` entry once a serenity
//! release depends on a tokio-tungstenite with rustls 0.23.

pub use upstream::*;
