//! `ferry_cron_*`: scheduled jobs' fires (late ones too), skipped slots and how fires ended.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

/// The scheduler's families of the registry.
pub(super) struct CronFamilies {
    fires: Counter,
    late: Counter,
    skipped: Counter,
    ended: Family<StatusLabels, Counter>,
}

impl CronFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let fires = Counter::default();
        registry.register("ferry_cron_fires", "Scheduled jobs' fires claimed and journaled", fires.clone());
        let late = Counter::default();
        registry.register(
            "ferry_cron_late_fires",
            "Fires made late, after their slot passed while Ferry was down",
            late.clone(),
        );
        let skipped = Counter::default();
        registry.register(
            "ferry_cron_skipped_slots",
            "Slots not fired (missed past their grace, or missed = \"skip\"); each is in its job's run history",
            skipped.clone(),
        );
        let ended = Family::<StatusLabels, Counter>::default();
        registry.register(
            "ferry_cron_fires_ended",
            "Fires by how they ended: ok, skipped (nothing to do, a busy chat), failed",
            ended.clone(),
        );
        Self { fires, late, skipped, ended }
    }

    pub(super) fn fired(&self, late: bool) {
        self.fires.inc();
        if late {
            self.late.inc();
        }
    }

    pub(super) fn skipped(&self, count: u64) {
        self.skipped.inc_by(count);
    }

    pub(super) fn ended(&self, status: &str) {
        self.ended.get_or_create(&StatusLabels { status: status.to_owned() }).inc();
    }
}
