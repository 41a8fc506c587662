//! Model access: which model answers a run, with which credentials, and how hard it thinks.
//!
//! One provider key serving everyone made one 429 or one expired key an outage for every
//! chat. This room keeps model access as robust as delivery:
//!
//! - [`catalog`]: the models and credentials the config names, as ready clients;
//! - [`profiles`]: several credentials per provider, their rotation and cooldowns, kept in
//!   by the health store (`state::health`) so a restart does not hammer a dead key;
//! - [`router`]: the attempts of one model call, and what a failure does to them.
//!
//! Providers (`agent::providers`) stay translators of one request; choosing and failing
//! over between them happens here.

pub mod catalog;
pub mod profiles;
pub mod router;

pub use crate::types::{ReasoningDisplay, ThinkingLevel};
pub use catalog::{Candidate, ModelCatalog};
pub use profiles::FailoverReason;
pub use router::{Attempt, ModelRouter, Route};

use serde::Serialize;

/// Which model answered, and with which credentials: for lifecycle events, `/status` and
/// logs. The profile is the operator's id for a key (`default`, `backup`), never key
/// material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelUsed {
    pub provider: String,
    pub model: String,
    pub profile: String,
}

impl ModelUsed {
    /// `provider/model (profile)`, as `/status` shows it.
    pub fn describe(&self) -> String {
        format!("{}/{} (profile {})", self.provider, self.model, self.profile)
    }
}
