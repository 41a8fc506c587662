//! Slack's failures, classified: [`SlackError`] for start-up, and the mapping of Web API
//! errors onto [`ChannelError`] that the core's outbound scheduler decides on.
//!
//! Slack answers most refusals with HTTP 200 and `{"ok": false, "error": "<code>"}`; rate
//! limits with HTTP 429 and a `Retry-After` header (seconds). slack-morphism turns these into
//! `ApiError { code }` and `RateLimitError { retry_after }`, which are classified here by code.

use std::time::Duration;

use ferry_channel::ChannelError;
use slack_morphism::errors::SlackClientError;

/// `chat.postMessage` truncates beyond 40,000 characters; reported with
/// [`ChannelError::TooLong`] when Slack answers `msg_too_long`.
pub(crate) const TEXT_LIMIT: usize = 40_000;

/// Why [`SlackChannel::connect`](crate::SlackChannel::connect) failed.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack refused the bot token (`auth.test` answered `invalid_auth`, `not_authed`, …).
    /// The operator must fix `channels.slack.bot_token`; retrying will not help.
    #[error("Slack refused the bot token (check channels.slack.bot_token / SLACK_BOT_TOKEN): {code}")]
    Unauthorized { code: String },
    /// The configuration cannot work (an empty token, a non-https `api_url` off loopback…).
    #[error("invalid Slack configuration: {reason}")]
    InvalidConfig { reason: String },
    /// The Web API could not be reached or answered with something unexpected.
    #[error("could not reach the Slack Web API at {api_url}: {reason}")]
    Unreachable { api_url: String, reason: String },
}

/// Error codes that mean the token itself is bad, not the request.
const AUTH_CODES: [&str; 6] =
    ["invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "no_permission"];

/// Error codes of a Slack-side failure: the call may or may not have taken effect.
const TRANSIENT_CODES: [&str; 4] = ["internal_error", "fatal_error", "service_unavailable", "request_timeout"];

/// Whether a Web API error code is a refused token.
pub(crate) fn is_auth_code(code: &str) -> bool {
    AUTH_CODES.contains(&code)
}

/// Classifies a failed Web API call. `text_len` is the length of the text that was sent,
/// for [`ChannelError::TooLong`].
pub(crate) fn channel_error(error: &SlackClientError, text_len: Option<usize>) -> ChannelError {
    match error {
        SlackClientError::RateLimitError(limit) => ChannelError::RateLimited { retry_after: limit.retry_after },
        SlackClientError::ApiError(api) => api_error(&api.code, text_len),
        SlackClientError::HttpError(http) => {
            let reason = format!("HTTP {}", http.status_code);
            match http.status_code.as_u16() {
                401 | 403 => ChannelError::Unauthorized { reason },
                429 => ChannelError::RateLimited { retry_after: None },
                400..=499 => ChannelError::Rejected { reason },
                _ => ChannelError::Transient { reason },
            }
        }
        // Network trouble, a cut response, a body that does not parse: the call may have
        // landed.
        other => ChannelError::Transient { reason: other.to_string() },
    }
}

/// Classifies a file request's HTTP status (a download, or the bytes POSTed to an upload
/// URL), which is not a Web API answer: 429 waits `Retry-After` (seconds); 401, 403, 404 and
/// other 4xx refuse this file for good; 5xx and anything unexpected may pass on a retry.
/// `doing` says which request, for the reason.
pub(crate) fn file_status_error(status: u16, retry_after: Option<&str>, doing: &str) -> ChannelError {
    let reason = format!("{doing}: HTTP {status}");
    match status {
        429 => ChannelError::RateLimited {
            retry_after: retry_after.and_then(|secs| secs.trim().parse::<u64>().ok()).map(Duration::from_secs),
        },
        400..=499 => ChannelError::Rejected { reason },
        _ => ChannelError::Transient { reason },
    }
}

/// Classifies a file request that got no complete answer (connect, timeout, a body cut
/// short): the request may pass on a retry. The reason names no URL (`without_url`) and
/// can hold no token: tokens travel only in headers, which reqwest's errors never show.
pub(crate) fn file_transport_error(error: reqwest::Error, doing: &str) -> ChannelError {
    let error = error.without_url();
    let mut reason = format!("{doing}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        reason.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if error.is_builder() { ChannelError::Rejected { reason } } else { ChannelError::Transient { reason } }
}

fn api_error(code: &str, text_len: Option<usize>) -> ChannelError {
    match code {
        "ratelimited" | "rate_limited" => ChannelError::RateLimited { retry_after: None },
        "msg_too_long" => ChannelError::TooLong { len: text_len.unwrap_or(0), limit: TEXT_LIMIT },
        "invalid_blocks" | "invalid_blocks_format" => ChannelError::MarkupRejected { reason: code.to_owned() },
        code if is_auth_code(code) => ChannelError::Unauthorized { reason: code.to_owned() },
        code if TRANSIENT_CODES.contains(&code) => ChannelError::Transient { reason: code.to_owned() },
        // channel_not_found, not_in_channel, is_archived, message_not_found,
        // cant_update_message, no_text, …: a definite refusal.
        code => ChannelError::Rejected { reason: code.to_owned() },
    }
}

#[cfg(test)]
mod tests {
    use slack_morphism::errors::{SlackClientApiError, SlackClientHttpError, SlackRateLimitError};

    use super::*;

    fn api(code: &str) -> SlackClientError {
        SlackClientError::ApiError(SlackClientApiError::new(code.to_owned()))
    }

    #[test]
    fn a_429_is_rate_limited_with_slacks_retry_after() {
        let error =
            SlackClientError::RateLimitError(SlackRateLimitError::new().with_retry_after(Duration::from_secs(3)));
        assert_eq!(
            channel_error(&error, None),
            ChannelError::RateLimited { retry_after: Some(Duration::from_secs(3)) }
        );
        assert_eq!(channel_error(&api("ratelimited"), None), ChannelError::RateLimited { retry_after: None });
    }

    #[test]
    fn msg_too_long_is_too_long_with_the_platform_limit() {
        assert_eq!(
            channel_error(&api("msg_too_long"), Some(50_000)),
            ChannelError::TooLong { len: 50_000, limit: 40_000 }
        );
    }

    #[test]
    fn a_refused_token_is_unauthorized_but_a_missing_channel_is_only_rejected() {
        assert!(matches!(channel_error(&api("invalid_auth"), None), ChannelError::Unauthorized { .. }));
        assert!(matches!(channel_error(&api("token_revoked"), None), ChannelError::Unauthorized { .. }));
        for code in ["channel_not_found", "not_in_channel", "message_not_found", "cant_update_message"] {
            assert!(matches!(channel_error(&api(code), None), ChannelError::Rejected { .. }), "{code}");
        }
    }

    #[test]
    fn file_requests_are_classified_by_status() {
        assert_eq!(
            file_status_error(429, Some("7"), "downloading"),
            ChannelError::RateLimited { retry_after: Some(Duration::from_secs(7)) }
        );
        for refused in [401, 403, 404, 410] {
            assert!(matches!(file_status_error(refused, None, "x"), ChannelError::Rejected { .. }), "{refused}");
        }
        for transient in [500, 502, 503] {
            assert!(matches!(file_status_error(transient, None, "x"), ChannelError::Transient { .. }), "{transient}");
        }
    }

    #[test]
    fn slack_side_failures_are_transient() {
        assert!(matches!(channel_error(&api("internal_error"), None), ChannelError::Transient { .. }));
        let http = SlackClientError::HttpError(SlackClientHttpError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE));
        assert!(matches!(channel_error(&http, None), ChannelError::Transient { .. }));
    }
}
