//! `ferry_lease_events_total{event}`: what happened to this replica's session leases when
//! several replicas share one PostgreSQL — taken, renewed, lost, and writes refused because
//! a lease had passed on.

use std::fmt;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// A lease event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseEvent {
    /// A session (or an ingress) was taken: it was free, or its holder's lease lapsed.
    Claimed,
    /// A held lease was renewed.
    Renewed,
    /// A held lease could not be renewed: another replica may take it over.
    Lost,
    /// A write was refused because this replica no longer held the lease it was made under.
    FencedWrite,
}

impl LeaseEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Renewed => "renewed",
            Self::Lost => "lost",
            Self::FencedWrite => "fenced_write",
        }
    }
}

impl EncodeLabelValue for LeaseEvent {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabels {
    event: LeaseEvent,
}

/// The lease family of the registry.
pub(super) struct LeaseFamilies {
    events: Family<EventLabels, Counter>,
}

impl LeaseFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "ferry_lease_events",
            "Session and ingress lease events of this replica: claimed, renewed, lost, fenced_write",
            events.clone(),
        );
        Self { events }
    }

    pub(super) fn count(&self, event: LeaseEvent, count: usize) {
        if count > 0 {
            self.events.get_or_create(&EventLabels { event }).inc_by(count as u64);
        }
    }
}
