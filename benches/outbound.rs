//! The outbound scheduler's own cost per platform call (issue 5): a send through
//! `OutboundScheduler` against a channel that answers at once, compared with calling the
//! channel directly. The difference is the scheduler's overhead (target ≤ 20 µs per send).
//!
//! Run with `cargo bench --bench outbound`; results go in BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};

use ferry::channel::{
    Channel, ChannelCapabilities, ChannelError, ChatKind, ChatRef, InboundStream, OutboundMessage, Rate, SendBudget,
    SentMessage, Target,
};
use ferry::reply::outbound::OutboundScheduler;

/// Accepts every call at once and keeps nothing.
struct InstantChannel {
    capabilities: ChannelCapabilities,
    next_id: AtomicU64,
}

#[async_trait]
impl Channel for InstantChannel {
    fn name(&self) -> &str {
        "instant"
    }

    fn account_id(&self) -> &str {
        "default"
    }

    fn capabilities(&self) -> &ChannelCapabilities {
        &self.capabilities
    }

    async fn start(&self) -> Result<InboundStream, ChannelError> {
        Err(ChannelError::Closed)
    }

    async fn send(&self, _message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        Ok(SentMessage { message_id: self.next_id.fetch_add(1, Ordering::Relaxed).to_string() })
    }
}

fn channel(send_budget: SendBudget) -> Arc<InstantChannel> {
    Arc::new(InstantChannel {
        capabilities: ChannelCapabilities { send_budget, ..ChannelCapabilities::unrestricted() },
        next_id: AtomicU64::new(0),
    })
}

fn message(chat: u64) -> OutboundMessage {
    OutboundMessage::text(Target { chat: ChatRef::new(ChatKind::Direct, chat.to_string()), thread_id: None }, "hi")
}

fn outbound(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    // Budgets far above the bench's rate: the limiters are consulted on every call but
    // never make it wait, so what is timed is the bookkeeping.
    let generous = SendBudget {
        per_chat: Some(Rate::new(1_000_000, Duration::from_secs(1))),
        per_direct_chat: Some(Rate::new(1_000_000, Duration::from_secs(1))),
        per_group: Some(Rate::new(1_000_000, Duration::from_secs(1))),
        global: Some(Rate::new(1_000_000_000, Duration::from_secs(1))),
    };
    let direct = channel(generous);
    let scheduled = OutboundScheduler::new(channel(generous));
    let mut group = c.benchmark_group("outbound");
    let counter = AtomicU64::new(0);
    group.bench_function("channel_send_direct", |b| {
        b.to_async(&runtime).iter(|| async {
            let chat = counter.fetch_add(1, Ordering::Relaxed) % 1000;
            direct.send(message(chat)).await.expect("sent")
        })
    });
    group.bench_function("scheduler_send", |b| {
        b.to_async(&runtime).iter(|| async {
            let chat = counter.fetch_add(1, Ordering::Relaxed) % 1000;
            scheduled.send(message(chat)).await.expect("sent")
        })
    });
    group.finish();
}

criterion_group!(benches, outbound);
criterion_main!(benches);
