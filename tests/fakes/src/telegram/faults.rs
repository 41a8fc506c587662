//! Faults a test scripts into the fake Telegram: one-shot faults for the next call of a method,
//! and storms that answer every call of a method with the same error for a while.
//!
//! One-shot faults ([`Fault`]) model a single bad moment: an error, a slow answer, a body cut off
//! mid-JSON, a socket that closes before the method ran, or one that closes after it ran (the case
//! a client cannot tell from the first, and the one that makes "send exactly once" hard). Storms model an incident:
//! flood control that keeps refusing longer than the `retry_after` it announces, or a backend
//! outage answering 5xx. Storm time is `tokio::time::Instant`, like flood control, so a test on
//! a paused clock can step through one.
//!
//! Order per call: an active storm answers first and leaves the queued one-shot faults alone, so
//! a fault scripted during a storm hits the first call that gets through it.

use std::time::Duration;

use tokio::time::Instant;

/// A fault scripted for the next call of one method.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// Answer `ok:false` with this status and description (plus `retry_after` if set).
    Error { status: u16, description: String, retry_after: Option<u64> },
    /// Wait this long, then answer normally.
    Delay(Duration),
    /// Close the connection without a complete answer, before the method runs.
    Drop,
    /// Answer 200 with a body cut off mid-JSON (a proxy or a connection that truncated it),
    /// before the method runs.
    Malformed,
    /// Run the method (its effects stay), then close the connection without the answer.
    ApplyThenDrop,
}

/// A window during which every call of one method gets the same error.
#[derive(Debug)]
struct Storm {
    /// Lowercase method name.
    method: String,
    until: Instant,
    /// What every call gets while the storm lasts (an error).
    answer: Fault,
}

/// The scripted faults of one fake bot.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// One-shot faults in the order scripted, each with its lowercase method name.
    queued: Vec<(String, Fault)>,
    storms: Vec<Storm>,
}

impl Faults {
    /// Queues a one-shot fault for the next call of `method`.
    pub(crate) fn push(&mut self, method: &str, fault: Fault) {
        self.queued.push((method.to_ascii_lowercase(), fault));
    }

    /// Starts a storm on `method` lasting `duration` from now, during which every call gets
    /// `answer`; returns when it ends.
    pub(crate) fn storm(&mut self, method: &str, duration: Duration, answer: Fault) -> Instant {
        let until = Instant::now() + duration;
        self.storms.push(Storm { method: method.to_ascii_lowercase(), until, answer });
        until
    }

    /// The fault for a call of `method` (lowercase) arriving now: the error of an active storm,
    /// else the first queued one-shot fault (which is used up), else none.
    pub(crate) fn take(&mut self, method: &str) -> Option<Fault> {
        self.take_at(method, Instant::now())
    }

    /// Whether a one-shot fault waits for the next call of `method` (lowercase): a long poll
    /// waiting for updates then ends early, so the fault meets the next poll.
    pub(crate) fn queued_for(&self, method: &str) -> bool {
        self.queued.iter().any(|(name, _)| name == method)
    }

    fn take_at(&mut self, method: &str, now: Instant) -> Option<Fault> {
        self.storms.retain(|storm| storm.until > now);
        if let Some(storm) = self.storms.iter().find(|storm| storm.method == method) {
            return Some(storm.answer.clone());
        }
        let index = self.queued.iter().position(|(name, _)| name == method)?;
        Some(self.queued.remove(index).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(fault: Option<Fault>) -> Option<u16> {
        match fault? {
            Fault::Error { status, .. } => Some(status),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_storm_answers_until_its_end_and_spares_queued_faults() {
        let mut faults = Faults::default();
        faults.push("sendMessage", Fault::Error { status: 403, description: "Forbidden".into(), retry_after: None });
        let flood = Fault::Error { status: 429, description: "Too Many Requests".into(), retry_after: Some(1) };
        let end = faults.storm("SendMessage", Duration::from_secs(8), flood);
        let start = end - Duration::from_secs(8);
        assert_eq!(status(faults.take_at("sendmessage", start)), Some(429));
        assert_eq!(status(faults.take_at("sendmessage", start + Duration::from_millis(7999))), Some(429));
        // Other methods are not part of the storm.
        assert_eq!(status(faults.take_at("getupdates", start)), None);
        // After the storm, the queued fault comes next, once.
        assert_eq!(status(faults.take_at("sendmessage", end)), Some(403));
        assert_eq!(status(faults.take_at("sendmessage", end)), None);
    }

    #[test]
    fn malformed_answers_queue_per_method_and_are_used_once_each() {
        let mut faults = Faults::default();
        faults.push("getUpdates", Fault::Malformed);
        faults.push("getUpdates", Fault::Drop);
        assert!(faults.queued_for("getupdates"));
        assert!(!faults.queued_for("sendmessage"));
        assert!(matches!(faults.take("getupdates"), Some(Fault::Malformed)));
        assert!(matches!(faults.take("getupdates"), Some(Fault::Drop)));
        assert!(!faults.queued_for("getupdates"), "both used up");
        assert!(faults.take("getupdates").is_none());
    }
}
