//! The delivery ledger (SPEC §11): what became of each run's reply, written into the state
//! directory's inbound log beside the messages it answers, with the log's group commit.
//!
//! The inbound log makes sure no accepted message is lost; the ledger makes sure none is
//! answered twice and no preview is left half-written when the process dies mid-reply:
//!
//! - a run's preview message id is recorded as soon as the platform gives it
//!   ([`LedgerEvent::Preview`]): after a restart the run's next attempt streams into that
//!   message again instead of leaving it frozen beside a second reply;
//! - a finished run's final messages are recorded before the first is sent
//!   ([`LedgerEvent::Finals`]) and each one once the platform has it
//!   ([`LedgerEvent::Delivered`]): after a restart only what is missing is sent, under the
//!   same idempotency keys, without asking the model again;
//! - the record that completes the reply also marks its messages answered, in the same
//!   write: "answered" means "final delivered".
//!
//! At start-up, before any channel starts, [`DeliveryLedger::recover`] folds the records
//! of unanswered messages ([`recovery`]); the executor then takes a run's recovered reply
//! with [`DeliveryLedger::take`] when the run's messages come up in their session lane.

pub mod record;
pub mod recovery;
pub mod sends;
pub mod uploads;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ferry_channel::MessageRef;

pub use record::LedgerEvent;
pub use recovery::{OrphanPreview, RecordedFinals, RecoveredReply};
pub use sends::Recovered as RecoveredSends;
pub use sends::{RunSends, SentKeys, StepKind};

use crate::state::inbound::LoggedDelivery;
use crate::state::outage::through_outages;
use crate::state::{InboundStore, StorageError};

/// The ledger of one state directory. Cheap to clone.
#[derive(Clone)]
pub struct DeliveryLedger {
    log: Arc<dyn InboundStore>,
    recovered: Arc<Mutex<Recovered>>,
}

#[derive(Default)]
struct Recovered {
    /// Unfinished replies of the previous process, by the messages they answer; each is
    /// handed out once.
    by_seq: HashMap<i64, Arc<RecoveredReply>>,
    /// Messages whose recovered reply was delivered: a later run of theirs has nothing
    /// left to say (a follow-up batch that split differently after the restart).
    finished: HashSet<i64>,
    /// Messages with a smaller id were accepted by an earlier process, which may have
    /// started their reply without recording it (killed mid-send).
    first_of_this_process: i64,
    /// Messages of sessions taken over from another replica, which may likewise have
    /// started their replies.
    adopted: HashSet<i64>,
    /// How many runs kept each message for later ([`LedgerEvent::Kept`]): the generation
    /// of the next run's send keys ([`sends`]).
    generations: HashMap<i64, u32>,
}

impl DeliveryLedger {
    pub fn new(log: Arc<dyn InboundStore>) -> Self {
        Self { log, recovered: Arc::default() }
    }

    /// Takes in the messages `ids` of a session taken over from another replica, and the
    /// delivery records of their replies: what that replica began is completed as a
    /// restart completes what the last process began. Returns the previews nothing will
    /// reuse.
    pub fn adopt(&self, ids: &[i64], deliveries: Vec<LoggedDelivery>) -> Vec<OrphanPreview> {
        let recovery = recovery::fold(deliveries);
        let mut recovered = self.lock();
        recovered.adopted.extend(ids.iter().copied());
        for (seq, reply) in recovery.by_seq {
            recovered.generations.insert(seq, reply.kept);
            recovered.by_seq.insert(seq, reply);
        }
        recovery.orphans
    }

    /// Takes in what the previous process left unfinished: the delivery records of
    /// unanswered messages ([`InboundStore::unanswered`]). Call it once at start-up, before
    /// any channel starts (what this process records itself is not recovered). Returns the
    /// previews nothing will reuse, to be deleted once their channels are up.
    pub async fn recover(&self, deliveries: Vec<LoggedDelivery>) -> Vec<OrphanPreview> {
        let recovery = recovery::fold(deliveries);
        let first_of_this_process = match self.log.next_id().await {
            Ok(id) => id,
            Err(error) => {
                // Every reply then counts as inherited: reconciled before a first send.
                tracing::warn!(%error, "cannot read the inbound store's next id");
                i64::MAX
            }
        };
        self.lock().first_of_this_process = first_of_this_process;
        if !recovery.by_seq.is_empty() {
            tracing::info!(
                messages = recovery.by_seq.len(),
                orphans = recovery.orphans.len(),
                "replies left unfinished by the last shutdown will be completed"
            );
        }
        let mut recovered = self.lock();
        recovered.generations = recovery.by_seq.iter().map(|(seq, reply)| (*seq, reply.kept)).collect();
        recovered.by_seq = recovery.by_seq;
        recovery.orphans
    }

    /// The recovered replies of the messages `seqs` (each reply once, in order of its
    /// first message). Taken: a later call does not return them again.
    pub fn take(&self, seqs: &[i64]) -> Vec<Arc<RecoveredReply>> {
        let mut recovered = self.lock();
        if recovered.by_seq.is_empty() {
            return Vec::new();
        }
        let mut taken: Vec<Arc<RecoveredReply>> = Vec::new();
        for seq in seqs {
            if let Some(reply) = recovered.by_seq.remove(seq) {
                for other in &reply.seqs {
                    recovered.by_seq.remove(other);
                }
                if !taken.iter().any(|known| Arc::ptr_eq(known, &reply)) {
                    taken.push(reply);
                }
            }
        }
        taken
    }

    /// Remembers that the recovered reply to `seqs` was delivered.
    pub fn finished(&self, seqs: &[i64]) {
        self.lock().finished.extend(seqs);
    }

    /// Whether a recovered reply already answered message `seq`.
    pub fn is_finished(&self, seq: i64) -> bool {
        let recovered = self.lock();
        !recovered.finished.is_empty() && recovered.finished.contains(&seq)
    }

    /// The run answering `recorder`'s messages failed for a passing reason and keeps them
    /// for a later run: recorded, so that run's sends never pass for this one's, even after
    /// a restart.
    pub async fn kept(&self, recorder: &Recorder) {
        recorder.record(&LedgerEvent::Kept, false).await;
        let mut recovered = self.lock();
        for seq in recorder.seqs() {
            *recovered.generations.entry(*seq).or_default() += 1;
        }
    }

    /// The sends of the reply `recorder` writes, with what a killed attempt at it did
    /// (`recovered`, from [`RecoveredReply`]).
    pub fn sends(&self, recorder: Recorder, recovered: RecoveredSends) -> RunSends {
        let generation = recorder.seqs().first().and_then(|seq| self.lock().generations.get(seq).copied());
        RunSends::new(recorder, recovered, generation.unwrap_or_default())
    }

    /// A recorder for the reply to the messages `seqs`.
    pub fn recorder(&self, seqs: Vec<i64>) -> Recorder {
        let recovered = self.lock();
        let inherited =
            seqs.iter().any(|seq| *seq < recovered.first_of_this_process || recovered.adopted.contains(seq));
        drop(recovered);
        Recorder { log: self.log.clone(), seqs: seqs.into(), inherited, joined: Arc::default() }
    }

    /// A run answering `to` streams into `preview`, which a reply answering `from` left.
    /// When the two differ (a replica that took a session over runs only some of a killed
    /// run's messages, or more), the preview is recorded as gone from `from` and as `to`'s:
    /// the messages of `from` this run does not answer must never stream into it again, as
    /// it is this run's answer now, and a crash of this run must still find it.
    pub async fn hand_over_preview(
        &self,
        from: &[i64],
        to: &[i64],
        channel: &str,
        account_id: &str,
        preview: &MessageRef,
    ) {
        if from == to {
            return;
        }
        self.recorder(from.to_vec()).record(&LedgerEvent::PreviewGone, false).await;
        let event = LedgerEvent::Preview {
            channel: channel.to_owned(),
            account_id: account_id.to_owned(),
            message: preview.clone(),
        };
        self.recorder(to.to_vec()).record(&event, false).await;
    }

    fn lock(&self) -> MutexGuard<'_, Recovered> {
        self.recovered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes the ledger records of one reply. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    log: Arc<dyn InboundStore>,
    seqs: Arc<[i64]>,
    /// The reply answers messages an earlier process accepted: it may have sent part of
    /// this reply without recording it.
    inherited: bool,
    /// Messages steered into the run ([`Recorder::join`]): the record that completes the
    /// reply answers them too.
    joined: Arc<Mutex<Vec<i64>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("seqs", &self.seqs).finish_non_exhaustive()
    }
}

impl Recorder {
    /// The messages the reply answers.
    pub fn seqs(&self) -> &[i64] {
        &self.seqs
    }

    /// Whether an earlier process may have started this reply without recording it (it
    /// answers messages that process accepted): a first send is reconciled, not repeated
    /// blind.
    pub fn inherited(&self) -> bool {
        self.inherited
    }

    /// A stable name for the reply across restarts, for idempotency keys that must survive
    /// one (a preview's first send): the first message it answers.
    pub fn reply_key(&self) -> String {
        format!("m{}", self.seqs.first().copied().unwrap_or_default())
    }

    /// Messages the run took in while it went on (steering): its reply answers them, so
    /// the record that completes it marks them answered too, and a restart does not run
    /// them again.
    pub fn join(&self, seqs: &[i64]) {
        let mut joined = self.joined.lock().unwrap_or_else(PoisonError::into_inner);
        joined.extend(seqs.iter().filter(|seq| !self.seqs.contains(seq)));
        joined.sort_unstable();
        joined.dedup();
    }

    /// The messages [`Recorder::join`] added.
    pub fn joined(&self) -> Vec<i64> {
        self.joined.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records `event`; with `done`, the same write marks the reply's messages answered.
    /// Returns whether it was written. While the store is unreachable the write is tried
    /// again (`state::outage`): a reply whose finals or completion went unrecorded would be
    /// sent again by whoever runs its messages next. A write that still fails is logged and
    /// the reply goes on: the user's answer matters more than its record, and the journal
    /// still has the messages.
    pub async fn record(&self, event: &LedgerEvent, done: bool) -> bool {
        let body = event.encode();
        let joined = if done { self.joined() } else { Vec::new() };
        let seqs: std::borrow::Cow<'_, [i64]> = if joined.is_empty() {
            std::borrow::Cow::Borrowed(&self.seqs)
        } else {
            std::borrow::Cow::Owned(self.seqs.iter().copied().chain(joined).collect())
        };
        let write = || self.log.record_delivery(&seqs, body.clone(), done);
        match through_outages("a delivery record", None, StorageError::is_unavailable, write).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(seqs = ?self.seqs, %error, "cannot write to the delivery ledger; a restart now may repeat this reply");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod testing;
