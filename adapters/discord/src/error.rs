//! Discord's failures, classified: [`DiscordError`] for start-up, and the mapping of REST
//! answers onto [`ChannelError`] that the core's outbound scheduler decides on.
//!
//! The adapter reads the status, the rate-limit headers and the JSON body itself (see
//! `rest.rs`), because a Discord 429 body (`{"message", "retry_after", "global"}`) has no
//! `code` and serenity's error type would drop its `retry_after`:
//! - 429 → [`ChannelError::RateLimited`] with `retry_after` from the body, else the
//!   `Retry-After` or `X-RateLimit-Reset-After` header — waited out, never dropped;
//! - 401 → [`ChannelError::Unauthorized`];
//! - 400 with code 50035 and a length error on `content` → [`ChannelError::TooLong`];
//! - 5xx → [`ChannelError::Transient`] (the message may have landed);
//! - any other 4xx → [`ChannelError::Rejected`] (missing access, unknown channel…).

use std::time::Duration;

use ferry_channel::ChannelError;
use serde_json::Value;

/// The platform's hard limit on one message, reported with [`ChannelError::TooLong`].
pub(crate) const TEXT_LIMIT: usize = 2000;

/// Discord's JSON error code for an invalid request body ("Invalid Form Body").
pub(crate) const INVALID_FORM_BODY: i64 = 50035;

/// Why [`DiscordChannel::connect`](crate::DiscordChannel::connect) failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    /// Discord refused the token (`GET /users/@me` answered 401). The operator must fix
    /// `channels.discord.bot_token` (or `DISCORD_BOT_TOKEN`); retrying will not help.
    #[error("Discord refused the bot token (check channels.discord.bot_token or DISCORD_BOT_TOKEN): {reason}")]
    Unauthorized { reason: String },
    /// The configuration cannot work (an empty token, an unparsable URL).
    #[error("invalid Discord configuration: {reason}")]
    InvalidConfig { reason: String },
    /// The REST API or the gateway could not be reached, or answered something unexpected.
    #[error("could not reach Discord at {api_url}: {reason}")]
    Unreachable { api_url: String, reason: String },
}

/// A REST answer that was not a success, as the adapter read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub(crate) status: u16,
    /// The JSON body, or `Null` if it was not JSON.
    pub(crate) body: Value,
    /// `Retry-After` (seconds), if present.
    pub(crate) retry_after_header: Option<f64>,
    /// `X-RateLimit-Reset-After` (seconds), if present.
    pub(crate) reset_after_header: Option<f64>,
}

impl Failure {
    /// Discord's own `message`, or the status if the body had none.
    pub(crate) fn message(&self) -> String {
        let message = self.body.get("message").and_then(Value::as_str).unwrap_or("no message");
        match self.body.get("code").and_then(Value::as_i64) {
            Some(code) => format!("HTTP {} (code {code}): {message}", self.status),
            None => format!("HTTP {}: {message}", self.status),
        }
    }

    /// How long Discord asked us to wait: the body's `retry_after` is the most precise.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        let seconds = self
            .body
            .get("retry_after")
            .and_then(Value::as_f64)
            .or(self.retry_after_header)
            .or(self.reset_after_header)?;
        (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
    }

    /// A 400 "Invalid Form Body" whose complaint is the length of `content`.
    fn is_content_too_long(&self) -> bool {
        if self.body.get("code").and_then(Value::as_i64) != Some(INVALID_FORM_BODY) {
            return false;
        }
        let errors = self.body.pointer("/errors/content/_errors").and_then(Value::as_array);
        errors.is_some_and(|errors| {
            errors.iter().any(|error| error.get("code").and_then(Value::as_str) == Some("BASE_TYPE_MAX_LENGTH"))
        })
    }
}

/// Classifies a REST failure. `text_len` is the length of the text that was sent, for
/// [`ChannelError::TooLong`].
pub(crate) fn channel_error(failure: &Failure, text_len: Option<usize>) -> ChannelError {
    match failure.status {
        429 => ChannelError::RateLimited { retry_after: failure.retry_after() },
        401 => ChannelError::Unauthorized { reason: failure.message() },
        400 if failure.is_content_too_long() => ChannelError::TooLong { len: text_len.unwrap_or(0), limit: TEXT_LIMIT },
        status if status >= 500 => ChannelError::Transient { reason: failure.message() },
        _ => ChannelError::Rejected { reason: failure.message() },
    }
}

/// Replaces the bot token in a message, in case an error text ever carries it.
pub(crate) fn redact(text: &str, token: &str) -> String {
    if token.is_empty() { text.to_owned() } else { text.replace(token, "<token>") }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn failure(status: u16, body: Value) -> Failure {
        Failure { status, body, retry_after_header: None, reset_after_header: None }
    }

    #[test]
    fn a_429_is_rate_limited_with_the_bodys_fractional_retry_after() {
        let error = channel_error(
            &failure(429, json!({"message": "You are being rate limited.", "retry_after": 1.25, "global": false})),
            None,
        );
        assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_millis(1250)) });
    }

    #[test]
    fn a_429_without_a_body_falls_back_to_the_headers() {
        let mut bare = failure(429, Value::Null);
        bare.reset_after_header = Some(0.5);
        assert_eq!(channel_error(&bare, None).retry_after(), Some(Duration::from_millis(500)));
        bare.retry_after_header = Some(2.0);
        assert_eq!(channel_error(&bare, None).retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(channel_error(&failure(429, Value::Null), None), ChannelError::RateLimited { retry_after: None });
    }

    #[test]
    fn an_overlong_content_is_too_long_with_the_platform_limit() {
        let body = json!({
            "code": 50035, "message": "Invalid Form Body",
            "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}
        });
        assert_eq!(channel_error(&failure(400, body), Some(2500)), ChannelError::TooLong { len: 2500, limit: 2000 });
        let other = json!({"code": 50035, "message": "Invalid Form Body", "errors": {"embeds": {}}});
        assert!(matches!(channel_error(&failure(400, other), None), ChannelError::Rejected { .. }));
    }

    #[test]
    fn server_errors_are_transient_and_other_refusals_permanent() {
        assert!(matches!(channel_error(&failure(502, Value::Null), None), ChannelError::Transient { .. }));
        assert!(matches!(
            channel_error(&failure(401, json!({"message": "401: Unauthorized", "code": 0})), None),
            ChannelError::Unauthorized { .. }
        ));
        for (status, body) in [
            (403, json!({"message": "Missing Access", "code": 50001})),
            (404, json!({"message": "Unknown Message", "code": 10008})),
        ] {
            let error = channel_error(&failure(status, body), None);
            assert!(matches!(error, ChannelError::Rejected { ref reason } if reason.contains("code")), "{error}");
        }
    }

    #[test]
    fn reasons_never_contain_the_token() {
        assert_eq!(redact("Authorization: Bot abc.def", "abc.def"), "Authorization: Bot <token>");
    }
}
