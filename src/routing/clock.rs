//! The time routing decisions are made at, behind a trait so tests can move it.
//!
//! Pairing codes expire after an hour and dedupe records after 20 minutes; tests check both
//! edges by advancing a [`ManualClock`] instead of sleeping.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current wall-clock time.
pub trait Clock: Debug + Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to. Clones share one time, so a test can keep a
/// handle while the router holds another.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// Moves the time forward (or back, with a negative delta).
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let start = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let clock = ManualClock::new(start);
        let handle = clock.clone();
        assert_eq!(clock.now(), start);
        handle.advance(TimeDelta::minutes(5));
        assert_eq!(clock.now(), start + TimeDelta::minutes(5));
    }
}
