//! A platform's sending budgets (SPEC §7) as governor rate limiters that wait on tokio's
//! clock — so tests with a paused clock see exactly when a send was allowed.
//!
//! Each [`Rate`] is a GCRA quota: a burst of `calls`, refilled evenly over `per`. A call to
//! a chat takes one cell from its chat's budget (a direct chat's own budget where the
//! platform declares one, [`SendBudget::per_direct_chat`]), from its group's for a group or
//! channel chat, and from the account's.

use std::num::NonZeroU32;
use std::ops::Add;
use std::sync::Mutex;
use std::time::Duration;

use ferry_channel::{ChatKind, Rate, SendBudget};
use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};

/// Idle chats' limiter state is dropped this often, so the per-chat maps do not grow with
/// every chat the bot ever wrote to.
const FORGET_IDLE_CHATS_EVERY: Duration = Duration::from_secs(60);

/// Time for governor: nanoseconds since the scheduler started, read from tokio's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u64);

impl Add<Nanos> for Tick {
    type Output = Self;

    fn add(self, other: Nanos) -> Self {
        Self(self.0.saturating_add(other.as_u64()))
    }
}

impl Reference for Tick {
    fn duration_since(&self, earlier: Self) -> Nanos {
        Nanos::from(self.0.saturating_sub(earlier.0))
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        Self(self.0.saturating_sub(duration.as_u64()))
    }
}

#[derive(Debug, Clone)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    type Instant = Tick;

    fn now(&self) -> Tick {
        Tick(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

type Keyed = RateLimiter<String, HashMapStateStore<String>, TokioClock, NoOpMiddleware<Tick>>;
type Direct = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Tick>>;

/// Budgets a failed [`Budgets::try_acquire`] took anyway (governor cannot give a cell back).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// The chat's own budget (direct or not, whichever applies to it).
    per_chat: bool,
    per_group: bool,
}

/// The budgets of one bot account.
pub struct Budgets {
    clock: TokioClock,
    per_chat: Option<Keyed>,
    /// For direct chats instead of `per_chat`, when the platform declares one.
    per_direct_chat: Option<Keyed>,
    per_group: Option<Keyed>,
    global: Option<Direct>,
    last_forget: Mutex<tokio::time::Instant>,
}

impl Budgets {
    pub fn new(budget: &SendBudget) -> Self {
        let clock = TokioClock { start: tokio::time::Instant::now() };
        Self {
            per_chat: budget.per_chat.map(|rate| RateLimiter::hashmap_with_clock(quota(rate), clock.clone())),
            per_direct_chat: budget
                .per_direct_chat
                .map(|rate| RateLimiter::hashmap_with_clock(quota(rate), clock.clone())),
            per_group: budget.per_group.map(|rate| RateLimiter::hashmap_with_clock(quota(rate), clock.clone())),
            global: budget.global.map(|rate| RateLimiter::direct_with_clock(quota(rate), clock.clone())),
            last_forget: Mutex::new(clock.start),
            clock,
        }
    }

    /// Waits until one more call to `chat` fits every budget, and takes it.
    pub async fn acquire(&self, chat: &str, kind: ChatKind) {
        self.acquire_rest(chat, kind, Taken::default()).await;
    }

    /// [`Budgets::acquire`] for a call whose failed [`Budgets::try_acquire`] already took
    /// some of its budgets: those are not taken twice (a per-chat cell spent twice would
    /// hold the call a whole per-chat period for nothing).
    pub async fn acquire_rest(&self, chat: &str, kind: ChatKind, taken: Taken) {
        let key = chat.to_owned();
        if let (Some(limiter), false) = (self.chat_budget(kind), taken.per_chat) {
            self.wait(|| limiter.check_key(&key)).await;
        }
        if let (Some(limiter), ChatKind::Group | ChatKind::Channel, false) = (&self.per_group, kind, taken.per_group) {
            self.wait(|| limiter.check_key(&key)).await;
        }
        if let Some(limiter) = &self.global {
            self.wait(|| limiter.check()).await;
        }
        self.forget_idle_chats();
    }

    /// Takes room for one call to `chat` if every budget has it now. Otherwise says which
    /// budgets it took before finding one full, for [`Budgets::acquire_rest`].
    pub fn try_acquire(&self, chat: &str, kind: ChatKind) -> Result<(), Taken> {
        let key = chat.to_owned();
        let mut taken = Taken::default();
        if let Some(limiter) = self.chat_budget(kind) {
            limiter.check_key(&key).map_err(|_| taken)?;
            taken.per_chat = true;
        }
        if let (Some(limiter), ChatKind::Group | ChatKind::Channel) = (&self.per_group, kind) {
            limiter.check_key(&key).map_err(|_| taken)?;
            taken.per_group = true;
        }
        if let Some(limiter) = &self.global {
            limiter.check().map_err(|_| taken)?;
        }
        self.forget_idle_chats();
        Ok(())
    }

    /// Takes room for a call that is skipped when there is none (a typing indicator). The
    /// account's budget is checked first: a skip then costs at most a cell of the budget
    /// that refills fastest, never the chat's own, which the chat's next reply needs.
    pub fn try_acquire_spare(&self, chat: &str, kind: ChatKind) -> bool {
        let key = chat.to_owned();
        if self.global.as_ref().is_some_and(|limiter| limiter.check().is_err()) {
            return false;
        }
        if let (Some(limiter), ChatKind::Group | ChatKind::Channel) = (&self.per_group, kind)
            && limiter.check_key(&key).is_err()
        {
            return false;
        }
        let room = self.chat_budget(kind).is_none_or(|limiter| limiter.check_key(&key).is_ok());
        self.forget_idle_chats();
        room
    }

    /// The per-chat budget a chat of `kind` draws on.
    fn chat_budget(&self, kind: ChatKind) -> Option<&Keyed> {
        match (kind, &self.per_direct_chat) {
            (ChatKind::Direct, Some(direct)) => Some(direct),
            _ => self.per_chat.as_ref(),
        }
    }

    async fn wait(&self, mut check: impl FnMut() -> Result<(), NotUntil<Tick>>) {
        while let Err(not_until) = check() {
            tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await;
        }
    }

    fn forget_idle_chats(&self) {
        let now = tokio::time::Instant::now();
        {
            let mut last = self.last_forget.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if now.duration_since(*last) < FORGET_IDLE_CHATS_EVERY {
                return;
            }
            *last = now;
        }
        for limiter in self.per_chat.iter().chain(&self.per_direct_chat).chain(&self.per_group) {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// Chats whose limiter state is kept (for tests of the memory bound).
    #[cfg(test)]
    pub fn tracked_chats(&self) -> usize {
        self.per_chat.iter().chain(&self.per_direct_chat).map(|limiter| limiter.len()).sum()
    }
}

/// `calls` per `per` as a burst of `calls` refilled evenly over `per`.
fn quota(rate: Rate) -> Quota {
    let calls = NonZeroU32::new(rate.calls).unwrap_or(NonZeroU32::MIN);
    let period = (rate.per / calls.get()).max(Duration::from_nanos(1));
    Quota::with_period(period).map_or_else(|| Quota::per_second(calls), |quota| quota.allow_burst(calls))
}
