//! Which messages were seen recently: the in-memory half of dedupe.
//!
//! A message key is kept as a 128-bit fingerprint (two SipHash-1-3 digests with this
//! process's random keys) and the time it was seen, 32 bytes an entry instead of the key's
//! strings. A fingerprint is not written anywhere: replay recomputes it from the key in the
//! log, so the random keys may differ from one process to the next. Two keys sharing a
//! fingerprint would need ~2⁶⁴ messages inside one dedupe window.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use super::frame::MessageKey;

/// A key's fingerprint.
pub type Fingerprint = u128;

/// Random-keyed hashing of message keys, fixed for the life of the index.
#[derive(Debug)]
pub struct Fingerprinter {
    high: RandomState,
    low: RandomState,
}

impl Default for Fingerprinter {
    fn default() -> Self {
        Self { high: RandomState::new(), low: RandomState::new() }
    }
}

impl Fingerprinter {
    pub fn of(&self, key: &MessageKey<'_>) -> Fingerprint {
        let digest = |state: &RandomState| {
            let mut hasher = state.build_hasher();
            for part in [key.channel, key.account_id, key.chat_id, key.thread_id, key.message_id] {
                // Length first: ("ab", "c") and ("a", "bc") differ.
                hasher.write_usize(part.len());
                hasher.write(part.as_bytes());
            }
            hasher.finish()
        };
        (u128::from(digest(&self.high)) << 64) | u128::from(digest(&self.low))
    }
}

/// A fingerprint is already uniformly distributed: the map uses its low bits as they are.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is used for fingerprints; fold anything else in.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// Seen messages and when, with the order they expire in.
#[derive(Default)]
pub struct SeenIndex {
    seen_at: HashMap<Fingerprint, i64, BuildHasherDefault<PassThrough>>,
    /// `(seen_at, fingerprint)` in the order recorded; times only grow unless a test clock
    /// goes back, which at worst keeps an entry a little longer.
    expiry: VecDeque<(i64, Fingerprint)>,
}

impl SeenIndex {
    /// Whether `fingerprint` was seen after `cutoff` (unix ms).
    pub fn contains(&self, fingerprint: Fingerprint, cutoff: i64) -> bool {
        self.seen_at.get(&fingerprint).is_some_and(|&at| at > cutoff)
    }

    /// Records a sighting (a renewed one replaces the old time).
    pub fn insert(&mut self, fingerprint: Fingerprint, at: i64) {
        self.seen_at.insert(fingerprint, at);
        self.expiry.push_back((at, fingerprint));
    }

    /// The time `fingerprint` was last seen, if it is still remembered.
    pub fn seen_at(&self, fingerprint: Fingerprint) -> Option<i64> {
        self.seen_at.get(&fingerprint).copied()
    }

    /// Drops sightings at or before `cutoff`; returns how many.
    pub fn prune(&mut self, cutoff: i64) -> usize {
        let mut pruned = 0;
        while let Some(&(at, fingerprint)) = self.expiry.front() {
            if at > cutoff {
                break;
            }
            self.expiry.pop_front();
            // A renewed sighting has a later time and stays.
            if self.seen_at.get(&fingerprint) == Some(&at) {
                self.seen_at.remove(&fingerprint);
                pruned += 1;
            }
        }
        if self.seen_at.capacity() > 4 * self.seen_at.len().max(1024) {
            self.seen_at.shrink_to_fit();
            self.expiry.shrink_to_fit();
        }
        pruned
    }

    pub fn len(&self) -> usize {
        self.seen_at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(message_id: &str) -> MessageKey<'_> {
        MessageKey { channel: "slack", account_id: "default", chat_id: "C1", thread_id: "", message_id }
    }

    #[test]
    fn fingerprints_tell_keys_apart_including_where_parts_split() {
        let fingerprints = Fingerprinter::default();
        assert_eq!(fingerprints.of(&key("1")), fingerprints.of(&key("1")));
        assert_ne!(fingerprints.of(&key("1")), fingerprints.of(&key("2")));
        let split_one = MessageKey { chat_id: "ab", thread_id: "c", ..key("1") };
        let split_two = MessageKey { chat_id: "a", thread_id: "bc", ..key("1") };
        assert_ne!(fingerprints.of(&split_one), fingerprints.of(&split_two));
    }

    #[test]
    fn sightings_expire_in_order_and_a_renewal_outlives_its_old_time() {
        let mut index = SeenIndex::default();
        index.insert(1, 100);
        index.insert(2, 200);
        assert!(index.contains(1, 99));
        assert!(!index.contains(1, 100), "seen at the cutoff is expired");
        index.insert(1, 300);
        assert_eq!(index.prune(250), 1, "only 2 goes; 1 was renewed");
        assert!(index.contains(1, 250));
        assert!(!index.contains(2, 0));
        assert_eq!(index.prune(300), 1);
        assert_eq!(index.len(), 0);
    }
}
