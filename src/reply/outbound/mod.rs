//! The outbound scheduler: every call to a platform account goes through one, so replies
//! stay inside the platform's budgets instead of drawing 429s (SPEC §7).
//!
//! - Each chat has its own queue, worked by one task while it has work (an idle chat costs
//!   nothing), so a chat's calls happen in order and a slow chat never holds up another.
//! - Before each call the scheduler takes room in the chat's, the group's and the
//!   account's budget ([`budget`]), waiting on tokio's clock when there is none.
//! - Finals go first: a chat's queued final sends run before its queued preview edits, and
//!   preview edits of one message are merged (only the newest text is sent) — under
//!   pressure a preview lags, a final never waits for it.
//! - Failures are retried by [`retry::RetryPolicy`]: after `retry_after` for a 429, after
//!   a backoff for a timeout or 5xx, never for another refusal. Finals are tried until the
//!   reply's delivery deadline, preview edits three times.
//! - A send that failed ambiguously (a timeout or a connection dropped after the request
//!   left: it may have landed) is reconciled before it is repeated, as the channel's
//!   [`SendReconciliation`] allows: looked up by its idempotency key, or repeated under the
//!   same key where the platform deduplicates; only where neither is possible (Telegram)
//!   is it repeated blind, and counted in `ferry_outbound_unknown_outcome_total`.
//! - A send carrying an idempotency key (run id + payload index) that was already delivered
//!   returns the first delivery instead of posting again, so a retried reply never shows
//!   twice.
//! - Every call is counted per channel in `ferry_outbound_*` ([`crate::metrics`]):
//!   delivered, retried, rate limited (429), failed for good.

pub mod budget;
pub mod retry;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ferry_channel::{
    Channel, ChannelError, ChatKind, MarkupDialect, MessageRef, OutboundMessage, SendReconciliation, SentMessage,
    Target, TextFormat,
};
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

use budget::{Budgets, Taken};
use retry::RetryPolicy;

use crate::metrics::{Op, OutboundMetrics, Reconciled, metrics};

/// Delivered idempotency keys remembered; a retry comes within seconds, so the most recent
/// few thousand are plenty.
const REMEMBERED_KEYS: usize = 4096;

/// The least time between two typing indicators in one chat: platforms show one for five
/// seconds or more, so a sooner one adds nothing but a call.
pub const TYPING_MIN_GAP: Duration = Duration::from_secs(4);

/// Chats whose last typing time is kept before the stale ones are swept out.
const TYPING_CHATS_SWEPT_ABOVE: usize = 1024;

/// Whether a call must happen or may be merged away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Part of the reply the user is owed: sent in order, never dropped.
    Final,
    /// A streaming preview edit: only its newest text matters.
    Preview,
}

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Sent(SentMessage),
    Edited,
    Deleted,
    /// A preview edit overtaken by a newer edit (or a final) of the same message before
    /// its turn came.
    Superseded,
}

enum Call {
    Send(OutboundMessage),
    Edit { message: MessageRef, text: String, format: TextFormat },
    Delete(MessageRef),
}

impl Call {
    fn op(&self) -> Op {
        match self {
            Call::Send(_) => Op::Send,
            Call::Edit { .. } => Op::Edit,
            Call::Delete(_) => Op::Delete,
        }
    }
}

struct Queued {
    call: Call,
    priority: Priority,
    done: oneshot::Sender<Result<Delivery, ChannelError>>,
    /// Checked again when the call's turn comes (it may wait out a rate limit).
    guard: Option<WriteGuard>,
}

/// Says whether the caller may still write to the platform: a run of a session whose lease
/// this replica may have lost (several replicas on one database) must not.
pub type WriteGuard = Arc<dyn Fn() -> bool + Send + Sync>;

/// Why a guarded call was not made.
fn fenced() -> ChannelError {
    tracing::info!("not writing to the platform: this replica no longer holds the session");
    ChannelError::Closed
}

/// One scheduler per platform account, made on first use: every sender to an account must
/// share its budgets.
#[derive(Clone, Default)]
pub struct Schedulers {
    by_account: Arc<Mutex<HashMap<(String, String), OutboundScheduler>>>,
    retry: RetryPolicy,
}

impl Schedulers {
    /// Schedulers whose calls are retried as `retry` says.
    pub fn with_retry(retry: RetryPolicy) -> Self {
        Self { by_account: Arc::default(), retry }
    }

    /// The scheduler of `channel`'s account.
    pub fn for_channel(&self, channel: &Arc<dyn Channel>) -> OutboundScheduler {
        let key = (channel.name().to_owned(), channel.account_id().to_owned());
        let mut by_account = self.by_account.lock().unwrap_or_else(PoisonError::into_inner);
        by_account.entry(key).or_insert_with(|| OutboundScheduler::with_retry(channel.clone(), self.retry)).clone()
    }
}

/// See the [module documentation](self). Cheap to clone.
#[derive(Clone)]
pub struct OutboundScheduler {
    inner: Arc<Inner>,
    /// See [`OutboundScheduler::guarded`].
    guard: Option<WriteGuard>,
}

struct Inner {
    channel: Arc<dyn Channel>,
    budgets: Budgets,
    retry: RetryPolicy,
    /// Chats with calls waiting or in flight; a chat is here exactly while its task runs.
    chats: Mutex<HashMap<String, ChatQueue>>,
    delivered: Mutex<DeliveredKeys>,
    /// When each chat was last shown typing, for [`TYPING_MIN_GAP`].
    typing_shown: Mutex<HashMap<String, Instant>>,
    /// The channel's `ferry_outbound_*` series, looked up once.
    metrics: OutboundMetrics,
}

struct ChatQueue {
    kind: ChatKind,
    calls: VecDeque<Queued>,
}

#[derive(Default)]
struct DeliveredKeys {
    by_key: HashMap<String, SentMessage>,
    order: VecDeque<String>,
}

impl OutboundScheduler {
    /// A scheduler for `channel`'s account, with the budgets its capabilities declare.
    pub fn new(channel: Arc<dyn Channel>) -> Self {
        Self::with_retry(channel, RetryPolicy::default())
    }

    /// [`OutboundScheduler::new`], retrying as `retry` says.
    pub fn with_retry(channel: Arc<dyn Channel>, retry: RetryPolicy) -> Self {
        let budgets = Budgets::new(&channel.capabilities().send_budget);
        let counters = metrics().outbound(channel.name());
        Self {
            inner: Arc::new(Inner {
                channel,
                budgets,
                retry,
                chats: Mutex::new(HashMap::new()),
                delivered: Mutex::new(DeliveredKeys::default()),
                typing_shown: Mutex::new(HashMap::new()),
                metrics: counters,
            }),
            guard: None,
        }
    }

    /// This scheduler (same budgets and queues) for a caller that may lose the right to
    /// write: each call is made only if `guard` still says yes when its turn comes, and
    /// fails with [`ChannelError::Closed`] otherwise.
    pub fn guarded(&self, guard: WriteGuard) -> Self {
        Self { inner: self.inner.clone(), guard: Some(guard) }
    }

    fn may_write(&self) -> bool {
        self.guard.as_ref().is_none_or(|guard| guard())
    }

    /// The channel this scheduler sends to.
    pub fn channel(&self) -> &Arc<dyn Channel> {
        &self.inner.channel
    }

    /// Uploads `message`'s files ahead of its send where the platform uploads and shares
    /// them apart ([`Channel::upload_ahead`]): the message comes back with their ids. An
    /// upload that fails is left to the send (which uploads as it always does), so this
    /// never costs a message.
    pub async fn upload_ahead(&self, message: OutboundMessage) -> OutboundMessage {
        if message.attachments.is_empty() || !self.may_write() {
            return message;
        }
        match self.inner.channel.upload_ahead(message.clone()).await {
            Ok(uploaded) => uploaded,
            Err(error) => {
                tracing::info!(channel = self.inner.channel.name(), %error, "uploading a message's files ahead of it failed; the send uploads them");
                message
            }
        }
    }

    /// Whether a send repeated under the same idempotency key is settled rather than shown
    /// twice (the platform deduplicates it, or the channel looks it up first).
    pub fn reconciles_sends(&self) -> bool {
        self.inner.channel.capabilities().send_reconciliation != SendReconciliation::None
    }

    /// Sends a message (a final reply or a turn's first preview) and returns the platform's
    /// id. Sends are never merged or skipped, and keep their order within the chat.
    pub async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        if let Some(sent) = message.idempotency_key.as_ref().and_then(|key| self.inner.delivered_as(key)) {
            tracing::debug!(message_id = %sent.message_id, "a send already delivered was asked for again; not reposting");
            return Ok(sent);
        }
        let target = message.target.clone();
        match self.submit(&target, Call::Send(message), Priority::Final).await? {
            Delivery::Sent(sent) => Ok(sent),
            other => Err(ChannelError::Transient { reason: format!("unexpected outcome of a send: {other:?}") }),
        }
    }

    /// Sends a message an earlier attempt may already have delivered (a process that died
    /// mid-send): reconciled first as the channel allows (see the module documentation),
    /// then sent if it is not there.
    pub async fn send_after_unknown_outcome(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        if let Some(sent) = self.inner.reconcile(&message).await {
            if let Some(key) = &message.idempotency_key {
                self.inner.remember(key, &sent);
            }
            return Ok(sent);
        }
        self.send(message).await
    }

    /// Sends a rendered message; if the platform rejects its markup (Telegram's "can't parse
    /// entities"), sends the same part as plain text instead. Either is sent unthreaded if
    /// the platform refuses its thread ([`OutboundScheduler::send_threaded_or_not`]).
    pub async fn send_or_plain(
        &self,
        message: OutboundMessage,
        dialect: MarkupDialect,
    ) -> Result<SentMessage, ChannelError> {
        match self.send_threaded_or_not(message.clone()).await {
            Err(ChannelError::MarkupRejected { reason }) => {
                tracing::info!(%reason, "the platform rejected a message's markup; sending it as plain text");
                let mut plain = message;
                plain.text = super::format::part_as_plain(&plain.text, dialect);
                plain.format = TextFormat::Plain;
                plain.idempotency_key = plain.idempotency_key.map(|key| format!("{key}:plain"));
                self.send_threaded_or_not(plain).await
            }
            other => other,
        }
    }

    /// Sends a message; if the platform refuses a message threaded to another one (a 4xx:
    /// the model's `[[reply_to: …]]` may name a message the platform does not know, or an
    /// id not of its kind), sends it again unthreaded — a reply outside its thread beats a
    /// lost one. The refused send did not land, so the retry keeps its idempotency key.
    pub async fn send_threaded_or_not(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        match self.send(message.clone()).await {
            Err(ChannelError::Rejected { reason }) if message.reply_to_message_id.is_some() => {
                tracing::info!(
                    channel = self.inner.channel.name(),
                    chat_id = %message.target.chat.id,
                    reply_to = message.reply_to_message_id.as_deref(),
                    %reason,
                    "the platform refused a threaded reply; sending it unthreaded"
                );
                let mut unthreaded = message;
                unthreaded.reply_to_message_id = None;
                self.send(unthreaded).await
            }
            other => other,
        }
    }

    /// [`OutboundScheduler::send_or_plain`] for a message an earlier attempt may already
    /// have delivered (see [`OutboundScheduler::send_after_unknown_outcome`]).
    pub async fn send_or_plain_after_unknown_outcome(
        &self,
        message: OutboundMessage,
        dialect: MarkupDialect,
    ) -> Result<SentMessage, ChannelError> {
        if let Some(sent) = self.inner.reconcile(&message).await {
            return Ok(sent);
        }
        // It may have gone out as plain text after its markup was refused.
        if self.inner.channel.capabilities().send_reconciliation == SendReconciliation::Lookup
            && let Some(key) = &message.idempotency_key
        {
            let mut plain = message.clone();
            plain.idempotency_key = Some(format!("{key}:plain"));
            if let Ok(Some(sent)) = self.inner.channel.find_sent(&plain).await {
                return Ok(sent);
            }
        }
        self.send_or_plain(message, dialect).await
    }

    /// Edits a message in place: a preview's growing text, or a preview turned final.
    pub async fn edit(
        &self,
        message: MessageRef,
        text: String,
        format: TextFormat,
        priority: Priority,
    ) -> Result<Delivery, ChannelError> {
        let target = message.target.clone();
        self.submit(&target, Call::Edit { message, text, format }, priority).await
    }

    pub async fn delete(&self, message: MessageRef) -> Result<Delivery, ChannelError> {
        let target = message.target.clone();
        self.submit(&target, Call::Delete(message), Priority::Final).await
    }

    /// Shows "typing…" in `target` when it is worth a call: not within [`TYPING_MIN_GAP`] of
    /// the chat's last indicator, and only if the account's budgets have room right now. An
    /// indicator never waits for room, so it can never hold up a reply or draw a 429.
    /// Returns whether it was shown.
    pub async fn typing(&self, target: &Target) -> bool {
        if !self.may_write() {
            return false;
        }
        let channel = &self.inner.channel;
        if !channel.capabilities().supports_typing || !self.inner.typing_due(&target.chat.id) {
            return false;
        }
        if !self.inner.budgets.try_acquire_spare(&target.chat.id, target.chat.kind) {
            tracing::trace!(channel = channel.name(), "no room in the send budget; typing skipped");
            return false;
        }
        match channel.typing(target).await {
            Ok(()) => true,
            Err(error) => {
                tracing::debug!(channel = channel.name(), %error, "typing indicator failed");
                false
            }
        }
    }

    async fn submit(&self, target: &Target, call: Call, priority: Priority) -> Result<Delivery, ChannelError> {
        if !self.may_write() {
            return Err(fenced());
        }
        let chat = target.chat.id.clone();
        let kind = target.chat.kind;
        let (done, outcome) = oneshot::channel();
        // A chat is in the map exactly while someone works it (a worker, or a caller making
        // its call in place, who hands over when done): queueing behind them is enough.
        let call = {
            let mut chats = self.inner.chats();
            match chats.get_mut(&chat) {
                Some(queue) => {
                    queue.push(Queued { call, priority, done, guard: self.guard.clone() });
                    None
                }
                None => {
                    chats.insert(chat.clone(), ChatQueue { kind, calls: VecDeque::new() });
                    Some((call, done))
                }
            }
        };
        if let Some((call, done)) = call {
            // An idle chat with room in its budgets: the call is made right here, without a
            // hand-off to a worker task. Calls that arrive meanwhile queue behind it.
            let taken = match self.inner.budgets.try_acquire(&chat, kind) {
                Ok(()) => {
                    // Hands the chat over even if this caller stops waiting mid-call.
                    let _hand_over = HandOver { inner: self.inner.clone(), chat: chat.clone() };
                    return self.inner.perform(&chat, kind, &call, priority).await;
                }
                Err(taken) => taken,
            };
            // No room yet: a worker waits for it, so finals can overtake while it does.
            if let Some(queue) = self.inner.chats().get_mut(&chat) {
                queue.push(Queued { call, priority, done, guard: self.guard.clone() });
            }
            let inner = self.inner.clone();
            tokio::spawn(async move { inner.work(chat, taken).await });
        }
        outcome.await.unwrap_or(Err(ChannelError::Closed))
    }

    /// Chats with work right now (for tests and status).
    pub fn busy_chats(&self) -> usize {
        self.inner.chats().len()
    }
}

/// Ends a call made in place (see [`OutboundScheduler::send`]): whatever queued behind it
/// gets a worker, or the chat is forgotten.
struct HandOver {
    inner: Arc<Inner>,
    chat: String,
}

impl Drop for HandOver {
    fn drop(&mut self) {
        self.inner.clone().hand_over(std::mem::take(&mut self.chat));
    }
}

impl ChatQueue {
    /// Queues a call; preview edits of the same message that it makes pointless are
    /// answered [`Delivery::Superseded`] and removed.
    fn push(&mut self, queued: Queued) {
        if let Call::Edit { message, .. } | Call::Delete(message) = &queued.call {
            let mut index = 0;
            while index < self.calls.len() {
                let obsolete = matches!(
                    &self.calls[index],
                    Queued { call: Call::Edit { message: earlier, .. }, priority: Priority::Preview, .. }
                        if earlier == message
                );
                match obsolete.then(|| self.calls.remove(index)).flatten() {
                    Some(earlier) => {
                        let _ = earlier.done.send(Ok(Delivery::Superseded));
                    }
                    None => index += 1,
                }
            }
        }
        self.calls.push_back(queued);
    }

    /// The next call: the oldest final if there is one, else the oldest preview edit.
    fn next(&mut self) -> Option<Queued> {
        let index = self.calls.iter().position(|queued| queued.priority == Priority::Final).unwrap_or(0);
        self.calls.remove(index)
    }
}

impl Inner {
    /// Whether `chat` may be shown typing now; if so, now is noted as its last time.
    fn typing_due(&self, chat: &str) -> bool {
        let now = Instant::now();
        let mut shown = self.typing_shown.lock().unwrap_or_else(PoisonError::into_inner);
        if shown.get(chat).is_some_and(|at| now.duration_since(*at) < TYPING_MIN_GAP) {
            return false;
        }
        if shown.len() >= TYPING_CHATS_SWEPT_ABOVE {
            shown.retain(|_, at| now.duration_since(*at) < TYPING_MIN_GAP);
        }
        shown.insert(chat.to_owned(), now);
        true
    }

    /// After a call made in place: a worker takes over what queued meanwhile, or the chat
    /// is forgotten.
    fn hand_over(self: Arc<Self>, chat: String) {
        let mut chats = self.chats();
        match chats.get(&chat) {
            Some(queue) if !queue.calls.is_empty() => {
                drop(chats);
                tokio::spawn(async move { self.work(chat, Taken::default()).await });
            }
            _ => {
                chats.remove(&chat);
            }
        }
    }

    /// Works one chat's queue until it is empty, then forgets the chat.
    ///
    /// The budget is taken before the next call is chosen: while the chat waits for room,
    /// finals that arrive overtake queued preview edits, and edits keep merging.
    async fn work(self: Arc<Self>, chat: String, mut taken: Taken) {
        let Some(kind) = self.chats().get(&chat).map(|queue| queue.kind) else { return };
        loop {
            self.budgets.acquire_rest(&chat, kind, std::mem::take(&mut taken)).await;
            let queued = {
                let mut chats = self.chats();
                let Some(queue) = chats.get_mut(&chat) else { return };
                match queue.next() {
                    Some(queued) => queued,
                    None => {
                        chats.remove(&chat);
                        return;
                    }
                }
            };
            let outcome = match &queued.guard {
                Some(guard) if !guard() => Err(fenced()),
                _ => self.perform(&chat, kind, &queued.call, queued.priority).await,
            };
            let _ = queued.done.send(outcome);
            let mut chats = self.chats();
            if chats.get(&chat).is_some_and(|queue| queue.calls.is_empty()) {
                chats.remove(&chat);
                return;
            }
        }
    }

    /// One call, retried as the policy says. The first attempt's budget is already taken.
    async fn perform(
        &self,
        chat: &str,
        kind: ChatKind,
        call: &Call,
        priority: Priority,
    ) -> Result<Delivery, ChannelError> {
        let started = tokio::time::Instant::now();
        let mut attempt = 1;
        // The previous attempt of this send may have landed (a timeout, a dropped connection).
        let mut maybe_landed = false;
        loop {
            if attempt > 1 {
                self.budgets.acquire(chat, kind).await;
            }
            let reconciled = match call {
                Call::Send(message) if maybe_landed => self.reconcile(message).await,
                _ => None,
            };
            let outcome = match (call, reconciled) {
                (Call::Send(_), Some(sent)) => Ok(Delivery::Sent(sent)),
                (Call::Send(message), None) => self.channel.send(message.clone()).await.map(Delivery::Sent),
                (Call::Edit { message, text, format }, _) => {
                    self.channel.edit(message, text, *format).await.map(|()| Delivery::Edited)
                }
                (Call::Delete(message), _) => self.channel.delete(message).await.map(|()| Delivery::Deleted),
            };
            match outcome {
                Ok(delivery) => {
                    self.metrics.delivered(call.op());
                    if let (Call::Send(message), Delivery::Sent(sent)) = (call, &delivery)
                        && let Some(key) = &message.idempotency_key
                    {
                        self.remember(key, sent);
                    }
                    return Ok(delivery);
                }
                Err(error) => {
                    let wait = self.retry.next_wait(attempt, &error, priority, started.elapsed());
                    self.metrics.attempt_failed(&error, wait.is_some());
                    maybe_landed = matches!(error, ChannelError::Transient { .. });
                    let Some(wait) = wait else { return Err(error) };
                    tracing::debug!(channel = self.channel.name(), chat, attempt, %error, wait_ms = wait.as_millis() as u64, "retrying a platform call");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Settles a send that may have landed before it is repeated: `Some` if the platform
    /// has it already; `None` if sending (again) is the thing to do.
    async fn reconcile(&self, message: &OutboundMessage) -> Option<SentMessage> {
        let channel = self.channel.name();
        if message.idempotency_key.is_none() {
            self.metrics.unknown_outcome();
            return None;
        }
        match self.channel.capabilities().send_reconciliation {
            SendReconciliation::PlatformDeduplicates => {
                metrics().delivery_reconciled(channel, Reconciled::PlatformDeduplicated);
                None
            }
            SendReconciliation::Lookup => match self.channel.find_sent(message).await {
                Ok(Some(sent)) => {
                    tracing::info!(channel, message_id = %sent.message_id, "a send whose outcome was unknown had landed; not sending it again");
                    metrics().delivery_reconciled(channel, Reconciled::Found);
                    Some(sent)
                }
                Ok(None) => {
                    metrics().delivery_reconciled(channel, Reconciled::NotFound);
                    None
                }
                Err(error) => {
                    tracing::warn!(channel, %error, "cannot look up whether a send landed; sending it again");
                    self.metrics.unknown_outcome();
                    None
                }
            },
            SendReconciliation::None => {
                self.metrics.unknown_outcome();
                None
            }
        }
    }

    fn delivered_as(&self, key: &str) -> Option<SentMessage> {
        self.delivered.lock().unwrap_or_else(PoisonError::into_inner).by_key.get(key).cloned()
    }

    fn remember(&self, key: &str, sent: &SentMessage) {
        let mut delivered = self.delivered.lock().unwrap_or_else(PoisonError::into_inner);
        if delivered.by_key.insert(key.to_owned(), sent.clone()).is_none() {
            delivered.order.push_back(key.to_owned());
        }
        while delivered.order.len() > REMEMBERED_KEYS {
            if let Some(oldest) = delivered.order.pop_front() {
                delivered.by_key.remove(&oldest);
            }
        }
    }

    fn chats(&self) -> MutexGuard<'_, HashMap<String, ChatQueue>> {
        self.chats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
