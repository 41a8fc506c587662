//! Restarting serenity's shards after a panic inside serenity.
//!
//! serenity 0.12.5 parses each gateway event in its shard runner task, and some of its parsers
//! panic on a malformed field (its `ImageHash::from_str` slices an avatar or icon hash inside
//! a multi-byte character; found by fuzzing, see FUZZING.md). The panic ends the runner task
//! and nothing in serenity notices: the connection stops heartbeating, no reconnect follows,
//! and the bot stops hearing anything while every check says it is running.
//!
//! Ferry cannot change serenity's parsers, so it watches for the panic instead: a process-wide
//! panic hook counts panics raised in serenity's code, and each Discord channel restarts its
//! shards when the count moves. A restarted shard identifies afresh, so the event that broke
//! the runner is not replayed; it is lost, like any event Discord sends while a bot is away.

use std::sync::{Arc, Once, OnceLock};

use serenity::gateway::ShardManager;
use tokio::sync::watch;
use tracing::warn;

use crate::CHANNEL_NAME;

/// Counts panics whose location is in serenity's source.
fn serenity_panics() -> &'static watch::Sender<u64> {
    static PANICS: OnceLock<watch::Sender<u64>> = OnceLock::new();
    PANICS.get_or_init(|| watch::channel(0).0)
}

/// Puts the counting hook in front of whatever panic hook is set (which still runs).
fn install_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.location().is_some_and(|location| is_serenity_source(location.file())) {
                serenity_panics().send_modify(|count| *count += 1);
            }
            previous(info);
        }));
    });
}

/// Whether a panic location's file is part of serenity (`…/serenity-0.12.5/src/…`).
fn is_serenity_source(file: &str) -> bool {
    file.replace('\\', "/").split('/').any(|part| part.starts_with("serenity-"))
}

/// Restarts every shard of `manager` each time code in serenity panics, until `manager` is
/// the last reference left (its client stopped).
pub(crate) fn restart_shards_after_panics(manager: Arc<ShardManager>, account_id: String) {
    install_hook();
    let mut panics = serenity_panics().subscribe();
    panics.mark_unchanged();
    tokio::spawn(async move {
        while panics.changed().await.is_ok() {
            if Arc::strong_count(&manager) == 1 {
                return;
            }
            let shards: Vec<_> = manager.runners.lock().await.keys().copied().collect();
            warn!(
                channel = CHANNEL_NAME,
                %account_id,
                shards = shards.len(),
                "serenity panicked on a gateway event; restarting the Discord shards (that event is lost)"
            );
            for shard in shards {
                manager.restart(shard).await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serenity_source_is_recognised_by_its_crate_directory() {
        assert!(is_serenity_source("/root/.cargo/registry/src/index.crates.io-x/serenity-0.12.5/src/model/misc.rs"));
        assert!(is_serenity_source(r"C:\cargo\registry\src\serenity-0.12.5\src\model\misc.rs"));
        assert!(!is_serenity_source("adapters/discord/src/gateway.rs"));
        assert!(!is_serenity_source("/src/my-serenity-notes/x.rs"));
    }
}
