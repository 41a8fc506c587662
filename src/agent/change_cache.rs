//! A value derived from files, rebuilt only when a cheap fingerprint of those files (their
//! modification times) changes. Skills and bootstrap files use it, so a run checks a few
//! timestamps instead of re-reading a workspace — and at most once per [`RECHECK`]: under
//! a flood of runs the `stat` calls alone were ~5% of the inbound benchmark's CPU.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a checked fingerprint is trusted: an edit to a workspace file shows in the runs
/// that start this long after it at the latest.
pub const RECHECK: Duration = Duration::from_secs(1);

pub struct ChangeCache<K, V: ?Sized> {
    recheck: Duration,
    cached: Mutex<Option<Cached<K, V>>>,
}

struct Cached<K, V: ?Sized> {
    fingerprint: K,
    value: Arc<V>,
    checked_at: Instant,
}

impl<K: PartialEq, V: ?Sized> Default for ChangeCache<K, V> {
    fn default() -> Self {
        Self::rechecked_every(RECHECK)
    }
}

impl<K: PartialEq, V: ?Sized> ChangeCache<K, V> {
    /// A cache that takes a new fingerprint when its last one is `recheck` old (zero: on
    /// every call).
    pub fn rechecked_every(recheck: Duration) -> Self {
        Self { recheck, cached: Mutex::new(None) }
    }

    /// The cached value, if its fingerprint was taken less than the recheck interval ago or
    /// still matches `fingerprint()`; else `build(&fingerprint)`.
    pub fn get(&self, fingerprint: impl FnOnce() -> K, build: impl FnOnce(&K) -> Arc<V>) -> Arc<V> {
        let mut cached = self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if let Some(fresh) = cached.as_ref()
            && now.saturating_duration_since(fresh.checked_at) < self.recheck
        {
            return fresh.value.clone();
        }
        let fingerprint = fingerprint();
        if let Some(unchanged) = cached.as_mut()
            && unchanged.fingerprint == fingerprint
        {
            unchanged.checked_at = now;
            return unchanged.value.clone();
        }
        let value = build(&fingerprint);
        *cached = Some(Cached { fingerprint, value: value.clone(), checked_at: now });
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuilds_only_when_the_fingerprint_changes() {
        let cache: ChangeCache<u32, str> = ChangeCache::rechecked_every(Duration::ZERO);
        let mut builds = 0;
        let mut get = |key| {
            cache.get(
                || key,
                |k| {
                    builds += 1;
                    Arc::from(format!("v{k}"))
                },
            )
        };
        assert_eq!(&*get(1), "v1");
        assert_eq!(&*get(1), "v1");
        assert_eq!(&*get(2), "v2");
        assert_eq!(builds, 2);
    }

    #[test]
    fn a_fresh_fingerprint_is_trusted_until_the_recheck_interval_passes() {
        let cache: ChangeCache<u32, str> = ChangeCache::rechecked_every(Duration::from_millis(50));
        let fingerprints = std::cell::Cell::new(0);
        let get = |key| {
            cache.get(
                || {
                    fingerprints.set(fingerprints.get() + 1);
                    key
                },
                |k| Arc::from(format!("v{k}")),
            )
        };
        assert_eq!(&*get(1), "v1");
        assert_eq!(&*get(2), "v1", "within the interval the files are not looked at");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(&*get(2), "v2");
        assert_eq!(fingerprints.get(), 2);
    }
}
