//! Each adapter's declared send budgets against the platform's documented limits, as the
//! fakes in `tests/fakes` enforce them: Telegram and Slack count a chat's messages in a
//! token bucket (bursts of 3, one a second), Discord a channel's in a sliding 5 s window,
//! Telegram the bot's in a sliding 1 s window.
//!
//! Ferry's budgets are driven as hard as its outbound scheduler can drive them (each call as
//! soon as every budget allows it, on tokio's paused clock), and each call is taken to
//! arrive up to [`JITTER`] early or late, in whichever way hurts most: a request that
//! travels faster than the one before it must still find room.

use std::time::Duration;

use ferry::reply::outbound::budget::Budgets;
use ferry_channel::{ChatKind, SendBudget};
use tokio::time::Instant;

/// How far a call's arrival may stray from when it was made.
const JITTER: Duration = Duration::from_millis(20);

/// When each of `count` calls to `chat` goes out, each made as soon as the budgets allow.
async fn greedy(budget: &SendBudget, chats: &[(&str, ChatKind)], rounds: usize) -> Vec<Duration> {
    let budgets = Budgets::new(budget);
    let start = Instant::now();
    let mut times = Vec::new();
    for _ in 0..rounds {
        for (chat, kind) in chats {
            budgets.acquire(chat, *kind).await;
            times.push(start.elapsed());
        }
    }
    times
}

/// The earliest the calls made at `earlier` and `later` may arrive apart.
fn closest(earlier: Duration, later: Duration) -> Duration {
    later.saturating_sub(earlier).saturating_sub(JITTER * 2)
}

/// Whether a token bucket (full at first, `burst` deep, refilled `per_second`) takes every
/// call: no stretch of calls outruns the burst plus the refill over its span.
fn within_bucket(times: &[Duration], burst: f64, per_second: f64) -> Result<(), String> {
    for (i, first) in times.iter().enumerate() {
        for (j, last) in times.iter().enumerate().skip(i + 1) {
            let calls = (j - i + 1) as f64;
            let room = burst + per_second * closest(*first, *last).as_secs_f64();
            if calls > room + 1e-9 {
                return Err(format!("calls {i}..={j} ({calls}) outrun the bucket ({room:.3}): {times:?}"));
            }
        }
    }
    Ok(())
}

/// Whether no `window` holds more than `limit` calls.
fn within_window(times: &[Duration], window: Duration, limit: usize) -> Result<(), String> {
    for (i, first) in times.iter().enumerate() {
        let inside = times[i..].iter().take_while(|last| closest(*first, **last) < window).count();
        if inside > limit {
            return Err(format!("{inside} calls within {window:?} from call {i}: {times:?}"));
        }
    }
    Ok(())
}

#[cfg_attr(not(any(feature = "discord", feature = "slack")), allow(dead_code))]
fn at_once(times: &[Duration]) -> bool {
    times.iter().all(|at| *at < Duration::from_millis(10))
}

#[cfg(feature = "telegram")]
#[tokio::test(start_paused = true)]
async fn telegram_private_chats_burst_three_then_keep_to_one_message_a_second() {
    let budget = ferry_telegram::capabilities().send_budget;
    let times = greedy(&budget, &[("42", ChatKind::Direct)], 12).await;
    // No burst bot-wide: calls are spaced 35 ms there, the chat's own budget holds nothing.
    assert!(times[2] < Duration::from_millis(100), "a quick second and third answer do not wait: {times:?}");
    assert!(times[3] >= Duration::from_secs(1), "the fourth waits: {times:?}");
    within_bucket(&times, 3.0, 1.0).unwrap();
}

#[cfg(feature = "telegram")]
#[tokio::test(start_paused = true)]
async fn telegram_groups_keep_to_one_message_a_second() {
    let budget = ferry_telegram::capabilities().send_budget;
    for kind in [ChatKind::Group, ChatKind::Channel] {
        let times = greedy(&budget, &[("-100500", kind)], 10).await;
        for pair in times.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(999), "{kind:?}: no burst in a group: {times:?}");
        }
        within_bucket(&times, 3.0, 1.0).unwrap();
    }
}

#[cfg(feature = "telegram")]
#[tokio::test(start_paused = true)]
async fn telegram_never_sends_more_than_twenty_messages_in_any_minute_to_a_group() {
    let budget = ferry_telegram::capabilities().send_budget;
    let times = greedy(&budget, &[("-100500", ChatKind::Group)], 45).await;
    within_window(&times, Duration::from_secs(60), 20).unwrap();
    assert!(times[4] < Duration::from_secs(5), "a short exchange is not held back: {times:?}");
}

#[cfg(feature = "telegram")]
#[tokio::test(start_paused = true)]
async fn telegram_never_sends_more_than_thirty_messages_in_any_second() {
    let budget = ferry_telegram::capabilities().send_budget;
    let chats: Vec<String> = (1..=120).map(|chat| chat.to_string()).collect();
    let chats: Vec<(&str, ChatKind)> = chats.iter().map(|chat| (chat.as_str(), ChatKind::Direct)).collect();
    let times = greedy(&budget, &chats, 1).await;
    within_window(&times, Duration::from_secs(1), 30).unwrap();
    assert!(times.last().unwrap() < &Duration::from_millis(4_500), "still about 30 a second: {times:?}");
}

#[cfg(feature = "discord")]
#[tokio::test(start_paused = true)]
async fn discord_bursts_three_and_never_sends_more_than_five_in_any_five_seconds() {
    let budget = ferry_discord::capabilities().send_budget;
    for kind in [ChatKind::Direct, ChatKind::Channel] {
        let times = greedy(&budget, &[("10", kind)], 15).await;
        assert!(at_once(&times[..3]), "{kind:?}: {times:?}");
        within_window(&times, Duration::from_secs(5), 5).unwrap();
    }
}

#[cfg(feature = "discord")]
#[tokio::test(start_paused = true)]
async fn discord_never_sends_more_than_fifty_requests_in_any_second() {
    let budget = ferry_discord::capabilities().send_budget;
    let channels: Vec<String> = (1..=150).map(|channel| channel.to_string()).collect();
    let channels: Vec<(&str, ChatKind)> = channels.iter().map(|c| (c.as_str(), ChatKind::Channel)).collect();
    let times = greedy(&budget, &channels, 1).await;
    within_window(&times, Duration::from_secs(1), 50).unwrap();
    assert!(times.last().unwrap() < &Duration::from_millis(3_500), "still about 50 a second: {times:?}");
}

#[cfg(feature = "slack")]
#[tokio::test(start_paused = true)]
async fn slack_bursts_three_then_keeps_to_one_message_a_second() {
    let budget = ferry_slack::capabilities().send_budget;
    for kind in [ChatKind::Direct, ChatKind::Channel] {
        let times = greedy(&budget, &[("C1", kind)], 12).await;
        assert!(at_once(&times[..3]), "{kind:?}: {times:?}");
        within_bucket(&times, 3.0, 1.0).unwrap();
    }
}
