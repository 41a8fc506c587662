//! A value derived from files, rebuilt only when a cheap fingerprint of those files (their
//! modification times) changes. Skills and bootstrap files use it, so a run checks a few
//! timestamps instead of re-reading a workspace.

use std::sync::{Arc, Mutex};

pub struct ChangeCache<K, V: ?Sized> {
    cached: Mutex<Option<(K, Arc<V>)>>,
}

impl<K: PartialEq, V: ?Sized> Default for ChangeCache<K, V> {
    fn default() -> Self {
        Self { cached: Mutex::new(None) }
    }
}

impl<K: PartialEq, V: ?Sized> ChangeCache<K, V> {
    /// The cached value if it was built from `fingerprint`, else `build(&fingerprint)`.
    pub fn get(&self, fingerprint: K, build: impl FnOnce(&K) -> Arc<V>) -> Arc<V> {
        let mut cached = self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((seen, value)) = cached.as_ref()
            && *seen == fingerprint
        {
            return value.clone();
        }
        let value = build(&fingerprint);
        *cached = Some((fingerprint, value.clone()));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuilds_only_when_the_fingerprint_changes() {
        let cache: ChangeCache<u32, str> = ChangeCache::default();
        let mut builds = 0;
        let mut get = |key| {
            cache.get(key, |k| {
                builds += 1;
                Arc::from(format!("v{k}"))
            })
        };
        assert_eq!(&*get(1), "v1");
        assert_eq!(&*get(1), "v1");
        assert_eq!(&*get(2), "v2");
        assert_eq!(builds, 2);
    }
}
