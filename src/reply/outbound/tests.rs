use std::sync::Arc;
use std::time::Duration;

use ferry_channel::memory::{MemoryChannel, Operation, OperationKind};
use ferry_channel::{ChannelCapabilities, ChatKind, ChatRef, Rate, SendBudget, SendReconciliation};
use tokio::time::Instant;

use super::*;
use crate::metrics::sample;

/// A channel allowing one call per second per chat, like Telegram.
fn channel() -> Arc<MemoryChannel> {
    channel_named("memory")
}

/// [`channel`] under a name of the test's own, whose metrics no other test touches.
fn channel_named(name: &str) -> Arc<MemoryChannel> {
    let capabilities = ChannelCapabilities {
        send_budget: SendBudget {
            per_chat: Some(Rate::new(1, Duration::from_secs(1))),
            per_direct_chat: None,
            per_group: None,
            global: Some(Rate::new(30, Duration::from_secs(1))),
        },
        ..ChannelCapabilities::unrestricted()
    };
    Arc::new(MemoryChannel::with_capabilities(name, "default", capabilities))
}

fn target(chat: &str) -> Target {
    Target { chat: ChatRef::new(ChatKind::Direct, chat), thread_id: None }
}

fn text(chat: &str, text: &str) -> OutboundMessage {
    OutboundMessage::text(target(chat), text)
}

/// Sends on a task and reports when it completed, relative to `start`.
fn timed_send(
    scheduler: &OutboundScheduler,
    start: Instant,
    message: OutboundMessage,
) -> tokio::task::JoinHandle<Duration> {
    let scheduler = scheduler.clone();
    tokio::spawn(async move {
        scheduler.send(message).await.expect("sent");
        start.elapsed()
    })
}

#[tokio::test(start_paused = true)]
async fn a_chat_gets_one_call_a_second_and_other_chats_are_not_held_up() {
    let scheduler = OutboundScheduler::new(channel());
    let start = Instant::now();
    let a: Vec<_> = (0..3).map(|i| timed_send(&scheduler, start, text("a", &format!("a{i}")))).collect();
    let b = timed_send(&scheduler, start, text("b", "b0"));
    let mut a_times = Vec::new();
    for send in a {
        a_times.push(send.await.unwrap());
    }
    assert!(a_times[0] < Duration::from_millis(100), "{a_times:?}");
    assert!(a_times[1] >= Duration::from_secs(1) && a_times[2] >= Duration::from_secs(2), "{a_times:?}");
    assert!(b.await.unwrap() < Duration::from_millis(100), "chat b did not wait for chat a");
    assert_eq!(scheduler.busy_chats(), 0, "idle chats are forgotten");
}

#[tokio::test(start_paused = true)]
async fn a_chats_sends_keep_their_order() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let sends: Vec<_> = (0..5).map(|i| timed_send(&scheduler, Instant::now(), text("a", &i.to_string()))).collect();
    for send in sends {
        send.await.unwrap();
    }
    assert_eq!(channel.sent_texts(), ["0", "1", "2", "3", "4"]);
}

#[tokio::test(start_paused = true)]
async fn finals_go_before_queued_preview_edits_which_merge_into_the_newest() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let preview = scheduler.send(text("a", "Thinking")).await.unwrap();
    let preview = MessageRef { target: target("a"), message_id: preview.message_id };
    // The chat's budget is spent for this second: everything below queues.
    let edits: Vec<_> = ["Thinking.", "Thinking..", "Thinking..."]
        .into_iter()
        .map(|t| {
            let (scheduler, preview) = (scheduler.clone(), preview.clone());
            tokio::spawn(async move { scheduler.edit(preview, t.into(), TextFormat::Plain, Priority::Preview).await })
        })
        .collect();
    tokio::task::yield_now().await;
    let final_send = timed_send(&scheduler, Instant::now(), text("a", "Another chat's answer"));
    let outcomes: Vec<_> = futures::future::join_all(edits).await.into_iter().map(|r| r.unwrap().unwrap()).collect();
    final_send.await.unwrap();
    assert_eq!(outcomes, [Delivery::Superseded, Delivery::Superseded, Delivery::Edited]);
    let calls: Vec<String> = channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some(format!("send {}", message.text)),
            Operation::Edited { text, .. } => Some(format!("edit {text}")),
            _ => None,
        })
        .collect();
    assert_eq!(calls, ["send Thinking", "send Another chat's answer", "edit Thinking..."]);
}

#[tokio::test(start_paused = true)]
async fn a_final_edit_replaces_queued_preview_edits_of_its_message() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let sent = scheduler.send(text("a", "Draft")).await.unwrap();
    let preview = MessageRef { target: target("a"), message_id: sent.message_id };
    let stale = {
        let (scheduler, preview) = (scheduler.clone(), preview.clone());
        tokio::spawn(async move {
            scheduler.edit(preview, "Draft, longer".into(), TextFormat::Plain, Priority::Preview).await
        })
    };
    tokio::task::yield_now().await;
    let done = scheduler.edit(preview, "The final answer.".into(), TextFormat::Plain, Priority::Final).await.unwrap();
    assert_eq!(done, Delivery::Edited);
    assert_eq!(stale.await.unwrap().unwrap(), Delivery::Superseded);
    assert_eq!(channel.visible_messages()[0].text, "The final answer.");
}

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_after_the_platforms_retry_after() {
    let channel = channel();
    channel
        .fail_next(OperationKind::Send, ChannelError::RateLimited { retry_after: Some(Duration::from_millis(1200)) });
    let scheduler = OutboundScheduler::new(channel.clone());
    let start = Instant::now();
    scheduler.send(text("a", "hello")).await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(1200) && took <= Duration::from_millis(1400), "{took:?}");
    assert_eq!(channel.sent_texts(), ["hello"]);
}

#[tokio::test(start_paused = true)]
async fn a_429_retry_is_counted_as_rate_limited_and_retried_for_its_channel() {
    let channel = channel_named("outbound-429-metrics");
    let counter = |name: &str| sample(&format!(r#"ferry_outbound_{name}{{channel="outbound-429-metrics"}}"#));
    let sends = || sample(r#"ferry_outbound_sends_total{channel="outbound-429-metrics",op="send"}"#);
    let (rate_limited, retries, sent) = (counter("rate_limited_total"), counter("retries_total"), sends());
    channel.fail_next(OperationKind::Send, ChannelError::RateLimited { retry_after: Some(Duration::from_millis(500)) });
    let scheduler = OutboundScheduler::new(channel.clone());
    scheduler.send(text("a", "hello")).await.unwrap();
    assert_eq!(counter("rate_limited_total") - rate_limited, 1.0);
    assert_eq!(counter("retries_total") - retries, 1.0);
    assert_eq!(sends() - sent, 1.0, "one send, however many attempts");

    let (failures, rate_limited) = (counter("failures_total"), counter("rate_limited_total"));
    channel.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "chat not found".into() });
    assert!(scheduler.send(text("a", "refused")).await.is_err());
    assert_eq!(counter("failures_total") - failures, 1.0);
    assert_eq!(counter("rate_limited_total") - rate_limited, 0.0, "a refusal is not a 429");
}

#[tokio::test(start_paused = true)]
async fn a_final_is_retried_until_its_deadline_and_other_refusals_never() {
    let channel = channel();
    let scheduler = OutboundScheduler::with_retry(channel.clone(), RetryPolicy::with_deadline(Duration::from_secs(60)));
    // Six failures back off 0.4 + 0.8 + … + 12.8 s, well inside the deadline.
    for _ in 0..6 {
        channel.fail_next(OperationKind::Send, ChannelError::Transient { reason: "502".into() });
    }
    scheduler.send(text("a", "seventh time lucky")).await.unwrap();
    for _ in 0..30 {
        channel.fail_next(OperationKind::Send, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(5)) });
    }
    let start = Instant::now();
    assert!(matches!(scheduler.send(text("a", "never")).await, Err(ChannelError::RateLimited { .. })));
    assert!(start.elapsed() <= Duration::from_secs(60), "gave up at the deadline: {:?}", start.elapsed());
    assert_eq!(channel.sent_texts(), ["seventh time lucky"]);

    let channel = self::channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    channel.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "chat not found".into() });
    channel.fail_next(OperationKind::Send, ChannelError::Transient { reason: "would succeed next".into() });
    assert!(matches!(scheduler.send(text("a", "refused")).await, Err(ChannelError::Rejected { .. })));
    assert!(channel.sent_texts().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_preview_edit_gets_three_attempts() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let preview = scheduler.send(text("a", "growing")).await.unwrap();
    let preview = MessageRef { target: target("a"), message_id: preview.message_id };
    for _ in 0..3 {
        channel.fail_next(OperationKind::Edit, ChannelError::Transient { reason: "timeout".into() });
    }
    let edit = scheduler.edit(preview, "growing more".into(), TextFormat::Plain, Priority::Preview).await;
    assert!(matches!(edit, Err(ChannelError::Transient { .. })));
}

/// A channel that can look its sends up by idempotency key, like Slack.
fn lookup_channel(name: &str) -> Arc<MemoryChannel> {
    let capabilities =
        ChannelCapabilities { send_reconciliation: SendReconciliation::Lookup, ..ChannelCapabilities::unrestricted() };
    Arc::new(MemoryChannel::with_capabilities(name, "default", capabilities))
}

#[tokio::test(start_paused = true)]
async fn a_send_that_landed_but_lost_its_answer_is_found_not_repeated() {
    let channel = lookup_channel("outbound-lookup");
    let found = || sample(r#"ferry_deliveries_reconciled_total{channel="outbound-lookup",outcome="found"}"#);
    let before = found();
    let scheduler = OutboundScheduler::new(channel.clone());
    channel
        .fail_next_after_applying(OperationKind::Send, ChannelError::Transient { reason: "connection reset".into() });
    let mut message = text("a", "exactly once");
    message.idempotency_key = Some("run-9:0".into());
    let sent = scheduler.send(message).await.unwrap();
    assert_eq!(channel.sent_texts(), ["exactly once"], "looked up, not sent again");
    assert_eq!(channel.visible_messages()[0].message_id, sent.message_id);
    assert_eq!(found() - before, 1.0);
}

#[tokio::test(start_paused = true)]
async fn without_any_way_to_tell_a_repeat_is_counted_as_an_unknown_outcome() {
    let channel = channel_named("outbound-unknown");
    let unknown = || sample(r#"ferry_outbound_unknown_outcome_total{channel="outbound-unknown"}"#);
    let before = unknown();
    let scheduler = OutboundScheduler::new(channel.clone());
    channel
        .fail_next_after_applying(OperationKind::Send, ChannelError::Transient { reason: "connection reset".into() });
    let mut message = text("a", "maybe twice");
    message.idempotency_key = Some("run-9:0".into());
    scheduler.send(message.clone()).await.unwrap();
    assert_eq!(channel.sent_texts(), ["maybe twice", "maybe twice"], "the documented at-least-once case");
    assert_eq!(unknown() - before, 1.0);
    // After a restart, the send that may have been in flight is reconciled the same way.
    let restarted = OutboundScheduler::new(channel.clone());
    message.idempotency_key = Some("run-9:1".into());
    restarted.send_after_unknown_outcome(message).await.unwrap();
    assert_eq!(unknown() - before, 2.0);
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_a_send_already_on_the_platform_is_adopted() {
    let channel = lookup_channel("outbound-adopt");
    let mut message = text("a", "sent before the crash");
    message.idempotency_key = Some("run-3:0".into());
    let first = OutboundScheduler::new(channel.clone()).send(message.clone()).await.unwrap();
    let restarted = OutboundScheduler::new(channel.clone());
    assert_eq!(restarted.send_after_unknown_outcome(message).await.unwrap(), first);
    assert_eq!(channel.sent_texts(), ["sent before the crash"]);
}

#[tokio::test(start_paused = true)]
async fn a_send_already_delivered_under_its_idempotency_key_is_not_posted_again() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let mut message = text("a", "once");
    message.idempotency_key = Some("run-1:0".into());
    let first = scheduler.send(message.clone()).await.unwrap();
    let again = scheduler.send(message).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(channel.sent_texts(), ["once"]);
}

#[tokio::test(start_paused = true)]
async fn limiter_state_of_idle_chats_is_dropped() {
    let scheduler = OutboundScheduler::new(channel());
    for chat in 0..50 {
        scheduler.send(text(&chat.to_string(), "hi")).await.unwrap();
    }
    assert_eq!(scheduler.inner.budgets.tracked_chats(), 50);
    tokio::time::advance(Duration::from_secs(61)).await;
    scheduler.send(text("late", "hi")).await.unwrap();
    assert!(scheduler.inner.budgets.tracked_chats() <= 1, "{}", scheduler.inner.budgets.tracked_chats());
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_does_not_strand_the_calls_behind_it() {
    let channel = channel();
    channel.fail_next(OperationKind::Send, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(5)) });
    let scheduler = OutboundScheduler::new(channel.clone());
    let abandoned = {
        let scheduler = scheduler.clone();
        tokio::spawn(async move { scheduler.send(text("a", "given up on")).await })
    };
    tokio::task::yield_now().await;
    let behind = timed_send(&scheduler, Instant::now(), text("a", "still delivered"));
    tokio::task::yield_now().await;
    abandoned.abort();
    behind.await.unwrap();
    assert_eq!(channel.sent_texts(), ["still delivered"]);
    assert_eq!(scheduler.busy_chats(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_send_held_by_the_global_budget_waits_for_it_alone_not_a_per_chat_period() {
    // 30 sends to 30 new chats use up the global burst; the 31st, to a new chat too, waits
    // for one global cell (~33 ms), not for the per-chat second its failed fast path spent.
    let scheduler = OutboundScheduler::new(channel());
    let start = Instant::now();
    for chat in 0..30 {
        scheduler.send(text(&format!("c{chat}"), "hi")).await.expect("sent");
    }
    let waited = timed_send(&scheduler, start, text("c30", "hi")).await.unwrap();
    assert!(waited < Duration::from_millis(100), "waited {waited:?}");
    assert!(waited >= Duration::from_millis(30), "the global budget still applies: {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_reply_refused_its_thread_is_sent_unthreaded_and_other_refusals_stand() {
    let channel = Arc::new(MemoryChannel::new("memory-unthreaded", "default"));
    let scheduler = OutboundScheduler::new(channel.clone());
    let refused = || ChannelError::Rejected { reason: "\"abc\" is not a Telegram message id".into() };
    let mut threaded = text("a", "About that one.");
    threaded.reply_to_message_id = Some("abc".into());
    threaded.idempotency_key = Some("run-1:0".into());
    channel.fail_next(OperationKind::Send, refused());
    scheduler.send_or_plain(threaded, MarkupDialect::Markdown).await.expect("sent unthreaded");
    let sent: Vec<(Option<String>, Option<String>)> = channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some((message.reply_to_message_id, message.idempotency_key)),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [(None, Some("run-1:0".to_owned()))], "unthreaded, under the same key");

    channel.fail_next(OperationKind::Send, refused());
    let error = scheduler.send_or_plain(text("a", "Not threaded."), MarkupDialect::Markdown).await;
    assert_eq!(error, Err(refused()), "an unthreaded message refused is not sent again");
}

/// Telegram's shape of budget: a private chat bursts 3 then one a second; a group keeps
/// one a second.
fn bursty_in_private(name: &str) -> Arc<MemoryChannel> {
    let capabilities = ChannelCapabilities {
        send_budget: SendBudget {
            per_chat: Some(Rate::new(1, Duration::from_secs(1))),
            per_direct_chat: Some(Rate::spaced(Duration::from_secs(1), 3)),
            per_group: Some(Rate::new(20, Duration::from_secs(60))),
            global: Some(Rate::new(30, Duration::from_secs(1))),
        },
        ..ChannelCapabilities::unrestricted()
    };
    Arc::new(MemoryChannel::with_capabilities(name, "default", capabilities))
}

/// When each of `count` sends to `chat`, all asked for at once, went out.
async fn quick_sends(scheduler: &OutboundScheduler, chat: ChatRef, count: usize) -> Vec<Duration> {
    let start = Instant::now();
    let target = Target { chat, thread_id: None };
    let sends: Vec<_> = (0..count)
        .map(|i| timed_send(scheduler, start, OutboundMessage::text(target.clone(), format!("answer {i}"))))
        .collect();
    let mut times = Vec::new();
    for send in sends {
        times.push(send.await.unwrap());
    }
    times
}

#[tokio::test(start_paused = true)]
async fn three_quick_sends_to_a_private_chat_go_out_at_once_and_a_fourth_waits() {
    let scheduler = OutboundScheduler::new(bursty_in_private("memory-private-burst"));
    let times = quick_sends(&scheduler, ChatRef::new(ChatKind::Direct, "7"), 4).await;
    assert!(times[..3].iter().all(|at| *at < Duration::from_millis(10)), "{times:?}");
    assert!(times[3] >= Duration::from_millis(990) && times[3] < Duration::from_millis(1100), "{times:?}");
    // After a quiet spell the burst is there again.
    tokio::time::advance(Duration::from_secs(3)).await;
    let times = quick_sends(&scheduler, ChatRef::new(ChatKind::Direct, "7"), 3).await;
    assert!(times.iter().all(|at| *at < Duration::from_millis(10)), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn a_group_chat_keeps_to_one_send_a_second() {
    let scheduler = OutboundScheduler::new(bursty_in_private("memory-group-strict"));
    for kind in [ChatKind::Group, ChatKind::Channel] {
        let times = quick_sends(&scheduler, ChatRef::new(kind, format!("{kind:?}")), 3).await;
        assert!(times[0] < Duration::from_millis(10), "{kind:?}: {times:?}");
        for (i, at) in times.iter().enumerate().skip(1) {
            let due = Duration::from_secs(i as u64);
            assert!(
                *at >= due - Duration::from_millis(10) && *at < due + Duration::from_millis(100),
                "{kind:?}: {times:?}"
            );
        }
    }
}

fn typings(channel: &MemoryChannel) -> Vec<String> {
    channel
        .operations()
        .iter()
        .filter_map(|op| match op {
            Operation::Typing { target } => Some(target.chat.id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn typing_is_shown_at_most_once_per_chat_every_few_seconds() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    assert!(scheduler.typing(&target("a")).await);
    assert!(!scheduler.typing(&target("a")).await, "again at once: nothing to add");
    assert!(scheduler.typing(&target("b")).await, "another chat is not held back");
    tokio::time::advance(TYPING_MIN_GAP - Duration::from_millis(1)).await;
    assert!(!scheduler.typing(&target("a")).await);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(scheduler.typing(&target("a")).await, "due again after the gap");
    assert_eq!(typings(&channel), ["a", "b", "a"]);
}

#[tokio::test(start_paused = true)]
async fn typing_takes_from_the_send_budget_and_is_skipped_rather_than_waiting_for_it() {
    let channel = channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    // 30 chats take the account's whole second of budget (30 calls a second).
    for chat in 0..30 {
        assert!(scheduler.typing(&target(&format!("c{chat}"))).await);
    }
    assert!(!scheduler.typing(&target("late")).await, "no room: skipped, not queued");
    assert_eq!(typings(&channel).len(), 30);
    // A reply still goes out: it waits for the budget, which refills.
    let start = Instant::now();
    scheduler.send(text("late", "the answer")).await.expect("sent");
    assert!(start.elapsed() <= Duration::from_millis(100), "a refilled cell, not a long wait");
}

/// A run of a session whose lease this replica lost writes nothing more: neither a call made
/// after the loss nor one already waiting for its chat's budget when it happened.
#[tokio::test(start_paused = true)]
async fn a_guarded_caller_that_lost_the_right_to_write_sends_nothing() {
    let memory = channel();
    let scheduler = OutboundScheduler::new(memory.clone());
    let allowed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let guard = allowed.clone();
    let guarded = scheduler.guarded(Arc::new(move || guard.load(std::sync::atomic::Ordering::SeqCst)));
    guarded.send(text("a", "first")).await.expect("allowed");
    // The second waits a second for chat a's budget; the lease is lost meanwhile.
    let waiting = {
        let guarded = guarded.clone();
        tokio::spawn(async move { guarded.send(text("a", "second")).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    allowed.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(waiting.await.unwrap(), Err(ChannelError::Closed)));
    assert!(matches!(guarded.send(text("b", "third")).await, Err(ChannelError::Closed)));
    assert!(!guarded.typing(&target("b")).await);
    assert_eq!(memory.sent_texts(), ["first"]);
    // Other callers of the same account are not affected.
    scheduler.send(text("b", "unguarded")).await.expect("sent");
}
