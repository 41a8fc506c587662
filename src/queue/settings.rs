//! Which queue behaviour applies to a session (SPEC §5 precedence): the session's `/queue`
//! override, then `messages.queue.by_channel.<channel>`, then `messages.queue`.

use std::time::Duration;

use crate::config::{DropPolicy, QueueConfig, QueueMode};
use crate::session::SessionOverrides;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    pub mode: QueueMode,
    /// Quiet time after a run before queued messages run; each new message restarts it.
    pub debounce: Duration,
    pub cap: usize,
    pub drop: DropPolicy,
}

impl QueueSettings {
    pub fn resolve(config: &QueueConfig, channel: &str, overrides: &SessionOverrides) -> Self {
        Self {
            mode: overrides.queue_mode.or_else(|| config.by_channel.get(channel).copied()).unwrap_or(config.mode),
            debounce: Duration::from_millis(overrides.debounce_ms.unwrap_or(config.debounce_ms)),
            cap: overrides.cap.unwrap_or(config.cap).max(1),
            drop: overrides.drop.unwrap_or(config.drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_override_beats_channel_beats_default() {
        let mut config = QueueConfig::default();
        config.by_channel.insert("telegram".into(), QueueMode::Steer);
        let none = SessionOverrides::default();
        assert_eq!(QueueSettings::resolve(&config, "slack", &none).mode, QueueMode::Collect);
        assert_eq!(QueueSettings::resolve(&config, "telegram", &none).mode, QueueMode::Steer);
        let session = SessionOverrides { queue_mode: Some(QueueMode::Followup), cap: Some(3), ..Default::default() };
        let resolved = QueueSettings::resolve(&config, "telegram", &session);
        assert_eq!((resolved.mode, resolved.cap, resolved.debounce), (QueueMode::Followup, 3, Duration::from_secs(1)));
    }
}
