//! Hook dispatch overhead (issue 8): what each hook point costs its caller with 10
//! registered plugins that implement nothing (every handler is the trait's no-op default).
//! Target: at most 2 µs per hook point.
//!
//! Modifying hooks are awaited by the caller, so the figure is all ten handlers run in turn
//! (each under its timeout and panic guard). Observing hooks cost the caller one spawned
//! task; the handlers then run on it, off the caller's path. The `empty` rows are the same
//! calls with no plugin registered (what every deployment without plugins pays).
//! Run with `cargo bench --bench hooks`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{Criterion, criterion_group, criterion_main};
use tokio::runtime::Runtime;

use ferry::agent::tools::ToolOutcome;
use ferry::agent::{ChatMessage, ToolCall, Usage};
use ferry::hooks::{AgentEnd, Hooks, MessageReceived, MessageSending, MessageSent, Plugin};

struct Noop(String);

impl Plugin for Noop {
    fn name(&self) -> &str {
        &self.0
    }
}

fn ten_plugins() -> Hooks {
    (0..10).fold(Hooks::builder(), |hooks, i| hooks.register(i, Noop(format!("noop-{i}")))).build()
}

fn received() -> MessageReceived {
    MessageReceived {
        session_key: "agent:main:telegram:direct:42".into(),
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_id: "42".into(),
        message_id: "1001".into(),
        sender_id: "42".into(),
        text: "what time is it?".into(),
    }
}

fn sending() -> MessageSending {
    MessageSending {
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_id: "42".into(),
        text: "It is noon.".into(),
    }
}

/// One observing hook point, called the way the runner and dispatcher call it.
type Observe = fn(&Hooks);

/// Times `iters` calls made from a task on the runtime, as in Ferry (runs and inbound
/// handling are tasks): a spawn from a worker thread goes to its local queue, while one from
/// outside the runtime (criterion's `to_async` caller) takes the injection queue and wakes a
/// worker with a syscall.
fn on_worker(runtime: &Runtime, hooks: &Hooks, iters: u64, observe: Observe) -> Duration {
    let hooks = hooks.clone();
    runtime.block_on(async move {
        tokio::spawn(async move {
            let start = Instant::now();
            for _ in 0..iters {
                observe(black_box(&hooks));
            }
            start.elapsed()
        })
        .await
        .unwrap()
    })
}

fn hooks(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let call = ToolCall { id: "call_1".into(), name: "current_time".into(), arguments: r#"{"zone":"UTC"}"#.into() };
    let mut transcript = vec![
        ChatMessage::user("what time is it?"),
        ChatMessage::assistant(String::new(), vec![call.clone()]),
        ChatMessage::tool_result("call_1", "current_time", "12:00", false),
    ];

    for (label, hooks) in [("ten_noop_plugins", ten_plugins()), ("empty", Hooks::default())] {
        let mut group = c.benchmark_group(format!("hooks/{label}"));
        group.measurement_time(Duration::from_secs(3));
        group.bench_function("before_agent_start", |b| {
            b.to_async(&runtime).iter(|| async {
                black_box(hooks.before_agent_start("run", "key", "hi", String::from("prompt")).await)
            })
        });
        group.bench_function("before_tool_call", |b| {
            b.to_async(&runtime).iter(|| async { black_box(hooks.before_tool_call("run", "key", &call).await) })
        });
        group.bench_function("message_sending", |b| {
            b.to_async(&runtime).iter(|| async { black_box(hooks.message_sending(sending()).await) })
        });
        group.bench_function("tool_result_persist", |b| {
            b.iter(|| hooks.tool_result_persist("key", black_box(&mut transcript)))
        });
        let observing: [(&str, Observe); 4] = [
            ("after_tool_call", |hooks| {
                let call = ToolCall {
                    id: "call_1".into(),
                    name: "current_time".into(),
                    arguments: r#"{"zone":"UTC"}"#.into(),
                };
                let outcome =
                    ToolOutcome { content: "12:00 UTC".into(), is_error: false, mutates: false, images: Vec::new() };
                hooks.after_tool_call("run", "key", &call, &outcome, Duration::from_millis(1))
            }),
            ("message_received", |hooks| hooks.message_received(received())),
            ("message_sent", |hooks| {
                hooks.message_sent(MessageSent {
                    channel: "telegram".into(),
                    account_id: "default".into(),
                    chat_id: "42".into(),
                    message_id: "2002".into(),
                    text: "It is noon.".into(),
                })
            }),
            ("agent_end", |hooks| {
                hooks.agent_end(AgentEnd {
                    run_id: "run".into(),
                    session_key: "key".into(),
                    messages: Vec::new(),
                    status: "completed",
                    error: None,
                    usage: Usage::default(),
                    started_at: Utc::now(),
                    ended_at: Utc::now(),
                })
            }),
        ];
        for (name, observe) in observing {
            group.bench_function(name, |b| b.iter_custom(|iters| on_worker(&runtime, &hooks, iters, observe)));
        }
        group.finish();
    }
}

criterion_group!(benches, hooks);
criterion_main!(benches);
