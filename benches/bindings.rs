//! Choosing the agent of an inbound message: 100 agents and 10,000 bindings (peers, threads,
//! guilds/teams, accounts and channels mixed), looked up for messages that hit a peer
//! binding, a guild binding, and none (the default agent: every probe misses). Target: at
//! most 2 µs per message. Run with `cargo bench --bench bindings`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};

use ferry::channel::{ChatKind, ChatRef, InboundMessage, Sender};
use ferry::config::{BindingConfig, BindingMatch};
use ferry::routing::BindingTable;

const AGENTS: usize = 100;
const BINDINGS: usize = 10_000;

/// Bindings spread over the five tiers, each to one of [`AGENTS`] agents.
fn bindings() -> Vec<BindingConfig> {
    (0..BINDINGS)
        .map(|index| {
            let agent = format!("agent-{}", index % AGENTS);
            let matches = match index % 5 {
                0 | 1 => BindingMatch {
                    channel: Some("slack".into()),
                    peer: Some(format!("C{index:08}")),
                    ..Default::default()
                },
                2 => BindingMatch { thread: Some(format!("1712345678.{index:06}")), ..Default::default() },
                3 => BindingMatch {
                    channel: Some("discord".into()),
                    guild: Some(format!("{index:018}")),
                    ..Default::default()
                },
                _ => BindingMatch {
                    channel: Some("telegram".into()),
                    account: Some(format!("bot{index}")),
                    ..Default::default()
                },
            };
            BindingConfig { agent, matches }
        })
        .collect()
}

fn group(channel: &str, chat: &str, space: Option<String>) -> InboundMessage {
    let mut message =
        InboundMessage::new(channel, "default", ChatRef::new(ChatKind::Group, chat), Sender::user("U1"), "1", "hi");
    message.space_id = space;
    message
}

fn bench(c: &mut Criterion) {
    let table = BindingTable::build("main", &bindings()).expect("no ties");
    let by_peer = group("slack", "C00005000", Some("T0FERRY".into()));
    let by_guild = group("discord", "1234", Some(format!("{:018}", 5003)));
    let unbound = group("telegram", "-1001234567890", None);
    assert_eq!(table.agent_for(&by_peer), "agent-0");
    assert_eq!(table.agent_for(&by_guild), "agent-3");
    assert_eq!(table.agent_for(&unbound), "main");
    let mut group_of = c.benchmark_group("agent_for");
    group_of.bench_function("peer_binding", |b| b.iter(|| black_box(table.agent_for(black_box(&by_peer))).len()));
    group_of.bench_function("guild_binding", |b| b.iter(|| black_box(table.agent_for(black_box(&by_guild))).len()));
    group_of.bench_function("no_binding", |b| b.iter(|| black_box(table.agent_for(black_box(&unbound))).len()));
    group_of.finish();
    c.bench_function("build_10000_bindings", |b| {
        b.iter(|| BindingTable::build("main", black_box(&bindings())).map(drop))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
