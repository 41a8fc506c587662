//! `ferry_mcp_*{server}`: calls to MCP servers' tools, their failures and how long they took.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::HistogramFamily;

/// From a local server's few milliseconds to the default 60 s call timeout.
const CALL_BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

/// The MCP families of the registry.
pub(super) struct McpFamilies {
    calls: Family<ServerLabels, Counter>,
    errors: Family<ServerLabels, Counter>,
    duration: HistogramFamily<ServerLabels>,
}

impl McpFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let calls = Family::<ServerLabels, Counter>::default();
        registry.register("ferry_mcp_calls", "Tool calls sent to MCP servers, by server", calls.clone());
        let errors = Family::<ServerLabels, Counter>::default();
        registry.register(
            "ferry_mcp_call_errors",
            "MCP tool calls that failed (an error result, a timeout, a lost connection), by server",
            errors.clone(),
        );
        let duration = HistogramFamily::<ServerLabels>::new_with_constructor(|| Histogram::new(CALL_BUCKETS));
        registry.register_with_unit(
            "ferry_mcp_call_duration",
            "How long MCP tool calls took, answered or not, by server",
            Unit::Seconds,
            duration.clone(),
        );
        Self { calls, errors, duration }
    }

    pub(super) fn server(&self, server: &str) -> McpMetrics {
        let labels = ServerLabels { server: server.to_owned() };
        McpMetrics {
            calls: self.calls.get_or_create_owned(&labels),
            errors: self.errors.get_or_create_owned(&labels),
            duration: self.duration.get_or_create_owned(&labels),
        }
    }
}

/// One server's series, from [`super::Metrics::mcp`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct McpMetrics {
    calls: Counter,
    errors: Counter,
    duration: Histogram,
}

impl McpMetrics {
    /// A call is being sent; the returned timer records it.
    pub fn call(&self) -> McpCall<'_> {
        self.calls.inc();
        McpCall { metrics: self, started: Instant::now() }
    }
}

/// One call in flight. Dropped without [`McpCall::ended`] (its run was stopped), it records
/// nothing more.
#[must_use = "a call records its duration only when ended"]
pub struct McpCall<'a> {
    metrics: &'a McpMetrics,
    started: Instant,
}

impl McpCall<'_> {
    pub fn ended(self, ok: bool) {
        self.metrics.duration.observe(self.started.elapsed().as_secs_f64());
        if !ok {
            self.metrics.errors.inc();
        }
    }
}
