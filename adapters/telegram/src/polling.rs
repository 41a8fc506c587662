//! The long-poll loop: `getUpdates` → normalize → core → ack → next offset.
//!
//! teloxide's own `Polling` listener confirms an update as soon as it has handed it on;
//! Ferry must confirm only after the core has recorded it (SPEC §11), so the loop is
//! written here on `Requester::get_updates`. Per batch:
//!
//! 1. fetch with the [`OffsetLedger`]'s offset (nothing confirmed yet is lost);
//! 2. hand every message to the core in update order, each with an [`Ack`];
//! 3. wait for the acks in order and settle the ledger: the offset moves past the accepted
//!    prefix; an abandoned update and the ones after it are fetched again.
//!
//! Failures of `getUpdates` itself (network, 5xx, a body that is not a batch of updates, 409
//! Conflict when another instance polls the same bot or a webhook is set) are waited out with
//! exponential backoff, logged once when an incident starts and once when polling recovers,
//! not per retry. An incident that outlasts [`GIVE_UP_AFTER`] attempts ends the loop with
//! [`PollingStopped`]: the inbound stream ends, and the core's channel supervisor starts the
//! channel again with its own, longer backoff, showing it `retrying` in `/healthz` meanwhile.
//! Retrying here forever would hide an outage behind a channel that looks `running`. A token
//! Telegram refuses (401) ends the loop at once, and the reconnect's `getMe` stops the channel
//! for good. Nothing is confirmed while `getUpdates` fails, so the updates of the outage (and
//! any accepted ones the failed call would have confirmed) are fetched by the next poller;
//! the core drops the ones it already has by message id.
//!
//! Otherwise the loop ends when the core drops the inbound stream.
//!
//! The next `getUpdates` waits for the whole batch's acks, so the core should accept as
//! soon as a message is recorded, not when its run ends: a held ack pauses this bot's
//! inbound (that is the backpressure, by design).

use std::time::Duration;

use std::sync::Arc;

use ferry_channel::{Ack, AckOutcome, AckReceiver, CursorError, InboundDelivery, IngressCursor};
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::{AllowedUpdate, UpdateId};
use teloxide::{ApiError, Bot, RequestError};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::CHANNEL_NAME;
use crate::error::redact;
use crate::normalize::{BotIdentity, log_skipped, normalize};
use crate::offset::OffsetLedger;
use crate::salvage::{Fetched, salvage};

/// The first wait after a failed `getUpdates`; doubled per failure up to [`BACKOFF_MAX`].
pub(crate) const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two `getUpdates` attempts during an outage.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Failed `getUpdates` calls in a row after which the loop stops (see the module doc). With
/// the backoff above the fifth failure comes about 15 s into an outage (longer when each call
/// waits for its timeout, or Telegram asks for more with `retry_after`).
pub(crate) const GIVE_UP_AFTER: u32 = 5;
/// The Bot API's maximum batch size.
const BATCH_LIMIT: u8 = 100;

/// Why a poll loop stopped by itself. The inbound stream ends with it, and the channel's
/// supervisor decides what happens next.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PollingStopped {
    /// Telegram answered `getUpdates` with 401: the token was revoked. Polling on with it
    /// cannot help; the reconnect checks it with `getMe`.
    #[error("Telegram refused the bot token (401) while polling")]
    TokenRefused,
    /// `getUpdates` failed [`GIVE_UP_AFTER`] times in a row.
    #[error("getUpdates failed {attempts} times in a row over {down_for_s} s; the last failure: {last_error}")]
    GaveUp { attempts: u32, down_for_s: u64, last_error: String },
    /// The offset the previous holder of the poller lease saved cannot be read.
    #[error("cannot read the saved getUpdates offset: {0}")]
    CursorUnreadable(CursorError),
}

/// What the loop needs; a copy is owned by each spawned loop.
#[derive(Clone)]
pub(crate) struct Poller {
    /// A client whose timeout exceeds `timeout` (see `TelegramChannel::connect`).
    pub(crate) bot: Bot,
    pub(crate) token: String,
    pub(crate) identity: BotIdentity,
    pub(crate) account_id: String,
    /// The long-poll timeout sent to Telegram.
    pub(crate) timeout: Duration,
}

/// Saves `offset` before it is sent to Telegram, retrying while the store is unreachable.
/// `false` when polling must stop: the lease moved, or the core is gone.
async fn save_offset(
    cursor: &dyn IngressCursor,
    offset: i32,
    account_id: &str,
    tx: &mpsc::Sender<InboundDelivery>,
) -> bool {
    let mut delay = BACKOFF_MIN;
    loop {
        match cursor.save(&offset.to_string()).await {
            Ok(()) => return true,
            Err(CursorError::LeaseLost) => {
                info!(channel = CHANNEL_NAME, account_id, "another replica polls this bot now; polling stopped here");
                return false;
            }
            Err(error @ CursorError::Unavailable(_)) => {
                warn!(channel = CHANNEL_NAME, account_id, %error, "cannot save the getUpdates offset; retrying before polling on");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = tx.closed() => return false,
                }
                delay = (delay * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// One update of a batch on its way through the core.
enum InFlight {
    Delivered(UpdateId, AckReceiver),
    /// Not for the core (an edit, a service message): confirmed with the batch.
    Skipped(UpdateId),
}

impl Poller {
    /// Polls until the core drops the receiving end of `tx`, or `getUpdates` keeps failing
    /// ([`PollingStopped`]). With a `cursor` (the core runs as several replicas and this one
    /// holds the bot's poller lease), polling starts from the offset the previous holder
    /// saved, and each batch's offset is saved there before the next `getUpdates` confirms it
    /// to Telegram; a save refused because the lease moved ends the loop.
    pub(crate) async fn run(
        self,
        tx: &mpsc::Sender<InboundDelivery>,
        cursor: Option<Arc<dyn IngressCursor>>,
    ) -> Result<(), PollingStopped> {
        let mut ledger = OffsetLedger::default();
        if let Some(cursor) = &cursor {
            match cursor.load().await {
                Ok(Some(saved)) => match saved.parse::<i32>() {
                    Ok(offset) => ledger = OffsetLedger::starting_at(offset),
                    Err(_) => {
                        warn!(channel = CHANNEL_NAME, account_id = %self.account_id, "the saved getUpdates offset is not a number; starting from Telegram's oldest unconfirmed update")
                    }
                },
                Ok(None) => {}
                Err(error) => return Err(PollingStopped::CursorUnreadable(error)),
            }
        }
        let mut backoff = Backoff::default();
        let mut outage: Option<Outage> = None;
        loop {
            let mut request = self
                .bot
                .get_updates()
                .timeout(u32::try_from(self.timeout.as_secs()).unwrap_or(u32::MAX))
                .limit(BATCH_LIMIT)
                .allowed_updates([AllowedUpdate::Message]);
            if let Some(offset) = ledger.offset() {
                request = request.offset(offset);
            }
            let result = tokio::select! {
                result = request.send() => result,
                () = tx.closed() => break,
            };
            // A batch teloxide cannot read as a whole is read update by update, so one
            // unreadable update is skipped instead of blocking every one after it.
            let result = match result {
                Ok(updates) => Ok(updates.into_iter().map(|update| Fetched::Read(Box::new(update))).collect()),
                Err(RequestError::InvalidJson { raw, source }) => {
                    salvage(&raw).ok_or(RequestError::InvalidJson { raw, source })
                }
                Err(error) => Err(error),
            };
            let updates: Vec<Fetched> = match result {
                Ok(updates) => {
                    if let Some(outage) = outage.take() {
                        info!(
                            channel = CHANNEL_NAME,
                            account_id = %self.account_id,
                            failed_attempts = outage.attempts,
                            down_for_ms = outage.since.elapsed().as_millis() as u64,
                            "Telegram getUpdates recovered; receiving messages again"
                        );
                    }
                    backoff.reset();
                    updates
                }
                Err(error) => {
                    let delay = backoff.next_delay(&error);
                    self.failed(&error, delay, &mut outage)?;
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        () = tx.closed() => break,
                    }
                }
            };

            let Some(in_flight) = self.deliver(updates, tx).await else { break };
            let mut outcomes = Vec::with_capacity(in_flight.len());
            for update in in_flight {
                let (id, outcome) = match update {
                    InFlight::Skipped(id) => (id, AckOutcome::Accepted),
                    InFlight::Delivered(id, ack) => (id, ack.outcome().await),
                };
                outcomes.push((id, outcome));
                if outcome == AckOutcome::Abandoned {
                    break;
                }
            }
            let settled = ledger.settle(outcomes);
            if let (Some(cursor), Some(offset)) = (&cursor, ledger.offset())
                && !save_offset(cursor.as_ref(), offset, &self.account_id, tx).await
            {
                break;
            }
            if !settled {
                if tx.is_closed() {
                    break;
                }
                // The core is alive but let a message go (it will come again with the next
                // fetch); give it a moment rather than spinning on the same update.
                debug!(channel = CHANNEL_NAME, account_id = %self.account_id, "update abandoned by the core; fetching it again");
                tokio::select! {
                    () = tokio::time::sleep(BACKOFF_MIN) => {}
                    () = tx.closed() => break,
                }
            }
        }
        debug!(channel = CHANNEL_NAME, account_id = %self.account_id, "inbound stream dropped; polling stopped");
        Ok(())
    }

    /// Hands a batch to the core in update order. `None` when the core is gone.
    async fn deliver(&self, updates: Vec<Fetched>, tx: &mpsc::Sender<InboundDelivery>) -> Option<Vec<InFlight>> {
        let mut in_flight = Vec::with_capacity(updates.len());
        for update in updates {
            let update = match update {
                Fetched::Read(update) => update,
                Fetched::Unreadable(id) => {
                    warn!(channel = CHANNEL_NAME, account_id = %self.account_id, update_id = id.0, "update Ferry's Telegram client cannot read (nested too deep, or malformed); skipped");
                    in_flight.push(InFlight::Skipped(id));
                    continue;
                }
            };
            match normalize(&update, &self.identity, &self.account_id) {
                Ok(message) => {
                    let (ack, receiver) = Ack::pair();
                    debug!(
                        channel = CHANNEL_NAME,
                        account_id = %self.account_id,
                        chat_id = %message.chat.id,
                        update_id = update.id.0,
                        "message received"
                    );
                    tx.send(InboundDelivery { message, ack }).await.ok()?;
                    in_flight.push(InFlight::Delivered(update.id, receiver));
                }
                Err(skip) => {
                    log_skipped(&self.account_id, update.id.0, skip);
                    in_flight.push(InFlight::Skipped(update.id));
                }
            }
        }
        Some(in_flight)
    }

    /// Records a failed `getUpdates`: logs the start of an outage (the later failures are
    /// debug lines), and stops polling when retrying here cannot help (the token was refused)
    /// or has not helped [`GIVE_UP_AFTER`] times in a row.
    fn failed(&self, error: &RequestError, delay: Duration, outage: &mut Option<Outage>) -> Result<(), PollingStopped> {
        if matches!(error, RequestError::Api(ApiError::InvalidToken)) {
            return Err(PollingStopped::TokenRefused);
        }
        if let Some(outage) = outage {
            outage.attempts += 1;
            if outage.attempts >= GIVE_UP_AFTER {
                return Err(PollingStopped::GaveUp {
                    attempts: outage.attempts,
                    down_for_s: outage.since.elapsed().as_secs(),
                    last_error: self.describe(error),
                });
            }
            debug!(channel = CHANNEL_NAME, account_id = %self.account_id, attempts = outage.attempts, retry_in_ms = delay.as_millis() as u64, "getUpdates still failing");
            return Ok(());
        }
        *outage = Some(Outage { since: Instant::now(), attempts: 1 });
        let hint = match error {
            RequestError::Api(ApiError::CantGetUpdates) => {
                "a webhook is set for this bot: delete it, or set channels.telegram.mode = \"webhook\""
            }
            RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => "another process is polling this bot token",
            RequestError::Api(ApiError::Unknown(text)) if text.starts_with("Conflict") => {
                "another process is polling this bot token"
            }
            _ => "network or Telegram trouble",
        };
        warn!(
            channel = CHANNEL_NAME,
            account_id = %self.account_id,
            error = %self.describe(error),
            hint,
            "Telegram getUpdates failed; retrying with backoff, logging again when it recovers; after {GIVE_UP_AFTER} failures in a row polling stops and the channel is started again"
        );
        Ok(())
    }

    /// A failed call for the log: never the token (teloxide's network errors carry the request
    /// URL, `/bot<TOKEN>/GetUpdates`), nor the body of an unreadable answer (it holds users'
    /// messages, and may be megabytes long).
    fn describe(&self, error: &RequestError) -> String {
        match error {
            RequestError::InvalidJson { source, raw } => {
                format!("a response Ferry cannot read ({} bytes): {source}", raw.len())
            }
            error => redact(&error.to_string(), &self.token),
        }
    }
}

/// An ongoing run of `getUpdates` failures, logged at its start and its end.
struct Outage {
    since: Instant,
    attempts: u32,
}

/// Exponential backoff between failed `getUpdates` calls, honouring Telegram's
/// `retry_after` when it sends one.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_MIN }
    }
}

impl Backoff {
    pub(crate) fn next_delay(&mut self, error: &RequestError) -> Duration {
        let delay = match error {
            RequestError::RetryAfter(seconds) => seconds.duration().max(self.next),
            _ => self.next,
        };
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

#[cfg(test)]
mod tests {
    use teloxide::types::UserId;

    use super::*;

    const TOKEN: &str = "123456:SECRET-token";

    fn poller() -> Poller {
        Poller {
            bot: Bot::new(TOKEN),
            token: TOKEN.to_owned(),
            identity: BotIdentity { id: UserId(1), username: "ferry_bot".to_owned() },
            account_id: "default".to_owned(),
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn polling_stops_after_five_failures_in_a_row_naming_the_last_without_token_or_body() {
        let poller = poller();
        let mut outage = None;
        let network = RequestError::Api(ApiError::Unknown(format!("Bad Gateway at /bot{TOKEN}/GetUpdates")));
        for _ in 1..GIVE_UP_AFTER {
            assert!(poller.failed(&network, BACKOFF_MIN, &mut outage).is_ok(), "retried");
        }
        let source = serde_json::from_str::<serde_json::Value>("{\"ok\":true,\"result\":[{").unwrap_err();
        let malformed = RequestError::InvalidJson {
            source: source.into(),
            raw: "{\"ok\":true,\"result\":[{\"text\":\"private\"".into(),
        };
        match poller.failed(&malformed, BACKOFF_MIN, &mut outage) {
            Err(PollingStopped::GaveUp { attempts, last_error, .. }) => {
                assert_eq!(attempts, GIVE_UP_AFTER);
                assert!(last_error.contains("cannot read"), "{last_error}");
                assert!(!last_error.contains("private") && !last_error.contains(TOKEN), "{last_error}");
            }
            other => panic!("polling should stop, got {other:?}"),
        }
    }

    #[test]
    fn a_refused_token_stops_polling_at_once() {
        let refused = RequestError::Api(ApiError::InvalidToken);
        let stopped = poller().failed(&refused, BACKOFF_MIN, &mut None);
        assert!(matches!(stopped, Err(PollingStopped::TokenRefused)), "{stopped:?}");
    }

    #[test]
    fn backoff_doubles_from_one_second_to_thirty_and_resets_after_success() {
        let network = RequestError::Api(ApiError::TerminatedByOtherGetUpdates);
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..7).map(|_| backoff.next_delay(&network).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        backoff.reset();
        assert_eq!(backoff.next_delay(&network), BACKOFF_MIN);
    }

    #[test]
    fn backoff_waits_at_least_what_telegram_asked_for() {
        let mut backoff = Backoff::default();
        let flood = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(5));
        assert_eq!(backoff.next_delay(&flood), Duration::from_secs(5));
    }
}
