//! Ferry: run AI agents in the chat apps people already use.
//!
//! The modules in the order a message meets them:
//!
//! 1. an adapter (a [`ferry_channel::Channel`], in its own crate) receives it and normalizes
//!    it; [`channels`] knows which adapters run and how healthy each is;
//! 2. [`dispatch`] drives it through the stages below, one chat's messages in order;
//! 3. [`routing`] decides whether it may run (access, pairing, mentions), which agent answers
//!    and which session it belongs to, and drops a redelivery;
//! 4. [`control`] answers chat commands (`/stop`, `/new`, `/model`…) at once, before any queue;
//! 5. [`queue`] decides when it runs: per-session lanes and the five queue modes;
//! 6. [`session`] continues the session's conversation and keeps it within the model's window;
//! 7. [`agent`] runs the model and its tools, with [`models`] choosing which model and which
//!    credentials answer, [`mcp`] adding MCP servers' tools, [`sandbox`] confining the tools
//!    that touch the host, and [`media`] making files ready for the model;
//! 8. [`reply`] shapes the streamed output and sends it back through the adapter, exactly
//!    once ([`reply::ledger`]);
//! 9. [`gateway`] is the daemon's front door: the WebSocket RPC, `/healthz`, `/metrics` and
//!    the web chat, itself a channel.
//!
//! Heavy capabilities are cargo features (`config::features`): [`mcp`] is `mcp`, PostgreSQL
//! (`state::postgres`) is `postgres`, and the web tools, images, PDFs and the sandbox have one
//! each.
//!
//! [`hooks`] let plugins watch or change the path at fixed points along it, and [`cron`]
//! starts it without a message: a scheduled job's fire is journaled as one, then takes the
//! same path. [`memory`] is what an agent remembers of each person and chat between
//! conversations: its tools, and what it adds to a run's prompt.
//!
//! Under all of them, importing nothing above themselves: [`state`] (the state directory
//! and every store, on SQLite or PostgreSQL: `CONTRIBUTING.md` says how to add one),
//! [`config`] (the operator's settings, typed and validated), [`types`] (value types several
//! floors share: the conversation, thinking levels, schedules), [`metrics`] (what `/metrics` exports)
//! and [`logging`]. `tests/architecture` holds the house to that.

pub mod agent;
pub mod channels;
pub mod config;
pub mod control;
pub mod cron;
pub mod dispatch;
pub mod gateway;
pub mod hooks;
pub mod logging;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod media;
pub mod memory;
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
