//! The `getUpdates` offset, advanced only over updates the core has accepted (SPEC §10, §11).
//!
//! Telegram forgets every update below the `offset` of a `getUpdates` call. The poll loop
//! hands a batch to the core, waits for each update's [`AckOutcome`] in order, and settles
//! the batch here: the offset moves past the longest accepted prefix and stops at the
//! first abandoned update, so that update and everything after it are fetched again.
//! Redelivering an already-accepted later update is harmless (the core dedupes by message
//! id); confirming an unaccepted one would lose it.

use ferry_channel::AckOutcome;
use teloxide::types::UpdateId;

/// The next `offset` to send, as a pure value the poll loop and its tests share.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct OffsetLedger {
    /// One past the highest update confirmed so far; `None` before the first confirmation
    /// (then Telegram serves from its oldest unconfirmed update).
    next: Option<i32>,
}

impl OffsetLedger {
    /// A ledger continuing from an offset saved before (by this bot's previous poller).
    pub(crate) fn starting_at(offset: i32) -> Self {
        Self { next: Some(offset) }
    }

    /// The `offset` for the next `getUpdates` call.
    pub(crate) fn offset(&self) -> Option<i32> {
        self.next
    }

    /// Records the outcomes of one batch, in the order Telegram returned it. Updates the
    /// adapter skipped itself (edits, service messages) count as accepted. Returns whether
    /// every update was accepted; `false` means part of the batch will be fetched again.
    pub(crate) fn settle(&mut self, outcomes: impl IntoIterator<Item = (UpdateId, AckOutcome)>) -> bool {
        for (id, outcome) in outcomes {
            if outcome == AckOutcome::Abandoned {
                return false;
            }
            // Update ids fit in i32 (the Bot API's offset type); ids only grow, and an id
            // below the offset (a stale redelivery) must not move it back.
            let after = i32::try_from(u64::from(id.0) + 1).unwrap_or(i32::MAX);
            if self.next.is_none_or(|next| after > next) {
                self.next = Some(after);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AckOutcome::{Abandoned, Accepted};

    #[test]
    fn before_any_confirmation_there_is_no_offset() {
        assert_eq!(OffsetLedger::default().offset(), None);
    }

    #[test]
    fn an_accepted_batch_confirms_past_its_last_update() {
        let mut ledger = OffsetLedger::default();
        assert!(ledger.settle([(UpdateId(10), Accepted), (UpdateId(11), Accepted)]));
        assert_eq!(ledger.offset(), Some(12));
    }

    #[test]
    fn an_abandoned_update_stops_the_offset_just_before_it() {
        let mut ledger = OffsetLedger::default();
        assert!(!ledger.settle([(UpdateId(10), Accepted), (UpdateId(11), Abandoned), (UpdateId(12), Accepted)]));
        // 11 (and 12 after it) are fetched again.
        assert_eq!(ledger.offset(), Some(11));
    }

    #[test]
    fn an_abandoned_first_update_leaves_the_offset_where_it_was() {
        let mut ledger = OffsetLedger::default();
        ledger.settle([(UpdateId(4), Accepted)]);
        assert!(!ledger.settle([(UpdateId(5), Abandoned)]));
        assert_eq!(ledger.offset(), Some(5));
        // Redelivered and accepted this time.
        assert!(ledger.settle([(UpdateId(5), Accepted), (UpdateId(6), Accepted)]));
        assert_eq!(ledger.offset(), Some(7));
    }

    #[test]
    fn an_empty_batch_or_a_stale_update_never_moves_the_offset_back() {
        let mut ledger = OffsetLedger::default();
        ledger.settle([(UpdateId(20), Accepted)]);
        assert!(ledger.settle([]));
        ledger.settle([(UpdateId(3), Accepted)]);
        assert_eq!(ledger.offset(), Some(21));
    }
}
