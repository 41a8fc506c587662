//! The conformance suite (`tests/conformance/mod.rs`) for every adapter built into this
//! binary, each against its own fake.

#[path = "common/daemon.rs"]
mod daemon;

#[path = "conformance/mod.rs"]
mod conformance;

conformance_suite!(telegram, crate::conformance::telegram::Telegram);
conformance_suite!(discord, crate::conformance::discord::Discord);
conformance_suite!(slack, crate::conformance::slack::Slack);
