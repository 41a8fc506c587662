//! `ferry_memory_*`: long-term memory's searches (by how they were answered), writes, and
//! calls to the embeddings endpoint (by outcome).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// Memory's families of the registry.
pub(super) struct MemoryFamilies {
    searches: Family<KindLabels, Counter>,
    writes: Counter,
    embedding_calls: Family<OutcomeLabels, Counter>,
}

impl MemoryFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let searches = Family::<KindLabels, Counter>::default();
        registry.register(
            "ferry_memory_searches",
            "Memory searches, by how they were answered: keyword, or hybrid (keywords and embeddings)",
            searches.clone(),
        );
        let writes = Counter::default();
        registry.register(
            "ferry_memory_writes",
            "Memory documents written (memory_write, /remember, /forget)",
            writes.clone(),
        );
        let embedding_calls = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "ferry_memory_embedding_calls",
            "Calls to the embeddings endpoint, by outcome: ok or failed",
            embedding_calls.clone(),
        );
        Self { searches, writes, embedding_calls }
    }

    pub(super) fn searched(&self, hybrid: bool) {
        let kind = if hybrid { "hybrid" } else { "keyword" };
        self.searches.get_or_create(&KindLabels { kind: kind.to_owned() }).inc();
    }

    pub(super) fn written(&self) {
        self.writes.inc();
    }

    pub(super) fn embedding_call(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.embedding_calls.get_or_create(&OutcomeLabels { outcome: outcome.to_owned() }).inc();
    }
}
