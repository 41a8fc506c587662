//! Process-wide Prometheus metrics, served by the gateway at `GET /metrics` (SPEC §8).
//!
//! There is one registry per process: [`metrics()`] is the handle every stage records
//! into, [`render()`] the OpenMetrics text the gateway serves (as [`CONTENT_TYPE`]).
//!
//! ```
//! use ferry::metrics::{self, LaneKind};
//! use std::time::Duration;
//!
//! metrics::metrics().lane_waited(LaneKind::Global, Duration::from_millis(30));
//! assert!(metrics::render().contains("# TYPE ferry_lane_wait_seconds histogram"));
//! ```
//!
//! Where each family is measured:
//! - `ferry_runs_started_total`, `ferry_runs_finished_total{status}`,
//!   `ferry_run_duration_seconds`, `ferry_runs_active`: the agent run itself
//!   ([`crate::agent::AgentRunner::run`]), next to its lifecycle events — one terminal
//!   status per run;
//! - `ferry_queue_depth`, `ferry_lane_wait_seconds{lane}`: the queue scheduler (session
//!   lane) and the global lane, where a long wait is logged;
//! - `ferry_inbound_messages_total{channel, outcome}`: the dispatcher, once per delivery;
//! - `ferry_outbound_*{channel}`: the outbound scheduler, per platform call;
//! - `ferry_model_*{provider}`: the agent loop, per model request.
//!
//! Label values are channel names (`telegram`), provider names (the `NAME` of
//! `[models.providers.NAME]`, or `openai` / `anthropic` / `echo` when no provider is
//! configured) and small fixed sets — never chat ids or session keys — so the number of
//! series stays bounded. Recording is an atomic add, or a histogram observation under a
//! short lock. Stages that know their channel or provider up front keep a handle
//! ([`OutboundMetrics`], [`ModelMetrics`]) and record without a label lookup; the
//! dispatcher's per-message count looks its series up (one small allocation).

use std::fmt::{self, Write as _};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ferry_channel::ChannelError;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

mod cron;
mod leases;
mod mcp;
mod memory;

pub use leases::LeaseEvent;
pub use mcp::{McpCall, McpMetrics};

/// The media type of [`render`]'s output (OpenMetrics text 1.0.0), for the `/metrics`
/// response's `Content-Type`. Prometheus reads it natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `ferry_run_duration_seconds` buckets: a quick answer takes a second or two, a run with
/// tools a minute, and the default run timeout is 600 s.
const RUN_BUCKETS: [f64; 11] = [0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// `ferry_lane_wait_seconds` buckets: usually milliseconds; 2 s is where the wait is logged
/// (SPEC §5); a session lane's wait includes the collect mode's quiet window (1 s).
const WAIT_BUCKETS: [f64; 12] = [0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0];
/// `ferry_model_request_seconds` buckets: one streamed model reply; the idle watchdog ends
/// a silent one after 120 s.
const MODEL_BUCKETS: [f64; 11] = [0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];
/// `ferry_model_first_token_seconds` buckets.
const FIRST_TOKEN_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0];

/// The process's metrics, created on first use.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Every metric of the process in the OpenMetrics text format (`# HELP`, `# TYPE`, the
/// samples, `# EOF`), as `GET /metrics` serves it.
pub fn render() -> String {
    metrics().render()
}

/// Implements [`EncodeLabelValue`] with lower-case values (the derive would write the
/// variant names as they are: `Ok`, not `ok`).
macro_rules! label_values {
    ($type:ty { $($variant:ident => $value:literal),+ $(,)? }) => {
        impl $type {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value),+
                }
            }
        }

        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    };
}

/// How a run ended: `ferry_runs_finished_total{status}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunEnd {
    Ok,
    /// Timed out, cancelled (`/stop`, interrupt mode, `chat.abort`) or dropped unfinished.
    Aborted,
    /// The model call failed (or the run panicked).
    Error,
}
label_values!(RunEnd { Ok => "ok", Aborted => "aborted", Error => "error" });

/// Which lane a run waited in: `ferry_lane_wait_seconds{lane}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LaneKind {
    /// From the message's arrival until its session's run started (behind the session's
    /// active run, and the quiet window).
    Session,
    /// For a slot among the `max_concurrent` runs.
    Global,
}
label_values!(LaneKind { Session => "session", Global => "global" });

/// What became of an inbound message: `ferry_inbound_messages_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboundOutcome {
    /// Handed to the queue (to run now, wait, or steer the active run).
    Run,
    /// A command (`/stop`, `/queue`, …), handled at once.
    Command,
    /// A redelivery of a message already handled.
    Duplicate,
    /// Not for the bot (from a bot, or a group message without a mention).
    Ignored,
    /// The sender is not allowed.
    Denied,
    /// An unknown DM sender, sent a pairing code.
    Pairing,
    /// Refused by a full queue (`drop = "new"`) or as too long; the sender was told.
    Rejected,
    /// It could not be recorded or routed; left unacknowledged for redelivery.
    Error,
    /// Journaled here and run by the replica that holds its session (several replicas on
    /// one PostgreSQL).
    Forwarded,
}
label_values!(InboundOutcome {
    Run => "run",
    Command => "command",
    Duplicate => "duplicate",
    Ignored => "ignored",
    Denied => "denied",
    Pairing => "pairing",
    Rejected => "rejected",
    Error => "error",
    Forwarded => "forwarded",
});

/// A platform call: `ferry_outbound_sends_total{op}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Send,
    Edit,
    Delete,
}
label_values!(Op { Send => "send", Edit => "edit", Delete => "delete" });

/// How a send whose outcome was unknown was settled:
/// `ferry_deliveries_reconciled_total{channel,outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reconciled {
    /// The platform already had it (found by its idempotency key): adopted, not sent again.
    Found,
    /// Looked for and not there: sent.
    NotFound,
    /// Sent again under the same key, which the platform deduplicates (Discord's nonce).
    PlatformDeduplicated,
}
label_values!(Reconciled { Found => "found", NotFound => "not_found", PlatformDeduplicated => "platform_deduplicated" });

/// What became of a preview a killed run left behind:
/// `ferry_previews_recovered_total{channel,action}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreviewAction {
    /// The run's next attempt streams into it again.
    Reused,
    /// Edited into the reply the killed run had already finished.
    Finalized,
    /// Removed: superseded by the reply, or by a newer preview.
    Deleted,
}
label_values!(PreviewAction { Reused => "reused", Finalized => "finalized", Deleted => "deleted" });

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReconciledLabels {
    channel: String,
    outcome: Reconciled,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PreviewLabels {
    channel: String,
    action: PreviewAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: RunEnd,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LaneLabels {
    lane: LaneKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InboundLabels {
    channel: String,
    outcome: InboundOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SendLabels {
    channel: String,
    op: Op,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FailoverLabels {
    from: String,
    to: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CooldownLabels {
    provider: String,
    reason: String,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Every metric Ferry exports, registered in one registry. Get it with [`metrics()`].
pub struct Metrics {
    registry: Registry,
    runs_started: Counter,
    runs_finished: Family<StatusLabels, Counter>,
    run_duration: Histogram,
    runs_active: Gauge,
    queue_depth: Gauge,
    lane_wait: HistogramFamily<LaneLabels>,
    inbound: Family<InboundLabels, Counter>,
    outbound_sends: Family<SendLabels, Counter>,
    outbound_retries: Family<ChannelLabels, Counter>,
    outbound_rate_limited: Family<ChannelLabels, Counter>,
    outbound_failures: Family<ChannelLabels, Counter>,
    outbound_unknown_outcome: Family<ChannelLabels, Counter>,
    deliveries_reconciled: Family<ReconciledLabels, Counter>,
    previews_recovered: Family<PreviewLabels, Counter>,
    model_request: HistogramFamily<ProviderLabels>,
    model_first_token: HistogramFamily<ProviderLabels>,
    model_errors: Family<ProviderLabels, Counter>,
    model_failovers: Family<FailoverLabels, Counter>,
    profile_cooldowns: Family<CooldownLabels, Counter>,
    profiles_cooling: Gauge,
    mcp: mcp::McpFamilies,
    cron: cron::CronFamilies,
    memory: memory::MemoryFamilies,
    leases: leases::LeaseFamilies,
    /// Count the profiles cooling now (one per model router), read at each render: a
    /// cooldown ends with time alone, with no event to update the gauge.
    cooling_samplers: Mutex<Vec<CoolingSampler>>,
}

/// See [`Metrics::sample_profiles_cooling`]. `None` once its source is gone.
type CoolingSampler = Box<dyn Fn() -> Option<usize> + Send + Sync>;

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let runs_started = Counter::default();
        registry.register("ferry_runs_started", "Agent runs started", runs_started.clone());
        let runs_finished = Family::<StatusLabels, Counter>::default();
        registry.register(
            "ferry_runs_finished",
            "Agent runs ended, by how they ended (ok, aborted, error)",
            runs_finished.clone(),
        );
        let run_duration = Histogram::new(RUN_BUCKETS);
        registry.register_with_unit(
            "ferry_run_duration",
            "How long agent runs took, start to end",
            Unit::Seconds,
            run_duration.clone(),
        );
        let runs_active = Gauge::default();
        registry.register("ferry_runs_active", "Agent runs in progress", runs_active.clone());
        let queue_depth = Gauge::default();
        registry.register(
            "ferry_queue_depth",
            "Messages waiting in session queues for a run, across sessions",
            queue_depth.clone(),
        );
        let lane_wait = HistogramFamily::<LaneLabels>::new_with_constructor(|| Histogram::new(WAIT_BUCKETS));
        registry.register_with_unit(
            "ferry_lane_wait",
            "How long a run waited to start: in its session lane (since the message came) and for a global lane slot",
            Unit::Seconds,
            lane_wait.clone(),
        );
        let inbound = Family::<InboundLabels, Counter>::default();
        registry.register(
            "ferry_inbound_messages",
            "Inbound messages handled, by channel and outcome",
            inbound.clone(),
        );
        let outbound_sends = Family::<SendLabels, Counter>::default();
        registry.register(
            "ferry_outbound_sends",
            "Platform calls that succeeded (retries included in one call), by channel and operation",
            outbound_sends.clone(),
        );
        let outbound_retries = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "ferry_outbound_retries",
            "Platform calls tried again after a 429, a timeout, a 5xx or a dropped connection",
            outbound_retries.clone(),
        );
        let outbound_rate_limited = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "ferry_outbound_rate_limited",
            "Platform calls answered with a 429 (rate limited)",
            outbound_rate_limited.clone(),
        );
        let outbound_failures = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "ferry_outbound_failures",
            "Platform calls that failed for good (not retryable, or out of attempts)",
            outbound_failures.clone(),
        );
        let outbound_unknown_outcome = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "ferry_outbound_unknown_outcome",
            "Sends repeated although an earlier attempt may have landed, on a platform that offers no way to tell (Telegram): the one case that may show a message twice",
            outbound_unknown_outcome.clone(),
        );
        let deliveries_reconciled = Family::<ReconciledLabels, Counter>::default();
        registry.register(
            "ferry_deliveries_reconciled",
            "Sends whose outcome was unknown (a dropped connection, a restart mid-send), by how they were settled",
            deliveries_reconciled.clone(),
        );
        let previews_recovered = Family::<PreviewLabels, Counter>::default();
        registry.register(
            "ferry_previews_recovered",
            "Preview messages left by a run that did not finish (a crash, a restart), by what became of them",
            previews_recovered.clone(),
        );
        let model_request = HistogramFamily::<ProviderLabels>::new_with_constructor(|| Histogram::new(MODEL_BUCKETS));
        registry.register_with_unit(
            "ferry_model_request",
            "Model requests that completed: from the request to the end of the streamed reply",
            Unit::Seconds,
            model_request.clone(),
        );
        let model_first_token =
            HistogramFamily::<ProviderLabels>::new_with_constructor(|| Histogram::new(FIRST_TOKEN_BUCKETS));
        registry.register_with_unit(
            "ferry_model_first_token",
            "From a model request to the first streamed output (text, reasoning or a tool call)",
            Unit::Seconds,
            model_first_token.clone(),
        );
        let model_errors = Family::<ProviderLabels, Counter>::default();
        registry.register(
            "ferry_model_errors",
            "Model requests that failed (refused, broken off, or idle too long), retried ones included",
            model_errors.clone(),
        );
        let model_failovers = Family::<FailoverLabels, Counter>::default();
        registry.register(
            "ferry_model_failovers",
            "Model calls moved to other credentials or another model before any output, by from, to \
             (provider/model@profile) and reason",
            model_failovers.clone(),
        );
        let profile_cooldowns = Family::<CooldownLabels, Counter>::default();
        registry.register(
            "ferry_auth_profile_cooldowns",
            "Auth profiles put on cooldown, by provider and reason (rate_limit, overloaded, auth, billing, timeout)",
            profile_cooldowns.clone(),
        );
        let profiles_cooling = Gauge::default();
        registry.register(
            "ferry_auth_profiles_cooling",
            "Auth profiles cooling down or disabled right now",
            profiles_cooling.clone(),
        );

        let mcp = mcp::McpFamilies::register(&mut registry);
        let cron = cron::CronFamilies::register(&mut registry);
        let memory = memory::MemoryFamilies::register(&mut registry);
        let leases = leases::LeaseFamilies::register(&mut registry);

        // Series with fixed labels exist from the start, so a rate over them is defined
        // before the first event.
        for status in [RunEnd::Ok, RunEnd::Aborted, RunEnd::Error] {
            let _ = runs_finished.get_or_create(&StatusLabels { status });
        }
        for lane in [LaneKind::Session, LaneKind::Global] {
            let _ = lane_wait.get_or_create(&LaneLabels { lane });
        }

        Self {
            registry,
            runs_started,
            runs_finished,
            run_duration,
            runs_active,
            queue_depth,
            lane_wait,
            inbound,
            outbound_sends,
            outbound_retries,
            outbound_rate_limited,
            outbound_failures,
            outbound_unknown_outcome,
            deliveries_reconciled,
            previews_recovered,
            model_request,
            model_first_token,
            model_errors,
            model_failovers,
            profile_cooldowns,
            profiles_cooling,
            mcp,
            cron,
            memory,
            leases,
            cooling_samplers: Mutex::new(Vec::new()),
        }
    }

    /// The OpenMetrics text of this registry; see [`render`].
    pub fn render(&self) -> String {
        self.sample_cooling();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encoding into a String cannot fail");
        text
    }

    /// An agent run started: counted, and active until the returned timer is finished or
    /// dropped.
    pub fn run_started(&self) -> RunTimer<'_> {
        self.runs_started.inc();
        self.runs_active.inc();
        RunTimer { metrics: self, started: Instant::now(), ended: false }
    }

    /// `ferry_queue_depth`, which the queue scheduler keeps equal to the messages waiting
    /// in its session queues.
    pub fn queue_depth(&self) -> &Gauge {
        &self.queue_depth
    }

    /// A run waited `waited` in `lane` before it could start.
    pub fn lane_waited(&self, lane: LaneKind, waited: Duration) {
        self.lane_wait.get_or_create(&LaneLabels { lane }).observe(waited.as_secs_f64());
    }

    /// An inbound message from `channel` (the channel's name, e.g. `telegram`) was handled.
    pub fn inbound(&self, channel: &str, outcome: InboundOutcome) {
        self.inbound.get_or_create(&InboundLabels { channel: channel.to_owned(), outcome }).inc();
    }

    /// The outbound counters of `channel` (the channel's name), for a sender to keep.
    pub fn outbound(&self, channel: &str) -> OutboundMetrics {
        let labels = ChannelLabels { channel: channel.to_owned() };
        let sends = |op| self.outbound_sends.get_or_create_owned(&SendLabels { channel: channel.to_owned(), op });
        OutboundMetrics {
            send: sends(Op::Send),
            edit: sends(Op::Edit),
            delete: sends(Op::Delete),
            retries: self.outbound_retries.get_or_create_owned(&labels),
            rate_limited: self.outbound_rate_limited.get_or_create_owned(&labels),
            failures: self.outbound_failures.get_or_create_owned(&labels),
            unknown_outcome: self.outbound_unknown_outcome.get_or_create_owned(&labels),
        }
    }

    /// A send whose outcome was unknown was settled as `outcome` on `channel`.
    pub fn delivery_reconciled(&self, channel: &str, outcome: Reconciled) {
        self.deliveries_reconciled.get_or_create(&ReconciledLabels { channel: channel.to_owned(), outcome }).inc();
    }

    /// A preview a killed run left on `channel` was dealt with as `action`.
    pub fn preview_recovered(&self, channel: &str, action: PreviewAction) {
        self.previews_recovered.get_or_create(&PreviewLabels { channel: channel.to_owned(), action }).inc();
    }

    /// The model metrics of `provider` (its name in the config), for a runner to keep.
    /// One lease event (`ferry_lease_events_total{event}`).
    pub fn lease(&self, event: LeaseEvent) {
        self.leases.count(event, 1);
    }

    /// `count` lease events of one kind.
    pub fn lease_count(&self, event: LeaseEvent, count: usize) {
        self.leases.count(event, count);
    }

    /// A scheduled job's fire claimed (`ferry_cron_fires`, `ferry_cron_late_fires`).
    pub fn cron_fired(&self, late: bool) {
        self.cron.fired(late);
    }

    /// Slots skipped (`ferry_cron_skipped_slots`).
    pub fn cron_skipped(&self, count: u64) {
        self.cron.skipped(count);
    }

    /// A memory search, answered by keywords alone or hybrid (`ferry_memory_searches`).
    pub fn memory_searched(&self, hybrid: bool) {
        self.memory.searched(hybrid);
    }

    /// A memory document written (`ferry_memory_writes`).
    pub fn memory_written(&self) {
        self.memory.written();
    }

    /// A call to the embeddings endpoint (`ferry_memory_embedding_calls`).
    pub fn memory_embedding_call(&self, ok: bool) {
        self.memory.embedding_call(ok);
    }

    /// A fire ended: `ok`, `skipped` or `failed` (`ferry_cron_fires_ended`).
    pub fn cron_fire_ended(&self, status: &str) {
        self.cron.ended(status);
    }

    /// One MCP server's series (`ferry_mcp_*{server}`).
    pub fn mcp(&self, server: &str) -> McpMetrics {
        self.mcp.server(server)
    }

    pub fn model(&self, provider: &str) -> ModelMetrics {
        let labels = ProviderLabels { provider: provider.to_owned() };
        ModelMetrics {
            request: self.model_request.get_or_create_owned(&labels),
            first_token: self.model_first_token.get_or_create_owned(&labels),
            errors: self.model_errors.get_or_create_owned(&labels),
        }
    }
}

impl Metrics {
    /// A model call moved from one `provider/model@profile` to another for `reason`.
    pub fn model_failover(&self, from: &str, to: &str, reason: &str) {
        let labels = FailoverLabels { from: from.to_owned(), to: to.to_owned(), reason: reason.to_owned() };
        self.model_failovers.get_or_create(&labels).inc();
    }

    /// A profile of `provider` was put on cooldown for `reason`.
    pub fn profile_cooldown(&self, provider: &str, reason: &str) {
        self.profile_cooldowns
            .get_or_create(&CooldownLabels { provider: provider.to_owned(), reason: reason.to_owned() })
            .inc();
    }

    /// Adds to `ferry_auth_profiles_cooling` what `sample` counts, asked at every render;
    /// `sample` answers `None` once what it counts is gone, and is then forgotten.
    pub fn sample_profiles_cooling(&self, sample: impl Fn() -> Option<usize> + Send + Sync + 'static) {
        self.cooling_samplers.lock().unwrap_or_else(PoisonError::into_inner).push(Box::new(sample));
        self.sample_cooling();
    }

    fn sample_cooling(&self) {
        let mut samplers = self.cooling_samplers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut cooling = 0_usize;
        samplers.retain(|sample| sample().map(|count| cooling += count).is_some());
        self.profiles_cooling.set(i64::try_from(cooling).unwrap_or(i64::MAX));
    }
}

/// One agent run in progress, from [`Metrics::run_started`]. Like the run's lifecycle
/// events it ends exactly once: [`RunTimer::finish`] records how, and a timer dropped
/// unfinished (the run's future was dropped, or it panicked) counts as aborted (error).
#[must_use = "dropping the timer ends the run in the metrics"]
pub struct RunTimer<'a> {
    metrics: &'a Metrics,
    started: Instant,
    ended: bool,
}

impl RunTimer<'_> {
    /// The run ended: counts it under `end` and records its duration.
    pub fn finish(mut self, end: RunEnd) {
        self.end(end);
    }

    fn end(&mut self, end: RunEnd) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.metrics.runs_finished.get_or_create(&StatusLabels { status: end }).inc();
        self.metrics.run_duration.observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for RunTimer<'_> {
    fn drop(&mut self) {
        self.end(if std::thread::panicking() { RunEnd::Error } else { RunEnd::Aborted });
        self.metrics.runs_active.dec();
    }
}

/// One channel's outbound counters (`ferry_outbound_*{channel}`), from
/// [`Metrics::outbound`]. Cheap to clone; clones count into the same series.
#[derive(Debug, Clone)]
pub struct OutboundMetrics {
    send: Counter,
    edit: Counter,
    delete: Counter,
    retries: Counter,
    rate_limited: Counter,
    failures: Counter,
    unknown_outcome: Counter,
}

impl OutboundMetrics {
    /// A send is repeated although an earlier attempt may have landed, with no way to tell.
    pub fn unknown_outcome(&self) {
        self.unknown_outcome.inc();
    }

    /// A platform call succeeded (after however many attempts).
    pub fn delivered(&self, op: Op) {
        match op {
            Op::Send => self.send.inc(),
            Op::Edit => self.edit.inc(),
            Op::Delete => self.delete.inc(),
        };
    }

    /// An attempt at a platform call failed with `error`: a 429 counts as rate limited,
    /// and the call as retried, or as failed for good when not `retrying`.
    pub fn attempt_failed(&self, error: &ChannelError, retrying: bool) {
        if matches!(error, ChannelError::RateLimited { .. }) {
            self.rate_limited.inc();
        }
        if retrying {
            self.retries.inc();
        } else {
            self.failures.inc();
        }
    }
}

/// One model provider's metrics (`ferry_model_*{provider}`), from [`Metrics::model`].
/// Cheap to clone; clones record into the same series.
#[derive(Debug, Clone)]
pub struct ModelMetrics {
    request: Histogram,
    first_token: Histogram,
    errors: Counter,
}

impl ModelMetrics {
    /// A model request is being sent; the returned timer measures it.
    pub fn request(&self) -> ModelCall<'_> {
        ModelCall { metrics: self, started: Instant::now(), output: false }
    }
}

/// One model request in flight, from [`ModelMetrics::request`]. A request dropped before
/// [`ModelCall::ended`] (its run was aborted) records nothing more.
#[must_use = "a model call records its duration or error only when ended"]
pub struct ModelCall<'a> {
    metrics: &'a ModelMetrics,
    started: Instant,
    output: bool,
}

impl ModelCall<'_> {
    /// The reply streamed output; the first time is its first token.
    pub fn output(&mut self) {
        if !std::mem::replace(&mut self.output, true) {
            self.metrics.first_token.observe(self.started.elapsed().as_secs_f64());
        }
    }

    /// The request is over: a complete reply records its duration, anything else counts
    /// as an error.
    pub fn ended(self, completed: bool) {
        if completed {
            self.metrics.request.observe(self.started.elapsed().as_secs_f64());
        } else {
            self.metrics.errors.inc();
        }
    }
}

/// The value of one series in [`render`]'s output (`name{labels}` exactly as rendered),
/// 0 if it is absent. The registry is shared by every test in the process, so tests
/// compare values before and after, on labels of their own.
#[cfg(test)]
pub(crate) fn sample(series: &str) -> f64 {
    sample_in(&render(), series)
}

#[cfg(test)]
fn sample_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.parse().expect("a sample's value is a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_help_and_type_lines_and_the_labelled_samples() {
        let metrics = Metrics::new();
        metrics.run_started().finish(RunEnd::Ok);
        metrics.inbound("telegram", InboundOutcome::Run);
        metrics.outbound("discord").delivered(Op::Edit);
        metrics.outbound("discord").attempt_failed(&ChannelError::Closed, false);
        metrics.model("openai").request().ended(false);
        metrics.lane_waited(LaneKind::Session, Duration::from_millis(30));
        let text = metrics.render();
        for line in [
            "# HELP ferry_runs_started Agent runs started.",
            "# TYPE ferry_runs_started counter",
            "ferry_runs_started_total 1",
            "# TYPE ferry_runs_finished counter",
            r#"ferry_runs_finished_total{status="ok"} 1"#,
            r#"ferry_runs_finished_total{status="aborted"} 0"#,
            "# TYPE ferry_run_duration_seconds histogram",
            "# UNIT ferry_run_duration_seconds seconds",
            "ferry_run_duration_seconds_count 1",
            "# TYPE ferry_runs_active gauge",
            "ferry_runs_active 0",
            "# HELP ferry_queue_depth Messages waiting in session queues for a run, across sessions.",
            "ferry_queue_depth 0",
            r#"ferry_lane_wait_seconds_count{lane="session"} 1"#,
            r#"ferry_lane_wait_seconds_bucket{le="0.025",lane="session"} 0"#,
            r#"ferry_lane_wait_seconds_bucket{le="0.1",lane="session"} 1"#,
            r#"ferry_lane_wait_seconds_count{lane="global"} 0"#,
            r#"ferry_inbound_messages_total{channel="telegram",outcome="run"} 1"#,
            r#"ferry_outbound_sends_total{channel="discord",op="edit"} 1"#,
            r#"ferry_outbound_sends_total{channel="discord",op="send"} 0"#,
            r#"ferry_outbound_rate_limited_total{channel="discord"} 0"#,
            r#"ferry_outbound_retries_total{channel="discord"} 0"#,
            "# HELP ferry_outbound_failures Platform calls that failed for good (not retryable, or out of attempts).",
            r#"ferry_outbound_failures_total{channel="discord"} 1"#,
            r#"ferry_model_errors_total{provider="openai"} 1"#,
            r#"ferry_model_request_seconds_count{provider="openai"} 0"#,
            "# TYPE ferry_model_first_token_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_run_is_active_until_it_ends_and_a_dropped_run_counts_as_aborted() {
        let metrics = Metrics::new();
        let run = metrics.run_started();
        assert_eq!(metrics.runs_active.get(), 1);
        drop(run);
        assert_eq!(metrics.runs_active.get(), 0);
        metrics.run_started().finish(RunEnd::Error);
        let text = metrics.render();
        assert_eq!(sample_in(&text, r#"ferry_runs_finished_total{status="aborted"}"#), 1.0);
        assert_eq!(sample_in(&text, r#"ferry_runs_finished_total{status="error"}"#), 1.0);
        assert_eq!(sample_in(&text, "ferry_run_duration_seconds_count"), 2.0);
        assert_eq!(sample_in(&text, "ferry_runs_started_total"), 2.0);
    }

    #[test]
    fn a_429_counts_as_rate_limited_and_a_call_given_up_as_failed() {
        let metrics = Metrics::new();
        let outbound = metrics.outbound("slack");
        outbound.attempt_failed(&ChannelError::RateLimited { retry_after: None }, true);
        outbound.attempt_failed(&ChannelError::Transient { reason: "502".into() }, true);
        outbound.attempt_failed(&ChannelError::Rejected { reason: "no such chat".into() }, false);
        let text = metrics.render();
        assert_eq!(sample_in(&text, r#"ferry_outbound_rate_limited_total{channel="slack"}"#), 1.0);
        assert_eq!(sample_in(&text, r#"ferry_outbound_retries_total{channel="slack"}"#), 2.0);
        assert_eq!(sample_in(&text, r#"ferry_outbound_failures_total{channel="slack"}"#), 1.0);
    }

    #[test]
    fn a_model_call_records_its_first_token_once_and_its_duration_when_complete() {
        let metrics = Metrics::new();
        let model = metrics.model("anthropic");
        let mut call = model.request();
        call.output();
        call.output();
        call.ended(true);
        let text = metrics.render();
        assert_eq!(sample_in(&text, r#"ferry_model_first_token_seconds_count{provider="anthropic"}"#), 1.0);
        assert_eq!(sample_in(&text, r#"ferry_model_request_seconds_count{provider="anthropic"}"#), 1.0);
        assert_eq!(sample_in(&text, r#"ferry_model_errors_total{provider="anthropic"}"#), 0.0);
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        metrics.inbound("odd\"name", InboundOutcome::Denied);
        assert!(metrics.render().contains(r#"{channel="odd\"name",outcome="denied"} 1"#));
    }

    #[test]
    fn the_process_registry_shows_the_unlabelled_and_fixed_label_series_from_the_start() {
        // Families labelled by channel or provider appear with their first series.
        let text = render();
        for series in [
            "ferry_runs_started_total",
            r#"ferry_runs_finished_total{status="error"}"#,
            "ferry_run_duration_seconds_count",
            "ferry_runs_active",
            "ferry_queue_depth",
            r#"ferry_lane_wait_seconds_count{lane="session"}"#,
            r#"ferry_lane_wait_seconds_count{lane="global"}"#,
        ] {
            assert!(text.lines().any(|line| line.starts_with(&format!("{series} "))), "no {series} in:\n{text}");
        }
    }
}
