//! Per-session settings (`/queue …`, `/verbose …`) kept in memory, so admitting a message
//! or starting a run needs no database read.
//!
//! Only sessions whose user changed something have an entry — few, and each small — so
//! the map does not grow with the number of sessions. It is loaded from the session store
//! on first use and updated whenever a command changes a session; nothing else writes
//! overrides.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::OnceCell;

use crate::session::{SessionOverrides, SessionStore};

#[derive(Default)]
pub(super) struct OverridesCache {
    loaded: OnceCell<Mutex<HashMap<String, SessionOverrides>>>,
}

impl OverridesCache {
    /// The overrides of `session_key` (default when it has none). If the store cannot be
    /// read, the defaults apply and the next call tries again.
    pub(super) async fn get(&self, store: &dyn SessionStore, session_key: &str) -> SessionOverrides {
        match self.map(store).await {
            Some(map) => lock(map).get(session_key).cloned().unwrap_or_default(),
            None => SessionOverrides::default(),
        }
    }

    /// Records what a command saved for `session_key`.
    pub(super) async fn set(&self, store: &dyn SessionStore, session_key: &str, overrides: SessionOverrides) {
        let Some(map) = self.map(store).await else { return };
        let mut map = lock(map);
        if overrides == SessionOverrides::default() {
            map.remove(session_key);
        } else {
            map.insert(session_key.to_owned(), overrides);
        }
    }

    async fn map(&self, store: &dyn SessionStore) -> Option<&Mutex<HashMap<String, SessionOverrides>>> {
        let loaded = self
            .loaded
            .get_or_try_init(|| async { store.overridden().await.map(|rows| Mutex::new(rows.into_iter().collect())) })
            .await;
        match loaded {
            Ok(map) => Some(map),
            Err(error) => {
                tracing::warn!(%error, "cannot read sessions' own settings; using the configured ones");
                None
            }
        }
    }
}

fn lock(
    map: &Mutex<HashMap<String, SessionOverrides>>,
) -> std::sync::MutexGuard<'_, HashMap<String, SessionOverrides>> {
    map.lock().unwrap_or_else(PoisonError::into_inner)
}
