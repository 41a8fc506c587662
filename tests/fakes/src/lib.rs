//! Local stand-ins for the services Ferry talks to, so every test runs offline.
//!
//! Each fake speaks the real wire format of its service and enforces its real limits. They
//! share [`FakeServer`]: an axum router served on an ephemeral loopback port, shut down when
//! the handle drops, so a test owns its servers and never leaks one into the next test.

mod server;

pub use server::FakeServer;
