//! Per-API-key behaviour, so a test can give a fake several credentials that fail in different
//! ways and watch the agent fail over between auth profiles.
//!
//! Once any key is registered, the fake authenticates every request: a missing or unknown key
//! gets the provider's real 401, a [`KeyBehaviour::Healthy`] key is served from the script as
//! usual, and a faulty key gets its fault *without* consuming a scripted turn, so the turn is
//! still there for the key the agent fails over to. Every request is recorded whatever its key
//! (see [`RecordedRequest::api_key`](crate::RecordedRequest::api_key)).
//!
//! Behaviours can change at runtime (`set_key`), e.g. to heal a rate-limited key mid-test.

use std::collections::BTreeMap;

/// How a fake model server treats requests that present one API key.
///
/// Each provider renders a fault the way its real API does; see the variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyBehaviour {
    /// Served normally: the request consumes the next scripted turn (or asks the responder).
    Healthy,
    /// HTTP 429 with `retry-after: <retry_after_secs>`: OpenAI `type: "requests"`,
    /// `code: "rate_limit_exceeded"`; Anthropic `rate_limit_error`.
    RateLimited { retry_after_secs: u64 },
    /// HTTP 401, as for a revoked key: OpenAI `code: "invalid_api_key"`; Anthropic
    /// `authentication_error`.
    Unauthorized,
    /// Out of credit. OpenAI answers HTTP **429** with `type` and `code` `insufficient_quota`
    /// (a 429 that must not be retried); Anthropic answers HTTP 402 `billing_error`.
    Billing,
    /// The provider is overloaded: Anthropic HTTP 529 `overloaded_error`; OpenAI HTTP 503
    /// `server_error`.
    Overloaded,
    /// Accepted, then silent: 200 with event-stream headers (Anthropic also sends
    /// `message_start`), and nothing more until the client goes away or the fake is dropped.
    /// Like a scripted [`Turn::Stall`](crate::Turn::Stall), it streams even when the request did
    /// not ask for `"stream": true`, and counts in `open_streams`. Applied after the body checks,
    /// so a malformed request still gets its 400.
    Stall,
}

/// A fault answered at once, before the body is looked at, as a provider's gateway would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    RateLimited { retry_after_secs: u64 },
    Billing,
    Overloaded,
}

/// What the request pipeline does with a request, judged by the key it presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Served from the script: no key is registered at all, or the key is healthy.
    Serve,
    /// The provider's 401: the key is missing, unknown, or registered as unauthorized.
    Unauthorized,
    /// Answered with this fault; no turn is consumed.
    Fault(Fault),
    /// Accepted (after the body checks) and held open silently; no turn is consumed.
    Stall,
}

/// The registered keys and their behaviours.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    keys: BTreeMap<String, KeyBehaviour>,
}

impl KeyTable {
    /// Registers `key`, or changes its behaviour.
    pub(crate) fn set(&mut self, key: String, behaviour: KeyBehaviour) {
        self.keys.insert(key, behaviour);
    }

    /// How to treat a request presenting `presented` (`None`: no key at all).
    pub(crate) fn admit(&self, presented: Option<&str>) -> Admission {
        if self.keys.is_empty() {
            return Admission::Serve;
        }
        let Some(behaviour) = presented.and_then(|key| self.keys.get(key)) else {
            return Admission::Unauthorized;
        };
        match *behaviour {
            KeyBehaviour::Healthy => Admission::Serve,
            KeyBehaviour::RateLimited { retry_after_secs } => Admission::Fault(Fault::RateLimited { retry_after_secs }),
            KeyBehaviour::Unauthorized => Admission::Unauthorized,
            KeyBehaviour::Billing => Admission::Fault(Fault::Billing),
            KeyBehaviour::Overloaded => Admission::Fault(Fault::Overloaded),
            KeyBehaviour::Stall => Admission::Stall,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_registered_keys_everything_is_served() {
        let table = KeyTable::default();
        assert_eq!(table.admit(None), Admission::Serve);
        assert_eq!(table.admit(Some("anything")), Admission::Serve);
    }

    #[test]
    fn once_a_key_is_registered_unknown_and_missing_keys_are_refused() {
        let mut table = KeyTable::default();
        table.set("good".into(), KeyBehaviour::Healthy);
        table.set("slow".into(), KeyBehaviour::RateLimited { retry_after_secs: 7 });
        assert_eq!(table.admit(Some("good")), Admission::Serve);
        assert_eq!(table.admit(Some("slow")), Admission::Fault(Fault::RateLimited { retry_after_secs: 7 }));
        assert_eq!(table.admit(Some("other")), Admission::Unauthorized);
        assert_eq!(table.admit(None), Admission::Unauthorized);

        table.set("slow".into(), KeyBehaviour::Healthy);
        assert_eq!(table.admit(Some("slow")), Admission::Serve);
    }
}
