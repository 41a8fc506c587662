//! Keeping the typing indicator on while a run works (SPEC §7).
//!
//! Platforms show "typing…" for a few seconds per request (Telegram ~5 s, Discord ~10 s),
//! so a long run must refresh it. [`Typing::start`] shows it once the run has gone
//! [`TYPING_DELAY`] without being done, refreshes it every [`TYPING_REFRESH`] until the
//! handle is dropped — when the reply is done — and gives up after [`TYPING_SAFETY_STOP`]
//! in any case, so a stuck run never leaves a chat "typing" forever.
//!
//! The delay is for replies that are ready at once (a command, a cached or quick model):
//! they are sent without an indicator nobody would see, and without waiting behind it for
//! a send slot of the bot's budget, which the indicator's call takes too (Telegram: one
//! every ~35 ms per bot). A silent reply ready that soon shows nothing at all.

use std::time::Duration;

use ferry_channel::Target;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::outbound::OutboundScheduler;

/// How long a run works before typing is shown.
pub const TYPING_DELAY: Duration = Duration::from_millis(300);

/// How often the indicator is renewed while the run is active.
pub const TYPING_REFRESH: Duration = Duration::from_secs(6);

/// The indicator is never kept on longer than this.
pub const TYPING_SAFETY_STOP: Duration = Duration::from_secs(120);

/// The typing indicator of one chat, on while this handle lives.
pub struct Typing {
    _stop: Option<DropGuard>,
}

impl Typing {
    /// Shows typing in `target` after [`TYPING_DELAY`] unless the handle is dropped by
    /// then, and keeps it on, through the account's outbound scheduler (see
    /// [`OutboundScheduler::typing`]: budgets, at most one per chat every few seconds). Does
    /// nothing on a channel without typing indicators.
    pub fn start(scheduler: OutboundScheduler, target: Target) -> Self {
        if !scheduler.channel().capabilities().supports_typing {
            return Self { _stop: None };
        }
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + TYPING_SAFETY_STOP;
            tokio::select! {
                () = stopped.cancelled() => return,
                () = tokio::time::sleep(TYPING_DELAY) => {}
            }
            loop {
                scheduler.typing(&target).await;
                let next = tokio::time::Instant::now() + TYPING_REFRESH;
                if next >= deadline {
                    break;
                }
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep_until(next) => {}
                }
            }
        });
        Self { _stop: Some(stop.drop_guard()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferry_channel::memory::{MemoryChannel, Operation};
    use ferry_channel::{ChatKind, ChatRef};

    use super::*;

    fn typings(channel: &MemoryChannel) -> usize {
        channel.operations().iter().filter(|op| matches!(op, Operation::Typing { .. })).count()
    }

    fn target() -> Target {
        Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None }
    }

    /// Lets the typing task run up to the paused clock's current time.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn typing_is_refreshed_every_six_seconds_until_the_reply_is_done() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let typing = Typing::start(OutboundScheduler::new(channel.clone()), target());
        settle().await;
        assert_eq!(typings(&channel), 0, "not at once");
        tokio::time::advance(TYPING_DELAY).await;
        settle().await;
        assert_eq!(typings(&channel), 1, "once the run has worked a moment");
        for _ in 0..13 {
            tokio::time::advance(Duration::from_secs(1)).await;
            settle().await;
        }
        assert_eq!(typings(&channel), 3, "at 0.3, 6.3 and 12.3 s");
        drop(typing);
        tokio::time::advance(Duration::from_secs(60)).await;
        settle().await;
        assert_eq!(typings(&channel), 3, "nothing after the reply");
    }

    /// A reply done within the delay was sent without typing: none is shown after it.
    #[tokio::test(start_paused = true)]
    async fn a_reply_ready_at_once_is_sent_without_typing() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let typing = Typing::start(OutboundScheduler::new(channel.clone()), target());
        settle().await;
        tokio::time::advance(TYPING_DELAY - Duration::from_millis(50)).await;
        settle().await;
        drop(typing);
        tokio::time::advance(Duration::from_secs(60)).await;
        settle().await;
        assert_eq!(typings(&channel), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn typing_stops_after_two_minutes_even_if_the_run_does_not() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let _typing = Typing::start(OutboundScheduler::new(channel.clone()), target());
        settle().await;
        tokio::time::advance(TYPING_DELAY).await;
        settle().await;
        for _ in 0..60 {
            tokio::time::advance(Duration::from_secs(6)).await;
            settle().await;
        }
        assert_eq!(typings(&channel), 20, "every 6 s for 2 minutes, then never again");
    }
}
