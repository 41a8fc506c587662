//! Ferry: run AI agents in the chat apps people already use.
//!
//! A message travels one way through the core:
//!
//! 1. an adapter (a [`ferry_channel::Channel`]) receives it and normalizes it;
//! 2. `routing` decides whether it may run and which session it belongs to;
//! 3. `queue` decides when it runs (per-session lanes, queue modes);
//! 4. `agent` runs the model and its tools;
//! 5. `reply` shapes the streamed output and sends it back through the adapter.
//!
//! Around them: [`config`] (the operator's settings, typed and validated), [`state`] (the
//! state directory and its SQLite database), [`logging`], [`metrics`] (what `/metrics`
//! exports), [`dispatch`] (which drives a message through the stages), [`gateway`] (the
//! WebSocket RPC, HTTP endpoints and the web chat channel) and [`media`] (images made ready
//! for a model: decoded under limits, downscaled, re-encoded).

pub mod agent;
pub mod channels;
pub mod config;
pub mod control;
pub mod dispatch;
pub mod gateway;
pub mod hooks;
pub mod logging;
pub mod mcp;
pub mod media;
pub mod metrics;
pub mod models;
pub mod queue;
pub mod reply;
pub mod routing;
pub mod sandbox;
pub mod session;
pub mod state;
pub mod types;

pub use ferry_channel as channel;
