//! Catching up after a reconnect: what a push platform (Discord's gateway, Slack's Socket
//! Mode) sent while no connection was open is never pushed again, but it is still in each
//! conversation's history. An adapter remembers the last message it saw in each recently
//! active conversation ([`SeenPositions`]), and after every (re)connect reads each one's
//! history since that message and delivers what it missed, oldest first; the core's dedupe
//! (by message id) drops whatever it had already taken.
//!
//! The positions survive a restart (the gateway-down case is often the process being down):
//! a [`PositionKeeper`] saves them as JSON through an [`IngressCursor`] — the singleton's
//! lease-fenced cursor on a replica, a file in the state directory on one machine. A
//! position moves only past what the core accepted, so a message the core let go of is read
//! again on the next catch-up.
//!
//! The bounds ([`CATCH_UP_WINDOW`], [`CATCH_UP_LIMIT`]) keep a long outage from turning into
//! a flood of stale answers and a burst of history reads.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::singleton::{CursorError, IngressCursor};

/// How far back a catch-up reads, and how long a conversation counts as recently active
/// after its last message: older messages are not answered any more, and a conversation idle
/// this long is not read.
pub const CATCH_UP_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The most messages a catch-up reads from one conversation: one page of Discord's
/// `GET /channels/{id}/messages` and of Slack's `conversations.history` (both cap at 100
/// per page here).
pub const CATCH_UP_LIMIT: usize = 100;

/// Compares two of a platform's message ids by age (Discord snowflakes as numbers, Slack
/// `ts` values as decimals); `Greater` means the first is newer.
pub type IdOrder = fn(&str, &str) -> Ordering;

/// The last message seen in one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The platform's id of that message: where the next history read starts (after it).
    pub last: String,
    /// When that message was written, unix milliseconds: how recently the conversation was
    /// active.
    pub at_ms: i64,
}

/// The last message seen per conversation (by the id history reads take: a Discord channel
/// or thread, a Slack conversation), as saved in the cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenPositions {
    #[serde(default)]
    conversations: BTreeMap<String, Seen>,
}

impl SeenPositions {
    /// Reads saved positions; `None` if the text is not what [`SeenPositions::to_json`]
    /// writes (a cursor written by something else).
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    /// The positions as saved.
    pub fn to_json(&self) -> String {
        // A map of strings to plain structs always serializes.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Records `last` as seen in `conversation` unless a newer message was seen there;
    /// `true` if the position moved.
    pub fn advance(&mut self, conversation: &str, last: &str, at_ms: i64, order: IdOrder) -> bool {
        match self.conversations.get(conversation) {
            Some(seen) if order(last, &seen.last) != Ordering::Greater => false,
            _ => {
                self.conversations.insert(conversation.to_owned(), Seen { last: last.to_owned(), at_ms });
                true
            }
        }
    }

    /// Forgets conversations idle for longer than [`CATCH_UP_WINDOW`] before `now_ms`.
    pub fn prune(&mut self, now_ms: i64) {
        let oldest = window_start_ms(now_ms);
        self.conversations.retain(|_, seen| seen.at_ms >= oldest);
    }

    /// The conversations active within [`CATCH_UP_WINDOW`] before `now_ms`, and where each
    /// one's catch-up starts.
    pub fn recent(&self, now_ms: i64) -> Vec<(String, Seen)> {
        let oldest = window_start_ms(now_ms);
        self.conversations
            .iter()
            .filter(|(_, seen)| seen.at_ms >= oldest)
            .map(|(conversation, seen)| (conversation.clone(), seen.clone()))
            .collect()
    }
}

/// The oldest time a catch-up reaches back to from `now_ms`, unix milliseconds.
pub fn window_start_ms(now_ms: i64) -> i64 {
    now_ms.saturating_sub(CATCH_UP_WINDOW.as_millis() as i64)
}

/// An adapter's [`SeenPositions`], saved in the background after each change. Cheap to
/// clone; the saving task ends with the last clone.
#[derive(Clone)]
pub struct PositionKeeper {
    positions: Arc<Mutex<SeenPositions>>,
    order: IdOrder,
    /// Bumped on each change; the saving task saves the newest positions when it moves, so a
    /// burst of messages costs one write, not one each.
    changes: Arc<watch::Sender<u64>>,
}

impl PositionKeeper {
    /// Positions kept in memory only (no cursor): they last until the process ends, which
    /// still covers reconnects within it.
    pub fn in_memory(order: IdOrder) -> Self {
        Self {
            positions: Arc::new(Mutex::new(SeenPositions::default())),
            order,
            changes: Arc::new(watch::Sender::new(0)),
        }
    }

    /// The positions saved in `cursor`, saved back there as they move. A cursor that cannot
    /// be read, or holds something else, starts empty (with a warning): catching up is a
    /// best effort and never stops the channel.
    pub async fn load(cursor: Arc<dyn IngressCursor>, order: IdOrder, channel: &str) -> Self {
        let keeper = Self::in_memory(order);
        match cursor.load().await {
            Ok(Some(text)) => match SeenPositions::parse(&text) {
                Some(positions) => *keeper.lock() = positions,
                None => tracing::warn!(channel, "the saved catch-up positions are unreadable; starting without them"),
            },
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(channel, %error, "cannot read the saved catch-up positions; starting without them");
            }
        }
        let mut changed = keeper.changes.subscribe();
        let positions = Arc::downgrade(&keeper.positions);
        let channel = channel.to_owned();
        tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                let Some(positions) = positions.upgrade() else { return };
                let text = positions.lock().unwrap_or_else(PoisonError::into_inner).to_json();
                drop(positions);
                match cursor.save(&text).await {
                    Ok(()) => {}
                    Err(CursorError::LeaseLost) => {
                        tracing::info!(%channel, "the ingress lease moved; no longer saving catch-up positions");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%channel, %error, "cannot save the catch-up positions; the next change tries again");
                    }
                }
            }
        });
        keeper
    }

    fn lock(&self) -> MutexGuard<'_, SeenPositions> {
        self.positions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a message the core accepted (or one the adapter skipped) in `conversation`.
    pub fn seen(&self, conversation: &str, last: &str, at_ms: i64) {
        let moved = {
            let mut positions = self.lock();
            let moved = positions.advance(conversation, last, at_ms, self.order);
            if moved {
                positions.prune(chrono::Utc::now().timestamp_millis());
            }
            moved
        };
        if moved {
            self.changes.send_modify(|version| *version += 1);
        }
    }

    /// The conversations to read after a reconnect, and where each one starts.
    pub fn recent(&self, now_ms: i64) -> Vec<(String, Seen)> {
        self.lock().recent(now_ms)
    }
}

impl std::fmt::Debug for PositionKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PositionKeeper").field("positions", &*self.lock()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;

    fn numeric(a: &str, b: &str) -> Ordering {
        a.parse::<u64>().unwrap_or(0).cmp(&b.parse::<u64>().unwrap_or(0))
    }

    const DAY_MS: i64 = 24 * 60 * 60 * 1000;

    #[test]
    fn a_position_only_moves_forward() {
        let mut positions = SeenPositions::default();
        assert!(positions.advance("10", "9", 1_000, numeric));
        assert!(positions.advance("10", "12", 2_000, numeric), "12 is newer than 9 (as numbers)");
        assert!(!positions.advance("10", "11", 3_000, numeric), "an older message does not move it back");
        assert_eq!(positions.recent(3_000), vec![("10".to_owned(), Seen { last: "12".into(), at_ms: 2_000 })]);
    }

    #[test]
    fn only_conversations_active_within_the_window_are_caught_up() {
        let mut positions = SeenPositions::default();
        let now = 10 * DAY_MS;
        positions.advance("old", "1", now - DAY_MS - 1, numeric);
        positions.advance("new", "2", now - DAY_MS + 1, numeric);
        let recent: Vec<String> = positions.recent(now).into_iter().map(|(id, _)| id).collect();
        assert_eq!(recent, ["new"]);
        positions.prune(now);
        assert_eq!(positions.conversations.len(), 1);
    }

    #[test]
    fn positions_round_trip_through_their_json_and_other_text_is_refused() {
        let mut positions = SeenPositions::default();
        positions.advance("C1", "1700000000.000100", 5, numeric);
        assert_eq!(SeenPositions::parse(&positions.to_json()), Some(positions));
        assert_eq!(SeenPositions::parse("42"), None, "a Telegram-style offset is not positions");
    }

    /// A cursor in memory that records its saves.
    #[derive(Default)]
    struct Recorded {
        saved: Mutex<Vec<String>>,
        saved_tx: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    }

    #[async_trait]
    impl IngressCursor for Recorded {
        async fn load(&self) -> Result<Option<String>, CursorError> {
            Ok(Some(r#"{"conversations":{"10":{"last":"7","at_ms":1}}}"#.to_owned()))
        }

        async fn save(&self, position: &str) -> Result<(), CursorError> {
            self.saved.lock().unwrap().push(position.to_owned());
            if let Some(tx) = &self.saved_tx {
                let _ = tx.send(());
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_keeper_starts_from_the_saved_positions_and_saves_each_move() {
        let (tx, mut saves) = tokio::sync::mpsc::unbounded_channel();
        let cursor = Arc::new(Recorded { saved: Mutex::new(Vec::new()), saved_tx: Some(tx) });
        let keeper = PositionKeeper::load(cursor.clone(), numeric, "test").await;
        assert_eq!(keeper.lock().conversations["10"].last, "7");
        let now = chrono::Utc::now().timestamp_millis();
        keeper.seen("10", "8", now);
        saves.recv().await.expect("a save");
        let saved = cursor.saved.lock().unwrap().last().cloned().unwrap();
        let reloaded = SeenPositions::parse(&saved).unwrap();
        assert_eq!(reloaded.recent(now), vec![("10".to_owned(), Seen { last: "8".into(), at_ms: now })]);
    }
}
