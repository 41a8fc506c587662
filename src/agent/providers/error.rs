//! Why a model call failed, classified for the retry decision and for the user.

use std::time::Duration;

use crate::models::FailoverReason;

/// A failed model call. [`ProviderError::user_message`] is what a chat user sees: one
/// friendly line, never a stack trace, a URL with a key or a raw response body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("rate limited by the model provider: {message}")]
    RateLimited { retry_after: Option<Duration>, message: String },
    #[error("model provider server error (HTTP {status}): {message}")]
    Server { status: u16, retry_after: Option<Duration>, message: String },
    #[error("cannot reach the model provider: {message}")]
    Connect { message: String },
    /// The prompt does not fit the model's context window; compaction can fix it.
    #[error("the prompt exceeds the model's context window: {message}")]
    ContextOverflow { message: String },
    #[error("the model provider refused the credentials (HTTP {status})")]
    Unauthorized { status: u16 },
    /// The account behind the key is out of credit or quota (402, `insufficient_quota`).
    #[error("the model provider's account is out of credit or quota (HTTP {status}): {message}")]
    Billing { status: u16, message: String },
    /// Every model and key that may answer is cooling down after errors, or just failed;
    /// `back_at` is the soonest one may answer again, when known.
    /// `chosen`: the model is the one the session chose with `/model`, which does not fail
    /// over to another.
    #[error("no model is available ({})", reason.as_str())]
    Unavailable { back_at: Option<chrono::DateTime<chrono::Utc>>, reason: FailoverReason, chosen: bool },
    #[error("the model provider rejected the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the model stream sent nothing for {} s", .0.as_secs())]
    Idle(Duration),
    #[error("the model stream broke off: {message}")]
    Stream { message: String },
    #[error("the model sent a malformed response: {message}")]
    Malformed { message: String },
}

impl ProviderError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Server { .. }
                | ProviderError::Connect { .. }
                | ProviderError::Stream { .. }
        )
    }

    /// Whether the failure is the provider's passing trouble rather than anything about the
    /// request: worth asking again later (a stall, a cut stream, a 429 or 5xx, no connection),
    /// even after part of the reply was shown, and worth keeping the user's message for.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Unavailable { reason, .. } => {
                !matches!(reason, FailoverReason::Auth | FailoverReason::Billing)
            }
            _ => self.is_retryable() || matches!(self, ProviderError::Idle(_)),
        }
    }

    /// Why this failure is worth trying other credentials or another model for, before any
    /// output was shown; `None` for failures another key would meet too (a bad request,
    /// content policy, a context overflow — that one goes to compaction).
    pub fn failover_reason(&self) -> Option<FailoverReason> {
        match self {
            ProviderError::RateLimited { .. } => Some(FailoverReason::RateLimit),
            // Anthropic's 529 `overloaded_error`; a 503 is OpenAI's "the server is overloaded"
            // (and a proxy's "no upstream ready"): busy, not broken.
            ProviderError::Server { status: 503 | 529, .. } => Some(FailoverReason::Overloaded),
            ProviderError::Server { .. } | ProviderError::Connect { .. } | ProviderError::Idle(_) => {
                Some(FailoverReason::Timeout)
            }
            ProviderError::Unauthorized { .. } => Some(FailoverReason::Auth),
            ProviderError::Billing { .. } => Some(FailoverReason::Billing),
            _ => None,
        }
    }

    /// The wait the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. } | ProviderError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The line a chat user sees when their run failed on this: what went wrong, then what
    /// they can do about it.
    pub fn user_message(&self) -> String {
        match self.advice() {
            Some(advice) => format!("{} {advice}", self.problem()),
            None => self.problem(),
        }
    }

    /// What went wrong, as a chat user is told (without [`ProviderError::user_message`]'s
    /// advice): for a notice that says what Ferry does next instead.
    pub fn problem(&self) -> String {
        match self {
            ProviderError::RateLimited { .. } => "⚠️ The model is receiving too many requests right now.".to_owned(),
            ProviderError::Server { .. } => "⚠️ The model provider had an internal error.".to_owned(),
            ProviderError::Connect { .. } => "⚠️ I could not reach the model provider.".to_owned(),
            ProviderError::ContextOverflow { .. } => "⚠️ This conversation is too long for the model.".to_owned(),
            ProviderError::Unauthorized { .. } => {
                "⚠️ The model provider refused this bot's credentials; its operator needs to check the API key."
                    .to_owned()
            }
            ProviderError::Billing { .. } => {
                "⚠️ The model provider's account for this bot is out of credit; its operator needs to top it up."
                    .to_owned()
            }
            ProviderError::Unavailable { back_at, reason, chosen } => {
                let which = if *chosen { "The model you chose with /model" } else { "The model" };
                let why = match reason {
                    FailoverReason::RateLimit => "it is receiving too many requests",
                    FailoverReason::Overloaded => "its provider is overloaded",
                    FailoverReason::Auth => "its provider refused this bot's credentials",
                    FailoverReason::Billing => "the provider account is out of credit",
                    FailoverReason::Timeout => "its provider is failing or not responding",
                };
                let when = match back_at {
                    Some(at) => format!(" It may be back at {} UTC.", at.format("%H:%M")),
                    None => String::new(),
                };
                format!("⚠️ {which} is unavailable right now: {why}.{when}")
            }
            ProviderError::Rejected { message, .. } => {
                format!("⚠️ The model provider rejected the request: {}", first_line(message, 200))
            }
            ProviderError::Idle(_) => "⚠️ The model stopped responding.".to_owned(),
            ProviderError::Stream { .. } => "⚠️ The model's reply was cut off.".to_owned(),
            ProviderError::Malformed { .. } => "⚠️ The model sent a reply I could not read.".to_owned(),
        }
    }

    /// What the user can do about it, where there is something.
    fn advice(&self) -> Option<&'static str> {
        match self {
            ProviderError::RateLimited { .. } => Some("Please try again in a minute."),
            ProviderError::Unavailable { chosen: true, .. } => Some("Send /model default to use the default models."),
            ProviderError::Unavailable { .. } => Some("Please try again later."),
            ProviderError::Connect { .. } => Some("Please try again later."),
            ProviderError::ContextOverflow { .. } => Some("Send /new to start a fresh one."),
            ProviderError::Server { .. }
            | ProviderError::Idle(_)
            | ProviderError::Stream { .. }
            | ProviderError::Malformed { .. } => Some("Please try again."),
            ProviderError::Unauthorized { .. } | ProviderError::Billing { .. } | ProviderError::Rejected { .. } => None,
        }
    }
}

/// The first line of a text, at most `max` characters.
pub(crate) fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retryable() {
        assert!(ProviderError::RateLimited { retry_after: None, message: String::new() }.is_retryable());
        assert!(ProviderError::Server { status: 503, retry_after: None, message: String::new() }.is_retryable());
        assert!(ProviderError::Connect { message: String::new() }.is_retryable());
        assert!(!ProviderError::Rejected { status: 400, message: String::new() }.is_retryable());
        assert!(!ProviderError::ContextOverflow { message: String::new() }.is_retryable());
        assert!(!ProviderError::Unauthorized { status: 401 }.is_retryable());
        assert!(!ProviderError::Idle(Duration::from_secs(120)).is_retryable());
    }

    #[test]
    fn failures_are_named_for_why_the_provider_failed() {
        let server = |status| ProviderError::Server { status, retry_after: None, message: String::new() };
        assert_eq!(server(529).failover_reason(), Some(FailoverReason::Overloaded));
        assert_eq!(server(503).failover_reason(), Some(FailoverReason::Overloaded));
        assert_eq!(server(500).failover_reason(), Some(FailoverReason::Timeout));
        assert_eq!(ProviderError::Idle(Duration::from_secs(1)).failover_reason(), Some(FailoverReason::Timeout));
        let limited = ProviderError::RateLimited { retry_after: None, message: String::new() };
        assert_eq!(limited.failover_reason(), Some(FailoverReason::RateLimit));
        assert_eq!(ProviderError::Unauthorized { status: 401 }.failover_reason(), Some(FailoverReason::Auth));
        assert_eq!(ProviderError::Rejected { status: 400, message: String::new() }.failover_reason(), None);
    }

    #[test]
    fn user_messages_are_one_line_and_never_echo_credentials_errors() {
        let unauthorized = ProviderError::Unauthorized { status: 401 }.user_message();
        assert!(!unauthorized.contains('\n'));
        let rejected = ProviderError::Rejected { status: 400, message: "bad field\nstack trace line".into() };
        assert_eq!(rejected.user_message(), "⚠️ The model provider rejected the request: bad field");
    }
}
